"""Make a tiny random Llama and a locally trained tokenizer in the folder ``argv[1]`` (no hub access).

Imported by the tiny-model check (``make(folder)``) in a shared interpreter, or run as a script.
"""

import os
import sys

# A minimal chat template (Jinja, Hugging Face's `chat_template`): what `vllm serve` needs to answer
# /v1/chat/completions; a model without one gets 400 from the chat route.
CHAT_TEMPLATE = (
    "{% for message in messages %}{{ message['role'] }}: {{ message['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}"
)


def make(out):
    """Write config, safetensors weights and tokenizer files (with ``CHAT_TEMPLATE``) of a 2-layer Llama (hidden 128)
    into ``out``."""
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
    tok.train_from_iterator(
        text,
        trainers.BpeTrainer(
            vocab_size=512,
            special_tokens=["<unk>", "<s>", "</s>", "<pad>"],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        ),
    )
    hf = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="<unk>",
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        model_max_length=256,
    )
    hf.chat_template = CHAT_TEMPLATE
    hf.save_pretrained(out)
    # head_dim 64 (128 / 2 heads): vLLM's CPU attention backend rejects head_dim 16.
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
    # safetensors writes its file mode 0600: a server of another UID (the model mounted read-only into it)
    # would read "No such file or directory" for it. A model folder is for reading by any user.
    for name in os.listdir(out):
        os.chmod(os.path.join(out, name), 0o644)
    # The folder itself only where this user made it: a folder mounted from the host (owned by root, mode 0777
    # for any writer) cannot be chmod-ed by another UID (EPERM), and is readable already.
    if os.stat(out).st_uid == os.geteuid():
        os.chmod(out, 0o755)


if __name__ == "__main__":
    make(sys.argv[1])
