"""The plan's steps in a container run: the runner looks each step's kind up by the check's name, and the serve step
owns what the check container needs for it (its model volume) or skips where no server can run here."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any, cast

import docker
import pytest

from matrixtool.core.container import ContainerSpec
from matrixtool.model.checks import CHECKS
from matrixtool.model.matrixfile import load_matrix
from matrixtool.model.model import CheckSpec
from matrixtool.model.profiles import Profile
from matrixtool.smoke import runners
from matrixtool.smoke.plan import ProfileRun, profile_run
from matrixtool.smoke.result import CheckResult, Status
from matrixtool.smoke.runners import ContainerRunner
from matrixtool.smoke.serve.step import ServeStep
from matrixtool.smoke.steps import Execs, Needs, Skipped, Step

VARIANTS = {v.name: v for v in load_matrix().variants}
SERVE = CheckSpec(name="serve", timeout=CHECKS["serve"].timeout or 600)


def _run(variant: str) -> ProfileRun:
    return profile_run(variant, Profile(name="default"), [SERVE])


class _Box:
    """The check container as a step sees it: an image and execs (none is made here)."""

    image = "img:1"
    environment: Mapping[str, str] = MappingProxyType({})

    def exec(self, argv: list[str], env: Any, deadline_s: float) -> tuple[int | None, str]:
        raise AssertionError("no exec")


def test_a_gpu_variant_without_a_gpu_skips_serve_and_mounts_nothing(tmp_path: Path) -> None:
    step = ServeStep(object(), VARIANTS["cuda"], gpu=None, zipapp="/z.pyz")  # type: ignore[arg-type]
    run = _run("cuda")
    assert step.needs(run) == Needs(), "no model volume is made where no server can run"
    made = step.step(SERVE, run, _Box(), tmp_path)
    assert isinstance(made, Skipped)
    outcome = made.result(1.0, [])
    assert outcome.status is Status.SKIPPED and outcome.check == "serve" and outcome.image == "img:1"
    assert outcome.diagnosis == "no GPU visible: the server of a cuda variant needs one"
    assert step.volume is None


class _Kind:
    """A kind of step that records what the runner asked of it."""

    def __init__(self) -> None:
        self.made: list[str] = []

    def needs(self, run: ProfileRun) -> Needs:
        return Needs()

    def step(self, check: CheckSpec, run: ProfileRun, box: Execs, log_dir: Path) -> Step:
        self.made.append(check.name)
        return _Sweeping()


class _Sweeping:
    """A step that records its sweep."""

    def __init__(self) -> None:
        self.swept = False

    def start(self) -> None:
        """Nothing to start."""

    def result(self, timeout_s: float, results: Sequence[CheckResult]) -> CheckResult:
        raise AssertionError("not judged here")

    def sweep(self) -> None:
        self.swept = True


class _Tracked:
    class spec:
        image = "img:1"


def test_the_container_runner_looks_the_step_up_and_sweeps_what_it_made(tmp_path: Path) -> None:
    kind = _Kind()
    runner = ContainerRunner(_Tracked(), Profile(name="default"), {"serve": kind})  # type: ignore[arg-type]
    made = runner.step(SERVE, _run("cpu"), tmp_path)
    assert kind.made == ["serve"]
    runner.sweep()
    assert isinstance(made, _Sweeping) and made.swept


def test_the_runs_environment_reaches_the_check_container_and_its_steps(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """What the tool adds for a run side by side (its cores, ``room.omp_bind``) is set in its check container and
    handed to its steps (the serve step's servers take it from ``runner.environment``)."""
    specs: list[ContainerSpec] = []

    class _Started:
        def __init__(self, client: Any, spec: ContainerSpec) -> None:
            specs.append(spec)
            self.spec = spec

        def __enter__(self) -> _Started:
            return self

        def __exit__(self, *exc: object) -> None:
            pass

        def exec(self, argv: list[str], env: Any, deadline_s: float) -> tuple[int | None, str]:
            return 0, ""

    monkeypatch.setattr(runners, "TrackedContainer", _Started)
    bind = {"VLLM_CPU_OMP_THREADS_BIND": "1"}
    engine = cast(docker.DockerClient, object())
    with runners.container_runner(
        engine, "img:1", gpu=None, run=_run("cpu"), steps={"serve": _Kind()}, environment=bind
    ) as runner:
        assert runner.environment == bind
    assert specs[0].environment["VLLM_CPU_OMP_THREADS_BIND"] == "1"
    with runners.container_runner(engine, "img:1", gpu=None, run=_run("cpu"), steps={"serve": _Kind()}) as runner:
        assert runner.environment == {}
    assert "VLLM_CPU_OMP_THREADS_BIND" not in specs[1].environment
