"""Child processes of a check: the package's programs (``programs/``, extracted from the zipapp once) and Python
code run in a child interpreter, and the marker line a program prints its answer on.

Standard library only, Python >= 3.9."""

from __future__ import annotations

import json
import os
import pkgutil
import signal
import subprocess
import sys
import threading
from typing import (
    Any,
    Callable,
    Dict,
    Generic,
    List,
    Mapping,
    Optional,
    Sequence,
    TypeVar,
)

WORK_DIR = os.environ.get("MATRIX_SMOKE_DIR", "/tmp/matrix-smoke")


# The tiny model's folder: MATRIX_MODEL_DIR where the host mounts a volume for it (the serve check mounts the same
# volume into the server), else in the work dir.
MODEL_DIR = os.environ.get("MATRIX_MODEL_DIR") or os.path.join(WORK_DIR, "tiny-llama")


PACKAGE = __name__.rpartition(".")[0]


def program_path(name: str) -> str:
    """The path of the program ``programs/<name>`` as a file: in the checkout itself (host mode), else extracted
    once from the zipapp into WORK_DIR/programs (the tool's tmpfs: nothing is written to the image's root)."""
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "programs", name)
    if os.path.isfile(here):
        return here
    target = os.path.join(WORK_DIR, "programs", name)
    if not os.path.isfile(target):
        data = pkgutil.get_data(PACKAGE, "programs/" + name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        partial = f"{target}.{os.getpid()}"
        if data is None:
            raise OSError(f"the package holds no programs/{name}")
        with open(partial, "wb") as f:
            f.write(data)
        os.replace(partial, target)
    return target


def run_python(
    code: str, env_overrides: Optional[Mapping[str, str]] = None, timeout: Optional[float] = None
) -> subprocess.CompletedProcess[str]:
    """Run ``python -c code`` in a child process; the CompletedProcess (text output)."""
    env = dict(os.environ)
    env.update(env_overrides or {})
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


def run_program(
    name: str,
    args: Sequence[str] = (),
    env_overrides: Optional[Mapping[str, str]] = None,
    timeout: Optional[float] = None,
) -> subprocess.CompletedProcess[str]:
    """Run the program ``programs/<name>`` with ``args`` in a child Python; the CompletedProcess (text output)."""
    env = dict(os.environ)
    env.update(env_overrides or {})
    return subprocess.run(
        [sys.executable, program_path(name), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def marked(proc: subprocess.CompletedProcess[str], mark: str) -> Any:
    """The JSON object a program printed after ``mark`` (e.g. ``MATRIX-TORCH``), or None."""
    for line in proc.stdout.splitlines():
        if line.startswith(mark + " "):
            return json.loads(line[len(mark) + 1 :])
    return None


def group_members(pgid: int, proc_root: str = "/proc") -> List[Dict[str, Any]]:
    """The live processes of process group ``pgid``: [{"pid", "cmd"}] from ``/proc/<pid>/stat`` (zombies left
    out: they are gone but for their parent's wait). Empty where ``proc_root`` cannot be read."""
    found: List[Dict[str, Any]] = []
    try:
        names = os.listdir(proc_root)
    except OSError:
        return found
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(os.path.join(proc_root, name, "stat"), encoding="utf-8", errors="replace") as f:
                stat = f.read()
            with open(os.path.join(proc_root, name, "cmdline"), "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()
        except OSError:
            continue
        fields = stat.rpartition(")")[2].split()  # after the command name, which may hold spaces
        if len(fields) >= 3 and fields[0] != "Z" and fields[2] == str(pgid):
            found.append({"pid": int(name), "cmd": cmd[:200]})
    return found


def kill_group(pgid: int, sig: int = signal.SIGKILL) -> bool:
    """Send ``sig`` to process group ``pgid``; False when it has no process left."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


J = TypeVar("J")
R = TypeVar("R")
KILL_GRACE = 10  # seconds between SIGTERM and SIGKILL to a group past its timeout


class Children:
    """The process groups a run started (each child leads its own); ``kill_all`` ends every one left, and a
    child started after it is ended at once."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.procs: set[subprocess.Popen[bytes]] = set()
        self.closed = False

    def start(self, argv: Sequence[str], env: Mapping[str, str]) -> subprocess.Popen[bytes]:
        """Start ``argv`` with ``env`` as the leader of a process group of its own, stdout and stderr one pipe."""
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
        with self.lock:
            self.procs.add(proc)
            closed = self.closed
        if closed:
            kill_group(proc.pid)
        return proc

    def done(self, proc: subprocess.Popen[bytes]) -> None:
        with self.lock:
            self.procs.discard(proc)

    def kill_all(self) -> None:
        with self.lock:
            self.closed = True
            procs = list(self.procs)
        for proc in procs:
            kill_group(proc.pid)


class Parallel(Generic[J]):
    """``jobs`` run by up to ``workers`` daemon threads, in order (``run``); ``stop`` leaves the jobs no thread
    has taken yet unstarted.

    Daemon threads, and a main thread that waits in short joins: Ctrl-C and SIGTERM reach the main thread at once
    and its cleanup ends what the jobs started, never waiting for a job to finish."""

    def __init__(self, jobs: Sequence[J]) -> None:
        self._pending = list(enumerate(jobs))
        self._lock = threading.Lock()

    def stop(self) -> None:
        with self._lock:
            self._pending.clear()

    def run(self, workers: int, work: Callable[[J], R]) -> list[R]:
        """``work`` over the jobs on up to ``workers`` threads; the results of the jobs that ran, in the order of
        the jobs. The first exception of a job is raised here once every thread is done."""
        results: dict[int, R] = {}
        errors: list[BaseException] = []

        def worker() -> None:
            while True:
                with self._lock:
                    if not self._pending or errors:
                        return
                    index, job = self._pending.pop(0)
                try:
                    results[index] = work(job)
                except BaseException as exc:  # re-raised in the caller's thread
                    with self._lock:
                        errors.append(exc)
                    return

        with self._lock:
            count = len(self._pending)
        threads = [threading.Thread(target=worker, daemon=True) for _ in range(max(1, min(workers, count)))]
        for thread in threads:
            thread.start()
        for thread in threads:
            while thread.is_alive():
                thread.join(0.5)  # short joins: a signal reaches the main thread at once
        if errors:
            raise errors[0]
        return [results[i] for i in sorted(results)]
