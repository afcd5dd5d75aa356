"""An unreachable package index fails a build in seconds, naming the index and the ways out."""

from __future__ import annotations

import http.server
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from matrixtool.build import index
from matrixtool.cli import main
from matrixtool.core.errors import ExitCode
from matrixtool.model.model import REPO_ROOT
from tests.conftest import copy_checkout


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def index_server() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/simple"
    server.shutdown()
    server.server_close()


def test_probe(index_server: str) -> None:
    assert index.probe(index_server, ca_cert=None, env={}, timeout=5) is None  # a 404 is an answer
    reason = index.probe(f"http://127.0.0.1:{_closed_port()}/simple", ca_cert=None, env={}, timeout=5)
    assert reason is not None and "refused" in reason.lower()


def test_build_fails_fast_naming_the_index(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{_closed_port()}/whl/rocm6.4"
    data = yaml.safe_load((REPO_ROOT / "matrix.yaml").read_text())
    data["variants"]["rocm"]["index"]["url"] = url
    copy_checkout(tmp_path, yaml.safe_dump(data))
    runner = CliRunner()
    assert runner.invoke(main, ["--matrix", str(tmp_path / "matrix.yaml"), "render"]).exit_code == 0
    result = runner.invoke(main, ["--matrix", str(tmp_path / "matrix.yaml"), "build", "rocm"], catch_exceptions=False)
    assert result.exit_code == ExitCode.INDEX_UNREACHABLE
    assert f"package index {url} is unreachable" in result.output
    # rocm takes no wheelhouse (matrix.yaml index.wheelhouse), so --wheelhouse is no way out for it.
    assert "--wheelhouse" not in result.output and "variants.rocm.index.url" in result.output
    assert "Traceback" not in result.output


def test_unreachable_index_of_a_wheelhouse_variant_offers_the_wheelhouse(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{_closed_port()}/simple"
    data = yaml.safe_load((REPO_ROOT / "matrix.yaml").read_text())
    data["variants"]["cpu"]["index"]["url"] = url
    copy_checkout(tmp_path, yaml.safe_dump(data))
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl").write_bytes(b"")
    runner = CliRunner()
    assert runner.invoke(main, ["--matrix", str(tmp_path / "matrix.yaml"), "render"]).exit_code == 0
    args = ["--matrix", str(tmp_path / "matrix.yaml"), "build", "cpu", "--wheelhouse", str(wheels)]
    result = runner.invoke(main, args, catch_exceptions=False)
    assert result.exit_code == ExitCode.INDEX_UNREACHABLE, result.output
    assert "pass --wheelhouse DIR holding the wheels (torch==2.13.0+cpu" in result.output


def test_push_does_not_probe_the_index(tmp_path: Path) -> None:
    """A push installs nothing: an index that does not answer must not stop it (exit 10); here the guard's
    unreachable engine is the first thing it meets (exit 8)."""
    url = f"http://127.0.0.1:{_closed_port()}/whl/rocm6.4"
    data = yaml.safe_load((REPO_ROOT / "matrix.yaml").read_text())
    data["variants"]["rocm"]["index"]["url"] = url
    copy_checkout(tmp_path, yaml.safe_dump(data))
    runner = CliRunner()
    matrix = str(tmp_path / "matrix.yaml")
    assert runner.invoke(main, ["--matrix", matrix, "render"]).exit_code == 0
    result = runner.invoke(main, ["--matrix", matrix, "push", "rocm", "--registry", "127.0.0.1:5000"])
    assert result.exit_code == ExitCode.ENGINE, result.output
    assert "package index" not in result.output
