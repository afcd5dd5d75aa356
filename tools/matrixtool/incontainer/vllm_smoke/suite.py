"""The bundle's suite: the variant's plan (``BUNDLE_FACTS``: the groups in start order, each check's timeout, the
serve step) run in this environment. Each group runs in a child interpreter of this archive in a process group of
its own, killed past its checks' timeouts summed (exit 124, as coreutils ``timeout`` reports it); ``serve`` runs
last, as a child ``vllm serve`` process (``server``), on the model the ``tiny-model`` check made and judged
against offline-generate's eager tokens of the same run (``serving.judge``).

Standard library only, Python >= 3.9."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import traceback
import zipimport
from typing import Any, Callable, Dict, List, Mapping, Sequence

from . import compilecache, rootcause, server, serving
from .bounded import BoundedOutput
from .catalogue import DECLARATIONS
from .children import KILL_GRACE, PACKAGE, Children, Parallel, kill_group
from .errortext import last_error_line
from .gpuprobe import attached_gpu
from .reports import DEFAULT_PROFILE
from .results import (
    TIMEOUT_EXIT,
    group_timeout,
    machine_load,
    need_skip,
    parsed_result,
    split_logs,
    unhidden,
    verdict,
)

MODEL_MARK = "MATRIX-MODEL "
# A result as the reports hold it: variant, profile, image, check, status, diagnosis, hint, seconds, facts, log,
# suite.
Result = Dict[str, Any]


def self_argv() -> list[str]:
    """How a child interpreter runs this package: ``[python, ARCHIVE]`` from a zipapp, else ``python -c`` with
    the folder holding the package on ``sys.path``."""
    loader = globals().get("__loader__")
    if isinstance(loader, zipimport.zipimporter):
        return [sys.executable, str(loader.archive)]
    parent = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    boot = f"import sys; sys.path.insert(0, sys.argv.pop(1)); from {PACKAGE}.runner import entry; sys.exit(entry())"
    return [sys.executable, "-c", boot, parent]


def run_group(
    children: Children,
    names: Sequence[str],
    params: Mapping[str, Any],
    timeouts: Mapping[str, int],
    env: Mapping[str, str],
) -> tuple[int, str, float]:
    """Run the checks ``names`` in one child interpreter: (exit status or 124 past their timeouts summed, output,
    wall seconds). Past the timeout the child's group gets SIGTERM, then SIGKILL ``KILL_GRACE`` s later."""
    limit = sum(int(timeouts[n]) for n in names)
    argv = [*self_argv(), "run", ",".join(names), json.dumps(dict(params, timeouts={n: timeouts[n] for n in names}))]
    started = time.monotonic()
    proc = children.start(argv, env)
    assert proc.stdout is not None  # started with stdout=PIPE
    kept = BoundedOutput()
    reader = threading.Thread(target=kept.pump, args=(proc.stdout,), daemon=True)
    reader.start()
    try:
        code = proc.wait(limit)
    except subprocess.TimeoutExpired:
        kill_group(proc.pid, signal.SIGTERM)
        try:
            proc.wait(KILL_GRACE)
        except subprocess.TimeoutExpired:
            kill_group(proc.pid)
            proc.wait()
        code = TIMEOUT_EXIT
    kill_group(proc.pid)  # what the group left behind
    reader.join(30)
    proc.stdout.close()
    children.done(proc)
    output = kept.text().replace("\r\n", "\n").replace("\r", "\n")
    return code, output, time.monotonic() - started


def declared_hint(check: str) -> str:
    """The hint ``check`` declares, "" for a check this package does not know."""
    return DECLARATIONS[check].hint if check in DECLARATIONS else ""


