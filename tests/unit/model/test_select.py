from __future__ import annotations

import pytest
from click.testing import CliRunner

from matrixtool.cli import main
from matrixtool.core.errors import ConfigError, ExitCode, NothingSelectedError
from matrixtool.model import select
from matrixtool.model.matrixfile import load_matrix
from matrixtool.model.select import select_variants
from tests.conftest import FIXTURE_MATRIX


def test_select_keeps_matrix_order() -> None:
    matrix = load_matrix(FIXTURE_MATRIX)
    assert [v.name for v in select_variants(matrix, ["rocm", "cpu"])] == ["cpu", "rocm"]
    assert [v.name for v in select_variants(matrix, [])] == matrix.names()
    assert [v.name for v in select_variants(matrix, ["all"])] == matrix.names()


def test_unknown_variant_suggests() -> None:
    with pytest.raises(NothingSelectedError, match=r"'cpuu' \(did you mean 'cpu'\?\)"):
        select_variants(load_matrix(FIXTURE_MATRIX), ["cpuu"])


def test_cli_unknown_variant_exit_code() -> None:
    result = CliRunner().invoke(main, ["build", "cdua"], catch_exceptions=False)
    assert result.exit_code == ExitCode.NOTHING_SELECTED
    assert "did you mean 'cuda'" in result.output


def test_cli_engine_unreachable_exit_code() -> None:
    # The autouse guard makes every Docker client creation fail, as with no engine running.
    result = CliRunner().invoke(main, ["base", "cpu"], catch_exceptions=False)
    assert result.exit_code == ExitCode.ENGINE
    assert "no Docker engine answers" in result.output
    assert "make engine" in result.output
    assert "Traceback" not in result.output


def test_test_as_takes_one_variant() -> None:
    result = CliRunner().invoke(main, ["test", "--host", "--as", "all"], catch_exceptions=False)
    assert result.exit_code == ExitCode.USAGE and "one variant name" in result.output


def test_an_empty_check_selection_is_a_config_error() -> None:
    args = ["test", "--host", "--as", "cpu"]
    for name in [c.name for c in load_matrix(FIXTURE_MATRIX).variants[0].checks]:
        args += ["--skip", name]
    result = CliRunner().invoke(main, args, catch_exceptions=False)
    assert result.exit_code == ExitCode.CONFIG and "leaves no check" in result.output


def test_select_checks_validates_as_the_flag_check_does() -> None:
    """One validation of --only/--skip (inputs.check_selection), used by the flag check and by select_checks."""
    cpu = next(v for v in load_matrix(FIXTURE_MATRIX).variants if v.name == "cpu")
    assert [c.name for c in select.select_checks(cpu, ["pip-check"], [])] == ["pip-check"]
    assert "pip-check" not in [c.name for c in select.select_checks(cpu, [], ["pip-check"])]
    with pytest.raises(ConfigError, match="'triton-kernel' is not a check of variant cpu"):
        select.select_checks(cpu, ["triton-kernel"], [])
    with pytest.raises(ConfigError, match="'nope' is no smoke check"):
        select.select_checks(cpu, [], ["nope"])
    with pytest.raises(ConfigError, match="leaves no check"):
        select.select_checks(cpu, [], [c.name for c in cpu.checks])


def test_a_skip_is_honoured_or_refused_never_overridden() -> None:
    """``--skip offline-generate`` was run anyway for serve (it only uses its tokens): now it is left out; a skip of a
    check a selected one needs is refused, naming both and the fix (exit 3 through the CLI)."""
    cpu = next(v for v in load_matrix(FIXTURE_MATRIX).variants if v.name == "cpu")
    names = [c.name for c in select.select_checks(cpu, [], ["offline-generate"], "full")]
    assert "serve" in names and "offline-generate" not in names and "tiny-model" in names
    assert "offline-generate" in [c.name for c in select.select_checks(cpu, ["serve"], [], "full")]
    with pytest.raises(ConfigError) as refused:
        select.select_checks(cpu, ["serve"], ["tiny-model"])
    assert str(refused.value).count("--skip tiny-model: serve needs it") == 1
    assert "skip serve too (--skip serve), or run tiny-model" in str(refused.value)
    result = CliRunner().invoke(main, ["test", "--host", "--as", "cpu", "--skip", "tiny-model"])
    assert result.exit_code == ExitCode.CONFIG and "--skip tiny-model: " in result.output
    assert "offline-generate" in result.output and "Traceback" not in result.output


@pytest.mark.parametrize(
    ("args", "part"),
    [
        (["test", "--image", "x", "--host", "--as", "cpu"], "give exactly one of --image REF and --host"),
        (["run", "cpu", "--jobs", "0"], "0 is not in the range"),
        (["nosuchcmd"], "No such command 'nosuchcmd'"),
        (["--bogus", "ci-matrix"], "No such option '--bogus'"),
    ],
)
def test_a_usage_error_is_one_error_line_and_exit_2(args: list[str], part: str) -> None:
    result = CliRunner().invoke(main, args)
    assert result.exit_code == ExitCode.USAGE
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and part in lines[0] and "--help'" in lines[0]


@pytest.mark.parametrize("mirror", ["not a url", "ftp://deb.debian.org/debian", "http://deb.debian.org/debian;id"])
def test_a_bad_mirror_is_a_flag_error_before_the_engine(mirror: str) -> None:
    """--mirror reaches debootstrap's argv; it is checked like an index URL, before the engine (the unit tests'
    guard would make an engine call exit 8)."""
    result = CliRunner().invoke(main, ["base", "cpu", "--mirror", mirror])
    assert result.exit_code == ExitCode.CONFIG, result.output
    assert f"--mirror {mirror!r}" in result.output
