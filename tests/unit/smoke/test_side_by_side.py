"""Profile runs side by side: how many the measured room holds (``room.schedule``, pure), the room as this process
sees it (``room.measure``), and the executor's order-keeping (``executor.side_by_side``): rows in the plan's order,
a run's steps judged against the runs before it, whichever finishes first."""

from __future__ import annotations

import contextlib
import os
import queue
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, cast

import docker
import pytest

from matrixtool.core import container
from matrixtool.incontainer.vllm_smoke import podlimits
from matrixtool.model.checks import CHECKS
from matrixtool.model.matrixfile import load_matrix
from matrixtool.model.model import CheckSpec, Variant
from matrixtool.model.profiles import Profile
from matrixtool.smoke import executor, places, room
from matrixtool.smoke.plan import ProfileRun, plan_profiles
from matrixtool.smoke.result import CheckResult, Status

GIB = 1024**3


def cpu() -> Variant:
    return next(v for v in load_matrix().variants if v.name == "cpu")


def cpu_runs(*names: str) -> tuple[ProfileRun, ...]:
    variant = cpu()
    chosen = [p for p in variant.profiles if p.name in names]
    checks = [CheckSpec(name=n, timeout=10) for n in CHECKS if n in ("serve", "offline-generate", "run-conditions")]
    return plan_profiles(variant, checks, chosen, "full").runs


def machine(cores: float, memory_gib: float | None, cpu_ids: tuple[int, ...] = ()) -> room.Room:
    memory = None if memory_gib is None else int(memory_gib * GIB)
    return room.Room(cores=cores, cores_source="test", memory_bytes=memory, memory_source="test", cpu_ids=cpu_ids)


ENOUGH = room.PROFILE_RUN_MEMORY_BYTES * 2 / GIB + 2  # two runs' memory and the reserve


def test_two_profiles_on_two_cores_with_memory_go_side_by_side() -> None:
    plan = room.schedule(cpu_runs("default", "restricted"), machine(2, ENOUGH), gpu=False)
    assert (plan.at_once, plan.workers) == (2, 1), "each run's groups get the core its neighbour leaves"
    assert plan.reason.startswith("default and restricted side by side: each needs 1 core")
    assert "this machine gives 2 cores (test)" in plan.reason
    assert plan.reason.endswith("; each run's groups 1 at a time beside its serve step")


def test_one_core_runs_them_one_after_the_other() -> None:
    plan = room.schedule(cpu_runs("default", "restricted"), machine(1, 100), gpu=False)
    assert (plan.at_once, plan.workers) == (1, 1)
    assert plan.reason.startswith("default and restricted one after the other: each needs 1 core")


def test_a_fractional_quota_below_two_cores_is_one_after_the_other() -> None:
    assert room.schedule(cpu_runs("default", "restricted"), machine(1.5, 100), gpu=False).at_once == 1


def test_memory_short_of_two_runs_runs_them_one_after_the_other() -> None:
    short = (2 * room.PROFILE_RUN_MEMORY_BYTES + room.RESERVED_MEMORY_BYTES - 1) / GIB
    plan = room.schedule(cpu_runs("default", "restricted"), machine(8, short), gpu=False)
    assert (plan.at_once, plan.workers) == (1, 8)
    assert "one after the other" in plan.reason and "GiB available (test)" in plan.reason


def test_unknown_memory_or_a_shared_gpu_is_one_after_the_other() -> None:
    runs = cpu_runs("default", "restricted")
    assert "one after the other: memory unknown (test); " in room.schedule(runs, machine(8, None), gpu=False).reason
    on_gpu = room.schedule(runs, machine(8, 500), gpu=True)
    assert on_gpu.at_once == 1
    assert on_gpu.reason == (
        "default and restricted one after the other: their servers share the GPU; "
        "each run's groups 8 at a time beside its serve step"
    )


def test_a_single_run_takes_every_core() -> None:
    plan = room.schedule(cpu_runs("default"), machine(4, 2), gpu=False)
    assert (plan.at_once, plan.workers) == (1, 4)
    assert plan.reason == (
        "default alone (4 cores (test), 2.0 GiB available (test)); each run's groups 4 at a time beside its serve step"
    )


