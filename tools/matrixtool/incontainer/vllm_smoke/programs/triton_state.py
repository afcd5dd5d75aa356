"""Triton's backends, their active drivers (vLLM's rule), vLLM's HAS_TRITON; prints ``MATRIX-TRITON {json}``."""

import json
from typing import Any, Dict

out: Dict[str, Any] = {}
try:
    from triton.backends import backends

    out["backends"] = sorted(backends)
    active = []
    for name, backend in backends.items():
        try:
            if name != "cpu" and backend.driver and backend.driver.is_active():
                active.append(name)
        except Exception as exc:
            out.setdefault("driver_errors", {})[name] = repr(exc)
    out["active_drivers"] = active
except Exception as exc:
    out["backends_error"] = repr(exc)
try:
    from vllm.triton_utils import HAS_TRITON

    out["has_triton"] = bool(HAS_TRITON)
except Exception as exc:
    out["vllm_error"] = repr(exc)
try:
    import torch

    out["gpu_visible"] = bool(torch.cuda.is_available())
except Exception:
    out["gpu_visible"] = False
print("MATRIX-TRITON " + json.dumps(out))
