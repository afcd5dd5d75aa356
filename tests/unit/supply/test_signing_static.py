"""Signing argv and verification logic, provenance statements and OpenShift's static checks (issue 21): pure parts."""

from __future__ import annotations

import datetime
import hashlib
import io
import json
import tarfile
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from matrixtool.build.plan import BuildPlan
from matrixtool.build.render import RenderedFile
from matrixtool.cli import main
from matrixtool.core.errors import ConfigError, ExitCode
from matrixtool.model.model import Platform
from matrixtool.supply import provenance, signing, static

DIGEST = "sha256:" + "ab" * 32


# --- signing -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("ref", "expected"),
    [
        ("127.0.0.1:5000/vllm-matrix/cpu:0.32.0", f"127.0.0.1:5000/vllm-matrix/cpu@{DIGEST}"),
        ("127.0.0.1:5000/vllm-matrix/cpu", f"127.0.0.1:5000/vllm-matrix/cpu@{DIGEST}"),
        ("ghcr.io/o/vllm-matrix/cpu:3341f89e7b66df86", f"ghcr.io/o/vllm-matrix/cpu@{DIGEST}"),
    ],
)
def test_by_digest(ref: str, expected: str) -> None:
    assert signing.by_digest(ref, DIGEST) == expected


def test_argv_never_reach_the_transparency_log(tmp_path: Path) -> None:
    key, pub = tmp_path / "cosign.key", tmp_path / "cosign.pub"
    ref = f"r/cpu@{DIGEST}"
    assert signing.sign_argv("cosign", ref, key) == [
        "cosign",
        "sign",
        "--key",
        str(key),
        "--tlog-upload=false",
        "--yes",
        ref,
    ]
    attachment = signing.Attachment(predicate_type="cyclonedx", path=tmp_path / "sbom.json")
    assert signing.attest_argv("cosign", ref, key, attachment) == [
        "cosign", "attest", "--key", str(key), "--type", "cyclonedx", "--predicate", str(tmp_path / "sbom.json"),
        "--tlog-upload=false", "--yes", ref,
    ]  # fmt: skip
    assert signing.verify_argv("cosign", ref, pub) == [
        "cosign", "verify", "--key", str(pub), "--insecure-ignore-tlog=true", "--output", "json", ref,
    ]  # fmt: skip


def test_signed_digests_of_cosign_output() -> None:
    payload = [{"critical": {"image": {"docker-manifest-digest": DIGEST}, "type": "cosign container image signature"}}]
    assert signing._signed_digests("\n" + json.dumps(payload) + "\n") == [DIGEST]
    assert signing._signed_digests("Error: no signatures found\n") == []


def test_local_image_must_be_the_signed_digest() -> None:
    verified = signing.Verified(ref="r/cpu:1", digest=DIGEST)
    signing.check_local_matches({"RepoDigests": [f"r/cpu@{DIGEST}"]}, verified)
    with pytest.raises(signing.UnverifiedError, match="is not the signed image") as caught:
        signing.check_local_matches({"RepoDigests": []}, verified)
    assert caught.value.exit_code == int(ExitCode.UNVERIFIED) == 15


def test_key_flags_are_checked_first(tmp_path: Path) -> None:
    pub = tmp_path / "cosign.pub"
    pub.write_text("-----BEGIN PUBLIC KEY-----\nxyz\n-----END PUBLIC KEY-----\n")
    key = tmp_path / "cosign.key"
    key.write_text("-----BEGIN ENCRYPTED SIGSTORE PRIVATE KEY-----\nxyz\n")
    signing.check_key(pub, flag="--verify-key", private=False, env={})
    signing.check_key(key, flag="--sign-key", private=True, env={"COSIGN_PASSWORD": ""})
    with pytest.raises(ConfigError, match="needs the key's password in COSIGN_PASSWORD"):
        signing.check_key(key, flag="--sign-key", private=True, env={})
    with pytest.raises(ConfigError, match="is not a cosign public key"):
        signing.check_key(key, flag="--verify-key", private=False, env={})
    with pytest.raises(ConfigError, match="is not a file"):
        signing.check_key(tmp_path / "none", flag="--verify-key", private=False, env={})


