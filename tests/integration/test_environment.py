"""The environment check (failure classes 38-41) on the real CPU image: what the image's ENV, the profile and the run
give the server, judged against the vLLM installed in it, and the limits of the container.

Cheap: ``--only environment`` (no server, no model), the session's CPU image, one derived image of two lines
(two faults, each named). The cpu image sets ``VLLM_ENGINE_READY_TIMEOUT_S`` to its ready_budget (900 s, over vLLM's
default 600 s): the good image has no finding; vLLM's default shorter than the budget (a warning) is unit-tested
(tests/unit/smoke/test_environment.py), a value set shorter is a case here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from matrixtool.core.errors import ExitCode
from tests.integration.conftest import json_of, matrix_cli

pytestmark = [pytest.mark.engine, pytest.mark.slow]


def _environment(image: str, out: Path, *flags: str) -> tuple[int, dict[str, Any]]:
    proc = matrix_cli(
        "test", "--image", image, "--as", "cpu", "--profile", "default", "--only", "environment", *flags, "--json",
        out=out, timeout=600,
    )  # fmt: skip
    assert proc.returncode in (0, ExitCode.SMOKE), proc.stderr[-3000:]
    (check,) = [c for c in json_of(proc)["checks"] if c["check"] == "environment"]
    return proc.returncode, check


def _found(check: dict[str, Any]) -> list[tuple[str, str]]:
    return [(f["severity"], f["variable"]) for f in check["facts"]["findings"]]


def test_the_good_image_is_not_flagged(cpu_image: str, tmp_path: Path) -> None:
    code, check = _environment(cpu_image, tmp_path / "out")
    assert code == 0 and check["status"] == "passed", check["diagnosis"]
    assert _found(check) == [] and "limits meet the variant's needs" in check["diagnosis"]
    registry = check["facts"]["registry"]
    assert registry["path"].endswith("/vllm/envs.py") and registry["names"] > 200 and registry["executed"] is True


def test_a_removed_variable_and_a_proxy_in_the_images_env_are_each_named(derived_image: Any, tmp_path: Path) -> None:
    image = derived_image(["ENV VLLM_ATTENTION_BACKEND=FLASH_ATTN", "ENV HTTP_PROXY=http://proxy.example:3128"])
    code, check = _environment(image, tmp_path / "out")
    assert code == ExitCode.SMOKE and check["status"] == "failed"
    assert _found(check) == [("error", "VLLM_ATTENTION_BACKEND"), ("error", "HTTP_PROXY")]
    assert "VLLM_ATTENTION_BACKEND=FLASH_ATTN is not a variable of the installed vLLM" in check["diagnosis"]
    assert "--attention-backend" in check["hint"]
    assert "health check" in check["diagnosis"] and "localhost,127.0.0.1,::1" in check["hint"]


@pytest.mark.parametrize(
    ("flags", "status", "variable", "says"),
    [
        (["--env", "VLLM_ENGINE_READY_TIMEOUT_S=60"], "failed", "VLLM_ENGINE_READY_TIMEOUT_S", "=60 is shorter than"),
        (["--env", "VLLM_CPU_KVCACHE_SPACE=1GiB"], "failed", "VLLM_CPU_KVCACHE_SPACE", "invalid literal"),
        (["--env", "HF_HUB_ENABLE_HF_TRANSFER=1"], "passed", "HF_HUB_ENABLE_HF_TRANSFER", "no longer uses"),
        (["--env", "HTTPS_PROXY=http://proxy.example:3128"], "passed", "HTTPS_PROXY", "no_proxy=''"),
        (["--nofile", "1024"], "passed", "RLIMIT_NOFILE", "Too many open files (os error 24)"),
    ],
    ids=["start-up-timeout", "size", "hf-transfer", "https-proxy", "nofile"],
)
def test_a_bad_run_condition_is_named_once(
    cpu_image: str, tmp_path: Path, flags: list[str], status: str, variable: str, says: str
) -> None:
    code, check = _environment(cpu_image, tmp_path / "out", *flags)
    assert check["status"] == status and code == (0 if status == "passed" else ExitCode.SMOKE), check["diagnosis"]
    assert _found(check) == [("error" if status == "failed" else "warning", variable)]
    assert says in check["diagnosis"]
