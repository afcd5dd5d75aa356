"""Diagnoses of a failing `vllm serve` container, from what a serve check sees from outside.

Pure functions, no Docker: the server's log (stdout and stderr as ``docker logs`` gives them) and its exit code
here; the HTTP status and body of a failing route, /metrics, the stop and the HEALTHCHECK in
``serve_route_diagnosis``, with the rules and ``Diagnosis`` of this module. Each returns a
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
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from matrixtool.incontainer.vllm_smoke import compilecache, servediag

# docs/failure-classes.md numbers of the serving classes.
SHM = servediag.SHM
SHM_LEFTOVERS = servediag.SHM_LEFTOVERS
WEB_STACK = 16
CLIENT_MISMATCH = 17
INJECTED_ENV = 18
SIGNALS = 19
PROBES = 20
METRICS_DIR = 22
START_FORM = 36  # an image no documented form of starting serves (serve.start)

# vLLM prefixes each line of a process with its role and pid, then level, date, time and source:
# "(EngineCore pid=24) ERROR 12-01 09:34:20 [core.py:1510] RuntimeError: ...". Worker roles vary
# ("Worker", "Worker_TP0", "EngineCore_DP0"), so any parenthesised role with a pid is taken.
_PREFIX = re.compile(
    r"^(?:\([^()]*pid=\d+\)\s*)?"
    r"(?:(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+\d\d-\d\d \d\d:\d\d:\d\d\s+\[[^\]]*\]\s?)?"
)
# A Python exception line: "ValueError: ...", "vllm.x.EngineDeadError: ...", "Exception: ...", "struct.error: ...".
EXCEPTION_LINE = re.compile(
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


def log_lines(log: str) -> list[str]:
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
    make: Callable[[re.Match[str], list[str], Mapping[str, str]], tuple[int, str, str, str] | None]


def _shm(m: re.Match[str], *_: object) -> tuple[int, str, str, str]:
    need, free = int(m["need"]), int(m["free"])
    what = {"shared-memory allocation": "engine's shared-memory message queue"}.get(m["what"], m["what"])
    return (
        SHM,
        "shm-too-small",
        f"vllm serve asked for {need} MiB of {m['path']} (its {what}) and the container has {free} MiB free: "
        "Docker's and a Kubernetes pod's /dev/shm is 64 MiB unless set",
        f"give the container a larger /dev/shm, at least {need} MiB plus what its workers use (1 GiB is usual): "
        "`docker run --shm-size 1g`, or in Kubernetes a volume `emptyDir: {medium: Memory, sizeLimit: 1Gi}` "
        "mounted at /dev/shm",
    )


def _bad_address(m: re.Match[str], *_: object) -> tuple[int, str, str, str]:
    return (
        servediag.SHM_LEFTOVERS,
        "shm-bad-address",
        "a shared-memory segment could not be used (EFAULT, Bad address): vLLM's reports of it (vllm#54002) follow a "
        "server killed in the same pod, whose segments stay in a /dev/shm that outlived its container; not a /dev/shm "
        "that is too small",
        servediag.LEFTOVERS_FIX,
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
        METRICS_DIR_FIX,
    )


METRICS_DIR_FIX = (
    "unset PROMETHEUS_MULTIPROC_DIR (vLLM then makes and removes its own folder), or point it at an empty folder the "
    "server's user can write on local storage (a Kubernetes `emptyDir`), wiped before each start"
)


METRICS_FILE = (
    "a file in PROMETHEUS_MULTIPROC_DIR is corrupted (cut short, or written by another run or version): "
    "prometheus_client reads every file there for each /metrics request, so /metrics answers 500 while the other "
    "routes work"
)


def _metrics_file(m: re.Match[str], *_: object) -> tuple[int, str, str, str]:
    return METRICS_DIR, "metrics-file-corrupted", METRICS_FILE, METRICS_DIR_FIX


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


def _cache_unwritable(m: re.Match[str], lines: list[str], env: Mapping[str, str]) -> tuple[int, str, str, str] | None:
    """Only a path under the server's cache root (where the compile cache volume is mounted); elsewhere (a HOME of
    ``/``, ``/root/.cache``) the volume is not the cause, and the next rule or the log's exception speaks."""
    root = compilecache.cache_root(env)
    if not (m["path"] == root or m["path"].startswith(root.rstrip("/") + "/")):
        return None
    return (
        compilecache.COMPILE_CACHE,
        "compile-cache-unwritable",
        f"the server's user cannot write {m['path']} ({m['reason']}), in the cache root {root}, which torch's inductor "
        "creates at `import vllm`: the cache volume (or the folder) mounted there is not writable by this UID, so "
        "the server cannot start, let alone keep a compile cache",
        compilecache.unwritable_fix(root),
    )


