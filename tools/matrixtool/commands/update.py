"""``tools/matrix update``: propose (or ``--write``) the newest consistent vLLM/torch/Triton pins per variant."""

from __future__ import annotations

import dataclasses
import difflib
import json
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import click

from matrixtool import plan, render, update, yamltext
from matrixtool.commands._shared import Settings, pass_settings
from matrixtool.errors import ConfigError, MatrixError, VariantsFailed, most_severe
from matrixtool.matrix import load_matrix, parse_yaml, read_config_text
from matrixtool.pyindex import IndexClient
from matrixtool.select import select_variants

# The longest --cooldown: a century (a datetime cannot reach far beyond that from now).
MAX_COOLDOWN_DAYS = 36500


@dataclass(frozen=True, kw_only=True)
class Args:
    """``update``'s flags: ``cooldown_days`` (0: none), ``same_minor``, ``write``; ``ca_cert``/``wheelhouse``
    None take the environment's (``plan.resolve_ca_cert``, ``plan.resolve_wheelhouse``); ``now``: the clock of
    the cooldown (None: now, UTC); ``index``: the package-index seam (None: ``IndexClient`` over HTTPS)."""

    matrix_path: Path
    variants: tuple[str, ...]
    cooldown_days: int = 0
    same_minor: bool = False
    write: bool = False
    ca_cert: Path | None = None
    wheelhouse: Path | None = None
    env: Mapping[str, str]
    now: datetime | None = None
    index: update.Index | None = None

    def __post_init__(self) -> None:
        if not 0 <= self.cooldown_days <= MAX_COOLDOWN_DAYS:
            raise ConfigError("flags", [f"--cooldown {self.cooldown_days}: give 0 to {MAX_COOLDOWN_DAYS} days"])


@dataclass(frozen=True, kw_only=True)
class UpdateReport:
    """The proposals in matrix order, key conflicts between them, comments of ``matrix.yaml`` naming a pin
    the proposals replace (``update.stale_comments``), the unified diffs of ``matrix.yaml`` and of ``images/``
    (empty: nothing changes), and the paths written under ``--write``."""

    proposals: tuple[update.Proposal, ...]
    conflicts: tuple[str, ...]
    stale_comments: tuple[str, ...] = ()
    matrix_diff: str
    images_diff: str
    written: tuple[Path, ...]


def _unified(old: str, new: str, name: str) -> str:
    return "".join(difflib.unified_diff(old.splitlines(True), new.splitlines(True), f"a/{name}", f"b/{name}"))


def _render_text(text: str, source: Path) -> list[render.RenderedFile]:
    """The rendered files of the matrix ``text`` as if it were ``source`` (templates next to it).

    Raises:
        ConfigError: the edited matrix no longer validates (a bug of the proposal: it names the problem).
    """
    with tempfile.TemporaryDirectory(prefix="matrix-update-") as scratch:
        path = Path(scratch) / source.name
        path.write_text(text, encoding="utf-8")
        matrix = load_matrix(path)
    return render.render_matrix(dataclasses.replace(matrix, source=source))


def run(args: Args) -> UpdateReport:
    """Propose per selected variant; diff ``matrix.yaml`` and ``images/``; apply both under ``write``.

    A variant whose index does not answer keeps its error in its proposal (the others go on); ``run`` raises
    after writing nothing for it.

    Raises:
        ConfigError: the matrix is invalid, or the edited matrix would be; the CA bundle is not a file.
        NothingSelectedError: a name matches no variant.
        VariantsFailed: one or more variants could not be proposed (exit code: the most severe).
    """
    matrix = load_matrix(args.matrix_path)
    raw: Any = parse_yaml(read_config_text(args.matrix_path), str(args.matrix_path))
    selected = select_variants(matrix, args.variants)
    ca_cert = plan.resolve_ca_cert(args.ca_cert, args.env)
    if ca_cert is not None and not ca_cert.is_file():
        source = "--ca-cert" if args.ca_cert is not None else next(v for v in plan.CA_ENV_VARS if args.env.get(v))
        raise ConfigError("flags", [f"{source} {str(ca_cert)!r} is not a file; give a PEM CA bundle or unset it"])
    client: update.Index = args.index if args.index is not None else IndexClient(ca_cert=ca_cert, env=args.env)
    options = update.Options(
        cooldown=timedelta(days=args.cooldown_days),
        same_minor=args.same_minor,
        now=args.now or datetime.now(UTC),
        wheelhouse=plan.resolve_wheelhouse(args.wheelhouse, args.env),
    )
    proposals = []
    for variant in selected:
        try:
            proposals.append(update.propose(variant, raw, client, options))
        except MatrixError as exc:
            proposals.append(
                update.Proposal(
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
                    error=exc,
                )
            )
    text = read_config_text(args.matrix_path)
    try:
        edited = yamltext.apply_edits(text, update.merged_edits(proposals))
    except KeyError as exc:
        raise ConfigError(str(args.matrix_path), [f"cannot edit {exc.args[0]}: not a scalar key of the file"]) from exc
    matrix_diff = _unified(text, edited, args.matrix_path.name)
    old_files = {f.path: f.text for f in render.render_matrix(matrix)}
    new_files = {f.path: f.text for f in _render_text(edited, args.matrix_path)} if matrix_diff else old_files
    images_diff = "".join(
        _unified(old_files.get(p, ""), new_files.get(p, ""), str(p)) for p in sorted(set(old_files) | set(new_files))
    )
    written: list[Path] = []
    if args.write and matrix_diff:
        root = args.matrix_path.parent
        changed = _write_all(args.matrix_path, edited, _render_text(edited, args.matrix_path))
        written = [args.matrix_path, *(root / p for p in changed)]
    by_name = {v.name: v for v in selected}
    old_pins = [
        pin
        for p in proposals
        if p.edits
        for pin in (
            (p.vllm_package, p.current),
            *([(by_name[p.variant].torch.package, by_name[p.variant].torch.version)] if p.torch else []),
        )
    ]
    return UpdateReport(
        proposals=tuple(proposals),
        conflicts=tuple(update.conflicts(proposals)),
        stale_comments=tuple(update.stale_comments(text, old_pins)) if matrix_diff else (),
        matrix_diff=matrix_diff,
        images_diff=images_diff,
        written=tuple(written),
    )


