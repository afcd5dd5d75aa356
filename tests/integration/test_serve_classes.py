"""Serving failure classes (docs/failure-classes.md 15-22), each reproduced with a real `vllm serve` container of
the CPU image (or a small image built FROM it) and diagnosed by ``matrixtool.smoke.serve.diagnosis``.

The servers run through the image's own ENTRYPOINT (``serve /model ...``) with the suite's tiny model mounted
read-only, probed from the host through a published loopback port. testcontainers' ``DockerContainer`` starts
them (Ryuk disabled: its reaper image comes from a registry these machines cannot reach; each container is
removed by the fixture and labelled for the leak check). Most cases fail at start-up; the waits stop the moment
the server exits. One server of one derived image stands for the cases that need a running server.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import docker
import pytest
from testcontainers.core.config import testcontainers_config
from testcontainers.core.container import DockerContainer
from testcontainers.core.wait_strategies import LogMessageWaitStrategy

from matrixtool.core.container import OWNER_LABEL
from matrixtool.incontainer.vllm_smoke import servediag, serving
from matrixtool.incontainer.vllm_smoke.programs import serve_probe
from matrixtool.smoke.serve import diagnosis as sd
from matrixtool.smoke.serve import route_diagnosis as srd
from tests.conftest import REPO_ROOT
from tests.integration.conftest import INSTALL_WHEELS, OWNER, TEST_REPOSITORY

pytestmark = [pytest.mark.engine, pytest.mark.slow]

os.environ["TESTCONTAINERS_RYUK_DISABLED"] = "true"
testcontainers_config.ryuk_disabled = True

SITE = "/opt/venv/lib/python3.11/site-packages"
PROGRAMS = REPO_ROOT / "tools" / "matrixtool" / "incontainer" / "vllm_smoke" / "programs"
PORT = 8000
# A cold eager start takes 70-100 s on 2 quiet cores; shared machines take several times that.
START_TIMEOUT = 900
STARTED = re.compile(re.escape("Application startup complete."))
# float32 as the serve check runs the tiny model: bfloat16 (vLLM's CPU default) killed the worker at the first
# forward on these machines' CPUs (AMX and AVX512-BF16 advertised; "Worker proc VllmWorker-0 died unexpectedly").
SERVE_ARGS = ("serve", "/model", "--enforce-eager", "--max-model-len", "128", "--dtype", "float32")


def _build(client: docker.DockerClient, context: Path, lines: Sequence[str], base: str) -> str:
    """``lines`` on top of ``base``, tagged ``vllm-matrix-test/serve-<random>``; the tag."""
    tag = f"{TEST_REPOSITORY}/serve-{uuid.uuid4().hex[:8]}:latest"
    context.mkdir(parents=True, exist_ok=True)
    (context / "Dockerfile").write_text("\n".join([f"FROM {base}", *lines]) + "\n")
    proc = subprocess.run(
        ["docker", "buildx", "build", "--load", "--tag", tag, str(context)], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return tag


@pytest.fixture(scope="module")
def tiny_model(client: docker.DockerClient, cpu_image: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The suite's tiny model (make_model.py, run by the image itself) in a host folder, without a chat template
    (class 17 needs a model that has none)."""
    folder = tmp_path_factory.mktemp("serve-model")
    folder.chmod(0o777)  # the image's user writes it
    strip = (
        "import json, os, sys; sys.path.insert(0, '/programs'); import make_model; make_model.make('/model'); "
        "p = '/model/tokenizer_config.json'; d = json.load(open(p)); d.pop('chat_template', None); "
        "json.dump(d, open(p, 'w')); os.path.exists('/model/chat_template.jinja') and "
        "os.remove('/model/chat_template.jinja')"
    )
    client.containers.run(
        cpu_image,
        entrypoint=["python3", "-c", strip],
        volumes={str(PROGRAMS): {"bind": "/programs", "mode": "ro"}, str(folder): {"bind": "/model", "mode": "rw"}},
        labels={OWNER_LABEL: OWNER},
        remove=True,
    )
    assert (folder / "config.json").exists()
    return folder


@dataclass(frozen=True, kw_only=True)
class Outcome:
    """How a server's start ended: ``ready`` (it logged start-up complete) or not, its exit code when it exited,
    its log, the seconds it took and its base URL."""

    ready: bool
    exit_code: int | None
    log: str
    seconds: float
    url: str


