"""Render results: a human table, JSON, JUnit XML, and the GitHub Actions step summary."""

from __future__ import annotations

import io
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import junitparser
from tabulate import tabulate

from matrixtool.build.plan import BuildResult
from matrixtool.core import outputs
from matrixtool.core.errors import ExitCode
from matrixtool.core.untrusted import shown
from matrixtool.incontainer.vllm_smoke import reports
from matrixtool.smoke.result import CheckResult, Status


@dataclass(frozen=True, kw_only=True)
class RunReport:
    """Everything one command produced: builds, check results, and per-variant errors (variant -> message)."""

    builds: Sequence[BuildResult] = ()
    checks: Sequence[CheckResult] = ()
    errors: Mapping[str, str] = field(default_factory=dict)
    # The exit code of each variant's error (variant -> code); ``--keep-going`` exits with the most severe.
    error_codes: Mapping[str, ExitCode] = field(default_factory=dict)
    skipped: Mapping[str, str] = field(default_factory=dict)
    # Seconds from the first smoke container's start to the last result (the checks run in parallel: far less than
    # their times summed); None when no smoke run was timed.
    smoke_wall_seconds: float | None = None

    @property
    def ok(self) -> bool:
        """True when no variant errored and every check passed or was skipped."""
        return not self.errors and all(c.status.ok for c in self.checks)


def human_size(size_bytes: int) -> str:
    """Bytes as decimal GB/MB, as ``docker images`` prints them (4190000000 -> '4.19 GB')."""
    if size_bytes >= 10**9:
        return f"{size_bytes / 10**9:.2f} GB"
    return f"{size_bytes / 10**6:.0f} MB"


def table(report: RunReport) -> str:
    """The summary printed at the end of ``run``/``build``/``test``; diagnoses quote an image's and a server's
    output, so control characters are escaped (``untrusted.shown``)."""
    parts = []
    if report.builds:
        rows = [
            [
                b.variant,
                b.platform,
                b.image,
                human_size(b.size_bytes),
                "cached" if b.cached else f"{b.seconds:.0f} s",
            ]
            for b in report.builds
        ]
        parts.append(tabulate(rows, headers=["variant", "platform", "image", "size", "build"]))
    checks = [fields(c) for c in report.checks]
    parts += reports.check_parts(checks)
    for variant, message in report.errors.items():
        parts.append(f"{variant}: error: {message}")
    for variant, reason in report.skipped.items():
        parts.append(f"{variant}: skipped: {reason}")
    parts += reports.promise_parts(checks)
    parts += reports.suite_parts(checks)
    summary = reports.summary_line(checks, report.ok, report.smoke_wall_seconds)
    parts.append(summary + (f"; {len(report.errors)} variant error(s)" if report.errors else ""))
    return shown("\n\n".join(parts), lines=True)


def smoke_time(report: RunReport) -> str:
    """The summary line's time (``reports.smoke_time``): the smoke run's wall time and, labelled, the checks' own
    times summed (they overlap: checks run in parallel and beside the server)."""
    return reports.smoke_time([fields(c) for c in report.checks], report.smoke_wall_seconds)


# The part of a ``--json`` document (``to_json``) that a later command reads back (``kube --from-report``, the
# last green image): each check's variant, profile, image, check, status and facts.
READ_BACK_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["checks"],
    "properties": {
        "checks": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["variant", "profile", "check"],
                "properties": {
                    "variant": {"type": "string"},
                    "profile": {"type": "string"},
                    "image": {"type": ["string", "null"]},
                    "check": {"type": "string"},
                    "status": {"type": "string"},
                    "facts": {"type": ["object", "null"]},
                },
            },
        }
    },
}


def to_json(report: RunReport) -> dict[str, Any]:
    """The ``--json`` document (schema in README.md, version ``reports.JSON_SCHEMA_VERSION``: ``reports.document``)."""
    builds = [
        {
            "variant": b.variant,
            "platform": b.platform,
            "image": b.image,
            "image_id": b.image_id,
            "size_bytes": b.size_bytes,
            "build_seconds": round(b.seconds, 1),
            "cached": b.cached,
            "log": str(b.log_path) if b.log_path else None,
        }
        for b in report.builds
    ]
    checks = [fields(c) for c in report.checks]
    return reports.document(
        checks,
        passed=report.ok,
        wall=report.smoke_wall_seconds,
        builds=builds,
        errors=report.errors,
        skipped=report.skipped,
    )


def fields(c: CheckResult) -> dict[str, Any]:
    """``c`` as the report's fields (``incontainer.vllm_smoke.reports``: the status its value, the log a path
    string or None)."""
    return {
        "variant": c.variant,
        "profile": c.profile,
        "image": c.image,
        "check": c.check,
        "status": c.status.value,
        "diagnosis": c.diagnosis,
        "hint": c.hint,
        "seconds": c.seconds,
        "facts": c.facts,
        "log": str(c.log) if c.log else None,
        "suite": c.suite,
    }


