"""The ``serve`` check: the image started as its README tells users to serve it, probed from outside, stopped.

One server per profile: ``docker run`` of the image's own ENTRYPOINT with ``serve_argv()`` (the README's line,
``readme_block``), the profile's run conditions, and the suite's tiny model mounted read-only at ``/models``.
The model is made in the profile's check container into a Docker volume backed by a tmpfs (``model_volume``:
mode 1777, so any UID of any profile writes it; nothing on the host's disk); the engine mounts one tmpfs per
volume and keeps it while a container uses it, so the server starts while the check container still runs.
Probes come from outside the server process: the host through a published port where the profile has a network,
else a client container of the same image sharing the server's network namespace (``network_mode:
container:<id>``), both running ``programs/serve_probe.py``. Readiness polls ``/health`` and stops the moment
the server exits, with the root-cause line of its log. The judgement (``judge``) is a pure function.
"""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import docker
import docker.errors
import docker.types

from matrixtool.core import jsontext, outputs
from matrixtool.core.container import TrackedContainer
from matrixtool.incontainer.vllm_smoke import serving
from matrixtool.incontainer.vllm_smoke.programs import generate, serve_probe
from matrixtool.incontainer.vllm_smoke.vllmchecks import root_cause
from matrixtool.model.conditions import Condition
from matrixtool.model.model import Variant
from matrixtool.model.profiles import Profile
from matrixtool.smoke import serve_diagnosis, serve_health, serve_line, serve_probing, serve_route_diagnosis
from matrixtool.smoke.plan import ProfileRun
from matrixtool.smoke.result import CheckResult, Status

CHECK = "serve"
STOP_GRACE_S = 30  # a Kubernetes pod's terminationGracePeriodSeconds
READY_TIMEOUT_S = 1200
STREAM_TOKENS = 200  # the stop contract's in-flight stream (the tiny model's context is 256)
FIRST_CHUNK_S = 120.0
PROMPT = generate.PROMPTS[0]
MAX_TOKENS = 8
# Lines of vLLM's start-up log that open a phase (time to ready, per phase): the bundle's, shared.
PHASES: tuple[tuple[str, str], ...] = serving.PHASES
_completion_body: Callable[[Mapping[str, Any], bool], dict[str, Any]] = serve_probe.completion_body
_root_cause: Callable[[str], str | None] = root_cause
# What the container check and the bundle's process-level check read alike (``vllm_smoke.serving``).
phases_seen: Callable[[str, float, dict[str, float]], None] = serving.phases_seen
shutdown_errors: Callable[[str], list[str]] = serving.shutdown_errors
stream_outcome: Callable[[Mapping[str, Any]], str] = serving.stream_outcome
counted_requests: Callable[[str], int] = serving.counted_requests
_choice: Callable[[Mapping[str, Any]], dict[str, Any]] = serving.choice
_streamed: Callable[[Mapping[str, Any]], tuple[str, list[int]]] = serving.streamed
SHUTDOWN_ERRORS: tuple[str, ...] = serving.SHUTDOWN_ERRORS
GENERATION_REQUESTS: int = serving.GENERATION_REQUESTS


@dataclass(frozen=True, kw_only=True)
class Observed:
    """What one server run showed: ``ready_s`` seconds from ``docker run`` to /health 200 (None: never),
    ``phases`` seconds from start to each phase's first log line, ``exit_code`` when it exited before ready,
    ``probes`` the raw answers (``serve_probe.probe``), ``stop`` the stop contract's observations, ``log`` its
    log (tail), ``client`` what the command of ``CLIENT_ENV`` did (empty: none ran), ``health`` the image's own
    HEALTHCHECK run against the ready server (``run_healthcheck``; empty: the image declares none)."""

    ready_s: float | None
    phases: Mapping[str, float] = field(default_factory=dict)
    exit_code: int | None = None
    probes: Mapping[str, Any] = field(default_factory=dict)
    stop: Mapping[str, Any] = field(default_factory=dict)
    log: str = ""
    client: Mapping[str, Any] = field(default_factory=dict)
    health: Mapping[str, Any] = field(default_factory=dict)


