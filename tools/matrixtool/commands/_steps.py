"""The steps several commands run after the preflight: the checkout's provenance, bases then plans, and the
smoke checks of one image (progress lines on stderr as they happen)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import docker

from matrixtool.build import base, pin, plan
from matrixtool.build import executor as build
from matrixtool.build.preflight import Inputs
from matrixtool.core import process
from matrixtool.core.engine import note
from matrixtool.core.untrusted import shown
from matrixtool.model.model import Matrix, Variant
from matrixtool.model.profiles import ProfileChoice
from matrixtool.model.select import Selection
from matrixtool.smoke import executor as smoke
from matrixtool.smoke import plan as smoke_plan
from matrixtool.smoke import result as smoke_result
from matrixtool.smoke.budget import check_budget


def provenance(root: Path) -> tuple[str, str]:
    """The git revision and origin URL of the checkout at ``root`` (``unknown``/the folder outside git)."""

    def git(*args: str) -> str | None:
        done = process.run(["git", "-C", str(root), *args], quiet=True)
        return done.stdout.strip() if done.ok and done.stdout.strip() else None

    return git("rev-parse", "HEAD") or "unknown", git("remote", "get-url", "origin") or str(root)


def plan_context(matrix: Matrix, inputs: Inputs, *, repository: str) -> plan.PlanContext:
    """Raises ConfigError: the lock file is invalid."""
    revision, source = provenance(matrix.root)
    return plan.PlanContext(
        templates_dir=matrix.templates_dir,
        lock=pin.read_lock(pin.lock_path(matrix.source)),
        ca_cert=inputs.ca_cert,
        wheelhouse=inputs.wheelhouse,
        repository=repository,
        revision=revision,
        source=source,
    )


def provide_and_plan(
    client: docker.DockerClient, matrix: Matrix, variants: Sequence[Variant], inputs: Inputs, *, repository: str
) -> list[plan.BuildPlan]:
    """Says when a stand-in base changes the build's Python.

    Raises ConfigError (lock file, stand-in Python), BuildError (base image).
    """
    context = plan_context(matrix, inputs, repository=repository)
    bases = base.provide_bases(client, variants, context.lock)
    plans = plan.plan_variants(variants, bases, context)
    for p in plans:
        if p.python_version:
            variant = next(v for v in variants if v.name == p.variant)
            note(
                f"{p.variant} ({p.platform}): base {p.base_image} is a Debian "
                f"{bases[(p.variant, p.platform)].stand_in_suite} stand-in: "
                f"building with Python {p.python_version} (upstream: {variant.python})"
            )
    return plans


def needs_build(client: docker.DockerClient, plans: Sequence[plan.BuildPlan], *, force: bool) -> bool:
    """Whether building ``plans`` installs anything: ``force``, or a plan's content-hash image is not on the
    engine (``build.existing``). An index that does not answer matters only then."""
    return force or not plans or any(build.existing(client, p) is None for p in plans)


@dataclass(frozen=True, kw_only=True)
class SmokeRequest:
    """What a smoke run of one image asks for: the checks, the deployment profiles, where the logs go, and
    ``quiet`` (no per-check progress lines: ``--json``)."""

    selection: Selection
    choice: ProfileChoice
    log_dir: Path
    quiet: bool = False


def progress(quiet: bool) -> Callable[[smoke_result.CheckResult], None]:
    """The per-check progress line on stderr (nothing when ``quiet``); a profile other than ``default`` is named
    (profile runs side by side interleave their lines)."""

    def show(r: smoke_result.CheckResult) -> None:
        if not quiet:
            where = r.variant if r.profile in ("", "default") else f"{r.variant}, {r.profile}"
            # the diagnosis quotes the image's and the server's output: escaped
            note(f"[{where}] {r.check}: {r.status.value} ({r.seconds:.1f} s) {shown(r.diagnosis, lines=True)}")

    return show


def smoke_image(
    client: docker.DockerClient, image: str, variant: Variant, request: SmokeRequest
) -> list[smoke_result.CheckResult]:
    """Raises ConfigError (an unknown profile), WrongPlatformError (the image's platform is not the variant's)."""
    selected = request.selection.checks_of(variant)
    chosen = request.choice.resolve(variant.name, variant.profiles)
    runs = smoke_plan.plan_profiles(variant, selected, chosen, request.selection.suite)
    results = smoke.run_profiles(
        client, image, variant, runs, log_dir=request.log_dir, on_result=progress(request.quiet), announce=note
    )
    # matrix.yaml size_budget: within it one line on stderr (--json too); over it a failed result `size-budget`.
    judged = check_budget(client, image, variant, results, log_dir=request.log_dir)
    if judged is not None and judged.status.ok:
        note(f"[{variant.name}] size-budget: {judged.status.value}: {judged.diagnosis}")
    elif judged is not None:
        progress(request.quiet)(judged)
        results.append(judged)
    return results
