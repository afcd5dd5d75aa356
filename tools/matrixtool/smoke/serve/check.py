"""The ``serve`` check: the image started as its README tells users to serve it, probed from outside, stopped.

One server per profile: ``docker run`` of the image as its users must start it (``serve_start.choose``: the form its
ENTRYPOINT, CMD and files call for; this project's images take ``serve_argv()``, the README's line,
``readme_block``), the profile's run conditions, and the suite's tiny model mounted read-only at ``/models``.
The model is made in the profile's check container into a Docker volume backed by a tmpfs (``model_volume``:
mode 1777, so any UID of any profile writes it; nothing on the host's disk); the engine mounts one tmpfs per
volume and keeps it while a container uses it, so the server starts while the check container still runs.
Probes come from outside the server process: the host through a published port where the profile has a network,
else a client container of the same image sharing the server's network namespace (``network_mode:
container:<id>``), both running ``programs/serve_probe.py``. Readiness polls ``/health`` and stops the moment
the server exits, with the root-cause line of its log. Here: what a run showed (``Observed``) and the judgement
(``judge``, a pure function); the serve line and its containers are ``serve_line``, probing ``serve_probing``,
the run itself ``serve_run``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from matrixtool.incontainer.vllm_smoke import compilecache, serving, shutdown
from matrixtool.incontainer.vllm_smoke.errortext import root_cause
from matrixtool.incontainer.vllm_smoke.programs import generate
from matrixtool.smoke.result import CheckResult, Status
from matrixtool.smoke.serve import diagnosis as serve_diagnosis
from matrixtool.smoke.serve import endoflife as serve_endoflife
from matrixtool.smoke.serve import health as serve_health
from matrixtool.smoke.serve import line as serve_line
from matrixtool.smoke.serve import probing as serve_probing
from matrixtool.smoke.serve import route_diagnosis as serve_route_diagnosis
from matrixtool.smoke.serve import start as serve_start

CHECK = "serve"
STOP_GRACE_S = 30  # a Kubernetes pod's terminationGracePeriodSeconds
READY_TIMEOUT_S = 1200
STREAM_TOKENS = 200  # the stop contract's in-flight stream (the tiny model's context is 256)
FIRST_CHUNK_S = 120.0
PROMPT = generate.PROMPTS[0]
MAX_TOKENS = 8


@dataclass(frozen=True, kw_only=True)
class Observed:
    """What one server run showed: ``ready_s`` seconds from ``docker run`` to /health 200 (None: never),
    ``phases`` seconds from start to each phase's first log line, ``exit_code`` when it exited before ready,
    ``probes`` the raw answers (``serve_probe.probe``), ``stop`` the stop contract's observations, ``log`` its
    log (tail), ``client`` what the command of ``CLIENT_ENV`` did (empty: none ran), ``health`` the image's own
    HEALTHCHECK run against the ready server (``run_healthcheck``; empty: the image declares none); ``warm`` the
    second start on the compile cache the first wrote (``ready_s``, ``phases``, ``exit_code``, ``log``; ``skipped``:
    why none ran; empty: none ran; ``cache_listing``: its files once ready; in the container check's full suite
    also the first server's ``kill`` and ``shm_after_kill``, the warm start being its restart in the same pod, and
    ``shm`` or ``error`` as ``serve_endoflife.judge`` reads them; ``stop`` is then the warm server's), with the
    cache volume mounted at ``cache_root`` (``cache_listing``: its files once the first start was ready) and the
    profile's tmpfs mount points ``tmpfs``."""

    ready_s: float | None
    phases: Mapping[str, float] = field(default_factory=dict)
    exit_code: int | None = None
    probes: Mapping[str, Any] = field(default_factory=dict)
    stop: Mapping[str, Any] = field(default_factory=dict)
    log: str = ""
    client: Mapping[str, Any] = field(default_factory=dict)
    health: Mapping[str, Any] = field(default_factory=dict)
    warm: Mapping[str, Any] = field(default_factory=dict)
    cache_listing: str = ""
    cache_root: str = ""
    tmpfs: tuple[str, ...] = ()

    @property
    def restarted(self) -> bool:
        """Whether the warm start was the first server's restart after its SIGKILL (the container check's full
        suite): then ``serve_endoflife`` judges the restart's end, and ``stop`` is the warm server's."""
        return bool(self.warm.get("kill"))


def startup_cause(log: str) -> str:
    """The root-cause line of a log no diagnosis of ``serve_diagnosis`` knows: the first exception that is not
    one of vLLM's wrappers (``vllmchecks.root_cause``), else the log's last line."""
    cause = root_cause(log)
    if cause:
        return cause
    lines = [line.strip() for line in log.splitlines() if line.strip()]
    return lines[-1] if lines else "no log"


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
    start: tuple[serve_start.ImageConfig, serve_start.Start] | None = None,
    user: str | None = None,
) -> tuple[Status, str, str, dict[str, Any]]:
    """Status, diagnosis, hint and facts of one server run (see the module docstring for what is asserted).

    ``expected_tokens``: offline-generate's eager greedy tokens for ``PROMPT`` (None: no comparison, said so);
    ``ready_budget_s``: the variant's ``ready_budget`` in seconds (None: none); ``env``: the server's
    environment (the image's and the profile's), where a log names no variable (a Kubernetes service link);
    ``start``: the image's config and the form its server was started in (None: this project's ``vllm`` form,
    ``serve_line.PROJECT_START``), shown in ``facts["start"]`` with the user it ran as (``user``: the profile's,
    None: the image's USER) and in the summary."""
    config, form = start if start is not None else (None, serve_line.PROJECT_START)
    facts: dict[str, Any] = {
        "ready_s": seen.ready_s,
        "phases": dict(seen.phases),
        "argv": serve_line.server_args(form),
        "start": start_facts(config, form, user),
    }
    if seen.ready_s is None:
        return _not_ready(seen, facts, env)
    probes = seen.probes
    if not probes:
        return Status.FAILED, "the server was ready but no request was sent", "", facts
    problems = serving.answer_problems(probes, serve_line.MODEL_PATH, expected_tokens, vllm_version, facts)
    hints: list[str] = []
    route = _route_diagnosis(probes, seen.log)
    key = serving.unauthorized(probes, env or {}, facts["argv"])
    if key is not None:  # after the failed route's own words, which come first
        problems.insert(1, key[0])
        hints.append(key[1])
    elif route is not None:
        problems.insert(1, route.diagnosis)
        hints.append(route.fix)
    _run_problems(seen, facts, problems, hints)
    warm = _warm_problems(seen, facts, problems, hints, env)
    ended, ended_hints, ended_facts, ended_words = serve_endoflife.judge(seen.warm, env)
    klass = ended_facts.pop("failure_class", None)
    if ended and klass is not None:
        facts.setdefault("failure_class", klass)
    facts.update(ended_facts)
    problems += ended
    hints += ended_hints
    warm = ended_words + warm  # the kill came before the warm start, its restart
    stop = facts["stop"]
    if ready_budget_s is not None and seen.ready_s > ready_budget_s:
        facts["ready_budget_s"] = ready_budget_s
        problems.append(f"ready after {seen.ready_s:.0f} s, over its ready_budget of {ready_budget_s:.0f} s")
    stopped_words = (
        f"exit {stop.get('exit_code')} in {stop.get('seconds')} s, stream {stop.get('stream')}"
        f"{shutdown.stop_notes(stop)}"
    )
    restarted = seen.restarted
    summary = (
        f"started in the {form.form} form, ready in {seen.ready_s:.0f} s; models, greedy completion"
        f"{' == offline-generate' if expected_tokens is not None else ' (no offline-generate tokens to compare)'}, "
        f"stream, chat, metrics ({facts['metrics_requests']}), version {facts['version']}"
        + ("" if restarted else f"; stop: {stopped_words}")
        + ("; the image's HEALTHCHECK passes" if seen.health else "")
        + warm
        + (f"; its stop: {stopped_words}" if restarted else "")
    )
    stopped = _stop_diagnosis(stop)
    if stopped is not None and not shutdown.unclean_stop(stop):  # else the engine's death is the cause, with its hint
        hints.append(stopped.fix)
    if problems:
        return Status.FAILED, "; ".join(problems), "; ".join(hints) or "read the server's log", facts
    return Status.PASSED, summary, "", facts


