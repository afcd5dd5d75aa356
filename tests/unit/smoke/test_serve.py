"""The serve check's pure parts: the README's line against the container it starts, the judgement, the plan."""

from __future__ import annotations

import json
import shlex
import time
from pathlib import Path
from typing import Any

import pytest

from matrixtool.incontainer.vllm_smoke import serving
from matrixtool.model import profiles
from matrixtool.model.checks import CHECKS
from matrixtool.model.matrixfile import load_matrix
from matrixtool.model.model import CheckSpec
from matrixtool.model.profiles import Profile
from matrixtool.smoke.plan import SERVED_REASON, plan_profiles
from matrixtool.smoke.result import Status
from matrixtool.smoke.serve import check as serve_check
from matrixtool.smoke.serve import health as serve_health
from matrixtool.smoke.serve import line as serve_line

REPO_ROOT = Path(__file__).resolve().parents[3]
RESTRICTED = {"user": "1000770000:0", "read_only": True, "tmpfs": {"/tmp": "rw,exec"}, "network": "none"}


def _readme_check_line() -> list[str]:
    text = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    block = text.split("<!-- serve-command:start -->")[1].split("<!-- serve-command:end -->")[0]
    lines = [line for line in block.splitlines() if line.startswith("docker run")]
    assert len(lines) == 2, block
    return shlex.split(lines[1])


def test_the_server_container_runs_the_readme_line() -> None:
    argv = _readme_check_line()
    image_at = argv.index("IMAGE")
    flags, args = argv[3:image_at], argv[image_at + 1 :]
    # /dev/shm is the default profile's (matrix.yaml declares it; the tool adds none of its own).
    (default,) = [p for v in load_matrix().variants if v.name == "cpu" for p in v.profiles if p.name == "default"]
    spec = serve_line.server_spec("img", default, "vol")
    assert list(spec.command or []) == args and spec.entrypoint is None  # the image's own ENTRYPOINT
    assert flags[flags.index("--shm-size") + 1] == spec.run_kwargs(session="s", owner="o")["shm_size"]
    assert flags[flags.index("-p") + 1] == f"127.0.0.1::{serve_line.PORT}"  # a loopback port the engine picks
    assert spec.extra["ports"] == {f"{serve_line.PORT}/tcp": ("127.0.0.1", None)}
    source, target, mode = flags[flags.index("-v") + 1].split(":")
    assert spec.volumes == {"vol": {"bind": target, "mode": mode}} and source == "MODEL_VOLUME"
    assert not spec.init  # PID 1 is the server, as `docker run IMAGE serve` makes it


def test_a_run_beside_another_binds_its_servers_to_its_own_cores() -> None:
    """Side by side, the tool adds the run's cores (``room.omp_bind``) over the profile's environment; alone, the
    server's environment is the image's and the profile's, as the README's line gives it."""
    restricted = profiles.profile_from_mapping("restricted", {**RESTRICTED, "env": {"HF_HUB_OFFLINE": "1"}})
    bound = serve_line.server_spec("img", restricted, "vol", environment={"VLLM_CPU_OMP_THREADS_BIND": "1"})
    env = bound.run_kwargs(session="s", owner="o")["environment"]
    assert env == {"HF_HUB_OFFLINE": "1", "VLLM_CPU_OMP_THREADS_BIND": "1"}
    alone = serve_line.server_spec("img", restricted, "vol").run_kwargs(session="s", owner="o")["environment"]
    assert alone == {"HF_HUB_OFFLINE": "1"}


def test_a_profile_without_network_publishes_nothing_and_its_client_shares_the_namespace() -> None:
    restricted = profiles.profile_from_mapping("restricted", RESTRICTED)
    spec = serve_line.server_spec("img", restricted, "vol")
    kwargs = spec.run_kwargs(session="s", owner="o")
    assert "ports" not in kwargs and kwargs["network_mode"] == "none" and kwargs["user"] == "1000770000:0"
    assert kwargs["read_only"] is True and kwargs["tmpfs"] == {"/tmp": "rw,exec"}
    client = serve_line.client_spec("img", restricted, "abc").run_kwargs(session="s", owner="o")
    assert client["network_mode"] == "container:abc" and client["user"] == "1000770000:0"


def _answer(body: Any, status: int = 200) -> dict[str, Any]:
    return {"status": status, "body": body if isinstance(body, str) else json.dumps(body), "error": None}


