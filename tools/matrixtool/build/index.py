"""Package-index reachability: a quick probe before a build that would otherwise hang on it."""

from __future__ import annotations

import ssl
import urllib.error
import urllib.request
from pathlib import Path

from matrixtool.core.errors import ConfigError

# Seconds a probe may take; a reachable index answers its root page in well under this.
PROBE_TIMEOUT = 15.0


def probe(url: str, *, ca_cert: Path | None, timeout: float = PROBE_TIMEOUT) -> str | None:
    """GET ``url`` (a PEP 503 simple index root); None when it answers, else the reason in a few words.

    ``ca_cert``: CA bundle for TLS-intercepting proxies (the same file the build gets as secret ``ca``).
    Any HTTP answer (even 404 for an index without a root page) counts as reachable.

    Raises:
        ConfigError: ``ca_cert`` is not a readable PEM bundle.
    """
    try:
        context = ssl.create_default_context(cafile=str(ca_cert) if ca_cert else None)
    except (ssl.SSLError, OSError) as exc:
        raise ConfigError(
            str(ca_cert), [f"not a usable CA bundle ({exc}); pass --ca-cert with a PEM file, or unset the variable"]
        ) from exc
    request = urllib.request.Request(url.rstrip("/") + "/", method="GET", headers={"User-Agent": "vllm-image-matrix"})
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=context):
            return None
    except urllib.error.HTTPError as exc:
        exc.close()
        return None
    except urllib.error.URLError as exc:
        return str(exc.reason)
    except (TimeoutError, OSError) as exc:
        return str(exc) or type(exc).__name__
