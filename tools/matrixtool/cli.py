"""``tools/matrix``: the click command line.

Every command loads and validates matrix.yaml first, then touches Docker only if it needs to.
Errors print one ``error:`` message and exit with the code of their class (``errors.ExitCode``);
``--debug`` shows the traceback instead.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import subprocess
import sys
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import docker

from matrixtool import (
    bake,
    base,
    build,
    cache,
    ci,
    engine,
    index,
    manifest,
    pin,
    plan,
    publish,
    registry,
    render,
    report,
    smoke,
)
from matrixtool.errors import BuildError, ConfigError, ExitCode, MatrixError, RegistryError, SmokeFailure
from matrixtool.matrix import DEFAULT_MATRIX, REPO_ROOT, Matrix, Variant, load_matrix
from matrixtool.select import select_variants
from matrixtool.wheelhouse import problems as wheelhouse_problems

DEFAULT_OUT = REPO_ROOT / "build"


@dataclass(frozen=True, kw_only=True)
class Settings:
    """Options shared by every command: the matrix file, output folder, environment and debug flag."""

    matrix_path: Path
    out_dir: Path
    env: Mapping[str, str]
    debug: bool


class MatrixGroup(click.Group):
    """A click group that turns ``MatrixError`` into one message and its exit code."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except MatrixError as exc:
            if ctx.obj is not None and ctx.obj.debug:
                traceback.print_exc()
            click.echo(f"error: {exc}", err=True)
            ctx.exit(int(exc.exit_code))
        except docker.errors.APIError as exc:
            # The engine answered, and refused: not an unreachable engine.
            if ctx.obj is not None and ctx.obj.debug:
                traceback.print_exc()
            click.echo(f"error: the Docker engine refused a request: {exc.explanation or exc}", err=True)
            ctx.exit(int(ExitCode.UNEXPECTED))
        except docker.errors.DockerException as exc:
            if ctx.obj is not None and ctx.obj.debug:
                traceback.print_exc()
            click.echo(f"error: Docker engine: {exc}; run 'tools/matrix doctor'", err=True)
            ctx.exit(int(ExitCode.ENGINE))
        except (click.exceptions.Exit, click.ClickException, click.exceptions.Abort, KeyboardInterrupt):
            raise
        except Exception as exc:
            # A bug of this tool, not bad input: one line, and the traceback only with --debug.
            if ctx.obj is not None and ctx.obj.debug:
                traceback.print_exc()
            click.echo(
                f"error: unexpected {type(exc).__name__}: {exc}; rerun with --debug for the traceback and report it",
                err=True,
            )
            ctx.exit(int(ExitCode.UNEXPECTED))


@click.group(cls=MatrixGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--matrix",
    "matrix_path",
    type=click.Path(path_type=Path),
    default=DEFAULT_MATRIX,
    show_default=True,
    help="The matrix file.",
)
@click.option(
    "--out",
    "out_dir",
    type=click.Path(path_type=Path),
    default=DEFAULT_OUT,
    show_default=True,
    help="Folder for logs, reports and staged build contexts.",
)
@click.option("--debug", is_flag=True, help="Show tracebacks.")
@click.pass_context
def main(ctx: click.Context, matrix_path: Path, out_dir: Path, debug: bool) -> None:
    """Build and smoke-test vLLM inference images from matrix.yaml."""
    ctx.obj = Settings(matrix_path=matrix_path, out_dir=out_dir, env=dict(os.environ), debug=debug)


def _load(settings: Settings) -> Matrix:
    return load_matrix(settings.matrix_path)


