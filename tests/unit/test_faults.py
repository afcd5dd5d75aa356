"""Faults that are not bugs of the tool (issue 20): an overflowing size, a write that fails, a Docker API error,
a missing interpreter; each one error with its documented exit code, nothing written half."""

from __future__ import annotations

import errno
import json
import os
import resource
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import docker.errors
import pytest
import yaml
from click.testing import CliRunner

from matrixtool import report
from matrixtool.cli import main
from matrixtool.core import engine, outputs
from matrixtool.core.errors import ExitCode, OutputError
from matrixtool.model.matrixfile import validate
from matrixtool.model.model import DEFAULT_MATRIX
from matrixtool.model.variantrules import parse_size
from matrixtool.smoke.result import CheckResult, Status


def test_a_size_beyond_floats_is_a_config_problem_naming_the_key(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="beyond any image"):
        parse_size("1" + "0" * 400 + "GB")
    data: dict[str, Any] = yaml.safe_load(DEFAULT_MATRIX.read_text())
    data["variants"]["cpu"]["size_budget"] = "1" + "0" * 400 + "GB"
    assert [p for p in validate(data) if "size_budget" in p] == [
        f"variants.cpu.size_budget: '1{'0' * 400}GB' is beyond any image (at most 1 PB); write the largest size "
        'of the image, e.g. "3GiB"'
    ]
    path = tmp_path / "matrix.yaml"
    path.write_text(yaml.safe_dump(data))
    result = CliRunner().invoke(main, ["--matrix", str(path), "render", "--check"], catch_exceptions=False)
    assert result.exit_code == ExitCode.CONFIG, result.output
    assert "variants.cpu.size_budget" in result.output and "unexpected" not in result.output


