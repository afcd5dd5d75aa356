"""The all-or-nothing --write and the groups of the update workflow."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from matrixtool.build import imagedir
from matrixtool.core.errors import ConfigError, OutputError
from matrixtool.model.matrixfile import load_matrix
from matrixtool.update import edits, updatefiles
from tests.conftest import FIXTURE_MATRIX, copy_checkout


def test_write_is_all_or_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    matrix = copy_checkout(tmp_path)
    before = matrix.read_text()
    edited = before.replace("version: 0.33.0}", "version: 0.34.0}", 1)
    files = updatefiles.render_text(edited, matrix)

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise ConfigError(str(tmp_path / "images"), ["images/cuda is a symbolic link"])

    monkeypatch.setattr(imagedir, "write", refuse)
    with pytest.raises(ConfigError):
        updatefiles.write_all(matrix, edited, files)
    assert matrix.read_text() == before and not list(tmp_path.glob(".matrix.yaml.*"))
    monkeypatch.undo()
    changed = updatefiles.write_all(matrix, edited, files)
    assert matrix.read_text() == edited and changed and not list(tmp_path.glob(".matrix.yaml.*"))


def test_a_failed_rename_of_a_rendered_file_leaves_the_matrix_unchanged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The edited matrix and the changed files of images/ are one set: the last rename fails, every file is put back."""
    matrix = copy_checkout(tmp_path)
    before = matrix.read_text()
    edited = before.replace("version: 0.33.0}", "version: 0.34.0}", 1)
    files = updatefiles.render_text(edited, matrix)
    images_before = {p: p.read_bytes() for p in (tmp_path / "images").rglob("*") if p.is_file()}
    real = os.replace

    def failing(src: str | Path, dst: str | Path) -> None:
        if Path(dst) == matrix and not Path(src).name.endswith(".old"):  # the matrix is renamed in last
            raise OSError(errno.EIO, "Input/output error")
        real(src, dst)

    monkeypatch.setattr(os, "replace", failing)
    with pytest.raises(OutputError, match=r"matrix\.yaml: Input/output error"):
        updatefiles.write_all(matrix, edited, files)
    assert matrix.read_text() == before
    assert {p: p.read_bytes() for p in (tmp_path / "images").rglob("*") if p.is_file()} == images_before


def test_groups_follow_the_key_owner() -> None:
    raw = yaml.safe_load(FIXTURE_MATRIX.read_text())
    names = [v.name for v in load_matrix(FIXTURE_MATRIX).variants]
    got = dict(edits.groups(raw, names))
    assert got["cuda"] == ["cuda", "cuda-arm64"] and "cuda-arm64" not in got
    assert sorted(n for members in got.values() for n in members) == sorted(names)
    assert edits.groups(raw, ["cuda-arm64"]) == [("cuda", ["cuda-arm64"])]
    line = json.loads(updatefiles.groups_json(FIXTURE_MATRIX, ("cuda-arm64", "cuda")))
    assert {"group": "cuda", "variants": "cuda cuda-arm64"} in line["include"]