# --- render ------------------------------------------------------------------------------------------
@main.command("render")
@click.option("--check", is_flag=True, help="Fail (exit 5) when images/ differs from a fresh render.")
@click.pass_obj
def render_cmd(settings: Settings, check: bool) -> None:
    """Write images/<variant>/ from matrix.yaml and templates/."""
    files = render.render_matrix(_load(settings))
    root = settings.matrix_path.parent
    if check:
        render.check_fresh(files, root)
        click.echo(f"images/ is fresh ({len(files)} files)")
        return
    changed = render.write(files, root)
    for path in changed:
        click.echo(f"wrote {path}")
    click.echo(f"{len(changed)} file(s) changed, {len(files)} rendered")


# --- doctor ------------------------------------------------------------------------------------------
@main.command()
@click.option("--registry", default="registry-1.docker.io", show_default=True, help="Registry host to probe.")
def doctor(registry: str) -> None:
    """Report engine, buildx, arm64 emulation and registry reachability, with the fix for each."""
    findings = engine.doctor(registry)
    for f in findings:
        click.echo(f"{f.status.value:4}  {f.name:16} {f.detail}")
        if f.fix:
            click.echo(f"      {'':16} fix: {f.fix}")
    if any(f.status is engine.Status.FAIL for f in findings):
        sys.exit(int(ExitCode.ENGINE))


# --- base --------------------------------------------------------------------------------------------
@main.command("base")
@click.argument("variants", nargs=-1)
@click.option("--mirror", default=base.DEFAULT_MIRROR, show_default=True, help="Debian mirror for stand-ins.")
@click.pass_obj
def base_cmd(settings: Settings, variants: Sequence[str], mirror: str) -> None:
    """Provide each variant's base image: local, pulled, or a debootstrap stand-in tagged with its ref."""
    selected = select_variants(_load(settings), variants)
    client = engine.connect()
    for variant in selected:
        for platform in variant.platforms:
            got = base.provide(
                client, variant.base_image, platform=platform, suite=variant.stand_in_suite, mirror=mirror
            )
            click.echo(f"{variant.name}: {got.ref} ({platform}) {got.origin} {got.image_id[:19]}")


# --- build -------------------------------------------------------------------------------------------
def _git(*args: str) -> str | None:
    try:
        proc = subprocess.run(["git", "-C", str(REPO_ROOT), *args], capture_output=True, text=True, check=False)
    except OSError:
        return None
    return proc.stdout.strip() if proc.returncode == 0 and proc.stdout.strip() else None


def _check_inputs(variant: Variant, wheels: Path | None, ca_cert: Path | None) -> None:
    problems = []
    if ca_cert is not None and not ca_cert.is_file():
        problems.append(
            f"CA bundle {ca_cert} (from --ca-cert or {'/'.join(plan.CA_ENV_VARS)}) is not a file; "
            "pass --ca-cert FILE or unset the variable"
        )
    problems += wheelhouse_problems(variant, wheels, env_var=plan.WHEELHOUSE_ENV_VAR)
    if problems:
        raise ConfigError(f"inputs of variant {variant.name}", problems)


def preflight(
    settings: Settings, variants: Sequence[Variant], *, ca_cert: Path | None, wheelhouse: Path | None
) -> tuple[Path | None, Path | None]:
    """Everything checked before the engine is touched: a fresh render of images/ (next to the matrix
    file) and each variant's inputs (wheelhouse, CA bundle).

    Raises:
        StaleRenderError: images/ drifted from matrix.yaml.
        ConfigError: a wheelhouse or CA bundle is missing.

    Returns the CA bundle and wheelhouse to use (flags, else the environment).
    """
    render.check_fresh(render.render_matrix(_load(settings)), settings.matrix_path.parent)
    ca = plan.resolve_ca_cert(ca_cert, settings.env)
    wheels = plan.resolve_wheelhouse(wheelhouse, settings.env)
    for variant in variants:
        _check_inputs(variant, wheels, ca)
    for variant in variants:
        _check_index_reachable(variant, ca)
    return ca, wheels


