"""The vulnerability gate: an SBOM's packages against OSV advisories, judged by a per-variant policy.

Sources of advisories (``AdvisorySource``):
- a directory of OSV records for air-gapped runs: one folder per ecosystem, named as OSV names it (``PyPI``,
  ``Debian:12``, or ``Debian`` for every Debian release), holding OSV JSON files and/or OSV's ``all.zip`` of
  that ecosystem (``https://osv-vulnerabilities.storage.googleapis.com/<ecosystem>/all.zip``). An ecosystem
  without its folder has no advisory data here;
- the OSV API (``https://api.osv.dev``: ``/v1/querybatch``, then ``/v1/vulns/<id>``), probed first.

Fail closed: a package whose ecosystem has no advisory data, whose source did not answer, or whose version
cannot be compared with an advisory's ranges is *not audited*, and a not-audited package fails the gate
(``NotAuditedError``, exit 14), named with the reason. An advisory that affects a package fails the gate
(``VulnerableError``, exit 13) when its severity is at or above the policy's ``fail_on`` or unknown, unless the
policy accepts it (by ID or alias) with an expiry date that has not passed.

Version matching follows the OSV schema's range evaluation (``introduced``/``fixed``/``last_affected`` events
in version order; listed ``versions``): PyPI versions by ``packaging.version`` (PEP 440), Debian versions by
``debian.debian_support.Version`` (dpkg's ordering). Debian advisories name the *source* package, so a binary
package is audited as its source package and version (the SBOM's ``vllm-matrix:source`` properties).
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from matrixtool.core import untrusted
from matrixtool.core.errors import ExitCode, MatrixError
from matrixtool.supply.advisories import AdvisorySource
from matrixtool.supply.osv import Advisory, Severity, affects, normal, targets_of
from matrixtool.supply.policy import Policy, Verdict, judge

NAMES_SHOWN = 10


class VulnerableError(MatrixError):
    """The gate failed: an advisory at or above the policy's severity (or of unknown severity) is not accepted."""

    exit_code = ExitCode.VULNERABLE


class NotAuditedError(MatrixError):
    """The gate failed closed: packages could not be checked (no advisory data, source unreachable)."""

    exit_code = ExitCode.NOT_AUDITED


@dataclass(frozen=True, kw_only=True)
class Finding:
    """An advisory that affects a package, and the policy's verdict with its ``reason``."""

    package: str
    version: str
    advisory: str
    aliases: tuple[str, ...]
    severity: Severity | None
    fixed: tuple[str, ...]
    verdict: Verdict
    reason: str
    summary: str = ""


@dataclass(frozen=True, kw_only=True)
class Unaudited:
    """A package the gate could not check, and why."""

    package: str
    version: str
    reason: str


@dataclass(frozen=True, kw_only=True)
class AuditReport:
    """The gate's result for one SBOM; ``audited``: packages compared with advisories (not those ``unaudited``)."""

    source: str
    image: str
    audited: int
    findings: tuple[Finding, ...]
    unaudited: tuple[Unaudited, ...]

    @property
    def failing(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.verdict is Verdict.FAIL)

    @property
    def passed(self) -> bool:
        return not self.failing and not self.unaudited


def audit(doc: Mapping[str, Any], source: AdvisorySource, policy: Policy, *, today: datetime.date) -> AuditReport:
    """Check every package of the CycloneDX document ``doc`` against ``source`` under ``policy`` (pure, given
    the source). A package is *audited* when the source has data for it and every advisory of its name could
    be compared with its version."""
    targets = targets_of(doc)
    lookup = source.lookup(targets)
    findings: list[Finding] = []
    unaudited: list[Unaudited] = []
    audited = 0
    for target in targets:
        if target.key in lookup.missing:
            unaudited.append(Unaudited(package=target.key, version=target.version, reason=lookup.missing[target.key]))
            continue
        candidates = lookup.advisories.get((target.ecosystem.split(":")[0], normal(target.ecosystem, target.name)), ())
        problem = None
        hits: list[tuple[Advisory, tuple[str, ...]]] = []
        for advisory in candidates:
            try:
                hit, fixed = affects(advisory, target)
            except ValueError as exc:
                problem = f"version {target.version!r} cannot be compared with {advisory.id}'s ranges ({exc})"
                break
            if hit:
                hits.append((advisory, fixed))
        if problem is not None:
            unaudited.append(Unaudited(package=target.key, version=target.version, reason=problem))
            continue
        audited += 1
        for advisory, fixed in hits:
            verdict, reason = judge(advisory, policy, today)
            findings.append(
                Finding(
                    package=target.key,
                    version=target.version,
                    advisory=advisory.id,
                    aliases=advisory.aliases,
                    severity=advisory.severity,
                    fixed=fixed,
                    verdict=verdict,
                    reason=reason,
                    summary=advisory.summary,
                )
            )
    component = (doc.get("metadata") or {}).get("component") or {}
    return AuditReport(
        source=source.name,
        image=str(component.get("version", "")) if isinstance(component, Mapping) else "",
        audited=audited,
        findings=tuple(findings),
        unaudited=tuple(unaudited),
    )


