"""Run the smoke checks inside an image: one container per suite and profile, one ``docker exec`` per check.

Each check runs under coreutils ``timeout`` inside the container, with a host-side deadline as a
backstop; a check that times out is reported as ``timeout`` and its container is replaced, so the
remaining checks start clean. Containers carry a session label and are always removed.

The container runs under a deployment profile's conditions (``profiles.py``). The check script travels as
``python3 -c SOURCE`` (nothing is copied into the container, so a read-only root or a tmpfs ``/tmp`` cannot
get in the way), and the checks' own work (the tiny model) goes to a dedicated tmpfs, ``SMOKE_DIR``.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

import docker
import docker.errors
import docker.types
from docker.models.containers import Container

from matrixtool import profiles
from matrixtool.checks import CHECKS
from matrixtool.errors import WrongPlatformError
from matrixtool.matrix import Accelerator, CheckSpec, Variant
from matrixtool.profiles import Profile

CHECKS_SCRIPT = Path(__file__).parent / "incontainer" / "smoke_checks.py"
# The checks' work dir (tiny model, generate script): a tmpfs of the tool's own, writable by any UID under
# every profile, and not on tempfile's search path (/tmp, /var/tmp, /usr/tmp), so it hides no condition.
SMOKE_DIR = "/run/matrix-smoke"
SMOKE_TMPFS = "rw,nosuid,nodev,size=1g,mode=1777"
EXEC_FORMAT_ERROR = "exec format error"
RESULT_MARK = "MATRIX-RESULT "
SESSION_LABEL = "io.vllm-matrix.session"
# Who started the check container: the value of MATRIX_OWNER in the environment (the test suite sets it,
# so its leak check sees only its own containers, not those of a `tools/matrix run` beside it).
OWNER_LABEL = "io.vllm-matrix.owner"
OWNER_ENV_VAR = "MATRIX_OWNER"
# vLLM's CPU backend asked for 160 MiB of /dev/shm; Docker's default is 64 MB.
SHM_SIZE = "1g"
# Seconds between the in-container `timeout` and the host's own deadline.
KILL_GRACE = 10
HOST_SLACK = 30


class Status(str, Enum):
    """A smoke check's verdict."""

    PASSED = "passed"
    FAILED = "failed"
    SKIPPED = "skipped"
    TIMEOUT = "timeout"

    @property
    def ok(self) -> bool:
        """True for verdicts that do not fail a run (passed, skipped)."""
        return self in (Status.PASSED, Status.SKIPPED)


@dataclass(frozen=True, kw_only=True)
class CheckResult:
    """One check's outcome: ``seconds`` of wall time, ``facts`` as reported from inside the image,
    ``log`` the path of its full output when kept."""

    variant: str
    image: str
    check: str
    status: Status
    diagnosis: str
    hint: str
    seconds: float
    facts: Mapping[str, Any] = field(default_factory=dict)
    log: Path | None = None
    profile: str = profiles.DEFAULT


def check_params(variant: Variant, entrypoint: Sequence[str] = ()) -> dict[str, Any]:
    """The JSON parameters every in-image check receives (the variant's expectations)."""
    return {
        "variant": variant.name,
        "accelerator": variant.accelerator.value,
        "torch_build": variant.torch_build.value,
        "triton": variant.triton.value,
        "triton_distribution": variant.triton_distribution,
        "vllm_version": variant.vllm.version,
        "torch_version": variant.torch.version,
        "max_tokens": 8,
        "exclude": list(variant.index.exclude),
        "overrides": list(variant.index.overrides),
        "accept_clashes": list(variant.accept_clashes),
        "entrypoint": list(entrypoint),
        "cuda_weight_reason": variant.cuda_weight_reason,
    }


