"""The ``serve`` check as a child process of the environment under test (a host, a pod, a bundle run in a
container): ``vllm serve MODEL OPTIONS --host 127.0.0.1 --port PORT`` in a process group of its own, probed with
``programs/serve_probe`` (the same requests the container check sends), stopped with SIGTERM during a stream.

Standard library only, Python >= 3.9. ``observe`` starts, probes and stops the server and returns what it saw
(the keys of ``matrixtool.smoke.serve.Observed``); ``judge`` turns that into a result. The process-level stop contract:
SIGTERM to the server during a streaming request, exit 0 or -15 (the signal's own default action) within the
grace, and no process of its group left once it exited (``group_members``).

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
import tempfile
import threading
import time

from . import compilecache, servediag
from .programs import serve_probe

CHECK = "serve"
# Lines of vLLM's start-up log that open a phase (time to ready, per phase); the container check reads them too.
PHASES = (
    ("cli", "non-default args"),
    ("engine core", "Initializing a V1 LLM engine"),
    ("model load", "Starting to load model"),
    ("compile/warm-up", "Warming up model"),
    ("api server", "Starting vLLM server"),
)
# vLLM's error lines while it stops on SIGTERM (the engine core is torn down under the API server's output
# handler): reported, not failed on, as the contract is the exit code and the time.
SHUTDOWN_ERRORS = ("output_handler failed", "EngineDeadError", "leaked shared_memory")
# Requests of ``serve_probe.probe`` that the engine finishes (completion, stream, chat).
GENERATION_REQUESTS = 3
# Exit statuses the stop contract accepts: 0 (a drained shutdown) or -15 (SIGTERM's default action, as
# ``subprocess`` reports a process ended by a signal).
STOP_EXITS = (0, -signal.SIGTERM)
# Seconds a process of the server's group may take to go after the server exited.
GROUP_SETTLE_S = 5.0
LOG_TAIL = 4000  # characters of the server's log a diagnosis quotes at most
EAGER = "--enforce-eager"
# The folders of the fresh cache below its root, as the images set them (templates/Dockerfile.j2:
# XDG_CACHE_HOME=/tmp/.cache, TORCHINDUCTOR_CACHE_DIR and TRITON_CACHE_DIR below it; vLLM's VLLM_CACHE_ROOT
# defaults to $XDG_CACHE_HOME/vllm).
CACHE_DIRS = (("VLLM_CACHE_ROOT", "vllm"), ("TORCHINDUCTOR_CACHE_DIR", "torchinductor"), ("TRITON_CACHE_DIR", "triton"))
CACHE_PREFIX = "vllm-smoke-cache-"


def free_port():
    """A TCP port free on 127.0.0.1 now (the kernel's pick; the server binds it moments later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def vllm_command(python=None):
    """How to start ``vllm`` in the environment of ``python`` (default: this interpreter): its ``vllm`` console
    script beside it, else the one on PATH, else ``python -m vllm.entrypoints.cli.main``."""
    python = python or sys.executable
    beside = os.path.join(os.path.dirname(python), "vllm")
    if os.path.isfile(beside) and os.access(beside, os.X_OK):
        return [beside]
    from shutil import which

    found = which("vllm")
    return [found] if found else [python, "-m", "vllm.entrypoints.cli.main"]


def server_argv(model, options, port, vllm=None):
    """``vllm serve MODEL OPTIONS --host 127.0.0.1 --port PORT``."""
    return [*(vllm or vllm_command()), "serve", model, *options, "--host", "127.0.0.1", "--port", str(port)]


def phases_seen(log, seconds, seen):
    """Record in ``seen`` each phase whose opening line is in ``log`` for the first time at ``seconds``."""
    for name, marker in PHASES:
        if name not in seen and marker in log:
            seen[name] = round(seconds, 1)


def group_members(pgid, proc_root="/proc"):
    """The live processes of process group ``pgid``: [{"pid", "cmd"}] from ``/proc/<pid>/stat`` (zombies left
    out: they are gone but for their parent's wait). Empty where ``proc_root`` cannot be read."""
    found = []
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


def kill_group(pgid, sig=signal.SIGKILL):
    """Send ``sig`` to process group ``pgid``; False when it has no process left."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _read(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def stream_outcome(stream):
    """How the stop contract's stream ended, in words (the container check's too)."""
    chunks = len(stream.get("chunks") or [])
    if stream.get("done"):
        return f"completed ([DONE] after {chunks} chunks)"
    if stream.get("error"):
        return f"cut after {chunks} chunks: {stream['error']}"
    return f"closed after {chunks} chunks without [DONE]"


def shutdown_errors(log):
    """The lines after vLLM's "[shutdown]" that name one of ``SHUTDOWN_ERRORS`` (first 3)."""
    _, _, after = log.partition("[shutdown]")
    return [line.strip() for line in after.splitlines() if any(e in line for e in SHUTDOWN_ERRORS)][:3]


