"""The server of one profile run (``Launch``) started and observed (``observe``): ready, probed; then, in the full
suite, killed with SIGKILL and restarted in the same pod on the compile cache it wrote (the warm start), which is
stopped during a stream (``stop_contract``); in the quick suite the first server is the one stopped. The serve step
(``serve.step.ServeRun``) runs it on a thread and judges what it showed."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import docker
import docker.errors
import requests.exceptions

from matrixtool.core.container import (
    OWNER_ENV_VAR,
    OWNER_LABEL,
    SESSION_LABEL,
    ContainerSpec,
    TrackedContainer,
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
    """Start ``launch``'s server, wait until ready, probe it. Eager (the quick suite): then stop it during a stream.
    Else (the full suite) it runs in a pod (``serve_endoflife.pod``: /dev/shm a volume the pod holds) on a fresh
    compile cache volume mounted at the image's cache root (``serve_line.cache_root`` of the server's environment);
    once probed it is killed with SIGKILL (``serve_endoflife.kill``) and the warm start is its restart in the same pod
    on the same volumes (``_restart``), stopped during a stream once ready. With less than ``compilecache.WARM_MIN_S``
    of the ``deadline`` left the first server is stopped instead and the warm start skipped, saying so, so the check's
    own timeout never swallows the cold verdict; a kill the engine refuses does the same.

    Once ready and where the port is published, the command of ``CLIENT_ENV`` runs first (``run_client``).
    Raises docker errors as ``TrackedContainer.start`` does; every container and volume is removed on the way out."""
    root = serve_line.cache_root(launch.env)
    # As TrackedContainer labels its containers: ServeRun.sweep removes the volumes on Ctrl-C/SIGTERM too.
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
        pod = None
        if cache is not None:  # the server and its restart share a pod's /dev/shm (serve_endoflife)
            shm, pod = outer.enter_context(
                serve_endoflife.pod(client, launch.image, launch.profile, launch.session, labels)
            )
            spec = serve_endoflife.with_shm(spec, shm)
        return _serve(client, launch, spec, pod)


def _serve(
    client: docker.DockerClient, launch: Launch, spec: ContainerSpec, pod: TrackedContainer | None
) -> serve_check.Observed:
    """The first server (``spec``): ready, the client of ``CLIENT_ENV``, the image's HEALTHCHECK, the probes; then in
    a ``pod`` its SIGKILL and the warm start (``_restart``), else (or no time left for a warm start) its stop
    contract. The cache's listing once ready and after the probes (kernels compiled for the probes count as cold).
    Not ready: what it showed until then."""
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
            listing = cache_listing(server, root) if pod is not None else ""
            ran = serve_probing.run_client(base) if base is not None else {}
            health = serve_health.run_healthcheck(
                server, serve_health.healthcheck_of(client.images.get(launch.image).attrs)
            )
            asked = {"model": serve_line.MODEL_PATH, "prompt": serve_check.PROMPT, "max_tokens": serve_check.MAX_TOKENS}
            probes = prober.call("probe", asked)
            if pod is not None:
                listing = _union(listing, cache_listing(server, root))
            warm, ready_by = warm_plan(launch, time.monotonic())
            if ready_by is not None and pod is not None:
                warm["kill"] = _kill(server)
            killed = "kill" in warm and "error" not in warm["kill"]
            if killed:
                stop: dict[str, Any] = {}
                log = server.logs()
            else:
                if "kill" in warm:
                    warm["skipped"] = "the first server could not be killed, so it was stopped instead"
                stop = stop_contract(server, prober, launch.grace_s)
                log = stop.pop("log", "")
    if killed and pod is not None and ready_by is not None:
        warm["shm_after_kill"] = serve_endoflife.read_shm(pod)
        warm.update(_restart(client, launch, spec, pod, ready_by - time.monotonic(), root=root))
        stop = warm.pop("stop", {})
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
        tmpfs=tuple(launch.profile.value(Condition.TMPFS)),
    )


def warm_plan(launch: Launch, now: float) -> tuple[dict[str, Any], float | None]:
    """What follows the first server's probes, as of ``now`` (``time.monotonic()``): (its ``warm`` so far, the
    ``time.monotonic()`` by which the warm start, its restart, must be ready). None: no warm start, the first server
    is stopped instead, ``warm["skipped"]`` saying why (the quick suite: ``compilecache.WARM_SKIPPED_EAGER``; less
    than ``compilecache.WARM_MIN_S`` left: ``compilecache.warm_budget``'s reason). The warm server is the one stopped
    during a stream, which may take its whole ``grace_s``: it must be ready that long before the ``deadline``, so
    the stop's verdict is not cut by the check's own timeout. The time is absolute, so the kill, the removal of the
    killed server and the /dev/shm read count against it. Pure."""
    if launch.eager:
        return {"skipped": compilecache.WARM_SKIPPED_EAGER}, None
    deadline = None if launch.deadline is None else launch.deadline - launch.grace_s
    left, skipped = compilecache.warm_budget(launch.ready_timeout_s, deadline, now)
    if skipped is not None:
        return {"skipped": skipped}, None
    return {}, now + left


def _kill(server: TrackedContainer) -> dict[str, Any]:
    """``serve_endoflife.kill`` of ``server``, or {"error": ...} where the engine refused it."""
    try:
        return serve_endoflife.kill(server)
    except docker.errors.DockerException as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}


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


def _restart(
    client: docker.DockerClient,
    launch: Launch,
    spec: ContainerSpec,
    pod: TrackedContainer,
    left_s: float,
    *,
    root: str | None = None,
) -> dict[str, Any]:
    """The warm start: the killed server's ``spec`` in a fresh container of the same pod (its /dev/shm and compile
    cache volumes), ready within ``left_s`` seconds (at least 60: ``waited_s``) or not. Its ``ready_s``, ``phases``,
    ``exit_code`` (None: ready or timed out), ``log``; once ready the cache's files under ``root``
    (``cache_listing``; None: the server's own cache root) and the stop contract during a stream (``stop``, its
    log in ``log``); not ready, /dev/shm after it (``shm``). Raises nothing of the engine's: ``error`` where the
    engine failed it, with what was seen before (``ready_s`` where it came up and its stop could not be observed)."""
    root = serve_line.cache_root(launch.env) if root is None else root
    started = time.monotonic()
    out: dict[str, Any] = {}
    try:
        with TrackedContainer(client, spec, session=launch.session) as server, contextlib.ExitStack() as stack:
            prober, _ = _prober(client, launch, server, stack)
            waited_s = max(60.0, left_s)
            ready_s, seen, code, log = _wait_ready(server, prober, started, waited_s)
            out.update({"ready_s": ready_s, "phases": seen, "exit_code": code, "log": log, "cache_listing": ""})
            out["waited_s"] = round(waited_s, 1)
            if ready_s is None:
                out["log"] = log or server.logs()
            else:
                out["cache_listing"] = cache_listing(server, root)
                stop = stop_contract(server, prober, launch.grace_s)
                out["log"] = stop.pop("log", "")
                out["stop"] = stop
    except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:  # the engine's, or it left
        return {**out, "error": f"{type(exc).__name__}: {exc}"}
    if out["ready_s"] is None:
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
