"""End of life of a server: /dev/shm read for free space and leftovers (``servediag``), the shared-memory wordings
of vLLM 0.32 (``serve.diagnosis``), and a clean stop judged by what its log shows (``shutdown.shutdown_verdict``)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from matrixtool.incontainer.vllm_smoke import servediag, serving, shutdown
from matrixtool.smoke.serve import diagnosis as sd
from matrixtool.smoke.serve import endoflife

MIB = 2**20
# vLLM 0.32's check_shm_free_space (vllm/distributed/device_communicators/shm_broadcast.py), as its callers name
# their allocation: ShmRingBuffer (the default name), ShmTensorArena, the CPU KV offload region.
ARENA = (
    "(EngineCore pid=31) ERROR 12-03 19:02:11 [core.py:1510] RuntimeError: Insufficient space in /dev/shm for "
    "ShmTensorArena: 512 MiB required, 100 MiB free. Increase /dev/shm (e.g. --shm-size or --ipc=host).\n"
)
OFFLOAD = (
    "RuntimeError: Insufficient space in /dev/shm for CPU KV offload shared region in /dev/shm: 2048 MiB required, "
    "900 MiB free. Increase /dev/shm (e.g. --shm-size or --ipc=host).\n"
)
RING = (
    "RuntimeError: Insufficient space in /dev/shm for shared-memory allocation: 160 MiB required, 140 MiB free. "
    "Increase /dev/shm (e.g. --shm-size or --ipc=host).\n"
)
BAD_ADDRESS = "(EngineCore pid=40) ERROR 12-03 19:02:11 [core.py:1510] OSError: [Errno 14] Bad address\n"


def shm_state(size_mib: int, files: dict[str, int]) -> dict[str, object]:
    used = sum(files.values())
    listed = [[n, b * MIB, 1000] for n, b in sorted(files.items(), key=lambda f: -f[1])]
    return {
        "path": "/dev/shm",
        "size_bytes": size_mib * MIB,
        "free_bytes": (size_mib - used) * MIB,
        "files": listed,
        "count": len(files),
        "files_bytes": used * MIB,
    }


def test_every_allocation_name_of_vllm_032_is_an_shm_diagnosis() -> None:
    for log, what, need in ((ARENA, "ShmTensorArena", 512), (OFFLOAD, "CPU KV offload", 2048)):
        d = sd.diagnose_log(log, 1)
        assert d is not None and (d.failure_class, d.name) == (15, "shm-too-small"), log
        assert what in d.diagnosis and f"at least {need} MiB" in d.fix


def test_leftovers_that_take_the_room_are_the_cause_not_the_size() -> None:
    state = shm_state(300, {"psm_8f2a1c": 160})
    d = sd.diagnose_log(RING, 1, shm=state)
    assert d is not None and (d.failure_class, d.name) == (43, "shm-leftovers")
    assert "psm_8f2a1c (160 MiB)" in d.diagnosis and "300 MiB without them" in d.diagnosis
    assert "find /dev/shm -mindepth 1 -delete" in d.fix
    assert d.cause.startswith("RuntimeError: Insufficient space in /dev/shm")


def test_a_shm_too_small_even_empty_stays_too_small() -> None:
    d = sd.diagnose_log(ARENA, 1, shm=shm_state(164, {"psm_1": 64}))  # 512 MiB needed, 164 MiB in all
    assert d is not None and (d.failure_class, d.name) == (15, "shm-too-small")
    assert sd.diagnose_log(RING, 1, shm=shm_state(140, {})).name == "shm-too-small"  # type: ignore[union-attr]


def test_bad_address_is_named_as_leftovers_with_the_files_when_read() -> None:
    d = sd.diagnose_log(BAD_ADDRESS, 1)
    assert d is not None and (d.failure_class, d.name) == (43, "shm-bad-address")
    assert "vllm#54002" in d.diagnosis and "too small" in d.diagnosis
    seen = sd.diagnose_log(BAD_ADDRESS, 1, shm=shm_state(1024, {"psm_a": 160, "psm_b": 8}))
    assert seen is not None and seen.name == "shm-leftovers" and "2 file(s), 168 MiB" in seen.diagnosis


@pytest.mark.subprocess
def test_read_shm_and_its_program_agree(tmp_path: Path) -> None:
    (tmp_path / "psm_big").write_bytes(b"x" * 65536)
    (tmp_path / "psm_small").write_bytes(b"x")
    here = servediag.read_shm(str(tmp_path))
    assert [f[0] for f in here["files"]] == ["psm_big", "psm_small"] and here["count"] == 2
    assert here["files_bytes"] >= 65536 and here["size_bytes"] >= here["free_bytes"] > 0
    out = subprocess.run([sys.executable, "-c", servediag.READ_SHM, str(tmp_path)], capture_output=True, check=True)
    there = json.loads(out.stdout)
    assert there["files"] == here["files"] and there["count"] == 2
    assert servediag.shm_leftovers(here).startswith("2 file(s)")
    sparse = {"files": [["psm_71072b01", 36864, 1000]], "count": 1, "files_bytes": 36864}
    assert servediag.shm_leftovers(sparse) == "1 file(s), 36 KiB: psm_71072b01 (36 KiB)"
    assert servediag.shm_leftovers(servediag.read_shm(str(tmp_path / ".."))) != ""


SHUTDOWN = (
    "(APIServer pid=1) INFO [launcher.py:254] [shutdown] API server: shutdown triggered\n"
    "(APIServer pid=1) INFO [core_client.py:772] [shutdown] MPClient: stopping engine manager\n"
    "(EngineCore pid=60) INFO [core.py:1454] [shutdown] EngineCore: trigger received signal=SIGTERM\n"
    "(APIServer pid=1) INFO [core_client.py:774] [shutdown] MPClient: engine manager stopped\n"
    "(APIServer pid=1) INFO [core_client.py:775] [shutdown] MPClient: cleaning up background resources\n"
)
TEARDOWN_DEAD = (
    "(APIServer pid=1) ERROR [async_llm.py:906] AsyncLLM output_handler failed.\n"
    "(APIServer pid=1) ERROR vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. "
    "See stack trace (above) for the root cause.\n"
)


def test_an_engine_dead_error_of_vllms_own_teardown_is_a_clean_stop_with_a_note() -> None:
    verdict = shutdown.shutdown_verdict(SHUTDOWN + TEARDOWN_DEAD)
    assert [(name, clean) for name, clean, _, _ in verdict] == [("teardown-engine-dead", True)]
    stop = {"shutdown": verdict}
    assert shutdown.unclean_stop(stop) == []
    assert shutdown.stop_notes(stop) == " (logged on stop, clean: teardown-engine-dead)"
    assert shutdown.shutdown_verdict(SHUTDOWN) == [] and shutdown.shutdown_verdict("no stop here") == []


def test_an_engine_that_died_under_the_server_is_not_a_clean_stop() -> None:
    died = SHUTDOWN.replace(
        "[shutdown] MPClient: stopping engine manager",
        "[shutdown] MPClient: engine core exited unexpectedly; starting cleanup",
    )
    verdict = shutdown.shutdown_verdict(died + TEARDOWN_DEAD)
    assert [(name, clean) for name, clean, _, _ in verdict] == [("engine-died", False)]
    problems = shutdown.unclean_stop({"shutdown": verdict})
    assert len(problems) == 1 and "engine core died before the API server stopped it" in problems[0]
    early = SHUTDOWN.replace("engine manager stopped", "x") + TEARDOWN_DEAD  # dead before the manager stopped
    assert shutdown.shutdown_verdict(early)[0][:2] == ("engine-died", False)


def test_a_drain_cut_by_the_shutdown_timeout_is_named_but_clean() -> None:
    kill = "WARNING [utils.py:653] [shutdown] Process manager: force killing remaining process EngineCore\n"
    draining = "(EngineCore pid=60) INFO [core.py:1655] [shutdown] EngineCore: draining in-flight requests count=1\n"
    verdict = shutdown.shutdown_verdict(SHUTDOWN + draining + kill)
    assert [(name, clean) for name, clean, _, _ in verdict] == [("drain-cut", True)]
    drained = "(EngineCore pid=60) INFO [core.py:1666] [shutdown] EngineCore: request processing complete; starting\n"
    assert [v[:2] for v in shutdown.shutdown_verdict(SHUTDOWN + drained + kill)] == [("teardown-slow", True)]
    fatal = SHUTDOWN + "(EngineCore pid=60) ERROR [core.py:1512] EngineCore encountered a fatal error.\n"
    assert shutdown.shutdown_verdict(fatal)[0][:2] == ("engine-fatal", False)


TREE = [
    {"pid": 1, "ppid": 0, "rss_kib": 900_000, "cmd": "/opt/venv/bin/python3 /opt/venv/bin/vllm serve /models/tiny"},
    {"pid": 60, "ppid": 1, "rss_kib": 700_000, "cmd": "VLLM::EngineCore"},
    {"pid": 97, "ppid": 60, "rss_kib": 300_000, "cmd": "VLLM::Worker"},
]


def test_the_api_server_is_pid_1_when_it_serves_else_the_first_vllm_serve() -> None:
    assert endoflife.api_server(TREE) == TREE[0]
    shell = [{"pid": 1, "ppid": 0, "rss_kib": 1, "cmd": "/bin/sh /start.sh"}, {**TREE[0], "pid": 7}, *TREE[1:]]
    assert (endoflife.api_server(shell) or {})["pid"] == 7
    assert endoflife.api_server(TREE[1:]) is None
    stays = [{"pid": 1, "ppid": 0, "rss_kib": 1, "cmd": '/bin/sh -c vllm "$@"; sleep infinity vllm serve /m'}]
    assert (endoflife.api_server([*stays, {**TREE[0], "pid": 8}]) or {})["pid"] == 8


def test_a_kill_that_ends_the_container_and_a_restart_that_comes_up_pass_with_the_leftovers_named() -> None:
    warm = {
        "kill": {"target": TREE[0], "exit_code": 137, "survivors": [], "survivors_rss_kib": 0},
        "shm_after_kill": shm_state(1024, {"psm_3f9c": 160}),
        "ready_s": 41.2,  # the warm start is the restart
        "exit_code": None,
        "log": "",
    }
    problems, hints, facts, words = endoflife.judge(warm, {})
    assert problems == [] and hints == []
    assert "SIGKILL once probed: nothing left, /dev/shm kept 1 file(s), 160 MiB: psm_3f9c (160 MiB)" in words
    assert words.endswith(", then restarted in the same pod")
    assert facts["kill"]["exit_code"] == 137 and facts["restart"]["ready_s"] == 41.2


def test_survivors_of_the_kill_are_named_with_their_memory() -> None:
    warm = {
        "kill": {
            "target": {**TREE[0], "pid": 7},
            "exit_code": None,
            "survivors": TREE[1:],
            "survivors_rss_kib": 1_000_000,
        },
        "shm_after_kill": shm_state(1024, {}),
    }
    problems, hints, facts, _ = endoflife.judge(warm, {})
    assert len(problems) == 1 and facts["failure_class"] == 42
    assert "left 2 process(es) alive holding 977 MiB" in problems[0] and "60 VLLM::EngineCore (684 MiB)" in problems[0]
    assert "vllm#55510" in problems[0] and "PID 1" in hints[0]


def test_a_restart_failed_by_the_leftovers_names_them_not_the_size() -> None:
    leftovers = shm_state(300, {"psm_3f9c": 160})
    warm = {
        "kill": {"target": TREE[0], "exit_code": 137, "survivors": []},
        "shm_after_kill": leftovers,
        **{"ready_s": None, "exit_code": 1, "log": RING, "shm": leftovers},
    }
    problems, hints, facts, _ = endoflife.judge(warm, {})
    assert len(problems) == 1 and facts["failure_class"] == 43
    assert problems[0].startswith("the restart in the same pod exited (1): /dev/shm (300 MiB) holds what a server")
    assert "psm_3f9c" in problems[0] and "emptyDir" in hints[0]


def test_a_restart_that_fails_for_another_cause_is_class_45_with_its_cause() -> None:
    warm = {
        "kill": {"target": TREE[0], "exit_code": 137, "survivors": []},
        "shm_after_kill": shm_state(1024, {}),
        **{"ready_s": None, "exit_code": 1, "log": "ValueError: lock file held by another process\n"},
    }
    problems, hints, facts, _ = endoflife.judge(warm, {})
    assert facts["failure_class"] == 45 and "ValueError: lock file held" in problems[0]
    assert hints == [endoflife.RESTART_HINT] and "stale state" in hints[0]  # a fix that fits, where none is known
    assert endoflife.judge({}, {}) == ([], [], {}, "")


# vLLM 0.32's stop of a server whose engine core was SIGKILLed as the stop began (tests/integration/
# test_serve_endoflife.py's class-44 image, 2026-12-07): the process manager's SIGTERM finds no engine core to log its
# stop, vLLM's monitor stays quiet (the stop had begun), and the exit is 0 in 3.5 s.
SILENT_ENGINE = (
    "(APIServer pid=1) INFO 12-07 03:22:09 [launcher.py:254] [shutdown] API server: shutdown triggered\n"
    "(APIServer pid=1) INFO 12-07 03:22:09 [core_client.py:772] [shutdown] MPClient: stopping engine manager\n"
    "(APIServer pid=1) INFO 12-07 03:22:09 [utils.py:628] [shutdown] Process manager: send sigterm to process "
    "EngineCore\n"
    "(Worker pid=49) INFO 12-07 03:22:09 [multiproc_executor.py:843] Parent process exited, terminating worker queues\n"
    "(APIServer pid=1) INFO 12-07 03:22:09 [core_client.py:774] [shutdown] MPClient: engine manager stopped\n"
    "(APIServer pid=1) INFO 12-07 03:22:09 [core_client.py:777] [shutdown] MPClient: complete\n"
)
# The same lines of a live engine core's stop (the good CPU image's full suite, 2026-12-07).
LIVE_ENGINE = SILENT_ENGINE.replace(
    "(Worker pid=49)",
    "(EngineCore pid=36) INFO 12-07 03:07:00 [core.py:1454] [shutdown] EngineCore: trigger received signal=SIGTERM\n"
    "(Worker pid=49)",
)


def test_an_engine_core_that_logs_nothing_of_its_stop_was_dead_before_it() -> None:
    verdict = shutdown.shutdown_verdict(SILENT_ENGINE + TEARDOWN_DEAD)
    assert [(name, clean) for name, clean, _, _ in verdict] == [("engine-died", False)], verdict
    assert "send sigterm to process EngineCore" in verdict[0][2]
    assert shutdown.shutdown_verdict(LIVE_ENGINE) == []
    assert [n for n, _, _, _ in shutdown.shutdown_verdict(LIVE_ENGINE + TEARDOWN_DEAD)] == ["teardown-engine-dead"]


def test_an_engine_core_that_vllm_force_killed_was_alive_not_dead_before_the_stop() -> None:
    """vLLM's process manager force-kills only an engine core still alive at its timeout (vllm/v1/utils.py,
    shutdown): with --shutdown-timeout 0 it does so at once, before the engine core's SIGTERM handler logs; that
    silence is no death (a good server's stop), it is named and clean, as a cut drain is."""
    kill = (
        "(APIServer pid=1) WARNING 12-07 03:22:09 [utils.py:647] [shutdown] Process manager: force killing remaining "
        "processes count=1\n"
        "(APIServer pid=1) WARNING 12-07 03:22:09 [utils.py:653] [shutdown] Process manager: force killing remaining "
        "process EngineCore pid 36\n"
    )
    forced = SILENT_ENGINE.replace("(Worker pid=49)", kill + "(Worker pid=49)")
    verdict = shutdown.shutdown_verdict(forced)
    assert [(name, clean) for name, clean, _, _ in verdict] == [("sigterm-unanswered", True)], verdict
    assert shutdown.unclean_stop({"shutdown": verdict}) == []
    assert [n for n, _, _, _ in shutdown.shutdown_verdict(forced + TEARDOWN_DEAD)] == [
        "sigterm-unanswered",
        "teardown-engine-dead",
    ]
    # The monitor's own word still wins: an engine core that exited unexpectedly died, force-kill or not.
    died = forced.replace("MPClient: stopping engine manager", "MPClient: engine core exited unexpectedly")
    assert shutdown.shutdown_verdict(died)[0][:2] == ("engine-died", False)


def test_a_stream_that_ends_with_an_error_chunk_is_cut_not_completed() -> None:
    """vLLM's OpenAI server ends a request whose engine died with an error chunk and then ``[DONE]``: the stop's
    words say it was cut (seen with class 44's image: "[DONE] after 2 chunks" of 200 tokens)."""
    token = '{"choices": [{"text": "a", "finish_reason": null}]}'
    error = '{"error": {"message": "EngineCore encountered an issue.", "type": "InternalServerError", "code": 500}}'
    assert serving.stream_outcome({"chunks": [token, error], "done": True}) == (
        "cut after 2 chunks by the server's error chunk (EngineCore encountered an issue.), then [DONE]"
    )
    assert serving.stream_outcome({"chunks": [token, "not json"], "done": True}) == "completed ([DONE] after 2 chunks)"


@pytest.mark.parametrize(("code", "seconds"), [(0, 1.0), (137, 30.3)])
def test_an_engine_that_died_under_the_stop_is_the_root_and_a_broken_exit_its_consequence(
    code: int, seconds: float
) -> None:
    """Both ends seen with class 44's image: exit 0 at once, or the API server hung and SIGKILLed after the grace. One
    failure: the engine's death first, with its hint; the broken exit named as its consequence, not as a stop that
    outlived its grace for a reason of its own."""
    from matrixtool.smoke.result import Status
    from matrixtool.smoke.serve import check as serve_check
    from tests.unit.smoke.test_bundle import _probes

    pid1 = "/opt/venv/bin/python /opt/venv/bin/vllm serve /models/tiny-llama"
    verdict = shutdown.shutdown_verdict(SILENT_ENGINE)
    stop = {"grace_s": 30, "in_flight": True, "exit_code": code, "seconds": seconds, "pid1": pid1,
            "stream": "closed after 2 chunks without [DONE]", "shutdown": verdict}  # fmt: skip
    probes = _probes([1, 2, 3])
    probes["models"] = {"status": 200, "body": json.dumps({"data": [{"id": "/models/tiny-llama"}]}), "error": None}
    seen = serve_check.Observed(ready_s=9.0, phases={}, exit_code=None, probes=probes, stop=stop, log="")
    status, diagnosis, hint, facts = serve_check.judge(
        seen, expected_tokens=None, vllm_version="0.32.0", ready_budget_s=None
    )
    assert status is Status.FAILED and facts["failure_class"] == 44, diagnosis
    assert diagnosis.startswith("the stop the engine core died before the API server stopped it"), diagnosis
    assert ("(a consequence: the engine core died under the server)" in diagnosis) == (code == 137), diagnosis
    assert "[shutdown] lines" in hint and "terminationGracePeriodSeconds" not in hint, hint


@pytest.mark.parametrize(("killed", "seconds"), [(False, 1.0), (True, 30.3)])
def test_the_bundles_server_names_the_engines_death_as_the_root_as_the_container_check_does(
    killed: bool, seconds: float
) -> None:
    """The bundle's server (a pod, a GPU host: ``vllm_smoke.serving.judge``) reads the same rule
    (``shutdown.rooted_stop``): the engine's death first, class 44, its hint; a stop SIGKILLed after the grace its
    consequence."""
    from tests.unit.smoke.test_bundle import GOOD_STOP, SPEC, _probes

    stop = {**GOOD_STOP, "killed_after_grace": killed, "exit_code": None if killed else 0, "seconds": seconds}
    seen = {"ready_s": 9.0, "probes": _probes([1, 2, 3]), "argv": ["vllm", "serve"]}
    seen["stop"] = {**stop, "shutdown": shutdown.shutdown_verdict(SILENT_ENGINE)}
    status, diagnosis, hint, facts = serving.judge(seen, SPEC, None)
    assert status == "failed" and facts["failure_class"] == 44, diagnosis
    assert diagnosis.startswith("the stop the engine core died before the API server stopped it"), diagnosis
    assert diagnosis.count(shutdown.CONSEQUENCE) == int(killed), diagnosis
    assert hint == shutdown.DIED_HINT
    assert serving.judge({**seen, "stop": stop}, SPEC, None)[0] == ("failed" if killed else "passed")


def test_an_engine_error_after_the_restart_came_up_is_not_called_a_restart_that_could_not_run() -> None:
    """``serve_run._restart`` keeps what it saw before the engine failed it: a restart that was ready and whose stop
    the engine broke is named so, once; one the engine never ran "could not run"."""
    killed = {"target": TREE[0], "exit_code": 137, "survivors": []}
    warm = {"kill": killed, "shm_after_kill": shm_state(1024, {}), "ready_s": 38.6, "error": "APIError: 500 gone"}
    problems, _, facts, _ = endoflife.judge(warm, {})
    assert problems == ["the restart in the same pod was ready in 39 s, then its stop failed: APIError: 500 gone"]
    assert facts["restart"]["ready_s"] == 38.6
    problems, _, _, _ = endoflife.judge({**warm, "ready_s": None}, {})
    assert problems == ["the restart in the same pod could not run: APIError: 500 gone"]


def test_a_restart_still_starting_when_the_checks_time_ran_out_is_named_so_not_class_45() -> None:
    """No exit and no ready within ``waited_s``: nothing shows stale state, so no class; how far its start got."""
    warm = {
        "kill": {"target": TREE[0], "exit_code": 137, "survivors": []},
        "shm_after_kill": shm_state(1024, {}),
        **{"ready_s": None, "exit_code": None, "log": "loading\n", "waited_s": 61.0},
        "phases": {"api_server": 4.0, "weights_loaded": 38.5},
    }
    problems, hints, facts, _ = endoflife.judge(warm, {})
    assert "failure_class" not in facts and facts["restart"]["waited_s"] == 61.0
    assert problems == [
        "the restart in the same pod (after SIGKILL, on its /dev/shm and cache) was still starting, not ready within "
        "the 61 s it had; its start had reached 'weights_loaded' at 38.5 s"
    ]
    assert hints == [endoflife.RESTART_TIME_HINT]
    problems, _, _, _ = endoflife.judge({**warm, "phases": {}, "waited_s": None}, {})
    assert problems[0].endswith("was still starting, not ready in time; vLLM had logged no phase of its start")
