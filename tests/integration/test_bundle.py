"""The bundle (``tools/matrix bundle cpu``) run with a plain ``docker run ... python3 /x/bundle.pyz`` in the CPU image
gives the verdicts ``tools/matrix`` gives in that image (the session's ``cpu_run``, profile ``default``), serve
included: a ``vllm serve`` child process, probed, stopped with SIGTERM during a stream, its group left empty, and a
warm start on the compile cache the first start wrote."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from matrixtool.core.container import OWNER_LABEL
from tests.integration.conftest import OWNER, CpuRun, matrix_cli

pytestmark = [pytest.mark.engine, pytest.mark.slow]
SMOKE_FAILURE = 7


def test_the_bundle_in_the_cpu_image_gives_the_verdicts_of_the_tool(
    cpu_image: str, cpu_run: CpuRun, out_dir: Path, tmp_path: Path
) -> None:
    bundle = tmp_path / "vllm-smoke-cpu.pyz"
    made = matrix_cli("bundle", "cpu", "--out", str(bundle), out=out_dir)
    assert made.returncode == 0 and made.stdout.strip() == str(bundle), made.stderr
    results = tmp_path / "results"
    results.mkdir()
    results.chmod(0o777)  # the image's user (1000:0) writes the reports
    name = f"bundle-{OWNER}"
    # The default profile's conditions (matrix.yaml: shm_size 1g); the entrypoint overridden, the bundle read-only.
    argv = ["docker", "run", "--rm", "--name", name, "--label", f"{OWNER_LABEL}={OWNER}", "--shm-size", "1g",
            "--entrypoint", "python3", "-v", f"{bundle}:/x/bundle.pyz:ro", "-v", f"{results}:/res", cpu_image,
            "/x/bundle.pyz", "--json", "/res/report.json", "--junit", "/res/junit.xml"]  # fmt: skip
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=3600, check=False)
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True, check=False)
    assert (results / "report.json").is_file(), proc.stdout[-3000:] + proc.stderr[-3000:]
    doc: dict[str, Any] = json.loads((results / "report.json").read_text())
    tool = {c["check"]: c["status"] for c in cpu_run.doc["checks"] if c["profile"] == "default"}
    mine = {c["check"]: c["status"] for c in doc["checks"]}
    # cpu-floor needs the host's QEMU user-mode emulator, which the tool mounts and a bundle in a bare container
    # lacks: it says so (skipped), where the tool's run proved the floor.
    assert mine.pop("cpu-floor") == "skipped" and tool.pop("cpu-floor") == "passed", (mine, tool)
    assert list(mine) == list(tool) and mine == tool, (mine, tool)
    assert proc.returncode == (0 if doc["ok"] else SMOKE_FAILURE), proc.stderr[-3000:]
    counts = f"{sum(s == 'passed' for s in mine.values())} passed"
    assert counts in proc.stdout and "suite: full" in proc.stdout, proc.stdout[-3000:]
    assert (results / "junit.xml").read_text().count("<testcase") == len(mine) + 1  # cpu-floor too
    checks = {c["check"]: c for c in doc["checks"]}
    serve = checks["serve"]
    if serve["status"] == "passed":
        facts = serve["facts"]
        eager = checks["offline-generate"]["facts"]["eager"]["tokens"][0]
        assert facts["tokens"] == eager, "the server's greedy tokens are the run's own offline eager tokens"
        assert facts["argv"][1:3] == ["serve", facts["models"][0]], "the model the suite made"
        assert facts["stop"]["exit_code"] in (0, -15) and facts["stop"]["left_in_group"] == []
        assert facts["stop"]["in_flight"] is True
        # The warm start (full suite): a second `vllm serve` on the fresh cache folder the first wrote, under the
        # image's cache root, its reuse read from vLLM's lines or the cache's files (vLLM 0.32 on CPU: no kernel
        # added), as the container check reports it.
        warm = facts["warm"]
        assert facts["cold_ready_s"] == facts["ready_s"] and float(warm["ready_s"]) > 0, warm
        assert warm["reused"] in ("vLLM's compiled model", "vLLM's compiled graphs", "inductor's compiled kernels")
        assert warm["reuse_evidence"] and "failure" not in warm, warm
        assert warm["cache_root"].startswith("/tmp/.cache/vllm-smoke-cache-"), "a fresh folder under XDG_CACHE_HOME"
        if warm["reused"] == "inductor's compiled kernels":
            assert warm["kernels"]["cold"] > 0 and warm["kernels"]["added_warm"] == 0, warm
        assert warm["cache_filesystem"], "the file system the cache was on"
        assert "warm start" in serve["diagnosis"], serve["diagnosis"]
