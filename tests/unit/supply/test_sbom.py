"""The SBOM (issue 21): the in-image program's pure parts, the CycloneDX document, comparison and summary."""

from __future__ import annotations

import copy
import importlib
import json
import uuid
from typing import Any

import pytest
from click.testing import CliRunner
from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator

from matrixtool.cli import main
from matrixtool.core.container import OWNER_LABEL, SESSION_LABEL
from matrixtool.core.errors import ExitCode
from matrixtool.supply import compare as sbom_compare
from matrixtool.supply import cyclonedx, sbom
from matrixtool.supply import inventory as image_inventory

# The in-image program is untyped (Python >= 3.9, standard library only): one Any-typed handle on it.
sbom_inventory: Any = importlib.import_module("matrixtool.incontainer.sbom_inventory")

IMAGE = image_inventory.ImageIdentity(
    ref="vllm-matrix/cpu:0.32.0",
    image_id="sha256:" + "ab" * 32,
    repo_digests=("127.0.0.1:5000/vllm-matrix/cpu@sha256:" + "cd" * 32,),
    platform="linux/amd64",
)
PROGRAM_OUTPUT = (
    "some noise\n"
    + image_inventory.MARKER
    + json.dumps(
        {
            "os": {"ID": "debian", "VERSION_ID": "12", "VERSION_CODENAME": "bookworm"},
            "python": [
                {
                    "name": "Torch",
                    "version": "2.13.0+cpu",
                    "license": "BSD-3-Clause",
                    "license_source": "License-Expression",
                    "installer": "uv",
                    "record_sha256": "11" * 32,
                    "files": 12000,
                    "size": 698_000_000,
                    "path": "/opt/venv/lib/python3.11/site-packages/torch-2.13.0+cpu.dist-info",
                },
                {
                    "name": "typing_extensions",
                    "version": "4.15.0",
                    "license": "PSF-2.0 OR Custom License",
                    "license_source": "classifier",
                    "installer": "uv",
                    "record_sha256": "22" * 32,
                    "files": 5,
                    "size": 100_000,
                    "path": "/opt/venv/lib/python3.11/site-packages/typing_extensions-4.15.0.dist-info",
                },
                {"name": "vllm", "version": "0.32.0+cpu", "installer": "vllm-image-matrix", "record_sha256": ""},
            ],
            "debian": [
                {
                    "name": "libc6",
                    "version": "2.36-9+deb12u4",
                    "arch": "amd64",
                    "source": "glibc",
                    "source_version": "2.36-9+deb12u4",
                    "licenses": ["LGPL-2.1+", "GPL-2"],
                    "installed_size_kib": 12000,
                }
            ],
        }
    )
    + "\n"
)


def bom_doc() -> dict[str, Any]:
    inventory = image_inventory.inventory_of(IMAGE, image_inventory.parse_output(PROGRAM_OUTPUT))
    text = cyclonedx.to_json(cyclonedx.to_bom(inventory, variant="cpu", serial=uuid.UUID(int=1)))
    doc: dict[str, Any] = json.loads(text)
    return doc


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


def test_parse_output_refuses_what_is_not_the_program_output() -> None:
    with pytest.raises(sbom.SbomError, match="printed no MATRIX-SBOM line"):
        image_inventory.parse_output("Traceback (most recent call last):\n")
    with pytest.raises(sbom.SbomError, match="not JSON"):
        image_inventory.parse_output(image_inventory.MARKER + "{")
    with pytest.raises(sbom.SbomError, match="'python' and 'debian' lists"):
        image_inventory.parse_output(image_inventory.MARKER + '{"python": 1}')


def test_container_is_labelled_without_network() -> None:
    kwargs = image_inventory.container_spec("img:1").run_kwargs(session="s1", owner="pytest-1")
    assert kwargs["network_mode"] == "none"
    assert kwargs["labels"] == {image_inventory.PURPOSE_LABEL: "sbom", SESSION_LABEL: "s1", OWNER_LABEL: "pytest-1"}
    assert kwargs["entrypoint"][:2] == ["python3", "-c"]
    compile(kwargs["entrypoint"][2], "sbom_inventory.py", "exec")


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


# --- the in-image program's pure parts -----------------------------------------------------------------------
def test_dep5_licenses_of_a_machine_readable_copyright() -> None:
    text = (
        "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/\n"
        "Upstream-Name: x\n\n"
        "Files: *\nCopyright: someone\nLicense: GPL-2+\n\n"
        "Files: lib/*\nLicense: LGPL-2.1+ or BSD-3-clause\n\n"
        "License: GPL-2+\n This program is free software\n"
    )
    assert sbom_inventory.dep5_licenses(text) == ["GPL-2+", "LGPL-2.1+ or BSD-3-clause"]
    assert sbom_inventory.dep5_licenses("This is the Debian prepackaged version of x.\nLicense: GPL\n") == []


def test_python_license_order() -> None:
    from email.parser import HeaderParser

    def meta(text: str) -> Any:
        return HeaderParser().parsestr(text)

    assert sbom_inventory.python_license(meta("License-Expression: MIT\nLicense: BSD\n")) == (
        "MIT",
        "License-Expression",
    )
    assert sbom_inventory.python_license(meta("License: Apache 2.0\n")) == ("Apache 2.0", "License")
    long_text = "License: " + "x" * 150 + "\nClassifier: License :: OSI Approved :: MIT License\n"
    assert sbom_inventory.python_license(meta(long_text)) == ("MIT License", "classifier")
    assert sbom_inventory.python_license(meta("License: UNKNOWN\n")) == ("", "")


def test_compare_needs_a_readable_published_file(tmp_path: Any) -> None:
    missing = tmp_path / "nope.json"
    result = CliRunner().invoke(main, ["sbom", "--compare", str(missing), "img:1"], catch_exceptions=False)
    assert result.exit_code == ExitCode.CONFIG and "--compare FILE" in result.output
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2")
    result = CliRunner().invoke(main, ["sbom", "--compare", str(bad), "img:1"], catch_exceptions=False)
    assert result.exit_code == ExitCode.CONFIG and "is not JSON" in result.output


def test_sbom_needs_a_variant_and_a_valid_ref() -> None:
    result = CliRunner().invoke(main, ["sbom", "img:1"], catch_exceptions=False)
    assert result.exit_code == ExitCode.CONFIG and "--as VARIANT is needed" in result.output
    result = CliRunner().invoke(main, ["sbom", "Bad Ref", "--as", "cpu"], catch_exceptions=False)
    assert result.exit_code == ExitCode.CONFIG
    result = CliRunner().invoke(main, ["sbom", "img:1", "--as", "nope"], catch_exceptions=False)
    assert result.exit_code == ExitCode.NOTHING_SELECTED


def test_bounded_reads_no_further_than_the_limit() -> None:
    def endless() -> Any:
        while True:
            yield b"x" * 1000

    assert len(image_inventory._bounded(endless(), limit=2500)) == 2500
    assert image_inventory._bounded(iter([b"ab", b"cd"]), limit=10) == b"abcd"
