"""``tools/matrix base``: provide each variant's base image (local, pulled, or a debootstrap stand-in)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import click

from matrixtool.build import base
from matrixtool.commands._shared import Settings, pass_settings
from matrixtool.core import engine
from matrixtool.core.errors import ConfigError
from matrixtool.model.matrixfile import load_matrix
from matrixtool.model.model import Variant
from matrixtool.model.select import select_variants
from matrixtool.model.variantrules import url_problem


@dataclass(frozen=True, kw_only=True)
class Args:
    """``variants``: the selected variants; ``mirror``: the Debian mirror for stand-ins (validated here)."""

    variants: tuple[Variant, ...]
    mirror: str = base.DEFAULT_MIRROR

    def __post_init__(self) -> None:
        problem = url_problem(self.mirror)
        if problem is not None:
            raise ConfigError("flags", [f"--mirror {self.mirror!r} {problem.replace('an index URL', 'a mirror URL')}"])


def run(args: Args) -> Sequence[tuple[str, base.BaseImage]]:
    """Raises EngineUnreachableError, BuildError (a stand-in could not be made)."""
    client = engine.connect()
    return [
        (
            variant.name,
            base.provide(client, variant.base_image, platform=p, suite=variant.stand_in_suite, mirror=args.mirror),
        )
        for variant in args.variants
        for p in variant.platforms
    ]


@click.command("base")
@click.argument("variants", nargs=-1)
@click.option("--mirror", default=base.DEFAULT_MIRROR, show_default=True, help="Debian mirror for stand-ins.")
@pass_settings
def command(settings: Settings, /, variants: Sequence[str], mirror: str) -> None:
    """Provide each variant's base image: local, pulled, or a debootstrap stand-in tagged with its ref."""
    selected = select_variants(load_matrix(settings.matrix_path), variants)
    for name, got in run(Args(variants=tuple(selected), mirror=mirror)):
        click.echo(f"{name}: {got.ref} ({got.platform}) {got.origin} {got.image_id[:19]}")
