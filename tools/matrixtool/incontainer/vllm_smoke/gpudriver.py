"""GPU images without a GPU: how the image finds the host's driver (class 23).

What the files and settings of the image show: whether Triton can locate ``libcuda.so.1``, whether a
forward-compatibility ``libcuda`` shadows the host's driver, and whether the CUDA version the image declares to
the NVIDIA container runtime covers what its torch was built for.
"""

from __future__ import annotations

import glob
import os
import re
from typing import Any, Dict, Mapping, Optional, Tuple

from .children import run_python
from .declarations import VLLM_REPO, check
from .elf import elf_exports
from .installed import dist_version
from .results import result

# Where Triton's NVIDIA backend asks for libcuda (triton/backends/nvidia/driver.py, libcuda_dirs(): the
# environment variable first, else the output of `/sbin/ldconfig -p`, a fixed path).
LDCONFIG = "/sbin/ldconfig"
LIBCUDA_ENV = "TRITON_LIBCUDA_PATH"
# The folders of NVIDIA's forward-compatibility driver libraries (the cuda-compat package).
_COMPAT = re.compile(r"/cuda[^/]*/compat/?$|/compat/lib")
DRIVER_SONAME = "libcuda.so.1"
# The driver API that NVIDIA's libcuda.so.1 defines and its users call in it: torch through cudart (cuInit,
# cuDriverGetVersion, then every entry point by cuGetProcAddress) and Triton's NVIDIA launcher
# (triton/backends/nvidia/driver.c: cuModuleLoadData, cuModuleGetFunction, cuLaunchKernel, cuPointerGetAttribute).
# A file of that name without them is no driver: torch then reports "Found no NVIDIA driver on your system".
DRIVER_SYMBOLS = (
    "cuInit",
    "cuDriverGetVersion",
    "cuGetProcAddress",
    "cuDeviceGet",
    "cuModuleLoadData",
    "cuModuleGetFunction",
    "cuLaunchKernel",
    "cuPointerGetAttribute",
)
# Where Kubernetes' NVIDIA device plugins (GKE's) mount the host driver's libraries, found only through
# LD_LIBRARY_PATH: the nvidia/cuda base images set LD_LIBRARY_PATH=/usr/local/nvidia/lib:/usr/local/nvidia/lib64 for
# them; an image that sets LD_LIBRARY_PATH anew drops them. (The NVIDIA Container Toolkit mounts into the system
# folders and refreshes ld.so.cache instead.)
DRIVER_FOLDERS = ("/usr/local/nvidia/lib64", "/usr/local/nvidia/lib")
# The folders the loader searches after LD_LIBRARY_PATH and ld.so.cache's (ld.so's trusted folders, multiarch
# first as Debian and Ubuntu configure them).
SYSTEM_DIRS = (
    "/lib/x86_64-linux-gnu",
    "/usr/lib/x86_64-linux-gnu",
    "/lib/aarch64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/lib64",
    "/usr/lib64",
    "/lib",
    "/usr/lib",
)


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


def _path_dirs(ld_library_path: Any) -> Any:
    return [d for d in (ld_library_path or "").split(":") if d]


def first_libcuda(ld_library_path: Any, conf_dirs: Any, exists: Any = os.path.exists) -> Optional[Tuple[str, str]]:
    """(path, where) of the ``libcuda.so.1`` the dynamic loader takes first: ``LD_LIBRARY_PATH``'s folders, then
    ld.so.conf's (ldconfig caches them in that order), then the system folders (``SYSTEM_DIRS``); ``where`` names
    the setting. None where no folder holds one (a container without a GPU: the runtime mounts the host's). Pure but
    for ``exists``."""
    for where, dirs in (
        ("LD_LIBRARY_PATH", _path_dirs(ld_library_path)),
        ("ld.so.conf", conf_dirs),
        ("the system folders", SYSTEM_DIRS),
    ):
        for folder in dirs:
            path = os.path.join(folder, DRIVER_SONAME)
            if exists(path):
                return path, where
    return None


def not_a_driver(path: str, exports: Any = elf_exports) -> Optional[str]:
    """Why the library at ``path`` is not NVIDIA's driver, or None where it is one by what it is: an ELF shared
    object whose SONAME is ``libcuda.so.1`` and that defines every symbol of ``DRIVER_SYMBOLS``. ``exports``:
    ``elf.elf_exports`` (soname, defined names). Pure but for ``exports``."""
    try:
        soname, names = exports(path)
    except ValueError:
        return "it is no ELF shared object"
    except OSError as exc:
        return f"it cannot be read ({exc.strerror or exc})"
    why = []
    if soname != DRIVER_SONAME:
        why.append(f"its SONAME is {soname!r}, not {DRIVER_SONAME!r}" if soname else "it has no SONAME")
    missing = [name for name in DRIVER_SYMBOLS if name not in names]
    if missing:
        what = "none" if len(missing) == len(DRIVER_SYMBOLS) else f"{len(DRIVER_SYMBOLS) - len(missing)}"
        why.append(f"it defines {what} of the driver API torch and Triton call (missing: {', '.join(missing)})")
    return "; ".join(why) or None


