"""Native libraries: every shared object of torch and vLLM resolves, LD_PRELOAD names files (class 11)."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess

from .common import (
    check,
    gpu_visible,
    result,
)


# --- native-libs (class 11) --------------------------------------------------------------------------
def _package_dir(name):
    spec = importlib.util.find_spec(name)
    return os.path.dirname(spec.origin) if spec and spec.origin else None


# Libraries of the NVIDIA driver: the container toolkit mounts them from the host when a GPU is passed
# through (`--gpus`); an image must not ship them, so ldd may rightly report them missing without a GPU.
DRIVER_LIBS = re.compile(r"^lib(cuda|cudadebugger|nvidia-[A-Za-z0-9_-]+)\.so(\.[0-9]+)*$")


# ldd's lines for a library that is absent, and for one built against a newer C library than the image's.
_MISSING = re.compile(r"^\s*\S+\s*=>\s*not found")
_VERSION = re.compile(r"version `(GLIBC|GLIBCXX|CXXABI)_[0-9.]+' not found")


def _glibc():
    """This image's glibc version, e.g. ``2.36`` (``os.confstr``), or ``unknown``."""
    try:
        return (os.confstr("CS_GNU_LIBC_VERSION") or "glibc unknown").split()[-1]
    except (ValueError, OSError):
        return "unknown"


def _owners(paths):
    """The distributions whose RECORD lists any of ``paths`` (relative to site-packages), by name."""
    from importlib import metadata

    wanted = set(paths)
    found = []
    for dist in metadata.distributions():
        files = {str(f) for f in (dist.files or ())}
        if files & wanted:
            found.append(dist.metadata["Name"])
    return sorted(set(found))


@check(
    "native-libs",
    proves=(
        "no `not found` from `ldd` on torch's and vLLM's shared objects (with the folders torch loads first: "
        "`torch/lib`, the nvidia wheels' `lib`; the GPU driver's own `libcuda.so.1`, `libnvidia-*` are named,"
        " not failed); every `LD_PRELOAD` path exists"
    ),
    classes=(11,),
    reports=("https://github.com/vllm-project/vllm/issues/18743", "https://github.com/vllm-project/vllm/pull/37561"),
    hint="install the system packages providing the missing libraries (libnuma1 for libnuma.so.1); "
    "point LD_PRELOAD only at files that exist",
    timeout=300,
    group="light",
)
def check_native_libs(params):
    facts = {}
    missing_preload = [p for p in os.environ.get("LD_PRELOAD", "").replace(":", " ").split() if not os.path.exists(p)]
    if shutil.which("ldd") is None:
        return result("skipped", "no ldd in the image")
    dirs = [d for d in (_package_dir("torch"), _package_dir("vllm")) if d]
    torch_lib = os.path.join(dirs[0], "lib") if dirs and dirs[0].endswith("torch") else None
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    # vLLM's extensions link libtorch, and on CUDA libcudart/libnvrtc, without an RPATH: torch loads them
    # first at run time (its own folder, and the nvidia-* wheels' lib folders in torch/__init__.py's
    # _load_global_deps), so add those folders.
    preloaded = [torch_lib] if torch_lib else []
    if dirs and dirs[0].endswith("torch"):
        nvidia = os.path.join(os.path.dirname(dirs[0]), "nvidia")
        for root, subdirs, _ in os.walk(nvidia):
            if os.path.basename(root) == "lib":
                preloaded.append(root)
                subdirs[:] = []
    if preloaded:
        env["LD_LIBRARY_PATH"] = ":".join(filter(None, [*preloaded, env.get("LD_LIBRARY_PATH")]))
    broken = {}
    too_new = {}  # shared object -> {"version `GLIBC_2.38' not found"}: built for a newer C library
    driver_provided = set()
    # Without a GPU the driver's libraries are rightly absent; with one, the container toolkit mounts them
    # and their absence is a defect. CPU variants get no GPU: no need to import torch to find out.
    waive_driver = params.get("accelerator", "cpu") == "cpu" or not gpu_visible()
    count = 0
    for top in dirs:
        for root, _, files in os.walk(top):
            for name in files:
                if ".so" not in name:
                    continue
                path = os.path.join(root, name)
                count += 1
                proc = subprocess.run(["ldd", path], capture_output=True, text=True, env=env, check=False)
                lines = (proc.stdout + proc.stderr).splitlines()
                for line in lines:
                    m = _VERSION.search(line)
                    if m:
                        too_new.setdefault(os.path.relpath(path, os.path.dirname(top)), set()).add(m.group(0))
                gone = sorted(
                    {line.split("=>")[0].strip() for line in lines if "=> not found" in line or _MISSING.match(line)}
                )
                from_driver = [lib for lib in gone if DRIVER_LIBS.match(lib)] if waive_driver else []
                if from_driver:
                    driver_provided.update(from_driver)
                    gone = [lib for lib in gone if lib not in from_driver]
                if gone:
                    broken[os.path.relpath(path, os.path.dirname(top))] = gone
    versions = sorted({v for found in too_new.values() for v in found})
    libs = sorted({lib for gone in broken.values() for lib in gone})
    facts.update(
        shared_objects=count,
        broken=broken,
        too_new={k: sorted(v) for k, v in too_new.items()},
        missing_preload=missing_preload,
        driver_provided=sorted(driver_provided),
        # What other checks fail by when this one fails (the host reports their failures as consequences).
        root_errors=[*versions, *libs],
    )
    problems, hints = [], []
    if missing_preload:
        problems.append(f"LD_PRELOAD names missing file(s): {', '.join(missing_preload)}")
        hints.append("point LD_PRELOAD only at files that exist")
    if too_new:
        glibc = _glibc()
        owners = _owners(too_new)
        first = ", ".join(f"{k} ({', '.join(sorted(v))})" for k, v in list(too_new.items())[:3])
        problems.append(
            f"{len(too_new)} shared object(s) need a newer C library than the image's glibc {glibc}: {first}"
            + (f"; shipped inside the wheel(s) {', '.join(owners)}, not by a system package" if owners else "")
        )
        hints.append(
            f"install a build of {', '.join(owners) or 'the package that ships them'} made for glibc {glibc} (a "
            f"manylinux tag no newer than manylinux_{glibc.replace('.', '_')}), or use a base image whose C/C++ "
            f"runtime provides {', '.join(v.split('`')[1].split(chr(39))[0] for v in versions)}"
        )
    if broken:
        first = ", ".join(f"{k} ({', '.join(v)})" for k, v in list(broken.items())[:3])
        problems.append(f"{len(broken)} shared object(s) miss {', '.join(libs)}: {first}")
        hints.append("install the system packages that provide the missing libraries (e.g. libnuma1 for libnuma.so.1)")
    if problems:
        return result("failed", "; ".join(problems), "; ".join(hints), **facts)
    driver = (
        f"; {', '.join(sorted(driver_provided))} come(s) from the GPU driver at run time, not the image"
        if driver_provided
        else ""
    )
    return result(
        "passed", f"{count} shared objects of torch/vLLM resolve every library{driver}; LD_PRELOAD ok", **facts
    )
