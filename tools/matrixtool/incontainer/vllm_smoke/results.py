"""A check's result: the dict a check returns (``result``), its marker lines (``MATRIX-BEGIN``, ``MATRIX-RESULT``)
and how the host and the bundle read them back: one verdict per check from its group's exit status and output,
a skip for a need that did not pass, and the rule that a skip never hides a failure.

Standard library only, Python >= 3.9 (the bundle and the host both use these rules: one definition)."""

from __future__ import annotations

import json
import os
from typing import Any, Callable, Collection, Dict, Mapping, Optional, Tuple

from . import markers

RESULT_MARK = "MATRIX-RESULT "
BEGIN_MARK = "MATRIX-BEGIN "
STATUSES = ("passed", "failed", "skipped", "timeout")
TIMEOUT_EXIT = 124  # what coreutils ``timeout`` exits with: the verdict reads it as a timeout
SIGKILLED = 137  # 128 + SIGKILL: coreutils ``timeout -k``'s follow-up, or another SIGKILL (the OOM killer)
# A check's verdict: (status, diagnosis, hint, facts).
Verdict = Tuple[str, str, str, Dict[str, Any]]


def result(status: str, diagnosis: str = "", hint: str | None = None, /, **facts: Any) -> dict[str, Any]:
    """A check's outcome: status passed / failed / skipped, a diagnosis, a hint (None: the declared one), facts."""
    return {"status": status, "diagnosis": diagnosis, "hint": hint, "facts": facts}


def result_line(name: str, outcome: Mapping[str, Any]) -> str:
    """The marker line the host parses for check ``name`` (``parse_results`` reads it back)."""
    return RESULT_MARK + json.dumps(dict(outcome, check=name), default=str)


def parse_results(output: str) -> dict[str | None, dict[str, Any]]:
    """{check name: result dict} from the ``MATRIX-RESULT`` lines of ``output``, the last line per check winning;
    a line without a check name (older scripts) is keyed None. Raises ValueError for an unreadable line (not
    JSON, nested past the recursion limit, or no object)."""
    found: dict[str | None, dict[str, Any]] = {}
    for line, payload in markers.marked(output, RESULT_MARK):
        parsed = markers.json_payload(payload)
        if not isinstance(parsed, dict):
            raise ValueError(f"a result is no object: {line[:200]}")
        found[parsed.get("check")] = parsed
    return found


def parsed_result(output: str, check: str) -> dict[str, Any] | None:
    """The result object of ``check`` in ``output`` (a line without a check name standing for it), or None.
    Raises ValueError as ``parse_results``."""
    results = parse_results(output)
    return results.get(check, results.get(None))


def split_logs(output: str) -> dict[str, str]:
    """{check name: its part of ``output``}: from its ``MATRIX-BEGIN`` line to its result line."""
    return markers.sections(output, BEGIN_MARK, RESULT_MARK)


# Checks that start a vLLM engine, whose KV cache lives in host memory on CPU (VLLM_CPU_KVCACHE_SPACE): an OOM kill
# of any other check (an import, a listing) has nothing to do with the KV cache.
ENGINE_CHECKS = frozenset({"offline-generate", "serve", "cpu-floor"})
# A machine is loaded where its 1-minute load average is above this many runnable tasks per core: each task then
# had less than a core, and a check's timeout measures the machine, not the check.
LOADED_PER_CORE = 1.0
# What a check's timeout is compared with: (1-minute load average, cores); None where it cannot be read.
Load = Optional[Tuple[float, int]]