def _check_index_reachable(variant: Variant, ca: Path | None) -> None:
    """Fail in seconds, not after a hung build, when the variant's package index does not answer.

    Raises:
        BuildError: naming the index and the ways out (a wheelhouse, or another index in matrix.yaml).
    """
    for url in (variant.index.url, *variant.index.extra_urls):
        problem = index.probe(url, ca_cert=ca, timeout=index.PROBE_TIMEOUT)
        if problem is not None:
            raise BuildError(
                f"variant {variant.name}: package index {url} is unreachable from this machine ({problem}); "
                f"the build would hang on it. Ways out: pass --wheelhouse DIR holding the wheels "
                f"({variant.torch.requirement} and what it needs), or point variants.{variant.name}.index.url "
                "in matrix.yaml at a mirror you can reach, then 'tools/matrix render'"
            )


def plan_variants(
    settings: Settings,
    client: docker.DockerClient,
    variants: Sequence[Variant],
    *,
    ca: Path | None,
    wheels: Path | None,
    repository: str,
) -> list[plan.BuildPlan]:
    """Provide bases and plan every (variant, platform), pinned bases from the lock file as ``ref@digest``.

    ``build``, ``bake`` and ``push`` all go through here, so their tags, labels and content hashes agree.

    Raises:
        ConfigError (lock file), BuildError (base image).
    """
    lock = pin.read_lock(pin.lock_path(settings.matrix_path))
    revision = _git("rev-parse", "HEAD") or "unknown"
    source = _git("remote", "get-url", "origin") or str(REPO_ROOT)
    plans = []
    for variant in variants:
        files = tuple(render.render_variant(variant))
        digest = lock.digest(variant.base_image)
        for platform in variant.platforms:
            got = base.provide(
                client, variant.base_image, platform=platform, suite=variant.stand_in_suite, digest=digest
            )
            rows = plan.wheelhouse_fingerprint(wheels) if (wheels and variant.index.wheelhouse) else []
            plans.append(
                plan.plan_build(
                    variant,
                    platform=platform,
                    files=files,
                    base_image_id=got.image_id,
                    wheelhouse=wheels,
                    wheelhouse_rows=rows,
                    ca_cert=ca,
                    revision=revision,
                    source_url=source,
                    repository=repository,
                    base_digest=digest,
                    base_local=got.local_tag,
                    stand_in_suite=got.stand_in_suite,
                )
            )
            if plans[-1].python_version:
                click.echo(
                    f"{variant.name} ({platform}): base {variant.base_image} is a Debian {got.stand_in_suite} "
                    f"stand-in: building with Python {plans[-1].python_version} (upstream: {variant.python})",
                    err=True,
                )
    return plans


def build_variants(
    settings: Settings,
    client: docker.DockerClient,
    variants: Sequence[Variant],
    *,
    ca: Path | None,
    wheels: Path | None,
    force: bool,
    repository: str,
    registry_prefix: str | None = None,
    cache_settings: cache.CacheSettings | None = None,
) -> list[build.BuildResult]:
    """Plan and build every (variant, platform); ``preflight`` must have passed.

    A plan is skipped (unless ``force``) when its content-hash tag is on the engine, or in
    ``registry_prefix`` when given.

    Raises:
        ConfigError, BuildError, RegistryError (the registry did not answer).
    """
    plans = plan_variants(settings, client, variants, ca=ca, wheels=wheels, repository=repository)
    return execute_plans(
        settings, client, plans, force=force, registry_prefix=registry_prefix, cache_settings=cache_settings
    )


