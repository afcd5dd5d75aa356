"""Validate vLLM's engine configuration for the model folder ``argv[1]``; prints ``MATRIX-VALIDATE {json}``.

Imported by model-runner (``validate(model)``) for the image's default environment in a shared interpreter,
and run as a script for the forced ``VLLM_USE_V2_MODEL_RUNNER=1`` half (vLLM reads it at import).
"""

import json
import sys
from typing import Any, Dict


def validate(model: Any) -> Any:
    """{"ok": bool, "v2": bool} or {"ok": False, "error": str}, plus "has_triton" (vLLM's HAS_TRITON)."""
    from vllm.engine.arg_utils import EngineArgs
    from vllm.triton_utils import HAS_TRITON

    try:
        cfg = EngineArgs(model=model, max_model_len=128).create_engine_config()
        out: Dict[str, Any] = {"ok": True, "v2": bool(cfg.use_v2_model_runner)}
    except ValueError as exc:
        out = {"ok": False, "error": str(exc) or repr(exc)}
    out["has_triton"] = bool(HAS_TRITON)
    return out


if __name__ == "__main__":
    print("MATRIX-VALIDATE " + json.dumps(validate(sys.argv[1])))