class Suite:
    """One run of the bundle's plan (``facts``) in this environment: ``env`` for every child, logs to ``logs``,
    ``image`` naming this environment in the results, ``on_result`` seeing each result as it lands."""

    def __init__(
        self,
        facts: Mapping[str, Any],
        *,
        env: Mapping[str, str],
        logs: str,
        image: str,
        on_result: Callable[[Result], None],
    ) -> None:
        self.facts, self.env, self.logs, self.image, self.on_result = facts, env, logs, image, on_result
        self.children = Children()
        self.lock = threading.Lock()
        self.outcomes: dict[str, Result] = {}  # check -> result dict (the report's fields)
        self.timeouts = {c["name"]: int(c["timeout"]) for c in facts["checks"]}
        self.groups: Parallel[List[str]] = Parallel([list(g) for g in facts["groups"]])

    def stop(self) -> None:
        """End the run: no worker starts another group, then every child ends (``Children.kill_all``), servers
        included."""
        self.groups.stop()
        self.children.kill_all()
        for running in list(server.ACTIVE):
            running.close()

    def _result(
        self, check: str, verdict: tuple[str, str, str, Mapping[str, Any]], seconds: float, log: str | None
    ) -> Result:
        status, diagnosis, hint, facts = verdict
        return {
            "variant": self.facts["variant"],
            "profile": DEFAULT_PROFILE,
            "image": self.image,
            "check": check,
            "status": status,
            "diagnosis": diagnosis,
            "hint": "" if status in ("passed", "skipped") else hint,
            "seconds": seconds,
            "facts": facts,
            "log": log,
            "suite": self.facts["params"].get("suite", "full"),
        }

    def _land(self, result: Result) -> None:
        with self.lock:
            self.outcomes[result["check"]] = result
            if not rootcause.held_back(result["check"], result["status"]):
                self.on_result(result)

    def group(self, names: Sequence[str]) -> None:
        """Run the group ``names`` and land each of its results (logs written, a timeout named as the group's)."""
        code, output, wall = run_group(self.children, names, self.facts["params"], self.timeouts, self.env)
        load = machine_load()  # the machine when the group ended: a timeout says loaded or hung
        parts = split_logs(output)
        limit = sum(self.timeouts[n] for n in names)
        accelerator = str(self.facts["params"].get("accelerator", "cpu"))
        for name in names:
            log = os.path.join(self.logs, f"{self.facts['variant']}.{name}.log")
            with open(log, "w", encoding="utf-8") as f:
                f.write(parts.get(name, output))
            status, diagnosis, hint, facts = verdict(
                name, code, output, limit, wall, hint=declared_hint(name), accelerator=accelerator
            )
            if status == "timeout":
                diagnosis, hint, facts = group_timeout(names, limit, wall, load, facts)
            try:
                parsed = parsed_result(output, name)
            except ValueError:
                parsed = None
            seconds = float(parsed.get("seconds", wall)) if parsed else wall
            self._land(self._result(name, (status, diagnosis, hint, facts), seconds, log))

    def _model(self, log: str, started: float) -> str | None:
        """The tiny model's folder for the server, made (once, as tiny-model made it) in a child; None, with the
        failure landed, where making it fails."""
        proc = self.children.start([*self_argv(), "model"], self.env)
        try:
            out, _ = proc.communicate(timeout=600)
        except subprocess.TimeoutExpired:
            kill_group(proc.pid)
            out, _ = proc.communicate()
        self.children.done(proc)
        text = out.decode("utf-8", "replace")
        model = next((line[len(MODEL_MARK) :].strip() for line in text.splitlines() if line.startswith(MODEL_MARK)), "")
        if model:
            return model
        with open(log, "w", encoding="utf-8") as f:
            f.write(text)
        tail = " | ".join(text.strip().splitlines()[-2:])
        why = f"making the tiny model for the server fails (exit {proc.returncode}): {tail}"
        seconds = round(time.monotonic() - started, 1)
        self._land(self._result(serving.CHECK, ("failed", why, "read the log", {}), seconds, log))
        return None

    def serve(self) -> None:
        """The serve step: skipped where its need (tiny-model) did not pass or the variant's GPU is not here,
        else the model (``_model``), the server (``server.observe``) and its judgement (``serving.judge``)."""
        spec = dict(self.facts["serve"])
        started = time.monotonic()
        log = os.path.join(self.logs, f"{self.facts['variant']}.{serving.CHECK}.log")
        skipped = need_skip("tiny-model", self.outcomes)
        if skipped is not None:
            return self._land(self._result(serving.CHECK, ("skipped", skipped[0], "", skipped[1]), 0.0, None))
        accelerator = self.facts["params"].get("accelerator", "cpu")
        if accelerator != "cpu" and attached_gpu(accelerator) is None:
            why = f"no GPU visible: the server of a {accelerator} variant needs one"
            return self._land(self._result(serving.CHECK, ("skipped", why, "", {}), 0.0, None))
        model = self._model(log, started)
        if model is None:
            return None
        spec["model"] = model
        # The warm start must be ready before the serve check's own timeout, as in containers.
        limit = self.timeouts.get(serving.CHECK, int(spec["ready_timeout_s"]))
        deadline = started + limit - compilecache.WARM_MARGIN_S
        try:
            seen = server.observe(spec, log, self.env, deadline=deadline)
            judged = serving.judge(dict(seen, env=self.env), spec, serving.reference_tokens(self.outcomes))
        except Exception:  # the step fails with it, as a crashed check does; the report is still written
            text = traceback.format_exc()
            with open(log, "a", encoding="utf-8") as f:
                f.write("\n" + text)
            judged = ("failed", f"the check crashed: {last_error_line(text)}", "read the log", {})
        self._land(self._result(serving.CHECK, judged, round(time.monotonic() - started, 1), log))
        return None

    def run(self) -> list[Result]:
        """Every group (up to this machine's CPUs at once, longest first as planned), then serve; the results in
        the plan's report order, a failure that follows from another's as its consequence (``rootcause``)."""
        self.groups.run(os.cpu_count() or 1, self.group)
        names = [c["name"] for c in self.facts["checks"]]
        if serving.CHECK in names:
            self.serve()
        # Failures that follow from another group's, as the host reports them for a container (one definition).
        # In the host's order: a hidden skip made a failure first, then consequences.
        judged = rootcause.consequences([self._unhidden(self.outcomes[n], names) for n in names if n in self.outcomes])
        for result in judged:  # the lines held back, as the final table has them
            if rootcause.held_back(result["check"], self.outcomes[result["check"]]["status"]):
                self.on_result(result)
        return judged

    @staticmethod
    def _unhidden(result: Result, names: Sequence[str]) -> Result:
        """``result``, or the failure its skip stands for (``results.unhidden``)."""
        found = unhidden(result["status"], result.get("facts") or {}, names, declared_hint)
        if found is None:
            return result
        return dict(result, status="failed", diagnosis=found[0], hint=found[1])
