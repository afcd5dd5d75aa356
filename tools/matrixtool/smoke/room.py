"""Whether the profile runs of one image run side by side: the room this machine gives the tool (cores and memory,
measured at the start of the run: ``measure``) against what one profile run needs (constants measured from a run,
below), and what the runs share (a GPU). ``schedule`` is pure; the executor (``smoke.executor``) runs up to its
``at_once`` profile runs at a time, each side by side on cores of its own (``Schedule.cores``, ``omp_bind``), and
reports their results in the plan's order either way.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from matrixtool.incontainer.vllm_smoke import podlimits
from matrixtool.smoke.plan import ProfileRun

# What one profile run of the CPU image needs beside another. Memory, measured on 2026-12-03 18:27-18:52 UTC
# (`tools/matrix test --image vllm-matrix/cpu:0.32.0 --as cpu --suite full --profile default --profile restricted`
# on the 2-core, 24 GiB machine; every container of the run sampled each second from its cgroup v1 files,
# memory.usage_in_bytes less inactive file pages): the check container peaked at 1.72 GiB (its groups' interpreters),
# the cold server at 1.78 GiB (engine core compiling, 1 GiB KV cache: VLLM_CPU_KVCACHE_SPACE); the warm start, a
# second server beside the cold one, holds as much: 1.72 + 2 x 1.78 = 5.3 GiB, stated as 6 GiB for what the cold
# server adds past compiling (that run's servers never got ready: load average 40 to 50 from other sessions).
# Cores: a run's critical path is its server's cold, then warm start, one core's work for most of its time
# (issue 39, from `make bench`'s naive server: ready in 62 s on 2 cores with nothing beside it); the check
# container's groups fill what is left. docs/figures.md, "Profiles side by side".
PROFILE_RUN_CORES = 1.0
PROFILE_RUN_MEMORY_BYTES = 6 * 1024**3
# Left to everything else of the machine (the engine, the tool, a shell): not handed to profile runs.
RESERVED_MEMORY_BYTES = 1 * 1024**3
# The CPUs vLLM's CPU engine binds its worker's OpenMP threads to (vllm/envs.py; read by
# vllm/utils/ompmultiprocessing.py, vLLM 0.32.0). Its default, `auto`, takes the CPUs of the first NUMA node the
# process may run on, less one reserved for the engine core per worker (the last): on this 2-core machine every
# vLLM engine binds its worker (its 47 threads and the compiler processes inductor starts) to CPU 0, so two profile
# runs side by side put both servers and their checks' engines on CPU 0 while CPU 1 idles (seen with
# /proc/PID/task/*/status Cpus_allowed_list, 2026-12-07; docs/figures.md, "Profiles side by side").
OMP_BIND_VAR = "VLLM_CPU_OMP_THREADS_BIND"


@dataclass(frozen=True, kw_only=True)
class Room:
    """What this machine gives the tool's process: ``cores`` it may run on (CPUs, possibly fractional under a cgroup
    quota) and ``memory_bytes`` it may still take (None: unreadable), each with the files it was read from;
    ``cpu_ids``: the CPUs of its affinity mask, ascending (empty: unknown, not Linux)."""

    cores: float
    cores_source: str
    memory_bytes: int | None
    memory_source: str
    cpu_ids: tuple[int, ...] = ()

    def describe(self) -> str:
        """``2 cores (sched_getaffinity), 21.3 GiB available (/proc/meminfo MemAvailable)``."""
        cores = f"{self.cores:g} core{'s' if self.cores != 1 else ''} ({self.cores_source})"
        if self.memory_bytes is None:
            return f"{cores}, memory unknown ({self.memory_source})"
        return f"{cores}, {self.memory_bytes / 1024**3:.1f} GiB available ({self.memory_source})"


def _affinity() -> tuple[int, ...]:
    """The CPUs this process may run on, ascending; empty where the system does not say (not Linux)."""
    try:
        return tuple(sorted(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not Linux
        return ()


def _mem_available() -> int | None:
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _cgroup_memory_left() -> tuple[int | None, str]:
    """(bytes, source): this process's cgroup memory limit less what the cgroup uses (v2 memory.max and
    memory.current, v1 memory.limit_in_bytes and memory.usage_in_bytes); (None, "") without a limit."""
    limit, path = podlimits.cgroup_value("memory.max", "memory", "memory.limit_in_bytes")
    if limit is None or not limit.isdigit() or int(limit) >= 2**60:  # "max", or v1's page-rounded 2^63
        return None, ""
    used, _ = podlimits.cgroup_value("memory.current", "memory", "memory.usage_in_bytes")
    left = int(limit) - (int(used) if used is not None and used.isdigit() else 0)
    return max(0, left), f"cgroup {path}"


def measure() -> Room:
    """The room of this process now: the CPUs of its affinity mask (``os.sched_getaffinity``: ``taskset``, a
    cpuset) capped by its cgroup's CPU quota (v2 cpu.max, v1 cpu.cfs_quota_us); the memory still available
    (/proc/meminfo MemAvailable) capped by what its cgroup's limit leaves (v2 memory.max, v1
    memory.limit_in_bytes). The containers the tool starts run on the engine's machine: where that is another
    machine this measures the wrong one, and the runs go one after the other only if this one is small."""
    ids = _affinity()
    cores: float = len(ids) or os.cpu_count() or 1
    cores_source = "sched_getaffinity" if ids else "cpu_count"
    quota, quota_source = podlimits.cpu_quota()
    if quota is not None and quota < cores:
        cores, cores_source = quota, str(quota_source)
    memory, memory_source = _mem_available(), "/proc/meminfo MemAvailable"
    left, left_source = _cgroup_memory_left()
    if left is not None and (memory is None or left < memory):
        memory, memory_source = left, left_source
    return Room(cores=cores, cores_source=cores_source, memory_bytes=memory, memory_source=memory_source, cpu_ids=ids)


@dataclass(frozen=True, kw_only=True)
class Schedule:
    """How the profile runs of one image go: ``at_once`` of them at a time (1: one after the other), ``workers``
    (groups at once) each run's check container gets, ``cores``: the CPUs of each place a run takes while others run
    beside it, one ``VLLM_CPU_OMP_THREADS_BIND`` value each (``0``, ``2-3``; empty: one after the other, or the CPUs
    are unknown: vLLM's own binding), and ``reason``, the line that says why."""

    at_once: int
    workers: int
    reason: str
    cores: tuple[str, ...] = ()


def cpu_list(ids: Sequence[int]) -> str:
    """``ids`` as Linux writes a CPU list and vLLM reads one (``vllm.utils.cpu_resource_utils.parse_id_list``):
    ``0-3,6``."""
    spans: list[list[int]] = []
    for cpu in sorted(ids):
        if spans and cpu == spans[-1][1] + 1:
            spans[-1][1] = cpu
        else:
            spans.append([cpu, cpu])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)


