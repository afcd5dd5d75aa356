"""The serve check's fresh compile cache: one folder per run under the environment's cache root, laid out as the
images lay out theirs (``cache_env``), its files listed before and after each start, removed afterwards.

Standard library only, Python >= 3.9."""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any, Dict, Mapping

from . import compilecache

# The folders of the fresh cache below its root, as the images set them (templates/Dockerfile.j2:
# XDG_CACHE_HOME=/tmp/.cache, TORCHINDUCTOR_CACHE_DIR and TRITON_CACHE_DIR below it; vLLM's VLLM_CACHE_ROOT
# defaults to $XDG_CACHE_HOME/vllm).
CACHE_DIRS = (("VLLM_CACHE_ROOT", "vllm"), ("TORCHINDUCTOR_CACHE_DIR", "torchinductor"), ("TRITON_CACHE_DIR", "triton"))


CACHE_PREFIX = "vllm-smoke-cache-"


def cache_base(env: Mapping[str, str]) -> str:
    """The environment's cache root, where the fresh cache folder is made: ``XDG_CACHE_HOME`` (absolute), else
    ``$HOME/.cache``, else the user's home from the password database (``~/.cache``)."""
    home = env.get("HOME") or os.path.expanduser("~")
    return compilecache.cache_root(dict(env, HOME=home))


def cache_env(folder: str) -> Dict[str, str]:
    """The variables that put every compile cache of a server under ``folder``: ``XDG_CACHE_HOME`` itself and
    ``CACHE_DIRS`` below it."""
    out = {"XDG_CACHE_HOME": folder}
    out.update((name, os.path.join(folder, sub)) for name, sub in CACHE_DIRS)
    return out


def make_cache(env: Mapping[str, str]) -> Any:
    """A fresh folder under ``cache_base(env)`` (made where missing) with ``CACHE_DIRS`` inside: its path.
    Raises OSError where it cannot be made or written."""
    base = cache_base(env)
    os.makedirs(base, exist_ok=True)
    folder = tempfile.mkdtemp(prefix=CACHE_PREFIX, dir=base)
    try:
        for _, sub in CACHE_DIRS:
            os.mkdir(os.path.join(folder, sub))
        with tempfile.TemporaryFile(dir=folder):
            pass
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    return folder


def cache_unwritable(base: str, exc: Any) -> Any:
    """(name, cause, diagnosis, fix) of a cache folder that cannot be made under ``base`` (``exc``, the OSError)."""
    cause = f"{type(exc).__name__}: {exc}"
    return (
        "compile-cache-unwritable",
        cause,
        f"no folder can be made and written under the cache root {base}, where vLLM, inductor and Triton keep "
        "their compile caches: every start of the server fails or compiles again",
        f"make {base} writable by this user (UID {os.getuid()}), or point XDG_CACHE_HOME at a writable folder; in a "
        "pod, " + compilecache.unwritable_fix(base),
    )


def list_files(root: str) -> str:
    """The files under ``root``, one path relative to it a line, sorted (empty where it cannot be read)."""
    found = []
    for folder, _, files in os.walk(root):
        found += [os.path.relpath(os.path.join(folder, f), root) for f in files]
    return "\n".join(sorted(found))


def filesystem(path: str, mounts: str = "/proc/mounts") -> Any:
    """The file system type of the mount holding ``path`` (``/proc/mounts``' longest mount point above it), ""
    where unknown."""
    path = os.path.realpath(path)
    best, kind = "", ""
    try:
        with open(mounts, encoding="utf-8", errors="replace") as f:
            for line in f:
                fields = line.split()
                if len(fields) < 3:
                    continue
                point = fields[1].replace("\\040", " ")
                inside = path == point or path.startswith(point.rstrip("/") + "/")
                if inside and len(point) >= len(best):
                    best, kind = point, fields[2]
    except OSError:
        return ""
    return kind


def read_text(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return ""