def _probes(tokens: list[int], text: str = "abc", *, chat: str = "hi", requests: int = 3) -> dict[str, Any]:
    chunks = [json.dumps({"choices": [{"text": text[:1], "token_ids": tokens[:1]}]})]
    chunks.append(json.dumps({"choices": [{"text": text[1:], "token_ids": tokens[1:]}]}))
    return {
        "models": _answer({"data": [{"id": serve_line.MODEL_PATH}]}),
        "completion": _answer({"choices": [{"text": text, "token_ids": tokens}]}),
        "stream": {"status": 200, "chunks": chunks, "done": True, "error": None},
        "chat": _answer({"choices": [{"message": {"content": chat}}]}),
        "version": _answer({"version": "0.32.0"}),
        "metrics": _answer(
            f'vllm:request_success_total{{finished_reason="length"}} {float(requests)}\n'
            'vllm:request_success_total{finished_reason="stop"} 0.0\n'
        ),
    }


GOOD_STOP = {
    "grace_s": 30,
    "in_flight": True,
    "pid1": "/opt/venv/bin/python /opt/venv/bin/vllm serve /m",
    "exit_code": 0,
}


def _judge(seen: serve_check.Observed, **kw: Any) -> tuple[Status, str, str, dict[str, Any]]:
    args: dict[str, Any] = {"expected_tokens": [1, 2, 3], "vllm_version": "0.32.0", "ready_budget_s": None}
    return serve_check.judge(seen, **{**args, **kw})


def test_a_server_that_answers_as_expected_passes() -> None:
    seen = serve_check.Observed(ready_s=90.0, probes=_probes([1, 2, 3]), stop={**GOOD_STOP, "seconds": 2.0})
    status, diagnosis, _, facts = _judge(seen)
    assert status is Status.PASSED, diagnosis
    assert facts["tokens"] == [1, 2, 3] and facts["metrics_requests"] == 3


def test_each_broken_assertion_fails_with_its_reason() -> None:
    stop = {**GOOD_STOP, "seconds": 2.0}
    cases = {
        "differ from offline-generate": serve_check.Observed(ready_s=1.0, probes=_probes([1, 2, 4]), stop=stop),
        "no content": serve_check.Observed(ready_s=1.0, probes=_probes([1, 2, 3], chat=""), stop=stop),
        "/metrics counts 0": serve_check.Observed(ready_s=1.0, probes=_probes([1, 2, 3], requests=0), stop=stop),
        "no request was sent": serve_check.Observed(ready_s=1.0, probes={}, stop=stop),
        "SIGKILL": serve_check.Observed(ready_s=1.0, probes=_probes([1, 2, 3]), stop={**stop, "exit_code": 137}),
        "not the server": serve_check.Observed(
            ready_s=1.0, probes=_probes([1, 2, 3]), stop={**stop, "pid1": "/bin/sh -c"}
        ),
        "over the 30 s grace": serve_check.Observed(
            ready_s=1.0, probes=_probes([1, 2, 3]), stop={**stop, "seconds": 31}
        ),
    }
    for needle, seen in cases.items():
        status, diagnosis, _, _ = _judge(seen)
        assert status is Status.FAILED and needle in diagnosis, (needle, diagnosis)
    broken = _probes([1, 2, 3])
    broken["chat"] = _answer("Internal Server Error", 500)
    status, diagnosis, _, _ = _judge(serve_check.Observed(ready_s=1.0, probes=broken, stop=stop))
    assert status is Status.FAILED and "chat answered 500" in diagnosis
    status, diagnosis, _, _ = _judge(
        serve_check.Observed(ready_s=200.0, probes=_probes([1, 2, 3]), stop=stop), ready_budget_s=100
    )
    assert status is Status.FAILED and "over its ready_budget of 100 s" in diagnosis


def test_a_server_that_dies_at_start_up_names_the_shm_line_and_both_fixes() -> None:
    log = (
        "(EngineCore pid=27) ERROR ... RuntimeError: Insufficient space in /dev/shm for shared-memory allocation: "
        "160 MiB required, 64 MiB free\nRuntimeError: Engine core initialization failed. See root cause above.\n"
    )
    status, diagnosis, hint, _ = _judge(serve_check.Observed(ready_s=None, exit_code=1, log=log))
    assert status is Status.FAILED and "exited (1) before it was ready" in diagnosis
    assert "RuntimeError: Insufficient space in /dev/shm" in diagnosis and "initialization failed" not in diagnosis
    assert "160 MiB" in diagnosis + hint and "--shm-size" in hint and "emptyDir" in hint


