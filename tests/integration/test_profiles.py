"""Deployment profiles: the good CPU image under each run condition, with the verdict each must give (issue 9).

Each test runs ``tools/matrix test --image <cpu image> --as cpu`` with a profile or one condition flag and
``--only`` the checks that prove the condition (``run-conditions`` is cheap; ``inductor-compile`` only where
the condition is about inductor's compiled kernels). Every test also asserts that no container is left.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import docker
import pytest

from matrixtool.core.container import OWNER_LABEL
from matrixtool.core.errors import ExitCode
from tests.integration.conftest import OWNER, CpuRun, json_of, matrix_cli

pytestmark = [pytest.mark.engine, pytest.mark.slow]


def _test(out_dir: Path, image: str, *args: str) -> tuple[int, dict[str, Any], str]:
    proc = matrix_cli("test", "--image", image, "--as", "cpu", "--json", *args, out=out_dir, timeout=1800)
    return proc.returncode, json_of(proc), proc.stderr


def _by(doc: dict[str, Any], profile: str = "default") -> dict[str, dict[str, Any]]:
    return {c["check"]: c for c in doc["checks"] if c["profile"] == profile}


def _no_containers(client: docker.DockerClient) -> None:
    left = client.containers.list(all=True, filters={"label": f"{OWNER_LABEL}={OWNER}"})
    assert not left, f"leaked containers: {[c.name for c in left]}"


def test_restricted_profile_passes_with_default_in_one_run(cpu_run: CpuRun) -> None:
    """Arbitrary UID with GID 0, read-only root, tmpfs /tmp with exec, no network: the project's image passes. Read
    from the session's ``cpu_run`` (`run cpu`: both profiles, every check), no run of its own."""
    doc = cpu_run.doc
    assert {c["status"] for c in doc["checks"]} == {"passed"}, doc["checks"]
    restricted = _by(doc, "restricted")
    assert {"run-conditions", "inductor-compile"} <= set(restricted), list(restricted)
    # pip-check and torch-import: no condition of `restricted` can change them, so they are left out there (and
    # said so); inductor-compile's interpreter still imports torch first, and a failure there would fail it.
    assert "pip-check" not in restricted and "torch-import" not in restricted
    assert "left out, as no condition of this profile can change them" in cpu_run.proc.stderr
    facts = restricted["run-conditions"]["facts"]
    assert facts["uid"] == 1000770000 and facts["gid"] == 0 and facts["passwd_user"] is None
    assert facts["read_only_root"] is True and facts["network_interfaces"] == []
    assert facts["torch"]["inductor_cache_dir"] == "/tmp/.cache/torchinductor"
    # The Pod Security Standard "restricted" as the kernel shows it: no capabilities, no_new_privs, a seccomp
    # filter, OpenShift's pids limit; /dev/shm as the profile declares it (a pod's emptyDir), as `default`'s.
    assert facts["capabilities_bounding"] == "0000000000000000" and facts["no_new_privs"] is True
    assert facts["seccomp_mode"] == "filter" and facts["pids_max"] == 4096 and facts["shm_bytes"] == 2**30


def test_image_of_another_builder_runs_every_profile_hardened(
    client: docker.DockerClient, cpu_image: str, out_dir: Path
) -> None:
    """``test --image`` hardens every profile (profiles.UNTRUSTED): `default` too runs without capabilities, with
    no_new_privs and a pids limit. Two cheap checks, both profiles (side by side where the room holds them)."""
    rc, doc, err = _test(
        out_dir, cpu_image, "--profile", "default", "--profile", "restricted",
        "--only", "run-conditions", "--only", "pip-check",
    )  # fmt: skip
    assert rc == 0, err[-3000:]
    assert list(_by(doc)) == ["run-conditions", "pip-check"]
    assert list(_by(doc, "restricted")) == ["run-conditions"]
    assert "left out, as no condition of this profile can change them: pip-check" in err
    default = _by(doc)["run-conditions"]["facts"]
    assert default["shm_bytes"] == 2**30 and default["no_new_privs"] is True and default["pids_max"] == 4096
    assert default["capabilities_bounding"] == "0000000000000000"
    _no_containers(client)


def test_arbitrary_uid_passes_and_caches_under_home_are_named(
    client: docker.DockerClient, cpu_image: str, out_dir: Path
) -> None:
    rc, doc, err = _test(out_dir, cpu_image, "--user", "1000770000:0", "--only", "run-conditions")
    assert rc == 0, err[-3000:]
    assert _by(doc)["run-conditions"]["facts"]["passwd_user"] is None
    # The same UID in an image that keeps its caches under HOME (Docker gives such a UID HOME=/).
    rc, doc, _ = _test(
        out_dir, cpu_image, "--user", "1000770000:0", "--env", "HOME=/", "--env", "XDG_CACHE_HOME=",
        "--only", "run-conditions",
    )  # fmt: skip
    assert rc == ExitCode.SMOKE
    check = _by(doc)["run-conditions"]
    assert check["status"] == "failed"
    assert "caches not writable" in check["diagnosis"] and "/.cache (XDG_CACHE_HOME" in check["diagnosis"]
    assert check["hint"].startswith("set XDG_CACHE_HOME, HF_HOME, VLLM_CACHE_ROOT")
    _no_containers(client)


