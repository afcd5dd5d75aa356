"""Advisory sources: a folder of OSV records (JSON files, all.zip) and the OSV API, failing closed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from matrixtool.core.errors import ConfigError
from matrixtool.supply import advisories as sources
from matrixtool.supply import audit
from matrixtool.supply import policy as gate
from tests.unit.supply._osv_fixtures import DEB_GLIBC, GHSA_TORCH, LIBC, TODAY, TORCH, advisories, sbom_doc


def test_a_debian_folder_covers_every_release(tmp_path: Path) -> None:
    source = sources.DirectorySource(advisories(tmp_path, {"Debian": [DEB_GLIBC]}))
    report = audit.audit(sbom_doc(LIBC), source, gate.Policy(), today=TODAY)
    assert [f.advisory for f in report.findings] == ["DEBIAN-CVE-2026-0002"] and not report.unaudited


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
