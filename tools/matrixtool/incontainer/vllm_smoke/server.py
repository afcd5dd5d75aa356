"""The ``serve`` check as a child process of the environment under test (a host, a pod, a bundle run in a
container): ``vllm serve MODEL OPTIONS --host 127.0.0.1 --port PORT`` in a process group of its own, probed with
``programs/serve_probe`` (the same requests the container check sends), stopped with SIGTERM during a stream.

Standard library only, Python >= 3.9. ``observe`` starts, probes and stops the server and returns what it saw
(the keys of ``matrixtool.smoke.serve.Observed``); ``serving.judge`` turns that into a result.

Cold and warm start, as the container check measures them: compiled (not ``--enforce-eager``), both starts run on
one fresh cache folder made for this run under the environment's cache root (``XDG_CACHE_HOME``, else
``~/.cache``: in a pod, where its volume is), laid out as the images lay out theirs (``cache_env``), and removed
afterwards; the warm start, the same argv and environment, begins after the cold server's stop (on a GPU both would
hold its memory), is ready, stopped and judged by ``compilecache``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Any, Dict, List, Mapping, Optional, Sequence, Set

from . import compilecache
from .children import group_members, kill_group
from .programs import serve_probe
from .servecache import cache_base, cache_env, cache_unwritable, filesystem, list_files, make_cache, read_text
from .serving import phases_seen, shutdown_errors, stream_outcome
from .shutdown import shutdown_verdict

# Seconds a process of the server's group may take to go after the server exited.
GROUP_SETTLE_S = 5.0


EAGER = "--enforce-eager"


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (the kernel's pick; the server binds it moments later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def vllm_command(python: Any = None) -> Any:
    """How to start ``vllm`` in the environment of ``python`` (default: this interpreter): its ``vllm`` console
    script beside it, else the one on PATH, else ``python -m vllm.entrypoints.cli.main``."""
    python = python or sys.executable
    beside = os.path.join(os.path.dirname(python), "vllm")
    if os.path.isfile(beside) and os.access(beside, os.X_OK):
        return [beside]
    from shutil import which

    found = which("vllm")
    return [found] if found else [python, "-m", "vllm.entrypoints.cli.main"]


def server_argv(model: Any, options: Any, port: int, vllm: Any = None) -> List[Any]:
    """``vllm serve MODEL OPTIONS --host 127.0.0.1 --port PORT``."""
    return [*(vllm or vllm_command()), "serve", model, *options, "--host", "127.0.0.1", "--port", str(port)]


# The servers started and not yet closed (an interrupted run closes them).
ACTIVE: Set[Server] = set()


class Server:
    """``argv`` as a child in a session (and process group) of its own, its output to ``log_path``; ``close``
    kills whatever is left of the group (also on an interrupt: ``ACTIVE`` holds the live ones)."""

    def __init__(self, argv: Sequence[str], env: Mapping[str, str], log_path: Any) -> None:
        self.argv, self.log_path = list(argv), log_path
        self.log_file = open(log_path, "wb")  # noqa: SIM115 (closed by close())
        self.proc = subprocess.Popen(
            self.argv, env=env, stdout=self.log_file, stderr=subprocess.STDOUT, start_new_session=True
        )
        self.pgid = self.proc.pid
        ACTIVE.add(self)

    def log(self) -> str:
        """The server's output so far."""
        if not self.log_file.closed:
            self.log_file.flush()
        return read_text(self.log_path)

    def close(self) -> None:
        """SIGKILL to what is left of the group, reap the server, close the log."""
        kill_group(self.pgid)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(10)
        ends = time.monotonic() + GROUP_SETTLE_S  # SIGKILL lands at once, the kernel's teardown a moment later
        while group_members(self.pgid) and time.monotonic() < ends:
            time.sleep(0.1)
        self.log_file.close()
        ACTIVE.discard(self)


