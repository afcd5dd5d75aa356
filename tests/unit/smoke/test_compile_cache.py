"""The warm start's evidence and verdict (``vllm_smoke.compilecache``) on logs and cache listings captured from
the CPU image (vLLM 0.32.0): a cold and a warm `vllm serve` of the tiny model on one cache volume at /tmp/.cache,
and a start on a volume the server's UID cannot write; and the serve check's judgement of them."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from matrixtool.incontainer.vllm_smoke import cachelog
from matrixtool.incontainer.vllm_smoke import compilecache as cc
from matrixtool.model.profiles import Profile
from matrixtool.smoke.result import Status
from matrixtool.smoke.serve import check as serve_check
from matrixtool.smoke.serve import diagnosis as serve_diagnosis
from matrixtool.smoke.serve import line as serve_line
from matrixtool.smoke.serve import run as serve_run
from tests.unit.smoke.test_endoflife import shm_state
from tests.unit.smoke.test_serve import GOOD_STOP, _probes

DATA = Path(__file__).resolve().parents[1] / "data" / "serve"
COLD = (DATA / "compile-cache-cold.log").read_text(encoding="utf-8")
WARM = (DATA / "compile-cache-warm.log").read_text(encoding="utf-8")
AFTER_COLD = (DATA / "compile-cache-after-cold.txt").read_text(encoding="utf-8")
AFTER_WARM = (DATA / "compile-cache-after-warm.txt").read_text(encoding="utf-8")
KEY = "4bdd5729c93825fe2bfd2346db1343bd9ae014c492933e9d1f725302e7f511da"
AOT = f"/tmp/.cache/vllm/torch_compile_cache/torch_aot_compile/{KEY}/rank_0_0/model"


def test_the_cold_start_saves_vllms_compiled_model_and_its_warm_up_is_timed() -> None:
    ev = cachelog.evidence(COLD)
    assert ev["saved"] and not ev["loaded"] and not ev["load_failed"]
    assert ev["paths"] == [AOT] and ev["keys"] == [KEY]
    assert ev["lines"] == [f"[backbone] saved AOT compiled function to {AOT}"]
    assert ev["warmup_s"] == 163  # 23:13:07 -> 23:15:50 by vLLM's own stamps


def test_the_warm_start_on_vllm_032_cpu_cannot_load_the_model_but_compiles_no_kernel() -> None:
    ev = cachelog.evidence(WARM)
    # vLLM 0.32's CPU mode (DYNAMO_TRACE_ONCE) saves an artifact it cannot load again.
    assert ev["load_failed"] == [
        f"[backbone] Compiling model again due to a load failure from {AOT}, reason: 'function' object has no "
        "attribute 'finalize_loading'"
    ]
    assert ev["keys"] == [KEY] and ev["warmup_s"] == 27
    cold_kernels, warm_kernels = cachelog.kernels(AFTER_COLD), cachelog.kernels(AFTER_WARM)
    assert len(cold_kernels) == 17 and set(warm_kernels) == set(cold_kernels)
    what, evidence = cc.reuse(ev, cold_kernels, warm_kernels) or ("", "")
    assert what == "inductor's compiled kernels"
    assert "the 17 kernels (.so) the first start compiled" in evidence and "finalize_loading" in evidence
    assert cc.not_reused(cachelog.evidence(COLD), ev, volume="/tmp/.cache", cold_kernels=cold_kernels,
                         warm_kernels=warm_kernels) is None  # fmt: skip


def _line(text: str) -> str:
    return f"(Worker pid=41) INFO 12-01 23:18:13 [decorators.py:743] {text}"


def _warm_log(*lines: str) -> str:
    return "\n".join(_line(x) for x in lines)


def test_a_loaded_model_is_reuse_by_vllms_own_line() -> None:
    ev = cachelog.evidence(_warm_log(f"[backbone] Directly load AOT compilation from path {AOT}"))
    assert cc.reuse(ev, [], []) == (
        "vLLM's compiled model",
        f"[backbone] Directly load AOT compilation from path {AOT}",
    )


def test_each_named_failure_has_its_cause_and_fix() -> None:
    cold = cachelog.evidence(COLD)
    kernels = cachelog.kernels(AFTER_COLD)
    added = [*kernels, "xx/cnew.so"]

    def named(warm: str, *, cold_ev: dict[str, Any] = cold, tmpfs: tuple[str, ...] = ()) -> tuple[str, str, str, str]:
        got = cc.not_reused(cold_ev, cachelog.evidence(warm), volume="/tmp/.cache", tmpfs=tmpfs, cold_kernels=kernels,
                            warm_kernels=added)  # fmt: skip
        assert got is not None
        return got

    other = AOT.replace(KEY, "0" * 64)
    name, cause, diagnosis, fix = named(_warm_log(f"saved AOT compiled function to {other}"))
    assert name == "compile-cache-key-changed" and KEY in cause and "0" * 64 in cause
    assert "VLLM_LOGGING_LEVEL=DEBUG" in fix
    on_tmp = "/tmp/vllm/torch_compile_cache/torch_aot_compile/" + KEY + "/rank_0_0/model"
    name, cause, diagnosis, fix = named(_warm_log(f"saved AOT compiled function to {on_tmp}"), tmpfs=("/tmp",))
    assert name == "compile-cache-on-tmpfs" and cause == on_tmp and "on the tmpfs at /tmp" in diagnosis
    assert "VLLM_CACHE_ROOT" in fix
    name, *_ = named(_warm_log(f"saved AOT compiled function to {on_tmp}"))
    assert name == "compile-cache-off-volume"
    unsaved = _warm_log(f"unable to save AOT compiled function to {AOT}: [Errno 13] Permission denied: '{AOT}.tmp'")
    name, cause, diagnosis, fix = named(unsaved)
    assert name == "compile-cache-unwritable" and "Permission denied" in cause and "not writable" in diagnosis
    assert "fsGroup" in fix and "1777" in fix
    name, cause, *_ = named(_warm_log("vLLM's torch.compile cache is disabled."))
    assert name == "compile-cache-disabled"
    name, cause, diagnosis, fix = named(WARM)
    assert name == "compile-cache-load-failed" and "finalize_loading" in cause and "1 kernels added" in diagnosis
    name, *_ = named(_warm_log("Dynamo bytecode transform time: 3.00 s"), cold_ev=cachelog.evidence(""))
    assert name == "compile-cache-not-reused"


def test_the_cache_root_follows_the_images_environment() -> None:
    assert serve_line.cache_root({"XDG_CACHE_HOME": "/tmp/.cache", "HOME": "/home/vllm"}) == "/tmp/.cache"
    assert serve_line.cache_root({"HOME": "/home/vllm"}) == "/home/vllm/.cache"
    assert serve_line.cache_root({"XDG_CACHE_HOME": "relative"}) == "/root/.cache"
    # The variant images' root, which `tools/matrix kube` mounts the cache volume at.
    template = (Path(__file__).resolve().parents[3] / "templates" / "Dockerfile.j2").read_text(encoding="utf-8")
    assert f"XDG_CACHE_HOME={serve_line.IMAGE_CACHE_ROOT} " in template


def test_a_cache_volume_the_uid_cannot_write_is_named_at_import() -> None:
    log = (DATA / "compile-cache-unwritable.log").read_text(encoding="utf-8")
    d = serve_diagnosis.diagnose_log(log, 1, env={"XDG_CACHE_HOME": "/tmp/.cache"})
    assert d is not None and (d.failure_class, d.name) == (31, "compile-cache-unwritable")
    assert d.cause == "PermissionError: [Errno 13] Permission denied: '/tmp/.cache/torchinductor'"
    assert "fsGroup" in d.fix and "/tmp/.cache" in d.fix
    # The same error outside the cache root (an arbitrary UID with HOME=/): not the cache volume's doing.
    elsewhere = log.replace("/tmp/.cache/torchinductor", "/.cache/huggingface")
    other = serve_diagnosis.diagnose_log(elsewhere, 1, env={"XDG_CACHE_HOME": "/tmp/.cache"})
    assert other is None or other.name != "compile-cache-unwritable"


def test_the_server_spec_mounts_the_cache_volume_at_the_root() -> None:
    spec = serve_line.server_spec("img", Profile(name="default"), "models", cache=("cache-vol", "/tmp/.cache"))
    assert spec.volumes["cache-vol"] == {"bind": "/tmp/.cache", "mode": "rw"}
    plain = serve_line.server_spec("img", Profile(name="default"), "models")
    assert plain.volumes == {"models": {"bind": "/models", "mode": "ro"}}


def _judge(seen: serve_check.Observed) -> tuple[Status, str, str, dict[str, Any]]:
    seen = dataclasses.replace(seen, probes=_probes([1, 2, 3]), stop=GOOD_STOP)
    # The server's environment as ServeRun.environment gives it: the variant images' XDG_CACHE_HOME.
    env = {"XDG_CACHE_HOME": "/tmp/.cache"}
    return serve_check.judge(seen, expected_tokens=[1, 2, 3], vllm_version="0.32.0", ready_budget_s=None, env=env)


def test_judge_reports_cold_and_warm_and_the_evidence() -> None:
    warm = {"ready_s": 40.0, "phases": {"engine core": 30.0}, "log": WARM, "cache_listing": AFTER_WARM}
    seen = serve_check.Observed(ready_s=90.0, log=COLD, warm=warm, cache_listing=AFTER_COLD, cache_root="/tmp/.cache")
    status, diagnosis, _, facts = _judge(seen)
    assert status is Status.PASSED, diagnosis
    assert "warm start 40 s on the cold start's cache, reusing inductor's compiled kernels" in diagnosis
    assert "compile/warm-up 27 s against 163 s" in diagnosis
    assert facts["cold_ready_s"] == 90.0 and facts["warm"]["ready_s"] == 40.0
    assert facts["warm"]["kernels"] == {"cold": 17, "added_warm": 0}
    assert "finalize_loading" in facts["warm"]["reuse_evidence"]


def test_judge_fails_a_warm_start_that_compiled_again_with_class_31() -> None:
    warm = {"ready_s": 90.0, "log": WARM, "cache_listing": AFTER_WARM + "xx/cnew.so\n"}
    seen = serve_check.Observed(ready_s=90.0, log=COLD, warm=warm, cache_listing=AFTER_COLD, cache_root="/tmp/.cache")
    status, diagnosis, hint, facts = _judge(seen)
    assert status is Status.FAILED and "compile-cache-load-failed" in diagnosis
    assert facts["failure_class"] == 31 and facts["warm"]["failure"] == "compile-cache-load-failed"
    assert "remove the cache folder" in hint


def test_the_quick_suite_says_why_no_warm_start_ran() -> None:
    seen = serve_check.Observed(ready_s=50.0, warm={"skipped": cc.WARM_SKIPPED_EAGER})
    status, _, _, facts = _judge(seen)
    assert status is Status.PASSED and "--enforce-eager" in facts["warm"]["skipped"]


def test_a_warm_start_that_could_not_run_or_get_ready_fails_with_its_cause() -> None:
    base = serve_check.Observed(ready_s=90.0, log=COLD, cache_listing=AFTER_COLD, cache_root="/tmp/.cache")
    status, diagnosis, _, _ = _judge(dataclasses.replace(base, warm={"error": "APIError: 500 volume in use"}))
    assert status is Status.FAILED and "could not run: APIError: 500 volume in use" in diagnosis
    log = (DATA / "compile-cache-unwritable.log").read_text(encoding="utf-8")
    status, diagnosis, hint, _ = _judge(dataclasses.replace(base, warm={"ready_s": None, "exit_code": 1, "log": log}))
    assert status is Status.FAILED and "the warm start exited (1) before it was ready" in diagnosis
    assert "Permission denied: '/tmp/.cache/torchinductor'" in diagnosis and "fsGroup" in hint


KILLED = {"target": {"pid": 1, "cmd": "vllm serve /models/tiny-llama"}, "exit_code": 137, "survivors": []}


def test_the_warm_start_after_the_kill_reads_in_the_order_it_ran() -> None:
    """The container check's full suite: the first server SIGKILLed once probed, the warm start its restart in the
    same pod, then that server's stop (``serve_run._serve``)."""
    warm = {
        "kill": KILLED,
        "shm_after_kill": shm_state(1024, {}),
        "ready_s": 40.0,
        "exit_code": None,
        "log": WARM,
        "cache_listing": AFTER_WARM,
    }
    seen = serve_check.Observed(ready_s=90.0, log=COLD, warm=warm, cache_listing=AFTER_COLD, cache_root="/tmp/.cache")
    status, diagnosis, _, facts = _judge(seen)
    assert status is Status.PASSED, diagnosis
    killed = diagnosis.index("SIGKILL once probed: nothing left, /dev/shm empty, then restarted in the same pod")
    assert (
        killed < diagnosis.index("; warm start 40 s on the cold start's cache") < diagnosis.index("; its stop: exit 0")
    )
    assert "; stop:" not in diagnosis
    assert facts["restart"]["ready_s"] == facts["warm"]["ready_s"] == 40.0


