"""One root cause across groups: a failure that only follows from another check's failure is reported as its
consequence (``skipped: <check> failed``), and the cause's diagnosis says where in the image it came from.

Inside one interpreter the in-image runner already skips a check whose ``needs`` failed. Checks of different
groups run in different interpreters, in parallel, and cannot see each other's verdicts: a cache folder that
``run-conditions`` found unwritable also makes ``vllm-import`` fail with ``PermissionError``, a wrong Triton
that ``triton-import`` rejected also breaks ``import vllm``, and a vendored library that ``native-libs`` found
unloadable fails every import of the extension. This pass runs on the host over one container's results.

Pure: results in, results out (``CheckResult`` values), plus the image history for the build step that made a
folder (the Docker SDK's ``Image.history()``: newest first, ``CreatedBy`` per layer).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from matrixtool.smoke.result import CheckResult, Status

# Checks whose failure names a cause that others fail by, in the order a cause is looked for.
CAUSES = ("run-conditions", "native-libs", "triton-import")
# Checks that only observe the stack (their verdict is the class they diagnose): never made a consequence.
OWN_CLASS = frozenset({"no-fake-triton", "triton-drivers", "triton-kernel", "pip-check", "cuda-weight"})
_PERMISSION = re.compile(r"Permission denied|PermissionError|Errno 13")
_TRITON = re.compile(r"\btriton\b", re.IGNORECASE)
_USER = re.compile(r"^USER\s+(\S+)")


def template_end(created_by: str) -> bool:
    """True for the last step of this project's template (templates/Dockerfile.j2 ends with ``CMD ["--help"]``)."""
    return 'CMD ["--help"]' in created_by


def _text(result: CheckResult) -> str:
    """What a result says of its failure: its diagnosis and its log (bounded: the log's last 64 kB)."""
    log = ""
    if result.log is not None:
        try:
            log = result.log.read_text(encoding="utf-8", errors="replace")[-65536:]
        except OSError:
            log = ""
    return f"{result.diagnosis}\n{log}"


def _unwritable_paths(cause: CheckResult) -> list[str]:
    """The folders ``run-conditions`` found unwritable (facts ``unwritable``: path and the folder that blocks)."""
    paths = []
    for entry in cause.facts.get("unwritable") or []:
        if isinstance(entry, Mapping):
            paths += [str(entry[k]) for k in ("path", "blocker") if entry.get(k)]
    return paths


def _follows_from(cause: CheckResult, result: CheckResult) -> bool:
    """True when ``result``'s failure is explained by ``cause``'s (see the module docstring)."""
    text = _text(result)
    if cause.check == "run-conditions":
        paths = _unwritable_paths(cause)
        return bool(paths) and bool(_PERMISSION.search(text)) and any(p in text for p in paths)
    if cause.check == "triton-import":
        return bool(_TRITON.search(text))
    if cause.check == "native-libs":
        missing = [str(m) for m in cause.facts.get("root_errors") or [] if m]
        return any(m in text for m in missing)
    return False


def _only_about(cause: CheckResult, result: CheckResult) -> bool:
    """True when an observing check's failure (``OWN_CLASS``) is only about what ``cause`` blamed: every unmet
    requirement ``pip-check`` lists is one of the triton distribution(s) that ``triton-import`` rejected (a ROCm
    triton on a CPU image: ``pytorch-triton-rocm 2.0.1 requires cmake, which is not installed``); removing it
    removes them."""
    if cause.check != "triton-import" or result.check != "pip-check" or result.facts.get("clashes"):
        return False
    blamed = [str(p) for p in cause.facts.get("providers") or [] if p]
    problems = [str(p) for p in result.facts.get("problems") or []]
    return bool(blamed and problems) and all(any(p.startswith(f"{b} ") for b in blamed) for p in problems)