def startup_cause(log: str) -> str:
    """The root-cause line of a log no diagnosis of ``serve_diagnosis`` knows: the first exception that is not
    one of vLLM's wrappers (``vllmchecks.root_cause``), else the log's last line."""
    cause = _root_cause(log)
    if cause:
        return cause
    lines = [line.strip() for line in log.splitlines() if line.strip()]
    return lines[-1] if lines else "no log"


def observe(
    client: docker.DockerClient,
    image: str,
    profile: Profile,
    volume: str,
    *,
    session: str,
    grace_s: int = STOP_GRACE_S,
    gpu: bool = False,
    eager: bool = False,
    ready_timeout_s: float = READY_TIMEOUT_S,
) -> Observed:
    """Start the server of ``profile`` on ``volume``'s model, wait until ready, probe it, stop it during a stream.

    Once ready and where the port is published, the command of ``CLIENT_ENV`` runs first (``run_client``).
    Raises docker errors as ``TrackedContainer.start`` does; every container is removed on the way out."""
    spec = serve_line.server_spec(image, profile, volume, gpu=gpu, eager=eager)
    started = time.monotonic()
    with TrackedContainer(client, spec, session=session) as server:
        if server.container is None:
            raise RuntimeError("the server container did not start")
        server_id = str(server.container.id)
        with contextlib.ExitStack() as stack:
            prober: serve_probing.Prober
            base: str | None = None
            if profile.network == "none":
                box = stack.enter_context(
                    TrackedContainer(client, serve_line.client_spec(image, profile, server_id), session=session)
                )
                prober = serve_probing.ClientProber(box)
            else:
                base = f"http://127.0.0.1:{server.host_port(f'{serve_line.PORT}/tcp')}"
                prober = serve_probing.HostProber(base)
            seen: dict[str, float] = {}
            ready_s = None
            while time.monotonic() - started < ready_timeout_s:
                code = server.wait(0.5)
                log = server.logs()
                phases_seen(log, time.monotonic() - started, seen)
                if code is not None:
                    return Observed(ready_s=None, phases=seen, exit_code=code, log=log)
                if prober.call("health", {}).get("status") == 200:
                    ready_s = round(time.monotonic() - started, 1)
                    break
                time.sleep(1.0)
            if ready_s is None:
                return Observed(ready_s=None, phases=seen, log=server.logs())
            ran = serve_probing.run_client(base) if base is not None else {}
            health = serve_health.run_healthcheck(server, serve_health.healthcheck_of(client.images.get(image).attrs))
            probes = prober.call("probe", {"model": serve_line.MODEL_PATH, "prompt": PROMPT, "max_tokens": MAX_TOKENS})
            stop = stop_contract(server, prober, grace_s)
            log = stop.pop("log", "")
            return Observed(ready_s=ready_s, phases=seen, probes=probes, stop=stop, log=log, client=ran, health=health)


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
    body = _completion_body({"model": serve_line.MODEL_PATH, "prompt": PROMPT, "max_tokens": STREAM_TOKENS}, True)
    streamed_at = time.monotonic()
    first, outcome = prober.stream(body)
    in_flight = first(FIRST_CHUNK_S)
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
        "stream": stream_outcome(stream) + (" before docker stop was sent" if ended_before else ""),
        "stream_ended_before_stop": ended_before,
        "shutdown_errors": shutdown_errors(log),
        "log": log,
    }


def _failed_route(probes: Mapping[str, Any]) -> str | None:
    """The first route that did not answer 200, in words; None when every one did."""
    for key, answer in probes.items():
        if answer.get("status") != 200:
            why = answer.get("error") or str(answer.get("body", ""))[:300]
            return f"{key} answered {answer.get('status')}: {why}"
    return None


# The routes of ``serve_probe.probe``'s keys, as serve_diagnosis names them.
ROUTES = {
    "metrics_before": "GET /metrics",
    "models": "GET /v1/models",
    "completion": "POST /v1/completions",
    "stream": "POST /v1/completions",
    "chat": "POST /v1/chat/completions",
    "version": "GET /version",
    "metrics": "GET /metrics",
}


