"""The serve check on the real CPU image, from the session's `run cpu` (``cpu_run``): one server per profile,
probed, killed with SIGKILL, then restarted in the same pod on the compile cache it wrote (the warm start) and
stopped during a stream; the official openai
client on the host shared the `default` server (``MATRIX_SERVE_CLIENT``). No server of its own."""

from __future__ import annotations

import json

import docker
import pytest

from tests.integration.conftest import OWNER, CpuRun

pytestmark = [pytest.mark.engine, pytest.mark.slow]


def test_serve_under_both_profiles(cpu_run: CpuRun, client: docker.DockerClient) -> None:
    proc, doc = cpu_run.proc, cpu_run.doc
    print(proc.stdout)  # the table, for the record (pytest -s)
    served = {c["profile"]: c for c in doc["checks"] if c["check"] == "serve"}
    assert set(served) == {"default", "restricted"}, proc.stderr[-3000:]
    for profile, result in served.items():
        assert result["status"] == "passed", (profile, result["diagnosis"], proc.stderr[-3000:])
        facts = result["facts"]
        assert facts["ready_s"] > 0 and "engine core" in facts["phases"]
        assert facts["tokens"] == facts["expected_tokens"] and len(facts["tokens"]) == 8
        assert facts["metrics_requests"] == 3 and facts["version"].startswith("0.32.0")
        stop = facts["stop"]
        assert stop["exit_code"] in (0, 143) and stop["seconds"] <= stop["grace_s"] and stop["in_flight"]
        assert "vllm serve" in stop["pid1"]
        # The project's images are the `vllm` form (ENTRYPOINT ["vllm"], the README's line); the profile's user
        # over the image's USER (tests/integration/test_start_forms.py serves the other forms).
        start = facts["start"]
        assert (start["form"], start["entrypoint"], start["user"]) == ("vllm", ["vllm"], "1000:0"), start
        assert start["run_as"] == ("1000770000:0" if profile == "restricted" else "1000:0"), start
        assert "started in the vllm form" in result["diagnosis"]
        # The warm start: a second server on the cache volume the first wrote, at the image's cache root; reuse
        # is shown by the cache itself (no kernel added), vLLM's own artifact by its log line.
        warm = facts["warm"]
        assert facts["cold_ready_s"] == facts["ready_s"] and warm["ready_s"] > 0, warm
        assert warm["cache_root"] == "/tmp/.cache" and "failure" not in warm, warm
        assert warm["reused"] in ("vLLM's compiled model", "inductor's compiled kernels"), warm
        assert warm["kernels"]["cold"] > 0 and warm["kernels"]["added_warm"] == 0, warm
        assert any("saved AOT compiled function to /tmp/.cache/vllm/torch_compile_cache/" in x for x in
                   warm["cold_log_lines"]), warm  # fmt: skip
        assert any("/tmp/.cache/vllm/torch_compile_cache/" in x and "load" in x for x in warm["log_lines"]), warm
        assert "warm start" in result["diagnosis"]
        # End of life: the first server killed with SIGKILL once probed (PID 1: nothing left); the warm start is its
        # restart in the same pod, and the server stopped during a stream.
        killed = facts["kill"]
        assert killed["exit_code"] == 137 and killed["survivors"] == [] and killed["target"]["pid"] == 1, killed
        assert facts["restart"]["ready_s"] == warm["ready_s"] > 0, facts["restart"]
        assert "then restarted in the same pod; warm start" in result["diagnosis"], result["diagnosis"]
        assert not [x for x in stop["shutdown"] if not x[1]], stop["shutdown"]  # no unclean cause (class 44)
    # The openai client ran against the default server only (restricted has no network to publish on).
    ran = served["default"]["facts"]["client"]
    assert ran["exit_code"] == 0 and "MATRIX-OPENAI " in ran["output"]
    answers = json.loads(ran["output"].split("MATRIX-OPENAI ", 1)[1].splitlines()[0])
    assert answers["streamed"] == answers["completion"] and answers["chat"]
    assert "client" not in served["restricted"]["facts"]
    # Under restricted the server stood for offline-generate's compiled rerun.
    assert not [c for c in doc["checks"] if c["profile"] == "restricted" and c["check"] == "offline-generate"]
    leaked = client.containers.list(all=True, filters={"label": f"io.vllm-matrix.owner={OWNER}"})
    assert not leaked
    volumes = client.volumes.list(filters={"label": f"io.vllm-matrix.owner={OWNER}"})
    assert not volumes
