"""SIGINT and SIGTERM: stop at once, clean up, exit 130 or 143.

Python's default SIGTERM ends the process without running a ``finally``, leaving the smoke container up and
``docker buildx build`` running; a second signal while cleaning up is ignored, so the cleanup finishes.

Before a command runs (the imports of start-up, click parsing its flags) there is nothing to clean up: ``quiet_start``
makes a signal then end the process at once with one line and its code, not a ``KeyboardInterrupt`` traceback.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

from matrixtool.core.errors import ExitCode, Terminated

_state = {"interrupted": False, "ran": False}


def exit_code_of(exc: BaseException) -> ExitCode:
    """143 for ``Terminated`` (SIGTERM), 130 for any other ``KeyboardInterrupt`` (SIGINT, Ctrl-C)."""
    return ExitCode.TERMINATED if isinstance(exc, Terminated) else ExitCode.INTERRUPTED


def _exit_quietly(signum: int, frame: FrameType | None) -> None:
    code = ExitCode.TERMINATED if signum == signal.SIGTERM else ExitCode.INTERRUPTED
    name = "SIGTERM" if signum == signal.SIGTERM else "SIGINT"
    # After ``handled`` gave the handlers back, the command's cleanup has run: only its exit is left.
    when = "after the command ended" if _state["ran"] else "before the command started; nothing was run"
    try:
        os.write(2, f"error: interrupted by {name} {when}\n".encode())
    finally:
        os._exit(int(code))  # no SystemExit: an import under way could catch it


def quiet_start() -> None:
    """Until ``handled`` takes over (and after it gives back, when the command's cleanup has run), SIGINT exits 130 and
    SIGTERM 143 at once, with one ``error:`` line: for the entry point's first line, before its imports. A signal
    ignored at start (nohup, a background job of a script) stays ignored."""
    for signum in (signal.SIGINT, signal.SIGTERM):
        if signal.getsignal(signum) is not signal.SIG_IGN:
            signal.signal(signum, _exit_quietly)


@contextmanager
def handled(on_signal: Callable[[], None]) -> Iterator[None]:
    """Within the block, SIGINT raises ``KeyboardInterrupt`` and SIGTERM raises ``Terminated`` in the main
    thread, after ``on_signal()`` (which ends subprocesses). The previous handlers come back afterwards.
    Outside the main thread (a test runner's worker) nothing is installed."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _state["interrupted"] = False
    _state["ran"] = True

    def handler(signum: int, frame: FrameType | None) -> None:
        if _state["interrupted"]:
            return  # already stopping: let the cleanup finish
        _state["interrupted"] = True
        on_signal()
        if signum == signal.SIGTERM:
            raise Terminated()
        raise KeyboardInterrupt()

    previous: dict[int, Any] = {}
    for signum in (signal.SIGINT, signal.SIGTERM):
        if signal.getsignal(signum) is signal.SIG_IGN:
            continue  # started ignoring it (nohup, a background job of a script): keep ignoring it
        previous[signum] = signal.signal(signum, handler)
    try:
        yield
    finally:
        for restored, old in previous.items():
            signal.signal(restored, old)
