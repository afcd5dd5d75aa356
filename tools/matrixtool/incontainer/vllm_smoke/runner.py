"""The in-image entry: ``python3 smoke.pyz run CHECK1,CHECK2 PARAMS_JSON`` runs the checks in this interpreter.

Each check first gets its ``needs`` (evaluated once per interpreter, unreported): a need that did not pass makes
it report ``skipped: <need> failed`` instead of its own diagnosis (one root cause, one failure). Each check's
output starts with a ``MATRIX-BEGIN <check>`` line and ends with its ``MATRIX-RESULT`` line (``common.result_line``).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
import traceback
from typing import Any, Dict, Sequence

from .catalogue import DECLARATIONS
from .conditions import explain
from .errortext import last_error_line
from .results import BEGIN_MARK, machine_load, need_skip, result, result_line, timeout_cause


class CheckTimeout(BaseException):
    """Raised in the main thread when a check runs past its own timeout (a BaseException: checks catch Exception)."""


_HERE = os.path.dirname(os.path.abspath(__file__)) + os.sep  # this package's folder (in a zipapp too)


def _frame_words(frame: Any) -> str:
    """Where the main thread was when the alarm fired: its innermost frame, and the innermost of this package's
    frames (the check's own line) where that is another, each as ``file:line in function`` (the file's last two
    path parts); "" where none."""

    def words(f: Any) -> str:
        return f"{'/'.join(f.f_code.co_filename.split('/')[-2:])}:{f.f_lineno} in {f.f_code.co_name}"

    ours, at = None, frame
    while at is not None and ours is None:
        ours = at if at.f_code.co_filename.startswith(_HERE) else None
        at = at.f_back
    if frame is None:
        return ""
    return words(frame) + (f", called from {words(ours)}" if ours is not None and ours is not frame else "")


class _deadline:
    """``with _deadline(seconds)``: raise CheckTimeout in the main thread after ``seconds`` (SIGALRM; 0 or no
    main thread: no limit). The checks of a group share an interpreter, so each keeps its own timeout here; the
    host's ``timeout`` around the group (the sum) is the backstop for a check stuck where no signal reaches."""

    def __init__(self, seconds: int) -> None:
        self.seconds = seconds if threading.current_thread() is threading.main_thread() else 0

    def _fire(self, signum: int, frame: Any) -> None:
        # Raised where the check happens to be: inside a __del__ Python only prints it ("Exception ignored", seen
        # in regex's Group.__del__ during vLLM's start-up), so the alarm fires again each second until it lands.
        signal.alarm(1)
        raise CheckTimeout(_frame_words(frame))

    def __enter__(self) -> _deadline:
        if self.seconds > 0:
            self.previous = signal.signal(signal.SIGALRM, self._fire)
            signal.alarm(self.seconds)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.seconds > 0:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, self.previous)


