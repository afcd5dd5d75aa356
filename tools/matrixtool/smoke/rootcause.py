"""One root cause across groups on the host: the consequence rules (``incontainer.vllm_smoke.rootcause``, the one
definition the bundle applies too) over one container's results, and the build step that made a folder
``run-conditions`` found unwritable.

Pure: results in, results out (``CheckResult`` values), plus the image history for the build step that made a
folder (the Docker SDK's ``Image.history()``: newest first, ``CreatedBy`` per layer).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from matrixtool.incontainer.vllm_smoke import rootcause as shared
from matrixtool.smoke.result import CheckResult, Status

_USER = re.compile(r"^USER\s+(\S+)")


def template_end(created_by: str) -> bool:
    """True for the last step of this project's template (templates/Dockerfile.j2 ends with ``CMD ["--help"]``)."""
    return 'CMD ["--help"]' in created_by


def consequences(results: Sequence[CheckResult]) -> list[CheckResult]:
    """``results`` with each failure that follows from another check's failure turned into ``skipped: <cause>
    failed``, by the rules the bundle applies too (``incontainer.vllm_smoke.rootcause.consequences``). Order is
    kept."""
    plain = [
        {"check": r.check, "status": r.status.value, "diagnosis": r.diagnosis, "hint": r.hint, "facts": r.facts,
         "log": str(r.log) if r.log is not None else None}
        for r in results
    ]  # fmt: skip
    out = []
    for r, d in zip(results, shared.consequences(plain), strict=True):
        if d["facts"] is r.facts:  # not a consequence: the same result
            out.append(r)
        else:
            out.append(
                dataclasses.replace(
                    r, status=Status(d["status"]), diagnosis=d["diagnosis"], hint=d["hint"], facts=d["facts"]
                )
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
    if blockers and all(b == "/" for b in blockers):
        # The cache would go to the root folder itself (HOME=/ for an arbitrary UID): no build step made it; the
        # variable named in the diagnosis is the cause.
        return result
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
