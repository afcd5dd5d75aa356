"""``tools/matrix manifest``: publish a name that spans several platforms as one multi-arch manifest list."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import click

from matrixtool.build import plan
from matrixtool.commands import _params
from matrixtool.commands._flags import REGISTRY_HELP
from matrixtool.commands._shared import Settings, pass_settings
from matrixtool.commands._supply import check_keys, verify_option, verify_refs
from matrixtool.model import reference
from matrixtool.model.matrixfile import load_matrix
from matrixtool.publish import manifest


@dataclass(frozen=True, kw_only=True)
class Args:
    """``registry``/``repository`` are checked by the OCI grammar before the matrix is read (ConfigError, exit 3)."""

    matrix_path: Path
    pushed: tuple[Path, ...]
    registry: str
    repository: str = plan.DEFAULT_REPOSITORY
    verify_key: Path | None = None
    env: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        reference.check_flags(registry=self.registry, repository=self.repository)
        check_keys(self.env, verify_key=self.verify_key)


def run(args: Args) -> Sequence[tuple[manifest.ManifestPlan, str]]:
    """Empty when no name in the records spans several platforms (matrix.yaml ``publish_as``).

    Raises ConfigError: a file is no push record, or the records do not fit the matrix (``manifest.plan_manifests``);
    RegistryError: a platform is not pushed, or creating the list failed; UnverifiedError: a platform's image, as pushed
    (by digest), is not signed by ``verify_key``."""
    matrix = load_matrix(args.matrix_path)
    records = manifest.read_pushed(args.pushed)
    plans = manifest.plan_manifests(matrix.variants, records, registry=args.registry, repository=args.repository)
    verify_refs((s for p in plans for s in p.sources), pub=args.verify_key, env=args.env)
    return [(the_plan, manifest.execute(the_plan)) for the_plan in plans]


@click.command("manifest")
@click.argument("pushed", nargs=-1, required=True, type=_params.INPUT_FILE)
@click.option("--registry", "registry", type=_params.REGISTRY, required=True, help=REGISTRY_HELP)
@click.option(
    "--repository",
    type=_params.REPOSITORY,
    default=plan.DEFAULT_REPOSITORY,
    show_default=True,
    help="Image repository prefix: lists are <registry>/<repository>/<name>:<version>.",
)
@verify_option
@pass_settings
def command(
    settings: Settings, /, pushed: Sequence[Path], registry: str, repository: str, verify_key: Path | None
) -> None:
    """Publish variants that are one stack on several platforms (matrix.yaml publish_as) under one
    multi-arch tag, from the records of 'tools/matrix push --json' (PUSHED files)."""
    args = Args(
        matrix_path=settings.matrix_path, pushed=tuple(pushed), registry=registry, repository=repository,
        verify_key=verify_key, env=settings.env,
    )  # fmt: skip
    published = run(args)
    if not published:
        click.echo("no published name spans several platforms in these records; nothing to do", err=True)
    for the_plan, digest in published:
        click.echo(f"{the_plan.tags[0]}: manifest list {digest} of {', '.join(map(str, the_plan.platforms))}")
