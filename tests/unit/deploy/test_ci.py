"""The CI matrix (``tools/matrix ci-matrix``) and the workflow that expands it."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from matrixtool.build.wheelhouse import wheelhouse_index
from matrixtool.cli import main
from matrixtool.core.errors import ConfigError, ExitCode, NothingSelectedError
from matrixtool.deploy import ci
from matrixtool.model.matrixfile import load_matrix, validate
from tests.conftest import FIXTURE_MATRIX, REPO_ROOT

WORKFLOW = REPO_ROOT / ".github" / "workflows" / "images.yml"
VENV_BIN = REPO_ROOT / ".venv" / "bin"


def _ci_matrix_cli(*args: str) -> dict:  # type: ignore[type-arg]
    """``tools/matrix ci-matrix ARGS`` of the fixture matrix, parsed."""
    result = CliRunner().invoke(main, ["--matrix", str(FIXTURE_MATRIX), "ci-matrix", *args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)  # type: ignore[no-any-return]


def test_every_variant_and_platform_of_the_matrix_is_in_the_ci_matrix() -> None:
    """Read through the loader (an ``extends`` variant states only what differs from its base)."""
    variants = {v.name: v for v in load_matrix(FIXTURE_MATRIX).variants}
    wanted = {(name, str(p)) for name, v in variants.items() for p in v.platforms}
    include = _ci_matrix_cli()["include"]
    assert {(e["variant"], e["platform"]) for e in include} == wanted
    assert len(include) == len(wanted)
    for entry in include:
        assert entry["runner"] == list(variants[entry["variant"]].runner)


def test_ci_matrix_entries_carry_runner_labels_and_wheelhouse_pin() -> None:
    by_variant = {e["variant"]: e for e in _ci_matrix_cli()["include"]}
    assert by_variant["cpu"] == {
        "variant": "cpu", "platform": "linux/amd64", "arch": "amd64", "runner": ["ubuntu-24.04"],
        "accelerator": "cpu", "python": "3.11", "torch": "torch==2.13.0+cpu", "wheelhouse": True,
        "wheelhouse_index": "https://download.pytorch.org/whl/cpu", "wheel_platform": "manylinux_2_28_x86_64",
    }  # fmt: skip
    assert by_variant["arm64"]["runner"] == ["ubuntu-24.04-arm"]
    assert (by_variant["arm64"]["python"], by_variant["arm64"]["wheel_platform"]) == ("3.13", "manylinux_2_28_aarch64")
    assert by_variant["cuda"]["runner"] == ["self-hosted", "linux", "x64", "gpu"]
    assert by_variant["rocm"]["runner"] == ["self-hosted", "linux", "x64", "rocm"]
    assert not by_variant["cuda"]["wheelhouse"] and by_variant["cuda"]["wheelhouse_index"] == ""


def test_ci_matrix_output_is_one_line_for_github_output() -> None:
    result = CliRunner().invoke(main, ["ci-matrix", "cpu"], catch_exceptions=False)
    assert result.stdout.count("\n") == 1
    assert [e["variant"] for e in json.loads(result.stdout)["include"]] == ["cpu"]


def test_a_variant_without_runner_is_a_config_error(tmp_path: Path) -> None:
    raw = yaml.safe_load(FIXTURE_MATRIX.read_text())
    del raw["variants"]["cuda"]["runner"]
    problems = validate(raw)
    assert any(p.startswith("variants.cuda") and "'runner' is a required property" in p for p in problems)
    path = tmp_path / "matrix.yaml"
    path.write_text(yaml.safe_dump(raw))
    result = CliRunner().invoke(main, ["--matrix", str(path), "ci-matrix"], catch_exceptions=False)
    assert result.exit_code == ExitCode.CONFIG
    variant = replace(load_matrix().variants[0], runner=())
    with pytest.raises(ConfigError, match="no runner label"):
        ci.ci_matrix([variant])


def test_wheelhouse_index_needs_a_local_version_label() -> None:
    cpu = load_matrix().variants[0]
    assert wheelhouse_index(cpu) == "https://download.pytorch.org/whl/cpu"
    bare = replace(cpu, torch=replace(cpu.torch, version="2.13.0"))
    with pytest.raises(ConfigError, match="no local version label"):
        wheelhouse_index(bare)


def test_workflow_expands_the_printed_matrix_and_pins_actions_by_sha() -> None:
    doc = yaml.safe_load(WORKFLOW.read_text())
    jobs = doc["jobs"]
    assert "tools/matrix ci-matrix" in json.dumps(jobs["matrix"])
    image = jobs["image"]
    assert image["strategy"]["matrix"] == "${{ fromJSON(needs.matrix.outputs.matrix) }}"
    assert image["runs-on"] == "${{ matrix.runner }}"
    assert doc["permissions"] == {}
    assert all(set(job["permissions"]) <= {"contents", "packages"} for job in jobs.values())
    uses = re.findall(r"uses: (\S+)", WORKFLOW.read_text())
    assert uses and all(re.fullmatch(r"[\w.-]+/[\w.-]+@[0-9a-f]{40}", u) for u in uses), uses
    steps = {s.get("name", ""): s for s in image["steps"]}
    assert "--index-url" in steps["Wheelhouse"]["run"] and "${{" not in steps["Wheelhouse"]["run"]
    assert steps["Wheelhouse"]["env"]["TORCH"] == "${{ matrix.torch }}"  # the pin comes from ci-matrix
    # Publishing (cache export, push, multi-arch tags) only on the default branch.
    assert "github.event.repository.default_branch" in image["env"]["PUBLISH"]
    assert "github.event.repository.default_branch" in jobs["manifest"]["if"]


def test_pull_requests_are_fast_and_the_default_branch_publishes() -> None:
    jobs = yaml.safe_load(WORKFLOW.read_text())["jobs"]
    # Lint and unit tests first, with no engine; the image jobs wait for them.
    lint = " ".join(s.get("run", "") for s in jobs["lint"]["steps"])
    assert "make lint" in lint and "make unit" in lint
    assert jobs["matrix"]["needs"] == "lint" and jobs["image"]["needs"] == "matrix"
    steps = {s.get("name", ""): s for s in jobs["image"]["steps"]}
    run = steps["Build and smoke-test"]["run"]
    # Published images are not rebuilt; builds read (and on the default branch write) the registry cache.
    assert '--registry "$REGISTRY"' in run and '--cache-registry "$REGISTRY"' in run
    # Pull requests: the quick suite, the cache only read; the default branch: the full suite (no --suite).
    assert 'if [ "$PUBLISH" != true ]; then args+=(--cache-read-only --suite quick); fi' in run
    assert run.count("--suite") == 1 and "--skip" not in run
    # A manual run may narrow the checks (input `only`), passed through the environment, never spliced in.
    assert steps["Build and smoke-test"]["env"] == {"ONLY": "${{ inputs.only }}"} and "${{" not in run
    assert any("docker/setup-buildx-action@" in s.get("uses", "") for s in jobs["image"]["steps"])
    # The multi-arch tags are made from the push records, after every image job passed.
    assert jobs["manifest"]["needs"] == "image"
    assert "tools/matrix manifest build/pushed/*.json" in json.dumps(jobs["manifest"])


@pytest.mark.subprocess
@pytest.mark.parametrize("tool", ["actionlint", "zizmor"])
def test_workflow_passes_linter(tool: str) -> None:
    exe = shutil.which(tool, path=str(VENV_BIN)) or shutil.which(tool)
    assert exe, f"{tool} is missing: it comes with the dev extra ('make venv')"
    argv = [exe, str(WORKFLOW)] if tool == "actionlint" else [exe, "--offline", str(WORKFLOW)]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_fork_pull_requests_get_no_self_hosted_runners() -> None:
    from matrixtool.deploy import ci
    from matrixtool.model.matrixfile import load_matrix

    variants = load_matrix(FIXTURE_MATRIX).variants
    assert {e["variant"] for e in ci.ci_matrix(variants)["include"]} == {"cpu", "arm64", "cuda", "cuda-arm64", "rocm"}
    hosted = ci.ci_matrix(variants, hosted_only=True)["include"]
    assert {e["variant"] for e in hosted} == {"cpu", "arm64"}
    assert all("self-hosted" not in e["runner"] for e in hosted)


def test_hosted_only_that_leaves_nothing_is_an_error_not_an_empty_matrix() -> None:
    # GitHub Actions rejects `include: []`; the tool says so at once with exit 4.
    gpu_only = [v for v in load_matrix(FIXTURE_MATRIX).variants if "self-hosted" in v.runner]
    with pytest.raises(NothingSelectedError, match="--hosted-only leaves no variant of cuda, cuda-arm64, rocm"):
        ci.ci_matrix(gpu_only, hosted_only=True)
    result = CliRunner().invoke(
        main, ["--matrix", str(FIXTURE_MATRIX), "ci-matrix", "--hosted-only", "cuda", "rocm"], catch_exceptions=False
    )
    assert result.exit_code == ExitCode.NOTHING_SELECTED and result.output.startswith("error: --hosted-only")