def execute_plans(
    settings: Settings,
    client: docker.DockerClient,
    plans: Sequence[plan.BuildPlan],
    *,
    force: bool,
    registry_prefix: str | None = None,
    cache_settings: cache.CacheSettings | None = None,
) -> list[build.BuildResult]:
    """Build ``plans`` in order, skipping (unless ``force``) those whose content-hash tag is on the engine or,
    with ``registry_prefix``, in that registry. With ``cache_settings`` a build reads (and writes) the BuildKit
    cache in that registry (``cache.py``).

    Raises:
        BuildError, RegistryError (the registry did not answer).
    """
    results = []
    for the_plan in plans:
        done = None if force else build.existing(client, the_plan)
        if done is not None:
            click.echo(
                f"{the_plan.variant}: {done.image} exists (content hash unchanged); --force rebuilds",
                err=True,
            )
        elif not force and registry_prefix:
            done = build.published(the_plan, registry_prefix)
            if done is not None:
                click.echo(
                    f"{the_plan.variant}: {done.image} exists in the registry (content hash "
                    "unchanged); --force rebuilds",
                    err=True,
                )
        if done is None:
            if cache_settings is not None:
                the_plan = cache.apply(the_plan, cache_settings)
            done = build.execute(
                client, the_plan, work_dir=settings.out_dir / "context", log_dir=settings.out_dir / "logs"
            )
            if cache_settings is not None:
                cache.export_inline(the_plan, cache_settings)
        results.append(done)
    return results


_REGISTRY_HELP = "Registry prefix HOST[:PORT][/NAMESPACE]; images: <registry>/<repository>/<variant>:<tag>."
_input_options = [
    click.option(
        "--ca-cert",
        type=click.Path(path_type=Path),
        default=None,
        help="CA bundle passed as build secret 'ca' (default: SSL_CERT_FILE, PIP_CERT, REQUESTS_CA_BUNDLE).",
    ),
    click.option(
        "--wheelhouse",
        type=click.Path(path_type=Path),
        default=None,
        help="Folder of local wheels, bind-mounted during the build (default: PIP_FIND_LINKS).",
    ),
    click.option(
        "--repository",
        default=plan.DEFAULT_REPOSITORY,
        show_default=True,
        help="Image repository prefix: images are <repository>/<variant>:<tag>.",
    ),
]
_build_options = [
    *_input_options,
    click.option(
        "--force",
        is_flag=True,
        help="Rebuild even when the content-hash tag exists (locally or in --registry).",
    ),
    click.option(
        "--registry",
        "registry_prefix",
        default=None,
        help="Also skip a build whose content-hash tag is in this registry. " + _REGISTRY_HELP,
    ),
    click.option(
        "--cache-registry",
        default=None,
        help="Keep BuildKit's cache in this registry as <registry>/<repository>/<variant>:buildcache-<arch> "
        "(read, and written after a build).",
    ),
    click.option(
        "--cache-read-only",
        is_flag=True,
        help="With --cache-registry: read the cache, never write it (pull requests).",
    ),
]


def _cache_settings(cache_registry: str | None, read_only: bool) -> cache.CacheSettings | None:
    if cache_registry is None:
        if read_only:
            raise click.UsageError("--cache-read-only needs --cache-registry")
        return None
    return cache.CacheSettings(registry=cache_registry, write=not read_only, driver=cache.builder_driver())


def _report_options(f: Any) -> Any:
    f = click.option(
        "--json-file", type=click.Path(path_type=Path), default=None, help="Also write the JSON report to this file."
    )(f)
    f = click.option("--json", "as_json", is_flag=True, help="Print the JSON report instead of the table.")(f)
    f = click.option(
        "--junit",
        type=click.Path(path_type=Path),
        default=None,
        help="JUnit XML path (default: <out>/reports/junit.xml).",
    )(f)
    return f


