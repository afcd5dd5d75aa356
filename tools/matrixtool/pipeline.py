"""The pipeline behind the commands: input checks, base images, planning, builds, smoke checks, pushes.

``matrix.yaml → Matrix → select → render (check) → inputs → bases → plan → build → smoke → report``.
Each command of ``cli.py`` parses its flags into one ``Options`` value, loads the matrix once, calls one
function here and renders the value it returns (``report.RunReport``, ``BakeReport``, ``PushReport``,
``PinReport``). Progress lines go to stderr as they happen; nothing here decides an exit code except by
raising a ``MatrixError`` or, under ``--keep-going``, recording each failed variant's error code in
``RunReport.error_codes`` (``cli`` exits with the most severe, ``errors.most_severe``).

Engines: ``build``, ``run``, ``test --image``, ``push`` and ``pin`` take a Docker client made once per command
(``engine.connect``); ``bake`` takes one when an engine answers and works without one.
"""

from __future__ import annotations

import concurrent.futures
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import docker

from matrixtool import (
    attestations,
    bake,
    base,
    build,
    cache,
    engine,
    index,
    manifest,
    pin,
    plan,
    profiles,
    push,
    registry,
    render,
    report,
    smoke,
)
from matrixtool import wheelhouse as wheelhouses
from matrixtool.budget import check_budget
from matrixtool.checks import CHECKS, DEFAULT_SUITE, in_suite, prerequisites
from matrixtool.errors import (
    ConfigError,
    EngineUnreachableError,
    ExitCode,
    IndexUnreachableError,
    MatrixError,
    NotBuiltError,
    RegistryError,
)
from matrixtool.inputs import check_selection, check_suite
from matrixtool.matrix import CheckSpec, Matrix, Platform, Variant


@dataclass(frozen=True, kw_only=True)
class Options:
    """Every option a pipeline run takes, as parsed from the command line (defaults: the flags' defaults).

    ``matrix_path``/``out_dir``: the matrix file and the folder for logs, reports and staged contexts;
    ``env``: the environment (CA bundle and wheelhouse variables, ``GITHUB_*``); ``ca_cert``/``wheelhouse``:
    the flags (None: from ``env``); ``registry``: ``HOST[:PORT][/NAMESPACE]`` or None; ``only``/``skip``: check
    names; ``jobs``: variants built at once; ``quiet``: no per-check progress lines (``--json``).
    """

    matrix_path: Path
    out_dir: Path
    env: Mapping[str, str] = field(default_factory=dict)
    ca_cert: Path | None = None
    wheelhouse: Path | None = None
    repository: str = plan.DEFAULT_REPOSITORY
    registry: str | None = None
    force: bool = False
    only: tuple[str, ...] = ()
    skip: tuple[str, ...] = ()
    # The suite of checks (``checks.SUITES``): ``quick`` for pull requests, ``full`` for runs and publishing.
    suite: str = DEFAULT_SUITE
    keep_going: bool = False
    jobs: int = 1
    quiet: bool = False
    keep_tags: bool = True
    # Deployment profiles and ad-hoc run conditions (``--profile``, ``--user`` ...; README "Deployment profiles");
    # no names: every profile of the variant.
    choice: profiles.ProfileChoice = field(default_factory=profiles.ProfileChoice)
    # --cache-registry HOST[:PORT][/NAMESPACE]: BuildKit's cache per variant and platform in that registry
    # (cache.py); --cache-read-only: read it, never write it (pull requests).
    cache_registry: str | None = None
    cache_read_only: bool = False
    # Issue 21 (attestations.py): push --sign-key/--smoke-report; test --image --verify-key.
    sign_key: Path | None = None
    smoke_report: Path | None = None
    verify_key: Path | None = None

    @property
    def log_dir(self) -> Path:
        """``<out>/logs``: build logs and one log per check."""
        return self.out_dir / "logs"


@dataclass(frozen=True, kw_only=True)
class Inputs:
    """The resolved inputs shared by every variant: CA bundle and wheelhouse (flag, else environment)."""

    ca_cert: Path | None
    wheelhouse: Path | None


@dataclass(frozen=True, kw_only=True)
class BakeReport:
    """``bake``'s result: the bake file, the plans it holds, and what could not be checked (one line each)."""

    path: Path
    plans: Sequence[plan.BuildPlan]
    warnings: Sequence[str] = ()


