"""``tools/matrix static IMAGE``: OpenShift's static checks of a local image (``matrixtool.supply.static``); exit 18
when one fails."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import click
import docker

from matrixtool.commands import _params
from matrixtool.commands._shared import Settings, pass_settings
from matrixtool.core import engine
from matrixtool.core.container import OWNER_ENV_VAR
from matrixtool.core.errors import NotBuiltError
from matrixtool.model import reference
from matrixtool.supply import static as checks


@dataclass(frozen=True, kw_only=True)
class Args:
    """``image``: a ref on the engine."""

    image: str
    env: Mapping[str, str] = field(default_factory=dict)


def run(args: Args) -> list[checks.StaticResult]:
    """Raises ConfigError: not an image reference. NotBuiltError: the engine lacks it (exit 11, as ``size`` and
    ``diff``). EngineUnreachableError."""
    reference.check_flags(image=args.image)
    client = engine.connect()
    try:
        return checks.inspect(client, args.image, owner=args.env.get(OWNER_ENV_VAR, ""))
    except docker.errors.ImageNotFound as exc:
        raise NotBuiltError(f"no image {args.image!r} on this engine; build or pull it first") from exc


@click.command("static")
@click.argument("image", type=_params.IMAGE)
@pass_settings
def command(settings: Settings, /, image: str) -> None:
    """OpenShift's static checks: /licenses, layer count, required labels, numeric non-root USER, tag."""
    results = run(Args(image=image, env=settings.env))
    for r in results:
        click.echo(f"{'pass' if r.passed else 'FAIL':4}  {r.name:8} {r.detail}")
    checks.raise_for(image, results)
