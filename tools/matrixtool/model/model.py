"""The matrix as frozen values: variants, their platforms, pins, checks and profiles (``matrixfile`` reads
``matrix.yaml`` into them)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

from matrixtool.incontainer.vllm_smoke.declarations import Accelerator
from matrixtool.model.cpufloor import CpuFloor
from matrixtool.model.profiles import Profile

__all__ = [
    "DEFAULT_MATRIX",
    "REPO_ROOT",
    "TEMPLATES_DIR_NAME",
    "CheckSpec",
    "IndexSettings",
    "Matrix",
    "PackagePin",
    "Platform",
    "TritonState",
    "Variant",
]

# The checkout this package runs from (tools/matrixtool/ -> the repository root); meaningless once the
# package is installed from a wheel, where DEFAULT_MATRIX falls back to ./matrix.yaml.
REPO_ROOT = Path(__file__).resolve().parents[3]
# Templates are the checkout's, next to its matrix file (like images/, which is written there).
TEMPLATES_DIR_NAME = "templates"
DEFAULT_MATRIX = REPO_ROOT / "matrix.yaml" if (REPO_ROOT / "matrix.yaml").is_file() else Path("matrix.yaml")


class TritonState(str, Enum):
    """What a variant promises about Triton inside its image.

    ``absent``: no distribution provides ``triton`` (CPU and Arm: vllm#14888 says vLLM must work).
    ``present-unused``: installed, but vLLM cannot use it on this accelerator (``HAS_TRITON`` False).
    ``required``: installed at the version torch pins, the only distribution providing ``triton``.
    Source: docs/failure-classes.md classes 1-5.
    """

    ABSENT = "absent"
    PRESENT_UNUSED = "present-unused"
    REQUIRED = "required"


_PLATFORM = re.compile(r"(?P<os>[^/]+)/(?P<arch>[^/]+)(?:/(?P<variant>[^/]+))?")


@dataclass(frozen=True, order=True)
class Platform:
    """An OCI platform: ``os``/``arch``[/``variant``]; ``str()`` gives the form BuildKit, the engine and
    matrix.yaml use."""

    os: str
    arch: str
    variant: str = ""

    @classmethod
    def parse(cls, text: str) -> Platform:
        """Raises ValueError: not two or three non-empty ``/``-separated parts."""
        match = _PLATFORM.fullmatch(text)
        if match is None:
            raise ValueError(f"{text!r} is not an OS/ARCH[/VARIANT] platform")
        return cls(match["os"], match["arch"], match["variant"] or "")

    def __str__(self) -> str:
        return "/".join(p for p in (self.os, self.arch, self.variant) if p)


@dataclass(frozen=True, kw_only=True)
class PackagePin:
    """A distribution name and exact version, e.g. ``torch`` ``2.13.0+cpu``."""

    package: str
    version: str

    @property
    def requirement(self) -> str:
        """The PEP 508 requirement ``package==version``."""
        return f"{self.package}=={self.version}"


@dataclass(frozen=True, kw_only=True)
class IndexSettings:
    """Where the installer finds packages (``index`` in matrix.yaml)."""

    url: str
    extra_urls: tuple[str, ...] = ()
    wheelhouse: bool = False
    exclude: tuple[str, ...] = ()
    overrides: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class CheckSpec:
    """One smoke check enabled for a variant; ``timeout`` in seconds."""

    name: str
    timeout: int


@dataclass(frozen=True, kw_only=True)
class Variant:
    """One image variant of the matrix (a key under ``variants:``)."""

    name: str
    description: str
    accelerator: Accelerator
    platforms: tuple[Platform, ...]
    base_image: str
    stand_in_suite: str | None
    python: str
    # The Python of the stand-in suite when it differs from ``python`` (matrix.yaml stand_in.python).
    stand_in_python: str | None
    torch: PackagePin
    vllm: PackagePin
    dist_alias: PackagePin | None
    triton: TritonState
    triton_distribution: str
    # Which torch build the image carries (default: the accelerator's); torch-family checks it.
    torch_build: Accelerator
    env: Mapping[str, str]
    index: IndexSettings
    runner: tuple[str, ...]
    checks: tuple[CheckSpec, ...]
    # Files two distributions may both install (matrix.yaml smoke.accept_clashes; pip-check lists them).
    accept_clashes: tuple[str, ...] = ()
    # Deployment profiles (top-level `profiles` merged with the variant's own); `default` first.
    profiles: tuple[Profile, ...] = (Profile(name="default"),)
    # The largest image size allowed, in bytes, and as matrix.yaml writes it (size_budget; None: no budget).
    size_budget: int | None = None
    size_budget_text: str | None = None
    # Why this CPU variant carries CUDA weight on purpose (matrix.yaml hygiene.cuda_weight; cuda-weight shows it).
    cuda_weight_reason: str | None = None
    # The serve check: the longest time to ready allowed, in seconds (ready_budget; None: no budget), and the
    # grace of `docker stop` (stop_grace, seconds; None: a Kubernetes pod's 30).
    ready_budget_s: float | None = None
    stop_grace_s: int | None = None
    # The GPU architectures the variant is for (matrix.yaml gpu_archs: sm_90, gfx942; empty on CPU variants).
    gpu_archs: tuple[str, ...] = ()
    # vLLM's optional features promised beyond the accelerator's defaults, and those left out with the reason
    # (matrix.yaml features.promise / features.leave_out; the features check proves both).
    features_promise: tuple[str, ...] = ()
    features_leave_out: Mapping[str, str] = field(default_factory=dict)
    # The oldest CPU the variant supports (matrix.yaml cpu_floor, else its architecture's default for a cpu
    # variant; None: a GPU variant without one) and the QEMU CPU model the cpu-floor check proves it on.
    cpu_floor: CpuFloor | None = None

    # The variant whose name this one is published under, as one multi-arch manifest list (matrix.yaml
    # publish_as); None: published under its own name.
    publish_as: str | None = None

    def profile(self, name: str) -> Profile | None:
        """The deployment profile called ``name``, or None."""
        return next((p for p in self.profiles if p.name == name), None)

    @property
    def publish_name(self) -> str:
        """The name of the published (multi-arch) image: ``publish_as``, else the variant's own name."""
        return self.publish_as or self.name


@dataclass(frozen=True, kw_only=True)
class Matrix:
    """The validated matrix: ``variants`` in file order, ``source`` the file it came from."""

    schema_version: int
    variants: tuple[Variant, ...]
    source: Path = field(default=DEFAULT_MATRIX)

    def names(self) -> list[str]:
        """Variant names in file order."""
        return [v.name for v in self.variants]

    @property
    def root(self) -> Path:
        """The folder of the matrix file: ``images/`` is written and ``templates/`` read there."""
        return self.source.parent

    @property
    def templates_dir(self) -> Path:
        """``templates/`` next to the matrix file."""
        return self.root / TEMPLATES_DIR_NAME