@dataclass(frozen=True, kw_only=True)
class PushReport:
    """``push``'s result: one ``PushResult`` per pushed plan."""

    pushed: Sequence[push.PushResult]


@dataclass(frozen=True, kw_only=True)
class PinReport:
    """``pin``'s result: the lock file, each ref's digest before (None: new) and now, and whether it changed."""

    path: Path
    before: pin.Lock
    after: pin.Lock
    refs: Sequence[str]
    changed: bool


def note(message: str) -> None:
    """A progress line on stderr."""
    print(message, file=sys.stderr, flush=True)


# --- inputs ------------------------------------------------------------------------------------------
def resolve_inputs(options: Options) -> Inputs:
    """The CA bundle and wheelhouse to use: the flags, else ``options.env`` (``plan.resolve_*``)."""
    return Inputs(
        ca_cert=plan.resolve_ca_cert(options.ca_cert, options.env),
        wheelhouse=plan.resolve_wheelhouse(options.wheelhouse, options.env),
    )


def check_fresh(matrix: Matrix) -> None:
    """Raise ``StaleRenderError`` when ``images/`` next to the matrix file is not a fresh render of it."""
    render.check_fresh(render.render_matrix(matrix), matrix.root)


def check_inputs(variant: Variant, inputs: Inputs) -> None:
    """Check ``variant``'s local inputs: the CA bundle is a file; a wheelhouse variant has a wheelhouse
    holding its torch wheel.

    Raises:
        ConfigError: every problem found, each with what to pass instead.
    """
    wheelhouse, ca_cert = inputs.wheelhouse, inputs.ca_cert
    problems = []
    if ca_cert is not None and not ca_cert.is_file():
        problems.append(
            f"CA bundle {ca_cert} (from --ca-cert or {'/'.join(plan.CA_ENV_VARS)}) is not a file; "
            "pass --ca-cert FILE or unset the variable"
        )
    # Each platform needs a wheel whose tags fit it and the variant's Python (wheelhouse.py), not any torch wheel.
    problems += wheelhouses.problems(variant, wheelhouse, env_var=plan.WHEELHOUSE_ENV_VAR)
    if problems:
        raise ConfigError(f"inputs of variant {variant.name}", problems)


def unreachable_indexes(variant: Variant, inputs: Inputs) -> list[tuple[str, str]]:
    """``(url, reason)`` for each of ``variant``'s package indexes that does not answer a probe
    (``index.probe``, at most ``index.PROBE_TIMEOUT`` seconds each)."""
    found = []
    for url in (variant.index.url, *variant.index.extra_urls):
        problem = index.probe(url, ca_cert=inputs.ca_cert, timeout=index.PROBE_TIMEOUT)
        if problem is not None:
            found.append((url, problem))
    return found


def check_index_reachable(variant: Variant, inputs: Inputs) -> None:
    """Fail in seconds, not after a hung build, when the variant's package index does not answer.

    Raises:
        IndexUnreachableError: naming the index and the ways out (a wheelhouse, or another index in matrix.yaml).
    """
    for url, problem in unreachable_indexes(variant, inputs)[:1]:
        # --wheelhouse is a way out only where the variant takes one (matrix.yaml index.wheelhouse).
        wheelhouse = (
            f"pass --wheelhouse DIR holding the wheels ({variant.torch.requirement} and what it needs), or "
            if variant.index.wheelhouse
            else ""
        )
        raise IndexUnreachableError(
            f"variant {variant.name}: package index {url} is unreachable from this machine ({problem}); "
            f"the build would hang on it. Ways out: {wheelhouse}point variants.{variant.name}.index.url "
            "in matrix.yaml at a mirror you can reach, then 'tools/matrix render'"
        )


def preflight(matrix: Matrix, variants: Sequence[Variant], options: Options) -> Inputs:
    """Everything checked before the engine is touched: a fresh render of ``images/``, each variant's
    inputs (wheelhouse, CA bundle), then each variant's package index.

    Raises:
        StaleRenderError, ConfigError, IndexUnreachableError (an index does not answer).
    """
    check_fresh(matrix)
    inputs = resolve_inputs(options)
    for variant in variants:
        check_inputs(variant, inputs)
    for variant in variants:
        check_index_reachable(variant, inputs)
    return inputs


