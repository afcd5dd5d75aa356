"""The bundle's pure parts: the facts it carries, the archive, its flags, its report (the same table and JSON as
the tool's), the verdicts, and the process-level serve judgement and stop contract."""

from __future__ import annotations

import errno
import io
import json
import os
import signal
import stat
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest

from matrixtool import report
from matrixtool.core.errors import ConfigError, ExitCode
from matrixtool.incontainer.vllm_smoke import (
    children,
    compilecache,
    factshape,
    gpuprobe,
    reports,
    results,
    server,
    serving,
    standalone,
    warmshare,
)
from matrixtool.incontainer.vllm_smoke import suite as bundle_suite
from matrixtool.incontainer.vllm_smoke.bounded import DEFAULT_LIMIT
from matrixtool.model.checks import CHECKS
from matrixtool.model.matrixfile import load_matrix
from matrixtool.model.model import CheckSpec
from matrixtool.smoke import bundle
from matrixtool.smoke import runners as smoke_runners
from matrixtool.smoke.plan import check_params, plan_host
from matrixtool.smoke.result import CheckResult, Status, verdict
from matrixtool.smoke.serve import check as serve_check
from matrixtool.smoke.serve import line as serve_line

CPU = next(v for v in load_matrix().variants if v.name == "cpu")
CUDA = next(v for v in load_matrix().variants if v.name == "cuda")


def _facts(variant: Any = CPU, suite: str = "full") -> dict[str, Any]:
    return bundle.facts(variant, list(variant.checks), suite)


def _members(archive: bytes) -> dict[str, bytes]:
    with zipfile.ZipFile(io.BytesIO(archive)) as z:
        return {name: z.read(name) for name in z.namelist()}


def test_the_facts_are_the_variants_plan_and_pins() -> None:
    facts = _facts()
    (run,) = plan_host(CPU, list(CPU.checks)).runs
    assert facts["variant"] == "cpu" and facts["accelerator"] == "cpu"
    assert facts["params"] == {**check_params(CPU), "host": False, "suite": "full", "rerun": False}
    assert facts["checks"] == [{"name": c.name, "timeout": c.timeout} for c in CPU.checks]
    assert facts["groups"] == [list(g.names) for g in run.groups]
    assert "serve" not in {n for g in facts["groups"] for n in g}, "serve is the bundle's own step, in no group"
    assert facts["pins"]["vllm"] == str(CPU.vllm.version) and facts["pins"]["triton"] == CPU.triton.value
    options = facts["serve"]["options"]
    assert options == [*serve_line.SERVE_OPTIONS, *serve_line.MODEL_OPTIONS], "the container check's serve line"
    assert facts["serve"]["stop_grace_s"] == (CPU.stop_grace_s or serve_check.STOP_GRACE_S)
    assert "--enforce-eager" in _facts(suite="quick")["serve"]["options"]
    assert bundle.facts(CPU, list(CPU.checks), host=True)["params"]["host"] is True
    assert _facts(CUDA)["params"]["accelerator"] == "cuda"


def test_a_gpu_variants_server_asks_for_a_stated_share_of_the_gpus_memory() -> None:
    """vLLM's default takes 90 % of the GPU (issue 38/39): the bundle's serve line states a smaller share."""
    serve = _facts(CUDA)["serve"]
    share = str(serve_line.GPU_MEMORY_UTILIZATION)
    assert serve["gpu_memory_utilization"] == serve_line.GPU_MEMORY_UTILIZATION <= 0.5
    assert serve["options"][-2:] == ["--gpu-memory-utilization", share]
    assert _facts(CPU)["serve"]["gpu_memory_utilization"] is None  # the CPU server takes no GPU memory
    assert "--gpu-memory-utilization" not in _facts(CPU)["serve"]["options"]
    # The bundle's flag overrides it; refused where the variant's server uses no GPU; out of range is one message.
    changed = standalone.with_gpu_share(_facts(CUDA), 0.35)["serve"]
    assert changed["options"][-2:] == ["--gpu-memory-utilization", "0.35"] and changed["gpu_memory_utilization"] == 0.35
    assert standalone.with_gpu_share(_facts(CUDA), None) == _facts(CUDA)
    with pytest.raises(standalone.UsageError, match="the cpu variant's server uses no GPU"):
        standalone.with_gpu_share(_facts(CPU), 0.35)
    assert standalone.parse_args(["--gpu-memory-utilization", "0.3"]).gpu_memory_utilization == 0.3
    for bad in ("0", "1.5", "half"):
        with pytest.raises(standalone.UsageError, match="--gpu-memory-utilization"):
            standalone.parse_args(["--gpu-memory-utilization", bad])
    assert factshape.problems(_edited(_facts(CUDA), lambda f: f["serve"].update(gpu_memory_utilization=2))) == [
        "serve.gpu_memory_utilization: must be at most 1 (a share of the GPU's memory), not 2"
    ]


H200_SERVE_LOG = (Path(__file__).parent.parent / "data" / "bundle" / "h200-serve-warm.log").read_text(encoding="utf-8")


