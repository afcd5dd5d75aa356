"""Applying an ``update`` proposal to a checkout: diffs, the all-or-nothing write, the report, and the variant
groups the update workflow opens a pull request for."""

from __future__ import annotations

import dataclasses
import difflib
import json
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from matrixtool.build import imagedir, render
from matrixtool.core import outputs
from matrixtool.core.errors import ConfigError, ExitCode, VariantsFailed, most_severe
from matrixtool.model.matrixfile import load_matrix
from matrixtool.model.model import Matrix
from matrixtool.model.select import select_variants
from matrixtool.model.yamlfile import parse_yaml, read_config_text
from matrixtool.update import edits, update, yamltext


@dataclass(frozen=True, kw_only=True)
class UpdateReport:
    """Diffs empty: nothing changes; ``stale_comments``: comments of ``matrix.yaml`` naming a replaced pin."""

    proposals: tuple[update.Proposal, ...]
    conflicts: tuple[str, ...]
    stale_comments: tuple[str, ...] = ()
    matrix_diff: str
    images_diff: str
    written: tuple[Path, ...]


def unified(old: str, new: str, name: str) -> str:
    """A unified diff of ``old`` and ``new`` as ``a/NAME`` and ``b/NAME``."""
    return "".join(difflib.unified_diff(old.splitlines(True), new.splitlines(True), f"a/{name}", f"b/{name}"))


def render_text(text: str, source: Path) -> list[render.RenderedFile]:
    """The rendered files of the matrix ``text`` as if it were ``source`` (templates next to it).

    Raises ConfigError: the edited matrix no longer validates (a bug of the proposal: it names the problem).
    """
    with tempfile.TemporaryDirectory(prefix="matrix-update-") as scratch:
        path = Path(scratch) / source.name
        outputs.write_text(path, text)
        matrix = load_matrix(path)
    return render.render_matrix(dataclasses.replace(matrix, source=source))


def write_all(matrix_path: Path, text: str, files: list[render.RenderedFile]) -> list[Path]:
    """Write the edited ``matrix.yaml`` and ``images/`` in one step that fails before changing either:
    ``imagedir.write`` checks every obstacle before it writes, then replaces the changed files of ``images/`` and the
    matrix as one set (``outputs.write_set``), and the matrix keeps its mode. Returns the changed paths of ``images/``
    (relative to the matrix's folder).

    Raises ConfigError: ``imagedir.write`` found an obstacle; nothing was written; OutputError: a write failed (exit 3),
    naming the file; the matrix and ``images/`` are unchanged."""
    with outputs.guarded(matrix_path):
        mode = matrix_path.stat().st_mode & 0o7777
    changed = imagedir.write(files, matrix_path.parent, together={matrix_path: text})
    with outputs.guarded(matrix_path):
        os.chmod(matrix_path, mode)
    return changed


def groups_json(matrix_path: Path, variants: tuple[str, ...]) -> str:
    """``edits.groups`` of the selected variants as one line of JSON:
    ``{"include": [{"group": owner, "variants": "a b"}]}`` (a space-separated list: what ``tools/matrix update`` takes
    as arguments). Raises ConfigError, NothingSelectedError: as ``load_matrix`` and ``select_variants``."""
    matrix = load_matrix(matrix_path)
    raw: Any = parse_yaml(read_config_text(matrix_path), str(matrix_path))
    names = [v.name for v in select_variants(matrix, variants)]
    include = [{"group": owner, "variants": " ".join(members)} for owner, members in edits.groups(raw, names)]
    return json.dumps({"include": include}, separators=(",", ":"))


def format_report(report: UpdateReport) -> str:
    """The report as text: per variant its proposal, predictions (``BREAKS``/``ok``) and notes, then the diffs."""
    out: list[str] = []
    for p in report.proposals:
        if p.error is not None:
            out.append(f"{p.variant}: error: {p.error}")
            continue
        if p.vllm is None:
            out.append(f"{p.variant}: {p.vllm_package} {p.current}: nothing newer")
        else:
            out.append(f"{p.variant}: {p.vllm_package} {p.current} -> {p.vllm}; torch {p.torch or '(unchanged)'}")
            out.extend(f"  triton (torch's METADATA) {t}" for t in p.triton)
            out.append(f"  wheelhouse: {'needed' if p.wheelhouse else 'not needed'}")
        for pred in p.predictions:
            out.append(f"  {'BREAKS' if pred.breaks else 'ok    '} {pred.kind.value} [{pred.target}]: {pred.message}")
            out.append(f"         from {pred.line}")
        out.extend(f"  note: {n}" for n in p.notes)
    out.extend(f"conflict: {c}" for c in report.conflicts)
    out.extend(f"note: matrix.yaml {c}" for c in report.stale_comments)
    out.append(report.matrix_diff or "matrix.yaml: no change")
    out.append(report.images_diff or "images/: no change")
    out.extend(f"wrote {p}" for p in report.written)
    return "\n".join(line.rstrip("\n") for line in out)


def diffs(matrix: Matrix, path: Path, proposals: Sequence[update.Proposal]) -> tuple[str, str, str, str]:
    """(the matrix file's text, that text with ``proposals``' edits, the unified diff of the two, the unified diff of
    ``images/`` rendered from each). Raises ConfigError: an edit names no scalar key of the file, or the edited matrix
    does not validate."""
    text = read_config_text(path)
    try:
        edited = yamltext.apply_edits(text, update.merged_edits(proposals))
    except KeyError as exc:
        raise ConfigError(str(path), [f"cannot edit {exc.args[0]}: not a scalar key of the file"]) from exc
    matrix_diff = unified(text, edited, path.name)
    old_files = {f.path: f.text for f in render.render_matrix(matrix)}
    new_files = {f.path: f.text for f in render_text(edited, path)} if matrix_diff else old_files
    images_diff = "".join(
        unified(old_files.get(p, ""), new_files.get(p, ""), str(p)) for p in sorted(set(old_files) | set(new_files))
    )
    return text, edited, matrix_diff, images_diff


def raise_for_failed(report: UpdateReport) -> None:
    """Raise ``VariantsFailed`` naming the variants without a proposal, with the most severe of their errors'
    exit codes (an index that did not answer: 10); nothing when every variant has one."""
    failed = [p for p in report.proposals if p.error is not None]
    if failed:
        code = most_severe([p.error.exit_code for p in failed if p.error is not None])
        raise VariantsFailed(f"no proposal for {', '.join(p.variant for p in failed)}", code or ExitCode.UNEXPECTED)
