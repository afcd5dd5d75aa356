"""The smoke run as a value: which checks run under which profile, in which groups and order, with which
timeouts, what a profile leaves out and why; then the executor runs exactly that plan."""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from matrixtool.model.conditions import Condition
from matrixtool.model.matrixfile import load_matrix
from matrixtool.model.model import CheckSpec, Variant
from matrixtool.model.profiles import Profile
from matrixtool.smoke import executor as smoke
from matrixtool.smoke import plan as smoke_plan
from matrixtool.smoke import result as smoke_result
from matrixtool.smoke import steps
from matrixtool.smoke.plan import Group, ProfileRun, SmokePlan, plan_host, plan_profiles
from tests.unit._incontainer import incontainer

CPU_FULL = [
    "triton-import", "run-conditions", "torch-import", "vllm-import", "tiny-model", "no-fake-triton",
    "torch-family", "inductor-compile", "model-runner", "offline-generate", "vllm-cli", "triton-drivers",
    "pip-check", "native-libs", "cpu-engine-settings", "cuda-weight",
]  # fmt: skip
VLLM = ("vllm-import", "tiny-model", "no-fake-triton", "inductor-compile", "model-runner", "offline-generate")
LIGHT = ("triton-import", "run-conditions", "triton-drivers", "pip-check", "native-libs", "cpu-engine-settings")


def cpu() -> Variant:
    return next(v for v in load_matrix().variants if v.name == "cpu")


def specs(names: Sequence[str], timeout: int = 10) -> list[CheckSpec]:
    return [CheckSpec(name=n, timeout=timeout) for n in names]


def group(names: Sequence[str], timeout: int = 10) -> Group:
    return Group(checks=tuple(specs(names, timeout)), timeout=timeout * len(names))


def profile(name: str) -> Profile:
    return next(p for p in cpu().profiles if p.name == name)


RESTRICTED_RUNS = ("run-conditions", "inductor-compile", "offline-generate")


def test_cpu_default_and_restricted_full() -> None:
    default, restricted = profile("default"), profile("restricted")
    selected = specs(CPU_FULL)
    plan = plan_profiles(cpu(), selected, [default, restricted], "full")
    assert plan == SmokePlan(
        variant="cpu",
        checks=tuple(selected),
        runs=(
            ProfileRun(
                profile=default,
                checks=tuple(selected),
                # The longest group first; equal timeouts keep the order of their first check.
                groups=(
                    group((*LIGHT, "cuda-weight")),
                    group(VLLM),
                    group(("torch-import", "torch-family")),
                    group(("vllm-cli",)),
                ),
                suite="full",
                log_stem="cpu",
            ),
            ProfileRun(
                profile=restricted,
                checks=tuple(specs(RESTRICTED_RUNS)),
                groups=(group(("inductor-compile", "offline-generate")), group(("run-conditions",))),
                left_out=tuple(n for n in CPU_FULL if n not in RESTRICTED_RUNS),
                left_out_reason="no condition of this profile can change them",
                rerun=True,
                suite="full",
                log_stem="cpu.restricted",
            ),
        ),
    )
    assert plan.runs[1].log_name("offline-generate") == "cpu.restricted.offline-generate.log"
    assert plan.runs[0].log_name("pip-check") == "cpu.pip-check.log"
    line = plan.runs[1].describe("cpu")
    assert line.startswith("[cpu] profile restricted (user 1000770000:0, read-only root, tmpfs /tmp (")
    assert line.endswith(
        "network none, shm 1g, cap-drop ALL, no-new-privileges, seccomp RuntimeDefault, pids 4096): run-conditions, "
        "inductor-compile, offline-generate; left out, as no condition of this "
        "profile can change them: triton-import, torch-import, vllm-import, tiny-model, no-fake-triton, "
        "torch-family, model-runner, vllm-cli, triton-drivers, pip-check, native-libs, cpu-engine-settings, "
        "cuda-weight"
    )


def test_each_checks_timeout_sums_into_its_group_and_the_host_deadline() -> None:
    selected = [CheckSpec(name="vllm-import", timeout=180), CheckSpec(name="offline-generate", timeout=900)]
    (run,) = plan_profiles(cpu(), [*selected, CheckSpec(name="pip-check", timeout=120)], [profile("default")]).runs
    assert [(g.names, g.timeout, g.deadline_s) for g in run.groups] == [
        (("vllm-import", "offline-generate"), 1080, 1080 + smoke_plan.KILL_GRACE + smoke_plan.HOST_SLACK),
        (("pip-check",), 120, 160),
    ]