def test_read_only_root_without_tmpfs_is_named(client: docker.DockerClient, cpu_image: str, out_dir: Path) -> None:
    rc, doc, _ = _test(out_dir, cpu_image, "--read-only", "--only", "run-conditions", "--only", "torch-family")
    assert rc == ExitCode.SMOKE
    checks = _by(doc)
    assert checks["run-conditions"]["status"] == "failed"
    assert "read-only root: [Errno 2] No usable temporary directory found" in checks["run-conditions"]["diagnosis"]
    assert "mount a tmpfs on /tmp" in checks["run-conditions"]["hint"]
    # Any other check that meets the condition names it too (here: `import torch` in torch-import, pulled in as
    # torch-family's prerequisite); torch-family is skipped for it (one root cause, one failure).
    torch_import = checks["torch-import"]
    assert torch_import["status"] == "failed" and "No usable temporary directory found" in torch_import["diagnosis"]
    assert "[run condition: read-only root filesystem" in torch_import["diagnosis"]
    assert "mount a tmpfs on /tmp" in torch_import["hint"]
    assert (checks["torch-family"]["status"], checks["torch-family"]["diagnosis"]) == ("skipped", "torch-import failed")
    _no_containers(client)


def test_noexec_tmp_breaks_inductor_and_is_named(client: docker.DockerClient, cpu_image: str, out_dir: Path) -> None:
    """Docker's tmpfs defaults include noexec: inductor's .so fails to map (pytorch/pytorch#91005)."""
    rc, doc, _ = _test(
        out_dir, cpu_image, "--tmpfs", "/tmp:rw", "--only", "run-conditions", "--only", "inductor-compile"
    )
    assert rc == ExitCode.SMOKE
    checks = _by(doc)
    conditions = checks["run-conditions"]
    assert conditions["status"] == "failed" and "noexec mount" in conditions["diagnosis"]
    assert "TORCHINDUCTOR_CACHE_DIR" in conditions["hint"] and "--tmpfs /tmp:rw,exec" in conditions["hint"]
    inductor = checks["inductor-compile"]
    assert inductor["status"] == "failed" and "failed to map segment from shared object" in inductor["diagnosis"]
    assert "[run condition: inductor's compiled kernels sit on a noexec mount" in inductor["diagnosis"]
    assert "TORCHINDUCTOR_CACHE_DIR" in inductor["hint"]
    _no_containers(client)


def test_memory_limit_is_the_cgroup_limit(client: docker.DockerClient, cpu_image: str, out_dir: Path) -> None:
    """The image's VLLM_CPU_KVCACHE_SPACE=1 (GiB) fits 4 GiB, not 1.5 GiB: judged on the cgroup, not host RAM."""
    rc, doc, err = _test(out_dir, cpu_image, "--memory", "4g", "--only", "cpu-engine-settings")
    assert rc == 0, err[-3000:]
    facts = _by(doc)["cpu-engine-settings"]["facts"]
    assert facts["memory_limit_bytes"] == 4 * 2**30 and facts["memory_limit_source"].startswith("cgroup /sys/fs/cgroup")
    rc, doc, _ = _test(out_dir, cpu_image, "--memory", "1536m", "--only", "cpu-engine-settings")
    assert rc == ExitCode.SMOKE
    check = _by(doc)["cpu-engine-settings"]
    assert (
        check["status"] == "failed"
        and "exceeds half of the memory this container may use (1.5 GiB, from cgroup" in (check["diagnosis"])
    )
    _no_containers(client)


def test_cpu_quota_is_a_warning(client: docker.DockerClient, cpu_image: str, out_dir: Path) -> None:
    rc, doc, err = _test(out_dir, cpu_image, "--cpus", "1", "--only", "run-conditions")
    assert rc == 0, err[-3000:]
    check = _by(doc)["run-conditions"]
    assert check["status"] == "passed" and check["facts"]["cpu_quota"] == 1.0
    threads = check["facts"]["torch"]["threads"]
    if threads > 1:  # torch sizes its pool from the host's cores: more than the quota on any multi-core host
        assert f"warning: torch uses {threads} threads on a quota of 1 CPUs" in check["diagnosis"]
        assert "OMP_NUM_THREADS=1" in check["diagnosis"]
    _no_containers(client)


def test_no_network(client: docker.DockerClient, cpu_image: str, out_dir: Path) -> None:
    rc, doc, err = _test(out_dir, cpu_image, "--network", "none", "--only", "run-conditions")
    assert rc == 0, err[-3000:]  # the image sets HF_HUB_OFFLINE=1
    assert _by(doc)["run-conditions"]["facts"]["network_interfaces"] == []
    rc, doc, _ = _test(out_dir, cpu_image, "--network", "none", "--env", "HF_HUB_OFFLINE=0", "--only", "run-conditions")
    assert rc == ExitCode.SMOKE
    check = _by(doc)["run-conditions"]
    assert check["status"] == "failed" and check["diagnosis"].startswith("no network: ")
    assert "HF_HUB_OFFLINE=1" in check["hint"]
    _no_containers(client)


def test_wrong_platform_is_rejected_before_any_check(
    client: docker.DockerClient, cpu_image: str, out_dir: Path
) -> None:
    proc = matrix_cli("test", "--image", cpu_image, "--as", "arm64", out=out_dir, timeout=300)
    assert proc.returncode == ExitCode.WRONG_PLATFORM, proc.stderr[-3000:]
    assert f"image {cpu_image} is linux/amd64, but variant arm64 is built for linux/arm64" in proc.stderr
    assert "profile default" not in proc.stderr and ": passed" not in proc.stderr  # nothing ran
    _no_containers(client)
