"""act's ``--json --verbose`` log read into what a run did (its jobs, their steps, outputs, summaries and errors, the
jobs act skipped with their ``if:``), and its failed steps named; the checks' ``Failed``."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any


class Failed(Exception):
    """A check failed: the message names the workflow, job and step."""


@dataclass
class Step:
    name: str
    result: str
    output: list[str] = field(default_factory=list)


@dataclass
class Job:
    """One run of a job (one matrix entry), from act's JSON log."""

    workflow: str
    job_id: str
    matrix: dict[str, Any]
    result: str = ""
    steps: list[Step] = field(default_factory=list)
    outputs: dict[str, str] = field(default_factory=dict)
    summary: str = ""
    errors: list[str] = field(default_factory=list)

    name: str = ""

    @property
    def label(self) -> str:
        """workflow/job id, and the job's name where it differs (a matrix job's: `images/image "cpu (linux/amd64)"`)."""
        shown = self.name.split("/", 1)[-1]
        return f"{self.workflow}/{self.job_id}" + (f' "{shown}"' if shown and shown != self.job_id else "")

    def step(self, name: str) -> Step:
        found = [s for s in self.steps if s.name == name]
        if not found:
            raise Failed(f"{self.label}: no step {name!r} ran (steps: {', '.join(s.name for s in self.steps)})")
        return found[-1]

    def text(self, name: str) -> str:
        return "".join(self.step(name).output)


@dataclass
class Run:
    """What one act invocation did: the jobs that ran, the jobs act skipped (with the `if:` it gave)."""

    event: str
    jobs: list[Job]
    skipped: dict[str, str]
    seconds: float
    exit_code: int
    errors: list[str] = field(default_factory=list)

    def of(self, workflow: str, job_id: str) -> list[Job]:
        return [j for j in self.jobs if j.workflow == workflow and j.job_id == job_id]

    def one(self, workflow: str, job_id: str) -> Job:
        found = self.of(workflow, job_id)
        if len(found) != 1:
            raise Failed(f"{self.event}: expected one run of {workflow}/{job_id}, got {len(found)}")
        return found[0]


def parse_log(event: str, lines: list[str], seconds: float, exit_code: int) -> Run:
    """The jobs, steps, outputs, summaries and skips of act's ``--json -v`` log."""
    jobs: dict[tuple[str, str], Job] = {}
    skipped: dict[str, str] = {}
    errors: list[str] = []
    for line in lines:
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            # act's own refusals (a bad flag, a workflow it cannot read) are plain text: "Error: ...".
            if line.startswith("Error: "):
                errors.append(f"act: {line.strip()}")
            continue
        if not isinstance(rec, dict):
            continue
        if rec.get("level") in ("error", "fatal"):
            errors.append(f"{rec.get('job', 'act')}: {rec.get('msg', '')}")
        if "job" not in rec or "jobID" not in rec:
            continue
        workflow = str(rec["job"]).split("/", 1)[0]
        if rec.get("jobResult") == "skipped":
            m = re.match(r"Skipping job '.*?' due to '(.*)'$", str(rec.get("msg", "")), re.S)
            skipped[f"{workflow}/{rec['jobID']}"] = m.group(1) if m else str(rec.get("msg"))
            continue
        key = (str(rec["job"]), json.dumps(rec.get("matrix", {}), sort_keys=True))
        job = jobs.setdefault(
            key, Job(workflow, str(rec["jobID"]), dict(rec.get("matrix") or {}), name=str(rec["job"]).rstrip())
        )
        step_name = str(rec.get("step", ""))
        if rec.get("jobResult"):
            job.result = str(rec["jobResult"])
        elif rec.get("command") == "set-output" and rec.get("stage") == "Main" and "stepID" in rec:
            job.outputs[f"{rec['stepID'][0]}.{rec.get('name')}"] = str(rec.get("arg", ""))
        elif rec.get("command") == "summary":
            job.summary += str(rec.get("content", ""))
        elif rec.get("command") == "error":
            job.errors.append(f"{step_name}: {rec.get('arg', rec.get('msg', ''))}")
        elif rec.get("stage") == "Main" and step_name:
            # A composite action's own steps carry the action's step name and a longer stepID.
            top = len(rec.get("stepID", [])) == 1
            msg = str(rec.get("msg", ""))
            if top and msg.startswith("⭐ Run Main"):
                job.steps.append(Step(step_name, ""))
            elif top and rec.get("stepResult") and job.steps and job.steps[-1].name == step_name:
                job.steps[-1].result = str(rec["stepResult"])
            elif top and rec.get("stepResult") == "skipped":
                job.steps.append(Step(step_name, "skipped"))
            elif rec.get("raw_output") and job.steps:
                job.steps[-1].output.append(msg)
    return Run(event, list(jobs.values()), skipped, seconds, exit_code, errors)


def failures(run: Run, allowed: dict[str, tuple[str, str]]) -> list[str]:
    """Each failed step as `event: workflow/job (matrix): step 'name' failed` with its last output lines, less
    those ``allowed`` names (workflow/job -> the step and a text its output must hold: an expected stop)."""
    out: list[str] = []
    for job in run.jobs:
        for step in job.steps:
            stop = allowed.get(f"{job.workflow}/{job.job_id}")
            expected = stop is not None and stop[0] == step.name and stop[1] in "".join(step.output)
            if step.result == "failure" and not expected:
                tail = "".join(step.output).rstrip().splitlines()[-15:]
                # The tool's own diagnosis, as GitHub shows it: the step's ::error:: annotations and the rows of
                # the job summary that did not pass (tools/matrix run writes both).
                errors = [e for e in job.errors if e.startswith(step.name)]
                rows = [
                    f"summary: {r}" for r in job.summary.splitlines() if r.startswith("| ") and ("❌" in r or "⏱️" in r)
                ]
                out.append(
                    f"{run.event}: {job.label}: step {step.name!r} failed\n    " + "\n    ".join(errors + rows + tail)
                )
    return out
