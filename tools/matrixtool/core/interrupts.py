"""SIGINT and SIGTERM: stop at once, clean up, exit 130 or 143.

Python's default SIGTERM ends the process without running a ``finally``, leaving the smoke container up and
``docker buildx build`` running; a second signal while cleaning up is ignored, so the cleanup finishes.

Before a command runs (the imports of start-up, click parsing its flags) there is nothing to clean up: ``quiet_start``
makes a signal then end the process at once with one line and its code, not a ``KeyboardInterrupt`` traceback.

Worker threads (profile runs side by side, the serve step's server, ``run --jobs``) go on after the signal: what one
of them starts (a container, a volume, a program) goes through ``starting``, so that a start under way when the
signal comes is finished before the cleanup looks for it, and none begins after it.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

from matrixtool.core.errors import ExitCode, StartRefused, Terminated

_state = {"interrupted": False, "ran": False}
# The starts under way in threads other than the main one (``starting``), counted under the condition's lock (an
# RLock: the handler may run in the main thread while it holds it); the handler waits for none to be left.
_gate = threading.Condition(threading.RLock())
_starting = {"workers": 0}
# Seconds the handler waits for that start (a ``docker run`` answers in about a second here; an engine that stopped
# answering is not waited for longer: the sweeps cannot reach it either).
GATE_WAIT_S = 30.0


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
def starting(what: str) -> Iterator[None]:
    """Around the start of ``what`` (a container, a volume, a program; named in the error) in any thread; starts
    in several threads go on side by side. Raises StartRefused in a thread other than the main one once
    ``handled``'s handler has run: the main thread is cleaning up, its sweeps may be over, and what started now
    would outlive the command. The main thread's own cleanup is never refused (it runs in order, under its own
    ``finally``), nor waited for."""
    if threading.current_thread() is threading.main_thread():
        yield
        return
    with _gate:
        if _state["interrupted"]:
            raise StartRefused(f"{what} was not started: the command is stopping on a signal")
        _starting["workers"] += 1
    try:
        yield
    finally:
        with _gate:
            _starting["workers"] -= 1
            _gate.notify_all()


@contextmanager
def handled(on_signal: Callable[[], None]) -> Iterator[None]:
    """Within the block, SIGINT raises ``KeyboardInterrupt`` and SIGTERM raises ``Terminated`` in the main
    thread, after ``on_signal()`` (which ends subprocesses) and after any start under way in another thread
    (``starting``), which none may begin from then on. The previous handlers come back afterwards.
    Outside the main thread (a test runner's worker) nothing is installed."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _state["interrupted"] = False
    _state["ran"] = True

    def handler(signum: int, frame: FrameType | None) -> None:
        if _state["interrupted"]:
            return  # already stopping: let the cleanup finish
        with _gate:  # a start under way in a worker thread ends first
            _state["interrupted"] = True
            _gate.wait_for(lambda: _starting["workers"] == 0, timeout=GATE_WAIT_S)
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