@contextmanager
def file_size_limit(nbytes: int) -> Iterator[None]:
    """RLIMIT_FSIZE at ``nbytes`` for this process (SIGXFSZ ignored: a write past it fails with EFBIG)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    old = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (nbytes, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, old)


def test_a_write_past_the_file_size_limit_names_the_file_and_leaves_the_old_one(tmp_path: Path) -> None:
    target = tmp_path / "reports" / "junit.xml"
    target.parent.mkdir()
    target.write_text("old")
    with file_size_limit(1000), pytest.raises(OutputError) as caught:
        outputs.write_text(target, "x" * 5000)
    assert str(caught.value).startswith(f"cannot write {target}: File too large (EFBIG); ")
    assert caught.value.exit_code == ExitCode.CONFIG
    assert target.read_text() == "old"
    assert sorted(p.name for p in target.parent.iterdir()) == ["junit.xml"]  # no temporary file left


def test_junit_is_replaced_whole_or_not_at_all(tmp_path: Path) -> None:
    target = tmp_path / "junit.xml"
    target.write_text("old")
    checks = [
        CheckResult(
            variant="cpu",
            image="i",
            check=f"c{i}",
            status=Status.PASSED,
            seconds=1.0,
            diagnosis="d" * 100,
            hint="",
            log=Path("l"),
        )
        for i in range(50)
    ]
    with file_size_limit(2000), pytest.raises(OutputError, match=r"junit\.xml: File too large"):
        report.write_junit(report.RunReport(checks=checks), target)
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["junit.xml"]


def test_an_output_that_cannot_be_written_is_exit_3_naming_it(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with file_size_limit(1000):
        result = CliRunner().invoke(main, ["--out", str(out), "kube", "cpu", "--profile", "restricted"])
    assert result.exit_code == ExitCode.CONFIG, result.output
    assert f"error: cannot write {out / 'kube' / 'cpu.restricted.yaml'}: File too large (EFBIG)" in result.output
    assert list((out / "kube").iterdir()) == []


def test_no_space_and_no_permission_have_their_advice(tmp_path: Path) -> None:
    full = outputs.error(tmp_path / "f", OSError(errno.ENOSPC, "No space left on device"))
    assert str(full) == (
        f"cannot write {tmp_path / 'f'}: No space left on device (ENOSPC); free space there or give another --out"
    )
    denied = outputs.error(tmp_path / "f", PermissionError(errno.EACCES, "Permission denied"))
    assert "Permission denied (EACCES); make it writable" in str(denied)


def test_a_docker_api_error_is_the_engine_code_with_its_explanation(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse() -> Any:
        raise docker.errors.APIError("500 Server Error", explanation="mount denied: read-only file system")

    monkeypatch.setattr(engine, "connect", refuse)
    result = CliRunner().invoke(main, ["test", "--image", "vllm-matrix/cpu:x", "--as", "cpu"])
    assert result.exit_code == ExitCode.ENGINE, result.output
    assert "the Docker engine refused a request: mount denied: read-only file system" in result.output


def test_a_missing_interpreter_is_exit_3_naming_the_flag_before_any_check(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        main, ["--out", str(tmp_path), "test", "--host", "--as", "cpu", "--python", str(tmp_path / "nopython")]
    )
    assert result.exit_code == ExitCode.CONFIG, result.output
    assert f"--python '{tmp_path / 'nopython'}' is no executable interpreter" in result.output
    assert not (tmp_path / "logs").exists()


def test_a_second_run_on_a_held_out_refuses_with_no_wait_naming_the_holder(tmp_path: Path) -> None:
    from matrixtool.core import outlock

    with outlock.held(tmp_path, argv=["tools/matrix", "test", "--as", "cpu"], wait=False, notice=print):
        result = CliRunner().invoke(main, ["--no-wait", "--out", str(tmp_path), "kube", "cpu"])
        assert result.exit_code == ExitCode.OUT_LOCKED, result.output
        assert f"error: {tmp_path} is in use by pid {os.getpid()}: tools/matrix test --as cpu;" in result.output
        assert not (tmp_path / "kube").exists()
        help_result = CliRunner().invoke(main, ["--out", str(tmp_path), "kube", "--help"])  # no lock for --help
        assert help_result.exit_code == 0
    result = CliRunner().invoke(main, ["--no-wait", "--out", str(tmp_path), "kube", "cpu", "--profile", "default"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "kube" / "cpu.default.yaml").is_file()


def test_a_waiting_run_names_the_holder_then_runs(tmp_path: Path) -> None:
    import threading

    from matrixtool.core import outlock

    lines: list[str] = []
    release = threading.Event()

    def hold() -> None:
        with outlock.held(tmp_path, argv=["tools/matrix", "bake"], wait=False, notice=print):
            release.wait(5)

    holder = threading.Thread(target=hold)
    holder.start()
    while not (tmp_path / ".lock").exists() or not (tmp_path / ".lock").read_text():
        pass
    threading.Timer(0.5, release.set).start()
    with outlock.held(tmp_path, argv=["tools/matrix", "test"], wait=True, notice=lines.append, notice_s=0.1):
        assert (tmp_path / ".lock").read_text() == f"pid {os.getpid()}: tools/matrix test\n"
    holder.join()
    assert (
        lines
        and lines[0]
        == f"waiting for {tmp_path}: in use by pid {os.getpid()}: tools/matrix bake (--no-wait refuses instead)"
    )


def test_an_image_the_tool_did_not_build_runs_hardened_under_every_profile() -> None:
    from matrixtool.model import profiles
    from matrixtool.model.matrixfile import load_matrix

    cpu = next(v for v in load_matrix().variants if v.name == "cpu")
    own = profiles.ProfileChoice(names=()).resolve("cpu", cpu.profiles)
    assert any(p.cap_drop == () for p in own)  # the profiles as declared
    for p in profiles.ProfileChoice(names=(), untrusted=True).resolve("cpu", cpu.profiles):
        assert p.cap_drop != () and p.no_new_privileges and p.pids_limit is not None, p
        assert "no-new-privileges" in p.describe() and "pids " in p.describe()
    flagged = profiles.ProfileChoice(
        names=("default",), overrides=profiles.Overrides.of(pids_limit=77), untrusted=True
    ).resolve("cpu", cpu.profiles)
    assert flagged[0].pids_limit == 77 and flagged[0].cap_drop == ("ALL",)
    # A flag that asks for the engine's default is the user's choice too: honoured, not silently hardened.
    allowed = profiles.ProfileChoice(
        names=("default",), overrides=profiles.Overrides.of(no_new_privileges=False), untrusted=True
    ).resolve("cpu", cpu.profiles)
    assert allowed[0].no_new_privileges is False and allowed[0].cap_drop == ("ALL",)


@pytest.mark.subprocess  # the bake file names the checkout's revision (git rev-parse)
def test_bake_all_exports_what_it_can_and_names_what_it_could_not(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl").write_bytes(b"")  # no aarch64 wheel
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["--out", str(out), "bake", "--wheelhouse", str(wheels)], catch_exceptions=False)
    assert result.exit_code == ExitCode.CONFIG, result.output
    assert "error: [arm64] not in the bake file: inputs of variant arm64" in result.output
    assert "variant(s) left out of" in result.output and "arm64" in result.output.splitlines()[-1]
    targets = json.loads((out / "docker-bake.json").read_text())["target"]
    assert "cpu-amd64" in targets and "arm64-arm64" not in targets
    assert "cuda-amd64" in targets  # a variant without a wheelhouse is exported too


def test_a_device_as_output_is_written_in_place_never_replaced(tmp_path: Path) -> None:
    """Root may replace /dev/null with a regular file: a temporary file plus os.replace must not do it."""
    null = Path("/dev/null")
    outputs.write_text(null, "report")
    checks = [
        CheckResult(variant="cpu", image="i", check="c", status=Status.PASSED, seconds=1.0, diagnosis="", hint="")
    ]
    report.write_junit(report.RunReport(checks=checks), null)
    assert null.is_char_device()
    with pytest.raises(OutputError, match=r"cannot write /dev/full: No space left on device \(ENOSPC\)"):
        outputs.write_text(Path("/dev/full"), "x")
    assert Path("/dev/full").is_char_device()


def test_a_symlink_planted_as_the_lock_is_refused_not_followed(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("keep")
    out = tmp_path / "out"
    out.mkdir()
    (out / ".lock").symlink_to(victim)
    result = CliRunner().invoke(main, ["--out", str(out), "kube", "cpu", "--profile", "default"])
    assert result.exit_code == ExitCode.CONFIG, result.output
    assert f"cannot write {out / '.lock'}" in result.output
    assert victim.read_text() == "keep" and not (out / "kube").exists()


def test_an_engine_that_went_away_mid_run_is_exit_8_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    import requests.exceptions

    def gone() -> Any:
        raise requests.exceptions.ConnectionError("('Connection aborted.', FileNotFoundError(2, 'No such file'))")

    monkeypatch.setattr(engine, "connect", gone)
    result = CliRunner().invoke(
        main, ["test", "--image", "vllm-matrix/cpu:x", "--as", "cpu"], env={"DOCKER_HOST": "unix:///tmp/e.sock"}
    )
    assert result.exit_code == ExitCode.ENGINE, result.output
    assert "error: the Docker engine at unix:///tmp/e.sock went away during the run: ('Connection aborted." in (
        result.output
    )
    assert "unexpected" not in result.output


def test_a_build_that_lost_the_engine_or_its_disk_has_its_own_error(tmp_path: Path) -> None:
    from matrixtool.build import executor as build
    from matrixtool.core.errors import BuildError, EngineUnreachableError

    class Plan:  # what ``failure`` reads of a BuildPlan
        variant, platform = "cpu", "linux/amd64"

    eof = "ERROR: failed to receive status: rpc error: code = Unavailable desc = error reading from server: EOF"
    lost = build.failure(Plan(), ["#6 RUN", eof], seconds=8, log_path=tmp_path / "l", data_root=None)  # type: ignore[arg-type]
    assert isinstance(lost, EngineUnreachableError) and lost.exit_code == ExitCode.ENGINE
    assert "went away during the build of cpu (linux/amd64) after 8 s: ERROR: failed to receive status" in str(lost)
    full = "ERROR: failed to solve: write /d/x: no space left on device"
    disk = build.failure(Plan(), [full], seconds=3, log_path=tmp_path / "l", data_root="/d")  # type: ignore[arg-type]
    assert isinstance(disk, BuildError) and disk.exit_code == ExitCode.BUILD
    assert "no space left on device on the engine's data root /d; free space there ('docker builder prune'" in str(disk)
    other = build.failure(Plan(), ["ERROR: exit code: 1"], seconds=1, log_path=tmp_path / "l", data_root=None)  # type: ignore[arg-type]
    assert type(other) is BuildError and str(other).endswith("ERROR: exit code: 1")