def judge(
    seen: Observed,
    *,
    expected_tokens: Sequence[int] | None,
    vllm_version: str,
    ready_budget_s: float | None,
    env: Mapping[str, str] | None = None,
) -> tuple[Status, str, str, dict[str, Any]]:
    """Status, diagnosis, hint and facts of one server run (see the module docstring for what is asserted).

    ``expected_tokens``: offline-generate's eager greedy tokens for ``PROMPT`` (None: no comparison, said so);
    ``ready_budget_s``: the variant's ``ready_budget`` in seconds (None: none); ``env``: the server's
    environment (the image's and the profile's), where a log names no variable (a Kubernetes service link)."""
    facts: dict[str, Any] = {"ready_s": seen.ready_s, "phases": dict(seen.phases), "argv": serve_line.serve_argv()}
    if seen.ready_s is None:
        return _not_ready(seen, facts, env)
    probes = seen.probes
    if not probes:
        return Status.FAILED, "the server was ready but no request was sent", "", facts
    problems: list[str] = []
    hints: list[str] = []
    _answer_problems(probes, seen.log, expected_tokens, vllm_version, facts, problems, hints)
    _run_problems(seen, facts, problems, hints)
    stop = facts["stop"]
    if ready_budget_s is not None and seen.ready_s > ready_budget_s:
        facts["ready_budget_s"] = ready_budget_s
        problems.append(f"ready after {seen.ready_s:.0f} s, over its ready_budget of {ready_budget_s:.0f} s")
    summary = (
        f"ready in {seen.ready_s:.0f} s; models, greedy completion"
        f"{' == offline-generate' if expected_tokens is not None else ' (no offline-generate tokens to compare)'}, "
        f"stream, chat, metrics ({facts['metrics_requests']}), version {facts['version']}; stop: exit "
        f"{stop.get('exit_code')} in "
        f"{stop.get('seconds')} s, stream {stop.get('stream')}"
        + ("; the image's HEALTHCHECK passes" if seen.health else "")
    )
    stopped = _stop_diagnosis(stop)
    if stopped is not None:
        hints.append(stopped.fix)
    if problems:
        return Status.FAILED, "; ".join(problems), "; ".join(hints) or "read the server's log", facts
    return Status.PASSED, summary, "", facts


def _not_ready(
    seen: Observed, facts: dict[str, Any], env: Mapping[str, str] | None
) -> tuple[Status, str, str, dict[str, Any]]:
    """``judge`` of a server that never answered /health 200: it exited (diagnosed from its log) or timed out."""
    cause = startup_cause(seen.log)
    if seen.exit_code is not None:
        facts["exit_code"] = seen.exit_code
        found = serve_diagnosis.diagnose_log(seen.log, seen.exit_code, env=env)
        if found is not None:
            facts["failure_class"] = found.failure_class
            return (
                Status.FAILED,
                f"the server exited ({seen.exit_code}) before it was ready: {found.diagnosis}: {found.cause}",
                found.fix,
                facts,
            )
        return (
            Status.FAILED,
            f"the server exited ({seen.exit_code}) before it was ready: {cause}",
            "read the server's log (the root cause is logged before vLLM's wrappers)",
            facts,
        )
    return (
        Status.FAILED,
        f"/health did not answer 200 within {READY_TIMEOUT_S} s (last log line: {cause})",
        "read the server's log; a probe must outlast a cold start (compile) on this machine",
        facts,
    )