def places(cpu_ids: Sequence[int], at_once: int, each: int, engine_cpus: int | None) -> tuple[str, ...]:
    """The CPUs of each of ``at_once`` runs side by side: ``each`` of ``cpu_ids`` (the tool's affinity mask) per
    run, in order (2 runs on CPUs 0-1: ``("0", "1")``). None (``()``) for one run at a time (it has the whole machine
    and vLLM's default binding, as a user's run has), for CPUs unknown or too few, and where a CPU of the mask is
    not on the engine's machine (``engine_cpus``, Docker's NCPU: the engine runs elsewhere)."""
    if at_once < 2 or each < 1 or len(cpu_ids) < at_once * each:
        return ()
    if engine_cpus is not None and max(cpu_ids) >= engine_cpus:
        return ()
    return tuple(cpu_list(cpu_ids[i * each : (i + 1) * each]) for i in range(at_once))


def omp_bind(cores: str, env: Mapping[str, str]) -> dict[str, str]:
    """What the tool adds to the environment of a run's containers (its check container and its servers) so that
    vLLM binds that run's engines to ``cores`` (a ``Schedule.cores`` place): ``VLLM_CPU_OMP_THREADS_BIND``; nothing
    where ``cores`` is empty or ``env`` (the image's and the profile's) sets it already (their choice is the one
    a user's run makes)."""
    if not cores or OMP_BIND_VAR in env:
        return {}
    return {OMP_BIND_VAR: cores}


def schedule(runs: Sequence[ProfileRun], room: Room, *, gpu: bool, engine_cpus: int | None = None) -> Schedule:
    """How many of ``runs`` (those with checks) run at once in ``room``: as many as both its cores and its memory
    (less ``RESERVED_MEMORY_BYTES``) hold, each run taking ``PROFILE_RUN_CORES`` and ``PROFILE_RUN_MEMORY_BYTES``
    (a profile's ``cpus`` or ``memory`` limit caps each of its containers, never what the run needs beside
    another); one at a time on a GPU (every run's server would hold the same GPU's memory) or where memory is
    unknown. ``workers``: the room's whole cores shared among the runs at once, at least 1; ``cores``: that many
    CPUs of the room's for each run at once (``places``; ``engine_cpus``: the engine machine's CPU count, None:
    unknown). ``reason`` says what runs beside what, on which cores, and why."""
    running = [r for r in runs if r.checks]
    whole = max(1, math.floor(room.cores))
    names = " and ".join(r.profile.name for r in running) or "no profile"

    def made(at_once: int, why: str) -> Schedule:
        workers = whole if at_once == 1 else max(1, whole // at_once)
        groups = f"each run's groups {workers} at a time beside its serve step"
        cores = places(room.cpu_ids, at_once, workers, engine_cpus)
        if cores:
            groups += f"; each run's vLLM engines on CPUs of its own ({OMP_BIND_VAR}: {' | '.join(cores)})"
        return Schedule(at_once=at_once, workers=workers, reason=f"{why}; {groups}", cores=cores)

    if len(running) < 2:
        return made(1, f"{names} alone ({room.describe()})")
    if gpu:
        return made(1, f"{names} one after the other: their servers share the GPU")
    if room.memory_bytes is None:
        return made(1, f"{names} one after the other: memory unknown ({room.memory_source})")
    cores_each, memory_each = PROFILE_RUN_CORES, PROFILE_RUN_MEMORY_BYTES
    by_cores = math.floor(room.cores / cores_each + 1e-9)
    by_memory = (room.memory_bytes - RESERVED_MEMORY_BYTES) // memory_each
    at_once = max(1, min(len(running), by_cores, by_memory))
    need = f"each needs {cores_each:g} core{'s' if cores_each != 1 else ''} and {memory_each / 1024**3:.1f} GiB"
    where = f"{need}, this machine gives {room.describe()}"
    if at_once == 1:
        return made(1, f"{names} one after the other: {where}")
    how = "side by side" if at_once == len(running) else f"{at_once} at a time"
    return made(at_once, f"{names} {how}: {where}")