_RULES = (
    _Rule(
        pattern=re.compile(
            r"Insufficient space in (?P<path>/\S*) for (?P<what>[^:]+): (?P<need>\d+) MiB required, "
            r"(?P<free>\d+) MiB free"
        ),
        make=_shm,
    ),
    # torch's shared-memory tensors (multiprocessing) on a full /dev/shm.
    _Rule(
        pattern=re.compile(r"unable to write to file </torch_\w+>: No space left on device|/dev/shm.*No space left"),
        make=_shm_enospc,
    ),
    _Rule(pattern=re.compile(r"OSError: \[Errno 14\] Bad address"), make=_bad_address),
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
    _Rule(
        pattern=re.compile(
            r"(?:PermissionError|OSError): \[Errno (?:13|30)\] (?P<reason>Permission denied|Read-only file system): "
            r"'(?P<path>[^']*/(?:\.cache|torchinductor|triton|torch_compile_cache)(?:/[^']*)?)'"
        ),
        make=_cache_unwritable,
    ),
    _Rule(pattern=re.compile(r"Read beyond file size detected, file is corrupted"), make=_metrics_file),
    _Rule(pattern=re.compile(r"'_IncludedRouter' object has no attribute 'path'"), make=_included_router),
)


def match_rules(lines: list[str], env: Mapping[str, str] | None = None) -> Diagnosis | None:
    for rule in _RULES:
        for line in lines:
            if (m := rule.pattern.search(line)) and (made := rule.make(m, lines, env or {})) is not None:
                klass, name, diagnosis, fix = made
                return Diagnosis(failure_class=klass, name=name, cause=line.strip(), diagnosis=diagnosis, fix=fix)
    return None


_NEED = re.compile(r"(?P<need>\d+) MiB required")


def _with_shm(found: Diagnosis, shm: Mapping[str, object]) -> Diagnosis:
    """``found`` (a shared-memory diagnosis) read again with /dev/shm's state: leftovers that take the room named as
    the cause (``servediag.shm_cause``); other diagnoses as they are."""
    if found.failure_class not in (SHM, SHM_LEFTOVERS):
        return found
    need = _NEED.search(found.cause)
    made = servediag.shm_cause(int(need["need"]) * 2**20 if need else None, shm)
    if made is None:
        return found
    klass, name, diagnosis, fix = made
    return Diagnosis(failure_class=klass, name=name, cause=found.cause, diagnosis=diagnosis, fix=fix)


def root_exception(log: str) -> str | None:
    """The first exception line of ``log`` that is not only the consequence of another (vLLM's "Engine core
    initialization failed. See root cause above." follows the worker's own error), prefix stripped; None when the
    log holds no exception line."""
    candidates = [line.strip() for line in log_lines(log) if EXCEPTION_LINE.match(line.strip())]
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
    for line in log_lines(log):
        for name, pattern in _PHASES:
            if pattern.search(line):
                phase = name
    return phase


def diagnose_log(
    log: str,
    exit_code: int | None,
    *,
    seconds: float | None = None,
    env: Mapping[str, str] | None = None,
    shm: Mapping[str, object] | None = None,
) -> Diagnosis | None:
    """The cause of a server's failure from its log: ``log`` (``docker logs`` text), ``exit_code`` (None while it
    runs), ``seconds`` (how long it ran, for a server killed while starting) and ``env`` (the container's
    environment, ``docker inspect`` Config.Env as a mapping: it names the variable behind a value the log shows).

    Known causes come first, wherever they appear in the log (a worker's error precedes the API server's
    "See root cause above"). A server that exited without one gets its first root exception line (class None).
    A server killed by a signal (exit 137 or 143) before it started serving, with no exception, was killed while
    starting: class 20 (a liveness probe or a stop that came before the server was ready), with the phase it was
    in. None when the log shows no failure and the server still runs or exited 0.

    ``shm``: /dev/shm as it was after the failure (``servediag.read_shm``; None: not read): a shared-memory failure
    where files left by another server take the room is class 43 (``servediag.shm_cause``), named with them.
    """
    lines = log_lines(log)
    if found := match_rules(lines, env):
        return _with_shm(found, shm) if shm is not None else found
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
