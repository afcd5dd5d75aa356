"""Faults with the real engine, registry and processes (issue 20): two runs on one --out, an index that does not
answer while nothing needs building, a full disk during an export, the hardened check container of test --image,
the registry stopped during a push and before a manifest.

Cheap: the session's CPU image is reused (never rebuilt) and each check run is one or two checks.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import docker
import pytest
import yaml

from tests.integration.conftest import MATRIX, json_of, matrix_cli

pytestmark = [pytest.mark.engine, pytest.mark.slow]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start(*args: str, out: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [MATRIX, "--out", str(out), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def test_two_runs_on_one_out_each_keep_their_own_report(tmp_path: Path) -> None:
    out = tmp_path / "out"
    slow = tmp_path / "slow-python"  # an interpreter that takes 5 s to start: the first run holds --out a while
    slow.write_text('#!/bin/sh\nsleep 5\nexec python3 "$@"\n')
    slow.chmod(0o755)
    first = _start(
        "test", "--host", "--as", "cpu", "--only", "pip-check", "--python", str(slow), "--json-file",
        str(tmp_path / "first.json"), out=out,
    )  # fmt: skip
    deadline = time.monotonic() + 30
    while not (out / ".lock").exists() or f"pid {first.pid}:" not in (out / ".lock").read_text():
        assert time.monotonic() < deadline and first.poll() is None, "the first run never took the lock"
        time.sleep(0.05)
    refused = matrix_cli("--no-wait", "test", "--host", "--as", "cpu", "--only", "torch-import", out=out)
    second = _start(
        "test", "--host", "--as", "cpu", "--only", "torch-import", "--json-file", str(tmp_path / "second.json"), out=out
    )
    _, first_err = first.communicate(timeout=300)
    _, second_err = second.communicate(timeout=300)
    assert refused.returncode == 19, refused.stderr
    assert f"is in use by pid {first.pid}: tools/matrix --out {out} test --host" in refused.stderr
    assert f"waiting for {out}: in use by pid {first.pid}" in second_err
    assert first.returncode in (0, 7) and second.returncode in (0, 7), first_err + second_err
    # Each JSON report holds its own run's check; the JUnit file is the later run's whole.
    assert [c["check"] for c in json.loads((tmp_path / "first.json").read_text())["checks"]] == ["pip-check"]
    assert [c["check"] for c in json.loads((tmp_path / "second.json").read_text())["checks"]] == ["torch-import"]
    junit = (out / "reports" / "junit.xml").read_text()
    assert 'name="torch-import"' in junit and 'name="pip-check"' not in junit


def test_a_dead_index_does_not_stop_a_run_whose_image_is_built(cpu_image: str, tmp_path: Path) -> None:
    """The index (pypi.org) does not answer: every HTTP(S) request goes through a proxy on a closed port."""
    dead = f"http://127.0.0.1:{_closed_port()}"
    env = {
        "HTTPS_PROXY": dead,
        "https_proxy": dead,
        "HTTP_PROXY": dead,
        "http_proxy": dead,
        "NO_PROXY": "",
        "no_proxy": "",
    }
    proc = matrix_cli("run", "cpu", "--only", "pip-check", "--json", out=tmp_path / "out", env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json_of(proc)
    assert [b["image"] for b in doc["builds"]] == [cpu_image] and doc["builds"][0]["cached"]
    forced = matrix_cli("build", "cpu", "--force", out=tmp_path / "out", env=env, timeout=120)
    assert forced.returncode == 10, forced.stderr[-3000:]  # a build that would install still needs the index
    assert "package index https://pypi.org/simple is unreachable" in forced.stderr


def test_test_image_runs_hardened_and_the_cpu_image_still_passes(cpu_image: str, tmp_path: Path) -> None:
    proc = matrix_cli(
        "test", "--image", cpu_image, "--as", "cpu", "--profile", "default", "--only", "run-conditions",
        "--only", "pip-check", "--json", out=tmp_path / "out", timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "profile default (" in proc.stderr and "cap-drop ALL, no-new-privileges, pids 4096" in proc.stderr
    (conditions,) = [c for c in json_of(proc)["checks"] if c["check"] == "run-conditions"]
    facts = conditions["facts"]
    assert int(facts["capabilities_bounding"], 16) == 0
    assert facts["no_new_privs"] is True and facts["pids_max"] == 4096


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Iterator[Path]:
    """A 64 KiB tmpfs mounted for the test (root only), unmounted afterwards."""
    mount = tmp_path / "tiny"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.fail(f"cannot mount a tmpfs (the fault test needs root): {done.stderr!r}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=True)


def test_a_full_disk_during_an_export_names_the_file_and_leaves_nothing_half_written(
    cpu_image: str, tiny_disk: Path
) -> None:
    out = tiny_disk / "out"
    proc = matrix_cli("bake", "cpu", out=out, timeout=120)
    assert proc.returncode == 3, proc.stderr[-3000:]
    (line,) = [x for x in proc.stderr.splitlines() if x.startswith("error: ")]
    assert line.startswith(f"error: cannot write {out}/bake/cpu-amd64/") and "(ENOSPC)" in line
    assert "Traceback" not in proc.stderr
    assert not (out / "docker-bake.json").exists()
    assert not (out / "bake" / "cpu-amd64").exists()  # no half-staged context
    left = [p for p in out.rglob("*") if p.name.endswith(".tmp")]
    assert not left, left


@dataclass
class Registry:
    """A docker-registry process on 127.0.0.1 that a test can stop and start again on the same port and storage."""

    host: str
    config: Path
    log: Path
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        exe = shutil.which("docker-registry")
        assert exe is not None, "docker-registry is missing; run 'make engine' (tools/setup-engine.sh installs it)"
        with self.log.open("a") as log:
            self.proc = subprocess.Popen([exe, "serve", str(self.config)], stdout=log, stderr=subprocess.STDOUT)
        for _ in range(100):
            try:
                urllib.request.urlopen(f"http://{self.host}/v2/", timeout=1).close()
                return
            except OSError:
                time.sleep(0.1)
        pytest.fail(f"docker-registry did not answer on {self.host}: {self.log.read_text()[-2000:]}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)

    def tags(self, repository: str) -> list[str]:
        try:
            with urllib.request.urlopen(f"http://{self.host}/v2/{repository}/tags/list", timeout=5) as r:
                return list(json.load(r).get("tags") or [])
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return []
            raise

    def complete(self, repository: str, tag: str) -> bool:
        """Whether ``tag``'s manifest and every blob it names are in the registry."""
        accept = "application/vnd.docker.distribution.manifest.v2+json, application/vnd.oci.image.manifest.v1+json"
        request = urllib.request.Request(
            f"http://{self.host}/v2/{repository}/manifests/{tag}", headers={"Accept": accept}
        )
        with urllib.request.urlopen(request, timeout=5) as r:
            manifest = json.load(r)
        blobs = [manifest["config"]["digest"], *(layer["digest"] for layer in manifest["layers"])]
        for digest in blobs:
            head = urllib.request.Request(f"http://{self.host}/v2/{repository}/blobs/{digest}", method="HEAD")
            try:
                urllib.request.urlopen(head, timeout=5).close()
            except urllib.error.HTTPError:
                return False
        return True


