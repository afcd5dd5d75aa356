"""Where the profile runs side by side bind vLLM's engines: ``schedule`` (``room.schedule`` in the room measured
now, the engine asked whether the CPUs are its machine's), ``Places`` (each run's place, in the plan's order, and the
environment its containers add: ``room.omp_bind``). docs/figures.md, "Profiles side by side".
"""

from __future__ import annotations

import contextlib
import queue
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import docker
import docker.errors
import requests.exceptions

from matrixtool.model.conditions import Condition
from matrixtool.smoke import room
from matrixtool.smoke.plan import ProfileRun


def schedule(client: docker.DockerClient, runs: Sequence[ProfileRun], *, gpu: bool) -> room.Schedule:
    """``room.schedule`` of ``runs`` in the room measured now; where it would bind the runs to CPUs of their own, it
    asks the engine how many CPUs its machine has first (``engine_cpus``: none bound where they are not its)."""
    measured = room.measure()
    plan = room.schedule(runs, measured, gpu=gpu)
    return room.schedule(runs, measured, gpu=gpu, engine_cpus=engine_cpus(client)) if plan.cores else plan


class Places:
    """Where the runs side by side bind vLLM's engines: ``cores``, ``room.Schedule.cores``; ``runs``, the plan's (a
    run without checks takes no place); ``attrs``, the image's inspection (its ENV: a bind it sets is kept)."""

    def __init__(self, cores: Sequence[str], runs: Sequence[ProfileRun], attrs: Mapping[str, Any]) -> None:
        self.cores = tuple(cores)
        self.checking = [i for i, r in enumerate(runs) if r.checks]
        self.runs = runs
        self.image_env = dict(str(p).partition("=")[::2] for p in attrs.get("Config", {}).get("Env") or [])
        self.freed: queue.SimpleQueue[str] = queue.SimpleQueue()  # places the runs before gave back

    @contextlib.contextmanager
    def bind(self, index: int, named: str, said: Callable[[str], None]) -> Iterator[dict[str, str]]:
        """What run ``index``'s containers add to their environment while it holds its place (``room.omp_bind``;
        empty: vLLM's own binding), said on a line that starts with ``named``."""
        env = {**self.image_env, **self.runs[index].profile.value(Condition.ENV)}
        with place(self.cores, self.checking.index(index), self.freed) as cores:
            bind = room.omp_bind(cores, env)
            if bind:
                said(f"{named}: vLLM's engines on CPU {cores} ({', '.join(bind)})")
            yield bind


@contextlib.contextmanager
def place(places: Sequence[str], index: int, freed: queue.SimpleQueue[str]) -> Iterator[str]:
    """The CPUs of the place of the ``index``-th run with checks side by side (``room.Schedule.cores``): the first
    runs take the places in order (``default`` the first), a later one the place a run before it gave back
    (``freed``: ``side_by_side`` starts it once one has ended); given back on the way out. ``""`` (vLLM's own
    binding) where the schedule has no places."""
    if not places:
        yield ""
        return
    cores = places[index] if index < len(places) else freed.get()
    try:
        yield cores
    finally:
        freed.put(cores)


def engine_cpus(client: docker.DockerClient) -> int | None:
    """The CPU count of the engine's machine (``docker info`` NCPU); None where it does not say."""
    try:
        count = client.info().get("NCPU")
    except (docker.errors.DockerException, requests.exceptions.RequestException):
        return None
    return count if isinstance(count, int) else None
