"""The serve line: the README's ``docker run ... vllm serve`` line (``serve_argv``, ``docker_flags``,
``readme_block``), the tiny model's volume (``model_volume``: a tmpfs-backed Docker volume, mode 1777, nothing on
the host's disk), the compile cache's volume (``cache_volume``, mounted at the image's cache root, ``cache_root``)
and the containers of the serve check (``server_spec``, ``client_spec``)."""

from __future__ import annotations

import contextlib
import shlex
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence

import docker
import docker.errors
import docker.types

from matrixtool.core import engine, interrupts
from matrixtool.core.container import ContainerSpec
from matrixtool.incontainer.vllm_smoke import compilecache
from matrixtool.model import profiles
from matrixtool.model.profiles import Profile
from matrixtool.smoke.gpuaccess import GpuAccess
from matrixtool.smoke.serve import start as serve_start

PORT = 8000
MODEL_MOUNT = "/models"
MODEL_NAME = "tiny-llama"
MODEL_PATH = f"{MODEL_MOUNT}/{MODEL_NAME}"
# Where the check container mounts the model volume, and the folder the tiny model is made in (MATRIX_MODEL_DIR).
CHECK_MOUNT = "/run/matrix-model"
CHECK_MODEL_DIR = f"{CHECK_MOUNT}/{MODEL_NAME}"
VOLUME_OPTS = {"type": "tmpfs", "device": "tmpfs", "o": "size=512m,mode=1777"}
# How long a volume's removal waits for the containers that hold it to go (an AutoRemove container is removed by the
# engine after it stops, not when its ``wait`` returns), in seconds.
VOLUME_RELEASE_S = 20.0
_GIVE_UP: tuple[type[Exception], ...] = (docker.errors.DockerException, *engine.GONE)
# vLLM's CPU backend asks for 160 MiB of /dev/shm; Docker's default is 64 MB (the server dies at start-up).
SHM_SIZE = "1g"
# What the tiny model needs beyond a user's line: offline-generate's settings (float32: vLLM's "auto" would
# serve a float32 checkpoint in bfloat16, and greedy tokens differ), a context for the stop contract's stream.
MODEL_OPTIONS = ("--dtype", "float32", "--max-model-len", "256", "--seed", "0")
# What every user's line needs: on SIGTERM vLLM's default (--shutdown-timeout 0) aborts the engine but leaves
# in-flight streams open, and uvicorn waits for them until the grace ends in SIGKILL (exit 137, seen on the CPU
# image); a drain of 15 s finishes them and the server exits 0 within a pod's 30 s grace.
SERVE_OPTIONS = ("--shutdown-timeout", "15")
# The share of a GPU's memory the bundle's server asks for on a GPU host (``--gpu-memory-utilization``): vLLM's
# default is 0.9, which leaves a GPU shared with other work nearly full (and fails at start where others hold more
# than a tenth of it). The tiny model needs far less than a fifth of any GPU vLLM supports; the bundle's
# ``--gpu-memory-utilization`` overrides it (docs/commands.md).
GPU_MEMORY_UTILIZATION = 0.2
# The variant images' cache root (templates/Dockerfile.j2 sets XDG_CACHE_HOME, TORCHINDUCTOR_CACHE_DIR and
# TRITON_CACHE_DIR below it, mode 1777): where a pod mounts the compile cache volume (``tools/matrix kube``).
IMAGE_CACHE_ROOT = "/tmp/.cache"
# How this project's images start (templates/Dockerfile.j2: ENTRYPOINT ["vllm"]): the README's line.
PROJECT_START = serve_start.Start(
    form=serve_start.VLLM, how='ENTRYPOINT ["vllm"]: `serve MODEL ...` as arguments', prefix=("serve",)
)


def serve_argv(model: str = MODEL_PATH, options: Sequence[str] = MODEL_OPTIONS) -> list[str]:
    """The arguments after the image name: ``serve MODEL SERVE_OPTIONS [options]`` (the ENTRYPOINT is ``vllm``)."""
    return ["serve", model, *SERVE_OPTIONS, *options]