def _write_all(matrix_path: Path, text: str, files: list[render.RenderedFile]) -> list[Path]:
    """Write the edited ``matrix.yaml`` and ``images/`` in one step that fails before changing either: the new
    matrix is staged beside the old one first (same folder, same mode), ``render.write`` checks every
    obstacle before it writes, and ``os.replace`` puts the matrix in place last. Returns the changed paths
    of ``images/`` (relative to the matrix's folder).

    Raises:
        ConfigError: ``render.write`` found an obstacle; nothing was written.
        OSError: the matrix cannot be staged (nothing written) or a write failed.
    """
    fd, staged = tempfile.mkstemp(dir=matrix_path.parent, prefix=f".{matrix_path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(staged, matrix_path.stat().st_mode & 0o7777)
        changed = render.write(files, matrix_path.parent)
        os.replace(staged, matrix_path)
    except BaseException:
        Path(staged).unlink(missing_ok=True)
        raise
    return changed


def groups_json(matrix_path: Path, variants: tuple[str, ...]) -> str:
    """``update.groups`` of the selected variants as one line of JSON: ``{"include": [{"group": owner,
    "variants": "a b"}]}`` (a space-separated list: what ``tools/matrix update`` takes as arguments).

    Raises:
        ConfigError, NothingSelectedError: as ``load_matrix`` and ``select_variants``.
    """
    matrix = load_matrix(matrix_path)
    raw: Any = parse_yaml(read_config_text(matrix_path), str(matrix_path))
    names = [v.name for v in select_variants(matrix, variants)]
    include = [{"group": owner, "variants": " ".join(members)} for owner, members in update.groups(raw, names)]
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


@click.command("update")
@click.argument("variants", nargs=-1)
@click.option(
    "--cooldown",
    "cooldown_days",
    type=click.IntRange(min=0, max=MAX_COOLDOWN_DAYS),
    default=0,
    show_default=True,
    help="Skip releases uploaded less than DAYS ago.",
    metavar="DAYS",
)
@click.option(
    "--groups",
    "show_groups",
    is_flag=True,
    help="Print the variants grouped by the variant that owns their pins, as a GitHub Actions matrix (JSON, "
    "one line: include[].group, include[].variants), and ask no index.",
)
@click.option("--same-minor", is_flag=True, help="Stay in the current vLLM major.minor series.")
@click.option("--write", is_flag=True, help="Apply the change to matrix.yaml and render images/ (default: dry run).")
@click.option(
    "--ca-cert",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="CA bundle for the index (default: SSL_CERT_FILE, PIP_CERT, REQUESTS_CA_BUNDLE).",
)
@click.option(
    "--wheelhouse",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="Folder of local wheels, read for a torch the index lacks (default: PIP_FIND_LINKS).",
)
@pass_settings
def command(
    settings: Settings,
    /,
    variants: tuple[str, ...],
    cooldown_days: int,
    show_groups: bool,
    same_minor: bool,
    write: bool,
    ca_cert: Path | None,
    wheelhouse: Path | None,
) -> None:
    """Propose the newest vLLM release per variant with the torch and Triton it needs (a diff; --write applies)."""
    if show_groups:
        click.echo(groups_json(settings.matrix_path, variants))
        return
    args = Args(
        matrix_path=settings.matrix_path,
        variants=variants,
        cooldown_days=cooldown_days,
        same_minor=same_minor,
        write=write,
        ca_cert=ca_cert,
        wheelhouse=wheelhouse,
        env=settings.env,
    )
    report = run(args)
    click.echo(format_report(report))
    failed = [p for p in report.proposals if p.error is not None]
    if failed:
        code = most_severe([p.error.exit_code for p in failed if p.error is not None])
        assert code is not None
        raise VariantsFailed(f"no proposal for {', '.join(p.variant for p in failed)}", code)
