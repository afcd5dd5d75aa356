"""The one rule that makes a variant's version an image tag (``reference.version_tag``), and every command that names
a version tag going through it: a local version label (``+rocm721``) never reaches a reference, where the OCI grammar
forbids ``+``."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from matrixtool.build import render
from matrixtool.cli import main
from matrixtool.core.errors import ConfigError
from matrixtool.model import reference
from matrixtool.model.matrixfile import load_matrix
from matrixtool.model.model import PackagePin, Platform
from matrixtool.publish import manifest
from tests.unit.build.test_plan import flat_plan

VARIANTS = load_matrix().variants
DIGEST_A, DIGEST_B = "sha256:" + "a" * 64, "sha256:" + "b" * 64


@pytest.mark.parametrize(
    ("version", "tag"),
    [
        ("0.32.0", "0.32.0"),
        ("0.33.0+rocm721", "0.33.0-rocm721"),
        ("2.13.0+cpu", "2.13.0-cpu"),
        ("0.33.0+cu130", "0.33.0-cu130"),
        ("0.33.0+Git.ABC_1", "0.33.0-git.abc.1"),  # PEP 440's normal form first: one version, one tag
        ("1!0.33.0", "1_0.33.0"),
        ("0.33.0rc1.post2.dev3+x", "0.33.0rc1.post2.dev3-x"),
    ],
)
def test_a_version_becomes_a_tag_by_one_rule(version: str, tag: str) -> None:
    assert reference.version_tag(version) == tag
    assert reference.image_problem(f"vllm-matrix/rocm:{tag}") is None
    if "+" in version or "!" in version:
        assert reference.image_problem(f"vllm-matrix/rocm:{version}") is not None, "the version itself is no tag"


def test_distinct_versions_never_share_a_tag() -> None:
    versions = ["0.33.0", "0.33.0+rocm721", "0.33.0+rocm72.1", "0.33.0.post1", "1!0.33.0", "0.33.0+rocm7.21", "0.33.1"]
    tags = [reference.version_tag(v) for v in versions]
    assert len(set(tags)) == len(versions), tags


def test_a_version_whose_tag_is_over_128_characters_is_a_config_error_naming_the_key() -> None:
    with pytest.raises(ConfigError, match=r"vllm.version: the image tag .* holds at most 128"):
        reference.version_tag("0.33.0+" + "a" * 130)
    with pytest.raises(ConfigError, match=r"vllm.version: 'x' is not a PEP 440 version"):
        reference.version_tag("x")


def _with_version(name: str, version: str):  # type: ignore[no-untyped-def]
    variant = next(v for v in VARIANTS if v.name == name)
    return dataclasses.replace(variant, vllm=PackagePin(package=variant.vllm.package, version=version))


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: v.name)
def test_build_bake_and_push_tag_every_variant_with_a_valid_reference(variant) -> None:  # type: ignore[no-untyped-def]
    """``build``, ``bake`` and ``push`` take their tags from the plan (``BuildPlan.refs``); before, the rocm variant's
    was ``vllm-matrix/rocm:0.33.0+rocm721``, which ``docker tag`` refuses."""
    p = flat_plan(
        variant, platform=variant.platforms[0], files=tuple(render.render_variant(variant)), base_image_id="x"
    )
    for ref in p.refs:
        assert reference.image_problem(ref) is None, ref
    assert p.refs[1].endswith(":" + reference.version_tag(variant.vllm.version))
    assert p.labels["org.opencontainers.image.version"] == variant.vllm.version, "the label keeps the version"


def test_the_rocm_variants_tag_is_its_version_with_the_label_after_a_dash() -> None:
    rocm = next(v for v in VARIANTS if v.name == "rocm")
    p = flat_plan(rocm, platform=rocm.platforms[0], files=tuple(render.render_variant(rocm)), base_image_id="x")
    assert p.refs[1] == "vllm-matrix/rocm:0.33.0-rocm721"


def test_manifest_tags_a_stack_by_the_rule() -> None:
    variants = [_with_version("cpu", "0.32.0+cpu"), _with_version("arm64", "0.32.0+cpu")]
    pushed = [
        manifest.Pushed(
            variant=v, platform=Platform.parse(p), ref=f"127.0.0.1:5000/vllm-matrix/{v}:0123456789abcdef", digest=d
        )
        for v, p, d in (("cpu", "linux/amd64", DIGEST_A), ("arm64", "linux/arm64", DIGEST_B))
    ]
    (plan,) = manifest.plan_manifests(variants, pushed, registry="127.0.0.1:5000", repository="vllm-matrix")
    assert plan.tags == ("127.0.0.1:5000/vllm-matrix/cpu:0.32.0-cpu",)


def test_kube_names_the_rocm_image_by_the_rule_and_never_writes_a_plus(tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["--out", str(out), "kube", "rocm"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    for path in sorted((out / "kube").glob("rocm.*.yaml")):
        (deployment, *_) = yaml.safe_load_all(path.read_text())
        (container,) = deployment["spec"]["template"]["spec"]["containers"]
        assert container["image"] == "vllm-matrix/rocm:0.33.0-rocm721", path
        assert reference.image_problem(container["image"]) is None


def test_a_base_image_whose_registry_port_is_out_of_range_is_refused_when_the_matrix_loads(tmp_path: Path) -> None:
    """``base_image`` goes through the reference rule of every image reference: its port too (before: taken)."""
    text = (Path(__file__).resolve().parents[3] / "matrix.yaml").read_text()
    assert "base_image: debian:bookworm-slim" in text
    path = tmp_path / "matrix.yaml"
    path.write_text(text.replace("base_image: debian:bookworm-slim", "base_image: localhost:99999/debian:12", 1))
    with pytest.raises(ConfigError, match="has port 99999, outside 1-65535"):
        load_matrix(path)


def test_the_workflows_name_images_by_the_tools_tags_never_by_a_version() -> None:
    """The workflows take every image name from the tool (``run --json-file``'s ``builds[].image``, ``push --json``);
    a literal one they write is a valid reference, and none is made of a version (``${{ ... version ... }}``)."""
    workflows = sorted((Path(__file__).resolve().parents[3] / ".github" / "workflows").glob("*.yml"))
    assert workflows
    for path in workflows:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#", 1)[0]
            for ref in re.findall(r"[\w.:/-]*vllm-matrix/[^\s\"')]+", code):
                assert "version" not in ref.lower() and "${" not in ref, f"{path.name}:{number}: {ref}"
                assert reference.image_problem(ref) is None, f"{path.name}:{number}: {ref}"
