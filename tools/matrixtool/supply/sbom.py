"""The software bill of materials of an image: what is really installed, read inside the image, written as a
CycloneDX 1.6 JSON document bound to the image, and compared with a published one.

``inventory.read_inventory`` runs ``incontainer/sbom_inventory.py`` (standard library only) in a labelled container that
is always removed, with no network and a timeout, and reads its one bounded line of output. ``cyclonedx.to_bom`` turns
the inventory into a CycloneDX document (cyclonedx-python-lib; package URLs by packageurl-python):

- the metadata component is the image (type ``container``): its image ID (the config digest) as the version,
  its registry digests where the engine knows any, the variant and platform as properties;
- each Python distribution is a ``library`` with a ``pkg:pypi`` purl, its license (``License-Expression``, a
  one-line ``License`` or the ``License ::`` classifiers), ``INSTALLER``, and as its SHA-256 hash the digest
  of its ``RECORD`` file (which lists the SHA-256 of every file it installed: a changed file changes it);
- each Debian package is a ``library`` with a ``pkg:deb/debian`` purl (arch, distro), its source package, and
  the licenses of its machine-readable ``copyright`` file.

``compare.compare`` says what differs between two such documents, package by package. Here: the errors, and the
part of a CycloneDX document the tool reads.
"""

from __future__ import annotations

import re
from typing import Any

from matrixtool.core.errors import ExitCode, MatrixError

PROPERTY_PREFIX = "vllm-matrix:"


class SbomError(MatrixError):
    """The inventory could not be read from an image, or an SBOM document is not one this tool can compare."""

    exit_code = ExitCode.SBOM


_PROPERTIES = {
    "type": "array",
    "items": {"type": "object", "properties": {"name": {"type": "string"}, "value": {"type": "string"}}},
}
# The part of a CycloneDX 1.x JSON document (https://cyclonedx.org/docs/) this tool reads; other keys are free.
CYCLONEDX_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["bomFormat"],
    "properties": {
        "bomFormat": {"const": "CycloneDX"},
        "metadata": {
            "type": "object",
            "properties": {
                "component": {
                    "type": "object",
                    "properties": {"version": {"type": "string"}, "properties": _PROPERTIES},
                }
            },
        },
        "components": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "purl": {"type": "string"},
                    "version": {"type": "string"},
                    "hashes": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "properties": {"alg": {"type": "string"}, "content": {"type": "string"}},
                        },
                    },
                    "properties": _PROPERTIES,
                },
            },
        },
    },
}


class SbomDiffers(MatrixError):
    """``sbom --compare``: the packages of the image are not those of the published SBOM."""

    exit_code = ExitCode.SBOM_DIFFERS


def normal_name(name: str) -> str:
    """PEP 503 normalised name (the form of a pypi purl)."""
    return re.sub(r"[-_.]+", "-", name).lower()
