"""Where the smoke checks run, behind one interface (``Runner``): in a container of the image (``ContainerRunner``,
on ``container.TrackedContainer``) or in a Python environment of this machine (``HostRunner``).

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
import subprocess
import threading
import time
import zipapp
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, Any, Protocol

import docker
import docker.types

from matrixtool.core.bounded import BoundedOutput
from matrixtool.core.container import OWNER_ENV_VAR, ContainerSpec, TrackedContainer
from matrixtool.model import profiles
from matrixtool.model.model import CheckSpec
from matrixtool.model.profiles import Profile
from matrixtool.smoke.plan import KILL_GRACE, group_timeout

# The folder holding the in-image package ``vllm_smoke`` (host mode imports it from here).
CHECKS_DIR = Path(__file__).parent.parent / "incontainer"
PACKAGE_DIR = CHECKS_DIR / "vllm_smoke"
# The checks' work dir (tiny model, generate script): a tmpfs of the tool's own, writable by any UID under
# every profile, and not on tempfile's search path (/tmp, /var/tmp, /usr/tmp), so it hides no condition.
SMOKE_DIR = "/run/matrix-smoke"
SMOKE_TMPFS = "rw,nosuid,nodev,size=1g,mode=1777"
ZIPAPP = f"{SMOKE_DIR}/smoke.pyz"
# Writes argv[2] (base64) to the file argv[1]: how the zipapp gets into the container (Python >= 3.9, stdlib).
WRITE_FILE = "import base64, sys; open(sys.argv[1], 'wb').write(base64.b64decode(sys.argv[2]))"
# Host mode: import the package from the checkout (argv[1]) and run it.
HOST_BOOT = "import sys; sys.path.insert(0, sys.argv.pop(1)); from vllm_smoke.runner import entry; sys.exit(entry())"
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
    """The exec that writes the zipapp to ``ZIPAPP`` in the container (below Linux's 128 kB per argument)."""
    return ["python3", "-c", WRITE_FILE, ZIPAPP, base64.b64encode(zipapp_bytes()).decode()]


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


def container_spec(
    image: str,
    *,
    gpu: bool = False,
    profile: Profile | None = None,
    volumes: Mapping[str, Mapping[str, str]] | None = None,
    environment: Mapping[str, str] | None = None,
) -> ContainerSpec:
    """The long-lived check container: ``sleep infinity`` under ``profile``'s run conditions
    (``profiles.container_kwargs``; ``/dev/shm`` as the profile declares, else the engine's 64 MB), with the tool's
    own tmpfs ``SMOKE_DIR`` and an init process; ``gpu``: every GPU passed through (a Docker device request, like
    ``--gpus all``); ``volumes`` and ``environment``: added (the serve check's model volume and its folder)."""
    gpus = [docker.types.DeviceRequest(count=-1, capabilities=[["gpu"]])] if gpu else []
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
        device_requests=gpus,
        # The image's HEALTHCHECK asks a server's /health: a check container serves nothing.
        extra={**profiles.container_kwargs(profile or Profile(name=profiles.DEFAULT)), "healthcheck": NO_HEALTHCHECK},
    )


def container_kwargs(image: str, session: str, *, gpu: bool = False, profile: Profile | None = None) -> dict[str, Any]:
    """Keyword arguments of ``client.containers.run`` for the check container of ``session`` (``container_spec``),
    labelled as ``TrackedContainer`` labels it (the owner from MATRIX_OWNER)."""
    spec = container_spec(image, gpu=gpu, profile=profile)
    return spec.run_kwargs(session=session, owner=os.environ.get(OWNER_ENV_VAR, ""))


