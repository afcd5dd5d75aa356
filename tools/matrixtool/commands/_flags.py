"""The flags several commands take; a command's ``Args`` validates them after the matrix is loaded."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from matrixtool.build import plan
from matrixtool.build.executor import BuildPolicy
from matrixtool.build.preflight import Inputs
from matrixtool.commands import _params
from matrixtool.commands._shared import Decorator, F, apply_options, packing
from matrixtool.core.errors import ConfigError
from matrixtool.model import reference
from matrixtool.model.select import Selection

REGISTRY_HELP = "Registry prefix HOST[:PORT][/NAMESPACE]; images: <registry>/<repository>/<variant>:<tag>."


INPUT_OPTIONS: Sequence[Decorator] = [
    click.option(
        "--ca-cert",
        type=_params.INPUT_FILE,
        default=None,
        help="CA bundle passed as build secret 'ca' (default: SSL_CERT_FILE, PIP_CERT, REQUESTS_CA_BUNDLE).",
    ),
    click.option(
        "--wheelhouse",
        type=_params.INPUT_FOLDER,
        default=None,
        help="Folder of local wheels, bind-mounted during the build (default: PIP_FIND_LINKS).",
    ),
    click.option(
        "--repository",
        type=_params.REPOSITORY,
        default=plan.DEFAULT_REPOSITORY,
        show_default=True,
        help="Image repository prefix: images are <repository>/<variant>:<tag>.",
    ),
]


def input_options(f: F) -> F:
    """``--ca-cert``, ``--wheelhouse``, ``--repository``, as the parameters of those names."""
    return apply_options(INPUT_OPTIONS, f)


@dataclass(frozen=True, kw_only=True)
class BuildFlags:
    """The flags of ``build_flags``: the build's inputs (None: from the environment), the image repository
    prefix, and when and where to build (``build.BuildPolicy``)."""

    ca_cert: Path | None = None
    wheelhouse: Path | None = None
    repository: str = plan.DEFAULT_REPOSITORY
    force: bool = False
    registry: str | None = None
    cache_registry: str | None = None
    cache_read_only: bool = False

    def check(self) -> None:
        """Raises ConfigError: naming each bad flag and its value (exit 3)."""
        reference.check_flags(registry=self.registry, repository=self.repository)
        problem = reference.registry_problem(self.cache_registry) if self.cache_registry is not None else None
        if problem is not None:
            raise ConfigError("flags", [f"--cache-registry {self.cache_registry!r} {problem}"])
        if self.cache_read_only and self.cache_registry is None:
            raise ConfigError("flags", ["--cache-read-only needs --cache-registry"])

    def inputs(self, env: Mapping[str, str]) -> Inputs:
        """The CA bundle and wheelhouse: these flags, else ``env``."""
        return Inputs.resolve(ca_cert=self.ca_cert, wheelhouse=self.wheelhouse, env=env)

    def policy(self, out_dir: Path) -> BuildPolicy:
        """The ``build.BuildPolicy`` of these flags."""
        return BuildPolicy(
            out_dir=out_dir,
            force=self.force,
            registry=self.registry,
            cache_registry=self.cache_registry,
            cache_read_only=self.cache_read_only,
        )


def _build_flags(kw: dict[str, Any]) -> BuildFlags:
    return BuildFlags(
        ca_cert=kw.pop("ca_cert"),
        wheelhouse=kw.pop("wheelhouse"),
        repository=kw.pop("repository"),
        force=kw.pop("force"),
        registry=kw.pop("registry"),
        cache_registry=kw.pop("cache_registry"),
        cache_read_only=kw.pop("cache_read_only"),
    )


build_flags = packing(
    "flags",
    _build_flags,
    [
        *INPUT_OPTIONS,
        click.option(
            "--force", is_flag=True, help="Rebuild even when the content-hash tag exists (locally or in --registry)."
        ),
        click.option(
            "--registry",
            "registry",
            type=_params.REGISTRY,
            default=None,
            help="Also skip a build whose content-hash tag is in this registry. " + REGISTRY_HELP,
        ),
        click.option(
            "--cache-registry",
            type=_params.REGISTRY,
            default=None,
            help="Keep BuildKit's cache in this registry as <registry>/<repository>/<variant>:buildcache-<arch> "
            "(read, and written after a build). " + REGISTRY_HELP,
        ),
        click.option(
            "--cache-read-only",
            is_flag=True,
            help="With --cache-registry: read the cache, never write it (pull requests).",
        ),
    ],
)
"""``--ca-cert``, ``--wheelhouse``, ``--repository``, ``--force``, ``--registry``, ``--cache-registry``,
``--cache-read-only`` as one argument ``flags: BuildFlags``."""

selection_flags = packing(
    "selection",
    lambda kw: Selection(only=tuple(kw.pop("only")), skip=tuple(kw.pop("skip")), suite=kw.pop("suite")),
    [
        click.option("--only", multiple=True, help="Run only this check (repeatable)."),
        click.option("--skip", multiple=True, help="Skip this check (repeatable)."),
        click.option(
            "--suite",
            default="full",
            show_default=True,
            help="Suite of checks: quick (pull requests: no compiled generate, no inductor compile) or full.",
        ),
    ],
)
"""``--only``, ``--skip``, ``--suite`` as one argument ``selection: select.Selection``."""
