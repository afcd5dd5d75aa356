"""matrix.yaml ``cpu_floor``: the levels and models each architecture accepts, the default of a cpu variant, and one
message (key, value, the values it may take) with exit 3 for a bad one."""

from __future__ import annotations

import shutil
import signal
import struct
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from matrixtool.cli import main
from matrixtool.core.errors import ExitCode
from matrixtool.model import cpufloor
from matrixtool.model.matrixfile import load_matrix, validate
from tests.conftest import FIXTURE_MATRIX


def _data() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(FIXTURE_MATRIX.read_text(encoding="utf-8"))
    return data


@pytest.mark.parametrize(
    ("variant", "value", "model"),
    [
        ("cpu", "x86-64-v2", "Nehalem"),
        ("cpu", "x86-64-v3", "Haswell-noTSX"),
        ("cpu", "EPYC-Rome", "EPYC-Rome"),
        ("arm64", "armv8.0-a", "cortex-a72"),
        ("arm64", "neoverse-n1", "neoverse-n1"),
    ],
)
def test_a_level_maps_to_its_qemu_model_and_a_model_is_taken_as_it_is(
    tmp_path: Path, variant: str, value: str, model: str
) -> None:
    data = _data()
    data["variants"][variant]["cpu_floor"] = value
    path = tmp_path / "matrix.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    floor = next(v for v in load_matrix(path).variants if v.name == variant).cpu_floor
    assert floor is not None
    assert (floor.name, floor.model, floor.declared) == (value, model, True)


def test_a_cpu_variant_without_a_floor_gets_its_architectures_default_and_a_gpu_variant_none() -> None:
    data = _data()
    for v in data["variants"].values():
        v.pop("cpu_floor", None)
    floors = {
        name: cpufloor.resolve(None, [p.split("/")[1] for p in v.get("platforms", ["linux/amd64"])], v["accelerator"])
        for name, v in data["variants"].items()
        if "accelerator" in v
    }
    assert floors["cpu"] is not None and floors["cpu"].name == "x86-64-v3" and not floors["cpu"].declared
    assert floors["arm64"] is not None and floors["arm64"].name == "armv8.2-a"
    assert floors["arm64"].qemu == "qemu-aarch64"
    assert floors["cuda"] is None and floors["rocm"] is None


def test_avx512_floors_are_marked_as_not_emulated() -> None:
    floor = cpufloor.resolve("x86-64-v4", ["amd64"], "cpu")
    assert floor is not None and not floor.emulated
    assert cpufloor.resolve("x86-64-v3", ["amd64"], "cpu") == cpufloor.CpuFloor(
        name="x86-64-v3", model="Haswell-noTSX", arch="amd64", declared=True, emulated=True
    )


@pytest.mark.parametrize(
    ("variant", "value", "message"),
    [
        ("cpu", "armv8.2-a", "variants.cpu.cpu_floor: 'armv8.2-a' is an arm64 floor, but the variant is amd64: give a "
         "level (x86-64, x86-64-v2, x86-64-v3, x86-64-v4)"),
        ("cpu", "x86-64-v9", "variants.cpu.cpu_floor: 'x86-64-v9' is no amd64 CPU floor: give a level"),
        ("arm64", "Haswell", "variants.arm64.cpu_floor: 'Haswell' is an amd64 floor, but the variant is arm64"),
        ("cpu", "x86 64", "variants.cpu.cpu_floor: 'x86 64' does not match"),
        ("cpu", 3, "variants.cpu.cpu_floor: 3 is read as a number, not as text"),
    ],
)  # fmt: skip
def test_a_bad_floor_is_one_message_naming_key_value_and_the_choices(variant: str, value: Any, message: str) -> None:
    data = _data()
    data["variants"][variant]["cpu_floor"] = value
    problems = validate(data)
    assert len([p for p in problems if "cpu_floor" in p]) == 1, problems
    assert any(p.startswith(message) for p in problems), problems


def test_a_bad_floor_exits_3_naming_the_file_without_a_traceback(tmp_path: Path) -> None:
    data = _data()
    data["variants"]["cpu"]["cpu_floor"] = "x86-64-v9"
    path = tmp_path / "matrix.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    result = CliRunner().invoke(main, ["--matrix", str(path), "render", "--check"], catch_exceptions=False)
    assert result.exit_code == ExitCode.CONFIG
    assert str(path) in result.output and "variants.cpu.cpu_floor: 'x86-64-v9' is no amd64 CPU floor" in result.output
    assert "Traceback" not in result.output


def test_one_floor_cannot_fit_two_architectures() -> None:
    assert cpufloor.floor_problem("x86-64-v3", ["amd64", "arm64"]) == (
        "'x86-64-v3': one floor cannot fit amd64 and arm64; split the variant per platform"
    )
    assert cpufloor.floor_problem("x86-64-v3", ["amd64", "amd64"]) is None


def _aarch64_program(instruction: int) -> bytes:
    """A static aarch64 ELF executable (one PT_LOAD at 0x400000) that runs ``instruction``, then exit(0)."""
    code = b"".join(
        struct.pack("<I", word)  # movz x0, #0; movz x8, #93 (exit); svc #0
        for word in (instruction, 0xD2800000, 0xD2800BA8, 0xD4000001)
    )
    base, headers = 0x400000, 64 + 56
    ident = b"\x7fELF\x02\x01\x01" + bytes(9)  # 64-bit, little-endian, version 1
    elf = ident + struct.pack("<HHIQQQIHHHHHH", 2, 183, 1, base + headers, 64, 0, 0, 64, 56, 1, 0, 0, 0)  # EM_AARCH64
    size = headers + len(code)
    return elf + struct.pack("<IIQQQQQQ", 1, 5, 0, base, base, size, size, 0x1000) + code  # PT_LOAD, R+X


# (instruction word, the oldest arm64 level of LEVELS that has it): LSE's `ldadd w0, w1, [sp]` (armv8.1-a), SVE's
# `ptrue p0.b` (armv8.2-a's optional SVE, as Neoverse V1 has it), and `nop`.
_A64 = {"nop": (0xD503201F, "armv8.0-a"), "ldadd": (0xB82003E1, "armv8.2-a"), "ptrue": (0x2518E3E0, "armv8.4-a")}


@pytest.mark.subprocess
@pytest.mark.skipif(shutil.which("qemu-aarch64") is None, reason="no qemu-aarch64 on PATH (`make engine` installs it)")
@pytest.mark.parametrize("instruction", sorted(_A64))
def test_qemus_arm64_model_of_each_level_stops_the_instructions_above_it(instruction: str, tmp_path: Path) -> None:
    """What the arm64 floor rests on, with the host's QEMU (no arm64 image is built here): each level's CPU model
    runs an instruction of its level and stops one of a later level with SIGILL, as such a CPU does."""
    word, first = _A64[instruction]
    program = tmp_path / instruction
    program.write_bytes(_aarch64_program(word))
    program.chmod(0o755)
    levels = list(cpufloor.LEVELS["arm64"])
    for level, (model, _) in cpufloor.LEVELS["arm64"].items():
        code = subprocess.run(["qemu-aarch64", "-cpu", model, str(program)], capture_output=True, timeout=60).returncode
        assert code == (0 if levels.index(level) >= levels.index(first) else -signal.SIGILL), (level, model)
