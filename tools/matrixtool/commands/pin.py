"""``tools/matrix pin``: record each base image's registry digest in matrix.lock.json beside matrix.yaml."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import click

from matrixtool.build import pin, registry
from matrixtool.commands._shared import Settings, pass_settings
from matrixtool.commands._supply import check_keys, verify_option, verify_refs
from matrixtool.core import engine
from matrixtool.core.errors import RegistryError
from matrixtool.model.matrixfile import load_matrix
from matrixtool.model.model import Matrix, Variant
from matrixtool.model.select import select_variants


@dataclass(frozen=True, kw_only=True)
class Args:
    """``resolve`` None: ``EngineRegistry`` on a new engine client. Validated on construction (ConfigError, exit 3)."""

    matrix: Matrix
    variants: tuple[Variant, ...]
    resolve: registry.Registry | None = None
    verify_key: Path | None = None
    env: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_keys(self.env, verify_key=self.verify_key)


@dataclass(frozen=True, kw_only=True)
class PinReport:
    """The lock file, each ref's digest before (None: new) and now, and whether the file changed."""

    path: Path
    before: pin.Lock
    after: pin.Lock
    refs: Sequence[str]
    changed: bool


def run(args: Args) -> PinReport:
    """Raises:
    RegistryError: a registry did not answer or lacks a ref; the lock file is left unchanged.
    UnverifiedError: a base image is not signed by ``verify_key`` (before the lock file is touched).
    """
    path = pin.lock_path(args.matrix.source)
    before = pin.read_lock(path)
    refs = pin.base_refs(args.variants)
    verify_refs(refs, pub=args.verify_key, env=args.env)
    reg = args.resolve if args.resolve is not None else registry.EngineRegistry(engine.connect())
    try:
        after = pin.pin(refs, lock=before, resolve=reg.digest)
    except RegistryError as exc:
        raise RegistryError(f"{exc}; {path} left unchanged", registry=exc.registry, ref=exc.ref) from exc
    changed = pin.write_lock(after, path)
    return PinReport(path=path, before=before, after=after, refs=refs, changed=changed)


@click.command("pin")
@click.argument("variants", nargs=-1)
@verify_option
@pass_settings
def command(settings: Settings, /, variants: Sequence[str], verify_key: Path | None) -> None:
    """Record the registry digest of each variant's base image in matrix.lock.json (beside matrix.yaml)."""
    matrix = load_matrix(settings.matrix_path)
    selected = tuple(select_variants(matrix, variants))
    result = run(Args(matrix=matrix, variants=selected, verify_key=verify_key, env=settings.env))
    for ref in result.refs:
        was, now = result.before.digest(ref), result.after.digest(ref)
        note = "unchanged" if was == now else (f"was {was}" if was else "new")
        click.echo(f"{ref}@{now} ({note})")
    click.echo(f"{'wrote' if result.changed else 'unchanged:'} {result.path}", err=True)
