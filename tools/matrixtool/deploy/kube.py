"""Kubernetes manifests that run an image exactly as the checks ran it under a deployment profile.

Per variant and profile: a Deployment (the image's own ENTRYPOINT with the serve arguments of the ``serve``
check, each run condition of the profile as its Pod/Container field, probes on ``/health``, for a GPU variant one
GPU of its device plugin, ``GPU_RESOURCES``), a Service, and
for a profile without network a NetworkPolicy that allows no egress. Each row of ``conditions.ROWS`` writes its
condition into the pod's parts (``pod``) and ``kube_pod.conditions_of`` reads the fields back; the probes follow
the times to ready a report measured (``kube_times``).

Probes: a startupProbe that outlasts a cold start (``STARTUP_MARGIN`` times the measured cold time to ready, at
least ``MIN_STARTUP_S``), then readiness and liveness on ``/health``, so a liveness probe never kills a
server that is still compiling (vLLM's own Helm chart has no startupProbe). The compile cache volume
(``CACHE_VOLUME``: the PersistentVolumeClaim ``--cache-claim`` names, else an emptyDir on the node's disk, which
survives the container's restarts but not the pod) is mounted at the image's cache root, as the serve check
mounts its cache volume; a start can still be cold (a new pod on an emptyDir, a first pod on a fresh claim, a
new image whose cache key differs), so the startupProbe follows the cold figure, and the warm one is recorded.
``enableServiceLinks: false``: a Service named ``vllm`` would otherwise inject ``VLLM_PORT=tcp://…``, which vLLM
reads as its own setting.

Two clusters (``Cluster``). Plain Kubernetes gets the profile's UID and GID as written (``runAsUser``,
``runAsGroup``) and, with a cache claim, ``fsGroup`` = the pod's GID (0 where the profile gives none, the images'
group): the Pod Security Standards, "restricted" included, have no rule on ``runAsGroup``, ``fsGroup`` or
``supplementalGroups`` (https://kubernetes.io/docs/concepts/security/pod-security-standards/; the admission
plugin's checks, kubernetes ``staging/src/k8s.io/pod-security-admission/policy/check_*.go``, have none either; the
removed PodSecurityPolicy example was what refused group 0). OpenShift's default SCC ``restricted-v2``
(openshift/cluster-kube-apiserver-operator ``bindata/bootkube/scc-manifests/…_scc-restricted-v2.yaml``) assigns
the UID (``runAsUser: MustRunAsRange``) from the namespace's ``openshift.io/sa.scc.uid-range`` and the ``fsGroup``
(``MustRunAs``) from its ``openshift.io/sa.scc.supplemental-groups``, and refuses a pod that asks for a value
outside them ("unable to validate against any security context constraint: … fsGroup: Invalid value: …: is not
an allowed group"; OpenShift docs, "About pre-allocated security context constraints values"); the ranges differ
per namespace, so the OpenShift manifest sets none of ``SCC_ASSIGNED`` and keeps the profile's user as the
annotation ``USER_ANNOTATION``. The arbitrary UID runs in group 0 (OpenShift docs, "Creating images: support
arbitrary user IDs"), the images' writable paths are group-0 writable, and the SCC's ``fsGroup`` makes the cache
claim group-writable.

Pure: values in, dicts out; ``kube_checks`` validates them and writes them as YAML.
"""

from __future__ import annotations

import enum
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from matrixtool.core.errors import ConfigError
from matrixtool.deploy.kube_pod import CACHE_VOLUME, ENV_ADDED_ANNOTATION, MODEL_VOLUME, USER_ANNOTATION
from matrixtool.deploy.kube_times import MAX_READY_S
from matrixtool.incontainer.vllm_smoke import envrules
from matrixtool.model.condition_pod import PodParts
from matrixtool.model.conditions import ROWS, Condition
from matrixtool.model.model import Variant
from matrixtool.smoke.serve import check as serve_check
from matrixtool.smoke.serve import line as serve_line
from matrixtool.smoke.serve import start as serve_start