def server_args(start: serve_start.Start, *, eager: bool = False) -> list[str]:
    """The arguments after the image name that serve the tiny model in ``start``'s form: the model, then
    ``SERVE_OPTIONS`` and ``MODEL_OPTIONS`` (``--enforce-eager`` last where ``eager``)."""
    return start.args(MODEL_PATH, [*SERVE_OPTIONS, *MODEL_OPTIONS, *(["--enforce-eager"] if eager else [])])


def working_line(image: str, start: serve_start.Start) -> str | None:
    """The user's ``docker run`` line that serves a model from ``$PWD/models`` in an image no documented form
    serves: ``start.fix``'s ``--entrypoint`` and arguments (None: no fix is known)."""
    fix = start.fix
    if fix is None or not fix.entrypoint:
        return None
    args = fix.args(f"{MODEL_MOUNT}/MODEL", SERVE_OPTIONS)
    line = ["docker", "run", "--rm", *docker_flags('"$PWD/models"'), "--entrypoint", *fix.entrypoint, image, *args]
    return " ".join(a if a.startswith('"$PWD') else shlex.quote(a) for a in line)


def docker_flags(model_source: str, published: str = f"{PORT}:{PORT}") -> list[str]:
    """The ``docker run`` flags of the README's serve line: shm, the published port (``published``: the user's
    ``8000:8000``; the check's ``127.0.0.1::8000``, a loopback port the engine picks), the model read-only."""
    return ["--shm-size", SHM_SIZE, "-p", published, "-v", f"{model_source}:{MODEL_MOUNT}:ro"]


def readme_block() -> str:
    """The README's serve section (between its ``serve-command`` markers): the user's line and the check's."""
    user = ["docker", "run", "--rm", *docker_flags('"$PWD/models"'), "IMAGE", *serve_argv(f"{MODEL_MOUNT}/MODEL", ())]
    check = ["docker", "run", "--rm", *docker_flags("MODEL_VOLUME", f"127.0.0.1::{PORT}"), "IMAGE", *serve_argv()]
    return (
        "```sh\n" + " ".join(user) + "\n```\n\n"
        "The `serve` check runs this line with the suite's tiny model (a volume it made, with the model's own\n"
        "options), on a loopback port the engine picks, under each profile's run conditions:\n\n"
        "```sh\n" + " ".join(check) + "\n```\n"
    )


def check_mounts(volume: str) -> dict[str, dict[str, str]]:
    """The check container's mount of the model volume (read-write: the tiny model is made there)."""
    return {volume: {"bind": CHECK_MOUNT, "mode": "rw"}}


def check_env() -> dict[str, str]:
    """The check container's environment for the model folder (``vllm_smoke.children.MODEL_DIR``)."""
    return {"MATRIX_MODEL_DIR": CHECK_MODEL_DIR}


def remove_volume(client: docker.DockerClient, name: str, wait_s: float = VOLUME_RELEASE_S) -> None:
    """Remove the volume ``name``, retrying every 0.5 s for up to ``wait_s`` seconds while a container still holds it
    (the engine's 409 "volume is in use": an AutoRemove check container the engine is still removing; the engine
    never removes a named volume with the container, so one given up on here is left for good). Other errors
    (gone already, the engine unreachable) are ignored."""
    ends = time.monotonic() + wait_s
    while True:
        try:
            client.volumes.get(name).remove(force=True)
            return
        except docker.errors.APIError as exc:
            if exc.status_code != 409 or time.monotonic() >= ends:
                return
        except _GIVE_UP:
            return
        time.sleep(0.5)


@contextlib.contextmanager
def fresh_volume(
    client: docker.DockerClient, kind: str, labels: Mapping[str, str], driver_opts: Mapping[str, str] | None = None
) -> Iterator[str]:
    """A fresh named volume ``vllm-matrix-<kind>-<random>`` of the engine's local driver, removed on the way out
    (``remove_volume``: waited for while a container still holds it). Raises StartRefused in a worker thread after
    Ctrl-C/SIGTERM (``interrupts.starting``)."""
    name = f"vllm-matrix-{kind}-{uuid.uuid4().hex[:12]}"
    options = {"driver_opts": dict(driver_opts)} if driver_opts else {}
    with interrupts.starting(f"the volume {name}"):
        client.volumes.create(name=name, driver="local", labels=dict(labels), **options)
    try:
        yield name
    finally:
        remove_volume(client, name)


