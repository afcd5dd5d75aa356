"""Kubernetes manifests that run an image exactly as the checks ran it under a deployment profile.

Per variant and profile: a Deployment (the image's own ENTRYPOINT with the serve arguments of the ``serve``
check, each run condition of the profile as its Pod/Container field, probes on ``/health``, for a GPU variant one
GPU of its device plugin, ``GPU_RESOURCES``), a Service, and
for a profile without network a NetworkPolicy that allows no egress. ``APPLY`` maps every condition of
``conditions.ROWS`` to its manifest field (the ``kubernetes`` column of that table says the same in words), and
``conditions_of`` reads the fields back: a unit test proves the round trip for every profile of matrix.yaml.

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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from matrixtool.core import jsontext
from matrixtool.core.errors import ConfigError
from matrixtool.core.untrusted import check_shape
from matrixtool.model.conditions import ROWS, Condition, quantity
from matrixtool.model.model import Variant
from matrixtool.model.yamlfile import read_config_text
from matrixtool.report import READ_BACK_SCHEMA
from matrixtool.smoke.serve import check as serve_check
from matrixtool.smoke.serve import line as serve_line

PORT_NAME = "http"
PROBE_PERIOD_S = 5
STARTUP_MARGIN = 3.0
MIN_STARTUP_S = 120
# The longest time to ready a report may give (a day): past it a number is no measurement of a start.
MAX_READY_S = 86400
# Kubernetes' int32 fields (a probe's failureThreshold, periodSeconds) hold at most this.
INT32_MAX = 2**31 - 1
MAX_REPORT_BYTES = 64 * 1024 * 1024
MODEL_VOLUME = "models"
CACHE_VOLUME = "compile-cache"
# A Kubernetes object name of the DNS-1123 label kind (a PersistentVolumeClaim's, as `--model-claim` names one).
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
# A PersistentVolumeClaim's name: a DNS-1123 subdomain (labels joined by dots, at most 253 characters; Kubernetes'
# apimachinery IsDNS1123Subdomain, which the API server applies to PVC names).
DNS_SUBDOMAIN = re.compile(r"(?=.{1,253}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
SHM_PATH = "/dev/shm"
# The pod securityContext fields an OpenShift manifest leaves out: runAsUser and fsGroup, which restricted-v2 assigns
# from the namespace's ranges (a value the namespace does not hold is refused), and runAsGroup (the SCC has no
# strategy for it; the arbitrary UID runs in group 0 without it).
SCC_ASSIGNED = ("runAsUser", "runAsGroup", "fsGroup")
# Where an OpenShift manifest keeps the profile's UID[:GID] (the SCC picks the pod's own).
USER_ANNOTATION = "io.vllm-matrix/user"
# The extended resource whose device plugin (NVIDIA's k8s-device-plugin, AMD's k8s-device-plugin) gives a GPU
# variant's container its GPU; a container that does not ask for it gets none. One GPU: the checks ran on one.
GPU_RESOURCES = {"cuda": "nvidia.com/gpu", "rocm": "amd.com/gpu"}


class Cluster(enum.Enum):
    """Where the manifests are applied: plain Kubernetes (the profile's UID/GID; Pod Security admission) or
    OpenShift (its restricted-v2 SCC assigns UID and fsGroup)."""

    KUBERNETES = "kubernetes"
    OPENSHIFT = "openshift"


@dataclass(frozen=True, kw_only=True)
class Serving:
    """How the server runs: ``args`` after the image's ENTRYPOINT (``serve MODEL …``), the container ``port``,
    where the model is mounted (``model_mount``, from the PersistentVolumeClaim ``model_claim``), the stop
    grace (``grace_s``: ``terminationGracePeriodSeconds``), and the cold start the startupProbe must outlast
    (``cold_start_s``, seconds) with where that figure came from (``cold_start_source``); the compile cache's
    PersistentVolumeClaim (``cache_claim``; None: an emptyDir) and the warm start measured on it (``warm_start_s``,
    None: not measured)."""

    args: tuple[str, ...]
    port: int
    model_mount: str
    model_claim: str = "vllm-models"
    grace_s: int = 30
    cold_start_s: float = 100.0
    cold_start_source: str = "assumed"
    cache_claim: str | None = None
    warm_start_s: float | None = None


@dataclass
class Pod:
    """The parts of a Deployment's pod that conditions write (mutable while one pod is being assembled)."""

    pod_security: dict[str, Any] = field(default_factory=dict)
    security: dict[str, Any] = field(default_factory=dict)
    resources: dict[str, Any] = field(default_factory=dict)
    env: list[dict[str, str]] = field(default_factory=list)
    volumes: list[dict[str, Any]] = field(default_factory=list)
    mounts: list[dict[str, Any]] = field(default_factory=list)
    annotations: dict[str, str] = field(default_factory=dict)
    host_network: bool = False
    no_egress: bool = False


def _volume_name(path: str) -> str:
    return "tmpfs-" + (re.sub(r"[^a-z0-9]+", "-", path.lower()).strip("-") or "root")


def _size_of(options: str) -> str | None:
    """The ``size=`` of tmpfs mount options as a Kubernetes quantity, or None."""
    found = re.search(r"(?:^|,)size=([0-9]+[bkmgBKMG]?)(?:,|$)", options)
    return quantity(found.group(1)) if found else None


def _memory_dir(pod: Pod, name: str, path: str, size: str | None) -> None:
    empty: dict[str, Any] = {"medium": "Memory", **({"sizeLimit": size} if size else {})}
    pod.volumes.append({"name": name, "emptyDir": empty})
    pod.mounts.append({"name": name, "mountPath": path})


def _user(value: str, pod: Pod) -> None:
    uid, _, gid = value.partition(":")
    pod.pod_security.update(runAsUser=int(uid), runAsNonRoot=int(uid) != 0)
    if gid:
        pod.pod_security["runAsGroup"] = int(gid)


def _tmpfs(value: Mapping[str, str], pod: Pod) -> None:
    for path, options in value.items():
        _memory_dir(pod, _volume_name(path), path, _size_of(options))


def _network(value: str, pod: Pod) -> None:
    pod.no_egress = value == "none"
    pod.host_network = value == "host"


def _pids(value: int, pod: Pod) -> None:
    # No Pod field: the kubelet's podPidsLimit bounds every pod of a node; the manifest records what was tested.
    pod.annotations["io.vllm-matrix/pids-limit"] = str(value)


APPLY: dict[Condition, Callable[[Any, Pod], None]] = {
    Condition.USER: _user,
    Condition.READ_ONLY: lambda v, pod: pod.security.update(readOnlyRootFilesystem=bool(v)),
    Condition.TMPFS: _tmpfs,
    Condition.MEMORY: lambda v, pod: pod.resources.setdefault("limits", {}).update(memory=quantity(v)),
    Condition.CPUS: lambda v, pod: pod.resources.setdefault("limits", {}).update(cpu=f"{round(v * 1000)}m"),
    Condition.NETWORK: _network,
    Condition.SHM_SIZE: lambda v, pod: _memory_dir(pod, "dshm", SHM_PATH, quantity(v)),
    Condition.CAP_DROP: lambda v, pod: pod.security.setdefault("capabilities", {}).update(drop=list(v)),
    Condition.NO_NEW_PRIVILEGES: lambda v, pod: pod.security.update(allowPrivilegeEscalation=not v),
    Condition.SECCOMP: lambda v, pod: pod.pod_security.update(seccompProfile={"type": v}),
    Condition.PIDS_LIMIT: _pids,
    Condition.ENV: lambda v, pod: pod.env.extend({"name": k, "value": str(x)} for k, x in v.items()),
}


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


def serving_for(
    variant: Variant,
    profile: str,
    measured_s: float | None,
    *,
    model: str,
    claim: str,
    cache_claim: str | None = None,
    warm_s: float | None = None,
) -> Serving:
    """How ``variant``'s server runs under ``profile`` (the serve check's argv, port and mount; ``stop_grace``),
    with the cold start its probes must outlast: ``measured_s`` (the serve check's cold time to ready) where
    given, else the variant's ``ready_budget``, else 100 s (said so in ``cold_start_source``); ``warm_s``: the warm
    start measured on the cache, recorded only (a start can be cold: a new pod, a fresh claim, a new image)."""
    if measured_s is not None:
        cold, source = measured_s, f"measured by the serve check under {profile}"
    elif variant.ready_budget_s is not None:
        cold, source = variant.ready_budget_s, "the variant's ready_budget"
    else:
        cold, source = 100.0, "no measurement or ready_budget: 100 s assumed"
    return Serving(
        # The suite's tiny model carries its own options (dtype, length, seed); a user's model serves with none.
        args=tuple(serve_line.serve_argv(model, serve_line.MODEL_OPTIONS if model == serve_line.MODEL_PATH else ())),
        port=serve_line.PORT,
        model_mount=serve_line.MODEL_MOUNT,
        model_claim=claim,
        grace_s=variant.stop_grace_s or serve_check.STOP_GRACE_S,
        cold_start_s=cold,
        cold_start_source=source,
        cache_claim=cache_claim,
        warm_start_s=warm_s,
    )


def _seconds(check: Mapping[str, Any], key: str, value: object) -> float:
    """``value`` (the ``key`` of ``check``'s facts) as a time to ready in seconds.

    Raises ValueError, naming the check, the key and the value: it is not a finite number of seconds in (0,
    ``MAX_READY_S``] (a string, JSON true, NaN, infinity, 1e308, a 400-digit integer)."""
    where = f"serve of {check['variant']}/{check['profile']}: {key}"
    if isinstance(value, bool) or not isinstance(value, (int, float)):  # JSON true is no time
        raise ValueError(f"{where} {value!r} is not a number of seconds")
    seconds = float(value) if abs(value) <= MAX_READY_S else math.inf  # a 400-digit int overflows float()
    if not 0 < seconds <= MAX_READY_S:  # False for NaN too
        raise ValueError(f"{where} {value!r} is not a time to ready (seconds, above 0, at most {MAX_READY_S})")
    return seconds


def warm_times(report: Mapping[str, Any]) -> dict[tuple[str, str], float]:
    """Seconds to ready of the warm start per (variant, profile): facts ``warm.ready_s`` of the ``serve`` results of a
    report ``ready_times`` accepted. No ``warm``, a skipped one (no ``ready_s``) or one that never got ready
    (``ready_s`` null) gives no figure.

    Raises ValueError for a ``warm`` that is no object, or a ``warm.ready_s`` that is no time to ready (as
    ``ready_times``)."""
    times = {}
    for c in report["checks"]:
        facts = c.get("facts") or {}
        if c["check"] != "serve" or not isinstance(facts, Mapping) or facts.get("warm") is None:
            continue
        warm = facts["warm"]
        if not isinstance(warm, Mapping):
            raise ValueError(
                f"serve of {c['variant']}/{c['profile']}: warm {warm!r} is not an object (the warm start's facts)"
            )
        if warm.get("ready_s") is not None:
            times[(c["variant"], c["profile"])] = _seconds(c, "warm.ready_s", warm["ready_s"])
    return times


def ready_times(report: Mapping[str, Any]) -> dict[tuple[str, str], float]:
    """Seconds to ready per (variant, profile): the ``serve`` results (facts ``ready_s``, the cold start) of a
    ``--json`` report.

    Raises KeyError/TypeError/ValueError for a document that is no such report, ValueError for a ``ready_s``
    that is no time to ready (not a finite number of seconds in (0, ``MAX_READY_S``]: NaN, infinity, 1e308)."""
    times = {}
    for c in report["checks"]:
        facts = c.get("facts") or {}
        if c["check"] != "serve" or not isinstance(facts, Mapping) or facts.get("ready_s") is None:
            continue
        times[(c["variant"], c["profile"])] = _seconds(c, "ready_s", facts["ready_s"])
    return times


def report_ready_times(report: Path | None) -> dict[tuple[str, str], float]:
    """``ready_times`` of the JSON report at ``report`` (None: no report, no measurements); raises as
    ``report_times``."""
    return report_times(report)[0]


def report_times(report: Path | None) -> tuple[dict[tuple[str, str], float], dict[tuple[str, str], float]]:
    """``ready_times`` (cold) and ``warm_times`` of the JSON report at ``report`` (None: no report, none).

    Raises:
        ConfigError: the report is unreadable, not a regular file (a FIFO is never waited on), over
            ``MAX_REPORT_BYTES``, not a ``run``/``test`` ``--json-file`` document (``READ_BACK_SCHEMA``), or a serve
            result's ``ready_s`` or ``warm`` is no time to ready (exit 3, naming the key and value).
    """
    if report is None:
        return {}, {}
    what = "a 'tools/matrix run/test --json-file' report"
    text = read_config_text(report, limit=MAX_REPORT_BYTES, what=what)
    try:
        doc = jsontext.loads(text)
        check_shape(doc, READ_BACK_SCHEMA, source=str(report), what=what)
        return ready_times(doc), warm_times(doc)
    except KeyError as exc:
        raise ConfigError(
            str(report), [f"not a 'tools/matrix run/test --json-file' report (a check lacks the key {exc})"]
        ) from exc
    except (OSError, ValueError, TypeError, AttributeError) as exc:  # AttributeError: "checks" holds no objects
        raise ConfigError(str(report), [f"not a 'tools/matrix run/test --json-file' report ({exc})"]) from exc


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
    pod = Pod()
    for row in ROWS:
        if row.condition in values:
            APPLY[row.condition](values[row.condition], pod)
    if accelerator in GPU_RESOURCES:
        pod.resources.setdefault("limits", {})[GPU_RESOURCES[accelerator]] = 1
    name = f"vllm-{variant}-{profile}"
    labels = {"app.kubernetes.io/name": "vllm", "app.kubernetes.io/instance": name, "io.vllm-matrix/variant": variant}
    pod.volumes.append({"name": MODEL_VOLUME, "persistentVolumeClaim": {"claimName": serving.model_claim}})
    pod.mounts.append({"name": MODEL_VOLUME, "mountPath": serving.model_mount, "readOnly": True})
    _cache(serving, values, pod)
    if cluster is Cluster.OPENSHIFT:
        _leave_ids_to_the_scc(values, pod)
    container: dict[str, Any] = {
        "name": "vllm",
        "image": image,
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
    annotations = {"io.vllm-matrix/cold-start": f"{serving.cold_start_s:.0f}s ({serving.cold_start_source})"}
    if serving.warm_start_s is not None:
        annotations["io.vllm-matrix/warm-start"] = f"{serving.warm_start_s:.0f}s (measured by the serve check)"
    deployment = {
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
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "selector": {"app.kubernetes.io/instance": name},
            "ports": [{"name": PORT_NAME, "port": serving.port, "targetPort": PORT_NAME, "protocol": "TCP"}],
        },
    }
    docs = [deployment, service]
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


def cache_root(values: Mapping[Condition, Any]) -> str:
    """Where the compile cache volume is mounted: the image's cache root (``serve_line.IMAGE_CACHE_ROOT``, the
    variant images' ``XDG_CACHE_HOME``) unless the profile's env sets ``XDG_CACHE_HOME``."""
    return serve_line.cache_root({"XDG_CACHE_HOME": serve_line.IMAGE_CACHE_ROOT, **values.get(Condition.ENV, {})})


def _cache(serving: Serving, values: Mapping[Condition, Any], pod: Pod) -> None:
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


def _leave_ids_to_the_scc(values: Mapping[Condition, Any], pod: Pod) -> None:
    """OpenShift: drop ``SCC_ASSIGNED`` from the pod's securityContext (restricted-v2 sets the UID and fsGroup from
    the namespace's ranges and refuses others); ``runAsNonRoot`` stays (the SCC's UIDs are not 0); the profile's
    ``UID[:GID]`` goes to ``USER_ANNOTATION``, so ``conditions_of`` still reads the profile back."""
    for key in SCC_ASSIGNED:
        pod.pod_security.pop(key, None)
    if Condition.USER in values:
        pod.annotations[USER_ANNOTATION] = str(values[Condition.USER])


def conditions_of(docs: Sequence[Mapping[str, Any]]) -> dict[Condition, Any]:
    """The run conditions the documents of ``manifests`` set, read back from their fields (normal forms; a tmpfs
    keeps only its ``size=``, the one option an emptyDir has; no egress is the NetworkPolicy; on OpenShift the user
    is ``USER_ANNOTATION``). The inverse of ``APPLY``."""
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    pod_spec = deployment["spec"]["template"]["spec"]
    (container,) = pod_spec["containers"]
    pod_sec, sec = pod_spec.get("securityContext", {}), container.get("securityContext", {})
    annotations = deployment["spec"]["template"]["metadata"].get("annotations", {})
    volumes = {v["name"]: v for v in pod_spec.get("volumes", [])}
    out: dict[Condition, Any] = {}
    if "runAsUser" in pod_sec:
        gid = pod_sec.get("runAsGroup")
        out[Condition.USER] = f"{pod_sec['runAsUser']}" + (f":{gid}" if gid is not None else "")
    elif USER_ANNOTATION in annotations:
        out[Condition.USER] = annotations[USER_ANNOTATION]
    if sec.get("readOnlyRootFilesystem"):
        out[Condition.READ_ONLY] = True
    tmpfs = {}
    for mount in container.get("volumeMounts", []):
        empty = volumes[mount["name"]].get("emptyDir")
        if empty is None or mount["name"] == CACHE_VOLUME:
            continue
        size = empty.get("sizeLimit")
        if mount["mountPath"] == SHM_PATH:
            out[Condition.SHM_SIZE] = _docker_size(size)
        else:
            tmpfs[mount["mountPath"]] = f"size={_docker_size(size)}" if size else ""
    if tmpfs:
        out[Condition.TMPFS] = tmpfs
    limits = container.get("resources", {}).get("limits", {})
    if "memory" in limits:
        out[Condition.MEMORY] = _docker_size(limits["memory"])
    if "cpu" in limits:
        out[Condition.CPUS] = int(limits["cpu"].removesuffix("m")) / 1000
    if pod_spec.get("hostNetwork"):
        out[Condition.NETWORK] = "host"
    if any(d["kind"] == "NetworkPolicy" and d["spec"].get("egress") == [] for d in docs):
        out[Condition.NETWORK] = "none"
    if "drop" in sec.get("capabilities", {}):
        out[Condition.CAP_DROP] = tuple(sec["capabilities"]["drop"])
    if sec.get("allowPrivilegeEscalation") is False:
        out[Condition.NO_NEW_PRIVILEGES] = True
    if "seccompProfile" in pod_sec:
        out[Condition.SECCOMP] = pod_sec["seccompProfile"]["type"]
    if "io.vllm-matrix/pids-limit" in annotations:
        out[Condition.PIDS_LIMIT] = int(annotations["io.vllm-matrix/pids-limit"])
    if container.get("env"):
        out[Condition.ENV] = {e["name"]: e["value"] for e in container["env"]}
    return out


def _docker_size(k8s: str) -> str:
    """A Kubernetes quantity written by ``quantity`` back in Docker's units (``4Gi`` -> ``4g``)."""
    for suffix, unit in (("Ki", "k"), ("Mi", "m"), ("Gi", "g")):
        if k8s.endswith(suffix):
            return k8s.removesuffix(suffix) + unit
    return k8s


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