# The servers started and not yet closed (an interrupted run closes them).
ACTIVE = set()


class Server:
    """``argv`` as a child in a session (and process group) of its own, its output to ``log_path``; ``close``
    kills whatever is left of the group (also on an interrupt: ``ACTIVE`` holds the live ones)."""

    def __init__(self, argv, env, log_path):
        self.argv, self.log_path = list(argv), log_path
        self.log_file = open(log_path, "wb")  # noqa: SIM115 (closed by close())
        self.proc = subprocess.Popen(
            self.argv, env=env, stdout=self.log_file, stderr=subprocess.STDOUT, start_new_session=True
        )
        self.pgid = self.proc.pid
        ACTIVE.add(self)

    def log(self):
        """The server's output so far."""
        if not self.log_file.closed:
            self.log_file.flush()
        return _read(self.log_path)

    def close(self):
        """SIGKILL to what is left of the group, reap the server, close the log."""
        kill_group(self.pgid)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(10)
        ends = time.monotonic() + GROUP_SETTLE_S  # SIGKILL lands at once, the kernel's teardown a moment later
        while group_members(self.pgid) and time.monotonic() < ends:
            time.sleep(0.1)
        self.log_file.close()
        ACTIVE.discard(self)


def stop_during_stream(server, base, body, grace_s, first_chunk_s):
    """SIGTERM to the server while ``body`` streams: its exit status and the seconds to it (None past ``grace_s``:
    then SIGKILL to the group), how the stream ended, and the group's processes left after the exit."""
    first = threading.Event()
    box = {}

    def work():
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
        "log": log,
    }


def cache_base(env):
    """The environment's cache root, where the fresh cache folder is made: ``XDG_CACHE_HOME`` (absolute), else
    ``$HOME/.cache``, else the user's home from the password database (``~/.cache``)."""
    home = env.get("HOME") or os.path.expanduser("~")
    return compilecache.cache_root(dict(env, HOME=home))


def cache_env(folder):
    """The variables that put every compile cache of a server under ``folder``: ``XDG_CACHE_HOME`` itself and
    ``CACHE_DIRS`` below it."""
    out = {"XDG_CACHE_HOME": folder}
    out.update((name, os.path.join(folder, sub)) for name, sub in CACHE_DIRS)
    return out


def make_cache(env):
    """A fresh folder under ``cache_base(env)`` (made where missing) with ``CACHE_DIRS`` inside: its path.
    Raises OSError where it cannot be made or written."""
    base = cache_base(env)
    os.makedirs(base, exist_ok=True)
    folder = tempfile.mkdtemp(prefix=CACHE_PREFIX, dir=base)
    try:
        for _, sub in CACHE_DIRS:
            os.mkdir(os.path.join(folder, sub))
        with tempfile.TemporaryFile(dir=folder):
            pass
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    return folder


def cache_unwritable(base, exc):
    """(name, cause, diagnosis, fix) of a cache folder that cannot be made under ``base`` (``exc``, the OSError)."""
    cause = f"{type(exc).__name__}: {exc}"
    return (
        "compile-cache-unwritable",
        cause,
        f"no folder can be made and written under the cache root {base}, where vLLM, inductor and Triton keep "
        "their compile caches: every start of the server fails or compiles again",
        f"make {base} writable by this user (UID {os.getuid()}), or point XDG_CACHE_HOME at a writable folder; in a "
        "pod, " + compilecache.unwritable_fix(base),
    )


def list_files(root):
    """The files under ``root``, one path relative to it a line, sorted (empty where it cannot be read)."""
    found = []
    for folder, _, files in os.walk(root):
        found += [os.path.relpath(os.path.join(folder, f), root) for f in files]
    return "\n".join(sorted(found))