def model_volume(client: docker.DockerClient, labels: Mapping[str, str]) -> contextlib.AbstractContextManager[str]:
    """A fresh tmpfs-backed volume for the tiny model (``VOLUME_OPTS``; ``fresh_volume``)."""
    return fresh_volume(client, "model", labels, VOLUME_OPTS)


def cache_root(env: Mapping[str, str]) -> str:
    """The image's cache root under ``env`` (the image's ``Config.Env`` with the profile's ``env`` over it): where
    the compile cache volume is mounted (``compilecache.cache_root``)."""
    return str(compilecache.cache_root(env))


def cache_volume(client: docker.DockerClient, labels: Mapping[str, str]) -> contextlib.AbstractContextManager[str]:
    """A fresh Docker named volume for the compile cache (``fresh_volume``: the engine's local driver, on its
    disk, as a pod's PersistentVolumeClaim or emptyDir is on the node's). Mounted empty at a path the image has,
    the engine first copies the image's folder into it, owner and mode included (the variant images'
    ``/tmp/.cache`` is mode 1777)."""
    return fresh_volume(client, "cache", labels)


def server_spec(
    image: str,
    profile: Profile,
    volume: str,
    *,
    gpu: GpuAccess | None = None,
    eager: bool = False,
    cache: tuple[str, str] | None = None,
    start: serve_start.Start = PROJECT_START,
    environment: Mapping[str, str] | None = None,
) -> ContainerSpec:
    """The server container: the image's ENTRYPOINT with the arguments of ``start``'s form (``server_args``;
    default: this project's images, ``serve_argv()``), the image's USER, WORKDIR and ENV (the profile's user and
    env over them), ``profile``'s run conditions (its
    /dev/shm too: ``shm_size``), the model volume read-only at ``/models``, no init (the server is PID 1, as users
    run it); port 8000 published on 127.0.0.1 (a port the engine picks) where the profile has a network.
    ``eager``: ``--enforce-eager`` added (the quick suite: about 70 s to ready here instead of 100 s compiled; the
    full suite's server proves the compiled engine). ``cache``: (volume, cache root) mounts the compile cache's
    volume read-write at the cache root (``cache_root``), above a tmpfs of the profile that holds it.
    ``environment``: set over the image's and the profile's (the run's own cores side by side: ``room.omp_bind``)."""
    extra = profiles.container_kwargs(profile)
    if profile.network != "none":
        extra["ports"] = {f"{PORT}/tcp": ("127.0.0.1", None)}
    access = gpu or GpuAccess()
    volumes = {volume: {"bind": MODEL_MOUNT, "mode": "ro"}}
    if cache is not None:
        volumes[cache[0]] = {"bind": cache[1], "mode": "rw"}
    return ContainerSpec(
        image=image,
        command=server_args(start, eager=eager),
        environment=dict(environment or {}),
        volumes=volumes,
        device_requests=access.device_requests,
        devices=access.devices,
        group_add=access.group_add,
        extra=extra,
    )


def client_spec(image: str, profile: Profile, server_id: str) -> ContainerSpec:
    """The probe client: ``sleep infinity`` in the image, in the server's network namespace, as the profile's user
    with a read-only root and a small tmpfs of its own (the first-chunk marker)."""
    return ContainerSpec(
        image=image,
        entrypoint=["sleep"],
        command=["infinity"],
        network_mode=f"container:{server_id}",
        user=profile.user,
        read_only=True,
        tmpfs={"/run/matrix-probe": "rw,nosuid,nodev,size=1m,mode=1777"},
        extra={"healthcheck": {"test": ["NONE"]}},
    )
