"""How the check and server containers get the host's GPUs, as each vendor's runtime gives them.

NVIDIA: a Docker device request for every GPU (``docker run --gpus all``; the NVIDIA Container Toolkit mounts the
driver and the device nodes). AMD ROCm has no such runtime hook: a ROCm host or its Kubernetes device plugin
(ROCm/k8s-device-plugin) passes the device nodes themselves, ``/dev/kfd`` (the compute interface) and ``/dev/dri``
(the render nodes, ``renderD*``), and the process must be in the groups that own them (``video`` and ``render``
on most distributions): AMD's documented line is ``docker run --device=/dev/kfd --device=/dev/dri --group-add video
--group-add render``. The groups are added by the nodes' GIDs, not by name, as the image may have no such groups
or other numbers for them.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import docker.types

from matrixtool.incontainer.vllm_smoke.declarations import Accelerator


@dataclass(frozen=True)
class GpuAccess:
    """What a container is given to use the host's GPUs, in the Docker SDK's terms (``ContainerSpec``'s fields):
    ``device_requests`` (``--gpus``), ``devices`` (``--device HOST:CONTAINER:PERMS``), ``group_add`` (GIDs)."""

    device_requests: Sequence[docker.types.DeviceRequest] = ()
    devices: Sequence[str] = ()
    group_add: Sequence[str] = ()


def nvidia() -> GpuAccess:
    """Every NVIDIA GPU, as ``--gpus all`` asks for them."""
    return GpuAccess(device_requests=(docker.types.DeviceRequest(count=-1, capabilities=[["gpu"]]),))


def _gid(path: Path) -> int:
    return os.stat(path).st_gid


def rocm(dev: Path = Path("/dev"), gid_of: Callable[[Path], int] = _gid) -> GpuAccess | None:
    """The AMD GPUs of this host, as a ROCm host passes them (module docstring): ``dev/kfd`` and ``dev/dri`` (where
    present) read-write, and the GIDs owning ``kfd`` and the render and card nodes under ``dri`` (root's, 0, left
    out: a group no runtime adds; ``gid_of`` reads a node's). None where ``dev/kfd`` is missing (no ROCm driver
    loaded)."""
    kfd = dev / "kfd"
    if not kfd.exists():
        return None
    nodes = [kfd]
    dri = dev / "dri"
    owners = [kfd]
    if dri.is_dir():
        nodes.append(dri)
        owners += sorted(p for p in dri.iterdir() if p.name.startswith(("renderD", "card")))
    gids: set[int] = set()
    for node in owners:
        try:
            gids.add(gid_of(node))
        except OSError:
            continue
    return GpuAccess(
        devices=tuple(f"{n}:{n}:rwm" for n in nodes),
        group_add=tuple(str(g) for g in sorted(gids - {0})),
    )


def host_gpu(accelerator: Accelerator, dev: Path = Path("/dev")) -> GpuAccess | None:
    """What this host gives a container of an ``accelerator`` variant: NVIDIA's GPUs where ``dev/nvidia0`` exists
    (cuda), AMD's where ``dev/kfd`` exists (rocm, ``rocm``); None on a CPU variant or where the host has none."""
    if accelerator is Accelerator.CUDA:
        return nvidia() if (dev / "nvidia0").exists() else None
    if accelerator is Accelerator.ROCM:
        return rocm(dev)
    return None