PORT_NAME = "http"
PROBE_PERIOD_S = 5
STARTUP_MARGIN = 3.0
MIN_STARTUP_S = 120
# Kubernetes' int32 fields (a probe's failureThreshold, periodSeconds) hold at most this.
INT32_MAX = 2**31 - 1
# A Kubernetes object name of the DNS-1123 label kind (a PersistentVolumeClaim's, as `--model-claim` names one).
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
# A PersistentVolumeClaim's name: a DNS-1123 subdomain (labels joined by dots, at most 253 characters; Kubernetes'
# apimachinery IsDNS1123Subdomain, which the API server applies to PVC names).
DNS_SUBDOMAIN = re.compile(r"(?=.{1,253}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
# The pod securityContext fields an OpenShift manifest leaves out: runAsUser and fsGroup, which restricted-v2 assigns
# from the namespace's ranges (a value the namespace does not hold is refused), and runAsGroup (the SCC has no
# strategy for it; the arbitrary UID runs in group 0 without it).
SCC_ASSIGNED = ("runAsUser", "runAsGroup", "fsGroup")
# The extended resource whose device plugin (NVIDIA's k8s-device-plugin, AMD's k8s-device-plugin) gives a GPU
# variant's container its GPU; a container that does not ask for it gets none. One GPU: the checks ran on one.
GPU_RESOURCES = {"cuda": "nvidia.com/gpu", "rocm": "amd.com/gpu"}
# What a pod spec cannot set: the open-files limit comes from the container runtime (failure class 41).
NOFILE_ANNOTATION = "io.vllm-matrix/ulimit-nofile"
# How the server container starts (its form, docs/checks.md "How the server is started") and how that was known.
START_ANNOTATION = "io.vllm-matrix/start"
START_ASSUMED = (
    'assumed, not read: this project\'s images (ENTRYPOINT ["vllm"]); give an image this engine has (pull it) to '
    "read its ENTRYPOINT and CMD"
)
NOFILE_NOTE = (
    "vLLM raises the soft open-files limit to 65535 where the hard limit allows it; no Pod field sets it: the "
    "container runtime's default does (containerd LimitNOFILE, CRI-O default_ulimits)"
)


class Cluster(enum.Enum):
    """Where the manifests are applied: plain Kubernetes (the profile's UID/GID; Pod Security admission) or
    OpenShift (its restricted-v2 SCC assigns UID and fsGroup)."""

    KUBERNETES = "kubernetes"
    OPENSHIFT = "openshift"


@dataclass(frozen=True, kw_only=True)
class Serving:
    """How the server runs: ``args`` after the image's ENTRYPOINT (``serve MODEL …`` in the ``vllm`` form), the
    container's ``command`` in place of the ENTRYPOINT (None: the image's), the form they follow (``start``,
    ``serve_start``'s forms) and how it was known (``start_source``: read from the image, or assumed), the port,
    where the model is mounted (``model_mount``, from the PersistentVolumeClaim ``model_claim``), the stop
    grace (``grace_s``: ``terminationGracePeriodSeconds``), and the cold start the startupProbe must outlast
    (``cold_start_s``, seconds) with where that figure came from (``cold_start_source``); the compile cache's
    PersistentVolumeClaim (``cache_claim``; None: an emptyDir) and the warm start measured on it (``warm_start_s``,
    None: not measured)."""

    args: tuple[str, ...]
    port: int
    command: tuple[str, ...] | None = None
    start: str = serve_line.PROJECT_START.form
    start_source: str = START_ASSUMED
    model_mount: str
    model_claim: str = "vllm-models"
    grace_s: int = 30
    cold_start_s: float = 100.0
    cold_start_source: str = "assumed"
    cache_claim: str | None = None
    warm_start_s: float | None = None


def flag_problems(*, model: str, claim: str, cache_claim: str | None = None) -> list[str]:
    """Why ``--model`` (an absolute path in the server), ``--model-claim`` or ``--cache-claim`` (a
    PersistentVolumeClaim's name, ``DNS_SUBDOMAIN``) cannot go into a manifest; empty when all can."""
    problems = []
    for flag, value in (("--model-claim", claim), ("--cache-claim", cache_claim)):
        if value is not None and not DNS_SUBDOMAIN.fullmatch(value):
            problems.append(
                f"{flag} {value!r} is not a PersistentVolumeClaim name (lowercase letters, digits, '-' and '.', at "
                "most 253, each dot-separated part starting and ending with a letter or digit)"
            )
    if cache_claim is not None and cache_claim == claim:
        problems.append(
            f"--cache-claim {cache_claim!r} is the model's claim: give the compile cache a claim of its own"
        )
    if not model.startswith("/") or any(c.isspace() or not c.isprintable() for c in model):
        problems.append(f"--model {model!r}: give the model's absolute path in the server, e.g. /models/my-model")
    elif not model.startswith(f"{serve_line.MODEL_MOUNT}/") or set(model.split("/")[2:]) & {"", ".", ".."}:
        # The claim is mounted at MODEL_MOUNT: a path elsewhere (or leaving it by '..') serves nothing of it.
        problems.append(
            f"--model {model!r} is not a folder on the model claim, which is mounted at {serve_line.MODEL_MOUNT}: "
            f"give {serve_line.MODEL_MOUNT}/<folder> (no '.', '..' or empty parts)"
        )
    return problems


def start_in_pod(start: serve_start.Start, image: str) -> serve_start.Start:
    """The start a pod spec writes for ``image`` read as ``start`` (``serve_start.choose``): a documented form as it
    is (the image's ENTRYPOINT kept, ``args`` its arguments); no documented form, the ``--entrypoint`` that would
    serve it (``start.fix``: ``command`` in the pod). Raises ConfigError where none would (neither ``vllm`` nor
    ``python3`` in the image)."""
    if start.form != serve_start.NONE:
        return start
    if start.fix is None or not start.fix.entrypoint:
        raise ConfigError(
            "image", [f"{image}: no documented form serves it ({start.problem}), and no command would: give an image "
                      "with vllm or python3 and vLLM on its PATH"]
        )  # fmt: skip
    return start.fix


def serving_for(
    variant: Variant,
    profile: str,
    measured_s: float | None,
    *,
    model: str,
    claim: str,
    cache_claim: str | None = None,
    warm_s: float | None = None,
    start: tuple[serve_start.Start, str] = (serve_line.PROJECT_START, START_ASSUMED),
) -> Serving:
    """How ``variant``'s server runs under ``profile`` (the serve check's argv, port and mount; ``stop_grace``),
    with the cold start its probes must outlast: ``measured_s`` (the serve check's cold time to ready) where
    given, else the variant's ``ready_budget``, else 100 s (said so in ``cold_start_source``); ``warm_s``: the warm
    start measured on the cache, recorded only (a start can be cold: a new pod, a fresh claim, a new image);
    ``start``: the form the image's users must start it in (``start_in_pod``'s; default: this project's images) and
    whether it was read or assumed."""
    if measured_s is not None:
        cold, source = measured_s, f"measured by the serve check under {profile}"
    elif variant.ready_budget_s is not None:
        cold, source = variant.ready_budget_s, "the variant's ready_budget"
    else:
        cold, source = 100.0, "no measurement or ready_budget: 100 s assumed"
    form, start_source = start
    own = serve_line.MODEL_OPTIONS if model == serve_line.MODEL_PATH else ()
    return Serving(
        # The suite's tiny model carries its own options (dtype, length, seed); a user's model serves with none.
        args=tuple(form.args(model, [*serve_line.SERVE_OPTIONS, *own])),
        command=form.entrypoint or None,
        start=form.form if form.form != serve_start.NONE else f"--entrypoint {' '.join(form.entrypoint or ())}",
        start_source=start_source,
        port=serve_line.PORT,
        model_mount=serve_line.MODEL_MOUNT,
        model_claim=claim,
        grace_s=variant.stop_grace_s or serve_check.STOP_GRACE_S,
        cold_start_s=cold,
        cold_start_source=source,
        cache_claim=cache_claim,
        warm_start_s=warm_s,
    )


def startup_window_s(cold_start_s: float) -> float:
    """The seconds the startupProbe gives a start: ``STARTUP_MARGIN`` times the cold start, at least
    ``MIN_STARTUP_S``."""
    return max(MIN_STARTUP_S, cold_start_s * STARTUP_MARGIN)


def probes(serving: Serving) -> dict[str, dict[str, Any]]:
    """startupProbe, readinessProbe and livenessProbe on ``/health`` (periods in seconds).

    The startupProbe allows ``STARTUP_MARGIN`` times the cold start (at least ``MIN_STARTUP_S``) before the
    kubelet restarts the container; liveness starts only once it passed, so it cannot kill a server still
    loading or compiling.

    Raises:
        ConfigError: the cold start is past ``MAX_READY_S`` (its threshold would not fit an int32)."""
    check = {"httpGet": {"path": "/health", "port": PORT_NAME}, "periodSeconds": PROBE_PERIOD_S, "timeoutSeconds": 3}
    if not 0 < serving.cold_start_s <= MAX_READY_S:  # False for NaN too
        raise ConfigError(
            "kube",
            [
                f"a cold start of {serving.cold_start_s!r} s ({serving.cold_start_source}) is no time to ready: "
                f"above 0, at most {MAX_READY_S} s, so the probe's failureThreshold fits Kubernetes' 32-bit field"
            ],
        )
    threshold = math.ceil(startup_window_s(serving.cold_start_s) / PROBE_PERIOD_S)
    assert threshold <= INT32_MAX
    return {
        "startupProbe": {**check, "failureThreshold": threshold},
        "readinessProbe": {**check, "failureThreshold": 3},
        "livenessProbe": {**check, "periodSeconds": 10, "timeoutSeconds": 5, "failureThreshold": 3},
    }


def manifests(
    *,
    variant: str,
    accelerator: str,
    profile: str,
    values: Mapping[Condition, Any],
    image: str,
    serving: Serving,
    cluster: Cluster = Cluster.KUBERNETES,
) -> list[dict[str, Any]]:
    """The Deployment, Service and (no network) NetworkPolicy of ``image`` under one profile's condition
    ``values`` (normal forms, ``conditions.ROWS``), named ``vllm-<variant>-<profile>``, for ``cluster`` (OpenShift:
    no ``SCC_ASSIGNED`` field; the profile's user in ``USER_ANNOTATION``). An ``accelerator`` of
    ``GPU_RESOURCES`` (``Accelerator`` values) gets a limit of one GPU of its device plugin; its request defaults
    to the limit (Kubernetes: an extended resource's request, where given, must equal its limit)."""
    pod = _pod(accelerator, values, serving, cluster)
    name = f"vllm-{variant}-{profile}"
    labels = {"app.kubernetes.io/name": "vllm", "app.kubernetes.io/instance": name, "io.vllm-matrix/variant": variant}
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "selector": {"app.kubernetes.io/instance": name},
            "ports": [{"name": PORT_NAME, "port": serving.port, "targetPort": PORT_NAME, "protocol": "TCP"}],
        },
    }
    docs = [_deployment(name, labels, image, serving, pod), service]
    if pod.no_egress:
        docs.append(
            {
                "apiVersion": "networking.k8s.io/v1",
                "kind": "NetworkPolicy",
                "metadata": {"name": f"{name}-no-egress", "labels": labels},
                "spec": {
                    "podSelector": {"matchLabels": {"app.kubernetes.io/instance": name}},
                    "policyTypes": ["Egress"],
                    "egress": [],
                },
            }
        )
    return docs


