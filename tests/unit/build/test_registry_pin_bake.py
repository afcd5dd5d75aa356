"""Pure logic of bake export, registry refs, push plans and the pin lock file."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any, cast

import docker
import docker.errors
import pytest
import yaml
from click.testing import CliRunner

from matrixtool.build import bake, pin, plan, registry, render
from matrixtool.cli import main
from matrixtool.core import engine
from matrixtool.core.errors import ConfigError, ExitCode, OutputError, RegistryError
from matrixtool.model.matrixfile import load_matrix
from matrixtool.model.model import Platform
from matrixtool.publish import push
from tests.conftest import REPO_ROOT, copy_checkout
from tests.unit.build.test_plan import flat_plan

DIGEST = "sha256:" + "ab" * 32

AMD64, ARM64 = Platform("linux", "amd64"), Platform("linux", "arm64")


def _plan(**overrides: Any) -> plan.BuildPlan:
    variant = next(v for v in load_matrix().variants if v.name == "cpu")
    kwargs: dict[str, Any] = dict(
        platform=AMD64, files=tuple(render.render_variant(variant)), base_image_id="sha256:base",
        wheelhouse=Path("/opt/wheels"), wheelhouse_rows=["torch.whl 1 2"], ca_cert=Path("/ca.crt"),
        revision="abc", source_url="https://example.invalid/repo",
    )  # fmt: skip
    kwargs.update(overrides)
    return flat_plan(variant, **kwargs)


# --- bake ---------------------------------------------------------------------------------------------
def test_bake_target_mirrors_the_build_plan(tmp_path: Path) -> None:
    p = _plan()
    doc = bake.bake_document([p], contexts_dir=tmp_path)
    assert doc["group"] == {"default": {"targets": ["cpu-amd64"]}, "cpu": {"targets": ["cpu-amd64"]}}
    target = doc["target"]["cpu-amd64"]
    assert target == {
        "context": str(tmp_path / "cpu-amd64"), "dockerfile": "Dockerfile", "target": "runtime",
        "platforms": ["linux/amd64"], "args": {"BASE_IMAGE": "debian:bookworm-slim"},
        "labels": dict(p.labels), "tags": list(p.refs), "output": ["type=docker"],
        "cache-to": ["type=inline"], "secret": ["id=ca,src=/ca.crt"],
    }  # fmt: skip
    # the same labels, args, tags, secrets and cache as the `docker buildx build` argv of the same plan
    argv = _argv(p, tmp_path / "cpu-amd64", tmp_path / "iid")

    def values(flag: str) -> list[str]:
        return [argv[i + 1] for i, a in enumerate(argv) if a == flag]

    assert set(values("--label")) == {f"{k}={v}" for k, v in p.labels.items()}
    assert values("--tag") == target["tags"]
    assert values("--build-arg") == ["BASE_IMAGE=debian:bookworm-slim"]
    assert values("--secret") == target["secret"] and values("--cache-to") == target["cache-to"]
    assert values("--output") == target["output"] and values("--platform") == target["platforms"]


def _argv(p: plan.BuildPlan, context_dir: Path, iidfile: Path) -> list[str]:
    return plan.buildx_argv(plan.build_spec(p, context_dir=context_dir), iidfile=iidfile)


def test_bake_with_registry_adds_remote_tags_and_cache_from(tmp_path: Path) -> None:
    p = _plan(ca_cert=None)
    spec = plan.build_spec(p, context_dir=tmp_path, registry="127.0.0.1:5000")
    target = bake.bake_target(spec)
    assert target["tags"][2:] == [f"127.0.0.1:5000/{t}" for t in p.refs]
    assert target["cache-from"] == [f"type=registry,ref=127.0.0.1:5000/{t}" for t in p.refs]
    assert "secret" not in target
    argv = plan.buildx_argv(spec, iidfile=tmp_path / "iid")
    assert [argv[i + 1] for i, a in enumerate(argv) if a == "--cache-from"] == target["cache-from"]


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


def test_a_bake_file_path_that_is_a_folder_is_refused_before_any_context_is_staged(tmp_path: Path) -> None:
    (tmp_path / "out" / "docker-bake.json").mkdir(parents=True)
    with pytest.raises(OutputError, match=r"docker-bake\.json is a folder, not a regular file"):
        bake.write_bake([_plan()], out_dir=tmp_path / "out")
    assert not (tmp_path / "out" / "bake").exists()


def test_a_failed_staging_leaves_no_bake_file_of_an_earlier_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The old bake file names contexts restaged now: it goes before, and the new one comes only once all are."""
    path = bake.write_bake([_plan()], out_dir=tmp_path / "out")

    def full_disk(plan_: Any, context_dir: Path) -> None:
        raise OutputError(f"cannot write {context_dir}: No space left on device", path=str(context_dir))

    monkeypatch.setattr(bake, "stage_context", full_disk)
    with pytest.raises(OutputError):
        bake.write_bake([_plan()], out_dir=tmp_path / "out")
    assert not path.exists()


