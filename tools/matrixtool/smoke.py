"""Run the smoke checks inside an image: one container per profile, one ``docker exec`` per group of checks.

The checks are the package ``incontainer/vllm_smoke``; it travels as a zipapp written once per container to the
tool's own tmpfs ``SMOKE_DIR`` (one exec, the bytes as an argument: nothing is written to the image's root, so a
read-only root or a tmpfs ``/tmp`` cannot get in the way), and the checks' own work (the tiny model) goes there
too. Checks of one declared group share an interpreter (one ``import vllm``); groups run in parallel, up to the
container's CPU count. Each exec runs under coreutils ``timeout`` (its checks' timeouts summed), with a host-side
deadline as a backstop; the checks of a group that times out without their result are ``timeout``, and the
container is replaced. Containers carry a session label and are always removed.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import functools
import io
import json
import os
import subprocess
import threading
import time
import uuid
import zipapp
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, TypeVar

import docker
import docker.errors
import docker.types
from docker.models.containers import Container

from matrixtool import profiles
from matrixtool.checks import CHECKS, DEFAULT_SUITE
from matrixtool.errors import WrongPlatformError
from matrixtool.incontainer.vllm_smoke import common as incontainer
from matrixtool.matrix import Accelerator, CheckSpec, Variant
from matrixtool.profiles import Profile

# The folder holding the in-image package ``vllm_smoke`` (host mode imports it from here).
CHECKS_DIR = Path(__file__).parent / "incontainer"
PACKAGE_DIR = CHECKS_DIR / "vllm_smoke"
# The checks' work dir (tiny model, generate script): a tmpfs of the tool's own, writable by any UID under
# every profile, and not on tempfile's search path (/tmp, /var/tmp, /usr/tmp), so it hides no condition.
SMOKE_DIR = "/run/matrix-smoke"
SMOKE_TMPFS = "rw,nosuid,nodev,size=1g,mode=1777"
EXEC_FORMAT_ERROR = "exec format error"
RESULT_MARK = incontainer.RESULT_MARK
ZIPAPP = f"{SMOKE_DIR}/smoke.pyz"
# Writes argv[2] (base64) to the file argv[1]: how the zipapp gets into the container (Python >= 3.9, stdlib).
WRITE_FILE = "import base64, sys; open(sys.argv[1], 'wb').write(base64.b64decode(sys.argv[2]))"
# Host mode: import the package from the checkout (argv[1]) and run it.
HOST_BOOT = "import sys; sys.path.insert(0, sys.argv.pop(1)); from vllm_smoke.runner import entry; sys.exit(entry())"
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
R = TypeVar("R")


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
    suite: str = DEFAULT_SUITE


@functools.cache
def zipapp_bytes() -> bytes:
    """The in-image package as a zipapp (``python3 smoke.pyz run CHECKS PARAMS``): bytes, compressed, about 30 kB."""
    buffer = io.BytesIO()

    def wanted(path: Path) -> bool:
        return path.parts[0] == "vllm_smoke" and "__pycache__" not in path.parts and path.suffix in ("", ".py")

    zipapp.create_archive(CHECKS_DIR, buffer, main="vllm_smoke.runner:entry", filter=wanted, compressed=True)
    return buffer.getvalue()


def install_argv() -> list[str]:
    """The exec that writes the zipapp to ``ZIPAPP`` in the container (below Linux's 128 kB per argument)."""
    return ["python3", "-c", WRITE_FILE, ZIPAPP, base64.b64encode(zipapp_bytes()).decode()]


def groups(checks: Sequence[CheckSpec]) -> list[list[CheckSpec]]:
    """``checks`` split into the execs that run them: the checks of one declared group (``CheckInfo.group``) share
    an interpreter, in the given order; a check declared fresh gets one of its own. Ordered by the first check."""
    found: dict[str, list[CheckSpec]] = {}
    for check in checks:
        key = CHECKS[check.name].group or f"fresh:{check.name}"
        found.setdefault(key, []).append(check)
    return list(found.values())


def group_timeout(group: Sequence[CheckSpec]) -> int:
    """Seconds a group may take: its checks' timeouts summed."""
    return sum(c.timeout for c in group)


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
    checks: Sequence[CheckSpec],
    params: Mapping[str, Any],
    *,
    python: str = "python3",
    package_dir: str | None = None,
) -> list[str]:
    """The command that runs ``checks`` in one interpreter (in the container, or on the host), bounded by the sum
    of their timeouts (seconds); each check's own timeout travels in the parameters (``timeouts``), which the
    in-image runner enforces per check (``vllm_smoke.runner``).

    ``package_dir``: the folder holding ``vllm_smoke`` (host mode); None runs the zipapp ``ZIPAPP`` (containers).
    """
    program = [ZIPAPP] if package_dir is None else ["-c", HOST_BOOT, package_dir]
    return [
        "timeout", "-k", str(KILL_GRACE), str(group_timeout(checks)),
        python, *program, "run", ",".join(c.name for c in checks),
        json.dumps({**params, "timeouts": {c.name: c.timeout for c in checks}}, sort_keys=True),
    ]  # fmt: skip


