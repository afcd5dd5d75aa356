"""The server of one profile run (``Launch``) started and observed (``observe``): ready, probed, stopped during a
stream (``stop_contract``), then a warm start on the compile cache the first wrote (``_WarmStart``); the serve step
(``serve.step.ServeRun``) runs it on a thread and judges what it showed."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import docker
import docker.errors

from matrixtool.core.container import (
    OWNER_ENV_VAR,
    OWNER_LABEL,
    SESSION_LABEL,
    ContainerSpec,
    TrackedContainer,
    sweep,
)
from matrixtool.incontainer.vllm_smoke import compilecache, serving, shutdown
from matrixtool.incontainer.vllm_smoke.programs import serve_probe
from matrixtool.model.conditions import Condition
from matrixtool.model.profiles import Profile
from matrixtool.smoke.gpuaccess import GpuAccess
from matrixtool.smoke.serve import check as serve_check
from matrixtool.smoke.serve import endoflife as serve_endoflife
from matrixtool.smoke.serve import health as serve_health
from matrixtool.smoke.serve import line as serve_line
from matrixtool.smoke.serve import probing as serve_probing
from matrixtool.smoke.serve import start as serve_start

# Whether the warm start begins as soon as the cold server is ready (beside its probes and stop) or after it
# stopped: measured both ways (docs/checks.md, "Cold and warm start").
WARM_BESIDE_COLD = True


@dataclass(frozen=True, kw_only=True)
class Launch:
    """The server of one profile run as ``observe`` starts it: ``image`` under ``profile``, the tiny model from
    ``volume``; ``session`` labels its containers and its compile cache volume; ``grace_s``: ``docker stop``'s grace
    (s); ``gpu``: the host's GPUs (``gpuaccess``), None: none; ``eager``: no compile (the quick suite), so no warm
    start; ``env``: the server's environment (where its cache root is); ``deadline`` (``time.monotonic()``): where
    the warm start must be ready by (None: no bound but ``ready_timeout_s``, seconds a start may take to be ready);
    ``start``: the form the image is started in (``serve_start.choose``); ``added``: set in the server's environment
    over the image's and the profile's (the run's own cores beside another run: ``room.omp_bind``)."""

    image: str
    profile: Profile
    volume: str
    session: str
    grace_s: int = serve_check.STOP_GRACE_S
    gpu: GpuAccess | None = None
    eager: bool = False
    ready_timeout_s: float = serve_check.READY_TIMEOUT_S
    env: Mapping[str, str] = field(default_factory=dict)
    deadline: float | None = None
    start: serve_start.Start = serve_line.PROJECT_START
    added: Mapping[str, str] = field(default_factory=dict)


def observe(client: docker.DockerClient, launch: Launch) -> serve_check.Observed:
    """Start ``launch``'s server, wait until ready, probe it, stop it during a stream (``_cold_start``); then (not
    ``eager``) the warm start: a second server on the compile cache volume the first wrote (mounted at the image's
    cache root, ``serve_line.cache_root`` of the server's environment), ready and stopped (``_WarmStart``).

    Once ready and where the port is published, the command of ``CLIENT_ENV`` runs first (``run_client``).
    Raises docker errors as ``TrackedContainer.start`` does; every container and the cache volume are removed on
    the way out. None of the ``deadline`` left, the warm start is skipped with that reason, so the check's own
    timeout never swallows the cold verdict. On a GPU the warm start waits for the cold server's stop (both would
    hold the GPU's memory at once)."""
    root = serve_line.cache_root(launch.env)
    # As TrackedContainer labels its containers: ServeRun.sweep removes the volume on Ctrl-C/SIGTERM too.
    labels = {OWNER_LABEL: os.environ.get(OWNER_ENV_VAR, ""), SESSION_LABEL: launch.session}
    with contextlib.ExitStack() as outer:
        cache = None if launch.eager else (outer.enter_context(serve_line.cache_volume(client, labels)), root)
        spec = serve_line.server_spec(
            launch.image,
            launch.profile,
            launch.volume,
            gpu=launch.gpu,
            eager=launch.eager,
            cache=cache,
            start=launch.start,
            environment=launch.added,
        )
        warm_spec, pod = spec, None
        if cache is not None:  # the warm server and its restart share a pod's /dev/shm (serve_endoflife)
            shm, pod = outer.enter_context(
                serve_endoflife.pod(client, launch.image, launch.profile, launch.session, labels)
            )
            warm_spec = serve_endoflife.with_shm(spec, shm)
        warm = _WarmStart(client, launch, warm_spec, root, pod)
        outer.callback(warm.end)  # before the volumes go
        seen = _cold_start(client, launch, spec, warm if cache is not None else None)
        if seen.ready_s is not None and cache is not None:
            warm.finish()
        return dataclasses.replace(seen, warm=warm.seen) if seen.ready_s is not None else seen


class _WarmStart:
    """The warm start of ``observe``: ``spec`` (the cold server's, on its cache volume at ``root``) started again
    (``_start_once``), within what is left of the ``deadline``; begun beside the cold server's probes
    (``WARM_BESIDE_COLD``, not on a GPU) or after its stop. ``seen``: what it showed (``skipped``: why none ran;
    ``error``: why it could not run)."""

    def __init__(
        self, client: docker.DockerClient, launch: Launch, spec: ContainerSpec, root: str, pod: TrackedContainer | None
    ) -> None:
        self.client, self.launch, self.spec, self.root, self.pod = client, launch, spec, root, pod
        self.seen: dict[str, Any] = {"skipped": compilecache.WARM_SKIPPED_EAGER} if launch.eager else {}
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        """Start it now, on this thread."""
        left, skipped = compilecache.warm_budget(self.launch.ready_timeout_s, self.launch.deadline, time.monotonic())
        if skipped is not None:
            self.seen["skipped"] = skipped
            return
        try:
            self.seen.update(
                _start_once(self.client, self.launch, self.spec, self.root, ready_timeout_s=left, pod=self.pod)
            )
        except Exception as exc:  # the check fails with it (serve_check.judge); the cold run's result stands
            self.seen["error"] = f"{type(exc).__name__}: {exc}"

    def begin(self) -> None:
        """Start it beside the cold server, on a daemon thread."""
        self.thread.start()

    def finish(self) -> None:
        """After the cold server's stop: wait for the one begun beside it, else start it now."""
        if self.thread.ident is not None:
            self.thread.join(self.launch.ready_timeout_s + 60)
        else:
            self.run()

    def end(self) -> None:
        """On the way out: a warm server still running (the cold run raised) is removed, its thread ended."""
        if self.thread.is_alive():
            sweep(self.client, self.launch.session)
            self.thread.join(60.0)


def _cold_start(
    client: docker.DockerClient, launch: Launch, spec: ContainerSpec, warm: _WarmStart | None
) -> serve_check.Observed:
    """The first server (``spec``): ready, the client of ``CLIENT_ENV``, the image's HEALTHCHECK, the probes, the
    stop contract; the cache's listing once ready and after the probes, and ``warm`` begun once ready (beside it;
    None: no cache, no warm start). Not ready: what it showed until then."""
    root = serve_line.cache_root(launch.env)
    started = time.monotonic()
    with TrackedContainer(client, spec, session=launch.session) as server:
        if server.container is None:
            raise RuntimeError("the server container did not start")
        with contextlib.ExitStack() as stack:
            prober, base = _prober(client, launch, server, stack)
            ready_s, seen, code, log = _wait_ready(server, prober, started, launch.ready_timeout_s)
            if ready_s is None:
                return serve_check.Observed(ready_s=None, phases=seen, exit_code=code, log=log)
            listing = cache_listing(server, root) if warm is not None else ""
            if warm is not None and WARM_BESIDE_COLD and launch.gpu is None:
                warm.begin()
            ran = serve_probing.run_client(base) if base is not None else {}
            health = serve_health.run_healthcheck(
                server, serve_health.healthcheck_of(client.images.get(launch.image).attrs)
            )
            asked = {"model": serve_line.MODEL_PATH, "prompt": serve_check.PROMPT, "max_tokens": serve_check.MAX_TOKENS}
            probes = prober.call("probe", asked)
            if warm is not None:  # kernels the cold server compiled after ready (its probes) count as cold
                listing = _union(listing, cache_listing(server, root))
            stop = stop_contract(server, prober, launch.grace_s)
    log = stop.pop("log", "")
    return serve_check.Observed(
        ready_s=ready_s,
        phases=seen,
        probes=probes,
        stop=stop,
        log=log,
        client=ran,
        health=health,
        cache_listing=listing,
        cache_root=root,
        tmpfs=tuple(launch.profile.value(Condition.TMPFS)),
    )


def _prober(
    client: docker.DockerClient, launch: Launch, server: TrackedContainer, stack: contextlib.ExitStack
) -> tuple[serve_probing.Prober, str | None]:
    """How to reach ``server``: from the host through its published port (and that base URL), else (no network) a
    client container in its network namespace, entered on ``stack``."""
    if launch.profile.network == "none":
        assert server.container is not None
        spec = serve_line.client_spec(launch.image, launch.profile, str(server.container.id))
        box = stack.enter_context(TrackedContainer(client, spec, session=launch.session))
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
        serving.phases_seen(log, time.monotonic() - started, seen)
        if code is not None:
            return None, seen, code, log
        if prober.call("health", {}).get("status") == 200:
            return round(time.monotonic() - started, 1), seen, None, ""
        time.sleep(1.0)
    return None, seen, None, server.logs()


def _start_once(
    client: docker.DockerClient,
    launch: Launch,
    spec: ContainerSpec,
    root: str,
    *,
    ready_timeout_s: float,
    pod: TrackedContainer | None = None,
) -> dict[str, Any]:
    """The warm start: ``spec`` (the cold server's, on the same cache volume at ``root``) started, ready (no probe, no
    stop contract: the cold run proved those). Its ``ready_s``, ``phases``, ``exit_code`` (None: ready or timed
    out), ``log`` and ``cache_listing`` (``cache_listing`` once ready). In a ``pod`` (its /dev/shm held there,
    ``serve_endoflife``), once ready it is killed with SIGKILL (``kill``: what was left of it) and restarted in a
    fresh container on the same volumes (``restart``: ``ready_s``, ``exit_code``, ``log``, ``shm``), with /dev/shm
    read between (``shm_after_kill``)."""
    started = time.monotonic()
    out: dict[str, Any] = {}
    with TrackedContainer(client, spec, session=launch.session) as server, contextlib.ExitStack() as stack:
        prober, _ = _prober(client, launch, server, stack)
        ready_s, seen, code, _log = _wait_ready(server, prober, started, ready_timeout_s)
        listing = cache_listing(server, root) if ready_s else ""
        if ready_s is not None and pod is not None:
            try:
                out["kill"] = serve_endoflife.kill(server)
            except docker.errors.DockerException as exc:
                out["kill"] = {"error": f"{type(exc).__name__}: {exc}"}
        out.update(
            {"ready_s": ready_s, "phases": seen, "exit_code": code, "log": server.logs(), "cache_listing": listing}
        )
    if "kill" in out and "error" not in out["kill"] and pod is not None:
        out["shm_after_kill"] = serve_endoflife.read_shm(pod)
        out["restart"] = _restart(client, launch, spec, pod, ready_timeout_s - (time.monotonic() - started))
    return out


def _restart(
    client: docker.DockerClient, launch: Launch, spec: ContainerSpec, pod: TrackedContainer, left_s: float
) -> dict[str, Any]:
    """The restart in the same pod: ``spec`` in a fresh container (the killed server's /dev/shm and cache volumes),
    ready within ``left_s`` seconds or not; removed once ready (its own end is not judged). Its ``ready_s``,
    ``exit_code``, ``log`` and, where it did not come up, ``shm`` (/dev/shm after it)."""
    started = time.monotonic()
    try:
        with TrackedContainer(client, spec, session=launch.session) as server, contextlib.ExitStack() as stack:
            prober, _ = _prober(client, launch, server, stack)
            ready_s, _seen, code, log = _wait_ready(server, prober, started, max(60.0, left_s))
            out: dict[str, Any] = {"ready_s": ready_s, "exit_code": code, "log": log or server.logs()}
    except docker.errors.DockerException as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}
    if ready_s is None:
        out["shm"] = serve_endoflife.read_shm(pod)
    return out


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
    body = serve_probe.completion_body(
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
        "stream": serving.stream_outcome(stream) + (" before docker stop was sent" if ended_before else ""),
        "stream_ended_before_stop": ended_before,
        "shutdown_errors": serving.shutdown_errors(log),
        "shutdown": shutdown.shutdown_verdict(log),
        "log": log,
    }
