"""``tools/matrix build``: preflight, bases, plans and builds of the selected variants; no smoke checks."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import click

from matrixtool import report
from matrixtool.build import executor as build
from matrixtool.build import preflight
from matrixtool.commands._flags import BuildFlags, build_flags
from matrixtool.commands._shared import ReportFlags, Settings, finish, pass_settings, report_flags
from matrixtool.commands._steps import needs_build, provide_and_plan
from matrixtool.commands._supply import write_build_reports
from matrixtool.core.errors import MatrixError
from matrixtool.model.inputs import warn_unused_wheelhouse
from matrixtool.model.matrixfile import load_matrix
from matrixtool.model.model import Matrix, Variant
from matrixtool.model.select import select_variants


@dataclass(frozen=True, kw_only=True)
class Args:
    """Validated on construction, before the engine is touched (an unused ``--wheelhouse`` is a warning).

    Raises ConfigError: a flag cannot be honoured (exit 3).
    """

    matrix: Matrix
    variants: tuple[Variant, ...]
    out_dir: Path
    env: Mapping[str, str] = field(default_factory=dict)
    flags: BuildFlags = field(default_factory=BuildFlags)
    output: ReportFlags = field(default_factory=ReportFlags)

    def __post_init__(self) -> None:
        self.flags.check()
        warn_unused_wheelhouse(self.variants, self.flags.wheelhouse)
        self.output.check(self.out_dir)


def run(args: Args) -> report.RunReport:
    """Raises StaleRenderError, ConfigError, IndexUnreachableError, EngineUnreachableError, BuildError,
    RegistryError."""
    needs = preflight.Needs(index=preflight.IndexProbe.DEFER)
    got = preflight.preflight(args.matrix, args.variants, args.flags.inputs(args.env), needs)
    client = got.engine()
    plans = []
    for variant in args.variants:
        try:
            plans += provide_and_plan(client, args.matrix, [variant], got.inputs, repository=args.flags.repository)
        except MatrixError as exc:
            raise got.planning_error(variant.name, exc) from exc
    for variant in args.variants:  # an index that does not answer stops only a variant that needs a build
        mine = [p for p in plans if p.variant == variant.name]
        unreachable = got.index_error(variant.name, needs_build=needs_build(client, mine, force=args.flags.force))
        if unreachable is not None:
            raise unreachable
    results = build.execute_plans(client, plans, args.flags.policy(args.out_dir))
    write_build_reports(client, args.matrix, plans, results, args.out_dir)
    return report.RunReport(builds=results)


@click.command("build")
@click.argument("variants", nargs=-1)
@build_flags
@report_flags
@pass_settings
def command(settings: Settings, /, variants: Sequence[str], flags: BuildFlags, output: ReportFlags) -> None:
    """Build variants with BuildKit (no smoke checks)."""
    matrix = load_matrix(settings.matrix_path)
    selected = tuple(select_variants(matrix, variants))
    args = Args(
        matrix=matrix, variants=selected, out_dir=settings.out_dir, env=settings.env, flags=flags, output=output
    )
    finish(run(args), output, out_dir=settings.out_dir, env=settings.env)
