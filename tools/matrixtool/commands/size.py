"""``tools/matrix size IMAGE``: what the image's bytes are made of, layer by layer and distribution by distribution
(``matrixtool.core.imagebytes``), against its variant's ``size_budget`` when matrix.yaml declares one."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import click

from matrixtool.commands import _params
from matrixtool.commands._shared import Settings, pass_settings
from matrixtool.core import engine, imagebytes
from matrixtool.core.errors import ConfigError
from matrixtool.model import reference
from matrixtool.model.matrixfile import load_matrix
from matrixtool.supply import imagediff

VARIANT_LABEL = "io.vllm-matrix.variant"


@dataclass(frozen=True, kw_only=True)
class Args:
    """``limit``: distributions listed (0: all). Raises ConfigError: ``image`` is not an image reference (exit 3)."""

    image: str
    limit: int = 25
    env: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if (problem := reference.image_problem(self.image)) is not None:
            raise ConfigError("arguments", [f"IMAGE {self.image!r} {problem}"])


@dataclass(frozen=True, kw_only=True)
class SizeReport:
    image: str
    size: int
    layers: tuple[imagebytes.Layer, ...]
    distributions: tuple[imagebytes.Distribution, ...]
    budget: tuple[int, str] | None


def run(args: Args, matrix_path: Path | None = None) -> SizeReport:
    """Inspect ``args.image`` and run the facts program in it once (container removed in every case). The budget
    is that of the variant its ``io.vllm-matrix.variant`` label names, from the matrix file at ``matrix_path``. The
    matrix file is read before any container starts: when it exists, before the engine is asked; when it does not,
    only if the image's label names a variant.

    Raises ConfigError: the matrix file is invalid, or absent while the image names a variant (exit 3, no container
    started); EngineUnreachableError: no engine answers; NotBuiltError: the image is not on the engine; SmokeFailure:
    the facts program could not start (no python3) or failed."""
    exists = matrix_path is not None and (matrix_path.exists() or matrix_path.is_symlink())
    matrix = load_matrix(matrix_path) if matrix_path is not None and exists else None
    client = engine.connect()
    labels = (imagediff.get_image(client, args.image).attrs.get("Config") or {}).get("Labels") or {}
    variant_name = labels.get(VARIANT_LABEL) if isinstance(labels, dict) else None
    if variant_name and matrix is None and matrix_path is not None:
        matrix = load_matrix(matrix_path)  # absent: ConfigError naming it
    facts = imagediff.read_facts(client, args.image, env=args.env)
    budget = None
    if variant_name and matrix is not None:
        variant = next((v for v in matrix.variants if v.name == variant_name), None)
        if variant is not None and variant.size_budget is not None:
            budget = (variant.size_budget, variant.size_budget_text or str(variant.size_budget))
    history = imagediff.get_image(client, args.image).history()
    return SizeReport(
        image=args.image,
        size=facts.size,
        layers=tuple(imagebytes.layers(history)),
        distributions=tuple(imagebytes.distributions(facts.inside.get("distributions") or {})),
        budget=budget,
    )


@click.command("size")
@click.argument("image", type=_params.IMAGE)
@click.option(
    "--limit", type=click.IntRange(min=0), default=25, show_default=True, help="Distributions listed (0: all)."
)
@pass_settings
def command(settings: Settings, /, image: str, limit: int) -> None:
    """What an image's bytes are made of: each layer (docker image history) and each Python distribution
    (RECORD files and their bytecode), against its variant's size_budget."""
    args = Args(image=image, limit=limit, env=settings.env)
    report = run(args, settings.matrix_path)
    lines = imagebytes.report_lines(
        image=report.image,
        size=report.size,
        image_layers=report.layers,
        dists=report.distributions,
        budget=report.budget,
        limit=args.limit,
    )
    click.echo("\n".join(lines))
