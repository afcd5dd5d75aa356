"""Failure classes that need a GPU: skipped on these CPU machines, with the reason (issue #4).

Class 4 on a GPU host: vLLM's HAS_TRITON needs exactly one active Triton driver (vllm PR #53530 shows a
ROCm image broken by a triton carrying an extra backend, i.e. two drivers). Its CPU side (a CUDA triton on
a CPU image: no CPU backend, 0 active drivers) is a bad-image test in test_bad_images.py.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from matrixtool.smoke.executor import host_has_gpu
from tests.integration.conftest import matrix_cli

pytestmark = pytest.mark.skipif(
    not host_has_gpu(),
    reason="class 4 with a GPU (Triton's active drivers, vllm PR #53530) needs an NVIDIA GPU; these CI machines "
    "have none (proven in host mode on an H200: docs/gpu-proof.md)",
)


def test_triton_drivers_verdict_follows_the_active_driver_count(out_dir: Path) -> None:
    # The GPU runner's Python with torch and triton (not this test venv): MATRIX_GPU_PYTHON, else python3.
    python = os.environ.get("MATRIX_GPU_PYTHON", "python3")
    proc = matrix_cli(
        "test", "--host", "--python", python, "--as", "cuda", "--only", "triton-drivers", "--json", out=out_dir
    )
    (check,) = json.loads(proc.stdout)["checks"]
    active = check["facts"].get("active_drivers", [])
    assert check["status"] == ("passed" if len(active) == 1 else "failed"), check
