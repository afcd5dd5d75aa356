"""cpu-floor: the image runs on the oldest CPU its variant supports (matrix.yaml ``cpu_floor``). The host mounts
its static QEMU user-mode emulator read-only (params ``qemu``); the check runs ``programs/floor_probe.py`` under
``qemu-<arch> -cpu MODEL``, whose CPUID reports that model's flags (so torch and vLLM take the floor's dispatch
path) and which stops an instruction above it with SIGILL. The probe names the faulting address; this module maps
it to the library, nearest symbol and instruction (objdump where the image has it).

Standard library only, Python >= 3.9."""

from __future__ import annotations

import contextlib
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
from typing import Any, Dict, List, Optional, Tuple

from .children import MODEL_DIR, kill_group, program_path
from .declarations import VLLM_REPO, Suite, check
from .errortext import last_error_line
from .results import result
from .tinymodel import ensure_model

# How the probe's run ends: its steps and, on SIGILL, the fault (``programs/floor_probe.py``).
FLOOR_MARK = "MATRIX-FLOOR"
SIGILL_MARK = "MATRIX-SIGILL"
# QEMU's own line when the guest dies of a signal it has no handler for.
QEMU_UNCAUGHT = "uncaught target signal 4"
# Seconds left to the check after the emulated run is killed (reading its output, disassembling).
MARGIN = 20
# The probe's stage: "kernels" (start-up, import path, a kernel of the selected extension build and a bf16
# linear) or "generate" (and one greedy in-process generation of the tiny model).
STAGE = "generate"
# The emulated run's nice value (setpriority(2)): CPU-bound for minutes, it yields to the checks beside it.
NICENESS = 10
STEPS = ("startup", "torch", "vllm", "kernels", "engine", "generate")
EXPECTED = STEPS if STAGE == "generate" else STEPS[: STEPS.index("kernels") + 1]


def instruction_kind(code: str, arch: str) -> str:
    """What the instruction bytes ``code`` (hex, from the faulting address on) are, by encoding: x86-64's EVEX
    prefix (0x62) is AVX-512, VEX (0xC4, 0xC5) AVX/AVX2/FMA; on arm64 bits 28:25 of 0b0010 are SVE."""
    if len(code) < 2:
        return ""
    if arch == "arm64" and len(code) >= 8:
        word = int.from_bytes(bytes.fromhex(code[:8]), "little")
        return "an SVE instruction" if (word >> 25) & 0xF == 0b0010 else f"the A64 instruction {word:08x}"
    first = code[:2]
    if first == "62":
        return "an EVEX-encoded (AVX-512) instruction"
    if first in ("c4", "c5"):
        return "a VEX-encoded (AVX, AVX2, FMA, F16C, BMI) instruction"
    return ""


def disassembly(library: str, vaddr: int) -> str:
    """objdump's line for the instruction at ``vaddr`` of ``library``, or "" where the image has no objdump."""
    tool = shutil.which("objdump")
    if not tool or not library:
        return ""
    argv = [tool, "-d", "--no-show-raw-insn", f"--start-address={vaddr}", f"--stop-address={vaddr + 16}", library]
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""
    lines = [ln.strip() for ln in out.splitlines() if ln.strip().split(":")[0].strip().lstrip("0") == f"{vaddr:x}"]
    return " ".join(lines[0].split(":", 1)[1].split()) if lines else ""


def demangled(symbol: str) -> str:
    """``symbol`` as C++ source names it (binutils' c++filt, beside objdump), or as it is where the image has no
    c++filt or it is no mangled C++ name (``_Z...``)."""
    tool = shutil.which("c++filt")
    if not tool or not symbol.startswith("_Z"):
        return symbol
    try:
        out = subprocess.run([tool, symbol], capture_output=True, text=True, timeout=30, check=False).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return symbol
    return out or symbol


def extension_build(fault: Optional[Dict[str, Any]]) -> str:
    """The file name of the build of vLLM's extension (``vllm/_C*.so``: vllm/platforms/cpu.py import_kernels loads
    one per CPU) that faulted, or "" where the fault lies elsewhere (class 34: another library)."""
    library = str((fault or {}).get("library") or (fault or {}).get("path") or "")
    name = os.path.basename(library)
    return name if os.path.basename(os.path.dirname(library)) == "vllm" and name.startswith("_C") else ""


def build_hint(build: str, floor: Dict[str, Any]) -> str:
    """The fix where the faulting library is ``build``, vLLM's own extension build for ``floor`` (class 35)."""
    return (
        f"vLLM loads {build} on CPUs of {floor['name']} (vllm/platforms/cpu.py import_kernels): install a vLLM "
        f"whose {build} is built for that level (no instruction above it), rebuild vLLM's CPU extension for it, or "
        "raise the variant's cpu_floor (matrix.yaml) to what that build needs"
    )