@contextmanager
def server(
    image: str,
    model: Path,
    *,
    shm: str = "1g",
    env: Mapping[str, str] | None = None,
    args: Sequence[str] = SERVE_ARGS,
    volumes: Sequence[tuple[str, str, str]] = (),
    shared: bool = False,
) -> Iterator[DockerContainer]:
    """A started server container (the image's entrypoint with ``args``); removed on exit. A ``shared`` one
    (module-scoped) lacks the owner label, which the per-test leak check looks for."""
    labels = {"io.vllm-matrix.test": "serve-classes", **({} if shared else {OWNER_LABEL: OWNER})}
    container = (
        DockerContainer(image)
        .with_command(list(args))
        .with_volume_mapping(str(model), "/model", "ro")
        .with_envs(**dict(env or {}))
        .with_kwargs(shm_size=shm, labels=labels)
    )
    # Published on loopback only: testcontainers' own mapping listens on every address. docker-py takes a
    # (host IP, host port) pair where testcontainers types a port.
    container.ports[f"{PORT}/tcp"] = cast("int", ("127.0.0.1", None))
    for host, path, mode in volumes:
        container.with_volume_mapping(host, path, mode)
    container.start()
    try:
        yield container
    finally:
        container.stop()


def wait_started(container: DockerContainer, timeout: float = START_TIMEOUT) -> Outcome:
    """Wait until the server logs start-up complete or exits (whichever comes first); its :class:`Outcome`."""
    started = time.monotonic()
    wrapped = container.get_wrapped_container()
    try:
        LogMessageWaitStrategy(STARTED).with_startup_timeout(int(timeout)).wait_until_ready(container)
        ready = True
    except RuntimeError:  # the container exited before the message
        ready = False
    seconds = round(time.monotonic() - started, 1)
    wrapped.reload()
    exit_code = None if wrapped.status == "running" else int(wrapped.wait(timeout=60)["StatusCode"])
    url = f"http://127.0.0.1:{container.get_exposed_port(PORT)}" if ready else ""
    return Outcome(ready=ready, exit_code=exit_code, log=logs(container), seconds=seconds, url=url)


def logs(container: DockerContainer) -> str:
    """stdout and stderr of the container, interleaved as ``docker logs`` prints them."""
    return str(container.get_wrapped_container().logs().decode("utf-8", "replace"))


def http(url: str, body: dict[str, object] | None = None) -> tuple[int | None, str]:
    """Status and body of a GET (or a JSON POST with ``body``); status None when nothing answered."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"} if data else {})
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return int(response.status), response.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read().decode("utf-8", "replace")
    except OSError:
        return None, ""


# --- start-up failures: one server each, fails fast ------------------------------------------------------------------


def test_too_little_shm(cpu_image: str, tiny_model: Path) -> None:
    """Class 15: Docker's default /dev/shm size."""
    with server(cpu_image, tiny_model, shm="64m") as container:
        out = wait_started(container)
    assert (out.ready, out.exit_code) == (False, 1), out.log[-3000:]
    d = sd.diagnose_log(out.log, out.exit_code)
    assert d is not None, out.log[-3000:]
    assert (d.failure_class, d.name) == (15, "shm-too-small")
    assert "Insufficient space in /dev/shm" in d.cause
    assert re.search(r"asked for \d+ MiB of /dev/shm .* has 64 MiB free", d.diagnosis), d.diagnosis
    assert "--shm-size" in d.fix and "emptyDir: {medium: Memory" in d.fix
    # Every probe after that fails only because the server died.
    route = srd.diagnose_route("GET /health", None, "", server=d)
    assert route is not None and route.consequence_of == d


