"""``tools/matrix diff A B [--for CHECK]``: what differs between two images, what matters to CHECK first."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import click

from matrixtool.commands import _params
from matrixtool.commands._shared import Settings, pass_settings
from matrixtool.core import engine
from matrixtool.core.errors import ConfigError
from matrixtool.model import reference
from matrixtool.supply import imagediff


@dataclass(frozen=True, kw_only=True)
class Args:
    """``check`` None: section order; ``lines`` 0: all.

    Raises ConfigError: an argument is not an image reference, or ``--for`` names no check (exit 3).
    """

    a: str
    b: str
    check: str | None = None
    limit: int = 0
    env: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        problems = [
            f"{name} {value!r} {problem}"
            for name, value in (("A", self.a), ("B", self.b))
            if (problem := reference.image_problem(value)) is not None
        ]
        if self.check is not None and (problem := imagediff.check_problem(self.check)) is not None:
            problems.append(problem)
        if problems:
            raise ConfigError("arguments", problems)


@dataclass(frozen=True, kw_only=True)
class DiffReport:
    """The ranked differences and the facts they come from."""

    a: imagediff.ImageFacts
    b: imagediff.ImageFacts
    differences: tuple[imagediff.Difference, ...]
    check: str | None


def run(args: Args) -> DiffReport:
    """Both images are looked up before either runs anything.

    Raises EngineUnreachableError: no engine answers; NotBuiltError: an image is not on the engine; SmokeFailure: the
    facts program could not start (no python3) or failed in an image."""
    client = engine.connect()
    for ref in (args.a, args.b):
        imagediff.get_image(client, ref)
    a = imagediff.read_facts(client, args.a, env=args.env)
    b = imagediff.read_facts(client, args.b, env=args.env)
    diffs = imagediff.rank(imagediff.compare(a, b), args.check)
    return DiffReport(a=a, b=b, differences=tuple(diffs), check=args.check)


def format_report(report: DiffReport, limit: int = 0) -> str:
    """A header naming both images, then one line per difference (the first ``limit``; 0: all)."""
    tool = (report.b.inside.get("shared_libraries") or {}).get("tool") or "no ldd/readelf in the image"
    lines = [
        f"A: {report.a.ref} ({report.a.image_id[:19]})",
        f"B: {report.b.ref} ({report.b.image_id[:19]})",
        f"{len(report.differences)} difference(s)"
        + (f", those relevant to {report.check} first" if report.check else "")
        + f"; shared libraries read with {tool}",
    ]
    shown = report.differences[:limit] if limit else report.differences
    lines += [str(d) for d in shown]
    if len(shown) < len(report.differences):
        lines.append(f"... {len(report.differences) - len(shown)} more (--limit 0 shows all)")
    return "\n".join(lines)


@click.command("diff")
@click.argument("a", type=_params.IMAGE)
@click.argument("b", type=_params.IMAGE)
@click.option("--for", "check", default=None, metavar="CHECK", help="Rank what matters to this check first.")
@click.option("--limit", type=click.IntRange(min=0), default=0, show_default=True, help="Lines to print (0: all).")
@pass_settings
def command(settings: Settings, /, a: str, b: str, check: str | None, limit: int) -> None:
    """Compare two images: Python distributions, Debian packages, shared libraries, env, entrypoint, user,
    labels, layers."""
    args = Args(a=a, b=b, check=check, limit=limit, env=settings.env)
    click.echo(format_report(run(args), args.limit))
