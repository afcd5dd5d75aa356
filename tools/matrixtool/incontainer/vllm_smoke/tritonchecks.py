"""Triton: is it there as the variant promises, is it real, do its drivers and kernels work (classes 2-5)."""

from __future__ import annotations

import importlib.metadata as metadata
import importlib.util
import json
import os
import re
import sys
import traceback
from typing import Any, Dict, Optional, Tuple

from . import TRITON_AT_START
from .children import marked, run_program, run_python
from .declarations import check
from .errortext import compile_hint, last_error_line
from .gpuprobe import UNUSABLE_GPU_HINT, needs_vllm, unusable_gpu
from .installed import dist_version, providers_of
from .results import result


def torch_triton_pin() -> Any:
    """torch's own ``Requires-Dist`` for triton (e.g. ``triton==3.7.1``), or None."""
    try:
        requires = metadata.requires("torch") or []
    except metadata.PackageNotFoundError:
        return None
    for req in requires:
        name = re.split(r"[\s;<>=!~\[]", req, maxsplit=1)[0].lower()
        if name in ("triton", "pytorch-triton-rocm", "pytorch-triton"):
            return req.split(";")[0].strip()
    return None


def specifier_matches(requirement: Any, version: str) -> Any:
    """True when ``version`` satisfies the version part of ``requirement`` (``triton==3.7.1``, ``~=3.8``)."""
    try:
        from packaging.requirements import Requirement
        from packaging.version import Version
    except ImportError:  # packaging is a vLLM dependency; fall back to exact-pin comparison
        m = re.search(r"==\s*([^\s,;]+)", requirement)
        return m is None or m.group(1) == version
    return Requirement(requirement).specifier.contains(Version(version), prereleases=True)


_VLLM = "https://github.com/vllm-project/vllm"


def triton_build(providers: Any, package_dir: Any) -> Any:
    """``rocm``, ``cuda`` or None: the accelerator a triton was built for, from its distribution's name
    (``pytorch-triton-rocm``) or, for a ``triton`` wheel, the backends it ships (``backends/amd``,
    ``backends/nvidia``: Triton >= 3.0). PyPI's ``triton`` ships both, and is no build of one accelerator: None."""
    if any("rocm" in p.lower() for p in providers):
        return "rocm"
    backends = os.path.join(package_dir or "", "backends")
    amd, nvidia = (os.path.isdir(os.path.join(backends, b)) for b in ("amd", "nvidia"))
    if amd != nvidia:
        return "rocm" if amd else "cuda"
    return None


def wrong_triton(described: Any, build: Any, providers: Any, expected_dist: Any, breaks: Any) -> Any:
    """(diagnosis, hint) for a triton the variant does not promise (``expected_dist`` None: none at all), built
    for ``build`` (``triton_build``), and what it breaks in torch (``breaks``: the error of torch's compiler
    stack importing it, or None)."""
    kind = {"rocm": "a ROCm build of Triton", "cuda": "a CUDA build of Triton"}.get(build, "a Triton")
    promise = "the variant promises no Triton" if expected_dist is None else f"the variant needs {expected_dist}"
    broken = (
        f"; torch's compiler stack fails by it (`import torch._dynamo`: {breaks}), so everything that imports "
        "inductor or dynamo (transformers' models, torch.compile, the `vllm` CLI) fails the same way"
        if breaks
        else ""
    )
    origin = " (a ROCm torch's dependency, from PyTorch's ROCm index)" if build == "rocm" else ""
    diagnosis = f"{described} is installed, {kind}{origin}, although {promise}{broken}"
    if expected_dist is None:
        uninstall = f"pip uninstall {' '.join(providers) or 'triton'}"
        hint = f"uninstall it ({uninstall}), or list it under index.exclude in matrix.yaml"
    else:
        # Never the distribution torch pins: only the others go.
        others = [p for p in providers if p != expected_dist] or ["triton"]
        hint = f"install the {expected_dist} that torch pins and uninstall the other (pip uninstall {' '.join(others)})"
    return diagnosis, hint


# The module of torch's inductor that imports Triton's modules as soon as any triton is installed
# (``if has_triton_package(): import triton.backends.compiler``), and so does ``import torch._dynamo``.
TORCH_TRITON_IMPORTS = os.path.join("_inductor", "runtime", "hints.py")


def missing_triton_module(source: Any, findable: Any) -> Any:
    """The first ``triton.*`` module that ``source`` (Python text) imports at its top level and that cannot be
    found, as ``(module, imported)``: ``imported`` is the name in the import line, ``module`` the first part of it
    missing (``triton.backends`` for ``import triton.backends.compiler`` under Triton 2.x); None when all are
    there. ``findable(name)``: whether ``name`` can be found (``importlib.util.find_spec``)."""
    for imported in re.findall(r"^\s*(?:import|from)\s+(triton\.[\w.]+)", source or "", re.MULTILINE):
        parts = imported.split(".")
        for end in range(2, len(parts) + 1):
            if not findable(".".join(parts[:end])):
                return ".".join(parts[:end]), imported
    return None


