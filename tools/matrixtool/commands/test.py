"""``tools/matrix test``: the smoke suite against any image (``--image``) or this machine's Python (``--host``)."""

from __future__ import annotations

import dataclasses
import shutil
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import click

from matrixtool import report
from matrixtool.commands import _green, _params
from matrixtool.commands._flags import selection_flags
from matrixtool.commands._shared import ReportFlags, Settings, finish, pass_settings, report_flags
from matrixtool.commands._steps import SmokeRequest, progress, smoke_image
from matrixtool.commands._supply import check_keys, verified_pull, verify_option
from matrixtool.core import engine
from matrixtool.core.errors import ConfigError
from matrixtool.model import profile_flags, profiles, reference
from matrixtool.model.matrixfile import load_matrix
from matrixtool.model.model import Variant
from matrixtool.model.select import Selection, select_variants
from matrixtool.smoke import executor as smoke
from matrixtool.supply import attestations


@dataclass(frozen=True, kw_only=True)
class Args:
    """``variant``: whose expectations apply (``--as``); ``image`` None: host mode with the interpreter ``python``.

    Raises ConfigError: a flag cannot be honoured (exit 3).
    """

    variant: Variant
    out_dir: Path
    image: str | None = None
    python: str = "python3"
    env: Mapping[str, str] = field(default_factory=dict)
    selection: Selection = field(default_factory=Selection)
    choice: profiles.ProfileChoice = field(default_factory=lambda: profiles.ProfileChoice(names=(profiles.DEFAULT,)))
    output: ReportFlags = field(default_factory=ReportFlags)
    verify_key: Path | None = None

    def __post_init__(self) -> None:
        reference.check_flags(image=self.image)
        check_keys(self.env, verify_key=self.verify_key)
        self.output.check(self.out_dir)
        self.selection.check([self.variant])
        self.choice.resolve(self.variant.name, self.variant.profiles)  # an unknown --profile fails now
        if self.image is None:
            _check_interpreter(self.python)


def _check_interpreter(python: str) -> None:
    """Raises ConfigError: naming the flag and its value (exit 3): no check runs on a missing interpreter."""
    if python.startswith("-") or shutil.which(python) is None:
        raise ConfigError(
            "flags",
            [
                f"--python {python!r} is no executable interpreter (not found, or not executable); name a "
                "Python of this machine, e.g. --python python3 or --python /opt/venv/bin/python"
            ],
        )


def run(args: Args) -> report.RunReport:
    """Image mode: verify ``args.image`` (``verify_key``), pull it when the engine lacks it, run the checks in it under
    every profile hardened (``profiles.UNTRUSTED``: capabilities dropped, no new privileges, a pids limit), then write
    its SBOM under ``<out>/reports/``. Host mode: the checks in ``args.python``'s environment on this machine
    (``smoke.run_host_suite``), no Docker. Raises ConfigError (check selection), RegistryError (the pull failed),
    EngineUnreachableError, WrongPlatformError (the image's platform is not the variant's), UnverifiedError (not signed
    by the key)."""
    selected = args.selection.checks_of(args.variant)
    log_dir = args.out_dir / "logs"
    if args.image is None:
        engine.note(
            f"[{args.variant.name}] smoke checks on this host ({args.python}): {', '.join(c.name for c in selected)}"
        )
        started = time.monotonic()
        results = smoke.run_host_suite(
            args.python,
            args.variant,
            selected,
            env=args.env,
            log_dir=log_dir,
            on_result=progress(args.output.as_json),
            suite=args.selection.suite,
        )
        return report.RunReport(checks=results, smoke_wall_seconds=time.monotonic() - started)
    client = engine.connect()
    # A multi-arch tag (matrix.yaml publish_as) holds several platforms: pull the variant's own.
    verified_pull(client, args.image, platform=args.variant.platforms[0], pub=args.verify_key, env=args.env)
    # An image this tool did not build: capabilities dropped, no new privileges, a pids limit (profiles.UNTRUSTED).
    choice = dataclasses.replace(args.choice, untrusted=True)
    request = SmokeRequest(selection=args.selection, choice=choice, log_dir=log_dir, quiet=args.output.as_json)
    started = time.monotonic()
    checks = smoke_image(client, args.image, args.variant, request)
    smoke_wall = time.monotonic() - started
    attestations.write_sbom_report(client, args.image, args.variant.name, out_dir=args.out_dir)
    return report.RunReport(checks=checks, smoke_wall_seconds=smoke_wall)


@click.command("test")
@click.option(
    "--image", type=_params.IMAGE, default=None, help="Image ref to test (local, or pulled when a registry answers)."
)
@click.option(
    "--host", "host", is_flag=True, help="Host mode: run the checks in a Python environment of this machine, no Docker."
)
@click.option(
    "--python",
    "python",
    default="python3",
    show_default=True,
    help="Host mode: the interpreter whose environment (torch, triton, vLLM) is checked.",
)
@click.option("--as", "as_variant", required=True, help="Variant whose expectations apply.")
@selection_flags
@report_flags
@profile_flags.options((profiles.DEFAULT,))
@verify_option
@pass_settings
def command(
    settings: Settings,
    /,
    image: str | None,
    host: bool,
    python: str,
    as_variant: str,
    selection: Selection,
    output: ReportFlags,
    choice: profiles.ProfileChoice,
    verify_key: Path | None,
) -> None:
    """Run the smoke suite against any image (--image) or this machine's Python (--host)."""
    if (image is None) == (not host):
        raise click.UsageError("give exactly one of --image REF and --host")
    if as_variant == "all":
        raise click.UsageError("--as takes one variant name, not 'all'")
    if host and choice != profiles.ProfileChoice(names=(profiles.DEFAULT,)):
        raise click.UsageError(
            "deployment profiles (--profile, --user, --read-only ...) need --image: they are container conditions"
        )
    if host and verify_key is not None:
        raise click.UsageError("--verify-key needs --image (a signature covers an image)")
    matrix = load_matrix(settings.matrix_path)
    (variant,) = select_variants(matrix, [as_variant])
    args = Args(
        variant=variant,
        out_dir=settings.out_dir,
        image=image,
        python=python,
        env=settings.env,
        selection=selection,
        choice=choice,
        output=output,
        verify_key=verify_key,
    )
    finish(
        run(args),
        output,
        out_dir=settings.out_dir,
        env=settings.env,
        last_green=None if host else _green.report_last_green,
    )
