"""The serve step of a container run (``steps.ContainerStep``): ``ServeStep``, one per command and image, owns the
tiny model's volume and what the check container mounts for it; ``ServeRun``, the step of one profile run, makes the
model in the check container, runs the server (``serve_run.observe``) on a thread and judges it
(``serve_check.judge``).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import docker
import docker.errors

from matrixtool.core import container, outputs
from matrixtool.incontainer.vllm_smoke import compilecache
from matrixtool.incontainer.vllm_smoke.declarations import Accelerator
from matrixtool.model.conditions import Condition
from matrixtool.model.model import CheckSpec, Variant
from matrixtool.smoke.gpuaccess import GpuAccess
from matrixtool.smoke.plan import ProfileRun
from matrixtool.smoke.result import CheckResult, Status
from matrixtool.smoke.serve import check as serve_check
from matrixtool.smoke.serve import line as serve_line
from matrixtool.smoke.serve import run as serve_run
from matrixtool.smoke.serve import start as serve_start
from matrixtool.smoke.steps import Execs, Needs, Skipped, Step


class ServeStep:
    """The serve step of the container runs of one image: the tiny model's volume, made by the first run that serves
    and shared by the later ones (the image and the model are the same under every profile, so a later profile's
    server starts without waiting for it), removed on the way out (``with``); what each run's check container mounts
    for it (``needs``); and the server of each profile run (``ServeRun``), or a skip where no server can run here (a
    GPU variant, no GPU visible); the form the image is started in (``start_of``, read once per image). ``zipapp``:
    the check package's path in the check container; ``gpu``: the host's GPUs as their vendor's runtime passes them
    (``gpuaccess``), None where it has none."""

    def __init__(self, client: docker.DockerClient, variant: Variant, *, gpu: GpuAccess | None, zipapp: str) -> None:
        self.client, self.variant, self.gpu, self.zipapp = client, variant, gpu, zipapp
        self.volume: str | None = None
        self.stack = contextlib.ExitStack()
        self.lock = threading.Lock()  # profile runs side by side ask for the volume at once
        self.starts: dict[str, tuple[serve_start.ImageConfig, serve_start.Start]] = {}
        self.start_lock = threading.Lock()  # and for the image's start form

    def __enter__(self) -> ServeStep:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.stack.close()

    def serves(self) -> bool:
        """Whether a server can run here: a CPU variant, or a GPU seen."""
        return self.variant.accelerator is Accelerator.CPU or self.gpu is not None

    def model_volume(self) -> str:
        """The tiny model's volume (``serve_line.model_volume``), made on the first call, labelled with the owner."""
        with self.lock:
            if self.volume is None:
                labels = {container.OWNER_LABEL: os.environ.get(container.OWNER_ENV_VAR, "")}
                self.volume = self.stack.enter_context(serve_line.model_volume(self.client, labels))
            return self.volume

    def start_of(self, image: str, session: str) -> tuple[serve_start.ImageConfig, serve_start.Start]:
        """``image``'s config and the form its server is started in (``serve_start.choose``), read once per image
        (its files from a container of ``session``, created and removed).

        Raises docker.errors.DockerException: the engine cannot inspect the image or create the container."""
        with self.start_lock:
            if image not in self.starts:
                config = serve_start.ImageConfig.of(self.client.images.get(image).attrs)
                with serve_start.ImageFiles(self.client, image, session=session) as files:
                    self.starts[image] = (config, serve_start.choose(config, files))
            return self.starts[image]

    def needs(self, run: ProfileRun) -> Needs:
        """The model volume at ``serve_line.CHECK_MOUNT`` and its folder in the environment, where a server can run."""
        if not self.serves():
            return Needs()
        return Needs(volumes=serve_line.check_mounts(self.model_volume()), environment=serve_line.check_env())

    def step(self, check: CheckSpec, run: ProfileRun, box: Execs, log_dir: Path) -> Step:
        """The server of ``run`` (``ServeRun``), or ``Skipped`` where none can run here."""
        if self.serves():
            return ServeRun(self, run, box, log_dir)
        why = f"no GPU visible: the server of a {self.variant.accelerator.value} variant needs one"
        skipped = CheckResult(
            variant=self.variant.name, image=box.image, check=check.name, status=Status.SKIPPED, diagnosis=why,
            hint="", seconds=0.0, profile=run.profile.name, suite=run.suite,
        )  # fmt: skip
        return Skipped(outcome=skipped)


# Makes the tiny model in the check container (the zipapp's ensure_model: once, under a lock; argv[1] the zipapp).
ENSURE_MODEL = (
    "import sys; sys.path.insert(0, sys.argv[1]); from vllm_smoke.vllmchecks import ensure_model; "
    "print('MATRIX-MODEL ' + ensure_model())"
)
MODEL_DEADLINE_S = 600.0


