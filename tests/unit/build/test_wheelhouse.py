"""The wheelhouse check is platform-aware: a wheel serves a build only when its tags fit the variant's
Python and the platform being built (issue 13)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from matrixtool.build import wheelhouse
from matrixtool.cli import main
from matrixtool.core.errors import ExitCode
from matrixtool.model.matrixfile import load_matrix
from matrixtool.model.model import Platform

VARIANTS = {v.name: v for v in load_matrix().variants}
X86_CP311 = "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"
ARM_CP313 = "torch-2.13.0+cpu-cp313-cp313-manylinux_2_28_aarch64.whl"


@pytest.mark.parametrize(
    ("filename", "python", "platform", "fits"),
    [
        (X86_CP311, "3.11", "linux/amd64", True),
        (X86_CP311, "3.13", "linux/arm64", False),  # the wheel of /opt/wheels must not satisfy arm64
        (X86_CP311, "3.11", "linux/arm64", False),  # right Python, wrong machine
        (ARM_CP313, "3.13", "linux/arm64", True),
        (ARM_CP313, "3.11", "linux/arm64", False),  # right machine, wrong Python
        ("torch-2.13.0-cp313-cp313-manylinux_2_28_aarch64.whl", "3.13", "linux/arm64", False),  # PyPI's CUDA build
        ("torch-2.13.0+cpu-cp313-cp313-win_arm64.whl", "3.13", "linux/arm64", False),
        ("torch-2.13.0+cpu-py3-none-any.whl", "3.13", "linux/arm64", True),
        ("torch-2.13.0+cpu.tar.gz", "3.13", "linux/arm64", False),  # not a wheel: no match, no error
    ],
)
def test_wheel_fits_by_tags(filename: str, python: str, platform: str, fits: bool) -> None:
    got = wheelhouse.wheel_fits(
        filename, package="torch", version="2.13.0+cpu", python=python, platform=Platform.parse(platform)
    )
    assert got is fits


def test_the_x86_wheel_serves_cpu_but_not_arm64(tmp_path: Path) -> None:
    (tmp_path / X86_CP311).write_bytes(b"")
    assert wheelhouse.problems(VARIANTS["cpu"], tmp_path, env_var="PIP_FIND_LINKS") == []
    (problem,) = wheelhouse.problems(VARIANTS["arm64"], tmp_path, env_var="PIP_FIND_LINKS")
    assert "torch-2.13.0+cpu-cp313-cp313-manylinux_*_aarch64.whl" in problem
    assert "https://download.pytorch.org/whl/cpu" in problem and "--wheelhouse" in problem
    (tmp_path / ARM_CP313).write_bytes(b"")
    assert wheelhouse.problems(VARIANTS["arm64"], tmp_path, env_var="PIP_FIND_LINKS") == []
    assert wheelhouse.find_wheel(tmp_path, VARIANTS["arm64"], Platform.parse("linux/arm64")) == tmp_path / ARM_CP313


def test_variants_without_a_wheelhouse_need_none() -> None:
    assert wheelhouse.problems(VARIANTS["cuda"], None, env_var="PIP_FIND_LINKS") == []


def test_run_arm64_stops_before_the_engine_naming_wheel_index_and_flag(tmp_path: Path) -> None:
    (tmp_path / X86_CP311).write_bytes(b"")
    result = CliRunner().invoke(main, ["run", "arm64", "--wheelhouse", str(tmp_path)], catch_exceptions=False)
    assert result.exit_code == ExitCode.CONFIG, result.output
    for part in ("torch-2.13.0+cpu-cp313-cp313-manylinux_*_aarch64.whl", "https://download.pytorch.org/whl/cpu"):
        assert part in result.output
    assert "--wheelhouse DIR" in result.output
