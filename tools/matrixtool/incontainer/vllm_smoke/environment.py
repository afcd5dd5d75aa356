"""The environment a server is given and its limits (failure classes 38-41): every variable of the container (the
image's ENV, the profile's and the run's ``env``) judged against the installed vLLM's own registry
(``programs/vllm_envs.py``, ``envrules``), and the open-files limit, the process limits and vLLM's start-up
timeouts against what the variant needs (``limit_findings``)."""

from __future__ import annotations

import importlib.util
import math
import os
import re
import resource
import subprocess
from typing import Any, Dict, List, Mapping, Optional, Sequence

from .children import marked, run_program
from .declarations import VLLM_REPO, check
from .envrules import (
    ENGINE_READY_DEFAULT_S,
    ENGINE_READY_TIMEOUT,
    ERROR,
    NEEDS_PACKAGE,
    STARTUP_TIMEOUT,
    TRUE_WORDS,
    WARNING,
    Finding,
    device_lists,
    missing_packages,
    proxy_bypass,
    rejected_values,
    split_findings,
    unknown_names,
)
from .errortext import last_error_line
from .podlimits import cpu_quota, pod_conditions
from .results import result

VLLM_ENVS = "vllm_envs.py"
# vLLM raises the soft open-files limit to this at start (vllm/utils/system_utils.py set_ulimit's default, read
# from the installed file where it can be: ``nofile_target``), and only to this: where the hard limit is lower, the
# soft one stays as it was and vLLM warns.
NOFILE_TARGET = 65535
# Open files a server needs at the least: uvicorn's listen backlog (2048 connections waiting, its default) and as
# many in flight, each a socket, beside the model's files and vLLM's own sockets (docs/checks.md "environment").
NOFILE_NEEDED = 4096
# Threads per vLLM process beyond torch's two pools of one thread per CPU: asyncio's executor, ZMQ's I/O threads,
# the tokenizer's pool, uvicorn (an estimate from the threads of a serving CPU image's processes; docs/checks.md).
THREADS_PER_PROCESS = 32
ELSEWHERE_FILE_LIMIT = 5000  # .py files of the vllm package read, at most, to find where a name is read
# The limits class 41 names (beside the start-up timeouts, which are variables).
LIMITS = ("RLIMIT_NOFILE", "RLIMIT_NPROC", "pids.max")


def nofile_target(vllm_dir: Optional[str]) -> int:
    """The soft limit vLLM's ``set_ulimit`` raises RLIMIT_NOFILE to, from the installed source (else
    ``NOFILE_TARGET``, vLLM 0.32's)."""
    try:
        with open(os.path.join(vllm_dir or "", "utils", "system_utils.py"), encoding="utf-8") as f:
            m = re.search(r"def set_ulimit\(\s*target_soft_limit(?:\s*:\s*int)?\s*=\s*([0-9]+)", f.read())
    except OSError:
        m = None
    return int(m.group(1)) if m else NOFILE_TARGET


def threads_needed(cpus: int, gpus: int) -> int:
    """Processes and threads a server starts, an estimate: the API server and the engine core (plus one worker
    per GPU past the first), each with torch's two pools of ``cpus`` threads and ``THREADS_PER_PROCESS`` more."""
    processes = 2 + max(0, gpus - 1)
    return processes * (2 * cpus + THREADS_PER_PROCESS)


def _seconds(value: Optional[str]) -> Optional[float]:
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None  # a value vLLM refuses is class 39's finding


