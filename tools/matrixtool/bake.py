"""Export the build matrix as a ``docker-bake.json`` so BuildKit's own ``docker buildx bake`` (and remote
builders) build exactly what ``tools/matrix build`` builds.

Each target comes from a ``plan.BuildPlan`` (same args, labels, tags and content hash) and its build
context is staged by ``build.stage_context`` under the output folder: engine 20.10's BuildKit has no
named build contexts, so the rendered files and the wheelhouse are laid out in one folder per target.
Bake file format: https://docs.docker.com/build/bake/reference/ (JSON form).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from matrixtool.build import stage_context
from matrixtool.plan import TARGET, BuildPlan
from matrixtool.registry import remote_ref

BAKE_FILE = "docker-bake.json"
CONTEXTS_DIR = "bake"


def target_name(plan: BuildPlan) -> str:
    """The bake target of one variant x platform: ``<variant>-<arch>`` (``cpu-amd64``)."""
    return f"{plan.variant}-{plan.arch}"


def cache_settings(plan: BuildPlan, registry: str | None) -> dict[str, list[str]]:
    """``cache-to`` inline (the cache travels inside the image, the one exporter every driver has) and,
    with a registry, ``cache-from`` the published images of this variant (content-hash tag, then version)."""
    settings: dict[str, list[str]] = {"cache-to": ["type=inline"]}
    if registry:
        settings["cache-from"] = [f"type=registry,ref={remote_ref(registry, tag)}" for tag in plan.tags]
    return settings


def bake_target(plan: BuildPlan, *, context_dir: Path, registry: str | None = None) -> dict[str, Any]:
    """The bake target of ``plan`` whose context is staged at ``context_dir`` (an absolute path).

    The tags are the plan's (content-hash tag first), plus the same tags under ``registry`` when given.
    """
    tags = list(plan.tags)
    if registry:
        tags += [remote_ref(registry, tag) for tag in plan.tags]
    target: dict[str, Any] = {
        "context": str(context_dir),
        "dockerfile": "Dockerfile",
        "target": TARGET,
        "platforms": [plan.platform],
        "args": dict(sorted(plan.build_args.items())),
        "labels": dict(sorted(plan.labels.items())),
        "tags": tags,
        "output": ["type=docker"],
        **cache_settings(plan, registry),
    }
    if plan.ca_cert is not None:
        target["secret"] = [f"id=ca,src={plan.ca_cert}"]
    return target


def bake_document(plans: Sequence[BuildPlan], *, contexts_dir: Path, registry: str | None = None) -> dict[str, Any]:
    """The whole bake file: one target per plan, a group per variant, and ``default`` with every target.

    ``contexts_dir``: absolute folder under which each target's context is ``<target name>/``.
    """
    targets = {
        target_name(p): bake_target(p, context_dir=contexts_dir / target_name(p), registry=registry) for p in plans
    }
    groups: dict[str, dict[str, list[str]]] = {"default": {"targets": list(targets)}}
    for p in plans:
        groups.setdefault(p.variant, {"targets": []})["targets"].append(target_name(p))
    return {"group": groups, "target": targets}


def write_bake(plans: Sequence[BuildPlan], *, out_dir: Path, registry: str | None = None) -> Path:
    """Stage every plan's build context under ``out_dir/bake/`` and write ``out_dir/docker-bake.json``.

    Returns the bake file's path. Build with ``docker buildx bake -f <path> [TARGET|GROUP…]``.
    """
    out_dir = out_dir.resolve()
    contexts_dir = out_dir / CONTEXTS_DIR
    for p in plans:
        stage_context(p, contexts_dir / target_name(p))
    path = out_dir / BAKE_FILE
    doc = bake_document(plans, contexts_dir=contexts_dir, registry=registry)
    path.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    return path
