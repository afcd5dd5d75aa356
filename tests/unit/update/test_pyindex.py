"""The index client: only http(s) wheels, wheelhouse wheels, proxies of the given environment, broken answers."""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Any

import pytest

from matrixtool.core.errors import ConfigError, IndexUnreachableError
from matrixtool.core.http import env_proxies
from matrixtool.update import pyindex
from matrixtool.update.pyindex import IndexClient, local_wheel_files


@pytest.mark.parametrize("url", ["file:///etc/passwd", "/etc/passwd", "ftp://x/a.whl", "FILE:///etc/passwd"])
def test_a_page_cannot_make_update_open_a_local_file(url: str) -> None:
    client = IndexClient(ca_cert=None, log=None)
    with pytest.raises(IndexUnreachableError, match=r"only http\(s\) wheels are read"):
        client.wheel_files(url, ())


def test_a_corrupt_wheelhouse_wheel_is_a_config_error_naming_it(tmp_path: Path) -> None:
    bad = tmp_path / "torch-2.14.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"
    bad.write_bytes(b"not a zip")
    with pytest.raises(ConfigError, match="--wheelhouse") as info:
        local_wheel_files(bad, ())
    assert str(bad) in str(info.value) and "not a readable wheel" in str(info.value)
    empty = tmp_path / "empty.whl"
    with zipfile.ZipFile(empty, "w") as archive:
        archive.writestr("x.txt", "")
    with pytest.raises(ConfigError, match=r"has no \*\.dist-info/METADATA"):
        local_wheel_files(empty, ())


def test_a_wheel_whose_metadata_is_over_the_member_limit_is_one_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: the METADATA was silently left out, and ``update`` crashed with ``KeyError: 'METADATA'``."""
    monkeypatch.setattr(pyindex, "MAX_MEMBER_BYTES", 1024)
    wheel = tmp_path / "torch-2.14.0-cp311-cp311-manylinux_2_28_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("torch-2.14.0.dist-info/METADATA", "Requires-Dist: x\n" * 200)
    with pytest.raises(ConfigError, match="--wheelhouse") as info:
        local_wheel_files(wheel, ())
    assert "torch-2.14.0.dist-info/METADATA of 3400 bytes, over the 1024 read" in str(info.value)
    with zipfile.ZipFile(wheel) as archive, pytest.raises(pyindex.NoMetadata, match="over the 1024 read"):
        pyindex._members(archive, ())


def test_proxies_come_from_the_injected_environment() -> None:
    env = {"HTTPS_PROXY": "http://proxy:3128", "no_proxy": "localhost,.internal.example,127.0.0.1:8080"}
    assert env_proxies("https://pypi.org/simple", env) == {"https": "http://proxy:3128"}
    assert env_proxies("https://pkgs.internal.example/simple", env) == {}
    assert env_proxies("https://127.0.0.1:8080/simple", env) == {}
    assert env_proxies("https://127.0.0.1:9/simple", env) == {"https": "http://proxy:3128"}
    assert env_proxies("http://pypi.org/simple", env) == {}  # no http proxy given
    assert env_proxies("http://a/simple", {"all_proxy": "http://p", "NO_PROXY": "*"}) == {}
    client = IndexClient(ca_cert=None, env=env, log=None)
    merged = client.session.merge_environment_settings("https://pypi.org/simple", {}, None, None, None)
    assert merged["proxies"] == {"https": "http://proxy:3128"}
    assert client.session.trust_env is False  # os.environ is never read


def test_crafted_json_api_data_is_ignored_not_a_crash(monkeypatch: pytest.MonkeyPatch) -> None:
    client = IndexClient(ca_cert=None, log=None)
    doc = {
        "info": {"version": "weird", "requires_dist": "not a list"},
        "releases": {"1.0": ["a string", {"filename": "x-1.0.tar.gz", "upload_time": "2026-01-01T00:00:00"}]},
    }
    monkeypatch.setattr(client, "_json_api", lambda url, name: doc)
    assert list(client.upload_times("https://i/simple", "x")) == ["x-1.0.tar.gz"]
    assert client.latest("https://i/simple", "x") is None  # no PEP 440 version
    doc["info"] = {"version": "1.0", "requires_dist": "not a list"}
    latest = client.latest("https://i/simple", "x")
    assert latest is not None and latest.requires_dist == ()


def test_an_index_connection_broken_mid_body_is_the_index_s_fault_not_the_engine_s() -> None:
    """requests' ChunkedEncodingError/ConnectionError while reading a body is exit 10 (IndexUnreachableError);
    uncaught it reached the CLI's handler for an engine that went away (exit 8, naming the Docker socket)."""
    import requests

    class Broken:
        def iter_content(self, size: int) -> Any:
            yield b"{"
            raise requests.exceptions.ChunkedEncodingError("Connection broken: IncompleteRead")

    with pytest.raises(IndexUnreachableError, match="simple/x/: the answer broke off"):
        list(pyindex._body(Broken(), "https://pypi.org/simple/x/"))  # type: ignore[arg-type]


def test_a_json_api_version_past_what_int_converts_is_no_latest_release(monkeypatch: pytest.MonkeyPatch) -> None:
    client = IndexClient(ca_cert=None, env={})
    monkeypatch.setattr(client, "_json_api", lambda index_url, name: {"info": {"version": "1." + "9" * 5000}})
    assert client.latest("https://pypi.org/simple", "vllm") is None
