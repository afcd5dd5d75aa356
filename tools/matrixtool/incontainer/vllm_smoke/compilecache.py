"""vLLM's compile cache across two starts of one server: what a start's log says it did with the cache
(``evidence``) and why a second start did not reuse what the first wrote (``not_reused``). The container check
(``matrixtool.smoke.serve``) reads it; pure, standard library only, Python >= 3.9.

The lines are vLLM 0.32's own (vllm/compilation/decorators.py, backends.py, monitor.py), read in the CPU image:
with torch >= 2.10 vLLM compiles ahead of time (``VLLM_USE_AOT_COMPILE``, on by default) and keeps the result at
``$VLLM_CACHE_ROOT/torch_compile_cache/torch_aot_compile/<hash>/rank_0_0/model`` with inductor's cache beside it
(``<hash>/inductor_cache``, vLLM points ``TORCHINDUCTOR_CACHE_DIR`` there); ``<hash>`` is a SHA-256 of vLLM's
config, the environment factors it hashes and the model's forward. A first start logs "saved AOT compiled
function to PATH"; a start that finds PATH logs "Directly load AOT compilation from path PATH" and compiles
nothing; a start that finds it but cannot use it logs "Compiling model again due to a load failure from PATH,
reason: ...". ``VLLM_CACHE_ROOT`` defaults to ``$XDG_CACHE_HOME/vllm`` (else ``~/.cache/vllm``).

Other releases word the same events differently, and the patterns take each wording: a hit of vLLM's graph cache
(backends.py) is "Directly load the compiled graph(s) for dynamic shape|shape N|compile range (A, B) from the
cache, took X s", its miss "Compiling a graph for ... takes X s"; an AOT artifact that fails to load is "Cannot
load aot compilation from path PATH, error: ..."; the total is "torch.compile takes|took X s in total". On CUDA a
warm start also logs "Dynamo bytecode transform time" (Dynamo traces again before the graphs load from the cache):
a trace, not a compile. On CUDA inductor's kernels are Triton's (``*.cubin`` under the Triton cache, vLLM's
``<hash>/triton_cache`` or ``TRITON_CACHE_DIR``; ``*.hsaco`` on ROCm), on CPU C++ (``*.so``).
"""

from __future__ import annotations

import posixpath
import re
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple

from .cachelog import cache_key, evidence, kernels, strings, suffixes

COMPILE_CACHE = 31  # docs/failure-classes.md: "A compile cache that is not kept between starts"
# The warm start (a second start of the same server on the cache the first wrote), in containers
# (``matrixtool.smoke.serve.run``) and on a host (``serving``) alike: given less than WARM_MIN_S seconds of the serve
# check's timeout it is not tried; it must be ready WARM_MARGIN_S before that timeout (its stop, the cache's removal
# and the judgement come after).
WARM_MIN_S = 60.0
WARM_MARGIN_S = 30.0
WARM_SKIPPED_EAGER = (
    "not measured: the quick suite serves with --enforce-eager, which compiles nothing, so there is no compile cache "
    "to reuse (the full suite measures it)"
)
# The line that opens the warm start's log in the serve check's log file, after the cold start's.
WARM_LOG_MARK = "----- the warm start (a second server on the cold start's compile cache) -----"

_UNWRITABLE = re.compile(r"(?:Errno 13|Errno 30|Permission denied|Read-only file system)")


def cache_root(env: Mapping[str, str]) -> str:
    """The cache root under ``env`` (the server's environment): ``XDG_CACHE_HOME`` (the variant images set
    ``/tmp/.cache``, with ``TORCHINDUCTOR_CACHE_DIR`` and ``TRITON_CACHE_DIR`` below it; vLLM's ``VLLM_CACHE_ROOT``
    defaults to ``$XDG_CACHE_HOME/vllm``), else ``$HOME/.cache``, else ``/root/.cache`` (Python's and vLLM's own
    fallbacks)."""
    if env.get("XDG_CACHE_HOME", "").startswith("/"):
        return posixpath.normpath(env["XDG_CACHE_HOME"])
    home = env.get("HOME", "")
    return posixpath.join(posixpath.normpath(home), ".cache") if home.startswith("/") else "/root/.cache"


