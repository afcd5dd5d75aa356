"""Two SBOM documents compared package by package, and the summary of one."""

from __future__ import annotations

import copy

import pytest

from matrixtool.supply import compare as sbom_compare
from matrixtool.supply import sbom
from tests.unit.supply._sbom_fixtures import bom_doc


def test_comparison_by_package() -> None:
    published = bom_doc()
    derived = copy.deepcopy(published)
    by_name = {c["name"]: c for c in derived["components"]}
    by_name["Torch"]["purl"] = "pkg:pypi/torch@2.14.0"
    by_name["typing_extensions"]["hashes"] = [{"alg": "SHA-256", "content": "33" * 32}]
    derived["components"] = [c for c in derived["components"] if c["name"] != "libc6"]
    derived["components"].append({"type": "library", "name": "evil", "purl": "pkg:pypi/evil@1.0"})
    result = sbom_compare.compare(published, derived)
    assert [p.key for p in result.added] == ["pypi/evil"]
    assert [p.key for p in result.removed] == ["deb/libc6:amd64"]
    assert [(c.key, c.field) for c in result.changed] == [
        ("pypi/torch", "version"),
        ("pypi/typing-extensions", "sha256"),
    ]
    lines = sbom_compare.comparison_lines(result)
    assert "~ pypi/torch version: 2.13.0+cpu -> 2.14.0" in lines
    assert lines[-1] == "1 added, 1 removed, 2 changed"
    assert sbom_compare.compare(published, published).same


def test_summary_counts_and_largest() -> None:
    summary = sbom_compare.summarize(bom_doc(), top=2)
    assert summary.counts == {"python": 3, "debian": 1}
    assert [p.key for p in summary.largest] == ["pypi/torch", "deb/libc6:amd64"]
    assert summary.largest[1].size == 12000 * 1024


def test_packages_of_refuses_other_documents() -> None:
    with pytest.raises(sbom.SbomError, match="not a CycloneDX document"):
        sbom_compare.packages_of({"spdxVersion": "SPDX-2.3"})
