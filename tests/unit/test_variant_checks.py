"""Each variant's resolved smoke checks, pinned: the checks apply by default by accelerator, and matrix.yaml
states only what differs (``smoke.skip``, ``smoke.timeouts``, ``smoke.timeout_scale``)."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from matrixtool import checks
from matrixtool.matrix import DEFAULT_MATRIX, load_matrix, resolve_checks, resolve_extends, validate

CPU = ["triton-import", "run-conditions", "torch-import", "vllm-import", "tiny-model", "no-fake-triton"]
CPU += ["torch-family", "inductor-compile", "model-runner", "offline-generate", "vllm-cli", "triton-drivers"]
GPU = [*CPU, "triton-kernel", "pip-check", "native-libs"]
CPU += ["pip-check", "native-libs", "cpu-engine-settings", "cuda-weight"]
# Every variant's (check, timeout in seconds) before the checks applied by default, as matrix.yaml listed them.
BEFORE: dict[str, list[int]] = {
    "cpu": [120, 120, 120, 180, 300, 180, 120, 300, 300, 900, 180, 180, 120, 300, 60, 120],
    "arm64": [300, 600, 600, 900, 1200, 900, 600, 1800, 1800, 3600, 900, 600, 300, 900, 120, 600],
    "cuda": [300, 600, 300, 300, 300, 300, 300, 600, 600, 1200, 300, 300, 600, 120, 300],
    "cuda-arm64": [600, 600, 600, 900, 900, 900, 600, 1200, 900, 2400, 900, 900, 900, 300, 1200],
    "rocm": [300, 600, 300, 300, 300, 300, 300, 600, 600, 1200, 300, 300, 600, 120, 300],
}
# What they are now: unchanged where no scale applies; arm64 the declared timeouts times 6, cuda-arm64 cuda's
# times 4 (QEMU).
NOW: dict[str, list[int]] = {
    "cpu": BEFORE["cpu"],
    "arm64": [720, 720, 1800, 1800, 1800, 1080, 720, 1800, 1800, 5400, 1080, 1080, 720, 1800, 360, 1800],
    "cuda": BEFORE["cuda"],
    "cuda-arm64": [4 * t for t in BEFORE["cuda"]],
    "rocm": BEFORE["rocm"],
}
NAMES = {"cpu": CPU, "arm64": CPU, "cuda": GPU, "cuda-arm64": GPU, "rocm": GPU}


def _data() -> Any:
    return yaml.safe_load(DEFAULT_MATRIX.read_text(encoding="utf-8"))


def test_every_variants_checks_and_timeouts_are_pinned() -> None:
    got = {v.name: [(c.name, c.timeout) for c in v.checks] for v in load_matrix().variants}
    assert got == {name: list(zip(NAMES[name], NOW[name], strict=True)) for name in NAMES}


@pytest.mark.parametrize("name", sorted(BEFORE))
def test_no_timeout_is_shorter_than_before_and_the_checks_are_the_same(name: str) -> None:
    (variant,) = [v for v in load_matrix().variants if v.name == name]
    assert [c.name for c in variant.checks] == NAMES[name]
    assert all(c.timeout >= before for c, before in zip(variant.checks, BEFORE[name], strict=True)), name


def test_a_variant_gets_the_checks_of_its_accelerator_in_the_catalogues_order() -> None:
    assert checks.applicable("cpu") == CPU and checks.applicable("cuda") == checks.applicable("rocm") == GPU
    assert checks.CHECKS["triton-kernel"].accelerators == ("cuda", "rocm")
    assert checks.CHECKS["cuda-weight"].accelerators == checks.CHECKS["cpu-engine-settings"].accelerators == ("cpu",)


def test_the_emulation_variant_runs_what_its_skip_list_leaves() -> None:
    data = yaml.safe_load((DEFAULT_MATRIX.parent / "tests" / "data" / "emulation-matrix.yaml").read_text())
    resolved, _ = resolve_extends(data)
    specs, problems = resolve_checks("arm64-pypi", resolved["variants"]["arm64-pypi"])
    assert problems == []
    assert [(c.name, c.timeout) for c in specs] == [
        ("triton-import", 600),
        ("torch-import", 1500),
        ("torch-family", 600),
        ("triton-drivers", 900),
        ("pip-check", 600),
        ("native-libs", 1500),
        ("cpu-engine-settings", 300),
    ]


def test_a_scale_multiplies_the_variants_own_timeouts_and_rounds_up() -> None:
    variant = {"accelerator": "cpu", "smoke": {"timeouts": {"pip-check": 7}, "timeout_scale": 1.5}}
    specs, problems = resolve_checks("x", variant)
    timeouts = {c.name: c.timeout for c in specs}
    assert problems == [] and timeouts["pip-check"] == 11 and timeouts["cpu-engine-settings"] == 90


@pytest.mark.parametrize(
    ("smoke", "message"),
    [
        ({"skip": ["triton-kernel"]}, "variants.cpu.smoke.skip.triton-kernel: triton-kernel does not apply to cpu"),
        ({"timeouts": {"cuda-weight": 9}}, "variants.cuda.smoke.timeouts.cuda-weight: cuda-weight does not apply"),
        (
            {"skip": ["pip-check"], "timeouts": {"pip-check": 9}},
            "variants.cpu.smoke.timeouts.pip-check: pip-check is skipped (smoke.skip); remove one of the two",
        ),
        ({"skip": CPU}, "variants.cpu.smoke.skip: leaves no check to run; skip fewer"),
        ({"timeout_scale": 9}, "variants.cpu.smoke.timeout_scale: makes offline-generate's timeout 8100 s, over 7200"),
        ({"timeout_scale": 0}, "variants.cpu.smoke.timeout_scale: 0 is less than or equal to the minimum of 0"),
        ({"checks": {"pip-check": {}}}, "variants.cpu.smoke.checks: unknown key; allowed keys: accept_clashes"),
    ],
)
def test_smoke_keys_that_do_not_fit_the_declarations_are_named(smoke: dict[str, Any], message: str) -> None:
    data = _data()
    variant = message.split(".")[1]
    data["variants"][variant]["smoke"] = smoke
    problems = validate(data)
    assert any(p.startswith(message) for p in problems), problems
