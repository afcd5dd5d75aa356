"""Faults with the real engine and real processes (issue 20): two runs on one --out, an index that does not answer
while nothing needs building, a full disk during an export, and the hardened check container of test --image.

Cheap: the session's CPU image is reused (never rebuilt) and each check run is one or two checks.
"""

from __future__ import annotations

import json
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

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
