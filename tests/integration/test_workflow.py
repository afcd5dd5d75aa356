"""The workflow's own steps (issue 13): the shell (`run:`) of the image job of .github/workflows/images.yml,
with `${{ … }}` filled in for the `cpu` entry of `tools/matrix ci-matrix`, run on this machine against a local
registry standing in for ghcr.io, so a broken step fails here, not on GitHub.

Steps that are actions (`uses:`) are left out: checkout (this is the checkout), setup-python (the project's
.venv is first on PATH), setup-buildx-action (the engine's own builder: its `docker` driver makes `tools/matrix`
fall back to an inline cache pushed as the cache ref, see cache.py), upload-artifact. The login step is a no-op
for the loopback registry. PyTorch's index is not reachable here: a file:// index holding the CPU wheel of the
host's wheelhouse stands in for it.

Runs as a team sees them, in one module (the image is built once): a push to the default branch (build, the
checks, the cache written, pushed, the push record written), then the same push again on an engine that lost
the image (a fresh runner, nothing changed): it finds the image in the registry, builds nothing, pulls it, checks
it and reports it for the manifest job; then a pull request that changes nothing (quick suite, `--suite quick`).

Cost: the image's layers come from BuildKit's local cache (the session's CPU image: only the layers that name
the wheelhouse's fingerprint differ), and the checks are narrowed through the workflow's own input `only` (a
manual run's `workflow_dispatch` input) to the ones below: the whole suite is test_cpu_image.py's.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import docker
import pytest
import yaml

from matrixtool.build.hostfiles import resolve_wheelhouse
from matrixtool.model.checks import prerequisites
from tests.conftest import REPO_ROOT
from tests.integration.conftest import MATRIX

pytestmark = [pytest.mark.engine, pytest.mark.slow]

WORKFLOW = REPO_ROOT / ".github" / "workflows" / "images.yml"
# Steps that cannot run off GitHub, by name, and why.
NOT_HERE = {
    "Log in to the registry": "no login: the stand-in registry is on loopback",
    # The OSV API does not answer here: the gate fails closed (exit 14); test_supply_chain.py and
    # tests/unit/supply/test_audit.py cover it with fixture advisories.
    "Vulnerability gate": "api.osv.dev is unreachable from this machine",
}
# The repository's signing key (secrets COSIGN_PRIVATE_KEY, COSIGN_PASSWORD): a key pair made for the module.
COSIGN_PASSWORD = "workflow-test"
_EXPR = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")
# The checks each run runs (the workflow's input `only`): a fast one, and pip-check, which reads every
# distribution the wheelhouse step's torch brought.
ONLY = ("torch-family", "pip-check")
# What those runs report: the checks of `only` and the prerequisites they bring (torch-import).
RUN = set(prerequisites(ONLY))
PUBLISH_EXPR = (
    "github.event_name == 'push' && github.ref == format('refs/heads/{0}', github.event.repository.default_branch)"
)


def _expressions(entry: Mapping[str, Any], event: str, signing_key: str = "") -> dict[str, str]:
    """Every expression the image job may use, as GitHub would evaluate it for ``entry`` and ``event``."""
    values = {f"matrix.{key}": value for key, value in entry.items()}
    values |= {
        "github.repository_owner": "Matrix-Test",
        "secrets.GITHUB_TOKEN": "",
        "secrets.COSIGN_PRIVATE_KEY": signing_key,
        "secrets.COSIGN_PASSWORD": COSIGN_PASSWORD,
        PUBLISH_EXPR: event == "push",
        "always()": True,
        "inputs.only": " ".join(ONLY),
    }
    return {k: (str(v).lower() if isinstance(v, bool) else str(v)) for k, v in values.items()}


def _fill(text: str, values: Mapping[str, str]) -> str:
    def one(m: re.Match[str]) -> str:
        if m.group(1) not in values:
            pytest.fail(f"images.yml uses ${{{{ {m.group(1)} }}}}, which this test cannot evaluate; teach it")
        return values[m.group(1)]

    return _EXPR.sub(one, text)


def _runs_if(condition: str | None, values: Mapping[str, str], env: Mapping[str, str]) -> bool:
    if condition is None:
        return True
    expr = condition.strip().removeprefix("${{").removesuffix("}}").strip()
    if expr.startswith("env.") and " == " in expr:
        name, _, literal = expr.removeprefix("env.").partition(" == ")
        return env.get(name.strip()) == literal.strip().strip("'")
    if expr not in values:
        pytest.fail(f"images.yml has `if: {condition}`, which this test cannot evaluate; teach it")
    return values[expr] == "true"


def run_image_job(
    *, entry: Mapping[str, Any], event: str, registry: str, index_url: str, work: Path
) -> tuple[dict[str, str], float]:
    """Run the image job's shell steps in the repository root, in order; the output (stdout + stderr) of each
    step run, by name, and the wall time (seconds) of the whole job. Fails the test at the first step that
    fails, with its output."""
    job = yaml.safe_load(WORKFLOW.read_text())["jobs"]["image"]
    signing_key = work / "cosign.key"
    if not signing_key.exists():
        made = subprocess.run(
            ["cosign", "generate-key-pair"], cwd=work, env={**os.environ, "COSIGN_PASSWORD": COSIGN_PASSWORD},
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert made.returncode == 0, made.stderr
    values = _expressions({**entry, "wheelhouse_index": index_url}, event, signing_key.read_text())
    runner_temp = work / "runner-temp"
    runner_temp.mkdir(exist_ok=True)
    github_env = work / f"github-env-{event}"
    github_env.write_text("")
    # A runner has no wheelhouse of its own: the Wheelhouse step must provide it.
    env = {
        **{k: v for k, v in os.environ.items() if k != "PIP_FIND_LINKS"},
        "PATH": f"{REPO_ROOT / '.venv' / 'bin'}:{os.environ['PATH']}",
        "GITHUB_ENV": str(github_env),
        "GITHUB_OUTPUT": str(work / "github-output"),
        "GITHUB_ACTOR": "matrix-test",
        "RUNNER_TEMP": str(runner_temp),
        "GITHUB_STEP_SUMMARY": str(work / f"summary-{event}.md"),
        "CI": "true",
    }
    env |= {key: _fill(str(value), values) for key, value in job["env"].items()}
    ran: dict[str, str] = {}
    started = time.monotonic()
    for step in job["steps"]:
        name = step.get("name", step.get("uses", ""))
        if "uses" in step or name in NOT_HERE or not _runs_if(step.get("if"), values, env):
            continue
        step_env = env | {key: _fill(str(value), values) for key, value in step.get("env", {}).items()}
        # ghcr.io is the registry the workflow names; the local one stands in for it.
        script = _fill(step["run"], values).replace("ghcr.io", registry)
        proc = subprocess.run(
            ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", script],
            cwd=REPO_ROOT,
            env=step_env,
            capture_output=True,
            text=True,
            timeout=3600,
            check=False,
        )
        assert proc.returncode == 0, f"step {name!r} failed ({event}):\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
        ran[name] = proc.stdout + proc.stderr
        for line in github_env.read_text().splitlines():  # as the runner does between steps
            key, _, value = line.partition("=")
            env[key] = value
    return ran, time.monotonic() - started


@pytest.fixture(scope="module")
def pytorch_index(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A PEP 503 index (file://) holding the host wheelhouse's torch 2.13.0+cpu: PyTorch's CPU index here."""
    wheels = resolve_wheelhouse(None, os.environ)
    found = sorted(wheels.glob("torch-2.13.0+cpu-*.whl")) if wheels else []
    if not found:
        pytest.fail("no torch 2.13.0+cpu wheel in PIP_FIND_LINKS; 'make test' sets it (tools/wheelhouse.sh)")
    root = tmp_path_factory.mktemp("index")
    (root / "torch").mkdir()
    links = "".join(f'<a href="{w.resolve().as_uri()}">{w.name}</a>\n' for w in found)
    (root / "torch" / "index.html").write_text(f"<!DOCTYPE html><html><body>\n{links}</body></html>\n")
    return root.as_uri()