def test_compile_cache_volume_the_uid_cannot_write(
    cpu_image: str, tiny_model: Path, client: docker.DockerClient
) -> None:
    """Class 31: the cache volume at the image's cache root is root-owned, mode 755 (a claim without fsGroup): torch
    creates its inductor cache at `import vllm` and the server exits before it starts."""
    name = f"vllm-matrix-test-cache-{uuid.uuid4().hex[:8]}"
    client.volumes.create(name=name, labels={OWNER_LABEL: OWNER})
    try:
        # A file in it keeps the engine from copying the image's /tmp/.cache (mode 1777) into the empty volume.
        client.containers.run(cpu_image, ["-c", "touch /c/.keep && chmod 755 /c"], entrypoint="sh", user="0",
                              volumes={name: {"bind": "/c", "mode": "rw"}}, remove=True)  # fmt: skip
        with server(cpu_image, tiny_model, volumes=[(name, "/tmp/.cache", "rw")]) as container:
            out = wait_started(container)
    finally:
        client.volumes.get(name).remove(force=True)
    assert (out.ready, out.exit_code) == (False, 1), out.log[-3000:]
    d = sd.diagnose_log(out.log, out.exit_code, env={"XDG_CACHE_HOME": "/tmp/.cache"})
    assert d is not None, out.log[-3000:]
    assert (d.failure_class, d.name) == (31, "compile-cache-unwritable")
    assert d.cause == "PermissionError: [Errno 13] Permission denied: '/tmp/.cache/torchinductor'"
    assert "fsGroup" in d.fix and "1777" in d.fix


# The kubelet's fsGroup ownership of a volume (pkg/volume/volume_linux.go SetVolumeOwnership): group G, the group
# bits rw (x on directories), setgid on directories, so what the pod creates there stays group G.
_FS_GROUP_OWNERSHIP = "chgrp -R {g} /c && chmod -R g+rwX /c && find /c -type d -exec chmod g+s {{}} +"
_WRITE_INDUCTOR_CACHE = (
    "import os; from torch._inductor.runtime.cache_dir_utils import cache_dir; d = cache_dir(); "
    "os.makedirs(d, exist_ok=True); open(os.path.join(d, 'probe'), 'w').write('ok'); print(d)"
)


@pytest.mark.parametrize(
    ("fs_group", "user", "group_add", "writable"),
    [
        (0, "1000770000:0", [], True),  # --cluster kubernetes: fsGroup = the profile's GID, 0
        (1000680000, "1000680000:0", ["1000680000"], True),  # OpenShift: the SCC's fsGroup, a supplemental group
        (1000680000, "1000680000:0", [], False),  # a pod outside the claim's group: class 31
    ],
    ids=["kubernetes-fsgroup-0", "openshift-scc-fsgroup", "no-fsgroup"],
)
def test_the_cache_claim_is_written_through_the_pods_fsgroup(
    cpu_image: str, client: docker.DockerClient, fs_group: int, user: str, group_add: list[str], writable: bool
) -> None:
    """The cache claim of `tools/matrix kube --cache-claim`, root-owned mode 755 as class 31's volume, then owned as
    the kubelet owns it by the pod's fsGroup: with `--cluster kubernetes` the manifest's fsGroup 0 (the profile's
    GID), with `--cluster openshift` the restricted-v2 SCC's (the namespace's supplemental range, added to the
    arbitrary UID's groups; its primary group is 0). The pod's UID makes torch's inductor cache dir there."""
    name = f"vllm-matrix-test-claim-{uuid.uuid4().hex[:8]}"
    client.volumes.create(name=name, labels={OWNER_LABEL: OWNER})
    try:
        client.containers.run(cpu_image, ["-c", "touch /c/.keep && chmod 755 /c && " + _FS_GROUP_OWNERSHIP.format(
            g=fs_group)], entrypoint="sh", user="0", volumes={name: {"bind": "/c", "mode": "rw"}}, remove=True,
            labels={OWNER_LABEL: OWNER})  # fmt: skip
        try:
            out = client.containers.run(cpu_image, ["-c", _WRITE_INDUCTOR_CACHE], entrypoint="python3", user=user,
                                        group_add=group_add, volumes={name: {"bind": "/tmp/.cache", "mode": "rw"}},
                                        remove=True, labels={OWNER_LABEL: OWNER})  # fmt: skip
            written, error = out.decode().strip(), ""
        except docker.errors.ContainerError as exc:
            stderr = exc.stderr or b""
            written, error = "", stderr.decode() if isinstance(stderr, bytes) else stderr
    finally:
        client.volumes.get(name).remove(force=True)
    if writable:
        assert written == "/tmp/.cache/torchinductor", error[-2000:]
    else:
        assert "Permission denied: '/tmp/.cache/torchinductor'" in error, (written, error[-2000:])


