"""Compile and launch a small Triton kernel on the GPU; prints ``MATRIX-KERNEL {json}``.

A file: Triton reads a kernel's source with inspect, which ``python -c`` cannot give.
"""

import json

import torch
import triton
import triton.language as tl


# No annotations but constexpr's: Triton 3.6 resolves a kernel's annotations as globals, and `x_ptr: Any` failed
# with NameError("Cannot access global variable Any from within @jit'ed function") on the H200 (2026-12-03).
@triton.jit
def add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def]
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


x = torch.randn(4096, device="cuda")
y = torch.randn(4096, device="cuda")
out = torch.empty_like(x)
add[(triton.cdiv(4096, 1024),)](x, y, out, 4096, BLOCK=1024)
torch.cuda.synchronize()
print("MATRIX-KERNEL " + json.dumps({"ok": bool(torch.allclose(out, x + y)), "device": torch.cuda.get_device_name(0)}))
