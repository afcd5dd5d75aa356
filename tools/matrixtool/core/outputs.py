"""Writing what the tool writes (reports, logs, bake file and contexts, manifests): whole or not at all, and a
failed write as one error naming the file and the cause (exit 3, ``errors.OutputError``), never a traceback.

A file is written to a temporary file beside it, flushed, then ``os.replace``d over it: a reader (or the next
run) sees the old file or the new one, never a truncated one; a failed write leaves no temporary file.

A set of files that belong together (a command's manifests, a variant's reports) is written by ``write_set``: every
target is checked first (a folder, FIFO or device where a file goes is refused, nothing written), then under an
``flock`` of each folder (one per folder however it is spelled; two runs writing sets side by side commit one after
the other) every file is staged beside its target, and only once all are staged are they renamed in; a rename that
fails puts the files already renamed back. A staged file a killed run left behind is removed by ``remove_staging``.
"""

from __future__ import annotations

import errno
import fcntl
import os
import secrets
import shutil
import stat
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager, suppress
from pathlib import Path

from matrixtool.core.errors import OutputError
from matrixtool.incontainer.vllm_smoke import streams

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
def replacing(path: Path, *, mode: int | None = None) -> Iterator[Path]:
    """A temporary path beside ``path`` for the block to write; on success it replaces ``path`` (``os.replace``) with
    ``mode`` (None: what ``open()`` would give a new file, ``streams.new_file_mode``: 0644 under umask 022), on any
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
            os.chmod(tmp, streams.new_file_mode() if mode is None else mode)
            os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def is_stream(path: Path) -> bool:
    """Whether ``path`` is a stream, written in place and never replaced: a FIFO, a device or a socket, or a name that
    leads into ``/dev`` or ``/proc`` (``vllm_smoke.streams.is_stream``: one rule for the tool and the bundle)."""
    return bool(streams.is_stream(path))


def _write_stream(path: Path, data: bytes) -> None:
    """``data`` written in place to the stream ``path`` (``is_stream``). Raises OutputError: the write failed, or a
    FIFO had no reader within ``streams.FIFO_READER_WAIT_S`` (exit 3). A name of this process's own descriptor
    (``/dev/stdout``) is written through that descriptor (``streams.write_to_own_fd``)."""
    with guarded(path):
        if streams.write_to_own_fd(path, data):
            return
    try:
        fd = streams.open_stream(path)
    except OSError as exc:
        if exc.errno == errno.ENXIO:
            raise OutputError(
                f"cannot write {path}: it is a FIFO no process read within {streams.FIFO_READER_WAIT_S:.0f} s; "
                "start its reader first (cat FIFO) or give a file",
                path=str(path),
            ) from exc
        raise error(path, exc) from exc
    with guarded(path), os.fdopen(fd, "wb") as out:
        out.write(data)


def write_text(path: Path, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` whole or not at all (``replacing``); returns ``path``. A ``path`` that exists
    and is no regular file (``/dev/null``, a FIFO, ``/dev/stdout``) is written in place: replacing it would put a
    regular file where a device was (``is_stream``). Raises OutputError: the write failed (exit 3); a regular ``path``
    is unchanged."""
    return write_bytes(path, text.encode("utf-8"))


def write_bytes(path: Path, data: bytes, *, mode: int | None = None) -> Path:
    """As ``write_text``; a regular file gets ``mode`` (None: ``streams.new_file_mode``; a stream keeps its own).
    Raises OutputError: the write failed (exit 3); a regular ``path`` is unchanged."""
    if is_stream(path) or (path.exists() and not path.is_file()):
        _write_stream(path, data)
        return path
    with replacing(path, mode=mode) as tmp, open(tmp, "wb") as out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())
    return path


def is_staging(path: Path) -> bool:
    """Whether ``path`` is a file ``replacing`` or ``write_set`` stages or backs up beside a target (``.NAME.*.tmp``,
    ``.NAME.*.old``): a writer running now may still rename it."""
    return path.name.startswith(".") and path.name.endswith((".tmp", ".old"))


def _kind(mode: int) -> str:
    """What a file of ``mode`` (``st_mode``) is, in words."""
    kinds = (
        (stat.S_ISREG, "a regular file"),
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISLNK, "a symbolic link"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a device"),
        (stat.S_ISBLK, "a device"),
        (stat.S_ISSOCK, "a socket"),
    )
    return next((name for test, name in kinds if test(mode)), "no regular file")


def target_problem(path: Path) -> str | None:
    """Why a file cannot be written (and replaced) at ``path``, or None: it is absent, a regular file or a symbolic link
    to one (or to nothing), in a folder (or where one can be made). Checked without opening anything (a FIFO is never
    waited on)."""
    try:
        info: os.stat_result | None = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        info = None  # a parent that is a file is named below
    except OSError as exc:
        return f"{path} cannot be looked at ({exc.strerror or exc})"
    if info is not None and stat.S_ISLNK(info.st_mode):
        # Replaced by the new file, as ``write_text`` replaces it; what it points to stays as it is.
        try:
            info = os.stat(path)
        except OSError:
            info = None  # dangling, or a loop
        if info is not None and not stat.S_ISREG(info.st_mode):
            return f"{path} is a symbolic link to {_kind(info.st_mode)}, not to a regular file"
    elif info is not None and not stat.S_ISREG(info.st_mode):
        return f"{path} is {_kind(info.st_mode)}, not a regular file"
    if info is not None and is_stream(path):
        return f"{path} leads into /dev or /proc (a stream such as /dev/stdout), not to a file to replace"
    for parent in path.parents:
        if os.path.lexists(parent):
            if not parent.is_dir():
                return f"{parent} is {_kind(os.lstat(parent).st_mode)}, not a folder"
            break
    return None