def test_phases_are_recorded_once_at_their_first_line() -> None:
    seen: dict[str, float] = {}
    serving.phases_seen("INFO non-default args: {}", 3.04, seen)
    serving.phases_seen("INFO non-default args: {}\nInitializing a V1 LLM engine", 40.0, seen)
    assert seen == {"cli": 3.0, "engine core": 40.0}


def test_reference_tokens_prefer_eager_and_take_the_first_prompt() -> None:
    from matrixtool.smoke.result import CheckResult

    def result(facts: dict[str, Any], status: Status = Status.PASSED) -> CheckResult:
        return CheckResult(
            variant="cpu",
            image="i",
            check="offline-generate",
            status=status,
            diagnosis="",
            hint="",
            seconds=1,
            facts=facts,
        )

    both = {"eager": {"tokens": [[1], [2]]}, "compiled": {"tokens": [[3], [4]]}}
    assert serve_check.reference_tokens([result(both)]) == [1]
    assert serve_check.reference_tokens([result({"compiled": {"tokens": [[3], [4]]}})]) == [3]
    assert serve_check.reference_tokens([result(both, Status.FAILED)]) is None


def test_under_restricted_the_server_stands_for_the_compiled_rerun() -> None:
    variant = next(v for v in load_matrix().variants if v.name == "cpu")
    assert CHECKS["serve"].group == "host"
    checks = [CheckSpec(name=n, timeout=1) for n in ("tiny-model", "offline-generate", "serve", "run-conditions")]
    restricted = profiles.profile_from_mapping("restricted", RESTRICTED)
    plan = plan_profiles(variant, checks, [Profile(name="default"), restricted])
    default, rerun = plan.runs
    assert "offline-generate" in [c.name for c in default.checks]
    assert [c.name for c in rerun.checks] == ["serve", "run-conditions"]
    assert "offline-generate" in rerun.left_out and SERVED_REASON in rerun.left_out_reason
    assert all("serve" not in g.names for r in plan.runs for g in r.groups)  # the host runs it, in no exec


def test_shutdown_errors_are_the_lines_after_shutdown_began() -> None:
    log = (
        "ERROR EngineDeadError at start-up\n(APIServer pid=1) INFO [shutdown] API server: shutdown triggered\n"
        "(APIServer pid=1) ERROR [async_llm.py:906] AsyncLLM output_handler failed.\nINFO: Shutting down\n"
    )
    assert serving.shutdown_errors(log) == [
        "(APIServer pid=1) ERROR [async_llm.py:906] AsyncLLM output_handler failed."
    ]
    assert serving.shutdown_errors("no shutdown here: EngineDeadError") == []


def test_the_images_healthcheck_is_read_as_docker_runs_it() -> None:
    """``docker image inspect``'s Config.Healthcheck: durations in nanoseconds, 0 or absent for Docker's defaults."""
    template = {
        "Test": ["CMD", "python3", "-c", "import urllib.request"],
        "Interval": 30_000_000_000,
        "Timeout": 5_000_000_000,
        "StartPeriod": 600_000_000_000,
        "Retries": 3,
    }
    check = serve_health.healthcheck_of({"Config": {"Healthcheck": template}})
    assert check == serve_health.Healthcheck(
        argv=("python3", "-c", "import urllib.request"), timeout_s=5.0, interval_s=30.0, retries=3
    )
    shell = serve_health.healthcheck_of({"Config": {"Healthcheck": {"Test": ["CMD-SHELL", "curl -f localhost:8000"]}}})
    assert shell is not None and shell.argv == ("/bin/sh", "-c", "curl -f localhost:8000")
    assert (shell.timeout_s, shell.interval_s, shell.retries) == (30.0, 30.0, 3)
    assert serve_health.healthcheck_of({"Config": {"Healthcheck": {"Test": ["NONE"]}}}) is None
    assert serve_health.healthcheck_of({"Config": {}}) is None


