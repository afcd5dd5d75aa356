"""The cpu-floor check's logic: when it does not apply, how it reads the emulated probe's output (steps, the
SIGILL report) into one verdict naming library, symbol and instruction, and that an emulated run past its time is
killed with its whole process group."""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

import pytest

from matrixtool.incontainer.vllm_smoke import cpufloor
from matrixtool.incontainer.vllm_smoke.children import MODEL_DIR

FLOOR = {"name": "x86-64-v3", "model": "Haswell-noTSX", "arch": "amd64", "qemu": "qemu-x86_64",
         "declared": True, "emulated": True}  # fmt: skip


@pytest.fixture(autouse=True)
def _kernels_stage(monkeypatch: pytest.MonkeyPatch) -> None:
    """The stage these tests' probe outputs end at, whatever ``cpufloor.STAGE`` the suite runs (the generate
    stage's tests set theirs)."""
    monkeypatch.setattr(cpufloor, "STAGE", "kernels")
    monkeypatch.setattr(cpufloor, "EXPECTED", cpufloor.STEPS[: cpufloor.STEPS.index("kernels") + 1])


def _params(**over: Any) -> dict[str, Any]:
    return {"accelerator": "cpu", "cpu_floor": dict(FLOOR), "qemu": sys.executable, "timeouts": {}, **over}


@pytest.mark.parametrize(
    ("over", "said"),
    [
        ({"accelerator": "cuda"}, "not applicable: a GPU variant"),
        ({"cpu_floor": None}, "not applicable: the variant declares no cpu_floor"),
        ({"cpu_floor": {**FLOOR, "name": "x86-64-v4", "emulated": False}}, "x86-64-v4 cannot be proven by emulation"),
        (
            {"qemu": None},
            "no static qemu-x86_64 was mounted from the host: `make engine` or `make engine-minimal` installs",
        ),
    ],
)
def test_the_check_says_why_it_does_not_apply(over: dict[str, Any], said: str) -> None:
    outcome = cpufloor.check_cpu_floor(_params(**over))
    assert outcome["status"] == "skipped"
    assert said in outcome["diagnosis"]


def test_instruction_kinds_by_encoding() -> None:
    assert cpufloor.instruction_kind("62f17c48", "amd64") == "an EVEX-encoded (AVX-512) instruction"
    assert "VEX-encoded" in cpufloor.instruction_kind("c5fd6fc1", "amd64")
    assert cpufloor.instruction_kind("0f0b", "amd64") == ""
    # SVE's `ptrue p0.b` (0x2518e3e0): bits 28:25 are 0b0010
    assert cpufloor.instruction_kind("e0e31825", "arm64") == "an SVE instruction"
    assert cpufloor.instruction_kind("1f2003d5", "arm64") == "the A64 instruction d503201f"


def _fake_run(output: str, code: int | None) -> Any:
    def run(argv: list[str], env: dict[str, str], timeout: float) -> tuple[int | None, str]:
        return code, output

    return run


def _sigill_at_the_kernels_step(monkeypatch: pytest.MonkeyPatch, fault: dict[str, object], instruction: str) -> None:
    """The emulated probe's output up to the kernels step (vLLM selected its AVX2 build), then ``fault`` (exit 132),
    with ``instruction`` as the disassembly at the faulting address."""
    output = 'MATRIX-FLOOR {"step": "startup"}\nMATRIX-FLOOR {"step": "torch", "capability": "AVX2"}\n'
    output += 'MATRIX-FLOOR {"step": "vllm", "extension": ["_C_AVX2.abi3.so"]}\n'
    output += f"MATRIX-SIGILL {__import__('json').dumps(fault)}\n"
    monkeypatch.setattr(cpufloor, "run_emulated", _fake_run(output, 132))
    monkeypatch.setattr(cpufloor, "program_path", lambda name: f"/x/{name}")
    monkeypatch.setattr(cpufloor, "disassembly", lambda library, vaddr: instruction)


