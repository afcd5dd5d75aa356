"""GPU images without a GPU: how the image finds the host's driver (class 23).

What the files and settings of the image show: whether Triton can locate ``libcuda.so.1``, whether a
forward-compatibility ``libcuda`` shadows the host's driver, and whether the CUDA version the image declares to
the NVIDIA container runtime covers what its torch was built for.
"""

from __future__ import annotations

import glob
import os
import re
from typing import Any, Dict, Mapping

from .children import run_python
from .declarations import VLLM_REPO, check
from .installed import dist_version
from .results import result

# Where Triton's NVIDIA backend asks for libcuda (triton/backends/nvidia/driver.py, libcuda_dirs(): the
# environment variable first, else the output of `/sbin/ldconfig -p`, a fixed path).
LDCONFIG = "/sbin/ldconfig"
LIBCUDA_ENV = "TRITON_LIBCUDA_PATH"
# The folders of NVIDIA's forward-compatibility driver libraries (the cuda-compat package).
_COMPAT = re.compile(r"/cuda[^/]*/compat/?$|/compat/lib")


def ld_conf_dirs(root: str = "/etc/ld.so.conf") -> Any:
    """The folders ld.so.conf names, in the order the dynamic loader's cache searches them (``include`` globs
    expanded in name order, as ldconfig does); files that cannot be read are left out."""
    found = []

    def read(path: str, depth: int) -> None:
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                lines = f.read().splitlines()
        except OSError:
            return
        for line in lines:
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            if line.startswith("include ") and depth < 4:
                pattern = line.split(None, 1)[1]
                if not os.path.isabs(pattern):
                    pattern = os.path.join(os.path.dirname(path), pattern)
                for name in sorted(glob.glob(pattern)):
                    read(name, depth + 1)
            elif line.startswith("/"):
                found.append(line)

    read(root, 0)
    return found


def compat_shadows(ld_library_path: Any, conf_dirs: Any, exists: Any = os.path.exists) -> Any:
    """The forward-compat folder whose ``libcuda.so.1`` the loader takes first, as ``[(folder, where)]`` (``where``
    names the setting), else ``[]``. The loader's order: ``LD_LIBRARY_PATH``, then ld.so.conf's folders (ldconfig
    caches them in that order); the first folder holding a ``libcuda.so.1`` wins, so a compat folder behind the
    host driver's (``/usr/local/nvidia/lib64`` on LD_LIBRARY_PATH, seen on an H200 host) shadows nothing.
    Pure but for ``exists``."""
    for where, dirs in (
        ("LD_LIBRARY_PATH", [d for d in (ld_library_path or "").split(":") if d]),
        ("ld.so.conf", conf_dirs),
    ):
        for folder in dirs:
            if exists(os.path.join(folder, "libcuda.so.1")):
                return [(folder, where)] if _COMPAT.search(folder.rstrip("/") + "/") else []
    return []


def driver_of(folder: str, realpath: Any = os.path.realpath) -> Any:
    """The driver version a folder's ``libcuda.so.1`` belongs to (``libcuda.so.535.261.03`` -> ``535.261.03``),
    or None where its name carries none."""
    m = re.match(
        r"libcuda\.so\.(\d+\.\d+(?:\.\d+)?)$", os.path.basename(realpath(os.path.join(folder, "libcuda.so.1")))
    )
    return m.group(1) if m else None


def declared_cuda(env: Mapping[str, str]) -> Any:
    """The CUDA version (major, minor) the image declares to the NVIDIA container runtime: ``NVIDIA_REQUIRE_CUDA``
    (``cuda>=12.8 brand=…``), else ``CUDA_VERSION`` (nvidia/cuda base images); with the variable's name, or None."""
    m = re.search(r"cuda>=\s*(\d+)\.(\d+)", env.get("NVIDIA_REQUIRE_CUDA", ""))
    if m:
        return (int(m.group(1)), int(m.group(2))), "NVIDIA_REQUIRE_CUDA"
    m = re.match(r"(\d+)\.(\d+)", env.get("CUDA_VERSION", ""))
    if m:
        return (int(m.group(1)), int(m.group(2))), "CUDA_VERSION"
    return None


