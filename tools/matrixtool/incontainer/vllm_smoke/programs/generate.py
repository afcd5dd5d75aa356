"""Greedy generation with vLLM: ``generate.py MODEL eager|compiled MAX_TOKENS``; prints ``MATRIX-GENERATE {json}``.

A file, not ``python -c``: vLLM spawns worker processes that re-import the main module.
"""

import contextlib
import json
import sys


def main():
    from vllm import LLM, SamplingParams

    model, eager, max_tokens = sys.argv[1], sys.argv[2] == "eager", int(sys.argv[3])
    llm = LLM(model=model, enforce_eager=eager, max_model_len=128, dtype="float32", seed=0)
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)
    out = llm.generate(["The quick brown fox", "Once upon a time"], params)
    tokens = [list(o.outputs[0].token_ids) for o in out]
    runner = None
    with contextlib.suppress(Exception):
        runner = "V2" if llm.llm_engine.vllm_config.use_v2_model_runner else "V1"
    print("MATRIX-GENERATE " + json.dumps({"tokens": tokens, "runner": runner}), flush=True)


if __name__ == "__main__":  # vLLM spawns worker processes
    main()
