"""Greedy generation with vLLM: ``generate.py MODEL eager|compiled MAX_TOKENS``; prints ``MATRIX-GENERATE {json}``.

Two ways in. As a script (a child Python) vLLM runs as a user runs it: its engine core and its worker in
processes of their own, which re-import the main module (hence a file, not ``python -c``). Imported, ``generate``
runs the engine inside the calling interpreter (``VLLM_ENABLE_V1_MULTIPROCESSING=0``, the ``uni`` executor), so
the smoke suite's vLLM group pays for one ``import vllm`` and one model inspection for eager and compiled alike
(three processes each importing vLLM cost a naive run most of its time).
"""

import contextlib
import gc
import json
import os
import sys
from typing import Any, Callable, Dict, Optional

PROMPTS = ["The quick brown fox", "Once upon a time"]


def generate(
    model: Any,
    eager: Any,
    max_tokens: Any,
    in_process: bool = False,
    made: Optional[Callable[[], None]] = None,
) -> Dict[str, Any]:
    """Greedy tokens for ``PROMPTS`` from the model folder ``model``: {"tokens": [[int]], "runner": "V1"|"V2"|None}.

    ``eager``: ``enforce_eager`` (no torch.compile); ``in_process``: engine core and worker in this interpreter
    (vllm/v1/engine/llm_engine.py reads VLLM_ENABLE_V1_MULTIPROCESSING when the engine is made); ``made``: called
    once the engine is made (the cpu-floor probe marks the step). Raises what vLLM raises."""
    from vllm import LLM, SamplingParams

    saved = os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING")
    extra = {}
    if in_process:
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        extra["distributed_executor_backend"] = "uni"
    try:
        llm = LLM(model=model, enforce_eager=eager, max_model_len=128, dtype="float32", seed=0, **extra)
    finally:
        if in_process:
            if saved is None:
                os.environ.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)
            else:
                os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = saved
    if made is not None:
        made()
    try:
        params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)
        out = llm.generate(PROMPTS, params, use_tqdm=False)
        tokens = [list(o.outputs[0].token_ids) for o in out]
        runner = None
        with contextlib.suppress(Exception):
            runner = "V2" if llm.llm_engine.vllm_config.use_v2_model_runner else "V1"
        return {"tokens": tokens, "runner": runner}
    finally:
        # Free the KV cache before the next engine of this interpreter is made.
        with contextlib.suppress(Exception):
            llm.llm_engine.engine_core.shutdown()
        del llm
        gc.collect()
        # The engine cached vLLM's environment variables (vllm/envs.py enable_envs_cache): read them afresh again.
        envs = sys.modules.get("vllm.envs")
        with contextlib.suppress(Exception):
            envs.disable_envs_cache()  # type: ignore[union-attr]


def main() -> None:
    model, mode, max_tokens = sys.argv[1], sys.argv[2], int(sys.argv[3])
    print("MATRIX-GENERATE " + json.dumps(generate(model, mode == "eager", max_tokens)), flush=True)


if __name__ == "__main__":  # vLLM spawns worker processes
    main()