def stop_during_stream(
    server: Server, base: str, body: Mapping[str, Any], grace_s: float, first_chunk_s: float
) -> Dict[str, Any]:
    """SIGTERM to the server while ``body`` streams: its exit status and the seconds to it (None past ``grace_s``:
    then SIGKILL to the group), how the stream ended, and the group's processes left after the exit."""
    first = threading.Event()
    box: Dict[str, Any] = {}

    def work() -> None:
        box.update(serve_probe.stream(base, body, on_first=first.set, timeout=300.0))

    streamed_at = time.monotonic()
    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    in_flight = first.wait(first_chunk_s)
    began = time.monotonic()
    server.proc.send_signal(signal.SIGTERM)  # the server alone, as `docker stop` and the kubelet signal PID 1
    try:
        code = server.proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        code = None
    seconds = round(time.monotonic() - began, 1)
    left = []
    if code is not None:
        ends = time.monotonic() + GROUP_SETTLE_S
        left = group_members(server.pgid)
        while left and time.monotonic() < ends:
            time.sleep(0.2)
            left = group_members(server.pgid)
    killed = kill_group(server.pgid) if code is None or left else False
    if code is None:
        server.proc.wait(10)
    thread.join(30.0)
    stream = dict(box) if not thread.is_alive() else {"error": "the stream did not end within 30 s"}
    ended_before = stream.get("seconds") is not None and streamed_at + float(stream["seconds"]) < began
    log = server.log()
    return {
        "grace_s": grace_s,
        "signal": "SIGTERM",
        "server": " ".join(server.argv),
        "in_flight": in_flight,
        "exit_code": code,
        "killed_after_grace": code is None,
        "seconds": seconds,
        "left_in_group": left,
        "group_killed": bool(killed),
        "stream": stream_outcome(stream) + (" before SIGTERM was sent" if ended_before else ""),
        "stream_ended_before_stop": ended_before,
        "shutdown_errors": shutdown_errors(log),
        "shutdown": shutdown_verdict(log),
        "log": log,
    }


def _wait_ready(server: Any, base: str, started: Any, timeout_s: Any, seen: Any) -> Any:
    """Poll /health until 200 (seconds since ``started``), the server's exit or ``timeout_s``: (ready_s or None,
    exit code or None); the phases seen go to ``seen``."""
    while time.monotonic() - started < timeout_s:
        code = server.proc.poll()
        phases_seen(server.log(), time.monotonic() - started, seen)
        if code is not None:
            return None, code
        if serve_probe.health(base).get("status") == 200:
            return round(time.monotonic() - started, 1), None
        time.sleep(1.0)
    return None, None


def _stop(server: Any, grace_s: Any) -> Any:
    """SIGTERM to the server's whole group, SIGKILL past ``grace_s`` seconds, then nothing of the group left
    (``Server.close``); the server's exit status (None: killed after the grace)."""
    kill_group(server.pgid, signal.SIGTERM)
    try:
        code = server.proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        code = None
    server.close()
    return code


def start_warm(
    argv: Sequence[str], env: Mapping[str, str], log_path: Any, timeout_s: Any, grace_s: Any
) -> Dict[str, Any]:
    """The warm start: ``argv`` with ``env`` (the cold server's), its output to ``log_path``, ready within
    ``timeout_s`` or not, then stopped (``_stop``). Its ``ready_s``, ``phases``, ``exit_code`` (None: ready or timed
    out), ``log`` and ``stop_exit_code``."""
    started = time.monotonic()
    server = Server(argv, env, log_path)
    seen: Dict[str, Any] = {}
    try:
        ready_s, code = _wait_ready(server, f"http://127.0.0.1:{argv[-1]}", started, timeout_s, seen)
        stopped = _stop(server, grace_s) if ready_s is not None else None
        return {"ready_s": ready_s, "phases": seen, "exit_code": code, "log": server.log(),
                "stop_exit_code": stopped}  # fmt: skip
    finally:
        server.close()


