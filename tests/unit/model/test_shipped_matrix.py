"""The one test pinned to the shipped matrix.yaml: what it resolves to (each variant's accelerator, platforms,
runner labels, publish_as, profiles, checks and timeouts; the ci-matrix entries; the update groups) equals
tests/unit/data/matrix/shipped-matrix.json. Every test of the logic runs on fixture matrices
(tests/unit/data/matrix/matrix.yaml), so adding a variant fails this test alone: `make docs` regenerates the file,
and its diff is the change to review."""

from __future__ import annotations

import sys

from tests.conftest import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "tools"))
import docs_tables

GOLDEN = REPO_ROOT / "tests" / "unit" / "data" / "matrix" / "shipped-matrix.json"


def test_the_shipped_matrix_resolves_to_its_golden_file() -> None:
    assert GOLDEN.read_text(encoding="utf-8") == docs_tables.shipped_matrix_text(), (
        "matrix.yaml no longer resolves to tests/unit/data/matrix/shipped-matrix.json: run `make docs` and review "
        "the file's diff"
    )
