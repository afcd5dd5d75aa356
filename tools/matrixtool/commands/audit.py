"""``tools/matrix audit``: the vulnerability gate. Exit 0: passed; 13: an advisory fails it; 14: packages could
not be audited (fail closed: no advisory data for their ecosystem, or the source did not answer).
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click

from matrixtool.commands import _params
from matrixtool.commands._shared import Settings, pass_settings
from matrixtool.commands.sbom import read_document, variant_of
from matrixtool.core.errors import ConfigError
from matrixtool.model.matrixfile import load_matrix
from matrixtool.model.select import select_variants
from matrixtool.supply import advisories as sources
from matrixtool.supply import audit as gate
from matrixtool.supply.policy import policy_for


@dataclass(frozen=True, kw_only=True)
class Args:
    """``advisories``: a folder of OSV records, or None with ``osv_api`` (the live service at ``api_url``)."""

    matrix_path: Path
    sbom: Path
    advisories: Path | None
    osv_api: bool
    api_url: str = sources.OSV_API
    variant: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)


def run(args: Args, *, fetch: sources.Fetch | None = None, today: datetime.date | None = None) -> gate.AuditReport:
    """``fetch`` replaces HTTP (tests), ``today`` the date acceptances expire against. An ``--osv-api`` that does not
    answer its probe leaves every package not audited (exit 14). Raises ConfigError (flags, files, policy),
    NothingSelectedError (``--as``), SbomError (not an SBOM)."""
    if (args.advisories is None) == (not args.osv_api):
        raise ConfigError("flags", ["give exactly one of --advisories DIR and --osv-api"])
    doc = read_document(args.sbom, what="an SBOM file (tools/matrix sbom IMAGE -o FILE)")
    variant = args.variant or variant_of(doc)
    if variant is None:
        raise ConfigError("flags", [f"--as VARIANT is needed ({args.sbom} names no variant)"])
    matrix = load_matrix(args.matrix_path)
    select_variants(matrix, [variant])
    policy = policy_for(matrix, variant)
    source: sources.AdvisorySource
    if args.advisories is not None:
        source = sources.DirectorySource(args.advisories)
    else:
        the_fetch = fetch if fetch is not None else sources.default_fetch(args.env)
        source = sources.ApiSource(the_fetch, args.api_url)
        problem = sources.probe_api(the_fetch, args.api_url)
        if problem is not None:
            source = _Unreachable(source.name, problem)
    return gate.audit(doc, source, policy, today=today or datetime.date.today())


class _Unreachable(sources.AdvisorySource):
    """A source that did not answer its probe: it knows nothing, and says why for every package."""

    def __init__(self, name: str, problem: str) -> None:
        self.name = f"{name} (unreachable)"
        self.problem = problem

    def lookup(self, targets: Any) -> sources.Lookup:
        reason = f"{self.problem}; use --advisories DIR with OSV records"
        return sources.Lookup(advisories={}, missing={t.key: reason for t in targets})


@click.command("audit")
@click.argument("sbom_file", type=_params.INPUT_FILE)
@click.option(
    "--advisories",
    type=_params.INPUT_FOLDER,
    default=None,
    help="Folder of OSV records, one folder per ecosystem (PyPI/, Debian:12/ or Debian/; JSON files or all.zip).",
)
@click.option("--osv-api", is_flag=True, help=f"Query the OSV API ({sources.OSV_API}); probed first.")
@click.option("--as", "as_variant", default=None, help="Variant whose audit policy applies (default: the SBOM's).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@pass_settings
def command(
    settings: Settings,
    /,
    sbom_file: Path,
    advisories: Path | None,
    osv_api: bool,
    as_variant: str | None,
    as_json: bool,
) -> None:
    """Check an SBOM's packages against OSV advisories under the variant's policy; fail closed."""
    report = run(
        Args(
            matrix_path=settings.matrix_path,
            sbom=sbom_file,
            advisories=advisories,
            osv_api=osv_api,
            variant=as_variant,
            env=settings.env,
        )
    )
    if as_json:
        click.echo(json.dumps(gate.to_dict(report), indent=2))
    else:
        for line in gate.report_lines(report):
            click.echo(line)
    gate.raise_for(report)
