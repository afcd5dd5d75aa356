"""The registry build cache and the multi-arch manifest lists, as values (issue 13)."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from matrixtool.build import cache
from matrixtool.build.plan import BuildPlan, build_spec, buildx_argv
from matrixtool.cli import main
from matrixtool.core.errors import ConfigError, ExitCode, RegistryError
from matrixtool.model.matrixfile import load_matrix
from matrixtool.model.model import Platform
from matrixtool.publish import manifest
from tests.unit.build.test_plan import _plan

VARIANTS = load_matrix().variants
DIGEST_A = "sha256:" + "a" * 64
DIGEST_B = "sha256:" + "b" * 64


def _settings(driver: str, write: bool = True) -> cache.CacheSettings:
    return cache.CacheSettings(registry="127.0.0.1:5000/team", write=write, driver=driver)


def test_cache_ref_is_per_variant_and_platform() -> None:
    plan = _plan()
    assert cache.cache_ref(plan, "127.0.0.1:5000/team") == "127.0.0.1:5000/team/vllm-matrix/cpu:buildcache-amd64"
    arm = replace(plan, platform=Platform.parse("linux/arm64"))
    assert cache.cache_ref(arm, "ghcr.io/o").endswith(":buildcache-arm64")


def test_an_exporting_builder_writes_mode_max_to_the_registry() -> None:
    plan = cache.apply(_plan(base_local="debian:bookworm-slim-amd64"), _settings("docker-container"))
    ref = "127.0.0.1:5000/team/vllm-matrix/cpu:buildcache-amd64"
    assert plan.cache_from == (f"type=registry,ref={ref}",)
    assert plan.cache_to == (f"type=registry,ref={ref},mode=max",)
    argv = buildx_argv(build_spec(plan, context_dir=Path("/ctx")), iidfile=Path("/iid"))
    assert argv[argv.index("--cache-from") + 1] == f"type=registry,ref={ref}"
    assert argv[argv.index("--cache-to") + 1] == f"type=registry,ref={ref},mode=max"
    # That builder does not see the engine's local tags: the base is the matrix's registry ref.
    assert plan.build_args["BASE_IMAGE"] == "debian:bookworm-slim"
    assert cache.export_steps(plan, _settings("docker-container")) == []
    read_only = cache.apply(_plan(), _settings("docker-container", write=False))
    assert read_only.cache_to == () and read_only.cache_from == plan.cache_from


def test_the_docker_driver_embeds_the_cache_and_pushes_it_as_the_cache_ref() -> None:
    settings = _settings("docker")
    plan = cache.apply(_plan(base_local="debian:bookworm-slim-amd64"), settings)
    ref = "127.0.0.1:5000/team/vllm-matrix/cpu:buildcache-amd64"
    assert plan.cache_to == ("type=inline",) and plan.cache_from == (f"type=registry,ref={ref}",)
    assert plan.build_args["BASE_IMAGE"] == "debian:bookworm-slim-amd64"  # the engine's builder sees local tags
    assert cache.export_steps(plan, settings) == [
        ["docker", "tag", plan.hash_ref, ref],
        ["docker", "push", ref],
        ["docker", "rmi", ref],
    ]
    assert cache.export_steps(plan, _settings("docker", write=False)) == []


def test_the_cache_is_no_build_input() -> None:
    plain = _plan()
    assert cache.apply(plain, _settings("docker")).content_hash == plain.content_hash


@pytest.mark.subprocess
def test_builder_driver_reads_buildx_inspect() -> None:
    script = ["sh", "-c", "printf 'Name: b\\nDriver:   docker-container\\nNodes:\\n'"]
    assert cache.builder_driver(script) == "docker-container"
    assert cache.builder_driver(["true"]) == "docker"


def _record(variant: str, platform: str, repo: str, digest: str) -> manifest.Pushed:
    return manifest.Pushed(
        variant=variant, platform=Platform.parse(platform), ref=f"127.0.0.1:5000/{repo}:0123456789abcdef", digest=digest
    )


def test_cpu_and_arm64_make_one_list_under_cpu() -> None:
    pushed = [
        _record("cpu", "linux/amd64", "vllm-matrix/cpu", DIGEST_A),
        _record("arm64", "linux/arm64", "vllm-matrix/arm64", DIGEST_B),
    ]
    (plan,) = manifest.plan_manifests(VARIANTS, pushed, registry="127.0.0.1:5000", repository="vllm-matrix")
    assert plan.name == "cpu" and plan.platforms == (Platform("linux", "amd64"), Platform("linux", "arm64"))
    assert plan.argv() == [
        "docker", "buildx", "imagetools", "create",
        "--tag", "127.0.0.1:5000/vllm-matrix/cpu:0.32.0",
        f"127.0.0.1:5000/vllm-matrix/cpu@{DIGEST_A}",
        f"127.0.0.1:5000/vllm-matrix/arm64@{DIGEST_B}",
    ]  # fmt: skip


def test_a_list_needs_every_platform_pushed() -> None:
    pushed = [_record("cpu", "linux/amd64", "vllm-matrix/cpu", DIGEST_A)]
    with pytest.raises(RegistryError, match=r"no pushed image of arm64 \(linux/arm64\)"):
        manifest.plan_manifests(VARIANTS, pushed, registry="127.0.0.1:5000", repository="vllm-matrix")


def test_single_platform_names_need_no_list() -> None:
    # rocm publishes linux/amd64 alone (cuda now lists cuda-arm64 too: publish_as).
    pushed = [_record("rocm", "linux/amd64", "vllm-matrix/rocm", DIGEST_A)]
    assert manifest.plan_manifests(VARIANTS, pushed, registry="127.0.0.1:5000", repository="vllm-matrix") == []


def test_members_must_pin_one_vllm_version() -> None:
    variants = [replace(v, vllm=replace(v.vllm, version="0.32.1")) if v.name == "arm64" else v for v in VARIANTS]
    pushed = [
        _record("cpu", "linux/amd64", "vllm-matrix/cpu", DIGEST_A),
        _record("arm64", "linux/arm64", "vllm-matrix/arm64", DIGEST_B),
    ]
    with pytest.raises(ConfigError, match=r"pin vLLM 0\.32\.0 and 0\.32\.1"):
        manifest.plan_manifests(variants, pushed, registry="127.0.0.1:5000", repository="vllm-matrix")


def test_by_digest_keeps_a_registry_port() -> None:
    record = manifest.Pushed(
        variant="cpu", platform=Platform("linux", "amd64"), ref="127.0.0.1:5000/x", digest=DIGEST_A
    )
    assert record.by_digest == f"127.0.0.1:5000/x@{DIGEST_A}"


def test_manifest_command_rejects_a_file_that_is_no_push_record(tmp_path: Path) -> None:
    bad = tmp_path / "pushed.json"
    bad.write_text(json.dumps({"builds": []}))
    result = CliRunner().invoke(main, ["manifest", str(bad), "--registry", "r:5000"], catch_exceptions=False)
    assert result.exit_code == ExitCode.CONFIG and "not a 'tools/matrix push --json' document" in result.output


def test_plan_argv_without_cache_has_no_cache_flags() -> None:
    plan: BuildPlan = _plan()
    assert "--cache-from" not in buildx_argv(build_spec(plan, context_dir=Path("/c")), iidfile=Path("/i"))


@pytest.mark.parametrize(
    ("ref", "digest", "platform", "says"),
    [
        ("docker.io/evil/cpu:0123456789abcdef", DIGEST_A, "linux/amd64", "is not 127.0.0.1:5000/vllm-matrix/cpu:<tag>"),
        ("127.0.0.1:5000/other/cpu:0123456789abcdef", DIGEST_A, "linux/amd64", "is not 127.0.0.1:5000/"),
        ("--output=/etc/passwd", DIGEST_A, "linux/amd64", "is not 127.0.0.1:5000/"),
        ("127.0.0.1:5000/vllm-matrix/cpu:--push", DIGEST_A, "linux/amd64", "is not 127.0.0.1:5000/"),
        ("127.0.0.1:5000/vllm-matrix/cpu:0123456789abcdef", "--tag=x", "linux/amd64", "is not sha256:<64"),
        ("127.0.0.1:5000/vllm-matrix/cpu:0123456789abcdef", "sha256:ABC", "linux/amd64", "is not sha256:<64"),
        ("127.0.0.1:5000/vllm-matrix/cpu:0123456789abcdef", "", "linux/amd64", "is not sha256:<64"),
        ("127.0.0.1:5000/vllm-matrix/cpu:0123456789abcdef", DIGEST_A, "linux/s390x", "is not one of cpu's"),
    ],
)
def test_push_records_are_inputs_checked_before_imagetools(ref: str, digest: str, platform: str, says: str) -> None:
    pushed = [
        manifest.Pushed(variant="cpu", platform=Platform.parse(platform), ref=ref, digest=digest),
        _record("arm64", "linux/arm64", "vllm-matrix/arm64", DIGEST_B),
    ]
    with pytest.raises(ConfigError, match=re.escape(says)) as caught:
        manifest.plan_manifests(VARIANTS, pushed, registry="127.0.0.1:5000", repository="vllm-matrix")
    assert caught.value.exit_code == ExitCode.CONFIG
