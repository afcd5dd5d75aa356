"""Run conditions and limits: identity, temp dir, caches, exec mounts, memory, CPU quota, network (12, 13)."""

from __future__ import annotations

import importlib.util
import math
import os
import pwd
import re
import tempfile
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from .children import marked, run_program
from .declarations import CONDITIONS, VLLM_REPO, check
from .errortext import last_error_line
from .podlimits import (
    PIDFD_ADVICE,
    blocker,
    cpu_quota,
    memory_limit_bytes,
    mount_of,
    mount_table,
    path_problem,
    pidfd_getfd_probe,
    pod_conditions,
    unsearchable_path_entries,
    writable,
)
from .results import result

# --- run-conditions (class 13) -----------------------------------------------------------------------
# Errors that run conditions cause, each with the condition and its fix (docs/profiles.md).
# main() appends the condition to a failed check's diagnosis when its output carries one of these.
# The pids-limit entry's condition: filled in by explain() with the limit (pids.max) where one is set.
PIDS_LIMITED = "the container's pids limit"
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
    (
        # EAGAIN from clone()/fork() under a pids cgroup limit (vLLM and torch start a thread per core and a
        # process per engine part); explained only where a limit is set (PIDS_LIMITED).
        re.compile(r"Resource temporarily unavailable|can't start new thread|fork: retry|BlockingIOError"),
        PIDS_LIMITED,
        "raise the pids limit (docker run --pids-limit N; Kubernetes: the kubelet's podPidsLimit), or lower the "
        "threads torch and vLLM start (OMP_NUM_THREADS, VLLM_CPU_OMP_THREADS_BIND)",
    ),
)
TRUE_VALUES = ("1", "true", "yes", "on")


def explain(text: str) -> Any:
    """(condition, fix) for the first run-condition error in ``text``, or None. A pids-limit error is one only
    where the container has a pids limit (its value is named)."""
    for pattern, condition, fix in CONDITION_ERRORS:
        if pattern.search(text or ""):
            if condition is PIDS_LIMITED:
                limit = pod_conditions()["pids_max"]
                if limit is None:
                    continue
                condition = f"the container's pids limit ({limit} processes and threads) is reached"
            return condition, fix
    return None


TORCH_PROBE = "torch_probe.py"


def _torch_probe() -> Any:
    """({threads, inductor_cache_dir}, None) from a child Python, or (None, its last error line)."""
    proc = run_program(TORCH_PROBE, timeout=300)
    probe = marked(proc, "MATRIX-TORCH")
    if probe is not None:
        return probe, None
    return None, last_error_line(proc.stderr) or f"exit {proc.returncode}"


def gpu_cache_dirs(env: Mapping[str, str], installed: Any, accelerator: str) -> Any:
    """[(variable, folder)] where the GPU libraries of this image write at run time, from the environment ``env``
    and the top-level modules ``installed`` (a set): Triton's kernel cache (TRITON_CACHE_DIR, else
    $TRITON_HOME/.triton/cache, else $HOME/.triton/cache: triton/knobs.py), FlashInfer's JIT workspace
    ($FLASHINFER_WORKSPACE_BASE, else $HOME, then .cache/flashinfer: flashinfer/jit/env.py), DeepGEMM's
    (DG_JIT_CACHE_DIR, else $HOME/.deep_gemm), and on a GPU variant torch's JIT extensions (TORCH_EXTENSIONS_DIR,
    else $XDG_CACHE_HOME/torch_extensions: torch.utils.cpp_extension). Pure."""
    home = env.get("HOME") or "/"
    cache_root = env.get("XDG_CACHE_HOME") or os.path.join(home, ".cache")
    dirs = []
    if "triton" in installed:
        triton_home = env.get("TRITON_HOME") or home
        dirs.append(("TRITON_CACHE_DIR", env.get("TRITON_CACHE_DIR") or os.path.join(triton_home, ".triton", "cache")))
    if "flashinfer" in installed:
        base = env.get("FLASHINFER_WORKSPACE_BASE") or home
        dirs.append(("FLASHINFER_WORKSPACE_BASE", os.path.join(base, ".cache", "flashinfer")))
    if "deep_gemm" in installed:
        dirs.append(("DG_JIT_CACHE_DIR", env.get("DG_JIT_CACHE_DIR") or os.path.join(home, ".deep_gemm")))
    if accelerator != "cpu":
        dirs.append(
            ("TORCH_EXTENSIONS_DIR", env.get("TORCH_EXTENSIONS_DIR") or os.path.join(cache_root, "torch_extensions"))
        )
    return dirs