def oom_hint(accelerator: str, where: str = "environment", check: str = "") -> str:
    """The hint for ``check`` SIGKILLed before its timeout in ``where`` (container, environment): the kernel's OOM
    killer ends a process short of host memory; on cpu, for a check that starts an engine (``ENGINE_CHECKS``), the
    KV cache lives there (VLLM_CPU_KVCACHE_SPACE); another check (an import: torch's and vLLM's libraries) only
    needs more memory."""
    if accelerator == "cpu" and check in ENGINE_CHECKS:
        return f"give the {where} more memory, or lower VLLM_CPU_KVCACHE_SPACE (the engine's KV cache, GiB)"
    if accelerator == "cpu":
        return (
            f"the kernel's OOM killer ended it (it starts no engine: no KV cache is involved): the {where}'s memory "
            "limit (docker run --memory, a pod's resources.limits.memory) or the host's memory is short of what it "
            "loads: raise the limit, or run fewer checks and servers beside it"
        )
    return (
        "the host's or pod's memory limit killed it (the kernel's OOM killer, host memory, not GPU memory): "
        f"give the {where} (or its pod) more memory"
    )


def machine_load() -> Load:
    """(1-minute load average, cores) of the machine this runs on (``os.getloadavg``: a container sees its host's);
    None where it has none (not Linux or BSD)."""
    try:
        return os.getloadavg()[0], os.cpu_count() or 1
    except (AttributeError, OSError):
        return None


def timeout_cause(what: str, seconds: Optional[float], load: Load, where: str = "") -> Tuple[str, str]:
    """(diagnosis, hint) of a check with no result within ``what`` (its limit in words: "its timeout of 120 s", "the
    120 s of its group (a, b)"), after ``seconds`` of wall time (None: not timed), judged by the machine's ``load``
    when it fired (``machine_load``): on a loaded machine (``LOADED_PER_CORE``) the check was starved of CPU, and
    the fix is room or a longer timeout; with cores to spare it hung, and the fix is to find where (``where``: the
    frame it was in, where known; else its log's last lines). Neither is the check's declared hint, which fixes
    what the check looks for, not a timeout. Pure."""
    after = f" after {seconds:.0f} s" if seconds is not None else ""
    if load is not None and load[0] > load[1] * LOADED_PER_CORE:
        return (
            f"no result within {what}{after}, on a loaded machine (load average {load[0]:.1f} on {load[1]} "
            "cores): the check was short of CPU, not stuck",
            "run it again when the machine is quieter (fewer runs, builds or servers beside it), or give a machine "
            "this busy longer timeouts (matrix.yaml variants.<variant>.smoke.timeout_scale)",
        )
    at = f"; it was at {where}" if where else ""
    if load is None:  # not read: slow or hung, the fix of each
        return (
            f"no result within {what}{after}; the check was killed{at}",
            "on a busy machine run it again when quieter, or raise the variant's timeouts (matrix.yaml "
            "variants.<variant>.smoke.timeout_scale); on an idle one it hung: find what it waited for in its log",
        )
    return (
        f"no result within {what}{after} with cores to spare (load average {load[0]:.1f} on {load[1]} cores): "
        f"the check hung{at}",
        f"a hang, not a slow machine: find what it waited for ({'that frame' if where else 'its log'}: a child "
        "process, a lock, a download or a device) and run it alone with --only CHECK to see it again",
    )


def group_timeout(
    names: Collection[str], limit: float, wall: float, load: Load, facts: Mapping[str, Any]
) -> Tuple[str, str, Dict[str, Any]]:
    """(diagnosis, hint, facts) of a check of the group ``names`` left without a result by the group's ``limit``
    (seconds, its checks' timeouts summed) after ``wall`` seconds, judged by ``load`` (``timeout_cause``); ``facts``
    with ``load`` ([1-minute load average, cores]) added where it was read. The host's runs and the bundle's alike."""
    diagnosis, hint = timeout_cause(f"the {limit:.0f} s of its group ({', '.join(names)})", wall, load)
    return diagnosis, hint, {**facts, "load": list(load)} if load is not None else dict(facts)


