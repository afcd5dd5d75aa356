"""SIGINT and SIGTERM during a build and during a smoke run (issue 11): the tool exits 130/143 and leaves no
smoke container, no running ``docker buildx build`` and no tag of the interrupted build.

The tool runs as a user's process would: ``tools/matrix`` in its own session, the signal sent to it alone
(as CI cancellation, ``timeout`` and Kubernetes send SIGTERM), not to a process group.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import docker
import pytest
import yaml

from matrixtool.core.container import OWNER_LABEL
from matrixtool.core.errors import ExitCode
from tests.conftest import REPO_ROOT
from tests.integration.conftest import MATRIX, OWNER, TEST_REPOSITORY, json_of

pytestmark = [pytest.mark.engine]

SIGNALS = [(signal.SIGINT, ExitCode.INTERRUPTED), (signal.SIGTERM, ExitCode.TERMINATED)]
WAIT = 300.0  # seconds to wait for the build or the smoke container to start


def _default_signals() -> None:
    """In the child, before exec: SIGINT and SIGTERM as a terminal gives them. A test run started as a
    background job of a non-interactive shell (CI runners, ``make test &``) inherits SIGINT ignored, and the
    tool rightly keeps ignoring a signal it started ignoring (``interrupts.handled``)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _start(args: list[str], out: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [MATRIX, "--out", str(out), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        env=dict(os.environ),
        preexec_fn=_default_signals,
    )


def _finish(proc: subprocess.Popen[str]) -> str:
    try:
        output, _ = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        output, _ = proc.communicate()
        # The tool was killed, so nothing removed its container: remove it here, so this failure is reported
        # once and does not fail every later test's leak check.
        for container in docker.from_env().containers.list(all=True, filters={"label": f"{OWNER_LABEL}={OWNER}"}):
            container.remove(force=True)
        pytest.fail(f"the tool did not exit within 120 s of the signal:\n{output[-3000:]}")
    return output


def _buildx_children(pid: int) -> list[str]:
    proc = subprocess.run(["ps", "-o", "pid=,args=", "--ppid", str(pid)], capture_output=True, text=True, check=False)
    return [line for line in proc.stdout.splitlines() if "buildx" in line]


@pytest.mark.parametrize(("signum", "code"), SIGNALS, ids=["SIGINT", "SIGTERM"])
def test_interrupted_smoke_run_removes_its_container(
    client: docker.DockerClient, cpu_image: str, tmp_path: Path, signum: signal.Signals, code: ExitCode
) -> None:
    # offline-generate loads a model: minutes, so the signal lands while the check runs.
    proc = _start(["test", "--as", "cpu", "--image", cpu_image, "--only", "offline-generate"], tmp_path)
    deadline = time.monotonic() + WAIT
    label: dict[str, str | list[str] | bool] = {"label": f"{OWNER_LABEL}={OWNER}"}
    while not client.containers.list(filters=label):
        assert proc.poll() is None, f"the tool ended before its container started:\n{_finish(proc)[-3000:]}"
        assert time.monotonic() < deadline, "no smoke container appeared"
        time.sleep(0.2)
    time.sleep(2)  # the check is running in the container now
    proc.send_signal(signum)
    output = _finish(proc)
    assert proc.returncode == code, output[-3000:]
    assert f"interrupted by {signum.name}" in output
    assert "Traceback" not in output
    assert not client.containers.list(all=True, filters=label), "the smoke container was left behind"


def _cpu_project(tmp_path: Path, change: Callable[[dict[str, Any]], None]) -> Path:
    """A copy of the project with the cpu variant alone, ``change``d, rendered; its matrix file."""
    data = yaml.safe_load((REPO_ROOT / "matrix.yaml").read_text())
    data["variants"] = {"cpu": data["variants"]["cpu"]}
    change(data["variants"]["cpu"])
    project = tmp_path / "project"
    project.mkdir()
    (project / "matrix.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    shutil.copytree(REPO_ROOT / "images" / "cpu", project / "images" / "cpu")
    shutil.copytree(REPO_ROOT / "templates", project / "templates")  # read next to the matrix file
    render = subprocess.run(
        [MATRIX, "--matrix", str(project / "matrix.yaml"), "render"], capture_output=True, text=True, check=False
    )
    assert render.returncode == 0, render.stderr
    return project / "matrix.yaml"


def _remove_tags(client: docker.DockerClient, repository: str) -> None:
    for image in client.images.list(name=f"{repository}/cpu"):
        for tag in image.tags:
            if tag.startswith(f"{repository}/"):
                client.images.remove(tag)


def test_tags_are_set_once_the_build_succeeded(client: docker.DockerClient, cpu_image: str, tmp_path: Path) -> None:
    """The tags are no longer BuildKit's (``--tag``) but set after the build: a build that runs whole from
    BuildKit's cache (only the description differs, seconds) gets both of its tags."""
    matrix = _cpu_project(tmp_path, lambda v: v.update(description=f"tag test {uuid.uuid4().hex[:8]}"))
    repository = f"{TEST_REPOSITORY}/tagging-{uuid.uuid4().hex[:8]}"
    try:
        proc = subprocess.run(
            [
                MATRIX,
                "--out",
                str(tmp_path / "out"),
                "--matrix",
                str(matrix),
                "build",
                "cpu",
                "--json",
                "--repository",
                repository,
            ],
            capture_output=True,
            text=True,
            check=False,
            timeout=600,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        tags = sorted(t for i in client.images.list(name=f"{repository}/cpu") for t in i.tags)
        assert len(tags) == 2 and f"{repository}/cpu:0.32.0" in tags, tags
        assert json_of(proc)["builds"][0]["image"] in tags
    finally:
        _remove_tags(client, repository)


@pytest.mark.parametrize(("signum", "code"), SIGNALS, ids=["SIGINT", "SIGTERM"])
def test_interrupted_build_leaves_no_tag_and_no_build(
    client: docker.DockerClient,
    cpu_image: str,
    tmp_path: Path,
    signum: signal.Signals,
    code: ExitCode,
) -> None:
    """The cpu variant also excludes a package that does not exist, named anew for each test: a new content
    hash, the OS and uv layers from BuildKit's cache, and the torch install step (after ``COPY
    excludes.txt``) run again, never from an earlier test's cache; it takes seconds of copying from uv's
    cache mount, and the signal lands during it, so the build never gets far."""
    matrix = _cpu_project(tmp_path, lambda v: v["index"]["exclude"].append(f"zz-interrupt-{uuid.uuid4().hex[:8]}"))
    repository = f"{TEST_REPOSITORY}/interrupt-{uuid.uuid4().hex[:8]}"
    out = tmp_path / "out"
    proc = _start(["--matrix", str(matrix), "build", "cpu", "--repository", repository], out)
    try:
        log = out / "logs" / "cpu-amd64.build.log"
        deadline = time.monotonic() + WAIT
        install_step = re.compile(r"^#\d+ \[runtime \d+/\d+\] RUN .*uv pip install", re.MULTILINE)
        while not (
            log.exists() and install_step.search(log.read_text(errors="replace")) and _buildx_children(proc.pid)
        ):
            assert proc.poll() is None, f"the tool ended before the build ran:\n{_finish(proc)[-3000:]}"
            assert time.monotonic() < deadline, "the build did not reach the torch install step"
            time.sleep(0.1)
        time.sleep(1)  # inside the RUN step now
        proc.send_signal(signum)
        output = _finish(proc)
        assert proc.returncode == code, output[-3000:]
        assert f"interrupted by {signum.name}" in output
        assert "Traceback" not in output
        running = subprocess.run(["pgrep", "-f", f"buildx build.*{out}"], capture_output=True, check=False)
        assert not running.stdout, "docker buildx build still runs"
        # The engine may go on with a build whose client ended; no tag may appear even then.
        for _ in range(15):
            assert not client.images.list(name=f"{repository}/cpu"), "the interrupted build left a tag"
            time.sleep(1)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        _remove_tags(client, repository)
