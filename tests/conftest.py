"""Shared test helpers."""

from __future__ import annotations

import shutil
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
# The fixture matrix the unit tests of the model's logic read (a frozen copy of matrix.yaml): adding a variant to
# matrix.yaml changes none of them; tests/unit/model/test_shipped_matrix.py pins the shipped file.
FIXTURE_MATRIX = REPO_ROOT / "tests" / "unit" / "data" / "matrix" / "matrix.yaml"


def copy_checkout(dest: Path, matrix_text: str | None = None) -> Path:
    """A checkout's inputs under ``dest``: ``matrix.yaml`` (``matrix_text`` when given, else this checkout's),
    ``templates/`` and ``images/``; returns the matrix file's path. The tool reads templates next to the
    matrix file, so a copied matrix needs its templates beside it."""
    dest.mkdir(parents=True, exist_ok=True)
    path = dest / "matrix.yaml"
    path.write_text(matrix_text if matrix_text is not None else (REPO_ROOT / "matrix.yaml").read_text())
    for folder in ("templates", "images"):
        shutil.copytree(REPO_ROOT / folder, dest / folder, dirs_exist_ok=True)
    return path