class Runner(Protocol):
    """Where a group of checks runs: ``image`` names it in the results; ``exec`` returns (exit code, output) or
    (None, the output so far) past ``deadline_s`` seconds; ``restart`` gives what runs next a clean start after
    a group timed out; ``workers``: how many groups may run at once."""

    image: str

    def argv(self, checks: Sequence[CheckSpec], params: Mapping[str, Any]) -> list[str]: ...

    def exec(self, argv: list[str], env: Mapping[str, str], deadline_s: float) -> tuple[int | None, str]: ...

    def restart(self) -> None: ...

    def workers(self) -> int: ...


class ContainerRunner:
    """Runs the checks in a tracked container of the image (``container_spec``), the zipapp installed."""

    def __init__(self, box: TrackedContainer, profile: Profile) -> None:
        self.box = box
        self.profile = profile
        self.image = box.spec.image

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
        """How many groups may run at once: the CPUs of the container (its profile's quota, else the host's)."""
        return max(1, int(self.profile.cpus or os.cpu_count() or 1))


@contextlib.contextmanager
def container_runner(
    client: docker.DockerClient,
    image: str,
    *,
    gpu: bool,
    profile: Profile,
    volumes: Mapping[str, Mapping[str, str]] | None = None,
    environment: Mapping[str, str] | None = None,
) -> Iterator[ContainerRunner]:
    """A ``ContainerRunner`` in a fresh container of ``image`` (a session of its own), removed on the way out;
    ``volumes``/``environment`` as ``container_spec``.

    Raises as ``TrackedContainer.start`` (WrongPlatformError on ``exec format error``)."""
    spec = container_spec(image, gpu=gpu, profile=profile, volumes=volumes, environment=environment)
    with TrackedContainer(client, spec) as box:
        runner = ContainerRunner(box, profile)
        runner.install()
        yield runner


class HostRunner:
    """Runs the checks in a Python environment of this machine (host mode: bare-metal GPU runners)."""

    def __init__(self, python: str, env: Mapping[str, str]) -> None:
        self.python = python
        self.env = dict(env)
        self.image = f"host:{python}"

    def restart(self) -> None:
        """Nothing to restart: a timed-out check was killed with its process group by ``timeout``."""

    def argv(self, checks: Sequence[CheckSpec], params: Mapping[str, Any]) -> list[str]:
        """The host command for ``checks``: this checkout's package under ``self.python``."""
        return exec_argv(checks, params, python=self.python, package_dir=str(CHECKS_DIR))

    def workers(self) -> int:
        """How many groups may run at once: this machine's CPUs."""
        return os.cpu_count() or 1

    def exec(self, argv: list[str], env: Mapping[str, str], deadline_s: float) -> tuple[int | None, str]:
        """Run ``argv`` here: (exit code, stdout then stderr), or (None, the stdout so far; the process killed)
        past ``deadline_s`` seconds. Each stream is bounded (``bounded.DEFAULT_LIMIT``)."""
        out, err = BoundedOutput(), BoundedOutput()
        ends = time.monotonic() + deadline_s
        proc = subprocess.Popen(argv, env={**self.env, **env}, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        readers = [_reader(proc.stdout, out), _reader(proc.stderr, err)]
        try:
            proc.wait(deadline_s)
            for reader in readers:  # a child of the process may hold the pipes past its exit
                reader.join(max(0.0, ends - time.monotonic()))
            finished = not any(reader.is_alive() for reader in readers)
        except subprocess.TimeoutExpired:
            finished = False
        if not finished:
            proc.kill()
            proc.wait()
            return None, _newlines(out.text())
        return proc.returncode, _newlines(out.text()) + _newlines(err.text())


def _reader(stream: IO[bytes] | None, sink: BoundedOutput) -> threading.Thread:
    def pump() -> None:
        assert stream is not None
        with stream:
            for chunk in iter(lambda: os.read(stream.fileno(), 1 << 16), b""):
                sink.feed(chunk)

    thread = threading.Thread(target=pump, daemon=True)
    thread.start()
    return thread


def _newlines(text: str) -> str:
    """Universal newlines, as ``subprocess``'s text mode reads them."""
    return text.replace("\r\n", "\n").replace("\r", "\n")
