"""Writing what the tool writes (reports, logs, bake file and contexts, manifests): whole or not at all, and a
failed write as one error naming the file and the cause (exit 3, ``errors.OutputError``), never a traceback.

A file is written to a temporary file beside it, flushed, then ``os.replace``d over it: a reader (or the next
run) sees the old file or the new one, never a truncated one; a failed write leaves no temporary file.
"""

from __future__ import annotations

import errno
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from matrixtool.core.errors import OutputError

# What to do for the causes seen on a full, capped or read-only disk.
_ADVICE = {
    errno.ENOSPC: "free space there or give another --out",
    errno.EDQUOT: "free space there (disk quota) or give another --out",
    errno.EFBIG: "the file is over the file-size limit (ulimit -f) or the file system's; raise it or use another --out",
    errno.EACCES: "make it writable for this user or give another --out",
    errno.EPERM: "make it writable for this user or give another --out",
    errno.EROFS: "the file system is read-only; give another --out",
}


def error(path: Path | str, exc: OSError) -> OutputError:
    """The ``OutputError`` for ``exc``, raised while writing ``path``: the file, the cause (strerror and errno
    name) and what to do."""
    name = errno.errorcode.get(exc.errno or 0, "")
    cause = f"{exc.strerror or exc} ({name})" if name else str(exc.strerror or exc)
    advice = _ADVICE.get(exc.errno or 0, "check the path and its folder")
    return OutputError(f"cannot write {path}: {cause}; {advice}", path=str(path))


@contextmanager
def guarded(path: Path | str) -> Iterator[None]:
    """Turn an ``OSError`` of the block (a stream or an append to ``path``) into ``error(path, ...)``."""
    try:
        yield
    except OSError as exc:
        raise error(path, exc) from exc


def make_dirs(path: Path) -> None:
    """Raises OutputError: one cannot be made (exit 3)."""
    with guarded(path):
        path.mkdir(parents=True, exist_ok=True)


@contextmanager
def replacing(path: Path) -> Iterator[Path]:
    """A temporary path beside ``path`` for the block to write; on success it replaces ``path`` (``os.replace``), on any
    failure it is removed and ``path`` keeps its old content (or stays absent). For a regular file only (``write_text``
    says what happens to others). Raises OutputError: the folder cannot be made, or the block or the replace failed with
    an ``OSError``."""
    make_dirs(path.parent)
    with guarded(path):
        fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        os.close(fd)
    tmp = Path(name)
    try:
        with guarded(path):
            yield tmp
            os.chmod(tmp, 0o644)
            os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_text(path: Path, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` whole or not at all (``replacing``); returns ``path``. A ``path`` that exists
    and is no regular file (``/dev/null``, a FIFO, ``/dev/stdout``) is written in place: replacing it would put a
    regular file where a device was. Raises OutputError: the write failed (exit 3); a regular ``path`` is unchanged."""
    if path.exists() and not path.is_file():
        with guarded(path), open(path, "w", encoding="utf-8", newline="") as out:
            out.write(text)
        return path
    with replacing(path) as tmp, open(tmp, "w", encoding="utf-8", newline="") as out:
        out.write(text)
        out.flush()
        os.fsync(out.fileno())
    return path


def write_bytes(path: Path, data: bytes) -> Path:
    """As ``write_text``. Raises OutputError: the write failed (exit 3); a regular ``path`` is unchanged."""
    if path.exists() and not path.is_file():
        with guarded(path), open(path, "wb") as out:
            out.write(data)
        return path
    with replacing(path) as tmp, open(tmp, "wb") as out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())
    return path
