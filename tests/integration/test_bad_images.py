"""Small bad images built on top of the CPU image; each is flagged by the right check and hint."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from matrixtool.errors import ExitCode
from tests.conftest import REPO_ROOT
from tests.integration.conftest import json_of, matrix_cli

pytestmark = [pytest.mark.engine, pytest.mark.slow]


def _only(doc: dict[str, Any], name: str) -> dict[str, Any]:
    (check,) = [c for c in doc["checks"] if c["check"] == name]
    return check


def test_defaults_forcing_v2_without_triton(derived_image: Any, out_dir: Path) -> None:
    """Class 1: the image's defaults force the V2 runner, and there is no Triton (vllm#57684)."""
    image = derived_image(["ENV VLLM_USE_V2_MODEL_RUNNER=1"])
    proc = matrix_cli("test", "--image", image, "--as", "cpu", "--only", "model-runner", "--json", out=out_dir)
    assert proc.returncode == ExitCode.SMOKE
    check = _only(json_of(proc), "model-runner")
    assert check["status"] == "failed"
    assert "VLLM_USE_V2_MODEL_RUNNER=1" in check["diagnosis"]
    assert "Model Runner V2 requires Triton." in check["diagnosis"]
    assert "triton not installed" in check["diagnosis"]
    assert "VLLM_USE_V2_MODEL_RUNNER=0" in check["hint"]


def test_placeholder_triton_in_sys_modules(derived_image: Any, out_dir: Path) -> None:
    """Class 2: a placeholder module object planted as `triton` (what vLLM 0.8.5 did, vllm#17309)."""
    pth = "/opt/venv/lib/python3.11/site-packages/zz_triton_shim.pth"
    image = derived_image([
        "USER root",
        f"RUN echo 'import sys, types; sys.modules.setdefault(\"triton\", types.ModuleType(\"triton\"))' > {pth}",
        "USER 1000:1000",
    ])
    proc = matrix_cli("test", "--image", image, "--as", "cpu", "--only", "no-fake-triton", "--only",
                      "triton-import", "--json", out=out_dir)
    assert proc.returncode == ExitCode.SMOKE
    doc = json_of(proc)
    fake = _only(doc, "no-fake-triton")
    assert fake["status"] == "failed"
    assert "placeholder" in fake["diagnosis"] and pth in fake["diagnosis"]
    assert "vLLM < 0.9.0" in fake["hint"]
    assert _only(doc, "triton-import")["status"] == "failed"


def test_hung_check_is_reported_as_timeout(cpu_image: str, out_dir: Path, tmp_path: Path) -> None:
    """A check past its timeout is `timeout`, and its container is removed (autouse fixture checks)."""
    data = yaml.safe_load((REPO_ROOT / "matrix.yaml").read_text())
    data["variants"]["cpu"]["smoke"]["checks"]["offline-generate"]["timeout"] = 3
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text(yaml.safe_dump(data))
    proc = matrix_cli("--matrix", str(matrix), "test", "--image", cpu_image, "--as", "cpu",
                      "--only", "offline-generate", "--only", "vllm-cli", "--json", out=out_dir)
    assert proc.returncode == ExitCode.SMOKE
    doc = json_of(proc)
    assert _only(doc, "offline-generate")["status"] == "timeout"
    # The next check runs in a fresh container and still passes.
    assert _only(doc, "vllm-cli")["status"] == "passed"
