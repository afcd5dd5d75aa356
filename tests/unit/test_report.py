from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import junitparser
import pytest

from matrixtool import report
from matrixtool.build.plan import BuildResult
from matrixtool.core.errors import SmokeFailure
from matrixtool.smoke.result import CheckResult, Status


def _report() -> report.RunReport:
    build = BuildResult(
        variant="cpu",
        platform="linux/amd64",
        image="vllm-matrix/cpu:abc",
        image_id="sha256:1",
        size_bytes=4_190_000_000,
        seconds=120.4,
        log_path=None,
        cached=False,
    )
    checks = [
        CheckResult(
            variant="cpu",
            image="i",
            check="triton-import",
            status=Status.PASSED,
            diagnosis="ok",
            hint="",
            seconds=0.3,
        ),
        CheckResult(
            variant="cpu",
            image="i",
            check="model-runner",
            status=Status.FAILED,
            diagnosis="ValueError: Model Runner V2 requires Triton.",
            hint="set VLLM_USE_V2_MODEL_RUNNER=0",
            seconds=9.0,
        ),
        CheckResult(
            variant="cpu",
            image="i",
            check="offline-generate",
            status=Status.TIMEOUT,
            diagnosis="late",
            hint="h",
            seconds=5.0,
        ),
    ]
    return report.RunReport(builds=[build], checks=checks)


def test_table_names_failures_with_fix() -> None:
    text = report.table(_report())
    assert "4.19 GB" in text and "120 s" in text
    assert "cpu/model-runner: failed" in text and "fix: set VLLM_USE_V2_MODEL_RUNNER=0" in text
    assert text.splitlines()[-1].startswith("FAILED: 1 passed, 1 failed, 1 timeout, 0 skipped")


def test_json_document() -> None:
    doc = json.loads(report.to_json_text(_report()))
    assert doc["schema_version"] == 1 and doc["ok"] is False
    assert doc["builds"][0]["size_bytes"] == 4_190_000_000
    assert [c["status"] for c in doc["checks"]] == ["passed", "failed", "timeout"]


def test_junit_is_parseable_with_one_case_per_check(tmp_path: Path) -> None:
    path = tmp_path / "junit.xml"
    report.write_junit(_report(), path)
    xml = junitparser.JUnitXml.fromfile(str(path))
    suites = list(xml)
    assert [s.name for s in suites] == ["cpu"]
    cases = {c.name: c for c in suites[0]}
    assert set(cases) == {"triton-import", "model-runner", "offline-generate"}
    assert cases["triton-import"].is_passed
    failure = cases["model-runner"].result[0]
    assert isinstance(failure, junitparser.Failure)
    assert failure.message == "ValueError: Model Runner V2 requires Triton."
    assert isinstance(cases["offline-generate"].result[0], junitparser.Error)


def test_github_step_summary_and_annotations(tmp_path: Path) -> None:
    summary = tmp_path / "summary.md"
    lines = report.publish_to_github(_report(), {"GITHUB_STEP_SUMMARY": str(summary), "GITHUB_ACTIONS": "true"})
    text = summary.read_text()
    assert "| cpu | default | model-runner | ❌ failed |" in text
    assert "**fix:** set VLLM_USE_V2_MODEL_RUNNER=0" in text
    assert "`vllm-matrix/cpu:abc`" in text and "4.19 GB" in text
    assert lines == [
        "::error title=cpu/model-runner failed::ValueError: Model Runner V2 requires Triton.%0A"
        "fix: set VLLM_USE_V2_MODEL_RUNNER=0",
        "::error title=cpu/offline-generate timeout::late%0Afix: h",
    ]


def test_nothing_is_published_outside_github(tmp_path: Path) -> None:
    assert report.publish_to_github(_report(), {}) == []
    assert list(tmp_path.iterdir()) == []


def test_skipped_and_failed_variants_are_reported() -> None:
    r = report.RunReport(errors={"rocm": "package index unreachable"}, skipped={"arm64": "no linux/arm64"})
    assert not r.ok
    text = report.table(r)
    assert "rocm: error: package index unreachable" in text and "arm64: skipped: no linux/arm64" in text
    doc = report.to_json(r)
    assert doc["errors"] == {"rocm": "package index unreachable"} and doc["skipped"] == {"arm64": "no linux/arm64"}


def test_table_lists_skipped_checks_with_their_reason() -> None:
    skipped = [
        CheckResult(
            variant="cuda",
            image="i",
            check=name,
            status=Status.SKIPPED,
            diagnosis="no GPU visible (a cuda variant: run on a host with a GPU, which then gets `--gpus all`)",
            hint="",
            seconds=0.1,
        )
        for name in ("model-runner", "offline-generate")
    ]
    text = report.table(report.RunReport(builds=[], checks=skipped))
    assert "skipped (no GPU visible): cuda/model-runner, cuda/offline-generate" in text
    assert text.endswith("0 passed, 0 failed, 0 timeout, 2 skipped; checks' times summed 0 s")
    timed = report.table(report.RunReport(builds=[], checks=skipped, smoke_wall_seconds=61.4))
    assert timed.endswith("2 skipped; smoke 61 s wall (checks' times summed 0 s)")
    assert report.to_json(report.RunReport(checks=skipped, smoke_wall_seconds=61.44))["smoke_wall_seconds"] == 61.4


