"""A smoke check's result: its status, how it is read from the check's exit code and output, and the rule that
a skip never hides a failure."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

from matrixtool.core import jsontext, markers
from matrixtool.core.container import EXEC_FORMAT_ERROR
from matrixtool.incontainer.vllm_smoke import common as incontainer
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
    """The result object of ``check`` (None: of any check) from the last of its ``MATRIX-RESULT`` lines, or None;
    a line without a check name is keyed None.

    Raises ValueError when that line is not JSON."""
    results: dict[str | None, dict[str, Any]] = {}
    for found in markers.marked(output, incontainer.RESULT_MARK):
        parsed = jsontext.loads(found.payload)  # ValueError: not JSON
        if not isinstance(parsed, dict):
            raise ValueError(f"a result is no object: {found.line[:200]}")
        results[parsed.get("check")] = parsed
    if check is None:
        return list(results.values())[-1] if results else None
    return results.get(check, results.get(None))


def split_logs(output: str) -> dict[str, str]:
    """{check name: its part of ``output``}: from its ``MATRIX-BEGIN`` line to its result line."""
    return markers.sections(output, incontainer.BEGIN_MARK, incontainer.RESULT_MARK)


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
    """Status, diagnosis, hint and facts of one check from its exit code, output and wall time (seconds).

    ``exit_code`` None means the host deadline passed; 124 is coreutils ``timeout`` firing, and 137
    (SIGKILL) is its ``-k`` follow-up only once ``timeout`` seconds have passed: earlier it is another
    SIGKILL, most often the kernel's OOM killer (host memory, whatever the ``accelerator``: its hint names
    VLLM_CPU_KVCACHE_SPACE for cpu only).
    """
    hint = CHECKS[check].hint
    tail = " | ".join(output.strip().splitlines()[-3:])
    if EXEC_FORMAT_ERROR in output.lower():
        return (
            Status.FAILED,
            f"{EXEC_FORMAT_ERROR}: the image's binaries are for another architecture than this host's: {tail}",
            "test the image on a host of its platform, or install QEMU's binfmt handlers "
            "(docker run --privileged --rm tonistiigi/binfmt --install all)",
            {},
        )
    if exit_code == 137 and seconds is not None and seconds < timeout:
        return (
            Status.FAILED,
            f"killed by SIGKILL after {seconds:.0f} s, before its {timeout} s timeout (out of memory?): {tail}",
            oom_hint("container", accelerator),
            {},
        )
    if exit_code is None or exit_code in (124, 137):
        return Status.TIMEOUT, f"no result within {timeout} s; the check was killed", hint, {}
    try:
        parsed = parse_output(output, check)
        status = Status(parsed["status"]) if parsed is not None else None
    except (ValueError, KeyError, TypeError) as exc:
        return Status.FAILED, f"the check printed an unreadable result ({exc}): {tail}", hint, {}
    if parsed is None or status is None:
        return Status.FAILED, f"the check printed no result (exit {exit_code}): {tail}", hint, {}
    return (
        status,
        str(parsed.get("diagnosis", "")),
        str(parsed.get("hint") or hint),
        dict(parsed.get("facts", {})),
    )


def oom_hint(where: str, accelerator: str) -> str:
    """The hint for a check SIGKILLed before its timeout in ``where`` (container, environment): the kernel's OOM
    killer ends a process short of host memory; on cpu the KV cache lives there (VLLM_CPU_KVCACHE_SPACE)."""
    if accelerator == "cpu":
        return f"give the {where} more memory, or lower VLLM_CPU_KVCACHE_SPACE"
    return (
        f"the host's or pod's memory limit killed it (the kernel's OOM killer, host memory, not GPU memory): "
        f"give the {where} (or its pod) more memory"
    )


def unhidden(result: CheckResult, checks: Sequence[CheckSpec]) -> CheckResult:
    """``result``, or where it was skipped for a prerequisite that failed but is not among ``checks`` (a profile's
    rerun leaves prerequisites out), a failure naming the prerequisite's diagnosis: a skip never hides a failure."""
    need = result.facts.get("failed_need")
    if result.status is not Status.SKIPPED or not need or need in {c.name for c in checks}:
        return result
    hint = result.facts.get("need_hint") or (CHECKS[need].hint if need in CHECKS else "")
    return dataclasses.replace(
        result,
        status=Status.FAILED,
        diagnosis=f"{need} failed here: {result.facts.get('need_diagnosis') or 'see the log'}",
        hint=str(hint),
    )
