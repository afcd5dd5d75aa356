"""JSON from outside the tool nested past Python's recursion limit is a ValueError (jsontext.loads), and each
command that reads such a file says so with exit 3 (it was exit 1, "unexpected RecursionError")."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from matrixtool.cli import main
from matrixtool.core import jsontext
from matrixtool.core.errors import ExitCode

DEEP = "[" * 100_000 + "]" * 100_000


def test_a_document_nested_too_deeply_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="nested too deeply"):
        jsontext.loads(DEEP)
    assert jsontext.loads('{"a": [1]}') == {"a": [1]}


@pytest.mark.parametrize(
    "args",
    [
        ["kube", "cpu", "--from-report", "{deep}"],
        ["manifest", "{deep}", "--registry", "127.0.0.1:5000"],
        ["audit", "{deep}", "--advisories", "{folder}"],
    ],
    ids=["kube --from-report", "manifest", "audit"],
)
def test_commands_refuse_a_too_deep_file_as_bad_input(tmp_path: Path, args: list[str]) -> None:
    deep = tmp_path / "deep.json"
    deep.write_text(DEEP)
    argv = [a.format(deep=deep, folder=tmp_path) for a in args]
    result = CliRunner().invoke(main, ["--out", str(tmp_path / "out"), *argv])
    assert result.exit_code == ExitCode.CONFIG, result.output
    assert "nested too deeply" in result.output and str(deep) in result.output
