"""Where the smoke checks run, behind one interface (``Runner``): in a container of the image (``ContainerRunner``,
on ``container.TrackedContainer``). A check of the plan that runs beside the groups (``ProfileRun.steps``: serve)
is a ``steps.Step`` the runner makes by the kind of step it looks up by the check's name (``container_steps``):
a server container of the image here. On a host or in a pod the whole plan runs
in the bundle (``smoke.bundle``, ``vllm_smoke.standalone``), whose serve step is a child ``vllm serve`` process.

The checks are the package ``incontainer/vllm_smoke``; it travels as a zipapp written once per container to the
tool's own tmpfs ``SMOKE_DIR`` (one exec, the bytes as an argument: nothing is written to the image's root, so a
read-only root or a tmpfs ``/tmp`` cannot get in the way), and the checks' own work (the tiny model) goes there
too. Each exec runs under coreutils ``timeout`` (its checks' timeouts summed).
"""

from __future__ import annotations

import base64
import contextlib
import functools
import io
import json
import os
import zipapp
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import docker

from matrixtool.core.container import OWNER_ENV_VAR, ContainerSpec, TrackedContainer
from matrixtool.model import profiles
from matrixtool.model.model import CheckSpec, Variant
from matrixtool.model.profiles import Profile
from matrixtool.smoke.gpuaccess import GpuAccess
from matrixtool.smoke.plan import KILL_GRACE, ProfileRun, group_timeout
from matrixtool.smoke.serve import check as serve_check
from matrixtool.smoke.serve.step import ServeStep
from matrixtool.smoke.steps import ContainerStep, Step

# The folder holding the in-image package ``vllm_smoke`` (the zipapp and the bundle are made from it).
CHECKS_DIR = Path(__file__).parent.parent / "incontainer"
PACKAGE_DIR = CHECKS_DIR / "vllm_smoke"
# The checks' work dir (tiny model, generate script): a tmpfs of the tool's own, writable by any UID under
# every profile, and not on tempfile's search path (/tmp, /var/tmp, /usr/tmp), so it hides no condition.
SMOKE_DIR = "/run/matrix-smoke"
SMOKE_TMPFS = "rw,nosuid,nodev,size=1g,mode=1777"
ZIPAPP = f"{SMOKE_DIR}/smoke.pyz"
# Writes argv[2:] (base64, in parts) to the file argv[1]: how the zipapp gets into the container (Python >= 3.9,
# stdlib). Linux's MAX_ARG_STRLEN bounds one argument at 128 kB; the whole argv may hold far more (ARG_MAX).
WRITE_FILE = "import base64, sys; open(sys.argv[1], 'wb').write(base64.b64decode(''.join(sys.argv[2:])))"
ARG_PART = 96 * 1024
# vLLM's CPU backend asked for 160 MiB of /dev/shm; Docker's default is 64 MB.
INSTALL_DEADLINE = 120  # seconds
NO_HEALTHCHECK = {"test": ["NONE"]}


@functools.cache
def zipapp_bytes() -> bytes:
    """The in-image package as a zipapp (``python3 smoke.pyz run CHECKS PARAMS``): bytes, compressed, about 30 kB."""
    buffer = io.BytesIO()

    def wanted(path: Path) -> bool:
        return path.parts[0] == "vllm_smoke" and "__pycache__" not in path.parts and path.suffix in ("", ".py")

    zipapp.create_archive(CHECKS_DIR, buffer, main="vllm_smoke.runner:entry", filter=wanted, compressed=True)
    return buffer.getvalue()


def install_argv() -> list[str]:
    """The exec that writes the zipapp to ``ZIPAPP`` in the container (its base64 in parts, each below Linux's
    128 kB per argument)."""
    text = base64.b64encode(zipapp_bytes()).decode()
    return ["python3", "-c", WRITE_FILE, ZIPAPP, *(text[i : i + ARG_PART] for i in range(0, len(text), ARG_PART))]