def driver_off_path(
    ld_library_path: Any, conf_dirs: Any, found: Any, exists: Any = os.path.exists, image: bool = True
) -> Any:
    """(folder, how) where the host driver's folder is off the loader's path, else None. ``how``: "mounted" where a
    ``DRIVER_FOLDERS`` folder holds a ``libcuda.so.1`` that neither LD_LIBRARY_PATH nor ld.so.conf names and the
    loader finds no other (``found``: ``first_libcuda``'s answer); "unnamed" where no driver is mounted (no GPU
    here) and LD_LIBRARY_PATH is set without any ``DRIVER_FOLDERS`` folder (a device plugin that mounts the driver
    there, as GKE's does, leaves it unfound), judged only in an ``image`` (not in host mode, where no device plugin
    mounts anything). Pure but for ``exists``."""
    named = {d.rstrip("/") for d in [*_path_dirs(ld_library_path), *conf_dirs]}
    for folder in DRIVER_FOLDERS:
        if folder not in named and exists(os.path.join(folder, DRIVER_SONAME)) and found is None:
            return folder, "mounted"
    if image and found is None and _path_dirs(ld_library_path) and not named.intersection(DRIVER_FOLDERS):
        return DRIVER_FOLDERS[0], "unnamed"
    return None


def ldconfig_state(path: str = LDCONFIG) -> str:
    """``"ok"`` (an executable for this user), ``"not executable"`` (present, but this user may not run it:
    Triton's ``ldconfig -p`` then raises PermissionError) or ``"missing"`` (FileNotFoundError)."""
    if os.access(path, os.X_OK):
        return "ok"
    return "not executable" if os.path.lexists(path) else "missing"


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


def _identity_findings(libcuda: Any, off_path: Any, problems: Any, fixes: Any) -> None:
    """``driver_findings``' problems and fixes of a first libcuda.so.1 that is no driver (``libcuda``: path, where,
    why) and of the driver folder off the loader's path (``off_path``), added to ``problems`` and ``fixes``."""
    if libcuda:
        path, where, why = libcuda
        problems.append(
            f"the libcuda.so.1 the loader takes first, {path} ({where}), is not NVIDIA's driver: {why}; every "
            "process loads it instead of the host driver's, so torch finds no GPU (`Found no NVIDIA driver on your "
            "system`) and Triton's kernels fail"
        )
        fixes.append(
            f"remove {path} (or take {os.path.dirname(path)} out of {where}): the container runtime mounts the host "
            "driver's libcuda.so.1, which must be the one loaded"
        )
    if off_path:
        folder, how = off_path
        if how == "mounted":
            problems.append(
                f"the host driver's folder {folder} holds libcuda.so.1 but is off the loader's path (LD_LIBRARY_PATH "
                "and ld.so.conf name it not, and no other libcuda.so.1 is found): torch finds no driver"
            )
        else:
            problems.append(
                f"LD_LIBRARY_PATH is set without {' or '.join(DRIVER_FOLDERS)}: where a device plugin mounts the host "
                f"driver there (GKE's), the loader does not find libcuda.so.1 and torch finds no driver (an image "
                "that sets LD_LIBRARY_PATH anew drops the base image's)"
            )
        folders = ":".join(DRIVER_FOLDERS)
        fixes.append(f"append to LD_LIBRARY_PATH rather than set it: ENV LD_LIBRARY_PATH=...:{folders}")