def unwritable_fix(root: str) -> str:
    """What to do about a cache volume at ``root`` that the server's user cannot write."""
    return (
        f"make the cache volume at {root} writable by the pod's UID: Kubernetes `securityContext.fsGroup` (the "
        "volume's files group-owned and group-writable; `tools/matrix kube --cache-claim` sets it; on OpenShift the "
        "restricted-v2 SCC sets it from the namespace's range: `--cluster openshift`), or a volume root "
        f"of mode 1777 as the image's own {root}; an image built FROM this one must not leave {root} root-owned "
        "(`install -d -m 1777` it)"
    )


def reuse(
    warm: Mapping[str, object], cold_kernels: Sequence[str], warm_kernels: Sequence[str]
) -> Optional[Tuple[str, str]]:
    """(what the second start reused, the evidence) or None: vLLM's compiled model where its log says it loaded it
    (an AOT artifact, else its compiled graphs: Dynamo may have traced again) and compiled nothing; else inductor's
    kernels where the first start left compiled kernels (``cold_kernels``, a listing of the cache after it was ready)
    and the second added none (``warm_kernels``, after it was ready): every kernel it needed was in the cache (the
    model was traced again, its kernels not compiled again)."""
    compiled = warm.get("compiled") or warm.get("saved") or warm.get("load_failed")
    if warm.get("loaded") and not compiled:
        lines = [x for x in strings(warm.get("lines")) if "Directly load" in x]
        aot = [x for x in lines if "AOT" in x]
        return ("vLLM's compiled model" if aot else "vLLM's compiled graphs"), (aot or lines or [""])[0]
    added = sorted(set(warm_kernels) - set(cold_kernels))
    if cold_kernels and warm_kernels and not added:
        why = strings(warm.get("load_failed"))
        return (
            "inductor's compiled kernels",
            f"the second start compiled no kernel: the {len(cold_kernels)} kernels ({suffixes(cold_kernels)}) the "
            "first start compiled into the cache were all there, none was added"
            + (f"; vLLM's own compiled model did not load ({why[0]})" if why else ""),
        )
    return None


def _under(path: str, mount: str) -> bool:
    path, mount = posixpath.normpath(path), posixpath.normpath(mount)
    return path == mount or path.startswith(mount.rstrip("/") + "/")


def not_reused(
    cold: Mapping[str, object],
    warm: Mapping[str, object],
    *,
    volume: str,
    tmpfs: Sequence[str] = (),
    cold_kernels: Sequence[str] = (),
    warm_kernels: Sequence[str] = (),
) -> Optional[Tuple[str, str, str, str]]:
    """(name, cause, diagnosis, fix) of a second start (``warm``, an ``evidence``) that did not reuse what the first
    (``cold``) wrote (``reuse`` of the kernels listed after each), where the cache volume is mounted at ``volume``
    and the profile mounts a tmpfs at each of ``tmpfs``; None when it reused it. The names:
    ``compile-cache-disabled``, ``compile-cache-unwritable``, ``compile-cache-on-tmpfs``, ``compile-cache-off-volume``
    (in the container's own layer), ``compile-cache-key-changed``, ``compile-cache-load-failed``,
    ``compile-cache-not-reused`` (no line says why)."""
    if reuse(warm, cold_kernels, warm_kernels) is not None:
        return None
    named = (
        _disabled(cold, warm)
        or _unwritable(cold, warm, volume)
        or _off_volume(cold, warm, volume, tmpfs)
        or _key_changed(cold, warm)
        or _load_failed(warm, cold_kernels, warm_kernels)
    )
    if named is not None:
        return named
    return (
        "compile-cache-not-reused",
        (strings(warm.get("lines")) or strings(cold.get("lines")) or ["no compile-cache line in either log"])[0],
        "the second start on the first start's cache compiled again and its log names no cache it loaded",
        "read both servers' logs for vLLM's cache lines ('Using cache directory', 'saved AOT compiled function', "
        "'Directly load AOT compilation')",
    )


# A named cause of a second start that compiled again: (name, cause, diagnosis, fix).
Cause = Tuple[str, str, str, str]


