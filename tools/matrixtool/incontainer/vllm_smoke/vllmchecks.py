"""vLLM: it imports, a tiny model is made, its engine configuration validates, it generates, its CLI works."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import time
import traceback
from typing import Any, Dict, Optional, Tuple

from .children import MODEL_DIR, WORK_DIR, marked, run_program
from .declarations import HOST_GROUP, check
from .errortext import compile_hint, error_with_cause, first_cause, import_hint, last_error_line, root_cause
from .gpuprobe import gpu_visible, needs_gpu, needs_vllm
from .installed import dist_version, providers_of
from .results import result

_VLLM = "https://github.com/vllm-project/vllm"


@check(
    "vllm-import",
    proves="`import vllm` (and vllm.triton_utils) succeeds: the prerequisite of every check that uses vLLM",
    classes=(),
    reports=(),
    hint="read the import error: install the package it names, or the vLLM build for this torch",
    timeout=300,
    needs=("torch-import",),
    group="vllm",
)
@needs_vllm
def check_vllm_import(params: Dict[str, Any]) -> Dict[str, Any]:
    """Import vLLM in this interpreter (the checks of its group then share it); the diagnosis names the module
    that failed and the distribution that provides it."""
    try:
        import vllm
        import vllm.triton_utils
    except Exception:
        text = traceback.format_exc()
        error = last_error_line(text)
        where = _failing_package(text)
        also = f" (raised in {where})" if where else ""
        hint = import_hint(error)
        if hint is None and where:
            hint = f"the import fails inside {where}: reinstall or remove it (pip check names what needs it)"
        return result("failed", f"`import vllm` fails: {error}{also}", hint, vllm=dist_version("vllm"))
    return result("passed", f"vLLM {vllm.__version__} imports", vllm=vllm.__version__)


def _failing_package(text: str) -> Any:
    """``<distribution> <version>`` of the site-packages folder where a traceback ended, other than vllm; or None."""
    frames = re.findall(r'File "[^"]*/(?:site|dist)-packages/([A-Za-z0-9_]+)', text)
    for module in reversed(frames):
        if module != "vllm":
            dists = providers_of(module) or [module]
            return ", ".join(f"{d} {dist_version(d) or ''}".strip() for d in dists)
    return None


@check(
    "tiny-model",
    proves="a tiny random Llama and a locally trained tokenizer are made in the container (tokenizers trains it; "
    "transformers reads the config and the tokenizer, safetensors the weights; no hub access): the model of "
    "model-runner, offline-generate and serve",
    classes=(),
    reports=(),
    hint="install transformers and tokenizers (vLLM requires them); read the error in the log",
    timeout=300,
    needs=("torch-import",),
    group="vllm",
)
def check_tiny_model(params: Dict[str, Any]) -> Dict[str, Any]:
    """Make the tiny model once per container (WORK_DIR/tiny-llama), in this interpreter, and read it back as vLLM
    will: its config and tokenizer with transformers, its weights' names with safetensors (the group's ``import
    vllm`` has imported both)."""
    try:
        folder = ensure_model()
        facts = read_model(folder)
    except Exception:
        text = traceback.format_exc()
        error = error_with_cause(text)  # transformers wraps the import error that made it fail
        return result("failed", f"making the tiny model fails: {error}", import_hint(first_cause(text) or error))
    return result(
        "passed", f"a tiny Llama and its tokenizer are made in {folder} and read back", folder=folder, **facts
    )


def read_model(folder: str) -> Any:
    """The model in ``folder`` as transformers and safetensors read it: {"vocab_size", "tensors", "tokenizer"}.
    Raises what they raise."""
    from safetensors import safe_open
    from transformers import AutoConfig, AutoTokenizer

    config = AutoConfig.from_pretrained(folder)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    with safe_open(os.path.join(folder, "model.safetensors"), framework="pt") as weights:
        tensors = len(list(weights.keys()))
    return {"vocab_size": config.vocab_size, "tensors": tensors, "tokenizer": type(tokenizer).__name__}


def ensure_model() -> Any:
    """Make the tiny random Llama + locally trained tokenizer once per container; return its folder.

    Interpreters of parallel groups may ask at once: a lock file serialises them, and the model is written to a
    temporary folder that is renamed into place. Raises what making the model raises."""
    import fcntl

    if os.path.isfile(os.path.join(MODEL_DIR, "config.json")):
        return MODEL_DIR
    os.makedirs(os.path.dirname(MODEL_DIR), exist_ok=True)
    # A lock file of another UID (an earlier profile's container, on the same volume) opens for reading only
    # (flock needs no more): a sticky folder refuses to open it for writing.
    lock_path = MODEL_DIR + ".lock"
    mode = "r" if os.path.exists(lock_path) and os.stat(lock_path).st_uid != os.geteuid() else "w"
    with open(lock_path, mode) as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not os.path.isfile(os.path.join(MODEL_DIR, "config.json")):
            from .programs import make_model

            partial = f"{MODEL_DIR}.{os.getpid()}"
            make_model.make(partial)
            os.replace(partial, MODEL_DIR)
    return MODEL_DIR


V2_ERROR = "Model Runner V2 requires Triton."


def short_error(text: str) -> Any:
    """The message inside a pydantic ValidationError (``Value error, X [type=...``), else the first line."""
    m = re.search(r"Value error, (.*?)(?: \[type=|$)", text, re.MULTILINE)
    if m:
        return m.group(1).strip()
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[0] if lines else text


def _envs_cached() -> Any:
    """True when vLLM's environment variables are cached in this interpreter (vllm/envs.py enable_envs_cache, called
    when an engine starts): a changed os.environ is then no longer read, so another environment needs a child."""
    envs = sys.modules.get("vllm.envs")
    return envs is not None and hasattr(getattr(envs, "__getattr__", None), "cache_clear")


def _validate(env_overrides: Any, timeout: float) -> Any:
    """vLLM's engine configuration for the tiny model, with ``env_overrides`` on top of the image's environment.

    In this interpreter (the group shares its ``import vllm``) while vLLM reads os.environ afresh
    (vllm/envs.py: lazily, per access, until an engine caches them); else in a child Python with them."""
    if not _envs_cached():
        from .programs import validate

        saved = {key: os.environ.get(key) for key in env_overrides}
        os.environ.update(env_overrides)
        try:
            data = validate.validate(ensure_model())
        except Exception:
            return {"ok": False, "error": last_error_line(traceback.format_exc()), "has_triton": None}
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
        if not data["ok"]:
            data["error"] = short_error(data["error"])
        return data
    proc = run_program("validate.py", [ensure_model()], env_overrides, timeout)
    data = marked(proc, "MATRIX-VALIDATE")
    if data is not None:
        if not data["ok"]:
            data["error"] = short_error(data["error"])
        return data
    return {
        "ok": False,
        "error": last_error_line(proc.stderr) or f"exit {proc.returncode}",
        "has_triton": None,
    }


TRITON_FIX = (
    "install the triton that torch pins, or set VLLM_USE_V2_MODEL_RUNNER=0 (or leave it unset); "
    "check with: python -c 'import triton'"
)


def runner_hint(error: str) -> Any:
    """The fix for vLLM's configuration failing with ``error``: Triton's only where the error is about Triton
    (``Model Runner V2 requires Triton.``, or it names triton); else the package, compiler or setting it names."""
    if V2_ERROR in (error or "") or re.search(r"\btriton\b", error or "", re.IGNORECASE):
        return TRITON_FIX
    return (
        import_hint(error)
        or compile_hint(error)
        or "read vLLM's configuration error above: it names the setting or the package at fault (see pip-check)"
    )


@check(
    "model-runner",
    proves=(
        "vLLM's config validates with the image's env; forcing `VLLM_USE_V2_MODEL_RUNNER=1` behaves as the "
        "Triton state predicts (`Model Runner V2 requires Triton.`)"
    ),
    classes=(1,),
    reports=(f"{_VLLM}/issues/57684", f"{_VLLM}/pull/55847"),
    hint="read vLLM's configuration error in the log: it names the setting or the package at fault",
    timeout=300,
    needs=("vllm-import", "tiny-model"),
    group="vllm",  # both halves in the group's interpreter, before any engine caches vLLM's environment
)
@needs_vllm
@needs_gpu
def check_model_runner(params: Dict[str, Any]) -> Dict[str, Any]:
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
        ("triton not installed" if importlib.util.find_spec("triton") is None else "a triton of no distribution")
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
            runner_hint(default["error"]),
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
                runner_hint(forced["error"]),
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
        runner_hint(forced["error"]),
        **facts,
    )


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
    reports=(f"{_VLLM}/issues/14888",),
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


@check(
    "vllm-cli",
    proves=(
        "`vllm --version` prints the pinned version (GPU variant without a GPU: the CLI's module imports and "
        "vLLM reports that version); the image's ENTRYPOINT resolves"
    ),
    classes=(10,),
    reports=(f"{_VLLM}/issues/15007",),
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
        if not _vllm_imports():
            return result("skipped", "vllm-import failed", **facts)
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
        return result(
            "failed", f"`vllm --version` exits {proc.returncode}: {error}", hint or import_hint(error), **facts
        )
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


@check(
    "serve",
    proves=(
        "`vllm serve` through the image's own ENTRYPOINT (the README's line), the tiny model mounted read-only: "
        "/health ready (time per phase), /v1/models, greedy /v1/completions == offline-generate's eager tokens, "
        "stream == non-stream, chat, /metrics counts, /version, the image's own HEALTHCHECK run as Docker runs "
        "it; `docker stop` during a stream exits 0/143 "
        "within the grace, PID 1 the server. Probed from outside: the host's published port, or a client "
        "container in its network namespace. On a host or in a pod (the bundle): `vllm serve` as a child "
        "process on a loopback port, SIGTERM during a stream exits 0/-15 within the grace, its process group "
        "left empty. With the full suite (compiled): a warm start on the compile cache the first start wrote (in "
        "containers a volume at the image's cache root; on a host or in a pod a fresh folder under its cache root), "
        "its time to ready, and its reuse shown by vLLM's load line or by no compiled kernel added to the cache"
    ),
    classes=(15, 16, 17, 18, 19, 20, 22, 31),
    reports=(f"{_VLLM}/issues/14888",),
    hint="read the server's log (log file <variant>.serve.log)",
    timeout=1500,
    affected_by=("user", "read_only", "tmpfs", "env", "network", "memory", "cpus", "shm_size", "pids_limit"),
    needs=("tiny-model",),
    uses=("offline-generate",),
    group=HOST_GROUP,
)
def check_serve(params: Dict[str, Any]) -> Dict[str, Any]:
    """Never called: serve is a step of the plan that its runner runs (a server container of the image,
    ``matrixtool.smoke.serve``; in the bundle a child process, ``serving``), in no interpreter of the checks."""
    return result("failed", "serve is run by the runner (tools/matrix, or the bundle), not inside a check group", None)