def filesystem(path, mounts="/proc/mounts"):
    """The file system type of the mount holding ``path`` (``/proc/mounts``' longest mount point above it), ""
    where unknown."""
    path = os.path.realpath(path)
    best, kind = "", ""
    try:
        with open(mounts, encoding="utf-8", errors="replace") as f:
            for line in f:
                fields = line.split()
                if len(fields) < 3:
                    continue
                point = fields[1].replace("\\040", " ")
                inside = path == point or path.startswith(point.rstrip("/") + "/")
                if inside and len(point) >= len(best):
                    best, kind = point, fields[2]
    except OSError:
        return ""
    return kind


def _wait_ready(server, base, started, timeout_s, seen):
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


def _stop(server, grace_s):
    """SIGTERM to the server's whole group, SIGKILL past ``grace_s`` seconds, then nothing of the group left
    (``Server.close``); the server's exit status (None: killed after the grace)."""
    kill_group(server.pgid, signal.SIGTERM)
    try:
        code = server.proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        code = None
    server.close()
    return code


def start_warm(argv, env, log_path, timeout_s, grace_s):
    """The warm start: ``argv`` with ``env`` (the cold server's), its output to ``log_path``, ready within
    ``timeout_s`` or not, then stopped (``_stop``). Its ``ready_s``, ``phases``, ``exit_code`` (None: ready or timed
    out), ``log`` and ``stop_exit_code``."""
    started = time.monotonic()
    server = Server(argv, env, log_path)
    seen = {}
    try:
        ready_s, code = _wait_ready(server, f"http://127.0.0.1:{argv[-1]}", started, timeout_s, seen)
        stopped = _stop(server, grace_s) if ready_s is not None else None
        return {"ready_s": ready_s, "phases": seen, "exit_code": code, "log": server.log(),
                "stop_exit_code": stopped}  # fmt: skip
    finally:
        server.close()


def observe(spec, log_path, env=None, deadline=None):
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


def _observe_cold(spec, argv, env, log_path):
    """The cold start of ``observe``: ready, probed, stopped during a stream; its group gone on return."""
    base = f"http://127.0.0.1:{argv[-1]}"
    started = time.monotonic()
    server = Server(argv, env, log_path)
    seen = {}
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


def _loads(text):
    import json

    return json.loads(text)


def choice(answer):
    """The first choice of a JSON answer's body ({} when unreadable)."""
    try:
        return dict(_loads(answer.get("body") or "{}")["choices"][0])
    except (ValueError, KeyError, IndexError, TypeError):
        return {}


def streamed(stream):
    """The text and token ids of a streamed completion, its chunks joined."""
    text, tokens = "", []
    for chunk in stream.get("chunks") or []:
        try:
            part = _loads(chunk)["choices"][0]
        except (ValueError, KeyError, IndexError, TypeError):
            continue
        text += part.get("text") or ""
        tokens += list(part.get("token_ids") or [])
    return text, tokens


def counted_requests(metrics):
    """The finished requests vLLM's /metrics counts (``vllm:request_success_total``, every finished_reason)."""
    total = 0.0
    for line in metrics.splitlines():
        if line.startswith("vllm:request_success_total"):
            with contextlib.suppress(ValueError, IndexError):
                total += float(line.rsplit(" ", 1)[1])
    return int(total)


def root_cause(log):
    """The root-cause line of a server log (``vllmchecks.root_cause``), else its last line."""
    from .vllmchecks import root_cause as cause_of

    found = cause_of(log)
    if found:
        return found
    lines = [line.strip() for line in log.splitlines() if line.strip()]
    return lines[-1] if lines else "no log"


def stop_problems(stop):
    """The process-level stop contract's failures: no stream in flight, an exit other than 0/-15, no exit within
    the grace (SIGKILL), a stop slower than the grace, processes of the server's group left after its exit."""
    out = []
    if not stop.get("in_flight"):
        out.append("no streaming request was in flight when SIGTERM was sent")
    code, grace = stop.get("exit_code"), stop.get("grace_s")
    if stop.get("killed_after_grace"):
        out.append(
            f"SIGTERM during a stream: no exit within the {grace} s grace (SIGKILL); the stream {stop.get('stream')}"
        )
    elif code not in STOP_EXITS:
        out.append(
            f"SIGTERM during a stream: exit {code} after {stop.get('seconds')} s; the stream {stop.get('stream')}"
        )
    elif float(stop.get("seconds") or 0) > float(grace or 0):
        out.append(f"the server took {stop.get('seconds')} s to exit on SIGTERM, over the {grace} s grace")
    left = stop.get("left_in_group") or []
    if left:
        named = ", ".join(f"{p['pid']} {p['cmd'][:60]}" for p in left[:3])
        out.append(f"{len(left)} process(es) of the server's group left after it exited ({named})")
    return out