def test_a_warm_start_over_half_the_cold_one_names_what_vllm_could_not_reuse() -> None:
    """The H200 run of 2026-12-03 (vLLM 0.25.0, ``data/bundle/h200-serve-warm.log``): ready in 99.1 s cold and 59.0
    s warm (0.6); the compile, CUDA graph and engine spans shrank, the two processes' start and imports did not."""
    _, _, warm_log = H200_SERVE_LOG.partition(compilecache.WARM_LOG_MARK)
    seen = {"ready_s": 99.1, "phases": {"cli": 20.0, "engine core": 57.1, "api server": 99.1}, "log": H200_SERVE_LOG,
            "warm": {"ready_s": 59.0, "log": warm_log}}  # fmt: skip
    facts: dict[str, Any] = {"warm": {"ready_s": 59.0, "phases": {"cli": 26.0, "engine core": 47.0}}}
    words = warmshare.warm_share(seen, facts)
    assert words.startswith("; warm/cold 0.6 (over 0.5; what vLLM could not reuse: 26 s to vLLM's first line")
    assert "21 s from there to the engine core's first line, its own process start and imports (cold 37.1 s)" in words
    assert "torch.compile 9.43 s -> 0.99 s, CUDA graph capture 6 s -> 1 s, engine init 35.69 s -> 5.14 s" in words
    assert facts["warm"]["ratio"] == 0.6 and facts["warm"]["spans"]["model load"] == [1.575655, 1.669745]
    fast = {"warm": {"ready_s": 40.0, "phases": {}}}
    assert warmshare.warm_share(dict(seen, ready_s=99.1), fast) == "; warm/cold 0.4 (at most 0.5)"
    assert warmshare.warm_share({"ready_s": 99.1}, {"warm": {"skipped": "eager"}}) == ""


def test_the_archive_carries_the_package_and_the_facts_and_is_reproducible() -> None:
    facts = _facts()
    data = bundle.bundle_bytes(facts)
    assert data.startswith(b"#!/usr/bin/env python3\n")
    members = _members(data)
    assert json.loads(members["vllm_smoke/bundle_facts.json"]) == facts
    assert b"sys.exit(entry())" in members["__main__.py"], "the suite's exit status is the archive's"
    package = {p.relative_to(smoke_runners.CHECKS_DIR).as_posix() for p in smoke_runners.PACKAGE_DIR.rglob("*.py")}
    assert package - {n for n in package if "__pycache__" in n} <= set(members)
    assert not [n for n in members if "__pycache__" in n or n.endswith(".pyc")]
    assert bundle.bundle_bytes(facts) == data, "the same facts give the same bytes"
    assert bundle.bundle_bytes(_facts(suite="quick")) != data


def test_flags_parse_and_bad_ones_are_one_message() -> None:
    args = standalone.parse_args(["--json", "r.json", "--junit", "j.xml", "--logs", "/l"])
    assert (args.json_file, args.junit, args.logs, args.facts) == ("r.json", "j.xml", "/l", False)
    assert standalone.parse_args([]).json_file is None, "no argument is needed"
    with pytest.raises(standalone.UsageError, match="unrecognized arguments: --bogus"):
        standalone.parse_args(["--bogus"])


