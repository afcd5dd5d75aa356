"""The tool as a user installs it: ``pip install`` of the built wheel (not editable) into a fresh venv, then
``matrix`` run from another folder on a checkout's matrix.yaml. No engine needed: ``ci-matrix`` and
``render --check`` touch no Docker.
"""

from __future__ import annotations

import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT, copy_checkout


def _run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    # No PYTHONPATH and no checkout on sys.path: the venv must find matrixtool in its own site-packages.
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, check=False, timeout=600)
    print(f"$ {' '.join(argv)}\n{proc.stdout}{proc.stderr}")
    return proc


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The ``bin/`` of a fresh venv holding the wheel built from this checkout and its dependencies."""
    root = tmp_path_factory.mktemp("install")
    wheels = root / "wheels"
    built = _run([sys.executable, "-m", "pip", "wheel", str(REPO_ROOT), "--no-deps", "-w", str(wheels)], cwd=root)
    assert built.returncode == 0, built.stderr
    (wheel,) = wheels.glob("vllm_image_matrix-*.whl")
    venv.EnvBuilder(with_pip=True, clear=True).create(root / "venv")
    bin_dir = root / "venv" / "bin"
    got = _run([str(bin_dir / "python"), "-m", "pip", "install", "--quiet", str(wheel)], cwd=root)
    assert got.returncode == 0, got.stderr
    return bin_dir


def test_installed_wheel_runs_from_another_folder(installed: Path, tmp_path: Path) -> None:
    checkout = tmp_path / "checkout"
    matrix = copy_checkout(checkout)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    where = _run([str(installed / "python"), "-c", "import matrixtool; print(matrixtool.__file__)"], cwd=elsewhere)
    assert str(installed.parent) in where.stdout, "matrixtool was not imported from the venv's site-packages"

    ci = _run([str(installed / "matrix"), "--matrix", str(matrix), "ci-matrix"], cwd=elsewhere)
    assert ci.returncode == 0, ci.stderr
    assert '"variant":"cpu"' in ci.stdout and "Traceback" not in ci.stderr

    check = _run([str(installed / "matrix"), "--matrix", str(matrix), "render", "--check"], cwd=elsewhere)
    assert check.returncode == 0, check.stderr
    assert "images/ is fresh" in check.stdout

    # Drift in that checkout is found there (the check reads its images/ and templates/, not the package's).
    dockerfile = checkout / "images" / "cpu" / "Dockerfile"
    dockerfile.write_text(dockerfile.read_text() + "# edited\n")
    stale = _run([str(installed / "matrix"), "--matrix", str(matrix), "render", "--check"], cwd=elsewhere)
    assert stale.returncode == 5, stale.stderr
    assert not (elsewhere / "build").exists(), "nothing may be written to the working folder"
