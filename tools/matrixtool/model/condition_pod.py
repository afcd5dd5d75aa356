"""The parts of a Kubernetes pod that run conditions write (``PodParts``), and the writers and readers the rows of
``conditions.ROWS`` reference where a lambda would not do: each row's ``pod`` writes its value into the parts, its
``from_pod`` reads it back (None: the condition is not set), as ``condition_values`` holds the rows' value rules.

Pure data; ``deploy.kube`` assembles the parts into a Deployment and ``deploy.kube_pod`` reads a Deployment back
into them. Sizes: Docker's units are binary, so ``4g`` is the quantity ``4Gi``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from matrixtool.model.condition_values import SIZE

SHM_PATH = "/dev/shm"
SHM_VOLUME = "dshm"
TMPFS_VOLUME_PREFIX = "tmpfs-"
# Where an OpenShift manifest keeps the profile's UID[:GID] (the SCC picks the pod's own).
USER_ANNOTATION = "io.vllm-matrix/user"
# No Pod field: the kubelet's podPidsLimit bounds every pod of a node; the manifest records what was tested.
PIDS_ANNOTATION = "io.vllm-matrix/pids-limit"
NOFILE_LIMIT_ANNOTATION = "io.vllm-matrix/nofile-limit"
_K8S_UNITS = {"": "", "b": "", "k": "Ki", "m": "Mi", "g": "Gi"}


@dataclass
class PodParts:
    """The parts of a Deployment's pod that conditions write (mutable while one pod is being assembled):
    ``pod_security`` and ``security`` are the pod's and the container's ``securityContext``, ``no_egress`` a
    NetworkPolicy that allows no egress."""

    pod_security: dict[str, Any] = field(default_factory=dict)
    security: dict[str, Any] = field(default_factory=dict)
    resources: dict[str, Any] = field(default_factory=dict)
    env: list[dict[str, str]] = field(default_factory=list)
    volumes: list[dict[str, Any]] = field(default_factory=list)
    mounts: list[dict[str, Any]] = field(default_factory=list)
    annotations: dict[str, str] = field(default_factory=dict)
    host_network: bool = False
    no_egress: bool = False

    @property
    def limits(self) -> dict[str, Any]:
        """The container's ``resources.limits`` (made on first use)."""
        limits: dict[str, Any] = self.resources.setdefault("limits", {})
        return limits


def quantity(docker_size: str) -> str:
    """A Docker size (``4g``) as a Kubernetes quantity (``4Gi``). Raises ValueError for a value that is none."""
    match = SIZE.fullmatch(docker_size)
    if match is None:
        raise ValueError(f"{docker_size!r} is not a Docker size")
    return match.group(1) + _K8S_UNITS[match.group(2).lower()]


def docker_size(k8s: str) -> str:
    """A Kubernetes quantity written by ``quantity`` back in Docker's units (``4Gi`` -> ``4g``)."""
    for suffix, unit in (("Ki", "k"), ("Mi", "m"), ("Gi", "g")):
        if k8s.endswith(suffix):
            return k8s.removesuffix(suffix) + unit
    return k8s


def _memory_dir(parts: PodParts, name: str, path: str, size: str | None) -> None:
    empty: dict[str, Any] = {"medium": "Memory", **({"sizeLimit": size} if size else {})}
    parts.volumes.append({"name": name, "emptyDir": empty})
    parts.mounts.append({"name": name, "mountPath": path})


def _memory_dirs(parts: PodParts) -> dict[str, tuple[str, str | None]]:
    """Mount path -> (volume name, ``sizeLimit``) of every emptyDir mounted."""
    empty = {v["name"]: v["emptyDir"] for v in parts.volumes if "emptyDir" in v}
    return {m["mountPath"]: (m["name"], empty[m["name"]].get("sizeLimit")) for m in parts.mounts if m["name"] in empty}


def write_user(parts: PodParts, value: str) -> None:
    uid, _, gid = value.partition(":")
    parts.pod_security.update(runAsUser=int(uid), runAsNonRoot=int(uid) != 0)
    if gid:
        parts.pod_security["runAsGroup"] = int(gid)


def read_user(parts: PodParts) -> str | None:
    """``UID[:GID]`` from ``runAsUser``/``runAsGroup``, else (OpenShift) from ``USER_ANNOTATION``."""
    if "runAsUser" in parts.pod_security:
        gid = parts.pod_security.get("runAsGroup")
        return f"{parts.pod_security['runAsUser']}" + (f":{gid}" if gid is not None else "")
    return parts.annotations.get(USER_ANNOTATION)


def _volume_name(path: str) -> str:
    return TMPFS_VOLUME_PREFIX + (re.sub(r"[^a-z0-9]+", "-", path.lower()).strip("-") or "root")


def write_tmpfs(parts: PodParts, value: Mapping[str, str]) -> None:
    """Each mount an emptyDir in memory; of its options only ``size=`` has a field (``sizeLimit``)."""
    for path, options in value.items():
        found = re.search(r"(?:^|,)size=([0-9]+[bkmgBKMG]?)(?:,|$)", options)
        _memory_dir(parts, _volume_name(path), path, quantity(found.group(1)) if found else None)


def read_tmpfs(parts: PodParts) -> dict[str, str] | None:
    """Mount path -> ``size=SIZE`` (or ``""``) of the emptyDirs ``write_tmpfs`` names."""
    dirs = _memory_dirs(parts).items()
    tmpfs = {p: f"size={docker_size(s)}" if s else "" for p, (n, s) in dirs if n.startswith(TMPFS_VOLUME_PREFIX)}
    return tmpfs or None


def write_shm(parts: PodParts, value: str) -> None:
    _memory_dir(parts, SHM_VOLUME, SHM_PATH, quantity(value))


def read_shm(parts: PodParts) -> str | None:
    found = _memory_dirs(parts).get(SHM_PATH)
    return None if found is None or found[1] is None else docker_size(found[1])


def write_network(parts: PodParts, value: str) -> None:
    parts.no_egress = value == "none"
    parts.host_network = value == "host"


def read_network(parts: PodParts) -> str | None:
    return "none" if parts.no_egress else "host" if parts.host_network else None


def read_cpus(parts: PodParts) -> float | None:
    cpu = parts.resources.get("limits", {}).get("cpu")
    return None if cpu is None else int(cpu.removesuffix("m")) / 1000


def read_pids(parts: PodParts) -> int | None:
    return int(parts.annotations[PIDS_ANNOTATION]) if PIDS_ANNOTATION in parts.annotations else None


def read_nofile(parts: PodParts) -> int | None:
    return int(parts.annotations[NOFILE_LIMIT_ANNOTATION]) if NOFILE_LIMIT_ANNOTATION in parts.annotations else None
