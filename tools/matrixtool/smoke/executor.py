"""Run the smoke checks: one executor runs a plan (``smoke.plan``) over a runner (``smoke.runners``).

One container per profile, one ``docker exec`` per group of checks: the checks of one declared group share an
interpreter (one ``import vllm``); groups run in parallel, up to the runner's workers. Each exec runs under
coreutils ``timeout``, with a host-side deadline as a backstop; the checks of a group that times out without
their result are ``timeout``, and the container is replaced. Containers carry a session label and are always
removed (``container.TrackedContainer``).
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import docker
import docker.errors

from matrixtool.core import container, engine, outputs
from matrixtool.core.container import OWNER_ENV_VAR
from matrixtool.incontainer.vllm_smoke import results
from matrixtool.incontainer.vllm_smoke import rootcause as shared_rootcause
from matrixtool.incontainer.vllm_smoke.children import Parallel
from matrixtool.model import profiles
from matrixtool.model.checks import DEFAULT_SUITE
from matrixtool.model.conditions import Condition
from matrixtool.model.model import CheckSpec, Variant
from matrixtool.model.profiles import Profile
from matrixtool.smoke import bundle, hidden, places, rootcause
from matrixtool.smoke.emulator import floor_mount
from matrixtool.smoke.gpuaccess import host_gpu
from matrixtool.smoke.plan import (
    Group,
    ProfileRun,
    SmokePlan,
    check_params,
    check_platform,
    profile_run,
)
from matrixtool.smoke.result import CheckResult, Status, parse_output_safe, split_logs, unhidden, verdict
from matrixtool.smoke.runners import ContainerRunner, Runner, container_runner, container_steps

__all__ = ["execute", "host_has_gpu", "run_host_suite", "run_profiles", "run_suite"]

J = TypeVar("J")
T = TypeVar("T")
R = TypeVar("R")


def engine_load(env: Mapping[str, str]) -> results.Load:
    """``results.machine_load`` where the Docker engine (``engine.host(env)``) runs on this machine (a unix socket);
    None for one elsewhere (``tcp://``, ``ssh://``: its checks' load is not this machine's), so a timeout there gives
    the fixes of both a slow machine and a hang rather than judging by the wrong machine's load."""
    return results.machine_load() if engine.host(env).startswith("unix://") else None


def execute(
    run: ProfileRun,
    runner: Runner,
    variant: str,
    params: Mapping[str, Any],
    log_dir: Path,
    on_result: Callable[[CheckResult], None],
    earlier: Callable[[], Sequence[CheckResult]] = tuple,
) -> list[CheckResult]:
    """Run ``run``'s plan over ``runner``: its steps (``ProfileRun.steps``, each a ``runner.step``) start first and
    run beside the groups, up to ``runner.workers()`` execs at once, in the plan's order; each step's result is
    judged once the groups are done, against ``earlier()`` (this command's results of the runs before: called then,
    it may wait for runs beside this one) and the groups'. Results in the order of ``run.checks``, each check's full
    output in ``log_dir/run.log_name(check)``. A group that times out leaves its unfinished checks ``timeout`` and
    the runner restarts once the others are done."""
    outputs.make_dirs(log_dir)
    steps = [(check, runner.step(check, run, log_dir)) for check in run.steps]
    for _, step in steps:
        step.start()
    lock = threading.Lock()
    timed_out = threading.Event()

    def run_group(group: Group) -> list[CheckResult]:
        started = time.monotonic()
        limit = group.timeout
        exit_code, output = runner.exec(runner.argv(group.checks, params), {}, group.deadline_s)
        wall = time.monotonic() - started
        load = engine_load(os.environ)  # the engine's machine when the group ended: a timeout says loaded or hung
        parts = split_logs(output)
        done: list[CheckResult] = []
        for check in group.checks:
            log = log_dir / run.log_name(check.name)
            outputs.write_text(log, parts.get(check.name, output))
            status, diagnosis, hint, facts = verdict(
                check.name, exit_code, output, limit, wall, accelerator=str(params.get("accelerator", "cpu"))
            )
            if status is Status.TIMEOUT:
                timed_out.set()
                diagnosis, hint, facts = results.group_timeout(group.names, limit, wall, load, facts)
            parsed = parse_output_safe(output, check.name)
            seconds = float(parsed.get("seconds", wall)) if parsed else wall
            result = CheckResult(
                variant=variant,
                image=runner.image,
                check=check.name,
                status=status,
                diagnosis=diagnosis,
                hint="" if status.ok else hint,
                seconds=seconds,
                facts=facts,
                log=log,
                profile=run.profile.name,
                suite=run.suite,
            )
            done.append(result)
            with lock:
                on_result(result)
        return done

    finished = in_parallel(run.groups, runner.workers(), run_group)
    found = {r.check: unhidden(r, run.checks) for results in finished for r in results}
    if timed_out.is_set():
        runner.restart()  # a hung check may leave processes behind: what runs next starts clean
    before = list(earlier()) if steps else []
    for check, step in steps:
        outcome = step.result(check.timeout, [*before, *found.values()])
        on_result(outcome)
        found[check.name] = outcome
    return [found[c.name] for c in run.checks if c.name in found]


def in_parallel(jobs: Sequence[J], workers: int, run: Callable[[J], R]) -> list[R]:
    """``run`` over ``jobs`` on up to ``workers`` daemon threads; the results in the order of ``jobs``
    (``children.Parallel``: Ctrl-C and SIGTERM reach the main thread at once and its cleanup removes the container,
    which ends the execs). The first exception of a job is raised here once every thread is done."""
    return Parallel(jobs).run(workers, run)


def host_has_gpu() -> bool:
    """True when an NVIDIA GPU device node is visible on this host (then cuda containers get ``--gpus all``);
    ``gpuaccess.host_gpu`` gives each accelerator's containers what its runtime passes (ROCm: /dev/kfd, /dev/dri)."""
    return Path("/dev/nvidia0").exists()


def _in_image(
    client: docker.DockerClient,
    image: str,
    attrs: Mapping[str, Any],
    variant: Variant,
    runs: Sequence[ProfileRun],
    *,
    log_dir: Path,
    on_result: Callable[[CheckResult], None],
    announce: Callable[[str], None] = lambda line: None,
) -> list[CheckResult]:
    """``runs`` in ``image`` (inspected: ``attrs``), one tracked container per run that has checks, its steps made
    by the kinds of ``runners.container_steps`` (which own what they share across runs: serve's model volume).

    Up to ``room.schedule``'s ``at_once`` runs go at a time (the machine's cores and memory, measured now,
    against what one run needs; one at a time on a GPU), the line saying so announced first. Either way the results
    come back in the plan's order, and a run's steps are judged against the results of the runs before it
    (``earlier``: serve against ``default``'s offline-generate), which it waits for once its own groups are done."""
    base = check_params(variant, attrs.get("Config", {}).get("Entrypoint") or [])
    gpu = host_gpu(variant.accelerator)
    plan = places.schedule(client, runs, gpu=gpu is not None)
    announce(f"[{variant.name}] profiles: {plan.reason}")
    held_places = places.Places(plan.cores, runs, attrs)
    lock = threading.Lock()
    said, landed = _locked(lock, announce), _locked(lock, on_result)
    live: list[ContainerRunner] = []  # the runs' check containers now up, for the main thread's cleanup

    with container_steps(client, variant, gpu=gpu) as steps:

        def one(index: int, earlier: Callable[[], list[CheckResult]]) -> list[CheckResult]:
            run = runs[index]
            if plan.at_once == 1:
                said(run.describe(variant.name))
            if not run.checks:
                return []
            volumes, qemu = floor_mount(variant, run)
            params = {**base, "rerun": run.rerun, "suite": run.suite, "qemu": qemu}
            held: set[str] = set()

            def landed_here(result: CheckResult) -> None:
                # A failure or skip that may be another's consequence is shown once judged: as the table says it.
                if shared_rootcause.held_back(result.check, result.status.value):
                    held.add(result.check)
                else:
                    landed(result)

            with held_places.bind(index, f"[{variant.name}] profile {run.profile.name}", said) as bind:
                made = container_runner(
                    client,
                    image,
                    gpu=gpu,
                    run=run,
                    steps=steps,
                    workers=plan.workers,
                    volumes=volumes,
                    environment=bind,
                )
                with made as runner:
                    with lock:
                        live.append(runner)
                    done = execute(run, runner, variant.name, params, log_dir, landed_here, earlier=earlier)
                    judged = _root_causes(client, image, run, done, said)
            for result in judged:
                if result.check in held:
                    landed(result)
            return judged

        if plan.at_once > 1:
            for run in runs:
                said(run.describe(variant.name))
        try:
            return side_by_side(len(runs), plan.at_once, one)
        except BaseException:
            # Runs on other threads: their ``with`` blocks do not unwind on Ctrl-C/SIGTERM in the main thread, so
            # it removes what they started (by session label; removing a container ends the execs in it).
            if plan.at_once > 1:
                _sweep_runs(client, live, lock)
            raise


def _locked(lock: threading.Lock, call: Callable[[T], None]) -> Callable[[T], None]:
    """``call`` under ``lock``: the runs side by side announce lines and results one at a time."""

    def under(value: T) -> None:
        with lock:
            call(value)

    return under


def side_by_side(
    count: int, at_once: int, run: Callable[[int, Callable[[], list[CheckResult]]], list[CheckResult]]
) -> list[CheckResult]:
    """``run(index, earlier)`` for each of ``count`` profile runs, up to ``at_once`` at a time, started in order;
    their results joined in the order of the runs. ``earlier()`` returns the results of the runs before ``index``,
    waiting for those still running (a run calls it once its groups are done: its steps are judged against
    them). One at a time, the runs go in this thread. A run that raises still releases the runs after it; the first
    exception is raised here."""
    done = [threading.Event() for _ in range(count)]
    found: list[list[CheckResult]] = [[] for _ in range(count)]

    def earlier(index: int) -> list[CheckResult]:
        for event in done[:index]:
            event.wait()
        return [r for results in found[:index] for r in results]

    def one(index: int) -> None:
        try:
            found[index] = run(index, lambda: earlier(index))
        finally:
            done[index].set()

    if at_once <= 1:  # in this thread, as ever: a signal unwinds each run's ``with`` blocks
        for index in range(count):
            one(index)
    else:
        in_parallel(range(count), at_once, one)
    return [r for results in found for r in results]


def _sweep_runs(client: docker.DockerClient, live: Sequence[ContainerRunner], lock: threading.Lock) -> None:
    """Remove the check containers of the runs ``live`` on other threads (by session label; removing a container
    ends the execs in it) and what their steps started."""
    with lock:
        started = list(live)
    for runner in started:
        container.sweep(client, runner.box.session)
        runner.sweep()


def _root_causes(
    client: docker.DockerClient, image: str, run: ProfileRun, done: list[CheckResult], announce: Callable[[str], None]
) -> list[CheckResult]:
    """One container's results with what only the host can add: files a tmpfs of the profile hides
    (``hidden``, named on stderr and in run-conditions' facts), the build step behind an unwritable cache folder
    and failures that follow from another group's (``rootcause``)."""
    mounts = list(run.profile.value(Condition.TMPFS))
    # No tmpfs, nothing hidden: no container to create.
    found = hidden.hidden_files(client, image, mounts, session=uuid.uuid4().hex[:12], owner=owner()) if mounts else []
    for listed in found:
        announce(f"[{done[0].variant if done else '?'}] profile {run.profile.name}: warning: {listed.describe()}")
    out = []
    for r in done:
        if r.check == "run-conditions" and found:
            facts = {**r.facts, "hidden_by_tmpfs": {h.mount_point: dataclasses.asdict(h) for h in found}}
            r = dataclasses.replace(r, facts=facts, diagnosis="; ".join([r.diagnosis, *(h.describe() for h in found)]))
        if r.check == "run-conditions" and r.status is Status.FAILED and r.facts.get("unwritable"):
            steps = rootcause.root_build_steps(client.images.get(image).history(), rootcause.template_end)
            r = rootcause.with_origin(r, steps)
        out.append(r)
    return rootcause.consequences(out)


def run_suite(
    client: docker.DockerClient,
    image: str,
    variant: Variant,
    checks: Sequence[CheckSpec],
    *,
    log_dir: Path,
    on_result: Callable[[CheckResult], None] = lambda r: None,
    profile: Profile | None = None,
) -> list[CheckResult]:
    """Run ``checks`` (in order) inside ``image`` with ``variant``'s expectations, under ``profile``'s conditions
    (the default suite, no rerun).

    Full outputs go to ``log_dir/<variant>.<check>.log`` (``<variant>.<profile>.<check>.log`` for a profile other
    than ``default``); ``on_result`` sees each result as it lands.
    Raises docker.errors.ImageNotFound when ``image`` is not on the engine, WrongPlatformError when its platform
    is not one of ``variant``'s (before any container starts).
    """
    run = profile_run(variant.name, profile or Profile(name=profiles.DEFAULT), checks)
    attrs = client.images.get(image).attrs
    check_platform(image, attrs, variant)
    return _in_image(client, image, attrs, variant, [run], log_dir=log_dir, on_result=on_result)


def run_profiles(
    client: docker.DockerClient,
    image: str,
    variant: Variant,
    plan: SmokePlan,
    *,
    log_dir: Path,
    on_result: Callable[[CheckResult], None] = lambda r: None,
    announce: Callable[[str], None] = lambda line: None,
) -> list[CheckResult]:
    """Run ``plan`` (``smoke.plan.plan_profiles``: a profile other than ``default`` runs only the checks a condition
    it changes can change) in ``image``, one container per profile, in order; ``announce`` names each profile's
    checks and those left out, and why. Raises as ``run_suite``.
    """
    attrs = client.images.get(image).attrs
    check_platform(image, attrs, variant)  # before anything runs (exit 12)
    announce(f"[{variant.name}] smoke checks in {image}: {', '.join(c.name for c in plan.checks)}")
    return _in_image(client, image, attrs, variant, plan.runs, log_dir=log_dir, on_result=on_result, announce=announce)


def run_host_suite(
    python: str,
    variant: Variant,
    checks: Sequence[CheckSpec],
    *,
    env: Mapping[str, str],
    log_dir: Path,
    on_result: Callable[[CheckResult], None] = lambda r: None,
    suite: str = DEFAULT_SUITE,
) -> list[CheckResult]:
    """Run ``checks`` with ``python`` on this machine, no Docker (host mode), with ``variant``'s expectations,
    through the variant's bundle (``bundle.run_bundle``: serve included, as a child process); ``suite`` (quick /
    full) is recorded in each result and passed to the checks."""
    facts = bundle.facts(variant, checks, suite, host=True)
    return bundle.run_bundle(python, facts, env=env, log_dir=log_dir, on_result=on_result)


def owner() -> str:
    """The owner label's value of this process's containers and volumes (MATRIX_OWNER, else empty)."""
    return os.environ.get(OWNER_ENV_VAR, "")
