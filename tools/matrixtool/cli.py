"""``tools/matrix`` (installed: ``matrix``): the click command line.

Commands are thin: each parses its flags into one ``pipeline.Options``, loads and validates matrix.yaml once,
calls one ``pipeline`` function (which touches Docker only if it needs to) and renders the value it returns.
Errors print one ``error:`` message and exit with the code of their class (``errors.ExitCode``);
``--debug`` shows the traceback instead.
"""

from __future__ import annotations

import json
import os
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
    ci,
    engine,
    inputs,
    interrupts,
    pipeline,
    plan,
    profile_flags,
    profiles,
    reference,
    render,
    report,
    signing,
)
from matrixtool.commands import audit as audit_command
from matrixtool.commands import sbom as sbom_command
from matrixtool.commands import static as static_command
from matrixtool.errors import (
    ConfigError,
    EngineUnreachableError,
    ExitCode,
    MatrixError,
    SmokeFailure,
    VariantsFailed,
    most_severe,
)
from matrixtool.matrix import DEFAULT_MATRIX, Matrix, Variant, load_matrix, url_problem
from matrixtool.select import select_variants

# --out's default: build/ next to the matrix file.
DEFAULT_OUT_NAME = "build"


@dataclass(frozen=True, kw_only=True)
class Settings:
    """Options shared by every command: the matrix file, output folder, environment and debug flag."""

    matrix_path: Path
    out_dir: Path
    env: Mapping[str, str]
    debug: bool


class _UsageLine(click.ClickException):
    """A usage error shown as one ``error:`` line (click's own shows the usage text and ``Error:``), exit 2."""

    exit_code = int(ExitCode.USAGE)

    def __init__(self, exc: click.UsageError) -> None:
        command = exc.ctx.command_path if exc.ctx is not None else "tools/matrix"
        super().__init__(f"{exc.format_message().rstrip('.')}; see '{command} --help'")

    def show(self, file: Any = None) -> None:
        click.echo(f"error: {self.format_message()}", err=True)


# click >= 8.2 raises this (a UsageError whose message is the help text) for a bare ``tools/matrix``.
_NO_ARGS_IS_HELP: tuple[type[Exception], ...] = tuple(
    e for e in [getattr(click.exceptions, "NoArgsIsHelpError", None)] if isinstance(e, type)
)


def _traceback_if_debug(ctx: click.Context) -> None:
    """Print the current exception's traceback to stderr when ``--debug`` was given."""
    if ctx.obj is not None and ctx.obj.debug:
        traceback.print_exc()


class MatrixGroup(click.Group):
    """A click group that turns ``MatrixError`` into one message and its exit code, and a usage error into
    one ``error:`` line (exit 2)."""

    def make_context(
        self, info_name: str | None, args: list[str], parent: click.Context | None = None, **extra: Any
    ) -> click.Context:
        try:
            return super().make_context(info_name, args, parent=parent, **extra)
        except _NO_ARGS_IS_HELP:
            raise  # no command at all: click shows the help
        except click.UsageError as exc:
            raise _UsageLine(exc) from exc

    def invoke(self, ctx: click.Context) -> Any:
        try:
            with interrupts.handled(build.terminate_running):
                return super().invoke(ctx)
        except KeyboardInterrupt as exc:
            # Ctrl-C or SIGTERM: context managers have removed the smoke container, builds were ended.
            _traceback_if_debug(ctx)
            code = interrupts.exit_code_of(exc)
            signal_name = "SIGTERM" if code is ExitCode.TERMINATED else "SIGINT"
            click.echo(
                f"error: interrupted by {signal_name}; running builds and smoke containers were stopped", err=True
            )
            ctx.exit(int(code))
        except MatrixError as exc:
            _traceback_if_debug(ctx)
            click.echo(f"error: {exc}", err=True)
            ctx.exit(int(exc.exit_code))
        except docker.errors.APIError as exc:
            # The engine answered, and refused: not an unreachable engine.
            _traceback_if_debug(ctx)
            click.echo(f"error: the Docker engine refused a request: {exc.explanation or exc}", err=True)
            ctx.exit(int(ExitCode.UNEXPECTED))
        except docker.errors.DockerException as exc:
            _traceback_if_debug(ctx)
            click.echo(f"error: Docker engine: {exc}; run 'tools/matrix doctor'", err=True)
            ctx.exit(int(ExitCode.ENGINE))
        except click.UsageError as exc:
            raise _UsageLine(exc) from exc
        except (click.exceptions.Exit, click.ClickException, click.exceptions.Abort):
            raise
        except Exception as exc:
            # A bug of this tool, not bad input: one line, and the traceback only with --debug.
            _traceback_if_debug(ctx)
            click.echo(
                f"error: unexpected {type(exc).__name__}: {exc}; rerun with --debug for the traceback and report it",
                err=True,
            )
            ctx.exit(int(ExitCode.UNEXPECTED))