def start_facts(config: serve_start.ImageConfig | None, start: serve_start.Start, user: str | None) -> dict[str, Any]:
    """The serve check's ``facts["start"]``: the form, in words, the image's config (``ImageConfig.facts``: its
    HEALTHCHECK included) and the user the server ran as (``user``: the profile's; None: the image's USER)."""
    facts: dict[str, Any] = {"form": start.form, "how": start.how}
    if config is not None:
        facts.update(config.facts())
        facts["run_as"] = user or facts["user"]
    return facts


def unservable(
    image: str, config: serve_start.ImageConfig, start: serve_start.Start
) -> tuple[Status, str, str, dict[str, Any]]:
    """``judge`` of an image no documented form serves (``start.problem``; no server was started): the cause in
    words and the ``docker run`` line that would serve it (``serve_line.working_line``), class 36."""
    facts = {"start": start_facts(config, start, None), "failure_class": serve_diagnosis.START_FORM}
    line = serve_line.working_line(image, start)
    if line is None:
        return Status.FAILED, f"no documented way to start the image serves a model: {start.problem}", "", facts
    facts["working_line"] = line
    return (
        Status.FAILED,
        f"no documented way to start the image serves a model: {start.problem}; this line would: {line}",
        'give the image an exec-form ENTRYPOINT (["vllm"], ["vllm", "serve"], or a script that ends in exec "$@"), '
        "or start it with --entrypoint as that line does",
        facts,
    )


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


