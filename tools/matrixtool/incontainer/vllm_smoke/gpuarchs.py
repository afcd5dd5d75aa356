"""GPU architecture coverage (class 24): the architectures vLLM's kernels, torch and Triton's compiler are built for
cover the GPU the variant targets."""

from __future__ import annotations

import os
import re
import struct
from typing import Any, Dict, List, Sequence, Set

from .children import WORK_DIR, marked, run_program, run_python
from .declarations import VLLM_REPO, check
from .elf import elf_section, fatbin_archs
from .errortext import last_error_line
from .installed import dist_version, vllm_extensions
from .results import result


def _number(arch: Any) -> Any:
    """``sm_90a`` -> (90, "a"); ``compute_90`` -> (90, ""); None for another form."""
    m = re.match(r"^(?:sm|compute)_(\d+)([af]?)$", arch)
    return (int(m.group(1)), m.group(2)) if m else None


def covered(arch: Any, sass: Any, ptx: Any) -> bool:
    """True when a GPU of ``arch`` (``sm_90``) runs kernels of ``sass`` (cubins: the same major version, a minor
    not above ``arch``'s; an ``a`` cubin only on its own arch, an ``f`` one on its family) or ``ptx`` (PTX of a
    version not above ``arch``'s, JIT-compiled by the driver; arch-specific ``a`` PTX only on its own arch). Pure."""
    want = _number(arch)
    if want is None:
        return arch in sass or arch in ptx
    for have in sass:
        got = _number(have)
        if got is None:
            continue
        if got[1] == "a":  # sm_90a: that GPU only
            if got[0] == want[0]:
                return True
        elif got[1] == "f":  # sm_100f: that family, from that version on
            if got[0] // 10 == want[0] // 10 and got[0] <= want[0]:
                return True
        elif got[0] // 10 == want[0] // 10 and got[0] <= want[0]:
            return True
    for have in ptx:
        got = _number(have)
        if got is not None and got[0] <= want[0] and (got[1] != "a" or got[0] == want[0]):
            return True
    return False


def ptxas_targets(help_text: Any) -> Any:
    """The ``sm_*`` values ``ptxas --help`` lists as allowed for ``--gpu-name`` (``Allowed values for this option:
    'compute_50',…,'sm_90a'``), or [] where it lists none."""
    m = re.search(r"--gpu-name.*?Allowed values for this option:\s*(.*?)(?:\n\s*\n|\n--|\Z)", help_text or "", re.S)
    return sorted(set(re.findall(r"'(sm_\d+[af]?)'", m.group(1)))) if m else []


def aot_error_line(text: str) -> Any:
    """The line of a Triton compile error that names the cause: ptxas's ``fatal`` line (``ptxas-blackwell fatal :
    Value 'sm_999a' is not defined for option 'gpu-name'``) where there is one, else the first non-empty line."""
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    for line in lines:
        if re.search(r"\bfatal\b", line):
            return re.sub(r"\s+:", " :", line)
    return lines[0] if lines else "no error text"


def aot_findings(report: Any, wanted: Any) -> Any:
    """(problems, fixes, compiled) of the ahead-of-time compiles of programs/triton_aot.py (its ``MATRIX-AOT``
    object, or None when it printed none) for the archs ``wanted``: ``compiled`` is True when every arch was
    compiled, False when one failed, None when no compile answered or every compile failed before ptxas (an API
    this Triton has otherwise; the caller falls back on ``ptxas --help``).
    Pure."""
    if not report or report.get("lacking"):
        return [], [], None
    results = report.get("results") or {}
    failed = {a: aot_error_line(results[a]) for a in wanted if a in results and results[a] != "ok"}
    if not failed:
        return [], [], True if all(a in results for a in wanted) else None
    if "ok" not in results.values() and not any("ptxas" in results[a] for a in failed):
        # No arch compiled and ptxas was never reached: this Triton's API, not an arch, failed.
        return [], [], None
    version = report.get("triton")
    problems = [
        f"Triton {version} cannot compile a kernel for {arch} (`{line}`): every Triton kernel fails there"
        for arch, line in failed.items()
    ]
    fixes = [
        f"install a Triton (with it the torch that pins it) newer than {version} whose bundled ptxas targets "
        f"{', '.join(failed)}, or point TRITON_PTXAS_PATH at a CUDA toolkit's ptxas that does"
    ]
    return problems, fixes, False


