"""The one process helper runs a real child: echo, exit status, bounded output, timeout, a missing program."""

from __future__ import annotations

import os
import signal
import sys
import time

import pytest

from matrixtool.core import process
from matrixtool.core.errors import BuildError, ExitCode
from matrixtool.incontainer.vllm_smoke.bounded import OutputLimit

pytestmark = pytest.mark.subprocess


def test_run_echoes_and_returns_the_output(capsys: pytest.CaptureFixture[str]) -> None:
    done = process.run([sys.executable, "-c", "import sys; print('out'); print('err', file=sys.stderr)"])
    assert done.ok and done.stdout == "out\n" and done.stderr == "err\n"
    assert capsys.readouterr().err.startswith(f"+ {sys.executable} -c ")


def test_run_quiet_does_not_echo(capsys: pytest.CaptureFixture[str]) -> None:
    assert process.run([sys.executable, "-c", "pass"], quiet=True).ok
    assert capsys.readouterr().err == ""


def test_check_raises_the_callers_error_with_the_tail() -> None:
    code = "import sys; [print(i) for i in range(20)]; print('boom', file=sys.stderr); sys.exit(3)"
    with pytest.raises(BuildError) as caught:
        process.check(
            [sys.executable, "-c", code], quiet=True, error=lambda d: BuildError(f"exit {d.returncode}:\n{d.tail(3)}")
        )
    assert caught.value.exit_code == ExitCode.BUILD
    assert str(caught.value) == "exit 3:\n18\n19\nboom"


def test_output_is_bounded() -> None:
    done = process.run(
        [sys.executable, "-c", "print('x' * 100000)"], quiet=True, limit=OutputLimit(head_bytes=10, tail_bytes=10)
    )
    assert done.stdout.startswith("x" * 10) and "bytes of output left out" in done.stdout and len(done.stdout) < 100


def test_timeout_kills_the_child() -> None:
    done = process.run([sys.executable, "-c", "import time; time.sleep(60)"], quiet=True, timeout=0.5)
    assert done.returncode == process.TIMED_OUT
    assert "did not finish within 0 s" in done.stderr or "did not finish within 1 s" in done.stderr


def test_a_missing_program_is_a_failure_not_a_traceback() -> None:
    done = process.run(["/nonexistent/program-x"], quiet=True)
    assert done.returncode == process.NOT_FOUND and "cannot run /nonexistent/program-x" in done.stderr


def test_stream_hands_each_line_as_it_comes() -> None:
    lines: list[str] = []
    code = "import sys; print('a'); print('b', file=sys.stderr, flush=True); sys.exit(2)"
    assert process.stream([sys.executable, "-c", code], on_line=lines.append, quiet=True) == 2
    assert sorted(lines) == ["a\n", "b\n"]


def test_stream_ends_the_program_when_the_reader_fails() -> None:
    seen: list[str] = []

    def stop(line: str) -> None:
        seen.append(line)
        raise KeyboardInterrupt

    code = "import time; print('started', flush=True); time.sleep(60)"
    with pytest.raises(KeyboardInterrupt):
        process.stream([sys.executable, "-c", code], on_line=stop, quiet=True)
    assert seen == ["started\n"] and not process._running


def test_stream_of_a_missing_program() -> None:
    lines: list[str] = []
    assert process.stream(["/nonexistent/program-x"], on_line=lines.append, quiet=True) == process.NOT_FOUND
    assert lines and lines[0].startswith("cannot run /nonexistent/program-x")


def test_session_runs_a_group_of_its_own_that_terminate_running_ends(capsys: pytest.CaptureFixture[str]) -> None:
    # The child reads stdin (/dev/null: at once EOF), writes each stream, then leaves a grandchild and sleeps.
    code = (
        "import os, subprocess, sys, time; sys.stdin.read(); print(os.getpgid(0) == os.getpid(), flush=True); "
        "print('err', file=sys.stderr, flush=True); subprocess.Popen(['sleep', '600']); time.sleep(600)"
    )
    with process.session([sys.executable, "-c", code], error=lambda exc: BuildError(str(exc))) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        assert proc.stdout.readline() == b"True\n", "it leads its own process group"
        assert proc.stderr.readline() == b"err\n", "stderr is a stream of its own"
        process.terminate_running()
        assert proc.wait(30) == -signal.SIGTERM
        with pytest.raises(ProcessLookupError):
            for _ in range(100):  # the grandchild got its group's SIGTERM too
                os.killpg(proc.pid, 0)
                time.sleep(0.1)
        proc.stdout.close()
        proc.stderr.close()
    assert proc not in process._running, "no longer registered after the block"
    assert capsys.readouterr().err.startswith(f"+ {sys.executable} -c ")


def test_session_of_a_program_that_cannot_start_raises_the_callers_error() -> None:
    with (
        pytest.raises(BuildError, match="no-such-program"),
        process.session(["/no-such-program"], error=lambda exc: BuildError(f"cannot run {exc.filename}"), quiet=True),
    ):
        pass
