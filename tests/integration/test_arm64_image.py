"""The arm64 variant: the CPU stack on linux/arm64, built and smoke-checked under QEMU emulation on an
x86-64 host (issue 3). Every check passes, offline generate included.

Emulation makes this the longest test of the suite: the timeouts of matrix.yaml's arm64 checks allow for it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import pytest

from matrixtool import engine
from matrixtool.matrix import load_matrix
from tests.integration.conftest import json_of, matrix_cli

pytestmark = [pytest.mark.engine, pytest.mark.slow, pytest.mark.emulated]

ARM64 = next(v for v in load_matrix().variants if v.name == "arm64")


@pytest.fixture(scope="module")
def arm64_run(client: docker.DockerClient, out_dir: Path) -> Iterator[dict[str, Any]]:
    """``tools/matrix run arm64 --json``: build under QEMU and the full smoke suite; image removed after."""
    if "linux/arm64" not in engine.builder_platforms():
        pytest.fail("the builder lists no linux/arm64: run 'make setup' (it installs qemu-user-static)")
    proc = matrix_cli("run", "arm64", "--json", out=out_dir, timeout=5400)
    doc = json_of(proc)
    doc["exit_code"] = proc.returncode
    doc["stderr"] = proc.stderr
    yield doc
    for build in doc.get("builds", []):
        if not build["cached"]:
            for tag in client.images.get(build["image"]).tags:
                client.images.remove(tag, noprune=False)


def test_arm64_under_emulation_passes_every_check(client: docker.DockerClient, arm64_run: dict[str, Any]) -> None:
    assert arm64_run["exit_code"] == 0, arm64_run["stderr"][-5000:]
    (build,) = arm64_run["builds"]
    assert build["platform"] == "linux/arm64"
    checks = {c["check"]: c for c in arm64_run["checks"]}
    assert list(checks) == [c.name for c in ARM64.checks]
    assert {c["status"] for c in checks.values()} == {"passed"}, arm64_run["checks"]
    # PyPI's aarch64 torch 2.13.0 is a CUDA build (matrix.yaml: torch_build), installed through the override.
    family = checks["torch-family"]["facts"]
    assert family["torch"] == "2.13.0" and family["torch_build"] == "cuda"
    assert checks["triton-import"]["facts"]["providers"] == []
    gen = checks["offline-generate"]["facts"]
    assert gen["eager"]["tokens"] == gen["compiled"]["tokens"]
    assert checks["vllm-cli"]["facts"]["version"].startswith("0.32.0")