def test_a_restart_that_does_not_come_up_is_one_failure_and_no_stop_is_judged() -> None:
    """The warm start is the restart: its end is judged once (serve_endoflife, with /dev/shm's state), and the stop
    that could not happen is not a second failure."""
    log = (DATA / "compile-cache-unwritable.log").read_text(encoding="utf-8")
    warm = {"kill": KILLED, "shm_after_kill": shm_state(1024, {}), "ready_s": None, "exit_code": 1, "log": log}
    seen = serve_check.Observed(
        ready_s=90.0, log=COLD, warm=warm, cache_listing=AFTER_COLD, cache_root="/tmp/.cache", probes=_probes([1, 2, 3])
    )
    env = {"XDG_CACHE_HOME": "/tmp/.cache"}
    status, diagnosis, hint, facts = serve_check.judge(
        seen, expected_tokens=[1, 2, 3], vllm_version="0.32.0", ready_budget_s=None, env=env
    )
    assert status is Status.FAILED and "no streaming request" not in diagnosis and "PID 1" not in diagnosis, diagnosis
    assert "the warm start" not in diagnosis  # said once, as the restart
    assert diagnosis.startswith("the restart in the same pod (after SIGKILL, on its /dev/shm and cache) exited (1)")
    assert "Permission denied: '/tmp/.cache/torchinductor'" in diagnosis and "fsGroup" in hint
    assert "no server to stop" in facts["stop"]["skipped"] and facts["failure_class"] == 31


