"""The one HTTP session: CA bundle and proxies from the same settings, a default timeout, an answer or a reason."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from matrixtool.core import http


def test_ca_bundle_order() -> None:
    env = {"PIP_CERT": "/b", "REQUESTS_CA_BUNDLE": "/c"}
    assert http.ca_bundle(Path("/a"), env) == Path("/a")
    assert http.ca_bundle(None, env) == Path("/b")
    assert http.ca_bundle(None, {"SSL_CERT_FILE": "/s", **env}) == Path("/s")
    assert http.ca_bundle(None, {}) is None


def test_env_proxies() -> None:
    env = {"HTTPS_PROXY": "http://proxy:3128", "no_proxy": ".internal,localhost:8080"}
    assert http.env_proxies("https://pypi.org/simple", env) == {"https": "http://proxy:3128"}
    assert http.env_proxies("https://a.internal/simple", env) == {}
    assert http.env_proxies("http://pypi.org/simple", env) == {}


def test_session_settings() -> None:
    made = http.session(ca_cert=Path("/etc/ca.pem"), env={}, timeout=7)
    assert made.verify == "/etc/ca.pem" and made.timeout == 7 and not made.trust_env
    assert made.headers["User-Agent"] == http.USER_AGENT
    assert http.session(ca_cert=None, env={}).verify is True


class _NotFound(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_error(404)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _NotFound)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/"
    srv.shutdown()
    srv.server_close()


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_answer_is_a_status_or_the_reason(server: str) -> None:
    made = http.session(ca_cert=None, env={}, timeout=5)
    assert http.answer(made, server) == 404
    reason = http.answer(made, f"http://127.0.0.1:{_closed_port()}/")
    assert isinstance(reason, str) and "refused" in reason.lower() and "HTTPConnectionPool" not in reason


def test_the_proxy_of_env_is_used(server: str) -> None:
    made = http.session(ca_cert=None, env={"http_proxy": f"http://127.0.0.1:{_closed_port()}"}, timeout=5)
    reason = http.answer(made, "http://example.invalid/")
    assert isinstance(reason, str) and "refused" in reason.lower()
