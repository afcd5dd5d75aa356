"""The check package as one standalone file: ``vllm-smoke-VARIANT.pyz``, a zipapp of ``incontainer/vllm_smoke``
with the variant's facts inside (``vllm_smoke.standalone.BUNDLE_FACTS``), run with ``python3 FILE`` in any
environment (a GPU host, a pod, a container of the image); ``run_bundle`` is how host mode runs it.

The facts are computed here from matrix.yaml, once: the check parameters (``smoke.plan.check_params``: pins,
Triton promise), the checks in report order with their timeouts and the groups in start order (``plan_host``),
and the serve step (``serve_facts``: the options of the serve line, the tiny model's, the timeouts).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import tempfile
import threading
import zipfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from matrixtool.core import process
from matrixtool.core.errors import ConfigError
from matrixtool.incontainer.vllm_smoke import standalone
from matrixtool.incontainer.vllm_smoke.bounded import BoundedOutput
from matrixtool.incontainer.vllm_smoke.declarations import Accelerator
from matrixtool.model.checks import DEFAULT_SUITE
from matrixtool.model.model import CheckSpec, Variant
from matrixtool.smoke.plan import HOST_SLACK, KILL_GRACE, check_params, plan_host
from matrixtool.smoke.result import CheckResult, Status
from matrixtool.smoke.runners import CHECKS_DIR, PACKAGE_DIR
from matrixtool.smoke.serve import check as serve_check
from matrixtool.smoke.serve import line as serve_line

SHEBANG = b"#!/usr/bin/env python3\n"
MAIN = "import sys\nfrom vllm_smoke.runner import entry\n\nsys.exit(entry())\n"
# The entries' timestamp: the same package and facts give the same bytes.
STAMP = (2020, 1, 1, 0, 0, 0)
MODEL_DEADLINE_S = 600  # making the tiny model before the server (the bundle's own limit)
END_GRACE_S = 30  # seconds a bundle has to end its children after SIGTERM


def file_name(variant: str) -> str:
    """The bundle's file name: ``vllm-smoke-VARIANT.pyz``."""
    return f"vllm-smoke-{variant}.pyz"


def serve_facts(variant: Variant, suite: str) -> dict[str, Any]:
    """The serve step of ``variant``: the serve line's options (``serve_line.SERVE_OPTIONS``, the tiny model's
    ``serve_line.MODEL_OPTIONS``, ``--enforce-eager`` in the quick suite, as the container check; on a GPU variant
    ``--gpu-memory-utilization`` ``serve_line.GPU_MEMORY_UTILIZATION``, also as ``gpu_memory_utilization``, None on
    a CPU variant), the timeouts (seconds) and what the probes send."""
    eager = ["--enforce-eager"] if str(suite) == "quick" else []
    fraction = serve_line.GPU_MEMORY_UTILIZATION if variant.accelerator is not Accelerator.CPU else None
    share = [standalone.GPU_MEMORY_OPTION, str(fraction)] if fraction is not None else []
    return {
        "options": [*serve_line.SERVE_OPTIONS, *serve_line.MODEL_OPTIONS, *share, *eager],
        "gpu_memory_utilization": fraction,
        "ready_timeout_s": serve_check.READY_TIMEOUT_S,
        "stop_grace_s": variant.stop_grace_s or serve_check.STOP_GRACE_S,
        "ready_budget_s": variant.ready_budget_s,
        "vllm_version": str(variant.vllm.version).split("+")[0],
        "prompt": serve_check.PROMPT,
        "max_tokens": serve_check.MAX_TOKENS,
        "stream_tokens": serve_check.STREAM_TOKENS,
        "first_chunk_s": serve_check.FIRST_CHUNK_S,
    }


