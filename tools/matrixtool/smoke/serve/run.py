"""The serve check run: the server of one profile started (``observe``: ready, probed, stopped during a stream,
``stop_contract``; a warm start on the compile cache the first wrote, ``_start_once``) and ``ServeRun``, the
smoke plan's serve step beside the check container, which makes the tiny model, runs ``observe`` on a thread and
judges it (``serve_check.judge``)."""

from __future__ import annotations

import contextlib
import os
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import docker
import docker.errors

from matrixtool.core import outputs
from matrixtool.core.container import (
    OWNER_ENV_VAR,
    OWNER_LABEL,
    SESSION_LABEL,
    ContainerSpec,
    TrackedContainer,
    sweep,
)
from matrixtool.incontainer.vllm_smoke import compilecache
from matrixtool.incontainer.vllm_smoke.programs import serve_probe
from matrixtool.model.conditions import Condition
from matrixtool.model.model import Variant
from matrixtool.model.profiles import Profile
from matrixtool.smoke.plan import ProfileRun
from matrixtool.smoke.result import CheckResult, Status
from matrixtool.smoke.serve import check as serve_check
from matrixtool.smoke.serve import health as serve_health
from matrixtool.smoke.serve import line as serve_line
from matrixtool.smoke.serve import probing as serve_probing

# The in-image package is untyped (stdlib, Python >= 3.9): its function as this module calls it.
_completion_body: Callable[[Mapping[str, Any], bool], dict[str, Any]] = serve_probe.completion_body


# Whether the warm start begins as soon as the cold server is ready (beside its probes and stop) or after it
# stopped: measured both ways (docs/checks.md, "Cold and warm start").
WARM_BESIDE_COLD = True
# The line that opens the warm start's log in the check's log file, after the cold start's; the warm start's
# limits (``compilecache``: the bundle's host serve uses the same).
WARM_LOG_MARK: str = compilecache.WARM_LOG_MARK
WARM_MIN_S: float = compilecache.WARM_MIN_S
WARM_MARGIN_S: float = compilecache.WARM_MARGIN_S
WARM_SKIPPED_EAGER: str = compilecache.WARM_SKIPPED_EAGER


def observe(
    client: docker.DockerClient,
    image: str,
    profile: Profile,
    volume: str,
    *,
    session: str,
    grace_s: int = serve_check.STOP_GRACE_S,
    gpu: bool = False,
    eager: bool = False,
    ready_timeout_s: float = serve_check.READY_TIMEOUT_S,
    env: Mapping[str, str] | None = None,
    deadline: float | None = None,
) -> serve_check.Observed:
    """Start the server of ``profile`` on ``volume``'s model, wait until ready, probe it, stop it during a stream;
    then (not ``eager``) the warm start: a second server on the compile cache volume the first wrote (mounted at
    the image's cache root, ``serve_line.cache_root`` of ``env``: the server's environment), ready and stopped.

    Once ready and where the port is published, the command of ``CLIENT_ENV`` runs first (``run_client``).
    Raises docker errors as ``TrackedContainer.start`` does; every container and the cache volume are removed on
    the way out. ``deadline`` (``time.monotonic()``): where the warm start must be ready by, so the check's own
    timeout never swallows the cold verdict; none left, the warm start is skipped with that reason. On a GPU the
    warm start waits for the cold server's stop (both would hold the GPU's memory at once)."""
    root = serve_line.cache_root(env or {})
    tmpfs = tuple(profile.value(Condition.TMPFS))
    # As TrackedContainer labels its containers: ServeRun.sweep removes the volume on Ctrl-C/SIGTERM too.
    labels = {OWNER_LABEL: os.environ.get(OWNER_ENV_VAR, ""), SESSION_LABEL: session}
    with contextlib.ExitStack() as outer:
        cache = None if eager else (outer.enter_context(serve_line.cache_volume(client, labels)), root)
        spec = serve_line.server_spec(image, profile, volume, gpu=gpu, eager=eager, cache=cache)
        warm: dict[str, Any] = {"skipped": WARM_SKIPPED_EAGER} if eager else {}
        warm_thread = threading.Thread(target=lambda: start_warm(), daemon=True)

        def start_warm() -> None:
            left, skipped = compilecache.warm_budget(ready_timeout_s, deadline, time.monotonic())
            if skipped is not None:
                warm["skipped"] = skipped
                return
            try:
                warm.update(_start_once(client, image, profile, spec, root, session=session, ready_timeout_s=left))
            except Exception as exc:  # the check fails with it (serve_check.judge); the cold run's result stands
                warm["error"] = f"{type(exc).__name__}: {exc}"

        def end_warm() -> None:
            # Before the volume goes: a warm server still running (the cold run raised) is removed, its thread ended.
            if warm_thread.is_alive():
                sweep(client, session)
                warm_thread.join(60.0)

        outer.callback(end_warm)

        started = time.monotonic()
        with TrackedContainer(client, spec, session=session) as server:
            if server.container is None:
                raise RuntimeError("the server container did not start")
            with contextlib.ExitStack() as stack:
                prober, base = _prober(client, image, profile, server, stack, session)
                ready_s, seen, code, log = _wait_ready(server, prober, started, ready_timeout_s)
                if ready_s is None:
                    return serve_check.Observed(ready_s=None, phases=seen, exit_code=code, log=log)
                listing = cache_listing(server, root) if cache is not None else ""
                if cache is not None and WARM_BESIDE_COLD and not gpu:
                    warm_thread.start()
                ran = serve_probing.run_client(base) if base is not None else {}
                health = serve_health.run_healthcheck(
                    server, serve_health.healthcheck_of(client.images.get(image).attrs)
                )
                probes = prober.call(
                    "probe",
                    {
                        "model": serve_line.MODEL_PATH,
                        "prompt": serve_check.PROMPT,
                        "max_tokens": serve_check.MAX_TOKENS,
                    },
                )
                if cache is not None:  # kernels the cold server compiled after ready (its probes) count as cold
                    listing = _union(listing, cache_listing(server, root))
                stop = stop_contract(server, prober, grace_s)
        log = stop.pop("log", "")
        if warm_thread.ident is not None:
            warm_thread.join(ready_timeout_s + 60)
        elif cache is not None:
            start_warm()
        return serve_check.Observed(
            ready_s=ready_s,
            phases=seen,
            probes=probes,
            stop=stop,
            log=log,
            client=ran,
            health=health,
            warm=warm,
            cache_listing=listing,
            cache_root=root,
            tmpfs=tmpfs,
        )


