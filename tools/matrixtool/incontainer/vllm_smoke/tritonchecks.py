"""Triton: is it there as the variant promises, is it real, do its drivers and kernels work (classes 2-5)."""

from __future__ import annotations

import importlib.metadata as metadata
import importlib.util
import os
import re
import sys
import traceback
from typing import Any, Dict, Optional

from .declarations import VLLM_REPO, check
from .errortext import last_error_line
from .installed import dist_version, providers_of
from .results import result


def torch_triton_pin() -> Optional[str]:
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


def _torch_compiler_error() -> Optional[str]:
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
    reports=(f"{VLLM_REPO}/issues/14888", "https://github.com/coreweave/ml-containers/issues/64"),
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