def _triton_aot(wanted: Any) -> Any:
    """(MATRIX-AOT object, facts) of programs/triton_aot.py compiling for ``wanted`` in a child Python, its kernel
    cache under WORK_DIR (the tool's tmpfs); facts say per arch "ok", the error's line, or why none was compiled."""
    env = {"TRITON_CACHE_DIR": os.path.join(WORK_DIR, "triton-aot-cache")}
    try:
        proc = run_program("triton_aot.py", [a for a in wanted if a.startswith("sm_")], env, timeout=120)
    except Exception as e:  # subprocess.TimeoutExpired, OSError: no compile answered
        return None, f"not compiled ahead of time ({type(e).__name__}: {e})"
    report = marked(proc, "MATRIX-AOT")
    if report is None:
        from .errortext import last_error_line

        return None, f"not compiled ahead of time ({last_error_line(proc.stderr) or f'exit {proc.returncode}'})"
    if report.get("lacking"):
        return report, f"not compiled ahead of time (triton {report.get('triton')} lacks {report['lacking']})"
    if aot_findings(report, wanted)[2] is None and "ok" not in report.get("results", {}).values():
        errors = [aot_error_line(r) for r in (report.get("results") or {}).values()]
        return (
            report,
            f"not compiled ahead of time (triton {report.get('triton')}: {errors[0] if errors else 'no arch'})",
        )
    return report, {a: r if r == "ok" else aot_error_line(r) for a, r in (report.get("results") or {}).items()}


_HIP_TARGET = re.compile(rb"amdgcn-amd-amdhsa-[^\x00\s]*?-(gfx[0-9a-f]+)")


def hip_archs(f: Any, chunk: Any = 16 << 20) -> List[Any]:
    """The ``gfx*`` targets of the clang offload bundles (HIP code objects) in the open binary file ``f``, read
    in ``chunk``-byte pieces that overlap by 256 bytes. Pure but for reading ``f``."""
    found: Set[str] = set()
    tail = b""
    while True:
        piece = f.read(chunk)
        if not piece:
            break
        data = tail + piece
        found.update(m.group(1).decode() for m in _HIP_TARGET.finditer(data))
        tail = data[-256:]
    return sorted(found)


def _torch_arch_list() -> Any:
    """(torch.cuda.get_arch_list(), None) from a child Python (no GPU needed: the archs torch was built for), or
    (None, error)."""
    proc = run_python("import json, torch; print('MATRIX-ARCHS', json.dumps(torch.cuda.get_arch_list()))", timeout=300)
    for line in proc.stdout.splitlines():
        if line.startswith("MATRIX-ARCHS "):
            import json

            return json.loads(line[len("MATRIX-ARCHS ") :]), None

    return None, last_error_line(proc.stderr) or f"exit {proc.returncode}"


def _triton_ptxas() -> Any:
    """The path of Triton's bundled ptxas (triton/backends/nvidia/bin/ptxas; TRITON_PTXAS_PATH first), or None."""
    import importlib.util

    configured = os.environ.get("TRITON_PTXAS_PATH")
    if configured and os.access(configured, os.X_OK):
        return configured
    spec = importlib.util.find_spec("triton")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        path = os.path.join(folder, "backends", "nvidia", "bin", "ptxas")
        if os.access(path, os.X_OK):
            return path
    return None