def _answer_problems(
    probes: Mapping[str, Any],
    log: str,
    expected_tokens: Sequence[int] | None,
    vllm_version: str,
    facts: dict[str, Any],
    problems: list[str],
    hints: list[str],
) -> None:
    """The routes' answers against what they must say (models, greedy tokens, stream, chat, metrics, version):
    appends to ``problems`` and ``hints``, records what was read in ``facts``."""
    failed = _failed_route(probes)
    if failed:
        problems.append(failed)
        route, answer = next((ROUTES.get(k, k), a) for k, a in probes.items() if a.get("status") != 200)
        found = serve_route_diagnosis.diagnose_route(route, answer.get("status"), str(answer.get("body", "")), log=log)
        if found is not None:
            problems.append(found.diagnosis)
            hints.append(found.fix)
    models = []
    with contextlib.suppress(ValueError, KeyError, TypeError):
        models = [m["id"] for m in jsontext.loads(probes["models"]["body"])["data"]]
    facts["models"] = models
    if serve_line.MODEL_PATH not in models:
        problems.append(f"/v1/models lists {models}, not the served {serve_line.MODEL_PATH}")
    choice = _choice(probes.get("completion", {}))
    tokens = list(choice.get("token_ids") or [])
    facts["tokens"] = tokens
    facts["expected_tokens"] = list(expected_tokens) if expected_tokens is not None else None
    if expected_tokens is not None and tokens != list(expected_tokens):
        problems.append(f"greedy tokens {tokens} differ from offline-generate's eager {list(expected_tokens)}")
    text, streamed_tokens = _streamed(probes.get("stream", {}))
    if text != choice.get("text") or streamed_tokens != tokens:
        wanted = choice.get("text")
        problems.append(f"streamed {text!r} {streamed_tokens} differs from non-streamed {wanted!r} {tokens}")
    chat = _choice(probes.get("chat", {})).get("message", {}) or {}
    facts["chat"] = chat.get("content")
    if not chat.get("content"):
        problems.append("/v1/chat/completions gave no content")
    before = counted_requests(str(probes.get("metrics_before", {}).get("body", "")))
    counted = counted_requests(str(probes.get("metrics", {}).get("body", ""))) - before
    facts["metrics_requests"] = counted
    if counted != GENERATION_REQUESTS:
        problems.append(f"/metrics counts {counted} finished requests, {GENERATION_REQUESTS} were sent")
    unlabelled = serve_route_diagnosis.diagnose_metrics(str(probes.get("metrics", {}).get("body", "")))
    if unlabelled is not None:  # class 16: every request counted under handler="none"
        facts["failure_class"] = unlabelled.failure_class
        problems.append(f"{unlabelled.diagnosis}; fix: {unlabelled.fix}")
    version = ""
    with contextlib.suppress(ValueError, KeyError, TypeError):
        version = str(jsontext.loads(probes["version"]["body"])["version"])
    facts["version"] = version
    if not version.startswith(vllm_version):
        problems.append(f"/version is {version!r}, the variant pins {vllm_version}")


def _run_problems(seen: Observed, facts: dict[str, Any], problems: list[str], hints: list[str]) -> None:
    """The client of ``CLIENT_ENV``, the image's HEALTHCHECK and the stop contract: appends to ``problems`` and
    ``hints``, records them in ``facts``."""
    if seen.client:
        facts["client"] = dict(seen.client)
        if seen.client.get("exit_code") != 0:
            code, output = seen.client.get("exit_code"), seen.client.get("output")
            problems.append(f"the {serve_probing.CLIENT_ENV} client exits {code}: {output}")
    if seen.health:
        facts["healthcheck"] = dict(seen.health)
        unhealthy = serve_health.health_problem(seen.health)
        if unhealthy is not None:
            facts["failure_class"] = serve_diagnosis.PROBES
            problems.append(unhealthy[0])
            hints.append(unhealthy[1])
    stop = dict(seen.stop)
    facts["stop"] = stop
    problems += stop_problems(stop)


def stop_problems(stop: Mapping[str, Any]) -> list[str]:
    """The stop contract's failures: PID 1 not the server, no stream in flight, an exit other than 0/143
    (137: SIGKILL after the grace), or a stop slower than the grace."""
    out = []
    pid1 = str(stop.get("pid1", ""))
    if "vllm" not in pid1 or "serve" not in pid1:
        out.append(f"PID 1 is {pid1 or 'unknown'}, not the server (a shell in front of it swallows SIGTERM)")
    if not stop.get("in_flight"):
        out.append("no streaming request was in flight when docker stop was sent")
    code, grace = stop.get("exit_code"), stop.get("grace_s", STOP_GRACE_S)
    if code not in (0, 143):
        out.append(
            f"docker stop -t {grace} during a stream: exit {code} after {stop.get('seconds')} s"
            + (" (SIGKILL: the server did not exit within the grace)" if code == 137 else "")
            + f"; the stream {stop.get('stream')}"
        )
    elif float(stop.get("seconds") or 0) > float(grace):
        out.append(f"docker stop took {stop.get('seconds')} s, over the {grace} s grace")
    return out


