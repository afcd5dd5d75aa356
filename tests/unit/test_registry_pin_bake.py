"""Pure logic of bake export, registry refs, push plans and the pin lock file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from matrixtool import bake, pin, plan, publish, registry, render
from matrixtool.cli import main
from matrixtool.errors import ConfigError, ExitCode, RegistryError
from matrixtool.matrix import load_matrix

DIGEST = "sha256:" + "ab" * 32


def _plan(**overrides: Any) -> plan.BuildPlan:
    variant = next(v for v in load_matrix().variants if v.name == "cpu")
    kwargs: dict[str, Any] = dict(
        platform="linux/amd64", files=tuple(render.render_variant(variant)), base_image_id="sha256:base",
        wheelhouse=Path("/opt/wheels"), wheelhouse_rows=["torch.whl 1 2"], ca_cert=Path("/ca.crt"),
        revision="abc", source_url="https://example.invalid/repo",
    )  # fmt: skip
    kwargs.update(overrides)
    return plan.plan_build(variant, **kwargs)


# --- bake ---------------------------------------------------------------------------------------------
def test_bake_target_mirrors_the_build_plan(tmp_path: Path) -> None:
    p = _plan()
    doc = bake.bake_document([p], contexts_dir=tmp_path)
    assert doc["group"] == {"default": {"targets": ["cpu-amd64"]}, "cpu": {"targets": ["cpu-amd64"]}}
    target = doc["target"]["cpu-amd64"]
    assert target == {
        "context": str(tmp_path / "cpu-amd64"), "dockerfile": "Dockerfile", "target": "runtime",
        "platforms": ["linux/amd64"], "args": {"BASE_IMAGE": "debian:bookworm-slim"},
        "labels": dict(p.labels), "tags": list(p.tags), "output": ["type=docker"],
        "cache-to": ["type=inline"], "secret": ["id=ca,src=/ca.crt"],
    }  # fmt: skip
    # the same labels, args and tags as the `docker buildx build` argv of the same plan
    argv = p.argv(tmp_path / "cpu-amd64", tmp_path / "iid")

    def values(flag: str) -> list[str]:
        return [argv[i + 1] for i, a in enumerate(argv) if a == flag]

    assert set(values("--label")) == {f"{k}={v}" for k, v in p.labels.items()}
    assert values("--tag") == target["tags"]
    assert values("--build-arg") == ["BASE_IMAGE=debian:bookworm-slim"]


def test_bake_with_registry_adds_remote_tags_and_cache_from(tmp_path: Path) -> None:
    p = _plan(ca_cert=None)
    target = bake.bake_target(p, context_dir=tmp_path, registry="127.0.0.1:5000")
    assert target["tags"][2:] == [f"127.0.0.1:5000/{t}" for t in p.tags]
    assert target["cache-from"] == [f"type=registry,ref=127.0.0.1:5000/{t}" for t in p.tags]
    assert "secret" not in target


def test_write_bake_stages_contexts_under_out(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "torch-2.13.0+cpu-x.whl").write_bytes(b"w")
    p = _plan(wheelhouse=wheels)
    path = bake.write_bake([p], out_dir=tmp_path / "out")
    assert path == (tmp_path / "out" / "docker-bake.json").resolve()
    context = Path(json.loads(path.read_text())["target"]["cpu-amd64"]["context"])
    assert context == (tmp_path / "out" / "bake" / "cpu-amd64").resolve()
    assert (context / "Dockerfile").read_text() == p.files[0].text
    assert (context / "wheelhouse" / "torch-2.13.0+cpu-x.whl").read_bytes() == b"w"


# --- pinned bases in the plan ---------------------------------------------------------------------------
def test_pinned_base_is_the_build_arg_a_label_and_part_of_the_content_hash(tmp_path: Path) -> None:
    unpinned, pinned = _plan(), _plan(base_digest=DIGEST)
    assert unpinned.build_args == {"BASE_IMAGE": "debian:bookworm-slim"}
    assert pinned.build_args == {"BASE_IMAGE": f"debian:bookworm-slim@{DIGEST}"}
    assert f"BASE_IMAGE=debian:bookworm-slim@{DIGEST}" in pinned.argv(tmp_path, tmp_path / "iid")
    assert pinned.labels["org.opencontainers.image.base.digest"] == DIGEST
    assert pinned.content_hash != unpinned.content_hash
    assert _plan(base_digest="sha256:" + "cd" * 32).content_hash != pinned.content_hash


# --- registry refs ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(("ref", "registry_host", "repository", "tag", "url"), [
    ("debian:bookworm-slim", "docker.io", "library/debian", "bookworm-slim",
     "https://registry-1.docker.io/v2/library/debian/manifests/bookworm-slim"),
    ("nvidia/cuda:12.9.1-runtime", "docker.io", "nvidia/cuda", "12.9.1-runtime",
     "https://registry-1.docker.io/v2/nvidia/cuda/manifests/12.9.1-runtime"),
    ("127.0.0.1:5000/vllm-matrix/cpu:0.32.0", "127.0.0.1:5000", "vllm-matrix/cpu", "0.32.0",
     "http://127.0.0.1:5000/v2/vllm-matrix/cpu/manifests/0.32.0"),
    ("localhost/x", "localhost", "x", "latest", "http://localhost/v2/x/manifests/latest"),
    ("ghcr.io/o/vllm-matrix/cpu:abc", "ghcr.io", "o/vllm-matrix/cpu", "abc",
     "https://ghcr.io/v2/o/vllm-matrix/cpu/manifests/abc"),
    (f"debian:bookworm-slim@{DIGEST}", "docker.io", "library/debian", "bookworm-slim",
     f"https://registry-1.docker.io/v2/library/debian/manifests/{DIGEST}"),
])  # fmt: skip
def test_parse_ref_normalises_like_docker(ref: str, registry_host: str, repository: str, tag: str, url: str) -> None:
    parsed = registry.parse_ref(ref)
    assert (parsed.registry, parsed.repository, parsed.tag) == (registry_host, repository, tag)
    assert registry.manifest_url(parsed) == url


def test_bad_refs_and_registry_prefixes_are_registry_errors() -> None:
    with pytest.raises(RegistryError, match="digest"):
        registry.parse_ref("debian@sha256:short")
    with pytest.raises(RegistryError, match="without a scheme"):
        registry.remote_ref("http://127.0.0.1:5000", "vllm-matrix/cpu:1")
    assert registry.remote_ref("ghcr.io/owner/", "vllm-matrix/cpu:1") == "ghcr.io/owner/vllm-matrix/cpu:1"
    header = 'Bearer realm="https://auth.docker.io/token",service="registry.docker.io"'
    assert registry.bearer_challenge(header) == {
        "realm": "https://auth.docker.io/token",
        "service": "registry.docker.io",
    }
    assert registry.bearer_challenge('Basic realm="x"') is None


def test_unreachable_registry_names_host_and_ref() -> None:
    # Port 9 on loopback: nothing listens (connection refused), no network needed.
    with pytest.raises(RegistryError) as info:
        registry.manifest_digest("127.0.0.1:9/x/y:z", timeout=2)
    assert info.value.exit_code == ExitCode.REGISTRY == 9
    assert "registry 127.0.0.1:9 is unreachable" in str(info.value) and "127.0.0.1:9/x/y:z" in str(info.value)


# --- push -----------------------------------------------------------------------------------------------
def test_push_plan_tags_then_pushes_hash_and_version_tags() -> None:
    p = _plan()
    push = publish.plan_push(p, registry="127.0.0.1:5000")
    h = p.content_hash[:16]
    assert push.targets == (f"127.0.0.1:5000/vllm-matrix/cpu:{h}", "127.0.0.1:5000/vllm-matrix/cpu:0.32.0")
    assert push.steps() == [
        ["docker", "tag", f"vllm-matrix/cpu:{h}", f"127.0.0.1:5000/vllm-matrix/cpu:{h}"],
        ["docker", "tag", f"vllm-matrix/cpu:{h}", "127.0.0.1:5000/vllm-matrix/cpu:0.32.0"],
        ["docker", "push", f"127.0.0.1:5000/vllm-matrix/cpu:{h}"],
        ["docker", "push", "127.0.0.1:5000/vllm-matrix/cpu:0.32.0"],
    ]
    assert push.untag_steps()[0] == ["docker", "rmi", f"127.0.0.1:5000/vllm-matrix/cpu:{h}"]
    out = f"abc: Pushed\n0.32.0: digest: {DIGEST} size: 4321\n"
    assert publish.pushed_digest(out) == DIGEST
    assert publish.pushed_digest("nothing") is None


# --- the lock file --------------------------------------------------------------------------------------
def test_lock_round_trip_and_stable_text(tmp_path: Path) -> None:
    path = tmp_path / "matrix.lock.json"
    assert pin.read_lock(path) == pin.Lock()
    lock = pin.Lock(base_images={"z:1": DIGEST, "a:1": DIGEST})
    assert pin.write_lock(lock, path) is True
    assert pin.write_lock(lock, path) is False  # same text: untouched
    assert list(json.loads(path.read_text())["base_images"]) == ["a:1", "z:1"]
    assert pin.read_lock(path) == lock and pin.read_lock(path).digest("a:1") == DIGEST
    assert pin.lock_path(tmp_path / "matrix.yaml") == path


def test_invalid_lock_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "matrix.lock.json"
    path.write_text('{"schema_version": 1, "base_images": {"debian:12": "md5:x"}}')
    with pytest.raises(ConfigError, match=r"base_images\.debian:12"):
        pin.read_lock(path)
    path.write_text("{")
    with pytest.raises(ConfigError, match="not valid JSON"):
        pin.read_lock(path)


def test_pin_resolves_every_ref_or_raises() -> None:
    old = pin.Lock(base_images={"keep:1": DIGEST})
    new = pin.pin(["debian:bookworm-slim"], lock=old, resolve=lambda ref: "sha256:" + "11" * 32)
    assert new.base_images == {"keep:1": DIGEST, "debian:bookworm-slim": "sha256:" + "11" * 32}
    with pytest.raises(RegistryError, match=r"registry registry-1\.docker\.io has no debian:nope"):
        pin.pin(["debian:nope"], lock=old, resolve=lambda ref: None)


def test_pin_cli_leaves_the_lock_unchanged_when_the_registry_is_unreachable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text((Path(__file__).parents[2] / "matrix.yaml").read_text())
    lock = tmp_path / "matrix.lock.json"
    lock.write_text(pin.lock_text(pin.Lock(base_images={"debian:bookworm-slim": DIGEST})))
    before = lock.read_bytes()

    def unreachable(ref: str) -> str | None:
        raise RegistryError(
            f"registry registry-1.docker.io is unreachable (x) while looking up {ref}",
            registry="registry-1.docker.io",
            ref=ref,
        )

    monkeypatch.setattr(registry, "manifest_digest", unreachable)
    result = CliRunner().invoke(main, ["--matrix", str(matrix), "pin", "cpu"], catch_exceptions=False)
    assert result.exit_code == ExitCode.REGISTRY
    assert "registry-1.docker.io" in result.output and "debian:bookworm-slim" in result.output
    assert f"{lock} left unchanged" in result.output
    assert lock.read_bytes() == before

    monkeypatch.setattr(registry, "manifest_digest", lambda ref: "sha256:" + "22" * 32)
    result = CliRunner().invoke(main, ["--matrix", str(matrix), "pin", "cpu"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert pin.read_lock(lock).digest("debian:bookworm-slim") == "sha256:" + "22" * 32
