"""Error text: the error line of a traceback (and the first cause of a chained one), and the fix hint an import or
C/C++ build error names. Standard library only, Python >= 3.9."""

from __future__ import annotations

import re
from typing import Optional

from .installed import dist_version, providers_of, python_dev_package, regular_package

# Lines that torch's Dynamo appends to every exception it re-raises (torch/_dynamo/exc.py): advice, never the error.
_BOILERPLATE = re.compile(
    r"^(?:Set TORCHDYNAMO_VERBOSE=1 |For even more developer context|You can suppress this exception and fall back "
    r"to eager|\s+import torch\._dynamo$|\s+torch\._dynamo\.config\.suppress_errors = True$)"
)
# An exception line of any class name (``TritonMissing: Cannot find a working triton installation``): read only
# after the traceback's last frame, where nothing else starts so.
_EXCEPTION_LINE = re.compile(r"^(?:[A-Za-z_]\w*\.)*[A-Z]\w*: \S")


def last_error_line(text: str) -> str:
    """The last ``...Error``/``Exception``/``Exit`` line of ``text`` (a traceback); else, after its last frame, the
    last line of the form ``ClassName: message`` (torch's ``TritonMissing``, Dynamo's ``BackendCompilerFailed``);
    else its last line. Dynamo's advice lines ("Set TORCHDYNAMO_VERBOSE=1 …") are never taken."""
    lines = [line for line in text.strip().splitlines() if line.strip() and not _BOILERPLATE.match(line)]
    for line in reversed(lines):
        if re.match(r"^[A-Za-z_.]*(Error|Exception|Exit)\b", line):
            return line.strip()
    frames = [i for i, line in enumerate(lines) if line.startswith('  File "')]
    for line in reversed(lines[frames[-1] + 1 :] if frames else []):
        if _EXCEPTION_LINE.match(line):
            return line.strip()
    return lines[-1].strip() if lines else ""


_CHAINED = re.compile(
    r"^(?:The above exception was the direct cause of the following exception:|"
    r"During handling of the above exception, another exception occurred:)$",
    re.MULTILINE,
)


def first_cause(text: str) -> Optional[str]:
    """The error line of the first exception of a chained traceback (the one the others were raised from, e.g.
    ``No module named 'triton.backends'`` under transformers' ``Could not import module 'LlamaConfig'``), or
    None when ``text`` holds one exception only."""
    parts = _CHAINED.split(text or "")
    return last_error_line(parts[0]) if len(parts) > 1 else None


def error_with_cause(text: str) -> str:
    """``last_error_line(text)``, followed by ``(caused by <first_cause>)`` when a chained traceback started
    with another error."""
    error, cause = last_error_line(text), first_cause(text)
    return f"{error} (caused by {cause})" if cause and cause != error else error


# Import names whose distribution has another name (the fix installs the distribution).
_DISTRIBUTION_OF = {
    "yaml": "pyyaml",
    "PIL": "pillow",
    "cv2": "opencv-python-headless",
    "google": "protobuf",
    "flashinfer": "flashinfer-python",
    "deep_gemm": "deep-gemm",
}


# Optional GPU-kernel packages vLLM imports only on a path that uses them: {import name: (distribution, the vLLM
# setting that keeps vLLM off it)}. vLLM's V2 sampler imports flashinfer unless VLLM_USE_FLASHINFER_SAMPLER=0
# (vllm/envs.py); DeepGEMM's kernels are used unless VLLM_USE_DEEP_GEMM=0.
GPU_KERNEL_MODULES = {
    "flashinfer": ("flashinfer-python", "VLLM_USE_FLASHINFER_SAMPLER=0"),
    "deep_gemm": ("deep-gemm", "VLLM_USE_DEEP_GEMM=0"),
}


# Distributions of GPU kernels (and the toolkits they ship in) a GPU build of vLLM requires but loads only where
# used: pip-check reports their absence as that (canonical names; ``nvidia-`` prefixed ones too).
GPU_KERNEL_DISTRIBUTIONS = frozenset(
    {
        "flashinfer-python",
        "flashinfer-cubin",
        "flashinfer-jit-cache",
        "deep-gemm",
        "deep-ep",
        "xformers",
        "flash-attn",
        "cupy-cuda12x",
        "cupy-cuda13x",
        "quack-kernels",
        "tilelang",
        "triton-kernels",
        "cuda-python",
        "cuda-bindings",
        "nixl",
        "amdsmi",
        "aiter",
    }
)


def gpu_kernel_distribution(name: str) -> bool:
    """True for a distribution of GPU kernels or the NVIDIA/CUDA runtime parts they load (``name`` canonical:
    lower case, ``-`` for ``_`` and ``.``)."""
    return name in GPU_KERNEL_DISTRIBUTIONS or name.startswith(("nvidia-", "cuda-"))


