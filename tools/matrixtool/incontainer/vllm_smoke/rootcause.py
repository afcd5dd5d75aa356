"""One root cause across groups: a failure that only follows from another check's failure is reported as its
consequence (``skipped: <check> failed``). The one definition of these rules: the host applies them to one
container's results (``matrixtool.smoke.rootcause``), the bundle to its own (``standalone``).

Inside one interpreter the in-image runner already skips a check whose ``needs`` failed. Checks of different
groups run in different interpreters, in parallel, and cannot see each other's verdicts: a cache folder that
``run-conditions`` found unwritable also makes ``vllm-import`` fail with ``PermissionError``; a wrong or missing
Triton that ``triton-import`` rejected also breaks ``import vllm``, inductor on a GPU and vLLM's engine; a
vendored library that ``native-libs`` found unloadable fails every import of the extension; a missing torch fails
every check that imports it; the package whose import failed offline-generate fails the server the same way.

Pure, standard library only (Python >= 3.9: the bundle runs it): a result is a mapping with the report's fields
(``check``, ``status`` as its string value, ``diagnosis``, ``hint``, ``facts``, ``log``: the path of the full
output or None).
"""

from __future__ import annotations

import re
from typing import Any, Dict, List, Mapping, Optional, Sequence

from .errortext import compile_cause

Result = Mapping[str, Any]

# Checks whose failure names a cause that others fail by, in the order a cause is looked for.
CAUSES = ("run-conditions", "native-libs", "gpu-driver", "triton-import")
# Checks whose failure names a cause that others fail by, and that may themselves fail by one of ``CAUSES`` (a
# vendored library breaks torch; a wrong Triton breaks inductor and the engine): then theirs is a consequence, and
# what follows from it points at the root.
LATER_CAUSES = ("torch-import", "inductor-compile", "pip-check", "offline-generate")
# Checks that only observe the stack (their verdict is the class they diagnose): never made a consequence, except
# where their failure is only about what the cause blamed (``_only_about``).
OWN_CLASS = frozenset({"no-fake-triton", "triton-drivers", "triton-kernel", "pip-check", "cuda-weight", "gpu-driver"})
_PERMISSION = re.compile(r"Permission denied|PermissionError|Errno 13")
_TRITON = re.compile(r"\btriton\b", re.IGNORECASE)
_NO_TORCH = re.compile(r"No module named 'torch[.']")
# triton-import's failure where no triton imports at all, on a variant that needs one (a GPU's).
_ABSENT = re.compile(r"`import triton` finds no module, but the variant needs Triton")
# The checks that run Triton's kernels on such a variant: inductor's GPU compile, vLLM's engine and its server.
_NEED_TRITON_ON_GPU = frozenset({"inductor-compile", "offline-generate", "serve"})
# "no triton installed" (triton-drivers), "no triton is installed" (triton-kernel).
_NO_TRITON = re.compile(r"\bno triton (is )?installed\b", re.IGNORECASE)
# The exception offline-generate's engine failed by (vllmchecks.root_cause: "ModuleNotFoundError: No module ...").
_EXCEPTION = re.compile(r"\b([A-Za-z_.]*(?:Error|Exception)): (.+)$")
# What a Triton kernel fails by where gpu-driver found no /sbin/ldconfig and no TRITON_LIBCUDA_PATH
# (triton/backends/nvidia/driver.py, libcuda_dirs()), or a forward-compat libcuda ahead of the host's driver.
_NO_LDCONFIG = re.compile(r"(?:No such file or directory|Permission denied): '/sbin/ldconfig'")
# What torch and Triton fail by where the libcuda.so.1 loaded is no driver, or none is found (gpu-driver's
# ``not_a_driver`` and ``driver_off_path``): torch's _check_driver, Triton's libcuda_dirs(), a missing entry point.
_NO_DRIVER = re.compile(
    r"Found no NVIDIA driver|libcuda\.so cannot found|libcuda\.so\.1: cannot open shared object file"
    r"|undefined symbol: cu[A-Z]\w+|CUDA_ERROR_STUB_LIBRARY|CUDA driver initialization failed"
)
_DRIVER_MISMATCH = re.compile(
    r"Error 803|unsupported display driver / cuda driver combination|DriverMismatch"
    r"|NVIDIA driver on your system is too old"
)


