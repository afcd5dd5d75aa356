"""The CycloneDX document of an inventory: valid 1.6, bound to the image, each component's purl, license and hash."""

from __future__ import annotations

import json

from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator

from matrixtool.supply import cyclonedx
from matrixtool.supply import inventory as image_inventory
from tests.unit.supply._sbom_fixtures import IMAGE, PROGRAM_OUTPUT, bom_doc


def test_document_is_valid_cyclonedx_bound_to_the_image() -> None:
    inventory = image_inventory.inventory_of(IMAGE, image_inventory.parse_output(PROGRAM_OUTPUT))
    text = cyclonedx.to_json(cyclonedx.to_bom(inventory, variant="cpu"))
    assert JsonStrictValidator(SchemaVersion.V1_6).validate_str(text) is None
    doc = json.loads(text)
    assert doc["specVersion"] == "1.6"
    root = doc["metadata"]["component"]
    assert root["type"] == "container" and root["version"] == IMAGE.image_id
    assert root["purl"] == ("pkg:oci/cpu@sha256:" + "cd" * 32 + "?arch=amd64&repository_url=vllm-matrix/cpu")
    props = {p["name"]: p["value"] for p in root["properties"]}
    assert props["vllm-matrix:variant"] == "cpu" and props["vllm-matrix:image-id"] == IMAGE.image_id


def test_components_carry_purl_license_installer_and_record_hash() -> None:
    by_name = {c["name"]: c for c in bom_doc()["components"]}
    torch = by_name["Torch"]
    assert torch["purl"] == "pkg:pypi/torch@2.13.0%2Bcpu"
    assert torch["hashes"] == [{"alg": "SHA-256", "content": "11" * 32}]
    assert torch["licenses"] == [{"license": {"id": "BSD-3-Clause"}}]
    props = {p["name"]: p["value"] for p in torch["properties"]}
    assert props["vllm-matrix:installer"] == "uv" and props["vllm-matrix:hash-of"] == "RECORD"
    assert props["vllm-matrix:record-files"] == "12000"
    assert by_name["typing_extensions"]["licenses"] == [{"license": {"name": "PSF-2.0 OR Custom License"}}]
    assert "hashes" not in by_name["vllm"]
    libc = by_name["libc6"]
    assert libc["purl"] == "pkg:deb/debian/libc6@2.36-9%2Bdeb12u4?arch=amd64&distro=debian-12"
    # LGPL-2.1+ is a (deprecated) SPDX ID; Debian's GPL-2 is no SPDX ID: a named license.
    assert libc["licenses"] == [{"license": {"id": "LGPL-2.1+"}}, {"license": {"name": "GPL-2"}}]
    assert {p["name"]: p["value"] for p in libc["properties"]}["vllm-matrix:source"] == "glibc"
    assert by_name["debian"]["type"] == "operating-system"
