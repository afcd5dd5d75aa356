"""vLLM generates (the engine, eager and compiled) and its command line runs: offline-generate and vllm-cli."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import traceback
from typing import Any, Dict, Optional, Tuple

from .children import WORK_DIR, run_program
from .declarations import VLLM_REPO, check
from .errortext import compile_hint, import_hint, last_error_line, root_cause
from .gpuprobe import gpu_visible, needs_gpu, needs_vllm
from .installed import dist_version, providers_of
from .results import result
from .tinymodel import ensure_model


def _generate(mode: str, max_tokens: int, timeout: Optional[float], in_process: bool) -> Dict[str, Any]:
    """One greedy generation (``mode`` eager or compiled): {"tokens", "runner", "seconds", "process"} or
    {"error", "seconds", "log"}. ``in_process``: vLLM's engine in this interpreter (``programs.generate``);
    else a child Python with vLLM's own process layout, limited to ``timeout`` seconds (None: no limit)."""
    model = ensure_model()
    started = time.monotonic()
    if in_process:
        from .programs import generate

        try:
            data: Dict[str, Any] = generate.generate(model, mode == "eager", max_tokens, in_process=True)
        except Exception:
            text = traceback.format_exc()
            sys.stdout.write(text)
            return {
                "error": _with_root_cause(last_error_line(text), text),
                "seconds": round(time.monotonic() - started, 1),
            }
        return dict(data, seconds=round(time.monotonic() - started, 1), process="in-process")
    proc = run_program("generate.py", [model, mode, str(max_tokens)], timeout=timeout)
    seconds = round(time.monotonic() - started, 1)
    for line in proc.stdout.splitlines():
        if line.startswith("MATRIX-GENERATE "):
            data = json.loads(line[len("MATRIX-GENERATE ") :])
            data["seconds"] = seconds
            data["process"] = "engine core and worker processes"
            return data
    log = os.path.join(WORK_DIR, f"generate-{mode}.log")
    with open(log, "w", encoding="utf-8") as f:
        f.write(proc.stdout + proc.stderr)
    text = proc.stderr
    sys.stdout.write(text if len(text) <= 12000 else text[:4000] + "\n[...]\n" + text[-8000:])
    return {
        "error": _with_root_cause(last_error_line(text) or f"exit {proc.returncode}", text),
        "seconds": seconds,
        "log": log,
    }


def engine_hint(error: str, params: Dict[str, Any]) -> Any:
    """The fix for an engine that failed with ``error``: the missing package or compiler it names, else where to
    look on this accelerator (params["accelerator"]): the CPU backend's own needs only on a CPU variant."""
    named = import_hint(error) or compile_hint(error)
    if named:
        return named
    if params.get("accelerator", "cpu") == "cpu":
        return (
            "read the engine log in the check output; on CPU check libnuma1, /dev/shm size (--shm-size) and "
            "VLLM_CPU_KVCACHE_SPACE"
        )
    return (
        "read the engine log in the check output (the worker's own error is logged before vLLM's wrappers); on a "
        "GPU check that the container sees the GPU (--gpus all, nvidia-smi), that its driver is as new as the "
        "image's CUDA needs, and that gpu_memory_utilization fits the free GPU memory"
    )


def _with_root_cause(error: str, text: str) -> Any:
    """``error`` (the last error line of ``text``), followed by the worker's own error when it differs."""
    cause = root_cause(text)
    return error + (f" (root cause: {cause})" if cause and cause != error else "")


