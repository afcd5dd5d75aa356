"""``tools/matrix sbom``: derive an image's CycloneDX SBOM, or compare it with a published one (exit 17 when
anything differs)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import docker

from matrixtool.commands import _params
from matrixtool.commands._shared import Settings, pass_settings
from matrixtool.core import engine, jsontext
from matrixtool.core.errors import ConfigError, NotBuiltError
from matrixtool.core.untrusted import check_shape, shown
from matrixtool.model import reference
from matrixtool.model.inputs import output_file_problem
from matrixtool.model.matrixfile import load_matrix
from matrixtool.model.select import select_variants
from matrixtool.model.yamlfile import read_config_text
from matrixtool.report import human_size
from matrixtool.supply import compare as sbom_compare
from matrixtool.supply import cyclonedx, inventory
from matrixtool.supply import sbom as sbom_module

MAX_SBOM_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True, kw_only=True)
class Args:
    """``image``: a local image ref; ``variant``: whose image it is (``--as``; with ``--compare`` it defaults to
    the published document's); ``output``: ``-o`` (None: stdout); ``compare``: the published SBOM file."""

    matrix_path: Path
    image: str
    variant: str | None
    output: Path | None
    compare: Path | None


@dataclass(frozen=True, kw_only=True)
class Report:
    """The derived document, and with ``--compare`` the comparison with the published one."""

    document: Mapping[str, Any]
    text: str
    summary: sbom_compare.Summary
    comparison: sbom_compare.Comparison | None


def read_document(path: Path, *, what: str) -> dict[str, Any]:
    """A CycloneDX JSON file (at most 64 MiB).

    Raises ConfigError: unreadable, not JSON. SbomError: not a CycloneDX document.
    """
    text = read_config_text(path, limit=MAX_SBOM_BYTES, what=what)
    try:
        doc = jsontext.loads(text)
    except ValueError as exc:
        raise ConfigError(str(path), [f"is not JSON ({exc}); pass {what}"]) from exc
    if not isinstance(doc, dict) or doc.get("bomFormat") != "CycloneDX":
        raise sbom_module.SbomError(
            f'{shown(str(path))}: not a CycloneDX document (no "bomFormat": "CycloneDX"); pass {what}'
        )
    check_shape(
        doc,
        sbom_module.CYCLONEDX_SCHEMA,
        source=str(path),
        what=f"a CycloneDX JSON document ({what})",
        error=sbom_module.SbomError,
    )
    return dict(doc)


def variant_of(doc: Mapping[str, Any]) -> str | None:
    component = (doc.get("metadata") or {}).get("component") or {}
    for prop in component.get("properties") or ():
        if prop.get("name") == sbom_module.PROPERTY_PREFIX + "variant":
            return str(prop.get("value"))
    return None


def run(args: Args) -> Report:
    """Raises ConfigError (flags, files, an ``-o`` that cannot be written), NothingSelectedError (``--as``),
    NotBuiltError (the engine has no such image, exit 11), SbomError (exit 16), EngineUnreachableError."""
    reference.check_flags(image=args.image)
    if args.output is not None:
        # Checked before the image is read (minutes): a device or FIFO (-o /dev/null) is written in place.
        problem = output_file_problem("-o", args.output)
        if problem:
            raise ConfigError("output paths", [problem])
    published = read_document(args.compare, what="--compare FILE") if args.compare is not None else None
    variant = args.variant or (variant_of(published) if published is not None else None)
    if variant is None:
        raise ConfigError("flags", ["--as VARIANT is needed (the published SBOM names no variant)"])
    select_variants(load_matrix(args.matrix_path), [variant])
    client = engine.connect()
    try:
        client.images.get(args.image)
    except docker.errors.ImageNotFound as exc:  # exit 11 as `size`, `diff`, `static`: not an SBOM the image lacks
        raise NotBuiltError(
            f"no image {args.image!r} on this engine; build it ('tools/matrix build') or pull it"
        ) from exc
    bom = cyclonedx.to_bom(inventory.read_inventory(client, args.image), variant=variant)
    text = cyclonedx.to_json(bom)
    document = jsontext.loads(text)
    comparison = sbom_compare.compare(published, document) if published is not None else None
    return Report(document=document, text=text, summary=sbom_compare.summarize(document), comparison=comparison)


def summary_lines(summary: sbom_compare.Summary) -> list[str]:
    """Counts by kind and the largest packages, for the terminal."""
    counts = ", ".join(f"{n} {kind}" for kind, n in sorted(summary.counts.items()))
    lines = [f"packages: {counts}"]
    lines += [f"  {human_size(p.size):>9}  {p.key} {p.version}" for p in summary.largest]
    return lines


@click.command("sbom")
@click.argument("image", type=_params.IMAGE)
@click.option("--as", "as_variant", default=None, help="Variant whose image it is (recorded in the SBOM).")
@click.option("-o", "--output", type=_params.OUTPUT_FILE, default=None, help="Write the SBOM here.")
@click.option(
    "--compare",
    type=_params.INPUT_FILE,
    default=None,
    help="A published SBOM: derive IMAGE's again and print what differs (exit 17 when anything does).",
)
@pass_settings
def command(
    settings: Settings, /, image: str, as_variant: str | None, output: Path | None, compare: Path | None
) -> None:
    """Derive the CycloneDX SBOM of IMAGE (what is installed, read inside it), or compare it with a published one."""
    report = run(
        Args(matrix_path=settings.matrix_path, image=image, variant=as_variant, output=output, compare=compare)
    )
    for line in summary_lines(report.summary):
        click.echo(line, err=True)
    if report.comparison is not None:
        for line in sbom_compare.comparison_lines(report.comparison):
            click.echo(line)
        if output is not None:
            cyclonedx.write(report.text, output)
        if not report.comparison.same:
            raise sbom_module.SbomDiffers(
                f"{image} differs from {compare}: see the lines above ('+' only in the image, '-' only published)"
            )
        return
    if output is not None:
        cyclonedx.write(report.text, output)
        click.echo(f"wrote {output}", err=True)
    else:
        click.echo(report.text, nl=False)
