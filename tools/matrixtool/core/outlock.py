"""One run at a time per ``--out`` folder: an exclusive ``flock`` on ``<out>/.lock``, held by every command that
writes there (``WRITERS``) from its start to its exit, so two runs side by side in one checkout never write
each other's reports, logs or build contexts.

The holder writes its pid and command line into the lock file; a second run waits for it, printing one line
naming them every ``NOTICE_S`` seconds, or with ``--no-wait`` refuses at once (``OutLockedError``, exit 19).
The kernel drops the lock when its process ends, killed or not: a stale lock file is never a problem.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shlex
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from matrixtool.core import outputs
from matrixtool.core.errors import OutLockedError

# The commands that write under --out (logs, reports, build contexts, bake file, manifests).
WRITERS = frozenset({"bake", "build", "kube", "push", "run", "test"})
LOCK_NAME = ".lock"
NOTICE_S = 30.0
_POLL_S = 0.2


def _holder(fd: int) -> str:
    """What the lock file says about its holder (``pid 123: tools/matrix test ...``), or a placeholder."""
    try:
        text = os.pread(fd, 4096, 0).decode("utf-8", "replace").strip()
    except OSError:
        text = ""
    return text or "another run (it has not written its pid yet)"


@contextmanager
def held(
    out_dir: Path,
    *,
    argv: Sequence[str],
    wait: bool,
    notice: Callable[[str], None],
    notice_s: float = NOTICE_S,
) -> Iterator[None]:
    """Hold the lock of ``out_dir`` for the block; ``argv`` is this run's command line (written for the others).

    When ``out_dir`` cannot be made, the block runs unlocked: the command's own check of ``--out`` reports
    why (exit 3). A run that leaves nothing but the lock file in a folder it created (a
    command refused for its input) removes both, so a refused command writes nothing.

    Raises:
        OutLockedError: ``wait`` is False and another run holds it (exit 19).
        OutputError: the lock file cannot be opened (a symlink, no permission; exit 3).
    """
    path = out_dir / LOCK_NAME
    made = [p for p in (out_dir, *out_dir.parents) if not p.exists() and not p.is_symlink()]
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError:
        yield
        return
    with outputs.guarded(path):  # a symlink planted as .lock (O_NOFOLLOW: ELOOP) is refused, never followed
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
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
