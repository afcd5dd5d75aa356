"""The stream rule, one place for the tool and the bundle: a name that is a FIFO, a device or a socket, or that leads
into ``/dev`` or ``/proc``, is written in place and never replaced (``core.outputs`` and ``standalone.write`` use it).

Standard library only, Python >= 3.9.
"""

import os
import stat

_STREAM_ROOTS = ("/dev/", "/proc/")
_MAX_LINKS = 40  # the kernel's own limit on links followed in one path


def is_stream(path: "str | os.PathLike[str]") -> bool:
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
