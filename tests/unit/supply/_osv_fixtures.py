"""SBOM components and OSV records shared by the tests of the vulnerability gate."""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Any

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


# A matrix.yaml with an audit policy (the policy tests and the command tests).
POLICY_YAML = """    audit:
      fail_on: high
      accept:
        - {id: GHSA-aaaa-bbbb-cccc, reason: "CPU images do not reach the affected code", expires: "2027-01-31"}
"""


def matrix_with_policy(tmp_path: Path, policy: str = POLICY_YAML) -> Path:
    text = (Path(__file__).resolve().parents[3] / "matrix.yaml").read_text()
    anchor = "    size_budget: 2.1GB\n"
    assert anchor in text
    return copy_checkout(tmp_path / "checkout", text.replace(anchor, anchor + policy, 1))