@pytest.mark.parametrize(
    ("variable", "value", "name", "text"),
    [
        ("VLLM_PORT", "tcp://10.96.0.12:8000", "vllm-port-service-link", "Service named `vllm`"),
        ("VLLM_DP_MASTER_PORT", "tcp://10.96.0.13:29500", "port-service-link", "VLLM_DP_MASTER_PORT is"),
    ],
    ids=["service-vllm", "service-vllm-dp-master"],
)
def test_kubernetes_service_link(
    cpu_image: str, tiny_model: Path, variable: str, value: str, name: str, text: str
) -> None:
    """Class 18: the variable Kubernetes injects for a Service of that name (the value is never connected to)."""
    with server(cpu_image, tiny_model, env={variable: value}) as container:
        out = wait_started(container)
        env = dict(e.split("=", 1) for e in container.get_wrapped_container().attrs["Config"]["Env"])
    assert (out.ready, out.exit_code) == (False, 1), out.log[-3000:]
    d = sd.diagnose_log(out.log, out.exit_code, env=env)
    assert d is not None, out.log[-3000:]
    assert (d.failure_class, d.name) == (18, name), d
    assert value in d.cause and text in d.diagnosis
    assert "enableServiceLinks: false" in d.fix


def test_metrics_dir_missing(cpu_image: str, tiny_model: Path) -> None:
    """Class 22: PROMETHEUS_MULTIPROC_DIR naming a folder that does not exist."""
    with server(cpu_image, tiny_model, env={"PROMETHEUS_MULTIPROC_DIR": "/tmp/prom-missing"}) as container:
        out = wait_started(container)
    assert (out.ready, out.exit_code) == (False, 1), out.log[-3000:]
    d = sd.diagnose_log(out.log, out.exit_code)
    assert d is not None, out.log[-3000:]
    assert (d.failure_class, d.name) == (22, "metrics-dir-unusable")
    assert "/tmp/prom-missing/" in d.cause and "/tmp/prom-missing, which does not exist" in d.diagnosis


# --- one running server of one derived image: chat, model id, /metrics, stop -----------------------------------------


@dataclass(frozen=True, kw_only=True)
class Served:
    container: DockerContainer
    outcome: Outcome
    metrics: Path  # the host folder mounted as PROMETHEUS_MULTIPROC_DIR


