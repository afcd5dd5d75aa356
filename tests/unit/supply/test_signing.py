"""Signing: cosign argv (no transparency log), key flags first, verification before a manifest list or a lock."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from matrixtool.cli import main
from matrixtool.core.errors import ConfigError, ExitCode
from matrixtool.supply import signing
from tests.unit.supply._signing_fixtures import DIGEST

# A cosign key pair made by 'cosign generate-key-pair' (empty password), for checks that parse keys.
KEYS = Path(__file__).parent.parent / "data" / "keys"


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


@pytest.mark.subprocess  # openssl pkey reads the public key
def test_key_flags_are_checked_first(tmp_path: Path) -> None:
    pub, key = KEYS / "cosign.pub", KEYS / "cosign.key"
    signing.check_key(pub, flag="--verify-key", private=False, env={})
    signing.check_key(key, flag="--sign-key", private=True, env={"COSIGN_PASSWORD": ""})
    with pytest.raises(ConfigError, match="needs the key's password in COSIGN_PASSWORD"):
        signing.check_key(key, flag="--sign-key", private=True, env={})
    with pytest.raises(ConfigError, match="is not a cosign public key"):
        signing.check_key(key, flag="--verify-key", private=False, env={})
    with pytest.raises(ConfigError, match="cannot read the file"):
        signing.check_key(tmp_path / "none", flag="--verify-key", private=False, env={})


def test_cli_refuses_bad_key_flags_before_the_engine(tmp_path: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(
        main, ["test", "--image", "r/cpu:1", "--as", "cpu", "--verify-key", str(tmp_path / "none.pub")],
        catch_exceptions=False,
    )  # fmt: skip
    assert result.exit_code == ExitCode.CONFIG and "--verify-key" in result.output
    pub = tmp_path / "x.pub"
    pub.write_text("")
    result = runner.invoke(main, ["test", "--host", "--as", "cpu", "--verify-key", str(pub)], catch_exceptions=False)
    assert result.exit_code == ExitCode.USAGE and "--verify-key needs --image" in result.output
    result = runner.invoke(main, ["pin", "cpu", "--verify-key", str(tmp_path / "none.pub")], catch_exceptions=False)
    assert result.exit_code == ExitCode.CONFIG
    report = tmp_path / "smoke.json"
    report.write_text("{}")
    push = ["push", "cpu", "--registry", "127.0.0.1:5000", "--smoke-report", str(report)]
    result = runner.invoke(main, push, catch_exceptions=False)
    assert result.exit_code == ExitCode.CONFIG and "--smoke-report needs --sign-key" in result.output


# --- the hooks: verification comes before the list, the lock file, the checks --------------------------------
@pytest.mark.subprocess  # openssl pkey reads the public key
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
    pub = KEYS / "cosign.pub"
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


@pytest.mark.subprocess  # openssl pkey reads the public key
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
    pub = KEYS / "cosign.pub"
    args = pin_command.Args(matrix=matrix, variants=(matrix.variants[0],), resolve=NoRegistry(), verify_key=pub)  # type: ignore[arg-type]
    with pytest.raises(signing.UnverifiedError, match="debian:bookworm-slim is not signed"):
        pin_command.run(args)
    assert not (tmp_path / "c" / "matrix.lock.json").exists()