@check(
    "offline-generate",
    proves=(
        "a tiny random Llama + locally trained tokenizer made in the container: 8 greedy tokens per prompt, "
        "eager == compiled; records the model runner"
    ),
    classes=(9,),
    reports=(f"{VLLM_REPO}/issues/14888",),
    hint="read the engine log in the check output (the worker's own error is logged before vLLM's wrappers)",
    timeout=900,
    affected_by=("user", "read_only", "tmpfs", "env", "network", "memory", "cpus", "pids_limit"),
    needs=("vllm-import", "tiny-model"),
    group="vllm",  # eager and compiled engines in the group's interpreter: one import, one model inspection
)
@needs_vllm
@needs_gpu
def check_offline_generate(params: Dict[str, Any]) -> Dict[str, Any]:
    """Greedy generation eager and compiled, equal tokens; the ``quick`` suite (params["suite"]) runs eager only.

    Under ``default`` both engines run in this interpreter (``_generate`` in_process). Rerun under a deployment
    profile after ``default`` (params["rerun"]), only the compiled run, in a child Python with vLLM's own process
    layout (engine core and worker processes, their IPC and shared memory): it meets every condition the eager
    one does, and inductor's kernels and vLLM's compile cache besides; eager == compiled was proven under
    ``default``."""
    max_tokens = int(params.get("max_tokens", 8))
    modes: Tuple[str, ...]
    if params.get("rerun"):
        modes = ("compiled",)
    elif params.get("suite") == "quick":
        modes = ("eager",)
    else:
        modes = ("eager", "compiled")
    facts: Dict[str, Any] = {"max_tokens": max_tokens, "modes": list(modes)}
    for mode in modes:
        data = _generate(mode, max_tokens, None, in_process=not params.get("rerun"))
        facts[mode] = data
        if "error" in data:
            return result(
                "failed", f"{mode} generate fails: {data['error']}", engine_hint(data["error"], params), **facts
            )
        if any(len(t) != max_tokens for t in data["tokens"]):
            return result(
                "failed",
                f"{mode} generate returned {[len(t) for t in data['tokens']]} tokens, expected {max_tokens} per prompt",
                None,
                **facts,
            )
    if "compiled" not in facts:
        return result(
            "passed",
            f"{max_tokens} greedy tokens per prompt eager ({facts['eager']['seconds']} s, runner "
            f"{facts['eager'].get('runner')}); the quick suite leaves out the compiled run",
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


def _vllm_cli_without_gpu(params: Dict[str, Any], facts: Dict[str, Any], accelerator: str) -> Dict[str, Any]:
    """A GPU variant without a GPU: vLLM's CLI builds its whole parser, and with it a DeviceConfig, even for
    ``--version`` (vllm/config/device.py raises "Failed to infer device type"), so only what needs no device
    is proven: the console script's module imports and vLLM reports the pinned version."""
    expected = params.get("vllm_version")
    proc = run_program("cli_import.py", timeout=600)
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
        return result(
            "failed",
            f"vLLM reports {data['version']!r}, the variant pins {expected}",
            version_hint(data["version"], expected, params),
            **facts,
        )
    entrypoint = params.get("entrypoint") or []
    if entrypoint and shutil.which(entrypoint[0]) is None and not os.path.isfile(entrypoint[0]):
        return result("failed", f"the image's ENTRYPOINT {entrypoint[0]!r} does not resolve", None, **facts)
    return result(
        "passed",
        f"the `vllm` CLI imports (vllm.entrypoints.cli.main) and vLLM is {data['version']}; `vllm --version` "
        f"itself was not run: it infers the device while building its parser (no GPU visible; a {accelerator} variant)",
        **facts,
    )


def version_hint(installed: Any, pinned: Any, params: Dict[str, Any]) -> str:
    """The fix for vLLM ``installed`` where the variant pins ``pinned``: install the pin, or pin what is there."""
    variant = params.get("variant") or "<variant>"
    dist = next((d for d in providers_of("vllm") if d.lower() != "vllm"), "vllm")
    return (
        f"vLLM {installed} is installed, the variant pins {pinned}: install vLLM {pinned} (pip install "
        f"'{dist}=={pinned}' from the variant's index), or set variants.{variant}.vllm.version to "
        f"{str(installed).split('+')[0]} in matrix.yaml if this vLLM is the one meant"
    )


def _vllm_imports() -> bool:
    """True when ``import vllm`` succeeds in this interpreter (vllm-import reports why when it does not)."""
    try:
        import vllm  # noqa: F401
    except Exception:
        return False
    return True


_IMPORT_ERROR = re.compile(r"\b(ImportError|ModuleNotFoundError)\b")


@check(
    "vllm-cli",
    proves=(
        "`vllm --version` prints the pinned version (GPU variant without a GPU: the CLI's module imports and "
        "vLLM reports that version); the image's ENTRYPOINT resolves"
    ),
    classes=(10,),
    reports=(f"{VLLM_REPO}/issues/15007",),
    hint="make sure the vllm console script is on PATH and its environment imports",
    timeout=180,
    uses=("vllm-import",),
    # The console script is a process of its own: this group needs no `import vllm` of its own unless it fails
    # (then vllm-import, in the vLLM group, decides whether the cause is vLLM's import: _vllm_imports).
    group="cli",
)
@needs_vllm
def check_vllm_cli(params: Dict[str, Any]) -> Dict[str, Any]:
    expected = params.get("vllm_version")
    exe = shutil.which("vllm")
    facts: Dict[str, Any] = {"vllm": exe, "expected": expected}
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
        if not _vllm_imports():  # a consequence: of vllm-import's failure, or of the root that one follows from
            error = last_error_line(proc.stderr)
            facts.update(failed_need="vllm-import", need_diagnosis=f"`import vllm` fails: {error}")
            return result("skipped", "vllm-import failed", None, **facts)
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
        hint = hint or import_hint(error)
        if hint is None and _IMPORT_ERROR.search(error):
            # The console script was found and ran: the check's PATH hint would send the user the wrong way.
            hint = (
                "the `vllm` command is on PATH and runs, but an import of its fails: install or fix the package the "
                "error names at the version vLLM requires (pip-check lists unmet requirements), then `vllm --version`"
            )
        return result("failed", f"`vllm --version` exits {proc.returncode}: {error}", hint, **facts)
    if expected and not version.startswith(expected):
        return result(
            "failed",
            f"`vllm --version` prints {version!r}, the variant pins {expected}",
            version_hint(version, expected, params),
            **facts,
        )
    entrypoint = params.get("entrypoint") or []
    if entrypoint and shutil.which(entrypoint[0]) is None and not os.path.isfile(entrypoint[0]):
        return result("failed", f"the image's ENTRYPOINT {entrypoint[0]!r} does not resolve", None, **facts)
    return result("passed", f"`vllm --version` prints {version}", **facts)
