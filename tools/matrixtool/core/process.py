"""The one way the host tool runs a program: echoed (``+ argv`` on stderr), its output bounded, with a timeout,
and a failure turned into the caller's ``MatrixError`` (so its exit code is one of ``errors.MEANING``).

Like cibuildwheel's ``util/cmd.py`` ``call``. A program that cannot start (not installed, not executable) and
one that outlives its timeout are failures like a non-zero exit, with the exit status a shell gives them (127,
124) and the reason in ``stderr``, so each caller has one failure path and names the program."""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import IO, Any

from matrixtool.core import interrupts
from matrixtool.core.errors import MatrixError
from matrixtool.incontainer.vllm_smoke.bounded import DEFAULT_LIMIT, BoundedOutput, OutputLimit


def echo(argv: Sequence[str], *, via: str | None = None) -> None:
    """Print an external command the way it is about to run (``+ docker buildx build …``) to stderr.

    ``via``: what really runs it when it is not this command line but its equivalent through a library
    (``echo(["docker", "push", ref], via="Docker SDK")`` prints ``+ docker push REF  # Docker SDK``).
    """
    print("+ " + shlex.join(argv) + (f"  # {via}" if via else ""), file=sys.stderr, flush=True)


NOT_FOUND = 127  # the shell's status for a program it cannot run
TIMED_OUT = 124  # timeout(1)'s status for a program it stopped
TERMINATE_GRACE = 10.0  # seconds a streamed program gets to end after SIGTERM before it is killed

# The programs ``run``, ``stream`` and ``session`` run now (any thread): ended by ``terminate_running`` on a signal;
# ``_groups``: those leading a process group of their own (``session``), ended with their group.
_running: set[subprocess.Popen[Any]] = set()
_groups: set[subprocess.Popen[Any]] = set()
_running_lock = threading.RLock()  # re-entered by the signal handler (terminate_running) in the thread that holds it


@dataclass(frozen=True, kw_only=True)
class Completed:
    """A program that ran (or could not): its exit status and its output, each bounded (``OutputLimit``)."""

    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def tail(self, lines: int) -> str:
        """The last ``lines`` lines of stdout then stderr together, stripped: what a failure message quotes."""
        return "\n".join((self.stdout + self.stderr).strip().splitlines()[-lines:])


def _drain(stream: IO[bytes], sink: BoundedOutput) -> None:
    with stream:
        while chunk := stream.read1(1 << 16):  # type: ignore[attr-defined]
            sink.feed(chunk)


def run(
    argv: Sequence[str],
    *,
    timeout: float | None = None,
    quiet: bool = False,
    env: Mapping[str, str] | None = None,
    limit: OutputLimit = DEFAULT_LIMIT,
) -> Completed:
    """Run ``argv`` (echoed unless ``quiet``; stdin is ``/dev/null``) and wait for it, at most
    ``timeout`` seconds (then it is killed: status ``TIMED_OUT``). ``env`` replaces the environment when given.

    Never raises for the program's failure: a program that cannot start gives status ``NOT_FOUND`` with the
    OS's reason in ``stderr``; StartRefused where a worker thread asks after Ctrl-C/SIGTERM (``_start``). Output is
    decoded as UTF-8 (bad bytes replaced); each stream keeps ``limit``.
    """
    argv = tuple(argv)
    if not quiet:
        echo(argv)
    try:
        proc = _start(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    except OSError as exc:
        return Completed(argv=argv, returncode=NOT_FOUND, stdout="", stderr=f"cannot run {argv[0]}: {exc}")
    out, err = BoundedOutput(limit), BoundedOutput(limit)
    readers = [
        threading.Thread(target=_drain, args=(stream, sink), daemon=True)
        for stream, sink in ((proc.stdout, out), (proc.stderr, err))
    ]
    for reader in readers:
        reader.start()
    timed_out = False
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
    finally:
        if proc.poll() is None:  # timed out, or Ctrl-C/SIGTERM while waiting: never leave it running
            proc.kill()
            proc.wait()
        _forget(proc)
        for reader in readers:
            reader.join()
    if timed_out:
        note = f"{os.path.basename(argv[0])} did not finish within {timeout:.0f} s"
        return Completed(argv=argv, returncode=TIMED_OUT, stdout=out.text(), stderr=(err.text() + "\n" + note).lstrip())
    return Completed(argv=argv, returncode=proc.returncode, stdout=out.text(), stderr=err.text())


def check(
    argv: Sequence[str],
    *,
    error: Callable[[Completed], MatrixError],
    timeout: float | None = None,
    quiet: bool = False,
    env: Mapping[str, str] | None = None,
    limit: OutputLimit = DEFAULT_LIMIT,
) -> Completed:
    """Raises MatrixError (``error(completed)``; its class gives the exit code) for a non-zero exit, a program
    that cannot start, or a timeout."""
    done = run(argv, timeout=timeout, quiet=quiet, env=env, limit=limit)
    if not done.ok:
        raise error(done)
    return done


def _start(
    argv: Sequence[str], *, stdout: int, stderr: int, env: Mapping[str, str] | None, group: bool = False, **text: Any
) -> subprocess.Popen[Any]:
    """``argv`` started (stdin ``/dev/null``; ``group``: in a session and process group of its own) and held in
    ``_running`` for ``terminate_running``, both under ``interrupts.starting``: a worker thread's program started
    as the signal comes is there for the handler to end, and none starts after it.

    ``_running_lock`` is taken before ``starting``, never inside it: the handler (in the main thread, perhaps as
    that thread holds the lock in ``_forget``) waits for the starts under way, and one that waited inside for the
    lock would be waited for in vain (``GATE_WAIT_S``), then held in ``_running`` after ``terminate_running`` ran.

    Raises OSError where it cannot start, StartRefused (a worker thread, after the signal)."""
    with _running_lock, interrupts.starting(f"the program {argv[0]}"):
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=stderr,
            env=None if env is None else dict(env),
            start_new_session=group,
            **text,
        )
        _running.add(proc)
        if group:
            _groups.add(proc)
    return proc