# --- pinned bases in the plan ---------------------------------------------------------------------------
def test_pinned_base_is_the_build_arg_a_label_and_part_of_the_content_hash(tmp_path: Path) -> None:
    unpinned, pinned = _plan(), _plan(base_digest=DIGEST)
    assert unpinned.build_args == {"BASE_IMAGE": "debian:bookworm-slim"}
    assert pinned.build_args == {"BASE_IMAGE": f"debian:bookworm-slim@{DIGEST}"}
    assert f"BASE_IMAGE=debian:bookworm-slim@{DIGEST}" in _argv(pinned, tmp_path, tmp_path / "iid")
    assert pinned.labels["org.opencontainers.image.base.digest"] == DIGEST
    assert pinned.content_hash != unpinned.content_hash
    assert _plan(base_digest="sha256:" + "cd" * 32).content_hash != pinned.content_hash


# --- registry refs ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(("ref", "host"), [
    ("debian:bookworm-slim", "docker.io"),
    ("nvidia/cuda:12.9.1-runtime", "docker.io"),
    ("127.0.0.1:5000/vllm-matrix/cpu:0.32.0", "127.0.0.1:5000"),
    ("localhost/x", "localhost"),
    ("ghcr.io/o/vllm-matrix/cpu:abc", "ghcr.io"),
    (f"debian:bookworm-slim@{DIGEST}", "docker.io"),
])  # fmt: skip
def test_registry_host_resolves_like_docker(ref: str, host: str) -> None:
    assert registry.registry_host(ref) == host


def test_registry_prefixes_and_push_stream_digests() -> None:
    with pytest.raises(RegistryError, match="without a scheme"):
        plan.remote_ref("http://127.0.0.1:5000", "vllm-matrix/cpu:1")
    assert plan.remote_ref("ghcr.io/owner/", "vllm-matrix/cpu:1") == "ghcr.io/owner/vllm-matrix/cpu:1"
    # The engine's push stream ends with an aux record carrying the digest (seen from engine 20.10).
    aux = {"progressDetail": {}, "aux": {"Tag": "t1", "Digest": DIGEST, "Size": 528}}
    assert registry.pushed_digest(aux) == DIGEST
    assert registry.pushed_digest({"status": f"t1: digest: {DIGEST} size: 528"}) is None
    assert registry.pushed_digest({"aux": {"Digest": "sha256:short"}}) is None


class _ApiError(docker.errors.APIError):
    def __init__(self, explanation: str) -> None:
        super().__init__("500 Server Error")
        self.explanation = explanation


class _FakeImages:
    """The slice of ``DockerClient.images`` that ``EngineRegistry`` uses, answering as engine 20.10 did."""

    def __init__(self, digests: dict[str, str], push_records: list[dict[str, Any]]) -> None:
        self.digests = digests
        self.push_records = push_records
        self.pushed: list[tuple[str, str]] = []

    def get_registry_data(self, ref: str) -> Any:
        if ref.startswith("127.0.0.1:9/"):
            raise _ApiError('Get "http://127.0.0.1:9/v2/": dial tcp 127.0.0.1:9: connect: connection refused')
        if ref not in self.digests:
            raise docker.errors.NotFound("manifest unknown: manifest unknown")
        return type("RegistryData", (), {"id": self.digests[ref]})()

    def push(self, repository: str, tag: str, *, stream: bool, decode: bool) -> list[dict[str, Any]]:
        assert stream and decode
        self.pushed.append((repository, tag))
        return self.push_records