def _findable(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _torch_compiler_error() -> Any:
    """What torch's compiler stack fails by with this triton, read without importing it (a child ``import
    torch._dynamo`` took minutes on a busy 2-core machine): the triton module that torch's inductor imports
    and this triton lacks, or None."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.origin:
        return None
    path = os.path.join(os.path.dirname(spec.origin), TORCH_TRITON_IMPORTS)
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            found = missing_triton_module(f.read(), _findable)
    except OSError:
        return None
    if found is None:
        return None
    module, imported = found
    return f"ModuleNotFoundError: No module named '{module}' (torch/{TORCH_TRITON_IMPORTS} imports {imported})"


@check(
    "triton-import",
    proves=(
        "`import triton` matches the variant's Triton state; when required, exactly one distribution provides"
        " it, at the version torch's `Requires-Dist` pins"
    ),
    classes=(3, 4, 5),
    reports=(f"{_VLLM}/issues/14888", "https://github.com/coreweave/ml-containers/issues/64"),
    hint="install exactly the triton that torch pins (see torch's Requires-Dist), or none on CPU/Arm; "
    "check with: python -c 'import triton'",
    timeout=120,
    group="light",
)
def check_triton_import(params: Dict[str, Any]) -> Dict[str, Any]:
    expected = params["triton"]
    expected_dist = params.get("triton_distribution", "triton")
    providers = providers_of("triton")
    pin = torch_triton_pin()
    facts = {"expected": expected, "providers": providers, "torch_pin": pin, "torch": dist_version("torch")}
    try:
        spec = importlib.util.find_spec("triton")
    except ValueError:  # a module object without __spec__ sits in sys.modules (class 2)
        module = sys.modules.get("triton")
        return result(
            "failed",
            f"sys.modules['triton'] is a placeholder {type(module).__name__} without a "
            f"spec (distributions providing triton: {providers or 'none'}); see no-fake-triton",
            "remove whatever plants a module object named 'triton' (a .pth file, sitecustomize)",
            **facts,
        )
    if spec is None:
        if expected == "absent":
            return result("passed", "no triton installed, as the variant promises", **facts)
        return result(
            "failed",
            f"`import triton` finds no module, but the variant needs Triton ({pin or 'any version'})",
            None,
            **facts,
        )
    try:
        import triton
    except Exception:
        facts["error"] = last_error_line(traceback.format_exc())
        if expected == "absent":
            return result(
                "failed",
                f"a `triton` module is importable from {spec.origin} "
                f"(distributions: {providers or 'none'}) although the variant promises none, "
                f"and it fails to import: {facts['error']}",
                None,
                **facts,
            )
        return result(
            "failed",
            f"`import triton` fails: {facts['error']} "
            f"(module at {spec.origin}, distributions {providers or 'none'}, torch pins {pin})",
            None,
            **facts,
        )
    version = getattr(triton, "__version__", None)
    facts.update(version=version, file=getattr(triton, "__file__", None))
    described = f"triton {version} from {', '.join(providers) or 'no distribution'}"
    build = triton_build(providers, os.path.dirname(facts["file"] or ""))
    facts["build"] = build
    if expected == "absent":
        if build is None or build == "cuda":  # e.g. xgrammar's triton dependency on a CPU image
            return result(
                "failed",
                f"{described} is installed although the variant promises no Triton; "
                "something pulled it in (e.g. xgrammar on a CPU image)",
                "uninstall it, or list it under index.exclude in matrix.yaml",
                **facts,
            )
        facts["breaks"] = _torch_compiler_error()
        diagnosis, hint = wrong_triton(described, build, providers, None, facts["breaks"])
        return result("failed", diagnosis, hint, **facts)
    if build is not None and build != params.get("accelerator") and providers != [expected_dist]:
        facts["breaks"] = _torch_compiler_error()
        diagnosis, hint = wrong_triton(described, build, providers, expected_dist, facts["breaks"])
        return result("failed", diagnosis, hint, **facts)
    problems = []
    if providers != [expected_dist]:
        problems.append(
            f"`triton` must come from exactly one distribution, {expected_dist}; found {providers or 'none'}"
        )
    if pin and version and not specifier_matches(pin, version):
        problems.append(f"torch {facts['torch']} pins {pin} but triton {version} is installed")
    if problems:
        return result("failed", "; ".join(problems), None, **facts)
    return result("passed", f"{described} imports and matches torch's pin {pin}", **facts)


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
    reports=(f"{_VLLM}/issues/17309", f"{_VLLM}/pull/17317"),
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
    if vllm_error:  # no placeholder to blame: vllm-import reports why vLLM does not import
        return result("skipped", "vllm-import failed", **facts)
    spec_found = module is not None or importlib.util.find_spec("triton") is not None
    try:
        from torch.utils._triton import has_triton_package

        torch_says = bool(has_triton_package())
    except Exception:
        torch_says = None
    facts.update(torch_has_triton_package=torch_says, find_spec=spec_found)
    if torch_says is False and spec_found and module is None and _import_fails("triton"):
        return result("skipped", "triton-import failed", **facts)  # a broken triton: triton-import names it
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
    reports=(f"{_VLLM}/pull/53530",),
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
        return result("skipped", "triton-import failed", **facts)
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


def _import_fails(name: str) -> Any:
    """True when ``import name`` raises (in a child Python: this interpreter's sys.modules stays as it is)."""
    return run_python(f"import {name}", timeout=300).returncode != 0


def _no_has_triton(state: Any) -> str:
    """Why vLLM's HAS_TRITON is unknown: vLLM is not installed, or it is and fails to import."""
    error = state.get("vllm_error") or ""
    if importlib.util.find_spec("vllm") is None:
        return "vLLM not installed"
    return f"vLLM's HAS_TRITON unknown: vLLM is installed but `from vllm.triton_utils import HAS_TRITON` fails: {error}"