def timeout_findings(
    env: Mapping[str, str], registry: Sequence[str], defaults: Mapping[str, str], need_s: Optional[float], why: str
) -> List[Finding]:
    """Class 41: each start-up timeout of the registry (``STARTUP_TIMEOUT``) shorter than ``need_s``: vLLM ends a
    slower start with 'Engine core initialization failed' (vllm#48031). Set shorter: an error; vLLM's default
    shorter: a warning (a start slower than the default is killed, one faster serves)."""
    if need_s is None:
        return []
    found: List[Finding] = []
    for name in registry:
        if not STARTUP_TIMEOUT.fullmatch(name):
            continue
        given = _seconds(env.get(name))
        fallback = _seconds(defaults.get(name))
        if name == ENGINE_READY_TIMEOUT and fallback is None:
            fallback = float(ENGINE_READY_DEFAULT_S)
        seconds = given if given is not None else fallback
        if seconds is None or seconds <= 0 or seconds >= need_s:
            continue
        what = f"{name}={env[name]}" if given is not None else f"{name} unset (vLLM's default {seconds:g} s)"
        found.append(
            (
                ERROR if given is not None else WARNING,
                name,
                f"{what} is shorter than {why} ({need_s:g} s): vLLM ends a slower start with 'Engine core "
                f"initialization failed' before the server is ready (vllm#48031)",
                f'docker run -e {name}={math.ceil(need_s)}; Kubernetes: env {name}: "{math.ceil(need_s)}" in the '
                "container (tools/matrix kube writes it)",
            )
        )
    return found


def nofile_served(nofile: Sequence[int], target: int) -> int:
    """The soft open-files limit a server runs with: vLLM's ``target`` where the hard limit allows it, else the
    soft limit as given (``nofile``: (soft, hard); vLLM then warns 'Found ulimit of …')."""
    soft, hard = nofile[0], nofile[1]
    if soft == resource.RLIM_INFINITY or soft >= target:
        return soft
    return target if hard == resource.RLIM_INFINITY or hard >= target else soft


def limit_findings(
    nofile: Sequence[int], target: int, nproc: Sequence[int], pids_max: Optional[int], uid: int, need: int
) -> List[Finding]:
    """Class 41, both warnings: the open-files limit the server runs with (``nofile_served``) below
    ``NOFILE_NEEDED`` (vLLM warns 'Found ulimit of …' and serves on, then fails requests with 'Too many open files
    (os error 24)' at high concurrency), and the process limits (RLIMIT_NPROC, which binds a UID other than 0
    across the host, and the pids cgroup) below ``need`` processes and threads."""
    found: List[Finding] = []
    infinity = resource.RLIM_INFINITY
    served = nofile_served(nofile, target)
    if served != infinity and served < NOFILE_NEEDED:
        found.append(
            (
                WARNING,
                "RLIMIT_NOFILE",
                f"the open-files limit is {nofile[0]} (hard {nofile[1]}): vLLM cannot raise it to its {target} "
                f"(it warns 'Found ulimit of {nofile[0]}' and serves on), and {served} open files are fewer than "
                f"the {NOFILE_NEEDED} a server needs at high concurrency: requests fail with 'Too many open files "
                "(os error 24)'",
                f"docker run --ulimit nofile={target}:{target}; Kubernetes has no Pod field for it: the container "
                f"runtime's default sets it (containerd's LimitNOFILE, CRI-O's default_ulimits, dockerd "
                f"--default-ulimit nofile={target}:{target})",
            )
        )
    if uid != 0 and nproc[0] != infinity and nproc[0] < need:
        found.append(
            (
                WARNING,
                "RLIMIT_NPROC",
                f"the process limit (RLIMIT_NPROC) of UID {uid} is {nproc[0]}, below the ~{need} processes and "
                "threads a server starts here: thread starts fail with 'can't start new thread' (it counts every "
                "process of this UID on the host)",
                f"docker run --ulimit nproc={need * 2}; Kubernetes: the container runtime's default (no Pod field)",
            )
        )
    if pids_max is not None and pids_max < need:
        found.append(
            (
                WARNING,
                "pids.max",
                f"the pids limit is {pids_max}, below the ~{need} processes and threads a server starts here: "
                "thread starts fail with 'Resource temporarily unavailable'",
                f"docker run --pids-limit {need * 2}; Kubernetes: the kubelet's podPidsLimit",
            )
        )
    return found


