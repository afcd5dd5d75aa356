"""The environment check's pure rules (failure classes 38-41): names against a registry, values vLLM reads, device
lists, packages a setting needs, proxies without a loopback bypass, limits and start-up timeouts; and the program
that reads vllm/envs.py without importing vLLM, run on a small envs.py of the same shape."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from matrixtool.incontainer.vllm_smoke import environment as env_check
from matrixtool.incontainer.vllm_smoke import envrules
from matrixtool.incontainer.vllm_smoke.envrules import ERROR, WARNING

REGISTRY = ["VLLM_ENGINE_READY_TIMEOUT_S", "VLLM_CPU_KVCACHE_SPACE", "VLLM_USE_MODELSCOPE", "VLLM_NO_USAGE_STATS"]
INF = resource.RLIM_INFINITY


def test_an_unknown_vllm_name_is_an_error_with_the_nearest_current_name() -> None:
    (found,) = envrules.unknown_names({"VLLM_CPU_KVCACHE_SPACES": "1", "HOME": "/h"}, REGISTRY, {})
    assert found[:2] == (ERROR, "VLLM_CPU_KVCACHE_SPACES")
    assert "the nearest current name is VLLM_CPU_KVCACHE_SPACE" in found[2] and "set VLLM_CPU_KVCACHE_SPACE" in found[3]


def test_a_removed_name_moved_to_an_option_names_the_option() -> None:
    (found,) = envrules.unknown_names({"VLLM_ATTENTION_BACKEND": "FLASH_ATTN"}, REGISTRY, {})
    assert "vLLM takes it as --attention-backend" in found[2] and "use --attention-backend" in found[3]


def test_known_names_and_names_read_outside_envs_py_pass() -> None:
    env = {"VLLM_NO_USAGE_STATS": "1", "VLLM_OWN_READER": "x", "NOT_VLLM": "y"}
    assert envrules.unknown_names(env, REGISTRY, {"VLLM_OWN_READER": "entrypoints/x.py"}) == []


@pytest.mark.parametrize(
    ("value", "severity"),
    [("1", None), (" TRUE ", None), ("0", None), ("false", None), ("yes", ERROR), ("on", ERROR), ("maybe", WARNING)],
)
def test_a_flag_value_the_getter_reads_as_off(value: str, severity: str | None) -> None:
    flag = {"accepted": ["1", "true"], "lower": True, "strip": True}
    found = envrules.flag_value("VLLM_USE_MODELSCOPE", value, flag)
    assert (found[0] if found else None) == severity
    if found:
        assert "accepts only '1', 'true'" in found[2] and found[3] == "write VLLM_USE_MODELSCOPE=1"


def test_an_exact_flag_is_compared_as_written() -> None:
    flag = {"accepted": ["1"], "lower": False, "strip": False}
    assert envrules.flag_value("VLLM_NO_USAGE_STATS", "true", flag) is not None
    assert envrules.flag_value("VLLM_NO_USAGE_STATS", "1", flag) is None


def test_a_value_the_getter_raises_on_is_an_error_and_not_judged_twice() -> None:
    env = {"VLLM_ENGINE_READY_TIMEOUT_S": "10m", "VLLM_USE_MODELSCOPE": "yes"}
    rejected = {"VLLM_ENGINE_READY_TIMEOUT_S": "ValueError: invalid literal for int() with base 10: '10m'"}
    flags = {"VLLM_USE_MODELSCOPE": {"accepted": ["1", "true"], "lower": True, "strip": True}}
    found = envrules.rejected_values(env, rejected, flags)
    assert [(f[0], f[1]) for f in found] == [(ERROR, "VLLM_ENGINE_READY_TIMEOUT_S"), (ERROR, "VLLM_USE_MODELSCOPE")]
    assert "invalid literal for int()" in found[0][2]


def test_mig_uuids_in_cuda_visible_devices_are_an_error_on_a_gpu_variant_only() -> None:
    env = {"CUDA_VISIBLE_DEVICES": "MIG-4f1c1d2e-0000-1111-2222-333344445555"}
    (found,) = envrules.device_lists(env, "cuda")
    assert found[:2] == (ERROR, "CUDA_VISIBLE_DEVICES") and "by MIG UUID" in found[2] and "vllm#41848" in found[2]
    assert envrules.device_lists(env, "cpu") == []
    assert envrules.device_lists({"CUDA_VISIBLE_DEVICES": "0,1"}, "cuda") == []


def test_rocr_visible_devices_and_differing_hip_cuda_lists_are_errors_on_rocm() -> None:
    found = envrules.device_lists({"ROCR_VISIBLE_DEVICES": "1", "HIP_VISIBLE_DEVICES": "0"}, "rocm")
    assert [f[1] for f in found] == ["ROCR_VISIBLE_DEVICES"]
    assert "beside HIP_VISIBLE_DEVICES=0" in found[0][2] and "laifs-container-recipes#6" in found[0][2]
    (differ,) = envrules.device_lists({"HIP_VISIBLE_DEVICES": "0", "CUDA_VISIBLE_DEVICES": "1"}, "rocm")
    assert differ[1] == "HIP_VISIBLE_DEVICES" and "Inconsistent GPU visibility" in differ[2]
    assert envrules.device_lists({"HIP_VISIBLE_DEVICES": "0", "CUDA_VISIBLE_DEVICES": "0"}, "rocm") == []


def test_hf_transfer_without_its_package_is_an_error_and_a_no_op_where_the_hub_dropped_it() -> None:
    env = {"HF_HUB_ENABLE_HF_TRANSFER": "1"}
    (missing,) = envrules.missing_packages(env, {"hf_transfer": False}, hub_uses_hf_transfer=True)
    assert (
        missing[0] == ERROR
        and "needs the package hf_transfer" in missing[2]
        and "pip install hf-transfer" in missing[3]
    )
    (dropped,) = envrules.missing_packages(env, {"hf_transfer": False}, hub_uses_hf_transfer=False)
    assert dropped[0] == WARNING and "HF_XET_HIGH_PERFORMANCE=1" in dropped[3]
    assert envrules.missing_packages(env, {"hf_transfer": True}, hub_uses_hf_transfer=True) == []
    assert envrules.missing_packages({"HF_HUB_ENABLE_HF_TRANSFER": "0"}, {}, hub_uses_hf_transfer=True) == []


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"HTTP_PROXY": "http://p:3128"}, (ERROR, "HTTP_PROXY")),
        ({"http_proxy": "http://p:3128", "NO_PROXY": "localhost"}, (ERROR, "http_proxy")),  # 127.0.0.1 still proxied
        ({"HTTPS_PROXY": "http://p:3128"}, (WARNING, "HTTPS_PROXY")),
        ({"ALL_PROXY": "socks5://p:1080", "NO_PROXY": "example.com"}, (ERROR, "ALL_PROXY")),
        ({"HTTP_PROXY": "http://p:3128", "NO_PROXY": "localhost,127.0.0.1,::1"}, None),
        ({"HTTP_PROXY": "http://p:3128", "no_proxy": "*"}, None),
        # urllib reads the lower-case name first: an empty no_proxy hides NO_PROXY
        ({"HTTP_PROXY": "http://p:3128", "NO_PROXY": "localhost,127.0.0.1", "no_proxy": ""}, (ERROR, "HTTP_PROXY")),
        ({}, None),
    ],
)
def test_a_proxy_without_loopback_in_no_proxy(env: dict[str, str], expected: tuple[str, str] | None) -> None:
    found = envrules.proxy_bypass(env)
    assert ((found[0][0], found[0][1]) if found else None) == expected
    if found:
        assert "localhost,127.0.0.1,::1" in found[0][3]


def test_start_up_timeouts_against_the_need() -> None:
    registry = ["VLLM_ENGINE_READY_TIMEOUT_S", "VLLM_HTTP_TIMEOUT_KEEP_ALIVE"]
    defaults = {"VLLM_ENGINE_READY_TIMEOUT_S": "600", "VLLM_HTTP_TIMEOUT_KEEP_ALIVE": "5"}
    (unset,) = env_check.timeout_findings({}, registry, defaults, 900.0, "the variant's ready_budget")
    assert unset[0] == WARNING and "vLLM's default 600 s" in unset[2] and "VLLM_ENGINE_READY_TIMEOUT_S=900" in unset[3]
    (given,) = env_check.timeout_findings({"VLLM_ENGINE_READY_TIMEOUT_S": "60"}, registry, defaults, 900.0, "x")
    assert given[0] == ERROR and "VLLM_ENGINE_READY_TIMEOUT_S=60 is shorter than x (900 s)" in given[2]
    assert env_check.timeout_findings({"VLLM_ENGINE_READY_TIMEOUT_S": "1200"}, registry, defaults, 900.0, "x") == []
    assert env_check.timeout_findings({}, registry, defaults, 300.0, "x") == []
    assert env_check.timeout_findings({}, registry, defaults, None, "") == []


def test_a_future_sibling_start_up_timeout_is_judged_by_its_name() -> None:
    found = env_check.timeout_findings(
        {}, ["VLLM_WORKER_INIT_TIMEOUT_S"], {"VLLM_WORKER_INIT_TIMEOUT_S": "30"}, 90, "x"
    )
    assert [f[1] for f in found] == ["VLLM_WORKER_INIT_TIMEOUT_S"]


def test_the_need_is_the_measured_cold_start_where_it_is_longer() -> None:
    assert env_check._need_s({"ready_budget_s": 900.0}) == (900.0, "the variant's ready_budget")
    assert env_check._need_s({"ready_budget_s": 900.0, "cold_start_s": 1000}) == (1000.0, "the cold start measured")
    assert env_check._need_s({}) == (None, "")


@pytest.mark.parametrize(
    ("nofile", "served"),
    [
        ((1024, 1048576), 65535),
        ((1024, 20000), 1024),
        ((20000, 20000), 20000),
        ((INF, INF), INF),
        ((70000, 70000), 70000),
    ],
)
def test_the_open_files_limit_a_server_runs_with(nofile: tuple[int, int], served: int) -> None:
    assert env_check.nofile_served(nofile, 65535) == served


def test_limits_below_the_need_are_warnings_with_their_docker_and_pod_fix() -> None:
    found = env_check.limit_findings((1024, 4096), 65535, (64, 64), 50, uid=1000, need=72)
    assert [(f[0], f[1]) for f in found] == [
        (WARNING, "RLIMIT_NOFILE"),
        (WARNING, "RLIMIT_NPROC"),
        (WARNING, "pids.max"),
    ]
    assert "--ulimit nofile=65535:65535" in found[0][3] and "no Pod field" in found[0][3]
    assert "Too many open files (os error 24)" in found[0][2]
    assert "--pids-limit 144" in found[2][3] and "podPidsLimit" in found[2][3]
    # root is not bound by RLIMIT_NPROC; limits that meet the need pass
    assert env_check.limit_findings((1024, INF), 65535, (64, 64), None, uid=0, need=72) == []


def test_threads_needed_grows_with_cpus_and_gpus() -> None:
    assert env_check.threads_needed(2, 0) == 2 * (4 + env_check.THREADS_PER_PROCESS)
    assert env_check.threads_needed(16, 4) == 5 * (32 + env_check.THREADS_PER_PROCESS)


def test_nofile_target_is_read_from_the_installed_source(tmp_path: Path) -> None:
    (tmp_path / "utils").mkdir()
    (tmp_path / "utils" / "system_utils.py").write_text("def set_ulimit(target_soft_limit: int = 1048576):\n  pass\n")
    assert env_check.nofile_target(str(tmp_path)) == 1048576
    assert env_check.nofile_target(str(tmp_path / "missing")) == env_check.NOFILE_TARGET


def test_read_elsewhere_finds_a_name_quoted_outside_envs_py(tmp_path: Path) -> None:
    (tmp_path / "envs.py").write_text('X = "VLLM_IN_ENVS"\n')
    (tmp_path / "platforms").mkdir()
    (tmp_path / "platforms" / "x.py").write_text('os.environ.get("VLLM_READ_HERE")\n')
    found = env_check.read_elsewhere(["VLLM_READ_HERE", "VLLM_IN_ENVS"], str(tmp_path))
    assert found == {"VLLM_READ_HERE": os.path.join("platforms", "x.py")}


ENVS_PY = """
import os
from typing import Any, Callable

