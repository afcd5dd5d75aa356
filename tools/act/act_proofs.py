"""What each event's run must prove, checked against the run act_log read, the registry and the artifacts: the
jobs' outputs, images.yml on ``pull_request`` and ``push`` (the matrix, the image job, push and manifest), kube.yml
up to the cluster, update.yml's proposal and pull request. Each check raises ``Failed`` naming workflow, job and
step, and adds what it saw to ``result``."""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import sys
import urllib.error
import urllib.request
import zipfile
from pathlib import Path
from typing import Any

import yaml
from act_log import Failed, Job, Run

# kube.yml's first step that needs a cluster (kind and kubectl against an API server): where the local run stops.
KUBE_STOP = "Cluster"


def registry_digest(registry: str, ref: str) -> str | None:
    """The manifest digest the registry answers for ``ref`` (HOST:PORT/REPO:TAG), or None (404)."""
    name, _, tag = ref.removeprefix(f"{registry}/").rpartition(":")
    accept = ", ".join(
        [
            "application/vnd.oci.image.index.v1+json",
            "application/vnd.docker.distribution.manifest.list.v2+json",
            "application/vnd.oci.image.manifest.v1+json",
            "application/vnd.docker.distribution.manifest.v2+json",
        ]
    )
    request = urllib.request.Request(
        f"http://{registry}/v2/{name}/manifests/{tag}", method="HEAD", headers={"Accept": accept}
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return str(answer.headers["Docker-Content-Digest"])
    except urllib.error.HTTPError as e:
        if e.code == 404:
            return None
        raise


def registry_manifest(registry: str, ref: str) -> dict[str, Any]:
    name, _, tag = ref.removeprefix(f"{registry}/").rpartition(":")
    request = urllib.request.Request(
        f"http://{registry}/v2/{name}/manifests/{tag}",
        headers={
            "Accept": "application/vnd.oci.image.index.v1+json, "
            "application/vnd.docker.distribution.manifest.list.v2+json"
        },
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        return dict(json.load(answer))


def artifact_files(work: Path, event: str, name: str) -> dict[str, bytes]:
    """The files of artifact ``name`` act's server holds for the run of ``event`` (run id 1)."""
    found = sorted((work / f"artifacts-{event}").glob(f"*/{name}/{name}.zip"))
    if not found:
        return {}
    with zipfile.ZipFile(found[0]) as archive:
        return {n: archive.read(n) for n in archive.namelist()}


def expected_matrix(repo: Path, *args: str) -> dict[str, Any]:
    """`tools/matrix ci-matrix` of the snapshot's matrix.yaml."""
    cmd = [sys.executable, "-m", "matrixtool", "--matrix", str(repo / "matrix.yaml"), "ci-matrix", *args]
    out = subprocess.run(cmd, cwd=repo, check=True, capture_output=True, text=True).stdout
    return dict(json.loads(out))


def workflow_if(repo: Path, workflow_file: str, job_id: str) -> str:
    doc = yaml.safe_load((repo / ".github" / "workflows" / workflow_file).read_text())
    return str(doc["jobs"][job_id].get("if", ""))


_STEP_OUTPUT = re.compile(r"^\$\{\{\s*steps\.([\w-]+)\.outputs\.([\w-]+)\s*\}\}$")


def check_outputs(run: Run, repo: Path) -> None:
    """Each job output (``outputs: NAME: ${{ steps.ID.outputs.OUT }}``) of a job that passed names an output its
    step ``ID`` set in this run: a misspelt output name reads as empty on GitHub, silently."""
    docs = []
    for wf in sorted((repo / ".github" / "workflows").glob("*.yml")):
        try:
            docs.append(yaml.safe_load(wf.read_text()))
        except yaml.YAMLError as e:
            raise Failed(f"{run.event}: {wf.name} is not valid YAML: {' '.join(str(e).split())}") from e
    by_name = {str(d.get("name")): d for d in docs}
    for job in run.jobs:
        spec = by_name.get(job.workflow, {}).get("jobs", {}).get(job.job_id, {})
        if job.result != "success":
            continue
        for name, expr in (spec.get("outputs") or {}).items():
            m = _STEP_OUTPUT.match(str(expr).strip())
            if m is None or f"{m.group(1)}.{m.group(2)}" in job.outputs:
                continue
            step: dict[str, Any] = next((s for s in spec.get("steps", []) if s.get("id") == m.group(1)), {})
            set_here = sorted(k.split(".", 1)[1] for k in job.outputs if k.startswith(f"{m.group(1)}."))
            raise Failed(
                f"{run.event}: {job.label}: job output {name!r} reads steps.{m.group(1)}.outputs.{m.group(2)}, which "
                f"step {step.get('name', m.group(1))!r} never set (it set: {', '.join(set_here) or 'nothing'})"
            )


def image_job(run: Run, repo: Path) -> tuple[dict[str, Any], Job]:
    """images.yml's lint and matrix jobs passed, the matrix printed is ci-matrix's and the one image job that ran
    (cpu) is its entry act's filter kept, and passed: ci-matrix's matrix and that job."""
    lint, matrix = run.one("images", "lint"), run.one("images", "matrix")
    for job in (lint, matrix):
        if job.result != "success":
            raise Failed(f"{run.event}: {job.label} {job.result or 'did not finish'}")
    # The matrix job's output is what ci-matrix says, and the image jobs are its entries act's filter kept.
    said = expected_matrix(repo)
    printed = json.loads(matrix.outputs.get("matrix.matrix", "null") or "null")
    if printed != said:
        raise Failed(f"{run.event}: images/matrix: step 'Print the matrix' printed {printed}, ci-matrix says {said}")
    images = run.of("images", "image")
    ran = sorted(j.matrix.get("variant", "?") for j in images)
    kept = sorted(e["variant"] for e in said["include"] if e["variant"] == "cpu")
    if ran != kept:
        raise Failed(
            f"{run.event}: images/image ran for {ran}, the matrix (filtered to variant cpu) has {kept}; act said:\n    "
            + "\n    ".join(run.errors[-10:] or ["nothing"])
        )
    (image,) = images
    if image.matrix != next(e for e in said["include"] if e["variant"] == "cpu"):
        raise Failed(f"{run.event}: {image.label}: matrix entry {image.matrix} is not ci-matrix's cpu entry")
    if image.result != "success":
        raise Failed(f"{run.event}: {image.label} {image.result or 'did not finish'}")
    return said, image


def check_images(run: Run, repo: Path, registry: str, work: Path, result: dict[str, Any]) -> None:
    """images.yml on ``run.event``: the matrix, the image job, the summary, push and manifest, the skips."""
    said, image = image_job(run, repo)
    # The summary holds the checks' table (tools/matrix run's step summary).
    if "| variant | profile | check | status | time | diagnosis |" not in image.summary:
        raise Failed(f"{run.event}: {image.label}: step 'Build and smoke-test' wrote no checks table to the summary")
    checks = [ln for ln in image.summary.splitlines() if ln.startswith("| cpu | ")]
    publish = run.event == "push"
    names = [s.name for s in image.steps if s.result != "skipped"]
    for step in ("Vulnerability gate", "Install cosign", "Upload the push record"):
        if (step in names) != publish:
            raise Failed(
                f"{run.event}: {image.label}: step {step!r} {'did not run' if publish else 'ran'} "
                f"(its if: env.PUBLISH == 'true', PUBLISH {str(publish).lower()})"
            )
    facts: dict[str, Any] = {
        "matrix_entries": len(said["include"]),
        "image_jobs": [image.matrix.get("variant", "?")],
        "summary_rows": len(checks),
        "steps": {s.name: s.result for s in image.steps},
    }
    manifest_if = workflow_if(repo, "images.yml", "manifest")
    # act gives a skipped job's `if:` even when a failed need skipped it; the image job passed (image_job), so a
    # skip here is the `if:`'s.
    if not publish:
        if run.skipped.get("images/manifest") != manifest_if:
            raise Failed(
                f"{run.event}: images/manifest was not skipped for its if: {manifest_if} "
                f"(act: {run.skipped.get('images/manifest')!r})"
            )
        if artifact_files(work, run.event, "pushed-cpu-amd64"):
            raise Failed(f"{run.event}: {image.label}: a pull request uploaded a push record")
        facts["skipped"] = run.skipped
        result[run.event] = facts
        return
    result[run.event] = facts | pushed(run, registry, work, image)


def pushed(run: Run, registry: str, work: Path, image: Job) -> dict[str, Any]:
    """images.yml on push: the push record the image job uploaded, the registry's digest of its content-hash tag,
    the manifest job's multi-arch tag: the registry answers it with a list of exactly the pushed cpu (linux/amd64)
    digest and the arm64 stand-in's (linux/arm64), both records read by manifest through download-artifact. What
    was seen."""
    # push: the record the image job uploaded names the content-hash tag the registry answers with its digest.
    files = artifact_files(work, run.event, "pushed-cpu-amd64")
    if "cpu-amd64.json" not in files:
        raise Failed(f"{run.event}: {image.label}: step 'Upload the push record' uploaded {sorted(files)}")
    (record,) = json.loads(files["cpu-amd64.json"])["pushed"]
    hash_ref = record["refs"][0]
    if registry_digest(registry, hash_ref) != record["digest"]:
        raise Failed(
            f"{run.event}: {image.label}: step 'Push': the registry does not answer {hash_ref} with {record['digest']}"
        )
    manifest = run.one("images", "manifest")
    if manifest.result != "success":
        raise Failed(f"{run.event}: {manifest.label} {manifest.result or 'did not finish'}")
    # The arm64 record came from the stand-in (act_standins.arm64_standin) through the same artifact download.
    arm64 = json.loads(artifact_files(work, run.event, "pushed-arm64-arm64")["arm64-arm64.json"])["pushed"][0]
    tags = re.findall(rf"{re.escape(registry)}/[\w./-]+:[\w.-]+", manifest.text("Multi-arch tags"))
    lists = {t for t in tags if t not in (hash_ref, arm64["refs"][0])}
    listed: dict[str, dict[str, str]] = {}
    for tag in sorted(lists):
        with contextlib.suppress(urllib.error.HTTPError):
            doc = registry_manifest(registry, tag)
            listed[tag] = {m["digest"]: "{os}/{architecture}".format(**m["platform"]) for m in doc.get("manifests", [])}
    wanted = {record["digest"]: "linux/amd64", arm64["digest"]: "linux/arm64"}
    if not any(platforms == wanted for platforms in listed.values()):
        raise Failed(
            f"{run.event}: {manifest.label}: step 'Multi-arch tags': no multi-arch tag in the registry lists "
            f"exactly the pushed {wanted} (tags it named: {sorted(lists)}, the registry's lists: {listed})"
        )
    return {
        "pushed": record["refs"],
        "digest": record["digest"],
        "arm64_stand_in": arm64,
        "multi_arch": listed,
        "manifest_steps": {s.name: s.result for s in manifest.steps},
    }


def check_kube(run: Run, result: dict[str, Any]) -> None:
    """kube.yml on push: every step before the cluster passed; the job stops at KUBE_STOP (no kind here)."""
    jobs = run.of("kube", "kind")
    if len(jobs) != 1:
        raise Failed(f"{run.event}: kube/kind ran {len(jobs)} times, not once (--matrix profile:restricted)")
    (job,) = jobs
    names = [s.name for s in job.steps]
    if KUBE_STOP not in names:
        raise Failed(f"{run.event}: {job.label}: stopped before step {KUBE_STOP!r} (steps: {names})")
    before = names[: names.index(KUBE_STOP)]
    for step in job.steps[: len(before)]:
        if step.result != "success":
            raise Failed(f"{run.event}: {job.label}: step {step.name!r} {step.result}")
    stop = job.step(KUBE_STOP)
    result["kube"] = {
        "ran": before,
        "stopped_at": KUBE_STOP,
        "because": "".join(stop.output).strip()[-300:],
        "result": stop.result,
    }


def check_update(run: Run, work: Path, remote: Path, gh_log: Path, result: dict[str, Any]) -> None:
    """update.yml: the cpu proposal, its artifact, the branch pushed and the pull request gh would have opened."""
    for job in run.jobs:
        if job.result != "success":
            raise Failed(f"{run.event}: {job.label} {job.result or 'did not finish'}")
    propose = run.one("update", "propose")
    if propose.outputs.get("propose.changed") != "true":
        raise Failed(f"{run.event}: {propose.label}: step 'Propose' did not set changed=true")
    files = artifact_files(work, run.event, "proposal-cpu-amd64")
    if "proposal.patch" not in files or b"0.33.0" not in files["proposal.patch"]:
        raise Failed(f"{run.event}: {propose.label}: the proposal artifact holds {sorted(files)}, no 0.33.0 patch")
    run.one("update", "pull-request")
    shown = subprocess.run(
        ["git", "--git-dir", str(remote), "show", "--stat", "--format=%s", "update/cpu"],
        capture_output=True,
        text=True,
        check=False,
    )
    if shown.returncode != 0:
        raise Failed(f"{run.event}: update/pull-request: no branch update/cpu was pushed: {shown.stderr.strip()}")
    calls = [json.loads(x) for x in gh_log.read_text().splitlines()] if gh_log.exists() else []
    creates = [c for c in calls if c["argv"][:2] == ["pr", "create"]]
    if len(creates) != 1 or "--head" not in creates[0]["argv"] or "update/cpu" not in creates[0]["argv"]:
        raise Failed(
            f"{run.event}: update/pull-request: gh calls {[c['argv'][:3] for c in calls]}, "
            "not one `gh pr create --head update/cpu`"
        )
    body = str(creates[0].get("body", ""))
    touched = sorted(line.split("|")[0].strip() for line in shown.stdout.splitlines()[1:] if "|" in line)
    if touched != ["images/cpu/Dockerfile", "matrix.yaml"]:
        raise Failed(
            f"{run.event}: update/pull-request: the branch update/cpu changes {touched}, not the cpu bump alone"
        )
    if "- cpu-amd64: " not in body or "0.33.0" not in body:
        raise Failed(f"{run.event}: update/pull-request: the body names no cpu-amd64 suite result or 0.33.0:\n{body}")
    result["update"] = {
        "commit": shown.stdout.splitlines()[0],
        "stat": shown.stdout.splitlines()[1:],
        "gh": [c["argv"] for c in calls],
        "body": body,
    }