@pytest.mark.subprocess
def test_the_bundle_runs_with_python_alone_and_exits_by_its_result(tmp_path: Path) -> None:
    facts = bundle.facts(CPU, [CheckSpec(name="triton-import", timeout=60)], host=True)
    path = tmp_path / "b.pyz"
    path.write_bytes(bundle.bundle_bytes(facts))
    env = {"PATH": os.environ["PATH"], "MATRIX_SMOKE_DIR": str(tmp_path / "work")}
    argv = [sys.executable, str(path), "--json", str(tmp_path / "r.json"), "--junit", str(tmp_path / "j.xml")]
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, check=False)
    doc = json.loads((tmp_path / "r.json").read_text())
    (only,) = doc["checks"]
    assert only["check"] == "triton-import" and only["image"] == f"host:{sys.executable}"
    assert proc.returncode == (0 if doc["ok"] else standalone.EXIT_SMOKE), proc.stderr
    assert "suite: full" in proc.stdout and "triton-import" in proc.stdout
    assert "<testcase" in (tmp_path / "j.xml").read_text()
    plain = tmp_path / "plain.pyz"  # the container package: no facts
    plain.write_bytes(bundle.bundle_bytes(facts).replace(b"bundle_facts.json", b"bundle_factsXjson"))
    proc = subprocess.run([sys.executable, str(plain)], capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == standalone.EXIT_USAGE and "tools/matrix bundle VARIANT" in proc.stderr


def _edited(facts: dict[str, Any], edit: Any) -> dict[str, Any]:
    edited: dict[str, Any] = json.loads(json.dumps(facts))
    edit(edited)
    return edited


@pytest.mark.subprocess
@pytest.mark.parametrize(
    ("edit", "named"),
    [
        (lambda f: f["checks"][0].update(timeout="60"), "checks.0.timeout: must be a whole number, not a string"),
        (lambda f: f["checks"][0].pop("name"), "checks.0.name: is missing"),
        (lambda f: f.update(checks={}), "checks: must be a non-empty list"),
        (lambda f: f["groups"].append(["no-such-check"]), "groups.1.0: 'no-such-check' is no check of 'checks'"),
        (lambda f: f["groups"].append("triton-import"), "groups.1: must be a list of strings"),
        (lambda f: f["serve"]["options"].__setitem__(0, 8000), "serve.options.0: must be a string, not a whole number"),
        (lambda f: f["serve"].update(ready_timeout_s=-1), "serve.ready_timeout_s: must be above 0"),
        (lambda f: f.pop("serve"), "serve: is missing"),
        (lambda f: f["params"].update(host="yes"), "params.host: must be true or false"),
        (lambda f: f["params"].update(gpu_archs="sm_90"), "params.gpu_archs: must be a list of strings"),
        (lambda f: f.update(params=None), "params: must be a mapping, not null"),
    ],
)
def test_hand_edited_facts_are_one_message_naming_the_key_path_and_exit_2(
    tmp_path: Path, edit: Any, named: str
) -> None:
    """Before: each of these gave a traceback (KeyError, TypeError, AttributeError) from deep in the run."""
    facts = _edited(bundle.facts(CPU, [CheckSpec(name="triton-import", timeout=60)], host=True), edit)
    path = tmp_path / "b.pyz"
    path.write_bytes(bundle.bundle_bytes(facts))
    env = {"PATH": os.environ["PATH"], "MATRIX_SMOKE_DIR": str(tmp_path / "work")}
    proc = subprocess.run([sys.executable, str(path)], env=env, capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == standalone.EXIT_USAGE, proc.stderr
    assert "Traceback" not in proc.stderr and named in proc.stderr, proc.stderr
    assert proc.stderr.startswith("error: bundle_facts.json is not what tools/matrix bundle writes")
    assert not (tmp_path / "work").exists() or not any((tmp_path / "work").iterdir()), "nothing ran"


@pytest.mark.subprocess
def test_facts_that_are_not_json_are_one_message(tmp_path: Path) -> None:
    data = bundle.bundle_bytes(bundle.facts(CPU, [CheckSpec(name="triton-import", timeout=60)], host=True))
    members = _members(data)
    members["vllm_smoke/bundle_facts.json"] = b'{"format": 1,'
    path = tmp_path / "b.pyz"
    with zipfile.ZipFile(path, "w") as archive:
        for name, body in members.items():
            archive.writestr(name, body)
    proc = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == standalone.EXIT_USAGE and "Traceback" not in proc.stderr, proc.stderr
    assert "bundle_facts.json is not JSON" in proc.stderr


def test_every_variants_facts_have_the_shape_the_bundle_checks() -> None:
    for variant in load_matrix().variants:
        for suite in ("quick", "full"):
            assert factshape.problems(_facts(variant, suite)) == [], variant.name


def test_every_param_the_plan_writes_has_a_shape_the_bundle_checks() -> None:
    """Before: ``features_promise`` and ``features_leave_out`` were unknown to the shape, so a hand-edited
    ``features_promise: 5`` passed it and the features check died with a TypeError."""
    for variant in load_matrix().variants:
        assert set(check_params(variant)) <= factshape.KNOWN_PARAMS, variant.name


@pytest.mark.parametrize(
    ("key", "value", "said"),
    [
        ("features_promise", 5, "params.features_promise"),
        ("features_leave_out", ["audio"], "params.features_leave_out: must be a mapping"),
        ("features_leave_out", {"audio": 3}, "params.features_leave_out.audio: must be a string"),
    ],
)
def test_a_hand_edited_features_param_is_named_by_its_key_path(key: str, value: object, said: str) -> None:
    facts = _facts()
    facts["params"][key] = value
    assert any(line.startswith(said) for line in factshape.problems(facts)), factshape.problems(facts)


@pytest.mark.subprocess
@pytest.mark.parametrize("flag", ["--json", "--junit"])
def test_the_bundles_report_to_a_name_that_leads_into_dev_is_written_in_place(tmp_path: Path, flag: str) -> None:
    """Before: with stdout redirected to a file, ``/dev/stdout`` read as a regular file and the report was renamed
    over the name (as root, over the machine's ``/dev/stdout``); a scratch link to it stands for it here."""
    facts = bundle.facts(CPU, [CheckSpec(name="triton-import", timeout=60)], host=True)
    path = tmp_path / "b.pyz"
    path.write_bytes(bundle.bundle_bytes(facts))
    link = tmp_path / "stdout"
    link.symlink_to("/dev/stdout")
    env = {"PATH": os.environ["PATH"], "MATRIX_SMOKE_DIR": str(tmp_path / "work")}
    with open(tmp_path / "redirected", "w") as out:
        subprocess.run(
            [sys.executable, str(path), flag, str(link)], env=env, stdout=out, stderr=subprocess.PIPE, timeout=120
        )
    assert os.readlink(link) == "/dev/stdout", "the link is still the link"
    text = (tmp_path / "redirected").read_text()
    if flag == "--json":  # whole, not overwritten by the table (written through stdout's own descriptor, in order)
        document, _ = json.JSONDecoder().raw_decode(text[text.index('{\n  "schema_version"') :])
        assert document["checks"][0]["check"] == "triton-import"
    else:
        assert text.count("<testcase") == 1 and "</testsuites>" in text
    assert "suite: full" in text, "and the table"


def _results() -> list[dict[str, Any]]:
    base = {"variant": "cpu", "profile": "default", "image": "host:/py", "facts": {}, "suite": "full"}
    return [
        {**base, "check": "torch-import", "status": "passed", "diagnosis": "torch 2.9", "hint": "", "seconds": 1.23,
         "log": "/l/cpu.torch-import.log"},
        {**base, "check": "vllm-import", "status": "failed", "diagnosis": "x " * 80, "hint": "fix it", "seconds": 9.0,
         "log": "/l/cpu.vllm-import.log", "facts": {"a": [1]}},
        {**base, "check": "tiny-model", "status": "skipped", "diagnosis": "vllm-import failed", "hint": "",
         "seconds": 0.0, "log": None},
        {**base, "check": "offline-generate", "status": "timeout", "diagnosis": "no result within 900 s",
         "hint": "h", "seconds": 900.04, "log": "/l/o.log"},
    ]  # fmt: skip


def test_the_tools_report_of_checks_is_the_bundles() -> None:
    """``report`` wraps the one definition (``vllm_smoke.reports``): the same results read back from the bundle's
    JSON print the same table and document, timed or not."""
    results = _results()
    run = report.RunReport(checks=[bundle.result_of(r) for r in results])
    assert reports.table(results) == report.table(run)
    assert json.loads(json.dumps(reports.to_json(results))) == json.loads(report.to_json_text(run))
    timed = report.RunReport(checks=run.checks, smoke_wall_seconds=42.0)
    assert reports.table(results, 42.0) == report.table(timed)
    assert reports.table(results, 42.0).endswith(
        "FAILED: 1 passed, 1 failed, 1 timeout, 1 skipped; smoke 42 s wall (checks' times summed 910 s)"
    )
    xml = reports.junit_xml(results)
    assert xml.count("<testcase") == 4 and 'failures="1"' in xml and 'errors="1"' in xml and 'skipped="1"' in xml


def test_verdicts_read_exit_codes_and_output() -> None:
    line = '\nMATRIX-RESULT {"check": "pip-check", "status": "failed", "diagnosis": "d", "hint": null, "facts": {}}\n'
    cases = {
        (0, line, 1.0): ("failed", "d"),
        (124, "", 5.0): ("timeout", "no result within 60 s after 5 s; the check was killed"),
        (137, "", 1.0): ("failed", "killed by SIGKILL after 1 s, before its 60 s timeout (out of memory?): "),
        (137, "", 99.0): ("timeout", "no result within 60 s after 99 s; the check was killed"),
        (0, "garbage", 1.0): ("failed", "the check printed no result (exit 0): garbage"),
        (1, "", 1.0): ("failed", "the check printed no result (exit 1): "),
    }
    for (code, output, seconds), expected in cases.items():
        status, diagnosis, _, _ = results.verdict("pip-check", code, output, 60, seconds, hint="h")
        assert (status, diagnosis) == expected, (code, output)
        tools = verdict("pip-check", code, output, 60, seconds)
        assert (tools[0].value, tools[1]) == expected
    bad = '\nMATRIX-RESULT {"check": "pip-check", "status": "great"}\n'
    assert (
        "unreadable result ('great' is not a valid status)" in results.verdict("pip-check", 0, bad, 60, 1.0, hint="")[1]
    )


def test_a_skip_never_hides_a_failure() -> None:
    skipped = {"status": "skipped", "diagnosis": "tiny-model failed", "hint": "",
               "facts": {"failed_need": "tiny-model", "need_diagnosis": "no disk"}}  # fmt: skip
    assert bundle_suite.Suite._unhidden(skipped, ["tiny-model", "serve"]) is skipped
    shown = bundle_suite.Suite._unhidden(skipped, ["serve"])
    assert shown["status"] == "failed" and "tiny-model failed here: no disk" in shown["diagnosis"]
    assert shown["hint"] == CHECKS["tiny-model"].hint


GOOD_STOP = {"grace_s": 30, "in_flight": True, "exit_code": 0, "seconds": 2.0, "left_in_group": []}
SPEC = {"model": "/w/tiny-llama", "ready_timeout_s": 1200, "vllm_version": "0.32.0"}


def _probes(tokens: list[int]) -> dict[str, Any]:
    def answer(body: Any) -> dict[str, Any]:
        return {"status": 200, "body": body if isinstance(body, str) else json.dumps(body), "error": None}

    chunks = [json.dumps({"choices": [{"text": "a", "token_ids": tokens[:1]}]}),
              json.dumps({"choices": [{"text": "bc", "token_ids": tokens[1:]}]})]  # fmt: skip
    return {
        "metrics_before": answer(""),
        "models": answer({"data": [{"id": SPEC["model"]}]}),
        "completion": answer({"choices": [{"text": "abc", "token_ids": tokens}]}),
        "stream": {"status": 200, "chunks": chunks, "done": True, "error": None},
        "chat": answer({"choices": [{"message": {"content": "hi"}}]}),
        "version": answer({"version": "0.32.0"}),
        "metrics": answer('vllm:request_success_total{finished_reason="length"} 3.0\n'),
    }


def test_401s_name_where_the_api_key_came_from_in_the_bundle_and_on_the_host() -> None:
    """A server started with an API key: the 401s come with the key's source (the environment, the command line)
    and the fix, in the bundle's judgement and the host's alike."""
    from matrixtool.smoke.serve import check as serve_check
    from matrixtool.smoke.serve.check import Observed

    probes = _probes([1, 2, 3])
    denied = {"status": 401, "body": '{"error":"Unauthorized"}', "error": None}
    probes.update(models=denied, completion=denied, chat=denied)
    seen = {"ready_s": 9.0, "probes": probes, "stop": GOOD_STOP, "argv": ["vllm", "serve", "--api-key", "k"]}
    status, diagnosis, hint, _ = serving.judge({**seen, "env": {"VLLM_API_KEY": "k"}}, SPEC, None)
    assert status == "failed" and "models, completion, chat answered 401 Unauthorized" in diagnosis
    assert "VLLM_API_KEY is set in the server's environment" in diagnosis
    assert "--api-key is in the server's command line" in diagnosis and "Kubernetes Secret" in hint
    assert serving.unauthorized(_probes([1]), {"VLLM_API_KEY": "k"}, []) is None, "no 401, nothing said"
    found = serving.unauthorized(probes, {}, ["serve"])
    assert found is not None and "neither VLLM_API_KEY nor --api-key is visible" in found[0]
    host = Observed(ready_s=9.0, phases={}, exit_code=None, probes=probes, stop=GOOD_STOP, log="")
    status_h, diagnosis_h, hint_h, _ = serve_check.judge(
        host, expected_tokens=None, vllm_version="0.32.0", ready_budget_s=None, env={"VLLM_API_KEY": "k"}
    )
    assert status_h.value == "failed" and "VLLM_API_KEY is set in the server's environment" in diagnosis_h
    assert "Kubernetes Secret" in hint_h


def test_the_process_server_is_judged_as_the_container_one() -> None:
    seen = {"ready_s": 90.0, "probes": _probes([1, 2, 3]), "stop": GOOD_STOP, "argv": ["vllm", "serve"]}
    status, diagnosis, _, facts = serving.judge(seen, SPEC, [1, 2, 3])
    assert status == "passed" and "no process left" in diagnosis, diagnosis
    assert facts["tokens"] == [1, 2, 3] and facts["metrics_requests"] == 3 and facts["version"] == "0.32.0"
    cases = {
        "differ from offline-generate's eager": ({**seen, "probes": _probes([1, 2, 4])}, [1, 2, 3]),
        "SIGTERM during a stream: exit 1": ({**seen, "stop": {**GOOD_STOP, "exit_code": 1}}, None),
        "no exit within the 30 s grace": ({**seen, "stop": {**GOOD_STOP, "killed_after_grace": True}}, None),
        "over the 30 s grace": ({**seen, "stop": {**GOOD_STOP, "seconds": 31}}, None),
        "no streaming request was in flight": ({**seen, "stop": {**GOOD_STOP, "in_flight": False}}, None),
        "1 process(es) of the server's group left": (
            {**seen, "stop": {**GOOD_STOP, "left_in_group": [{"pid": 7, "cmd": "VLLM::EngineCore"}]}},
            None,
        ),
    }
    for needle, (case, expected) in cases.items():
        status, diagnosis, _, _ = serving.judge(case, SPEC, expected)
        assert status == "failed" and needle in diagnosis, (needle, diagnosis)
    assert serving.judge({**seen, "stop": {**GOOD_STOP, "exit_code": -signal.SIGTERM}}, SPEC, None)[0] == "passed"


def test_a_server_that_exits_before_ready_names_its_exit_and_cause() -> None:
    log = "INFO start\nRuntimeError: Insufficient space in /dev/shm\nRuntimeError: Engine core initialization failed.\n"
    status, diagnosis, _, facts = serving.judge({"ready_s": None, "exit_code": 1, "log": log}, SPEC, None)
    assert status == "failed" and "exited (1) before it was ready" in diagnosis and "/dev/shm" in diagnosis
    assert facts["exit_code"] == 1 and "Insufficient space" in facts["log_tail"]


def test_group_members_reads_the_process_group_from_proc(tmp_path: Path) -> None:
    def proc(pid: int, comm: str, state: str, pgid: int, cmd: bytes) -> None:
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "stat").write_text(f"{pid} ({comm}) {state} 1 {pgid} {pgid} 0 -1")
        (tmp_path / str(pid) / "cmdline").write_bytes(cmd)

    proc(10, "vllm", "S", 10, b"vllm\0serve\0/m")
    proc(11, "VLLM::Engine Core", "R", 10, b"VLLM::EngineCore")  # a command name with a space and a ')'-free tail
    proc(12, "zombie", "Z", 10, b"")
    proc(13, "other", "S", 99, b"other")
    (tmp_path / "self").mkdir()
    found = children.group_members(10, proc_root=str(tmp_path))
    assert sorted(p["pid"] for p in found) == [10, 11] and {"pid": 10, "cmd": "vllm serve /m"} in found
    assert children.group_members(10, proc_root=str(tmp_path / "missing")) == []


@pytest.mark.subprocess
def test_the_stop_contract_finds_and_ends_a_child_left_in_the_group(tmp_path: Path) -> None:
    # A real process tree: a parent that exits on SIGTERM, its child ignores SIGTERM and stays in the group.
    code = (
        "import os, signal, subprocess, sys, time\n"
        "subprocess.Popen([sys.executable, '-c', 'import signal, time; signal.signal(signal.SIGTERM, "
        "signal.SIG_IGN); time.sleep(600)'])\n"
        "time.sleep(600)\n"
    )
    running = server.Server([sys.executable, "-c", code], dict(os.environ), str(tmp_path / "log"))
    try:
        import time

        time.sleep(1.0)
        assert len(children.group_members(running.pgid)) == 2
        stop = server.stop_during_stream(running, "http://127.0.0.1:9", {}, grace_s=10, first_chunk_s=0.1)
    finally:
        running.close()
    assert stop["exit_code"] == -signal.SIGTERM and not stop["in_flight"]
    assert len(stop["left_in_group"]) == 1 and stop["group_killed"]
    problems = serving.stop_problems(stop)
    assert any("left after it exited" in p for p in problems)
    assert children.group_members(running.pgid) == [], "nothing of the group outlives the check"
    assert running not in server.ACTIVE


def test_a_bundle_result_reads_back_as_the_tools_result() -> None:
    r = _results()[1]
    got = bundle.result_of(r)
    assert isinstance(got, CheckResult) and got.status is Status.FAILED and got.log == Path(r["log"])
    assert got.facts == {"a": [1]} and got.profile == "default" and got.suite == "full"


@pytest.mark.subprocess
def test_a_group_of_the_bundle_is_bounded_and_killed_with_its_process_group_at_its_timeout() -> None:
    group = children.Children()
    code = "import sys; sys.stderr.write('err\\n'); sys.stdout.write('x' * 20_000_000 + 'END\\n'); sys.exit(4)"
    exit_code, output, _ = _group(group, code, 60)
    assert exit_code == 4 and output.endswith("END\n") and "bytes of output left out" in output
    assert len(output) < DEFAULT_LIMIT.head_bytes + DEFAULT_LIMIT.tail_bytes + 100
    # A check that hangs, with a child that ignores SIGTERM: exit 124 (read as a timeout), the output so far kept,
    # and nothing of its process group left.
    hang = (
        "import subprocess, sys, time; print('started', flush=True); "
        "subprocess.Popen([sys.executable, '-c', 'import signal, time; signal.signal(signal.SIGTERM, "
        "signal.SIG_IGN); time.sleep(600)']); time.sleep(600)"
    )
    exit_code, output, wall = _group(group, hang, 2)
    assert exit_code == results.TIMEOUT_EXIT and output.startswith("started\n") and wall < 60
    assert results.verdict("pip-check", exit_code, output, 2, wall, hint="")[0] == "timeout"
    assert not group.procs


def _group(group: children.Children, code: str, timeout: int) -> tuple[int, str, float]:
    """``bundle_suite.run_group`` with ``self_argv`` pointed at ``python -c code`` (the group's own process)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(bundle_suite, "self_argv", lambda: [sys.executable, "-c", code])
        return bundle_suite.run_group(group, ["pip-check"], {}, {"pip-check": timeout}, {})


def test_a_gpu_is_seen_by_any_device_node_of_its_accelerator(tmp_path: Path) -> None:
    assert gpuprobe.attached_gpu("cuda", str(tmp_path)) is None and gpuprobe.attached_gpu("rocm", str(tmp_path)) is None
    (tmp_path / "nvidiactl").touch()
    assert gpuprobe.attached_gpu("cuda", str(tmp_path)) is None, "the control node is no GPU"
    (tmp_path / "nvidia3").touch()  # a pod's one GPU, as the device plugin numbers it
    (tmp_path / "kfd").touch()
    assert gpuprobe.attached_gpu("cuda", str(tmp_path)) == str(tmp_path / "nvidia3")
    assert gpuprobe.attached_gpu("rocm", str(tmp_path)) == str(tmp_path / "kfd")
    assert gpuprobe.attached_gpu("cpu", str(tmp_path)) is None


@pytest.mark.subprocess
def test_host_mode_names_a_bundle_that_printed_no_report(tmp_path: Path) -> None:
    facts = bundle.facts(CPU, [CheckSpec(name="triton-import", timeout=60), CheckSpec(name="pip-check", timeout=60)])
    seen: list[CheckResult] = []
    results = bundle.run_bundle("/bin/false", facts, env={}, log_dir=tmp_path / "logs", on_result=seen.append)
    assert [r.check for r in results] == ["triton-import", "pip-check"] and not seen
    assert all(r.status is Status.FAILED and "printed no report (exit 1)" in r.diagnosis for r in results)
    assert "vllm-smoke-cpu.pyz" in results[0].hint and results[0].image == "host:/bin/false"


@pytest.mark.subprocess
def test_a_serve_step_that_crashes_is_a_failed_check_and_the_report_is_still_written(tmp_path: Path) -> None:
    facts = bundle.facts(CPU, [CheckSpec(name="tiny-model", timeout=60), CheckSpec(name="serve", timeout=60)])
    landed: list[dict[str, Any]] = []
    suite = bundle_suite.Suite(facts, env={}, logs=str(tmp_path), image="img", on_result=landed.append)
    suite.outcomes["tiny-model"] = {"status": "passed", "facts": {}}
    model = tmp_path / "model.py"
    model.write_text("print('MATRIX-MODEL /m')\n")
    original_argv, original_observe = bundle_suite.self_argv, server.observe
    bundle_suite.self_argv = lambda: [sys.executable, str(model)]  # the "model" step prints the model's folder

    def broken(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("probe exploded")

    server.observe = broken
    try:
        suite.serve()
    finally:
        bundle_suite.self_argv, server.observe = original_argv, original_observe
    assert not landed, "a failed serve may be another check's consequence: its line waits for the judgement"
    result = suite.outcomes["serve"]
    assert result["status"] == "failed" and "RuntimeError: probe exploded" in result["diagnosis"]
    assert "probe exploded" in Path(result["log"]).read_text()


def test_the_progress_lines_say_what_the_final_table_says(tmp_path: Path) -> None:
    """A failure that turns out to be another's consequence is shown once, as ``skipped: <cause> failed`` (the H200:
    the progress said "failed" where the table said "skipped"); a cause check's failure is shown as it lands."""
    names = ["run-conditions", "vllm-import", "pip-check"]
    facts = bundle.facts(CPU, [CheckSpec(name=n, timeout=60) for n in names])
    landed: list[dict[str, Any]] = []
    suite = bundle_suite.Suite(facts, env={}, logs=str(tmp_path), image="img", on_result=landed.append)
    unwritable = {"unwritable": [{"path": "/tmp/.cache", "blocker": "/tmp/.cache"}]}
    suite._land(suite._result("run-conditions", ("failed", "/tmp/.cache unwritable", "fix it", unwritable), 1.0, None))
    assert [r["check"] for r in landed] == ["run-conditions"]
    denied: tuple[str, str, str, dict[str, Any]] = (
        "failed",
        "PermissionError: [Errno 13] Permission denied: '/tmp/.cache/vllm'",
        "h",
        {},
    )
    suite._land(suite._result("vllm-import", denied, 1.0, None))
    suite._land(suite._result("pip-check", ("passed", "fine", "", {}), 1.0, None))
    assert [r["check"] for r in landed] == ["run-conditions", "pip-check"], "the failure waits for its judgement"
    suite.groups.run = lambda workers, run: []  # type: ignore[method-assign,assignment]
    judged = suite.run()
    assert [(r["check"], r["status"]) for r in landed] == [
        ("run-conditions", "failed"), ("pip-check", "passed"), ("vllm-import", "skipped")
    ]  # fmt: skip
    assert landed[-1] == next(r for r in judged if r["check"] == "vllm-import")
    assert landed[-1]["diagnosis"] == "run-conditions failed"


