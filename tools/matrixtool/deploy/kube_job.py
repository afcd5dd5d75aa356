"""A Kubernetes Job that runs a variant's bundle (``matrixtool.smoke.bundle``) in a pod of the image under a deployment
profile: the pod spec is the profile's Deployment pod (``kube.manifests``: securityContext, volumes, env,
resources, grace) with the server's container turned into ``python3 /smoke/bundle.pyz --json -``; the bundle
comes as a ConfigMap's ``binaryData``, mounted read-only; the suite's work (the tiny model) goes to a memory
``emptyDir`` of its own (``SMOKE_DIR``, as the container check's tmpfs). The JSON report is the last thing the
pod prints (``report_of`` reads it back from ``kubectl logs``).

Pure: values in, dicts out; validated as the other manifests (``kube_checks``).
"""

from __future__ import annotations

import base64
import copy
from collections.abc import Mapping, Sequence
from typing import Any

from matrixtool.core.jsontext import loads
from matrixtool.deploy import kube_pod
from matrixtool.model.model import Variant
from matrixtool.model.select import select_checks
from matrixtool.smoke import bundle
from matrixtool.smoke.runners import SMOKE_DIR

BUNDLE_MOUNT = "/smoke"
BUNDLE_KEY = "bundle.pyz"
BUNDLE_VOLUME = "bundle"
WORK_VOLUME = "smoke-work"
WORK_SIZE = "1Gi"  # as the container check's tmpfs (smoke_runners.SMOKE_TMPFS)


def names(variant: str, profile: str) -> tuple[str, str]:
    """The ConfigMap's and the Job's names: ``vllm-smoke-<variant>`` and ``vllm-smoke-<variant>-<profile>``."""
    return f"vllm-smoke-{variant}", f"vllm-smoke-{variant}-{profile}"


def smoke_job(
    docs: Sequence[Mapping[str, Any]],
    *,
    variant: str,
    profile: str,
    image: str,
    bundle_data: bytes,
    deadline_s: int,
) -> list[dict[str, Any]]:
    """The ConfigMap holding ``bundle_data`` and the Job running it in ``image`` under one profile, bounded by
    ``deadline_s`` seconds (``activeDeadlineSeconds``): the pod is the Deployment's of ``docs`` (``kube.manifests`` of
    the same variant, profile and image: the profile's conditions, the cluster's IDs, a GPU variant's one GPU), and
    its NetworkPolicy follows the Job."""
    deployment = docs[0]
    template = copy.deepcopy(deployment["spec"]["template"])
    # No probes here, so no cold start to outlast; the run conditions' annotations stay.
    template["metadata"]["annotations"].pop("io.vllm-matrix/cold-start", None)
    if not template["metadata"]["annotations"]:
        del template["metadata"]["annotations"]
    spec = template["spec"]
    (server,) = spec["containers"]
    config_name, job_name = names(variant, profile)
    labels = {**deployment["metadata"]["labels"], "app.kubernetes.io/instance": job_name}
    template["metadata"]["labels"] = labels
    # The server's model claim is not needed: the bundle makes the tiny model itself, in its work folder.
    spec["volumes"] = [v for v in spec["volumes"] if v["name"] != kube_pod.MODEL_VOLUME]
    spec["volumes"] += [
        {"name": BUNDLE_VOLUME, "configMap": {"name": config_name, "defaultMode": 0o444}},
        {"name": WORK_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": WORK_SIZE}},
    ]
    mounts = [m for m in server["volumeMounts"] if m["name"] != kube_pod.MODEL_VOLUME]
    mounts += [
        {"name": BUNDLE_VOLUME, "mountPath": BUNDLE_MOUNT, "readOnly": True},
        {"name": WORK_VOLUME, "mountPath": SMOKE_DIR},
    ]
    container: dict[str, Any] = {
        "name": "smoke",
        "image": image,
        "command": ["python3", f"{BUNDLE_MOUNT}/{BUNDLE_KEY}", "--json", "-", "--image", image],
        "env": [*server.get("env", []), {"name": "MATRIX_SMOKE_DIR", "value": SMOKE_DIR}],
        "volumeMounts": mounts,
    }
    if "resources" in server:  # the profile's limits and a GPU variant's one GPU (kube.GPU_RESOURCES)
        container["resources"] = copy.deepcopy(server["resources"])
    if "securityContext" in server:
        container["securityContext"] = server["securityContext"]
    spec["containers"] = [container]
    spec["restartPolicy"] = "Never"
    shared = {k: v for k, v in labels.items() if k != "app.kubernetes.io/instance"}  # one bundle, every profile
    config_map = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": config_name, "labels": shared},
        "binaryData": {BUNDLE_KEY: base64.b64encode(bundle_data).decode()},
    }
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": job_name, "labels": labels},
        "spec": {"backoffLimit": 0, "activeDeadlineSeconds": deadline_s, "template": template},
    }
    out: list[dict[str, Any]] = [config_map, job]
    for found in (d for d in docs if d["kind"] == "NetworkPolicy"):  # a profile without network: no egress
        policy = copy.deepcopy(dict(found))
        policy["metadata"] = {"name": f"{job_name}-no-egress", "labels": labels}
        policy["spec"]["podSelector"] = {"matchLabels": {"app.kubernetes.io/instance": job_name}}
        out.append(policy)
    return out


def bundle_for(variant: Variant, suite: str) -> tuple[bytes, int]:
    """The bundle of ``variant``'s checks of ``suite`` (``select.select_checks``) and the seconds its run may
    take (``bundle.deadline_s``).

    Raises:
        ConfigError: an unknown suite (exit 3).
    """
    facts = bundle.facts(variant, select_checks(variant, (), (), suite), suite)
    return bundle.bundle_bytes(facts), bundle.deadline_s(facts)


def report_of(log: str) -> dict[str, Any]:
    """The JSON report a smoke Job's pod printed last (``kubectl logs``: stderr's progress lines, then the
    document, which opens with a line holding only ``{``).

    Raises ValueError when the log holds no such document."""
    lines = log.splitlines()
    starts = [i for i, line in enumerate(lines) if line == "{"]
    if not starts:
        raise ValueError("the log holds no JSON report (no line '{')")
    data = loads("\n".join(lines[starts[-1] :]))
    if not isinstance(data, dict) or "checks" not in data:
        raise ValueError("the log's last JSON document is no report")
    return dict(data)
