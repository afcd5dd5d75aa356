"""The software bill of materials of an image, read inside the image, as CycloneDX 1.6 JSON.

A Python distribution's SHA-256 is the digest of its ``RECORD`` file (which lists the SHA-256 of every file it
installed: a changed file changes it); a Debian package's licenses come from its machine-readable
``copyright`` file.
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
