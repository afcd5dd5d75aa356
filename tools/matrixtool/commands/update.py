"""``tools/matrix update``: propose (or ``--write``) the newest consistent vLLM/torch/Triton pins per variant."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import click

from matrixtool.build import hostfiles
from matrixtool.commands import _params
from matrixtool.commands._shared import Settings, pass_settings
from matrixtool.core.errors import ConfigError, MatrixError
from matrixtool.model.matrixfile import load_matrix
from matrixtool.model.select import select_variants
from matrixtool.model.yamlfile import parse_yaml, read_config_text
from matrixtool.update import update, updatefiles
from matrixtool.update.lookup import Index
from matrixtool.update.pyindex import IndexClient

# The longest --cooldown: a century (a datetime cannot reach far beyond that from now).
MAX_COOLDOWN_DAYS = 36500


@dataclass(frozen=True, kw_only=True)
class Args:
    """``cooldown_days`` 0: none; ``now`` None: now, UTC; ``index`` None: ``IndexClient`` over HTTPS."""

    matrix_path: Path
    variants: tuple[str, ...]
    cooldown_days: int = 0
    same_minor: bool = False
    write: bool = False
    ca_cert: Path | None = None
    wheelhouse: Path | None = None
    env: Mapping[str, str]
    now: datetime | None = None
    index: Index | None = None

    def __post_init__(self) -> None:
        if not 0 <= self.cooldown_days <= MAX_COOLDOWN_DAYS:
            raise ConfigError("flags", [f"--cooldown {self.cooldown_days}: give 0 to {MAX_COOLDOWN_DAYS} days"])


def run(args: Args) -> updatefiles.UpdateReport:
    """A variant whose index does not answer keeps its error in its proposal (the others go on; the command
    exits with the most severe).

    Raises ConfigError: the matrix is invalid, or the edited matrix would be; the CA bundle is not a file; ``write``
    while proposals edit one key differently (``update.conflicts``): nothing is written; NothingSelectedError: a name
    matches no variant."""
    matrix = load_matrix(args.matrix_path)
    raw: Any = parse_yaml(read_config_text(args.matrix_path), str(args.matrix_path))
    selected = select_variants(matrix, args.variants)
    ca_cert = hostfiles.existing_ca_cert(args.ca_cert, args.env)
    client: Index = args.index if args.index is not None else IndexClient(ca_cert=ca_cert, env=args.env)
    options = update.Options(
        cooldown=timedelta(days=args.cooldown_days),
        same_minor=args.same_minor,
        now=args.now or datetime.now(UTC),
        wheelhouse=hostfiles.resolve_wheelhouse(args.wheelhouse, args.env),
    )
    proposals = []
    for variant in selected:
        try:
            proposals.append(update.propose(variant, raw, client, options))
        except MatrixError as exc:
            proposals.append(update.failed(variant, exc))
    text, edited, matrix_diff, images_diff = updatefiles.diffs(matrix, args.matrix_path, proposals)
    written: list[Path] = []
    clashes = update.conflicts(proposals)
    if args.write and matrix_diff and clashes:
        raise ConfigError(str(args.matrix_path), [f"--write refused: {c}" for c in clashes])
    if args.write and matrix_diff:
        root = args.matrix_path.parent
        changed = updatefiles.write_all(args.matrix_path, edited, updatefiles.render_text(edited, args.matrix_path))
        written = [args.matrix_path, *(root / p for p in changed)]
    old_pins = update.replaced_pins(proposals, selected)
    return updatefiles.UpdateReport(
        proposals=tuple(proposals),
        conflicts=tuple(clashes),
        stale_comments=tuple(update.stale_comments(text, old_pins)) if matrix_diff else (),
        matrix_diff=matrix_diff,
        images_diff=images_diff,
        written=tuple(written),
    )


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
    type=_params.INPUT_FILE,
    default=None,
    help="CA bundle for the index (default: SSL_CERT_FILE, PIP_CERT, REQUESTS_CA_BUNDLE).",
)
@click.option(
    "--wheelhouse",
    type=_params.INPUT_FOLDER,
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
        if write or cooldown_days or same_minor:
            raise click.UsageError(
                "--groups asks no index and writes nothing: give it without --write, --cooldown, --same-minor"
            )
        click.echo(updatefiles.groups_json(settings.matrix_path, variants))
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
    click.echo(updatefiles.format_report(report))
    updatefiles.raise_for_failed(report)