def maybe_convert_bool(value):
    return None if value is None else bool(int(value))

environment_variables: dict[str, Callable[[], Any]] = {
    "VLLM_ENGINE_READY_TIMEOUT_S": lambda: int(os.environ.get("VLLM_ENGINE_READY_TIMEOUT_S", "600")),
    "VLLM_USE_MODELSCOPE": lambda: os.environ.get("VLLM_USE_MODELSCOPE", "False").strip().lower() in ("1", "true"),
    "VLLM_NO_USAGE_STATS": lambda: os.environ.get("VLLM_NO_USAGE_STATS", "0") == "1",
    "VLLM_FLAG": lambda: maybe_convert_bool(os.environ.get("VLLM_FLAG")),
}
"""


@pytest.mark.subprocess
def test_the_registry_program_reads_names_defaults_flags_and_rejected_values(tmp_path: Path) -> None:
    (tmp_path / "vllm").mkdir()
    (tmp_path / "vllm" / "__init__.py").write_text("raise ImportError('the package is never imported')\n")
    (tmp_path / "vllm" / "envs.py").write_text(ENVS_PY)
    program = Path(env_check.__file__).parent / "programs" / env_check.VLLM_ENVS
    env = {"PYTHONPATH": str(tmp_path), "VLLM_ENGINE_READY_TIMEOUT_S": "10m", "VLLM_FLAG": "true", "PATH": "/usr/bin"}
    proc = subprocess.run([sys.executable, str(program)], env=env, capture_output=True, text=True, check=True)
    (line,) = [x for x in proc.stdout.splitlines() if x.startswith("MATRIX-VLLM-ENVS ")]
    found = json.loads(line.split(" ", 1)[1])
    assert found["names"] == ["VLLM_ENGINE_READY_TIMEOUT_S", "VLLM_USE_MODELSCOPE", "VLLM_NO_USAGE_STATS", "VLLM_FLAG"]
    assert found["defaults"]["VLLM_ENGINE_READY_TIMEOUT_S"] == "600" and found["executed"] is True
    assert found["flags"]["VLLM_USE_MODELSCOPE"] == {"accepted": ["1", "true"], "lower": True, "strip": True}
    assert found["flags"]["VLLM_NO_USAGE_STATS"] == {"accepted": ["1"], "lower": False, "strip": False}
    assert set(found["rejected"]) == {"VLLM_ENGINE_READY_TIMEOUT_S", "VLLM_FLAG"}
    assert "invalid literal for int()" in found["rejected"]["VLLM_FLAG"]


def _fake_program(stdout: str) -> Any:
    def run(name: str, *args: Any, **kwargs: Any) -> subprocess.CompletedProcess[str]:
        assert name == env_check.VLLM_ENVS
        return subprocess.CompletedProcess([name], 1 if not stdout else 0, stdout, "Traceback ...\nOSError: boom\n")

    return run


def test_a_registry_that_cannot_be_read_is_said_and_the_rest_still_judged(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "environ", {"HTTP_PROXY": "http://p:3128", "VLLM_TYPO": "1"})
    for stdout in ("", "MATRIX-VLLM-ENVS {not json\n"):
        monkeypatch.setattr(env_check, "run_program", _fake_program(stdout))
        outcome = env_check.check_environment({"accelerator": "cpu"})
        assert outcome["status"] == "failed" and [
            f["variable"] for f in outcome["facts"]["findings"] if f["severity"] == ERROR
        ] == ["HTTP_PROXY"]
        assert outcome["facts"]["registry"]["error"]


def test_the_check_names_each_variable_once_against_the_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    registry = {"path": "/nowhere/vllm/envs.py", "names": REGISTRY, "defaults": {}, "rejected": {}, "executed": True}
    registry["flags"] = {"VLLM_USE_MODELSCOPE": {"accepted": ["1", "true"], "lower": True, "strip": True}}
    monkeypatch.setattr(env_check, "run_program", _fake_program("MATRIX-VLLM-ENVS " + json.dumps(registry) + "\n"))
    monkeypatch.setattr(os, "environ", {"VLLM_USE_MODELSCOPE": "yes", "VLLM_CPU_KVCACHE_SPACES": "1"})
    outcome = env_check.check_environment({"accelerator": "cpu"})
    found = [(f["severity"], f["variable"]) for f in outcome["facts"]["findings"]]
    # VLLM_USE_MODELSCOPE reads as off: named once, as that (not again for the modelscope package it would need)
    assert found[:2] == [(ERROR, "VLLM_CPU_KVCACHE_SPACES"), (ERROR, "VLLM_USE_MODELSCOPE")]
    assert outcome["status"] == "failed" and "reads as false" in outcome["diagnosis"]