def _text(result: Result) -> str:
    """What a result says of its failure: its diagnosis and its log (bounded: the log's last 64 kB)."""
    log = ""
    if result.get("log"):
        try:
            with open(str(result["log"]), encoding="utf-8", errors="replace") as f:
                log = f.read()[-65536:]
        except OSError:
            log = ""
    return f"{result.get('diagnosis', '')}\n{log}"


def _facts(result: Result) -> Mapping[str, Any]:
    return result.get("facts") or {}


def _unwritable_paths(cause: Result) -> List[str]:
    """The folders ``run-conditions`` found unwritable (facts ``unwritable``: path and the folder that blocks)."""
    paths = []
    for entry in _facts(cause).get("unwritable") or []:
        if isinstance(entry, Mapping):
            paths += [str(entry[k]) for k in ("path", "blocker") if entry.get(k)]
    return paths


def _follows_from(cause: Result, result: Result) -> bool:
    """True when ``result``'s failure is explained by ``cause``'s (see the module docstring)."""
    text = _text(result)
    check = cause["check"]
    if check == "run-conditions":
        paths = _unwritable_paths(cause)
        return bool(paths) and bool(_PERMISSION.search(text)) and any(p in text for p in paths)
    if check == "torch-import":
        return bool(_NO_TORCH.search(str(cause.get("diagnosis")) + _text(cause))) and bool(_NO_TORCH.search(text))
    if check == "triton-import":
        if result["check"] == "model-runner":
            return False  # "Model Runner V2 requires Triton.": the seed failure, named as such
        # Without Triton, inductor on a GPU and vLLM's engine there fail by its absence, not always by name
        # (vLLM's placeholder kernels: "TypeError: 'function' object is not subscriptable").
        absent = _ABSENT.search(str(cause.get("diagnosis") or "")) and result["check"] in _NEED_TRITON_ON_GPU
        return bool(absent) or bool(_TRITON.search(text))
    if check == "gpu-driver":
        facts = _facts(cause)
        no_ldconfig = facts.get("ldconfig") is False and not facts.get("TRITON_LIBCUDA_PATH")
        # A compat libcuda first on the loader's path, or a declared CUDA older than torch's (the runtime admits
        # a driver too old for torch): CUDA's init fails by it (H200: "found version 12020" from a 535 libcuda).
        driver = facts.get("compat") or "torch is built for CUDA" in str(cause.get("diagnosis") or "")
        no_driver = facts.get("not_a_driver") or facts.get("driver_off_path")
        return (
            bool(no_ldconfig and _NO_LDCONFIG.search(text))
            or bool(driver and _DRIVER_MISMATCH.search(text))
            or bool(no_driver and _NO_DRIVER.search(text))
        )
    if check == "native-libs":
        missing = [str(m) for m in _facts(cause).get("root_errors") or [] if m]
        return any(m in text for m in missing)
    if check == "inductor-compile":
        # The same missing compiler or headers: vLLM's compiled engine (and its server) build with inductor too.
        lacks = _facts(cause).get("compile_cause") or compile_cause(cause.get("diagnosis"))
        return bool(lacks) and compile_cause(text) == lacks
    if check == "pip-check":
        return any(_import_fails_on(dist, text) for dist in _unmet(cause))
    if check == "offline-generate":
        # The server runs the same engine: the same exception in its log is the same cause.
        error = _exception(str(cause.get("diagnosis") or ""))
        return result["check"] == "serve" and error is not None and error in text
    return False


def _exception(diagnosis: str) -> Optional[str]:
    """The exception line a diagnosis ends with (``ModuleNotFoundError: No module named 'flashinfer'``), or None."""
    m = _EXCEPTION.search(diagnosis.strip())
    return f"{m.group(1)}: {m.group(2)}" if m else None


