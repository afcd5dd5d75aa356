"""``make bench``'s table (tools/bench.py, pure parts): what ran beside what, read from the tool's own
``[VARIANT] profiles: ...`` lines, and the issue's targets against the ratios of the same run."""

from __future__ import annotations

import importlib
import sys
from typing import Any

from tests.conftest import REPO_ROOT


def bench() -> Any:
    sys.path.insert(0, str(REPO_ROOT / "tools"))
    try:
        return importlib.import_module("bench")
    finally:
        sys.path.remove(str(REPO_ROOT / "tools"))


STDERR = """[cpu] smoke checks in img: serve
[cpu] profiles: default alone (2 cores (sched_getaffinity), 20.0 GiB available (/proc/meminfo MemAvailable)); \
each run's groups 2 at a time beside its serve step
[cpu] profile default (shm 1g): serve
[cpu] serve: passed (80.0 s) ready
"""


def test_beside_is_the_tools_profiles_line() -> None:
    assert bench().beside(STDERR) == (
        "default alone (2 cores (sched_getaffinity), 20.0 GiB available (/proc/meminfo MemAvailable)); "
        "each run's groups 2 at a time beside its serve step"
    )
    assert bench().beside("[cpu] serve: passed\n") == ""


def test_the_table_says_what_ran_beside_what_and_the_targets() -> None:
    naive = {
        "eager_seconds": 35.0, "compiled_seconds": 64.0, "pair_seconds": 99.0, "server_seconds": 68.0,
        "warm_server_seconds": 35.0, "cold_warm_servers_seconds": 103.0, "trio_seconds": 167.0,
    }  # fmt: skip
    module = bench()
    figures = {"server": 68.0, "cold_warm": 103.0, "pair": 99.0, "trio": 167.0}
    result = {
        "naive": naive,
        "full": module._suite_figures(100.0, {"ok": True, "checks": []}, figures, "default alone (...)"),
        "quick": module._suite_figures(40.0, {"ok": True, "checks": []}, figures, ""),
    }
    text = module.suites_table(result)
    assert "full suite: default alone (...)" in text and "quick suite: ?" in text
    assert "naive parts: each alone, one after the other" in text
    assert "full suite <= 1.00 x cold+warm (now 0.97), quick suite <= 0.25 x naive trio (now 0.24)" in text
    assert result["full"]["beside"] == "default alone (...)" and result["full"]["vs_naive_cold_warm"] == 0.97
