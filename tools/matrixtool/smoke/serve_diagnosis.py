"""Diagnoses of a failing `vllm serve` container, from what a serve check sees from outside.

Pure functions, no Docker: the server's log (stdout and stderr as ``docker logs`` gives them), its exit code, the
HTTP status and body of a failing route, how long a stop took and what PID 1 runs. Each returns a
:class:`Diagnosis` naming the failure class (docs/failure-classes.md), the line of *this* log or body that shows
the cause, what it means and the fix for that cause, or None when nothing points at a known cause.

The patterns are vLLM's and its libraries' own messages, captured from the CPU image (vLLM 0.32.0) under each
failing condition (the captures are the unit tests' data, tests/unit/data/serve/). A failure that only follows
from another (the server died, so a route gets no answer) is reported as a consequence of that one
(:attr:`Diagnosis.consequence_of`), never as a cause of its own.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from matrixtool.core import jsontext
from matrixtool.incontainer.vllm_smoke import servediag

# docs/failure-classes.md numbers of the serving classes.
SHM = 15
WEB_STACK = 16
CLIENT_MISMATCH = 17
INJECTED_ENV = 18
SIGNALS = 19
PROBES = 20
METRICS_DIR = 22

# vLLM prefixes each line of a process with its role and pid, then level, date, time and source:
# "(EngineCore pid=24) ERROR 12-01 09:34:20 [core.py:1510] RuntimeError: ...". Worker roles vary
# ("Worker", "Worker_TP0", "EngineCore_DP0"), so any parenthesised role with a pid is taken.
_PREFIX = re.compile(
    r"^(?:\([^()]*pid=\d+\)\s*)?"
    r"(?:(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+\d\d-\d\d \d\d:\d\d:\d\d\s+\[[^\]]*\]\s?)?"
)
# A Python exception line: "ValueError: ...", "vllm.x.EngineDeadError: ...", "Exception: ...", "struct.error: ...".
_EXCEPTION = re.compile(
    r"^(?:(?:[A-Za-z_]\w*\.)*(?:[A-Z]\w*(?:Error|Exception|Exit|Interrupt)|Exception)|(?:[a-z_]\w*\.)+error):\s"
)
# Lines vLLM prints because another process failed first: never the cause.
_CONSEQUENCES = (
    re.compile(r"Engine core initialization failed"),
    re.compile(r"WorkerProc initialization failed"),
    re.compile(r"EngineCore failed to start"),
    re.compile(r"WorkerProc failed to start"),
    re.compile(r"See (?:root cause|stack trace)"),
    re.compile(r"EngineDeadError"),
    re.compile(r"^KeyboardInterrupt: terminated"),
)
# uvicorn's line once the HTTP server listens; a server that logged it got past start-up.
_STARTED = "Application startup complete."


@dataclass(frozen=True, kw_only=True)
class Diagnosis:
    """What went wrong with a served image and what to do about it.

    ``failure_class``: the number in docs/failure-classes.md, None for a cause no class covers (its ``cause`` line
    is still this log's); ``name``: a short stable slug (for tests and reports); ``cause``: the line of this log or
    body that shows the cause, prefix stripped; ``diagnosis``: one sentence naming the cause with the values this
    run saw; ``fix``: what to change, for this cause; ``consequence_of``: the diagnosis this failure only follows
    from (e.g. the server died, so a route got no answer), None for a root cause.
    """

    failure_class: int | None
    name: str
    cause: str
    diagnosis: str
    fix: str
    consequence_of: Diagnosis | None = None

    def render(self) -> str:
        """``diagnosis`` and ``fix`` as one message, with the cause line quoted; a consequence names its root."""
        if self.consequence_of is not None:
            return f"{self.diagnosis} (a consequence of: {self.consequence_of.render()})"
        klass = f" [failure class {self.failure_class}]" if self.failure_class is not None else ""
        return f"{self.diagnosis}{klass}: {self.cause!r}. Fix: {self.fix}"


def _lines(log: str) -> list[str]:
    """The log's lines with vLLM's process/level/source prefix removed (docker's own lines have none)."""
    return [_PREFIX.sub("", line.rstrip("\r")) for line in log.splitlines()]


def _is_consequence(line: str) -> bool:
    return any(p.search(line) for p in _CONSEQUENCES)


# --- root causes in a server log -------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class _Rule:
    """A cause recognised by one line: ``pattern`` (searched in each prefix-stripped line) and the diagnosis made
    from its match (and the whole log, for values printed elsewhere)."""

    pattern: re.Pattern[str]
    make: Callable[[re.Match[str], list[str], Mapping[str, str]], tuple[int, str, str, str]]


def _shm(m: re.Match[str], *_: object) -> tuple[int, str, str, str]:
    need, free = int(m["need"]), int(m["free"])
    return (
        SHM,
        "shm-too-small",
        f"vllm serve asked for {need} MiB of /dev/shm (its engine's shared-memory message queue) and the container "
        f"has {free} MiB free: Docker's and a Kubernetes pod's /dev/shm is 64 MiB unless set",
        f"give the container a larger /dev/shm, at least {need} MiB plus what its workers use (1 GiB is usual): "
        "`docker run --shm-size 1g`, or in Kubernetes a volume `emptyDir: {medium: Memory, sizeLimit: 1Gi}` "
        "mounted at /dev/shm",
    )


def _shm_enospc(m: re.Match[str], *_: object) -> tuple[int, str, str, str]:
    return (
        SHM,
        "shm-full",
        "a write to shared memory (/dev/shm) failed with ENOSPC (No space left on device): /dev/shm is full; "
        "Docker's and a Kubernetes pod's /dev/shm is 64 MiB unless set",
        "give the container a larger /dev/shm: `docker run --shm-size 1g`, or in Kubernetes a volume "
        "`emptyDir: {medium: Memory, sizeLimit: 1Gi}` mounted at /dev/shm",
    )


_SERVICE_LINK = (
    "Kubernetes sets <SERVICE>_PORT=tcp://<cluster IP>:<port> (and <SERVICE>_SERVICE_HOST, ...) in every pod for "
    "each Service of the namespace, with the Service's name upper-cased and '-' turned into '_'"
)
_SERVICE_LINK_FIX = (
    "set `enableServiceLinks: false` in the pod spec (vLLM does not use service links), or rename the Service; "
    "a value given in the container's own `env` also replaces the injected one"
)


def _vllm_port(m: re.Match[str], *_: object) -> tuple[int, str, str, str]:
    return (
        INJECTED_ENV,
        "vllm-port-service-link",
        f"VLLM_PORT is {m['value']!r}, a Kubernetes service link, not a port: {_SERVICE_LINK}, so a Service named "
        "`vllm` yields VLLM_PORT, which vLLM reads as the first port of its internal sockets",
        _SERVICE_LINK_FIX,
    )


# A VLLM_* setting vLLM parses with int(): envs.py's getter line, printed in the traceback above the error.
_ENV_GETTER = re.compile(r"os\.getenv\(\s*[\"'](?P<name>VLLM_\w+)[\"']")


def _int_service_link(m: re.Match[str], lines: list[str], env: Mapping[str, str]) -> tuple[int, str, str, str]:
    value = m["value"]
    at = next(i for i, line in enumerate(lines) if m.group(0) in line)
    # The setting: envs.py's getter line in the traceback (a worker's error), else the container's variable that
    # holds the value (vLLM's config validation wraps the error without a traceback line naming it).
    names = [g["name"] for line in lines[:at] if (g := _ENV_GETTER.search(line))]
    names = names or sorted(k for k, v in env.items() if v == value and k.startswith("VLLM_"))
    name = names[-1] if names else None
    service = name[: -len("_PORT")].lower().replace("_", "-") if name and name.endswith("_PORT") else None
    which = (
        f"{name} is {value!r}, a Kubernetes service link (a Service named `{service}`), not a number"
        if name and service
        else f"a vLLM setting is {value!r}, which looks like a Kubernetes service link, not a number"
    )
    return INJECTED_ENV, "port-service-link", f"{which}: {_SERVICE_LINK}", _SERVICE_LINK_FIX


def _metrics_dir(m: re.Match[str], *_: object) -> tuple[int, str, str, str]:
    folder = posixpath.dirname(m["path"])
    errno = int(m["errno"])
    why = {2: "does not exist", 13: "is not writable by the server's user", 30: "is on a read-only filesystem"}.get(
        errno, f"cannot be written ({m['reason']})"
    )
    return (
        METRICS_DIR,
        "metrics-dir-unusable",
        f"PROMETHEUS_MULTIPROC_DIR is {folder}, which {why}: with it set, prometheus_client writes one file per "
        "process and metric there, and vLLM's metrics fail as they are created",
        _METRICS_DIR_FIX,
    )


_METRICS_DIR_FIX = (
    "unset PROMETHEUS_MULTIPROC_DIR (vLLM then makes and removes its own folder), or point it at an empty folder the "
    "server's user can write on local storage (a Kubernetes `emptyDir`), wiped before each start"
)


_METRICS_FILE = (
    "a file in PROMETHEUS_MULTIPROC_DIR is corrupted (cut short, or written by another run or version): "
    "prometheus_client reads every file there for each /metrics request, so /metrics answers 500 while the other "
    "routes work"
)


def _metrics_file(m: re.Match[str], *_: object) -> tuple[int, str, str, str]:
    return METRICS_DIR, "metrics-file-corrupted", _METRICS_FILE, _METRICS_DIR_FIX


def _included_router(m: re.Match[str], *_: object) -> tuple[int, str, str, str]:
    return (
        WEB_STACK,
        "fastapi-instrumentator-skew",
        "fastapi >= 0.137 represents included routers as `_IncludedRouter` objects without a `path`, and "
        "prometheus-fastapi-instrumentator < 8.1.0 reads `route.path` on every request: every route of the server "
        "answers 500, /health included, while the process stays up",
        "install the web stack vLLM declares (vLLM 0.32 requires fastapi<0.137: `pip check` names the conflict), "
        "or prometheus-fastapi-instrumentator>=8.1.0, which resolves included routers (vLLM >= 0.32 also patches "
        "the route walk); do not upgrade fastapi alone in an image built on this one",
    )


_RULES = (
    _Rule(
        pattern=re.compile(
            r"Insufficient space in /dev/shm for shared-memory allocation: (?P<need>\d+) MiB required, "
            r"(?P<free>\d+) MiB free"
        ),
        make=_shm,
    ),
    # torch's shared-memory tensors (multiprocessing) on a full /dev/shm.
    _Rule(
        pattern=re.compile(r"unable to write to file </torch_\w+>: No space left on device|/dev/shm.*No space left"),
        make=_shm_enospc,
    ),
    _Rule(pattern=re.compile(r"VLLM_PORT '(?P<value>[^']+)' appears to be a URI"), make=_vllm_port),
    _Rule(
        pattern=re.compile(r"invalid literal for int\(\) with base 10: '(?P<value>tcp://[^']+)'"),
        make=_int_service_link,
    ),
    _Rule(
        pattern=re.compile(
            r"(?:FileNotFoundError|PermissionError|OSError): \[Errno (?P<errno>\d+)\] (?P<reason>[^:]+): "
            r"'(?P<path>[^']*/(?:counter|gauge|histogram|summary)_[^'/]*\.db)'"
        ),
        make=_metrics_dir,
    ),
    _Rule(pattern=re.compile(r"Read beyond file size detected, file is corrupted"), make=_metrics_file),
    _Rule(pattern=re.compile(r"'_IncludedRouter' object has no attribute 'path'"), make=_included_router),
)


def _match_rules(lines: list[str], env: Mapping[str, str] | None = None) -> Diagnosis | None:
    for rule in _RULES:
        for line in lines:
            if m := rule.pattern.search(line):
                klass, name, diagnosis, fix = rule.make(m, lines, env or {})
                return Diagnosis(failure_class=klass, name=name, cause=line.strip(), diagnosis=diagnosis, fix=fix)
    return None


def root_exception(log: str) -> str | None:
    """The first exception line of ``log`` that is not only the consequence of another (vLLM's "Engine core
    initialization failed. See root cause above." follows the worker's own error), prefix stripped; None when the
    log holds no exception line."""
    candidates = [line.strip() for line in _lines(log) if _EXCEPTION.match(line.strip())]
    roots = [line for line in candidates if not _is_consequence(line)]
    return next(iter(roots or candidates), None)


# Start-up phases vLLM logs, in order; the last one seen says what a killed server was still doing.
_PHASES = (
    ("importing vLLM and resolving the model", re.compile(r"non-default args:")),
    ("starting the engine core", re.compile(r"Initializing a V1 LLM engine")),
    ("loading the weights", re.compile(r"Starting to load model|Loading weights")),
    (
        "compiling the model (torch.compile warm-up)",
        re.compile(
            r"Warming up model for the compilation|compiled function|Dynamo bytecode transform|Compiling a graph"
        ),
    ),
    ("allocating the KV cache", re.compile(r"Warming up done|KV cache size|init engine \(")),
    ("starting the HTTP server", re.compile(r"Starting vLLM (?:API )?server|Available routes are")),
)


def start_phase(log: str) -> str | None:
    """The last start-up phase ``log`` shows (a short description, e.g. "compiling the model (torch.compile)"), or
    None when it shows none."""
    phase = None
    for line in _lines(log):
        for name, pattern in _PHASES:
            if pattern.search(line):
                phase = name
    return phase


def diagnose_log(
    log: str, exit_code: int | None, *, seconds: float | None = None, env: Mapping[str, str] | None = None
) -> Diagnosis | None:
    """The cause of a server's failure from its log: ``log`` (``docker logs`` text), ``exit_code`` (None while it
    runs), ``seconds`` (how long it ran, for a server killed while starting) and ``env`` (the container's
    environment, ``docker inspect`` Config.Env as a mapping: it names the variable behind a value the log shows).

    Known causes come first, wherever they appear in the log (a worker's error precedes the API server's
    "See root cause above"). A server that exited without one gets its first root exception line (class None).
    A server killed by a signal (exit 137 or 143) before it started serving, with no exception, was killed while
    starting: class 20 (a liveness probe or a stop that came before the server was ready), with the phase it was
    in. None when the log shows no failure and the server still runs or exited 0.
    """
    lines = _lines(log)
    if found := _match_rules(lines, env):
        return found
    if exit_code in (None, 0):
        return None
    started = any(_STARTED in line for line in lines)
    if exit_code in (137, 143) and not started:
        signal = "SIGKILL" if exit_code == 137 else "SIGTERM"
        phase = start_phase(log) or "starting"
        after = f" {seconds:.0f} s after it started" if seconds is not None else ""
        last = next((line.strip() for line in reversed(lines) if line.strip()), "")
        return Diagnosis(
            failure_class=PROBES,
            name="killed-while-starting",
            cause=last,
            diagnosis=f"the server was killed ({signal}, exit {exit_code}){after}, while still {phase}: "
            "a liveness probe (or a stop) that does not wait for a cold start",
            fix="probe a starting server with a startupProbe on /health whose failureThreshold x periodSeconds "
            "exceeds its measured time to ready (compiling takes longer than --enforce-eager), and start the "
            "liveness probe only after it; in Docker, HEALTHCHECK --start-period",
        )
    cause = root_exception(log)
    if cause is None:
        cause = next((line.strip() for line in reversed(lines) if line.strip()), "(empty log)")
    return Diagnosis(
        failure_class=None,
        name="server-exited",
        cause=cause,
        diagnosis=f"the server exited with {exit_code}" + (" after it had started" if started else " while starting"),
        fix="read the cause line and the traceback above it in the server's log",
    )


# --- failing routes --------------------------------------------------------------------------------------------------

_CHAT_TEMPLATE = re.compile(r"chat template", re.IGNORECASE)
_NO_MODEL = re.compile(r"The model `(?P<asked>[^`]*)` does not exist\.(?:\s*Valid aliases: (?P<valid>[^\"]*?)\.)?")
_ASGI = "Exception in ASGI application"


def _error_message(body: str) -> str:
    """The ``error.message`` of an OpenAI-style error body, else the body itself (one line, at most 500 chars)."""

    try:
        doc = jsontext.loads(body)
        message = doc["error"]["message"] if isinstance(doc.get("error"), dict) else doc.get("detail", body)
    except (ValueError, AttributeError, KeyError, TypeError):
        message = body
    return " ".join(str(message).split())[:500]


def _route_traceback(log: str, route: str) -> list[str]:
    """The traceback behind a 5xx of ``route`` in ``log``, from its "Traceback (most recent call last):" line to its
    exception line: the last traceback under an "Exception in ASGI application" line whose access line (uvicorn
    prints it just before) names ``route``'s path, else the log's last traceback; no lines when it holds none."""
    lines = _lines(log)
    path = route.split()[-1]
    headers = [i for i, line in enumerate(lines) if _ASGI in line]
    named = [i for i in headers if any(f"{path} HTTP/" in x for x in lines[max(0, i - 3) : i + 1])]
    tracebacks = [i for i, line in enumerate(lines) if line.strip().startswith("Traceback (most recent call last)")]
    if named:
        start = next((t for t in tracebacks if t > named[-1]), named[-1])
    elif tracebacks:
        start = tracebacks[-1]
    else:
        return []
    end = next((j for j in range(start + 1, len(lines)) if _EXCEPTION.match(lines[j].strip())), len(lines) - 1)
    return lines[start : end + 1]


def diagnose_route(
    route: str, status: int | None, body: str, *, log: str = "", server: Diagnosis | None = None
) -> Diagnosis | None:
    """The cause of one failing request: ``route`` (e.g. "POST /v1/chat/completions"), ``status`` (None when
    nothing answered), ``body`` (the response), ``log`` (the server's log, where a 500's traceback is) and
    ``server`` (the server's own diagnosis when it exited or is broken: the route's failure is then its
    consequence). None for a 2xx/3xx answer or an error nothing here recognises.
    """
    if server is not None and (status is None or status >= 500):
        return Diagnosis(
            failure_class=server.failure_class,
            name=server.name,
            cause=f"{route}: " + ("no answer" if status is None else f"{status} {_error_message(body)}"),
            diagnosis=f"{route} failed because the server itself failed",
            fix=server.fix,
            consequence_of=server,
        )
    if status is None or status < 400:
        return None
    message = _error_message(body)
    if status == 400 and "chat/completions" in route and _CHAT_TEMPLATE.search(message):
        return Diagnosis(
            failure_class=CLIENT_MISMATCH,
            name="no-chat-template",
            cause=message,
            diagnosis=f"{route} answered 400: the served model has no chat template, so vLLM cannot turn messages "
            "into a prompt (transformers no longer supplies a default one)",
            fix="give the model a chat template: `vllm serve MODEL --chat-template TEMPLATE.jinja`, or a "
            "`chat_template` in the model's tokenizer_config.json (or a chat_template.jinja beside it); a base model "
            "without one serves /v1/completions only",
        )
    if status == 404 and (m := _NO_MODEL.search(message)):
        valid = m["valid"]
        serves = f"serves {valid!r}" if valid else "serves other names (GET /v1/models lists them)"
        return Diagnosis(
            failure_class=CLIENT_MISMATCH,
            name="unknown-model-id",
            cause=message,
            diagnosis=f"{route} answered 404: the client asked for model {m['asked']!r}, the server {serves} "
            "(--served-model-name, else the model path it was started with)",
            fix="send the served name (GET /v1/models lists it), or start the server with "
            "`--served-model-name <the id clients send>` (it takes several names)",
        )
    if status >= 500:
        # vLLM answers an unhandled error with its message as the body's error.message; uvicorn logs a traceback
        # only for what escapes vLLM's handler (a middleware's error).
        if found := _match_rules([message]):
            return found
        traceback = _route_traceback(log, route)
        if found := _match_rules(traceback):
            return found
        cause = next((x.strip() for x in reversed(traceback) if _EXCEPTION.match(x.strip())), None)
        if cause is not None and any(f"/prometheus_client/{f}" in x for x in traceback for f in _MULTIPROC_FILES):
            return Diagnosis(
                failure_class=METRICS_DIR,
                name="metrics-file-corrupted",
                cause=cause,
                diagnosis=_METRICS_FILE,
                fix=_METRICS_DIR_FIX,
            )
        if cause is not None:
            web = sorted({p for x in traceback for p in _WEB_PACKAGES if f"/{p}/" in x})
            return Diagnosis(
                failure_class=WEB_STACK if web else None,
                name="route-500",
                cause=cause,
                diagnosis=f"{route} answered {status} while the server runs"
                + (f"; the traceback runs through {', '.join(web)}" if web else ""),
                fix="install the versions of fastapi, starlette and prometheus-fastapi-instrumentator that vLLM "
                "declares (`pip check` in the image names a conflict)"
                if web
                else "read the traceback after 'Exception in ASGI application' in the server's log",
            )
    return None


_MULTIPROC_FILES = ("mmap_dict.py", "multiprocess.py")
_WEB_PACKAGES = ("fastapi", "starlette", "prometheus_fastapi_instrumentator", "prometheus_client", "uvicorn")


def diagnose_metrics(text: str) -> Diagnosis | None:
    """The cause of a ``/metrics`` answer that names no route (class 16; ``servediag.unlabelled_metrics``, which
    the bundle applies too). None when a route is named or no request was counted."""
    found = servediag.unlabelled_metrics(text)
    if found is None:
        return None
    cause, diagnosis, fix = found
    return Diagnosis(failure_class=WEB_STACK, name="metrics-handler-none", cause=cause, diagnosis=diagnosis, fix=fix)


# --- stopping ----------------------------------------------------------------------------------------------------

_SHELLS = frozenset({"sh", "bash", "dash", "ash", "zsh", "ksh", "mksh", "busybox"})


def diagnose_stop(*, exit_code: int, seconds: float, grace: float, pid1: Sequence[str]) -> Diagnosis | None:
    """The cause of a stop that broke the contract (exit 0 or 143 within the grace): ``exit_code`` after
    ``docker stop -t GRACE``, ``seconds`` it took, ``grace`` in seconds, ``pid1`` the argv of the container's PID 1
    (``docker top`` or ``/proc/1/cmdline``). None when the stop kept the contract."""
    if exit_code in (0, 143) and seconds <= grace + 1:
        return None
    argv = " ".join(pid1)
    shell = bool(pid1) and posixpath.basename(pid1[0]) in _SHELLS
    took = f"docker stop took {seconds:.0f} s of a {grace:.0f} s grace and ended with exit {exit_code}"
    if shell and exit_code == 137:
        return Diagnosis(
            failure_class=SIGNALS,
            name="shell-pid1-swallows-sigterm",
            cause=f"PID 1: {argv}",
            diagnosis=f"{took} (SIGKILL): PID 1 is a shell, which does not pass SIGTERM on to vLLM, and a PID 1 "
            "without a handler ignores it, so the server never learnt it should stop",
            fix="make the server PID 1: ENTRYPOINT/CMD in exec (JSON) form naming `vllm`, or `exec vllm serve ...` "
            "as the script's last line; a pod's `command:` likewise without `sh -c`",
        )
    return Diagnosis(
        failure_class=SIGNALS,
        name="stop-not-within-grace",
        cause=f"PID 1: {argv}" if argv else f"exit {exit_code}",
        diagnosis=f"{took}: the server did not stop within the grace on SIGTERM",
        fix="find what kept it (in-flight requests, a child that ignores SIGTERM) in its log; give the pod a "
        "terminationGracePeriodSeconds above the server's drain time",
    )


# --- healthchecks ------------------------------------------------------------------------------------------------

_MISSING_BINARY = re.compile(
    r"exec: \"(?P<binary>[^\"]+)\": executable file not found in \$PATH|(?P<sh>\S+): \d*:?\s*(?P<bin2>[\w.-]+): "
    r"not found"
)


def diagnose_healthcheck(output: str, exit_code: int) -> Diagnosis | None:
    """The cause of a failing Docker HEALTHCHECK (or Kubernetes exec probe) from its ``output`` and ``exit_code``
    (``docker inspect`` State.Health.Log): a command the image lacks. None for another failure or a pass."""
    if exit_code == 0:
        return None
    for line in output.splitlines():
        if m := _MISSING_BINARY.search(line):
            binary = m["binary"] or m["bin2"]
            return Diagnosis(
                failure_class=PROBES,
                name="healthcheck-binary-missing",
                cause=line.strip(),
                diagnosis=f"the health check runs `{binary}`, which the image does not contain: the container is "
                "reported unhealthy (and a pod restarted) however well the server runs",
                fix="probe with what the image has: an httpGet probe on /health in Kubernetes, or in Docker "
                "`HEALTHCHECK CMD python3 -c \"import urllib.request; urllib.request.urlopen('http://localhost:8000/"
                "health')\"`",
            )
    return None