def report_lines(report: AuditReport, *, limit: int = 50) -> list[str]:
    """The report for the terminal: findings (failing first; at most ``limit``), packages not audited (one line
    per reason, naming at most ``NAMES_SHOWN``), and the verdict line; names and versions from the SBOM and the
    records with control characters escaped."""
    lines = [f"advisory source: {report.source}"]
    order = {Verdict.FAIL: 0, Verdict.ACCEPTED: 1, Verdict.BELOW: 2}
    for f in sorted(report.findings, key=lambda f: (order[f.verdict], f.package))[:limit]:
        severity = f.severity.name.lower() if f.severity else "unknown"
        fixed = f", fixed in {', '.join(f.fixed)}" if f.fixed else ""
        lines.append(
            untrusted.shown(
                f"{f.verdict.value:15} {f.advisory} ({severity}) {f.package} {f.version}{fixed}: {f.reason}"
            )
        )
    by_reason: dict[str, list[Unaudited]] = {}
    for u in report.unaudited:
        by_reason.setdefault(u.reason, []).append(u)
    for reason, packages in by_reason.items():
        if len(packages) == 1:
            lines.append(untrusted.shown(f"{'not audited':15} {packages[0].package} {packages[0].version}: {reason}"))
            continue
        names = ", ".join(p.package for p in packages[:NAMES_SHOWN])
        more = f" and {len(packages) - NAMES_SHOWN} more" if len(packages) > NAMES_SHOWN else ""
        lines.append(untrusted.shown(f"{'not audited':15} {len(packages)} packages ({names}{more}): {reason}"))
    lines.append(
        f"gate: {'passed' if report.passed else 'FAILED'}: {report.audited} package(s) audited, "
        f"{len(report.failing)} failing advisory(ies), {len(report.unaudited)} not audited"
    )
    return lines


def to_dict(report: AuditReport) -> dict[str, Any]:
    """The report as a JSON-ready mapping."""
    return {
        "source": report.source,
        "image": report.image,
        "passed": report.passed,
        "audited": report.audited,
        "findings": [
            {
                "package": f.package,
                "version": f.version,
                "advisory": f.advisory,
                "aliases": list(f.aliases),
                "severity": f.severity.name.lower() if f.severity else None,
                "fixed": list(f.fixed),
                "verdict": f.verdict.value,
                "reason": f.reason,
            }
            for f in report.findings
        ],
        "not_audited": [{"package": u.package, "version": u.version, "reason": u.reason} for u in report.unaudited],
    }


def raise_for(report: AuditReport) -> None:
    """Raises VulnerableError (exit 13) when an advisory fails the gate, else NotAuditedError (exit 14) when
    packages were not audited."""
    if report.failing:
        names = ", ".join(sorted({f"{f.advisory} ({f.package})" for f in report.failing})[:10])
        raise VulnerableError(f"the vulnerability gate failed: {names}; upgrade, or accept in matrix.yaml audit.accept")
    if report.unaudited:
        names = ", ".join(u.package for u in report.unaudited[:10])
        more = f" and {len(report.unaudited) - 10} more" if len(report.unaudited) > 10 else ""
        raise NotAuditedError(
            f"the vulnerability gate failed closed: {len(report.unaudited)} package(s) not audited ({names}{more}): "
            f"{report.unaudited[0].reason}"
        )
