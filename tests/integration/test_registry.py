"""Bake export, publishing through a real registry, and pinned bases (issue 5).

The session's ``docker-registry`` (conftest ``local_registry``: Debian's package of the CNCF Distribution registry on
127.0.0.1) is emptied after the module; every tag made here is removed afterwards.
The session's CPU image is reused, never rebuilt: bake and pinned builds are all BuildKit cache hits.
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

from matrixtool.build import registry
from matrixtool.build.base import platform_tag
from matrixtool.model.model import Platform
from tests.conftest import REPO_ROOT, copy_checkout
from tests.integration.conftest import free_port, json_of, matrix_cli

pytestmark = [pytest.mark.engine, pytest.mark.slow]


@pytest.fixture
def tags(client: docker.DockerClient) -> Iterator[list[str]]:
    """Tags a test creates; each is removed afterwards (an untag: the shared image layers stay)."""
    made: list[str] = []
    yield made
    for tag in made:
        with contextlib.suppress(docker.errors.ImageNotFound):
            client.images.remove(tag, noprune=False)


def _bake(bake_file: Path, target: str) -> None:
    proc = subprocess.run(
        ["docker", "buildx", "bake", "-f", str(bake_file), target],
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


def test_bake_builds_what_build_builds(
    client: docker.DockerClient, cpu_image: str, cpu_build: dict[str, Any], tmp_path: Path, tags: list[str]
) -> None:
    out = tmp_path / "out"
    proc = matrix_cli("bake", "cpu", "--repository", "vllm-matrix-baketest", out=out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    bake_file = Path(proc.stdout.strip())
    doc = json.loads(bake_file.read_text())
    target = doc["target"]["cpu-amd64"]
    assert Path(target["context"]).parent == (out / "bake").resolve()
    assert (Path(target["context"]) / "wheelhouse").is_dir()
    tags += target["tags"]
    _bake(bake_file, "cpu")
    baked = client.images.get(target["tags"][0])
    built = client.images.get(cpu_image)
    # The same content-hash tag (only the repository differs), the same labels, the same layers.
    assert target["tags"][0].split(":")[1] == cpu_image.split(":")[1]
    assert baked.labels["io.vllm-matrix.content-hash"] == built.labels["io.vllm-matrix.content-hash"]
    assert baked.attrs["RootFS"]["Layers"] == built.attrs["RootFS"]["Layers"]
    # source/revision name the checkout; they match when this session built the image itself.
    provenance = {"org.opencontainers.image.source", "org.opencontainers.image.revision"}
    if cpu_build["cached"]:
        provenance_free = {k: v for k, v in built.labels.items() if k not in provenance}
        assert {k: v for k, v in baked.labels.items() if k not in provenance} == provenance_free
    else:
        assert baked.labels == built.labels
    assert {k: baked.labels[k] for k in target["labels"]} == target["labels"]


def test_push_delete_pull_and_smoke_from_the_registry(
    client: docker.DockerClient,
    cpu_image: str,
    local_registry: str,
    out_dir: Path,
    tmp_path: Path,
    tags: list[str],
) -> None:
    repo = "vllm-matrix-regtest"
    local = f"{repo}/cpu:{cpu_image.split(':')[1]}"
    client.images.get(cpu_image).tag(local)
    tags.append(local)
    proc = matrix_cli("push", "cpu", "--registry", local_registry, "--repository", repo, "--json", out=out_dir)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (pushed,) = json_of(proc)["pushed"]
    hash_ref, version_ref = pushed["refs"]
    assert hash_ref == f"{local_registry}/{local}" and version_ref == f"{local_registry}/{repo}/cpu:0.32.0"
    assert "+ docker push " + hash_ref in proc.stderr
    reg = registry.EngineRegistry(client)
    assert reg.digest(hash_ref) == reg.digest(version_ref) == pushed["digest"]
    tags += [*pushed["refs"], f"{local_registry}/{repo}/cpu@{pushed['digest']}"]  # the pull's repo digest
    # Delete every local copy under these names: build must now find the hash tag in the registry.
    for ref in [local, *pushed["refs"]]:
        client.images.remove(ref, noprune=False)
    proc = matrix_cli("build", "cpu", "--repository", repo, "--registry", local_registry, "--json", out=out_dir)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "exists in the registry" in proc.stderr and "docker buildx build" not in proc.stderr
    (record,) = json_of(proc)["builds"]
    assert record["cached"] is True and record["image"] == hash_ref and record["image_id"] == pushed["digest"]
    # Pull back (test pulls a missing image) and run checks on the published image: torch and vLLM import from the
    # pulled ref. It is the session's CPU image (the same ID, asserted below), whose every check cpu_run runs.
    with pytest.raises(docker.errors.ImageNotFound):
        client.images.get(version_ref)
    junit = tmp_path / "junit.xml"
    proc = matrix_cli(
        "test", "--image", version_ref, "--as", "cpu", "--only", "vllm-import", "--json", "--junit", str(junit),
        out=out_dir,
    )  # fmt: skip
    doc = json_of(proc)
    assert proc.returncode == 0, proc.stderr[-5000:]
    assert "+ docker pull --platform linux/amd64 " + version_ref in proc.stderr  # the variant's platform
    assert [c["check"] for c in doc["checks"]] == ["torch-import", "vllm-import"]
    assert {c["status"] for c in doc["checks"]} == {"passed"}, doc["checks"]
    assert {c["image"] for c in doc["checks"]} == {version_ref}
    assert client.images.get(version_ref).id == client.images.get(cpu_image).id


def _matrix_with_base(tmp_path: Path, base_image: str) -> Path:
    text = (
        (REPO_ROOT / "matrix.yaml").read_text().replace("base_image: debian:bookworm-slim", f"base_image: {base_image}")
    )
    return copy_checkout(tmp_path, text)


def test_pin_records_the_registry_digest_and_builds_use_it(
    client: docker.DockerClient, cpu_image: str, local_registry: str, tmp_path: Path, tags: list[str]
) -> None:
    base = f"{local_registry}/matrix-test/debian:bookworm-slim"
    client.images.get(platform_tag("debian:bookworm-slim", Platform("linux", "amd64"))).tag(base)
    tags += [base, platform_tag(base, Platform("linux", "amd64"))]  # in case a build tagged the per-platform base
    push = subprocess.run(["docker", "push", base], capture_output=True, text=True, timeout=600, check=False)
    assert push.returncode == 0, push.stderr
    digest = registry.EngineRegistry(client).digest(base)
    assert digest and digest in push.stdout
    tags.append(f"{local_registry}/matrix-test/debian@{digest}")  # the push's repo digest
    matrix = _matrix_with_base(tmp_path, base)
    out = tmp_path / "out"
    assert matrix_cli("--matrix", str(matrix), "render", out=out).returncode == 0
    bake_args = ["--matrix", str(matrix), "bake", "cpu", "--repository", "vllm-matrix-pintest"]
    unpinned = matrix_cli(*bake_args, out=out)
    assert unpinned.returncode == 0, unpinned.stderr[-3000:]
    unpinned_target = json.loads(Path(unpinned.stdout.strip()).read_text())["target"]["cpu-amd64"]

    proc = matrix_cli("--matrix", str(matrix), "pin", "cpu", out=out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lock = json.loads((tmp_path / "matrix.lock.json").read_text())
    assert lock == {"schema_version": 1, "base_images": {base: digest}}

    proc = matrix_cli(*bake_args, out=out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    target = json.loads(Path(proc.stdout.strip()).read_text())["target"]["cpu-amd64"]
    assert target["args"]["BASE_IMAGE"] == f"{base}@{digest}"
    key = "io.vllm-matrix.content-hash"
    assert target["labels"][key] != unpinned_target["labels"][key]
    tags += target["tags"]
    _bake(Path(proc.stdout.strip()), "cpu-amd64")  # BuildKit resolves FROM <ref>@<digest>
    image = client.images.get(target["tags"][0])
    assert image.labels["org.opencontainers.image.base.digest"] == digest
    assert image.attrs["RootFS"]["Layers"] == client.images.get(cpu_image).attrs["RootFS"]["Layers"]


def test_pin_with_no_registry_reachable_leaves_the_lock_unchanged(tmp_path: Path) -> None:
    closed = f"127.0.0.1:{free_port()}"  # nothing listens there
    matrix = _matrix_with_base(tmp_path, f"{closed}/library/debian:bookworm-slim")
    lock = tmp_path / "matrix.lock.json"
    lock.write_text('{\n  "schema_version": 1,\n  "base_images": {}\n}\n')
    before = lock.read_bytes()
    proc = matrix_cli("--matrix", str(matrix), "pin", "cpu", out=tmp_path / "out")
    assert proc.returncode == 9, proc.stderr
    assert f"registry {closed} is unreachable" in proc.stderr
    assert f"{closed}/library/debian:bookworm-slim" in proc.stderr and "left unchanged" in proc.stderr
    assert lock.read_bytes() == before