def exec_argv(checks: Sequence[CheckSpec], params: Mapping[str, Any], *, python: str = "python3") -> list[str]:
    """The command that runs ``checks`` in one interpreter of the container (the zipapp ``ZIPAPP``), bounded by the
    sum of their timeouts (seconds); each check's own timeout travels in the parameters (``timeouts``), which the
    in-image runner enforces per check (``vllm_smoke.runner``)."""
    return [
        "timeout", "-k", str(KILL_GRACE), str(group_timeout(checks)),
        python, ZIPAPP, "run", ",".join(c.name for c in checks),
        json.dumps({**params, "timeouts": {c.name: c.timeout for c in checks}}, sort_keys=True),
    ]  # fmt: skip


def container_spec(
    image: str,
    *,
    gpu: GpuAccess | None = None,
    profile: Profile | None = None,
    volumes: Mapping[str, Mapping[str, str]] | None = None,
    environment: Mapping[str, str] | None = None,
) -> ContainerSpec:
    """The long-lived check container: ``sleep infinity`` under ``profile``'s run conditions
    (``profiles.container_kwargs``; ``/dev/shm`` as the profile declares, else the engine's 64 MB), with the tool's
    own tmpfs ``SMOKE_DIR`` and an init process; ``gpu``: the host's GPUs as their vendor's runtime passes them
    (``gpuaccess``: a device request like ``--gpus all``, or ROCm's device nodes and their groups); ``volumes``
    and ``environment``: added (the serve check's model volume and its folder)."""
    access = gpu or GpuAccess()
    return ContainerSpec(
        image=image,
        entrypoint=["sleep"],
        command=["infinity"],
        tmpfs={SMOKE_DIR: SMOKE_TMPFS},
        environment={"MATRIX_SMOKE_DIR": SMOKE_DIR, **(environment or {})},
        volumes=dict(volumes or {}),
        init=True,
        # Nothing reads it after it exits; the engine removes it even when its own restart stopped it.
        auto_remove=True,
        device_requests=access.device_requests,
        devices=access.devices,
        group_add=access.group_add,
        # The image's HEALTHCHECK asks a server's /health: a check container serves nothing.
        extra={**profiles.container_kwargs(profile or Profile(name=profiles.DEFAULT)), "healthcheck": NO_HEALTHCHECK},
    )


def container_kwargs(
    image: str, session: str, *, gpu: GpuAccess | None = None, profile: Profile | None = None
) -> dict[str, Any]:
    """Keyword arguments of ``client.containers.run`` for the check container of ``session`` (``container_spec``),
    labelled as ``TrackedContainer`` labels it (the owner from MATRIX_OWNER)."""
    spec = container_spec(image, gpu=gpu, profile=profile)
    return spec.run_kwargs(session=session, owner=os.environ.get(OWNER_ENV_VAR, ""))


class Runner(Protocol):
    """Where a group of checks runs: ``image`` names it in the results; ``exec`` returns (exit code, output) or
    (None, the output so far) past ``deadline_s`` seconds; ``restart`` gives what runs next a clean start after
    a group timed out; ``workers``: how many groups may run at once; ``step`` makes a check of the plan's steps."""

    image: str

    def step(self, check: CheckSpec, run: ProfileRun, log_dir: Path) -> Step: ...

    def argv(self, checks: Sequence[CheckSpec], params: Mapping[str, Any]) -> list[str]: ...

    def exec(self, argv: list[str], env: Mapping[str, str], deadline_s: float) -> tuple[int | None, str]: ...

    def restart(self) -> None: ...

    def workers(self) -> int: ...