def observe(
    spec: Mapping[str, Any], log_path: Any, env: Optional[Mapping[str, str]] = None, deadline: Optional[float] = None
) -> Any:
    """Start the server of ``spec`` and wait for /health 200 (readiness stops the moment it exits), probe it,
    stop it during a stream; compiled (no ``--enforce-eager`` among the options), on a fresh cache folder, then the
    warm start on it (``start_warm``), ready by ``deadline`` (``time.monotonic()``; None: within the ready timeout)
    or skipped with the reason. ``spec``: {"model", "options", "ready_timeout_s", "stop_grace_s", "prompt",
    "max_tokens", "stream_tokens", "first_chunk_s"} and optionally "vllm" (the command, default
    ``vllm_command()``). Returns {"ready_s", "phases", "exit_code", "probes", "stop", "log", "argv"} and, compiled,
    "warm" (``start_warm``'s, its "cache_listing" added, or {"skipped"}), "cache_root" (the fresh folder),
    "cache_listing" (its files after the cold server's stop), "cache_filesystem"; "cache_error" (name, cause,
    diagnosis, fix) where the folder cannot be made (then no server starts). Every server's group is gone and the
    folder removed on return, whatever happened (an exception or an interrupt included)."""
    port = free_port()
    argv = server_argv(spec["model"], spec["options"], port, spec.get("vllm"))
    env = dict(os.environ if env is None else env)
    if EAGER in spec["options"]:
        return dict(_observe_cold(spec, argv, env, log_path), warm={"skipped": compilecache.WARM_SKIPPED_EAGER})
    try:
        cache = make_cache(env)
    except OSError as exc:
        error = cache_unwritable(cache_base(env), exc)
        return {"ready_s": None, "phases": {}, "exit_code": None, "log": "", "argv": argv, "cache_error": error}
    try:
        env.update(cache_env(cache))
        seen = _observe_cold(spec, argv, env, log_path)
        seen.update(cache_root=cache, cache_listing=list_files(cache), cache_filesystem=filesystem(cache))
        if seen["ready_s"] is None:
            return seen
        left, skipped = compilecache.warm_budget(float(spec["ready_timeout_s"]), deadline, time.monotonic())
        if skipped is not None:
            seen["warm"] = {"skipped": skipped}
            return seen
        warm_log = log_path + ".warm"
        try:
            warm = start_warm(argv, env, warm_log, left, int(spec["stop_grace_s"]))
        except Exception as exc:  # the check fails with it (warm_problems); the cold start's result stands
            warm = {"error": f"{type(exc).__name__}: {exc}", "log": ""}
        finally:
            with contextlib.suppress(OSError):
                os.unlink(warm_log)
        if warm.get("ready_s") is not None:
            warm["cache_listing"] = list_files(cache)
        with open(log_path, "a", encoding="utf-8") as f:
            f.write(f"\n{compilecache.WARM_LOG_MARK}\n{warm['log']}")
        seen["warm"] = warm
        return seen
    finally:
        shutil.rmtree(cache, ignore_errors=True)


def _observe_cold(
    spec: Mapping[str, Any], argv: Sequence[str], env: Mapping[str, str], log_path: Any
) -> Dict[str, Any]:
    """The cold start of ``observe``: ready, probed, stopped during a stream; its group gone on return."""
    base = f"http://127.0.0.1:{argv[-1]}"
    started = time.monotonic()
    server = Server(argv, env, log_path)
    seen: Dict[str, Any] = {}
    try:
        ready_s, code = _wait_ready(server, base, started, float(spec["ready_timeout_s"]), seen)
        if ready_s is None:
            return {"ready_s": None, "phases": seen, "exit_code": code, "log": server.log(), "argv": argv}
        probe_spec = {"model": spec["model"], "prompt": spec["prompt"], "max_tokens": spec["max_tokens"]}
        probes = serve_probe.probe(base, probe_spec)
        body = serve_probe.completion_body(dict(probe_spec, max_tokens=spec["stream_tokens"]), True)
        stop = stop_during_stream(server, base, body, int(spec["stop_grace_s"]), float(spec["first_chunk_s"]))
        log = stop.pop("log", "")
        return {"ready_s": ready_s, "phases": seen, "exit_code": None, "probes": probes, "stop": stop, "log": log,
                "argv": argv}  # fmt: skip
    finally:
        server.close()
