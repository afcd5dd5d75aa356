"""vLLM's CPU engine settings (class 22): the KV cache it reserves (``VLLM_CPU_KVCACHE_SPACE``) fits the memory
this container may use, and its OpenMP threads the CPUs it may run on."""

from __future__ import annotations

import os
from typing import Any, Dict

from .declarations import VLLM_REPO, check
from .podlimits import cpu_quota, memory_limit_bytes
from .results import result


@check(
    "cpu-engine-settings",
    proves=(
        "`VLLM_CPU_KVCACHE_SPACE` fits the container's memory (cgroup limit: v2 `memory.max`, v1 "
        "`memory.limit_in_bytes`; else MemTotal, and the diagnosis says which)"
    ),
    classes=(12,),
    reports=(f"{VLLM_REPO}/issues/29233",),
    hint="set VLLM_CPU_KVCACHE_SPACE (GiB) well below the container's memory limit, or leave it unset",
    timeout=60,
    accelerators=("cpu",),
    affected_by=("memory", "cpus", "env"),
    group="light",
)
def check_cpu_engine_settings(params: Dict[str, Any]) -> Dict[str, Any]:
    limit, source = memory_limit_bytes()
    raw = os.environ.get("VLLM_CPU_KVCACHE_SPACE")
    facts: Dict[str, Any] = {
        "VLLM_CPU_KVCACHE_SPACE": raw,
        "memory_limit_bytes": limit,
        "memory_limit_source": source,
        "VLLM_CPU_OMP_THREADS_BIND": os.environ.get("VLLM_CPU_OMP_THREADS_BIND"),
        "cpus": os.cpu_count(),
        "cpu_quota": cpu_quota()[0],
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
