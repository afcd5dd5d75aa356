"""The one way the host tool speaks HTTP, like pip's ``network/session.py``: CA bundle, proxies and timeout come
from the same settings everywhere; the process environment is read only when the caller passes it, netrc
never, and every request gets the session's timeout (requests has none by default).
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import requests

# Where the tool looks for a CA bundle after --ca-cert, in this order (the build gets the same file as
# secret ``ca``).
CA_ENV_VARS = ("SSL_CERT_FILE", "PIP_CERT", "REQUESTS_CA_BUNDLE")
USER_AGENT = "vllm-image-matrix"
DEFAULT_TIMEOUT = 30.0  # seconds to connect, and between two reads of an answer


def ca_bundle(flag: Path | None, env: Mapping[str, str]) -> Path | None:
    """The CA bundle: ``flag`` (``--ca-cert``), else the first of ``CA_ENV_VARS`` set in ``env``, else None."""
    if flag is not None:
        return flag
    for var in CA_ENV_VARS:
        if env.get(var):
            return Path(env[var])
    return None


def env_proxies(url: str, env: Mapping[str, str]) -> dict[str, str]:
    """The proxy for ``url`` by ``env`` (``https_proxy``, ``http_proxy``, ``all_proxy``, lower case first, then
    upper case; ``no_proxy`` hosts, domain suffixes or ``*`` bypass them): ``{scheme: proxy}``, empty for a
    direct connection."""

    def get(name: str) -> str:
        return env.get(name) or env.get(name.upper()) or ""

    parts = urllib.parse.urlsplit(url)
    proxy = get(f"{parts.scheme}_proxy") or get("all_proxy")
    if not proxy or not parts.hostname:
        return {}
    if _bypassed(parts.hostname.lower(), parts.port, get("no_proxy")):
        return {}
    return {parts.scheme: proxy}


def _bypassed(host: str, port: int | None, no_proxy: str) -> bool:
    """``host`` is named by ``no_proxy`` (comma-separated: ``*``, a host, a domain with or without its
    leading dot, each with an optional ``:port``)."""
    for entry in (e.strip().lower() for e in no_proxy.split(",")):
        name, _, entry_port = entry.rpartition(":") if entry.count(":") == 1 else (entry, "", "")
        if entry == "*":
            return True
        if not name or (entry_port and str(port) != entry_port):
            continue
        name = name.lstrip(".")
        if host == name or host.endswith(f".{name}"):
            return True
    return False


class Session(requests.Session):
    """A session with the proxies of ``env`` only (``env_proxies``) and a default timeout (seconds)."""

    def __init__(self, env: Mapping[str, str], timeout: float) -> None:
        super().__init__()
        self.trust_env = False
        self.env = dict(env)
        self.timeout = timeout

    def merge_environment_settings(self, url: Any, proxies: Any, stream: Any, verify: Any, cert: Any) -> Any:
        merged = dict(proxies or {})
        for scheme, proxy in env_proxies(str(url), self.env).items():
            merged.setdefault(scheme, proxy)
        return super().merge_environment_settings(url, merged, stream, verify, cert)

    def request(self, method: str | bytes, url: str | bytes, *args: Any, **kwargs: Any) -> requests.Response:
        kwargs.setdefault("timeout", self.timeout)
        return super().request(method, url, *args, **kwargs)


def session(*, ca_cert: Path | None, env: Mapping[str, str], timeout: float = DEFAULT_TIMEOUT) -> Session:
    """The tool's HTTP session: TLS verified against ``ca_cert`` (None: certifi's bundle), the proxies of
    ``env``, ``timeout`` seconds unless a request names its own. Reads no file until the first request."""
    made = Session(env, timeout)
    made.headers["User-Agent"] = USER_AGENT
    made.verify = str(ca_cert) if ca_cert else True
    return made


def reason(exc: BaseException) -> str:
    """Why a request got no answer, in a few words: the innermost cause of ``exc`` (``[Errno 111] Connection
    refused``, ``timed out``), as urllib would say it, not requests' and urllib3's wrappers around it."""
    seen: set[int] = set()
    inner: BaseException = exc
    while id(inner) not in seen:
        seen.add(id(inner))
        nested = getattr(inner, "reason", None)
        if not isinstance(nested, BaseException):
            nested = inner.__cause__ or inner.__context__
        if not isinstance(nested, BaseException) and inner.args and isinstance(inner.args[0], BaseException):
            nested = inner.args[0]
        if not isinstance(nested, BaseException):
            break
        inner = nested
    return str(inner) or type(inner).__name__


def answer(http: requests.Session, url: str, *, timeout: float | None = None) -> int | str:
    """GET ``url`` and return the answer's HTTP status (any status: 404 and 401 are answers too), or, when
    nothing answered (refused, timed out, TLS failed, a broken proxy), the ``reason`` as a string."""
    try:
        with http.get(url, timeout=timeout, stream=True) as response:
            return response.status_code
    except (requests.RequestException, OSError) as exc:
        return reason(exc)
