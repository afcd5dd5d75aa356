"""An inventory program output and its document, shared by the SBOM tests."""

from __future__ import annotations

import json
import uuid
from typing import Any

from matrixtool.supply import cyclonedx
from matrixtool.supply import inventory as image_inventory

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
