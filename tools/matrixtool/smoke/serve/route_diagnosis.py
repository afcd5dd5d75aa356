"""Diagnoses of a server that started: a failing route (``diagnose_route``), its stop (``diagnose_stop``) and the
image's HEALTHCHECK (``diagnose_healthcheck``); its ``/metrics`` is read by the judgement both sides share
(``vllm_smoke.serving.answer_problems``, with ``servediag.unlabelled_metrics``).

Pure functions, no Docker, as ``serve_diagnosis`` (whose ``Diagnosis``, failure classes and log rules they use):
each names the cause shown in *this* body, log or record, or returns None.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Sequence

from matrixtool.core import jsontext
from matrixtool.smoke.serve.diagnosis import (
    CLIENT_MISMATCH,
    EXCEPTION_LINE,
    METRICS_DIR,
    METRICS_DIR_FIX,
    METRICS_FILE,
    PROBES,
    SIGNALS,
    WEB_STACK,
    Diagnosis,
    log_lines,
    match_rules,
)

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
    lines = log_lines(log)
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
    end = next(
        (j for j in range(start + 1, len(lines)) if EXCEPTION_LINE.match(lines[j].strip())),
        len(lines) - 1,
    )
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
        if found := match_rules([message]):
            return found
        traceback = _route_traceback(log, route)
        if found := match_rules(traceback):
            return found
        cause = next((x.strip() for x in reversed(traceback) if EXCEPTION_LINE.match(x.strip())), None)
        if cause is not None and any(f"/prometheus_client/{f}" in x for x in traceback for f in _MULTIPROC_FILES):
            return Diagnosis(
                failure_class=METRICS_DIR,
                name="metrics-file-corrupted",
                cause=cause,
                diagnosis=METRICS_FILE,
                fix=METRICS_DIR_FIX,
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