def test_a_sigill_is_one_failure_naming_library_symbol_instruction_step_and_build(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fault = {"address": "0x7f00", "path": "/opt/venv/lib/libfloor.so", "library": "/opt/venv/lib/libfloor.so",
             "vaddr": 0x1139, "symbol": "floor_init", "symbol_offset": 4, "bytes": "62f17c4858c0c3"}  # fmt: skip
    _sigill_at_the_kernels_step(monkeypatch, fault, "vaddps %zmm0,%zmm0,%zmm0")
    outcome = cpufloor.check_cpu_floor(_params())
    assert outcome["status"] == "failed"
    said = outcome["diagnosis"]
    assert said.startswith("illegal instruction on x86-64-v3 (QEMU Haswell-noTSX) at the kernels step")
    assert "/opt/venv/lib/libfloor.so at offset 0x1139 (in floor_init+0x4): `vaddps %zmm0,%zmm0,%zmm0`" in said
    assert "an EVEX-encoded (AVX-512) instruction" in said
    assert said.endswith("vLLM's extension build selected: _C_AVX2.abi3.so")
    assert outcome["facts"]["fault"]["symbol"] == "floor_init"


def test_a_sigill_in_vllms_own_extension_build_names_that_build_as_the_cause(monkeypatch: pytest.MonkeyPatch) -> None:
    """Class 35: the fault lies in the build of vLLM's extension vLLM loads on the floor, so that build is the
    cause (not a library beside it), with its own fix; the mangled symbol is given as C++ names it."""
    so = "/opt/venv/lib/python3.11/site-packages/vllm/_C_AVX2.abi3.so"
    symbol = "_Z8rms_normRN2at6TensorES1_St8optionalIS0_Ed"
    fault = {"address": "0x7f00", "path": so, "library": so, "vaddr": 0x259790, "symbol": symbol,
             "symbol_offset": 0, "bytes": "62f17d48efc0"}  # fmt: skip
    _sigill_at_the_kernels_step(monkeypatch, fault, "vpxord %zmm0,%zmm0,%zmm0")
    demangled = {symbol: "rms_norm(at::Tensor&, at::Tensor&, double)"}
    monkeypatch.setattr(cpufloor, "demangled", lambda symbol: demangled.get(symbol, symbol))
    outcome = cpufloor.check_cpu_floor(_params())
    assert outcome["status"] == "failed"
    assert outcome["diagnosis"] == (
        "vLLM's extension build _C_AVX2.abi3.so, the one vLLM loads on x86-64-v3 (QEMU Haswell-noTSX), carries an "
        f"instruction above the floor: illegal instruction at the kernels step, in {so} at offset 0x259790 (in "
        "rms_norm(at::Tensor&, at::Tensor&, double)+0x0): `vpxord %zmm0,%zmm0,%zmm0`, an EVEX-encoded (AVX-512) "
        "instruction"
    )
    assert outcome["hint"].startswith("vLLM loads _C_AVX2.abi3.so on CPUs of x86-64-v3")
    assert outcome["facts"]["failure_class"] == 35 and outcome["facts"]["extension"] == ["_C_AVX2.abi3.so"]


@pytest.mark.parametrize(
    ("library", "build"),
    [
        ("/opt/venv/lib/python3.11/site-packages/vllm/_C_AVX512.abi3.so", "_C_AVX512.abi3.so"),
        ("/opt/venv/lib/python3.11/site-packages/vllm/_C.abi3.so", "_C.abi3.so"),
        ("/opt/venv/lib/python3.11/site-packages/vllm/_moe_C.abi3.so", ""),  # not a build of _C
        ("/opt/venv/lib/python3.11/site-packages/torch/lib/_C.so", ""),  # torch's, not vLLM's
        ("/opt/vendor/lib/libfloor_avx512.so", ""),
        ("", ""),
    ],
)
def test_which_faulting_library_is_a_build_of_vllms_extension(library: str, build: str) -> None:
    assert cpufloor.extension_build({"library": library}) == build
    assert cpufloor.extension_build(None) == ""


def test_a_sigill_elsewhere_stays_class_34(monkeypatch: pytest.MonkeyPatch) -> None:
    fault = {"library": "/opt/vendor/lib/libfloor_avx512.so", "vaddr": 0x1139, "bytes": "62f17d48efc0"}
    monkeypatch.setattr(cpufloor, "run_emulated", _fake_run(f"MATRIX-SIGILL {__import__('json').dumps(fault)}\n", 132))
    monkeypatch.setattr(cpufloor, "program_path", lambda name: f"/x/{name}")
    monkeypatch.setattr(cpufloor, "disassembly", lambda library, vaddr: "")
    outcome = cpufloor.check_cpu_floor(_params())
    assert outcome["diagnosis"].startswith("illegal instruction on x86-64-v3 (QEMU Haswell-noTSX) at the startup step")
    assert outcome["hint"] is None and outcome["facts"]["failure_class"] == 34


def test_a_mangled_symbol_is_demangled_where_cxxfilt_is_there(monkeypatch: pytest.MonkeyPatch) -> None:
    assert cpufloor.demangled("floor_init") == "floor_init"  # not C++: as it is, c++filt or not
    monkeypatch.setattr("shutil.which", lambda name: None)
    assert cpufloor.demangled("_Z8rms_normd") == "_Z8rms_normd"


def test_a_pass_names_the_floor_the_capability_and_the_extension_build(monkeypatch: pytest.MonkeyPatch) -> None:
    output = "".join(
        f"MATRIX-FLOOR {line}\n"
        for line in ('{"step": "startup"}', '{"step": "torch", "capability": "AVX2"}',
                     '{"step": "vllm", "extension": ["_C_AVX2.abi3.so"]}', '{"step": "kernels"}')
    )  # fmt: skip
    monkeypatch.setattr(cpufloor, "run_emulated", _fake_run(output, 0))
    monkeypatch.setattr(cpufloor, "program_path", lambda name: f"/x/{name}")
    outcome = cpufloor.check_cpu_floor(_params())
    assert outcome["status"] == "passed", outcome
    assert outcome["diagnosis"] == (
        "proven on x86-64-v3 (QEMU Haswell-noTSX): start-up, torch (torch's CPU capability AVX2), vLLM; vLLM's "
        "extension build selected: _C_AVX2.abi3.so, its kernels"
    )
    assert outcome["facts"]["extension"] == ["_C_AVX2.abi3.so"] and outcome["facts"]["floor"] == "x86-64-v3"


def test_each_step_carries_the_emulated_processs_cpu_seconds(monkeypatch: pytest.MonkeyPatch) -> None:
    """The probe's marks carry its CPU seconds so far (the load of the machine does not change them): the facts
    keep them per step, the figures' source for what each stage costs."""
    steps = ("startup", 1.5), ("torch", 9.0), ("vllm", 30.2), ("kernels", 31.0)
    output = "".join(f'MATRIX-FLOOR {{"step": "{name}", "cpu_s": {cpu}}}\n' for name, cpu in steps)
    monkeypatch.setattr(cpufloor, "run_emulated", _fake_run(output, 0))
    monkeypatch.setattr(cpufloor, "program_path", lambda name: f"/x/{name}")
    outcome = cpufloor.check_cpu_floor(_params())
    assert outcome["status"] == "passed", outcome
    assert outcome["facts"]["step_cpu_seconds"] == dict(steps)


def test_the_generate_stage_makes_the_model_first_and_names_the_engine_step(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cpufloor, "STAGE", "generate")
    monkeypatch.setattr(cpufloor, "EXPECTED", cpufloor.STEPS)
    monkeypatch.setattr(cpufloor, "program_path", lambda name: f"/x/{name}")
    made: list[str] = []
    monkeypatch.setattr(cpufloor, "ensure_model", lambda: made.append("model"))
    output = "".join(f'MATRIX-FLOOR {{"step": "{s}"}}\n' for s in ("startup", "torch", "vllm", "kernels"))
    monkeypatch.setattr(cpufloor, "run_emulated", _fake_run(output + "RuntimeError: engine core died\n", 1))
    outcome = cpufloor.check_cpu_floor(_params())
    assert made == ["model"]
    assert outcome["diagnosis"].startswith("the engine step failed on x86-64-v3 (QEMU Haswell-noTSX) (exit 1)")

    def no_model() -> None:
        raise OSError("read-only file system")

    monkeypatch.setattr(cpufloor, "ensure_model", no_model)
    outcome = cpufloor.check_cpu_floor(_params())
    assert outcome["status"] == "failed"
    assert "the tiny model to generate with on the floor could not be made: OSError('read-only" in outcome["diagnosis"]


def test_an_exit_without_a_sigill_names_the_step_and_the_error(monkeypatch: pytest.MonkeyPatch) -> None:
    output = 'MATRIX-FLOOR {"step": "startup"}\nModuleNotFoundError: No module named \'torch\'\n'
    monkeypatch.setattr(cpufloor, "run_emulated", _fake_run(output, 1))
    monkeypatch.setattr(cpufloor, "program_path", lambda name: f"/x/{name}")
    outcome = cpufloor.check_cpu_floor(_params())
    assert outcome["status"] == "failed"
    assert outcome["diagnosis"].startswith("the torch step failed on x86-64-v3 (QEMU Haswell-noTSX) (exit 1)")


def test_qemus_own_uncaught_sigill_line_is_a_sigill(monkeypatch: pytest.MonkeyPatch) -> None:
    output = "qemu: uncaught target signal 4 (Illegal instruction) - core dumped\n"
    monkeypatch.setattr(cpufloor, "run_emulated", _fake_run(output, 132))
    monkeypatch.setattr(cpufloor, "program_path", lambda name: f"/x/{name}")
    outcome = cpufloor.check_cpu_floor(_params())
    assert outcome["diagnosis"].startswith("illegal instruction on x86-64-v3 (QEMU Haswell-noTSX) at the startup step")


@pytest.mark.subprocess
def test_an_emulated_run_past_its_time_is_killed_with_its_group(tmp_path: Any) -> None:
    pid_file = tmp_path / "child"
    script = f"sleep 300 & echo $! > {pid_file}; echo started; wait"
    started = time.monotonic()
    code, output = cpufloor.run_emulated(["sh", "-c", script], dict(os.environ), 2)
    assert code is None and "started" in output
    assert time.monotonic() - started < 60
    child = int(pid_file.read_text())
    for _ in range(50):  # the killed sleep is reaped by init (the container's, or this machine's)
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        with open(f"/proc/{child}/stat", encoding="utf-8") as f:
            if f.read().rpartition(")")[2].split()[0] == "Z":
                break
        time.sleep(0.1)
    else:
        pytest.fail(f"the group's sleep {child} outlived the kill")


def test_the_floor_group_starts_after_every_other_group() -> None:
    from matrixtool.model.matrixfile import load_matrix
    from matrixtool.smoke.plan import plan_profiles
    from tests.conftest import FIXTURE_MATRIX

    (cpu,) = [v for v in load_matrix(FIXTURE_MATRIX).variants if v.name == "cpu"]
    run = plan_profiles(cpu, cpu.checks, [cpu.profiles[0]]).runs[0]
    assert run.groups[-1].names == ("cpu-floor",)
    assert run.groups[0].timeout == max(g.timeout for g in run.groups[:-1])


def test_the_host_mounts_a_static_emulator_only_for_a_run_of_the_floor_check(monkeypatch: pytest.MonkeyPatch) -> None:
    from pathlib import Path

    from matrixtool.model.matrixfile import load_matrix
    from matrixtool.smoke import emulator
    from matrixtool.smoke.plan import plan_profiles
    from tests.conftest import FIXTURE_MATRIX

    variants = {v.name: v for v in load_matrix(FIXTURE_MATRIX).variants}
    cpu, cuda = variants["cpu"], variants["cuda"]
    monkeypatch.setattr(emulator, "static_emulator", lambda name: Path(f"/usr/bin/{name}"))
    run = plan_profiles(cpu, cpu.checks, [cpu.profiles[0]]).runs[0]
    volumes, inside = emulator.floor_mount(cpu, run)
    assert volumes == {"/usr/bin/qemu-x86_64": {"bind": "/run/matrix-qemu/qemu-x86_64", "mode": "ro"}}
    assert inside == "/run/matrix-qemu/qemu-x86_64"
    without = plan_profiles(cpu, [c for c in cpu.checks if c.name != "cpu-floor"], [cpu.profiles[0]]).runs[0]
    assert emulator.floor_mount(cpu, without) == ({}, None)
    assert emulator.floor_mount(cuda, plan_profiles(cuda, cuda.checks, [cuda.profiles[0]]).runs[0]) == ({}, None)


def test_a_dynamically_linked_emulator_is_not_static(tmp_path: Any) -> None:
    from pathlib import Path

    from matrixtool.smoke import emulator

    assert not emulator.is_static(Path(sys.executable).resolve())  # CPython links the C library
    assert not emulator.is_static(tmp_path / "absent")
    (tmp_path / "text").write_text("#!/bin/sh\n")
    assert not emulator.is_static(tmp_path / "text")


def test_the_arm64_variant_is_proven_under_qemu_aarch64_on_neoverse_n1(monkeypatch: pytest.MonkeyPatch) -> None:
    """The shipped matrix.yaml's arm64 variant (armv8.2-a) from its plan to the emulated command line: the host's
    qemu-aarch64 mounted, and the image's Python run on a Neoverse N1 (Graviton 2), the model without SVE."""
    from pathlib import Path

    from matrixtool.model.matrixfile import load_matrix
    from matrixtool.smoke import emulator
    from matrixtool.smoke.plan import check_params, plan_profiles
    from tests.conftest import REPO_ROOT

    (arm64,) = [v for v in load_matrix(REPO_ROOT / "matrix.yaml").variants if v.name == "arm64"]
    monkeypatch.setattr(emulator, "static_emulator", lambda name: Path(f"/usr/bin/{name}"))
    run = plan_profiles(arm64, arm64.checks, [arm64.profiles[0]]).runs[0]
    volumes, inside = emulator.floor_mount(arm64, run)
    assert volumes == {"/usr/bin/qemu-aarch64": {"bind": "/run/matrix-qemu/qemu-aarch64", "mode": "ro"}}
    params = dict(check_params(arm64), qemu=inside)
    assert params["cpu_floor"] == {"name": "armv8.2-a", "model": "neoverse-n1", "arch": "arm64", "declared": True,
                                   "emulated": True, "qemu": "qemu-aarch64"}  # fmt: skip
    assert cpufloor.not_applicable(dict(params, qemu=sys.executable)) is None
    monkeypatch.setattr(cpufloor, "program_path", lambda name: f"/x/{name}")
    argv = cpufloor.probe_argv(params)
    assert argv[:3] == ["/run/matrix-qemu/qemu-aarch64", "-cpu", "neoverse-n1"]
    assert argv[3:] == [sys.executable, "-S", "/x/floor_probe.py", cpufloor.STAGE, MODEL_DIR]


def test_the_generate_stage_passes_naming_the_generation(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cpufloor, "STAGE", "generate")
    monkeypatch.setattr(cpufloor, "EXPECTED", cpufloor.STEPS)
    monkeypatch.setattr(cpufloor, "program_path", lambda name: f"/x/{name}")
    monkeypatch.setattr(cpufloor, "ensure_model", lambda: None)
    marks: list[dict[str, Any]] = [{"step": s} for s in ("startup", "torch", "vllm", "kernels", "engine")]
    marks.append({"step": "generate", "tokens": [[9, 142], [24, 317]], "cpu_s": 59.1})
    output = "".join(f"MATRIX-FLOOR {json.dumps(m)}\n" for m in marks)
    monkeypatch.setattr(cpufloor, "run_emulated", _fake_run(output, 0))
    outcome = cpufloor.check_cpu_floor(_params())
    assert outcome["status"] == "passed", outcome
    assert outcome["diagnosis"].endswith(
        "its kernels, vLLM's engine and a greedy generation of the tiny model (2 tokens)"
    )
    assert outcome["facts"]["tokens"] == [[9, 142], [24, 317]]