def test_more_runs_than_room_go_as_many_at_a_time_as_fit() -> None:
    (default, restricted) = cpu_runs("default", "restricted")
    third = ProfileRun(profile=Profile(name="third"), checks=restricted.checks, groups=restricted.groups, log_stem="x")
    plan = room.schedule((default, restricted, third), machine(2, 3 * ENOUGH), gpu=False)
    assert (plan.at_once, plan.workers) == (2, 1)
    assert plan.reason.startswith("default and restricted and third 2 at a time")


def test_a_run_without_checks_counts_for_nothing() -> None:
    (default, restricted) = cpu_runs("default", "restricted")
    empty = ProfileRun(profile=restricted.profile, checks=(), groups=(), log_stem="x")
    assert room.schedule((default, empty), machine(2, 100), gpu=False).reason.startswith("default alone (2 cores")


def test_runs_side_by_side_each_get_cores_of_their_own() -> None:
    """vLLM's default binding (``auto``) puts every engine's worker on the first CPU of the node: two runs side by
    side would share CPU 0. Each run at once gets its own CPUs, as many as its groups' workers."""
    plan = room.schedule(cpu_runs("default", "restricted"), machine(2, ENOUGH, (0, 1)), gpu=False)
    assert plan.cores == ("0", "1")
    assert plan.reason.endswith(
        "; each run's groups 1 at a time beside its serve step; "
        "each run's vLLM engines on CPUs of its own (VLLM_CPU_OMP_THREADS_BIND: 0 | 1)"
    )
    wide = room.schedule(
        cpu_runs("default", "restricted"), machine(9, 3 * ENOUGH, (0, 1, 2, 3, 5, 6, 7, 8, 9)), gpu=False
    )
    assert (wide.workers, wide.cores) == (4, ("0-3", "5-8")), "4 whole cores each, the ninth left to the rest"


def test_a_quota_below_the_mask_gives_each_run_its_share_of_the_quota() -> None:
    plan = room.schedule(cpu_runs("default", "restricted"), machine(2.5, ENOUGH, tuple(range(8))), gpu=False)
    assert (plan.at_once, plan.cores) == (2, ("0", "1")), "2 whole CPUs of quota: one CPU's threads each"


def test_one_after_the_other_keeps_vllms_own_binding() -> None:
    """One run at a time has the whole machine, as a user's run has: nothing bound by the tool."""
    runs = cpu_runs("default", "restricted")
    assert room.schedule(runs, machine(1, 100, (0,)), gpu=False).cores == ()
    assert room.schedule(runs, machine(8, 100, tuple(range(8))), gpu=True).cores == ()
    assert room.schedule(cpu_runs("default"), machine(4, 100, (0, 1, 2, 3)), gpu=False).cores == ()
    short = (2 * room.PROFILE_RUN_MEMORY_BYTES) / GIB
    alone = room.schedule(runs, machine(2, short, (0, 1)), gpu=False)
    assert alone.cores == () and "vLLM" not in alone.reason


def test_no_cores_where_the_cpus_are_unknown_or_not_the_engines() -> None:
    runs = cpu_runs("default", "restricted")
    unknown = room.schedule(runs, machine(2, ENOUGH), gpu=False)
    assert (unknown.at_once, unknown.cores) == (2, ())
    assert unknown.reason.endswith("beside its serve step")
    elsewhere = room.schedule(runs, machine(2, ENOUGH, (2, 3)), gpu=False, engine_cpus=2)
    assert (elsewhere.at_once, elsewhere.cores) == (2, ()), "CPU 3 is not on a 2-CPU engine machine"
    assert room.schedule(runs, machine(2, ENOUGH, (2, 3)), gpu=False, engine_cpus=4).cores == ("2", "3")


def test_more_runs_than_places_share_the_places() -> None:
    (default, restricted) = cpu_runs("default", "restricted")
    third = ProfileRun(profile=Profile(name="third"), checks=restricted.checks, groups=restricted.groups, log_stem="x")
    plan = room.schedule((default, restricted, third), machine(2, 3 * ENOUGH, (0, 1)), gpu=False)
    assert (plan.at_once, plan.cores) == (2, ("0", "1")), "a place per run at once, taken in turn"


def test_cpu_list_is_what_vllm_parses() -> None:
    assert room.cpu_list([3, 0, 1, 2, 6, 8, 9]) == "0-3,6,8-9"
    assert room.cpu_list([1]) == "1"


