"""The oldest CPU a variant supports (matrix.yaml ``cpu_floor``): a level of its architecture or a named CPU model,
and the QEMU user-mode CPU model (``qemu-x86_64 -cpu MODEL``, ``qemu-aarch64 -cpu MODEL``) the cpu-floor check
emulates it with.

x86-64 levels are the psABI's microarchitecture levels (x86-64 psABI 1.0, section 3.1.1: ``x86-64`` is the
baseline, ``-v2`` adds SSE4.2/POPCNT, ``-v3`` AVX2/FMA/BMI2, ``-v4`` AVX-512F/BW/CD/DQ/VL). arm64 levels are Arm
architecture versions, each with the features of the Arm server CPU named for it. Each level maps to the oldest
QEMU CPU model that has its features (QEMU 10.0 ``-cpu help``); a named model is taken as it is.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["DEFAULTS", "LEVELS", "MODELS", "CpuFloor", "floor_problem", "resolve"]

# level -> (QEMU CPU model, what the level carries), per Docker platform architecture.
LEVELS: Mapping[str, Mapping[str, tuple[str, str]]] = {
    "amd64": {
        "x86-64": ("qemu64", "SSE2 (the x86-64 baseline)"),
        "x86-64-v2": ("Nehalem", "SSE4.2, SSSE3, POPCNT, CMPXCHG16B (Nehalem, 2008)"),
        "x86-64-v3": ("Haswell-noTSX", "AVX2, FMA, BMI1/2, F16C, MOVBE (Haswell, 2013; Zen 1)"),
        "x86-64-v4": ("Skylake-Server-noTSX-IBRS", "AVX-512F/BW/CD/DQ/VL (Skylake-SP, 2017; Zen 4)"),
    },
    "arm64": {
        "armv8.0-a": ("cortex-a72", "armv8.0-a with CRC and crypto (Graviton 1, Cortex-A72)"),
        "armv8.2-a": ("neoverse-n1", "armv8.2-a with dotprod, fp16, LSE atomics (Graviton 2, Ampere Altra)"),
        "armv8.4-a": ("neoverse-v1", "armv8.4-a with SVE (256-bit), bf16, i8mm (Graviton 3)"),
        "armv9.0-a": ("neoverse-n2", "armv9.0-a with SVE2 (128-bit), bf16, i8mm (Graviton 4, Cobalt 100)"),
    },
}
# Named QEMU CPU models a floor may give instead of a level (a subset of ``qemu-{arch} -cpu help``: the server CPUs
# a fleet holds), per architecture.
_AMD64_MODELS = """qemu64 Nehalem Westmere SandyBridge IvyBridge Haswell Haswell-noTSX Broadwell Broadwell-noTSX
Skylake-Client Skylake-Server Skylake-Server-noTSX-IBRS Cascadelake-Server Icelake-Server SapphireRapids EPYC
EPYC-Rome EPYC-Milan EPYC-Genoa"""
MODELS: Mapping[str, frozenset[str]] = {
    "amd64": frozenset(_AMD64_MODELS.split()),
    "arm64": frozenset({"cortex-a57", "cortex-a72", "neoverse-n1", "neoverse-v1", "neoverse-n2", "a64fx"}),
}
# The floor a cpu variant gets without a cpu_floor: x86-64-v3, the oldest level vLLM's CPU wheel has a build of
# its extension for (vllm/_C_AVX2.abi3.so; vllm/platforms/cpu.py import_kernels); armv8.2-a (Graviton 2, Ampere
# Altra: the oldest Arm server CPUs the clouds rent, and vLLM's arm64 CPU build's baseline).
DEFAULTS: Mapping[str, str] = {"amd64": "x86-64-v3", "arm64": "armv8.2-a"}
# QEMU's TCG emulates no AVX-512 (QEMU 10.0: "TCG doesn't support requested feature ... avx512f"): a floor with
# it cannot be proven by emulation.
NOT_EMULATED = frozenset({"x86-64-v4", "Skylake-Server", "Skylake-Server-noTSX-IBRS", "Cascadelake-Server",
                          "Icelake-Server", "SapphireRapids", "EPYC-Genoa"})  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class CpuFloor:
    """A variant's CPU floor: ``name`` as matrix.yaml gives it (or the default), ``model`` the QEMU CPU model that
    emulates it, ``arch`` the Docker architecture (amd64, arm64), ``declared`` False where it is the default,
    ``emulated`` False where QEMU cannot emulate it (AVX-512)."""

    name: str
    model: str
    arch: str
    declared: bool
    emulated: bool

    @property
    def qemu(self) -> str:
        """The QEMU user-mode emulator's program name for the architecture."""
        return "qemu-x86_64" if self.arch == "amd64" else "qemu-aarch64"


def _choices(arch: str) -> str:
    return f"a level ({', '.join(LEVELS[arch])}) or a QEMU CPU model ({', '.join(sorted(MODELS[arch]))})"


def floor_problem(value: object, archs: list[str]) -> str | None:
    """Why ``value`` (matrix.yaml ``cpu_floor``) is no floor for a variant of the architectures ``archs`` (amd64,
    arm64), with the values it may take; None when it is one."""
    known = [a for a in archs if a in LEVELS]
    if not known:
        return f"{value!r}: the variant's platforms ({', '.join(archs)}) have no CPU floor this tool can prove"
    if len(set(known)) > 1:
        return f"{value!r}: one floor cannot fit {' and '.join(sorted(set(known)))}; split the variant per platform"
    arch = known[0]
    if not isinstance(value, str) or not (value in LEVELS[arch] or value in MODELS[arch]):
        other = next((a for a in LEVELS if a != arch and (value in LEVELS[a] or value in MODELS[a])), None)
        about = f" is an {other} floor, but the variant is {arch}" if other else f" is no {arch} CPU floor"
        return f"{value!r}{about}: give {_choices(arch)}"
    return None


def resolve(declared: str | None, archs: list[str], accelerator: str) -> CpuFloor | None:
    """The floor of a variant (``declared``: its valid ``cpu_floor``, or None) of ``archs``: the default of its
    architecture for a cpu variant without one, None for a GPU variant without one (its generation runs on the
    GPU: no CPU path to prove)."""
    arch = next((a for a in archs if a in LEVELS), None)
    if arch is None or (declared is None and accelerator != "cpu"):
        return None
    name = declared or DEFAULTS[arch]
    model = LEVELS[arch][name][0] if name in LEVELS[arch] else name
    return CpuFloor(name=name, model=model, arch=arch, declared=declared is not None, emulated=name not in NOT_EMULATED)
