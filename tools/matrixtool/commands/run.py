"""``tools/matrix run``: render check, inputs, bases, plans, builds (``--jobs`` at once), smoke checks."""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import click

from matrixtool import report
from matrixtool.build import executor as build
from matrixtool.build import plan, preflight, registry
from matrixtool.build.plan import BuildResult
from matrixtool.commands import _green
from matrixtool.commands._flags import BuildFlags, build_flags, selection_flags
from matrixtool.commands._shared import ReportFlags, Settings, finish, pass_settings, report_flags
from matrixtool.commands._steps import SmokeRequest, needs_build, provide_and_plan, smoke_image
from matrixtool.commands._supply import write_build_reports
from matrixtool.core.engine import note
from matrixtool.core.errors import MatrixError
from matrixtool.model import profile_flags
from matrixtool.model.inputs import warn_unused_wheelhouse
from matrixtool.model.matrixfile import load_matrix
from matrixtool.model.model import Matrix, Variant
from matrixtool.model.profiles import ProfileChoice
from matrixtool.model.select import Selection, select_variants
from matrixtool.smoke import result as smoke_result


@dataclass(frozen=True, kw_only=True)
class Args:
    """``choice`` with no names: every profile of the variant; ``jobs``: variants built at once.

    Raises ConfigError: a flag cannot be honoured (exit 3).
    """

    matrix: Matrix
    variants: tuple[Variant, ...]
    out_dir: Path
    env: Mapping[str, str] = field(default_factory=dict)
    flags: BuildFlags = field(default_factory=BuildFlags)
    selection: Selection = field(default_factory=Selection)
    choice: ProfileChoice = field(default_factory=ProfileChoice)
    keep_going: bool = False
    jobs: int = 1
    output: ReportFlags = field(default_factory=ReportFlags)

    def __post_init__(self) -> None:
        self.flags.check()
        warn_unused_wheelhouse(self.variants, self.flags.wheelhouse)
        self.output.check(self.out_dir)
        self.selection.check(self.variants)
        for variant in self.variants:  # an unknown --profile fails now, not after the build
            self.choice.resolve(variant.name, variant.profiles)


def run(args: Args) -> report.RunReport:
    """Without ``keep_going`` the first error is raised. With it, only a stale render stops everything; a variant's own
    failure is recorded in ``RunReport.errors`` and the others go on. Raises StaleRenderError, EngineUnreachableError,
    and without ``keep_going`` every ``MatrixError`` of a variant."""
    needs = preflight.Needs(keep_going=args.keep_going, index=preflight.IndexProbe.DEFER)
    got = preflight.preflight(args.matrix, args.variants, args.flags.inputs(args.env), needs)
    client = got.engine()
    failed: dict[str, MatrixError] = dict(got.failed)

    def fail(name: str, exc: MatrixError) -> None:
        if not args.keep_going:
            raise exc
        failed[name] = exc
        note(f"[{name}] error: {exc}")

    # Bases and plans one variant at a time (variants may share a base ref); then the builds, `jobs` at once.
    planned: dict[str, list[plan.BuildPlan]] = {}
    for variant in got.variants:
        try:
            try:
                plans = provide_and_plan(client, args.matrix, [variant], got.inputs, repository=args.flags.repository)
            except MatrixError as exc:
                raise got.planning_error(variant.name, exc) from exc
            # An index that does not answer stops only a variant that needs a build.
            unreachable = got.index_error(variant.name, needs_build=needs_build(client, plans, force=args.flags.force))
            if unreachable is not None:
                raise unreachable
            planned[variant.name] = plans
        except MatrixError as exc:
            fail(variant.name, exc)
    policy = args.flags.policy(args.out_dir)
    results: list[BuildResult] = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futures = {name: pool.submit(build.execute_plans, client, plans, policy) for name, plans in planned.items()}
        for name, future in futures.items():
            try:
                results += future.result()
            except MatrixError as exc:
                fail(name, exc)
    by_name = {v.name: v for v in got.variants}
    request = SmokeRequest(
        selection=args.selection, choice=args.choice, log_dir=args.out_dir / "logs", quiet=args.output.as_json
    )
    checks: list[smoke_result.CheckResult] = []
    smoke_started = time.monotonic()
    for built in results:
        try:
            registry.pull_if_missing(client, built.image)  # skipped because it is in the registry
            checks += smoke_image(client, built.image, by_name[built.variant], request)
        except MatrixError as exc:  # a wrong platform, a registry that went away: this variant's, under keep-going
            fail(built.variant, exc)
    smoke_wall = time.monotonic() - smoke_started if checks else None
    write_build_reports(client, args.matrix, [p for plans in planned.values() for p in plans], results, args.out_dir)
    order = [v.name for v in args.variants if v.name in failed]
    return report.RunReport(
        builds=results,
        checks=checks,
        errors={n: str(failed[n]) for n in order},
        error_codes={n: failed[n].exit_code for n in order},
        skipped=got.skipped,
        smoke_wall_seconds=smoke_wall,
    )


@click.command("run")
@click.argument("variants", nargs=-1)
@build_flags
@selection_flags
@click.option(
    "--keep-going",
    is_flag=True,
    help="Go on past a variant that fails (reported in the summary); skip variants whose platforms this "
    "builder cannot build.",
)
@click.option("--jobs", "-j", type=click.IntRange(1, 16), default=1, show_default=True, help="Variants built at once.")
@report_flags
@profile_flags.options(())
@pass_settings
def command(
    settings: Settings,
    /,
    variants: Sequence[str],
    flags: BuildFlags,
    selection: Selection,
    keep_going: bool,
    jobs: int,
    output: ReportFlags,
    choice: ProfileChoice,
) -> None:
    """Render-check, build and smoke-test variants under every deployment profile; print a summary table."""
    matrix = load_matrix(settings.matrix_path)
    args = Args(
        matrix=matrix,
        variants=tuple(select_variants(matrix, variants)),
        out_dir=settings.out_dir,
        env=settings.env,
        flags=flags,
        selection=selection,
        choice=choice,
        keep_going=keep_going,
        jobs=jobs,
        output=output,
    )
    finish(run(args), output, out_dir=settings.out_dir, env=settings.env, last_green=_green.report_last_green)
