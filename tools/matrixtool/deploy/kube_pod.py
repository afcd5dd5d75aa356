"""The run conditions of a deployment profile read back from the manifests ``kube.manifests`` writes
(``conditions_of``): the Deployment's fields as ``condition_pod.PodParts`` (``parts_of``), then each row of
``conditions.ROWS`` reads its value (``from_pod``, the inverse of the ``pod`` that ``kube`` applied); a unit test
proves the round trip for every profile of matrix.yaml. Pure.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from matrixtool.model.condition_pod import USER_ANNOTATION, PodParts
from matrixtool.model.conditions import ROWS, Condition

__all__ = [
    "CACHE_VOLUME",
    "ENV_ADDED_ANNOTATION",
    "MODEL_VOLUME",
    "USER_ANNOTATION",
    "comparable",
    "conditions_of",
    "parts_of",
]

MODEL_VOLUME = "models"
CACHE_VOLUME = "compile-cache"
# The variables ``kube`` adds to the container beside the profile's (comma-separated names): not a condition.
ENV_ADDED_ANNOTATION = "io.vllm-matrix/env-added"


def parts_of(docs: Sequence[Mapping[str, Any]]) -> PodParts:
    """The parts of the pod of the one Deployment of ``docs`` (not copied: read them, do not change them); no
    egress is a NetworkPolicy of ``docs`` that allows none."""
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    template = deployment["spec"]["template"]
    pod_spec = template["spec"]
    (container,) = pod_spec["containers"]
    return PodParts(
        pod_security=pod_spec.get("securityContext", {}),
        security=container.get("securityContext", {}),
        resources=container.get("resources", {}),
        env=container.get("env", []),
        volumes=pod_spec.get("volumes", []),
        mounts=container.get("volumeMounts", []),
        annotations=template["metadata"].get("annotations", {}),
        host_network=bool(pod_spec.get("hostNetwork")),
        no_egress=any(d["kind"] == "NetworkPolicy" and d["spec"].get("egress") == [] for d in docs),
    )


def conditions_of(docs: Sequence[Mapping[str, Any]]) -> dict[Condition, Any]:
    """The run conditions the documents of ``manifests`` set, read back from their fields in the order of
    ``conditions.ROWS`` (normal forms; a tmpfs keeps only its ``size=``, the one option an emptyDir has; on
    OpenShift the user is ``USER_ANNOTATION``)."""
    parts = parts_of(docs)
    added = set(filter(None, parts.annotations.get(ENV_ADDED_ANNOTATION, "").split(",")))
    if added:
        parts.env = [e for e in parts.env if e["name"] not in added]
    found = {row.condition: row.from_pod(parts) for row in ROWS}
    return {condition: value for condition, value in found.items() if value is not None}


def comparable(values: Mapping[Condition, Any]) -> dict[Condition, Any]:
    """Condition values as a manifest can hold them: tmpfs options reduced to their ``size=`` (the round trip
    ``conditions_of(manifests(values)) == comparable(values)``)."""
    out = dict(values)
    if Condition.TMPFS in out:
        out[Condition.TMPFS] = {
            path: (f"size={m.group(1)}" if (m := re.search(r"(?:^|,)size=([^,]+)", opts)) else "")
            for path, opts in out[Condition.TMPFS].items()
        }
    return out