def _unmet(cause: Result) -> List[str]:
    """The distributions ``pip-check`` found missing or at a version their dependents do not accept."""
    found = []
    for problem in _facts(cause).get("problems") or []:
        m = re.search(r" requires ([A-Za-z0-9_.\-]+)", str(problem))
        if m:
            found.append(m.group(1))
    return sorted(set(found))


def _import_fails_on(dist: str, text: str) -> bool:
    """True when ``text`` holds an import error of ``dist``'s top-level module (``-`` read as ``_``): ``No module
    named 'openai'``, ``cannot import name 'X' from 'openai.types'``."""
    module = re.escape(dist.lower().replace("-", "_"))
    return bool(
        re.search(rf"No module named '{module}[.']|cannot import name '[^']+' from '{module}[.']", text, re.IGNORECASE)
    )


def _only_about(cause: Result, result: Result) -> bool:
    """True when an observing check's failure (``OWN_CLASS``) is only about what ``cause`` blamed: every unmet
    requirement ``pip-check`` lists is one of the triton distribution(s) that ``triton-import`` rejected (a ROCm
    triton on a CPU image: ``pytorch-triton-rocm 2.0.1 requires cmake, which is not installed``); removing it
    removes them. Where no triton is installed, triton-drivers' and triton-kernel's "no triton installed" is
    triton-import's failure said again; a missing torch is torch-import's."""
    check = result["check"]
    if cause["check"] in ("torch-import", "gpu-driver"):
        return _follows_from(cause, result)
    if cause["check"] != "triton-import":
        return False
    if check in ("triton-drivers", "triton-kernel"):
        return bool(_NO_TRITON.search(str(result.get("diagnosis") or "")))
    if check != "pip-check" or _facts(result).get("clashes"):
        return False
    blamed = [str(p) for p in _facts(cause).get("providers") or [] if p]
    problems = [str(p) for p in _facts(result).get("problems") or []]
    return bool(blamed and problems) and all(any(p.startswith(f"{b} ") for b in blamed) for p in problems)


def consequences(results: Sequence[Result]) -> List[Dict[str, Any]]:
    """``results`` (as dicts) with each failure that follows from a failed cause check (``CAUSES``) turned into
    ``skipped: <cause> failed`` (facts ``failed_need``, ``need_diagnosis``, ``need_hint``, as ``results.need_skip``
    writes them, ``consequence_of`` and ``own_diagnosis``), and each check skipped for such a consequence pointed
    at the cause. Order is kept."""
    failed = {r["check"]: r for r in results if r["status"] == "failed"}
    causes = [failed[name] for name in CAUSES if name in failed]
    became: Dict[str, Result] = {}

    def explained(r: Result) -> Optional[Result]:
        """The root cause of ``r``'s failure among ``causes`` (a later cause stands for its own root), or None."""
        if r["check"] in OWN_CLASS:
            cause = next((c for c in causes if _only_about(c, r)), None)
        else:
            cause = next((c for c in causes if _follows_from(c, r)), None)
        return became.get(cause["check"], cause) if cause is not None else None

    # A later cause first: one that follows from an earlier cause points what it explains at that root.
    for r in [failed[name] for name in LATER_CAUSES if name in failed]:
        cause = explained(r)
        if cause is not None:
            became[r["check"]] = cause
        causes.append(r)
    for r in results:
        if r["status"] != "failed" or r["check"] in CAUSES or r["check"] in LATER_CAUSES:
            continue
        cause = explained(r)
        if cause is not None:
            became[r["check"]] = cause
    out: List[Dict[str, Any]] = []
    for r in results:
        cause = became.get(r["check"])
        need = _facts(r).get("failed_need")
        if cause is None and r["status"] == "skipped" and need in became:
            cause = became[str(need)]
        if cause is None:
            out.append(dict(r))
            continue
        facts = {
            **_facts(r),
            "failed_need": cause["check"],
            "need_diagnosis": cause.get("diagnosis"),
            "need_hint": cause.get("hint"),
            "consequence_of": cause["check"],
            "own_diagnosis": r.get("diagnosis"),
        }
        out.append(dict(r, status="skipped", diagnosis=f"{cause['check']} failed", hint="", facts=facts))
    return out
