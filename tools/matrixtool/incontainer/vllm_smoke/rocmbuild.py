"""ROCm images (classes 28, 29): vLLM's extensions link ROCm's libraries, not CUDA's, and the image's ROCm, torch's
HIP and the ROCm the build tags name are one version."""

from __future__ import annotations

import os
import re
from typing import Any, Dict, List

from .declarations import VLLM_REPO, Accelerator, check
from .elf import elf_needed
from .installed import dist_version, vllm_extensions
from .results import result
from .toolkits import rocm_readings, toolkit_of_tag

_CUDA_LIBS = re.compile(r"^lib(cudart|cuda|cublas|cublasLt|cudnn|nccl|nvrtc)\.so")


_ROCM_LIBS = re.compile(r"^lib(amdhip64|rocblas|hipblas|rccl|MIOpen|hiprtc)\.so")


def foreign_links(needed_by: Any, accelerator: str) -> Any:
    """``{file: [sonames]}`` of extensions linked against another accelerator's runtime than ``accelerator``'s
    (a ROCm image: CUDA's libcudart, libcublas…; a CUDA image: ROCm's libamdhip64…), from ``needed_by``
    (``{file: DT_NEEDED list}``). Pure."""
    pattern = _CUDA_LIBS if accelerator == "rocm" else _ROCM_LIBS if accelerator == "cuda" else None
    if pattern is None:
        return {}
    found = {}
    for path, needed in needed_by.items():
        bad = [n for n in needed if pattern.match(n)]
        if bad:
            found[path] = bad
    return found


# Where a ROCm image's installed ROCm says its version ("7.2.1-81"): the rocm-core package writes it.
ROCM_INFO = "/opt/rocm/.info/version"


def hip_of_version_py(text: str) -> Any:
    """The ``hip`` value torch's ``version.py`` sets (``hip: Optional[str] = '7.2.53211-e4ba3ffb04'``), or None
    (``hip = None``: no ROCm build). Pure."""
    m = re.search(r"^hip\s*(?::[^=\n]*)?=\s*['\"]([^'\"]+)['\"]", text, re.MULTILINE)
    return m.group(1) if m else None


def torch_hip_version() -> Any:
    """``torch.version.hip`` read from the installed torch's ``version.py`` without importing torch; None where no
    torch is installed or it is no ROCm build."""
    import importlib.util

    spec = importlib.util.find_spec("torch")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        try:
            with open(os.path.join(folder, "version.py"), encoding="utf-8", errors="replace") as f:
                return hip_of_version_py(f.read())
        except OSError:
            continue
    return None