class ContainerRunner:
    """Runs the checks in a tracked container of the image (``container_spec``), the zipapp installed; the plan's
    steps by the kinds of ``steps`` (by check name: ``container_steps``)."""

    def __init__(
        self,
        box: TrackedContainer,
        profile: Profile,
        steps: Mapping[str, ContainerStep],
        *,
        cores: int | None = None,
        environment: Mapping[str, str] | None = None,
    ) -> None:
        self.box = box
        self.profile = profile
        self.image = box.spec.image
        self.steps = steps
        self.cores = cores
        # What the tool adds to the environment of this run's containers, its steps' servers too (room.omp_bind).
        self.environment: Mapping[str, str] = dict(environment or {})
        self.started: list[Step] = []

    def step(self, check: CheckSpec, run: ProfileRun, log_dir: Path) -> Step:
        """The step of ``check`` in ``run``, beside this container (serve: ``serve.step.ServeStep``)."""
        made = self.steps[check.name].step(check, run, self, log_dir)
        self.started.append(made)
        return made

    def sweep(self) -> None:
        """Remove what every step this runner made started (the serve step's server containers)."""
        for step in self.started:
            step.sweep()

    def install(self) -> None:
        """Write the checks' zipapp to ``ZIPAPP`` (the tool's tmpfs) with one exec; a failure shows in each check's
        output (the image has no python3, or the tmpfs is full)."""
        self.box.exec(install_argv(), {}, INSTALL_DEADLINE)

    def restart(self) -> None:
        """Replace the container (a hung check may leave processes behind) and install the zipapp again."""
        self.box.start()
        self.install()

    def argv(self, checks: Sequence[CheckSpec], params: Mapping[str, Any]) -> list[str]:
        """The in-container command for ``checks`` (see ``exec_argv``)."""
        return exec_argv(checks, params)

    def exec(self, argv: list[str], env: Mapping[str, str], deadline_s: float) -> tuple[int | None, str]:
        """``TrackedContainer.exec``: bounded output, None past ``deadline_s`` seconds."""
        return self.box.exec(argv, env, deadline_s)

    def workers(self) -> int:
        """How many groups may run at once: the CPUs of the container (its profile's quota), else the cores this
        run was given (``room.Schedule.workers``: the machine's, shared among the profile runs side by side), else
        the host's."""
        return max(1, int(self.profile.cpus or self.cores or os.cpu_count() or 1))


@contextlib.contextmanager
def container_steps(
    client: docker.DockerClient, variant: Variant, *, gpu: GpuAccess | None
) -> Iterator[dict[str, ContainerStep]]:
    """The kinds of step the container runs of one image of ``variant`` make, by check name (the plan's
    ``ProfileRun.steps``): serve (``serve.step.ServeStep``, its model volume removed on the way out)."""
    with ServeStep(client, variant, gpu=gpu, zipapp=ZIPAPP) as serve:
        yield {serve_check.CHECK: serve}


@contextlib.contextmanager
def container_runner(
    client: docker.DockerClient,
    image: str,
    *,
    gpu: GpuAccess | None,
    run: ProfileRun,
    steps: Mapping[str, ContainerStep],
    workers: int | None = None,
    volumes: Mapping[str, Mapping[str, str]] | None = None,
    environment: Mapping[str, str] | None = None,
) -> Iterator[ContainerRunner]:
    """A ``ContainerRunner`` for ``run`` in a fresh container of ``image`` (a session of its own) under ``run``'s
    profile, with what the kinds of ``steps`` of ``run``'s steps need mounted (``ContainerStep.needs``) and
    ``volumes`` (the cpu-floor check's emulator), removed on the way out with what its steps started; ``workers``:
    the cores its groups may take (None: the host's); ``environment``: set in it and in its steps' servers (the
    run's own cores side by side, ``room.omp_bind``).

    Raises as ``TrackedContainer.start`` (WrongPlatformError on ``exec format error``)."""
    needs = [steps[check.name].needs(run) for check in run.steps]
    volumes = {**{k: v for need in needs for k, v in need.volumes.items()}, **(volumes or {})}
    added = dict(environment or {})
    environment = {**{k: v for need in needs for k, v in need.environment.items()}, **added}
    spec = container_spec(image, gpu=gpu, profile=run.profile, volumes=volumes, environment=environment)
    with TrackedContainer(client, spec) as box:
        runner = ContainerRunner(box, run.profile, steps, cores=workers, environment=added)
        try:
            runner.install()
            yield runner
        finally:
            runner.sweep()