def facts(
    variant: Variant, checks: Sequence[CheckSpec], suite: str = DEFAULT_SUITE, *, host: bool = False
) -> dict[str, Any]:
    """The facts a bundle of ``variant`` carries for ``checks`` (in report order) of ``suite``; ``host``: host
    mode's parameter (a check whose vLLM is missing skips instead of failing)."""
    (run,) = plan_host(variant, checks, suite).runs
    params = {**check_params(variant), "host": host, "suite": str(suite), "rerun": False}
    return {
        "format": standalone.FACTS_FORMAT,
        "variant": variant.name,
        "accelerator": variant.accelerator.value,
        "pins": {
            "vllm": str(variant.vllm.version),
            "torch": str(variant.torch.version),
            "triton": variant.triton.value,
            "triton_distribution": variant.triton_distribution,
        },
        "params": params,
        "checks": [{"name": c.name, "timeout": c.timeout} for c in run.checks],
        "groups": [list(g.names) for g in run.groups],
        "serve": serve_facts(variant, suite),
    }


def bundle_bytes(bundle_facts: Mapping[str, Any]) -> bytes:
    """The zipapp: a ``python3`` shebang, ``__main__.py`` (exits with the runner's status), every module of
    ``vllm_smoke`` (no caches) and ``bundle_facts``, deflated, with fixed timestamps."""
    buffer = io.BytesIO()
    buffer.write(SHEBANG)
    with zipfile.ZipFile(buffer, "a", compression=zipfile.ZIP_DEFLATED) as archive:

        def add(name: str, data: bytes) -> None:
            info = zipfile.ZipInfo(name, date_time=STAMP)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            archive.writestr(info, data)

        add("__main__.py", MAIN.encode())
        for path in sorted(PACKAGE_DIR.rglob("*.py")):
            if "__pycache__" not in path.parts:
                add(path.relative_to(CHECKS_DIR).as_posix(), path.read_bytes())
        text = json.dumps(bundle_facts, indent=1, sort_keys=True) + "\n"
        add(f"{PACKAGE_DIR.name}/{standalone.BUNDLE_FACTS}", text.encode())
    return buffer.getvalue()


def deadline_s(bundle_facts: Mapping[str, Any]) -> int:
    """The host's backstop for a whole bundle run (s): every check's timeout (the serve step's included: its warm
    start must be ready within it), the model, each group's kill grace, and slack; where the serve step starts a
    warm server (compiled), that server's stop after it was ready (``warm_stop_s``)."""
    checks = sum(int(c["timeout"]) for c in bundle_facts["checks"])
    return checks + MODEL_DEADLINE_S + KILL_GRACE * len(bundle_facts["groups"]) + HOST_SLACK + warm_stop_s(bundle_facts)


def warm_stop_s(bundle_facts: Mapping[str, Any]) -> int:
    """Seconds the warm start's stop may take past the serve check's timeout (s): its stop grace, then SIGKILL and
    its group's teardown; 0 where no warm server starts (no serve, or the quick suite's ``--enforce-eager``)."""
    serves = any(c["name"] == serve_check.CHECK for c in bundle_facts["checks"])
    if not serves or "--enforce-eager" in bundle_facts["serve"]["options"]:
        return 0
    return int(bundle_facts["serve"]["stop_grace_s"]) + KILL_GRACE


def result_of(data: Mapping[str, Any]) -> CheckResult:
    """A ``CheckResult`` from one check of the bundle's JSON report (``reports.to_json``).

    Raises KeyError/ValueError for a check object of another shape."""
    return CheckResult(
        variant=str(data["variant"]),
        image=str(data["image"]),
        check=str(data["check"]),
        status=Status(data["status"]),
        diagnosis=str(data["diagnosis"]),
        hint=str(data.get("hint") or ""),
        seconds=float(data["seconds"]),
        facts=dict(data.get("facts") or {}),
        log=Path(data["log"]) if data.get("log") else None,
        profile=str(data.get("profile") or "default"),
        suite=str(data.get("suite") or DEFAULT_SUITE),
    )


