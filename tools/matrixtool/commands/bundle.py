"""``tools/matrix bundle VARIANT``: the smoke suite as one file, ``vllm-smoke-VARIANT.pyz``
(``matrixtool.smoke.bundle``), to run with ``python3 FILE`` where there is no Docker: a GPU host, a pod, a container
of the image."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path

import click

from matrixtool.commands import _params
from matrixtool.commands._flags import selection_flags
from matrixtool.commands._shared import Settings, pass_settings
from matrixtool.core import outputs
from matrixtool.core.errors import ConfigError
from matrixtool.incontainer.vllm_smoke import streams
from matrixtool.model.inputs import output_file_problem, output_folder_problem
from matrixtool.model.matrixfile import load_matrix
from matrixtool.model.model import Variant
from matrixtool.model.select import Selection, select_variants
from matrixtool.smoke import bundle


@dataclass(frozen=True, kw_only=True)
class Args:
    """``out`` None: ``<out dir>/vllm-smoke-VARIANT.pyz``.

    Raises ConfigError: an unknown check or suite, or an output that cannot be written (exit 3).
    """

    variant: Variant
    out_dir: Path
    out: Path | None = None
    selection: Selection = field(default_factory=Selection)

    def __post_init__(self) -> None:
        self.selection.check([self.variant])
        if self.out is None:
            problem = output_folder_problem("--out (the global folder)", self.out_dir)
        else:
            problem = output_file_problem("bundle --out", self.out)
        if problem:
            raise ConfigError("output paths", [problem])

    @property
    def path(self) -> Path:
        """Where the bundle goes."""
        return self.out if self.out is not None else self.out_dir / bundle.file_name(self.variant.name)


def run(args: Args) -> Path:
    """Raises OutputError: the file cannot be written (exit 3; nothing is left half-written)."""
    facts = bundle.facts(args.variant, args.selection.checks_of(args.variant), args.selection.suite)
    data = bundle.bundle_bytes(facts)
    # Executable (`./vllm-smoke-VARIANT.pyz` runs it too, its shebang: python3) before it replaces the old one; a
    # stream (/dev/stdout, a FIFO, a device) is written in place, never replaced.
    return outputs.write_bytes(args.path, data, mode=streams.new_file_mode(executable=True))


@click.command("bundle")
@click.argument("variant")
@click.option(
    "--out",
    "out",
    type=_params.OUTPUT_FILE,
    default=None,
    help="The file to write (default: <out>/vllm-smoke-VARIANT.pyz).",
)
@selection_flags
@pass_settings
def command(settings: Settings, /, variant: str, out: Path | None, selection: Selection) -> None:
    """Write the smoke suite of VARIANT as one zipapp: `python3 FILE` runs it here, serve included."""
    if variant == "all":
        raise click.UsageError("bundle takes one variant name, not 'all'")
    matrix = load_matrix(settings.matrix_path)
    (chosen,) = select_variants(matrix, [variant])
    path = run(Args(variant=chosen, out_dir=settings.out_dir, out=out, selection=selection))
    click.echo(str(path), err=outputs.is_stream(path))  # the bundle itself may be what stdout carries (/dev/stdout)
    click.echo(
        f"run it where the environment under test is: python3 {shlex.quote(str(path))} [--json FILE] [--junit FILE] "
        "[--logs DIR]",
        err=True,
    )
