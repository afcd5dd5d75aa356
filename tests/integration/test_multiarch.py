"""One tag, several architectures (issue 13): the CPU image (linux/amd64) and the emulated arm64 image are
pushed to a local registry, `tools/matrix manifest` publishes them as one manifest list, and
`tools/matrix test --image <list> --as VARIANT` pulls and tests the image of each variant's platform.

The arm64 side is tests/data/emulation-matrix.yaml's `arm64-pypi` (`publish_as: cpu`), built under QEMU once
per session (conftest `emulated_arm64`); the CPU image is the session's.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import pytest

from tests.integration.conftest import EMULATION_VARIANT, json_of, matrix_cli

pytestmark = [pytest.mark.engine, pytest.mark.slow]


@pytest.fixture
def registry_refs(client: docker.DockerClient, local_registry: str) -> Iterator[None]:
    """Every tag and repo digest under the local registry is removed from the engine afterwards (an untag: the
    images stay under their own tags). A pull through a manifest list records the list's digest."""
    yield
    for image in client.images.list():
        for ref in [*image.tags, *image.attrs.get("RepoDigests", [])]:
            if ref.startswith(f"{local_registry}/"):
                with contextlib.suppress(docker.errors.ImageNotFound):
                    client.images.remove(ref, noprune=False)


def test_one_tag_lists_both_platforms_and_test_pulls_the_right_one(
    client: docker.DockerClient,
    cpu_build: dict[str, Any],
    emulated_arm64: dict[str, Any],
    emulation_matrix: Path,
    local_registry: str,
    out_dir: Path,
    registry_refs: None,
) -> None:
    matrix = ["--matrix", str(emulation_matrix)]
    proc = matrix_cli(
        *matrix, "push", "cpu", EMULATION_VARIANT, "--registry", local_registry, "--json", "--no-keep-tags",
        out=out_dir,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    record = out_dir / "pushed.json"
    record.write_text(proc.stdout)
    digests = {p["platform"]: p["digest"] for p in json_of(proc)["pushed"]}
    assert set(digests) == {"linux/amd64", "linux/arm64"}

    proc = matrix_cli(*matrix, "manifest", str(record), "--registry", local_registry, out=out_dir)
    assert proc.returncode == 0, proc.stderr[-3000:]
    tag = f"{local_registry}/vllm-matrix/cpu:0.32.0"
    assert proc.stdout.startswith(f"{tag}: manifest list sha256:"), proc.stdout
    assert "+ docker buildx imagetools create --tag " + tag in proc.stderr

    raw = subprocess.run(
        ["docker", "buildx", "imagetools", "inspect", "--raw", tag], capture_output=True, text=True, check=False
    )
    assert raw.returncode == 0, raw.stderr
    listed = {
        f"{m['platform']['os']}/{m['platform']['architecture']}": m["digest"]
        for m in json.loads(raw.stdout)["manifests"]
    }
    assert listed == digests  # each platform's entry is the image that was pushed (and checked) for it

    # Either architecture: the image of the variant's platform is pulled and tested.
    for variant, platform, record_ in (
        (EMULATION_VARIANT, "linux/arm64", emulated_arm64),
        ("cpu", "linux/amd64", cpu_build),
    ):
        proc = matrix_cli(
            *matrix, "test", "--image", tag, "--as", variant, "--only", "torch-family", "--json", out=out_dir
        )
        doc = json_of(proc)
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert f"+ docker pull --platform {platform} {tag}" in proc.stderr
        assert client.images.get(tag).id == record_["image_id"]
        # torch-family and its prerequisite torch-import, both passed on the pulled platform's image.
        assert [(c["check"], c["status"]) for c in doc["checks"]] == [
            ("torch-import", "passed"),
            ("torch-family", "passed"),
        ], doc["checks"]