def _forget(proc: subprocess.Popen[Any]) -> None:
    with _running_lock:
        _running.discard(proc)
        _groups.discard(proc)


def terminate_running() -> None:
    """Send SIGTERM to every program ``run``, ``stream`` and ``session`` run now (``docker buildx build``: BuildKit
    cancels a build whose client goes; a ``session``'s whole process group). Called from the CLI's signal handler:
    they may run in worker threads (``run --jobs``, the serve step's client) that the handler's exception does not
    reach."""
    with _running_lock:
        procs = list(_running)
    for proc in procs:
        if proc.poll() is None:
            with contextlib.suppress(OSError):
                if proc in _groups:
                    os.killpg(proc.pid, signal.SIGTERM)
                else:
                    proc.terminate()


def _stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(TERMINATE_GRACE)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def stream(
    argv: Sequence[str], *, on_line: Callable[[str], None], quiet: bool = False, env: Mapping[str, str] | None = None
) -> int:
    """Run ``argv`` (echoed unless ``quiet``), its stdout and stderr merged, handing each line as it comes (UTF-8, bad
    bytes replaced, with its line end) to ``on_line``; returns the exit status. A program that cannot start gives
    ``NOT_FOUND``, its reason handed to ``on_line`` as one line. Raises BaseException: what ``on_line`` raises, or
    Ctrl-C/SIGTERM (``Terminated``) while it runs: after the program got SIGTERM (and SIGKILL ``TERMINATE_GRACE``
    seconds later) and ended; StartRefused where a worker thread asks after the signal (``_start``)."""
    argv = tuple(argv)
    if not quiet:
        echo(argv)
    try:
        proc = _start(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, text=True, errors="replace")
    except OSError as exc:
        on_line(f"cannot run {argv[0]}: {exc}\n")
        return NOT_FOUND
    with proc:
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                on_line(line)
            return proc.wait()
        except BaseException:
            _stop(proc)
            raise
        finally:
            _forget(proc)


@contextlib.contextmanager
def session(
    argv: Sequence[str],
    *,
    error: Callable[[OSError], MatrixError],
    env: Mapping[str, str] | None = None,
    quiet: bool = False,
) -> Iterator[subprocess.Popen[bytes]]:
    """``with session(argv, error=...) as proc``: ``argv`` (echoed unless ``quiet``) started in a session and
    process group of its own, stdin ``/dev/null``, stdout and stderr two pipes (bytes) for the caller to read;
    ``env`` replaces the environment when given. While the block runs, ``terminate_running`` (Ctrl-C, SIGTERM)
    sends SIGTERM to its group; ending it otherwise, and waiting, is the caller's part.

    Raises MatrixError (``error(exc)``; its class gives the exit code) where the program cannot start,
    StartRefused where a worker thread asks after Ctrl-C/SIGTERM (``_start``)."""
    argv = tuple(argv)
    if not quiet:
        echo(argv)
    try:
        proc = _start(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, group=True)
    except OSError as exc:
        raise error(exc) from exc
    try:
        yield proc
    finally:
        _forget(proc)