def check_targets(paths: list[Path]) -> None:
    """Raises OutputError: a target is no regular file (a folder, FIFO, device, or a symbolic link to one) or sits
    under a file (exit 3), every such target named once."""
    problems = {problem: path for path in paths if (problem := target_problem(path)) is not None}
    if problems:
        raise OutputError(
            f"{'; '.join(problems)}: move it away or write elsewhere (--out); nothing was written",
            path=str(next(iter(problems.values()))),
        )


def _identity(folder: Path) -> tuple[int, int] | None:
    """The folder's ``(st_dev, st_ino)``: one folder whatever its spelling (relative, absolute, through a symbolic
    link); None: it cannot be looked at."""
    try:
        info = os.stat(folder)
    except OSError:
        return None
    return info.st_dev, info.st_ino


@contextmanager
def folders_locked(folders: Iterable[Path]) -> Iterator[None]:
    """An exclusive ``flock`` on each of ``folders``: one lock per folder, however it is spelled, taken in the order of
    the folders' ``(st_dev, st_ino)`` (the same order for every holder, so two never wait on each other). A folder
    that cannot be opened (no read permission, mode 0333) or locked (NFS emulates ``flock`` by byte-range locks, which
    a folder cannot hold) stays unlocked: each file is still replaced whole."""
    by_identity: dict[tuple[int, int], Path] = {}
    for folder in folders:
        if (key := _identity(folder)) is not None:
            by_identity.setdefault(key, folder)
    fds = []
    try:
        for key in sorted(by_identity):
            try:
                fd = os.open(by_identity[key], os.O_RDONLY | os.O_DIRECTORY)
            except OSError:
                continue
            fds.append(fd)
            with suppress(OSError):
                fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        for fd in fds:
            os.close(fd)  # releases the flock


def remove_staging(folders: Iterable[Path]) -> list[Path]:
    """Remove the staged and backed-up files (``is_staging``) a killed ``write_set`` left in ``folders``; the paths
    removed. Done holding the folders' locks: ``write_set`` stages and renames under them, so no running set is between
    its staging and its renames. Files that ``write_text`` stages are not locked: only for folders no ``write_text``
    writes. Raises OutputError: one cannot be removed (exit 3)."""
    folders = [f for f in folders if f.is_dir()]
    removed = []
    with folders_locked(folders):
        for folder in folders:
            for path in sorted(folder.iterdir()):
                if is_staging(path) and (path.is_file() or path.is_symlink()):
                    with guarded(path):
                        path.unlink()
                    removed.append(path)
    return removed


def _stage(path: Path, data: bytes, mode: int | None) -> Path:
    """``data`` in a new temporary file beside ``path`` (synced, ``mode``, None: ``streams.new_file_mode``); removed
    again when writing it fails."""
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(name, streams.new_file_mode() if mode is None else mode)
    except BaseException:
        Path(name).unlink(missing_ok=True)
        raise
    return Path(name)


def write_set(files: Mapping[Path, str | bytes | None], *, mode: int | None = None) -> list[Path]:
    """Write every file of ``files`` (text as UTF-8; None: the file is removed) or none: the targets are checked
    (``check_targets``), then with the folders locked (``folders_locked``) each file is staged beside its target, and
    only once all are staged they replace their targets (``os.replace``); a failed rename (or a signal) puts back what
    was renamed or removed before it. Returns the paths, in order.

    Raises OutputError: a target is no regular file, a folder cannot be made, or a write or rename failed (exit 3,
    naming the file); every target then keeps its old content (or stays absent)."""
    paths = list(files)
    check_targets(paths)
    for folder in dict.fromkeys(p.parent for p in paths):
        make_dirs(folder)
    staged: dict[Path, Path] = {}
    backups: dict[Path, Path | None] = {}
    try:
        with folders_locked([p.parent for p in paths]):
            check_targets(paths)  # another process may have put something there since
            for path in paths:
                data = files[path]
                if data is not None:
                    with guarded(path):
                        staged[path] = _stage(path, data.encode("utf-8") if isinstance(data, str) else data, mode)
            try:
                for path in paths:
                    with guarded(path):
                        backups[path] = _backup(path)
                        if path in staged:
                            os.replace(staged[path], path)
                            del staged[path]
                        elif backups[path] is not None:
                            os.unlink(path)
            except BaseException:
                _restore(backups)  # still locked: no other set was renamed in meanwhile
                raise
        return paths
    finally:
        for tmp in staged.values():
            tmp.unlink(missing_ok=True)
        for backup in backups.values():
            if backup is not None:
                backup.unlink(missing_ok=True)


def _backup(path: Path) -> Path | None:
    """A hard link to the file at ``path`` beside it (None: there is none), so ``_restore`` can put it back."""
    if not os.path.lexists(path):
        return None
    backup = path.with_name(f".{path.name}.{secrets.token_hex(6)}.old")
    try:
        os.link(path, backup, follow_symlinks=False)
    except OSError:  # a file system without hard links
        try:
            shutil.copy2(path, backup, follow_symlinks=False)
        except BaseException:
            backup.unlink(missing_ok=True)
            raise
    return backup


def _restore(backups: Mapping[Path, Path | None]) -> None:
    """Put back each replaced file from its backup; remove a file that was absent before. Best effort: it runs while
    another error is raised."""
    for path, backup in backups.items():
        try:
            if backup is None:
                path.unlink(missing_ok=True)
            else:
                os.replace(backup, path)
        except OSError:
            pass
