"""The warm start of a host-mode server against its cold one (issue 39): the share of the cold start's time to ready
it took, and where past ``WARM_RATIO_GOAL``, what vLLM could not reuse, read from the two starts' logs."""

from __future__ import annotations

import re
from typing import Any, Dict, List, Mapping

from . import compilecache

# The warm start on a GPU host is expected within this share of the cold start's time to ready (issue 39); past it
# the result names what the warm server did again rather than reuse.
WARM_RATIO_GOAL = 0.5
# The spans of a vLLM start that its log times (vllm/v1/worker/gpu_model_runner.py, compilation/backends.py and
# monitor.py, v1/engine/core.py; vLLM 0.25's words on the H200), as (name, pattern of the seconds).
SPANS = (
    ("model load", r"Model loading took [\d.]+ ?GiB(?: memory)? and ([\d.]+) ?s"),
    ("Dynamo bytecode transform", r"Dynamo bytecode transform time: ([\d.]+) ?s"),
    ("torch.compile", r"torch\.compile (?:takes|took) ([\d.]+) ?s in total"),
    ("CUDA graph capture", r"Graph capturing finished in ([\d.]+) ?s"),
    ("engine init", r"init engine \(profile, create kv cache, warmup model\) took ([\d.]+) ?s"),
)
# A span shorter than this in the warm start is not named as work done again (s).
SPAN_FLOOR_S = 2.0


def startup_spans(log: str) -> Dict[str, float]:
    """The seconds each of ``SPANS`` took in ``log`` (one start's), by name; a span the log does not time is left
    out."""
    found: Dict[str, float] = {}
    for name, pattern in SPANS:
        m = re.search(pattern, log or "")
        if m:
            found[name] = float(m.group(1))
    return found


def _starts(cold: Mapping[str, Any], warm: Mapping[str, Any]) -> List[str]:
    """What no vLLM cache covers in the warm start, from the phases (````serving.PHASES``: seconds since start): its API
    server's interpreter start and imports up to vLLM's first line, and its engine core's own process start and
    imports (from that line to the engine core's first one); each with the cold start's figure."""
    out = []
    if warm.get("cli") is not None:
        out.append(
            f"{warm['cli']:.0f} s to vLLM's first line, the API server's interpreter start and imports "
            f"(cold {cold.get('cli')} s)"
        )
    if warm.get("cli") is not None and warm.get("engine core") is not None:
        was = cold["engine core"] - cold["cli"] if cold.get("engine core") is not None and cold.get("cli") else None
        out.append(
            f"{warm['engine core'] - warm['cli']:.0f} s from there to the engine core's first line, its own process "
            f"start and imports (cold {round(was, 1) if was is not None else None} s)"
        )
    return out


def warm_share(seen: Mapping[str, Any], facts: Dict[str, Any]) -> str:
    """The warm start against the cold one, where both were ready: ``facts["warm"]`` gets ``ratio`` (warm / cold
    time to ready) and ``spans`` (``startup_spans`` of each start: {name: [cold s, warm s]}); past
    ``WARM_RATIO_GOAL`` also ``not_reused``: what the warm start did again (``_starts``: process starts and imports,
    which no vLLM cache covers; the spans of at least ``SPAN_FLOOR_S`` that took at least that share of the cold
    one's time) and ``reused`` spans (those below it). The summary's words ("" where no warm start was ready)."""
    warm = facts.get("warm")
    cold_s = seen.get("ready_s")
    warm_s = warm.get("ready_s") if isinstance(warm, dict) else None
    if not cold_s or warm_s is None or not isinstance(warm, dict):
        return ""
    ratio = round(float(warm_s) / float(cold_s), 2)
    cold_spans = startup_spans(str(seen.get("log") or "").split(compilecache.WARM_LOG_MARK)[0])
    warm_spans = startup_spans(str((seen.get("warm") or {}).get("log") or ""))
    spans = {n: [cold_spans.get(n), warm_spans.get(n)] for n, _ in SPANS if n in cold_spans or n in warm_spans}
    warm.update(ratio=ratio, spans=spans)
    words = f"; warm/cold {ratio}"
    if ratio <= WARM_RATIO_GOAL:
        return words + f" (at most {WARM_RATIO_GOAL})"
    timed = [(n, c, w) for n, (c, w) in spans.items() if c is not None and w is not None]
    again = [f"{n} {c:g} s -> {w:g} s" for n, c, w in timed if w >= SPAN_FLOOR_S and w >= WARM_RATIO_GOAL * c]
    reused = [f"{n} {c:g} s -> {w:g} s" for n, c, w in timed if w < WARM_RATIO_GOAL * c]
    not_reused = _starts(dict(seen.get("phases") or {}), dict(warm.get("phases") or {})) + again
    warm.update(not_reused=not_reused, reused_spans=reused)
    what = "; ".join(not_reused) or "nothing vLLM's log times: the rest is process start and imports"
    done = f"; what the caches cover shrank: {', '.join(reused)}" if reused else ""
    return words + f" (over {WARM_RATIO_GOAL}; what vLLM could not reuse: {what}{done})"