# Modules whose run-time cache gpu_cache_dirs knows.
GPU_CACHE_MODULES = ("triton", "flashinfer", "deep_gemm")


def _installed(names: Sequence[str]) -> Any:
    """The modules of ``names`` that a real package provides (a spec with a file; not a namespace folder)."""
    found = set()
    for name in names:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            continue
        if spec is not None and spec.origin not in (None, "namespace"):
            found.add(name)
    return found


_FIX_CACHES = (
    "to a directory on a writable mount (e.g. under a tmpfs /tmp), or make it writable for group 0 "
    "(chgrp 0, chmod g=u) as OpenShift recommends"
)


# A problem of the run conditions: (condition, diagnosis, fix or None).
Problem = Tuple[str, str, Optional[str]]


@check(
    "run-conditions",
    proves=(
        "the image works under the container's run conditions (docs/profiles.md): inductor's cache "
        "dir resolves for this UID, a usable temp dir, writable caches (XDG, HF, vLLM, inductor; Triton, "
        "FlashInfer, DeepGEMM and torch's JIT extensions where the image has them), inductor's "
        "cache on an exec mount, no hub access without a network; reports the cgroup memory limit, and "
        "torch's threads against the CPU quota (a warning)"
    ),
    classes=(13, 26, 27, 49),
    reports=(
        "https://github.com/pytorch/pytorch/issues/140765",
        "https://github.com/pytorch/pytorch/issues/91005",
        f"{VLLM_REPO}/issues/29233",
        "https://github.com/llm-d/llm-d/issues/1430",
        "https://github.com/ai-dynamo/dynamo/issues/12770",
        "https://github.com/flashinfer-ai/flashinfer/issues/2394",
    ),
    hint="see the condition named in the diagnosis; docs/profiles.md lists each fix",
    timeout=120,
    affected_by=CONDITIONS,
    group="light",
)
def check_run_conditions(params: Dict[str, Any]) -> Dict[str, Any]:
    """The image under this container's run conditions (deployment profiles, README): identity, temp dir,
    caches, exec mounts, memory, CPU quota, network. Each problem names its condition and its fix; a CPU
    quota below torch's thread count is a warning (the image works, slowly)."""
    env = os.environ
    uid, gid = os.getuid(), os.getgid()
    try:
        user = pwd.getpwuid(uid).pw_name
    except KeyError:
        user = None
    mounts = mount_table()
    facts: Dict[str, Any] = {
        "uid": uid,
        "gid": gid,
        "passwd_user": user,
        "HOME": env.get("HOME"),
        "read_only_root": "ro" in mount_of("/", mounts)[1],
    }
    problems: List[Problem] = []
    warnings: List[str] = []
    _temp_dir(facts, problems)
    probe = _torch(facts, problems)
    inductor = (probe or {}).get("inductor_cache_dir") or env.get("TORCHINDUCTOR_CACHE_DIR")
    _caches(env, inductor, str(params.get("accelerator", "cpu")), facts, problems)
    if inductor:
        _exec_mount(inductor, mounts, facts, problems)
    # Memory: what the engine may use is the cgroup limit, not the host's RAM (cpu-engine-settings judges it).
    facts["memory_limit_bytes"], facts["memory_limit_source"] = memory_limit_bytes()
    _cpu_quota_warning(env, (probe or {}).get("threads"), facts, warnings)
    # Pod conditions (shm size, capabilities, no-new-privileges, seccomp, pids limit): reported as facts.
    facts.update(pod_conditions())
    if params.get("accelerator", "cpu") != "cpu":
        _pidfd_getfd(facts, warnings)
    _network(env, facts, problems, warnings)
    blocked = unsearchable_path_entries(env.get("PATH") or "")
    if blocked:
        facts["unsearchable_path"] = blocked
        problems.append(path_problem(blocked, uid, gid))
    if problems:
        return result(
            "failed",
            "; ".join(f"{condition}: {diagnosis}" for condition, diagnosis, _ in problems),
            "; ".join(dict.fromkeys(fix for _, _, fix in problems if fix)) or None,
            **facts,
        )
    return result("passed", "; ".join([_summary(env, user, inductor, facts), *warnings]), **facts)


