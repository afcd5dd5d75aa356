"""The vulnerability gate (issue 21): OSV range matching, policy, fail-closed paths, with fixture advisories."""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from matrixtool.cli import main
from matrixtool.commands import audit as audit_command
from matrixtool.core.errors import ConfigError, ExitCode
from matrixtool.supply import advisories as sources
from matrixtool.supply import audit
from matrixtool.supply import osv as records
from matrixtool.supply import policy as gate
from tests.conftest import copy_checkout

TODAY = datetime.date(2026, 12, 1)


def component(purl: str, **props: str) -> dict[str, Any]:
    return {
        "type": "library",
        "name": purl.split("/")[-1].split("@")[0],
        "purl": purl,
        "properties": [{"name": f"vllm-matrix:{k.replace('_', '-')}", "value": v} for k, v in props.items()],
    }


def sbom_doc(*components: dict[str, Any], variant: str = "cpu") -> dict[str, Any]:
    return {
        "bomFormat": "CycloneDX",
        "specVersion": "1.6",
        "metadata": {
            "component": {
                "type": "container",
                "name": "vllm-matrix/cpu",
                "version": "sha256:" + "1" * 64,
                "properties": [{"name": "vllm-matrix:variant", "value": variant}],
            }
        },
        "components": list(components),
    }


TORCH = component("pkg:pypi/torch@2.13.0%2Bcpu")
LIBC = component(
    "pkg:deb/debian/libc6@2.36-9%2Bdeb12u4?arch=amd64&distro=debian-12", source="glibc", source_version="2.36-9+deb12u4"
)


def osv(vuln_id: str, ecosystem: str, name: str, events: list[dict[str, str]], **extra: Any) -> dict[str, Any]:
    return {
        "id": vuln_id,
        "summary": f"{name} advisory",
        "affected": [
            {"package": {"ecosystem": ecosystem, "name": name}, "ranges": [{"type": "ECOSYSTEM", "events": events}]}
        ],
        **extra,
    }


GHSA_TORCH = osv(
    "GHSA-aaaa-bbbb-cccc",
    "PyPI",
    "torch",
    [{"introduced": "0"}, {"fixed": "2.14.0"}],
    aliases=["CVE-2026-0001"],
    database_specific={"severity": "HIGH"},
)
DEB_GLIBC = osv(
    "DEBIAN-CVE-2026-0002",
    "Debian:12",
    "glibc",
    [{"introduced": "0"}, {"fixed": "2.36-9+deb12u7"}],
    severity=[{"type": "CVSS_V3", "score": "CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H"}],
)


def advisories(tmp_path: Path, records: dict[str, list[dict[str, Any]]]) -> Path:
    """A folder of OSV records: one subfolder per ecosystem (an empty list: the ecosystem with no advisories)."""
    root = tmp_path / "osv"
    for ecosystem, items in records.items():
        folder = root / ecosystem
        folder.mkdir(parents=True)
        for item in items:
            (folder / f"{item['id']}.json").write_text(json.dumps(item))
    root.mkdir(exist_ok=True)
    return root


# --- matching ------------------------------------------------------------------------------------------------
def target(ecosystem: str, name: str, version: str) -> records.Target:
    return records.Target(key=f"x/{name}", ecosystem=ecosystem, name=name, version=version)


@pytest.mark.parametrize(
    ("version", "hit"),
    [("2.13.0+cpu", True), ("2.13.9", True), ("2.14.0", False), ("2.14.0+cpu", False), ("3.0", False)],
)
def test_pypi_range_with_local_versions(version: str, hit: bool) -> None:
    advisory = records.advisory_of(GHSA_TORCH)
    assert records.affects(advisory, target("PyPI", "torch", version)) == (hit, ("2.14.0",))


@pytest.mark.parametrize(
    ("version", "hit"),
    [
        ("2.36-9+deb12u4", True),
        ("2.36-9+deb12u6", True),
        ("2.36-9+deb12u7", False),
        ("2.36-10", False),
        ("2.35-1", True),
    ],
)
def test_debian_range_by_dpkg_order(version: str, hit: bool) -> None:
    advisory = records.advisory_of(DEB_GLIBC)
    assert records.affects(advisory, target("Debian:12", "glibc", version))[0] is hit


