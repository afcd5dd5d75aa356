"""One error hierarchy, one exit code per class.

Every error carries a message that says what failed, why, and what to run next. The CLI prints
``error: <message>`` and exits with ``exit_code``; ``--debug`` adds the traceback.
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """Process exit codes of ``tools/matrix`` (``MEANING`` says when each is given; docs/commands.md shows it)."""

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
    INDEX_UNREACHABLE = 10  # a package index does not answer
    NOT_BUILT = 11  # push of an image this engine has not built; size/diff/static/sbom of an image it lacks
    WRONG_PLATFORM = 12  # the image's platform is not the variant's
    # What a security team signs off (audit.py, signing.py, sbom.py, static.py).
    VULNERABLE = 13  # the vulnerability gate: an advisory at or above the policy's severity, not accepted
    NOT_AUDITED = 14  # the gate failed closed: packages without advisory data, or the source did not answer
    UNVERIFIED = 15  # an image's signature or attestation is missing or does not verify (unsigned, tampered)
    SBOM = 16  # an image's SBOM could not be derived, or a file is not a CycloneDX document
    SBOM_DIFFERS = 17  # `sbom --compare`: the image's packages differ from the published SBOM
    STATIC = 18  # an OpenShift static check failed (/licenses, layers, labels, USER, tag)
    OUT_LOCKED = 19  # --no-wait and another run holds the --out folder
    NOT_SET_UP = 20  # tools/matrix (the bash entry point) found no venv and no installed matrixtool
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


class OutputError(MatrixError):
    """A file the tool writes (a report, log, bake file or context, manifest) cannot be written: a full disk,
    a file-size limit, no permission; ``path`` is the file. Exit 3, as for a bad ``--out``: nothing was
    written half (``outputs``)."""

    exit_code = ExitCode.CONFIG

    def __init__(self, message: str, *, path: str) -> None:
        self.path = path
        super().__init__(message)


class OutLockedError(MatrixError):
    """``--no-wait`` and another run holds the ``--out`` folder's lock (``outlock``)."""

    exit_code = ExitCode.OUT_LOCKED


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
    """The image's platform (os/architecture) is not the variant's; found before any check runs."""

    exit_code = ExitCode.WRONG_PLATFORM


class EngineUnreachableError(MatrixError):
    """No Docker engine answers, or buildx is missing."""

    exit_code = ExitCode.ENGINE


class RegistryError(MatrixError):
    """A container registry did not answer, refused a request, or lacks an image that must be there."""

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


class StartRefused(MatrixError):
    """A thread other than the main one asked to start a container, a volume or a program after the CLI's signal
    handler ran (``interrupts.starting``): the command is stopping and its sweeps may have run already, so nothing
    new starts. Exit 130, as for Ctrl-C (the thread's caller sees a failure, the command's exit is the signal's)."""

    exit_code = ExitCode.INTERRUPTED


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