# --- base images, then plans ---------------------------------------------------------------------------
BaseKey = tuple[str, Platform]  # (variant name, platform)


def provide_bases(
    client: docker.DockerClient, variants: Sequence[Variant], lock: pin.Lock
) -> dict[BaseKey, base.BaseImage]:
    """Make every (variant, platform)'s base image present (``base.provide``: local, pulled or a stand-in;
    ``ref@digest`` when pinned in ``lock``).

    Raises:
        BuildError: a base could not be provided.
    """
    return {
        (v.name, p): base.provide(
            client, v.base_image, platform=p, suite=v.stand_in_suite, digest=lock.digest(v.base_image)
        )
        for v in variants
        for p in v.platforms
    }


def look_up_bases(
    client: docker.DockerClient | None, variants: Sequence[Variant], lock: pin.Lock
) -> tuple[dict[BaseKey, base.BaseImage], list[str]]:
    """The bases the engine already has (``base.lookup``; nothing pulled or made), and a warning for each
    one it lacks, or one warning when there is no engine (``client`` None)."""
    if client is None:
        return {}, ["no Docker engine: base images were not checked; the bake file names them as matrix.yaml does"]
    found: dict[BaseKey, base.BaseImage] = {}
    warnings = []
    for v in variants:
        digest = lock.digest(v.base_image)
        for p in v.platforms:
            got = base.lookup(client, v.base_image, platform=p, digest=digest)
            if got is not None:
                found[(v.name, p)] = got
            else:
                warnings.append(
                    f"{v.name} ({p}): base image {plan.pinned_ref(v.base_image, digest)} is not on the engine; "
                    "the bake file builds FROM it as named, and its content hash differs from a local build's "
                    "('tools/matrix base' provides it)"
                )
    return found, warnings


@dataclass(frozen=True, kw_only=True)
class Provenance:
    """Where the build inputs come from: the checkout's ``revision`` and ``source`` URL (image labels)."""

    revision: str
    source: str


def provenance(root: Path) -> Provenance:
    """The git revision and origin URL of the checkout at ``root`` (``unknown``/the folder outside git)."""

    def git(*args: str) -> str | None:
        try:
            proc = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=False)
        except OSError:
            return None
        return proc.stdout.strip() if proc.returncode == 0 and proc.stdout.strip() else None

    return Provenance(
        revision=git("rev-parse", "HEAD") or "unknown", source=git("remote", "get-url", "origin") or str(root)
    )


def plan_variants(
    matrix: Matrix,
    variants: Sequence[Variant],
    bases: dict[BaseKey, base.BaseImage],
    *,
    lock: pin.Lock,
    inputs: Inputs,
    options: Options,
    origin: Provenance,
) -> list[plan.BuildPlan]:
    """Plan every (variant, platform), pure: ``bases`` are what providing or looking up found (a key missing:
    the base is unchecked, named as in matrix.yaml, or ``ref@digest`` when pinned in ``lock``).

    ``build``, ``run``, ``bake`` and ``push`` all plan here, so their tags, labels and content hashes agree.

    Raises:
        ConfigError: a stand-in base ships another Python than the variant accepts (``plan.stand_in_python``).
    """
    plans = []
    for variant in variants:
        files = tuple(render.render_variant(variant, matrix.templates_dir))
        digest = lock.digest(variant.base_image)
        for platform in variant.platforms:
            got = bases.get((variant.name, platform))
            wheels = inputs.wheelhouse if variant.index.wheelhouse else None
            plans.append(
                plan.plan_build(
                    variant,
                    platform=platform,
                    files=files,
                    base_image_id=got.image_id if got else None,
                    wheelhouse=wheels,
                    wheelhouse_rows=plan.wheelhouse_fingerprint(wheels) if wheels else [],
                    ca_cert=inputs.ca_cert,
                    revision=origin.revision,
                    source_url=origin.source,
                    repository=options.repository,
                    base_digest=digest,
                    base_local=got.local_tag if got else None,
                    stand_in_suite=got.stand_in_suite if got else None,
                )
            )
    return plans


