"""`make images` path: `run --keep-going` reports a failed variant and goes on with the others (issue 3)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import yaml

from matrixtool.core.errors import ExitCode
from matrixtool.model.checks import prerequisites
from tests.conftest import REPO_ROOT, copy_checkout
from tests.integration.conftest import json_of, matrix_cli

pytestmark = [pytest.mark.engine]


def test_keep_going_past_an_unreachable_index(cpu_image: str, out_dir: Path, tmp_path: Path) -> None:
    with socket.socket() as s:  # a loopback port nothing listens on: the ROCm index "cannot be reached"
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}/whl/rocm6.4"
    data = yaml.safe_load((REPO_ROOT / "matrix.yaml").read_text())
    data["variants"]["rocm"]["index"]["url"] = url
    matrix = copy_checkout(tmp_path, yaml.safe_dump(data, sort_keys=False))
    assert matrix_cli("--matrix", str(matrix), "render", out=out_dir).returncode == 0
    proc = matrix_cli(
        "--matrix",
        str(matrix),
        "run",
        "rocm",
        "cpu",
        "--keep-going",
        "--jobs",
        "2",
        "--only",
        "vllm-cli",
        "--profile",
        "default",
        "--json",
        out=out_dir,
        timeout=900,
    )
    # The most severe error of the variants: the unreachable index (10), not a generic 6.
    assert proc.returncode == ExitCode.INDEX_UNREACHABLE, proc.stderr[-3000:]
    doc = json_of(proc)
    assert list(doc["errors"]) == ["rocm"]
    assert f"package index {url} is unreachable" in doc["errors"]["rocm"]
    (build,) = doc["builds"]
    assert build["variant"] == "cpu" and build["image"] == cpu_image and build["cached"] is True
    # vllm-cli and the checks it refers to (torch-import, vllm-import: docs/checks.md), all passed.
    assert [(c["check"], c["status"]) for c in doc["checks"]] == [
        (name, "passed") for name in prerequisites(["vllm-cli"])
    ]