@pytest.fixture
def stoppable_registry(tmp_path: Path) -> Iterator[Registry]:
    root = tmp_path / "registry"
    root.mkdir()
    port = _closed_port()
    config = root / "config.yml"
    config.write_text(yaml.safe_dump({
        "version": 0.1, "log": {"level": "warn"},
        "storage": {"filesystem": {"rootdirectory": str(root / "data")}, "delete": {"enabled": True}},
        "http": {"addr": f"127.0.0.1:{port}"},
    }))  # fmt: skip
    reg = Registry(host=f"127.0.0.1:{port}", config=config, log=root / "registry.log")
    reg.start()
    try:
        yield reg
    finally:
        reg.stop()
        shutil.rmtree(root / "data", ignore_errors=True)


def test_the_registry_stopped_during_a_push_publishes_nothing_half(
    client: docker.DockerClient, cpu_image: str, stoppable_registry: Registry, tmp_path: Path
) -> None:
    repo = "vllm-matrix-faulttest"
    local = f"{repo}/cpu:{cpu_image.split(':')[1]}"
    client.images.get(cpu_image).tag(local)
    try:
        push = _start(
            "push", "cpu", "--registry", stoppable_registry.host, "--repository", repo, "--no-keep-tags", out=tmp_path
        )
        deadline = time.monotonic() + 120
        while not stoppable_registry.tags(f"{repo}/cpu") and time.monotonic() < deadline:
            # Stop it once the first layers are going up: the upload folder fills before any tag exists.
            if any((stoppable_registry.config.parent / "data").rglob("_uploads")):
                break
            time.sleep(0.05)
        stoppable_registry.stop()
        _, err = push.communicate(timeout=300)
        assert push.returncode == 9, err[-3000:]
        assert "error: " in err and stoppable_registry.host in err and "Traceback" not in err
        remote = [f"{stoppable_registry.host}/{repo}/cpu:{t}" for t in (cpu_image.split(":")[1], "0.32.0")]
        left = [t for i in client.images.list(name=f"{stoppable_registry.host}/{repo}/cpu") for t in i.tags]
        assert not left, f"push left local tags: {left} ({remote})"
        stoppable_registry.start()
        for tag in stoppable_registry.tags(f"{repo}/cpu"):  # a tag there names a whole image, or there is none
            assert stoppable_registry.complete(f"{repo}/cpu", tag), tag
        assert "0.32.0" not in stoppable_registry.tags(f"{repo}/cpu")  # the version tag never outruns the hash tag
    finally:
        for image in client.images.list(name=f"{stoppable_registry.host}/{repo}/cpu"):
            for tag in image.tags:
                client.images.remove(tag, noprune=True)
        client.images.remove(local, noprune=True)


def test_the_registry_stopped_before_a_manifest_makes_no_list(stoppable_registry: Registry, tmp_path: Path) -> None:
    digest = "sha256:" + "a" * 64
    host = stoppable_registry.host
    records = tmp_path / "pushed.json"
    records.write_text(json.dumps({"pushed": [
        {"variant": "cpu", "platform": "linux/amd64", "refs": [f"{host}/vllm-matrix/cpu:abc"], "digest": digest},
        {"variant": "arm64", "platform": "linux/arm64", "refs": [f"{host}/vllm-matrix/arm64:abc"], "digest": digest},
    ]}))  # fmt: skip
    stoppable_registry.stop()
    proc = matrix_cli("manifest", str(records), "--registry", host, out=tmp_path / "out", timeout=120)
    assert proc.returncode == 9, proc.stderr[-3000:]
    (line,) = [x for x in proc.stderr.splitlines() if x.startswith("error: ")]
    assert f"is registry {host} running" in line
    stoppable_registry.start()
    assert stoppable_registry.tags("vllm-matrix/cpu") == []
