"""Diagnoses of a vLLM server's answers that the host (``matrixtool.smoke.serve.diagnosis``) and the bundle
(``serving.judge``) both make: one definition. Pure, standard library only, Python >= 3.9."""

from __future__ import annotations

import re
from typing import Any, Callable, Dict, Mapping, Optional, Tuple

WEB_STACK = 16  # docs: shared FAILURE-CLASSES.md, "Routes broken by web-stack skew"

_HANDLER = re.compile(r'^http_requests_total\{[^}]*handler="(?P<handler>[^"]*)"', re.MULTILINE)


def unlabelled_metrics(text: str) -> Optional[Tuple[str, str, str]]:
    """(cause, diagnosis, fix) of a ``/metrics`` answer (``text``, Prometheus' text format) that counts HTTP requests
    but names no route: prometheus-fastapi-instrumentator counted every request under ``handler="none"``. Seen on
    images built on ours with fastapi 0.163.2 (``pip install -U fastapi``) and with fastapi 0.137.1 plus the
    instrumentator 8.0.0: vLLM 0.32 replaces the instrumentator's route walk with one that skips routes without a
    ``path``, and fastapi >= 0.137 keeps included routers as such routes. None when a route is named or no request
    was counted."""
    found = list(_HANDLER.finditer(text))
    if {m["handler"] for m in found} != {"none"}:
        return None
    return (
        found[0].group(0) + "...",
        '/metrics counts every HTTP request under handler="none": the route names are not resolved, as '
        "with a fastapi newer than vLLM declares (>= 0.137 keeps included routers as `_IncludedRouter` routes "
        "without a path, which vLLM's patch of prometheus-fastapi-instrumentator skips), so per-route request "
        "metrics are lost while every route answers",
        "keep the web stack vLLM declares (vLLM 0.32: fastapi<0.137; `pip check` in the image names the "
        "conflict); do not upgrade fastapi alone in an image built on this one",
    )


# --- /dev/shm: free space and what is left in it ---------------------------------------------------------------------

SHM = 15  # docs: FAILURE-CLASSES.md, "/dev/shm too small"
SHM_LEFTOVERS = 43  # docs: FAILURE-CLASSES.md, "A killed server's leftovers in a /dev/shm that outlives it"
SHM_PATH = "/dev/shm"

# ``read_shm``'s source, standard library only: the host's serve check runs it in a container on a /dev/shm volume
# (``READ_SHM``), this module defines the function from it: one definition.
_READ_SHM_SOURCE = """
def read_shm(path='/dev/shm'):
    import os
    st = os.statvfs(path)
    files = []
    for name in sorted(os.listdir(path)):
        try:
            s = os.lstat(os.path.join(path, name))
        except OSError:
            continue
        files.append([name, s.st_blocks * 512, s.st_uid])
    files.sort(key=lambda f: -f[1])
    return {'path': path, 'size_bytes': st.f_frsize * st.f_blocks, 'free_bytes': st.f_frsize * st.f_bavail,
            'files': files[:20], 'count': len(files), 'files_bytes': sum(f[1] for f in files)}
"""
# ``python3 -c READ_SHM [path]``: ``read_shm``'s answer as JSON on stdout.
READ_SHM = _READ_SHM_SOURCE + "import json, sys\nprint(json.dumps(read_shm(*sys.argv[1:2])))\n"
_SCOPE: Dict[str, Any] = {}
exec(_READ_SHM_SOURCE, _SCOPE)  # our own constant source, run as it is in the container
read_shm: Callable[..., Dict[str, Any]] = _SCOPE["read_shm"]
read_shm.__doc__ = (
    "/dev/shm (``path``) as a server sees it: its size and free bytes (``statvfs``), the files in it (name, bytes "
    "allocated, owner UID; largest first, 20 at most), their count and total. Raises OSError where ``path`` cannot "
    "be read."
)


def _mib(n: Any) -> str:
    """Bytes in MiB, or KiB below 1 MiB (a killed server's segments are sparse: 36 KiB each held on the CPU image)."""
    n = int(n or 0)
    return f"{n / 2**20:.0f} MiB" if n >= 2**20 or n == 0 else f"{n / 2**10:.0f} KiB"


def shm_leftovers(state: Mapping[str, Any]) -> str:
    """The files of a ``read_shm`` answer in words ("3 files, 160 MiB: psm_1a2b (159 MiB), ..."), "" where none."""
    files = state.get("files") or []
    if not files:
        return ""
    named = ", ".join(f"{f[0]} ({_mib(f[1])})" for f in files[:3])
    more = f", {int(state.get('count', len(files))) - 3} more" if int(state.get("count", len(files))) > 3 else ""
    return f"{state.get('count', len(files))} file(s), {_mib(state.get('files_bytes'))}: {named}{more}"


LEFTOVERS_FIX = (
    "let the server exit on SIGTERM (a pod's grace, not a SIGKILL: a liveness probe that kills a busy server, or a "
    "memory limit below what it needs, kill it); where a container restarts in the same pod, its /dev/shm "
    "(`emptyDir: {medium: Memory}`) keeps the dead server's segments: clear it before the server starts (an "
    "initContainer or the command: `find /dev/shm -mindepth 1 -delete`), or restart the pod instead of the container"
)


def shm_cause(need_bytes: Optional[int], state: Mapping[str, Any]) -> Optional[Tuple[int, str, str, str]]:
    """(class, name, diagnosis, fix) of a shared-memory failure read with /dev/shm's ``state`` (``read_shm``) taken
    after it: leftovers (files the failing server did not make: it made none, as it failed at its first segment)
    that take what ``need_bytes`` needed (None: unknown, a failure that names no size, such as vllm#54002's
    ``OSError: [Errno 14] Bad address``) are class 43, named with their files; else None (the size is the cause)."""
    files_bytes, free = int(state.get("files_bytes") or 0), int(state.get("free_bytes") or 0)
    if not files_bytes:
        return None
    if need_bytes is not None and need_bytes > free + files_bytes:
        return None  # too small even when empty: the size is the cause
    needed = f"{_mib(need_bytes)} needed, " if need_bytes is not None else ""
    return (
        SHM_LEFTOVERS,
        "shm-leftovers",
        f"/dev/shm ({_mib(state.get('size_bytes'))}) holds what a server that did not exit left there "
        f"({shm_leftovers(state)}): {needed}{_mib(free)} free, {_mib(free + files_bytes)} without them; a killed "
        "server's segments outlive it where /dev/shm outlives the container (a pod's emptyDir of medium Memory), "
        "and they count against the pod's memory",
        LEFTOVERS_FIX,
    )
