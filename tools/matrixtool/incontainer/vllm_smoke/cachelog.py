"""What vLLM's log and cache folder say of its compile cache: the lines of a start (``evidence``: the cache it
used, saved or loaded, its key, the warm-up), the kernels a listing of the cache holds.

Standard library only, Python >= 3.9: the bundle's serve step and the host's container check read them alike."""

from __future__ import annotations

import re
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

# What each kind of line says about the cache; the first group names a path where the line has one.
LINES: Tuple[Tuple[str, "re.Pattern[str]"], ...] = (
    ("saved", re.compile(r"saved AOT compiled function to (?P<path>\S+)")),
    ("save_failed", re.compile(r"unable to save AOT compiled function to (?P<path>\S+): (?P<why>.*)")),
    ("loaded", re.compile(r"Directly load AOT compilation from path (?P<path>\S+)")),
    ("loaded", re.compile(r"Directly load the compiled graph\(s\) for .* from the cache")),
    ("load_failed", re.compile(r"Compiling model again due to a load failure from (?P<path>\S+), reason: (?P<why>.*)")),
    ("load_failed", re.compile(r"Cannot load aot compilation from path (?P<path>\S+), error: (?P<why>.*)", re.I)),
    ("cache_dir", re.compile(r"Using cache directory: (?P<path>\S+) for vLLM's torch\.compile")),
    ("compiled", re.compile(r"Compiling a graph for .* takes [\d.]+ s")),
    ("traced", re.compile(r"Dynamo bytecode transform time: [\d.]+ s")),
    ("disabled", re.compile(r"vLLM's torch\.compile cache is disabled")),
    ("total", re.compile(r"torch\.compile (?:and initial profiling[/\w ]* )?(?:took|takes) (?P<s>[\d.]+) s in total")),
)


# The suffixes of compiled kernels in a cache listing: inductor's C++ kernels and Triton's launchers (.so), Triton's
# kernels for NVIDIA GPUs (.cubin) and AMD GPUs (.hsaco). One binary per kernel: Triton's .ptx/.json beside a
# .cubin would count it again.
KERNEL_SUFFIXES = (".so", ".cubin", ".hsaco")


# The CPU model runner's warm-up, which compiles (cpu_model_runner.py): its two lines' timestamps bound it.
WARMUP = ("Warming up model for the compilation", "Warming up done.")


_STAMP = re.compile(r"\b(?P<month>\d\d)-(?P<day>\d\d) (?P<h>\d\d):(?P<m>\d\d):(?P<s>\d\d) \[")


# vLLM's "(Role pid=N) LEVEL MM-DD HH:MM:SS [file.py:N] " in front of each line.
_PREFIX = re.compile(r"^(?:\([^()]*pid=\d+\)\s*)?(?:[A-Z]+\s+\d\d-\d\d \d\d:\d\d:\d\d\s+\[[^\]]*\]\s?)?")


# The folder of one cache key under VLLM_CACHE_ROOT.
_KEY = re.compile(r"/torch_compile_cache/(?:torch_aot_compile/)?(?P<key>[0-9a-f]{10,64})(?:/|$)")


def evidence(log: str) -> Dict[str, object]:
    """What ``log`` (one start's output) says about vLLM's compile cache: ``lines`` (each evidence line, prefix
    stripped, in order), ``paths`` (where it saved, loaded or looked), ``keys`` (the cache keys of those paths),
    ``saved``/``loaded``/``compiled``/``traced``/``disabled`` (bool; ``traced``: Dynamo ran, which a start that
    loads vLLM's compiled graphs does too), ``save_failed``/``load_failed`` (the lines),
    ``compile_s`` (vLLM's "took X s in total", None where not logged), ``warmup_s`` (seconds between the CPU
    runner's warm-up lines by vLLM's own timestamps, whole seconds; None where either is missing)."""
    found: Dict[str, List[str]] = {}
    paths: List[str] = []
    compile_s: Optional[float] = None
    stamps: Dict[str, int] = {}
    for raw in log.splitlines():
        for marker in WARMUP:
            stamp = _STAMP.search(raw) if marker in raw and marker not in stamps else None
            if stamp is not None:
                stamps[marker] = ((int(stamp["day"]) * 24 + int(stamp["h"])) * 60 + int(stamp["m"])) * 60 + int(
                    stamp["s"]
                )
        line = _PREFIX.sub("", raw.rstrip("\r")).strip()
        for kind, pattern in LINES:
            m = pattern.search(line)
            if m is None:
                continue
            found.setdefault(kind, []).append(line)
            path = m.groupdict().get("path")
            if path and path not in paths:
                paths.append(path)
            if kind == "total":
                compile_s = float(m["s"])
            break
    keys: List[str] = []
    for path in paths:
        key = cache_key(path)
        if key and key not in keys:
            keys.append(key)
    lines = [line for kind, _ in LINES for line in found.get(kind, [])]
    return {
        "lines": sorted(set(lines), key=lines.index)[:12],
        "paths": paths,
        "keys": keys,
        "saved": bool(found.get("saved")),
        "loaded": bool(found.get("loaded")),
        "compiled": bool(found.get("compiled")),
        "traced": bool(found.get("traced")),
        "disabled": bool(found.get("disabled")),
        "save_failed": found.get("save_failed", []),
        "load_failed": found.get("load_failed", []),
        "compile_s": compile_s,
        "warmup_s": _span(stamps),
    }


def _span(stamps: Mapping[str, int]) -> Optional[int]:
    if len(stamps) != 2 or stamps[WARMUP[1]] < stamps[WARMUP[0]]:  # one missing, or a month turned between them
        return None
    return stamps[WARMUP[1]] - stamps[WARMUP[0]]


def cache_key(path: str) -> Optional[str]:
    """The cache key (vLLM's hash folder) in ``path``, None where it is not under ``torch_compile_cache``."""
    m = _KEY.search(path)
    return m["key"] if m else None


def kernels(listing: str) -> List[str]:
    """The compiled kernels in ``listing`` (the cache's files, one path relative to its root a line): the files
    ending in one of ``KERNEL_SUFFIXES`` (inductor's C++ kernels and Triton's launchers, Triton's GPU kernels)."""
    return sorted({line.strip() for line in listing.splitlines() if line.strip().endswith(KERNEL_SUFFIXES)})


def suffixes(paths: Sequence[str]) -> str:
    """The kernel suffixes among ``paths``, in ``KERNEL_SUFFIXES`` order: ".so" or ".so, .cubin"."""
    return ", ".join(x for x in KERNEL_SUFFIXES if any(p.endswith(x) for p in paths))


def strings(value: object) -> List[str]:
    """``value`` as a list of strings (an ``evidence`` entry; anything but a list or tuple: empty)."""
    return [str(v) for v in value] if isinstance(value, (list, tuple)) else []
