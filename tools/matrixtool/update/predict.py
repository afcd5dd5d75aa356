"""Predictions, from metadata alone, of what the failure classes (docs/failure-classes.md) would do to new
pins; every ``Prediction`` is made here."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

from matrixtool.model.model import TritonState, Variant
from matrixtool.update.edits import exclude_edit
from matrixtool.update.lookup import Index, index_urls, versions_on
from matrixtool.update.targets import TRITON_DISTRIBUTIONS, Line, Target, named
from matrixtool.update.yamltext import ScalarEdit

# Members of the vLLM wheel read for the model-runner prediction.
ENVS_PY = "vllm/envs.py"
CONFIG_PY = "vllm/config/vllm.py"
V2_ENV = "VLLM_USE_V2_MODEL_RUNNER"
# Dependencies whose metadata is read at once (one level below vLLM).


class Kind(str, Enum):
    """What a prediction is about (the failure classes of docs/failure-classes.md it anticipates)."""

    TRITON_UNAVAILABLE = "triton-unavailable"
    TRITON_EXPECTATION = "triton-expectation"
    WHEELHOUSE = "wheelhouse-needed"
    V2_RUNNER = "v2-model-runner"
    SECOND_TRITON = "second-triton"
    TORCH_UNAVAILABLE = "torch-unavailable"
    UNKNOWN = "unknown"


@dataclass(frozen=True, kw_only=True)
class Prediction:
    """``breaks`` False: the proposal (or the matrix as it is) handles it; ``line``: where the prediction comes
    from."""

    kind: Kind
    target: str
    breaks: bool
    message: str
    line: str


@dataclass(frozen=True, kw_only=True)
class RunnerEvidence:
    """What vLLM's own sources say about the default model runner where Triton is missing: ``v2_without_triton``
    True means ``Model Runner V2 requires Triton`` on an image without it; None: the sources do not tell."""

    v2_without_triton: bool | None
    line: str


_GETENV = re.compile(r"os\.getenv\(\s*[\"']" + V2_ENV + r"[\"']\s*(?:,\s*([^)]*?))?\s*\)", re.S)


def model_runner_evidence(files: Mapping[str, str]) -> RunnerEvidence:
    """Read the default model runner from ``vllm/envs.py`` (the variable's default) and, where vLLM decides
    (default None), from ``VllmConfig.use_v2_model_runner`` in ``vllm/config/vllm.py``: a ``not HAS_TRITON``
    branch returning False is the V1 fallback; a property that otherwise ends in ``return True`` defaults to V2.
    This reads source text, not behaviour: the ``model-runner`` check confirms it after the build."""
    envs = files.get(ENVS_PY)
    if envs is None:
        return RunnerEvidence(v2_without_triton=None, line=f"{ENVS_PY} is not in the wheel")
    match = _GETENV.search(envs)
    if match is None:
        return RunnerEvidence(v2_without_triton=False, line=f"{ENVS_PY} does not read {V2_ENV}: V1 only")
    lineno = envs.count("\n", 0, match.start()) + 1
    default = (match.group(1) or "None").strip().strip("\"'")
    where = f"{ENVS_PY}:{lineno}: " + " ".join(match.group(0).split())
    if default.lower() in ("1", "true"):
        return RunnerEvidence(v2_without_triton=True, line=where)
    if default.lower() in ("0", "false", ""):
        return RunnerEvidence(v2_without_triton=False, line=where)
    config = files.get(CONFIG_PY, "")
    body = _property_body(config, "use_v2_model_runner")
    if body is None:
        return RunnerEvidence(v2_without_triton=None, line=f"{where}; {CONFIG_PY} has no use_v2_model_runner")
    start, text = body
    fallback = re.search(r"if not HAS_TRITON:(?:\n(?:[^\n]*\n){0,6}?)\s*return False", text)
    if fallback is not None:
        n = start + text.count("\n", 0, fallback.start())
        return RunnerEvidence(
            v2_without_triton=False, line=f"{where}; {CONFIG_PY}:{n}: if not HAS_TRITON: ... return False"
        )
    returns = re.findall(r"^\s*return (\w+)\s*$", text, re.M)
    if returns and returns[-1] == "True":
        return RunnerEvidence(
            v2_without_triton=True, line=f"{where}; {CONFIG_PY}: use_v2_model_runner ends in return True"
        )
    return RunnerEvidence(v2_without_triton=None, line=f"{where}; {CONFIG_PY}: use_v2_model_runner undecided")


def _property_body(source: str, name: str) -> tuple[int, str] | None:
    lines = source.splitlines()
    for i, line in enumerate(lines):
        if re.match(rf"\s*def {name}\(", line):
            indent = len(line) - len(line.lstrip())
            body = []
            for nxt in lines[i + 1 :]:
                if nxt.strip() and len(nxt) - len(nxt.lstrip()) <= indent:
                    break
                body.append(nxt)
            return i + 2, "\n".join(body) + "\n"
    return None


def triton_predictions(
    variant: Variant, target: Target, torch_triton: list[Line], index: Index, torch_label: str
) -> tuple[list[Prediction], list[ScalarEdit], str | None]:
    """Predictions about torch's own Triton requirement, edits to the Triton keys, the distribution torch wants."""
    preds: list[Prediction] = []
    edits: list[ScalarEdit] = []
    excluded = {canonicalize_name(e) for e in variant.index.exclude}
    where = str(target)
    if not torch_triton:
        if variant.triton is TritonState.REQUIRED:
            preds.append(
                Prediction(
                    kind=Kind.TRITON_EXPECTATION,
                    target=where,
                    breaks=True,
                    message=f"{torch_label} requires no Triton here, but the variant says triton: required",
                    line=f"{torch_label} METADATA: no Requires-Dist on {', '.join(sorted(TRITON_DISTRIBUTIONS))}",
                )
            )
        return preds, edits, None
    line = torch_triton[0]
    dist = canonicalize_name(line.requirement.name)
    if variant.triton is not TritonState.REQUIRED:
        handled = dist in excluded
        if not handled:
            edits.append(exclude_edit(dist))
        preds.append(
            Prediction(
                kind=Kind.TRITON_EXPECTATION,
                target=where,
                breaks=False,
                message=(
                    f"torch requires {line.requirement}; index.exclude drops it (triton: {variant.triton.value})"
                    if handled
                    else f"torch requires {line.requirement} on a variant with triton: {variant.triton.value}; "
                    f"the proposal adds {dist} to index.exclude (or set triton: required)"
                ),
                line=str(line),
            )
        )
        return preds, edits, dist
    if dist != canonicalize_name(variant.triton_distribution):
        edits.append(ScalarEdit(path=("triton_distribution",), value=dist, after="triton"))
    if dist in excluded:
        preds.append(
            Prediction(
                kind=Kind.TRITON_UNAVAILABLE,
                target=where,
                breaks=True,
                message=f"torch requires {line.requirement}, which index.exclude drops (triton: required)",
                line=str(line),
            )
        )
        return preds, edits, dist
    versions = versions_on(index, variant, dist, target)
    spec = line.requirement.specifier
    fitting = [v for v in versions if spec.contains(v, prereleases=True)]
    if not fitting:
        preds.append(
            Prediction(
                kind=Kind.TRITON_UNAVAILABLE,
                target=where,
                breaks=True,
                message=f"no index of the variant ({', '.join(index_urls(variant))}) has {dist}{spec} for "
                f"{where} (it has: {', '.join(str(v) for v in sorted(versions)[-5:]) or 'none'})",
                line=str(line),
            )
        )
    return preds, edits, dist


def second_triton(
    variant: Variant, target: Target, dep_lines: Sequence[Line], torch_dist: str | None, torch_triton: list[Line]
) -> tuple[list[Prediction], list[ScalarEdit]]:
    """Predictions about a dependency's own Triton requirement, and the exclude edits that handle them."""
    excluded = {canonicalize_name(e) for e in variant.index.exclude}
    preds = []
    edits: list[ScalarEdit] = []
    for line in named(dep_lines, TRITON_DISTRIBUTIONS):
        dist = canonicalize_name(line.requirement.name)
        if dist in excluded:
            preds.append(
                Prediction(
                    kind=Kind.SECOND_TRITON,
                    target=str(target),
                    breaks=False,
                    message=f"{line.source.split(' (')[0]} requires {line.requirement}; index.exclude drops it",
                    line=str(line),
                )
            )
            continue
        if variant.triton is not TritonState.REQUIRED:
            edits.append(exclude_edit(dist))
            preds.append(
                Prediction(
                    kind=Kind.SECOND_TRITON,
                    target=str(target),
                    breaks=False,
                    message=f"requires {dist} on a variant with triton: {variant.triton.value}; "
                    f"the proposal adds {dist} to index.exclude",
                    line=str(line),
                )
            )
            continue
        if torch_dist is not None and dist != torch_dist:
            message = f"requires {dist} next to torch's {torch_dist}: two distributions install `triton`"
        elif torch_triton and not _compatible(line.requirement.specifier, torch_triton[0].requirement.specifier):
            pin = torch_triton[0].requirement
            message = f"requires {line.requirement}, which torch's {pin.name}{pin.specifier} excludes"
        else:
            continue
        preds.append(
            Prediction(kind=Kind.SECOND_TRITON, target=str(target), breaks=True, message=message, line=str(line))
        )
    return preds, edits


def _compatible(a: SpecifierSet, b: SpecifierSet) -> bool:
    pins = [s.version for s in b if s.operator == "==" and "*" not in s.version]
    return not pins or a.contains(pins[0], prereleases=True)


def runner_prediction(variant: Variant, target: Target, contents: Mapping[str, str], label: str) -> Prediction:
    evidence = model_runner_evidence(contents)
    pinned = variant.env.get(V2_ENV)
    if evidence.v2_without_triton is None:
        return Prediction(
            kind=Kind.V2_RUNNER,
            target=str(target),
            breaks=False,
            message=f"{label}: the sources do not tell the default model runner; the model-runner check decides",
            line=evidence.line,
        )
    if not evidence.v2_without_triton:
        return Prediction(
            kind=Kind.V2_RUNNER,
            target=str(target),
            breaks=False,
            message=f"{label} uses the V1 model runner where Triton is missing",
            line=evidence.line,
        )
    handled = pinned is not None and pinned.strip().lower() in ("0", "false")
    return Prediction(
        kind=Kind.V2_RUNNER,
        target=str(target),
        breaks=not handled,
        message=f"{label} defaults to the V2 model runner, which requires Triton; this variant has none"
        + (f" (env sets {V2_ENV}={pinned})" if handled else f': set env {V2_ENV}: "0" or ship Triton'),
        line=evidence.line,
    )


def torch_unavailable(variant: Variant, target: Target, torch_line: Line, pinned: bool) -> Prediction:
    """No torch inside vLLM's ``torch_line`` on the variant's indexes (or its one pin is not PEP 440)."""
    why = "not a PEP 440 version" if pinned else f"none on {', '.join(index_urls(variant))}"
    return Prediction(
        kind=Kind.TORCH_UNAVAILABLE,
        target=str(target),
        breaks=True,
        message=f"no {variant.torch.package} in {torch_line.requirement.specifier} for {target} ({why})",
        line=str(torch_line),
    )


def wheelhouse_needed(
    variant: Variant,
    target: Target,
    torch_line: Line,
    label: str,
    folder: Path | None,
    local: Path | None,
    *,
    set_: bool,
) -> Prediction:
    """The torch ``label`` is pinned but on no index: it breaks unless ``local`` (found in ``folder``) holds it;
    ``set_``: ``index.wheelhouse`` is already on (in the matrix or by this proposal)."""
    fixes = "" if set_ else "; the proposal sets index.wheelhouse: true"
    held = (
        f"the wheelhouse {folder} holds {local.name}"
        if local
        else (
            f"the wheelhouse ({folder or 'none given'}) lacks it: add it there (--wheelhouse DIR, "
            "PIP_FIND_LINKS, tools/wheelhouse.sh)"
        )
    )
    return Prediction(
        kind=Kind.WHEELHOUSE,
        target=str(target),
        breaks=local is None,
        message=f"{label} is not on {', '.join(index_urls(variant))}: a wheelhouse is needed{fixes}; {held}",
        line=str(torch_line),
    )


def metadata_unknown(target: Target, label: str, torch_line: Line) -> Prediction:
    """The torch ``label``'s METADATA could not be read, so its Triton pin is not known."""
    return Prediction(
        kind=Kind.UNKNOWN,
        target=str(target),
        breaks=False,
        message=f"{label}'s METADATA is unreadable here (not on the index, not in the wheelhouse): "
        "its Triton pin is not known; the triton checks decide after the build",
        line=str(torch_line),
    )