def import_hint(error: str) -> Optional[str]:
    """A fix hint for an ImportError line that names its module (``No module named 'transformers'``), or None.

    The hint names the distribution to install; for ``cannot import name X from Y`` it names Y's version skew.
    """
    m = re.search(r"No module named '([^']+)'", error or "")
    top = m.group(1).split(".")[0] if m else ""
    if m and top != m.group(1) and regular_package(top):
        # The package is there but lacks a module its importer expects: a version skew, not a missing package.
        dists = providers_of(top) or [top]
        shown = ", ".join(f"{d} {dist_version(d) or ''}".strip() for d in dists)
        dist = _DISTRIBUTION_OF.get(top, top)
        see = "triton-import" if top == "triton" else "pip-check"
        return (
            f"{shown} has no module {m.group(1)}: not the version the importing package expects; install {dist} "
            f"at the version it requires (see {see}), or uninstall it"
        )
    if m and top in GPU_KERNEL_MODULES:
        dist, setting = GPU_KERNEL_MODULES[top]
        return (
            f"{dist}, an optional GPU-kernel package of vLLM, is not installed and this path imports it: "
            f"pip install {dist} (the build for this torch and CUDA), or set {setting} so vLLM does not use it"
        )
    if m:
        module = top
        dist = _DISTRIBUTION_OF.get(module, module)
        return f"install {dist} (the package that failed: `import {module}` finds no module), e.g. pip install {dist}"
    m = re.search(r"cannot import name '([^']+)' from '([^'.]+)", error or "")
    if m:
        return (
            f"{m.group(2)} {dist_version(m.group(2)) or ''} lacks {m.group(1)}: install the {m.group(2)} version "
            "the importing package requires (see pip-check)"
        )
    return None


# What a C/C++ build of inductor (or of Triton's launcher) lacks, by the error text that shows it: the key names
# the cause (``compile_cause``), the same key in two checks' errors is one cause (matrixtool.smoke.rootcause).
_COMPILE_CAUSES = (
    ("python-headers", re.compile(r"Python\.h")),
    (
        "c++-compiler",
        re.compile(r"InvalidCxxCompiler|No working C\+\+ compiler|g\+\+: not found|'g\+\+'|\bc\+\+: not found"),
    ),
    ("c-compiler", re.compile(r"\bgcc: not found|'gcc'|No such file or directory: 'cc'|Failed to find C compiler")),
)


def compile_cause(error: str | None) -> str | None:  # annotated: the host calls it (rootcause)
    """``"python-headers"``, ``"c++-compiler"`` or ``"c-compiler"``: what a C/C++ build error in ``error`` text
    says is missing; None when it says none of these."""
    return next((key for key, pattern in _COMPILE_CAUSES if pattern.search(error or "")), None)


def compile_hint(error: str) -> Optional[str]:
    """A fix hint for a C/C++ build error of inductor (or Triton's launcher) from ``error`` text, or None:
    a missing Python.h names ``python3.X-dev`` (X from this Python), a missing compiler names g++ or gcc."""
    cause = compile_cause(error)
    if cause == "python-headers":
        return (
            f"install the Python headers of this Python: apt-get install {python_dev_package()} (Python.h is missing)"
        )
    if cause == "c++-compiler":
        return "install a C++ compiler: apt-get install g++ (inductor's CPU backend compiles its kernels with it)"
    if cause == "c-compiler":
        return "install a C compiler: apt-get install gcc (Triton builds its launcher with it)"
    return None


# vLLM's wrappers around a failure in its engine or worker processes: the cause is logged before them.
_WRAPPERS = ("Engine core initialization failed", "WorkerProc initialization failed", "WorkerProc failed to start")


# A line vLLM logs at level DEBUG, INFO or WARNING ("WARNING 12-01 20:41:19 [system_utils.py:299] ..."): an error
# it names is advice (the ulimit warning quotes "OSError: [Errno 24] Too many open files"), not what failed.
_NOTICE = re.compile(r"\b(DEBUG|INFO|WARNING) \d\d-\d\d \d\d:\d\d:\d\d")


def root_cause(text: str) -> Optional[str]:
    """The first exception line of ``text`` that is not one of vLLM's wrapper messages (``_WRAPPERS``) nor a
    notice it logs (``_NOTICE``): the worker's own error, which vLLM logs in its child process before the
    parent's RuntimeError. None if none."""
    # A native extension that fails to load is only a warning in vLLM's log (seen on arm64: vllm._C
    # "undefined symbol: sbgemm_"), and everything after it follows from it: report it first.
    m = re.search(r"\b([A-Za-z_.]*Error)\('([^']*undefined symbol[^']*)'\)", text)
    if m:
        return f"{m.group(1)}: {m.group(2)}"
    for line in text.splitlines():
        m = re.search(r"\b([A-Za-z_.]*(Error|Exception)): (.+)$", line)
        if m and not any(w in line for w in _WRAPPERS) and not _NOTICE.search(line):
            return f"{m.group(1)}: {m.group(3).strip()}"
    return None
