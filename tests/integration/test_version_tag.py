"""The rocm variant's tags, as ``bake`` writes them (the tags ``build`` and ``push`` give too: one ``BuildPlan``), are
references the engine's own parser takes: each is given to a small image the engine has (``docker tag`` through the
SDK), then removed. Its vLLM version, ``0.33.0+rocm721``, is not: the engine refuses it (``invalid reference format``),
which is what every rocm build got before the tag rule (``reference.version_tag``)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import docker
import pytest

from matrixtool.model.matrixfile import load_matrix
from tests.integration.conftest import TEST_REPOSITORY, matrix_cli

ROCM = next(v for v in load_matrix().variants if v.name == "rocm")


def test_the_rocm_variants_bake_tags_are_references_the_engine_takes(
    client: docker.DockerClient, tmp_path: Path
) -> None:
    images = sorted(client.images.list(), key=lambda i: int(i.attrs.get("Size") or 0))
    if not images:
        pytest.skip("the engine holds no image to tag")
    image = images[0]
    repository = f"{TEST_REPOSITORY}-{uuid.uuid4().hex[:8]}"
    proc = matrix_cli("bake", "rocm", "--repository", repository, out=tmp_path / "out", timeout=300)
    assert proc.returncode == 0, proc.stderr
    bake = json.loads((tmp_path / "out" / "docker-bake.json").read_text())
    tags = [t for target in bake["target"].values() for t in target["tags"]]
    assert f"{repository}/rocm:0.33.0-rocm721" in tags, tags
    made = []
    try:
        for ref in tags:
            name, _, tag = ref.rpartition(":")
            assert image.tag(name, tag), ref
            made.append(ref)
            assert client.images.get(ref).id == image.id
        with pytest.raises(docker.errors.APIError, match="invalid"):
            image.tag(f"{repository}/rocm", ROCM.vllm.version)  # the version as written: no tag
    finally:
        for ref in made:
            client.images.remove(ref)  # only the tag this test gave: the image stays
