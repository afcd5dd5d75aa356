"""The arm64 variant: the CPU stack on linux/arm64, built and smoke-checked under QEMU emulation on an
x86-64 host (issue 3).

Under QEMU the whole suite takes about ten times as long as on x86-64 (docs/figures.md), too long for
`make test` within CI's limit: the build and the quick checks run in `make test`; the full suite,
offline generate included, is marked `emulated` and runs in `make test-emulated` and the scheduled
workflow `.github/workflows/emulated.yml`.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import pytest

from matrixtool import engine
from matrixtool.matrix import load_matrix
from tests.integration.conftest import json_of, matrix_cli, remove_if_built

pytestmark = [pytest.mark.engine, pytest.mark.slow]

ARM64 = next(v for v in load_matrix().variants if v.name == "arm64")
# Checks that load neither vLLM's engine nor a model: seconds to a few minutes under QEMU.
QUICK = ["triton-import", "torch-family", "triton-drivers", "pip-check", "native-libs", "cpu-engine-settings"]


@pytest.fixture(scope="module")
def arm64_build(client: docker.DockerClient, out_dir: Path) -> Iterator[dict[str, Any]]:
    """``tools/matrix build arm64 --json`` under QEMU; the image is removed afterwards when built here."""
    if "linux/arm64" not in engine.builder_platforms():
        pytest.fail("the builder lists no linux/arm64: run 'make setup' (it installs QEMU and registers it)")
    proc = matrix_cli("build", "arm64", "--json", out=out_dir, timeout=3600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    (record,) = json_of(proc)["builds"]
    yield record
    remove_if_built(client, record)


def _run(out_dir: Path, checks: list[str]) -> dict[str, Any]:
    args = ["run", "arm64", "--json", "--profile", "default"]  # restricted: tests/integration/test_profiles.py
    for name in checks:
        args += ["--only", name]
    proc = matrix_cli(*args, out=out_dir, timeout=5400)
    doc = json_of(proc)
    assert proc.returncode == 0, proc.stderr[-5000:]
    return {c["check"]: c for c in doc["checks"]}


def test_arm64_builds_under_emulation_and_its_quick_checks_pass(arm64_build: dict[str, Any], out_dir: Path) -> None:
    assert arm64_build["platform"] == "linux/arm64" and arm64_build["size_bytes"] > 10**9
    checks = _run(out_dir, QUICK)
    assert list(checks) == QUICK
    assert {c["status"] for c in checks.values()} == {"passed"}, checks
    # PyPI's aarch64 torch 2.13.0 is a CUDA build (matrix.yaml: torch_build), installed through the override.
    family = checks["torch-family"]["facts"]
    assert family["torch"] == "2.13.0" and family["torch_build"] == "cuda"
    assert checks["triton-import"]["facts"]["providers"] == []  # torch's triton==3.7.1 is excluded
    waived = checks["pip-check"]["facts"]["waived"]
    assert any("overridden by the variant: torch==2.13.0" in w for w in waived), waived


@pytest.mark.emulated
def test_arm64_full_suite_under_emulation(arm64_build: dict[str, Any], out_dir: Path) -> None:
    checks = _run(out_dir, [c.name for c in ARM64.checks])
    assert {c["status"] for c in checks.values()} == {"passed"}, checks
    gen = checks["offline-generate"]["facts"]
    assert gen["eager"]["tokens"] == gen["compiled"]["tokens"]
    assert all(len(t) == 8 for t in gen["eager"]["tokens"])
    assert checks["vllm-cli"]["facts"]["version"].startswith("0.32.0")
