"""A timeout judged by the machine it ran on (``results.timeout_cause``): short of CPU on a loaded machine, hung
with cores to spare; each with the fix of its cause, never the check's declared hint (which fixes what the check
looks for). The host's group timeout, the bundle's and a check's own alarm use the one rule."""

from __future__ import annotations

import dataclasses
import signal
import time
from typing import Any

import pytest

from matrixtool.incontainer.vllm_smoke import catalogue, results, runner


def test_a_timeout_on_a_loaded_machine_names_the_load_and_asks_for_room_or_a_longer_timeout() -> None:
    diagnosis, hint = results.timeout_cause("the 120 s of its group (environment)", 121.4, (14.2, 2))
    assert diagnosis == (
        "no result within the 120 s of its group (environment) after 121 s, on a loaded machine (load average 14.2 "
        "on 2 cores): the check was short of CPU, not stuck"
    )
    assert "quieter" in hint and "timeout_scale" in hint and "hang" not in hint


def test_a_timeout_with_cores_to_spare_is_a_hang_with_where_it_waited() -> None:
    where = "python3.11/subprocess.py:2040 in _try_wait, called from vllm_smoke/children.py:64 in run_python"
    diagnosis, hint = results.timeout_cause("its timeout of 120 s", 120.0, (0.7, 2), where)
    assert diagnosis.startswith("no result within its timeout of 120 s after 120 s with cores to spare")
    assert f"the check hung; it was at {where}" in diagnosis and "load average 0.7 on 2 cores" in diagnosis
    assert "a hang, not a slow machine" in hint and "--only CHECK" in hint and "timeout_scale" not in hint


def test_the_load_per_core_decides_and_an_unread_load_gives_both_fixes() -> None:
    assert "loaded machine" in results.timeout_cause("x", 1.0, (2.1, 2))[0]
    assert "hung" in results.timeout_cause("x", 1.0, (2.0, 2))[0]  # every core busy, none waiting: not loaded
    assert "loaded machine" in results.timeout_cause("x", 1.0, (9.0, 8))[0]
    diagnosis, hint = results.timeout_cause("60 s", None, None)
    assert diagnosis == "no result within 60 s; the check was killed" and "timeout_scale" in hint and "hung" in hint


def test_a_verdict_of_a_timeout_never_gives_the_checks_declared_hint() -> None:
    status, diagnosis, hint, _ = results.verdict("environment", 124, "", 120, 121.0, hint="unset X")
    assert (status, diagnosis) == ("timeout", "no result within 120 s after 121 s; the check was killed")
    assert hint != "unset X" and "timeout_scale" in hint


@pytest.mark.skipif(not hasattr(signal, "SIGALRM"), reason="SIGALRM")
def test_a_checks_own_alarm_names_the_frame_it_fired_in(monkeypatch: pytest.MonkeyPatch) -> None:
    def stuck(params: Any) -> Any:
        time.sleep(5)  # the alarm lands here

    declaration = dataclasses.replace(catalogue.DECLARATIONS["pip-check"], function=stuck)
    monkeypatch.setitem(catalogue.DECLARATIONS, "pip-check", declaration)
    monkeypatch.setattr(results, "machine_load", lambda: (0.5, 2))
    monkeypatch.setattr(runner, "machine_load", lambda: (0.5, 2))
    outcome = runner.Session({"timeouts": {"pip-check": 1}}).outcome("pip-check")
    assert outcome["status"] == "timeout", outcome
    assert "the check hung; it was at" in outcome["diagnosis"] and "in stuck" in outcome["diagnosis"], outcome
    assert "load average 0.5 on 2 cores" in outcome["diagnosis"] and "a hang" in outcome["hint"]


def test_the_hosts_group_timeout_reads_the_load_only_of_an_engine_on_this_machine(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A remote engine's checks run on another machine: this one's load would call its timeout a hang (or the
    machine loaded) by the wrong machine, so none is read and the timeout gives both fixes."""
    from matrixtool.smoke import executor

    monkeypatch.setattr(results, "machine_load", lambda: (0.3, 16))
    assert executor.engine_load({}) == (0.3, 16)  # the default socket
    assert executor.engine_load({"DOCKER_HOST": "unix:///run/user/1000/docker.sock"}) == (0.3, 16)
    assert executor.engine_load({"DOCKER_HOST": "tcp://10.0.0.7:2376"}) is None
    assert executor.engine_load({"DOCKER_HOST": "ssh://ci@builder"}) is None


def test_a_groups_timeout_is_judged_alike_on_the_host_and_in_the_bundle() -> None:
    """``results.group_timeout``, which the host's executor and the bundle's suite both call: the group's limit and
    checks named, the load kept in the facts where read, the facts given left as they were."""
    given = {"steps": ["startup"]}
    diagnosis, hint, facts = results.group_timeout(("torch-import", "vllm-import"), 240, 241.2, (9.5, 2), given)
    assert diagnosis.startswith("no result within the 240 s of its group (torch-import, vllm-import) after 241 s")
    assert "loaded machine" in diagnosis and "timeout_scale" in hint
    assert facts == {"steps": ["startup"], "load": [9.5, 2]} and given == {"steps": ["startup"]}
    assert results.group_timeout(("x",), 60, 61.0, None, {})[2] == {}