def run_bundle(
    python: str,
    bundle_facts: Mapping[str, Any],
    *,
    env: Mapping[str, str],
    log_dir: Path,
    on_result: Callable[[CheckResult], None] = lambda r: None,
) -> list[CheckResult]:
    """Host mode: write the bundle of ``bundle_facts`` to a temporary folder, run ``PYTHON BUNDLE --json J
    --logs LOG_DIR`` with ``env``, hand each result to ``on_result`` as it lands, and return the report's checks.

    A bundle that prints no readable report (its Python cannot run it, it was killed past ``deadline_s``) is
    one failed result per planned check, naming the exit status and the output's end."""
    log_dir.mkdir(parents=True, exist_ok=True)
    image = f"host:{python}"
    with tempfile.TemporaryDirectory(prefix="matrix-bundle-") as folder:
        path = Path(folder) / file_name(str(bundle_facts["variant"]))
        path.write_bytes(bundle_bytes(bundle_facts))
        report = Path(folder) / "report.json"
        argv = [python, str(path), "--json", str(report), "--logs", str(log_dir), "--image", image, "--stream-results"]
        err = BoundedOutput()
        tail = BoundedOutput()
        # The checks' work (the tiny model) in this call's folder, removed with it, unless env names one.
        work = {} if env.get("MATRIX_SMOKE_DIR") else {"MATRIX_SMOKE_DIR": str(Path(folder) / "work")}
        with process.session(argv, env={**env, **work}, error=lambda exc: _cannot_start(python, exc)) as proc:
            _watch(proc, bundle_facts, err, tail, on_result)
        try:
            data = json.loads(report.read_text(encoding="utf-8"))
            return [result_of(c) for c in data["checks"]]
        except (OSError, ValueError, KeyError, TypeError):
            output = (tail.text() + err.text()).strip()
            why = f"the bundle printed no report (exit {proc.returncode}): {' | '.join(output.splitlines()[-3:])}"
            return [
                CheckResult(
                    variant=str(bundle_facts["variant"]),
                    image=image,
                    check=str(c["name"]),
                    status=Status.FAILED,
                    diagnosis=why,
                    hint=f"run it by hand to see why: {python} {file_name(str(bundle_facts['variant']))}",
                    seconds=0.0,
                    suite=str(bundle_facts["params"].get("suite") or DEFAULT_SUITE),
                )
                for c in bundle_facts["checks"]
            ]


def _cannot_start(python: str, exc: OSError) -> ConfigError:
    """The interpreter of host mode cannot start the bundle (exit 3, naming ``--python``)."""
    return ConfigError("flags", [f"--python {python!r} cannot run the bundle: {exc.strerror or exc}; name a Python"])


def _watch(
    proc: subprocess.Popen[bytes],
    bundle_facts: Mapping[str, Any],
    err: BoundedOutput,
    tail: BoundedOutput,
    on_result: Callable[[CheckResult], None],
) -> None:
    """Read a running bundle to its end: stderr into ``err``, stdout into ``tail``, each streamed result to
    ``on_result``; past ``deadline_s`` its group gets SIGTERM. The bundle is ended on the way out, however."""

    def pump_err() -> None:
        assert proc.stderr is not None
        for chunk in iter(lambda: os.read(proc.stderr.fileno(), 1 << 16), b""):  # type: ignore[union-attr]
            err.feed(chunk)

    reader = threading.Thread(target=pump_err, daemon=True)
    reader.start()
    # The backstop: past it the bundle's whole group goes (its checks and server with it).
    timer = threading.Timer(deadline_s(bundle_facts), lambda: _signal(proc.pid, signal.SIGTERM))
    timer.daemon = True
    timer.start()
    try:
        assert proc.stdout is not None
        for raw in proc.stdout:
            tail.feed(raw)
            line = raw.decode("utf-8", "replace")
            if line.startswith(standalone.CHECK_MARK):
                with contextlib.suppress(ValueError, KeyError, TypeError):
                    on_result(result_of(json.loads(line[len(standalone.CHECK_MARK) :])))
        proc.wait()
    finally:
        timer.cancel()
        _end(proc)  # on an interrupt too: nothing of the bundle outlives this call
        reader.join(5)
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()


def _signal(pgid: int, sig: int) -> None:
    """``sig`` to process group ``pgid`` (the bundle's: it leads a session of its own); gone already is fine."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _end(proc: subprocess.Popen[bytes]) -> None:
    """End a bundle still running: SIGTERM (it ends the process groups of its checks and server, which lead
    groups of their own), then SIGKILL to its group past ``END_GRACE_S``."""
    if proc.poll() is None:
        _signal(proc.pid, signal.SIGTERM)
        try:
            proc.wait(END_GRACE_S)
        except subprocess.TimeoutExpired:
            _signal(proc.pid, signal.SIGKILL)
            proc.wait()
