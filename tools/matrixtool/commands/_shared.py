"""What every command module shares: the group's settings and the rendering of a ``report.RunReport``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import click

from matrixtool import report
from matrixtool.commands._flags import ReportFlags
from matrixtool.errors import ExitCode, SmokeFailure, VariantsFailed, most_severe


@dataclass(frozen=True, kw_only=True)
class Settings:
    """Options shared by every command: the matrix file, output folder, environment and debug flag."""

    matrix_path: Path
    out_dir: Path
    env: Mapping[str, str]
    debug: bool


pass_settings = click.make_pass_decorator(Settings)
"""Pass the group's ``Settings`` as a command's first argument."""


def finish(result: report.RunReport, flags: ReportFlags, *, out_dir: Path, env: Mapping[str, str]) -> None:
    """Write the reports (JUnit, JSON file, GitHub summary), print the table or JSON, then exit by the result.

    Raises:
        VariantsFailed: a variant failed before its checks (``--keep-going``); its exit code is the most
            severe of the variants' ``RunReport.error_codes`` and of a failed check (``errors.most_severe``).
        SmokeFailure: a check failed or timed out (exit 7).
    """
    junit_path = flags.junit or out_dir / "reports" / "junit.xml"
    if result.checks or result.errors:
        report.write_junit(result, junit_path)
    for line in report.publish_to_github(result, env):
        click.echo(line, err=True)
    if flags.json_file is not None:
        flags.json_file.parent.mkdir(parents=True, exist_ok=True)
        flags.json_file.write_text(report.to_json_text(result), encoding="utf-8")
    click.echo(report.to_json_text(result) if flags.as_json else "\n" + report.table(result))
    if result.checks or result.errors:
        click.echo(f"JUnit report: {junit_path}", err=True)
    if result.errors:
        failed_checks = [ExitCode.SMOKE] if not all(c.status.ok for c in result.checks) else []
        code = most_severe([result.error_codes.get(n, ExitCode.BUILD) for n in result.errors] + failed_checks)
        raise VariantsFailed(
            f"{len(result.errors)} variant(s) failed before their smoke checks: {', '.join(result.errors)}; "
            "see the summary above and the build logs it names",
            code or ExitCode.BUILD,
        )
    if not result.ok:
        raise SmokeFailure("smoke checks failed; see the table above, the logs it names, and the fix hints")
