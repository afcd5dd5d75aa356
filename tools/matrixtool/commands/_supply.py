"""The supply-chain steps of the commands that build, test, push, pin and publish (docs/supply-chain.md)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import click
import docker

from matrixtool.build import executor as build
from matrixtool.build import plan, registry
from matrixtool.build.plan import BuildResult
from matrixtool.commands import _params
from matrixtool.commands._shared import packing
from matrixtool.commands._steps import provenance
from matrixtool.model.model import Matrix, Platform
from matrixtool.publish import push
from matrixtool.supply import attestations, signing


@dataclass(frozen=True, kw_only=True)
class SignFlags:
    """``push --sign-key`` (a cosign private key; None: nothing is signed) and ``--smoke-report`` (a file
    attached as a signed attestation)."""

    sign_key: Path | None = None
    smoke_report: Path | None = None

    def check(self, env: Mapping[str, str]) -> None:
        """Raises ConfigError (exit 3): see ``check_keys``."""
        check_keys(env, sign_key=self.sign_key, smoke_report=self.smoke_report)


sign_flags = packing(
    "signing",
    lambda kw: SignFlags(sign_key=kw.pop("sign_key"), smoke_report=kw.pop("smoke_report")),
    [
        click.option(
            "--sign-key",
            type=_params.INPUT_FILE,
            default=None,
            help="cosign private key: sign each pushed digest and attach the SBOM, provenance and --smoke-report "
            "(password in COSIGN_PASSWORD).",
        ),
        click.option(
            "--smoke-report",
            type=_params.INPUT_FILE,
            default=None,
            help="With --sign-key: the smoke report to attach (the --json-file of 'run' or 'test').",
        ),
    ],
)
"""``--sign-key``, ``--smoke-report`` as one argument ``signing: SignFlags``."""


verify_option = click.option(
    "--verify-key",
    type=_params.INPUT_FILE,
    default=None,
    help="cosign public key: use an image only when its registry digest is signed by this key (exit 15 if not).",
)
"""``--verify-key``, as the parameter ``verify_key``."""


def check_keys(
    env: Mapping[str, str],
    *,
    sign_key: Path | None = None,
    smoke_report: Path | None = None,
    verify_key: Path | None = None,
) -> None:
    """Raises:
    ConfigError: a key flag names no key of its kind, a private key without ``COSIGN_PASSWORD``, or a
        ``--smoke-report`` without ``--sign-key`` or naming no file (exit 3).
    """
    signing.check_key_flags(sign_key=sign_key, smoke_report=smoke_report, verify_key=verify_key, env=env)


def write_build_reports(
    client: docker.DockerClient,
    matrix: Matrix,
    plans: Sequence[plan.BuildPlan],
    results: Sequence[BuildResult],
    out_dir: Path,
) -> None:
    """The SBOM and provenance of each built (or found) image under ``<out>/reports/``
    (``attestations.write_build_reports``); an SBOM that cannot be derived is a warning."""
    revision, source = provenance(matrix.root)
    attestations.write_build_reports(
        client, plans, results, matrix_path=matrix.source, out_dir=out_dir, revision=revision, source=source
    )


def verify_refs(refs: Iterable[str], *, pub: Path | None, env: Mapping[str, str]) -> None:
    """Nothing when ``pub`` is None.

    Raises UnverifiedError: a ref is unsigned, signed by another key, or its tag names another image (exit 15).
    """
    if pub is not None:
        for ref in dict.fromkeys(refs):
            attestations.verify_ref(None, ref, pub=pub, env=env)


def sign_pushed(
    client: docker.DockerClient,
    matrix: Matrix,
    plans: Sequence[plan.BuildPlan],
    results: Sequence[push.PushResult],
    signing_flags: SignFlags,
    *,
    out_dir: Path,
    env: Mapping[str, str],
) -> None:
    """After ``push --sign-key`` (nothing without it): rewrite the provenance of each image built here (the build's
    ``--out`` may be another folder), then sign each pushed digest and attach its attestations
    (``attestations.sign_pushed``). ``results`` are in the order of ``plans``. Raises SbomError, UnverifiedError,
    RegistryError, EngineUnreachableError (cosign missing or failed)."""
    key = signing_flags.sign_key
    if key is None:
        return
    built_here = [r for p in plans if (r := build.existing(client, p)) is not None]
    write_build_reports(client, matrix, plans, built_here, out_dir)
    pushed = list(zip(results, [p.hash_ref for p in plans], strict=True))
    attestations.sign_pushed(client, pushed, key=key, out_dir=out_dir, smoke_report=signing_flags.smoke_report, env=env)


def verified_pull(
    client: docker.DockerClient, image: str, *, platform: Platform, pub: Path | None, env: Mapping[str, str]
) -> None:
    """Pull ``image`` when the engine lacks it (``platform``: the variant's); with ``pub``, verify it in its registry
    before, and that the engine's image is the signed digest after (not a local re-tag). Raises UnverifiedError (exit
    15), RegistryError (the pull failed)."""
    if pub is not None:
        attestations.verify_ref(client, image, pub=pub, env=env)
    registry.pull_if_missing(client, image, platform=platform)
    if pub is not None:
        attestations.verify_ref(client, image, pub=pub, env=env, local=True)
