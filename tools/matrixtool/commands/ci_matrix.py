"""``tools/matrix ci-matrix``: the GitHub Actions matrix as one line of JSON."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import click

from matrixtool.commands._shared import Settings, pass_settings
from matrixtool.deploy import ci
from matrixtool.model.matrixfile import load_matrix
from matrixtool.model.model import Variant
from matrixtool.model.select import select_variants


@dataclass(frozen=True, kw_only=True)
class Args:
    """``variants``: the selected variants; ``hosted_only``: leave out those on self-hosted runners."""

    variants: tuple[Variant, ...]
    hosted_only: bool = False


def run(args: Args) -> str:
    """The matrix JSON (``ci.ci_matrix_json``): one entry per variant x platform."""
    return ci.ci_matrix_json(args.variants, hosted_only=args.hosted_only)


@click.command("ci-matrix")
@click.argument("variants", nargs=-1)
@click.option("--hosted-only", is_flag=True, help="Leave out variants on self-hosted runners (fork pull requests).")
@pass_settings
def command(settings: Settings, /, variants: Sequence[str], hosted_only: bool) -> None:
    """Print the GitHub Actions matrix (JSON, one line): one entry per variant x platform."""
    selected = select_variants(load_matrix(settings.matrix_path), variants)
    click.echo(run(Args(variants=tuple(selected), hosted_only=hosted_only)))
