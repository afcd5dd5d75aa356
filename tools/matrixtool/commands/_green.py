"""The last green image for ``run`` and ``test``: one JSON report per variant under ``<out>/reports/`` (so a
later failure finds the image that last passed), and, for a variant whose check failed, a line naming that
image and the head of the ``tools/matrix diff --for CHECK`` against it."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import click
import docker

from matrixtool import report
from matrixtool.core import engine, outputs
from matrixtool.supply import imagediff

# Differences printed under a failed check (``tools/matrix diff`` shows them all).
HEAD_LINES = 12


def report_paths(reports: Path, variant: str) -> tuple[Path, Path]:
    """(``<variant>.json``: the variant's latest report, ``<variant>.green.json``: its latest all-green one)."""
    return reports / f"{variant}.json", reports / f"{variant}.green.json"


def write_variant_reports(result: report.RunReport, reports: Path) -> list[Path]:
    """For each variant with checks in ``result``: its checks as a ``report.to_json`` document in
    ``<variant>.json``, and in ``<variant>.green.json`` too when every one passed or was skipped (kept until
    the next green run, whatever red runs come between). Returns the paths written.

    Raises:
        OSError: a report cannot be written.
    """
    written = []
    for variant in dict.fromkeys(c.variant for c in result.checks):
        checks = [c for c in result.checks if c.variant == variant]
        text = report.to_json_text(report.RunReport(checks=checks))
        latest, green = report_paths(reports, variant)
        for path in (latest, green) if all(c.status.ok for c in checks) else (latest,):
            outputs.write_text(path, text)
            written.append(path)
    return written


def failure_lines(
    result: report.RunReport,
    reports: Path,
    env: Mapping[str, str],
    *,
    connect: Callable[[], docker.DockerClient] = engine.connect,
) -> list[str]:
    """One block per variant with a failed check on an image: the last green image of that variant (from
    ``reports``, ``imagediff.last_green``) and the head of the diff ranked for its first failed check, or
    the reason there is none. The engine is asked only when a green image is on record.

    Raises:
        MatrixError or docker's errors: the engine or an image could not be read (the caller reports it).
    """
    out: list[str] = []
    failed: dict[str, Any] = {}
    for c in result.checks:
        if not c.status.ok:
            failed.setdefault(c.variant, c)
    client: docker.DockerClient | None = None
    for variant, check in failed.items():
        if imagediff.last_green(reports, variant, exclude_image=check.image) is None:
            out.append(f"{variant}: no earlier green image of {variant} in {reports}")
            continue
        client = client or connect()
        context = imagediff.failure_context(
            client, reports, variant, check.image, check.check, lines=HEAD_LINES, env=env
        )
        out.append(f"{variant} ({check.check} failed on {check.image}): {context}")
    return out


def report_last_green(result: report.RunReport, reports: Path, env: Mapping[str, str]) -> None:
    """``failure_lines`` then ``write_variant_reports`` (this run's red image is never its own
    green one), each on stderr; any exception of theirs becomes one ``warning:`` line."""
    try:
        for line in failure_lines(result, reports, env):
            click.echo(line, err=True)
    except Exception as exc:
        click.echo(f"warning: no diff against the last green image ({type(exc).__name__}: {exc})", err=True)
    try:
        write_variant_reports(result, reports)
    except OSError as exc:
        click.echo(f"warning: per-variant reports not written under {reports} ({exc})", err=True)
