"""The inventory of an image: the program output read back, its container, the in-image program's pure parts."""

from __future__ import annotations

from typing import Any

import pytest

from matrixtool.core.container import OWNER_LABEL, SESSION_LABEL
from matrixtool.incontainer import sbom_inventory
from matrixtool.supply import inventory as image_inventory
from matrixtool.supply import sbom


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


def test_bounded_reads_no_further_than_the_limit() -> None:
    def endless() -> Any:
        while True:
            yield b"x" * 1000

    assert len(image_inventory._bounded(endless(), limit=2500)) == 2500
    assert image_inventory._bounded(iter([b"ab", b"cd"]), limit=10) == b"abcd"
