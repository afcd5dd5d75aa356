"""Triton at run time: no module that poses as Triton (no-fake-triton), its backends and drivers as vLLM sees
them (triton-drivers), and a kernel it compiles and runs on the GPU (triton-kernel)."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import traceback
from typing import Any, Dict, Optional, Tuple

from . import TRITON_AT_START
from .children import marked, run_program, run_python
from .declarations import VLLM_REPO, check
from .errortext import compile_hint, last_error_line
from .gpuprobe import UNUSABLE_GPU_HINT, needs_vllm, unusable_gpu
from .installed import dist_version, providers_of
from .results import result


def _triton_planters() -> Any:
    """Files that plausibly plant a ``triton`` module: .pth files and sitecustomize mentioning triton."""
    import site

    found = []
    dirs = list(getattr(site, "getsitepackages", list)()) + [site.getusersitepackages()]
    for directory in dirs:
        if not os.path.isdir(directory):
            continue
        for name in sorted(os.listdir(directory)):
            path = os.path.join(directory, name)
            if (name.endswith(".pth") or name in ("sitecustomize.py", "usercustomize.py")) and os.path.isfile(path):
                try:
                    with open(path, encoding="utf-8", errors="replace") as f:
                        if "triton" in f.read():
                            found.append(path)
                except OSError:
                    pass
    return found


def _placeholder_diagnosis(module: Any, when: str, vllm_error: Optional[str]) -> Tuple[Optional[str], Dict[str, Any]]:
    file = getattr(module, "__file__", None)
    providers = providers_of("triton")
    if file and providers:
        return None, {}
    planters = _triton_planters()
    facts = {"module_type": type(module).__name__, "file": file, "planters": planters, "planted": when}
    where = f"; planted by {', '.join(planters)}" if planters else ""
    also = f"; `import vllm` then fails: {vllm_error}" if vllm_error else ""
    return (
        f"sys.modules['triton'] is a placeholder ({type(module).__module__}.{type(module).__name__}, "
        f"__file__={file!r}, distributions providing triton: {providers or 'none'}), present {when}{where}; "
        f"torch's inductor will believe Triton exists and torch.compile fails (vllm#17309){also}",
        facts,
    )


@check(
    "no-fake-triton",
    proves=(
        "after `import vllm`, no placeholder `triton` in `sys.modules` (names the `.pth`/sitecustomize that "
        "planted it); torch's `has_triton_package()` agrees with importlib"
    ),
    classes=(2,),
    reports=(f"{VLLM_REPO}/issues/17309", f"{VLLM_REPO}/pull/17317"),
    hint="remove whatever plants a module object named 'triton' (a .pth file, sitecustomize, or "
    "vLLM < 0.9.0: upgrade vLLM)",
    timeout=180,
    uses=("triton-import", "vllm-import"),
    # It shares the vLLM group's `import vllm`: what was in sys.modules before that import is what the
    # interpreter started with (common.TRITON_AT_START), and no check before it in the group imports triton.
    group="vllm",
)
@needs_vllm
def check_no_fake_triton(params: Dict[str, Any]) -> Dict[str, Any]:
    before = TRITON_AT_START
    vllm_error = None
    try:
        import vllm
        import vllm.triton_utils  # noqa: F401
    except Exception:
        vllm_error = last_error_line(traceback.format_exc())
    module = sys.modules.get("triton")
    facts: Dict[str, Any] = {"vllm": getattr(sys.modules.get("vllm"), "__version__", None), "vllm_error": vllm_error}
    if module is not None:
        when = "before vLLM was imported" if before is not None else "after `import vllm`"
        diagnosis, more = _placeholder_diagnosis(module, when, vllm_error)
        facts.update(more)
        if diagnosis:
            return result("failed", diagnosis, None, **facts)
    if vllm_error:  # no placeholder to blame: a consequence of vllm-import's failure, or of the root it follows from
        # (the runner and rootcause.consequences point it there by ``failed_need``; unhidden where vllm-import is not
        # in the run: its error and hint)
        facts.update(failed_need="vllm-import", need_diagnosis=f"`import vllm` fails: {vllm_error}")
        return result("skipped", "vllm-import failed", None, **facts)
    spec_found = module is not None or importlib.util.find_spec("triton") is not None
    try:
        from torch.utils._triton import has_triton_package

        torch_says = bool(has_triton_package())
    except Exception:
        torch_says = None
    facts.update(torch_has_triton_package=torch_says, find_spec=spec_found)
    if torch_says is False and spec_found and module is None and _import_fails("triton"):
        facts.update(failed_need="triton-import")  # a broken triton: triton-import names it
        return result("skipped", "triton-import failed", None, **facts)
    if torch_says is not None and torch_says != spec_found:
        return result(
            "failed",
            f"torch's has_triton_package() says {torch_says} but importlib finds triton: {spec_found}",
            None,
            **facts,
        )
    state = "a real module from " + ", ".join(providers_of("triton")) if module is not None else "absent"
    return result("passed", f"after `import vllm`, sys.modules['triton'] is {state}; torch agrees", **facts)


TRITON_STATE = "triton_state.py"


def triton_state(timeout: int = 600) -> Any:
    """Backends, active drivers (vLLM's rule: non-cpu backends whose driver is active), HAS_TRITON."""
    proc = run_program(TRITON_STATE, timeout=timeout)
    state = marked(proc, "MATRIX-TRITON")
    if state is not None:
        return state
    return {"error": last_error_line(proc.stderr) or f"exit {proc.returncode}"}


@check(
    "triton-drivers",
    proves=(
        "Triton's backends and active drivers give vLLM's `HAS_TRITON` the expected value (one active driver "
        "where required and a GPU is visible)"
    ),
    classes=(4,),
    reports=(f"{VLLM_REPO}/pull/53530",),
    hint="install the triton build torch pins for this accelerator only (one distribution, no extra "
    "backends); on CPU/Arm images ship none",
    timeout=180,
    uses=("triton-import", "vllm-import"),
    group="light",
)
def check_triton_drivers(params: Dict[str, Any]) -> Dict[str, Any]:
    expected = params["triton"]
    version = dist_version(params.get("triton_distribution", "triton")) or dist_version("triton")
    if importlib.util.find_spec("triton") is None:
        if expected == "required":
            return result(
                "failed",
                "no triton installed, so vLLM's HAS_TRITON is False; the variant requires it",
                None,
                triton=None,
            )
        return result("passed", "no triton installed: vLLM's HAS_TRITON is False, as the variant expects", triton=None)
    state = triton_state()
    facts = dict(state, triton=version, expected=expected)
    if "error" in state:
        return result("failed", f"inspecting triton's backends fails: {state['error']}", None, **facts)
    if "backends_error" in state and "backends" not in state:  # `import triton` itself fails: triton-import's cause
        facts.update(failed_need="triton-import", need_diagnosis=f"`import triton` fails: {state['backends_error']}")
        return result("skipped", "triton-import failed", None, **facts)
    has = state.get("has_triton")
    summary = (
        f"triton {version}: backends {', '.join(state.get('backends', [])) or 'none'}; "
        f"{len(state.get('active_drivers', []))} active driver(s) {state.get('active_drivers', [])}; "
        + (f"vLLM HAS_TRITON={has}" if has is not None else _no_has_triton(state))
    )
    if expected == "absent":
        return result(
            "failed",
            f"{summary}; the variant promises no Triton, and vLLM cannot use this one "
            "(dead weight, and a trap for torch.compile)",
            "uninstall triton, or list it under index.exclude in matrix.yaml (xgrammar pulls it)",
            **facts,
        )
    if expected == "present-unused":
        if state.get("has_triton"):
            return result(
                "failed",
                f"{summary}; the variant declares Triton unused, yet vLLM would use it",
                None,
                **facts,
            )
        return result("passed", f"{summary}, as the variant expects", **facts)
    if not state.get("gpu_visible"):
        return result("skipped", f"no GPU visible; {summary}", **facts)
    active = len(state.get("active_drivers", []))
    usable = state.get("has_triton")
    if usable is None:  # no vLLM here: apply its rule (vllm/triton_utils/importing.py): one active driver
        usable = active == 1
        facts["rule"] = "vLLM absent; applied vLLM's rule: exactly one active non-cpu driver"
    if not usable or active != 1:
        return result(
            "failed",
            f"{summary}; vLLM needs exactly one active driver (vllm PR #53530: an extra backend makes two)",
            "install the triton build torch pins for this accelerator only (one distribution, no extra backends)",
            **facts,
        )
    return result("passed", summary, **facts)


TRITON_KERNEL = "triton_kernel.py"


@check(
    "triton-kernel",
    proves=(
        "a small Triton kernel compiles, launches on the GPU, computes the right sum (GPU variants; skipped "
        "without GPU)"
    ),
    classes=(4, 5),
    reports=("https://github.com/triton-lang/triton/issues/7594",),
    hint="install the triton that torch pins and make sure the GPU driver is visible in the container",
    timeout=600,
    accelerators=("cuda", "rocm"),
    needs=("torch-import",),
    group="torch",
)
def check_triton_kernel(params: Dict[str, Any]) -> Dict[str, Any]:
    try:
        import torch

        gpu = torch.cuda.is_available()
    except Exception:
        gpu = False
    if not gpu:
        # torch's reason comes from a child: this process may not init CUDA twice
        unusable = unusable_gpu(params.get("accelerator", "cuda"))
        if unusable:
            return result("failed", unusable, UNUSABLE_GPU_HINT)
        return result("skipped", "no GPU visible")
    if importlib.util.find_spec("triton") is None:
        return result("failed", "a GPU is visible but no triton is installed", None)
    # Triton reads a kernel's source with inspect: it must live in a file, not in `python -c`.
    proc = run_program(TRITON_KERNEL, timeout=600)
    for line in proc.stdout.splitlines():
        if line.startswith("MATRIX-KERNEL "):
            data = json.loads(line[len("MATRIX-KERNEL ") :])
            if data["ok"]:
                return result("passed", f"a triton kernel compiled and ran on {data['device']}; result correct", **data)
            return result("failed", f"a triton kernel ran on {data['device']} but its result is wrong", None, **data)
    error = last_error_line(proc.stderr)
    return result("failed", f"compiling or launching a triton kernel fails: {error}", compile_hint(proc.stderr))


def _import_fails(name: str) -> bool:
    """True when ``import name`` raises (in a child Python: this interpreter's sys.modules stays as it is)."""
    return bool(run_python(f"import {name}", timeout=300).returncode != 0)


def _no_has_triton(state: Any) -> str:
    """Why vLLM's HAS_TRITON is unknown: vLLM is not installed, or it is and fails to import."""
    error = state.get("vllm_error") or ""
    if importlib.util.find_spec("vllm") is None:
        return "vLLM not installed"
    return f"vLLM's HAS_TRITON unknown: vLLM is installed but `from vllm.triton_utils import HAS_TRITON` fails: {error}"
