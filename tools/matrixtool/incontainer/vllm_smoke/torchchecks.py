"""torch: it imports, its family (torchvision, torchaudio, torchcodec) imports with it, inductor compiles (6, 8)."""

from __future__ import annotations

import importlib.util
import re
import time
import traceback
from typing import Any, Dict

from .children import run_python
from .declarations import VLLM_REPO, check
from .errortext import compile_cause, compile_hint, import_hint, last_error_line
from .gpuprobe import UNUSABLE_GPU_HINT, unusable_gpu
from .installed import dist_version
from .results import result

TORCH_FAMILY = ("torchvision", "torchaudio", "torchcodec")


@check(
    "torch-import",
    proves="`import torch` succeeds (the prerequisite of every check that uses torch)",
    classes=(),
    reports=(),
    hint="install a torch wheel built for this platform and Python; read the import error in the log",
    timeout=300,
    group="torch",
)
def check_torch_import(params: Dict[str, Any]) -> Dict[str, Any]:
    """Import torch in this interpreter (checks of its group then share it)."""
    try:
        import torch
    except Exception:
        error = last_error_line(traceback.format_exc())
        return result("failed", f"`import torch` fails: {error}", import_hint(error), torch=dist_version("torch"))
    return result("passed", f"torch {torch.__version__} imports", torch=torch.__version__)


def _torch_info() -> Dict[str, Any]:
    """torch's version and build from this interpreter (torch-import has imported it)."""
    import torch

    return {"version": torch.__version__, "cuda": torch.version.cuda, "hip": getattr(torch.version, "hip", None)}


def _torch_build(info: Any) -> Any:
    """ "cuda", "rocm" or "cpu" from torch.version.cuda / torch.version.hip."""
    if info.get("hip"):
        return "rocm"
    return "cuda" if info.get("cuda") else "cpu"


@check(
    "torch-family",
    proves=(
        "torch is the build the variant declares (`torch.version.cuda`/`hip` against `torch_build`), and "
        "every installed torchvision/torchaudio/torchcodec imports next to it"
    ),
    classes=(6,),
    reports=("https://github.com/pytorch/vision/issues/8424",),
    hint="install the torch-family wheels built for this torch (same index and local version, e.g. "
    "+cpu), or uninstall the ones the image does not need",
    timeout=120,
    needs=("torch-import",),
    group="torch",
)
def check_torch_family(params: Dict[str, Any]) -> Dict[str, Any]:
    facts = {"torch": dist_version("torch")}
    info = _torch_info()
    build = _torch_build(info)
    expected_build = params.get("torch_build") or params.get("accelerator") or build
    facts.update(torch_cuda=info.get("cuda"), torch_hip=info.get("hip"), torch_build=build)
    described = {"cuda": f"CUDA {info.get('cuda')}", "rocm": f"ROCm/HIP {info.get('hip')}", "cpu": "CPU"}[build]
    if build != expected_build:
        return result(
            "failed",
            f"torch {info.get('version')} is a {described} build (torch.version.cuda={info.get('cuda')!r}, "
            f"torch.version.hip={info.get('hip')!r}); the variant needs a {expected_build} build",
            "install torch from the index of the wanted build (e.g. PyTorch's cpu / cu130 / rocm index), "
            f"or set variants.{params.get('variant', '<variant>')}.torch_build in matrix.yaml when this build "
            "is intended",
            **facts,
        )
    failures = []
    for name in TORCH_FAMILY:
        version = dist_version(name)
        if version is None:
            continue
        facts[name] = version
        proc = run_python(f"import {name}", timeout=300)  # a child: a failed import leaves no half-registered ops
        if proc.returncode != 0:
            failures.append(
                f"{name} {version} fails to import next to torch {facts['torch']}: {last_error_line(proc.stderr)}"
            )
    if failures:
        return result("failed", "; ".join(failures), None, **facts)
    present = [n for n in TORCH_FAMILY if n in facts]
    return result(
        "passed",
        f"torch {facts['torch']} ({described} build) imports"
        + (f" with {', '.join(present)}" if present else "; no torchvision/torchaudio/torchcodec installed"),
        **facts,
    )


def _inductor_hint(text: str, device: Any) -> Any:
    """The fix for inductor failing on ``device`` with traceback ``text``: the compiler or headers it lacks,
    Triton's fix only where the error is Triton's (inductor's GPU kernels are Triton kernels), else the log."""
    found = compile_hint(text)
    if found:
        return found
    if device != "cpu" and re.search(r"\btriton\b", last_error_line(text), re.IGNORECASE):
        return "install exactly the triton that torch pins (see triton-import), which inductor's GPU kernels need"
    return "read the compile error in the log (inductor's generated code and the compiler's output are there)"


@check(
    "inductor-compile",
    proves="`torch.compile` (inductor) matches eager on CPU, and on CUDA when visible",
    classes=(8,),
    reports=("https://github.com/pytorch/pytorch/issues/116696", f"{VLLM_REPO}/issues/27890"),
    hint="install a C++ compiler and the Python headers (g++, python3-dev) for the CPU backend; read the "
    "compile error in the log",
    timeout=300,
    affected_by=("user", "read_only", "tmpfs", "env"),
    suites=("full",),
    needs=("torch-import",),
    group="vllm",  # it imports vLLM first (below): the vLLM group's import serves it
)
def check_inductor_compile(params: Dict[str, Any]) -> Dict[str, Any]:
    """torch.compile (inductor) of a small function equals eager, on CPU and on CUDA when visible.

    vLLM is imported first when installed: a placeholder `triton` it plants (vllm#17309) must not break
    inductor, which is how class 2 failed in the field (FAILURE-CLASSES.md: "prove it with an inductor compile").
    """
    if importlib.util.find_spec("vllm") is not None:
        try:
            import vllm
            import vllm.triton_utils  # noqa: F401
        except Exception:
            pass
    import torch

    def f(x: Any) -> Any:
        return torch.sin(x) * 2 + torch.cos(x) ** 2

    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    facts = {"torch": torch.__version__, "devices": devices}
    for device in devices:
        x = torch.randn(256, device=device)
        started = time.monotonic()
        try:
            got = torch.compile(f, backend="inductor")(x)
        except Exception:
            text = traceback.format_exc()
            error = last_error_line(text)
            compiler_output = text[text.find("CppCompileError") :] if "CppCompileError" in text else ""
            cause = re.search(r"(?:fatal )?error: (.+)", compiler_output)
            if cause:  # the compiler's own first error (e.g. "Python.h: No such file or directory")
                error += f" ({cause.group(0).strip()})"
            facts["error"] = error
            facts["compile_cause"] = compile_cause(text)
            return result(
                "failed", f"torch.compile (inductor) fails on {device}: {error}", _inductor_hint(text, device), **facts
            )
        facts[f"{device}_compile_seconds"] = round(time.monotonic() - started, 2)
        if not torch.allclose(got, f(x), atol=1e-5):
            return result("failed", f"inductor's result on {device} differs from eager", None, **facts)
    note = ""
    if params.get("accelerator", "cpu") != "cpu" and "cuda" not in devices:
        unusable = unusable_gpu(params["accelerator"])
        if unusable:  # the GPU part cannot run: not a pass on the CPU part alone
            return result("failed", f"{unusable} (inductor's GPU part not run)", UNUSABLE_GPU_HINT, **facts)
        note = f" (no GPU visible: the {params['accelerator']} device part was not run)"
        facts["gpu_part"] = "skipped: no GPU visible"
    return result("passed", f"inductor compiles and matches eager on {', '.join(devices)}{note}", **facts)