def provide_and_plan(
    client: docker.DockerClient, matrix: Matrix, variants: Sequence[Variant], inputs: Inputs, options: Options
) -> list[plan.BuildPlan]:
    """``provide_bases`` then ``plan_variants``, saying when a stand-in base changes the build's Python.

    Raises:
        ConfigError (lock file, stand-in Python), BuildError (base image).
    """
    lock = pin.read_lock(pin.lock_path(matrix.source))
    bases = provide_bases(client, variants, lock)
    plans = plan_variants(
        matrix, variants, bases, lock=lock, inputs=inputs, options=options, origin=provenance(matrix.root)
    )
    for p in plans:
        got = bases[(p.variant, p.platform)]
        if p.python_version:
            variant = next(v for v in variants if v.name == p.variant)
            note(
                f"{p.variant} ({p.platform}): base {p.base_image} is a Debian {got.stand_in_suite} stand-in: "
                f"building with Python {p.python_version} (upstream: {variant.python})"
            )
    return plans


# --- builds --------------------------------------------------------------------------------------------
def execute_plans(
    client: docker.DockerClient, plans: Sequence[plan.BuildPlan], options: Options
) -> list[build.BuildResult]:
    """Build ``plans`` in order, skipping (unless ``options.force``) those whose content-hash tag is on the
    engine or, with ``options.registry``, in that registry.

    Raises:
        BuildError, RegistryError (the registry did not answer).
    """
    results = []
    settings = None
    if options.cache_registry is not None:
        settings = cache.CacheSettings(
            registry=options.cache_registry, write=not options.cache_read_only, driver=cache.builder_driver()
        )
    for the_plan in plans:
        if settings is not None:
            the_plan = cache.apply(the_plan, settings)
        done = None if options.force else build.existing(client, the_plan)
        if done is not None:
            note(f"{the_plan.variant}: {done.image} exists (content hash unchanged); --force rebuilds")
        elif not options.force and options.registry:
            done = build.published(the_plan, options.registry, registry.EngineRegistry(client))
            if done is not None:
                note(
                    f"{the_plan.variant}: {done.image} exists in the registry (content hash unchanged); "
                    "--force rebuilds"
                )
        if done is None:
            done = build.execute(client, the_plan, work_dir=options.out_dir / "context", log_dir=options.log_dir)
            if settings is not None:
                cache.export_inline(the_plan, settings)
        results.append(done)
    return results


def build_variants(matrix: Matrix, variants: Sequence[Variant], options: Options) -> report.RunReport:
    """``tools/matrix build``: preflight, bases, plans and builds of ``variants``; no smoke checks.

    Raises:
        StaleRenderError, ConfigError, BuildError, RegistryError, EngineUnreachableError.
    """
    inputs = preflight(matrix, variants, options)
    client = engine.connect()
    plans = provide_and_plan(client, matrix, variants, inputs, options)
    results = execute_plans(client, plans, options)
    _write_build_reports(client, matrix, plans, results, options)
    return report.RunReport(builds=results)


def _write_build_reports(
    client: docker.DockerClient,
    matrix: Matrix,
    plans: Sequence[plan.BuildPlan],
    results: Sequence[build.BuildResult],
    options: Options,
) -> None:
    origin = provenance(matrix.root)
    attestations.write_build_reports(
        client, plans, results, matrix_path=matrix.source, out_dir=options.out_dir,
        revision=origin.revision, source=origin.source,
    )  # fmt: skip


# --- smoke checks --------------------------------------------------------------------------------------
def select_checks(
    variant: Variant, only: Sequence[str], skip: Sequence[str], suite: str = DEFAULT_SUITE
) -> list[CheckSpec]:
    """``variant``'s checks of ``suite``, narrowed by ``--only`` (when given: those run whatever their suites)
    and ``--skip``, plus every check they need or use (``checks.prerequisites``: a check whose prerequisite
    failed reports ``skipped: <check> failed``, so the prerequisite's own failure must be in the report).
    Prerequisites the variant does not list come first, with their declared timeouts.

    Raises:
        ConfigError: a name is not a check of the variant, nothing is left to run
            (``inputs.check_selection``, the one place that validates a selection), or an unknown suite.
    """
    check_selection([variant], only, skip)
    check_suite(suite)
    names = [c.name for c in variant.checks if (not only or c.name in only) and c.name not in skip]
    if not only:
        names = in_suite(names, suite)
    wanted = prerequisites(names)
    listed = {c.name: c for c in variant.checks}
    extra = [CheckSpec(name=n, timeout=CHECKS[n].timeout) for n in wanted if n not in listed]
    return extra + [c for c in variant.checks if c.name in wanted]