def describe_fault(fault: Dict[str, Any], arch: str) -> str:
    """The faulting library, symbol and instruction in words (``fault``: the probe's MATRIX-SIGILL object)."""
    library = fault.get("library") or fault.get("path") or "an unnamed mapping"
    where = f"{library} at offset {hex(int(fault.get('vaddr', fault.get('offset', 0))))}"
    if fault.get("symbol"):
        where += f" (in {demangled(str(fault['symbol']))}+{hex(int(fault.get('symbol_offset', 0)))})"
    code = str(fault.get("bytes", ""))
    instruction = disassembly(str(fault.get("library", "")), int(fault.get("vaddr", -1))) if "vaddr" in fault else ""
    kind = instruction_kind(code, arch)
    said = f"`{instruction}`" if instruction else f"bytes {code[:24]}" if code else "an unreadable instruction"
    return f"{where}: {said}" + (f", {kind}" if kind else "")


def marks(output: str) -> Tuple[List[Dict[str, Any]], Optional[Dict[str, Any]]]:
    """The probe's steps and its fault (None: no SIGILL) from ``output``."""
    steps: List[Dict[str, Any]] = []
    fault = None
    for line in output.splitlines():
        for mark in (FLOOR_MARK, SIGILL_MARK):
            if line.startswith(mark + " "):
                try:
                    data = json.loads(line[len(mark) + 1 :])
                except ValueError:
                    continue
                if mark == FLOOR_MARK:
                    steps.append(data)
                else:
                    fault = data
    return steps, fault


def run_emulated(argv: List[str], env: Dict[str, str], timeout: float) -> Tuple[Optional[int], str]:
    """Run ``argv`` in a process group of its own; (exit code or None past ``timeout`` seconds, its output). A run
    past its time is killed, group and all (QEMU was seen printing the guest's SIGILL, then hanging)."""
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    with contextlib.suppress(OSError):  # below the native checks beside it: the suite's wall time is theirs
        os.setpriority(os.PRIO_PROCESS, proc.pid, NICENESS)
    try:
        out, _ = proc.communicate(timeout=timeout)
        code: Optional[int] = proc.returncode
    except subprocess.TimeoutExpired:
        kill_group(proc.pid, signal.SIGKILL)
        try:
            out, _ = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            out = b""
        code = None
    finally:
        kill_group(proc.pid, signal.SIGKILL)  # whatever the run left in its group
    return code, out.decode("utf-8", errors="replace")


