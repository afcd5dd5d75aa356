"""The CI matrix: matrix.yaml as the JSON a GitHub Actions job prints and later jobs expand with
``fromJSON`` (data, not generated workflow YAML; as docker-library/python's ``generate.sh`` does).

One entry per variant x platform, each carrying the runner labels that matrix.yaml declares (the schema
requires ``runner``: a variant without one is a config error, never a guess).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from matrixtool.build.wheelhouse import wheel_platform, wheelhouse_index
from matrixtool.core.errors import ConfigError, NothingSelectedError
from matrixtool.model.model import Platform, Variant


def ci_entry(variant: Variant, platform: Platform) -> dict[str, Any]:
    """One ``include`` entry: ``variant``, ``platform``, ``arch``, ``runner`` (list of runs-on labels),
    ``python``, ``torch`` (``package==version``), ``wheelhouse`` (bool), ``wheelhouse_index`` ("" unless
    the variant needs a wheelhouse) and ``wheel_platform`` (the platform tag ``pip download --platform`` takes for
    that wheel, ``manylinux_2_28_x86_64``; with ``--python-version`` ``python`` it fetches the wheel the build
    installs whatever the host's Python and machine)."""
    return {
        "variant": variant.name,
        "platform": str(platform),
        "arch": platform.arch,
        "runner": list(variant.runner),
        "accelerator": variant.accelerator.value,
        "python": variant.python,
        "torch": variant.torch.requirement,
        "wheelhouse": variant.index.wheelhouse,
        "wheelhouse_index": wheelhouse_index(variant) if variant.index.wheelhouse else "",
        "wheel_platform": wheel_platform(platform),
    }


def ci_matrix(variants: Sequence[Variant], *, hosted_only: bool = False) -> dict[str, list[dict[str, Any]]]:
    """``{"include": [...]}`` over every variant x platform, in matrix order.

    ``hosted_only`` leaves out variants whose runner labels include ``self-hosted``: pull requests from
    forks must not run their code on the project's own (GPU) machines.

    Raises:
        ConfigError: a variant has no runner labels (only reachable with a hand-made ``Variant``: the
            schema already requires ``runner``), or a wheelhouse variant's index cannot be derived.
        NothingSelectedError: ``hosted_only`` leaves no variant; GitHub Actions rejects a matrix whose
            ``include`` is empty ("Matrix vector 'include' does not contain any values"), so an empty one is
            an error here, not a matrix that fails the workflow later (exit 4).
    """
    missing = [v.name for v in variants if not v.runner]
    if missing:
        raise ConfigError("matrix.yaml", [f"variants.{name}.runner: no runner label; CI needs one" for name in missing])
    kept = [v for v in variants if not (hosted_only and "self-hosted" in v.runner)]
    if not kept:
        raise NothingSelectedError(
            f"--hosted-only leaves no variant of {', '.join(v.name for v in variants)}: each runs on self-hosted "
            "runners; select a variant on a hosted runner (matrix.yaml runner without self-hosted), or skip the "
            "job when the selection is empty"
        )
    return {"include": [ci_entry(v, p) for v in kept for p in v.platforms]}


def ci_matrix_json(variants: Sequence[Variant], *, hosted_only: bool = False) -> str:
    """``ci_matrix`` as compact one-line JSON, ready for ``echo "matrix=…" >> "$GITHUB_OUTPUT"``."""
    return json.dumps(ci_matrix(variants, hosted_only=hosted_only), separators=(",", ":"))