def _pod(accelerator: str, values: Mapping[Condition, Any], serving: Serving, cluster: Cluster) -> PodParts:
    """The pod's parts: each condition of ``values`` applied in the order of ``conditions.ROWS``, the GPU of
    ``accelerator``, the model claim (read-only) and the compile cache (``_cache``), and on OpenShift the IDs left
    to its SCC."""
    pod = PodParts()
    for row in ROWS:
        if row.condition in values:
            row.pod(pod, values[row.condition])
    if accelerator in GPU_RESOURCES:
        pod.resources.setdefault("limits", {})[GPU_RESOURCES[accelerator]] = 1
    pod.volumes.append({"name": MODEL_VOLUME, "persistentVolumeClaim": {"claimName": serving.model_claim}})
    pod.mounts.append({"name": MODEL_VOLUME, "mountPath": serving.model_mount, "readOnly": True})
    _cache(serving, values, pod)
    _engine_ready_timeout(serving, values, pod)
    pod.annotations[NOFILE_ANNOTATION] = NOFILE_NOTE
    if cluster is Cluster.OPENSHIFT:
        _leave_ids_to_the_scc(values, pod)
    return pod


def _deployment(name: str, labels: Mapping[str, str], image: str, serving: Serving, pod: PodParts) -> dict[str, Any]:
    """The Deployment of one replica: ``image``'s server container with ``pod``'s parts, the probes, and the cold
    (and warm) start the probes follow as annotations."""
    container: dict[str, Any] = {
        "name": "vllm",
        "image": image,
        **({"command": list(serving.command)} if serving.command else {}),
        "args": list(serving.args),
        "ports": [{"name": PORT_NAME, "containerPort": serving.port, "protocol": "TCP"}],
        **probes(serving),
        "volumeMounts": pod.mounts,
        **({"env": pod.env} if pod.env else {}),
        **({"resources": pod.resources} if pod.resources else {}),
        **({"securityContext": pod.security} if pod.security else {}),
    }
    spec: dict[str, Any] = {
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": serving.grace_s,
        **({"hostNetwork": True} if pod.host_network else {}),
        **({"securityContext": pod.pod_security} if pod.pod_security else {}),
        "containers": [container],
        "volumes": pod.volumes,
    }
    annotations = {
        "io.vllm-matrix/cold-start": f"{serving.cold_start_s:.0f}s ({serving.cold_start_source})",
        START_ANNOTATION: f"{serving.start} ({serving.start_source})",
    }
    if serving.warm_start_s is not None:
        annotations["io.vllm-matrix/warm-start"] = f"{serving.warm_start_s:.0f}s (measured by the serve check)"
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app.kubernetes.io/instance": name}},
            "template": {
                "metadata": {"labels": labels, "annotations": {**annotations, **pod.annotations}},
                "spec": spec,
            },
        },
    }


