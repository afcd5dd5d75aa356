"""The bundle's diagnoses on the H200 (vLLM 0.25.0): its server-log cause picker and the root-cause rules it shares
with the host. The data are the real run's: ``data/bundle/cuda.serve.log`` is 41 lines of the as-pinned run's
server log (flashinfer not installed), ``data/bundle/h200-results.json`` the bundle's JSON results of that run
(``as-pinned``) and of the run with Triton hidden from every Python (``hidden``), the server's log tails left out."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from matrixtool.incontainer.vllm_smoke import rootcause as shared
from matrixtool.incontainer.vllm_smoke import servediag, serving
from matrixtool.smoke import rootcause
from matrixtool.smoke.result import CheckResult, Status

DATA = Path(__file__).parent.parent / "data" / "bundle"
SERVE_LOG = (DATA / "cuda.serve.log").read_text(encoding="utf-8")
FLASHINFER = "ModuleNotFoundError: No module named 'flashinfer'"


def _runs() -> dict[str, list[dict[str, Any]]]:
    runs: dict[str, list[dict[str, Any]]] = json.loads((DATA / "h200-results.json").read_text(encoding="utf-8"))
    return runs


def _by_check(results: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {r["check"]: r for r in results}


def test_the_server_log_cause_is_the_engine_exception_not_the_ulimit_warning() -> None:
    """vLLM's start-up WARNING quotes "OSError: [Errno 24] Too many open files"; the cause is the EngineCore's."""
    assert "Too many open files" in SERVE_LOG
    assert serving.root_cause(SERVE_LOG) == FLASHINFER
    status, diagnosis, _, facts = serving.judge({"ready_s": None, "exit_code": 1, "log": SERVE_LOG}, {}, None)
    assert (status, diagnosis) == ("failed", f"the server exited (1) before it was ready: {FLASHINFER}")
    assert facts["exit_code"] == 1


def test_the_server_failing_by_offline_generates_missing_package_is_its_consequence() -> None:
    """As pinned: the server fails by the flashinfer import that offline-generate named; its hint is the fix."""
    results = _runs()["as-pinned"]
    serve = _by_check(results)["serve"]
    serve["diagnosis"] = serving.judge({"ready_s": None, "exit_code": 1, "log": SERVE_LOG}, {}, None)[1]
    out = _by_check(shared.consequences(results))
    assert out["offline-generate"]["status"] == "failed"
    assert out["serve"]["status"] == "skipped"
    assert out["serve"]["diagnosis"] == "offline-generate failed"
    assert out["serve"]["facts"]["failed_need"] == "offline-generate"
    hint = out["serve"]["facts"]["need_hint"]
    assert "flashinfer-python" in hint and "VLLM_USE_FLASHINFER_SAMPLER=0" in hint
    # Failures of their own stay failures.
    assert out["vllm-cli"]["status"] == "failed" and out["pip-check"]["status"] == "failed"


def test_the_old_serve_diagnosis_is_no_consequence() -> None:
    """A server failing by another exception than offline-generate's is its own failure."""
    results = _runs()["as-pinned"]
    out = _by_check(shared.consequences(results))  # the serve diagnosis as the old picker gave it: Errno 24
    assert "Too many open files" in out["serve"]["diagnosis"]
    assert out["serve"]["status"] == "failed"


def test_triton_hidden_on_a_gpu_makes_its_knock_on_failures_consequences() -> None:
    """Triton hidden: triton-import and the named model-runner failure stay; inductor on cuda, the engine, the server
    and the Triton observers follow from it, with its hint; pip-check's unrelated conflicts stay."""
    results = _runs()["hidden"]
    before = _by_check(results)
    out = _by_check(shared.consequences(results))
    for check in ("triton-import", "model-runner", "pip-check"):
        assert out[check]["status"] == "failed", check
    assert "Model Runner V2 requires Triton." in out["model-runner"]["diagnosis"]
    for check in ("inductor-compile", "offline-generate", "serve", "triton-drivers", "triton-kernel"):
        got = out[check]
        assert got["status"] == "skipped", check
        assert got["diagnosis"] == "triton-import failed"
        assert got["facts"]["failed_need"] == "triton-import"
        assert got["facts"]["need_hint"] == before["triton-import"]["hint"]
        assert got["facts"]["own_diagnosis"] == before[check]["diagnosis"]
    failed = {r["check"] for r in out.values() if r["status"] == "failed"}
    assert failed == {"triton-import", "model-runner", "pip-check"}