def test_a_healthcheck_that_fails_against_a_ready_server_fails_serve() -> None:
    stop = {**GOOD_STOP, "seconds": 2.0}
    # The exec's output for a program the image lacks (Docker 20.10, runc), exit 126.
    missing = (
        "OCI runtime exec failed: exec failed: container_linux.go:380: starting container process caused: exec: "
        '"curl": executable file not found in $PATH: unknown'
    )
    cases = {
        "`curl`, which the image does not contain": {"exit_code": 126, "output": missing},
        "ran past its timeout of 5.0 s": {"exit_code": None, "output": ""},
        "exits 1 3 time(s) in a row": {"exit_code": 1, "output": "URLError: Connection refused"},
    }
    for needle, run in cases.items():
        health = {"argv": ["curl", "-f", "x"], "timeout_s": 5.0, "healthy": False, "runs": [run] * 3}
        seen = serve_check.Observed(ready_s=1.0, probes=_probes([1, 2, 3]), stop=stop, health=health)
        status, diagnosis, hint, facts = _judge(seen)
        assert status is Status.FAILED and needle in diagnosis, (needle, diagnosis)
        assert facts["healthcheck"] == health and hint
    healthy = {"argv": ["python3"], "timeout_s": 5.0, "healthy": True, "runs": [{"exit_code": 0, "output": ""}]}
    seen = serve_check.Observed(ready_s=1.0, probes=_probes([1, 2, 3]), stop=stop, health=healthy)
    status, diagnosis, _, _ = _judge(seen)
    assert status is Status.PASSED and "the image's HEALTHCHECK passes" in diagnosis


def test_a_failing_healthcheck_runs_up_to_its_retries_and_a_pass_ends_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """Docker's semantics: each run bounded by the timeout, unhealthy after `retries` failures in a row."""
    monkeypatch.setattr(time, "sleep", lambda s: None)

    class Server:
        def __init__(self, codes: list[int | None]) -> None:
            self.codes = codes
            self.calls: list[tuple[list[str], float]] = []

        def exec(self, argv: list[str], env: dict[str, str], deadline_s: float) -> tuple[int | None, str]:
            self.calls.append((argv, deadline_s))
            return self.codes[len(self.calls) - 1], "out"

    check = serve_health.Healthcheck(argv=("curl", "-f", "x"), timeout_s=5.0, interval_s=30.0, retries=3)
    failing = Server([1, None, 1])
    health = serve_health.run_healthcheck(failing, check)  # type: ignore[arg-type]
    assert health["healthy"] is False and [r["exit_code"] for r in health["runs"]] == [1, None, 1]
    assert failing.calls == [(["curl", "-f", "x"], 5.0)] * 3
    recovering = Server([1, 0, 1])
    assert serve_health.run_healthcheck(recovering, check)["healthy"] is True  # type: ignore[arg-type]
    assert len(recovering.calls) == 2
    assert serve_health.run_healthcheck(failing, None) == {}  # type: ignore[arg-type]


@pytest.mark.subprocess
def test_the_client_containers_first_chunk_is_waited_for_by_one_exec(tmp_path: Path) -> None:
    """Without a network the stop follows the first chunk by one exec that waits in the client container
    (``WAIT_FOR_FILE``), not by a round trip per poll: a warm tiny model's stream can end in about a second."""
    import subprocess
    import sys
    import threading

    from matrixtool.smoke.serve import probing as serve_probing

    marker = tmp_path / "first"
    threading.Timer(0.3, marker.touch).start()
    waited = subprocess.run([sys.executable, "-c", serve_probing.WAIT_FOR_FILE, str(marker), "20"], timeout=30)
    assert waited.returncode == 0
    never = subprocess.run([sys.executable, "-c", serve_probing.WAIT_FOR_FILE, str(tmp_path / "no"), "0.2"], timeout=30)
    assert never.returncode == 1

    calls: list[list[str]] = []

    class Box:
        def exec(self, argv: list[str], env: dict[str, str], deadline_s: float) -> tuple[int, str]:
            calls.append(argv)
            return (0, "") if argv[:2] == ["python3", "-c"] and argv[2] == serve_probing.WAIT_FOR_FILE else (1, "")

    first, _ = serve_probing.ClientProber(Box()).stream({"prompt": "x"})  # type: ignore[arg-type]
    assert first(120.0) is True
    assert [c for c in calls if c[2] == serve_probing.WAIT_FOR_FILE] == [
        ["python3", "-c", serve_probing.WAIT_FOR_FILE, serve_probing.FIRST_FILE, "120.0"]
    ]
