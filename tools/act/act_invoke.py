"""One act invocation per event: the scratch snapshot of the working tree it runs in, the event's payload, act's
command line (each pinned third-party action its stand-in of tools/act/actions/) and the run itself, its log read
by act_log."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from act_log import Run, parse_log

ROOT = Path(__file__).resolve().parents[2]
ACTIONS = ROOT / "tools" / "act" / "actions"
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
_USES = re.compile(r"^\s*(?:-\s+)?uses:\s*([\w.-]+/[\w.-]+)@([0-9a-f]{40})\b", re.M)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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
        # The host workspaces act makes (a copy of the tree per job, its venvs, the wheelhouse): this run's own
        # folder, removed after it, so that two runs side by side never touch each other's.
        "--action-cache-path",
        str(private / f"act-cache-{event}"),
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
    event: str,
    repo: Path,
    out: Path,
    act: str,
    env: dict[str, str],
    private: Path,
    job: str | None = None,
    seed: Callable[[Path], None] | None = None,
) -> Run:
    """act on ``event`` in ``repo``; its log in ``out/<event>.jsonl``, its artifacts in ``out/artifacts-<event>``
    (emptied first, then handed to ``seed``: the artifacts of jobs that run elsewhere)."""
    sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, check=True, capture_output=True, text=True).stdout
    (out / f"{event}.event.json").write_text(json.dumps(event_payload(event, sha.strip())))
    shutil.rmtree(out / f"artifacts-{event}", ignore_errors=True)
    if seed is not None:
        seed(out / f"artifacts-{event}")
    cmd = act_command(event, repo, out, act=act, env=env, private=private) + (["-j", job] if job else [])
    log_path = out / f"{event}.jsonl"
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
            shutil.rmtree(private / f"act-cache-{event}", ignore_errors=True)
    return parse_log(event, lines, time.monotonic() - started, code)