def consequences(results: Sequence[CheckResult]) -> list[CheckResult]:
    """``results`` with each failure that follows from a failed cause check (``CAUSES``) turned into
    ``skipped: <cause> failed`` (facts ``failed_need``, ``need_diagnosis``, ``need_hint``, as the in-image runner
    writes them), and each check skipped for such a consequence pointed at the cause. Order is kept."""
    failed = {r.check: r for r in results if r.status is Status.FAILED}
    causes = [failed[name] for name in CAUSES if name in failed]
    became: dict[str, CheckResult] = {}
    for r in results:
        if r.status is not Status.FAILED or r.check in CAUSES:
            continue
        if r.check in OWN_CLASS:
            cause = next((c for c in causes if _only_about(c, r)), None)
        else:
            cause = next((c for c in causes if _follows_from(c, r)), None)
        if cause is not None:
            became[r.check] = cause
    out = []
    for r in results:
        cause = became.get(r.check)
        if cause is None and r.status is Status.SKIPPED and r.facts.get("failed_need") in became:
            cause = became[str(r.facts["failed_need"])]
        if cause is None:
            out.append(r)
            continue
        facts = {
            **r.facts,
            "failed_need": cause.check,
            "need_diagnosis": cause.diagnosis,
            "need_hint": cause.hint,
            "consequence_of": cause.check,
            "own_diagnosis": r.diagnosis,
        }
        out.append(
            dataclasses.replace(r, status=Status.SKIPPED, diagnosis=f"{cause.check} failed", hint="", facts=facts)
        )
    return out


def root_build_steps(history: Sequence[Mapping[str, Any]], base_last: Callable[[str], bool]) -> list[str]:
    """The ``RUN`` steps of an image that ran as root after the base image's own steps, oldest first.

    ``history``: ``Image.history()`` (newest first); ``base_last(created_by)``: True for the last step of the
    image this one was built ``FROM`` (``template_end``: this project's template ends with ``CMD ["--help"]``);
    the user is tracked through ``USER`` steps (before any, a derived image runs as the base's user, 1000:0).
    """
    steps = [str(h.get("CreatedBy") or "") for h in reversed(history)]
    start = max((i for i, s in enumerate(steps) if base_last(s)), default=-1) + 1
    # After this project's template the user is its USER 1000:0; an image of another origin starts as root.
    user, found = ("1000:0" if start else "root"), []
    for step in steps[start:]:
        text = " ".join(step.split())
        m = _USER.match(text)
        if m:
            user = m.group(1)
        elif text.startswith(("RUN ", "/bin/sh -c ")) and user.split(":")[0] in ("root", "0"):
            found.append(text.removeprefix("RUN ").removeprefix("/bin/sh -c ").removesuffix(" # buildkit"))
    return found


def with_origin(result: CheckResult, steps: Sequence[str], width: int = 160) -> CheckResult:
    """``run-conditions``' failure for unwritable caches with the root build steps that may have made the folder.

    A step that names a cache tool (uv, pip, huggingface, a cache folder) is named first; without root steps
    the diagnosis says the folder came with the base image.
    """
    if result.check != "run-conditions" or result.status is not Status.FAILED or not result.facts.get("unwritable"):
        return result
    blockers = [str(b["blocker"]) for b in result.facts["unwritable"] if isinstance(b, Mapping) and b.get("blocker")]
    on_path = [s for s in steps if any(b in s for b in blockers)]
    cached = [s for s in steps if re.search(r"\buv\b|\bpip\b|huggingface|\.cache|XDG_CACHE_HOME|mkdir", s)]
    named = (on_path or cached or list(steps))[:3]
    if named:
        shown = "; ".join(f"`{s[:width]}{'…' if len(s) > width else ''}`" for s in named)
        origin = f"made by a root build step of this image after its base's own steps: {shown}"
        fix = (
            "run that step with its cache elsewhere (RUN --mount=type=cache,target=/root/.cache/uv with "
            "UV_CACHE_DIR=/root/.cache/uv, or pip --no-cache-dir), or end it with `chmod 1777 <folder>`"
        )
    else:
        origin = "the folder comes with the image's own steps, not with a build step added on top"
        fix = result.hint
    facts = {**result.facts, "made_by": named}
    return dataclasses.replace(
        result, diagnosis=f"{result.diagnosis}; {origin}", hint=f"{fix}; {result.hint}" if named else fix, facts=facts
    )