def _prober(
    client: docker.DockerClient,
    image: str,
    profile: Profile,
    server: TrackedContainer,
    stack: contextlib.ExitStack,
    session: str,
) -> tuple[serve_probing.Prober, str | None]:
    """How to reach ``server``: from the host through its published port (and that base URL), else (no network) a
    client container in its network namespace, entered on ``stack``."""
    if profile.network == "none":
        assert server.container is not None
        box = stack.enter_context(
            TrackedContainer(client, serve_line.client_spec(image, profile, str(server.container.id)), session=session)
        )
        return serve_probing.ClientProber(box), None
    base = f"http://127.0.0.1:{server.host_port(f'{serve_line.PORT}/tcp')}"
    return serve_probing.HostProber(base), base


def _wait_ready(
    server: TrackedContainer, prober: serve_probing.Prober, started: float, timeout_s: float
) -> tuple[float | None, dict[str, float], int | None, str]:
    """Poll /health until 200 (seconds since ``started``), the server's exit (its code) or ``timeout_s``: the seconds
    to ready (None: not ready), the phases seen, the exit code and the log so far."""
    seen: dict[str, float] = {}
    while time.monotonic() - started < timeout_s:
        code = server.wait(0.5)
        log = server.logs()
        serve_check.phases_seen(log, time.monotonic() - started, seen)
        if code is not None:
            return None, seen, code, log
        if prober.call("health", {}).get("status") == 200:
            return round(time.monotonic() - started, 1), seen, None, ""
        time.sleep(1.0)
    return None, seen, None, server.logs()


def _start_once(
    client: docker.DockerClient,
    image: str,
    profile: Profile,
    spec: ContainerSpec,
    root: str,
    *,
    session: str,
    ready_timeout_s: float,
) -> dict[str, Any]:
    """The warm start: ``spec`` (the cold server's, on the same cache volume at ``root``) started, ready, removed
    (no probe, no stop contract: the cold run proved those). Its ``ready_s``, ``phases``, ``exit_code`` (None: ready
    or timed out), ``log`` and ``cache_listing`` (``cache_listing`` once ready)."""
    started = time.monotonic()
    with TrackedContainer(client, spec, session=session) as server, contextlib.ExitStack() as stack:
        prober, _ = _prober(client, image, profile, server, stack, session)
        ready_s, seen, code, _log = _wait_ready(server, prober, started, ready_timeout_s)
        listing = cache_listing(server, root) if ready_s else ""
        return {"ready_s": ready_s, "phases": seen, "exit_code": code, "log": server.logs(), "cache_listing": listing}