def driver_findings(*, ldconfig: Any, libcuda_env: Any, compat: Any, declared: Any, torch_cuda: Any) -> Any:
    """(problems, fixes) of driver discovery from what the image shows: ``ldconfig`` whether /sbin/ldconfig is an
    executable, ``libcuda_env`` TRITON_LIBCUDA_PATH, ``compat`` (``compat_shadows``), ``declared``
    (``declared_cuda``), ``torch_cuda`` torch.version.cuda (None: a torch without CUDA). Pure."""
    problems, fixes = [], []
    if not ldconfig and not libcuda_env:
        problems.append(
            f"{LDCONFIG} is missing and {LIBCUDA_ENV} is unset: Triton finds libcuda.so.1 only through "
            f"`{LDCONFIG} -p` (triton/backends/nvidia/driver.py, libcuda_dirs()), so the first Triton kernel fails "
            f"with FileNotFoundError: '{LDCONFIG}'"
        )
        fixes.append(
            f"keep {LDCONFIG} in the image (Debian/Ubuntu: libc-bin), or set {LIBCUDA_ENV} to the folder the "
            "container runtime mounts the driver into (e.g. /usr/lib/x86_64-linux-gnu)"
        )
    if compat:
        drivers = {folder: driver_of(folder) for folder, _ in compat}
        shown = ", ".join(
            f"{folder} ({where}{', driver ' + drivers[folder] if drivers[folder] else ''})" for folder, where in compat
        )
        problems.append(
            f"a forward-compatibility libcuda.so.1 is first on the loader's path: {shown}; every process loads it "
            "instead of the host driver's, and CUDA fails where the two differ: `Error 803: system has unsupported "
            "display driver / cuda driver combination`, or torch's `The NVIDIA driver on your system is too old` "
            "where that libcuda is older than torch's CUDA"
        )
        fixes.append(
            "take the compat folder out of LD_LIBRARY_PATH and /etc/ld.so.conf.d (the container runtime mounts the "
            "host's libcuda); add it per deployment only on hosts whose driver is older than the image's CUDA"
        )
    if declared and torch_cuda:
        m = re.match(r"(\d+)\.(\d+)", str(torch_cuda))
        needed = (int(m.group(1)), int(m.group(2))) if m else None
        (have, variable) = declared
        if needed and have < needed:
            problems.append(
                f"the image declares CUDA {have[0]}.{have[1]} ({variable}) but torch is built for CUDA {torch_cuda}: "
                "the container runtime admits drivers too old for torch, which then fails at start with `The "
                "NVIDIA driver on your system is too old`"
            )
            fixes.append(
                f"build on a base image of CUDA {torch_cuda} or newer, or set NVIDIA_REQUIRE_CUDA=cuda>={torch_cuda}"
            )
    return problems, fixes


@check(
    "gpu-driver",
    proves=(
        "without a GPU: Triton can find libcuda.so.1 (/sbin/ldconfig or TRITON_LIBCUDA_PATH), no forward-compat "
        "libcuda shadows the host's driver, and the CUDA the image declares covers its torch's"
    ),
    classes=(23,),
    reports=(
        "https://github.com/NixOS/nixpkgs/issues/426296",
        "https://github.com/huggingface/kernels/issues/670",
        f"{VLLM_REPO}/issues/33447",
        "https://github.com/gpustack/gpustack/issues/4678",
    ),
    hint="keep /sbin/ldconfig (or set TRITON_LIBCUDA_PATH), keep cuda-compat off the loader's path, and declare "
    "the CUDA version torch is built for",
    timeout=120,
    accelerators=("cuda",),
    group="light",
)
def check_gpu_driver(params: Dict[str, Any]) -> Dict[str, Any]:
    env = dict(os.environ)
    ldconfig = os.access(LDCONFIG, os.X_OK)
    compat = compat_shadows(env.get("LD_LIBRARY_PATH"), ld_conf_dirs())
    declared = declared_cuda(env)
    torch_cuda = None
    if dist_version("torch") is not None:  # a child: this group does not import torch
        proc = run_python("import torch; print('MATRIX-CUDA', torch.version.cuda)", timeout=300)
        torch_cuda = next(
            (line.split()[1] for line in proc.stdout.splitlines() if line.startswith("MATRIX-CUDA ")), None
        )
        torch_cuda = None if torch_cuda in (None, "None") else torch_cuda
    facts = {
        "ldconfig": ldconfig,
        LIBCUDA_ENV: env.get(LIBCUDA_ENV),
        "compat": [list(c) for c in compat],
        "declared_cuda": ".".join(map(str, declared[0])) if declared else None,
        "declared_by": declared[1] if declared else None,
        "torch_cuda": torch_cuda,
    }
    problems, fixes = driver_findings(
        ldconfig=ldconfig, libcuda_env=env.get(LIBCUDA_ENV), compat=compat, declared=declared, torch_cuda=torch_cuda
    )
    if problems:
        return result("failed", "; ".join(problems), "; ".join(fixes), **facts)
    how = f"{LIBCUDA_ENV}={env[LIBCUDA_ENV]}" if env.get(LIBCUDA_ENV) else f"{LDCONFIG} -p"
    cuda = (
        f"; declares CUDA {facts['declared_cuda']} ({facts['declared_by']}), torch is built for {torch_cuda}"
        if declared and torch_cuda
        else ("; declares no CUDA version" if not declared else "; torch is no CUDA build")
    )
    return result("passed", f"Triton finds libcuda through {how}; no forward-compat libcuda on the path{cuda}", **facts)