def write_junit(report: RunReport, path: Path) -> None:
    """``junit_bytes`` of ``report`` to ``path`` (``outputs.write_bytes``). Raises OutputError: it cannot be written
    (exit 3)."""
    outputs.write_bytes(path, junit_bytes(report))


def junit_bytes(report: RunReport) -> bytes:
    """The JUnit XML document: one ``testsuite`` per variant, one ``testcase`` per check and profile (classname
    ``smoke.<variant>`` under ``default``, ``smoke.<variant>.<profile>`` under another); failure message = diagnosis.
    Texts that quote an image's or a server's output have their control characters escaped: XML 1.0 cannot hold
    them, and a report with one is not read at all."""
    xml = junitparser.JUnitXml(name="vllm-image-matrix")
    variants = list(dict.fromkeys([c.variant for c in report.checks] + list(report.errors)))
    for variant in variants:
        suite = junitparser.TestSuite(variant)
        for name in dict.fromkeys(c.suite for c in report.checks if c.variant == variant):
            suite.add_property("suite", name)  # quick or full (docs/checks.md)
        for c in (c for c in report.checks if c.variant == variant):
            name, classname, seconds, outcome, message, out = reports.junit_case(fields(c))
            case = junitparser.TestCase(name, classname=classname, time=seconds)
            diagnosis = shown(message, lines=True)
            if outcome == "failed":
                case.result = [junitparser.Failure(diagnosis, type_="failed")]
                case.system_out = shown(out or "", lines=True)
            elif outcome == "timeout":
                case.result = [junitparser.Error(diagnosis, type_="timeout")]
            elif outcome == "skipped":
                case.result = [junitparser.Skipped(diagnosis)]
            suite.add_testcase(case)
        if variant in report.errors:
            case = junitparser.TestCase("build", classname=f"build.{variant}")
            case.result = [junitparser.Error(shown(report.errors[variant], lines=True), type_="error")]
            suite.add_testcase(case)
        xml.add_testsuite(suite)
    content = io.BytesIO()
    xml.write(content, pretty=True)
    return content.getvalue()


def step_summary(report: RunReport) -> str:
    """Markdown for ``$GITHUB_STEP_SUMMARY``: builds and checks as tables, failures with their fix."""
    lines = ["## vLLM image smoke checks", ""]
    if report.builds:
        lines += ["| variant | platform | image | size | build |", "|---|---|---|---|---|"]
        lines += [
            f"| {b.variant} | {b.platform} | `{b.image}` | {human_size(b.size_bytes)} | "
            f"{'cached' if b.cached else f'{b.seconds:.0f} s'} |"
            for b in report.builds
        ]
        lines.append("")
    if report.checks:
        icon = {Status.PASSED: "✅", Status.FAILED: "❌", Status.TIMEOUT: "⏱️", Status.SKIPPED: "⏭️"}
        lines += ["| variant | profile | check | status | time | diagnosis |", "|---|---|---|---|---|---|"]
        for c in report.checks:
            diagnosis = c.diagnosis.replace("|", "\\|")
            if not c.status.ok:
                diagnosis += f"<br>**fix:** {c.hint.replace('|', '/')}"
            lines.append(
                f"| {c.variant} | {c.profile} | {c.check} | {icon[c.status]} {c.status.value} | {c.seconds:.1f} s "
                f"| {diagnosis} |"
            )
        lines.append("")
        lines += [f"{line}  " for line in reports.promise_parts([fields(c) for c in report.checks])]
    for variant, message in report.errors.items():
        lines.append(f"**{variant}**: {message}")
    return "\n".join(lines) + "\n"


def _escape_annotation(text: str) -> str:
    # GitHub workflow commands: %, CR and LF must be escaped in the message.
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def error_annotations(report: RunReport) -> list[str]:
    """``::error::`` workflow commands, one per failed or timed-out check and per variant error."""
    out = [
        f"::error title={reports.check_name(fields(c))} {c.status.value}::"
        + _escape_annotation(f"{c.diagnosis}\nfix: {c.hint}")
        for c in report.checks
        if not c.status.ok
    ]
    out += [f"::error title={v}::{_escape_annotation(m)}" for v, m in report.errors.items()]
    return out


def publish_to_github(report: RunReport, env: Mapping[str, str]) -> list[str]:
    """Under GitHub Actions: append the step summary to ``GITHUB_STEP_SUMMARY`` (when set) and return the
    ``::error::`` lines to print (when ``GITHUB_ACTIONS`` is ``true``). Elsewhere: does nothing, returns []."""
    summary = env.get("GITHUB_STEP_SUMMARY")
    if summary:
        with outputs.guarded(summary), open(summary, "a", encoding="utf-8") as f:
            f.write(step_summary(report))
    return error_annotations(report) if env.get("GITHUB_ACTIONS") == "true" else []


def to_json_text(report: RunReport) -> str:
    """``to_json`` serialised, indented."""
    return json.dumps(to_json(report), indent=2, default=str)