class ServeRun:
    """The serve step of one profile run, beside the check container's groups (``setup``'s: its engine, variant,
    model volume, zipapp path): ``start`` makes the tiny model in ``runner``'s container (the check container, on the
    model volume) and starts the server on a daemon thread; ``result`` waits for it and judges. Its containers carry
    a session of their own (``sweep`` removes them)."""

    def __init__(self, setup: ServeStep, run: ProfileRun, runner: Execs, log_dir: Path) -> None:
        self.client, self.variant, self.gpu, self.zipapp = setup.client, setup.variant, setup.gpu, setup.zipapp
        self.image, self.run, self.runner, self.log_dir = runner.image, run, runner, log_dir
        self.setup = setup
        self.start_form: tuple[serve_start.ImageConfig, serve_start.Start] | None = None
        self.volume = setup.model_volume()
        self.session = uuid.uuid4().hex[:12]
        self.seen: serve_check.Observed | None = None
        self.error: str | None = None
        self.error_output = ""
        self.started = time.monotonic()
        self.deadline: float | None = None
        self.thread = threading.Thread(target=self._work, daemon=True)

    def start(self) -> None:
        """Begin: the model, then the server (``observe``), on a daemon thread. The warm start must be ready
        ``compilecache.WARM_MARGIN_S`` before the serve check's own timeout."""
        self.started = time.monotonic()
        timeout = next((c.timeout for c in self.run.checks if c.name == serve_check.CHECK), None)
        self.deadline = None if timeout is None else self.started + float(timeout) - compilecache.WARM_MARGIN_S
        self.thread.start()

    def _work(self) -> None:
        try:
            self.start_form = self.setup.start_of(self.image, self.session)
            if self.start_form[1].problem:  # no documented form serves it: no server, one failure (result)
                return
            code, output = self.runner.exec(["python3", "-c", ENSURE_MODEL, self.zipapp], {}, MODEL_DEADLINE_S)
            if "MATRIX-MODEL " not in output:
                tail = " | ".join(output.strip().splitlines()[-2:])
                self.error = f"making the tiny model for the server fails (exit {code}): {tail}"
                self.error_output = output  # the whole traceback: the cause (rootcause.py) may be in its chain
                return
            launch = serve_run.Launch(
                image=self.image,
                profile=self.run.profile,
                volume=self.volume,
                session=self.session,
                grace_s=int(self.variant.stop_grace_s or serve_check.STOP_GRACE_S),
                gpu=self.gpu,
                eager=str(self.run.suite) == "quick",
                env=self.environment(),
                deadline=self.deadline,
                start=self.start_form[1],
                added=self.runner.environment,
            )
            self.seen = serve_run.observe(self.client, launch)
        except Exception as exc:  # the check fails with it; the run goes on
            self.error = f"{type(exc).__name__}: {exc}"

    def sweep(self) -> None:
        """Remove this run's server and client containers, then its compile cache volume (by session label)."""
        container.sweep(self.client, self.session)
        with contextlib.suppress(docker.errors.DockerException):
            for volume in self.client.volumes.list(filters={"label": f"{container.SESSION_LABEL}={self.session}"}):
                with contextlib.suppress(docker.errors.DockerException):
                    volume.remove(force=True)

    def environment(self) -> dict[str, str]:
        """The server's environment: the image's ``Config.Env`` and the profile's ``env`` over it."""
        try:
            pairs = self.client.images.get(self.image).attrs.get("Config", {}).get("Env") or []
        except docker.errors.DockerException:
            pairs = []
        image_env = dict(p.partition("=")[::2] for p in pairs)
        return {**image_env, **self.run.profile.value(Condition.ENV)}

    def result(self, timeout_s: float, results: Sequence[CheckResult]) -> CheckResult:
        """Wait for the server run (up to what is left of ``timeout_s`` seconds since ``start``), judge it
        (``serve_check.judge``) against ``results`` (offline-generate's tokens) and write its log to
        ``<log stem>.serve.log`` (the warm start's after ``compilecache.WARM_LOG_MARK``)."""
        self.thread.join(max(1.0, timeout_s - (time.monotonic() - self.started)))
        log = self.log_dir / self.run.log_name(serve_check.CHECK)
        outputs.make_dirs(self.log_dir)
        facts: dict[str, Any]
        if self.thread.is_alive():
            self.sweep()
            status, diagnosis, hint, facts = Status.TIMEOUT, f"no result within {timeout_s:.0f} s", "", {}
        elif self.start_form is not None and self.start_form[1].problem:
            status, diagnosis, hint, facts = serve_check.unservable(self.image, *self.start_form)
        elif self.seen is None:
            status, diagnosis, hint, facts = Status.FAILED, self.error or "no result", "read the log", {}
        else:
            status, diagnosis, hint, facts = serve_check.judge(
                self.seen,
                expected_tokens=serve_check.reference_tokens(results),
                vllm_version=str(self.variant.vllm.version).split("+")[0],
                ready_budget_s=self.variant.ready_budget_s,
                env=self.environment(),
                start=self.start_form,
                user=self.run.profile.user,
            )
        written = "\n".join(filter(None, [self.error, self.error_output]))
        if self.seen is not None:
            warm_log = str(self.seen.warm.get("log") or "")
            written = self.seen.log + (f"\n{compilecache.WARM_LOG_MARK}\n{warm_log}" if warm_log else "")
        outputs.write_text(log, written)
        return CheckResult(
            variant=self.variant.name,
            image=self.image,
            check=serve_check.CHECK,
            status=status,
            diagnosis=diagnosis,
            hint="" if status.ok else hint,
            seconds=round(time.monotonic() - self.started, 1),
            facts=facts,
            log=log,
            profile=self.run.profile.name,
            suite=self.run.suite,
        )