def cache_root(values: Mapping[Condition, Any]) -> str:
    """Where the compile cache volume is mounted: the image's cache root (``serve_line.IMAGE_CACHE_ROOT``, the
    variant images' ``XDG_CACHE_HOME``) unless the profile's env sets ``XDG_CACHE_HOME``."""
    return serve_line.cache_root({"XDG_CACHE_HOME": serve_line.IMAGE_CACHE_ROOT, **values.get(Condition.ENV, {})})


def _cache(serving: Serving, values: Mapping[Condition, Any], pod: PodParts) -> None:
    """The compile cache volume at ``cache_root``: the claim, group-owned by the pod's group (``fsGroup``: the
    profile's GID, else the image's 0, which Pod Security "restricted" allows; ``fsGroupChangePolicy:
    OnRootMismatch``: changed only where the claim's root differs, not file by file at every start; on OpenShift
    ``_leave_ids_to_the_scc`` drops the ``fsGroup`` and the policy applies to the SCC's), else an emptyDir on the
    node's disk (mode 777)."""
    if serving.cache_claim is not None:
        pod.volumes.append({"name": CACHE_VOLUME, "persistentVolumeClaim": {"claimName": serving.cache_claim}})
        pod.pod_security.setdefault("fsGroup", pod.pod_security.get("runAsGroup", 0))
        pod.pod_security.setdefault("fsGroupChangePolicy", "OnRootMismatch")
    else:
        pod.volumes.append({"name": CACHE_VOLUME, "emptyDir": {}})
    pod.mounts.append({"name": CACHE_VOLUME, "mountPath": cache_root(values)})


