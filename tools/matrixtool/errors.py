"""One error hierarchy, one exit code per class.

Every error carries a message that says what failed, why, and what to run next. The CLI prints
``error: <message>`` and exits with ``exit_code``; ``--debug`` adds the traceback.
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """Process exit codes of ``tools/matrix`` (documented in the README)."""

    OK = 0
    UNEXPECTED = 1
    USAGE = 2  # click's own code for bad flags
    CONFIG = 3
    NOTHING_SELECTED = 4
    STALE_RENDER = 5
    BUILD = 6
    SMOKE = 7
    ENGINE = 8
    REGISTRY = 9
    # Reserved for the issues in flight (README "Exit codes"); each class gets its own code.
    INDEX_UNREACHABLE = 10  # a package index does not answer (was 6)
    NOT_BUILT = 11  # push of an image this engine has not built (was 6)
    WRONG_PLATFORM = 12  # the image's platform is not the variant's (issue 9)
    # Issue 21: what a security team signs off (audit.py, signing.py, sbom.py, static.py).
    VULNERABLE = 13  # the vulnerability gate: an advisory at or above the policy's severity, not accepted
    NOT_AUDITED = 14  # the gate failed closed: packages without advisory data, or the source did not answer
    UNVERIFIED = 15  # an image's signature or attestation is missing or does not verify (unsigned, tampered)
    SBOM = 16  # an image's SBOM could not be derived, or a file is not a CycloneDX document
    SBOM_DIFFERS = 17  # `sbom --compare`: the image's packages differ from the published SBOM
    STATIC = 18  # an OpenShift static check failed (/licenses, layers, labels, USER, tag)
    INTERRUPTED = 130  # SIGINT (128 + 2)
    TERMINATED = 143  # SIGTERM (128 + 15)


class MatrixError(Exception):
    """Base of every error the tool reports without a traceback."""

    exit_code: ExitCode = ExitCode.UNEXPECTED


class ConfigError(MatrixError):
    """``matrix.yaml`` (or a flag naming a file) is invalid; ``problems`` lists every problem found."""

    exit_code = ExitCode.CONFIG

    def __init__(self, source: str, problems: list[str]) -> None:
        self.source = source
        self.problems = problems
        lines = "\n".join(f"  - {p}" for p in problems)
        super().__init__(f"{source}: {len(problems)} problem(s):\n{lines}")


class NothingSelectedError(MatrixError):
    """A variant selection matched no variant."""

    exit_code = ExitCode.NOTHING_SELECTED


class StaleRenderError(MatrixError):
    """A checked-in Dockerfile differs from a fresh render of ``matrix.yaml``."""

    exit_code = ExitCode.STALE_RENDER


class BuildError(MatrixError):
    """A BuildKit build (or making a base image) failed."""

    exit_code = ExitCode.BUILD


class SmokeFailure(MatrixError):
    """At least one smoke check failed or timed out."""

    exit_code = ExitCode.SMOKE


class WrongPlatformError(MatrixError):
    """The image's platform (os/architecture) is not the variant's; found before any check runs (issue 9)."""

    exit_code = ExitCode.WRONG_PLATFORM


class EngineUnreachableError(MatrixError):
    """No Docker engine answers, or buildx is missing."""

    exit_code = ExitCode.ENGINE


class RegistryError(MatrixError):
    """A container registry did not answer, refused a request, or lacks an image that must be there.

    ``registry`` is the host (``registry-1.docker.io``, ``127.0.0.1:5000``) and ``ref`` the image ref
    the request was about, so the message can name both.
    """

    exit_code = ExitCode.REGISTRY

    def __init__(self, message: str, *, registry: str = "", ref: str = "") -> None:
        self.registry = registry
        self.ref = ref
        super().__init__(message)


class IndexUnreachableError(MatrixError):
    """A variant's package index (``index.url``/``extra_urls``) does not answer from this machine."""

    exit_code = ExitCode.INDEX_UNREACHABLE


class NotBuiltError(MatrixError):
    """An image that must already be built (``push``) is not on the engine."""

    exit_code = ExitCode.NOT_BUILT


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived (CI cancellation, ``timeout``, Kubernetes): raised in the main thread by the CLI's
    signal handler so every ``finally`` and context manager runs (smoke containers are removed); exit 143.

    A KeyboardInterrupt subclass, so code that cleans up on Ctrl-C cleans up on SIGTERM alike.
    """


# Under --keep-going, the exit code is that of the most severe error any variant had: a problem of the
# input first (it is the same for every rerun), then the machine (engine, registry, index), then the image
# (base, build, platform), then the checks. Codes not listed rank below every listed one.
SEVERITY: tuple[ExitCode, ...] = (
    ExitCode.CONFIG,
    ExitCode.ENGINE,
    ExitCode.REGISTRY,
    ExitCode.INDEX_UNREACHABLE,
    ExitCode.NOT_BUILT,
    ExitCode.WRONG_PLATFORM,
    ExitCode.BUILD,
    ExitCode.SMOKE,
)


def most_severe(codes: list[ExitCode]) -> ExitCode | None:
    """The most severe of ``codes`` by ``SEVERITY`` (earlier is more severe), or None when empty."""
    if not codes:
        return None
    rank = {code: i for i, code in enumerate(SEVERITY)}
    return min(codes, key=lambda c: rank.get(c, len(SEVERITY)))


class VariantsFailed(MatrixError):
    """Under ``--keep-going``, one or more variants failed; ``exit_code`` is the most severe of their errors
    (``most_severe``), so a config error of one variant is not hidden behind another's failed build."""

    def __init__(self, message: str, exit_code: ExitCode) -> None:
        self.exit_code = exit_code
        super().__init__(message)