def _registry() -> Any:
    """The installed vLLM's registry (``programs/vllm_envs.py``'s answer), or {"error": ...}."""
    try:
        proc = run_program(VLLM_ENVS, timeout=60)
        found = marked(proc, "MATRIX-VLLM-ENVS")
    except (OSError, ValueError, subprocess.TimeoutExpired) as exc:  # no program, no JSON, no answer in time
        return {"error": f"{VLLM_ENVS}: {type(exc).__name__}: {exc}"}
    if not isinstance(found, dict):
        return {"error": last_error_line(proc.stderr) or f"{VLLM_ENVS} exited {proc.returncode}"}
    return found


def read_elsewhere(names: Sequence[str], root: Optional[str]) -> Dict[str, str]:
    """{name: a file of the vllm package (relative) that names it} for ``names`` that vLLM reads outside envs.py
    (at most ``ELSEWHERE_FILE_LIMIT`` .py files read)."""
    out: Dict[str, str] = {}
    if not names or not root:
        return out
    left, budget = set(names), ELSEWHERE_FILE_LIMIT
    for folder, _, files in os.walk(root):
        for file in files:
            if not file.endswith(".py") or file == "envs.py" or budget <= 0:
                continue
            budget -= 1
            path = os.path.join(folder, file)
            try:
                with open(path, encoding="utf-8", errors="replace") as f:
                    text = f.read()
            except OSError:
                continue
            for name in [n for n in left if f'"{n}"' in text or f"'{n}'" in text]:
                out[name] = os.path.relpath(path, root)
                left.discard(name)
            if not left:
                return out
    return out


def _hub_uses_hf_transfer() -> bool:
    """Whether the installed huggingface_hub imports hf_transfer anywhere (huggingface_hub >= 1.0 does not)."""
    spec = importlib.util.find_spec("huggingface_hub")
    if spec is None or not spec.submodule_search_locations:
        return False
    root = next(iter(spec.submodule_search_locations))
    for folder, _, files in os.walk(root):
        for file in files:
            if file.endswith(".py"):
                try:
                    with open(os.path.join(folder, file), encoding="utf-8", errors="replace") as f:
                        if re.search(r"^\s*(import hf_transfer|from hf_transfer import)", f.read(), re.M):
                            return True
                except OSError:
                    continue
    return False


def _need_s(params: Mapping[str, Any]) -> Any:
    """(seconds, why) a start may take: the measured cold start where the host gives one, else the variant's
    ready_budget; (None, "") without either."""
    cold, budget = params.get("cold_start_s"), params.get("ready_budget_s")
    if cold is not None and (budget is None or float(cold) > float(budget)):
        return float(cold), "the cold start measured"
    if budget is not None:
        return float(budget), "the variant's ready_budget"
    return None, ""


