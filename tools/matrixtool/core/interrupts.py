"""SIGINT and SIGTERM: stop at once, clean up, exit 130 or 143.

Python's default SIGTERM ends the process without running a ``finally``, leaving the smoke container up and
``docker buildx build`` running; a second signal while cleaning up is ignored, so the cleanup finishes.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

from matrixtool.core.errors import ExitCode, Terminated

_state = {"interrupted": False}


def exit_code_of(exc: BaseException) -> ExitCode:
    """143 for ``Terminated`` (SIGTERM), 130 for any other ``KeyboardInterrupt`` (SIGINT, Ctrl-C)."""
    return ExitCode.TERMINATED if isinstance(exc, Terminated) else ExitCode.INTERRUPTED


@contextmanager
def handled(on_signal: Callable[[], None]) -> Iterator[None]:
    """Within the block, SIGINT raises ``KeyboardInterrupt`` and SIGTERM raises ``Terminated`` in the main
    thread, after ``on_signal()`` (which ends subprocesses). The previous handlers come back afterwards.
    Outside the main thread (a test runner's worker) nothing is installed."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _state["interrupted"] = False

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