@pytest.fixture(scope="module")
def served(
    client: docker.DockerClient, cpu_image: str, tiny_model: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    """A server of an image built FROM ours whose ENTRYPOINT is a shell (class 19), serving the tiny model without
    a chat template (17) as `tiny` (17), with PROMETHEUS_MULTIPROC_DIR on a folder holding a corrupted metrics
    file (22)."""
    image = _build(
        client,
        tmp_path_factory.mktemp("shell-entrypoint"),
        ['ENTRYPOINT ["/bin/sh", "-c", "vllm \\"$@\\"", "vllm"]'],
        cpu_image,
    )
    metrics = tmp_path_factory.mktemp("prom")
    metrics.chmod(0o777)
    # A header claiming 64 bytes used, then an entry of 4096: a file cut short.
    (metrics / "counter_4242.db").write_bytes(struct.pack("i", 64) + bytes(4) + struct.pack("i", 4096) + bytes(52))
    try:
        with server(
            image,
            tiny_model,
            env={"PROMETHEUS_MULTIPROC_DIR": "/prom"},
            args=(*SERVE_ARGS, "--served-model-name", "tiny"),
            volumes=[(str(metrics), "/prom", "rw")],
            shared=True,
        ) as container:
            outcome = wait_started(container)
            assert outcome.ready, outcome.log[-3000:]
            yield Served(container=container, outcome=outcome, metrics=metrics)
    finally:
        client.images.remove(image, force=True)


def test_chat_without_template(served: Served) -> None:
    status, body = http(
        f"{served.outcome.url}/v1/chat/completions",
        {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4},
    )
    assert status == 400, body
    d = srd.diagnose_route("POST /v1/chat/completions", status, body, log=logs(served.container))
    assert d is not None, body
    assert (d.failure_class, d.name) == (17, "no-chat-template")
    assert "chat template" in d.cause and "--chat-template" in d.fix


def test_model_id_the_server_does_not_serve(served: Served) -> None:
    status, body = http(f"{served.outcome.url}/v1/completions", {"model": "/model", "prompt": "hi", "max_tokens": 2})
    assert status == 404, body
    d = srd.diagnose_route("POST /v1/completions", status, body)
    assert d is not None, body
    assert (d.failure_class, d.name) == (17, "unknown-model-id")
    assert "'/model'" in d.diagnosis and "serves 'tiny'" in d.diagnosis
    # The served name works: the mismatch was the client's.
    assert http(f"{served.outcome.url}/v1/completions", {"model": "tiny", "prompt": "hi", "max_tokens": 2})[0] == 200


def test_metrics_500_from_a_corrupted_multiprocess_file(served: Served) -> None:
    assert http(f"{served.outcome.url}/health")[0] == 200
    status, body = http(f"{served.outcome.url}/metrics")
    assert status == 500, body[:500]
    d = srd.diagnose_route("GET /metrics", status, body, log=logs(served.container))
    assert d is not None, logs(served.container)[-3000:]
    assert (d.failure_class, d.name) == (22, "metrics-file-corrupted"), d
    assert "file is corrupted" in d.cause and "PROMETHEUS_MULTIPROC_DIR" in d.diagnosis


def test_metrics_name_the_routes_once_the_file_is_gone(served: Served) -> None:
    """The control of the two cases above: with the stack vLLM declares, /metrics names each route it counted
    (a served completion was counted under its own path, not handler="none": class 16's diagnosis stays silent)."""
    (served.metrics / "counter_4242.db").unlink()
    assert http(f"{served.outcome.url}/v1/completions", {"model": "tiny", "prompt": "hi", "max_tokens": 2})[0] == 200
    status, text = http(f"{served.outcome.url}/metrics")
    assert status == 200, text[:500]
    assert 'http_requests_total{handler="/v1/completions"' in text, text[:3000]
    assert servediag.unlabelled_metrics(text) is None


def test_shell_as_pid1_swallows_sigterm(served: Served) -> None:
    """Class 19, last in this module: it stops the shared server."""
    wrapped = served.container.get_wrapped_container()
    cmdline = wrapped.exec_run(["cat", "/proc/1/cmdline"]).output
    assert isinstance(cmdline, bytes)
    pid1 = cmdline.decode().rstrip("\0").split("\0")
    grace = 10
    started = time.monotonic()
    wrapped.stop(timeout=grace)
    seconds = time.monotonic() - started
    wrapped.reload()
    exit_code = int(wrapped.attrs["State"]["ExitCode"])
    assert exit_code == 137 and seconds >= grace, (exit_code, seconds)
    d = srd.diagnose_stop(exit_code=exit_code, seconds=seconds, grace=grace, pid1=pid1)
    assert d is not None
    assert (d.failure_class, d.name) == (19, "shell-pid1-swallows-sigterm")
    assert d.cause.startswith("PID 1: /bin/sh -c")
    assert "exec" in d.fix


# --- a derived image with the web stack bumped -----------------------------------------------------------------------


def test_fastapi_upgraded_in_a_derived_image(
    client: docker.DockerClient, cpu_image: str, tiny_model: Path, wheel_cache: Any, tmp_path: Path
) -> None:
    """Class 16: `pip install -U fastapi` on top of ours (fastapi 0.163.2, outside vLLM's fastapi<0.137): every
    route answers, and /metrics names no route."""
    context = tmp_path / "ctx"
    (context / "wheels").mkdir(parents=True)
    wheel = wheel_cache("fastapi==0.163.2")
    shutil.copy(wheel, context / "wheels" / wheel.name)
    image = _build(
        client,
        context,
        [
            "USER root",
            f"RUN rm -rf {SITE}/fastapi {SITE}/fastapi-*.dist-info",
            INSTALL_WHEELS,
            "USER 1000:0",
        ],
        cpu_image,
    )
    try:
        with server(image, tiny_model) as container:
            out = wait_started(container)
            assert out.ready, out.log[-3000:]
            body = {"model": "/model", "prompt": "hi", "max_tokens": 2}
            assert http(f"{out.url}/v1/completions", body)[0] == 200
            status, text = http(f"{out.url}/metrics")
    finally:
        client.images.remove(image, force=True)
    assert status == 200, text[:500]
    found = servediag.unlabelled_metrics(text)
    assert found is not None, text[:3000]
    assert "fastapi<0.137" in found[2]


# --- an API key baked into the image ------------------------------------------------------------------------------


def test_an_api_key_baked_into_the_image_is_named_with_its_source(
    client: docker.DockerClient, cpu_image: str, tiny_model: Path, tmp_path: Path
) -> None:
    """Class 50: `ENV VLLM_API_KEY` in an image built FROM ours: every /v1 route answers 401 to the suite's probe
    (the one the serve check sends), and the diagnosis names the key's source and the fix, not just the 401s."""
    image = _build(client, tmp_path / "ctx", ["ENV VLLM_API_KEY=baked-into-the-image"], cpu_image)
    try:
        env = dict(p.partition("=")[::2] for p in client.images.get(image).attrs["Config"]["Env"])
        with server(image, tiny_model) as container:
            out = wait_started(container)
            assert out.ready, out.log[-3000:]
            spec = {"model": "/model", "prompt": "hi", "max_tokens": 2}
            probes = serve_probe.probe(out.url, spec)
    finally:
        client.images.remove(image, force=True)
    assert probes["models"]["status"] == 401 and probes["metrics"]["status"] == 200, probes
    found = serving.unauthorized(probes, env, list(SERVE_ARGS))
    assert found is not None
    problem, fix = found
    assert problem.startswith("models, completion, stream, chat answered 401 Unauthorized"), problem
    assert "VLLM_API_KEY is set in the server's environment" in problem and "--api-key is" not in problem
    assert "Kubernetes Secret" in fix and "Authorization: Bearer" in fix


# --- probes ----------------------------------------------------------------------------------------------------------


def test_liveness_kills_a_server_still_compiling(cpu_image: str, tiny_model: Path) -> None:
    """Class 20: a compiled (default) start killed with SIGKILL, as the kubelet ends a container whose liveness
    probe failed, once the log shows the compile warm-up (the probe came before the server was ready)."""
    args = ("serve", "/model", "--max-model-len", "128")
    compiling = re.compile(re.escape("Warming up model for the compilation"))
    with server(cpu_image, tiny_model, args=args) as container:
        started = time.monotonic()
        LogMessageWaitStrategy(compiling).with_startup_timeout(START_TIMEOUT).wait_until_ready(container)
        wrapped = container.get_wrapped_container()
        wrapped.kill()
        exit_code = int(wrapped.wait(timeout=60)["StatusCode"])
        seconds = time.monotonic() - started
        text = logs(container)
    assert exit_code == 137, text[-3000:]
    d = sd.diagnose_log(text, exit_code, seconds=seconds)
    assert d is not None, text[-3000:]
    assert (d.failure_class, d.name) == (20, "killed-while-starting")
    assert "SIGKILL, exit 137" in d.diagnosis and "compiling the model" in d.diagnosis
    assert "startupProbe" in d.fix


def test_healthcheck_calls_a_binary_the_image_lacks(
    client: docker.DockerClient, cpu_image: str, tmp_path: Path
) -> None:
    """Class 20: the HEALTHCHECK users copy from curl-carrying images (no server needed: the command never runs)."""
    image = _build(
        client,
        tmp_path / "ctx",
        ['HEALTHCHECK --interval=1s CMD ["curl", "-fsS", "http://localhost:8000/health"]'],
        cpu_image,
    )
    container = client.containers.run(
        image, entrypoint=["sleep", "60"], detach=True, labels={OWNER_LABEL: OWNER, "io.vllm-matrix.test": "serve"}
    )
    try:
        deadline = time.monotonic() + 60
        log: list[dict[str, object]] = []
        while time.monotonic() < deadline and not log:
            container.reload()
            log = list(container.attrs["State"].get("Health", {}).get("Log") or [])
            time.sleep(1)
    finally:
        container.remove(force=True)
        client.images.remove(image, force=True)
    assert log, "no health check ran"
    entry = log[0]
    d = srd.diagnose_healthcheck(str(entry["Output"]), int(str(entry["ExitCode"])))
    assert d is not None, entry
    assert (d.failure_class, d.name) == (20, "healthcheck-binary-missing")
    assert "`curl`" in d.diagnosis
