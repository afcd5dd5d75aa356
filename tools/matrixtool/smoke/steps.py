"""The checks of a plan that run beside the groups (``ProfileRun.steps``), each by the runner's own means: ``Step``,
what the executor starts before the groups and judges after them; ``Skipped``, a step that does not run here; and
``ContainerStep``, a kind of step a container run makes, which also says what the check container needs for it
(the serve step, ``smoke.serve.step.ServeStep``: the tiny model's volume).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from matrixtool.model.model import CheckSpec
from matrixtool.smoke.plan import ProfileRun
from matrixtool.smoke.result import CheckResult


class Step(Protocol):
    """A check of the plan that runs beside the groups: ``start`` begins it before the groups; ``result`` waits for
    it (up to ``timeout_s`` seconds since its start) and judges it against ``results``, those of the same command so
    far (offline-generate's tokens, for serve); ``sweep`` removes what it started (its containers and volumes)."""

    def start(self) -> None: ...

    def result(self, timeout_s: float, results: Sequence[CheckResult]) -> CheckResult: ...

    def sweep(self) -> None: ...


@dataclass(frozen=True, kw_only=True)
class Skipped:
    """A step that does not run here, and why (``outcome``: its result, skipped)."""

    outcome: CheckResult

    def start(self) -> None:
        """Nothing to start."""

    def result(self, timeout_s: float, results: Sequence[CheckResult]) -> CheckResult:
        """The skip."""
        return self.outcome

    def sweep(self) -> None:
        """Nothing to remove."""


class Execs(Protocol):
    """What a step runs in the check container (``TrackedContainer.exec``'s contract): the serve step makes the tiny
    model there. ``environment``: what the tool adds to the environment of the run's containers, the step's own
    too (the run's cores side by side: ``room.omp_bind``)."""

    image: str
    environment: Mapping[str, str]

    def exec(self, argv: list[str], env: Mapping[str, str], deadline_s: float) -> tuple[int | None, str]: ...


@dataclass(frozen=True, kw_only=True)
class Needs:
    """What the check container of a run mounts and sets for a step (``ContainerSpec`` volumes, environment)."""

    volumes: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    environment: Mapping[str, str] = field(default_factory=dict)


class ContainerStep(Protocol):
    """A kind of step of a container run, one per command and image: ``needs`` says what the check container of
    ``run`` mounts for it (before that container starts); ``step`` makes the step of ``check`` in ``run``, beside the
    check container ``box`` (its logs in ``log_dir``)."""

    def needs(self, run: ProfileRun) -> Needs: ...

    def step(self, check: CheckSpec, run: ProfileRun, box: Execs, log_dir: Path) -> Step: ...
