"""Package-index reachability: a quick probe before a build that would otherwise hang on it."""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from pathlib import Path

from matrixtool.core import http
from matrixtool.core.errors import ConfigError

# Seconds a probe may take; a reachable index answers its root page in well under this.
PROBE_TIMEOUT = 15.0


def probe(url: str, *, ca_cert: Path | None, env: Mapping[str, str], timeout: float = PROBE_TIMEOUT) -> str | None:
    """None when ``url`` answers, else the reason in a few words. Any HTTP answer (even 404 for an index without a
    root page) counts as reachable.

    Raises ConfigError: ``ca_cert`` is not a readable PEM bundle.
    """
    try:
        ssl.create_default_context(cafile=str(ca_cert) if ca_cert else None)
    except (ssl.SSLError, OSError) as exc:
        raise ConfigError(
            str(ca_cert), [f"not a usable CA bundle ({exc}); pass --ca-cert with a PEM file, or unset the variable"]
        ) from exc
    answer = http.answer(http.session(ca_cert=ca_cert, env=env, timeout=timeout), url.rstrip("/") + "/")
    return answer if isinstance(answer, str) else None