def container_kwargs(image: str, session: str, *, gpu: bool = False, profile: Profile | None = None) -> dict[str, Any]:
    """Keyword arguments of ``client.containers.run`` for the long-lived check container.

    ``gpu``: pass every GPU through (Docker device request, like ``--gpus all``); ``profile``: the run
    conditions (user, read-only root, tmpfs mounts, memory, CPUs, network, env; ``profiles.container_kwargs``).
    The tool's own tmpfs ``SMOKE_DIR`` is added under every profile.
    """
    extra = profiles.container_kwargs(profile or Profile(name=profiles.DEFAULT))
    extra["tmpfs"] = {**extra.get("tmpfs", {}), SMOKE_DIR: SMOKE_TMPFS}
    extra["environment"] = {**extra.get("environment", {}), "MATRIX_SMOKE_DIR": SMOKE_DIR}
    if gpu:
        extra["device_requests"] = [docker.types.DeviceRequest(count=-1, capabilities=[["gpu"]])]
    return {
        **extra,
        "image": image,
        "entrypoint": ["sleep"],
        "command": ["infinity"],
        "detach": True,
        "shm_size": SHM_SIZE,
        "labels": {SESSION_LABEL: session, OWNER_LABEL: os.environ.get(OWNER_ENV_VAR, "")},
        "init": True,
    }


def exec_argv(
    check: CheckSpec,
    params: Mapping[str, Any],
    *,
    python: str = "python3",
    script: str | None = None,
) -> list[str]:
    """The command that runs ``check`` (in the container, or on the host), bounded by its timeout (seconds).

    ``script``: the path of the check script; None passes its source with ``python -c`` (in containers: no
    copy into a file system that a profile may make read-only; about 50 kB, below Linux's 128 kB per argument).
    """
    program = ["-c", CHECKS_SCRIPT.read_text(encoding="utf-8")] if script is None else [script]
    return [
        "timeout", "-k", str(KILL_GRACE), str(check.timeout),
        python, *program, check.name, json.dumps(params, sort_keys=True),
    ]  # fmt: skip


def parse_output(output: str) -> dict[str, Any] | None:
    """The result object from the last ``MATRIX-RESULT`` line of a check's output, or None."""
    for line in reversed(output.splitlines()):
        if line.startswith(RESULT_MARK):
            parsed: dict[str, Any] = json.loads(line[len(RESULT_MARK) :])
            return parsed
    return None


def verdict(
    check: str, exit_code: int | None, output: str, timeout: int, seconds: float | None = None
) -> tuple[Status, str, str, dict[str, Any]]:
    """Status, diagnosis, hint and facts of one check from its exit code, output and wall time (seconds).

    ``exit_code`` None means the host deadline passed; 124 is coreutils ``timeout`` firing, and 137
    (SIGKILL) is its ``-k`` follow-up only once ``timeout`` seconds have passed: earlier it is another
    SIGKILL, most often the kernel's OOM killer.
    """
    hint = CHECKS[check].hint
    tail = " | ".join(output.strip().splitlines()[-3:])
    if EXEC_FORMAT_ERROR in output.lower():
        return (
            Status.FAILED,
            f"{EXEC_FORMAT_ERROR}: the image's binaries are for another architecture than this host's: {tail}",
            "test the image on a host of its platform, or install QEMU's binfmt handlers "
            "(docker run --privileged --rm tonistiigi/binfmt --install all)",
            {},
        )
    if exit_code == 137 and seconds is not None and seconds < timeout:
        return (
            Status.FAILED,
            f"killed by SIGKILL after {seconds:.0f} s, before its {timeout} s timeout (out of memory?): {tail}",
            "give the container more memory, or lower VLLM_CPU_KVCACHE_SPACE",
            {},
        )
    if exit_code is None or exit_code in (124, 137):
        return Status.TIMEOUT, f"no result within {timeout} s; the check was killed", hint, {}
    try:
        parsed = parse_output(output)
        status = Status(parsed["status"]) if parsed is not None else None
    except (ValueError, KeyError, TypeError) as exc:
        return Status.FAILED, f"the check printed an unreadable result ({exc}): {tail}", hint, {}
    if parsed is None or status is None:
        return Status.FAILED, f"the check printed no result (exit {exit_code}): {tail}", hint, {}
    return (
        status,
        str(parsed.get("diagnosis", "")),
        str(parsed.get("hint") or hint),
        dict(parsed.get("facts", {})),
    )