def _engine_registry(images: _FakeImages) -> registry.EngineRegistry:
    client = type("Client", (), {"images": images})()
    return registry.EngineRegistry(cast(docker.DockerClient, client))


def test_engine_registry_digests_and_errors() -> None:
    reg = _engine_registry(_FakeImages({"127.0.0.1:5000/a/b:1": DIGEST}, []))
    assert reg.digest("127.0.0.1:5000/a/b:1") == DIGEST
    assert reg.digest("127.0.0.1:5000/a/b:2") is None  # no such tag: not an error
    with pytest.raises(RegistryError) as info:
        reg.digest("127.0.0.1:9/x/y:z")
    assert info.value.exit_code == ExitCode.REGISTRY and int(ExitCode.REGISTRY) == 9
    assert "registry 127.0.0.1:9 is unreachable" in str(info.value) and "127.0.0.1:9/x/y:z" in str(info.value)


def test_engine_registry_push_reads_the_aux_digest_and_reports_stream_errors() -> None:
    images = _FakeImages({}, [{"status": "Pushed"}, {"aux": {"Tag": "1", "Digest": DIGEST, "Size": 1}}])
    assert _engine_registry(images).push("127.0.0.1:5000/a/b:1") == DIGEST
    assert images.pushed == [("127.0.0.1:5000/a/b", "1")]
    denied = _FakeImages({}, [{"error": "denied: requested access to the resource is denied"}])
    with pytest.raises(RegistryError, match=r"registry ghcr\.io refused pushing ghcr\.io/o/b:1 \(denied"):
        _engine_registry(denied).push("ghcr.io/o/b:1")