def _progress(options: Options) -> Callable[[smoke.CheckResult], None]:
    def show(r: smoke.CheckResult) -> None:
        if not options.quiet:
            note(f"[{r.variant}] {r.check}: {r.status.value} ({r.seconds:.1f} s) {r.diagnosis}")

    return show


def smoke_image(client: docker.DockerClient, image: str, variant: Variant, options: Options) -> list[smoke.CheckResult]:
    """Run ``variant``'s selected checks (``options.only``/``skip``) inside ``image``, under each chosen
    deployment profile (``options.choice``; ``smoke.run_profiles``).

    Raises:
        ConfigError (an unknown profile), WrongPlatformError (the image's platform is not the variant's).
    """
    selected = select_checks(variant, options.only, options.skip, options.suite)
    chosen = options.choice.resolve(variant.name, variant.profiles)
    results = smoke.run_profiles(
        client,
        image,
        variant,
        selected,
        chosen,
        log_dir=options.log_dir,
        on_result=_progress(options),
        announce=note,
        suite=options.suite,
    )
    # matrix.yaml size_budget: within it one line on stderr (--json too); over it a failed result `size-budget`.
    judged = check_budget(client, image, variant, results, log_dir=options.log_dir)
    if judged is not None and judged.status.ok:
        note(f"[{variant.name}] size-budget: {judged.status.value}: {judged.diagnosis}")
    elif judged is not None:
        _progress(options)(judged)
        results.append(judged)
    return results


def test_image(matrix: Matrix, variant: Variant, image: str, options: Options) -> report.RunReport:
    """``tools/matrix test --image``: pull ``image`` when the engine lacks it, then run the checks in it.

    Raises:
        ConfigError (check selection), RegistryError (the pull failed), EngineUnreachableError.
    """
    select_checks(variant, options.only, options.skip, options.suite)
    client = engine.connect()
    if options.verify_key is not None:
        attestations.verify_ref(client, image, pub=options.verify_key, env=options.env)
    # A multi-arch tag (matrix.yaml publish_as) holds several platforms: pull the variant's own.
    registry.pull_if_missing(client, image, platform=str(variant.platforms[0]))
    if options.verify_key is not None:  # the engine's image must be the signed one, not a local re-tag
        attestations.verify_ref(client, image, pub=options.verify_key, env=options.env, local=True)
    checks = smoke_image(client, image, variant, options)
    attestations.write_sbom_report(client, image, variant.name, out_dir=options.out_dir)
    return report.RunReport(checks=checks)


def test_host(variant: Variant, python: str, options: Options) -> report.RunReport:
    """``tools/matrix test --host``: the checks in ``python``'s environment on this machine, no Docker."""
    selected = select_checks(variant, options.only, options.skip, options.suite)
    note(f"[{variant.name}] smoke checks on this host ({python}): {', '.join(c.name for c in selected)}")
    results = smoke.run_host_suite(
        python,
        variant,
        selected,
        env=options.env,
        log_dir=options.log_dir,
        on_result=_progress(options),
        suite=options.suite,
    )
    return report.RunReport(checks=results)