@click.group(cls=MatrixGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--matrix",
    "matrix_path",
    # readable=False: load_matrix reports an unreadable file as a config error (exit 3), like every other.
    type=click.Path(path_type=Path, readable=False),
    default=DEFAULT_MATRIX,
    show_default=True,
    help="The matrix file.",
)
@click.option(
    "--out",
    "out_dir",
    type=click.Path(path_type=Path),
    default=None,
    help="Folder for logs, reports and staged build contexts.  [default: build/ next to the matrix file]",
)
@click.option("--debug", is_flag=True, help="Show tracebacks.")
@click.pass_context
def main(ctx: click.Context, matrix_path: Path, out_dir: Path | None, debug: bool) -> None:
    """Build and smoke-test vLLM inference images from matrix.yaml."""
    out = out_dir if out_dir is not None else matrix_path.parent / DEFAULT_OUT_NAME
    ctx.obj = Settings(matrix_path=matrix_path, out_dir=out, env=dict(os.environ), debug=debug)


def _load(settings: Settings) -> Matrix:
    return load_matrix(settings.matrix_path)


# --- render ------------------------------------------------------------------------------------------
@main.command("render")
@click.option("--check", is_flag=True, help="Fail (exit 5) when images/ differs from a fresh render.")
@click.pass_obj
def render_cmd(settings: Settings, /, check: bool) -> None:
    """Write images/<variant>/ from matrix.yaml and templates/."""
    files = render.render_matrix(_load(settings))
    root = settings.matrix_path.parent
    if check:
        render.check_fresh(files, root)
        click.echo(f"images/ is fresh ({len(files)} files)")
        return
    changed = render.write(files, root)
    for path in changed:
        click.echo(f"{'wrote' if (root / path).exists() else 'removed'} {path}")
    click.echo(f"{len(changed)} file(s) changed, {len(files)} rendered")


# --- doctor ------------------------------------------------------------------------------------------
@main.command()
@click.option("--registry", default="registry-1.docker.io", show_default=True, help="Registry host to probe.")
def doctor(registry: str) -> None:
    """Report engine, buildx, arm64 emulation and registry reachability, with the fix for each."""
    problem = reference.registry_problem(registry)
    if problem is not None:
        raise ConfigError("flags", [f"--registry {registry!r} {problem}"])
    findings = engine.doctor(registry)
    for f in findings:
        click.echo(f"{f.status.value:4}  {f.name:16} {f.detail}")
        if f.fix:
            click.echo(f"      {'':16} fix: {f.fix}")
    failed = [f.name for f in findings if f.status is engine.FindingStatus.FAIL]
    if failed:
        raise EngineUnreachableError(f"doctor: {', '.join(failed)} failed; apply the fixes above")


# --- base --------------------------------------------------------------------------------------------
@main.command("base")
@click.argument("variants", nargs=-1)
@click.option("--mirror", default=base.DEFAULT_MIRROR, show_default=True, help="Debian mirror for stand-ins.")
@click.pass_obj
def base_cmd(settings: Settings, /, variants: Sequence[str], mirror: str) -> None:
    """Provide each variant's base image: local, pulled, or a debootstrap stand-in tagged with its ref."""
    selected = select_variants(_load(settings), variants)
    problem = url_problem(mirror)
    if problem is not None:
        raise ConfigError("flags", [f"--mirror {mirror!r} {problem.replace('an index URL', 'a mirror URL')}"])
    client = engine.connect()
    for variant in selected:
        for platform in variant.platforms:
            got = base.provide(
                client, variant.base_image, platform=platform, suite=variant.stand_in_suite, mirror=mirror
            )
            click.echo(f"{variant.name}: {got.ref} ({platform}) {got.origin} {got.image_id[:19]}")


