"""The reports a security team signs off (SBOM, provenance, signatures): the entry points the commands call,
so the logic stays in ``sbom``, ``provenance`` and ``signing``."""

from __future__ import annotations

import datetime
import json
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import docker

from matrixtool.build import registry
from matrixtool.build.plan import BuildPlan, BuildResult
from matrixtool.core import jsontext, outputs, process
from matrixtool.core.errors import ConfigError
from matrixtool.core.untrusted import check_shape
from matrixtool.model.yamlfile import read_config_text
from matrixtool.publish.push import PushResult
from matrixtool.supply import cyclonedx, provenance, sbom, signing


def _warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr, flush=True)


def _builder_versions(client: docker.DockerClient) -> dict[str, str]:
    versions = {"docker-engine": str(client.version().get("Version", "unknown"))}
    proc = process.run(["docker", "buildx", "version"], timeout=30, quiet=True)
    if proc.ok:
        versions["buildx"] = proc.stdout.strip()
    return versions


def write_build_reports(
    client: docker.DockerClient,
    plans: Sequence[BuildPlan],
    results: Sequence[BuildResult],
    *,
    matrix_path: Path,
    out_dir: Path,
    revision: str,
    source: str,
) -> list[Path]:
    """The SBOM and provenance of each built image (a plan's ``hash_ref``), each image's pair written as one set; the
    paths written. An image whose SBOM cannot be derived gets a warning, not a failure (the run's own result stands),
    and its provenance alone: an SBOM of an earlier build at its path is removed in the same set, never left beside
    the new provenance.
    Raises OutputError: a report cannot be written (exit 3; that image's pair is unchanged)."""
    by_ref = {p.hash_ref: p for p in plans}
    written: list[Path] = []
    builder = _builder_versions(client) if results else {}
    for result in results:
        the_plan = by_ref.get(result.image)
        if the_plan is None:
            continue
        files: dict[Path, str | bytes | None] = {}
        try:
            files[cyclonedx.report_path(out_dir, result.variant)] = cyclonedx.report_text(
                client, result.image, result.variant
            )
        except sbom.SbomError as exc:
            _warn(f"no SBOM for {result.image}: {exc}")
            files[cyclonedx.report_path(out_dir, result.variant)] = None  # an earlier build's SBOM goes
        try:
            base_id = None if the_plan.base_digest else str(client.images.get(the_plan.base_ref).id)
        except docker.errors.ImageNotFound:
            base_id = None
        finished = None
        if not result.cached:
            finished = datetime.datetime.now(datetime.UTC)
        sources = provenance.Sources(
            matrix_path=matrix_path,
            templates=provenance.template_digests(matrix_path.parent),
            wheels=provenance.wheel_digests(the_plan.wheelhouse),
            builder=builder,
            revision=revision,
            source=source,
        )
        doc = provenance.statement(
            the_plan,
            sources,
            image_id=result.image_id,
            base_id=base_id,
            started=finished - datetime.timedelta(seconds=result.seconds) if finished else None,
            finished=finished,
        )
        files[provenance.report_path(out_dir, result.variant)] = provenance.to_json(doc)
        outputs.write_set(files)  # the image's SBOM and provenance: both, or the provenance and no SBOM
        written += [path for path, data in files.items() if data is not None]
    return written


def write_sbom_report(client: docker.DockerClient, ref: str, variant: str, *, out_dir: Path) -> list[Path]:
    """The SBOM of ``ref`` as ``<out>/reports/sbom-<variant>.cdx.json`` (a warning when it cannot be derived)."""
    try:
        return [cyclonedx.write_report(client, ref, variant, out_dir=out_dir)]
    except sbom.SbomError as exc:
        _warn(f"no SBOM for {ref}: {exc}")
        return []


def sign_pushed(
    client: docker.DockerClient,
    pushed: Sequence[tuple[PushResult, str]],
    *,
    key: Path,
    out_dir: Path,
    smoke_report: Path | None,
    env: Mapping[str, str],
) -> list[signing.Signed]:
    """Sign each pushed digest and attach the SBOM, the build's provenance (when that build wrote one) and
    ``smoke_report``; the SBOM comes from the pushed digest (pulled) when the engine does not hold the image.

    Raises SbomError: the SBOM of a pushed image cannot be derived (nothing is signed before its SBOM exists);
    ConfigError: the build's provenance statement is no statement (``_predicate_of``); RegistryError,
    EngineUnreachableError: cosign failed or is missing; a pull failed."""
    signed = []
    for result, local in pushed:
        if not result.digest:
            raise signing.UnverifiedError(f"{result.refs[0]}: the registry reported no digest to sign")
        ref = signing.by_digest(result.refs[0], result.digest)
        try:
            client.images.get(local)
        except docker.errors.ImageNotFound:
            registry.pull_if_missing(client, ref, platform=result.platform)
            local = ref
        sbom_path = cyclonedx.write_report(client, local, result.variant, out_dir=out_dir)
        attachments = [signing.Attachment(predicate_type=signing.SBOM_PREDICATE, path=sbom_path)]
        with tempfile.TemporaryDirectory(prefix="matrix-attest-") as tmp:
            statement_path = provenance.report_path(out_dir, result.variant)
            if statement_path.is_file():
                # cosign attest takes the predicate alone and writes the statement (subject: the pushed digest).
                predicate = Path(tmp) / "provenance.json"
                outputs.write_text(predicate, json.dumps(_predicate_of(statement_path)))
                attachments.append(signing.Attachment(predicate_type=signing.PROVENANCE_PREDICATE, path=predicate))
            if smoke_report is not None:
                attachments.append(signing.Attachment(predicate_type=signing.SMOKE_PREDICATE, path=smoke_report))
            signed.append(signing.sign_and_attest(ref, key=key, attachments=attachments, env=env))
    return signed


# The part of an in-toto statement (``provenance.to_json``) that is attached: its predicate.
_STATEMENT_SCHEMA = {"type": "object", "required": ["predicate"], "properties": {"predicate": {"type": "object"}}}


def _predicate_of(path: Path) -> Any:
    """The predicate of the in-toto statement at ``path`` (``build`` wrote it under ``--out``; anything may have
    replaced it since). Raises ConfigError: not a regular file, not JSON, or no statement with a predicate object (exit
    3)."""
    what = "the provenance statement 'tools/matrix build' writes (build again to write it)"
    text = read_config_text(path, limit=16 * 1024 * 1024, what=what)
    try:
        doc = jsontext.loads(text)
    except ValueError as exc:
        raise ConfigError(str(path), [f"is not JSON ({exc}); {what}"]) from exc
    check_shape(doc, _STATEMENT_SCHEMA, source=str(path), what=what)
    return doc["predicate"]


def verify_ref(
    client: docker.DockerClient | None, ref: str, *, pub: Path, env: Mapping[str, str], local: bool = False
) -> signing.Verified:
    """Verify ``ref`` in its registry against ``pub``; with ``local``, the engine's image of ``ref`` must be the signed
    digest too (``signing.check_local_matches``). Raises UnverifiedError: unsigned, another key, a re-pointed tag, or a
    local image that is not the signed one."""
    verified = signing.verify(ref, pub=pub, env=env)
    if local and client is not None:
        signing.check_local_matches(client.images.get(ref).attrs, verified)
    return verified