def _stop_diagnosis(stop: Mapping[str, Any]) -> serve_diagnosis.Diagnosis | None:
    """``serve_route_diagnosis.diagnose_stop`` of the stop contract's observations (None: kept, or not observed)."""
    if stop.get("exit_code") is None or stop.get("seconds") is None:
        return None
    return serve_route_diagnosis.diagnose_stop(
        exit_code=int(stop["exit_code"]),
        seconds=float(stop["seconds"]),
        grace=float(stop.get("grace_s", STOP_GRACE_S)),
        pid1=str(stop.get("pid1", "")).split(),
    )


def reference_tokens(results: Sequence[CheckResult]) -> list[int] | None:
    """offline-generate's eager tokens for ``PROMPT`` from ``results`` (the first prompt of ``generate.PROMPTS``);
    its compiled tokens where only those ran (a profile's rerun); None when it did not pass."""
    for result in results:
        if result.check == "offline-generate" and result.status is Status.PASSED:
            for mode in ("eager", "compiled"):
                tokens = (result.facts.get(mode) or {}).get("tokens")
                if tokens:
                    return list(tokens[0])
    return None


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
        self.seen: Observed | None = None
        self.error: str | None = None
        self.error_output = ""
        self.started = time.monotonic()
        self.thread = threading.Thread(target=self._work, daemon=True)

    def start(self) -> None:
        """Begin: the model, then the server (``observe``), on a daemon thread."""
        self.started = time.monotonic()
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
                grace_s=int(self.variant.stop_grace_s or STOP_GRACE_S),
                gpu=self.gpu,
                eager=str(self.run.suite) == "quick",
            )
        except Exception as exc:  # the check fails with it; the run goes on
            self.error = f"{type(exc).__name__}: {exc}"

    def sweep(self) -> None:
        """Remove this run's server and client containers (by session label)."""
        from matrixtool.core.container import sweep

        sweep(self.client, self.session)

    def environment(self) -> dict[str, str]:
        """The server's environment: the image's ``Config.Env`` and the profile's ``env`` over it."""
        try:
            pairs = self.client.images.get(self.image).attrs.get("Config", {}).get("Env") or []
        except docker.errors.DockerException:
            pairs = []
        image_env = dict(p.partition("=")[::2] for p in pairs)
        return {**image_env, **self.run.profile.value(Condition.ENV)}

    def result(self, timeout_s: float, results: Sequence[CheckResult]) -> CheckResult:
        """Wait for the server run (up to what is left of ``timeout_s`` seconds since ``start``), judge it against
        ``results`` (offline-generate's tokens) and write its log to ``<log stem>.serve.log``."""
        self.thread.join(max(1.0, timeout_s - (time.monotonic() - self.started)))
        log = self.log_dir / self.run.log_name(CHECK)
        outputs.make_dirs(self.log_dir)
        facts: dict[str, Any]
        if self.thread.is_alive():
            self.sweep()
            status, diagnosis, hint, facts = Status.TIMEOUT, f"no result within {timeout_s:.0f} s", "", {}
        elif self.seen is None:
            status, diagnosis, hint, facts = Status.FAILED, self.error or "no result", "read the log", {}
        else:
            status, diagnosis, hint, facts = judge(
                self.seen,
                expected_tokens=reference_tokens(results),
                vllm_version=str(self.variant.vllm.version).split("+")[0],
                ready_budget_s=self.variant.ready_budget_s,
                env=self.environment(),
            )
        written = "\n".join(filter(None, [self.error, self.error_output]))
        outputs.write_text(log, self.seen.log if self.seen is not None else written)
        return CheckResult(
            variant=self.variant.name,
            image=self.image,
            check=CHECK,
            status=status,
            diagnosis=diagnosis,
            hint="" if status.ok else hint,
            seconds=round(time.monotonic() - self.started, 1),
            facts=facts,
            log=log,
            profile=self.run.profile.name,
            suite=self.run.suite,
        )
