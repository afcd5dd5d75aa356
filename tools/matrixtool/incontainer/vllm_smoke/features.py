"""Features: the optional features of vLLM a variant promises are carried and work; those it leaves out are absent
(failure classes 32, 33). ``featureplan`` reads vLLM's extras from its metadata and decides each feature's state;
here each feature's minimal call (its exercise) runs in the image, and the check puts the two together.
"""

from __future__ import annotations

import importlib
import importlib.metadata as metadata
import io
import math
import os
import shutil
import struct
import tempfile
import wave
from typing import Any, Dict, List, Optional, Tuple

from .children import MODEL_DIR, run_python
from .declarations import ACCELERATORS, Params, check
from .featureplan import (
    FEATURES,
    Feature,
    State,
    canonical,
    install_line,
    installed,
    plan,
    vllm_distribution,
    vllm_requirements,
)
from .gpuprobe import gpu_visible, needs_vllm
from .results import result

# --- the minimal calls ----------------------------------------------------------------------------------------


def wav_clip(seconds: float = 0.5, rate: int = 8000, hz: float = 440.0) -> bytes:
    """A mono 16-bit PCM WAV clip of a sine tone, as bytes (stdlib wave)."""
    frames = int(seconds * rate)
    data = b"".join(struct.pack("<h", int(12000 * math.sin(2 * math.pi * hz * i / rate))) for i in range(frames))
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(data)
    return buf.getvalue()


def exercise_audio() -> str:
    """Decode a generated WAV clip with vLLM's own loader (load_audio: torchcodec, else soundfile, resampled with
    PyAV), at the 16 kHz Whisper asks for; the decoded length says it worked."""
    from vllm.multimodal.media.audio import load_audio

    audio, rate = load_audio(io.BytesIO(wav_clip()), sr=16000)
    if rate != 16000 or not 7000 <= len(audio) <= 9000:
        raise RuntimeError(f"decoded {len(audio)} samples at {rate} Hz; expected about 8000 at 16000 Hz")
    return f"vLLM's load_audio decoded a 0.5 s WAV clip to {len(audio)} samples at {rate} Hz"


def exercise_video() -> str:
    """Write a 4-frame MJPEG clip with OpenCV and read it back with OpenCV (vLLM's video loader's library)."""
    import cv2
    import numpy as np
    import vllm.multimodal.video  # noqa: F401

    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "clip.avi")
        writer = cv2.VideoWriter(path, cv2.VideoWriter_fourcc(*"MJPG"), 4, (32, 32))
        for i in range(4):
            writer.write(np.full((32, 32, 3), i * 60, dtype=np.uint8))
        writer.release()
        cap = cv2.VideoCapture(path)
        count = 0
        while cap.read()[0]:
            count += 1
        cap.release()
    if count != 4:
        raise RuntimeError(f"OpenCV read {count} of 4 frames back")
    return "OpenCV wrote and read back a 4-frame clip"


def exercise_ngram() -> str:
    """Import vLLM's n-gram proposer (numba) and JIT-compile a function with numba (llvmlite)."""
    import numba
    import vllm.v1.spec_decode.ngram_proposer  # noqa: F401

    if numba.njit(lambda x: x + 1)(1) != 2:
        raise RuntimeError("a numba-compiled x + 1 did not return 2")
    return "vLLM's n-gram proposer imports; numba compiled a function"


