"""The host runner (``test --host``) reads a process's output bounded, keeps stdout before stderr, and kills the
process at its deadline."""

from __future__ import annotations

import os
import sys
import time

from matrixtool.core.bounded import DEFAULT_LIMIT
from matrixtool.smoke.runners import HostRunner


def runner() -> HostRunner:
    return HostRunner(sys.executable, {"PATH": os.environ["PATH"]})


def test_a_huge_output_is_bounded_and_stdout_comes_before_stderr() -> None:
    code = "import sys; sys.stderr.write('err\\r\\n'); sys.stdout.write('x' * 50_000_000 + 'END\\n'); sys.exit(4)"
    exit_code, out = runner().exec([sys.executable, "-c", code], {"A": "1"}, 120)
    assert exit_code == 4
    assert len(out) < DEFAULT_LIMIT.head_bytes + DEFAULT_LIMIT.tail_bytes + 100
    assert "bytes of output left out" in out and out.endswith("END\nerr\n"), "universal newlines, as text mode"


def test_a_process_past_its_deadline_is_killed_and_its_stdout_kept() -> None:
    started = time.monotonic()
    code = "import sys, time; print('started', flush=True); time.sleep(600)"
    assert runner().exec([sys.executable, "-c", code], {}, 2) == (None, "started\n")
    assert time.monotonic() - started < 10
