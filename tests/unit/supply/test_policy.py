"""The gate policy of matrix.yaml: reading it, bad values, accepted advisories and their expiry."""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest
from click.testing import CliRunner

from matrixtool.cli import main
from matrixtool.core.errors import ConfigError, ExitCode
from matrixtool.supply import advisories as sources
from matrixtool.supply import audit
from matrixtool.supply import osv as records
from matrixtool.supply import policy as gate
from tests.unit.supply._osv_fixtures import GHSA_TORCH, TODAY, TORCH, advisories, matrix_with_policy, sbom_doc


def test_accepted_advisory_passes_until_it_expires(tmp_path: Path) -> None:
    source = sources.DirectorySource(advisories(tmp_path, {"PyPI": [GHSA_TORCH]}))
    accepted = gate.Acceptance(id="CVE-2026-0001", reason="not reachable on CPU", expires=datetime.date(2027, 1, 31))
    policy = gate.Policy(accept=(accepted,))
    report = audit.audit(sbom_doc(TORCH), source, policy, today=TODAY)
    assert report.passed
    (finding,) = report.findings
    assert finding.verdict is gate.Verdict.ACCEPTED and "2027-01-31" in finding.reason

    later = audit.audit(sbom_doc(TORCH), source, policy, today=datetime.date(2027, 2, 1))
    (finding,) = later.findings
    assert finding.verdict is gate.Verdict.FAIL
    assert "acceptance expired on 2027-01-31 (not reachable on CPU)" in finding.reason


def test_policy_from_matrix(tmp_path: Path) -> None:
    from matrixtool.model.matrixfile import load_matrix

    matrix = load_matrix(matrix_with_policy(tmp_path))
    policy = gate.policy_for(matrix, "cpu")
    assert policy.fail_on is records.Severity.HIGH
    assert policy.accept == (
        gate.Acceptance(
            id="GHSA-aaaa-bbbb-cccc",
            reason="CPU images do not reach the affected code",
            expires=datetime.date(2027, 1, 31),
        ),
    )
    assert gate.policy_for(matrix, "arm64") == gate.Policy()


@pytest.mark.parametrize(
    ("policy", "problem"),
    [
        ("    audit: {fail_on: severe}\n", "variants.cpu.audit.fail_on"),
        ("    audit: {accept: [{id: GHSA-x, reason: r}]}\n", "expires"),
        ("    audit: {accept: [{id: GHSA-x, reason: r, expires: 2027-01-31}]}\n", "is read as a date or timestamp"),
        (
            "    audit: {accept: [{id: 'no spaces allowed', reason: r, expires: '2027-01-31'}]}\n",
            "variants.cpu.audit.accept",
        ),
        ("    audit: {fail_onn: high}\n", "fail_onn"),
    ],
)
def test_bad_policy_is_a_config_error(tmp_path: Path, policy: str, problem: str) -> None:
    path = matrix_with_policy(tmp_path, policy)
    result = CliRunner().invoke(main, ["--matrix", str(path), "render", "--check"], catch_exceptions=False)
    assert result.exit_code == ExitCode.CONFIG, result.output
    assert problem in result.output


def test_bad_date_found_by_the_policy_reader() -> None:
    with pytest.raises(ConfigError, match=r"accept\[0\]\.expires: '2027-02-30' is not a date"):
        gate.parse_policy({"accept": [{"id": "GHSA-x", "reason": "r", "expires": "2027-02-30"}]}, where="v.audit")