def _children_cpu() -> float:
    """User + system CPU seconds of this process's waited-for children (getrusage RUSAGE_CHILDREN)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def not_applicable(params: Dict[str, Any]) -> Optional[str]:
    """Why the check does not apply to this run (a skip's diagnosis), or None."""
    floor = params.get("cpu_floor")
    if params.get("accelerator", "cpu") != "cpu":
        return "not applicable: a GPU variant generates on its GPU, so it has no CPU path to prove"
    if not floor:
        return "not applicable: the variant declares no cpu_floor (matrix.yaml)"
    if not floor.get("emulated", True):
        return f"{floor['name']} cannot be proven by emulation: QEMU's TCG has no AVX-512"
    qemu = emulator(params)
    if not qemu or not os.access(qemu, os.X_OK):
        where = "is on PATH" if params.get("host") else "was mounted from the host"
        return (
            f"no static {floor.get('qemu', 'QEMU user-mode emulator')} {where}: "
            "`make engine` or `make engine-minimal` installs it (tools/setup-engine.sh: qemu-user >= 10, Debian "
            "trixie); elsewhere install QEMU 10's static qemu-user"
        )
    return None


def emulator(params: Dict[str, Any]) -> Optional[str]:
    """The QEMU user-mode emulator to run: the host's, mounted (params ``qemu``); in host mode (the bundle on a
    machine of its own) the one on PATH."""
    if params.get("qemu"):
        return str(params["qemu"])
    return shutil.which(params["cpu_floor"].get("qemu", "")) if params.get("host") else None


def probe_argv(params: Dict[str, Any]) -> List[str]:
    """The emulated command: QEMU with the floor's CPU model running this Python (``-S``: site later) on the probe."""
    floor = params["cpu_floor"]
    probe = program_path("floor_probe.py")
    program_path("generate.py")  # beside it, for the generate stage
    return [str(emulator(params)), "-cpu", floor["model"], sys.executable, "-S", probe, STAGE, MODEL_DIR]


@check(
    "cpu-floor",
    proves="the image starts, imports torch and vLLM, loads the build of vLLM's extension vLLM selects and runs "
    "its kernels"
    + (", vLLM's engine and a greedy generation of the tiny model" if STAGE == "generate" else "")
    + " on the variant's CPU floor (matrix.yaml cpu_floor: a QEMU CPU model of that level, whose CPU "
    "flags torch and vLLM dispatch on); an instruction above the floor is named: library, symbol, instruction",
    classes=(34, 35),
    reports=(
        f"{VLLM_REPO}/issues/18660",
        f"{VLLM_REPO}/pull/35466",
        "https://github.com/vllm-project/vllm-ascend/issues/13936",
    ),
    hint="build the library for the floor (-march of the floor level) or have it dispatch on the CPU's flags, or "
    "raise the variant's cpu_floor (matrix.yaml) to what the image needs",
    timeout=1800,
    suites=(Suite.FULL,),
    accelerators=("cpu",),  # a GPU variant generates on its GPU: no CPU path to prove
    fresh=True,
)
def check_cpu_floor(params: Dict[str, Any]) -> Dict[str, Any]:
    """Classes 34 (an instruction above the floor on the path every start takes: start-up, import) and 35 (above
    the floor in the build of vLLM's extension vLLM selects on a CPU of the floor).

    params: cpu_floor {name, model, arch, qemu, emulated, declared} (smoke.plan.check_params), qemu (the emulator's
    path in the container), timeouts. Facts: floor, qemu_model, steps, extension,
    capability, fault, failure_class (34: another library, 35: vLLM's extension build), seconds, cpu_seconds,
    step_cpu_seconds ({step: the emulated process's CPU seconds when it finished})."""
    skip = not_applicable(params)
    if skip:
        return result("skipped", skip)
    floor = params["cpu_floor"]
    limit = float(params.get("timeouts", {}).get("cpu-floor") or 1800) - MARGIN
    env = dict(os.environ, OMP_NUM_THREADS="1", VLLM_ENABLE_V1_MULTIPROCESSING="0", PYTHONUNBUFFERED="1")
    started, cpu = time.monotonic(), _children_cpu()
    if STAGE == "generate":  # the model the emulated engine loads: made natively, where no check made it yet
        try:
            ensure_model()
        except Exception as e:  # the tiny-model check names why; here the floor stays unproven
            return result("failed", f"the tiny model to generate with on the floor could not be made: {e!r}")
    code, output = run_emulated(probe_argv(params), env, limit)
    seconds, cpu = round(time.monotonic() - started, 1), round(_children_cpu() - cpu, 1)
    sys.stdout.write(output[-12000:])
    steps, fault = marks(output)
    done = [s["step"] for s in steps]
    facts: Dict[str, Any] = {"floor": floor["name"], "qemu_model": floor["model"], "steps": done, "seconds": seconds}
    facts["cpu_seconds"] = cpu  # the emulated run's user + system CPU time
    facts.update({k: v for s in steps for k, v in s.items() if k in ("extension", "capability", "tokens")})
    facts["step_cpu_seconds"] = {s["step"]: s["cpu_s"] for s in steps if "cpu_s" in s}  # cumulative, per step
    on = f"on {floor['name']} (QEMU {floor['model']})"
    at = next((s for s in EXPECTED if s not in done), "the end")
    build = f"; vLLM's extension build selected: {', '.join(facts['extension'])}" if facts.get("extension") else ""
    if fault is not None or (code is not None and QEMU_UNCAUGHT in output):
        facts["fault"] = fault or {}
        what = describe_fault(fault, floor["arch"]) if fault else "no address read (QEMU: uncaught SIGILL)"
        own = extension_build(fault)
        facts["failure_class"] = 35 if own else 34
        if own:  # class 35: the cause is vLLM's own build for this floor, not a library beside it
            cause = f"vLLM's extension build {own}, the one vLLM loads {on}, carries an instruction above the floor"
            said = f"{cause}: illegal instruction at the {at} step, in {what}"
            return result("failed", said, build_hint(own, floor), **facts)
        return result("failed", f"illegal instruction {on} at the {at} step, in {what}{build}", None, **facts)
    if code is None:
        return result("timeout", f"no result {on} within {limit:.0f} s at the {at} step; killed{build}", None, **facts)
    if code != 0 or at != "the end":
        line = last_error_line(output) or f"exit {code}"
        return result("failed", f"the {at} step failed {on} (exit {code}): {line}{build}", None, **facts)
    capability = f" (torch's CPU capability {facts['capability']})" if facts.get("capability") else ""
    generated = ""
    if "generate" in done:  # programs/generate.py's greedy tokens, per prompt
        per = sorted({len(t) for t in facts.get("tokens") or []})
        generated = f", vLLM's engine and a greedy generation of the tiny model ({'/'.join(map(str, per))} tokens)"
    return result("passed", f"proven {on}: start-up, torch{capability}, vLLM{build}, its kernels{generated}", **facts)
