"""OSV records: range matching (PEP 440 and dpkg order) and severity."""

from __future__ import annotations

from typing import Any

import pytest

from matrixtool.supply import osv as records
from tests.unit.supply._osv_fixtures import DEB_GLIBC, GHSA_TORCH, osv


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