def exercise_structured(name: str) -> str:
    """vLLM's own backend ``name`` compiles a JSON schema for the tiny model's tokenizer, fills the allowed-token
    bitmask and accepts allowed tokens until the grammar completes or 64 steps pass: the work a constrained
    generation does per token, the model's choice replaced by the first token the grammar allows."""
    import types

    from vllm.config import StructuredOutputsConfig
    from vllm.tokenizers import get_tokenizer
    from vllm.v1.structured_output.backend_types import StructuredOutputOptions

    modules = {
        "xgrammar": ("backend_xgrammar", "XgrammarBackend"),
        "guidance": ("backend_guidance", "GuidanceBackend"),
        "outlines": ("backend_outlines", "OutlinesBackend"),
        "lm-format-enforcer": ("backend_lm_format_enforcer", "LMFormatEnforcerBackend"),
    }
    module, cls = modules[name]
    backend_cls = getattr(importlib.import_module(f"vllm.v1.structured_output.{module}"), cls)
    tokenizer = get_tokenizer(MODEL_DIR)
    config = types.SimpleNamespace(
        structured_outputs_config=StructuredOutputsConfig(backend=name), model_config=None, speculative_config=None
    )
    vocab = len(tokenizer)
    backend = backend_cls(config, tokenizer=tokenizer, vocab_size=vocab)
    schema = '{"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}'
    grammar = backend.compile_grammar(StructuredOutputOptions.JSON, schema)
    bitmask = backend.allocate_token_bitmask(1)
    steps = 0
    for steps in range(1, 65):
        grammar.fill_bitmask(bitmask, 0)
        allowed = [t for t in range(vocab) if (int(bitmask[0, t // 32]) >> (t % 32)) & 1]
        if not allowed:
            raise RuntimeError(f"the grammar allows no token at step {steps}")
        if len(allowed) == vocab and steps == 1:
            raise RuntimeError("the grammar allows every token at the start: nothing is constrained")
        if not grammar.accept_tokens("matrix-features", [allowed[0]]):
            raise RuntimeError(f"the grammar refused token {allowed[0]} it allowed")
        if grammar.is_terminated():
            break
    return f"vLLM's {name} backend compiled a JSON schema; {steps} constrained steps"


def exercise_ray() -> str:
    """The `ray` executable is on PATH (vLLM's multi-node recipe runs `ray start`), vLLM's Ray executor imports
    and ``ray.init`` starts a one-CPU local cluster (in a child process, shut down after)."""
    if shutil.which("ray") is None:
        raise RuntimeError('"ray": executable file not found in $PATH')
    code = (
        "import ray, vllm.v1.executor.ray_executor\n"
        "ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)\n"
        "print('MATRIX-RAY', ray.cluster_resources().get('CPU'))\n"
        "ray.shutdown()\n"
    )
    proc = run_python(code, timeout=240)
    if proc.returncode != 0 or "MATRIX-RAY" not in proc.stdout:
        raise RuntimeError((proc.stderr.strip().splitlines() or ["ray.init failed"])[-1])
    return "ray.init started a local cluster; vLLM's Ray executor imports"


def exercise_imports(needed: List[str]) -> str:
    """Import the top-level modules of each distribution ``needed`` (its top_level.txt, else its RECORD)."""
    names: List[str] = []
    for dist_name in needed:
        dist = metadata.distribution(dist_name)
        tops = (dist.read_text("top_level.txt") or "").split()
        if not tops:
            tops = sorted(
                {f.parts[0].removesuffix(".py") for f in dist.files or () if len(f.parts) > 1 or str(f).endswith(".py")}
                - {"..", "__pycache__"}
            )
            tops = [t for t in tops if t.isidentifier() and not t.endswith(".dist-info")][:3]
        for top in tops:
            importlib.import_module(top)
            names.append(top)
    return "imports " + ", ".join(names) if names else "installed"


def run_exercise(name: str, feature: Optional[Feature], needed: List[str]) -> str:
    """What the minimal call of feature ``name`` (``feature``: its entry in ``FEATURES``, None for an extra this
    suite does not know) did; raises whatever that call raises."""
    kind = feature.exercise if feature else None
    if kind == "audio":
        return exercise_audio()
    if kind == "video":
        return exercise_video()
    if kind == "ngram":
        return exercise_ngram()
    if kind == "structured":
        return exercise_structured(name)
    if kind == "ray":
        return exercise_ray()
    return exercise_imports(needed)


def error_line(error: BaseException) -> str:
    """``Type: message`` of ``error``, followed by ``(caused by ...)`` naming the first exception of its chain as
    Python prints it (``raise ... from None`` ends it): lm-format-enforcer re-raises vLLM's ModuleNotFoundError
    as "vllm is not installed"."""

    def line(e: BaseException) -> str:
        return (f"{type(e).__name__}: {e}".strip().splitlines() or [""])[0][:300]

    def parent(e: BaseException) -> Optional[BaseException]:
        return e.__cause__ if e.__cause__ is not None else (None if e.__suppress_context__ else e.__context__)

    first, seen = error, {id(error)}
    up = parent(first)
    while up is not None and id(up) not in seen:
        first = up
        seen.add(id(first))
        up = parent(first)
    return line(error) + (f" (caused by {line(first)})" if first is not error else "")


# What a pass over the features found: problems, and the hint of the last one that names its own fix (None: the
# check's declared hint).
Findings = Tuple[List[str], Optional[str]]


def _declaration_problems(states: Dict[str, State], vllm: str, unusable: Dict[str, str]) -> Findings:
    """Class 33 and the declarations that do not hold: a name matrix.yaml declares that is no feature, an extra of
    ``vllm`` (its name and version) nobody declared, a left-out feature whose minimal call works. A left-out
    feature whose call fails is what was declared: its error line goes to ``unusable``."""
    problems: List[str] = []
    hint = None
    for name, (state, needed, reason) in states.items():
        if state == "unknown":
            problems.append(
                f"matrix.yaml features names {name!r}, which is neither a feature this suite knows "
                f"({', '.join(sorted(FEATURES))}) nor an extra of {vllm}"
            )
        elif state == "undeclared":
            problems.append(
                f"{vllm} offers the extra {name!r} "
                f"({', '.join(needed) or 'no requirements'}), which the variant neither promises nor "
                "leaves out"
            )
            hint = (
                f"declare it in matrix.yaml: features: {{promise: [{name}]}} (and install it), or "
                f'features: {{leave_out: {{{name}: "<reason>"}}}}'
            )
        elif state == "left-out" and all(installed(d) for d in needed):
            # Its distributions are all there: the feature is absent only if its minimal call fails.
            try:
                how = run_exercise(name, FEATURES.get(name), needed)
            except Exception as e:  # a left-out feature that does not work is what was declared
                unusable[name] = error_line(e)
                continue
            problems.append(f"{name} is declared left out ({reason}) but the image carries it and it works ({how})")
            hint = f"remove {', '.join(needed) or 'it'} from the image, or move {name} to features.promise"
    return problems, hint


def _promise_problems(
    params: Params, states: Dict[str, State], promised: List[List[str]], missing_by_name: Dict[str, List[str]]
) -> Findings:
    """Class 32: each promised feature whose distributions are not all installed (they go to ``missing_by_name``;
    the hint names ``params["exclude"]`` where it drops them) or whose minimal call fails; each one that works goes
    to ``promised`` as [name, what its call did]."""
    problems: List[str] = []
    hint = None
    gpu_here: Optional[bool] = None  # probed once (a child Python), at the first call that fails
    for name, (state, needed, reason) in states.items():
        if state != "promised":
            continue
        missing = [d for d in needed if not installed(d)]
        if missing:
            missing_by_name[name] = missing
            feature = FEATURES.get(name)
            about = f" ({feature.about})" if feature else ""
            problems.append(
                f"{name}{about} is promised ({reason}) but {', '.join(missing)} "
                f"{'is' if len(missing) == 1 else 'are'} not installed"
            )
            excluded = sorted(set(missing) & {canonical(d) for d in params.get("exclude") or ()})
            dropped = f"; matrix.yaml index.exclude drops {', '.join(excluded)}" if excluded else ""
            hint = (
                f"install it ({install_line(missing)}{dropped}) or declare it out: "
                f'features: {{leave_out: {{{name}: "<reason>"}}}}'
            )
            continue
        try:
            how = run_exercise(name, FEATURES.get(name), needed)
        except Exception as e:  # any failure of the minimal call is the finding, but for want of a GPU
            if params.get("accelerator", "cpu") != "cpu" and gpu_here is None:
                gpu_here = gpu_visible()
            if params.get("accelerator", "cpu") != "cpu" and not gpu_here:
                # A GPU variant checked without its GPU (a build machine): the call needs the device, as the
                # GPU-only checks do; installed, not exercised here, and said so.
                promised.append([name, f"installed; not exercised: needs a GPU, none visible ({error_line(e)})"])
                continue
            problems.append(f"{name} is promised and installed, but its minimal call fails: {error_line(e)}")
            continue
        promised.append([name, how])
    return problems, hint


@check(
    "features",
    proves="every optional feature of vLLM the variant promises (matrix.yaml features; by default those its "
    "accelerator supports upstream, and the structured-output backends vLLM requires) is carried and works: "
    "audio decodes a generated WAV clip with vLLM's loader, each structured-output backend compiles a JSON schema "
    "and constrains tokens, Ray starts a local cluster; each one left out is absent; each extra of the installed "
    "vLLM's metadata is declared",
    classes=(32, 33),
    reports=("https://github.com/gpustack/gpustack/issues/5430",),
    hint="install the feature's distributions (vLLM's extra, docs/extending.md) or declare it out with the reason: "
    'matrix.yaml features: {leave_out: {NAME: "<reason>"}}',
    timeout=300,
    accelerators=ACCELERATORS,
    needs=("vllm-import", "tiny-model"),
    group="vllm",
)
@needs_vllm
def check_features(params: Params) -> Dict[str, Any]:
    """Classes 32 (a promised feature the image cannot keep) and 33 (an extra of vLLM nobody declared).

    params: accelerator; features_promise (matrix.yaml features.promise: names beyond the defaults);
    features_leave_out ({name: reason}: features.leave_out); exclude (matrix.yaml index.exclude). Facts:
    vllm_distribution, extras (vLLM's Provides-Extra), promised [[name, how]], left_out {name: reason},
    not_promised [names], missing {name: [distributions]}, left_out_unusable {name: error line}.
    """
    dist = vllm_distribution()
    if dist is None:
        return result("failed", "no installed distribution provides vllm with files, so no extras can be read")
    core, extras = vllm_requirements(dist)
    states = plan(params, core, extras)
    vllm = f"{dist.metadata['Name']} {dist.version}"
    promised: List[List[str]] = []
    missing: Dict[str, List[str]] = {}
    unusable: Dict[str, str] = {}
    left_out = {n: r for n, (s, _, r) in states.items() if s == "left-out"}
    problems, hint = _declaration_problems(states, vllm, unusable)
    broken, promise_hint = _promise_problems(params, states, promised, missing)
    problems += broken
    hint = promise_hint or hint  # the last problem's fix, as the problems are listed
    facts = {
        "vllm_distribution": vllm,
        "extras": sorted(extras),
        "promised": promised,
        "left_out": left_out,
        "not_promised": sorted(n for n, (s, _, _) in states.items() if s == "not-promised"),
        "missing": missing,
        "left_out_unusable": unusable,
    }
    if problems:
        first = problems[0] + (
            f" (and {len(problems) - 1} more: {'; '.join(problems[1:])})" if len(problems) > 1 else ""
        )
        return result("failed", first, hint, **facts)
    left = ", ".join(f"{n} ({r})" for n, r in left_out.items()) or "nothing"
    names = ", ".join(n for n, _ in promised) or "none"
    return result("passed", f"promises {names} (each exercised); leaves out {left}", **facts)
