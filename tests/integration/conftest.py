"""Integration tests: the real Docker engine, real BuildKit builds, real vLLM inside the images.

The CPU image is built once per session through the CLI (``tools/matrix build cpu``); an image this
session built is removed at the end (BuildKit's cache stays, so the next session rebuilds quickly).

The suite's budget (docs/figures.md, "The test suite's budget"): ``bash .ci/run`` on a clean clone at most 40
minutes where the images exist, at most 60 where nothing does. What costs is a vLLM start (an ``import vllm``,
a server, an engine) and a build; so, for a new test:

- One suite run per image and profile, read by many assertions. A test that needs what the CPU image's full suite
  shows (a check's verdict or facts, the server's phases, a cold or warm start, the stop, the logs, the JUnit file)
  reads the session's ``cpu_run`` (`tools/matrix run cpu`: every check under `default` and `restricted`) and asserts
  on its ``doc``, ``proc.stderr`` or files; it does not start ``run``/``test`` or a server of its own. A new step of
  the serve check (a restart, a kill) shows up in ``cpu_run`` without a test of its own running it again.
- A run of its own only where the input differs (a bad or derived image, a condition flag, a fault injected),
  with ``--only`` the checks that prove the point, never the whole suite, and ``--profile default`` unless the
  point is another profile. A server of its own only where the image or the server's conditions differ; tests of
  one module that can read one server share it (a ``scope="module"`` fixture, as test_serve_classes' ``served``).
- A push goes to the session's registry (``local_registry``: one ``docker-registry`` for the session, emptied
  after each module), where the CPU image's layers are pushed once and mounted by every later push.
- Another image (cuda, arm64 under QEMU) is built once per session by a session fixture here
  (``emulated_arm64``) or in its module, and its one run is read by every test of it.
- Say in the test's docstring which shared run it reads; a test that adds more than about 30 s to ``make test``
  on a quiet machine names its cost in docs/figures.md (the owners' table), or is marked out of ``make test``
  (``act``, ``emulated``) with a target of its own.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
import pytest
import yaml

from matrixtool.core import engine
from matrixtool.core.container import OWNER_ENV_VAR, OWNER_LABEL
from matrixtool.model.matrixfile import load_matrix
from tests.conftest import REPO_ROOT, copy_checkout, record_exit

MATRIX = str(REPO_ROOT / "tools" / "matrix")
# The CPU variant's smoke checks, in matrix.yaml order.
CPU_CHECKS = [c.name for c in next(v for v in load_matrix().variants if v.name == "cpu").checks]
TEST_REPOSITORY = "vllm-matrix-test"
# Labels the check containers of this test session (inherited by every `tools/matrix` it runs).
OWNER = f"pytest-{uuid.uuid4().hex[:12]}"
os.environ[OWNER_ENV_VAR] = OWNER


def matrix_cli(
    *args: str, out: Path, env: dict[str, str] | None = None, timeout: float = 3600
) -> subprocess.CompletedProcess[str]:
    """Run ``tools/matrix --out OUT ARGS`` as a user would; output captured; its exit recorded (``record_exit``: exit 1
    fails the test)."""
    proc = subprocess.run(
        [MATRIX, "--out", str(out), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        check=False,
    )
    record_exit(proc.args, proc.returncode)
    return proc


def json_of(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    """The ``--json`` document a command printed on stdout (fails the test with its stderr otherwise)."""
    try:
        data: dict[str, Any] = json.loads(proc.stdout)
    except json.JSONDecodeError:
        pytest.fail(f"no JSON on stdout (exit {proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return data


@pytest.fixture(scope="session")
def client() -> docker.DockerClient:
    """The engine; the suite fails (not skips) without one: `make test` starts it."""
    try:
        return engine.connect()
    except Exception as exc:
        pytest.fail(f"integration tests need a Docker engine; run 'make test' (it starts one): {exc}")


@pytest.fixture(scope="session")
def out_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("matrix-out")


@pytest.fixture(scope="session")
def cpu_build(client: docker.DockerClient, out_dir: Path) -> Iterator[dict[str, Any]]:
    """The CPU image, built by ``tools/matrix build cpu --json``; its build record."""
    proc = matrix_cli("build", "cpu", "--json", out=out_dir)
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-5000:]
    (record,) = json_of(proc)["builds"]
    yield record
    remove_if_built(client, record)


def remove_if_built(client: docker.DockerClient, build: dict[str, Any]) -> None:
    """Remove every tag of a ``--json`` build record's image when this run built it (``cached`` false);
    an image that was there before the tests stays."""
    if not build["cached"]:
        for tag in client.images.get(build["image"]).tags:
            client.images.remove(tag, noprune=False)


@pytest.fixture(scope="session")
def cpu_image(cpu_build: dict[str, Any]) -> str:
    return str(cpu_build["image"])


@dataclass(frozen=True, kw_only=True)
class CpuRun:
    """One `tools/matrix run cpu --json` of the session: the process, its JSON document and its JUnit file."""

    proc: subprocess.CompletedProcess[str]
    doc: dict[str, Any]
    junit: Path


@pytest.fixture(scope="session")
def cpu_run(cpu_image: str, out_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> CpuRun:
    """`tools/matrix run cpu` once per session: every check under `default` and `restricted`, one server per
    profile, the official openai client against the `default` server (``MATRIX_SERVE_CLIENT``, as the serve
    check runs it). test_cpu_image and test_serve assert on it instead of starting servers of their own."""
    junit = tmp_path_factory.mktemp("cpu-run") / "junit.xml"
    env = {"MATRIX_SERVE_CLIENT": f"{sys.executable} {Path(__file__).with_name('openai_client.py')}"}
    proc = matrix_cli("run", "cpu", "--json", "--junit", str(junit), out=out_dir, env=env)
    return CpuRun(proc=proc, doc=json_of(proc), junit=junit)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listened on a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_registry(root: Path, host: str) -> subprocess.Popen[bytes]:
    """A ``docker-registry`` (Debian's package of the CNCF Distribution registry) serving ``host`` (``127.0.0.1:PORT``),
    its storage under ``root``/data, its log appended to ``root``/registry.log, once it answers. Fails the test where
    the program is missing or does not answer within 10 s."""
    exe = shutil.which("docker-registry")
    if exe is None:
        pytest.fail("docker-registry is missing; run 'make engine' (tools/setup-engine.sh installs it)")
    config = root / "config.yml"
    config.write_text(yaml.safe_dump({
        "version": 0.1, "log": {"level": "warn"},
        "storage": {"filesystem": {"rootdirectory": str(root / "data")}, "delete": {"enabled": True}},
        "http": {"addr": host},
    }))  # fmt: skip
    with (root / "registry.log").open("a") as log:
        proc = subprocess.Popen([exe, "serve", str(config)], stdout=log, stderr=subprocess.STDOUT)
    for _ in range(100):
        try:
            urllib.request.urlopen(f"http://{host}/v2/", timeout=1).close()
            return proc
        except OSError:
            time.sleep(0.1)
    proc.kill()
    proc.wait(timeout=30)
    pytest.fail(f"docker-registry did not answer on {host}: {(root / 'registry.log').read_text()[-2000:]}")


@pytest.fixture(scope="session")
def registry_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``127.0.0.1:PORT`` of one ``docker-registry`` for the session (``start_registry``), its storage deleted
    afterwards. One for the session, not one per module: the engine pushes the CPU image's layers (about 40 s of
    compression and upload on 2 cores, 2026-12-07) once, and every later push of them to any repository of this
    registry is a cross-repository mount."""
    root = tmp_path_factory.mktemp("registry")
    host = f"127.0.0.1:{free_port()}"
    proc = start_registry(root, host)
    try:
        yield host
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        shutil.rmtree(root / "data", ignore_errors=True)


# Every manifest kind a push here makes: images, lists and indexes, cosign's signatures and attestations.
MANIFEST_TYPES = ", ".join([
    "application/vnd.docker.distribution.manifest.v2+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.oci.image.index.v1+json",
])  # fmt: skip


def empty_registry(host: str) -> None:
    """Delete every tagged manifest in the registry at ``host`` (its blobs and each repository's layer links stay,
    so a later push of the same layers is still a mount). Raises ``AssertionError`` naming the tags still there
    afterwards, ``urllib.error.URLError`` where the registry does not answer."""

    def get(path: str) -> Any:
        with urllib.request.urlopen(f"http://{host}/v2/{path}", timeout=30) as answer:
            return json.loads(answer.read())

    def tagged() -> dict[str, list[str]]:
        repos = get("_catalog?n=1000")["repositories"]
        return {repo: tags for repo in repos if (tags := get(f"{repo}/tags/list").get("tags"))}

    for repo, tags in tagged().items():
        for tag in tags:
            url = f"http://{host}/v2/{repo}/manifests/{tag}"
            try:
                with urllib.request.urlopen(
                    urllib.request.Request(url, method="HEAD", headers={"Accept": MANIFEST_TYPES}), timeout=30
                ) as answer:
                    digest = answer.headers["Docker-Content-Digest"]
                delete = urllib.request.Request(f"http://{host}/v2/{repo}/manifests/{digest}", method="DELETE")
                urllib.request.urlopen(delete, timeout=30).close()
            except urllib.error.HTTPError as error:
                if error.code != 404:  # 404: its manifest went with an earlier tag's (one digest, two tags)
                    raise
    left = tagged()
    assert not left, f"tags still in the registry at {host} after deleting their manifests: {left}"


@pytest.fixture(scope="module")
def local_registry(registry_server: str) -> Iterator[str]:
    """The session's registry (``registry_server``) for a module, emptied of what it pushed afterwards (a module
    sees no image an earlier one pushed, as with a registry of its own)."""
    empty_registry(registry_server)
    yield registry_server
    empty_registry(registry_server)


@pytest.fixture(scope="session")
def wheel_cache(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A factory: ``wheel_cache(requirement)`` downloads one wheel (no deps) with the host's pip; its path.

    Uses the host's own pip configuration (index, CA bundle), so a bad image never needs network access.
    """
    folder = tmp_path_factory.mktemp("wheels")

    def get(requirement: str) -> Path:
        target = folder / requirement.replace("=", "_")
        if not target.exists():
            proc = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "download",
                    "--no-deps",
                    "--only-binary=:all:",
                    "--python-version",
                    "3.11",
                    "-d",
                    str(target),
                    requirement,
                ],
                capture_output=True,
                text=True,
                check=False,
            )
            if proc.returncode != 0:
                pytest.fail(f"cannot download {requirement} with the host's pip: {proc.stderr.strip()[-500:]}")
        (wheel,) = target.glob("*.whl")
        return wheel

    return get


@pytest.fixture(scope="session")
def file_cache(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A factory: ``file_cache(url, sha256)`` downloads one file on the host (once per session) and checks its
    sha256; its path. For what is no wheel (a Debian package of another release), so a bad image needs no
    network at build time."""
    import hashlib
    import ssl
    import urllib.request

    folder = tmp_path_factory.mktemp("files")

    def get(url: str, sha256: str) -> Path:
        target = folder / url.rsplit("/", 1)[-1]
        if not target.exists():
            cafile = os.environ.get("PIP_CERT") or None  # a TLS-intercepting proxy's bundle, as pip uses it
            try:
                with urllib.request.urlopen(url, timeout=60, context=ssl.create_default_context(cafile=cafile)) as r:
                    data = r.read()
            except OSError as exc:
                pytest.fail(f"cannot download {url}: {exc}")
            if hashlib.sha256(data).hexdigest() != sha256:
                pytest.fail(f"{url}: sha256 {hashlib.sha256(data).hexdigest()}, expected {sha256}")
            target.write_bytes(data)
        return target

    return get


def build_derived(
    cpu_image: str,
    context: Path,
    lines: list[str],
    wheels: Sequence[Path] = (),
    files: Sequence[Path] = (),
    *,
    name: str = "bad",
) -> str:
    """Build ``lines`` FROM the CPU image in the folder ``context`` as ``TEST_REPOSITORY/NAME-RANDOM:latest``; the tag
    (``derived_image`` says more). Fails the test where the build fails."""
    tag = f"{TEST_REPOSITORY}/{name}-{uuid.uuid4().hex[:8]}:latest"
    (context / "wheels").mkdir(parents=True, exist_ok=True)
    (context / "files").mkdir(exist_ok=True)
    for folder, paths in (("wheels", wheels), ("files", files)):
        for path in paths:
            try:
                os.link(path, context / folder / path.name)
            except OSError:
                shutil.copy(path, context / folder / path.name)
    (context / "Dockerfile").write_text("\n".join([f"FROM {cpu_image}", *lines]) + "\n")
    proc = subprocess.run(
        ["docker", "buildx", "build", "--load", "--tag", tag, str(context)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return tag


@pytest.fixture
def derived_image(client: docker.DockerClient, cpu_image: str, tmp_path: Path) -> Iterator[Any]:
    """A factory: ``derived_image(lines, wheels=[], files=[])`` builds FROM the CPU image plus ``lines``.

    ``wheels`` are staged as ``wheels/`` in the build context; ``INSTALL_WHEELS`` (a Dockerfile line)
    installs them into the image's venv without network. ``files`` are staged as ``files/`` (a line uses them
    with ``RUN --mount=type=bind,source=files,target=/files``). Images are removed afterwards.
    """
    made: list[str] = []

    def build(lines: list[str], wheels: Sequence[Path] = (), files: Sequence[Path] = ()) -> str:
        made.append(build_derived(cpu_image, tmp_path / f"ctx-{len(made)}", lines, wheels, files))
        return made[-1]

    yield build
    for tag in made:
        client.images.remove(tag, force=True)


# A Dockerfile line that installs the staged wheels into /opt/venv with a throwaway pip (the image has none).
INSTALL_WHEELS = (
    "RUN --mount=type=bind,source=wheels,target=/wheels python3.11 -m venv /tmp/pip "
    "&& /tmp/pip/bin/pip install --quiet --no-deps --no-index --upgrade "
    "--target /opt/venv/lib/python3.11/site-packages /wheels/*.whl "
    "&& rm -rf /tmp/pip"
)


@pytest.fixture(autouse=True)
def no_leaked_containers(client: docker.DockerClient) -> Iterator[None]:
    """Every test leaves no smoke-check container behind (containers of other runs beside it are not ours)."""
    yield
    left = client.containers.list(all=True, filters={"label": f"{OWNER_LABEL}={OWNER}"})
    assert not left, f"leaked containers: {[c.name for c in left]}"


# --- QEMU emulation (issue 13) -------------------------------------------------------------------------
# The real `arm64` variant needs torch 2.13.0+cpu for aarch64 from PyTorch's CPU index, which these machines
# cannot reach; emulation stays covered by tests/data/emulation-matrix.yaml's `arm64-pypi`, built from PyPI's
# wheels, joined with matrix.yaml's unchanged `cpu` (so the CPU image is reused, not rebuilt).
EMULATION_VARIANT = "arm64-pypi"


@pytest.fixture(scope="session")
def emulation_matrix(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A matrix file (in a temporary folder, its images/ rendered beside it) holding matrix.yaml's `cpu` and
    the test-only variants of tests/data/emulation-matrix.yaml."""
    import yaml

    main = yaml.safe_load((REPO_ROOT / "matrix.yaml").read_text())
    data = yaml.safe_load((REPO_ROOT / "tests" / "data" / "emulation-matrix.yaml").read_text())
    data["variants"] = {"cpu": main["variants"]["cpu"], **data["variants"]}
    path = copy_checkout(tmp_path_factory.mktemp("emulation"), yaml.safe_dump(data, sort_keys=False))
    proc = matrix_cli("--matrix", str(path), "render", out=path.parent / "out")
    assert proc.returncode == 0, proc.stderr
    return path


@pytest.fixture(scope="session")
def emulated_arm64(client: docker.DockerClient, emulation_matrix: Path, out_dir: Path) -> Iterator[dict[str, Any]]:
    """`arm64-pypi` built under QEMU once per session (``build --json`` record); removed afterwards when built
    here."""
    if "linux/arm64" not in engine.builder_platforms():
        pytest.fail("the builder lists no linux/arm64: run 'make setup' (it installs QEMU and registers it)")
    proc = matrix_cli("--matrix", str(emulation_matrix), "build", EMULATION_VARIANT, "--json", out=out_dir)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    (record,) = json_of(proc)["builds"]
    yield record
    remove_if_built(client, record)