def test_the_host_applies_the_same_rules() -> None:
    """The host's pass over CheckResult values gives the bundle's verdicts for the same results."""
    results = _runs()["hidden"]
    host = [
        CheckResult(
            variant="cuda",
            image="h200",
            check=r["check"],
            status=Status(r["status"]),
            diagnosis=r["diagnosis"],
            hint=r["hint"],
            seconds=0.0,
            facts=r["facts"],
        )
        for r in results
    ]
    got = [(r.check, r.status.value, r.diagnosis) for r in rootcause.consequences(host)]
    assert got == [(r["check"], r["status"], r["diagnosis"]) for r in shared.consequences(results)]


def test_no_torch_makes_what_imports_it_consequences() -> None:
    """The bundle run with plain python3 and no torch: gpu-archs fails by the same missing torch."""
    no_torch = "ModuleNotFoundError: No module named 'torch'"
    results = [
        {"check": "torch-import", "status": "failed", "diagnosis": f"`import torch` fails: {no_torch}", "hint": "h"},
        {"check": "gpu-archs", "status": "failed", "diagnosis": f"torch's arch list cannot be read: {no_torch}"},
        {"check": "vllm-cli", "status": "failed", "diagnosis": "no `vllm` executable on PATH"},
    ]
    out = _by_check(shared.consequences(results))
    assert out["torch-import"]["status"] == "failed"
    assert (out["gpu-archs"]["status"], out["gpu-archs"]["diagnosis"]) == ("skipped", "torch-import failed")
    assert out["gpu-archs"]["facts"]["need_hint"] == "h"
    assert out["vllm-cli"]["status"] == "failed"


def test_the_serve_judgement_names_unlabelled_metrics() -> None:
    """Class 16: /metrics counting every request under handler="none" fails serve with ``servediag``'s diagnosis
    and fix (the judgement of the container check and the bundle alike, ``serving.answer_problems``)."""
    body = 'http_requests_total{handler="none",method="POST",status="2xx"} 6.0\n'
    found = servediag.unlabelled_metrics(body)
    assert found is not None
    probes = {name: {"status": 200, "body": "{}"} for name in ("models", "completion", "stream", "chat", "version")}
    probes["metrics"] = {"status": 200, "body": body}
    seen = {"ready_s": 1.0, "probes": probes, "stop": {}}
    status, diagnosis, _, facts = serving.judge(seen, {"model": "m", "vllm_version": "0.25.0"}, None)
    assert status == "failed"
    assert f"{found[1]}; fix: {found[2]}" in diagnosis
    assert facts["failure_class"] == 16
    assert servediag.unlabelled_metrics(body.replace('"none"', '"/v1/completions"')) is None


# The two results of the H200 run with /sbin/ldconfig moved away (docs/gpu-proof.md), as the bundle printed them.
_NO_LDCONFIG: list[dict[str, Any]] = [
    {
        "check": "triton-kernel",
        "status": "failed",
        "diagnosis": "compiling or launching a triton kernel fails: FileNotFoundError: [Errno 2] No such file or "
        "directory: '/sbin/ldconfig'",
        "hint": "install the triton that torch pins and make sure the GPU driver is visible in the container",
        "facts": {},
        "log": None,
    },
    {
        "check": "gpu-driver",
        "status": "failed",
        "diagnosis": "/sbin/ldconfig is missing and TRITON_LIBCUDA_PATH is unset: Triton finds libcuda.so.1 only "
        "through `/sbin/ldconfig -p` (triton/backends/nvidia/driver.py, libcuda_dirs()), so the first Triton kernel "
        "fails with FileNotFoundError: '/sbin/ldconfig'",
        "hint": "keep /sbin/ldconfig in the image (Debian/Ubuntu: libc-bin), or set TRITON_LIBCUDA_PATH",
        "facts": {"ldconfig": False, "TRITON_LIBCUDA_PATH": None, "compat": []},
        "log": None,
    },
]


def test_a_triton_kernel_failing_without_ldconfig_is_gpu_drivers_consequence() -> None:
    """Without /sbin/ldconfig the kernel's FileNotFoundError is gpu-driver's cause, with its hint (not a Triton
    one); with TRITON_LIBCUDA_PATH set, gpu-driver blames nothing and the kernel's failure stays its own."""
    out = {r["check"]: r for r in shared.consequences(_NO_LDCONFIG)}
    assert out["gpu-driver"]["status"] == "failed"
    kernel = out["triton-kernel"]
    assert kernel["status"] == "skipped" and kernel["diagnosis"] == "gpu-driver failed"
    assert "libc-bin" in kernel["facts"]["need_hint"]
    set_path = [dict(_NO_LDCONFIG[0]), dict(_NO_LDCONFIG[1], facts={"ldconfig": False, "TRITON_LIBCUDA_PATH": "/x"})]
    assert {r["check"]: r["status"] for r in shared.consequences(set_path)}["triton-kernel"] == "failed"