def test_quick_leaves_the_compiled_checks_to_the_selection_and_records_its_suite() -> None:
    quick = [n for n in CPU_FULL if n != "inductor-compile"]  # what the quick suite selects for cpu
    plan = plan_profiles(cpu(), specs(quick), [profile("default"), profile("restricted")], "quick")
    assert [r.suite for r in plan.runs] == ["quick", "quick"]
    # Equal timeouts: the group of the earlier check first.
    assert [g.names for g in plan.runs[1].groups] == [("run-conditions",), ("offline-generate",)]
    assert plan.runs[0].groups[1] == group(tuple(n for n in VLLM if n != "inductor-compile"))


def test_only_with_prerequisites_reruns_the_check_without_them() -> None:
    # `--only offline-generate`: its prerequisites come first (select_checks), in their groups.
    selected = specs(["torch-import", "vllm-import", "tiny-model", "offline-generate"])
    default, restricted = plan_profiles(cpu(), selected, [profile("default"), profile("restricted")]).runs
    assert default.groups == (group(("vllm-import", "tiny-model", "offline-generate")), group(("torch-import",)))
    assert restricted.checks == tuple(selected[3:]) and restricted.rerun
    assert restricted.left_out == ("torch-import", "vllm-import", "tiny-model")


def test_a_profile_without_default_runs_everything_and_is_no_rerun() -> None:
    selected = specs(["pip-check", "cuda-weight"])
    (run,) = plan_profiles(cpu(), selected, [profile("restricted")]).runs
    assert run.checks == tuple(selected) and not run.rerun and not run.left_out
    assert run.log_stem == "cpu.restricted"


def test_a_profile_that_changes_nothing_a_check_depends_on_runs_no_check() -> None:
    quiet = Profile(name="quiet", values={Condition.CPUS: 2.0})
    _, run = plan_profiles(cpu(), specs(["pip-check"]), [profile("default"), quiet]).runs
    assert run.checks == () and run.groups == () and run.left_out == ("pip-check",)
    assert run.describe("cpu").startswith("[cpu] profile quiet (cpus 2): no check; left out, as no condition")


def test_the_host_plan_is_one_run_under_defaults_name() -> None:
    plan = plan_host(cpu(), specs(["pip-check", "torch-import"]), "quick")
    (run,) = plan.runs
    assert run.profile == Profile(name="default") and run.log_stem == "cpu" and run.suite == "quick"
    assert [g.names for g in run.groups] == [("pip-check",), ("torch-import",)]


class RecordingRunner:
    """A runner that records the groups it runs, one at a time, each check passing."""

    image = "img"

    def __init__(self) -> None:
        self.ran: list[tuple[str, ...]] = []
        self.lock = threading.Lock()

    def argv(self, checks: Sequence[CheckSpec], params: Mapping[str, Any]) -> list[str]:
        return [c.name for c in checks]

    def exec(self, argv: list[str], env: Mapping[str, str], deadline_s: float) -> tuple[int | None, str]:
        with self.lock:
            self.ran.append(tuple(argv))
        mod = incontainer()
        return 0, "".join(f"MATRIX-BEGIN {n}\n" + mod.result_line(n, {"status": "passed"}) + "\n" for n in argv)

    def restart(self) -> None:
        raise AssertionError("nothing timed out")

    def workers(self) -> int:
        return 1

    def step(self, check: CheckSpec, run: ProfileRun, log_dir: Path) -> steps.Step:
        with self.lock:
            self.ran.append(("step", check.name))
        outcome = smoke_result.CheckResult(
            variant="cpu", image=self.image, check=check.name, status=smoke_result.Status.PASSED, diagnosis="",
            hint="", seconds=0.0, profile=run.profile.name,
        )  # fmt: skip
        return steps.Skipped(outcome=outcome)


def test_the_executor_runs_the_plan_in_its_order(tmp_path: Path) -> None:
    with_serve = [*CPU_FULL[:11], "serve", *CPU_FULL[11:]]
    (_, run) = plan_profiles(cpu(), specs(with_serve), [profile("default"), profile("restricted")]).runs
    assert [c.name for c in run.steps] == ["serve"], "serve is a step of the plan, in no group"
    runner = RecordingRunner()
    seen: list[str] = []
    results = smoke.execute(run, runner, "cpu", {}, tmp_path, lambda r: seen.append(r.check))
    assert runner.ran == [("step", "serve"), *(g.names for g in run.groups)], "the steps start before the groups"
    assert seen[-1] == "serve", "a step's result is judged once the groups are done"
    assert [r.check for r in results] == [c.name for c in run.checks], "the plan's order, the step in its place"
    assert {(r.profile, r.status) for r in results} == {("restricted", smoke_result.Status.PASSED)}
    groups_logs = sorted(run.log_name(c.name) for c in run.checks if c not in run.steps)  # a step logs its own way
    assert sorted(p.name for p in tmp_path.iterdir()) == groups_logs
