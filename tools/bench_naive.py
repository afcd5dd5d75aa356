"""The naive reference of ``tools/bench.py suites``: what a user writes by hand to prove an image generates (the
naive pair: ``tools/naive_generate.py`` in the image, eager then compiled, each its own ``docker run``) and serves
(the naive server: ``docker run IMAGE serve /model`` with vLLM's defaults, ``/health`` polled, one completion),
timed whole, so the smoke suites' times are ratios against it.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def _run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    print("+ " + " ".join(argv), file=sys.stderr, flush=True)
    return subprocess.run(argv, capture_output=True, text=True, check=False)


NAIVE_SCRIPT = REPO / "tools" / "naive_generate.py"
# The naive pair runs as a user would run the image: vLLM's CPU server needs more than Docker's 64 MB of
# /dev/shm (docs/failure-classes.md, class 15), the size matrix.yaml's default profile declares.
NAIVE_SHM = "1g"


def naive(image: str, mode: str) -> tuple[float, list[list[int]] | None, str]:
    """Wall seconds of ``docker run --rm IMAGE python3 naive_generate.py MODE`` (``eager`` or ``compiled``), the
    tokens it printed (None when it failed) and its output. The script travels as a read-only bind mount."""
    argv = [
        "docker", "run", "--rm", "--shm-size", NAIVE_SHM, "--label", "io.vllm-matrix.bench=naive",
        "-v", f"{NAIVE_SCRIPT}:/bench/naive_generate.py:ro", "--entrypoint", "python3",
        image, "/bench/naive_generate.py", mode,
    ]  # fmt: skip
    started = time.monotonic()
    proc = _run(argv)
    seconds = round(time.monotonic() - started, 1)
    for line in proc.stdout.splitlines():
        if line.startswith("NAIVE "):
            return seconds, json.loads(line[len("NAIVE ") :])["tokens"], proc.stdout + proc.stderr
    return seconds, None, proc.stdout + proc.stderr


# The naive server: vLLM's default port, and how long it may take to answer /health (a compiled start on 2 busy
# cores takes minutes).
NAIVE_PORT = 8000
# The image's cache root (XDG_CACHE_HOME of the matrix's images: vLLM's, inductor's and Triton's caches).
NAIVE_CACHE_ROOT = "/tmp/.cache"
NAIVE_READY_TIMEOUT = 900.0


def _http(url: str, body: dict[str, Any] | None = None, timeout: float = 60) -> tuple[int | None, str]:
    """Status and body of a GET (or, with ``body``, a JSON POST) to ``url``; status None when nothing answers."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"} if data else {})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode("utf-8", "replace")
    except (OSError, TimeoutError):
        return None, ""


def naive_serve(
    image: str, out: Path, cache: str, *, make_model: bool = True
) -> tuple[float, float | None, str | None, str]:
    """The naive server check a user would write, timed whole: ``docker run`` of ``naive_generate.py model`` into a
    host folder (``make_model``; else the folder an earlier call made), ``docker run -d IMAGE serve /model`` (the
    image's entrypoint, vLLM's defaults, the folder mounted read-only, the Docker volume ``cache`` at the image's
    cache root ``NAIVE_CACHE_ROOT`` as a pod's volume would be, the port published on loopback), ``/health`` polled
    once a second until 200, one greedy completion of 8 tokens, the container removed. Returns the wall seconds,
    the seconds from ``docker run -d`` to the first 200 (None when it never came), the completion's text (None
    when it failed) and, on failure, the log."""
    folder = out / "naive-model"
    if make_model:
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        folder.chmod(0o777)  # the image's user writes the model
    name = f"bench-naive-serve-{uuid.uuid4().hex[:8]}"
    started = time.monotonic()
    removed = False
    try:
        if make_model:
            made = _run(
                [
                    "docker", "run", "--rm", "--label", "io.vllm-matrix.bench=naive",
                    "-v", f"{NAIVE_SCRIPT}:/bench/naive_generate.py:ro", "-v", f"{folder}:/model",
                    "--entrypoint", "python3", image, "/bench/naive_generate.py", "model", "/model",
                ]
            )  # fmt: skip
            if made.returncode != 0:
                return round(time.monotonic() - started, 1), None, None, made.stdout + made.stderr
        run_started = time.monotonic()
        proc = _run(
            [
                "docker", "run", "-d", "--name", name, "--label", "io.vllm-matrix.bench=naive",
                "--shm-size", NAIVE_SHM, "-p", f"127.0.0.1::{NAIVE_PORT}", "-v", f"{folder}:/model:ro",
                "-v", f"{cache}:{NAIVE_CACHE_ROOT}", image, "serve", "/model",
            ]
        )  # fmt: skip
        if proc.returncode != 0:
            return round(time.monotonic() - started, 1), None, None, proc.stderr
        address = _run(["docker", "port", name, f"{NAIVE_PORT}/tcp"]).stdout.split()[0]
        ready = None
        while time.monotonic() - run_started < NAIVE_READY_TIMEOUT:
            if _http(f"http://{address}/health", timeout=5)[0] == 200:
                ready = round(time.monotonic() - run_started, 1)
                break
            # Not what a naive loop does, but a dead server should not hold the bench for the whole timeout.
            state = subprocess.run(
                ["docker", "inspect", "-f", "{{.State.Running}}", name], capture_output=True, text=True, check=False
            )
            if state.stdout.strip() != "true":
                break
            time.sleep(1)
        text = None
        if ready is not None:
            status, body = _http(
                f"http://{address}/v1/completions",
                {"model": "/model", "prompt": "The quick brown fox", "max_tokens": 8, "temperature": 0},
            )
            if status == 200:
                text = str(json.loads(body)["choices"][0]["text"])
        logs = ""
        if text is None:
            tail = _run(["docker", "logs", "--tail", "200", name])
            logs = tail.stdout + tail.stderr
        _run(["docker", "rm", "-f", name])  # part of the timed check, as `--rm` is of the naive pair
        removed = True
        return round(time.monotonic() - started, 1), ready, text, logs
    finally:
        if not removed:
            _run(["docker", "rm", "-f", name])
