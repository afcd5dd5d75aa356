"""Probing the server from outside its process, with ``programs/serve_probe.py``: from this host through the
published port (``HostProber``), or from a client container in the server's network namespace
(``ClientProber``, for a profile without a network); the answers are its ``MATRIX-PROBE`` marker lines. Also the
command of ``CLIENT_ENV`` (a client of one's own) against a ready server (``run_client``)."""

from __future__ import annotations

import json
import os
import shlex
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

from matrixtool.core import markers, process
from matrixtool.core.container import TrackedContainer
from matrixtool.incontainer.vllm_smoke.programs import serve_probe
from matrixtool.smoke.serve import line as serve_line

PROBE_SOURCE = Path(serve_probe.__file__).read_text(encoding="utf-8")

FIRST_FILE = "/run/matrix-probe/first"
# Waits in the client container until argv[1] exists (exit 0) or argv[2] seconds pass (exit 1), polling every 10 ms:
# one exec begun before the first chunk, so the stop follows it by milliseconds, not by an exec's round trip per
# poll (a warm tiny model streams its 200 tokens in about a second: seen 2026-12-07, the stream over before the stop).
WAIT_FOR_FILE = (
    "import os, sys, time\n"
    "end = time.monotonic() + float(sys.argv[2])\n"
    "while not os.path.exists(sys.argv[1]):\n"
    "    if time.monotonic() > end:\n"
    "        sys.exit(1)\n"
    "    time.sleep(0.01)\n"
)
# A command run against each server with a published port once ready, before the check's own probes (its URL
# appended); non-zero fails the check. The integration tests run the official openai client so.
CLIENT_ENV = "MATRIX_SERVE_CLIENT"
CLIENT_TIMEOUT_S = 300


class Prober(Protocol):
    """Runs ``serve_probe`` against the server: ``call(command, spec)`` returns its JSON; ``stream`` starts the
    stop contract's stream and returns (a wait for its first chunk, a wait for its outcome)."""

    def call(self, command: str, spec: Mapping[str, Any]) -> dict[str, Any]: ...

    def stream(self, body: Mapping[str, Any]) -> tuple[Callable[[float], bool], Callable[[float], dict[str, Any]]]: ...


def _background(work: Callable[[], dict[str, Any]]) -> Callable[[float], dict[str, Any]]:
    """``work`` on a daemon thread; the returned wait gives its result ({"error": ...} if none within ``s``)."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box.update(work())
        except Exception as exc:  # reported as the stream's outcome
            box["error"] = f"{type(exc).__name__}: {exc}"

    thread = threading.Thread(target=run, daemon=True)
    thread.start()

    def wait(seconds: float) -> dict[str, Any]:
        thread.join(seconds)
        return dict(box) if not thread.is_alive() else {"error": f"the stream did not end within {seconds:.0f} s"}

    return wait


class HostProber:
    """Probes from this host through the published port (``base`` e.g. ``http://127.0.0.1:32768``)."""

    def __init__(self, base: str) -> None:
        self.base = base

    def call(self, command: str, spec: Mapping[str, Any]) -> dict[str, Any]:
        """``serve_probe.health`` or ``serve_probe.probe`` here."""
        if command == "health":
            return serve_probe.health(self.base)
        return serve_probe.probe(self.base, dict(spec))

    def stream(self, body: Mapping[str, Any]) -> tuple[Callable[[float], bool], Callable[[float], dict[str, Any]]]:
        """``serve_probe.stream`` on a thread of this process."""
        first = threading.Event()
        wait = _background(lambda: serve_probe.stream(self.base, dict(body), on_first=first.set, timeout=300.0))
        return first.wait, wait


class ClientProber:
    """Probes from a client container sharing the server's network namespace (``python3 -c serve_probe``)."""

    BASE = f"http://127.0.0.1:{serve_line.PORT}"

    def __init__(self, box: TrackedContainer) -> None:
        self.box = box

    def _run(self, command: str, spec: Mapping[str, Any], deadline_s: float) -> dict[str, Any]:
        argv = ["python3", "-c", PROBE_SOURCE, command, self.BASE, json.dumps(spec)]
        code, output = self.box.exec(argv, {}, deadline_s)
        found = markers.last(output, serve_probe.PROBE_MARK)
        if found is None:
            return {"status": None, "error": f"the probe client printed no result (exit {code}): {output[-300:]}"}
        try:  # printed by the image's own python3: any text
            return found.json_object()
        except ValueError:
            return {"status": None, "error": f"the probe client printed no JSON object: {found.line[:300]}"}

    def call(self, command: str, spec: Mapping[str, Any]) -> dict[str, Any]:
        """One ``serve_probe`` command in the client container."""
        return self._run(command, spec, 30.0 if command == "health" else 600.0)

    def stream(self, body: Mapping[str, Any]) -> tuple[Callable[[float], bool], Callable[[float], dict[str, Any]]]:
        """The stream in the client container; its first chunk is seen as a marker file the probe writes, waited for
        by one exec in the same container (``WAIT_FOR_FILE``)."""
        wait = _background(lambda: self._run("stream", {**body, "_first_file": FIRST_FILE}, 400.0))

        def first(seconds: float) -> bool:
            code, _ = self.box.exec(["python3", "-c", WAIT_FOR_FILE, FIRST_FILE, str(seconds)], {}, seconds + 30.0)
            return code == 0

        return first, wait


def run_client(base: str) -> dict[str, Any]:
    """Run the command of ``CLIENT_ENV`` (shell words) with ``base`` (the server's URL) as its last argument:
    {"command", "exit_code", "output" (its last 2000 characters)}; {} when the variable is unset. A client of
    one's own (the integration tests run the official ``openai`` client) against the server the check started."""
    command = os.environ.get(CLIENT_ENV, "").strip()
    if not command:
        return {}
    done = process.run([*shlex.split(command), base], timeout=CLIENT_TIMEOUT_S, quiet=True)
    return {"command": command, "exit_code": done.returncode, "output": (done.stdout + done.stderr)[-2000:]}