def test_a_report_that_cannot_be_written_is_refused_before_anything_runs(tmp_path: Path) -> None:
    original = standalone.load_facts
    standalone.load_facts = lambda: bundle.facts(CPU, [CheckSpec(name="triton-import", timeout=60)])
    try:
        code = standalone.main(["--json", str(tmp_path / "missing" / "r.json")])
    finally:
        standalone.load_facts = original
    assert code == standalone.EXIT_USAGE and not (tmp_path / "missing").exists()


def _canned_suite(monkeypatch: pytest.MonkeyPatch, results: list[dict[str, Any]]) -> list[str]:
    """``standalone.main`` with facts of one check and a suite whose run returns ``results``; the calls of
    ``Suite.run`` and ``Suite.stop`` are recorded in the list returned."""
    calls: list[str] = []
    monkeypatch.setattr(standalone, "load_facts", lambda: bundle.facts(CPU, [CheckSpec(name="pip-check", timeout=60)]))
    original_stop = bundle_suite.Suite.stop

    def run(self: Any) -> list[dict[str, Any]]:
        calls.append("run")
        return results

    def stop(self: Any) -> None:
        calls.append("stop")
        original_stop(self)

    monkeypatch.setattr(bundle_suite.Suite, "run", run)
    monkeypatch.setattr(bundle_suite.Suite, "stop", stop)
    return calls