# The files under argv[1], one relative path a line: Python, which every vLLM image has (find may be missing).
_LIST_FILES = (
    "import os, sys\n"
    "for d, _, fs in os.walk(sys.argv[1]):\n"
    "    for f in fs: print(os.path.relpath(os.path.join(d, f), sys.argv[1]))"
)


def _union(*listings: str) -> str:
    """The paths of several ``cache_listing`` answers, once each, sorted."""
    return "\n".join(sorted({line for text in listings for line in text.splitlines() if line.strip()}))


def cache_listing(server: TrackedContainer, root: str) -> str:
    """The files under ``root`` in the running ``server``, one path (relative to it) a line, listed as the server's
    user (what the server can see). Empty where the listing fails (the engine's errors included: a server that
    exited cannot be exec-ed into)."""
    try:
        code, out = server.exec(["python3", "-c", _LIST_FILES, root], {}, 60.0)
    except docker.errors.DockerException:
        return ""
    return out if code == 0 else ""


def stop_contract(server: TrackedContainer, prober: serve_probing.Prober, grace_s: int) -> dict[str, Any]:
    """``docker stop`` with ``grace_s`` during a streaming request: PID 1's command, the exit code, the seconds
    the stop took, how the stream ended, and the server's log (key ``log``)."""
    assert server.container is not None
    pid1 = ""
    with contextlib.suppress(docker.errors.DockerException, KeyError, ValueError):
        server.container.reload()
        host_pid = str(server.container.attrs["State"]["Pid"])
        top = server.container.top(ps_args="-eo pid,args")
        column = top["Titles"].index("PID")
        pid1 = next((" ".join(p[column + 1 :]) for p in top["Processes"] if p[column] == host_pid), "")
    if not pid1:  # `docker top` with ps_args answers 500 on some engines: ask the kernel inside instead
        with contextlib.suppress(docker.errors.DockerException):
            code, out = server.container.exec_run(["cat", "/proc/1/cmdline"])
            text = out.decode(errors="replace") if isinstance(out, bytes) and code == 0 else ""
            pid1 = text.replace("\0", " ").strip()
    body = _completion_body(
        {"model": serve_line.MODEL_PATH, "prompt": serve_check.PROMPT, "max_tokens": serve_check.STREAM_TOKENS}, True
    )
    streamed_at = time.monotonic()
    first, outcome = prober.stream(body)
    in_flight = first(serve_check.FIRST_CHUNK_S)
    began = time.monotonic()
    code = server.stop(grace_s)
    seconds = round(time.monotonic() - began, 1)
    stream = outcome(30.0)
    # The probe's own clock (its seconds from the request), on this host's: ended before the stop was sent?
    ended_before = stream.get("seconds") is not None and streamed_at + float(stream["seconds"]) < began
    log = server.logs()
    return {
        "grace_s": grace_s,
        "in_flight": in_flight,
        "pid1": pid1,
        "exit_code": code,
        "seconds": seconds,
        "stream": serve_check.stream_outcome(stream) + (" before docker stop was sent" if ended_before else ""),
        "stream_ended_before_stop": ended_before,
        "shutdown_errors": serve_check.shutdown_errors(log),
        "log": log,
    }


# Makes the tiny model in the check container (the zipapp's ensure_model: once, under a lock; argv[1] the zipapp).
ENSURE_MODEL = (
    "import sys; sys.path.insert(0, sys.argv[1]); from vllm_smoke.vllmchecks import ensure_model; "
    "print('MATRIX-MODEL ' + ensure_model())"
)
MODEL_DEADLINE_S = 600.0


class Execs(Protocol):
    """What runs the tiny model's maker: the check container (``TrackedContainer.exec``'s contract)."""

    def exec(self, argv: list[str], env: Mapping[str, str], deadline_s: float) -> tuple[int | None, str]: ...