def test_a_gpu_unusable_behind_a_compat_libcuda_is_gpu_drivers_consequence() -> None:
    """The H200 run with Debian's libcuda 535.261.03 first on LD_LIBRARY_PATH (``data/bundle/h200-compat.json``:
    the bundle's results before the root-cause pass, hints left out): torch's "driver ... too old (found version
    12020)" fails triton-kernel and inductor's GPU part; both are gpu-driver's consequences, with its hint."""
    runs = json.loads((DATA / "h200-compat.json").read_text(encoding="utf-8"))
    results = runs["h200-compat-ld-library-path"]
    kernel = _by_check(results)["triton-kernel"]
    assert kernel["status"] == "failed" and "found version 12020" in kernel["diagnosis"]
    out = _by_check(shared.consequences(results))
    assert out["gpu-driver"]["status"] == "failed" and "driver 535.261.03" in out["gpu-driver"]["diagnosis"]
    for check in ("triton-kernel", "inductor-compile"):
        assert out[check]["status"] == "skipped" and out[check]["diagnosis"] == "gpu-driver failed", check
        assert "compat folder" in out[check]["facts"]["need_hint"]
    # Without the compat finding (gpu-driver passed), the same failure stays the kernel's own.
    passed = [dict(r, status="passed", facts={}) if r["check"] == "gpu-driver" else r for r in results]
    assert _by_check(shared.consequences(passed))["triton-kernel"]["status"] == "failed"


def test_an_answer_nested_past_the_recursion_limit_is_a_problem_not_a_crash() -> None:
    """Before the judge was shared, the host read answers with ``jsontext.loads`` (RecursionError -> ValueError);
    the shared ``serving._loads`` raised RecursionError out of ``answer_problems``."""
    deep = "[" * 100_000 + "]" * 100_000
    probes = {key: {"status": 200, "body": deep} for key in ("models", "completion", "stream", "chat", "version")}
    facts: dict[str, Any] = {}
    problems = serving.answer_problems(probes, "m", None, "0.25.0", facts)
    assert any("/v1/models lists [], not the served m" in p for p in problems), problems


def test_a_kernel_failing_by_an_ldconfig_it_may_not_run_is_gpu_drivers_consequence() -> None:
    """An /sbin/ldconfig present but not executable: Triton's PermissionError follows from gpu-driver's finding."""
    kernel = dict(_NO_LDCONFIG[0], diagnosis="compiling or launching a triton kernel fails: PermissionError: "
                  "[Errno 13] Permission denied: '/sbin/ldconfig'")  # fmt: skip
    facts = {"ldconfig": False, "ldconfig_state": "not executable", "TRITON_LIBCUDA_PATH": None}
    driver = dict(_NO_LDCONFIG[1], hint="make /sbin/ldconfig executable for every user again (chmod 755 …)",
                  facts=facts)  # fmt: skip
    out = _by_check(shared.consequences([kernel, driver]))
    assert out["triton-kernel"]["status"] == "skipped" and "chmod 755" in out["triton-kernel"]["facts"]["need_hint"]


def test_checks_failing_by_a_libcuda_that_is_no_driver_are_gpu_drivers_consequences() -> None:
    """A libcuda.so.1 that is not NVIDIA's driver first on LD_LIBRARY_PATH: torch's "Found no NVIDIA driver" in
    triton-kernel and inductor-compile is gpu-driver's cause, with its hint; without the finding it stays theirs."""
    no_driver = "RuntimeError: Found no NVIDIA driver on your system. Please check that you have an NVIDIA GPU"
    results: list[dict[str, Any]] = [
        {"check": "triton-kernel", "status": "failed", "diagnosis": f"a triton kernel fails: {no_driver}",
         "hint": "see gpu-driver", "facts": {}, "log": None},
        {"check": "inductor-compile", "status": "failed", "diagnosis": f"fails on cuda: {no_driver}", "hint": "",
         "facts": {}, "log": None},
        {"check": "gpu-driver", "status": "failed", "diagnosis": "… is not NVIDIA's driver", "hint": "remove it",
         "facts": {"ldconfig": True, "not_a_driver": "its SONAME is 'libm.so.6'", "compat": []}, "log": None},
    ]  # fmt: skip
    out = _by_check(shared.consequences(results))
    for check in ("triton-kernel", "inductor-compile"):
        assert out[check]["status"] == "skipped" and out[check]["facts"]["need_hint"] == "remove it", check
    passed = [dict(r, status="passed", facts={}) if r["check"] == "gpu-driver" else r for r in results]
    assert _by_check(shared.consequences(passed))["triton-kernel"]["status"] == "failed"
