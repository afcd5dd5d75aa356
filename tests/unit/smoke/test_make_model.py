"""The tiny model's weights file, written with the standard library (``programs/make_model.py``): the safetensors
layout (header length, JSON header, contiguous little-endian float32 data) vLLM and transformers read."""

from __future__ import annotations

import json
import struct
from array import array

from matrixtool.incontainer.vllm_smoke.programs import make_model


def test_the_weights_are_a_safetensors_file_of_the_llama_tensors() -> None:
    data = make_model.safetensors_bytes(399)
    (length,) = struct.unpack("<Q", data[:8])
    assert length % 8 == 0, "the data starts 8-byte aligned"
    header = json.loads(data[8 : 8 + length])
    assert header.pop("__metadata__") == {"format": "pt"}
    body = data[8 + length :]
    assert len(header) == 3 + 9 * make_model.LAYERS and "lm_head.weight" in header
    offset = 0
    for name, shape in make_model.shapes(399):
        entry = header[name]
        assert entry["dtype"] == "F32" and entry["shape"] == shape
        count = shape[0] * (shape[1] if len(shape) > 1 else 1)
        assert entry["data_offsets"] == [offset, offset + 4 * count], name
        values = array("f", body[offset : offset + 4 * count])
        if name.endswith("norm.weight"):
            assert set(values) == {1.0}, name
        else:
            mean = sum(values) / count
            std = (sum((v - mean) ** 2 for v in values) / count) ** 0.5
            assert abs(mean) < 0.005 and 0.015 < std < 0.025, (name, mean, std)
        offset += 4 * count
    assert offset == len(body)
    assert make_model.safetensors_bytes(399) == data, "the same seed gives the same bytes"
    assert make_model.safetensors_bytes(399, seed=1) != data


def test_the_config_names_the_special_tokens_and_the_shape() -> None:
    config = make_model.config(399, {"<s>": 1, "</s>": 2, "<pad>": 3})
    assert config["architectures"] == ["LlamaForCausalLM"] and config["model_type"] == "llama"
    assert (config["bos_token_id"], config["eos_token_id"], config["pad_token_id"]) == (1, 2, 3)
    assert config["head_dim"] * config["num_attention_heads"] == config["hidden_size"] == make_model.HIDDEN
    assert config["vocab_size"] == 399 and config["tie_word_embeddings"] is False