def parse_output(output: str, check: str | None = None) -> dict[str, Any] | None:
    """The result object of ``check`` (None: of any check) from the last of its ``MATRIX-RESULT`` lines, or None.

    Raises ValueError when that line is not JSON."""
    results: dict[str | None, dict[str, Any]] = incontainer.parse_results(output)
    if check is None:
        return list(results.values())[-1] if results else None
    return results.get(check, results.get(None))


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
        parsed = parse_output(output, check)
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
        self.install()
        return container

    def remove(self) -> None:
        """Remove the container if one runs; errors are ignored (it may already be gone)."""
        if self.container is not None:
            with contextlib.suppress(docker.errors.APIError):
                self.container.remove(force=True)
            self.container = None

    def argv(self, checks: Sequence[CheckSpec], params: Mapping[str, Any]) -> list[str]:
        """The in-container command for ``checks`` (see ``exec_argv``)."""
        return exec_argv(checks, params)

    def install(self) -> None:
        """Write the checks' zipapp to ``ZIPAPP`` (the tool's tmpfs) with one exec; a failure shows in each check's
        output (the image has no python3, or the tmpfs is full)."""
        self.exec(install_argv(), {}, 120)

    def workers(self) -> int:
        """How many groups may run at once: the CPUs of the container (its profile's quota, else the host's)."""
        cpus = self.profile.cpus if self.profile is not None else None
        return max(1, int(cpus or os.cpu_count() or 1))

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

    def argv(self, checks: Sequence[CheckSpec], params: Mapping[str, Any]) -> list[str]:
        """The host command for ``checks``: this checkout's package under ``self.python``."""
        return exec_argv(checks, params, python=self.python, package_dir=str(CHECKS_DIR))

    def workers(self) -> int:
        """How many groups may run at once: this machine's CPUs."""
        return os.cpu_count() or 1

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
    suite: str = DEFAULT_SUITE,
) -> list[CheckResult]:
    """Run ``checks`` with ``python`` on this machine, no Docker (host mode), with ``variant``'s expectations;
    ``suite`` (quick / full) is recorded in each result and passed to the checks."""
    runner = HostRunner(python, env)
    params = {**check_params(variant), "host": True, "suite": suite}
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
    """Run ``checks`` in their groups (``groups``), up to ``runner.workers()`` execs at once, the largest first;
    results in the order of ``checks``. A group that times out leaves its unfinished checks ``timeout`` and the
    container is replaced once the others are done."""
    log_dir.mkdir(parents=True, exist_ok=True)
    lock = threading.Lock()
    timed_out = threading.Event()
    suite = str(params.get("suite", DEFAULT_SUITE))

    def run_group(group: list[CheckSpec]) -> list[CheckResult]:
        started = time.monotonic()
        limit = group_timeout(group)
        exit_code, output = runner.exec(runner.argv(group, params), {}, limit + KILL_GRACE + HOST_SLACK)
        wall = time.monotonic() - started
        parts = incontainer.split_logs(output)
        stem = variant.name if profile == profiles.DEFAULT else f"{variant.name}.{profile}"
        done: list[CheckResult] = []
        for check in group:
            log = log_dir / f"{stem}.{check.name}.log"
            log.write_text(parts.get(check.name, output), encoding="utf-8")
            status, diagnosis, hint, facts = verdict(check.name, exit_code, output, limit, wall)
            if status is Status.TIMEOUT:
                timed_out.set()
                diagnosis = f"no result within the {limit} s of its group ({', '.join(c.name for c in group)})"
            parsed = parse_output_safe(output, check.name)
            seconds = float(parsed.get("seconds", wall)) if parsed else wall
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
                suite=suite,
            )
            done.append(result)
            with lock:
                on_result(result)
        return done

    batches = sorted(groups(checks), key=group_timeout, reverse=True)
    found = {r.check: unhidden(r, checks) for done in in_parallel(batches, runner.workers(), run_group) for r in done}
    if timed_out.is_set():
        runner.start()  # a hung check may leave processes behind: what runs next starts clean
    return [found[c.name] for c in checks]


