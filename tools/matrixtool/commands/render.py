"""``tools/matrix render``: write ``images/<variant>/`` from matrix.yaml and templates/, or check them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import click

from matrixtool.build import drift, imagedir, render
from matrixtool.commands._shared import Settings, pass_settings
from matrixtool.model.matrixfile import load_matrix
from matrixtool.model.model import Matrix


@dataclass(frozen=True, kw_only=True)
class Args:
    """``matrix``: the loaded file; ``check``: compare instead of write."""

    matrix: Matrix
    check: bool = False


@dataclass(frozen=True, kw_only=True)
class RenderReport:
    """The rendered files' count and, when written, the paths that changed (relative to the matrix's folder)."""

    root: Path
    rendered: int
    changed: tuple[Path, ...] = ()


def run(args: Args) -> RenderReport:
    """Raises StaleRenderError: ``check`` and ``images/`` differs from a fresh render (exit 5)."""
    files = render.render_matrix(args.matrix)
    root = args.matrix.root
    if args.check:
        drift.check_fresh(files, root)
        return RenderReport(root=root, rendered=len(files))
    return RenderReport(root=root, rendered=len(files), changed=tuple(imagedir.write(files, root)))


@click.command("render")
@click.option("--check", is_flag=True, help="Fail (exit 5) when images/ differs from a fresh render.")
@pass_settings
def command(settings: Settings, /, check: bool) -> None:
    """Write images/<variant>/ from matrix.yaml and templates/."""
    result = run(Args(matrix=load_matrix(settings.matrix_path), check=check))
    if check:
        click.echo(f"images/ is fresh ({result.rendered} files)")
        return
    for path in result.changed:
        click.echo(f"{'wrote' if (result.root / path).exists() else 'removed'} {path}")
    click.echo(f"{len(result.changed)} file(s) changed, {result.rendered} rendered")