# --- run: everything, optionally past failures ---------------------------------------------------------
def run_variants(matrix: Matrix, variants: Sequence[Variant], options: Options) -> report.RunReport:
    """``tools/matrix run``: render check, inputs, bases, plans, builds (``options.jobs`` at once), smoke.

    Without ``keep_going`` the first error is raised. With it, only a stale render stops everything; a
    variant's own failure (inputs, index, base, build) is recorded in ``RunReport.errors`` and the others
    go on, and variants whose platforms the builder cannot build are recorded in ``RunReport.skipped``.

    Raises:
        StaleRenderError, and without ``keep_going`` every ``MatrixError`` of a variant.
    """
    if options.keep_going:
        check_fresh(matrix)
        inputs = resolve_inputs(options)
    else:
        inputs = preflight(matrix, variants, options)
    client = engine.connect()
    skipped: dict[str, str] = {}
    if options.keep_going:
        can = engine.builder_platforms()
        for v in variants:
            missing = [str(p) for p in v.platforms if str(p) not in can]
            if missing:
                skipped[v.name] = f"this builder cannot build {', '.join(missing)} (see 'tools/matrix doctor')"
        variants = [v for v in variants if v.name not in skipped]

    # Bases and plans one variant at a time (variants may share a base ref); then the builds, `jobs` at once.
    errors: dict[str, str] = {}
    codes: dict[str, ExitCode] = {}
    planned: dict[str, list[plan.BuildPlan]] = {}

    def fail(name: str, exc: MatrixError) -> None:
        if not options.keep_going:
            raise exc
        errors[name] = str(exc)
        codes[name] = exc.exit_code
        note(f"[{name}] error: {exc}")

    for variant in variants:
        try:
            if options.keep_going:
                check_inputs(variant, inputs)
                check_index_reachable(variant, inputs)
            planned[variant.name] = provide_and_plan(client, matrix, [variant], inputs, options)
        except MatrixError as exc:
            fail(variant.name, exc)

    results: list[build.BuildResult] = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=options.jobs) as pool:
        futures = {name: pool.submit(execute_plans, client, plans, options) for name, plans in planned.items()}
        for name, future in futures.items():
            try:
                results += future.result()
            except MatrixError as exc:
                fail(name, exc)
    by_name = {v.name: v for v in variants}
    checks: list[smoke.CheckResult] = []
    for built in results:
        registry.pull_if_missing(client, built.image)  # skipped because it is in the registry
        checks += smoke_image(client, built.image, by_name[built.variant], options)
    _write_build_reports(client, matrix, [p for plans in planned.values() for p in plans], results, options)
    return report.RunReport(builds=results, checks=checks, errors=errors, error_codes=codes, skipped=skipped)


# --- bake, push, pin -----------------------------------------------------------------------------------
def bake_variants(matrix: Matrix, variants: Sequence[Variant], options: Options) -> BakeReport:
    """``tools/matrix bake``: write ``<out>/docker-bake.json`` and stage each target's context.

    Needs no engine and no network: an index that does not answer, a base the engine lacks, or no engine
    at all become ``BakeReport.warnings``; local inputs (render, wheelhouse, CA bundle) are still checked.

    Raises:
        StaleRenderError, ConfigError.
    """
    check_fresh(matrix)
    inputs = resolve_inputs(options)
    for variant in variants:
        check_inputs(variant, inputs)
    warnings = [
        f"{variant.name}: package index {url} does not answer from this machine ({problem}); "
        "the bake file does not need it here, the builder that runs it does"
        for variant in variants
        for url, problem in unreachable_indexes(variant, inputs)
    ]
    try:
        client: docker.DockerClient | None = engine.connect()
    except EngineUnreachableError:
        client = None
    lock = pin.read_lock(pin.lock_path(matrix.source))
    bases, missing = look_up_bases(client, variants, lock)
    plans = plan_variants(
        matrix, variants, bases, lock=lock, inputs=inputs, options=options, origin=provenance(matrix.root)
    )
    path = bake.write_bake(plans, out_dir=options.out_dir, registry=options.registry)
    return BakeReport(path=path, plans=plans, warnings=[*warnings, *missing])