def in_parallel(jobs: Sequence[list[CheckSpec]], workers: int, run: Callable[[list[CheckSpec]], R]) -> list[R]:
    """``run`` over ``jobs`` on up to ``workers`` daemon threads; the results in the order of ``jobs``.

    Daemon threads, and a main thread that waits in short joins: Ctrl-C and SIGTERM reach the main thread at once
    and its cleanup removes the container (which ends the execs), never waiting for a check to finish. The first
    exception of a job is raised here once every thread is done."""
    pending = list(enumerate(jobs))
    results: dict[int, R] = {}
    errors: list[BaseException] = []
    lock = threading.Lock()

    def work() -> None:
        while True:
            with lock:
                if not pending or errors:
                    return
                index, job = pending.pop(0)
            try:
                results[index] = run(job)
            except BaseException as exc:  # re-raised in the caller's thread
                with lock:
                    errors.append(exc)
                return

    threads = [threading.Thread(target=work, daemon=True) for _ in range(max(1, min(workers, len(jobs))))]
    for thread in threads:
        thread.start()
    for thread in threads:
        while thread.is_alive():
            thread.join(0.5)
    if errors:
        raise errors[0]
    return [results[i] for i in range(len(jobs))]


def unhidden(result: CheckResult, checks: Sequence[CheckSpec]) -> CheckResult:
    """``result``, or where it was skipped for a prerequisite that failed but is not among ``checks`` (a profile's
    rerun leaves prerequisites out), a failure naming the prerequisite's diagnosis: a skip never hides a failure."""
    need = result.facts.get("failed_need")
    if result.status is not Status.SKIPPED or not need or need in {c.name for c in checks}:
        return result
    hint = result.facts.get("need_hint") or (CHECKS[need].hint if need in CHECKS else "")
    return dataclasses.replace(
        result,
        status=Status.FAILED,
        diagnosis=f"{need} failed here: {result.facts.get('need_diagnosis') or 'see the log'}",
        hint=str(hint),
    )


def parse_output_safe(output: str, check: str) -> dict[str, Any] | None:
    """``parse_output`` for ``check``, None where the output holds no readable result for it."""
    try:
        return parse_output(output, check)
    except ValueError:
        return None


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
    suite: str = DEFAULT_SUITE,
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
    params = {**check_params(variant, entrypoint), "rerun": rerun, "suite": suite}
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
    suite: str = DEFAULT_SUITE,
) -> list[CheckResult]:
    """Run ``checks`` in ``image`` under each profile of ``chosen``, one container per profile, in order.

    With ``default`` among ``chosen`` it runs every check; another profile runs only the checks whose verdict a
    condition it changes can change (``checks.CheckInfo.affected_by``); the others are left out of the report,
    and ``announce`` names them and why. Raises as ``run_suite``.
    """
    check_platform(image, client.images.get(image).attrs, variant)  # before anything runs (exit 12)
    announce(f"[{variant.name}] smoke checks in {image}: {', '.join(c.name for c in checks)}")
    reference = next((p for p in chosen if p.name == profiles.DEFAULT), None)
    affects = {name: frozenset(map(profiles.Condition, info.affected_by)) for name, info in CHECKS.items()}
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
                suite=suite,
            )
    return results
