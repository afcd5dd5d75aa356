"""What the check and server containers are given to use the host's GPUs: NVIDIA's device request, ROCm's device
nodes and the groups that own them (no AMD GPU here: a /dev tree of plain files stands in; the Docker SDK's
arguments are what is checked, as ``docker run --device … --group-add …`` takes them)."""

from __future__ import annotations

from pathlib import Path

import pytest

from matrixtool.incontainer.vllm_smoke.declarations import Accelerator
from matrixtool.model.matrixfile import load_matrix
from matrixtool.smoke import gpuaccess, runners
from matrixtool.smoke.serve import line as serve_line

# A ROCm host's nodes (Ubuntu: /dev/kfd group render (110), /dev/dri/card0 group video (44), renderD128 render).
GIDS = {"kfd": 110, "card0": 44, "renderD128": 110, "by-path": 0}


def _rocm_dev(tmp_path: Path) -> Path:
    (tmp_path / "dri" / "by-path").mkdir(parents=True)
    for name in ("kfd", "dri/card0", "dri/renderD128"):
        (tmp_path / name).touch()
    return tmp_path


def test_a_rocm_host_gives_kfd_dri_and_their_groups_by_gid(tmp_path: Path) -> None:
    dev = _rocm_dev(tmp_path)
    access = gpuaccess.rocm(dev, gid_of=lambda p: GIDS[p.name])
    assert access is not None
    assert list(access.devices) == [f"{dev}/kfd:{dev}/kfd:rwm", f"{dev}/dri:{dev}/dri:rwm"]
    assert list(access.group_add) == ["44", "110"] and not access.device_requests
    assert gpuaccess.rocm(tmp_path / "none") is None  # no /dev/kfd: no ROCm driver loaded


def test_each_accelerator_gets_what_its_runtime_passes(tmp_path: Path) -> None:
    dev = _rocm_dev(tmp_path)
    assert gpuaccess.host_gpu(Accelerator.CUDA, dev) is None  # no /dev/nvidia0
    (dev / "nvidia0").touch()
    cuda = gpuaccess.host_gpu(Accelerator.CUDA, dev)
    assert cuda is not None and cuda.device_requests[0]["Count"] == -1 and not cuda.devices
    rocm = gpuaccess.host_gpu(Accelerator.ROCM, dev)
    assert rocm is not None
    assert rocm is not None and not rocm.device_requests and f"{dev}/kfd:{dev}/kfd:rwm" in rocm.devices
    assert gpuaccess.host_gpu(Accelerator.CPU, dev) is None


@pytest.mark.parametrize("profile", ["default", "restricted"])
def test_the_check_and_server_containers_of_a_rocm_variant_get_the_devices(tmp_path: Path, profile: str) -> None:
    access = gpuaccess.rocm(_rocm_dev(tmp_path), gid_of=lambda p: GIDS[p.name])
    assert access is not None
    (chosen,) = [p for v in load_matrix().variants if v.name == "rocm" for p in v.profiles if p.name == profile]
    check = runners.container_spec("img", gpu=access, profile=chosen).run_kwargs(session="s", owner="o")
    server = serve_line.server_spec("img", chosen, "vol", gpu=access).run_kwargs(session="s", owner="o")
    for kwargs in (check, server):
        assert kwargs["devices"] == list(access.devices) and kwargs["group_add"] == ["44", "110"]
        assert "device_requests" not in kwargs  # no NVIDIA runtime hook on a ROCm host
    nvidia = runners.container_spec("img", gpu=gpuaccess.nvidia()).run_kwargs(session="s", owner="o")
    assert nvidia["device_requests"][0]["Capabilities"] == [["gpu"]]
    assert "devices" not in nvidia and "group_add" not in nvidia
    plain = runners.container_spec("img").run_kwargs(session="s", owner="o")
    assert not {"devices", "group_add", "device_requests"} & set(plain)
