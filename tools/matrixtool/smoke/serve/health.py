"""The image's own HEALTHCHECK against the ready server, run as Docker runs it (``healthcheck_of``,
``run_healthcheck``), and what its failure means (``health_problem``)."""

from __future__ import annotations

import shlex
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from matrixtool.core.container import TrackedContainer
from matrixtool.smoke.serve import route_diagnosis as serve_route_diagnosis

# Docker's defaults for a HEALTHCHECK option the image leaves out (docker run --help: --health-*), in seconds.
HEALTH_INTERVAL_S, HEALTH_TIMEOUT_S, HEALTH_RETRIES = 30.0, 30.0, 3
# The most this check waits between two runs of a failing HEALTHCHECK (Docker waits its interval).
HEALTH_SPACING_S = 5.0


@dataclass(frozen=True, kw_only=True)
class Healthcheck:
    """An image's HEALTHCHECK as Docker runs it: ``argv`` (``CMD-SHELL`` through ``/bin/sh -c``), seconds per
    run before it counts as failed (``timeout_s``), between runs (``interval_s``), and ``retries``: the
    consecutive failures after which Docker calls the container unhealthy."""

    argv: tuple[str, ...]
    timeout_s: float
    interval_s: float
    retries: int


def healthcheck_of(attrs: Mapping[str, Any]) -> Healthcheck | None:
    """The HEALTHCHECK of an image from its ``docker image inspect`` attributes (``Config.Healthcheck``: ``Test``,
    durations in nanoseconds, 0 for Docker's default); None when it has none or ``NONE``."""
    config = (attrs.get("Config") or {}).get("Healthcheck") or {}
    test = [str(t) for t in config.get("Test") or []]
    if not test or test[0] == "NONE":
        return None
    if test[0] == "CMD-SHELL":
        argv: tuple[str, ...] = ("/bin/sh", "-c", " ".join(test[1:]))
    elif test[0] == "CMD":
        argv = tuple(test[1:])
    else:  # an exec form without its marker (never written by docker build)
        argv = tuple(test)
    if not argv:
        return None

    def seconds(key: str, default: float) -> float:
        value = config.get(key) or 0
        return float(value) / 1e9 if isinstance(value, int | float) and value > 0 else default

    retries = config.get("Retries")
    return Healthcheck(
        argv=argv,
        timeout_s=seconds("Timeout", HEALTH_TIMEOUT_S),
        interval_s=seconds("Interval", HEALTH_INTERVAL_S),
        retries=int(retries) if isinstance(retries, int) and retries > 0 else HEALTH_RETRIES,
    )


def run_healthcheck(server: TrackedContainer, check: Healthcheck | None) -> dict[str, Any]:
    """Run ``check`` in the ready ``server`` as Docker does (an exec as the container's user, in its environment
    and run conditions, each run failed past ``timeout_s``), until one run passes or ``retries`` runs in a row
    failed (Docker's ``unhealthy``), at most ``HEALTH_SPACING_S`` apart. {} without a HEALTHCHECK; else
    ``argv``, ``healthy`` and each run's ``exit_code`` (None: past its timeout) and ``output`` (last 500 chars)."""
    if check is None:
        return {}
    runs: list[dict[str, Any]] = []
    for attempt in range(check.retries):
        if attempt:
            time.sleep(min(check.interval_s, HEALTH_SPACING_S))
        code, output = server.exec(list(check.argv), {}, check.timeout_s)
        runs.append({"exit_code": code, "output": output[-500:]})
        if code == 0:
            break
    return {
        "argv": list(check.argv),
        "timeout_s": check.timeout_s,
        "healthy": runs[-1]["exit_code"] == 0,
        "runs": runs,
    }


def health_problem(health: Mapping[str, Any]) -> tuple[str, str] | None:
    """(problem, fix) for an image HEALTHCHECK that failed against a ready server (``run_healthcheck``'s record),
    or None when it passed or there is none."""
    if not health or health.get("healthy"):
        return None
    last = (health.get("runs") or [{}])[-1]
    code, output = last.get("exit_code"), str(last.get("output") or "")
    shown = shlex.join(str(a) for a in health.get("argv") or [])
    runs = len(health.get("runs") or [])
    if code is None:
        return (
            f"the image's HEALTHCHECK `{shown}` ran past its timeout of {health.get('timeout_s')} s {runs} time(s) "
            "in a row while /health answered 200: Docker marks the container unhealthy",
            "give the HEALTHCHECK a --timeout above what its command takes, or probe /health directly",
        )
    found = serve_route_diagnosis.diagnose_healthcheck(output, int(code))
    if found is not None:
        return f"{found.diagnosis} ({found.cause})", found.fix
    tail = " | ".join(output.strip().splitlines()[-2:])
    return (
        f"the image's HEALTHCHECK `{shown}` exits {code} {runs} time(s) in a row while /health answered 200: "
        f"Docker marks the container unhealthy ({tail or 'no output'})",
        "make the HEALTHCHECK ask the server's /health on the port it listens on (127.0.0.1:8000) with a "
        "program the image has",
    )