def _with(options: list[Any]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def wrap(f: Callable[..., Any]) -> Callable[..., Any]:
        for option in reversed(options):
            f = option(f)
        return f

    return wrap


def _finish(
    settings: Settings, result: report.RunReport, as_json: bool, junit: Path | None, json_file: Path | None = None
) -> None:
    junit_path = junit or settings.out_dir / "reports" / "junit.xml"
    if result.checks or result.errors:
        report.write_junit(result, junit_path)
    for line in report.publish_to_github(result, settings.env):
        click.echo(line, err=True)
    if json_file is not None:
        json_file.parent.mkdir(parents=True, exist_ok=True)
        json_file.write_text(report.to_json_text(result), encoding="utf-8")
    click.echo(report.to_json_text(result) if as_json else "\n" + report.table(result))
    if result.checks or result.errors:
        click.echo(f"JUnit report: {junit_path}", err=True)
    if result.errors:
        raise BuildError(
            f"{len(result.errors)} variant(s) failed before their smoke checks: {', '.join(result.errors)}; "
            "see the summary above and the build logs it names"
        )
    if not result.ok:
        raise SmokeFailure("smoke checks failed; see the table above, the logs it names, and the fix hints")


@main.command("build")
@click.argument("variants", nargs=-1)
@_with(_build_options)
@_report_options
@click.pass_obj
def build_cmd(
    settings: Settings,
    variants: Sequence[str],
    ca_cert: Path | None,
    wheelhouse: Path | None,
    force: bool,
    repository: str,
    registry_prefix: str | None,
    cache_registry: str | None,
    cache_read_only: bool,
    as_json: bool,
    json_file: Path | None,
    junit: Path | None,
) -> None:
    """Build variants with BuildKit (no smoke checks)."""
    cache_settings = _cache_settings(cache_registry, cache_read_only)
    selected = select_variants(_load(settings), variants)
    ca, wheels = preflight(settings, selected, ca_cert=ca_cert, wheelhouse=wheelhouse)
    client = engine.connect()
    results = build_variants(
        settings,
        client,
        selected,
        ca=ca,
        wheels=wheels,
        force=force,
        repository=repository,
        registry_prefix=registry_prefix,
        cache_settings=cache_settings,
    )
    _finish(settings, report.RunReport(builds=results), as_json, junit, json_file)


def _checks_for(variant: Variant, only: Sequence[str], skip: Sequence[str]) -> list[Any]:
    names = [c.name for c in variant.checks]
    unknown = [n for n in [*only, *skip] if n not in names]
    if unknown:
        raise ConfigError(
            "--only/--skip",
            [f"{n!r} is not a check of variant {variant.name}; its checks: {', '.join(names)}" for n in unknown],
        )
    chosen = [c for c in variant.checks if (not only or c.name in only) and c.name not in skip]
    if not chosen:
        raise ConfigError("--only/--skip", [f"the selection leaves no check of variant {variant.name} to run"])
    return chosen


def _shower(quiet: bool) -> Any:
    def show(r: smoke.CheckResult) -> None:
        if not quiet:
            click.echo(f"[{r.variant}] {r.check}: {r.status.value} ({r.seconds:.1f} s) {r.diagnosis}", err=True)

    return show


def _smoke(
    settings: Settings,
    client: docker.DockerClient,
    image: str,
    variant: Variant,
    only: Sequence[str],
    skip: Sequence[str],
    quiet: bool,
) -> list[smoke.CheckResult]:
    checks = _checks_for(variant, only, skip)
    click.echo(f"[{variant.name}] smoke checks in {image}: {', '.join(c.name for c in checks)}", err=True)
    return smoke.run_suite(client, image, variant, checks, log_dir=settings.out_dir / "logs", on_result=_shower(quiet))


_select_options = [
    click.option("--only", multiple=True, help="Run only this check (repeatable)."),
    click.option("--skip", multiple=True, help="Skip this check (repeatable)."),
]


@main.command("run")
@click.argument("variants", nargs=-1)
@_with(_build_options + _select_options)
@click.option(
    "--keep-going",
    is_flag=True,
    help="Go on past a variant that fails (reported in the summary); skip variants whose platforms this "
    "builder cannot build.",
)
@click.option("--jobs", "-j", type=click.IntRange(1, 16), default=1, show_default=True, help="Variants built at once.")
@_report_options
@click.pass_obj
def run_cmd(
    settings: Settings,
    variants: Sequence[str],
    ca_cert: Path | None,
    wheelhouse: Path | None,
    force: bool,
    repository: str,
    registry_prefix: str | None,
    cache_registry: str | None,
    cache_read_only: bool,
    only: Sequence[str],
    skip: Sequence[str],
    keep_going: bool,
    jobs: int,
    as_json: bool,
    json_file: Path | None,
    junit: Path | None,
) -> None:
    """Render-check, build and smoke-test variants; print a summary table."""
    cache_settings = _cache_settings(cache_registry, cache_read_only)
    selected = select_variants(_load(settings), variants)
    if not keep_going:
        ca, wheels = preflight(settings, selected, ca_cert=ca_cert, wheelhouse=wheelhouse)
    else:
        # Only a stale render stops everything; a variant's own inputs fail that variant alone.
        render.check_fresh(render.render_matrix(_load(settings)), settings.matrix_path.parent)
        ca, wheels = plan.resolve_ca_cert(ca_cert, settings.env), plan.resolve_wheelhouse(wheelhouse, settings.env)
    client = engine.connect()
    skipped: dict[str, str] = {}
    if keep_going:
        can = engine.builder_platforms()
        for v in selected:
            missing = [p for p in v.platforms if p not in can]
            if missing:
                skipped[v.name] = f"this builder cannot build {', '.join(missing)} (see 'tools/matrix doctor')"
        selected = [v for v in selected if v.name not in skipped]

    # Bases and plans one variant at a time (variants may share a base ref); then the builds, `jobs` at once.
    errors: dict[str, str] = {}
    planned: dict[str, list[plan.BuildPlan]] = {}
    for variant in selected:
        try:
            if keep_going:
                _check_inputs(variant, wheels, ca)
                _check_index_reachable(variant, ca)
            planned[variant.name] = plan_variants(
                settings, client, [variant], ca=ca, wheels=wheels, repository=repository
            )
        except MatrixError as exc:
            if not keep_going:
                raise
            errors[variant.name] = str(exc)
            click.echo(f"[{variant.name}] error: {exc}", err=True)

    results: list[build.BuildResult] = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = {
            name: pool.submit(
                execute_plans,
                settings,
                client,
                plans,
                force=force,
                registry_prefix=registry_prefix,
                cache_settings=cache_settings,
            )
            for name, plans in planned.items()
        }
        for name, future in futures.items():
            try:
                results += future.result()
            except MatrixError as exc:
                if not keep_going:
                    raise
                errors[name] = str(exc)
                click.echo(f"[{name}] error: {exc}", err=True)
    by_name = {v.name: v for v in selected}
    checks: list[smoke.CheckResult] = []
    for built in results:
        engine.pull_if_missing(client, built.image, platform=built.platform)  # skipped: it is in the registry
        checks += _smoke(settings, client, built.image, by_name[built.variant], only, skip, as_json)
    _finish(
        settings,
        report.RunReport(builds=results, checks=checks, errors=errors, skipped=skipped),
        as_json,
        junit,
        json_file,
    )


@main.command("test")
@click.option("--image", default=None, help="Image ref to test (local, or pulled when a registry answers).")
@click.option(
    "--host",
    "host",
    is_flag=True,
    help="Host mode: run the checks in a Python environment of this machine, no Docker.",
)
@click.option(
    "--python",
    "python",
    default="python3",
    show_default=True,
    help="Host mode: the interpreter whose environment (torch, triton, vLLM) is checked.",
)
@click.option("--as", "as_variant", required=True, help="Variant whose expectations apply.")
@_with(_select_options)
@_report_options
@click.pass_obj
def test_cmd(
    settings: Settings,
    image: str | None,
    host: bool,
    python: str,
    as_variant: str,
    only: Sequence[str],
    skip: Sequence[str],
    as_json: bool,
    json_file: Path | None,
    junit: Path | None,
) -> None:
    """Run the smoke suite against any image (--image) or this machine's Python (--host)."""
    if (image is None) == (not host):
        raise click.UsageError("give exactly one of --image REF and --host")
    if as_variant == "all":
        raise click.UsageError("--as takes one variant name, not 'all'")
    (variant,) = select_variants(_load(settings), [as_variant])
    checks_ = _checks_for(variant, only, skip)
    if host:
        click.echo(
            f"[{variant.name}] smoke checks on this host ({python}): {', '.join(c.name for c in checks_)}",
            err=True,
        )
        results = smoke.run_host_suite(
            python,
            variant,
            checks_,
            env=settings.env,
            log_dir=settings.out_dir / "logs",
            on_result=_shower(as_json),
        )
        _finish(settings, report.RunReport(checks=results), as_json, junit, json_file)
        return
    assert image is not None
    client = engine.connect()
    # A multi-arch tag holds an image per platform: the one of the variant's platform is tested.
    engine.pull_if_missing(client, image, platform=variant.platforms[0])
    checks = _smoke(settings, client, image, variant, only, skip, as_json)
    _finish(settings, report.RunReport(checks=checks), as_json, junit, json_file)


# --- ci-matrix ---------------------------------------------------------------------------------------
@main.command("ci-matrix")
@click.argument("variants", nargs=-1)
@click.option("--hosted-only", is_flag=True, help="Leave out variants on self-hosted runners (fork pull requests).")
def ci_matrix_cmd(variants: Sequence[str], hosted_only: bool) -> None:
    """Print the GitHub Actions matrix (JSON, one line): one entry per variant x platform."""
    settings: Settings = click.get_current_context().obj
    click.echo(ci.ci_matrix_json(select_variants(_load(settings), variants), hosted_only=hosted_only))


# --- bake --------------------------------------------------------------------------------------------
@main.command("bake")
@click.argument("variants", nargs=-1)
@_with(_input_options)
@click.option(
    "--registry",
    "registry_prefix",
    default=None,
    help="Add the same tags under this registry and use them as cache-from. " + _REGISTRY_HELP,
)
@click.pass_obj
def bake_cmd(
    settings: Settings,
    variants: Sequence[str],
    ca_cert: Path | None,
    wheelhouse: Path | None,
    repository: str,
    registry_prefix: str | None,
) -> None:
    """Write <out>/docker-bake.json (one target per variant x platform) and stage each target's context."""
    selected = select_variants(_load(settings), variants)
    ca, wheels = preflight(settings, selected, ca_cert=ca_cert, wheelhouse=wheelhouse)
    client = engine.connect()
    plans = plan_variants(settings, client, selected, ca=ca, wheels=wheels, repository=repository)
    path = bake.write_bake(plans, out_dir=settings.out_dir, registry=registry_prefix)
    for p in plans:
        click.echo(f"{bake.target_name(p)}: {p.hash_tag}", err=True)
    click.echo(f"wrote {path}; build with: docker buildx bake -f {path} [TARGET|VARIANT...]", err=True)
    click.echo(str(path))


# --- push --------------------------------------------------------------------------------------------
@main.command("push")
@click.argument("variants", nargs=-1)
@click.option("--registry", "registry_prefix", required=True, help=_REGISTRY_HELP)
@_with(_input_options)
@click.option(
    "--keep-tags/--no-keep-tags",
    default=True,
    show_default=True,
    help="Keep the <registry>/… tags on the engine after pushing.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the pushed refs and digests as JSON.")
@click.pass_obj
def push_cmd(
    settings: Settings,
    variants: Sequence[str],
    registry_prefix: str,
    ca_cert: Path | None,
    wheelhouse: Path | None,
    repository: str,
    keep_tags: bool,
    as_json: bool,
) -> None:
    """Push built images to a registry: the content-hash tag and the version tag."""
    selected = select_variants(_load(settings), variants)
    ca, wheels = preflight(settings, selected, ca_cert=ca_cert, wheelhouse=wheelhouse)
    client = engine.connect()
    plans = plan_variants(settings, client, selected, ca=ca, wheels=wheels, repository=repository)
    local = [p for p in plans if build.existing(client, p) is not None]
    # An image the engine did not build but found in the registry (`build --registry` skipped it) is there.
    there = {p.hash_tag: build.published(p, registry_prefix) for p in plans if p not in local}
    missing = [p for p in plans if p not in local and there[p.hash_tag] is None]
    if missing:
        names = " ".join(dict.fromkeys(p.variant for p in missing))
        raise BuildError(
            f"not built yet: {', '.join(p.hash_tag for p in missing)}; run 'tools/matrix build {names}' first"
        )
    pushes = [publish.plan_push(p, registry=registry_prefix) for p in local]
    results = [publish.execute_push(p, keep_tags=keep_tags) for p in pushes]
    for hash_tag, found in there.items():
        assert found is not None
        click.echo(f"{hash_tag}: already in the registry as {found.image}", err=True)
        results.append(
            publish.PushResult(
                variant=found.variant, platform=found.platform, refs=(found.image,), digest=found.image_id
            )
        )
    if as_json:
        doc = {
            "schema_version": report.JSON_SCHEMA_VERSION,
            "pushed": [
                {"variant": r.variant, "platform": r.platform, "refs": list(r.refs), "digest": r.digest}
                for r in results
            ],
        }
        click.echo(json.dumps(doc, indent=2))
        return
    for r in results:
        click.echo(f"{r.variant} ({r.platform}): pushed {', '.join(r.refs)} ({r.digest or 'digest unknown'})")


# --- manifest ----------------------------------------------------------------------------------------
@main.command("manifest")
@click.argument("pushed", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--registry", "registry_prefix", required=True, help=_REGISTRY_HELP)
@click.option(
    "--repository",
    default=plan.DEFAULT_REPOSITORY,
    show_default=True,
    help="Image repository prefix: lists are <registry>/<repository>/<name>:<version>.",
)
@click.pass_obj
def manifest_cmd(settings: Settings, pushed: Sequence[Path], registry_prefix: str, repository: str) -> None:
    """Publish variants that are one stack on several platforms (matrix.yaml publish_as) under one
    multi-arch tag, from the records of 'tools/matrix push --json' (PUSHED files)."""
    records = manifest.read_pushed(pushed)
    plans = manifest.plan_manifests(_load(settings).variants, records, registry=registry_prefix, repository=repository)
    if not plans:
        click.echo("no published name spans several platforms in these records; nothing to do", err=True)
    for the_plan in plans:
        digest = manifest.execute(the_plan)
        click.echo(f"{the_plan.tags[0]}: manifest list {digest} of {', '.join(the_plan.platforms)}")


# --- pin ---------------------------------------------------------------------------------------------
@main.command("pin")
@click.argument("variants", nargs=-1)
@click.pass_obj
def pin_cmd(settings: Settings, variants: Sequence[str]) -> None:
    """Record the registry digest of each variant's base image in matrix.lock.json (beside matrix.yaml)."""
    selected = select_variants(_load(settings), variants)
    path = pin.lock_path(settings.matrix_path)
    lock = pin.read_lock(path)
    refs = pin.base_refs(selected)
    try:
        pinned = pin.pin(refs, lock=lock, resolve=registry.manifest_digest)
    except RegistryError as exc:
        raise RegistryError(f"{exc}; {path} left unchanged", registry=exc.registry, ref=exc.ref) from exc
    changed = pin.write_lock(pinned, path)
    for ref in refs:
        was = lock.digest(ref)
        now = pinned.digest(ref)
        note = "unchanged" if was == now else (f"was {was}" if was else "new")
        click.echo(f"{ref}@{now} ({note})")
    click.echo(f"{'wrote' if changed else 'unchanged:'} {path}", err=True)
