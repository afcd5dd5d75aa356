"""Unit tests of pure logic: an autouse guard makes them unable to reach a Docker engine or to start a program.

A unit test that must run a real program (``git``, ``hadolint``, a child Python) says so with
``@pytest.mark.subprocess`` (or ``pytestmark`` for a whole file); every other one that starts a process fails
with ``SubprocessBlocked`` naming the command line.
"""

from __future__ import annotations

import os
import subprocess
from typing import Any

import docker
import pytest

from matrixtool.core import interrupts


class _NoEngine(docker.errors.DockerException):
    pass


class SubprocessBlocked(BaseException):
    """A unit test started a process without ``@pytest.mark.subprocess``. A ``BaseException``, so the code
    under test cannot swallow it as an ``OSError`` or an unexpected ``Exception``."""


@pytest.fixture(autouse=True)
def not_interrupted(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI handler's mark (``interrupts.handled``) lasts until the next command, as the process ends first: a
    test that sends a signal through it (test_input_boundary.py, core/test_interrupts.py) would otherwise make every
    later test's start in a worker thread a ``StartRefused``. Undone after each test."""
    monkeypatch.setitem(interrupts._state, "interrupted", False)


@pytest.fixture(autouse=True)
def no_docker(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any attempt to create a Docker client fails, like an unreachable engine."""

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise _NoEngine("unit tests must not reach a Docker engine")

    monkeypatch.setattr(docker, "from_env", refuse)
    monkeypatch.setattr(docker, "DockerClient", refuse)


# Every way this code base (and the standard library under it) starts a program: subprocess.run/call/
# check_output/Popen and os.popen all end in Popen._execute_child; the os functions start one directly.
_OS_SPAWNS = ("system", "fork", "forkpty", "posix_spawn", "posix_spawnp", "execv", "execve", "execvp", "execvpe")


@pytest.fixture(autouse=True)
def no_subprocess(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Starting a process fails (``SubprocessBlocked``) unless the test is marked ``subprocess``."""
    if request.node.get_closest_marker("subprocess") is not None:
        return

    def refuse(what: str) -> Any:
        def blocked(*args: Any, **kwargs: Any) -> Any:
            argv = args[1] if what == "subprocess.Popen" and len(args) > 1 else args[:1]
            raise SubprocessBlocked(
                f"unit test started a process ({what}: {argv!r}); fake it, or mark the test @pytest.mark.subprocess"
            )

        return blocked

    monkeypatch.setattr(subprocess.Popen, "_execute_child", refuse("subprocess.Popen"))
    for name in _OS_SPAWNS:
        if hasattr(os, name):
            monkeypatch.setattr(os, name, refuse(f"os.{name}"))
