"""``tools/matrix bake``: write ``<out>/docker-bake.json`` (one target per variant x platform) and stage each
target's context. Needs no engine and no network: what it cannot check is a warning."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import click

from matrixtool.build import bake, base, plan, preflight
from matrixtool.commands import _params
from matrixtool.commands._flags import REGISTRY_HELP, input_options
from matrixtool.commands._shared import Settings, pass_settings
from matrixtool.commands._steps import plan_context
from matrixtool.core.errors import ExitCode, MatrixError, VariantsFailed, most_severe
from matrixtool.model import reference
from matrixtool.model.inputs import check_outputs, warn_unused_wheelhouse
from matrixtool.model.matrixfile import load_matrix
from matrixtool.model.model import Matrix, Variant
from matrixtool.model.select import select_variants


@dataclass(frozen=True, kw_only=True)
class Args:
    """``ca_cert``/``wheelhouse`` None: from ``env``; ``registry``: its tags are also the cache source.

    Raises ConfigError: a flag cannot be honoured (exit 3).
    """

    matrix: Matrix
    variants: tuple[Variant, ...]
    out_dir: Path
    env: Mapping[str, str] = field(default_factory=dict)
    ca_cert: Path | None = None
    wheelhouse: Path | None = None
    repository: str = plan.DEFAULT_REPOSITORY
    registry: str | None = None

    def __post_init__(self) -> None:
        reference.check_flags(registry=self.registry, repository=self.repository)
        warn_unused_wheelhouse(self.variants, self.wheelhouse)
        check_outputs(self.out_dir)


@dataclass(frozen=True, kw_only=True)
class BakeReport:
    """``failed``: variants left out, with the error of their missing local inputs."""

    path: Path
    plans: Sequence[plan.BuildPlan]
    warnings: Sequence[str] = ()
    failed: Mapping[str, MatrixError] = field(default_factory=dict)


def run(args: Args) -> BakeReport:
    """Local inputs (render, wheelhouse, CA bundle) are checked; an index that does not answer, a base the engine lacks,
    or no engine at all become ``BakeReport.warnings``. A variant whose inputs are not there is left out of the bake
    file (``BakeReport.failed``); the others are exported. Raises StaleRenderError; ConfigError (the first variant's,
    when no variant can be exported)."""
    inputs = preflight.Inputs.resolve(ca_cert=args.ca_cert, wheelhouse=args.wheelhouse, env=args.env)
    failed: dict[str, MatrixError] = {}
    exported: list[Variant] = []
    for variant in args.variants:
        try:
            preflight.check_inputs(variant, inputs)
        except MatrixError as exc:
            failed[variant.name] = exc
        else:
            exported.append(variant)
    if not exported:
        raise next(iter(failed.values()))
    needs = preflight.Needs(index=preflight.IndexProbe.WARN, engine=preflight.EngineNeed.OPTIONAL)
    got = preflight.preflight(args.matrix, exported, inputs, needs)
    context = plan_context(args.matrix, got.inputs, repository=args.repository)
    bases, missing = base.look_up_bases(got.client, exported, context.lock)
    plans = plan.plan_variants(exported, bases, context)
    path = bake.write_bake(plans, out_dir=args.out_dir, registry=args.registry)
    return BakeReport(path=path, plans=plans, warnings=[*got.warnings, *missing], failed=failed)


@click.command("bake")
@click.argument("variants", nargs=-1)
@input_options
@click.option(
    "--registry",
    "registry",
    type=_params.REGISTRY,
    default=None,
    help="Add the same tags under this registry and use them as cache-from. " + REGISTRY_HELP,
)
@pass_settings
def command(
    settings: Settings,
    /,
    variants: Sequence[str],
    ca_cert: Path | None,
    wheelhouse: Path | None,
    repository: str,
    registry: str | None,
) -> None:
    """Write <out>/docker-bake.json (one target per variant x platform) and stage each target's context.

    Needs no engine and no network: what it cannot check (an index that does not answer, a base image the
    engine lacks, no engine at all) is a warning, and the bake file names the base as matrix.yaml does.
    """
    matrix = load_matrix(settings.matrix_path)
    args = Args(
        matrix=matrix,
        variants=tuple(select_variants(matrix, variants)),
        out_dir=settings.out_dir,
        env=settings.env,
        ca_cert=ca_cert,
        wheelhouse=wheelhouse,
        repository=repository,
        registry=registry,
    )
    result = run(args)
    for p in result.plans:
        click.echo(f"{bake.target_name(p)}: {p.hash_ref}", err=True)
    for warning in result.warnings:
        click.echo(f"warning: {warning}", err=True)
    click.echo(f"wrote {result.path}; build with: docker buildx bake -f {result.path} [TARGET|VARIANT...]", err=True)
    click.echo(str(result.path))
    for name, exc in result.failed.items():
        click.echo(f"error: [{name}] not in the bake file: {exc}", err=True)
    if result.failed:
        code = most_severe([exc.exit_code for exc in result.failed.values()]) or ExitCode.CONFIG
        raise VariantsFailed(
            f"{len(result.failed)} variant(s) left out of {result.path}: {', '.join(result.failed)}; "
            "the others were exported (see the errors above)",
            code,
        )
