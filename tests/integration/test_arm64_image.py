"""Arm64 under QEMU emulation on an x86-64 host (issues 3 and 13).

The `arm64` variant is the CPU stack: torch 2.13.0+cpu for aarch64 from PyTorch's CPU index, through the
wheelhouse. Where no wheelhouse holds that wheel (these machines cannot reach the index), `run arm64` stops
before building (exit 3), and the tests that build it are skipped with the same words. Emulation itself stays
covered by `arm64-pypi` (tests/data/emulation-matrix.yaml: PyPI's aarch64 wheels), built and checked here.

Under QEMU the whole suite takes about ten times as long as on x86-64 (docs/figures.md): `make test` runs the
quick checks; the full suite of `arm64` is marked `emulated` (`make test-emulated`, weekly in
.github/workflows/emulated.yml).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import pytest

from matrixtool.build.hostfiles import WHEELHOUSE_ENV_VAR, resolve_wheelhouse
from matrixtool.build.wheelhouse import problems
from matrixtool.core import engine
from matrixtool.model.matrixfile import load_matrix
from tests.integration.conftest import EMULATION_VARIANT, json_of, matrix_cli, remove_if_built

pytestmark = [pytest.mark.engine, pytest.mark.slow]

ARM64 = next(v for v in load_matrix().variants if v.name == "arm64")
# Checks that load neither vLLM's engine nor a model: seconds to a few minutes under QEMU.
QUICK = ["triton-import", "torch-family", "triton-drivers", "pip-check", "native-libs", "cpu-engine-settings"]
# What test_emulated_arm64_builds_and_its_checks_pass runs under QEMU: the checks whose facts say what the image
# is (the emulation itself is the point; the other quick checks cost minutes more under QEMU).
EMULATED_FACTS = ["triton-import", "torch-family", "pip-check"]
# Why `arm64` cannot be built here, in the words `run arm64` uses; empty where a wheelhouse has its wheel.
MISSING_WHEEL = problems(ARM64, resolve_wheelhouse(None, os.environ), env_var=WHEELHOUSE_ENV_VAR)
needs_wheel = pytest.mark.skipif(bool(MISSING_WHEEL), reason=" ".join(MISSING_WHEEL))


def _run(out_dir: Path, variant: str, checks: list[str], *matrix_args: str) -> dict[str, Any]:
    args = [*matrix_args, "run", variant, "--json", "--profile", "default"]  # restricted: test_profiles.py
    for name in checks:
        args += ["--only", name]
    proc = matrix_cli(*args, out=out_dir, timeout=5400)
    doc = json_of(proc)
    assert proc.returncode == 0, proc.stderr[-5000:]
    return {c["check"]: c for c in doc["checks"]}


@pytest.mark.skipif(not MISSING_WHEEL, reason="a wheelhouse holds the aarch64 wheel: arm64 builds here")
def test_arm64_without_its_wheel_stops_before_building(out_dir: Path) -> None:
    proc = matrix_cli("run", "arm64", out=out_dir, timeout=120)
    assert proc.returncode == 3, proc.stderr
    for part in ("torch-2.13.0+cpu-cp313-cp313-manylinux_*_aarch64.whl", "https://download.pytorch.org/whl/cpu"):
        assert part in proc.stderr
    assert "--wheelhouse DIR" in proc.stderr
    assert "docker buildx build" not in proc.stderr and "debootstrap" not in proc.stderr


def test_emulated_arm64_builds_and_its_checks_pass(
    emulated_arm64: dict[str, Any], emulation_matrix: Path, out_dir: Path
) -> None:
    assert emulated_arm64["platform"] == "linux/arm64" and emulated_arm64["size_bytes"] > 10**9
    checks = _run(out_dir, EMULATION_VARIANT, EMULATED_FACTS, "--matrix", str(emulation_matrix))
    # torch-family's prerequisite comes along, in the variant's (the catalogue's) order
    assert list(checks) == ["triton-import", "torch-import", "torch-family", "pip-check"]
    assert {c["status"] for c in checks.values()} == {"passed"}, checks
    # PyPI's aarch64 torch 2.13.0 is a CUDA build (the test matrix says so), installed through the override.
    family = checks["torch-family"]["facts"]
    assert family["torch"] == "2.13.0" and family["torch_build"] == "cuda"
    assert checks["triton-import"]["facts"]["providers"] == []  # torch's triton==3.7.1 is excluded
    waived = checks["pip-check"]["facts"]["waived"]
    assert any("overridden by the variant: torch==2.13.0" in w for w in waived), waived


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


@needs_wheel
def test_arm64_builds_under_emulation_and_its_quick_checks_pass(arm64_build: dict[str, Any], out_dir: Path) -> None:
    assert arm64_build["platform"] == "linux/arm64"
    checks = _run(out_dir, "arm64", QUICK)
    assert {c["status"] for c in checks.values()} == {"passed"}, checks
    family = checks["torch-family"]["facts"]
    assert family["torch"] == "2.13.0+cpu" and family["torch_build"] == "cpu"
    assert not any("overridden" in w for w in checks["pip-check"]["facts"]["waived"])


@needs_wheel
@pytest.mark.emulated
def test_arm64_full_suite_under_emulation(arm64_build: dict[str, Any], out_dir: Path) -> None:
    checks = _run(out_dir, "arm64", [c.name for c in ARM64.checks])
    assert {c["status"] for c in checks.values()} == {"passed"}, checks
    gen = checks["offline-generate"]["facts"]
    assert gen["eager"]["tokens"] == gen["compiled"]["tokens"]
    assert all(len(t) == 8 for t in gen["eager"]["tokens"])
    assert checks["vllm-cli"]["facts"]["version"].startswith("0.32.0")
