"""The stream rule, one place for the tool and the bundle: a name that is a FIFO, a device or a socket, or that leads
into ``/dev`` or ``/proc``, is written in place and never replaced (``core.outputs`` and ``reports.write`` use it);
a FIFO nobody reads is given ``FIFO_READER_WAIT_S`` to get a reader, then refused (``open_stream``).

Standard library only, Python >= 3.9.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import stat
import sys
import time

_STREAM_ROOTS = ("/dev/", "/proc/")
_MAX_LINKS = 40  # the kernel's own limit on links followed in one path


def umask() -> int:
    """This process's umask, read without changing it: ``/proc/self/status``'s ``Umask:`` line (Linux >= 4.7), else
    set and put back at once (``os.umask`` has no read-only form)."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def new_file_mode(executable: bool = False) -> int:
    """The mode ``open()`` gives a new file, for a file written through a temporary one (``mkstemp`` makes it 0600):
    0666 (0777 for a program) less the umask, so a report is 0644 under the usual umask 022, as a shell's ``>``
    would make it."""
    return (0o777 if executable else 0o666) & ~umask()


def is_stream(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a stream, written in place and never replaced: a FIFO, a device or a socket, or a name
    that leads into ``/dev`` or ``/proc`` (itself, or a link on the way: ``/dev/stdout`` is a link to
    ``/proc/self/fd/1``, which leads to whatever stdout is, a regular file when a shell redirected it; replacing
    the name would put a regular file where the machine's ``/dev/stdout`` link was). False where nothing is there."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return False
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        return True
    name = os.path.abspath(path)
    for _ in range(_MAX_LINKS):
        if name.startswith(_STREAM_ROOTS):
            return True
        if not os.path.islink(name):
            return False
        name = os.path.abspath(os.path.join(os.path.dirname(name), os.readlink(name)))
    return False


_STANDARD = {"/dev/stdin": 0, "/dev/stdout": 1, "/dev/stderr": 2}
_OWN_FD = re.compile(r"/(?:proc/self|dev)/fd/([0-9]+)")


def own_fd(path: str | os.PathLike[str]) -> int | None:
    """The file descriptor of this process that ``path`` names (``/dev/stdout``, ``/dev/fd/1``, ``/proc/self/fd/1``,
    or a link to one), or None. Opening such a name makes a new open file description at offset 0: where stdout was
    redirected to a file, what it wrote before (and writes after) would overwrite the report."""
    name = os.path.abspath(path)
    for _ in range(_MAX_LINKS):
        if name in _STANDARD:
            return _STANDARD[name]
        match = _OWN_FD.fullmatch(name)
        if match:
            return int(match.group(1))
        if not os.path.islink(name):
            return None
        name = os.path.abspath(os.path.join(os.path.dirname(name), os.readlink(name)))
    return None


def write_to_own_fd(path: str | os.PathLike[str], data: bytes) -> bool:
    """Write ``data`` through this process's own descriptor that ``path`` names (``own_fd``), after Python's buffered
    stdout and stderr, so it lands where that descriptor is, in order; False (nothing written) when ``path`` names
    none. Raises OSError: the write failed."""
    fd = own_fd(path)
    if fd is None:
        return False
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(AttributeError, OSError, ValueError):
            stream.flush()
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
    return True


# Seconds a FIFO is given to have a reader before its write is refused (a FIFO nobody reads would hang the run).
FIFO_READER_WAIT_S = 60.0


def open_stream(path: str | os.PathLike[str]) -> int:
    """A file descriptor for writing to the stream ``path`` in place (``O_WRONLY | O_APPEND``: never created, never
    truncated). A FIFO is opened non-blocking, retried until a reader has it open or ``FIFO_READER_WAIT_S`` seconds
    passed, then made blocking again. Raises OSError: ``ENXIO`` when no reader came, or the open failed."""
    deadline = time.monotonic() + FIFO_READER_WAIT_S
    while True:
        try:
            # O_APPEND: a stream that is a redirected stdout's file (/dev/stdout) keeps what was written before.
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as exc:
            if exc.errno != errno.ENXIO or time.monotonic() >= deadline:
                raise
            time.sleep(0.1)
            continue
        os.set_blocking(fd, True)
        return fd
