"""Each variant's resolved smoke checks on the fixture matrix (tests/unit/data/matrix/matrix.yaml): the checks apply
by default by accelerator, and a matrix states only what differs (``smoke.skip``, ``smoke.timeouts``,
``smoke.timeout_scale``). The shipped matrix's checks are pinned once, in tests/unit/model/test_shipped_matrix.py."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from matrixtool.model import checks
from matrixtool.model.matrixfile import load_matrix, resolve_extends, validate
from matrixtool.model.model import DEFAULT_MATRIX
from matrixtool.model.variantrules import resolve_checks
from tests.conftest import FIXTURE_MATRIX

VARIANTS = ("cpu", "arm64", "cuda", "cuda-arm64", "rocm")
# Each check's timeout in seconds per variant of VARIANTS (None: the variant does not run it), in the order the
# variants run them: cpu as declared but three; arm64 the declared ones times 6, cuda-arm64 cuda's times 4 (QEMU).
NOW: dict[str, tuple[int | None, ...]] = {
    "triton-import": (120, 720, 300, 1200, 300),
    "run-conditions": (120, 720, 600, 2400, 600),
    "environment": (120, 720, 120, 480, 120),
    "torch-import": (120, 1800, 300, 1200, 300),
    "vllm-import": (180, 1800, 300, 1200, 300),
    "tiny-model": (300, 1800, 300, 1200, 300),
    "no-fake-triton": (180, 1080, 300, 1200, 300),
    "torch-family": (120, 720, 300, 1200, 300),
    "inductor-compile": (300, 1800, 600, 2400, 600),
    "model-runner": (300, 1800, 600, 2400, 600),
    "offline-generate": (900, 5400, 1200, 4800, 1200),
    "vllm-cli": (180, 1080, 300, 1200, 300),
    "features": (300, 1800, 300, 1200, 300),
    "serve": (1500, 7200, 1500, 6000, 1500),
    "triton-drivers": (180, 1080, 300, 1200, 300),
    "triton-kernel": (None, None, 600, 2400, 600),
    "pip-check": (120, 720, 120, 480, 120),
    "native-libs": (300, 1800, 300, 1200, 300),
    "cpu-engine-settings": (60, 360, None, None, None),
    "cpu-floor": (1800, 7200, None, None, None),
    "cuda-weight": (120, 1800, None, None, None),
    "gpu-driver": (None, None, 120, 480, None),
    "rocm-build": (None, None, None, None, 120),
    "gpu-archs": (None, None, 300, 1200, 300),
    "jit-toolchain": (None, None, 120, 480, None),
}
# The same before the checks applied by default (matrix.yaml listed every check and timeout): no variant's
# checks changed, and no timeout became shorter.
BEFORE: dict[str, tuple[int | None, ...]] = {
    "triton-import": (120, 300, 300, 600, 300),
    "run-conditions": (120, 600, 600, 600, 600),
    "torch-import": (120, 600, 300, 600, 300),
    "vllm-import": (180, 900, 300, 900, 300),
    "tiny-model": (300, 1200, 300, 900, 300),
    "no-fake-triton": (180, 900, 300, 900, 300),
    "torch-family": (120, 600, 300, 600, 300),
    "inductor-compile": (300, 1800, 600, 1200, 600),
    "model-runner": (300, 1800, 600, 900, 600),
    "offline-generate": (900, 3600, 1200, 2400, 1200),
    "vllm-cli": (180, 900, 300, 900, 300),
    "triton-drivers": (180, 600, 300, 900, 300),
    "triton-kernel": (None, None, 600, 900, 600),
    "pip-check": (120, 300, 120, 300, 120),
    "native-libs": (300, 900, 300, 1200, 300),
    "cpu-engine-settings": (60, 120, None, None, None),
    "cuda-weight": (120, 600, None, None, None),
    "gpu-driver": (None, None, 120, 480, None),
    "rocm-build": (None, None, None, None, 120),
    "gpu-archs": (None, None, 300, 1200, 300),
    "jit-toolchain": (None, None, 120, 480, None),
}


def _column(table: dict[str, tuple[int | None, ...]], variant: str) -> list[tuple[str, int]]:
    i = VARIANTS.index(variant)
    return [(name, t) for name, row in table.items() if (t := row[i]) is not None]


def _data() -> Any:
    return yaml.safe_load(FIXTURE_MATRIX.read_text(encoding="utf-8"))


def test_every_variants_checks_and_timeouts_are_pinned() -> None:
    got = {v.name: [(c.name, c.timeout) for c in v.checks] for v in load_matrix(FIXTURE_MATRIX).variants}
    assert got == {name: _column(NOW, name) for name in VARIANTS}


@pytest.mark.parametrize("name", VARIANTS)
def test_no_timeout_is_shorter_than_before_and_the_checks_are_the_same(name: str) -> None:
    (variant,) = [v for v in load_matrix(FIXTURE_MATRIX).variants if v.name == name]
    got = [(c.name, c.timeout) for c in variant.checks if c.name in BEFORE]
    before = _column(BEFORE, name)
    assert [n for n, _ in got] == [n for n, _ in before]
    assert all(t >= old for (_, t), (_, old) in zip(got, before, strict=True)), name


def test_a_variant_gets_the_checks_of_its_accelerator_in_the_catalogues_order() -> None:
    assert checks.applicable("cpu") == [n for n, _ in _column(NOW, "cpu")]
    assert checks.applicable("cuda") == [n for n, _ in _column(NOW, "cuda")]
    assert checks.applicable("rocm") == [n for n, _ in _column(NOW, "rocm")]
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
        ({"skip": checks.applicable("cpu")}, "variants.cpu.smoke.skip: leaves no check to run; skip fewer"),
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
