"""The in-toto provenance statement of a build."""

from __future__ import annotations

import datetime
import hashlib
from pathlib import Path

import pytest

from matrixtool.build.plan import BuildPlan, BuildResult
from matrixtool.build.render import RenderedFile
from matrixtool.model.model import Platform
from matrixtool.supply import attestations, cyclonedx, provenance, sbom
from tests.unit.supply._signing_fixtures import DIGEST


# --- provenance ----------------------------------------------------------------------------------------------
def test_provenance_statement(tmp_path: Path) -> None:
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text("schema_version: 1\n")
    plan = BuildPlan(
        variant="cpu",
        platform=Platform(os="linux", arch="amd64"),
        files=(RenderedFile(path=Path("images/cpu/Dockerfile"), text="FROM x\n"),),
        wheelhouse=None,
        ca_cert=None,
        base_image="debian:bookworm-slim",
        content_hash="f" * 64,
        refs=("vllm-matrix/cpu:ffffffffffffffff", "vllm-matrix/cpu:0.32.0"),
        base_digest="sha256:" + "cd" * 32,
    )
    started = datetime.datetime(2026, 12, 1, 9, 0, tzinfo=datetime.UTC)
    sources = provenance.Sources(
        matrix_path=matrix, templates={"templates/Dockerfile.j2": "12" * 32},
        wheels={"torch-2.13.0+cpu-cp311-cp311-linux_x86_64.whl": "34" * 32}, builder={"docker-engine": "20.10.24"},
        revision="abc123", source="https://example.invalid/repo.git",
    )  # fmt: skip
    doc = provenance.statement(
        plan, sources, image_id=DIGEST, base_id=None, started=started, finished=started + datetime.timedelta(seconds=60)
    )
    assert doc["_type"] == "https://in-toto.io/Statement/v1"
    assert doc["predicateType"] == "https://slsa.dev/provenance/v1"
    assert doc["subject"] == [{"name": "vllm-matrix/cpu", "digest": {"sha256": "ab" * 32}}]
    definition = doc["predicate"]["buildDefinition"]
    assert definition["externalParameters"]["matrix"]["sha256"] == hashlib.sha256(b"schema_version: 1\n").hexdigest()
    uris = {d["uri"]: d["digest"] for d in definition["resolvedDependencies"]}
    assert uris["docker-image:debian:bookworm-slim"] == {"sha256": "cd" * 32}
    assert uris["file:wheelhouse/torch-2.13.0+cpu-cp311-cp311-linux_x86_64.whl"] == {"sha256": "34" * 32}
    assert uris["file:images/cpu/Dockerfile"] == {"sha256": hashlib.sha256(b"FROM x\n").hexdigest()}
    assert uris["git+https://example.invalid/repo.git@abc123"] == {"gitCommit": "abc123"}
    run = doc["predicate"]["runDetails"]
    assert run["builder"]["version"]["docker-engine"] == "20.10.24"
    assert run["metadata"] == {
        "invocationId": "f" * 64, "startedOn": "2026-12-01T09:00:00Z", "finishedOn": "2026-12-01T09:01:00Z",
    }  # fmt: skip


def test_a_build_without_an_sbom_leaves_no_earlier_sbom_beside_its_provenance(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The SBOM cannot be derived: the new provenance is written and the previous build's SBOM of the variant goes in
    the same set (never a stale SBOM beside a new provenance); the SBOM is not among the paths written."""
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text("schema_version: 1\n")
    plan = BuildPlan(
        variant="cpu", platform=Platform(os="linux", arch="amd64"),
        files=(RenderedFile(path=Path("images/cpu/Dockerfile"), text="FROM x\n"),), wheelhouse=None, ca_cert=None,
        base_image="debian:bookworm-slim", content_hash="f" * 64, refs=("vllm-matrix/cpu:ffffffffffffffff",),
        base_digest="sha256:" + "cd" * 32,
    )  # fmt: skip
    result = BuildResult(
        variant="cpu", platform="linux/amd64", image=plan.hash_ref, image_id=DIGEST, size_bytes=1, seconds=1.0,
        log_path=None, cached=True,
    )  # fmt: skip
    out = tmp_path / "out"
    old_sbom = cyclonedx.report_path(out, "cpu")
    old_sbom.parent.mkdir(parents=True)
    old_sbom.write_text('{"bomFormat": "CycloneDX", "of": "the previous build"}\n')

    def no_sbom(client: object, ref: str, variant: str) -> str:
        raise sbom.SbomError(f"cannot read the inventory of {ref}")

    monkeypatch.setattr(cyclonedx, "report_text", no_sbom)
    monkeypatch.setattr(attestations, "_builder_versions", lambda client: {"docker-engine": "20.10.24"})
    monkeypatch.setattr(provenance, "template_digests", lambda root: {})
    written = attestations.write_build_reports(
        None,  # type: ignore[arg-type]  # no engine is asked: the base has a digest, the SBOM is faked away
        [plan], [result], matrix_path=matrix, out_dir=out, revision="abc123", source="https://example.invalid/r.git",
    )  # fmt: skip
    assert written == [provenance.report_path(out, "cpu")] and provenance.report_path(out, "cpu").is_file()
    assert not old_sbom.exists()