def test_a_report_path_that_is_a_folder_is_refused_before_anything_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    calls = _canned_suite(monkeypatch, _results())
    for flag in ("--json", "--junit"):
        assert standalone.main([flag, str(tmp_path), "--logs", str(tmp_path / "l")]) == standalone.EXIT_USAGE
        err = capsys.readouterr().err
        assert err.count("error:") == 1 and f"cannot write {tmp_path}: it is a folder" in err, err
    assert not calls and not (tmp_path / "l").exists(), "nothing ran"


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_a_report_that_fails_to_write_at_the_end_is_named_after_the_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    calls = _canned_suite(monkeypatch, _results())
    code = standalone.main(["--junit", "/dev/full", "--json", str(tmp_path / "r.json"), "--logs", str(tmp_path)])
    out, err = capsys.readouterr()
    assert code == standalone.EXIT_USAGE and calls[0] == "run" and "stop" in calls
    assert "vllm-import" in out and "FAILED" in out, "the check results are still printed"
    assert "error: cannot write /dev/full: No space left on device" in err and "Traceback" not in err
    assert json.loads((tmp_path / "r.json").read_text())["ok"] is False, "the other report is written"


def test_a_logs_folder_that_cannot_be_written_is_refused_before_anything_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    calls = _canned_suite(monkeypatch, _results())
    afile = tmp_path / "f"
    afile.write_text("")
    for logs in ("/proc/1", str(afile)):
        assert standalone.main(["--logs", logs]) == standalone.EXIT_USAGE, logs
        err = capsys.readouterr().err
        assert err.count("error:") == 1 and f"--logs {logs}" in err and "writable folder" in err, err
    assert not calls