def _disabled(cold: Mapping[str, object], warm: Mapping[str, object]) -> Optional[Cause]:
    """``compile-cache-disabled``: VLLM_DISABLE_COMPILE_CACHE=1, seen in either start's log."""
    for ev in (cold, warm):
        if ev.get("disabled"):
            line = next((x for x in strings(ev.get("lines")) if "disabled" in x), "")
            return (
                "compile-cache-disabled",
                line,
                "vLLM's compile cache is disabled (VLLM_DISABLE_COMPILE_CACHE=1 in the server's environment): "
                "every start compiles again",
                "unset VLLM_DISABLE_COMPILE_CACHE (in the image's ENV, the pod's env or the profile's env)",
            )
    return None


def _unwritable(cold: Mapping[str, object], warm: Mapping[str, object], volume: str) -> Optional[Cause]:
    """``compile-cache-unwritable``: a start could not save its compiled model."""
    failed = strings(cold.get("save_failed")) + strings(warm.get("save_failed"))
    if not failed:
        return None
    path = next(iter(strings(cold.get("paths")) + strings(warm.get("paths"))), volume)
    why = "not writable by the server's user" if _UNWRITABLE.search(failed[0]) else "a failed write"
    return (
        "compile-cache-unwritable",
        failed[0],
        f"the first start compiled but could not write its compile cache under {posixpath.dirname(path)} ({why}),"
        " so the second start finds nothing to load and compiles again",
        unwritable_fix(volume),
    )


def _off_volume(
    cold: Mapping[str, object], warm: Mapping[str, object], volume: str, tmpfs: Sequence[str]
) -> Optional[Cause]:
    """``compile-cache-on-tmpfs`` or ``compile-cache-off-volume``: the cache is not on the volume at ``volume``."""
    paths = strings(warm.get("paths")) or strings(cold.get("paths"))
    outside = [p for p in paths if not _under(p, volume)]
    if not outside:
        return None
    where = next((t for t in tmpfs if _under(outside[0], t)), None)
    fix = (
        f"keep vLLM's cache on the volume: leave VLLM_CACHE_ROOT unset (it follows XDG_CACHE_HOME={volume}) or set "
        f"it under {volume}, or mount the cache volume where VLLM_CACHE_ROOT points"
    )
    if where is not None:
        return (
            "compile-cache-on-tmpfs",
            outside[0],
            f"vLLM keeps its compile cache at {outside[0]}, on the tmpfs at {where}, not on the cache volume at "
            f"{volume}: a tmpfs (a pod's emptyDir of medium Memory) is empty at every start, so every start "
            "compiles again",
            fix,
        )
    return (
        "compile-cache-off-volume",
        outside[0],
        f"vLLM keeps its compile cache at {outside[0]}, in the container's own filesystem, not on the cache "
        f"volume at {volume}: a new container (every pod start) begins without it and compiles again",
        fix,
    )


def _key_changed(cold: Mapping[str, object], warm: Mapping[str, object]) -> Optional[Cause]:
    """``compile-cache-key-changed``: the two starts used no cache key in common."""
    cold_keys, warm_keys = strings(cold.get("keys")), strings(warm.get("keys"))
    if not (cold_keys and warm_keys) or set(cold_keys) & set(warm_keys):
        return None
    return (
        "compile-cache-key-changed",
        f"first start: {_key_path(cold)}; second start: {_key_path(warm)}",
        f"the two starts used different cache keys ({cold_keys[0]} then {warm_keys[0]}): something vLLM hashes "
        "into the key (its config, the model path or files, VLLM_* variables among its environment factors) "
        "changed between two starts of the same server, so the second finds no cache of its own",
        "keep the model path, the serve arguments and the environment identical between starts (a path or "
        "variable that names the pod or the time changes the key); VLLM_LOGGING_LEVEL=DEBUG logs vLLM's "
        "'Compile env factors' and config hash per start to compare",
    )


def _load_failed(
    warm: Mapping[str, object], cold_kernels: Sequence[str], warm_kernels: Sequence[str]
) -> Optional[Cause]:
    """``compile-cache-load-failed``: the second start found the first's compiled model and could not load it."""
    load_failed = strings(warm.get("load_failed"))
    if not load_failed:
        return None
    return (
        "compile-cache-load-failed",
        load_failed[0],
        "the second start found the first's compiled model but could not load it, and compiled again"
        + (f" ({len(set(warm_kernels) - set(cold_kernels))} kernels added to the cache)" if warm_kernels else ""),
        "remove the cache folder named on that line (a partly written or foreign cache); a reason of 'Source "
        "code has changed' means the image's vLLM differs from the one that wrote the cache",
    )


