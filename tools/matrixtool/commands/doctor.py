"""``tools/matrix doctor``: probe the engine, buildx, arm64 emulation and a registry, with the fix for each."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

import click

from matrixtool.commands import _params
from matrixtool.core import engine
from matrixtool.core.errors import ConfigError, EngineUnreachableError
from matrixtool.model import reference


@dataclass(frozen=True, kw_only=True)
class Args:
    """``registry``: the registry host to probe (validated here: ``ConfigError``, exit 3)."""

    registry: str = "registry-1.docker.io"

    def __post_init__(self) -> None:
        problem = reference.registry_problem(self.registry)
        if problem is not None:
            raise ConfigError("flags", [f"--registry {self.registry!r} {problem}"])


def run(args: Args) -> Sequence[engine.Finding]:
    """The findings, one per probe (``engine.doctor``)."""
    return engine.doctor(args.registry, env=os.environ)


@click.command("doctor")
@click.option(
    "--registry",
    type=_params.REGISTRY,
    default="registry-1.docker.io",
    show_default=True,
    help="Registry host to probe.",
)
def command(registry: str) -> None:
    """Report engine, buildx, arm64 emulation and registry reachability, with the fix for each."""
    findings = run(Args(registry=registry))
    for f in findings:
        click.echo(f"{f.status.value:4}  {f.name:16} {f.detail}")
        if f.fix:
            click.echo(f"      {'':16} fix: {f.fix}")
    failed = [f.name for f in findings if f.status is engine.FindingStatus.FAIL]
    if failed:
        raise EngineUnreachableError(f"doctor: {', '.join(failed)} failed; apply the fixes above")
