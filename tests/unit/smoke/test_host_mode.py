"""Host mode runs the in-image checks in a Python environment of this machine (no Docker)."""

from __future__ import annotations

import json
import sys

import pytest
from click.testing import CliRunner

from matrixtool.cli import main
from matrixtool.core.errors import ExitCode


@pytest.mark.subprocess
def test_host_mode_on_this_interpreter(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # The test venv has no torch, triton or vLLM: vLLM checks skip with the reason, torch-import (pulled in as
    # triton-kernel's prerequisite) fails naming torch and triton-kernel is skipped for it (one root cause, one
    # failure), and the CUDA variant's required triton is reported missing.
    args = [
        "--out",
        str(tmp_path),
        "test",
        "--host",
        "--python",
        sys.executable,
        "--as",
        "cuda",
        "--json",
        "--json-file",
        str(tmp_path / "report.json"),
        "--only",
        "triton-import",
        "--only",
        "no-fake-triton",
        "--only",
        "triton-kernel",
    ]
    result = CliRunner().invoke(main, args, catch_exceptions=False)
    assert result.exit_code == ExitCode.SMOKE
    doc = json.loads(result.stdout)
    assert json.loads((tmp_path / "report.json").read_text()) == doc
    status = {c["check"]: (c["status"], c["diagnosis"]) for c in doc["checks"]}
    assert status["triton-import"][0] == "failed" and "finds no module" in status["triton-import"][1]
    assert status["no-fake-triton"] == (
        "skipped",
        "vLLM is not installed in this Python environment (host mode)",
    )
    assert status["torch-import"][0] == "failed" and "No module named 'torch'" in status["torch-import"][1]
    (torch_import,) = [c for c in doc["checks"] if c["check"] == "torch-import"]
    assert "install torch" in torch_import["hint"]
    assert status["triton-kernel"] == ("skipped", "torch-import failed")
    assert all(c["image"] == f"host:{sys.executable}" for c in doc["checks"])


def test_host_and_image_are_exclusive() -> None:
    result = CliRunner().invoke(main, ["test", "--as", "cpu"], catch_exceptions=False)
    assert result.exit_code == ExitCode.USAGE
    assert "exactly one of --image REF and --host" in result.output