# --- push -----------------------------------------------------------------------------------------------
class _FakeRegistry:
    """A ``registry.Registry`` that records calls: unit tests need no engine."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, ...]] = []

    def digest(self, ref: str) -> str | None:
        self.calls.append(("digest", ref))
        return DIGEST if ref.endswith(":0.32.0") else None

    def tag(self, source: str, target: str) -> None:
        self.calls.append(("tag", source, target))

    def push(self, ref: str) -> str:
        self.calls.append(("push", ref))
        return DIGEST

    def untag(self, ref: str) -> None:
        self.calls.append(("untag", ref))


def test_push_tags_then_pushes_hash_and_version_tags() -> None:
    p = _plan()
    plan_ = push.plan_push(p, registry="127.0.0.1:5000")
    h = p.content_hash[:16]
    hash_ref, version_ref = f"127.0.0.1:5000/vllm-matrix/cpu:{h}", "127.0.0.1:5000/vllm-matrix/cpu:0.32.0"
    assert plan_.targets == (hash_ref, version_ref)
    fake = _FakeRegistry()
    result = push.execute_push(plan_, fake, keep_tags=False)
    assert fake.calls == [
        ("tag", f"vllm-matrix/cpu:{h}", hash_ref),
        ("tag", f"vllm-matrix/cpu:{h}", version_ref),
        ("push", hash_ref),
        ("push", version_ref),
        ("untag", hash_ref),
        ("untag", version_ref),
    ]
    assert result.digest == DIGEST and result.refs == (hash_ref, version_ref)


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
    with pytest.raises(ConfigError, match=r"base_images\.debian:12: digest 'md5:x'"):
        pin.read_lock(path)
    path.write_text("{")
    with pytest.raises(ConfigError, match="not valid JSON"):
        pin.read_lock(path)


def test_pin_resolves_every_ref_or_raises() -> None:
    old = pin.Lock(base_images={"keep:1": DIGEST})
    new = pin.pin(["debian:bookworm-slim"], lock=old, resolve=lambda ref: "sha256:" + "11" * 32)
    assert new.base_images == {"keep:1": DIGEST, "debian:bookworm-slim": "sha256:" + "11" * 32}
    with pytest.raises(RegistryError, match=r"registry docker\.io has no debian:nope"):
        pin.pin(["debian:nope"], lock=old, resolve=lambda ref: None)


def test_pin_cli_leaves_the_lock_unchanged_when_the_registry_is_unreachable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text((Path(__file__).parents[3] / "matrix.yaml").read_text())
    lock = tmp_path / "matrix.lock.json"
    lock.write_text(pin.lock_text(pin.Lock(base_images={"debian:bookworm-slim": DIGEST})))
    before = lock.read_bytes()

    def unreachable(ref: str) -> str | None:
        raise RegistryError(
            f"registry registry-1.docker.io is unreachable (x) while looking up {ref}",
            registry="registry-1.docker.io",
            ref=ref,
        )

    monkeypatch.setattr(registry.EngineRegistry, "digest", lambda self, ref: unreachable(ref))
    monkeypatch.setattr(engine, "connect", lambda: cast(docker.DockerClient, None))
    result = CliRunner().invoke(main, ["--matrix", str(matrix), "pin", "cpu"], catch_exceptions=False)
    assert result.exit_code == ExitCode.REGISTRY
    assert "registry-1.docker.io" in result.output and "debian:bookworm-slim" in result.output
    assert f"{lock} left unchanged" in result.output
    assert lock.read_bytes() == before

    monkeypatch.setattr(registry.EngineRegistry, "digest", lambda self, ref: "sha256:" + "22" * 32)
    result = CliRunner().invoke(main, ["--matrix", str(matrix), "pin", "cpu"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert pin.read_lock(lock).digest("debian:bookworm-slim") == "sha256:" + "22" * 32


# --- bake without an engine or a reachable index ----------------------------------------------------------
@pytest.mark.subprocess
def test_bake_works_offline_and_warns_about_what_it_could_not_check(tmp_path: Path) -> None:
    """The autouse guard makes the engine unreachable; the index is a closed loopback port."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{s.getsockname()[1]}/simple"
    data = yaml.safe_load((REPO_ROOT / "matrix.yaml").read_text())
    data["variants"]["rocm"]["index"] = {"url": closed, "wheelhouse": False}
    matrix = copy_checkout(tmp_path / "checkout", yaml.safe_dump(data, sort_keys=False))
    runner = CliRunner()
    assert runner.invoke(main, ["--matrix", str(matrix), "render"]).exit_code == 0
    out = tmp_path / "out"
    result = runner.invoke(main, ["--matrix", str(matrix), "--out", str(out), "bake", "rocm"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert f"warning: rocm: package index {closed} does not answer" in result.output
    assert "warning: no Docker engine" in result.output and "base images were not checked" in result.output
    doc = json.loads((out / "docker-bake.json").read_text())
    target = doc["target"]["rocm-amd64"]
    assert target["args"] == {"BASE_IMAGE": "rocm/dev-ubuntu-24.04:7.2.1-complete"}  # the ref as named
    assert target["cache-to"] == ["type=inline"]
    assert (Path(target["context"]) / "Dockerfile").is_file()


def test_content_hash_of_an_unchecked_base_is_stable_and_differs_from_a_looked_up_one() -> None:
    unchecked = _plan(base_image_id=None)
    assert unchecked.content_hash == _plan(base_image_id=None).content_hash
    assert unchecked.content_hash != _plan().content_hash


def test_push_of_an_image_already_published_moves_only_a_stale_version_tag() -> None:
    """CI's image job skipped the build (`build --registry` found the content-hash tag); push reports the image
    for the manifest job, pulling and re-pushing it only where the version tag names another image."""
    p = _plan()
    plan_ = push.plan_push(p, registry="127.0.0.1:5000")
    hash_ref, version_ref = plan_.targets
    pulled: list[tuple[str, Platform]] = []
    fake = _FakeRegistry()  # the version tag names DIGEST
    result = push.ensure_published(plan_, DIGEST, fake, lambda ref, platform: pulled.append((ref, platform)))
    assert fake.calls == [("digest", version_ref)] and pulled == []
    assert result.refs == (hash_ref, version_ref) and result.digest == DIGEST and str(result.platform) == "linux/amd64"

    other = "sha256:" + "cd" * 32  # the hash tag's image; the version tag still names an older one
    fake = _FakeRegistry()
    result = push.ensure_published(
        plan_, other, fake, lambda ref, platform: pulled.append((ref, platform)), keep_tags=False
    )
    assert pulled == [(hash_ref, Platform.parse("linux/amd64"))]
    assert fake.calls == [
        ("digest", version_ref),
        ("tag", hash_ref, version_ref),
        ("push", version_ref),
        ("untag", version_ref),
    ]
    assert result.digest == other