def judge(seen, spec, expected_tokens):
    """(status, diagnosis, hint, facts) of one server run, asserting what ``matrixtool.smoke.serve.check.judge``
    asserts of a container: ready, the routes' answers (``answer_problems``; ``expected_tokens``: offline-generate's
    eager tokens, None: not compared, said so); then the process-level stop contract (``stop_problems``) and the
    warm start (``warm_problems``). A cache folder that could not be made (``cache_error``) fails it as class 31."""
    facts = {"ready_s": seen.get("ready_s"), "phases": dict(seen.get("phases") or {}), "argv": seen.get("argv")}
    log = seen.get("log") or ""
    if seen.get("cache_error"):
        name, cause, diagnosis, fix = seen["cache_error"]
        facts.update(failure_class=compilecache.COMPILE_CACHE, warm={"failure": name, "cause": cause})
        return "failed", f"no server started: {name}: {diagnosis}: {cause}", fix, facts
    if seen.get("ready_s") is None:
        cause = root_cause(log)
        facts["log_tail"] = log[-LOG_TAIL:]
        if seen.get("exit_code") is not None:
            facts["exit_code"] = seen["exit_code"]
            return (
                "failed",
                f"the server exited ({seen['exit_code']}) before it was ready: {cause}",
                "read the server's log (the root cause is logged before vLLM's wrappers)",
                facts,
            )
        return (
            "failed",
            f"/health did not answer 200 within {spec['ready_timeout_s']} s (last log line: {cause})",
            "read the server's log; a probe must outlast a cold start (compile) on this machine",
            facts,
        )
    probes = seen.get("probes") or {}
    if not probes:
        return "failed", "the server was ready but no request was sent", "", facts
    pinned = str(spec.get("vllm_version") or "").split("+")[0]
    problems = answer_problems(probes, spec["model"], expected_tokens, pinned, facts)
    stop = dict(seen.get("stop") or {})
    facts["stop"] = stop
    problems += stop_problems(stop)
    hints = []
    warm = warm_problems(seen, facts, problems, hints)
    budget = spec.get("ready_budget_s")
    if budget is not None and seen["ready_s"] > float(budget):
        facts["ready_budget_s"] = budget
        problems.append(f"ready after {seen['ready_s']:.0f} s, over its ready_budget of {float(budget):.0f} s")
    if problems:
        return "failed", "; ".join(problems), "; ".join(hints) or "read the server's log", facts
    summary = (
        f"ready in {seen['ready_s']:.0f} s; models, greedy completion"
        f"{' == offline-generate' if expected_tokens is not None else ' (no offline-generate tokens to compare)'}, "
        f"stream, chat, metrics ({facts['metrics_requests']}), version {facts['version']}; stop: exit "
        f"{stop.get('exit_code')} in {stop.get('seconds')} s, stream {stop.get('stream')}, no process left"
    )
    return "passed", summary + warm, "", facts


