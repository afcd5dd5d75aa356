"""The naive reference of `make bench` (issue 10): what a user would write to prove an image generates.

One plain script, run as ``docker run --rm IMAGE python3 naive_generate.py eager|compiled``: it makes the same
tiny model as the smoke suite's ``tiny-model`` check (a random 2-layer Llama, hidden size 128, a byte-level BPE
tokenizer trained on a few sentences) and generates 8 greedy tokens for two prompts with vLLM's defaults
(engine core and worker in their own processes), printing ``NAIVE {"tokens": ..., "seconds": ...}``.
``naive_generate.py model FOLDER`` only writes that model into ``FOLDER``: the naive server
(``tools/bench.py``) serves it with ``docker run IMAGE serve /model``.
It imports only what the image ships (torch, transformers, tokenizers, vLLM); the bench copies nothing else.
"""

import json
import sys
import tempfile
import time


def make_model(out):
    """Save a tiny random Llama and its tokenizer to the folder ``out`` (float32, vocabulary 512)."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    torch.manual_seed(0)
    text = [
        "The quick brown fox jumps over the lazy dog.",
        "vLLM is a fast and easy-to-use library for LLM inference and serving.",
        "Once upon a time there was a small language model running in a container.",
        "Numbers 0 1 2 3 4 5 6 7 8 9 and punctuation , . ; : ! ? are here.",
    ] * 20
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=512,
        special_tokens=["<unk>", "<s>", "</s>", "<pad>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(text, trainer)
    hf = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="<unk>",
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        model_max_length=256,
    )
    hf.save_pretrained(out)
    cfg = LlamaConfig(
        vocab_size=len(hf),
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=256,
        bos_token_id=hf.bos_token_id,
        eos_token_id=hf.eos_token_id,
        pad_token_id=hf.pad_token_id,
        tie_word_embeddings=False,
        torch_dtype="float32",
    )
    LlamaForCausalLM(cfg).to(torch.float32).save_pretrained(out, safe_serialization=True)


def main():
    started = time.monotonic()
    mode = sys.argv[1]
    if mode == "model":
        make_model(sys.argv[2])
        return
    out = tempfile.mkdtemp(prefix="tiny-llama-")
    make_model(out)
    from vllm import LLM, SamplingParams

    llm = LLM(model=out, enforce_eager=mode == "eager", max_model_len=128, dtype="float32", seed=0)
    params = SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True)
    outputs = llm.generate(["The quick brown fox", "Once upon a time"], params)
    tokens = [list(o.outputs[0].token_ids) for o in outputs]
    print("NAIVE " + json.dumps({"mode": mode, "tokens": tokens, "seconds": round(time.monotonic() - started, 1)}))


if __name__ == "__main__":  # vLLM spawns its engine core and worker processes
    main()