class ServeRun:
    """The serve check of one profile run, beside the check container's groups (the container runner's step):
    ``start`` makes the tiny model in ``runner``'s container (its volume; ``zipapp``: the check package's path
    there) and starts the server on a daemon thread; ``result`` waits for it and judges. Its containers carry a
    session of their own (``sweep`` removes them)."""

    def __init__(
        self,
        client: docker.DockerClient,
        image: str,
        variant: Variant,
        run: ProfileRun,
        runner: Execs,
        volume: str,
        *,
        log_dir: Path,
        zipapp: str,
        gpu: bool = False,
    ) -> None:
        self.client, self.image, self.variant, self.run, self.runner = client, image, variant, run, runner
        self.volume, self.log_dir, self.gpu, self.zipapp = volume, log_dir, gpu, zipapp
        self.session = uuid.uuid4().hex[:12]
        self.seen: serve_check.Observed | None = None
        self.error: str | None = None
        self.error_output = ""
        self.started = time.monotonic()
        self.deadline: float | None = None
        self.thread = threading.Thread(target=self._work, daemon=True)

    def start(self) -> None:
        """Begin: the model, then the server (``observe``), on a daemon thread. The warm start must be ready
        ``WARM_MARGIN_S`` before the serve check's own timeout."""
        self.started = time.monotonic()
        timeout = next((c.timeout for c in self.run.checks if c.name == serve_check.CHECK), None)
        self.deadline = None if timeout is None else self.started + float(timeout) - WARM_MARGIN_S
        self.thread.start()

    def _work(self) -> None:
        try:
            code, output = self.runner.exec(["python3", "-c", ENSURE_MODEL, self.zipapp], {}, MODEL_DEADLINE_S)
            if "MATRIX-MODEL " not in output:
                tail = " | ".join(output.strip().splitlines()[-2:])
                self.error = f"making the tiny model for the server fails (exit {code}): {tail}"
                self.error_output = output  # the whole traceback: the cause (rootcause.py) may be in its chain
                return
            self.seen = observe(
                self.client,
                self.image,
                self.run.profile,
                self.volume,
                session=self.session,
                grace_s=int(self.variant.stop_grace_s or serve_check.STOP_GRACE_S),
                gpu=self.gpu,
                eager=str(self.run.suite) == "quick",
                env=self.environment(),
                deadline=self.deadline,
            )
        except Exception as exc:  # the check fails with it; the run goes on
            self.error = f"{type(exc).__name__}: {exc}"

    def sweep(self) -> None:
        """Remove this run's server and client containers, then its compile cache volume (by session label)."""
        sweep(self.client, self.session)
        with contextlib.suppress(docker.errors.DockerException):
            for volume in self.client.volumes.list(filters={"label": f"{SESSION_LABEL}={self.session}"}):
                with contextlib.suppress(docker.errors.DockerException):
                    volume.remove(force=True)

    def environment(self) -> dict[str, str]:
        """The server's environment: the image's ``Config.Env`` and the profile's ``env`` over it."""
        try:
            pairs = self.client.images.get(self.image).attrs.get("Config", {}).get("Env") or []
        except docker.errors.DockerException:
            pairs = []
        image_env = dict(p.partition("=")[::2] for p in pairs)
        return {**image_env, **self.run.profile.value(Condition.ENV)}

    def result(self, timeout_s: float, results: Sequence[CheckResult]) -> CheckResult:
        """Wait for the server run (up to what is left of ``timeout_s`` seconds since ``start``), judge it
        (``serve_check.judge``) against ``results`` (offline-generate's tokens) and write its log to
        ``<log stem>.serve.log`` (the warm start's after ``WARM_LOG_MARK``)."""
        self.thread.join(max(1.0, timeout_s - (time.monotonic() - self.started)))
        log = self.log_dir / self.run.log_name(serve_check.CHECK)
        outputs.make_dirs(self.log_dir)
        facts: dict[str, Any]
        if self.thread.is_alive():
            self.sweep()
            status, diagnosis, hint, facts = Status.TIMEOUT, f"no result within {timeout_s:.0f} s", "", {}
        elif self.seen is None:
            status, diagnosis, hint, facts = Status.FAILED, self.error or "no result", "read the log", {}
        else:
            status, diagnosis, hint, facts = serve_check.judge(
                self.seen,
                expected_tokens=serve_check.reference_tokens(results),
                vllm_version=str(self.variant.vllm.version).split("+")[0],
                ready_budget_s=self.variant.ready_budget_s,
                env=self.environment(),
            )
        written = "\n".join(filter(None, [self.error, self.error_output]))
        if self.seen is not None:
            warm_log = str(self.seen.warm.get("log") or "")
            written = self.seen.log + (f"\n{WARM_LOG_MARK}\n{warm_log}" if warm_log else "")
        outputs.write_text(log, written)
        return CheckResult(
            variant=self.variant.name,
            image=self.image,
            check=serve_check.CHECK,
            status=status,
            diagnosis=diagnosis,
            hint="" if status.ok else hint,
            seconds=round(time.monotonic() - self.started, 1),
            facts=facts,
            log=log,
            profile=self.run.profile.name,
            suite=self.run.suite,
        )
