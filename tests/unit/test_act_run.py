"""tools/act's reading (act_log.py) of act's `--json --verbose` log (the record shapes act 0.2.89 writes) and its check
of job outputs (act_proofs.py): a misspelt output name fails naming the workflow, the job and the step."""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.conftest import REPO_ROOT

ACT = REPO_ROOT / "tools" / "act"


def _load(name: str) -> ModuleType:
    """A module of tools/act (a folder beside the script run.py, not a package: its modules import each other by
    their own names, as the script does)."""
    if str(ACT) not in sys.path:
        sys.path.insert(0, str(ACT))
    return importlib.import_module(name)


act_log = _load("act_log")
act_proofs = _load("act_proofs")

MATRIX_JOB = {"job": "images/matrix             ", "jobID": "matrix", "matrix": {}, "level": "info"}
WORKFLOW = """
name: images
on: push
jobs:
  matrix:
    runs-on: ubuntu-24.04
    outputs:
      matrix: ${{ steps.matrix.outputs.MATRIX_OUTPUT }}
    steps:
      - name: Print the matrix
        id: matrix
        run: echo "matrix={}" >> "$GITHUB_OUTPUT"
  manifest:
    needs: matrix
    if: github.event_name == 'push'
    runs-on: ubuntu-24.04
    steps:
      - run: true
"""


def _log() -> list[str]:
    step = {**MATRIX_JOB, "stage": "Main", "step": "Print the matrix", "stepID": ["matrix"]}
    records: list[dict[str, Any]] = [
        {**step, "msg": "⭐ Run Main Print the matrix"},
        {**step, "msg": "printing\n", "raw_output": True},
        {**step, "msg": "  ✅  Success - Main Print the matrix", "stepResult": "success"},
        {**step, "msg": "  ⚙  ::set-output:: matrix={}", "command": "set-output", "name": "matrix", "arg": "{}"},
        {**step, "msg": "  ⚙  Summary - | a |", "command": "summary", "content": "| a |\n"},
        {**MATRIX_JOB, "msg": "🏁  Job succeeded", "jobResult": "success"},
        {"job": "images/manifest", "jobID": "manifest", "matrix": {}, "level": "debug", "jobResult": "skipped",
         "msg": "Skipping job 'manifest' due to 'github.event_name == 'push''"},
        {"level": "error", "msg": "Error while evaluating matrix: Invalid JSON"},
    ]  # fmt: skip
    return [json.dumps(r) + "\n" for r in records] + ["not json\n"]


def test_the_log_gives_jobs_steps_outputs_summaries_skips_and_errors() -> None:
    run = act_log.parse_log("push", _log(), 1.0, 0)
    job = run.one("images", "matrix")
    assert job.result == "success" and job.label == "images/matrix"
    assert [(s.name, s.result) for s in job.steps] == [("Print the matrix", "success")]
    assert job.text("Print the matrix") == "printing\n"
    assert job.outputs == {"matrix.matrix": "{}"} and job.summary == "| a |\n"
    assert run.skipped == {"images/manifest": "github.event_name == 'push'"}
    assert run.errors == ["act: Error while evaluating matrix: Invalid JSON"]


@pytest.mark.parametrize("name", ["matrix", "matrices"])
def test_a_job_output_must_name_an_output_its_step_set(tmp_path: Path, name: str) -> None:
    flows = tmp_path / ".github" / "workflows"
    flows.mkdir(parents=True)
    (flows / "images.yml").write_text(WORKFLOW.replace("MATRIX_OUTPUT", name))
    run = act_log.parse_log("push", _log(), 1.0, 0)
    if name == "matrix":
        act_proofs.check_outputs(run, tmp_path)
        return
    with pytest.raises(act_log.Failed) as failed:
        act_proofs.check_outputs(run, tmp_path)
    assert str(failed.value) == (
        "push: images/matrix: job output 'matrix' reads steps.matrix.outputs.matrices, which step 'Print the matrix' "
        "never set (it set: matrix)"
    )


def test_a_failed_step_is_named_with_the_tools_own_diagnosis() -> None:
    image = {"job": "images/cpu (linux/amd64)", "jobID": "image", "matrix": {"variant": "cpu"}, "level": "info"}
    step = {**image, "stage": "Main", "step": "Build and smoke-test", "stepID": ["3"]}
    row = "| cpu | default | torch-family | ⏱️ timeout | 1.0 s | no result within 1 s<br>**fix:** raise it |"
    records: list[dict[str, Any]] = [
        {**step, "msg": "⭐ Run Main Build and smoke-test"},
        {**step, "msg": "checks ran\n", "raw_output": True},
        {**step, "msg": "::error", "command": "error", "arg": "no result within 1 s%0Afix: raise it"},
        {
            **step,
            "msg": "summary",
            "command": "summary",
            "content": f"| variant | profile |\n{row}\n| cpu | x | ✅ |\n",
        },
        {**step, "msg": "  ❌  Failure - Main Build and smoke-test", "stepResult": "failure"},
        {**image, "msg": "🏁  Job failed", "jobResult": "failure"},
    ]
    lines = [json.dumps(r) + "\n" for r in records] + ["Error: Job 'cpu (linux/amd64)' failed\n"]
    run = act_log.parse_log("pull_request", lines, 1.0, 1)
    (message,) = act_log.failures(run, {})
    assert message.splitlines() == [
        "pull_request: images/image \"cpu (linux/amd64)\": step 'Build and smoke-test' failed",
        "    Build and smoke-test: no result within 1 s%0Afix: raise it",
        f"    summary: {row}",
        "    checks ran",
    ]
    assert run.errors == ["act: Error: Job 'cpu (linux/amd64)' failed"]
