"""``tools/matrix push``: tag and push each built plan's refs (content-hash and version tags) to a registry."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import click

from matrixtool.build import executor as build
from matrixtool.build import plan, preflight, registry
from matrixtool.commands import _params
from matrixtool.commands._flags import REGISTRY_HELP, input_options
from matrixtool.commands._shared import Settings, pass_settings
from matrixtool.commands._steps import provide_and_plan
from matrixtool.commands._supply import SignFlags, sign_flags, sign_pushed
from matrixtool.core.engine import note
from matrixtool.core.errors import NotBuiltError
from matrixtool.incontainer.vllm_smoke import reports
from matrixtool.model import reference
from matrixtool.model.inputs import warn_unused_wheelhouse
from matrixtool.model.matrixfile import load_matrix
from matrixtool.model.model import Matrix, Variant
from matrixtool.model.select import select_variants
from matrixtool.publish import push


@dataclass(frozen=True, kw_only=True)
class Args:
    """``registry``: ``HOST[:PORT][/NAMESPACE]``; ``ca_cert``/``wheelhouse``/``repository`` must be the build's
    (the plans, hence the tags, must agree).

    Raises ConfigError: a flag cannot be honoured (exit 3).
    """

    matrix: Matrix
    variants: tuple[Variant, ...]
    registry: str
    out_dir: Path
    env: Mapping[str, str] = field(default_factory=dict)
    ca_cert: Path | None = None
    wheelhouse: Path | None = None
    repository: str = plan.DEFAULT_REPOSITORY
    keep_tags: bool = True
    signing: SignFlags = field(default_factory=SignFlags)

    def __post_init__(self) -> None:
        reference.check_flags(registry=self.registry, repository=self.repository)
        self.signing.check(self.env)
        warn_unused_wheelhouse(self.variants, self.wheelhouse)


@dataclass(frozen=True, kw_only=True)
class PushReport:
    """One ``push.PushResult`` per pushed plan."""

    pushed: Sequence[push.PushResult]


def run(args: Args) -> PushReport:
    """An image the registry has already under its content-hash tag (``build --registry`` skipped it) only gets
    a stale version tag moved.

    Raises NotBuiltError: an image is not built yet (the message names the ``build`` to run); RegistryError: a push
    failed; SbomError, UnverifiedError, EngineUnreachableError: signing failed."""
    # No index probe: a push installs nothing, so an index this machine cannot reach does not matter.
    inputs = preflight.Inputs.resolve(ca_cert=args.ca_cert, wheelhouse=args.wheelhouse, env=args.env)
    got = preflight.preflight(args.matrix, args.variants, inputs, preflight.Needs(index=preflight.IndexProbe.SKIP))
    client = got.engine()
    plans = provide_and_plan(client, args.matrix, args.variants, got.inputs, repository=args.repository)
    engine_registry = registry.EngineRegistry(client)
    local = [p for p in plans if build.existing(client, p) is not None]
    there = {p.hash_ref: build.published(p, args.registry, engine_registry) for p in plans if p not in local}
    missing = [p for p in plans if p not in local and there[p.hash_ref] is None]
    if missing:
        names = " ".join(dict.fromkeys(p.variant for p in missing))
        raise NotBuiltError(
            f"not built yet: {', '.join(p.hash_ref for p in missing)}; run 'tools/matrix build {names}' first "
            f"(it is not in {args.registry} either)"
        )
    results = []
    for the_plan in plans:
        the_push = push.plan_push(the_plan, registry=args.registry)
        if the_plan in local:
            results.append(push.execute_push(the_push, engine_registry, keep_tags=args.keep_tags))
            continue
        published = there[the_plan.hash_ref]
        assert published is not None
        note(f"{the_plan.variant}: {published.image} is in the registry already (content hash unchanged)")
        results.append(
            push.ensure_published(
                the_push,
                published.image_id,
                engine_registry,
                lambda ref, platform: registry.pull_if_missing(client, ref, platform=platform),
                keep_tags=args.keep_tags,
            )
        )
    sign_pushed(client, args.matrix, plans, results, args.signing, out_dir=args.out_dir, env=args.env)
    return PushReport(pushed=results)


@click.command("push")
@click.argument("variants", nargs=-1)
@click.option("--registry", "registry_prefix", type=_params.REGISTRY, required=True, help=REGISTRY_HELP)
@input_options
@click.option(
    "--keep-tags/--no-keep-tags",
    default=True,
    show_default=True,
    help="Keep the <registry>/… tags on the engine after pushing.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the pushed refs and digests as JSON.")
@sign_flags
@pass_settings
def command(
    settings: Settings,
    /,
    variants: Sequence[str],
    registry_prefix: str,
    ca_cert: Path | None,
    wheelhouse: Path | None,
    repository: str,
    keep_tags: bool,
    as_json: bool,
    signing: SignFlags,
) -> None:
    """Push built images to a registry: the content-hash tag and the version tag."""
    matrix = load_matrix(settings.matrix_path)
    args = Args(
        matrix=matrix,
        variants=tuple(select_variants(matrix, variants)),
        registry=registry_prefix,
        out_dir=settings.out_dir,
        env=settings.env,
        ca_cert=ca_cert,
        wheelhouse=wheelhouse,
        repository=repository,
        keep_tags=keep_tags,
        signing=signing,
    )
    result = run(args)
    if as_json:
        pushed = [
            {"variant": r.variant, "platform": str(r.platform), "refs": list(r.refs), "digest": r.digest}
            for r in result.pushed
        ]
        click.echo(json.dumps({"schema_version": reports.JSON_SCHEMA_VERSION, "pushed": pushed}, indent=2))
        return
    for r in result.pushed:
        click.echo(f"{r.variant} ({r.platform}): pushed {', '.join(r.refs)} ({r.digest or 'digest unknown'})")
