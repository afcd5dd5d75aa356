"""A smoke check's result: its status, how it is read from the check's exit code and output, and the rule that
a skip never hides a failure."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

from matrixtool.core.container import EXEC_FORMAT_ERROR
from matrixtool.incontainer.vllm_smoke import results
from matrixtool.model import profiles
from matrixtool.model.checks import CHECKS, DEFAULT_SUITE
from matrixtool.model.model import CheckSpec


class Status(str, Enum):
    """A smoke check's verdict."""

    PASSED = "passed"
    FAILED = "failed"
    SKIPPED = "skipped"
    TIMEOUT = "timeout"

    @property
    def ok(self) -> bool:
        """True for verdicts that do not fail a run (passed, skipped)."""
        return self in (Status.PASSED, Status.SKIPPED)


@dataclass(frozen=True, kw_only=True)
class CheckResult:
    """One check's outcome: ``seconds`` of wall time, ``facts`` as reported from inside the image,
    ``log`` the path of its full output when kept."""

    variant: str
    image: str
    check: str
    status: Status
    diagnosis: str
    hint: str
    seconds: float
    facts: Mapping[str, Any] = field(default_factory=dict)
    log: Path | None = None
    profile: str = profiles.DEFAULT
    suite: str = DEFAULT_SUITE


def parse_output(output: str, check: str | None = None) -> dict[str, Any] | None:
    """The result object of ``check`` (None: of the last check) from the last of its ``MATRIX-RESULT`` lines (a
    line without a check name standing for it), or None (``results.parse_results``).

    Raises ValueError when that line is not JSON."""
    if check is not None:
        return results.parsed_result(output, check)
    found = list(results.parse_results(output).values())
    return found[-1] if found else None


def split_logs(output: str) -> dict[str, str]:
    """{check name: its part of ``output``}: from its ``MATRIX-BEGIN`` line to its result line."""
    return results.split_logs(output)


def parse_output_safe(output: str, check: str) -> dict[str, Any] | None:
    """``parse_output`` for ``check``, None where the output holds no readable result for it."""
    try:
        return parse_output(output, check)
    except ValueError:
        return None


def verdict(
    check: str,
    exit_code: int | None,
    output: str,
    timeout: int,
    seconds: float | None = None,
    *,
    accelerator: str = "cpu",
) -> tuple[Status, str, str, dict[str, Any]]:
    """Status, diagnosis, hint and facts of one check in a container from its exit code, output and wall time
    (seconds): ``results.verdict`` (timeouts, SIGKILL before the timeout, an unreadable or missing result), after
    an image of another architecture than this host's (``exec format error``)."""
    if EXEC_FORMAT_ERROR in output.lower():
        tail = " | ".join(output.strip().splitlines()[-3:])
        return (
            Status.FAILED,
            f"{EXEC_FORMAT_ERROR}: the image's binaries are for another architecture than this host's: {tail}",
            "test the image on a host of its platform, or install QEMU's binfmt handlers "
            "(docker run --privileged --rm tonistiigi/binfmt --install all)",
            {},
        )
    status, diagnosis, hint, facts = results.verdict(
        check, exit_code, output, timeout, seconds, hint=CHECKS[check].hint, accelerator=accelerator, where="container"
    )
    return Status(status), diagnosis, hint, facts


def unhidden(result: CheckResult, checks: Sequence[CheckSpec]) -> CheckResult:
    """``result``, or where it was skipped for a prerequisite that failed but is not among ``checks`` (a profile's
    rerun leaves prerequisites out), a failure naming the prerequisite's diagnosis (``results.unhidden``)."""
    found = results.unhidden(result.status.value, result.facts, {c.name for c in checks}, _declared_hint)
    if found is None:
        return result
    return dataclasses.replace(result, status=Status.FAILED, diagnosis=found[0], hint=found[1])


def _declared_hint(check: str) -> str:
    return CHECKS[check].hint if check in CHECKS else ""