def _route_diagnosis(probes: Mapping[str, Any], log: str) -> serve_diagnosis.Diagnosis | None:
    """``serve_route_diagnosis.diagnose_route`` of the first route that did not answer 200, read with the server's
    ``log`` (None: every route answered, or no cause is known)."""
    failed = next(((ROUTES.get(k, k), a) for k, a in probes.items() if a.get("status") != 200), None)
    if failed is None:
        return None
    route, answer = failed
    return serve_route_diagnosis.diagnose_route(route, answer.get("status"), str(answer.get("body", "")), log=log)


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
    if not stop and seen.restarted:  # the warm start, the server stopped, did not come up: judged as such
        facts["stop"] = {
            "skipped": "no server to stop: the restart after SIGKILL did not come up"
            if seen.warm.get("ready_s") is None
            else "no stop observed: the engine failed the restart's stop after it was ready"
        }
        return
    # The engine's death is the root; a stop with another exit or past its grace follows from it.
    stopped, died = shutdown.rooted_stop(stop, stop_problems(stop), lambda p: p.startswith("docker stop"))
    if died:
        facts.setdefault("failure_class", shutdown.UNCLEAN_STOP)
    problems += stopped
    hints += died


def _warm_problems(
    seen: Observed, facts: dict[str, Any], problems: list[str], hints: list[str], env: Mapping[str, str] | None
) -> str:
    """The warm start against the cold one: ready, and reusing what the cold start compiled (``compilecache.reuse``:
    vLLM's model by its load line, else inductor's kernels by none added to the cache), else the named reason it
    compiled again (class 31). Appends to ``problems`` and ``hints``, records ``facts["warm"]`` (and
    ``cold_ready_s``); returns the summary's words for it ("" where none ran or it failed)."""
    if not seen.warm:
        return ""
    restart = seen.restarted
    judged = compilecache.judge_warm(
        seen.log, seen.ready_s, seen.warm, cold_listing=seen.cache_listing, cache_root=seen.cache_root, tmpfs=seen.tmpfs
    )
    facts.update(judged["facts"])
    outcome, warm_log = judged["outcome"], str(seen.warm.get("log") or "")
    if restart and outcome in ("error", "not_ready"):
        return ""
    if outcome == "error":
        problems.append(f"the warm start on the cold start's cache could not run: {seen.warm['error']}")
    elif outcome == "not_ready":
        code = seen.warm.get("exit_code")
        known = serve_diagnosis.diagnose_log(warm_log, code, env=env) if code is not None else None
        if known is not None:
            problems.append(f"the warm start exited ({code}) before it was ready: {known.diagnosis}: {known.cause}")
            hints.append(known.fix)
        else:
            what = f"exited ({code})" if code is not None else f"was not ready within {READY_TIMEOUT_S} s"
            problems.append(f"the warm start on the cold start's cache {what}: {startup_cause(warm_log)}")
    elif outcome == "not_reused":
        name, cause, diagnosis, fix = judged["failure"]
        facts["failure_class"] = compilecache.COMPILE_CACHE
        problems.append(f"the warm start did not reuse the compile cache ({name}): {diagnosis}: {cause!r}")
        hints.append(fix)
    return str(judged["summary"])


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
