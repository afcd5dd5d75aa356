"""Diagnoses of a vLLM server's answers that the host (``matrixtool.smoke.serve.diagnosis``) and the bundle
(``serving.judge``) both make: one definition. Pure, standard library only, Python >= 3.9."""

from __future__ import annotations

import re
from typing import Optional, Tuple

WEB_STACK = 16  # docs: shared FAILURE-CLASSES.md, "Routes broken by web-stack skew"

_HANDLER = re.compile(r'^http_requests_total\{[^}]*handler="(?P<handler>[^"]*)"', re.MULTILINE)


def unlabelled_metrics(text: str) -> Optional[Tuple[str, str, str]]:
    """(cause, diagnosis, fix) of a ``/metrics`` answer (``text``, Prometheus' text format) that counts HTTP requests
    but names no route: prometheus-fastapi-instrumentator counted every request under ``handler="none"``. Seen on
    images built on ours with fastapi 0.163.2 (``pip install -U fastapi``) and with fastapi 0.137.1 plus the
    instrumentator 8.0.0: vLLM 0.32 replaces the instrumentator's route walk with one that skips routes without a
    ``path``, and fastapi >= 0.137 keeps included routers as such routes. None when a route is named or no request
    was counted."""
    found = list(_HANDLER.finditer(text))
    if {m["handler"] for m in found} != {"none"}:
        return None
    return (
        found[0].group(0) + "...",
        '/metrics counts every HTTP request under handler="none": the route names are not resolved, as '
        "with a fastapi newer than vLLM declares (>= 0.137 keeps included routers as `_IncludedRouter` routes "
        "without a path, which vLLM's patch of prometheus-fastapi-instrumentator skips), so per-route request "
        "metrics are lost while every route answers",
        "keep the web stack vLLM declares (vLLM 0.32: fastapi<0.137; `pip check` in the image names the "
        "conflict); do not upgrade fastapi alone in an image built on this one",
    )