def _temp_dir(facts: Dict[str, Any], problems: List[Problem]) -> None:
    """Read-only root: tempfile (and so `import torch`) needs one writable temp dir (facts ``tempdir``)."""
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


def _torch(facts: Dict[str, Any], problems: List[Problem]) -> Optional[Dict[str, Any]]:
    """torch's thread pool and where inductor puts its kernels (``_torch_probe``; arbitrary UID:
    pytorch/pytorch#140765), None where torch is not installed or there is no temp dir (facts ``torch``)."""
    probe = None
    if "tempdir" in facts and importlib.util.find_spec("torch") is not None:
        probe, error = _torch_probe()
        if probe is None:
            found = explain(error)
            condition = "arbitrary UID" if found and "getpwuid" in found[0] else "import torch"
            problems.append((condition, f"{error}" + (f" ({found[0]})" if found else ""), found[1] if found else None))
    facts["torch"] = probe
    return probe


def _caches(
    env: Mapping[str, str], inductor: Optional[str], accelerator: str, facts: Dict[str, Any], problems: List[Problem]
) -> None:
    """Caches (Hugging Face, vLLM, inductor, the GPU kernels') under HOME or XDG dirs must be writable by this UID
    (facts ``cache_dirs``, ``unwritable``: each folder with the one that blocks it)."""
    home = env.get("HOME") or "/"
    cache_root = env.get("XDG_CACHE_HOME") or os.path.join(home, ".cache")
    config_root = env.get("XDG_CONFIG_HOME") or os.path.join(home, ".config")
    dirs = [
        ("XDG_CACHE_HOME", cache_root),
        ("HF_HOME", env.get("HF_HOME") or os.path.join(cache_root, "huggingface")),
        ("VLLM_CACHE_ROOT", env.get("VLLM_CACHE_ROOT") or os.path.join(cache_root, "vllm")),
        ("VLLM_CONFIG_ROOT", env.get("VLLM_CONFIG_ROOT") or os.path.join(config_root, "vllm")),
    ]
    if inductor:
        dirs.append(("TORCHINDUCTOR_CACHE_DIR", inductor))
    dirs += gpu_cache_dirs(env, _installed(GPU_CACHE_MODULES), accelerator)
    facts["cache_dirs"] = dict(dirs)
    unwritable = [(var, path, error) for var, path in dirs for error in [writable(path)] if error]
    if not unwritable:
        return
    blocking = [dict(blocker(path), var=var, path=path) for var, path, _ in unwritable]
    facts["unwritable"] = blocking
    owners = "; ".join(
        dict.fromkeys(
            f"{b['blocker']} is owned by {b['uid']}:{b['gid']}, mode {b['mode']}" for b in blocking if b["blocker"]
        )
    )
    problems.append(
        (
            "caches not writable",
            f"not writable by UID {facts['uid']} GID {facts['gid']}: "
            + ", ".join(f"{path} ({var}: {error})" for var, path, error in unwritable)
            + (f" ({owners})" if owners else ""),
            f"set {', '.join(var for var, _, _ in unwritable)} {_FIX_CACHES}",
        )
    )