def _key_path(ev: Mapping[str, object]) -> str:
    return next((p for p in strings(ev.get("paths")) if cache_key(p)), "no cache path")


def skipped_for_time(left_s: float) -> str:
    """Why no warm start ran, where only ``left_s`` seconds of the serve check's timeout were left."""
    return f"not measured: {max(0, round(left_s))} s of the check's timeout left for a second start"


def warm_budget(ready_timeout_s: float, deadline: Optional[float], now: float) -> Tuple[float, Optional[str]]:
    """(seconds the warm start may take to get ready, None) or (0, why it is not tried): ``ready_timeout_s``, cut
    to ``deadline`` (``time.monotonic()`` where it must be ready by; None: no cut) as of ``now``."""
    left = ready_timeout_s if deadline is None else min(ready_timeout_s, deadline - now)
    return (0.0, skipped_for_time(left)) if left < WARM_MIN_S else (left, None)


def judge_warm(
    cold_log: str,
    cold_ready_s: Optional[float],
    warm: Mapping[str, Any],
    *,
    cold_listing: str,
    cache_root: str,
    tmpfs: Sequence[str] = (),
) -> Dict[str, Any]:
    """The warm start (``warm``: its ``ready_s``, ``phases``, ``exit_code``, ``log``, ``cache_listing``; or
    ``skipped``/``error``) against the cold one (its log and the cache's files after it, at ``cache_root``).

    Returns ``facts`` (the serve check's facts to add: ``warm``, and ``cold_ready_s`` where a warm start ran),
    ``outcome`` ("skipped", "error", "not_ready", "not_reused" or "reused"), ``failure`` (name, cause, diagnosis,
    fix) where not reused (class ``COMPILE_CACHE``) and ``summary`` (the verdict's words where reused)."""
    if warm.get("skipped"):
        return {"facts": {"warm": {"skipped": warm["skipped"]}}, "outcome": "skipped", "failure": None, "summary": ""}
    cold = evidence(cold_log)
    found = evidence(str(warm.get("log") or ""))
    cold_kernels = kernels(cold_listing)
    warm_kernels = kernels(str(warm.get("cache_listing") or ""))
    ready: Any = warm.get("ready_s")
    reused = reuse(found, cold_kernels, warm_kernels)
    facts: Dict[str, Any] = {
        "ready_s": ready,
        "phases": dict(warm.get("phases") or {}),
        "cache_root": cache_root,
        "reused": reused[0] if reused else None,
        "reuse_evidence": reused[1] if reused else None,
        "log_lines": found["lines"],
        "cold_log_lines": cold["lines"],
        "kernels": {"cold": len(cold_kernels), "added_warm": len(set(warm_kernels) - set(cold_kernels))},
        "warmup_s": {"cold": cold["warmup_s"], "warm": found["warmup_s"]},
    }
    out: Dict[str, Any] = {"facts": {"cold_ready_s": cold_ready_s, "warm": facts}, "failure": None, "summary": ""}
    if warm.get("error"):
        return dict(out, outcome="error")
    if ready is None:
        return dict(out, outcome="not_ready")
    named = not_reused(
        cold, found, volume=cache_root, tmpfs=tmpfs, cold_kernels=cold_kernels, warm_kernels=warm_kernels
    )
    if named is not None or reused is None:
        failure = named or ("compile-cache-not-reused", "", "no reuse seen", "read the logs")
        facts["failure"] = failure[0]
        return dict(out, outcome="not_reused", failure=failure)
    spans = ""
    if cold["warmup_s"] is not None and found["warmup_s"] is not None:
        spans = f", compile/warm-up {found['warmup_s']} s against {cold['warmup_s']} s"
    summary = f"; warm start {float(ready):.0f} s on the cold start's cache, reusing {reused[0]}{spans}"
    return dict(out, outcome="reused", summary=summary)