def _launch(**kw: Any) -> serve_run.Launch:
    return serve_run.Launch(image="img", profile=Profile(name="default"), volume="models", session="s", **kw)


def test_the_quick_suites_server_is_stopped_and_its_facts_say_why_no_warm_start_ran() -> None:
    """The quick suite (eager) plans no kill and no warm start, and says why in ``facts.warm.skipped`` (docs/checks.md;
    a plan of {} left the facts without ``warm``)."""
    warm, ready_by = serve_run.warm_plan(_launch(eager=True), 100.0)
    assert (warm, ready_by) == ({"skipped": cc.WARM_SKIPPED_EAGER}, None)
    _, _, _, facts = _judge(serve_check.Observed(ready_s=50.0, warm=warm))
    assert facts["warm"] == {"skipped": cc.WARM_SKIPPED_EAGER}


def test_the_warm_start_is_planned_against_the_deadline_as_an_absolute_time() -> None:
    """Full suite: the restart must be ready by a fixed ``time.monotonic()``, so the kill, the killed server's
    removal and the /dev/shm read before it count against the check's timeout (a budget taken before the kill and
    cut only by the /dev/shm read let it run past the deadline by the kill's seconds); and the stop during a stream
    after it (its grace) must fit before the deadline too. Too little left: no kill, the first server stopped."""
    assert serve_run.warm_plan(_launch(deadline=9000.0), 100.0) == ({}, 100.0 + serve_check.READY_TIMEOUT_S)
    assert serve_run.warm_plan(_launch(), 100.0) == ({}, 100.0 + serve_check.READY_TIMEOUT_S)  # no deadline
    assert serve_run.warm_plan(_launch(deadline=400.0, grace_s=30), 100.0) == ({}, 370.0)
    assert serve_run.warm_plan(_launch(deadline=400.0, grace_s=120), 100.0) == ({}, 280.0)
    short = 100.0 + 30 + cc.WARM_MIN_S - 1  # a warm start would fit, its stop's grace would not
    warm, ready_by = serve_run.warm_plan(_launch(deadline=short, grace_s=30), 100.0)
    assert ready_by is None and warm == {"skipped": cc.skipped_for_time(cc.WARM_MIN_S - 1)}


