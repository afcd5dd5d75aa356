"""What a security team signs off (issue 21), against the session's CPU image and one loopback registry:
the SBOM read inside the image and compared with a changed image, OpenShift's static checks, and cosign
signatures and attestations made by `push --sign-key` and verified by `test --image --verify-key` and
`pin --verify-key`, with an unsigned, a re-pointed and a foreign-key case.
"""

from __future__ import annotations

import base64
import contextlib
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import pytest
import yaml

from tests.conftest import REPO_ROOT, copy_checkout
from tests.integration.conftest import json_of, matrix_cli

pytestmark = [pytest.mark.engine, pytest.mark.slow]

PASSWORD = "test-password"


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Two cosign key pairs (``key``/``pub`` and a foreign ``other_pub``), password ``PASSWORD``."""
    found: dict[str, Path] = {}
    for name in ("ours", "other"):
        folder = tmp_path_factory.mktemp(f"cosign-{name}")
        proc = subprocess.run(
            ["cosign", "generate-key-pair"], cwd=folder, env={"COSIGN_PASSWORD": PASSWORD, "PATH": "/usr/bin:/bin"},
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        found[f"{name}_key"], found[f"{name}_pub"] = folder / "cosign.key", folder / "cosign.pub"
    return found


@pytest.fixture
def registry_refs(client: docker.DockerClient, local_registry: str) -> Iterator[None]:
    """Every engine tag and repo digest under the loopback registry is removed afterwards (untags only)."""
    yield
    for image in client.images.list():
        for ref in [*image.tags, *image.attrs.get("RepoDigests", [])]:
            if ref.startswith(f"{local_registry}/"):
                with contextlib.suppress(docker.errors.ImageNotFound):
                    client.images.remove(ref, noprune=False)


def cosign(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["cosign", *args], capture_output=True, text=True, timeout=120, check=False,
        env={"COSIGN_PASSWORD": PASSWORD, "PATH": "/usr/bin:/bin"},
    )  # fmt: skip


# --- SBOM ----------------------------------------------------------------------------------------------------
def test_sbom_of_the_cpu_image_and_a_changed_image(
    client: docker.DockerClient, cpu_image: str, derived_image: Any, tmp_path: Path
) -> None:
    published = tmp_path / "cpu.cdx.json"
    proc = matrix_cli("sbom", cpu_image, "--as", "cpu", "-o", str(published), out=tmp_path / "out")
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(published.read_text())
    assert doc["bomFormat"] == "CycloneDX" and doc["specVersion"] == "1.6"
    assert doc["metadata"]["component"]["version"] == client.images.get(cpu_image).id
    by_purl = {c["purl"].split("@")[0]: c for c in doc["components"] if "purl" in c}
    torch = by_purl["pkg:pypi/torch"]
    assert torch["version"] == "2.13.0+cpu" and torch["hashes"][0]["alg"] == "SHA-256"
    assert by_purl["pkg:deb/debian/libc6"]["version"].startswith("2.36-")
    kinds = [c["purl"].split("/")[0] for c in doc["components"] if "purl" in c]
    assert kinds.count("pkg:pypi") > 100 and kinds.count("pkg:deb") > 100
    assert "packages: " in proc.stderr and "pypi/torch 2.13.0+cpu" in proc.stderr

    same = matrix_cli("sbom", "--compare", str(published), cpu_image, out=tmp_path / "out")
    assert same.returncode == 0, same.stderr[-3000:]
    assert "no package differs" in same.stdout

    # One distribution added, one file of six changed (its RECORD changes): both found.
    site = "/opt/venv/lib/python3.11/site-packages"
    changed = derived_image([
        "USER 0",
        f"RUN mkdir {site}/evil-1.0.dist-info && printf 'Metadata-Version: 2.1\\nName: evil\\nVersion: 1.0\\n' "
        f"> {site}/evil-1.0.dist-info/METADATA && for r in {site}/idna-*.dist-info/RECORD; do "
        "echo 'idna/x.py,sha256=changed,1' >> \"$r\"; done",
        "USER 1000:0",
    ])  # fmt: skip
    differs = matrix_cli("sbom", "--compare", str(published), changed, out=tmp_path / "out")
    assert differs.returncode == 17, differs.stdout + differs.stderr[-3000:]
    assert "+ pypi/evil 1.0" in differs.stdout
    assert "~ pypi/idna sha256:" in differs.stdout
    assert "1 added, 0 removed, 1 changed" in differs.stdout


def test_sbom_of_an_image_without_python(tmp_path: Path) -> None:
    proc = matrix_cli("sbom", "debian:bookworm-slim", "--as", "cpu", out=tmp_path)
    assert proc.returncode == 16, proc.stderr
    assert "error: cannot run python3 in debian:bookworm-slim" in proc.stderr and "Traceback" not in proc.stderr


# --- OpenShift static checks ---------------------------------------------------------------------------------
def test_static_checks_pass_on_the_cpu_image(cpu_image: str, tmp_path: Path) -> None:
    proc = matrix_cli("static", cpu_image, out=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert [line.split()[:2] for line in lines] == [
        ["pass", "licenses"], ["pass", "layers"], ["pass", "labels"], ["pass", "user"], ["pass", "tag"],
    ]  # fmt: skip

    latest = matrix_cli("static", "debian:bookworm-slim", out=tmp_path)
    assert latest.returncode == 18
    assert "FAIL  user     no USER" in latest.stdout and "FAIL  licenses" in latest.stdout


# --- signing -------------------------------------------------------------------------------------------------
def test_push_signs_and_attests_then_test_verifies(
    client: docker.DockerClient,
    cpu_image: str,
    keys: dict[str, Path],
    local_registry: str,
    registry_refs: None,
    out_dir: Path,
    tmp_path: Path,
) -> None:
    env = {"COSIGN_PASSWORD": PASSWORD}
    smoke_report = tmp_path / "smoke.json"
    smoke_report.write_text(
        json.dumps(
            {
                "schema_version": 1,
                "checks": [{"variant": "cpu", "profile": "default", "check": "torch-import", "status": "passed"}],
            }
        )
    )
    proc = matrix_cli(
        "push", "cpu", "--registry", local_registry, "--json", "--no-keep-tags",
        "--sign-key", str(keys["ours_key"]), "--smoke-report", str(smoke_report), out=out_dir, env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    (pushed,) = json_of(proc)["pushed"]
    version_tag = next(r for r in pushed["refs"] if r.endswith(":0.32.0"))
    assert "+ cosign sign --key" in proc.stderr and "+ cosign attest --key" in proc.stderr

    # What a consumer runs (docs/supply-chain.md, "Verify an image").
    verified = cosign("verify", "--key", str(keys["ours_pub"]), "--insecure-ignore-tlog=true", version_tag)
    assert verified.returncode == 0, verified.stderr
    assert pushed["digest"] in verified.stdout
    attested = cosign(
        "verify-attestation", "--key", str(keys["ours_pub"]), "--insecure-ignore-tlog=true", "--type", "cyclonedx",
        version_tag,
    )  # fmt: skip
    assert attested.returncode == 0, attested.stderr
    statement = json.loads(base64.b64decode(json.loads(attested.stdout.splitlines()[0])["payload"]))
    assert statement["subject"][0]["digest"]["sha256"] == pushed["digest"].removeprefix("sha256:")
    assert statement["predicate"]["metadata"]["component"]["version"] == client.images.get(cpu_image).id
    for predicate_type in ("slsaprovenance1", "https://vllm-image-matrix.invalid/attestations/smoke-report/v1"):
        other = cosign(
            "verify-attestation", "--key", str(keys["ours_pub"]), "--insecure-ignore-tlog=true", "--type",
            predicate_type, version_tag,
        )  # fmt: skip
        assert other.returncode == 0, (predicate_type, other.stderr)

    ok = matrix_cli(
        "test", "--image", version_tag, "--as", "cpu", "--only", "torch-import",
        "--verify-key", str(keys["ours_pub"]), out=tmp_path / "ok",
    )  # fmt: skip
    assert ok.returncode == 0, ok.stdout[-2000:] + ok.stderr[-3000:]

    foreign = matrix_cli(
        "test", "--image", version_tag, "--as", "cpu", "--verify-key", str(keys["other_pub"]), out=tmp_path / "f"
    )
    assert foreign.returncode == 15, foreign.stderr[-3000:]
    assert f"{version_tag} is not signed by {keys['other_pub']}" in foreign.stderr

    # Tampered: the tag now names another image (pushed over it), which nobody signed.
    client.images.get("debian:bookworm-slim").tag(version_tag)
    for line in client.images.push(version_tag, stream=True, decode=True):
        assert "error" not in line, line
    tampered = matrix_cli(
        "test", "--image", version_tag, "--as", "cpu", "--verify-key", str(keys["ours_pub"]), out=tmp_path / "t"
    )
    assert tampered.returncode == 15, tampered.stderr[-3000:]
    assert "is not signed by" in tampered.stderr and "Traceback" not in tampered.stderr


def test_pin_verifies_the_base_image(
    client: docker.DockerClient,
    keys: dict[str, Path],
    local_registry: str,
    registry_refs: None,
    tmp_path: Path,
) -> None:
    """A base image in the loopback registry: unsigned, pin --verify-key fails (exit 15, no lock file); signed
    by our key, it is pinned."""
    base_ref = f"{local_registry}/vllm-matrix-test/base:bookworm-slim"
    client.images.get("debian:bookworm-slim").tag(base_ref)
    for line in client.images.push(base_ref, stream=True, decode=True):
        assert "error" not in line, line
    data = yaml.safe_load((REPO_ROOT / "matrix.yaml").read_text())
    data["variants"]["cpu"]["base_image"] = base_ref
    matrix = copy_checkout(tmp_path / "checkout", yaml.safe_dump(data, sort_keys=False))
    lock = matrix.parent / "matrix.lock.json"

    unsigned = matrix_cli("--matrix", str(matrix), "pin", "cpu", "--verify-key", str(keys["ours_pub"]), out=tmp_path)
    assert unsigned.returncode == 15, unsigned.stderr[-3000:]
    assert not lock.exists()

    digest = client.images.get_registry_data(base_ref).id
    signed = cosign(
        "sign", "--key", str(keys["ours_key"]), "--tlog-upload=false", "--yes", f"{base_ref.rsplit(':', 1)[0]}@{digest}"
    )
    assert signed.returncode == 0, signed.stderr
    pinned = matrix_cli("--matrix", str(matrix), "pin", "cpu", "--verify-key", str(keys["ours_pub"]), out=tmp_path)
    assert pinned.returncode == 0, pinned.stderr[-3000:]
    assert digest in lock.read_text()