def image_platform(attrs: Mapping[str, Any]) -> str:
    """``os/architecture[/variant]`` of an image from its ``docker image inspect`` attributes."""
    parts = [str(attrs.get("Os") or "linux"), str(attrs.get("Architecture") or "unknown")]
    if attrs.get("Variant"):
        parts.append(str(attrs["Variant"]))
    return "/".join(parts)


def platform_matches(image_platform_: str, platforms: Sequence[str]) -> bool:
    """True when ``image_platform_`` is one of ``platforms``; arm64's ``v8`` and amd64's ``v1`` are implied."""

    def norm(p: str) -> str:
        return p.removesuffix("/v8") if p.startswith("linux/arm64") else p.removesuffix("/v1")

    return norm(image_platform_) in {norm(p) for p in platforms}


def check_platform(image: str, attrs: Mapping[str, Any], variant: Variant) -> None:
    """Raise WrongPlatformError (exit 12) when ``image``'s platform is not one of ``variant``'s platforms.

    Runs before any container starts: under QEMU a wrong-architecture image would otherwise pass checks
    that prove nothing about the variant's platform (issue 9: an amd64 image passed every check ``--as arm64``).
    """
    got = image_platform(attrs)
    platforms = [str(p) for p in variant.platforms]
    if not platform_matches(got, platforms):
        raise WrongPlatformError(
            f"image {image} is {got}, but variant {variant.name} is built for {', '.join(platforms)}; "
            f"test it --as a variant of platform {got}, or build {variant.name} "
            f"(tools/matrix build {variant.name}) and test that image"
        )


class CheckContainer:
    """A long-lived container the checks exec into; a context manager that always removes it."""

    def __init__(
        self,
        client: docker.DockerClient,
        image: str,
        session: str,
        *,
        gpu: bool = False,
        profile: Profile | None = None,
    ) -> None:
        self.client = client
        self.image = image
        self.session = session
        self.gpu = gpu
        self.profile = profile
        self.container: Container | None = None

    def start(self) -> Container:
        """Start (or restart after a timeout) the container.

        Raises WrongPlatformError when the engine cannot run the image's binaries (``exec format error``).
        """
        self.remove()
        kwargs = container_kwargs(self.image, self.session, gpu=self.gpu, profile=self.profile)
        try:
            container: Container = self.client.containers.run(**kwargs)
        except docker.errors.APIError as exc:
            if EXEC_FORMAT_ERROR in str(exc).lower():
                raise WrongPlatformError(
                    f"{EXEC_FORMAT_ERROR} starting {self.image}: this engine cannot run the image's architecture; "
                    "test it on a host of its platform or install QEMU's binfmt handlers "
                    "(docker run --privileged --rm tonistiigi/binfmt --install all)"
                ) from exc
            raise
        self.container = container
        return container

    def remove(self) -> None:
        """Remove the container if one runs; errors are ignored (it may already be gone)."""
        if self.container is not None:
            with contextlib.suppress(docker.errors.APIError):
                self.container.remove(force=True)
            self.container = None

    def argv(self, check: CheckSpec, params: Mapping[str, Any]) -> list[str]:
        """The in-container command for ``check`` (see ``exec_argv``)."""
        return exec_argv(check, params)

    def __enter__(self) -> CheckContainer:
        try:
            self.start()
        except BaseException as exc:
            self.remove()
            if isinstance(exc, KeyboardInterrupt):
                self.sweep()
            raise
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        self.remove()
        if exc_type is not None and issubclass(exc_type, KeyboardInterrupt):
            self.sweep()

    def sweep(self) -> None:
        """Remove every container of this session by its label: a signal (Ctrl-C, SIGTERM) may land between
        the engine creating a container and ``start`` holding it. Errors are ignored (the engine may be gone)."""
        with contextlib.suppress(docker.errors.DockerException):
            for container in self.client.containers.list(
                all=True, filters={"label": f"{SESSION_LABEL}={self.session}"}
            ):
                with contextlib.suppress(docker.errors.DockerException):
                    container.remove(force=True)

    def exec(self, argv: list[str], env: Mapping[str, str], deadline: float) -> tuple[int | None, str]:
        """Run ``argv`` in the container; (exit code, output), or (None, partial output) past ``deadline`` s."""
        assert self.container is not None
        api = self.client.api
        exec_id = api.exec_create(self.container.id, argv, environment=dict(env))["Id"]
        chunks: list[bytes] = []

        def pump() -> None:
            try:
                for chunk in api.exec_start(exec_id, stream=True):
                    chunks.append(chunk)
            except docker.errors.APIError:
                pass

        thread = threading.Thread(target=pump, daemon=True)
        thread.start()
        thread.join(deadline)
        output = b"".join(chunks).decode("utf-8", errors="replace")
        if thread.is_alive():
            return None, output
        exit_code = api.exec_inspect(exec_id).get("ExitCode")
        return (int(exit_code) if exit_code is not None else None), output


