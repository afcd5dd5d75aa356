"""What every command module shares: the group's settings, the packing of flags into one value, the report
flags and the rendering of a ``report.RunReport``."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, cast

import click

from matrixtool import report
from matrixtool.commands import _params
from matrixtool.core import outputs
from matrixtool.core.errors import ExitCode, SmokeFailure, VariantsFailed, most_severe
from matrixtool.model.inputs import check_outputs


@dataclass(frozen=True, kw_only=True)
class Settings:
    """Options shared by every command: the matrix file, output folder, environment and debug flag;
    ``no_wait``: refuse instead of waiting when another run holds ``out_dir`` (``outlock``)."""

    matrix_path: Path
    out_dir: Path
    env: Mapping[str, str]
    debug: bool
    no_wait: bool = False


pass_settings = click.make_pass_decorator(Settings)
"""Pass the group's ``Settings`` as a command's first argument."""

F = TypeVar("F", bound=Callable[..., Any])
Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]


def apply_options(options: Sequence[Decorator], f: F) -> F:
    """``f`` decorated with each of ``options``, the first outermost (as written above a function)."""
    g: Callable[..., Any] = f
    for option in reversed(options):
        g = option(g)
    return cast(F, g)


def packing(name: str, pack: Callable[[dict[str, Any]], Any], options: Sequence[Decorator]) -> Decorator:
    """Click ``options`` whose values reach the command as one keyword argument ``name``: ``pack`` pops each
    of its parameters from the keyword arguments by name and returns the value."""

    def wrap(f: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(f)
        def wrapper(*args: Any, **kw: Any) -> Any:
            value = pack(kw)
            return f(*args, **{name: value}, **kw)

        return apply_options(options, wrapper)

    return wrap


@dataclass(frozen=True, kw_only=True)
class ReportFlags:
    """``--json`` (the JSON report on stdout instead of the table), ``--json-file`` and ``--junit`` (None:
    ``<out>/reports/junit.xml``)."""

    as_json: bool = False
    json_file: Path | None = None
    junit: Path | None = None

    def check(self, out_dir: Path) -> None:
        """Raises ConfigError: one line per flag that cannot be honoured (``inputs.check_outputs``)."""
        check_outputs(out_dir, junit=self.junit, json_file=self.json_file)


report_flags = packing(
    "output",
    lambda kw: ReportFlags(as_json=kw.pop("as_json"), json_file=kw.pop("json_file"), junit=kw.pop("junit")),
    [
        click.option(
            "--junit",
            type=_params.OUTPUT_FILE,
            default=None,
            help="JUnit XML path (default: <out>/reports/junit.xml).",
        ),
        click.option("--json", "as_json", is_flag=True, help="Print the JSON report instead of the table."),
        click.option(
            "--json-file",
            type=_params.OUTPUT_FILE,
            default=None,
            help="Also write the JSON report to this file.",
        ),
    ],
)
"""``--junit``, ``--json``, ``--json-file`` as one argument ``output: ReportFlags``."""


def finish(
    result: report.RunReport,
    flags: ReportFlags,
    *,
    out_dir: Path,
    env: Mapping[str, str],
    last_green: Callable[[report.RunReport, Path, Mapping[str, str]], None] | None = None,
) -> None:
    """Write the reports, print the table or JSON, then exit by the result. The ``last_green`` part never fails
    the command: a problem there is one ``warning:`` line.

    Raises VariantsFailed: a variant failed before its checks (``--keep-going``); its exit code is the most severe of
    the variants' ``RunReport.error_codes`` and of a failed check (``errors.most_severe``); SmokeFailure: a check failed
    or timed out (exit 7)."""
    junit_path = flags.junit or out_dir / "reports" / "junit.xml"
    files: dict[Path, str | bytes] = {}
    if result.checks or result.errors:
        files[junit_path] = report.junit_bytes(result)
    if flags.json_file is not None:
        files[flags.json_file] = report.to_json_text(result)
    # The reports of one run as one set (both or neither); a FIFO or a device (/dev/stdout) is written in place, after.
    in_place = {path: data for path, data in files.items() if outputs.is_stream(path)}
    outputs.write_set({path: data for path, data in files.items() if path not in in_place})
    for path, data in in_place.items():
        outputs.write_bytes(path, data.encode("utf-8") if isinstance(data, str) else data)
    for line in report.publish_to_github(result, env):
        click.echo(line, err=True)
    click.echo(report.to_json_text(result) if flags.as_json else "\n" + report.table(result))
    if result.checks or result.errors:
        click.echo(f"JUnit report: {junit_path}", err=True)
    if last_green is not None and result.checks:
        last_green(result, out_dir / "reports", env)
    if result.errors:
        failed_checks = [ExitCode.SMOKE] if not all(c.status.ok for c in result.checks) else []
        code = most_severe([result.error_codes.get(n, ExitCode.BUILD) for n in result.errors] + failed_checks)
        where = "the JSON report's errors" if flags.as_json else "the summary above"
        raise VariantsFailed(
            f"{len(result.errors)} variant(s) failed before their smoke checks: {', '.join(result.errors)}; "
            f"see {where} and the build logs it names",
            code or ExitCode.BUILD,
        )
    if not result.ok:
        where = "the JSON report's checks (status, diagnosis, hint, log)" if flags.as_json else "the table above"
        raise SmokeFailure(f"smoke checks failed; see {where}, the logs it names, and the fix hints")
