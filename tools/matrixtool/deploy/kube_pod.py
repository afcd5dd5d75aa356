"""Each run condition of a deployment profile as its Pod or Container field (``APPLY``, one entry per condition of
``conditions.ROWS``; the ``kubernetes`` column of that table says the same in words), and read back from the
fields (``conditions_of``): a unit test proves the round trip for every profile of matrix.yaml.

Pure: condition values in, the parts of a pod (``Pod``) out; ``kube.manifests`` assembles them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from matrixtool.model.conditions import Condition, quantity

MODEL_VOLUME = "models"
CACHE_VOLUME = "compile-cache"
SHM_PATH = "/dev/shm"
# Where an OpenShift manifest keeps the profile's UID[:GID] (the SCC picks the pod's own).
USER_ANNOTATION = "io.vllm-matrix/user"


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
