"""``tools/matrix``, the bash entry point, on a machine not set up: no ``.venv`` beside it and no ``python3`` that
imports matrixtool. One ``error:`` line naming ``make setup``, exit 20 (``ExitCode.NOT_SET_UP``), not the tool's
exit 1 for its own bugs."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from matrixtool.core.errors import MEANING, ExitCode

pytestmark = pytest.mark.subprocess

ENTRY = Path(__file__).resolve().parents[3] / "tools" / "matrix"


def test_without_a_venv_or_an_installed_tool_it_says_to_set_up(tmp_path: Path) -> None:
    tools = tmp_path / "checkout" / "tools"
    tools.mkdir(parents=True)
    shutil.copy2(ENTRY, tools / "matrix")
    # Debian's own python3 (/usr/bin), which has no matrixtool: the project installs it into .venv only.
    proc = subprocess.run(
        [str(tools / "matrix"), "ci-matrix"],
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert proc.returncode == int(ExitCode.NOT_SET_UP) == 20, proc.stderr
    assert proc.stdout == ""
    assert proc.stderr.splitlines() == [
        "error: no project venv at .venv and no python3 that imports matrixtool; run 'make setup' first (README.md)"
    ]
    assert "make setup" in MEANING[ExitCode.NOT_SET_UP][1]
