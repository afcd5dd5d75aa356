"""A tracked container: labelled with the session and its owner, started from a frozen ``ContainerSpec``, read
with a bound on its output, always removed (force, errors ignored), swept by label on Ctrl-C or SIGTERM.

Every container the tool starts (the smoke checks' exec target, the size-budget listing, a server under test)
goes through ``TrackedContainer``. The idea is jupyter/docker-stacks ``tests/utils/tracked_container.py``.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import docker
import docker.errors
import docker.types
import requests.exceptions
from docker.models.containers import Container
from docker.utils.socket import SocketError

from matrixtool.core import engine, interrupts, outputs
from matrixtool.core.errors import WrongPlatformError
from matrixtool.incontainer.vllm_smoke.bounded import DEFAULT_LIMIT, BoundedOutput, OutputLimit, read_bounded

SESSION_LABEL = "io.vllm-matrix.session"
# One container of one tracker (a fresh value per start): what a failed start sweeps, since the engine may have
# created the container before ``containers.run`` failed (the SDK then leaves it), and siblings share the session.
CONTAINER_LABEL = "io.vllm-matrix.container"
# Who started the container: the value of MATRIX_OWNER in the environment (the test suite sets it, so its
# leak check sees only its own containers, not those of a `tools/matrix run` beside it).
OWNER_LABEL = "io.vllm-matrix.owner"
OWNER_ENV_VAR = "MATRIX_OWNER"
EXEC_FORMAT_ERROR = "exec format error"
QEMU_HINT = (
    "test it on a host of its platform or install QEMU's binfmt handlers "
    "(docker run --privileged --rm tonistiigi/binfmt --install all)"
)
# How long a removal waits for an engine that went away (stopped or restarting) to answer again, so that no
# container of the tool outlives the run; an AutoRemove container is the engine's to remove and is not waited for.
ENGINE_RETURN_S = 30.0
_NOT_YET: tuple[type[Exception], ...] = (docker.errors.DockerException, *engine.GONE)


@dataclass(frozen=True, kw_only=True)
class ContainerSpec:
    """What to run, in the Docker SDK's terms (``client.containers.run``).

    ``devices``: host device nodes passed in (``docker run --device``, ``HOST:CONTAINER:PERMS``); ``group_add``:
    supplementary groups (GIDs), added to any the profile's ``extra`` gives.
    ``entrypoint``/``command`` None keep the image's own. ``ports``: a host port of None lets the engine pick.
    ``mem_limit`` in Docker's units (``4g``); ``nano_cpus`` in 10^-9 CPUs. ``extra``: its ``tmpfs``,
    ``environment`` and ``labels`` are merged below the spec's own; any other key the spec sets wins over it.
    """

    image: str
    entrypoint: Sequence[str] | None = None
    command: Sequence[str] | None = None
    environment: Mapping[str, str] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    tmpfs: Mapping[str, str] = field(default_factory=dict)
    mounts: Sequence[docker.types.Mount] = ()
    volumes: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    ports: Mapping[str, int | None] = field(default_factory=dict)
    network_mode: str | None = None
    user: str | None = None
    read_only: bool = False
    mem_limit: str | None = None
    nano_cpus: int | None = None
    shm_size: str | None = None
    init: bool = False
    auto_remove: bool = False
    device_requests: Sequence[docker.types.DeviceRequest] = ()
    devices: Sequence[str] = ()
    group_add: Sequence[str] = ()
    extra: Mapping[str, Any] = field(default_factory=dict)

    def run_kwargs(self, *, session: str, owner: str, container: str = "") -> dict[str, Any]:
        """Keyword arguments of ``client.containers.run`` (detached), labelled with ``session``, ``owner`` and
        ``container`` (the tracker's own label, when given)."""
        out: dict[str, Any] = dict(self.extra)
        merged = {"tmpfs": self.tmpfs, "environment": self.environment, "labels": self.labels}
        for key, own in merged.items():
            if own or key in out:
                out[key] = {**out.get(key, {}), **own}
        out["labels"] = {**out.get("labels", {}), SESSION_LABEL: session, OWNER_LABEL: owner}
        if container:
            out["labels"][CONTAINER_LABEL] = container
        optional = {
            "entrypoint": list(self.entrypoint) if self.entrypoint is not None else None,
            "command": list(self.command) if self.command is not None else None,
            "mounts": list(self.mounts) or None,
            "volumes": {k: dict(v) for k, v in self.volumes.items()} or None,
            "ports": dict(self.ports) or None,
            "network_mode": self.network_mode,
            "user": self.user,
            "read_only": self.read_only or None,
            "mem_limit": self.mem_limit,
            "nano_cpus": self.nano_cpus,
            "shm_size": self.shm_size,
            "init": self.init or None,
            "auto_remove": self.auto_remove or None,
            "device_requests": list(self.device_requests) or None,
            "devices": list(self.devices) or None,
            "group_add": [*out.get("group_add", []), *self.group_add] or None,
        }
        out.update({k: v for k, v in optional.items() if v is not None})
        return {**out, "image": self.image, "detach": True}


def _close(streams: list[Any]) -> None:
    """Close the exec's stream, if it was opened: ``CancellableStream.close`` shuts its socket down (which wakes
    a reader blocked on it) and its HTTP response is closed too, which frees the socket's file (without it, the
    socket's buffered reader keeps the file open until the garbage collector finds it). Errors are ignored."""
    for stream in streams:
        for closable in (stream, getattr(stream, "_response", None)):
            with contextlib.suppress(OSError, docker.errors.DockerException):
                getattr(closable, "close", lambda: None)()


def sweep(client: docker.DockerClient, session: str, *, label: str = SESSION_LABEL) -> None:
    """Remove every container whose ``label`` (default: the session label) is ``session``: a signal (Ctrl-C,
    SIGTERM) or a failed start may land between the engine creating a container and its tracker holding it.
    Errors are ignored (the engine may be gone)."""
    with contextlib.suppress(docker.errors.DockerException, *engine.GONE):
        for container in client.containers.list(all=True, filters={"label": f"{label}={session}"}):
            with contextlib.suppress(docker.errors.DockerException, *engine.GONE):
                container.remove(force=True)


def remove_when_back(
    client: docker.DockerClient,
    container_id: str,
    wait_s: float,
    *,
    sleep: Any = time.sleep,
    clock: Any = time.monotonic,
) -> bool:
    """Remove ``container_id`` (force) once the engine answers again, trying for at most ``wait_s`` seconds (the
    engine went away: it stopped, or is restarting). True when it is removed or already gone."""
    ends = clock() + wait_s
    while True:
        try:
            client.api.remove_container(container_id, force=True)
            return True
        except docker.errors.NotFound:
            return True
        except _NOT_YET:
            if clock() >= ends:
                return False
            sleep(1.0)


class TrackedContainer:
    """One container of ``spec`` at a time: a context manager that starts it and always removes it.

    ``failure_log`` keeps the container's log (bounded) when the block raises (not on Ctrl-C/SIGTERM: the
    cleanup must be quick) or the container exited non-zero.
    ``create_only``: the container is created and never started (its files are read with ``get_archive``).
    """

    def __init__(
        self,
        client: docker.DockerClient,
        spec: ContainerSpec,
        *,
        session: str | None = None,
        owner: str | None = None,
        failure_log: Path | None = None,
        create_only: bool = False,
    ) -> None:
        self.client = client
        self.spec = spec
        self.session = session or uuid.uuid4().hex[:12]
        self.owner = owner if owner is not None else os.environ.get(OWNER_ENV_VAR, "")
        self.failure_log = failure_log
        self.create_only = create_only
        self.container: Container | None = None
        self._container_label = ""

    def start(self) -> Container:
        """Start the container, or only create it (``create_only``), removing the one it held first (a restart).
        A container the engine created before the start failed is removed (swept by its own label).

        Raises WrongPlatformError (exit 12) when the engine cannot run the image's binaries (``exec format
        error``), docker.errors.ImageNotFound / APIError as the engine does, StartRefused in a worker thread after
        Ctrl-C/SIGTERM (``interrupts.starting``: the command's sweeps would miss it)."""
        self.remove()
        self._container_label = uuid.uuid4().hex
        kwargs = self.spec.run_kwargs(session=self.session, owner=self.owner, container=self._container_label)
        try:
            with interrupts.starting(f"a container of {self.spec.image}"):
                if self.create_only:
                    kwargs.pop("detach", None)
                    self.container = self.client.containers.create(**kwargs)
                else:
                    self.container = self.client.containers.run(**kwargs)
        except BaseException as exc:
            sweep(self.client, self._container_label, label=CONTAINER_LABEL)
            if isinstance(exc, docker.errors.APIError) and EXEC_FORMAT_ERROR in str(exc).lower():
                raise WrongPlatformError(
                    f"{EXEC_FORMAT_ERROR} starting {self.spec.image}: this engine cannot run the image's "
                    f"architecture; {QEMU_HINT}"
                ) from exc
            raise
        return self.container

    def _running(self) -> Container:
        if self.container is None:
            raise RuntimeError(f"no container of {self.spec.image} is running: start() it first")
        return self.container

    def held(self) -> Container:
        """The container held (started, or created only); RuntimeError when none is."""
        return self._running()

    def exec(
        self, argv: Sequence[str], env: Mapping[str, str], deadline_s: float, limit: OutputLimit = DEFAULT_LIMIT
    ) -> tuple[int | None, str]:
        """Run ``argv`` in the container: (exit code, output), or (None, the output so far) once ``deadline_s``
        seconds passed (the exec is left to the container's removal). Output: stdout and stderr as they came,
        bounded by ``limit``."""
        api = self.client.api
        exec_id = api.exec_create(self._running().id, list(argv), environment=dict(env))["Id"]
        sink = BoundedOutput(limit)
        streams: list[Any] = []
        broke: list[BaseException] = []

        def pump() -> None:
            try:
                streams.append(api.exec_start(exec_id, stream=True))
                for chunk in streams[0]:
                    sink.feed(chunk)
            except (
                docker.errors.APIError,
                requests.exceptions.RequestException,
                OSError,
                SocketError,
                ValueError,
            ) as exc:
                broke.append(exc)  # the engine went away, or the stream was closed at the deadline (ValueError)
            finally:
                _close(streams)

        thread = threading.Thread(target=pump, daemon=True)
        thread.start()
        thread.join(deadline_s)
        if thread.is_alive():
            _close(streams)  # wakes the reader; the exec itself ends with the container
            return None, sink.text()
        try:
            exit_code = api.exec_inspect(exec_id).get("ExitCode")
        except docker.errors.NotFound as exc:
            if not broke:
                raise
            # The stream broke and the engine no longer knows the exec: it restarted in between (an engine that
            # is back within the exec's stream). Reported as the engine that went away, not as a refused request.
            raise requests.exceptions.ConnectionError(f"the exec's stream broke ({broke[0]!r}) and {exc}") from exc
        return (int(exit_code) if exit_code is not None else None), sink.text()

    def logs(self, tail: Literal["all"] | int = "all", limit: OutputLimit = DEFAULT_LIMIT) -> str:
        """The container's log (stdout and stderr), its last ``tail`` lines, bounded by ``limit``."""
        return read_bounded(self._running().logs(stream=True, follow=False, tail=tail), limit)

    def wait(self, timeout_s: float) -> int | None:
        """The container's exit code once it exits, or None when it still runs after ``timeout_s`` seconds."""
        try:
            return int(self._running().wait(timeout=timeout_s)["StatusCode"])
        except (requests.exceptions.ReadTimeout, requests.exceptions.ConnectionError):
            return None

    def stop(self, grace_s: int) -> int | None:
        """Stop it (SIGTERM, then SIGKILL after ``grace_s`` seconds): its exit code, None if it is not known."""
        try:
            self._running().stop(timeout=grace_s)
            return self.wait(grace_s + 10)
        except docker.errors.APIError:
            return None

    def host_port(self, container_port: str) -> int | None:
        """The host port published for ``container_port`` (``"8000/tcp"``), IPv4 first; None when unpublished."""
        container = self._running()
        container.reload()
        bindings = (container.attrs.get("NetworkSettings", {}).get("Ports") or {}).get(container_port) or []
        ordered = sorted(bindings, key=lambda b: ":" in str(b.get("HostIp", "")))
        return int(ordered[0]["HostPort"]) if ordered else None

    def save_log(self, path: Path, limit: OutputLimit = DEFAULT_LIMIT) -> Path | None:
        """Write the container's log (bounded) to ``path``; None when it cannot be read (container gone)."""
        try:
            text = self.logs(limit=limit)
        except (docker.errors.DockerException, RuntimeError, requests.exceptions.RequestException):
            return None
        outputs.write_text(path, text)
        return path

    def exited_nonzero(self) -> bool:
        """True when the container has exited with a code other than 0 (errors: False)."""
        if self.container is None:
            return False
        try:
            self.container.reload()
        except docker.errors.DockerException:
            return False
        state = self.container.attrs.get("State", {})
        return state.get("Status") == "exited" and int(state.get("ExitCode") or 0) != 0

    def remove(self) -> None:
        """Remove the container if one is held (force); errors are ignored (it may already be gone). When the
        engine went away, waits up to ``ENGINE_RETURN_S`` for it to come back and removes it then (unless the
        engine removes it itself: ``auto_remove``)."""
        if self.container is None:
            return
        held, self.container = self.container, None
        try:
            held.remove(force=True)
        except docker.errors.DockerException:
            pass
        except engine.GONE:
            if not self.spec.auto_remove:
                engine.note(
                    f"the Docker engine went away: waiting up to {ENGINE_RETURN_S:.0f} s to remove {str(held.id)[:12]}"
                )
                remove_when_back(self.client, str(held.id), ENGINE_RETURN_S)

    def sweep(self) -> None:
        """Remove every container of this session (``sweep``)."""
        sweep(self.client, self.session)

    def __enter__(self) -> TrackedContainer:
        try:
            self.start()
        except BaseException as exc:
            self.remove()
            if isinstance(exc, KeyboardInterrupt):
                self.sweep()
            raise
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        try:
            interrupted = exc_type is not None and issubclass(exc_type, KeyboardInterrupt)
            failed = exc_type is not None or self.exited_nonzero()
            if self.failure_log is not None and failed and not interrupted:
                self.save_log(self.failure_log)
        finally:
            self.remove()
            if exc_type is not None and issubclass(exc_type, KeyboardInterrupt):
                self.sweep()
