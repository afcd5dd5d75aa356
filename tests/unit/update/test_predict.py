"""Predictions from metadata: the default model runner, torch's Triton, a dependency's second Triton."""

from __future__ import annotations

import dataclasses

from matrixtool.model.matrixfile import load_matrix
from matrixtool.model.model import TritonState
from matrixtool.update import edits, predict, targets, yamltext
from tests.unit.update._index_fixtures import AMD64


def test_model_runner_evidence() -> None:
    envs_none = 'x = lambda: maybe(os.getenv("VLLM_USE_V2_MODEL_RUNNER", None))\n'
    config_fallback = (
        "class VllmConfig:\n    @property\n    def use_v2_model_runner(self) -> bool:\n"
        "        if not HAS_TRITON:\n            logger.warning('x')\n            return False\n        return True\n"
    )
    config_v2 = "class VllmConfig:\n    def use_v2_model_runner(self):\n        return True\n    def other(self):\n"
    files = {predict.ENVS_PY: envs_none, predict.CONFIG_PY: config_fallback}
    ev = predict.model_runner_evidence(files)
    assert ev.v2_without_triton is False and "vllm/config/vllm.py:4: if not HAS_TRITON" in ev.line
    ev = predict.model_runner_evidence({predict.ENVS_PY: envs_none, predict.CONFIG_PY: config_v2})
    assert ev.v2_without_triton is True and "ends in return True" in ev.line
    ev = predict.model_runner_evidence({predict.ENVS_PY: 'os.getenv("VLLM_USE_V2_MODEL_RUNNER", "1")'})
    assert ev.v2_without_triton is True and ev.line.startswith("vllm/envs.py:1:")
    assert (
        predict.model_runner_evidence({predict.ENVS_PY: 'os.getenv("VLLM_USE_V2_MODEL_RUNNER", "0")'}).v2_without_triton
        is False
    )
    assert predict.model_runner_evidence({}).v2_without_triton is None


def test_second_triton_predictions() -> None:
    matrix = load_matrix()
    cpu = next(v for v in matrix.variants if v.name == "cpu")
    assert cpu.triton is TritonState.ABSENT  # what the cases below rely on
    rocm = next(v for v in matrix.variants if v.name == "rocm")
    xgr = [targets.Line(source="xgrammar 0.2.8 METADATA", text='triton; platform_machine == "x86_64"')]
    (handled,), no_edits = predict.second_triton(cpu, AMD64, xgr, None, [])
    assert handled.breaks is False and "index.exclude drops it" in handled.message and no_edits == []
    torch_pin = [targets.Line(source="torch", text="pytorch-triton-rocm==3.8.0")]
    (second,), _ = predict.second_triton(rocm, AMD64, xgr, "pytorch-triton-rocm", torch_pin)
    assert second.breaks is True and "two distributions install `triton`" in second.message
    assert second.line == 'xgrammar 0.2.8 METADATA: Requires-Dist: triton; platform_machine == "x86_64"'
    # Not excluded on a Triton-less variant: the proposal adds it to index.exclude, next to the prediction.
    no_exclude = dataclasses.replace(cpu, index=dataclasses.replace(cpu.index, exclude=()))
    (proposed,), edits = predict.second_triton(no_exclude, AMD64, xgr, None, [])
    assert proposed.breaks is False and "the proposal adds triton to index.exclude" in proposed.message
    assert edits == [yamltext.ScalarEdit(path=("index", "exclude"), value="triton", append=True)]


def test_torch_triton_on_a_triton_less_variant_proposes_the_exclude_edit() -> None:
    cpu = next(v for v in load_matrix().variants if v.name == "cpu")
    no_exclude = dataclasses.replace(cpu, index=dataclasses.replace(cpu.index, exclude=()))
    pin = [targets.Line(source="torch 2.14.0+cpu METADATA", text="triton==3.9.0")]
    preds, new_edits, dist = predict.triton_predictions(
        no_exclude,
        AMD64,
        pin,
        _NoIndex(),  # type: ignore[arg-type]
        "torch 2.14.0+cpu",
    )
    assert dist == "triton" and new_edits == [edits.exclude_edit("triton")]
    assert preds[0].kind is predict.Kind.TRITON_EXPECTATION and "adds triton to index.exclude" in preds[0].message


class _NoIndex:
    def project(self, index_url: str, name: str) -> None:
        return None