@check(
    "gpu-archs",
    proves=(
        "without a GPU: every architecture of the variant's gpu_archs is covered by torch's arch list, by vLLM's "
        "extensions (SASS, or PTX the driver compiles) and, on CUDA, by Triton: a kernel compiled ahead of time "
        "for each (its bundled ptxas included; `ptxas --help`'s targets where no compile answers)"
    ),
    classes=(24,),
    reports=(f"{VLLM_REPO}/issues/29469", "https://github.com/triton-lang/triton/issues/8539"),
    hint="build (or install) torch, vLLM and Triton for the variant's GPUs, or drop the GPUs they cannot serve "
    "from matrix.yaml gpu_archs",
    timeout=300,
    accelerators=("cuda", "rocm"),
    group="light",
)
def check_gpu_archs(params: Dict[str, Any]) -> Dict[str, Any]:
    wanted = list(params.get("gpu_archs") or [])
    accelerator = params.get("accelerator", "cuda")
    if not wanted:
        return result("skipped", f"the variant names no gpu_archs (matrix.yaml) to check the {accelerator} image for")
    torch_archs, error = _torch_arch_list()
    facts: Dict[str, Any] = {"gpu_archs": wanted, "torch_archs": torch_archs}
    problems: List[str] = []
    fixes: List[str] = []
    if torch_archs is None:
        return result("failed", f"torch's arch list cannot be read: {error}", None, **facts)
    if accelerator == "rocm":
        torch_missing = [a for a in wanted if a not in torch_archs]
    else:
        compute = [a.replace("compute_", "sm_") for a in torch_archs if a.startswith("compute_")]
        torch_missing = [
            a for a in wanted if not covered(a, [a2 for a2 in torch_archs if a2.startswith("sm_")], compute)
        ]
    if torch_missing:
        problems.append(
            f"torch {dist_version('torch')} has no kernels for {', '.join(torch_missing)} (torch.cuda.get_arch_list(): "
            f"{', '.join(torch_archs) or 'none'}): `no kernel image is available for execution on the device` there"
        )
        fixes.append("install the torch build whose arch list covers them (PyTorch's index of a newer CUDA/ROCm)")
    kernels = _vllm_problems(wanted, accelerator, facts, problems, fixes)
    if accelerator == "cuda" and dist_version("triton") is not None:
        report, facts["triton_aot"] = _triton_aot(wanted)
        aot_problems, aot_fixes, facts["triton_compiled"] = aot_findings(report, wanted)
        problems += aot_problems
        fixes += aot_fixes
    if accelerator == "cuda":
        _ptxas_problems(wanted, facts, problems, fixes)
    if problems:
        fixes.append(
            f"or take the GPUs this image cannot serve out of matrix.yaml variants.{params.get('variant')}.gpu_archs"
        )
        return result("failed", "; ".join(problems), "; ".join(dict.fromkeys(fixes)), **facts)
    return result(
        "passed",
        f"{', '.join(wanted)} covered by torch"
        + (
            ", vLLM's extensions"
            if kernels
            else " (no vLLM installed: its extensions not checked)"
            if dist_version("vllm") is None
            else ""
        )
        + (
            " and Triton (a kernel compiled ahead of time for each)"
            if facts.get("triton_compiled")
            else " and Triton's ptxas"
            if facts.get("ptxas")
            else " (no Triton ptxas to ask)"
            if accelerator == "cuda"
            else ""
        ),
        **facts,
    )


def _extension_archs(accelerator: str) -> Dict[str, Dict[str, Any]]:
    """{file name: {"sass", "ptx", "fatbin"}} of each of vLLM's native extensions: the architectures of its
    code (ROCm: its HIP code objects; CUDA: its fat binary, ``fatbin`` whether it has one); unreadable files are
    left out."""
    extensions: Dict[str, Dict[str, Any]] = {}
    for path in vllm_extensions():
        try:
            with open(path, "rb") as f:
                if accelerator == "rocm":
                    extensions[os.path.basename(path)] = {"sass": hip_archs(f), "ptx": []}
                    continue
                section = elf_section(path, ".nv_fatbin")
                found = fatbin_archs(f, section[0], section[0] + section[1]) if section else {"sass": [], "ptx": []}
        except (OSError, struct.error):
            continue
        # A fat binary section whose entries this reader does not know: said so, not taken for no kernels.
        found["fatbin"] = section is not None and section[1] > 0
        extensions[os.path.basename(path)] = found
    return extensions