def verdict(
    check: str,
    exit_code: int | None,
    output: str,
    timeout: int,
    seconds: float | None,
    *,
    hint: str,
    accelerator: str = "cpu",
    where: str = "environment",
) -> Verdict:
    """(status, diagnosis, hint, facts) of one check from its group's exit status, output and wall time
    (``seconds``, None: not timed) in ``where`` (container, environment); ``hint``: the check's declared one.

    ``exit_code`` None means the caller's deadline passed; 124 is coreutils ``timeout`` firing, and 137 (SIGKILL)
    is its ``-k`` follow-up only once ``timeout`` seconds have passed: earlier it is another SIGKILL, most often
    the kernel's OOM killer (host memory, whatever the ``accelerator``: its hint names VLLM_CPU_KVCACHE_SPACE for
    an engine's check on cpu only, ``oom_hint``). A timeout gives both fixes (``timeout_cause`` without the load):
    the caller, which read the machine's load when the group ended, judges it by that."""
    tail = " | ".join(output.strip().splitlines()[-3:])
    if exit_code == SIGKILLED and seconds is not None and seconds < timeout:
        return (
            "failed",
            f"killed by SIGKILL after {seconds:.0f} s, before its {timeout} s timeout (out of memory?): {tail}",
            oom_hint(accelerator, where, check),
            {},
        )
    if exit_code is None or exit_code in (TIMEOUT_EXIT, SIGKILLED):
        diagnosis, fix = timeout_cause(f"{timeout} s", seconds, None)
        return "timeout", diagnosis, fix, {}
    try:
        parsed = parsed_result(output, check)
        status = parsed["status"] if parsed is not None else None
        if status is not None and status not in STATUSES:
            raise ValueError(f"{status!r} is not a valid status")
    except (ValueError, KeyError, TypeError) as exc:
        return "failed", f"the check printed an unreadable result ({exc}): {tail}", hint, {}
    if parsed is None or status is None:
        return "failed", f"the check printed no result (exit {exit_code}): {tail}", hint, {}
    return status, str(parsed.get("diagnosis", "")), str(parsed.get("hint") or hint), dict(parsed.get("facts", {}))


def need_skip(need: str, outcomes: Mapping[str, Mapping[str, Any]]) -> tuple[str, dict[str, Any]] | None:
    """(diagnosis, facts) of the skip of a check whose need ``need`` ran (``outcomes``: check -> result) and did not
    pass, else None: the diagnosis names the root check that failed (``need`` itself, or the need it was skipped
    for); facts ``need``, ``failed_need`` and, where a check failed, its ``need_diagnosis`` and ``need_hint``
    (what a report shows where the failed check is not in it: a profile's rerun)."""
    got = outcomes.get(need)
    if got is None or got["status"] == "passed":
        return None
    root = (got.get("facts") or {}).get("failed_need") if got["status"] == "skipped" else None
    if root:  # the need was skipped for a need of its own: name the check that failed
        diagnosis = f"{root} failed"
    elif got["status"] == "failed":
        root, diagnosis = need, f"{need} failed"
    else:
        diagnosis = f"{need} was {got['status']} ({got['diagnosis']})"
    facts: dict[str, Any] = {"need": need, "failed_need": root}
    if root:
        cause = outcomes.get(root) or {}
        facts.update(need_diagnosis=cause.get("diagnosis"), need_hint=cause.get("hint"))
    return diagnosis, facts


def unhidden(
    status: str, facts: Mapping[str, Any], names: Collection[str], declared_hint: Callable[[str], str]
) -> Optional[tuple[str, str]]:
    """(diagnosis, hint) of the failure a skip stands for, or None: a check skipped (``status``) for a prerequisite
    that failed (facts ``failed_need``) but is not among ``names`` (a profile's rerun leaves prerequisites out) is
    that failure, with the prerequisite's diagnosis and hint (``declared_hint(need)`` where it gave none): a skip
    never hides a failure."""
    need = facts.get("failed_need")
    if status != "skipped" or not need or need in names:
        return None
    hint = facts.get("need_hint") or declared_hint(str(need))
    return f"{need} failed here: {facts.get('need_diagnosis') or 'see the log'}", str(hint)
