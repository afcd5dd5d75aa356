"""One run at a time per ``--out`` folder: an exclusive ``flock`` on ``<out>/.lock``. A second run waits (a line
every ``NOTICE_S`` seconds) or with ``--no-wait`` refuses (exit 19). The kernel drops the lock when its process
ends, killed or not: a stale lock file is never a problem.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shlex
import stat
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from matrixtool.core import outputs
from matrixtool.core.errors import OutLockedError, OutputError
from matrixtool.core.untrusted import shown

# The commands that write under --out (logs, reports, build contexts, bake file, manifests).
WRITERS = frozenset({"bake", "build", "kube", "push", "run", "test"})
LOCK_NAME = ".lock"
NOTICE_S = 30.0
_POLL_S = 0.2
# The line ``held`` writes into the lock file.
_WRITTEN = re.compile(r"pid (?P<pid>[0-9]{1,10}): (?P<argv>[^\n]{1,3000})")


def _holder(fd: int) -> str:
    """What the lock file says about its holder (``pid 123: tools/matrix test ...``, as ``held`` writes it), or a
    placeholder. Any process may have written it: a line of another shape is named as such, and its text and
    the command line are shown with control characters escaped (``untrusted.shown``)."""
    try:
        text = os.pread(fd, 4096, 0).decode("utf-8", "replace").strip()
    except OSError:
        text = ""
    if not text:
        return "another run (it has not written its pid yet)"
    written = _WRITTEN.fullmatch(text)
    if written is None:
        return f"another run (its lock file holds no 'pid N: command' line but \"{shown(text[:200])}\")"
    return f"pid {written['pid']}: {shown(written['argv'])}"


@contextmanager
def held(
    out_dir: Path,
    *,
    argv: Sequence[str],
    wait: bool,
    notice: Callable[[str], None],
    notice_s: float = NOTICE_S,
) -> Iterator[None]:
    """When ``out_dir`` cannot be made, the block runs unlocked: the command's own check of ``--out`` reports
    why (exit 3). A lock file left alone in a folder this run created is removed with it, so a refused command
    writes nothing.

    Raises OutLockedError: ``wait`` is False and another run holds it (exit 19); OutputError: the lock file cannot be
    opened (a symlink, no permission; exit 3)."""
    path = out_dir / LOCK_NAME
    made = [p for p in (out_dir, *out_dir.parents) if not p.exists() and not p.is_symlink()]
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError:
        yield
        return
    with outputs.guarded(path):  # a symlink planted as .lock (O_NOFOLLOW: ELOOP) is refused, never followed
        # O_NONBLOCK: a FIFO planted as .lock is not waited on (it is refused below)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OutputError(
            f"cannot use {path} as the lock of --out: it is no regular file (a FIFO, device or socket); remove it or "
            "give another --out",
            path=str(path),
        )
    try:
        next_notice = 0.0
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                holder = _holder(fd)
                if not wait:
                    raise OutLockedError(
                        f"{out_dir} is in use by {holder}; wait for it, drop --no-wait to wait, or give this "
                        "run another --out"
                    ) from None
                now = time.monotonic()
                if now >= next_notice:
                    notice(f"waiting for {out_dir}: in use by {holder} (--no-wait refuses instead)")
                    next_notice = now + notice_s
                time.sleep(_POLL_S)
        with outputs.guarded(path):
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"pid {os.getpid()}: {shlex.join(argv)}\n".encode(), 0)
        yield
    finally:
        if made and _only_the_lock(out_dir):
            path.unlink(missing_ok=True)
            for folder in made:
                with contextlib.suppress(OSError):
                    folder.rmdir()
        os.close(fd)  # releases the flock


def _only_the_lock(out_dir: Path) -> bool:
    try:
        return [p.name for p in out_dir.iterdir()] == [LOCK_NAME]
    except OSError:
        return False