def push_variants(matrix: Matrix, variants: Sequence[Variant], options: Options) -> PushReport:
    """``tools/matrix push``: tag and push each built plan's refs under ``options.registry``.

    Raises:
        NotBuiltError: an image is not built yet (the message names the ``build`` to run).
        RegistryError: a push failed.
    """
    assert options.registry is not None, "push needs --registry"
    # No index probe: a push installs nothing, so an index this machine cannot reach does not matter.
    check_fresh(matrix)
    inputs = resolve_inputs(options)
    for variant in variants:
        check_inputs(variant, inputs)
    client = engine.connect()
    plans = provide_and_plan(client, matrix, variants, inputs, options)
    engine_registry = registry.EngineRegistry(client)
    local = [p for p in plans if build.existing(client, p) is not None]
    # An image the engine lacks but the registry has under its content-hash tag (`build --registry` skipped
    # it, as CI's image job does when nothing changed) is published already: push.ensure_published.
    there = {p.hash_ref: build.published(p, options.registry, engine_registry) for p in plans if p not in local}
    missing = [p for p in plans if p not in local and there[p.hash_ref] is None]
    if missing:
        names = " ".join(dict.fromkeys(p.variant for p in missing))
        raise NotBuiltError(
            f"not built yet: {', '.join(p.hash_ref for p in missing)}; run 'tools/matrix build {names}' first "
            f"(it is not in {options.registry} either)"
        )
    results = []
    for the_plan in plans:
        the_push = push.plan_push(the_plan, registry=options.registry)
        if the_plan in local:
            results.append(push.execute_push(the_push, engine_registry, keep_tags=options.keep_tags))
        else:
            published = there[the_plan.hash_ref]
            assert published is not None
            note(f"{the_plan.variant}: {published.image} is in the registry already (content hash unchanged)")
            results.append(
                push.ensure_published(
                    the_push,
                    published.image_id,
                    engine_registry,
                    lambda ref, platform: registry.pull_if_missing(client, ref, platform=platform),
                    keep_tags=options.keep_tags,
                )
            )
    if options.sign_key is not None:
        # The provenance of each image built here (rewritten: the --out of the build may be another one).
        built_here = [r for p in local if (r := build.existing(client, p)) is not None]
        _write_build_reports(client, matrix, local, built_here, options)
        sources = [p.hash_ref for p in plans]  # results are in plan order
        attestations.sign_pushed(
            client, list(zip(results, sources, strict=True)), key=options.sign_key, out_dir=options.out_dir,
            smoke_report=options.smoke_report, env=options.env,
        )  # fmt: skip
    return PushReport(pushed=results)


def pin_variants(
    matrix: Matrix,
    variants: Sequence[Variant],
    resolve: registry.Registry | None = None,
    *,
    verify_key: Path | None = None,
    env: Mapping[str, str] | None = None,
) -> PinReport:
    """``tools/matrix pin``: record each base image's registry digest in the lock file beside the matrix.

    ``resolve``: the registry seam (default: ``EngineRegistry`` on a new engine client).

    Raises:
        RegistryError: a registry did not answer or lacks a ref; the lock file is left unchanged.
    """
    path = pin.lock_path(matrix.source)
    before = pin.read_lock(path)
    refs = pin.base_refs(variants)
    if verify_key is not None:  # UnverifiedError (exit 15) before the lock file is touched
        for ref in refs:
            attestations.verify_ref(None, ref, pub=verify_key, env=env or {})
    reg = resolve if resolve is not None else registry.EngineRegistry(engine.connect())
    try:
        after = pin.pin(refs, lock=before, resolve=reg.digest)
    except RegistryError as exc:
        raise RegistryError(f"{exc}; {path} left unchanged", registry=exc.registry, ref=exc.ref) from exc
    changed = pin.write_lock(after, path)
    return PinReport(path=path, before=before, after=after, refs=refs, changed=changed)


def publish_manifests(
    matrix: Matrix,
    pushed: Sequence[Path],
    *,
    registry: str,
    repository: str,
    verify_key: Path | None = None,
    env: Mapping[str, str] | None = None,
) -> list[tuple[manifest.ManifestPlan, str]]:
    """Publish each name that spans several platforms (matrix.yaml ``publish_as``) as one manifest list, from
    the records of ``tools/matrix push --json`` (files ``pushed``).

    Returns each list's plan and its digest (``sha256:…``); empty when no name in the records spans several
    platforms.

    Raises:
        ConfigError: a file is no push record, or the records do not fit the matrix (``manifest.plan_manifests``).
        RegistryError: a platform is not pushed, or creating the list failed.
    """
    records = manifest.read_pushed(pushed)
    plans = manifest.plan_manifests(matrix.variants, records, registry=registry, repository=repository)
    if verify_key is not None:  # each platform's image as pushed, whatever its tags say now
        for source in dict.fromkeys(s for p in plans for s in p.sources):
            attestations.verify_ref(None, source, pub=verify_key, env=env or {})
    return [(the_plan, manifest.execute(the_plan)) for the_plan in plans]