def test_the_bind_is_added_unless_the_image_or_profile_sets_it() -> None:
    assert room.omp_bind("1", {"VLLM_CPU_KVCACHE_SPACE": "1"}) == {"VLLM_CPU_OMP_THREADS_BIND": "1"}
    assert room.omp_bind("1", {"VLLM_CPU_OMP_THREADS_BIND": "nobind"}) == {}, "the image's or the profile's choice"
    assert room.omp_bind("", {}) == {}, "no place: vLLM's default"


def test_measure_reads_this_process_affinity_and_memory() -> None:
    got = room.measure()
    quota, _ = podlimits.cpu_quota()
    assert got.cores == min(len(os.sched_getaffinity(0)), quota or float("inf"))
    assert got.cpu_ids == tuple(sorted(os.sched_getaffinity(0)))
    assert got.memory_bytes is not None and got.memory_bytes > 0
    assert got.memory_source in ("/proc/meminfo MemAvailable",) or got.memory_source.startswith("cgroup ")


def test_measure_takes_the_smaller_of_affinity_and_quota_and_of_available_and_cgroup(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(room, "_affinity", lambda: (0, 1, 2, 3))
    monkeypatch.setattr(podlimits, "cpu_quota", lambda: (1.5, "cgroup /sys/fs/cgroup/cpu.max"))
    monkeypatch.setattr(room, "_mem_available", lambda: 20 * GIB)
    monkeypatch.setattr(room, "_cgroup_memory_left", lambda: (3 * GIB, "cgroup /sys/fs/cgroup/memory.max"))
    got = room.measure()
    assert (got.cores, got.cores_source) == (1.5, "cgroup /sys/fs/cgroup/cpu.max")
    assert (got.memory_bytes, got.memory_source) == (3 * GIB, "cgroup /sys/fs/cgroup/memory.max")
    assert got.describe() == (
        "1.5 cores (cgroup /sys/fs/cgroup/cpu.max), 3.0 GiB available (cgroup /sys/fs/cgroup/memory.max)"
    )
    assert got.cpu_ids == (0, 1, 2, 3)
    monkeypatch.setattr(room, "_affinity", lambda: (5,))
    monkeypatch.setattr(room, "_cgroup_memory_left", lambda: (None, ""))
    got = room.measure()
    assert (got.cores, got.cores_source, got.memory_bytes, got.cpu_ids) == (1, "sched_getaffinity", 20 * GIB, (5,))
    monkeypatch.setattr(room, "_affinity", lambda: ())  # not Linux: the CPU count, no CPU ids
    monkeypatch.setattr(os, "cpu_count", lambda: 3)
    monkeypatch.setattr(podlimits, "cpu_quota", lambda: (None, None))
    got = room.measure()
    assert (got.cores, got.cores_source, got.cpu_ids) == (3, "cpu_count", ())


def result(check: str, profile: str) -> CheckResult:
    return CheckResult(
        variant="cpu", image="img", check=check, status=Status.PASSED, diagnosis="", hint="", seconds=0.0,
        profile=profile,
    )  # fmt: skip


def test_runs_side_by_side_overlap_and_keep_the_plan_order() -> None:
    both_running = threading.Barrier(2, timeout=30)  # broken (an error) if the runs do not overlap
    restricted_groups_done = threading.Event()
    seen_by_restricted: list[Sequence[CheckResult]] = []

    def run(index: int, earlier: Callable[[], list[CheckResult]]) -> list[CheckResult]:
        both_running.wait()
        if index == 0:
            restricted_groups_done.wait(30)  # default ends last: restricted waits for it to judge its steps
            return [result("offline-generate", "default"), result("serve", "default")]
        restricted_groups_done.set()
        seen_by_restricted.append(earlier())
        return [result("run-conditions", "restricted"), result("serve", "restricted")]

    got = executor.side_by_side(2, 2, run)
    assert [(r.profile, r.check) for r in got] == [
        ("default", "offline-generate"), ("default", "serve"),
        ("restricted", "run-conditions"), ("restricted", "serve"),
    ]  # fmt: skip
    assert [r.check for r in seen_by_restricted[0]] == ["offline-generate", "serve"], "default's, all of them"


def test_one_at_a_time_runs_in_order() -> None:
    started: list[int] = []
    lock = threading.Lock()

    def run(index: int, earlier: Callable[[], list[CheckResult]]) -> list[CheckResult]:
        with lock:
            started.append(index)
        assert [r.profile for r in earlier()] == [str(i) for i in range(index)]
        return [result("serve", str(index))]

    got = executor.side_by_side(3, 1, run)
    assert started == [0, 1, 2]
    assert [r.profile for r in got] == ["0", "1", "2"]


def test_a_run_that_raises_releases_the_runs_after_it() -> None:
    def run(index: int, earlier: Callable[[], list[CheckResult]]) -> list[CheckResult]:
        if index == 0:
            raise RuntimeError("engine gone")
        return [*earlier(), result("serve", "restricted")]

    with pytest.raises(RuntimeError, match="engine gone"):
        executor.side_by_side(2, 2, run)


class FakeBox:
    def __init__(self, session: str) -> None:
        self.session = session


class FakeRunner:
    def __init__(self, session: str, swept: list[str]) -> None:
        self.box = FakeBox(session)
        self.swept = swept

    def sweep(self) -> None:
        self.swept.append(f"steps of {self.box.session}")


def test_an_interrupt_beside_removes_every_run_started(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Runs side by side live on other threads, whose ``with`` blocks a signal in the main thread does not unwind:
    the main thread removes their containers (by session label) and what their steps started."""
    swept: list[str] = []
    both_up = threading.Barrier(2, timeout=30)

    @contextlib.contextmanager
    def fake_steps(*args: Any, **kwargs: Any) -> Iterator[dict[str, Any]]:
        yield {}

    given: dict[str, Any] = {}

    @contextlib.contextmanager
    def fake_runner(*args: Any, run: ProfileRun, environment: Any, **kwargs: Any) -> Iterator[FakeRunner]:
        given[run.profile.name] = environment
        yield FakeRunner(run.profile.name, swept)

    raised = threading.Event()

    def fake_execute(run: ProfileRun, *args: Any, **kwargs: Any) -> list[CheckResult]:
        both_up.wait()
        if run.profile.name == "restricted":
            raised.set()
            raise KeyboardInterrupt  # reaches the main thread as the signal handler's would
        raised.wait(30)
        return []

    monkeypatch.setattr(executor, "container_steps", fake_steps)
    monkeypatch.setattr(executor, "container_runner", fake_runner)
    monkeypatch.setattr(executor, "execute", fake_execute)
    monkeypatch.setattr(executor, "_root_causes", lambda client, image, run, done, announce: done)
    monkeypatch.setattr(container, "sweep", lambda client, session: swept.append(session))
    monkeypatch.setattr(room, "measure", lambda: machine(2, ENOUGH, (0, 1)))
    monkeypatch.setattr(places, "engine_cpus", lambda client: 2)
    lines: list[str] = []
    with pytest.raises(KeyboardInterrupt):
        executor._in_image(
            cast(docker.DockerClient, None), "img", {}, cpu(), cpu_runs("default", "restricted"), log_dir=tmp_path,
            on_result=lambda r: None, announce=lines.append,
        )  # fmt: skip
    assert sorted(swept) == ["default", "restricted", "steps of default", "steps of restricted"]
    assert lines[0].startswith("[cpu] profiles: default and restricted side by side")
    binds = [given[name]["VLLM_CPU_OMP_THREADS_BIND"] for name in ("default", "restricted")]
    assert binds == ["0", "1"], "each run's containers on a CPU of its own, in the plan's order"
    said = sorted(line for line in lines if "vLLM's engines on CPU" in line)
    assert len(said) == 2 and all(line.endswith("(VLLM_CPU_OMP_THREADS_BIND)") for line in said)


def test_a_later_run_takes_the_place_an_earlier_one_gave_back() -> None:
    freed: queue.SimpleQueue[str] = queue.SimpleQueue()
    with places.place(("0", "1"), 0, freed) as first, places.place(("0", "1"), 1, freed) as second:
        assert (first, second) == ("0", "1")
    with places.place(("0", "1"), 0, freed) as again:
        pass
    assert again == "0"
    with places.place(("0", "1"), 2, freed) as third:
        assert third in ("0", "1"), "the third run waits for a place given back (side_by_side starts it then)"
    with places.place((), 5, freed) as none:
        assert none == "", "no places: vLLM's own binding"
