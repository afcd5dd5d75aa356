"""JIT toolchains at run time (class 25): what FlashInfer's just-in-time kernels need where no prebuilt kernels
are installed: nvcc, a C++ compiler and the CUDA headers."""

from __future__ import annotations

import glob
import os
import shutil
from typing import Any, Dict, List, Mapping

from .declarations import VLLM_REPO, check
from .installed import dist_version
from .results import result

# Distributions of FlashInfer's prebuilt kernels: with one installed, FlashInfer needs no compiler for them.
FLASHINFER_PREBUILT = ("flashinfer-jit-cache", "flashinfer-cubin")


# The CUDA headers FlashInfer's JIT sources include (and the wheels that ship them under nvidia/*/include).
CUDA_HEADERS = {"cublasLt.h": "nvidia-cublas", "curand.h": "nvidia-curand"}


def _site_dirs() -> List[Any]:
    """The folders Python imports installed packages from (site-packages), as sysconfig names them."""
    import sysconfig

    return sorted({p for p in (sysconfig.get_paths().get("purelib"), sysconfig.get_paths().get("platlib")) if p})


def find_tool(name: str, env: Mapping[str, str], site_dirs: Any) -> Any:
    """The path of CUDA tool ``name`` (nvcc, cuobjdump): ``$CUDA_HOME/bin``, ``PATH``, then the NVIDIA wheels
    (``nvidia/cuda_nvcc/bin``, ``nvidia/cu*/bin``); None where none has it."""

    home = env.get("CUDA_HOME") or env.get("CUDA_PATH") or "/usr/local/cuda"
    candidates = [os.path.join(home, "bin", name)]
    found = shutil.which(name, path=env.get("PATH"))
    if found:
        candidates.insert(0, found)
    for site in site_dirs:
        candidates += sorted(glob.glob(os.path.join(site, "nvidia", "*", "bin", name)))
    return next((c for c in candidates if os.access(c, os.X_OK)), None)


def find_header(name: str, env: Mapping[str, str], site_dirs: Any) -> Any:
    """The path of CUDA header ``name``: ``$CUDA_HOME/include``, ``/usr/include``, then the NVIDIA wheels'
    ``nvidia/*/include``; None where none has it."""
    home = env.get("CUDA_HOME") or env.get("CUDA_PATH") or "/usr/local/cuda"
    candidates = [os.path.join(home, "include", name), os.path.join("/usr/include", name)]
    for site in site_dirs:
        candidates += sorted(glob.glob(os.path.join(site, "nvidia", "*", "include", name)))
    return next((c for c in candidates if os.path.isfile(c)), None)


def toolchain_problems(
    *, libraries: Any, prebuilt: Any, nvcc: Any, headers: Any, c_compiler: Any, python_h: Any
) -> Any:
    """(problems, fixes) of the JIT toolchains the installed ``libraries`` (a set of triton, flashinfer,
    deep_gemm) need: Triton a C compiler and Python.h for its launcher; FlashInfer nvcc and ``CUDA_HEADERS``
    unless ``prebuilt`` names an installed FLASHINFER_PREBUILT distribution; DeepGEMM nvcc. ``headers``:
    {header: path or None}. Pure."""
    problems, fixes = [], []
    if "triton" in libraries:
        lacking = [
            what for what, have in (("a C compiler (cc/gcc, or CC)", c_compiler), ("Python.h", python_h)) if not have
        ]
        if lacking:
            problems.append(
                f"Triton builds its launcher at the first kernel and this image has no {' and no '.join(lacking)}: "
                "`Failed to find C compiler` or `Python.h: No such file or directory` then"
            )
            fixes.append("install gcc and this Python's headers (apt-get install gcc python3-dev)")
    if "flashinfer" in libraries and not prebuilt:
        lacking = ([] if nvcc else ["nvcc"]) + [h for h, path in headers.items() if not path]
        if lacking:
            problems.append(
                "FlashInfer compiles its kernels at run time and this image has neither its prebuilt kernels ("
                f"{', '.join(FLASHINFER_PREBUILT)}) nor {', '.join(lacking)}"
            )
            wheels = ["nvidia-cuda-nvcc"] * (not nvcc) + [CUDA_HEADERS[h] for h in lacking if h in CUDA_HEADERS]
            fixes.append(
                "pip install flashinfer-jit-cache (FlashInfer's kernels prebuilt for the archs) or flashinfer-cubin, "
                f"or the CUDA parts it compiles with ({', '.join(wheels)} for this CUDA)"
            )
    if "deep_gemm" in libraries and not nvcc:
        problems.append("DeepGEMM compiles its kernels at run time with nvcc, which this image does not have")
        fixes.append("install nvcc (nvidia-cuda-nvcc for this CUDA, or a CUDA toolkit), or set VLLM_USE_DEEP_GEMM=0")
    return problems, fixes


@check(
    "jit-toolchain",
    proves=(
        "without a GPU: what the image's kernel libraries compile with at run time is there (Triton: a C compiler "
        "and Python.h; FlashInfer: nvcc, cublasLt.h and curand.h, or its prebuilt kernels; DeepGEMM: nvcc)"
    ),
    classes=(25,),
    reports=(f"{VLLM_REPO}/issues/49497", f"{VLLM_REPO}/issues/33833"),
    hint="install the toolchain the kernel libraries compile with, or their prebuilt kernels",
    timeout=120,
    accelerators=("cuda",),
    group="light",
)
def check_jit_toolchain(params: Dict[str, Any]) -> Dict[str, Any]:
    import importlib.util
    import sysconfig

    env = dict(os.environ)
    libraries = set()
    for name in ("triton", "flashinfer", "deep_gemm"):
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            spec = None
        if spec is not None and spec.origin not in (None, "namespace"):
            libraries.add(name)
    sites = _site_dirs()
    prebuilt = [d for d in FLASHINFER_PREBUILT if dist_version(d)]
    nvcc = find_tool("nvcc", env, sites)
    headers = {h: find_header(h, env, sites) for h in CUDA_HEADERS}
    compiler = env.get("CC") or next((c for c in ("cc", "gcc", "clang") if shutil.which(c)), None)
    python_h = os.path.join(sysconfig.get_paths().get("include") or "", "Python.h")
    facts = {
        "libraries": sorted(libraries),
        "flashinfer_prebuilt": prebuilt,
        "nvcc": nvcc,
        "cuobjdump": find_tool("cuobjdump", env, sites),
        "headers": headers,
        "c_compiler": compiler,
        "python_h": python_h if os.path.isfile(python_h) else None,
    }
    if not libraries:
        return result("passed", "no kernel library that compiles at run time (Triton, FlashInfer, DeepGEMM)", **facts)
    problems, fixes = toolchain_problems(
        libraries=libraries,
        prebuilt=prebuilt,
        nvcc=nvcc,
        headers=headers,
        c_compiler=compiler,
        python_h=facts["python_h"],
    )
    if problems:
        return result("failed", "; ".join(problems), "; ".join(fixes), **facts)
    return result(
        "passed",
        f"{', '.join(sorted(libraries))}: their run-time compilers and headers are there"
        + (f" (FlashInfer's kernels prebuilt: {', '.join(prebuilt)})" if prebuilt else ""),
        **facts,
    )