@pytest.fixture(scope="module")
def made_here(client: docker.DockerClient, local_registry: str) -> Iterator[None]:
    """Every image the module adds is removed afterwards, a `vllm-matrix/cpu` tag it moved (the version tag) is
    put back, and the workflow's folders (wheelhouse/, build/pushed/) are removed."""
    before = {tag: i.id for i in client.images.list(name="vllm-matrix/cpu") if i.id for tag in i.tags}
    ids = set(before.values())
    shutil.rmtree(REPO_ROOT / "build" / "pushed", ignore_errors=True)
    yield
    shutil.rmtree(REPO_ROOT / "wheelhouse", ignore_errors=True)
    shutil.rmtree(REPO_ROOT / "build" / "pushed", ignore_errors=True)
    for image in client.images.list():
        refs = [*image.tags, *image.attrs.get("RepoDigests", [])]
        if image.id not in ids and any("vllm-matrix/cpu" in r for r in refs):
            for ref in refs:
                with contextlib.suppress(docker.errors.ImageNotFound):
                    client.images.remove(ref, noprune=False)
    for tag, image_id in before.items():
        client.images.get(image_id).tag(tag)


@dataclass(frozen=True)
class Job:
    """One run of the image job: each step's output by name, its wall time (seconds)."""

    steps: dict[str, str]
    seconds: float


@pytest.fixture(scope="module")
def entry() -> dict[str, Any]:
    """The `cpu` entry of `tools/matrix ci-matrix`."""
    (cpu,) = json.loads(subprocess.check_output([MATRIX, "ci-matrix", "cpu"], text=True))["include"]
    return dict(cpu)


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("workflow")


@pytest.fixture(scope="module")
def first_push(
    cpu_image: str,
    entry: dict[str, Any],
    local_registry: str,
    pytorch_index: str,
    made_here: None,
    work: Path,
) -> Job:
    """A push to the default branch; ``cpu_image`` (the session's) warms BuildKit's cache."""
    ran, seconds = run_image_job(entry=entry, event="push", registry=local_registry, index_url=pytorch_index, work=work)
    return Job(ran, seconds)


