"""The workflow's own steps (issue 13): the shell (`run:`) of the image job of .github/workflows/images.yml,
with `${{ … }}` filled in for the `cpu` entry of `tools/matrix ci-matrix`, run on this machine against a local
registry standing in for ghcr.io, so a broken step fails here, not on GitHub.

Steps that are actions (`uses:`) are left out: checkout (this is the checkout), setup-python (the project's
.venv is first on PATH), setup-buildx-action (the engine's own builder: its `docker` driver makes `tools/matrix`
fall back to an inline cache pushed as the cache ref, see cache.py), upload-artifact. The login step is a no-op
for the loopback registry. PyTorch's index is not reachable here: a file:// index holding the CPU wheel of the
host's wheelhouse stands in for it.

Two runs, as a team sees them: a push to the default branch (build, every check, cache written, pushed), then a
pull request that changes nothing, on an engine that lost the image (a fresh runner): it finds the image in the
registry, rebuilds nothing, pulls it and runs the quick checks.
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
from pathlib import Path
from typing import Any

import docker
import pytest
import yaml

from matrixtool.plan import resolve_wheelhouse
from tests.conftest import REPO_ROOT
from tests.integration.conftest import MATRIX
from tests.integration.test_registry import local_registry  # noqa: F401  (the module's registry fixture)

pytestmark = [pytest.mark.engine, pytest.mark.slow]

WORKFLOW = REPO_ROOT / ".github" / "workflows" / "images.yml"
# Steps that cannot run off GitHub, by name, and why.
NOT_HERE = {"Log in to the registry": "no login: the stand-in registry is on loopback"}
_EXPR = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")
PUBLISH_EXPR = (
    "github.event_name == 'push' && github.ref == format('refs/heads/{0}', github.event.repository.default_branch)"
)


def _expressions(entry: Mapping[str, Any], event: str) -> dict[str, str]:
    """Every expression the image job may use, as GitHub would evaluate it for ``entry`` and ``event``."""
    values = {f"matrix.{key}": value for key, value in entry.items()}
    values |= {
        "github.repository_owner": "Matrix-Test",
        "secrets.GITHUB_TOKEN": "",
        PUBLISH_EXPR: event == "push",
        "always()": True,
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
    values = _expressions({**entry, "wheelhouse_index": index_url}, event)
    github_env = work / f"github-env-{event}"
    github_env.write_text("")
    # A runner has no wheelhouse of its own: the Wheelhouse step must provide it.
    env = {
        **{k: v for k, v in os.environ.items() if k != "PIP_FIND_LINKS"},
        "PATH": f"{REPO_ROOT / '.venv' / 'bin'}:{os.environ['PATH']}",
        "GITHUB_ENV": str(github_env),
        "GITHUB_OUTPUT": str(work / "github-output"),
        "GITHUB_ACTOR": "matrix-test",
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


@pytest.fixture
def pytorch_index(tmp_path: Path) -> str:
    """A PEP 503 index (file://) holding the host wheelhouse's torch 2.13.0+cpu: PyTorch's CPU index here."""
    wheels = resolve_wheelhouse(None, os.environ)
    found = sorted(wheels.glob("torch-2.13.0+cpu-*.whl")) if wheels else []
    if not found:
        pytest.fail("no torch 2.13.0+cpu wheel in PIP_FIND_LINKS; 'make test' sets it (tools/wheelhouse.sh)")
    project = tmp_path / "index" / "torch"
    project.mkdir(parents=True)
    links = "".join(f'<a href="{w.resolve().as_uri()}">{w.name}</a>\n' for w in found)
    (project / "index.html").write_text(f"<!DOCTYPE html><html><body>\n{links}</body></html>\n")
    return (tmp_path / "index").as_uri()


@pytest.fixture
def made_here(client: docker.DockerClient) -> Iterator[None]:
    """Every image the test adds is removed afterwards, a `vllm-matrix/cpu` tag it moved (the version tag) is
    put back, and the workflow's folders (wheelhouse/, build/pushed/) are removed."""
    before = {tag: i.id for i in client.images.list(name="vllm-matrix/cpu") if i.id for tag in i.tags}
    ids = set(before.values())
    shutil.rmtree(REPO_ROOT / "build" / "pushed", ignore_errors=True)
    yield
    shutil.rmtree(REPO_ROOT / "wheelhouse", ignore_errors=True)
    shutil.rmtree(REPO_ROOT / "build" / "pushed", ignore_errors=True)
    for image in client.images.list():
        if image.id not in ids and any("vllm-matrix/cpu" in t for t in image.tags):
            for tag in image.tags:
                with contextlib.suppress(docker.errors.ImageNotFound):
                    client.images.remove(tag, noprune=False)
    for tag, image_id in before.items():
        client.images.get(image_id).tag(tag)


def test_the_image_jobs_steps_run_here(
    client: docker.DockerClient,
    cpu_image: str,
    local_registry: str,  # noqa: F811
    pytorch_index: str,
    made_here: None,
    tmp_path: Path,
) -> None:
    (entry,) = json.loads(subprocess.check_output([MATRIX, "ci-matrix", "cpu"], text=True))["include"]
    prefix = f"{local_registry}/matrix-test"

    # A push to the default branch: build (the BuildKit cache is local), every check, the cache ref and the
    # image pushed, and the push record written for the manifest job.
    steps = ["Install tools/matrix", "Engine", "Registry", "Wheelhouse", "Build and smoke-test", "Push"]
    ran, main_s = run_image_job(
        entry=entry, event="push", registry=local_registry, index_url=pytorch_index, work=tmp_path
    )
    assert list(ran) == steps
    assert "+ docker buildx build" in ran["Build and smoke-test"]
    assert "--cache-to type=inline" in ran["Build and smoke-test"]  # the engine's own builder: inline cache
    junit = (REPO_ROOT / "build" / "reports" / "junit-cpu-amd64.xml").read_text()
    assert 'name="offline-generate"' in junit
    (pushed,) = json.loads((REPO_ROOT / "build" / "pushed" / "cpu-amd64.json").read_text())["pushed"]
    hash_ref, version_ref = pushed["refs"]
    assert hash_ref.startswith(f"{prefix}/vllm-matrix/cpu:") and version_ref == f"{prefix}/vllm-matrix/cpu:0.32.0"
    cache_ref = f"{prefix}/vllm-matrix/cpu:buildcache-amd64"
    inspect = subprocess.run(
        ["docker", "buildx", "imagetools", "inspect", cache_ref], capture_output=True, text=True, check=False
    )
    assert inspect.returncode == 0, inspect.stderr  # the cache was written to the registry

    # A fresh runner: the engine has no image of this content hash any more.
    built = client.images.get(hash_ref.replace(f"{prefix}/", ""))
    for tag in built.tags:
        client.images.remove(tag, noprune=False)

    # A pull request that changes nothing: no build, the published image is pulled and checked (quick run).
    ran, pr_s = run_image_job(
        entry=entry, event="pull_request", registry=local_registry, index_url=pytorch_index, work=tmp_path
    )
    assert list(ran) == steps
    build_step = ran["Build and smoke-test"]
    assert "exists in the registry" in build_step and "+ docker buildx build" not in build_step
    assert f"+ docker pull --platform linux/amd64 {hash_ref}" in build_step
    junit = (REPO_ROOT / "build" / "reports" / "junit-cpu-amd64.xml").read_text()
    assert 'name="offline-generate"' not in junit and 'name="model-runner"' in junit
    assert "docker push" not in ran["Push"]  # a pull request publishes nothing
    print(f"\nimage job wall time: push to the default branch {main_s:.0f} s, no-change pull request {pr_s:.0f} s")