def driver_findings(
    *,
    ldconfig: Any,
    libcuda_env: Any,
    compat: Any,
    declared: Any,
    torch_cuda: Any,
    libcuda: Any = None,
    off_path: Any = None,
    uid: Any = None,
) -> Any:
    """(problems, fixes) of driver discovery from what the image shows: ``ldconfig`` ``ldconfig_state``'s answer
    (True: "ok", False: "missing", as before it named the state), ``libcuda_env`` TRITON_LIBCUDA_PATH, ``compat``
    (``compat_shadows``), ``declared`` (``declared_cuda``), ``torch_cuda`` torch.version.cuda (None: a torch without
    CUDA), ``libcuda`` (path, where, why it is no driver) of the first libcuda.so.1 where it is none, ``off_path``
    (``driver_off_path``), ``uid`` the user's (named where ldconfig is not executable). Pure."""
    problems, fixes = [], []
    state = {True: "ok", False: "missing"}.get(ldconfig, ldconfig)
    if state == "not executable" and not libcuda_env:
        problems.append(
            f"{LDCONFIG} is present but not executable by this user (uid {uid}) and {LIBCUDA_ENV} is unset: Triton "
            f"finds libcuda.so.1 only through `{LDCONFIG} -p` (triton/backends/nvidia/driver.py, libcuda_dirs()), so "
            f"the first Triton kernel fails with PermissionError: [Errno 13] Permission denied: '{LDCONFIG}'"
        )
        fixes.append(
            f"make {LDCONFIG} executable for every user again (chmod 755 {LDCONFIG}: a derived image's chmod or a "
            f"mount without exec took it), or set {LIBCUDA_ENV} to the folder the container runtime mounts the "
            "driver into"
        )
    if state == "missing" and not libcuda_env:
        problems.append(
            f"{LDCONFIG} is missing and {LIBCUDA_ENV} is unset: Triton finds libcuda.so.1 only through "
            f"`{LDCONFIG} -p` (triton/backends/nvidia/driver.py, libcuda_dirs()), so the first Triton kernel fails "
            f"with FileNotFoundError: '{LDCONFIG}'"
        )
        fixes.append(
            f"keep {LDCONFIG} in the image (Debian/Ubuntu: libc-bin), or set {LIBCUDA_ENV} to the folder the "
            "container runtime mounts the driver into (e.g. /usr/lib/x86_64-linux-gnu)"
        )
    _identity_findings(libcuda, off_path, problems, fixes)
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
        "without a GPU: Triton can find libcuda.so.1 (/sbin/ldconfig executable, or TRITON_LIBCUDA_PATH), the "
        "libcuda.so.1 the loader takes first is NVIDIA's driver by what it is (SONAME and driver API) and no "
        "forward-compat one, the driver folders device plugins mount stay on LD_LIBRARY_PATH, and the CUDA the "
        "image declares covers its torch's"
    ),
    classes=(23, 46, 47, 48),
    reports=(
        "https://github.com/NixOS/nixpkgs/issues/426296",
        "https://github.com/huggingface/kernels/issues/670",
        f"{VLLM_REPO}/issues/33447",
        "https://github.com/gpustack/gpustack/issues/4678",
        "https://github.com/NVIDIA/nvidia-container-toolkit/issues/668",
        "https://github.com/NVIDIA/nvidia-docker/issues/539",
        "https://github.com/triton-lang/triton/issues/2878",
        "https://github.com/NVIDIA/dcgm-exporter/issues/484",
        "https://github.com/SeldonIO/MLServer/pull/1120",
    ),
    hint="keep /sbin/ldconfig executable (or set TRITON_LIBCUDA_PATH), keep libraries that are not the host's "
    "driver (cuda-compat, stubs, stand-ins) off the loader's path, append to LD_LIBRARY_PATH rather than set it, "
    "and declare the CUDA version torch is built for",
    timeout=120,
    accelerators=("cuda",),
    group="light",
)
def check_gpu_driver(params: Dict[str, Any]) -> Dict[str, Any]:
    env = dict(os.environ)
    state = ldconfig_state()
    ldconfig = state == "ok"
    conf = ld_conf_dirs()
    compat = compat_shadows(env.get("LD_LIBRARY_PATH"), conf)
    first = first_libcuda(env.get("LD_LIBRARY_PATH"), conf)
    # A compat libcuda first is its own finding (above); any other is judged by what it is.
    why = not_a_driver(first[0]) if first and not compat else None
    off_path = driver_off_path(env.get("LD_LIBRARY_PATH"), conf, first, image=not params.get("host"))
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
        "ldconfig_state": state,
        "libcuda": first[0] if first else None,
        "libcuda_from": first[1] if first else None,
        "not_a_driver": why,
        "driver_off_path": list(off_path) if off_path else None,
        LIBCUDA_ENV: env.get(LIBCUDA_ENV),
        "compat": [list(c) for c in compat],
        "declared_cuda": ".".join(map(str, declared[0])) if declared else None,
        "declared_by": declared[1] if declared else None,
        "torch_cuda": torch_cuda,
    }
    problems, fixes = driver_findings(
        ldconfig=state,
        libcuda_env=env.get(LIBCUDA_ENV),
        compat=compat,
        declared=declared,
        torch_cuda=torch_cuda,
        libcuda=(first[0], first[1], why) if first and why else None,
        off_path=off_path,
        uid=os.getuid(),
    )
    if problems:
        return result("failed", "; ".join(problems), "; ".join(fixes), **facts)
    how = f"{LIBCUDA_ENV}={env[LIBCUDA_ENV]}" if env.get(LIBCUDA_ENV) else f"{LDCONFIG} -p"
    cuda = (
        f"; declares CUDA {facts['declared_cuda']} ({facts['declared_by']}), torch is built for {torch_cuda}"
        if declared and torch_cuda
        else ("; declares no CUDA version" if not declared else "; torch is no CUDA build")
    )
    driver = f"; {first[0]} ({first[1]}) is NVIDIA's driver" if first else ""
    return result(
        "passed", f"Triton finds libcuda through {how}; no forward-compat libcuda on the path{driver}{cuda}", **facts
    )