def answer_problems(probes, model, expected_tokens, vllm_version, facts):
    """The routes' answers (``serve_probe.probe``'s) against what they must say, for the host's container check
    (``matrixtool.smoke.serve.check``) and the bundle's process alike: every route 200 (the first that is not, in
    words, comes first), /v1/models lists ``model``, greedy tokens == ``expected_tokens`` (None: not compared),
    stream == non-stream, chat content, /metrics counts the requests and names their routes (class 16), /version
    starts with ``vllm_version``. Returns the problems; records what was read in ``facts``."""
    problems = []
    for key, answer in probes.items():
        if answer.get("status") != 200:
            why = answer.get("error") or str(answer.get("body", ""))[:300]
            problems.append(f"{key} answered {answer.get('status')}: {why}")
            break
    models = []
    with contextlib.suppress(ValueError, KeyError, TypeError):
        models = [m["id"] for m in _loads(probes["models"]["body"])["data"]]
    facts["models"] = models
    if model not in models:
        problems.append(f"/v1/models lists {models}, not the served {model}")
    first = choice(probes.get("completion", {}))
    tokens = list(first.get("token_ids") or [])
    facts["tokens"] = tokens
    facts["expected_tokens"] = list(expected_tokens) if expected_tokens is not None else None
    if expected_tokens is not None and tokens != list(expected_tokens):
        problems.append(f"greedy tokens {tokens} differ from offline-generate's eager {list(expected_tokens)}")
    text, streamed_tokens = streamed(probes.get("stream", {}))
    if text != first.get("text") or streamed_tokens != tokens:
        wanted = first.get("text")
        problems.append(f"streamed {text!r} {streamed_tokens} differs from non-streamed {wanted!r} {tokens}")
    chat = choice(probes.get("chat", {})).get("message", {}) or {}
    facts["chat"] = chat.get("content")
    if not chat.get("content"):
        problems.append("/v1/chat/completions gave no content")
    before = counted_requests(str(probes.get("metrics_before", {}).get("body", "")))
    counted = counted_requests(str(probes.get("metrics", {}).get("body", ""))) - before
    facts["metrics_requests"] = counted
    if counted != GENERATION_REQUESTS:
        problems.append(f"/metrics counts {counted} finished requests, {GENERATION_REQUESTS} were sent")
    unlabelled = servediag.unlabelled_metrics(str(probes.get("metrics", {}).get("body", "")))
    if unlabelled is not None:  # class 16: every request counted under handler="none"
        facts["failure_class"] = servediag.WEB_STACK
        problems.append(f"{unlabelled[1]}; fix: {unlabelled[2]}")
    version = ""
    with contextlib.suppress(ValueError, KeyError, TypeError):
        version = str(_loads(probes["version"]["body"])["version"])
    facts["version"] = version
    if not version.startswith(vllm_version):
        problems.append(f"/version is {version!r}, the variant pins {vllm_version}")
    return problems


def warm_problems(seen, facts, problems, hints):
    """The warm start of ``seen`` (``observe``'s) judged as the container check judges it
    (``compilecache.judge_warm``): its facts into ``facts`` (``warm``, ``cold_ready_s``; the cache folder's file
    system as ``warm.cache_filesystem``), what failed into ``problems`` and ``hints``; the summary's words ("" where
    none ran or it failed)."""
    warm = seen.get("warm")
    if not warm:
        return ""
    judged = compilecache.judge_warm(
        seen.get("log") or "",
        seen.get("ready_s"),
        warm,
        cold_listing=seen.get("cache_listing") or "",
        cache_root=seen.get("cache_root") or "",
    )
    facts.update(judged["facts"])
    if seen.get("cache_filesystem") and "skipped" not in warm:
        facts["warm"]["cache_filesystem"] = seen["cache_filesystem"]
    outcome, warm_log = judged["outcome"], warm.get("log") or ""
    if outcome == "error":
        problems.append(f"the warm start on the cold start's cache could not run: {warm['error']}")
    elif outcome == "not_ready":
        code = warm.get("exit_code")
        what = f"exited ({code})" if code is not None else "was not ready in time"
        problems.append(f"the warm start on the cold start's cache {what}: {root_cause(warm_log)}")
        facts["warm"]["log_tail"] = warm_log[-LOG_TAIL:]
        hints.append("read the warm start's log (after the cold start's in the serve log)")
    elif outcome == "not_reused":
        name, cause, diagnosis, fix = judged["failure"]
        facts["failure_class"] = compilecache.COMPILE_CACHE
        problems.append(f"the warm start did not reuse the compile cache ({name}): {diagnosis}: {cause!r}")
        hints.append(fix)
    return judged["summary"]


def reference_tokens(outcomes):
    """offline-generate's eager tokens for the first prompt from ``outcomes`` ({check: result dict}); its
    compiled tokens where only those ran; None when it did not pass."""
    got = outcomes.get("offline-generate") or {}
    if got.get("status") != "passed":
        return None
    for mode in ("eager", "compiled"):
        tokens = ((got.get("facts") or {}).get(mode) or {}).get("tokens")
        if tokens:
            return list(tokens[0])
    return None