# What each exit code means (docs/commands.md's table is generated from this: tools/docs_tables.py).
MEANING: dict[ExitCode, tuple[str, str]] = {
    ExitCode.OK: ("ok", ""),
    ExitCode.UNEXPECTED: ("unexpected", "a bug of this tool (`--debug` shows the traceback; report it)"),
    ExitCode.USAGE: (
        "usage",
        "an unknown command or flag, a flag value out of range, a missing argument, `test` without "
        "`--image`/`--host` (one `error:` line naming the command's `--help`)",
    ),
    ExitCode.CONFIG: (
        "config",
        "`matrix.yaml` (or `--matrix`) is not a regular UTF-8 file of at most 1 MiB, is not YAML, has a duplicate "
        "or non-string key, an alias bomb, breaks the schema or a value rule; a template error; `images/` cannot "
        "be written; a flag: a reference (`--image`, `--registry`, `--repository`), `--only`/`--skip`, `--suite`, "
        "`--out`/`--junit`/`--json-file`, the wheelhouse or CA bundle, a key flag (`--sign-key`, `--smoke-report`, "
        "`--verify-key`); a push record that is not what `push` wrote; a `kube --from-report` report whose serve "
        "figures (`ready_s`, `warm`) are no time to ready; an output (report, log, bake file or context, manifest) "
        "that cannot be written: full disk (`ENOSPC`), file-size limit (`EFBIG`), no permission (`EACCES`), a "
        "folder, FIFO or device where a file of a set goes (a FIFO or device `--junit`/`--json-file` is a stream, "
        "written in place): the message names the file, nothing is left half written",
    ),
    ExitCode.NOTHING_SELECTED: (
        "nothing selected",
        "an unknown variant name; `ci-matrix --hosted-only` that leaves no variant",
    ),
    ExitCode.STALE_RENDER: (
        "stale render",
        "`images/` differs from a fresh render (changed, missing or extra files; the message has the diff)",
    ),
    ExitCode.BUILD: (
        "build",
        "a BuildKit build failed, or a base image could not be provided; a full disk of the engine (`no space left "
        "on device`) names the engine's data root and how to free it",
    ),
    ExitCode.SMOKE: (
        "smoke",
        "a smoke check failed or timed out, or the image is over its `size_budget` (result `size-budget`)",
    ),
    ExitCode.ENGINE: (
        "engine",
        "no Docker engine answers, or it went away during the run (stopped or restarted during a build or a smoke "
        "run: the message names `DOCKER_HOST`; nothing is tagged, check containers are AutoRemove and others are "
        "removed once the engine is back, within 30 s), buildx (or, for signing, cosign) is missing, the engine "
        "refused a request (a Docker API error: the message has the engine's explanation), or `doctor` found a "
        "failure",
    ),
    ExitCode.REGISTRY: (
        "registry",
        "a registry did not answer, refused the request, or lacks the image (`pin`, `push`, `build --registry`, "
        "`manifest`, pulls by `test`/`run`)",
    ),
    ExitCode.INDEX_UNREACHABLE: (
        "index unreachable",
        "a variant's package index (`index.url`, `extra_urls`) does not answer (15-second probe before any build)",
    ),
    ExitCode.NOT_BUILT: (
        "not built",
        "`push` of an image this engine has not built and the registry does not hold under its content-hash tag; "
        "`size`, `diff`, `static` or `sbom` of an image this engine does not have",
    ),
    ExitCode.WRONG_PLATFORM: (
        "wrong platform",
        "the image's platform is not the variant's (`test --image <amd64 image> --as arm64`; checked before any "
        "check runs), or the engine cannot run it (`exec format error`)",
    ),
    ExitCode.VULNERABLE: (
        "vulnerable",
        "`audit`: an advisory at or above the variant's `audit.fail_on` (or of unknown severity) affects a package "
        "and is not accepted (or its acceptance expired)",
    ),
    ExitCode.NOT_AUDITED: (
        "not audited",
        "`audit` failed closed: packages with no advisory data for their ecosystem, a version the advisory's ranges "
        "cannot be compared with, or an advisory source that did not answer (each named with the reason)",
    ),
    ExitCode.UNVERIFIED: (
        "unverified",
        "`--verify-key`: the image (or a base, or a platform of a manifest list) is unsigned, signed by another "
        "key, its tag names another image than the one signed, or the engine's image is not the signed digest",
    ),
    ExitCode.SBOM: (
        "sbom",
        "the SBOM of an image could not be derived (no `python3` in it, the program failed), or a file is not a "
        "CycloneDX document",
    ),
    ExitCode.SBOM_DIFFERS: ("sbom differs", "`sbom --compare`: the image's packages differ from the published SBOM"),
    ExitCode.STATIC: (
        "static",
        "`static`: an OpenShift static check failed (`/licenses`, layers, labels, `USER`, tag)",
    ),
    ExitCode.OUT_LOCKED: (
        "out in use",
        "`--no-wait` and another run holds the `--out` folder (`<out>/.lock`; the message names its pid and "
        "command); without `--no-wait` a command that writes there (`build`, `bake`, `run`, `test`, `push`, `kube`) "
        "waits for it",
    ),
    ExitCode.NOT_SET_UP: (
        "not set up",
        "`tools/matrix` found no project venv (`.venv`) and no `python3` that imports `matrixtool`: run `make setup` "
        "(README.md), or `pip install .` where the tool runs without the venv (a CI runner)",
    ),
    ExitCode.INTERRUPTED: (
        "interrupted",
        "SIGINT (Ctrl-C): running builds are ended, smoke containers removed; during start-up (before a command "
        "runs) one line, nothing to clean up",
    ),
    ExitCode.TERMINATED: (
        "terminated",
        "SIGTERM (CI cancellation, `timeout`, Kubernetes): the same as for SIGINT",
    ),
}


def exit_code_table() -> str:
    """Raises KeyError: an exit code has no entry in ``MEANING``."""
    rows = ["| code | class | when |", "|---|---|---|"]
    for code in ExitCode:
        label, when = MEANING[code]
        rows.append(f"| {int(code)} | {label} | {when} |")
    return "\n".join(rows) + "\n"
