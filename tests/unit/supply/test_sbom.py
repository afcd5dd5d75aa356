"""The sbom command: its flags and the files it reads."""

from __future__ import annotations

from typing import Any

from click.testing import CliRunner

from matrixtool.cli import main
from matrixtool.core.errors import ExitCode


def test_compare_needs_a_readable_published_file(tmp_path: Any) -> None:
    missing = tmp_path / "nope.json"
    result = CliRunner().invoke(main, ["sbom", "--compare", str(missing), "img:1"], catch_exceptions=False)
    assert result.exit_code == ExitCode.CONFIG and f"--compare: {missing} does not exist" in result.output
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2")
    result = CliRunner().invoke(main, ["sbom", "--compare", str(bad), "img:1"], catch_exceptions=False)
    assert result.exit_code == ExitCode.CONFIG and "is not JSON" in result.output


def test_sbom_needs_a_variant_and_a_valid_ref() -> None:
    result = CliRunner().invoke(main, ["sbom", "img:1"], catch_exceptions=False)
    assert result.exit_code == ExitCode.CONFIG and "--as VARIANT is needed" in result.output
    result = CliRunner().invoke(main, ["sbom", "Bad Ref", "--as", "cpu"], catch_exceptions=False)
    assert result.exit_code == ExitCode.CONFIG
    result = CliRunner().invoke(main, ["sbom", "img:1", "--as", "nope"], catch_exceptions=False)
    assert result.exit_code == ExitCode.NOTHING_SELECTED
