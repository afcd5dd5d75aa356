"""Shared test helpers."""

from __future__ import annotations

import shutil
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from matrixtool.core.errors import ExitCode

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


# --- exit 1 is for bugs of the tool: no input of any test may reach it (docs/commands.md, exit table) ---

_EXITS: list[tuple[str, int]] = []  # (command line, exit status) of every CLI run of the test running now
_TOTALS: dict[int, int] = {}  # exit status -> runs, over the session


def record_exit(argv: Sequence[str] | None, code: int | None) -> None:
    """Note one CLI run (in-process through ``CliRunner.invoke``, or ``tools/matrix`` as a program) and its exit."""
    status = 0 if code is None else int(code)
    _EXITS.append((" ".join(str(a) for a in (argv or ()))[:300], status))
    _TOTALS[status] = _TOTALS.get(status, 0) + 1


def bug_exits(exits: Sequence[tuple[str, int]]) -> list[str]:
    """The command lines among ``exits`` that exited with the bug code (``ExitCode.UNEXPECTED``)."""
    return [argv for argv, code in exits if code == int(ExitCode.UNEXPECTED)]


@pytest.fixture(autouse=True)
def no_bug_exit(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every CLI run of the test is recorded; one that exits 1 (a bug of the tool: an input problem must have its
    own code) fails the test, unless it is marked ``bug_exit`` (it provokes a bug on purpose)."""
    original = CliRunner.invoke

    def invoke(self: CliRunner, cli: Any, args: Any = None, *rest: Any, **kwargs: Any) -> Result:
        result = original(self, cli, args, *rest, **kwargs)
        record_exit([args] if isinstance(args, str) else args, result.exit_code)
        return result

    monkeypatch.setattr(CliRunner, "invoke", invoke)
    _EXITS.clear()
    yield
    bugs = bug_exits(_EXITS)
    _EXITS.clear()
    if bugs and request.node.get_closest_marker("bug_exit") is None:
        pytest.fail(f"exit 1 (a bug of the tool) from input of this test: {bugs}", pytrace=False)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """How often each exit status was reached by the session's CLI runs."""
    if _TOTALS:
        shown = ", ".join(f"{code}: {n}" for code, n in sorted(_TOTALS.items()))
        terminalreporter.write_line(f"CLI exit statuses (status: runs): {shown}")