class _ClosedPipe(io.TextIOBase):
    """A stdout whose reader went (``| head``): every write raises BrokenPipeError; ``fileno`` is a real pipe."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def write(self, text: str) -> int:
        raise BrokenPipeError(32, "Broken pipe")

    def fileno(self) -> int:
        return self.fd


@pytest.mark.parametrize("flags", [[], ["--json", "-"], ["--facts"]])
def test_a_closed_stdout_ends_the_run_quietly_with_its_status(
    flags: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    calls = _canned_suite(monkeypatch, _results())
    read, write = os.pipe()
    try:
        with monkeypatch.context() as m:
            m.setattr(sys, "stdout", _ClosedPipe(write))
            code = standalone.main([*flags, "--logs", str(tmp_path)])
        os.close(write)
        assert os.read(read, 100) == b"", "stdout was pointed at /dev/null"
    finally:
        os.close(read)
    err = capsys.readouterr().err
    assert "Traceback" not in err
    if flags == ["--facts"]:
        assert code == standalone.EXIT_OK and not calls
    else:
        assert code == standalone.EXIT_SMOKE, "the run's own status (a check failed)"
        assert calls[0] == "run" and "stop" in calls, "the children are ended"


@pytest.mark.subprocess
def test_facts_piped_to_head_print_no_traceback(tmp_path: Path) -> None:
    path = tmp_path / "b.pyz"
    path.write_bytes(bundle.bundle_bytes(_facts()))
    line = f"{sys.executable} {path} --facts | head -1"
    proc = subprocess.run(line, shell=True, capture_output=True, text=True, timeout=60, check=False)
    assert proc.stdout == "{\n" and proc.stderr == "", proc.stderr


def test_a_sigkill_before_the_timeout_names_host_memory_and_the_kv_cache_only_for_a_cpu_engine() -> None:
    for check in ("pip-check", "torch-import", "offline-generate", "serve"):
        engine = check in ("offline-generate", "serve")
        for accelerator in ("cpu", "cuda", "rocm"):
            ours = results.verdict(check, 137, "", 60, 1.0, hint="", accelerator=accelerator)
            tools = verdict(check, 137, "", 60, 1.0, accelerator=accelerator)
            for hint in (ours[2], tools[2]):
                assert "memory" in hint, hint
                assert ("VLLM_CPU_KVCACHE_SPACE" in hint) == (accelerator == "cpu" and engine), (check, hint)
                if accelerator != "cpu":
                    assert "OOM killer" in hint and "pod" in hint and "gpu_memory_utilization" not in hint
                elif not engine:  # torch-import's kill is memory for the import, not a KV cache
                    assert "no KV cache" in hint and "OOM killer" in hint, hint


@pytest.mark.subprocess
def test_a_stopped_suite_starts_no_group_and_ends_a_child_started_late(tmp_path: Path) -> None:
    facts = bundle.facts(CPU, [CheckSpec(name="triton-import", timeout=60), CheckSpec(name="pip-check", timeout=60)])
    suite = bundle_suite.Suite(facts, env=dict(os.environ), logs=str(tmp_path), image="img", on_result=lambda r: None)
    suite.stop()
    assert suite.groups.run(1, lambda names: names) == [] and suite.children.closed
    late = suite.children.start([sys.executable, "-c", "import time; time.sleep(600)"], dict(os.environ))
    assert late.wait(30) == -signal.SIGKILL, "a child started after the kill is ended at once"
    assert late.stdout is not None
    late.stdout.close()


@pytest.mark.subprocess
def test_host_mode_names_an_interpreter_that_cannot_start(tmp_path: Path) -> None:
    facts = bundle.facts(CPU, [CheckSpec(name="triton-import", timeout=60)])
    with pytest.raises(ConfigError, match="--python '/no/python' cannot run the bundle") as caught:
        bundle.run_bundle("/no/python", facts, env={}, log_dir=tmp_path / "logs")
    assert caught.value.exit_code == ExitCode.CONFIG


def test_the_bundles_report_to_a_fifo_nobody_reads_is_refused_not_waited_on_forever(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: ``reports.write`` opened the FIFO blocking and waited for a reader forever (the tool refused after
    ``streams.FIFO_READER_WAIT_S``); one rule now (``streams.open_stream``)."""
    from matrixtool.incontainer.vllm_smoke import streams

    fifo = tmp_path / "report.json"
    os.mkfifo(fifo)
    monkeypatch.setattr(streams, "FIFO_READER_WAIT_S", 0.2)
    with pytest.raises(OSError) as raised:
        reports.write(str(fifo), "{}")
    assert raised.value.errno == errno.ENXIO and stat.S_ISFIFO(os.stat(fifo).st_mode)