def test_a_runs_reports_are_written_as_one_set(tmp_path: Path) -> None:
    """--json-file and the JUnit report: both or neither (a folder where the JUnit report goes keeps the old JSON)."""
    from matrixtool.commands import _shared
    from matrixtool.core.errors import OutputError

    json_file, junit = tmp_path / "run.json", tmp_path / "junit.xml"
    json_file.write_text("old\n")
    junit.mkdir()
    flags = _shared.ReportFlags(json_file=json_file, junit=junit)
    with pytest.raises(OutputError, match=r"junit\.xml is a folder, not a regular file"):
        _shared.finish(_report(), flags, out_dir=tmp_path, env={})
    assert json_file.read_text() == "old\n"
    junit.rmdir()
    with pytest.raises(SmokeFailure):  # the report's failed check: both written first
        _shared.finish(_report(), flags, out_dir=tmp_path, env={})
    assert json.loads(json_file.read_text())["checks"] and junitparser.JUnitXml.fromfile(str(junit))


def test_a_run_report_to_a_fifo_is_written_in_place_after_the_set(tmp_path: Path) -> None:
    """--json-file (or --junit) naming a FIFO or a device (/dev/stdout) is a stream, not a file of the set: written in
    place once the set is in (a FIFO waits for its reader, as any writer to it does), never refused as exit 3."""
    import threading

    from matrixtool.commands import _shared

    fifo, junit = tmp_path / "run.fifo", tmp_path / "junit.xml"
    os.mkfifo(fifo)
    read: list[bytes] = []

    def reader() -> None:
        with open(fifo, "rb") as stream:
            read.append(stream.read())

    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    with pytest.raises(SmokeFailure):
        _shared.finish(_report(), _shared.ReportFlags(json_file=fifo, junit=junit), out_dir=tmp_path, env={})
    thread.join(60)
    assert not thread.is_alive() and json.loads(read[0])["checks"]
    assert junitparser.JUnitXml.fromfile(str(junit)) and stat.S_ISFIFO(os.lstat(fifo).st_mode)
    with pytest.raises(SmokeFailure):
        _shared.finish(_report(), _shared.ReportFlags(json_file=Path("/dev/null")), out_dir=tmp_path, env={})
    assert Path("/dev/null").is_char_device()


def _promise_checks(floor: Status, features: Status) -> list[CheckResult]:
    floor_facts = {"floor": "x86-64-v3", "qemu_model": "Haswell-noTSX", "capability": "AVX2",
                   "extension": ["_C_AVX2.abi3.so"]}  # fmt: skip
    feature_facts = {"promised": [["xgrammar", "compiles"], ["guidance", "compiles"]],
                     "left_out": {"audio": "av is not on the index"}, "missing": {}}  # fmt: skip
    said = {Status.PASSED: "ok", Status.FAILED: "illegal instruction on x86-64-v3 at the kernels step, in ...",
            Status.SKIPPED: "no static qemu-x86_64 was mounted from the host: `make engine` installs it"}  # fmt: skip
    return [
        CheckResult(variant="cpu", image="i", check="cpu-floor", status=floor, diagnosis=said[floor], hint="",
                    seconds=40.0, facts=floor_facts if floor != Status.SKIPPED else {}),
        CheckResult(variant="cpu", image="i", check="features", status=features, diagnosis=said[features], hint="",
                    seconds=9.0, facts=feature_facts),
        CheckResult(variant="cpu", image="i", check="features", status=Status.FAILED, diagnosis="x", hint="",
                    seconds=9.0, facts={}, profile="restricted"),
    ]  # fmt: skip


def test_the_report_shows_the_floor_the_image_was_proven_on_and_its_features() -> None:
    run = report.RunReport(checks=_promise_checks(Status.PASSED, Status.PASSED))
    assert (
        "cpu promises: runs on x86-64-v3 (proven under QEMU Haswell-noTSX; vLLM's _C_AVX2.abi3.so); features "
        "xgrammar, guidance (each exercised); leaves out audio"
    ) in report.table(run)
    said = report.to_json(run)["promises"]
    assert said == {
        "cpu": {
            "image": "i",
            "cpu_floor": {"status": "passed", "proven": True, "floor": "x86-64-v3", "qemu_model": "Haswell-noTSX",
                          "capability": "AVX2", "extension": ["_C_AVX2.abi3.so"]},
            "features": {"status": "passed", "kept": True, "promised": ["xgrammar", "guidance"],
                         "left_out": {"audio": "av is not on the index"}, "missing": {}},
        }
    }  # fmt: skip
    assert "cpu promises: runs on x86-64-v3" in report.step_summary(run)


def test_a_floor_not_proven_is_said_so_with_why() -> None:
    skipped = report.RunReport(checks=_promise_checks(Status.SKIPPED, Status.FAILED))
    text = report.table(skipped)
    assert "cpu promises: CPU floor NOT proven (skipped: no static qemu-x86_64 was mounted" in text
    assert "features xgrammar, guidance (NOT kept, failed: see features)" in text
    floor = report.to_json(skipped)["promises"]["cpu"]["cpu_floor"]
    assert floor["proven"] is False and floor["reason"].startswith("no static qemu-x86_64")
    assert "promises" not in report.table(report.RunReport(checks=_report().checks))
    assert report.to_json(report.RunReport(checks=_report().checks))["promises"] == {}