def _vllm_problems(
    wanted: Sequence[str], accelerator: str, facts: Dict[str, Any], problems: List[str], fixes: List[str]
) -> Dict[str, Dict[str, Any]]:
    """vLLM's extensions against the ``wanted`` archs (facts ``vllm_extensions``, ``unparsed_fatbins``): the
    extensions that hold kernels."""
    extensions = _extension_archs(accelerator)
    facts["vllm_extensions"] = extensions
    kernels = {name: found for name, found in extensions.items() if found["sass"] or found["ptx"]}
    # vLLM's own kernels (_C, _moe_C, as _C_stable_libtorch in 0.33; ROCm: _rocm_C) must cover every GPU of the
    # variant; others are for some GPUs only (FlashMLA, DeepSelect, QuTLASS: Hopper and Blackwell) and are
    # reported, not judged.
    essential = {n: f for n, f in kernels.items() if re.match(r"_(C|moe_C|rocm_C)(_stable_libtorch)?\.", n)}
    essential = essential or kernels
    unreadable = [n for n, f in extensions.items() if not (f["sass"] or f["ptx"]) and f.get("fatbin")]
    facts["unparsed_fatbins"] = unreadable
    if dist_version("vllm") is None or unreadable:
        return kernels
    if not kernels:
        problems.append(
            f"vLLM {dist_version('vllm')}'s extensions ({', '.join(extensions) or 'none'}) hold no "
            f"{'HIP code objects' if accelerator == 'rocm' else 'CUDA kernels (no fat binary)'}: not a "
            f"{accelerator} build"
        )
        fixes.append(f"install vLLM's {accelerator} build")
    for name, found in essential.items():
        if accelerator == "rocm":
            lacking = [a for a in wanted if a not in found["sass"]]
        else:
            lacking = [a for a in wanted if not covered(a, found["sass"], found["ptx"])]
        if lacking:
            problems.append(
                f"vLLM's {name} has no kernel for {', '.join(lacking)} (SASS {', '.join(found['sass']) or 'none'}; "
                f"PTX {', '.join(found['ptx']) or 'none'})"
            )
            fixes.append("install a vLLM built with those archs (TORCH_CUDA_ARCH_LIST / PYTORCH_ROCM_ARCH)")
    return kernels


def _ptxas_problems(wanted: Sequence[str], facts: Dict[str, Any], problems: List[str], fixes: List[str]) -> None:
    """Triton's ptxas against the ``wanted`` archs (facts ``ptxas``, ``ptxas_targets``), where no compile answered."""
    import subprocess

    ptxas = _triton_ptxas()
    facts["ptxas"] = ptxas
    if ptxas is None:
        return
    proc = subprocess.run([ptxas, "--help"], capture_output=True, text=True, timeout=60, check=False)
    targets = ptxas_targets(proc.stdout)
    facts["ptxas_targets"] = targets
    lacking = [a for a in wanted if targets and a not in targets and a + "a" not in targets]
    # The compiles, where they answered, are the proof (Triton may pick another ptxas, ptxas-blackwell).
    if lacking and facts.get("triton_compiled") is None:
        problems.append(
            f"Triton's ptxas ({ptxas}) cannot target {', '.join(lacking)} (`ptxas fatal : Value '{lacking[0]}' "
            "is not defined for option 'gpu-name'`): every Triton kernel fails to compile there"
        )
        fixes.append(
            "install a Triton whose bundled ptxas knows them, or point TRITON_PTXAS_PATH at a CUDA "
            "toolkit's ptxas that does"
        )