@check(
    "environment",
    proves="every variable the server is given (image ENV, profile, run) is one the installed vLLM knows, with a "
    "value it and its libraries read as meant (device lists, booleans, sizes, packages the setting needs), "
    "proxies bypass loopback; the open-files and process limits and vLLM's start-up timeouts meet the variant's "
    "needs (warnings where the server runs at a cost)",
    classes=(38, 39, 40, 41),
    reports=(
        f"{VLLM_REPO}/issues/50292",
        f"{VLLM_REPO}/issues/41848",
        "https://github.com/lumi-ai-factory/laifs-container-recipes/issues/6",
        "https://github.com/wiktorn/Overpass-API/pull/107",
        "https://github.com/bastienwirtz/homer/issues/394",
        f"{VLLM_REPO}/issues/48031",
    ),
    hint='see each variable\'s fix in the diagnosis; docs/checks.md "environment"',
    timeout=120,
    affected_by=("env", "pids_limit", "nofile"),
    group="light",
)
def check_environment(params: Dict[str, Any]) -> Dict[str, Any]:
    """Classes 38-41 on this container's environment (``os.environ``: the image's, the profile's and the run's
    variables). Facts: registry (path, names, executed), vllm_variables (set), findings, limits."""
    env = dict(os.environ)
    found = _registry()
    accelerator = str(params.get("accelerator", "cpu"))
    names: List[str] = list(found.get("names") or [])
    vllm_dir = os.path.dirname(found["path"]) if found.get("path") else None
    facts: Dict[str, Any] = {
        "registry": {"path": found.get("path"), "names": len(names), "executed": found.get("executed")},
        "vllm_variables": {k: v for k, v in sorted(env.items()) if k.startswith("VLLM_")},
    }
    findings: List[Finding] = []
    if names:
        unknown = [n for n in env if n.startswith("VLLM_") and n not in names]
        elsewhere = read_elsewhere(unknown, vllm_dir)
        facts["read_outside_envs"] = elsewhere
        findings += unknown_names(env, names, elsewhere)
        findings += rejected_values(env, found.get("rejected") or {}, found.get("flags") or {})
    else:
        facts["registry"]["error"] = found.get("error")
    findings += device_lists(env, accelerator)
    modules = {module for module, _ in NEEDS_PACKAGE.values()}
    hf_transfer = env.get("HF_HUB_ENABLE_HF_TRANSFER", "").strip().lower() in TRUE_WORDS
    findings += missing_packages(
        env, {m: importlib.util.find_spec(m) is not None for m in modules}, hf_transfer and _hub_uses_hf_transfer()
    )
    findings += proxy_bypass(env)
    findings += _limits(env, names, found.get("defaults") or {}, params, accelerator, vllm_dir, facts)
    firsts: Dict[str, Finding] = {}
    for finding in findings:  # one per variable: the first found
        firsts.setdefault(finding[1], finding)
    findings = list(firsts.values())
    facts["findings"] = [{"severity": s, "variable": v, "diagnosis": d, "fix": f} for s, v, d, f in findings]
    by = split_findings(findings)
    warnings = [f"warning: {d}; fix: {f}" for _, _, d, f in by[WARNING]]
    if by[ERROR]:
        return result(
            "failed",
            "; ".join([d for _, _, d, _ in by[ERROR]] + warnings),
            "; ".join(dict.fromkeys(f for _, _, _, f in by[ERROR])),
            **facts,
        )
    summary = (
        f"{len(facts['vllm_variables'])} VLLM_* variable(s), all known to vLLM's registry ({len(names)} names)"
        if names
        else f"vLLM's registry was not read ({facts['registry'].get('error')}): names and values not judged"
    )
    short = any(f[1] in LIMITS or STARTUP_TIMEOUT.fullmatch(f[1]) for f in by[WARNING])
    limits = "" if short else ", limits meet the variant's needs"
    return result("passed", "; ".join([summary + limits, *warnings]), **facts)


def _limits(
    env: Mapping[str, str],
    names: Sequence[str],
    defaults: Mapping[str, str],
    params: Mapping[str, Any],
    accelerator: str,
    vllm_dir: Optional[str],
    facts: Dict[str, Any],
) -> List[Finding]:
    """Class 41's findings, with the limits seen as facts (``limits``)."""
    quota, _ = cpu_quota()
    cpus = max(1, math.ceil(quota)) if quota else os.cpu_count() or 1
    need_threads = threads_needed(cpus, 0 if accelerator == "cpu" else 1)
    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)
    nproc = resource.getrlimit(resource.RLIMIT_NPROC)
    pids_max = pod_conditions()["pids_max"]
    target = nofile_target(vllm_dir)
    need_s, why = _need_s(params)
    facts["limits"] = {
        "nofile": list(nofile),
        "nofile_target": target,
        "nofile_served": nofile_served(nofile, target),
        "nproc": list(nproc),
        "pids_max": pids_max,
        "threads_needed": need_threads,
        "start_needed_s": need_s,
        ENGINE_READY_TIMEOUT: env.get(ENGINE_READY_TIMEOUT) or defaults.get(ENGINE_READY_TIMEOUT),
    }
    found = limit_findings(nofile, target, nproc, pids_max, os.getuid(), need_threads)
    return found + timeout_findings(env, names or [ENGINE_READY_TIMEOUT], defaults, need_s, why)