def _exec_mount(inductor: str, mounts: Any, facts: Dict[str, Any], problems: List[Problem]) -> None:
    """noexec: inductor dlopens the .so files it compiles into its cache dir (pytorch/pytorch#91005; facts
    ``inductor_mount``)."""
    point, options = mount_of(inductor, mounts)
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


def _cpu_quota_warning(
    env: Mapping[str, str], threads: Optional[int], facts: Dict[str, Any], warnings: List[str]
) -> None:
    """CPU quota: torch and vLLM size their thread pools from the host's cores (``threads``: torch's, None where
    not probed); a quota below them is a warning (facts ``cpu_quota``, ``cpus``, ``OMP_NUM_THREADS``)."""
    quota, quota_source = cpu_quota()
    facts["cpu_quota"], facts["cpu_quota_source"], facts["cpus"] = quota, quota_source, os.cpu_count()
    facts["OMP_NUM_THREADS"] = env.get("OMP_NUM_THREADS")
    if threads is not None and quota is not None and threads > math.ceil(quota):
        warnings.append(
            f"warning: torch uses {threads} threads on a quota of {quota:g} CPUs ({quota_source}): the image "
            f"works, slowly (threads wait for CPU time); set OMP_NUM_THREADS={max(1, math.floor(quota))} "
            "(vLLM CPU: VLLM_CPU_OMP_THREADS_BIND) to match the quota"
        )


def _pidfd_getfd(facts: Dict[str, Any], warnings: List[str]) -> None:
    """Several GPUs: vLLM's workers pass GPU memory handles with pidfd_getfd, which the profile may refuse (a
    warning; facts ``pidfd_getfd``)."""
    allowed, refused = pidfd_getfd_probe()
    facts["pidfd_getfd"] = allowed if allowed is not None else refused
    if allowed is False:
        facts["pidfd_getfd_error"] = refused
        warnings.append(
            f"warning: pidfd_getfd is refused here ({refused}): on several GPUs, vLLM's workers cannot share "
            f"memory handles (tensor parallelism fails with 'Operation not permitted', flashinfer#2394); "
            f"{PIDFD_ADVICE}"
        )


def _network(env: Mapping[str, str], facts: Dict[str, Any], problems: List[Problem], warnings: List[str]) -> None:
    """No network: nothing may try to reach a hub (facts ``network_interfaces``, ``HF_HUB_OFFLINE``)."""
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


def _summary(env: Mapping[str, str], user: Optional[str], inductor: Optional[str], facts: Mapping[str, Any]) -> str:
    """The passed check's diagnosis: identity, temp dir, caches, network and the limits seen."""
    offline = str(env.get("HF_HUB_OFFLINE", "")).lower() in TRUE_VALUES
    threads = (facts.get("torch") or {}).get("threads")
    quota = facts["cpu_quota"]
    return (
        f"UID {facts['uid']} GID {facts['gid']} ({user or 'no passwd entry'}), temp dir {facts.get('tempdir')}, "
        "caches writable"
        + (f", inductor's cache {inductor} on an exec mount" if inductor else "")
        + f", {len(facts['network_interfaces'])} network interface(s)"
        + (f", HF_HUB_OFFLINE={env.get('HF_HUB_OFFLINE')}" if offline else "")
        + (f", torch threads {threads}" if threads is not None else "")
        + (f", CPU quota {quota:g}" if quota is not None else "")
        + (f", memory {facts['memory_limit_bytes'] / 2**30:.1f} GiB" if facts["memory_limit_bytes"] else "")
        + (f", /dev/shm {facts['shm_bytes'] / 2**20:.0f} MiB" if facts["shm_bytes"] else "")
        + (f", pids limit {facts['pids_max']}" if facts["pids_max"] else "")
    )