# --- build, run, test ---------------------------------------------------------------------------------
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
        "registry",
        default=None,
        help="Also skip a build whose content-hash tag is in this registry. " + _REGISTRY_HELP,
    ),
    click.option(
        "--cache-registry",
        default=None,
        help="Keep BuildKit's cache in this registry as <registry>/<repository>/<variant>:buildcache-<arch> "
        "(read, and written after a build). " + _REGISTRY_HELP,
    ),
    click.option(
        "--cache-read-only",
        is_flag=True,
        help="With --cache-registry: read the cache, never write it (pull requests).",
    ),
]


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
    settings: Settings,
    result: report.RunReport,
    as_json: bool,
    junit: Path | None,
    json_file: Path | None = None,
) -> None:
    """Write the reports (JUnit, JSON file, GitHub summary), print the table or JSON, then exit by the result.

    Raises:
        VariantsFailed: a variant failed before its checks (``--keep-going``); its exit code is the most
            severe of the variants' ``RunReport.error_codes`` and of a failed check (``errors.most_severe``).
        SmokeFailure: a check failed or timed out (exit 7).
    """
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
        failed_checks = [ExitCode.SMOKE] if not all(c.status.ok for c in result.checks) else []
        code = most_severe([result.error_codes.get(n, ExitCode.BUILD) for n in result.errors] + failed_checks)
        raise VariantsFailed(
            f"{len(result.errors)} variant(s) failed before their smoke checks: {', '.join(result.errors)}; "
            "see the summary above and the build logs it names",
            code or ExitCode.BUILD,
        )
    if not result.ok:
        raise SmokeFailure("smoke checks failed; see the table above, the logs it names, and the fix hints")


def _check_flags(
    settings: Settings,
    selected: Sequence[Variant],
    flags: Mapping[str, Any],
    *,
    image: str | None = None,
    junit: Path | None = None,
    json_file: Path | None = None,
    writes_out: bool = True,
) -> None:
    """Every flag checked before the engine is touched: references by the OCI grammar (``reference.py``),
    the output paths, ``--only``/``--skip`` and ``--profile`` against each selected variant, and an unused
    ``--wheelhouse`` (a warning; ``inputs.py``).

    Raises:
        ConfigError: naming each bad flag and its value (exit 3).
    """
    reference.check_flags(image=image, registry=flags.get("registry"), repository=flags.get("repository"))
    cache_registry = flags.get("cache_registry")
    cache_problem = reference.registry_problem(cache_registry) if cache_registry is not None else None
    if cache_problem is not None:
        raise ConfigError("flags", [f"--cache-registry {cache_registry!r} {cache_problem}"])
    if flags.get("cache_read_only") and cache_registry is None:
        raise ConfigError("flags", ["--cache-read-only needs --cache-registry"])
    inputs.warn_unused_wheelhouse(selected, flags.get("wheelhouse"))
    if writes_out:
        inputs.check_outputs(settings.out_dir, junit=junit, json_file=json_file)
    inputs.check_suite(flags.get("suite", "full"))
    if flags.get("only") or flags.get("skip"):
        inputs.check_selection(selected, flags.get("only", ()), flags.get("skip", ()))
    choice = flags.get("choice")
    if choice is not None:  # an unknown --profile fails now, not after the build
        for variant in selected:
            choice.resolve(variant.name, variant.profiles)


def _options(settings: Settings, **flags: Any) -> pipeline.Options:
    """The one options value of a pipeline command: the common options plus the command's flags (each flag's
    parameter name is a field of ``pipeline.Options``: a flag added to a command needs that field too)."""
    for name in ("only", "skip"):
        if name in flags:
            flags[name] = tuple(flags[name])
    return pipeline.Options(matrix_path=settings.matrix_path, out_dir=settings.out_dir, env=settings.env, **flags)


@main.command("build")
@click.argument("variants", nargs=-1)
@_with(_build_options)
@_report_options
@click.pass_obj
def build_cmd(
    settings: Settings,
    /,
    variants: Sequence[str],
    as_json: bool,
    json_file: Path | None,
    junit: Path | None,
    **flags: Any,
) -> None:
    """Build variants with BuildKit (no smoke checks)."""
    matrix = _load(settings)
    selected = select_variants(matrix, variants)
    _check_flags(settings, selected, flags, junit=junit, json_file=json_file)
    result = pipeline.build_variants(matrix, selected, _options(settings, **flags))
    _finish(settings, result, as_json, junit, json_file)