def test_last_affected_introduced_and_listed_versions() -> None:
    record = osv("PYSEC-1", "PyPI", "Pkg_Name", [{"introduced": "1.0"}, {"last_affected": "1.4"}])
    record["affected"][0]["versions"] = ["0.9"]
    advisory = records.advisory_of(record)
    results = {
        v: records.affects(advisory, target("PyPI", "pkg-name", v))[0] for v in ["0.8", "0.9", "1.0", "1.4", "1.5"]
    }
    assert results == {"0.8": False, "0.9": True, "1.0": True, "1.4": True, "1.5": False}


def test_another_ecosystem_or_release_does_not_match() -> None:
    advisory = records.advisory_of(DEB_GLIBC)
    assert records.affects(advisory, target("Debian:13", "glibc", "2.36-9"))[0] is False
    assert records.affects(advisory, target("PyPI", "glibc", "2.36"))[0] is False


def test_unparsable_version_raises() -> None:
    with pytest.raises(ValueError):
        records.affects(records.advisory_of(GHSA_TORCH), target("PyPI", "torch", "not a version"))


@pytest.mark.parametrize(
    ("record", "severity"),
    [
        ({"database_specific": {"severity": "MODERATE"}}, records.Severity.MEDIUM),
        (
            {"severity": [{"type": "CVSS_V3", "score": "CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H"}]},
            records.Severity.CRITICAL,
        ),
        (
            {"severity": [{"type": "CVSS_V3", "score": "CVSS:3.1/AV:L/AC:H/PR:H/UI:R/S:U/C:L/I:N/A:N"}]},
            records.Severity.LOW,
        ),
        ({"severity": [{"type": "CVSS_V3", "score": "garbage"}]}, None),
        ({}, None),
    ],
)
def test_severity_of(record: dict[str, Any], severity: records.Severity | None) -> None:
    assert records.severity_of(record) == severity


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


def test_a_debian_folder_covers_every_release(tmp_path: Path) -> None:
    source = sources.DirectorySource(advisories(tmp_path, {"Debian": [DEB_GLIBC]}))
    report = audit.audit(sbom_doc(LIBC), source, gate.Policy(), today=TODAY)
    assert [f.advisory for f in report.findings] == ["DEBIAN-CVE-2026-0002"] and not report.unaudited


def test_unknown_purl_type_and_bad_version_are_not_audited(tmp_path: Path) -> None:
    source = sources.DirectorySource(advisories(tmp_path, {"PyPI": [GHSA_TORCH]}))
    doc = sbom_doc(component("pkg:npm/left-pad@1.0.0"), component("pkg:pypi/torch@weird%20version"))
    report = audit.audit(doc, source, gate.Policy(), today=TODAY)
    reasons = {u.package: u.reason for u in report.unaudited}
    assert reasons["npm/left-pad"] == "no OSV ecosystem for this kind of package"
    assert "cannot be compared with GHSA-aaaa-bbbb-cccc" in reasons["pypi/torch"]
    assert report.audited == 0


def test_records_in_all_zip(tmp_path: Path) -> None:
    import zipfile

    folder = tmp_path / "osv" / "PyPI"
    folder.mkdir(parents=True)
    with zipfile.ZipFile(folder / "all.zip", "w") as archive:
        archive.writestr("GHSA-aaaa-bbbb-cccc.json", json.dumps(GHSA_TORCH))
    report = audit.audit(sbom_doc(TORCH), sources.DirectorySource(tmp_path / "osv"), gate.Policy(), today=TODAY)
    assert [f.advisory for f in report.findings] == ["GHSA-aaaa-bbbb-cccc"]


def test_a_record_that_is_not_json_is_a_config_error(tmp_path: Path) -> None:
    root = advisories(tmp_path, {"PyPI": []})
    (root / "PyPI" / "bad.json").write_text("{not json")
    with pytest.raises(ConfigError, match="is not an OSV JSON record"):
        audit.audit(sbom_doc(TORCH), sources.DirectorySource(root), gate.Policy(), today=TODAY)