def test_cli_refuses_bad_key_flags_before_the_engine(tmp_path: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(
        main, ["test", "--image", "r/cpu:1", "--as", "cpu", "--verify-key", str(tmp_path / "none.pub")],
        catch_exceptions=False,
    )  # fmt: skip
    assert result.exit_code == ExitCode.CONFIG and "--verify-key" in result.output
    result = runner.invoke(main, ["test", "--host", "--as", "cpu", "--verify-key", "x.pub"], catch_exceptions=False)
    assert result.exit_code == ExitCode.USAGE and "--verify-key needs --image" in result.output
    result = runner.invoke(main, ["pin", "cpu", "--verify-key", str(tmp_path / "none.pub")], catch_exceptions=False)
    assert result.exit_code == ExitCode.CONFIG
    report = tmp_path / "smoke.json"
    report.write_text("{}")
    push = ["push", "cpu", "--registry", "127.0.0.1:5000", "--smoke-report", str(report)]
    result = runner.invoke(main, push, catch_exceptions=False)
    assert result.exit_code == ExitCode.CONFIG and "--smoke-report needs --sign-key" in result.output


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
    doc = provenance.statement(
        plan, image_id=DIGEST, base_id=None, matrix_path=matrix, templates={"templates/Dockerfile.j2": "12" * 32},
        wheels={"torch-2.13.0+cpu-cp311-cp311-linux_x86_64.whl": "34" * 32}, builder={"docker-engine": "20.10.24"},
        revision="abc123", source="https://example.invalid/repo.git", started=started,
        finished=started + datetime.timedelta(seconds=60),
    )  # fmt: skip
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


# --- OpenShift static checks ---------------------------------------------------------------------------------
GOOD_LABELS = {k: "x" for k in (*static.REQUIRED_LABELS, "maintainer")}


def attrs(user: str = "1000:0", labels: dict[str, str] | None = None, layers: int = 11) -> dict[str, Any]:
    return {
        "Config": {"User": user, "Labels": GOOD_LABELS if labels is None else labels},
        "RootFS": {"Layers": [f"sha256:{i}" for i in range(layers)]},
    }


def test_static_checks_pass() -> None:
    results = static.judge("vllm-matrix/cpu:0.32.0", attrs(), ["licenses/torch/LICENSE"])
    assert all(r.passed for r in results), results
    static.raise_for("x", results)


@pytest.mark.parametrize(
    ("ref", "image", "files", "failed", "detail"),
    [
        ("r/cpu:1", attrs(), [], "licenses", "/licenses is missing or empty"),
        ("r/cpu:1", attrs(layers=41), ["l"], "layers", "41 layers (at most 40)"),
        ("r/cpu:1", attrs(labels={"name": "n"}), ["l"], "labels", "missing: vendor, version, release"),
        ("r/cpu:1", attrs(user=""), ["l"], "user", "runs as root"),
        ("r/cpu:1", attrs(user="vllm"), ["l"], "user", "is a name"),
        ("r/cpu:1", attrs(user="0:0"), ["l"], "user", "is root"),
        ("r/cpu:latest", attrs(), ["l"], "tag", "not latest"),
        ("r/cpu", attrs(), ["l"], "tag", "'none'"),
    ],
)
def test_static_check_failures(ref: str, image: dict[str, Any], files: list[str], failed: str, detail: str) -> None:
    results = static.judge(ref, image, files)
    assert [r.name for r in results if not r.passed] == [failed]
    assert detail in next(r.detail for r in results if r.name == failed)
    with pytest.raises(static.StaticCheckFailure) as caught:
        static.raise_for(ref, results)
    assert caught.value.exit_code == int(ExitCode.STATIC) == 18


def test_license_listing_of_a_tar_stream() -> None:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        folder = tarfile.TarInfo("licenses/torch")
        folder.type = tarfile.DIRTYPE
        archive.addfile(folder)
        data = b"BSD"
        info = tarfile.TarInfo("licenses/torch/LICENSE")
        info.size = len(data)
        archive.addfile(info, io.BytesIO(data))
    chunks = [buffer.getvalue()[i : i + 100] for i in range(0, len(buffer.getvalue()), 100)]
    assert static.license_listing(iter(chunks)) == ["licenses/torch/LICENSE"]


# --- the hooks: verification comes before the list, the lock file, the checks --------------------------------
def test_manifest_verifies_each_platform_before_making_the_list(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from matrixtool.commands import manifest as manifest_command
    from matrixtool.model.model import DEFAULT_MATRIX
    from matrixtool.publish import manifest
    from matrixtool.supply import attestations

    records = tmp_path / "pushed.json"
    records.write_text(json.dumps({"schema_version": 1, "pushed": [
        {"variant": "cpu", "platform": "linux/amd64", "refs": ["127.0.0.1:5000/vllm-matrix/cpu:0123456789abcdef"],
         "digest": DIGEST},
        {"variant": "arm64", "platform": "linux/arm64", "refs": ["127.0.0.1:5000/vllm-matrix/arm64:0123456789abcdef"],
         "digest": "sha256:" + "cd" * 32},
    ]}))  # fmt: skip
    verified: list[str] = []

    def verify_ref(client: Any, ref: str, **kwargs: Any) -> signing.Verified:
        verified.append(ref)
        if "arm64" in ref:
            raise signing.UnverifiedError(f"{ref} is not signed")
        return signing.Verified(ref=ref, digest=DIGEST)

    def execute(plan: Any) -> str:
        raise AssertionError("the list was made before every platform was verified")

    monkeypatch.setattr(attestations, "verify_ref", verify_ref)
    monkeypatch.setattr(manifest, "execute", execute)
    pub = tmp_path / "cosign.pub"
    pub.write_text("-----BEGIN PUBLIC KEY-----\n")
    args = manifest_command.Args(
        matrix_path=DEFAULT_MATRIX, pushed=(records,), registry="127.0.0.1:5000", repository="vllm-matrix",
        verify_key=pub,
    )  # fmt: skip
    with pytest.raises(signing.UnverifiedError, match="arm64"):
        manifest_command.run(args)
    assert verified == [
        f"127.0.0.1:5000/vllm-matrix/cpu@{DIGEST}",
        "127.0.0.1:5000/vllm-matrix/arm64@sha256:" + "cd" * 32,
    ]


def test_pin_verifies_before_the_lock_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from matrixtool.commands import pin as pin_command
    from matrixtool.model.matrixfile import load_matrix
    from matrixtool.supply import attestations
    from tests.conftest import copy_checkout

    matrix = load_matrix(copy_checkout(tmp_path / "c"))

    def verify_ref(client: Any, ref: str, **kwargs: Any) -> signing.Verified:
        raise signing.UnverifiedError(f"{ref} is not signed")

    class NoRegistry:
        def digest(self, ref: str) -> str:
            raise AssertionError("resolved before verifying")

    monkeypatch.setattr(attestations, "verify_ref", verify_ref)
    pub = tmp_path / "k.pub"
    pub.write_text("-----BEGIN PUBLIC KEY-----\n")
    args = pin_command.Args(matrix=matrix, variants=(matrix.variants[0],), resolve=NoRegistry(), verify_key=pub)  # type: ignore[arg-type]
    with pytest.raises(signing.UnverifiedError, match="debian:bookworm-slim is not signed"):
        pin_command.run(args)
    assert not (tmp_path / "c" / "matrix.lock.json").exists()