class HostRunner:
    """Runs the checks in a Python environment of this machine (host mode: bare-metal GPU runners)."""

    def __init__(self, python: str, env: Mapping[str, str]) -> None:
        self.python = python
        self.env = dict(env)

    def start(self) -> None:
        """Nothing to restart: a timed-out check was killed with its process group by ``timeout``."""

    def argv(self, check: CheckSpec, params: Mapping[str, Any]) -> list[str]:
        """The host command for ``check``: this repository's check script under ``self.python``."""
        return exec_argv(check, params, python=self.python, script=str(CHECKS_SCRIPT))

    def exec(self, argv: list[str], env: Mapping[str, str], deadline: float) -> tuple[int | None, str]:
        """Run ``argv`` here; (exit code, output), or (None, partial output) past ``deadline`` seconds."""
        try:
            proc = subprocess.run(
                argv,
                env={**self.env, **env},
                capture_output=True,
                text=True,
                errors="replace",
                timeout=deadline,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
            return None, out
        return proc.returncode, proc.stdout + proc.stderr


def run_host_suite(
    python: str,
    variant: Variant,
    checks: Sequence[CheckSpec],
    *,
    env: Mapping[str, str],
    log_dir: Path,
    on_result: Callable[[CheckResult], None] = lambda r: None,
) -> list[CheckResult]:
    """Run ``checks`` with ``python`` on this machine, no Docker (host mode), with ``variant``'s expectations."""
    runner = HostRunner(python, env)
    params = {**check_params(variant), "host": True}
    return _run_checks(runner, f"host:{python}", variant, checks, params, log_dir, on_result)


def _run_checks(
    runner: CheckContainer | HostRunner,
    image: str,
    variant: Variant,
    checks: Sequence[CheckSpec],
    params: Mapping[str, Any],
    log_dir: Path,
    on_result: Callable[[CheckResult], None],
    profile: str = profiles.DEFAULT,
) -> list[CheckResult]:
    log_dir.mkdir(parents=True, exist_ok=True)
    results: list[CheckResult] = []
    for check in checks:
        started = time.monotonic()
        exit_code, output = runner.exec(runner.argv(check, params), {}, check.timeout + KILL_GRACE + HOST_SLACK)
        seconds = time.monotonic() - started
        stem = variant.name if profile == profiles.DEFAULT else f"{variant.name}.{profile}"
        log = log_dir / f"{stem}.{check.name}.log"
        log.write_text(output, encoding="utf-8")
        status, diagnosis, hint, facts = verdict(check.name, exit_code, output, check.timeout, seconds)
        if status is Status.TIMEOUT:
            runner.start()  # a hung check may leave processes behind: the next check starts clean
        result = CheckResult(
            variant=variant.name,
            image=image,
            check=check.name,
            status=status,
            diagnosis=diagnosis,
            hint="" if status.ok else hint,
            seconds=seconds,
            facts=facts,
            log=log,
            profile=profile,
        )
        results.append(result)
        on_result(result)
    return results


def host_has_gpu() -> bool:
    """True when an NVIDIA GPU device node is visible on this host (then containers get ``--gpus all``).

    ROCm passes /dev/kfd and /dev/dri as devices instead; not wired yet (no ROCm machine to prove it on).
    """
    return Path("/dev/nvidia0").exists()


def run_suite(
    client: docker.DockerClient,
    image: str,
    variant: Variant,
    checks: Sequence[CheckSpec],
    *,
    log_dir: Path,
    on_result: Callable[[CheckResult], None] = lambda r: None,
    profile: Profile | None = None,
    rerun: bool = False,
) -> list[CheckResult]:
    """Run ``checks`` (in order) inside ``image`` with ``variant``'s expectations, under ``profile``'s conditions.

    Full outputs go to ``log_dir/<variant>.<check>.log`` (``<variant>.<profile>.<check>.log`` for a profile other
    than ``default``); ``on_result`` sees each result as it lands. ``rerun``: the checks ran under ``default`` in
    this command already (params["rerun"]: offline-generate then runs its compiled half only).
    Raises docker.errors.ImageNotFound when ``image`` is not on the engine, WrongPlatformError when its platform
    is not one of ``variant``'s (before any container starts).
    """
    attrs = client.images.get(image).attrs
    check_platform(image, attrs, variant)
    entrypoint = attrs.get("Config", {}).get("Entrypoint") or []
    params = {**check_params(variant, entrypoint), "rerun": rerun}
    gpu = variant.accelerator is not Accelerator.CPU and host_has_gpu()
    profile = profile or Profile(name=profiles.DEFAULT)
    with CheckContainer(client, image, uuid.uuid4().hex[:12], gpu=gpu, profile=profile) as box:
        return _run_checks(box, image, variant, checks, params, log_dir, on_result, profile.name)


def run_profiles(
    client: docker.DockerClient,
    image: str,
    variant: Variant,
    checks: Sequence[CheckSpec],
    chosen: Sequence[Profile],
    *,
    log_dir: Path,
    on_result: Callable[[CheckResult], None] = lambda r: None,
    announce: Callable[[str], None] = lambda line: None,
) -> list[CheckResult]:
    """Run ``checks`` in ``image`` under each profile of ``chosen``, one container per profile, in order.

    With ``default`` among ``chosen`` it runs every check; another profile runs only the checks whose verdict a
    condition it changes can change (``checks.CheckInfo.affected_by``); the others are left out of the report,
    and ``announce`` names them and why. Raises as ``run_suite``.
    """
    check_platform(image, client.images.get(image).attrs, variant)  # before anything runs (exit 12)
    announce(f"[{variant.name}] smoke checks in {image}: {', '.join(c.name for c in checks)}")
    reference = next((p for p in chosen if p.name == profiles.DEFAULT), None)
    affects = {name: info.affected_by for name, info in CHECKS.items()}
    results: list[CheckResult] = []
    for profile in chosen:
        run, left = profiles.checks_to_run(profile, reference, checks, affects)
        line = f"[{variant.name}] profile {profile.name} ({profile.describe()}): "
        line += ", ".join(c.name for c in run) if run else "no check"
        if left:
            line += f"; left out, as no condition of this profile can change them: {', '.join(c.name for c in left)}"
        announce(line)
        if run:
            results += run_suite(
                client,
                image,
                variant,
                run,
                log_dir=log_dir,
                on_result=on_result,
                profile=profile,
                rerun=reference is not None and profile is not reference,
            )
    return results
