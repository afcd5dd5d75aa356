"""Faults with the real engine, registry and processes (issue 20): two runs on one --out, an index that does not
answer while nothing needs building, a full disk during an export, the hardened check container of test --image,
the registry stopped during a push and before a manifest; on a private engine (its own dockerd, socket and data
root on a small loop-mounted disk, never the shared one): the engine stopped and restarted during a smoke run and
during a build, and a full disk during a build.

Cheap: the session's CPU image is reused (never rebuilt) and each check run is one or two checks; the private
engine's builds fail within seconds (its bridge has no route out, and the faults strike before any download).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import docker
import pytest

from matrixtool.core.container import OWNER_LABEL
from matrixtool.core.engine import host as shared_host
from tests.integration.conftest import MATRIX, OWNER, free_port, json_of, matrix_cli, start_registry

pytestmark = [pytest.mark.engine, pytest.mark.slow]


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
    dead = f"http://127.0.0.1:{free_port()}"
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
    root: Path  # its storage and log (conftest ``start_registry``)
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = start_registry(self.root, self.host)

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
    reg = Registry(host=f"127.0.0.1:{free_port()}", root=root)
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
            if any((stoppable_registry.root / "data").rglob("_uploads")):
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


# --- A private engine (engine stopped and restarted, full disk during a build) ---------------------------------
# A dockerd of its own: data root on a 6 GiB loop-mounted ext4 (no reserved blocks: dockerd runs as root), its
# own socket, exec root (so its managed containerd's socket and state are its own), pidfile and bridge interface
# (BuildKit's RUN needs a network named `bridge`), no iptables rules: the shared engine is never touched, and the
# private one reaches nothing outside (a build's downloads hang, so the faults below strike before any finishes).
# 6 GiB: `docker load` of the 2.6 GB CPU image holds the tar and its layers at once (about 4.3 GB at its peak).
ENGINE_DISK = "6G"


@dataclass
class Engine:
    """A private dockerd that a test can stop (SIGTERM, as systemd stops it) and start again on the same data root
    and socket."""

    scratch: Path
    bridge: str
    proc: subprocess.Popen[bytes] | None = None

    @property
    def data_root(self) -> Path:
        return self.scratch / "disk" / "docker"

    @property
    def host(self) -> str:
        return f"unix://{self.scratch}/docker.sock"

    @property
    def env(self) -> dict[str, str]:
        """What points the tool (the Docker SDK and `docker buildx`) at this engine."""
        return {"DOCKER_HOST": self.host}

    def start(self) -> None:
        argv = [
            "dockerd", "--config-file", str(self.scratch / "daemon.json"), "--data-root", str(self.data_root),
            "--exec-root", str(self.scratch / "exec"), "--pidfile", str(self.scratch / "dockerd.pid"),
            "-H", self.host, f"--bridge={self.bridge}", "--iptables=false", "--ip6tables=false", "--ip-masq=false",
            # Where a system containerd answers at /run/containerd (a systemd host), dockerd uses it instead of
            # starting its own: namespaces of its own keep this engine's containers apart from the shared one's.
            f"--containerd-namespace={self.bridge}", f"--containerd-plugins-namespace={self.bridge}-plugins",
        ]  # fmt: skip
        with (self.scratch / "dockerd.log").open("a") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while self.docker("info", check=False).returncode != 0:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"the private dockerd did not start: {(self.scratch / 'dockerd.log').read_text()[-3000:]}")
            time.sleep(0.2)

    def stop(self, timeout: float = 60) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                # A killed dockerd leaves its managed containerd running (it would keep the data root busy).
                pidfile = self.scratch / "exec" / "containerd" / "containerd.pid"
                with contextlib.suppress(OSError, ValueError):
                    os.kill(int(pidfile.read_text().strip()), signal.SIGKILL)
        self.proc = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def docker(self, *args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            ["docker", "-H", self.host, *args], capture_output=True, text=True, timeout=timeout, check=False
        )
        assert not check or proc.returncode == 0, proc.stderr[-2000:]
        return proc

    def load(self, *refs: str) -> None:
        """Copy ``refs`` from the shared engine (``docker save | docker load``)."""
        with subprocess.Popen(["docker", "-H", shared_host(os.environ), "save", *refs], stdout=subprocess.PIPE) as save:
            load = subprocess.run(
                ["docker", "-H", self.host, "load"], stdin=save.stdout, capture_output=True, timeout=900
            )
        assert save.returncode == 0 and load.returncode == 0, load.stderr[-2000:]

    def owned(self) -> list[str]:
        """The containers of this test session (owner label) on this engine."""
        return self.docker("ps", "-aq", "--filter", f"label={OWNER_LABEL}={OWNER}").stdout.split()

    def tags(self) -> dict[str, str]:
        """Every ``repo:tag`` on this engine and its image id."""
        out = self.docker("images", "--no-trunc", "--format", "{{.Repository}}:{{.Tag}} {{.ID}}").stdout
        return dict(line.split(" ", 1) for line in out.splitlines() if "<none>" not in line)


def _free_subnet() -> str:
    """A 10.213.x.0/24 no route of this machine uses (the private bridge's)."""
    routes = subprocess.run(["ip", "-4", "route"], capture_output=True, text=True, check=True).stdout
    for x in random.sample(range(1, 255), 254):
        if f"10.213.{x}." not in routes:
            return f"10.213.{x}.1/24"
    pytest.fail("no free 10.213.x.0/24 for the private engine's bridge")


@pytest.fixture(scope="module")
def private_engine(client: docker.DockerClient, cpu_image: str) -> Iterator[Engine]:
    """A private dockerd (``Engine``) holding the base image of `cpu` (on the shared engine once ``cpu_image`` is
    built); everything is undone afterwards, also when a step fails."""
    if os.geteuid() != 0:
        pytest.fail("the private engine needs root (mount, ip link, dockerd)")
    scratch = Path(tempfile.mkdtemp(prefix="matrix-engine-", dir="/var/tmp"))  # short: unix socket paths <= 107
    bridge = f"mxf{os.getpid() % 100000}"
    disk = scratch / "disk"
    engine = Engine(scratch=scratch, bridge=bridge)
    steps: list[list[str]] = []  # the undo commands, in reverse order of what was set up
    try:
        (scratch / "daemon.json").write_text("{}\n")
        subprocess.run(["truncate", "-s", ENGINE_DISK, str(scratch / "disk.img")], check=True)
        subprocess.run(["mkfs.ext4", "-q", "-F", "-m", "0", str(scratch / "disk.img")], check=True)
        disk.mkdir()
        subprocess.run(["mount", "-o", "loop", str(scratch / "disk.img"), str(disk)], check=True)
        steps.append(["umount", str(disk)])
        subprocess.run(["ip", "link", "add", "name", bridge, "type", "bridge"], check=True)
        steps.append(["ip", "link", "del", bridge])
        subprocess.run(["ip", "addr", "add", _free_subnet(), "dev", bridge], check=True)
        subprocess.run(["ip", "link", "set", bridge, "up"], check=True)
        engine.start()
        base = [t for t in client.images.get("debian:bookworm-slim").tags if t.startswith("debian:bookworm-slim")]
        engine.load(*base)  # the base image stand-in of `cpu` (tools/matrix base finds it by its tags)
        yield engine
    finally:
        engine.stop()
        for step in reversed(steps):
            if subprocess.run(step, capture_output=True, check=False).returncode != 0 and step[0] == "umount":
                subprocess.run(["umount", "-l", *step[1:]], capture_output=True, check=False)  # busy: detach lazily
        loops = subprocess.run(["losetup", "-j", str(scratch / "disk.img")], capture_output=True, text=True)
        for line in loops.stdout.splitlines():  # mount -o loop detaches on umount; a busy one does not
            subprocess.run(["losetup", "-d", line.split(":", 1)[0]], check=False)
        shutil.rmtree(scratch, ignore_errors=True)


@dataclass
class Started:
    """A ``tools/matrix`` process and its stderr lines as they come (a thread appends them)."""

    proc: subprocess.Popen[str]
    lines: list[str]
    reader: threading.Thread

    def finish(self, timeout: float = 300) -> tuple[str, str]:
        """Its stdout and stderr once it exited."""
        assert self.proc.stdout is not None
        with self.proc.stdout:
            stdout = self.proc.stdout.read()
        self.proc.wait(timeout)
        self.reader.join(timeout)
        return stdout, "".join(self.lines)


def _start_here(*args: str, out: Path, env: dict[str, str]) -> Started:
    """``tools/matrix`` started with ``env``."""
    proc = subprocess.Popen(
        [MATRIX, "--out", str(out), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, **env},
    )  # fmt: skip
    lines: list[str] = []

    def pump() -> None:
        assert proc.stderr is not None
        with proc.stderr:
            lines.extend(proc.stderr)

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    return Started(proc=proc, lines=lines, reader=reader)


def _error_lines(stderr: str) -> list[str]:
    return [x for x in stderr.splitlines() if x.startswith("error: ")]


def _no_half_outputs(out: Path, *reports: Path) -> None:
    assert not [p for p in reports if p.exists()], "a report of a run that did not finish"
    left = [p for p in out.rglob("*") if p.name.endswith(".tmp") or p.parent.name == "context"]
    assert not left, left  # no half-written file, no staged build context


def test_the_engine_stopped_and_restarted_during_a_build_tags_nothing(
    private_engine: Engine, cpu_image: str, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    before = private_engine.tags()
    run = _start_here("build", "cpu", "--force", "--json", out=out, env=private_engine.env)
    proc, lines = run.proc, run.lines
    deadline = time.monotonic() + 120
    # The first RUN (apt-get) hangs on this engine's bridge, which leads nowhere: stop the engine while it runs.
    while not any("[base 2/3] RUN" in x for x in lines):
        assert proc.poll() is None and time.monotonic() < deadline, "".join(lines)[-3000:]
        time.sleep(0.1)
    time.sleep(2)
    private_engine.restart()
    stdout, stderr = run.finish()
    assert proc.returncode == 8, stderr[-3000:]
    (line,) = _error_lines(stderr)
    assert line.startswith(f"error: the Docker engine at {private_engine.host} went away during the build of cpu")
    assert "this build tagged nothing" in line and "Traceback" not in stderr
    assert private_engine.tags() == before  # no tag of the half-built image
    assert not private_engine.owned()
    assert stdout == ""  # no --json document of a build that did not finish
    _no_half_outputs(out)


def test_a_full_disk_during_a_build_names_the_engines_data_root(private_engine: Engine, tmp_path: Path) -> None:
    out = tmp_path / "out"
    private_engine.docker("builder", "prune", "--all", "--force")  # the context (the 190 MB torch wheel) is sent anew
    before = private_engine.tags()
    filler = private_engine.data_root.parent / "filler"
    free = shutil.disk_usage(private_engine.data_root).free
    subprocess.run(["fallocate", "-l", str(free - 64 * 2**20), str(filler)], check=True)  # 64 MiB left
    try:
        proc = matrix_cli("build", "cpu", "--force", "--json", out=out, env=private_engine.env, timeout=300)
    finally:
        filler.unlink()
        private_engine.docker("builder", "prune", "--all", "--force")
    assert proc.returncode == 6, proc.stderr[-3000:]
    (line,) = _error_lines(proc.stderr)
    assert line.startswith("error: building cpu (linux/amd64) failed after ")
    assert f"no space left on device on the engine's data root {private_engine.data_root}; free space there" in line
    assert "'docker builder prune'" in line and "Traceback" not in proc.stderr
    assert private_engine.tags() == before
    assert proc.stdout == ""
    _no_half_outputs(out)


def test_the_engine_stopped_and_restarted_during_a_smoke_run_leaves_no_container(
    private_engine: Engine, cpu_image: str, tmp_path: Path
) -> None:
    private_engine.load(cpu_image)
    out, report = tmp_path / "out", tmp_path / "report.json"
    run = _start_here(
        "test", "--image", cpu_image, "--as", "cpu", "--only", "vllm-import", "--json-file", str(report),
        out=out, env=private_engine.env,
    )  # fmt: skip
    proc, lines = run.proc, run.lines
    deadline = time.monotonic() + 120
    while not private_engine.owned():
        assert proc.poll() is None and time.monotonic() < deadline, "".join(lines)[-3000:]
        time.sleep(0.2)
    time.sleep(3)  # inside the checks (torch-import, then vllm-import: about 15 s)
    private_engine.restart()
    _, stderr = run.finish()
    assert proc.returncode == 8, stderr[-3000:]
    (line,) = _error_lines(stderr)
    assert line.startswith(f"error: the Docker engine at {private_engine.host} went away during the run: ")
    assert "Traceback" not in stderr
    assert not private_engine.owned()  # AutoRemove: the engine removed the check container on its restart
    _no_half_outputs(out, report)
    assert not (out / "reports" / "junit.xml").exists()