def _engine_ready_timeout(serving: Serving, values: Mapping[Condition, Any], pod: PodParts) -> None:
    """``VLLM_ENGINE_READY_TIMEOUT_S`` = the startupProbe's window where that is longer than vLLM's default (600 s),
    so vLLM does not end a slow cold start the probe still allows ("Engine core initialization failed",
    vllm#48031; failure class 41); a value the profile's env gives is kept (the ``environment`` check judges it).
    Named in ``ENV_ADDED_ANNOTATION``: not one of the profile's conditions."""
    name = envrules.ENGINE_READY_TIMEOUT
    window = math.ceil(startup_window_s(serving.cold_start_s))
    if name in values.get(Condition.ENV, {}) or window <= envrules.ENGINE_READY_DEFAULT_S:
        return
    pod.env.append({"name": name, "value": str(window)})
    pod.annotations[ENV_ADDED_ANNOTATION] = name


def _leave_ids_to_the_scc(values: Mapping[Condition, Any], pod: PodParts) -> None:
    """OpenShift: drop ``SCC_ASSIGNED`` from the pod's securityContext (restricted-v2 sets the UID and fsGroup from
    the namespace's ranges and refuses others); ``runAsNonRoot`` stays (the SCC's UIDs are not 0); the profile's
    ``UID[:GID]`` goes to ``USER_ANNOTATION``, so ``conditions_of`` still reads the profile back."""
    for key in SCC_ASSIGNED:
        pod.pod_security.pop(key, None)
    if Condition.USER in values:
        pod.annotations[USER_ANNOTATION] = str(values[Condition.USER])