# --- the OSV API ---------------------------------------------------------------------------------------------
def test_api_source_queries_then_fetches() -> None:
    calls: list[str] = []

    def fetch(url: str, body: bytes | None) -> bytes:
        calls.append(url)
        if url.endswith("/v1/querybatch"):
            queries = json.loads(body or b"{}")["queries"]
            assert queries[0] == {"package": {"ecosystem": "PyPI", "name": "torch"}, "version": "2.13.0+cpu"}
            return json.dumps({"results": [{"vulns": [{"id": "GHSA-aaaa-bbbb-cccc"}]}, {}]}).encode()
        assert url.endswith("/v1/vulns/GHSA-aaaa-bbbb-cccc")
        return json.dumps(GHSA_TORCH).encode()

    report = audit.audit(sbom_doc(TORCH, LIBC), sources.ApiSource(fetch), gate.Policy(), today=TODAY)
    assert [f.advisory for f in report.findings] == ["GHSA-aaaa-bbbb-cccc"]
    assert report.audited == 2 and not report.unaudited
    assert calls == ["https://api.osv.dev/v1/querybatch", "https://api.osv.dev/v1/vulns/GHSA-aaaa-bbbb-cccc"]


def test_api_that_does_not_answer_fails_closed() -> None:
    def fetch(url: str, body: bytes | None) -> bytes:
        raise OSError("Name or service not known")

    assert (
        sources.probe_api(fetch) == "https://api.osv.dev does not answer from this machine (Name or service not known)"
    )
    report = audit.audit(sbom_doc(TORCH), sources.ApiSource(fetch), gate.Policy(), today=TODAY)
    (missing,) = report.unaudited
    assert "did not answer" in missing.reason and not report.passed


@pytest.mark.parametrize(
    ("batch", "record", "says"),
    [
        ({"results": [{"vulns": [{"id": "../../admin?x="}]}]}, None, "results[0].vulns[0].id: '../../admin?x='"),
        ({"results": {"vulns": []}}, None, "results: {'vulns': []} is not of type 'array'"),
        ({"results": [{"vulns": [{"id": "GHSA-1"}]}]}, {"id": "GHSA-1", "affected": [{"package": "torch"}]},
         "its record GHSA-1 is no OSV record: affected[0].package: 'torch' is not of type 'object'"),
    ],
)  # fmt: skip
def test_api_answers_of_another_shape_fail_closed_naming_the_key(
    batch: dict[str, object], record: dict[str, object] | None, says: str
) -> None:
    """The OSV API's answers are checked against their declared shape: a package is then not audited (exit 14)
    with the reason, never a crash, and no ID of an answer reaches a URL unless it is an ID."""
    calls: list[str] = []

    def fetch(url: str, body: bytes | None) -> bytes:
        calls.append(url)
        return json.dumps(batch if url.endswith("/v1/querybatch") else record).encode()

    report = audit.audit(sbom_doc(TORCH), sources.ApiSource(fetch), gate.Policy(), today=TODAY)
    (missing,) = report.unaudited
    assert says in missing.reason and not report.passed, missing.reason
    assert all(c.endswith(("/v1/querybatch", "/v1/vulns/GHSA-1")) for c in calls), calls


# --- policy from matrix.yaml and the command ---------------------------------------------------------------
POLICY_YAML = """    audit:
      fail_on: high
      accept:
        - {id: GHSA-aaaa-bbbb-cccc, reason: "CPU images do not reach the affected code", expires: "2027-01-31"}
"""


def matrix_with_policy(tmp_path: Path, policy: str = POLICY_YAML) -> Path:
    text = (Path(__file__).resolve().parents[3] / "matrix.yaml").read_text()
    anchor = "    size_budget: 3GB\n"
    assert anchor in text
    return copy_checkout(tmp_path / "checkout", text.replace(anchor, anchor + policy, 1))


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


def test_command_rejects_a_file_that_is_no_sbom(tmp_path: Path) -> None:
    result = run_audit(tmp_path, copy_checkout(tmp_path / "c"), "--osv-api", doc={"not": "cyclonedx"})
    assert result.exit_code == ExitCode.SBOM
    assert "not a CycloneDX document" in result.output
