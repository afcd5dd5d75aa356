"""Export the build matrix as a ``docker-bake.json`` so ``docker buildx bake`` builds exactly what ``tools/matrix
build`` builds (https://docs.docker.com/build/bake/reference/, JSON form). Engine 20.10's BuildKit has no named
build contexts, so each target's files and wheelhouse are staged in one folder per target.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from matrixtool.build.executor import stage_context
from matrixtool.build.plan import BuildPlan, BuildSpec, build_spec
from matrixtool.core import outputs

BAKE_FILE = "docker-bake.json"
CONTEXTS_DIR = "bake"


def target_name(plan: BuildPlan) -> str:
    """The bake target of one variant x platform: ``<variant>-<arch>`` (``cpu-amd64``)."""
    return f"{plan.variant}-{plan.arch}"


def bake_target(spec: BuildSpec) -> dict[str, Any]:
    """``spec`` as a bake target (the JSON form of https://docs.docker.com/build/bake/reference/); the same
    description ``plan.buildx_argv`` renders for ``tools/matrix build``."""
    target: dict[str, Any] = {
        "context": str(spec.context),
        "dockerfile": spec.dockerfile,
        "target": spec.target,
        "platforms": [spec.platform],
        "args": dict(spec.args),
        "labels": dict(spec.labels),
        "tags": list(spec.tags),
        "output": list(spec.outputs),
    }
    optional = {"cache-from": spec.cache_from, "cache-to": spec.cache_to, "secret": spec.secrets}
    target.update({key: list(values) for key, values in optional.items() if values})
    return target


def bake_document(plans: Sequence[BuildPlan], *, contexts_dir: Path, registry: str | None = None) -> dict[str, Any]:
    """``contexts_dir``: absolute folder under which each target's context is ``<target name>/``."""
    targets = {
        target_name(p): bake_target(build_spec(p, context_dir=contexts_dir / target_name(p), registry=registry))
        for p in plans
    }
    groups: dict[str, dict[str, list[str]]] = {"default": {"targets": list(targets)}}
    for p in plans:
        groups.setdefault(p.variant, {"targets": []})["targets"].append(target_name(p))
    return {"group": groups, "target": targets}


def write_bake(plans: Sequence[BuildPlan], *, out_dir: Path, registry: str | None = None) -> Path:
    """Returns the bake file's path. Build with ``docker buildx bake -f <path> [TARGET|GROUP…]``. A bake file of an
    earlier run is removed before the contexts it names are staged again, and the new one written once all are: a failed
    staging leaves no bake file that would build half-new contexts.

    Raises OutputError: the bake file's path is no regular file (a folder, a FIFO: refused before anything is staged),
    or a context or the file cannot be written (exit 3)."""
    out_dir = out_dir.resolve()
    contexts_dir = out_dir / CONTEXTS_DIR
    path = out_dir / BAKE_FILE
    outputs.check_targets([path])
    with outputs.guarded(path):
        path.unlink(missing_ok=True)
    for p in plans:
        stage_context(p, contexts_dir / target_name(p))
    doc = bake_document(plans, contexts_dir=contexts_dir, registry=registry)
    outputs.write_text(path, json.dumps(doc, indent=2) + "\n")
    return path
