"""A signal during start-up (before a command runs: the imports, click parsing flags) exits 130 (SIGINT) or 143
(SIGTERM) with one line, never a KeyboardInterrupt traceback (``interrupts.quiet_start``, the first line of
``matrixtool/__main__.py``)."""

from __future__ import annotations

import ast
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import matrixtool

pytestmark = pytest.mark.subprocess

TOOLS = Path(matrixtool.__file__).resolve().parent.parent
ENV = {**os.environ, "PYTHONPATH": str(TOOLS)}


def test_the_entry_points_first_statement_is_quiet_start() -> None:
    """Before any other import (click and docker take about half a second): the window a signal traces back in."""
    tree = ast.parse((TOOLS / "matrixtool" / "__main__.py").read_text(encoding="utf-8"))
    body = [node for node in tree.body if not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant))]
    assert ast.unparse(body[0]) == "from matrixtool.core.interrupts import quiet_start"
    assert ast.unparse(body[1]) == "quiet_start()"


def test_quiet_start_imports_nothing_heavy() -> None:
    code = "import sys; from matrixtool.core.interrupts import quiet_start; print(sorted(sys.modules))"
    loaded = subprocess.run([sys.executable, "-c", code], env=ENV, capture_output=True, text=True, check=True).stdout
    assert "'click'" not in loaded and "'docker'" not in loaded and "'yaml'" not in loaded


def _default_signals() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


@pytest.mark.parametrize(("signum", "code", "name"), [(signal.SIGINT, 130, "SIGINT"), (signal.SIGTERM, 143, "SIGTERM")])
def test_a_signal_during_start_up_exits_quietly(signum: int, code: int, name: str) -> None:
    """The signal is sent once click is imported (``-X importtime`` prints each import as it ends), while the rest of
    the start-up still loads: after ``quiet_start``, before the command."""
    with subprocess.Popen(
        [sys.executable, "-X", "importtime", "-m", "matrixtool", "--help"],
        env=ENV,
        # As a terminal's Ctrl-C meets it: a run started in the background of a non-interactive shell (CI's, here)
        # inherits SIGINT ignored, which the child would keep (a signal ignored at start stays ignored).
        preexec_fn=_default_signals,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:
        assert proc.stderr is not None
        seen = []
        for line in proc.stderr:
            seen.append(line)
            if line.split("|")[-1].strip() == "click":
                proc.send_signal(signum)
                break
        rest = proc.stderr.read()
        assert proc.wait(60) == code, "".join(seen[-5:]) + rest
    assert "Traceback" not in rest and "KeyboardInterrupt" not in rest
    assert f"error: interrupted by {name} before the command started; nothing was run" in rest


def test_a_signal_ignored_at_start_stays_ignored() -> None:
    """nohup, a background job of a script: SIGINT was ignored before the tool started."""
    code = (
        "import os, signal; from matrixtool.core.interrupts import quiet_start; quiet_start(); "
        "os.kill(os.getpid(), signal.SIGINT); print('still here')"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        env=ENV,
        capture_output=True,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    assert proc.returncode == 0 and proc.stdout == "still here\n", proc.stderr