class Session:
    """The checks of one interpreter and the outcomes of those already run (needs included)."""

    def __init__(self, params: Dict[str, Any]) -> None:
        self.params = params
        self.outcomes: Dict[str, Dict[str, Any]] = {}

    def outcome(self, name: str) -> Dict[str, Any]:
        """Run check ``name`` once in this interpreter (its needs first); its result dict."""
        if name in self.outcomes:
            return self.outcomes[name]
        declaration = DECLARATIONS[name]
        for need in declaration.needs:
            self.outcome(need)
            skipped = need_skip(need, self.outcomes)
            if skipped is not None:
                self.outcomes[name] = dict(result("skipped", skipped[0], **skipped[1]), seconds=0.0)
                return self.outcomes[name]
        started = time.monotonic()
        limit = int(self.params.get("timeouts", {}).get(name) or 0)
        try:
            with _deadline(limit):
                assert declaration.function is not None  # every declared check has its function
                outcome = declaration.function(self.params)
        except CheckTimeout as exc:
            seconds = time.monotonic() - started
            where = str(exc.args[0]) if exc.args else ""
            outcome = result("timeout", *timeout_cause(f"its timeout of {limit} s", seconds, machine_load(), where))
        except Exception:
            text = traceback.format_exc()
            sys.stdout.write(text)
            outcome = result("failed", f"the check crashed: {last_error_line(text)}", None)
            found = explain(text)
            if found:
                outcome["diagnosis"] += f" [run condition: {found[0]}]"
                outcome["hint"] = found[1]
        else:
            found = explain(outcome.get("diagnosis", "")) if outcome.get("status") == "failed" else None
            if found and name != "run-conditions":
                outcome["diagnosis"] += f" [run condition: {found[0]}]"
                outcome["hint"] = found[1]
        outcome = self._rooted(name, outcome)
        outcome["seconds"] = round(time.monotonic() - started, 2)
        self.outcomes[name] = outcome
        return outcome

    def _rooted(self, name: str, outcome: Dict[str, Any]) -> Dict[str, Any]:
        """``outcome``, or where it is a skip for a check it uses that already ran here and did not pass (facts
        ``failed_need``: no-fake-triton without ``import vllm``), the skip ``need_skip`` gives: the root check that
        failed (that check's own need where it was skipped for one), its diagnosis and hint. A consequence names
        its root, never the consequence between."""
        facts = outcome.get("facts") or {}
        need = facts.get("failed_need")
        if outcome.get("status") != "skipped" or not need or need == name or need not in self.outcomes:
            return outcome
        found = need_skip(str(need), self.outcomes)
        if found is None:
            return outcome
        return dict(result("skipped", found[0], None, **{**facts, **found[1]}))


def run(names: Sequence[str], params: Dict[str, Any]) -> int:
    """Run ``names`` in order in this interpreter, printing one result line per check; 0, or 2 for unknown names."""
    unknown = [n for n in names if n not in DECLARATIONS]
    if unknown:
        print(f"unknown check(s) {', '.join(unknown)}; known: {', '.join(DECLARATIONS)}", file=sys.stderr)
        return 2
    session = Session(params)
    for name in names:
        _marker_line(BEGIN_MARK + name)
        _marker_line(result_line(name, session.outcome(name)))
    return 0


def _marker_line(text: str) -> None:
    """Print a marker line so that it starts a line of the output the host reads, stdout and stderr merged by the
    engine: a progress bar on stderr (tqdm's "Writing model shards: 100%|...|", ended by a carriage return only)
    can leave its line open just before it, and the host reads a marker only at the start of a line."""
    sys.stderr.flush()
    sys.stdout.write("\n" + text + "\n")
    sys.stdout.flush()


def main(argv: Sequence[str]) -> int:
    """``[prog, "run", "A,B", PARAMS_JSON]``, or ``[prog, "A", PARAMS_JSON]`` for one check; the exit status.

    ``[prog, "catalogue"]`` prints the declarations as JSON; ``[prog, "model"]`` makes the tiny model (once) and
    prints ``MATRIX-MODEL <folder>``; ``[prog]`` or ``[prog, --flag ...]`` is a bundle's whole suite
    (``standalone``)."""
    args = list(argv[1:])
    if not args or args[0].startswith("-"):
        from .standalone import main as suite

        return suite(args)
    if args[0] == "catalogue":
        print(json.dumps({n: d.as_dict() for n, d in DECLARATIONS.items()}, indent=1))
        return 0
    if args[0] == "model":
        from .tinymodel import ensure_model

        print("MATRIX-MODEL " + ensure_model(), flush=True)
        return 0
    if args and args[0] == "run":
        args = args[1:]
    if not args:
        print("usage: smoke.pyz run CHECK[,CHECK...] [PARAMS_JSON]", file=sys.stderr)
        return 2
    params = json.loads(args[1]) if len(args) > 1 else {}
    return run([n for n in args[0].split(",") if n], params)


def entry() -> int:
    """The console entry of the zipapp (``__main__``)."""
    return main(sys.argv)