def test_with_no_time_for_a_warm_start_the_first_servers_stop_is_the_one_judged() -> None:
    """Too little of the check's timeout left after the probes: no kill, the first server stopped (its stop read as
    such in the summary, not as the warm server's), the warm start skipped with the reason."""
    skipped = cc.skipped_for_time(20)
    seen = serve_check.Observed(ready_s=90.0, log=COLD, warm={"skipped": skipped}, cache_root="/tmp/.cache")
    status, diagnosis, _, facts = _judge(seen)
    assert status is Status.PASSED and "; stop: exit 0" in diagnosis and "its stop" not in diagnosis, diagnosis
    assert "SIGKILL" not in diagnosis and facts["warm"] == {"skipped": skipped} and "kill" not in facts


def test_a_kill_the_engine_refused_fails_and_the_first_servers_stop_is_still_judged() -> None:
    """The engine refused the SIGKILL: the first server was stopped instead (``serve_run._serve``), so its stop is
    judged (here PID 1 a shell), beside the refused kill; no restart is claimed."""
    warm = {"kill": {"error": "APIError: 409 Conflict"}, "skipped": "the first server could not be killed, so ..."}
    seen = serve_check.Observed(ready_s=90.0, log=COLD, warm=warm, cache_listing=AFTER_COLD, cache_root="/tmp/.cache")
    seen = dataclasses.replace(seen, probes=_probes([1, 2, 3]), stop={**GOOD_STOP, "pid1": "/bin/sh /entry.sh"})
    status, diagnosis, _, facts = serve_check.judge(
        seen, expected_tokens=[1, 2, 3], vllm_version="0.32.0", ready_budget_s=None, env={}
    )
    assert status is Status.FAILED and "the server could not be killed: APIError: 409 Conflict" in diagnosis
    assert "PID 1 is /bin/sh /entry.sh" in diagnosis and "restart" not in diagnosis, diagnosis
    assert "skipped" not in facts["stop"] and facts["warm"]["skipped"].startswith("the first server could not")


def test_a_restart_whose_stop_the_engine_broke_fails_once_and_its_warm_start_is_kept() -> None:
    """The warm start came up (its figure kept), the engine then failed its stop: one failure, no stop judged."""
    warm = {"kill": KILLED, "shm_after_kill": shm_state(1024, {}), "ready_s": 40.0, "log": WARM, "error": "APIError"}
    warm["cache_listing"] = AFTER_WARM
    seen = serve_check.Observed(ready_s=90.0, log=COLD, warm=warm, cache_listing=AFTER_COLD, cache_root="/tmp/.cache")
    seen = dataclasses.replace(seen, probes=_probes([1, 2, 3]))
    status, diagnosis, _, facts = serve_check.judge(
        seen, expected_tokens=[1, 2, 3], vllm_version="0.32.0", ready_budget_s=None, env={}
    )
    assert (
        status is Status.FAILED
        and diagnosis == "the restart in the same pod was ready in 40 s, then its stop failed: APIError"
    )
    assert facts["stop"]["skipped"].startswith("no stop observed") and facts["warm"]["ready_s"] == 40.0
