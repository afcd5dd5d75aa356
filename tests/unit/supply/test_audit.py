"""The vulnerability gate over an SBOM: findings and verdicts, packages not audited, the audit command's exit codes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from matrixtool.cli import main
from matrixtool.commands import audit as audit_command
from matrixtool.core.errors import ExitCode
from matrixtool.supply import advisories as sources
from matrixtool.supply import audit
from matrixtool.supply import osv as records
from matrixtool.supply import policy as gate
from tests.conftest import copy_checkout
from tests.unit.supply._osv_fixtures import (
    DEB_GLIBC,
    GHSA_TORCH,
    LIBC,
    TODAY,
    TORCH,
    advisories,
    component,
    matrix_with_policy,
    osv,
    sbom_doc,
)


# --- the gate over a folder of records -----------------------------------------------------------------------
def test_finding_fails_at_fail_on(tmp_path: Path) -> None:
    source = sources.DirectorySource(advisories(tmp_path, {"PyPI": [GHSA_TORCH], "Debian:12": [DEB_GLIBC]}))
    report = audit.audit(sbom_doc(TORCH, LIBC), source, gate.Policy(), today=TODAY)
    assert not report.passed
    assert report.audited == 2 and not report.unaudited
    verdicts = {f.advisory: (f.package, f.verdict, f.severity) for f in report.findings}
    assert verdicts == {
        "GHSA-aaaa-bbbb-cccc": ("pypi/torch", gate.Verdict.FAIL, records.Severity.HIGH),
        "DEBIAN-CVE-2026-0002": ("deb/libc6:amd64", gate.Verdict.FAIL, records.Severity.CRITICAL),
    }
    with pytest.raises(audit.VulnerableError) as caught:
        audit.raise_for(report)
    assert caught.value.exit_code == int(ExitCode.VULNERABLE) == 13
    assert "GHSA-aaaa-bbbb-cccc (pypi/torch)" in str(caught.value)


def test_below_threshold_passes(tmp_path: Path) -> None:
    source = sources.DirectorySource(advisories(tmp_path, {"PyPI": [GHSA_TORCH]}))
    policy = gate.Policy(fail_on=records.Severity.CRITICAL)
    report = audit.audit(sbom_doc(TORCH), source, policy, today=TODAY)
    assert report.passed
    assert [f.verdict for f in report.findings] == [gate.Verdict.BELOW]
    audit.raise_for(report)


def test_unknown_severity_fails(tmp_path: Path) -> None:
    record = osv("PYSEC-2026-9", "PyPI", "torch", [{"introduced": "0"}])
    source = sources.DirectorySource(advisories(tmp_path, {"PyPI": [record]}))
    report = audit.audit(sbom_doc(TORCH), source, gate.Policy(fail_on=records.Severity.CRITICAL), today=TODAY)
    (finding,) = report.findings
    assert finding.verdict is gate.Verdict.FAIL and "severity unknown" in finding.reason


def test_ecosystem_without_data_fails_closed(tmp_path: Path) -> None:
    """Only PyPI records: the Debian package is not audited, and the gate fails naming it."""
    source = sources.DirectorySource(advisories(tmp_path, {"PyPI": []}))
    report = audit.audit(sbom_doc(TORCH, LIBC), source, gate.Policy(), today=TODAY)
    assert not report.findings and report.audited == 1
    (missing,) = report.unaudited
    assert missing.package == "deb/libc6:amd64" and "no advisory data for ecosystem Debian:12" in missing.reason
    with pytest.raises(audit.NotAuditedError) as caught:
        audit.raise_for(report)
    assert caught.value.exit_code == int(ExitCode.NOT_AUDITED) == 14
    assert "deb/libc6:amd64" in str(caught.value)


def test_unknown_purl_type_and_bad_version_are_not_audited(tmp_path: Path) -> None:
    source = sources.DirectorySource(advisories(tmp_path, {"PyPI": [GHSA_TORCH]}))
    doc = sbom_doc(component("pkg:npm/left-pad@1.0.0"), component("pkg:pypi/torch@weird%20version"))
    report = audit.audit(doc, source, gate.Policy(), today=TODAY)
    reasons = {u.package: u.reason for u in report.unaudited}
    assert reasons["npm/left-pad"] == "no OSV ecosystem for this kind of package"
    assert "cannot be compared with GHSA-aaaa-bbbb-cccc" in reasons["pypi/torch"]
    assert report.audited == 0


def run_audit(tmp_path: Path, matrix: Path, *flags: str, doc: dict[str, Any]) -> Any:
    sbom_path = tmp_path / "sbom.json"
    sbom_path.write_text(json.dumps(doc))
    return CliRunner().invoke(main, ["--matrix", str(matrix), "audit", str(sbom_path), *flags], catch_exceptions=False)


def test_command_exit_codes(tmp_path: Path) -> None:
    plain = copy_checkout(tmp_path / "plain")
    osv_dir = advisories(tmp_path, {"PyPI": [GHSA_TORCH]})
    failed = run_audit(tmp_path, plain, "--advisories", str(osv_dir), doc=sbom_doc(TORCH))
    assert failed.exit_code == ExitCode.VULNERABLE, failed.output
    assert "fail            GHSA-aaaa-bbbb-cccc (high) pypi/torch 2.13.0+cpu, fixed in 2.14.0" in failed.output

    closed = run_audit(tmp_path, plain, "--advisories", str(osv_dir), doc=sbom_doc(TORCH, LIBC))
    assert closed.exit_code == ExitCode.VULNERABLE  # a failing advisory outranks packages not audited
    assert "not audited     deb/libc6:amd64 2.36-9+deb12u4: no advisory data for ecosystem Debian:12" in closed.output

    only_unaudited = run_audit(tmp_path, plain, "--advisories", str(osv_dir), doc=sbom_doc(LIBC))
    assert only_unaudited.exit_code == ExitCode.NOT_AUDITED, only_unaudited.output
    assert "gate: FAILED: 0 package(s) audited, 0 failing advisory(ies), 1 not audited" in only_unaudited.output

    accepted = run_audit(tmp_path, matrix_with_policy(tmp_path), "--advisories", str(osv_dir), doc=sbom_doc(TORCH))
    assert accepted.exit_code == 0, accepted.output
    assert "accepted        GHSA-aaaa-bbbb-cccc" in accepted.output and "gate: passed" in accepted.output


def test_command_needs_one_source(tmp_path: Path) -> None:
    result = run_audit(tmp_path, copy_checkout(tmp_path / "c"), doc=sbom_doc(TORCH))
    assert result.exit_code == ExitCode.CONFIG
    assert "give exactly one of --advisories DIR and --osv-api" in result.output


def test_command_with_an_unreachable_api(tmp_path: Path) -> None:
    matrix = copy_checkout(tmp_path / "c")
    sbom_path = tmp_path / "sbom.json"
    sbom_path.write_text(json.dumps(sbom_doc(TORCH)))

    def fetch(url: str, body: bytes | None) -> bytes:
        raise OSError("Name or service not known")

    args = audit_command.Args(matrix_path=matrix, sbom=sbom_path, advisories=None, osv_api=True)
    report = audit_command.run(args, fetch=fetch, today=TODAY)
    assert report.source == "the OSV API https://api.osv.dev (unreachable)"
    (missing,) = report.unaudited
    assert missing.reason.startswith("https://api.osv.dev does not answer from this machine")


def test_command_queries_the_mirror_matrix_osv_api_names(tmp_path: Path) -> None:
    matrix = copy_checkout(tmp_path / "c")
    sbom_path = tmp_path / "sbom.json"
    sbom_path.write_text(json.dumps(sbom_doc(TORCH)))
    asked: list[str] = []

    def fetch(url: str, body: bytes | None) -> bytes:
        asked.append(url)
        raise OSError("Connection refused")

    env = {"MATRIX_OSV_API": "http://127.0.0.1:9/osv"}
    args = audit_command.Args(matrix_path=matrix, sbom=sbom_path, advisories=None, osv_api=True, env=env)
    report = audit_command.run(args, fetch=fetch, today=TODAY)
    assert asked == ["http://127.0.0.1:9/osv/v1/query"]
    assert report.source == "the OSV API http://127.0.0.1:9/osv (unreachable)"


def test_command_rejects_a_file_that_is_no_sbom(tmp_path: Path) -> None:
    result = run_audit(tmp_path, copy_checkout(tmp_path / "c"), "--osv-api", doc={"not": "cyclonedx"})
    assert result.exit_code == ExitCode.SBOM
    assert "not a CycloneDX document" in result.output
