"""Build provenance: an in-toto Statement (v1) with an SLSA provenance v1 predicate, beside the SBOM.

BuildKit writes its own SLSA provenance from 0.11 on (Docker Engine 23+ or buildx's docker-container driver);
the engine 20.10 here runs BuildKit 0.8, so the tool writes the statement itself.
"""

from __future__ import annotations

import datetime
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from matrixtool import __version__
from matrixtool.build.plan import BuildPlan

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://slsa.dev/provenance/v1"
BUILD_TYPE = "https://vllm-image-matrix.invalid/buildtypes/matrix-build/v1"
BUILDER_ID = "https://vllm-image-matrix.invalid/builder/tools-matrix"


def sha256_file(path: Path) -> str:
    """The SHA-256 hex digest of ``path`` (read in 1 MiB blocks)."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def wheel_digests(folder: Path | None) -> dict[str, str]:
    """``{file name: sha256 hex}`` of the ``*.whl`` files directly in ``folder`` (empty for None)."""
    if folder is None or not folder.is_dir():
        return {}
    return {p.name: sha256_file(p) for p in sorted(folder.glob("*.whl")) if p.is_file()}


def _digest(value: str) -> dict[str, str]:
    return {"sha256": value.removeprefix("sha256:")}


@dataclass(frozen=True, kw_only=True)
class Sources:
    """What a build read besides its plan, and what built it: the matrix file (``matrix_path``), the digests of the
    templates and of the wheelhouse's wheels (``{path: sha256 hex}``), the checkout's git ``revision`` (``unknown``:
    none) at ``source`` (its URL), and the ``builder``'s versions (``{component: version}``)."""

    matrix_path: Path
    templates: Mapping[str, str]
    wheels: Mapping[str, str]
    builder: Mapping[str, str]
    revision: str
    source: str


def statement(
    plan: BuildPlan,
    sources: Sources,
    *,
    image_id: str,
    base_id: str | None,
    started: datetime.datetime | None = None,
    finished: datetime.datetime | None = None,
) -> dict[str, Any]:
    """The statement of ``plan``'s image ``image_id`` built from ``sources``. ``base_id``: the base's image ID when it
    is not pinned; ``started``/``finished`` None for an image built before (found by its content-hash tag)."""
    matrix_path, templates, wheels = sources.matrix_path, sources.templates, sources.wheels
    builder, revision, source = sources.builder, sources.revision, sources.source
    name = plan.hash_ref.rsplit(":", 1)[0]
    base: dict[str, Any] = {"uri": f"docker-image:{plan.base_image}"}
    if plan.base_digest:
        base["digest"] = _digest(plan.base_digest)
        base["annotations"] = {"pinned": "matrix.lock.json"}
    elif base_id:
        base["digest"] = _digest(base_id)
        base["annotations"] = {"pinned": "no: the engine's image ID of the base used"}
    dependencies: list[dict[str, Any]] = [base]
    dependencies += [{"uri": f"file:wheelhouse/{n}", "digest": {"sha256": d}} for n, d in sorted(wheels.items())]
    dependencies += [{"uri": f"file:{p}", "digest": {"sha256": d}} for p, d in sorted(templates.items())]
    dependencies += [
        {
            "uri": f"file:{f.path}",
            "digest": {"sha256": hashlib.sha256(f.text.encode()).hexdigest()},
        }
        for f in plan.files
    ]
    if revision != "unknown":
        dependencies.append({"uri": f"git+{source}@{revision}", "digest": {"gitCommit": revision}})
    metadata: dict[str, Any] = {"invocationId": plan.content_hash}
    if started is not None:
        metadata["startedOn"] = started.astimezone(datetime.UTC).isoformat().replace("+00:00", "Z")
    if finished is not None:
        metadata["finishedOn"] = finished.astimezone(datetime.UTC).isoformat().replace("+00:00", "Z")
    return {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": name, "digest": _digest(image_id)}],
        "predicateType": PREDICATE_TYPE,
        "predicate": {
            "buildDefinition": {
                "buildType": BUILD_TYPE,
                "externalParameters": {
                    "variant": plan.variant,
                    "platform": str(plan.platform),
                    "matrix": {"path": matrix_path.name, "sha256": sha256_file(matrix_path)},
                    "refs": list(plan.refs),
                },
                "internalParameters": {"contentHash": plan.content_hash, "buildArgs": plan.build_args},
                "resolvedDependencies": dependencies,
            },
            "runDetails": {
                "builder": {"id": BUILDER_ID, "version": {"vllm-image-matrix": __version__, **builder}},
                "metadata": metadata,
            },
        },
    }


def template_digests(root: Path) -> dict[str, str]:
    """``{templates/<name>: sha256}`` of the files under ``root/templates``."""
    folder = root / "templates"
    return {str(p.relative_to(root)): sha256_file(p) for p in sorted(folder.rglob("*")) if p.is_file()}


def report_path(out_dir: Path, variant: str) -> Path:
    """``<out>/reports/provenance-<variant>.intoto.json``."""
    return out_dir / "reports" / f"provenance-{variant}.intoto.json"


def to_json(doc: Mapping[str, Any]) -> str:
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"