def _major_minor(text: str) -> Any:
    m = re.match(r"\s*(\d+)\.(\d+)", text or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


def _full_version(text: str) -> Any:
    """The dotted version at the start of ``text`` as ints (``7.2.1-81``: (7, 2, 1)), or None."""
    m = re.match(r"\s*(\d+(?:\.\d+)+)", text or "")
    return tuple(int(n) for n in m.group(1).split(".")) if m else None


def rocm_toolkit_problems(vllm_version: Any, torch_hip: Any, image_rocm: Any) -> Any:
    """``(problems, fixes)`` where vLLM's ROCm build (the ``+rocm721`` label of ``vllm_version``, read beside the
    image's ROCm: ``common.toolkit_of_tag``), torch's HIP (``torch_hip``: ``torch.version.hip``, whose third number
    is a build, not a patch) and the image's ROCm (``image_rocm``: the text of /opt/rocm/.info/version) name another
    major.minor; vLLM is the reference, else torch. A part that names none is left out. A vLLM label that names more
    than one ROCm (``common.toolkit_tag_problem``: ``rocm711`` beside an image of neither 7.1.1 nor 7.11, or without
    a version file) is compared by all its readings: a mismatch is reported only where none of them agrees (never a
    guess). Pure."""
    label = (vllm_version or "").partition("+")[2]
    full = _full_version(image_rocm)
    tagged = toolkit_of_tag(label, (full,) if full else ())
    if tagged is not None:
        vllm = [tagged[1][:2]] if tagged[0] is Accelerator.ROCM else []
    else:
        vllm = list(dict.fromkeys(r[:2] for r in rocm_readings(label)))
    torch, image = _major_minor(torch_hip), _major_minor(image_rocm)

    def shown(versions: Any) -> str:
        return " or ".join(".".join(str(n) for n in version) for version in versions)

    problems: List[str] = []
    fixes: List[str] = []
    ref = ("vLLM " + vllm_version, vllm) if vllm else ("torch (HIP " + str(torch_hip) + ")", [torch]) if torch else None
    if ref is None:
        return problems, fixes
    read = f" (its label {label!r} reads as either)" if len(ref[1]) > 1 else ""
    if vllm and torch and torch not in vllm:
        problems.append(
            f"{ref[0]} is built for ROCm {shown(vllm)}{read}, but torch for ROCm {shown([torch])} (torch.version.hip "
            f"{torch_hip}): vLLM's extensions, compiled against another torch and ROCm, fail to load (undefined "
            "symbol) or misbehave"
        )
        fixes.append(
            "install the torch vLLM's ROCm wheel pins (its Requires-Dist), from vLLM's ROCm index first in the "
            "variant's index, not PyTorch's index of another ROCm"
        )
    if image and image not in ref[1]:
        problems.append(
            f"{ref[0]} is built for ROCm {shown(ref[1])}{read}, but the image's ROCm is {shown([image])} ({ROCM_INFO} "
            f"{image_rocm.strip()}): the ROCm libraries it links (libamdhip64, hipBLASLt, rocBLAS, RCCL) are another "
            "release's"
        )
        fixes.append(f"base the image on ROCm {shown(ref[1])} (matrix.yaml base_image)")
    return problems, fixes


@check(
    "rocm-build",
    proves=(
        "without a GPU: vLLM's extensions are a ROCm build (none links CUDA's libcudart/libcublas), its torch and "
        "the image's ROCm are the ROCm release vLLM's build names (major.minor), and amdsmi, which vLLM's platform "
        "detection needs to see an AMD GPU, imports"
    ),
    classes=(28, 29, 30),
    reports=(f"{VLLM_REPO}/issues/44660", f"{VLLM_REPO}/issues/24576"),
    hint="install vLLM's ROCm build (a ROCm wheel index, or AMD's rocm/vllm images), the torch it pins, and amdsmi",
    timeout=120,
    accelerators=("rocm",),
    group="light",
)
def check_rocm_build(params: Dict[str, Any]) -> Dict[str, Any]:
    import importlib.util

    needed_by, unreadable = {}, []
    for path in vllm_extensions():
        try:
            needed_by[path] = elf_needed(path)
        except (OSError, ValueError) as exc:
            unreadable.append(f"{path}: {exc}")
    foreign = foreign_links(needed_by, "rocm")
    amdsmi = importlib.util.find_spec("amdsmi") is not None
    try:
        with open(ROCM_INFO, encoding="utf-8", errors="replace") as f:
            image_rocm = f.read(200)
    except OSError:
        image_rocm = None
    torch_hip = torch_hip_version()
    facts = {
        "vllm": dist_version("vllm"),
        "extensions": {os.path.basename(p): n for p, n in needed_by.items()},
        "foreign": {os.path.basename(p): n for p, n in foreign.items()},
        "unreadable": unreadable,
        "amdsmi": dist_version("amdsmi") or (True if amdsmi else None),
        "torch_hip": torch_hip,
        "image_rocm": image_rocm.strip() if image_rocm else None,
    }
    problems, fixes = [], []
    if foreign:
        shown = "; ".join(f"{p} needs {', '.join(n)}" for p, n in foreign.items())
        first = next(iter(foreign.values()))[0]
        problems.append(
            f"vLLM {facts['vllm']} is a CUDA build: {shown}. In a ROCm image its extensions fail to load "
            f"(`{first}: cannot open shared object file`) and vLLM has no kernels"
        )
        fixes.append(
            "install vLLM's ROCm build: the variant's vllm source must be a ROCm index (matrix.yaml "
            f"variants.{params.get('variant') or 'rocm'}.index), not PyPI's vllm, which is the CUDA build"
        )
    if not needed_by and dist_version("vllm") is not None:
        problems.append(f"vLLM {dist_version('vllm')} has no native extension (vllm/_*.so): no kernels for ROCm")
        fixes.append("install vLLM's ROCm build, which ships vllm/_C.abi3.so and vllm/_rocm_C.abi3.so")
    if not amdsmi:
        problems.append(
            "amdsmi is not installed: vLLM's platform detection (vllm/platforms/__init__.py, rocm_platform_plugin) "
            "imports amdsmi to find an AMD GPU, so vLLM stays on UnspecifiedPlatform and fails to infer the device"
        )
        fixes.append("pip install amdsmi at the image's ROCm version (or ROCm's amd-smi-lib, /opt/rocm/share/amd_smi)")
    if not foreign:
        versions, version_fixes = rocm_toolkit_problems(facts["vllm"], torch_hip, image_rocm)
        problems += versions
        fixes += version_fixes
    if problems:
        return result("failed", "; ".join(problems), "; ".join(fixes), **facts)
    names = ", ".join(os.path.basename(p) for p in needed_by)
    hip = f"; torch's HIP {torch_hip}" if torch_hip else ""
    return result(
        "passed",
        f"vLLM {facts['vllm']}'s extensions ({names}) link no CUDA runtime{hip}; amdsmi is installed",
        **facts,
    )