STEPS = ["Install tools/matrix", "Engine", "Registry", "Wheelhouse", "Build and smoke-test", "Static checks", "Push"]
# A publishing run (a push) also makes sure of the QEMU user-mode emulator that the full suite's cpu-floor check uses.
PUSH_STEPS = [*STEPS[:4], "QEMU user-mode emulator", *STEPS[4:]]


def _pushed() -> dict[str, Any]:
    (record,) = json.loads((REPO_ROOT / "build" / "pushed" / "cpu-amd64.json").read_text())["pushed"]
    return dict(record)


def _junit_checks() -> set[str]:
    """The checks the Build and smoke-test step's JUnit report names (testcase names, less `build`)."""
    root = ElementTree.parse(REPO_ROOT / "build" / "reports" / "junit-cpu-amd64.xml").getroot()
    return {case.get("name", "") for case in root.iter("testcase")} - {"build"}


def _forget(client: docker.DockerClient, hash_ref: str, prefix: str) -> None:
    """A fresh runner: the engine has no image of this content hash any more (every tag of it removed)."""
    for ref in (hash_ref, hash_ref.replace(f"{prefix}/", "")):
        with contextlib.suppress(docker.errors.ImageNotFound):
            for tag in client.images.get(ref).tags:
                client.images.remove(tag, noprune=False)


def test_a_push_to_the_default_branch_builds_checks_caches_and_pushes(first_push: Job, local_registry: str) -> None:
    prefix = f"{local_registry}/matrix-test"
    assert list(first_push.steps) == PUSH_STEPS
    build_step = first_push.steps["Build and smoke-test"]
    assert "+ docker buildx build" in build_step
    assert "--cache-to type=inline" in build_step  # the engine's own builder: inline cache
    assert _junit_checks() == RUN
    pushed = _pushed()
    hash_ref, version_ref = pushed["refs"]
    assert hash_ref.startswith(f"{prefix}/vllm-matrix/cpu:") and version_ref == f"{prefix}/vllm-matrix/cpu:0.32.0"
    assert pushed["digest"].startswith("sha256:")
    assert "+ cosign sign" in first_push.steps["Push"] and "+ cosign attest" in first_push.steps["Push"]
    cache_ref = f"{prefix}/vllm-matrix/cpu:buildcache-amd64"
    inspect = subprocess.run(
        ["docker", "buildx", "imagetools", "inspect", cache_ref], capture_output=True, text=True, check=False
    )
    assert inspect.returncode == 0, inspect.stderr  # the cache was written to the registry
    print(f"\nimage job, push to the default branch (image built): {first_push.seconds:.0f} s")


def test_a_push_that_changes_nothing_builds_nothing_and_still_reports_the_image(
    client: docker.DockerClient,
    first_push: Job,
    entry: dict[str, Any],
    local_registry: str,
    pytorch_index: str,
    work: Path,
) -> None:
    prefix = f"{local_registry}/matrix-test"
    before = _pushed()
    hash_ref = before["refs"][0]
    _forget(client, hash_ref, prefix)
    ran, seconds = run_image_job(entry=entry, event="push", registry=local_registry, index_url=pytorch_index, work=work)
    assert list(ran) == PUSH_STEPS
    build_step = ran["Build and smoke-test"]
    assert "exists in the registry" in build_step and "+ docker buildx build" not in build_step
    assert f"+ docker pull {hash_ref}" in build_step
    assert _junit_checks() == RUN
    # push accepts the published image: the same record for the manifest job, nothing pushed again.
    assert "is in the registry already" in ran["Push"] and "+ docker push" not in ran["Push"]
    assert _pushed() == before
    print(f"\nimage job, push to the default branch that changes nothing: {seconds:.0f} s")


def test_a_pull_request_that_changes_nothing_builds_nothing(
    client: docker.DockerClient,
    first_push: Job,
    entry: dict[str, Any],
    local_registry: str,
    pytorch_index: str,
    work: Path,
) -> None:
    prefix = f"{local_registry}/matrix-test"
    hash_ref = _pushed()["refs"][0]
    _forget(client, hash_ref, prefix)
    shutil.rmtree(REPO_ROOT / "build" / "pushed")
    ran, seconds = run_image_job(
        entry=entry, event="pull_request", registry=local_registry, index_url=pytorch_index, work=work
    )
    assert list(ran) == STEPS
    build_step = ran["Build and smoke-test"]
    assert "exists in the registry" in build_step and "+ docker buildx build" not in build_step
    assert _junit_checks() and _junit_checks() <= RUN  # the quick suite's part of `only`
    assert "+ docker push" not in ran["Push"] and not (REPO_ROOT / "build" / "pushed" / "cpu-amd64.json").exists()
    print(f"\nimage job, pull request that changes nothing: {seconds:.0f} s")
