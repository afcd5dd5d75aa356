"""The cpu-floor check's program, run under ``qemu-<arch> -cpu MODEL python3 -S floor_probe.py STAGE [MODEL_DIR]``:
a SIGILL handler first, then Python's site start-up (``.pth`` files: ``-S`` defers it to here), then the import
path (torch, vLLM, the build of vLLM's extension vLLM selects) and, for STAGE ``generate``, one in-process greedy
generation of the tiny model in ``MODEL_DIR``. Prints ``MATRIX-FLOOR {json}`` after each step, and on SIGILL one
``MATRIX-SIGILL {json}`` line (the faulting address, its mapping, nearest dynamic symbol and instruction bytes)
before exiting 132 (128 + SIGILL).

The handler is a C-callable (ctypes) ``sigaction`` handler with SA_SIGINFO: ``si_addr`` of a SIGILL is the address
of the faulting instruction (sigaction(2)); a Python-level ``signal.signal`` handler would return to the same
instruction for ever. Standard library at import; Python >= 3.9."""

import ctypes
import json
import os
import sys
from typing import Any, Dict, List

SA_SIGINFO = 4
SA_RESETHAND = 0x80000000
SIGILL = 4
_HANDLER = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)


class _Sigaction(ctypes.Structure):
    # glibc's struct sigaction on x86-64 and aarch64: handler, a 1024-bit sa_mask, sa_flags, sa_restorer.
    _fields_ = [
        ("handler", _HANDLER),
        ("mask", ctypes.c_ulong * 16),
        ("flags", ctypes.c_int),
        ("restorer", ctypes.c_void_p),
    ]


class _DlInfo(ctypes.Structure):
    _fields_ = [
        ("fname", ctypes.c_char_p),
        ("fbase", ctypes.c_void_p),
        ("sname", ctypes.c_char_p),
        ("saddr", ctypes.c_void_p),
    ]


def emit(mark: str, data: Dict[str, Any]) -> None:
    """Write ``mark {json}`` to stdout's file descriptor at once (no buffer left behind by ``os._exit``); a step's
    mark carries ``cpu_s``, this process's user + system CPU seconds so far (under QEMU: the emulator's, translation
    included), which the load of the machine does not change."""
    if mark == "MATRIX-FLOOR":
        data = dict(data, cpu_s=round(sum(os.times()[:2]), 1))
    os.write(1, (f"{mark} {json.dumps(data)}\n").encode())


def mapping_of(address: int) -> Dict[str, Any]:
    """The line of /proc/self/maps that holds ``address``: {"path", "offset"} (the file offset of ``address``)."""
    with open("/proc/self/maps", encoding="utf-8", errors="replace") as f:
        for line in f:
            parts = line.split(None, 5)
            start, end = (int(x, 16) for x in parts[0].split("-"))
            if start <= address < end:
                path = parts[5].strip() if len(parts) > 5 else ""
                return {"path": path, "offset": address - start + int(parts[2], 16)}
    return {}


def on_sigill(signo: int, info: int, context: int) -> None:
    """Report the faulting instruction (``si_addr`` at offset 16 of siginfo_t) and exit 132."""
    fault: Dict[str, Any] = {}
    try:
        address = ctypes.c_void_p.from_address(info + 16).value or 0
        fault["address"] = hex(address)
        fault.update(mapping_of(address))
        dl = _DlInfo()
        if ctypes.CDLL(None).dladdr(ctypes.c_void_p(address), ctypes.byref(dl)):
            fault["library"] = (dl.fname or b"").decode(errors="replace")
            fault["vaddr"] = address - (dl.fbase or 0)
            if dl.sname:
                fault["symbol"] = dl.sname.decode(errors="replace")
                fault["symbol_offset"] = address - (dl.saddr or 0)
        fault["bytes"] = ctypes.string_at(address, 16).hex()
    except Exception as e:  # the report is all there is to give: whatever was read goes out
        fault["error"] = repr(e)
    emit("MATRIX-SIGILL", fault)
    os._exit(128 + SIGILL)


_KEEP = _HANDLER(on_sigill)


def install() -> None:
    """Install ``on_sigill`` for SIGILL (once: SA_RESETHAND gives a second one the default action)."""
    action = _Sigaction(handler=_KEEP, flags=SA_SIGINFO | SA_RESETHAND)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.sigaction(SIGILL, ctypes.byref(action), None) != 0:
        raise OSError(ctypes.get_errno(), "sigaction(SIGILL)")


def extension_builds() -> List[str]:
    """The builds of vLLM's extension (``vllm/_C*.so``) mapped into this process, by file name."""
    with open("/proc/self/maps", encoding="utf-8", errors="replace") as f:
        paths = {line.split(None, 5)[5].strip() for line in f if len(line.split(None, 5)) > 5}
    return sorted(os.path.basename(p) for p in paths if "/vllm/_C" in p)


def main() -> None:
    install()
    import site

    site.main()  # the start-up -S deferred: .pth files run under the handler
    emit("MATRIX-FLOOR", {"step": "startup"})
    import torch

    emit("MATRIX-FLOOR", {"step": "torch", "capability": torch.backends.cpu.get_cpu_capability()})
    import vllm  # noqa: F401
    from vllm.platforms import current_platform

    current_platform.import_kernels()  # vLLM's own choice of its extension's build (vllm/platforms/cpu.py)
    emit("MATRIX-FLOOR", {"step": "vllm", "extension": extension_builds()})
    x = torch.randn(4, 64)
    out = torch.empty_like(x)
    torch.ops._C.rms_norm(out, x, torch.ones(64), 1e-6)  # a kernel of the selected build
    y = torch.nn.functional.linear(x.to(torch.bfloat16), torch.randn(32, 64).to(torch.bfloat16))
    emit("MATRIX-FLOOR", {"step": "kernels", "rms_norm": out.shape[-1], "linear_bf16": list(y.shape)})
    if sys.argv[1] == "generate":
        import generate  # type: ignore[import-not-found]  # programs/generate.py, beside this file

        def made() -> None:
            emit("MATRIX-FLOOR", {"step": "engine"})

        data = generate.generate(sys.argv[2], True, 2, in_process=True, made=made)
        emit("MATRIX-FLOOR", {"step": "generate", "tokens": data["tokens"]})
    # Proven: no interpreter teardown under emulation (measured: 3 CPU seconds after the kernels step, 15 after a
    # generation, for modules' and vLLM's atexit clean-up that proves nothing about the floor).
    os._exit(0)


if __name__ == "__main__":
    main()
