"""vLLM: it imports, a tiny model is made, its engine configuration validates, it generates, its CLI works."""

from __future__ import annotations

import importlib.util
import os
import re
import sys
import traceback
from typing import Any, Dict, Optional

from .children import marked, run_program
from .declarations import HOST_GROUP, VLLM_REPO, check
from .errortext import compile_hint, error_with_cause, first_cause, import_hint, last_error_line
from .gpuprobe import needs_gpu, needs_vllm
from .installed import dist_version, providers_of
from .results import result
from .tinymodel import ensure_model, read_model


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


def _failing_package(text: str) -> Optional[str]:
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
    reports=(f"{VLLM_REPO}/issues/57684", f"{VLLM_REPO}/pull/55847"),
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


@check(
    "serve",
    proves=(
        "`vllm serve` started as the image's users must (its ENTRYPOINT, CMD and script read: `vllm`, `vllm "
        "serve`, the API server module, a wrapper, no ENTRYPOINT; the README's line for ours), the tiny model mounted "
        "read-only: "
        "/health ready (time per phase), /v1/models, greedy /v1/completions == offline-generate's eager tokens, "
        "stream == non-stream, chat, /metrics counts, /version, the image's own HEALTHCHECK run as Docker runs "
        "it; `docker stop` during a stream exits 0/143 "
        "within the grace, PID 1 the server, the engine stopped by it (its `[shutdown]` lines). Probed from outside: "
        "the host's published port, or a client "
        "container in its network namespace. On a host or in a pod (the bundle): `vllm serve` as a child "
        "process on a loopback port, SIGTERM during a stream exits 0/-15 within the grace, its process group "
        "left empty. With the full suite (compiled): a warm start on the compile cache the first start wrote (in "
        "containers a volume at the image's cache root; on a host or in a pod a fresh folder under its cache root), "
        "its time to ready, and its reuse shown by vLLM's load line or by no compiled kernel added to the cache; "
        "in containers the first server, on a pod's /dev/shm volume, is killed with SIGKILL once probed (nothing of "
        "it may be left; /dev/shm's leftovers named) and the warm start is its restart in a fresh container on the "
        "same /dev/shm and cache, which must come up and is the one stopped during a stream"
    ),
    classes=(15, 16, 17, 18, 19, 20, 22, 31, 36, 42, 43, 44, 45, 50),
    reports=(
        f"{VLLM_REPO}/issues/14888",
        f"{VLLM_REPO}/issues/22072",
        f"{VLLM_REPO}/issues/55510",
        f"{VLLM_REPO}/issues/54002",
    ),
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