_select_options = [
    click.option("--only", multiple=True, help="Run only this check (repeatable)."),
    click.option("--skip", multiple=True, help="Skip this check (repeatable)."),
    click.option(
        "--suite",
        default="full",
        show_default=True,
        help="Suite of checks: quick (pull requests: no compiled generate, no inductor compile) or full.",
    ),
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
@profile_flags.options(())
@click.pass_obj
def run_cmd(
    settings: Settings,
    /,
    variants: Sequence[str],
    as_json: bool,
    json_file: Path | None,
    junit: Path | None,
    **flags: Any,
) -> None:
    """Render-check, build and smoke-test variants under every deployment profile; print a summary table."""
    matrix = _load(settings)
    selected = select_variants(matrix, variants)
    _check_flags(settings, selected, flags, junit=junit, json_file=json_file)
    options = _options(settings, quiet=as_json, **flags)
    result = pipeline.run_variants(matrix, selected, options)
    _finish(settings, result, as_json, junit, json_file)


_signing_options = [
    click.option(
        "--sign-key",
        type=click.Path(path_type=Path),
        default=None,
        help="cosign private key: sign each pushed digest and attach the SBOM, provenance and --smoke-report "
        "(password in COSIGN_PASSWORD).",
    ),
    click.option(
        "--smoke-report",
        type=click.Path(path_type=Path),
        default=None,
        help="With --sign-key: the smoke report to attach (the --json-file of 'run' or 'test').",
    ),
]
_VERIFY_KEY = click.option(
    "--verify-key",
    type=click.Path(path_type=Path),
    default=None,
    help="cosign public key: use an image only when its registry digest is signed by this key (exit 15 if not).",
)


def _check_keys(settings: Settings, flags: Mapping[str, Any]) -> None:
    signing.check_key_flags(
        sign_key=flags.get("sign_key"), smoke_report=flags.get("smoke_report"), verify_key=flags.get("verify_key"),
        env=settings.env,
    )  # fmt: skip


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
@profile_flags.options((profiles.DEFAULT,))
@_VERIFY_KEY
@click.pass_obj
def test_cmd(
    settings: Settings,
    /,
    image: str | None,
    host: bool,
    python: str,
    as_variant: str,
    as_json: bool,
    json_file: Path | None,
    junit: Path | None,
    **flags: Any,
) -> None:
    """Run the smoke suite against any image (--image) or this machine's Python (--host)."""
    if (image is None) == (not host):
        raise click.UsageError("give exactly one of --image REF and --host")
    if as_variant == "all":
        raise click.UsageError("--as takes one variant name, not 'all'")
    if host and flags["choice"] != profiles.ProfileChoice(names=(profiles.DEFAULT,)):
        raise click.UsageError(
            "deployment profiles (--profile, --user, --read-only ...) need --image: they are container conditions"
        )
    if host and flags["verify_key"] is not None:
        raise click.UsageError("--verify-key needs --image (a signature covers an image)")
    matrix = _load(settings)
    (variant,) = select_variants(matrix, [as_variant])
    _check_flags(settings, [variant], flags, image=image, junit=junit, json_file=json_file)
    _check_keys(settings, flags)
    options = _options(settings, quiet=as_json, **flags)
    if host:
        result = pipeline.test_host(variant, python, options)
    else:
        assert image is not None
        result = pipeline.test_image(matrix, variant, image, options)
    _finish(settings, result, as_json, junit, json_file)


# --- ci-matrix ---------------------------------------------------------------------------------------
@main.command("ci-matrix")
@click.argument("variants", nargs=-1)
@click.option("--hosted-only", is_flag=True, help="Leave out variants on self-hosted runners (fork pull requests).")
@click.pass_obj
def ci_matrix_cmd(settings: Settings, /, variants: Sequence[str], hosted_only: bool) -> None:
    """Print the GitHub Actions matrix (JSON, one line): one entry per variant x platform."""
    click.echo(ci.ci_matrix_json(select_variants(_load(settings), variants), hosted_only=hosted_only))


# --- bake --------------------------------------------------------------------------------------------
@main.command("bake")
@click.argument("variants", nargs=-1)
@_with(_input_options)
@click.option(
    "--registry",
    "registry",
    default=None,
    help="Add the same tags under this registry and use them as cache-from. " + _REGISTRY_HELP,
)
@click.pass_obj
def bake_cmd(settings: Settings, /, variants: Sequence[str], **flags: Any) -> None:
    """Write <out>/docker-bake.json (one target per variant x platform) and stage each target's context.

    Needs no engine and no network: what it cannot check (an index that does not answer, a base image the
    engine lacks, no engine at all) is a warning, and the bake file names the base as matrix.yaml does.
    """
    matrix = _load(settings)
    selected = select_variants(matrix, variants)
    _check_flags(settings, selected, flags)
    result = pipeline.bake_variants(matrix, selected, _options(settings, **flags))
    for p in result.plans:
        click.echo(f"{bake.target_name(p)}: {p.hash_ref}", err=True)
    for warning in result.warnings:
        click.echo(f"warning: {warning}", err=True)
    click.echo(f"wrote {result.path}; build with: docker buildx bake -f {result.path} [TARGET|VARIANT...]", err=True)
    click.echo(str(result.path))


# --- push --------------------------------------------------------------------------------------------
@main.command("push")
@click.argument("variants", nargs=-1)
@click.option("--registry", "registry", required=True, help=_REGISTRY_HELP)
@_with(_input_options)
@click.option(
    "--keep-tags/--no-keep-tags",
    default=True,
    show_default=True,
    help="Keep the <registry>/… tags on the engine after pushing.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the pushed refs and digests as JSON.")
@_with(_signing_options)
@click.pass_obj
def push_cmd(settings: Settings, /, variants: Sequence[str], as_json: bool, **flags: Any) -> None:
    """Push built images to a registry: the content-hash tag and the version tag."""
    matrix = _load(settings)
    selected = select_variants(matrix, variants)
    _check_flags(settings, selected, flags, writes_out=False)
    _check_keys(settings, flags)
    result = pipeline.push_variants(matrix, selected, _options(settings, **flags))
    if as_json:
        doc = {
            "schema_version": report.JSON_SCHEMA_VERSION,
            "pushed": [
                {"variant": r.variant, "platform": r.platform, "refs": list(r.refs), "digest": r.digest}
                for r in result.pushed
            ],
        }
        click.echo(json.dumps(doc, indent=2))
        return
    for r in result.pushed:
        click.echo(f"{r.variant} ({r.platform}): pushed {', '.join(r.refs)} ({r.digest or 'digest unknown'})")


# --- manifest ----------------------------------------------------------------------------------------
@main.command("manifest")
@click.argument("pushed", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--registry", "registry", required=True, help=_REGISTRY_HELP)
@click.option(
    "--repository",
    default=plan.DEFAULT_REPOSITORY,
    show_default=True,
    help="Image repository prefix: lists are <registry>/<repository>/<name>:<version>.",
)
@_VERIFY_KEY
@click.pass_obj
def manifest_cmd(
    settings: Settings, /, pushed: Sequence[Path], registry: str, repository: str, verify_key: Path | None
) -> None:
    """Publish variants that are one stack on several platforms (matrix.yaml publish_as) under one
    multi-arch tag, from the records of 'tools/matrix push --json' (PUSHED files)."""
    reference.check_flags(registry=registry, repository=repository)
    _check_keys(settings, {"verify_key": verify_key})
    published = pipeline.publish_manifests(
        _load(settings), pushed, registry=registry, repository=repository, verify_key=verify_key, env=settings.env
    )
    if not published:
        click.echo("no published name spans several platforms in these records; nothing to do", err=True)
    for the_plan, digest in published:
        click.echo(f"{the_plan.tags[0]}: manifest list {digest} of {', '.join(the_plan.platforms)}")


# --- pin ---------------------------------------------------------------------------------------------
@main.command("pin")
@click.argument("variants", nargs=-1)
@_VERIFY_KEY
@click.pass_obj
def pin_cmd(settings: Settings, /, variants: Sequence[str], verify_key: Path | None) -> None:
    """Record the registry digest of each variant's base image in matrix.lock.json (beside matrix.yaml)."""
    matrix = _load(settings)
    _check_keys(settings, {"verify_key": verify_key})
    result = pipeline.pin_variants(matrix, select_variants(matrix, variants), verify_key=verify_key, env=settings.env)
    for ref in result.refs:
        was, now = result.before.digest(ref), result.after.digest(ref)
        note = "unchanged" if was == now else (f"was {was}" if was else "new")
        click.echo(f"{ref}@{now} ({note})")
    click.echo(f"{'wrote' if result.changed else 'unchanged:'} {result.path}", err=True)


main.add_command(sbom_command.command)
main.add_command(audit_command.command)
main.add_command(static_command.command)
