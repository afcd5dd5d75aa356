"""Compile a small Triton kernel ahead of time for each CUDA arch named in argv (``sm_90 sm_120``), without a GPU or
a driver call: ``triton.compile(ASTSource(...), target=GPUTarget("cuda", 90, 32))`` runs Triton's whole pipeline
down to its bundled ptxas. Prints ``MATRIX-AOT {json}``: ``triton`` (its version), ``results`` (arch -> "ok" or the
error's text, its last 2000 characters) and ``lacking`` (the Triton API this version has not, or None).

A file: Triton reads a kernel's source with inspect, which ``python -c`` cannot give.
"""

import inspect
import json
import re
import sys
from typing import Any

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


def source() -> Any:
    """The ASTSource of ``add`` for this Triton's API (constexprs keyed by name, from 3.3; ``constants`` keyed by
    index and a signature without the constexpr before), or raises AttributeError/TypeError naming what is missing."""
    from triton.compiler import ASTSource

    params = inspect.signature(ASTSource.__init__).parameters
    signature = {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32"}
    if "constexprs" in params:
        return ASTSource(add, signature={**signature, "BLOCK": "constexpr"}, constexprs={"BLOCK": 128})
    if "constants" in params:
        return ASTSource(add, signature=dict(enumerate(signature.values())), constants={4: 128})
    raise TypeError("ASTSource takes neither constexprs nor constants")


results, lacking = {}, None
try:
    from triton.backends.compiler import GPUTarget

    src = source()
except (ImportError, AttributeError, TypeError) as e:
    lacking = f"{type(e).__name__}: {e}"
else:
    for arch in sys.argv[1:]:
        m = re.match(r"^sm_(\d+)[af]?$", arch)
        if not m:
            results[arch] = f"not a CUDA arch of the form sm_XY: {arch}"
            continue
        try:
            triton.compile(src, target=GPUTarget("cuda", int(m.group(1)), 32))
            results[arch] = "ok"
        except Exception as e:  # any compile error is the answer for that arch
            results[arch] = f"{type(e).__name__}: {e}"[-2000:]
print("MATRIX-AOT " + json.dumps({"triton": triton.__version__, "results": results, "lacking": lacking}))
