"""A start in a worker thread against the CLI's signal handler (``interrupts.starting``): one under way when the
signal comes is finished before the handler's cleanup begins, none begins after it, and the main thread's own
cleanup is never refused. Real signals to this process; the starts are stand-ins (pure logic of the gate)."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from matrixtool.core import interrupts, process
from matrixtool.core.errors import ExitCode, StartRefused, Terminated

# The handler's mark is undone after each test by tests/unit/conftest.py (``not_interrupted``).


def _in_worker(start: Callable[[], Any]) -> BaseException | Any:
    """What ``start()`` returned or raised, run in a thread of its own."""
    out: dict[str, Any] = {}

    def work() -> None:
        try:
            out["value"] = start()
        except BaseException as exc:  # the test reads what it was
            out["value"] = exc

    thread = threading.Thread(target=work)
    thread.start()
    thread.join(10)
    assert not thread.is_alive()
    return out["value"]


def _start(what: str) -> str:
    with interrupts.starting(what):
        return f"{what} started"


def test_before_the_signal_a_worker_starts_as_usual() -> None:
    with interrupts.handled(lambda: None):
        assert _in_worker(lambda: _start("a container")) == "a container started"


def test_after_the_signal_a_worker_starts_nothing_and_the_main_threads_cleanup_still_may() -> None:
    seen: list[str] = []
    with pytest.raises(Terminated), interrupts.handled(lambda: seen.append("on_signal")):
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(10)  # the handler raises Terminated here
        finally:
            seen.append(_start("the main thread's cleanup"))
            refused = _in_worker(lambda: _start("a restart's container"))
            program = _in_worker(lambda: process.run(["true"], quiet=True))
    assert seen == ["on_signal", "the main thread's cleanup started"]
    assert isinstance(refused, StartRefused) and refused.exit_code is ExitCode.INTERRUPTED
    assert str(refused) == "a restart's container was not started: the command is stopping on a signal"
    assert isinstance(program, StartRefused) and "the program true" in str(program)


def test_a_start_under_way_in_a_worker_ends_before_the_handlers_cleanup() -> None:
    order: list[str] = []
    entered, release = threading.Event(), threading.Event()

    def slow_start() -> None:
        with interrupts.starting("a slow docker run"):
            entered.set()
            release.wait(10)
            order.append("started")

    worker = threading.Thread(target=slow_start)
    with pytest.raises(KeyboardInterrupt), interrupts.handled(lambda: order.append("on_signal")):
        worker.start()
        assert entered.wait(10)
        threading.Timer(0.3, release.set).start()
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(10)  # the handler waits for the start, then raises here
    worker.join(10)
    assert order == ["started", "on_signal"]


def test_starts_in_two_workers_go_side_by_side() -> None:
    """Neither waits for the other (a profile run's containers beside the other's): each start waits, inside
    ``starting``, for the other to be inside its own."""
    inside = [threading.Event(), threading.Event()]
    saw_the_other: dict[int, bool] = {}

    def start(mine: int) -> None:
        with interrupts.starting(f"worker {mine}'s container"):
            inside[mine].set()
            # Each sets its own event in turn even where starts go one at a time: what shows they go side by
            # side is that each saw the other's while inside its own.
            saw_the_other[mine] = inside[1 - mine].wait(5)

    with interrupts.handled(lambda: None):
        workers = [threading.Thread(target=start, args=(i,)) for i in (0, 1)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(15)
    assert saw_the_other == {0: True, 1: True}


@pytest.mark.subprocess
def test_a_program_a_worker_starts_as_the_main_thread_holds_the_running_lock_is_refused_not_left_running(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The signal comes as the main thread holds ``process._running_lock`` (its own ``_forget``): a worker's
    ``process.run`` that waits for that lock must not be counted as a start under way (the handler would wait
    ``GATE_WAIT_S`` for it in vain, then end the programs before it registered its own, which ran on)."""
    monkeypatch.setattr(interrupts, "GATE_WAIT_S", 1.0)
    out: dict[str, Any] = {}

    def work() -> None:
        try:
            out["value"] = process.run(["sleep", "3"], quiet=True)
        except BaseException as exc:  # the test reads what it was
            out["value"] = exc

    worker = threading.Thread(target=work)
    with pytest.raises(KeyboardInterrupt), interrupts.handled(process.terminate_running), process._running_lock:
        worker.start()
        waited = time.monotonic()
        while interrupts._starting["workers"] == 0 and time.monotonic() - waited < 2.0:
            time.sleep(0.01)  # until the worker is inside ``starting``, or as far as it gets
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(10)  # the handler raises here
    worker.join(15)
    assert not worker.is_alive()
    assert isinstance(out["value"], StartRefused), out["value"]


def test_a_start_that_hangs_is_waited_for_only_gate_wait_s(monkeypatch: pytest.MonkeyPatch) -> None:
    """An engine that stopped answering holds the worker's ``docker run``: the handler's cleanup begins after
    ``GATE_WAIT_S`` all the same (its sweeps cannot reach that engine either)."""
    monkeypatch.setattr(interrupts, "GATE_WAIT_S", 0.5)
    order: list[str] = []
    entered, release = threading.Event(), threading.Event()

    def hung_start() -> None:
        with interrupts.starting("a docker run to a hung engine"):
            entered.set()
            release.wait(10)  # set once the handler's cleanup has run
            order.append("started")

    def on_signal() -> None:
        order.append("on_signal")
        release.set()

    worker = threading.Thread(target=hung_start)
    with pytest.raises(KeyboardInterrupt), interrupts.handled(on_signal):
        worker.start()
        assert entered.wait(10)
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(15)  # the handler raises here
    worker.join(15)
    assert order == ["on_signal", "started"]
