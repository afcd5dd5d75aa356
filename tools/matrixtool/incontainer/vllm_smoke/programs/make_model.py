"""Make a tiny random Llama and a locally trained tokenizer in the folder ``argv[1]`` (no hub access).

Written with the standard library and ``tokenizers`` alone (no torch, no transformers: the model is made in well
under a second, where importing torch and transformers takes tens of seconds on 2 busy cores): the files
``save_pretrained`` of transformers writes for a ``LlamaForCausalLM`` and a ``PreTrainedTokenizerFast``, weights
as its initialisation draws them (normal, std ``initializer_range``; norms ones). The checks that load it
(tiny-model, model-runner, offline-generate, serve) read it with transformers, safetensors and vLLM.

Imported by the tiny-model check (``make(folder)``) in a shared interpreter, or run as a script.
"""

import json
import os
import random
import struct
import sys
from array import array
from typing import Any, Dict

# A minimal chat template (Jinja, Hugging Face's `chat_template`): what `vllm serve` needs to answer
# /v1/chat/completions; a model without one gets 400 from the chat route.
CHAT_TEMPLATE = (
    "{% for message in messages %}{{ message['role'] }}: {{ message['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}"
)
SPECIAL = ["<unk>", "<s>", "</s>", "<pad>"]
HIDDEN, INTERMEDIATE, LAYERS, HEADS = 128, 256, 2, 2  # head_dim 64: vLLM's CPU attention rejects head_dim 16
INITIALIZER_RANGE = 0.02


def tokenizer() -> Any:
    """A byte-level BPE tokenizer (``tokenizers``), trained on a few sentences: vocabulary of at most 512."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    text = [
        "The quick brown fox jumps over the lazy dog.",
        "vLLM is a fast and easy-to-use library for LLM inference and serving.",
        "Once upon a time there was a small language model running in a container.",
        "Numbers 0 1 2 3 4 5 6 7 8 9 and punctuation , . ; : ! ? are here.",
    ] * 20
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    # What transformers' save_pretrained adds: a template that adds no special token.
    tok.post_processor = processors.TemplateProcessing(single="$A", pair="$A:0 $B:1", special_tokens=[])
    tok.train_from_iterator(
        text,
        trainers.BpeTrainer(
            vocab_size=512, special_tokens=SPECIAL, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
        ),
    )
    return tok


def config(vocab_size: int, ids: Any) -> Dict[str, Any]:
    """config.json of the 2-layer Llama (hidden 128), float32; ``ids``: the special tokens' ids by name."""
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": ids["<s>"],
        "eos_token_id": ids["</s>"],
        "pad_token_id": ids["<pad>"],
        "head_dim": HIDDEN // HEADS,
        "hidden_act": "silu",
        "hidden_size": HIDDEN,
        "initializer_range": INITIALIZER_RANGE,
        "intermediate_size": INTERMEDIATE,
        "max_position_embeddings": 256,
        "mlp_bias": False,
        "num_attention_heads": HEADS,
        "num_hidden_layers": LAYERS,
        "num_key_value_heads": HEADS,
        "pretraining_tp": 1,
        "rms_norm_eps": 1e-06,
        "rope_theta": 10000.0,
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
        "dtype": "float32",
        "use_cache": True,
        "vocab_size": vocab_size,
    }


def shapes(vocab_size: int) -> Any:
    """Each tensor's name and shape ([out, in] for a linear layer), in the order they are drawn."""
    out = [("model.embed_tokens.weight", [vocab_size, HIDDEN])]
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        out += [
            (p + "self_attn.q_proj.weight", [HIDDEN, HIDDEN]),
            (p + "self_attn.k_proj.weight", [HIDDEN, HIDDEN]),
            (p + "self_attn.v_proj.weight", [HIDDEN, HIDDEN]),
            (p + "self_attn.o_proj.weight", [HIDDEN, HIDDEN]),
            (p + "mlp.gate_proj.weight", [INTERMEDIATE, HIDDEN]),
            (p + "mlp.up_proj.weight", [INTERMEDIATE, HIDDEN]),
            (p + "mlp.down_proj.weight", [HIDDEN, INTERMEDIATE]),
            (p + "input_layernorm.weight", [HIDDEN]),
            (p + "post_attention_layernorm.weight", [HIDDEN]),
        ]
    return out + [("model.norm.weight", [HIDDEN]), ("lm_head.weight", [vocab_size, HIDDEN])]


# The weights' seed: greedy generation of both prompts of offline-generate gives 7 and 8 distinct tokens with it
# (transformers 5.19, float32), so eager == compiled and serve == offline-generate compare varied output; seed 0
# gives one token repeated for the first prompt.
SEED = 6


def safetensors_bytes(vocab_size: int, seed: int = SEED) -> bytes:
    """The weights as a safetensors file (an 8-byte little-endian header length, the JSON header, the data):
    float32, little-endian; norms ones, every other tensor normal(0, ``INITIALIZER_RANGE``) from ``seed``."""
    rng = random.Random(seed)
    header: Dict[str, Any] = {"__metadata__": {"format": "pt"}}
    chunks = []
    offset = 0
    for name, shape in shapes(vocab_size):
        count = shape[0] * (shape[1] if len(shape) > 1 else 1)
        if name.endswith("norm.weight"):
            values = array("f", [1.0]) * count
        else:
            values = array("f", [rng.gauss(0.0, INITIALIZER_RANGE) for _ in range(count)])
        if sys.byteorder == "big":
            values.byteswap()
        data = values.tobytes()
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        chunks.append(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned, as safetensors writes it
    return struct.pack("<Q", len(text)) + text + b"".join(chunks)


def make(out: Any) -> None:
    """Write config.json, generation_config.json, model.safetensors and the tokenizer's files (tokenizer.json,
    tokenizer_config.json with ``CHAT_TEMPLATE``) of the 2-layer Llama (hidden 128) into ``out``, each readable
    by any user (a server of another UID reads the folder)."""
    tok = tokenizer()
    ids = {name: tok.token_to_id(name) for name in SPECIAL}
    vocab_size = tok.get_vocab_size()
    os.makedirs(out, exist_ok=True)
    tok.save(os.path.join(out, "tokenizer.json"))
    tokenizer_config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<s>",
        "eos_token": "</s>",
        "unk_token": "<unk>",
        "pad_token": "<pad>",
        "model_max_length": 256,
        "chat_template": CHAT_TEMPLATE,
    }
    generation = {"bos_token_id": ids["<s>"], "eos_token_id": ids["</s>"], "pad_token_id": ids["<pad>"]}
    files = {
        "config.json": json.dumps(config(vocab_size, ids), indent=2).encode(),
        "generation_config.json": json.dumps(generation, indent=2).encode(),
        "tokenizer_config.json": json.dumps(tokenizer_config, indent=2).encode(),
        "model.safetensors": safetensors_bytes(vocab_size),
    }
    for name, data in files.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)
    for name in os.listdir(out):
        os.chmod(os.path.join(out, name), 0o644)
    # The folder itself only where this user made it: a folder mounted from the host (owned by root, mode 0777
    # for any writer) cannot be chmod-ed by another UID (EPERM), and is readable already.
    if os.stat(out).st_uid == os.geteuid():
        os.chmod(out, 0o755)


if __name__ == "__main__":
    make(sys.argv[1])
