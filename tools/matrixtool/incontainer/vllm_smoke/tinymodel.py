"""The tiny model the vLLM checks run: made once per work folder (``programs/make_model``), read back.

Standard library only at import, Python >= 3.9."""

from __future__ import annotations

import os
from typing import Any, Dict

from .children import MODEL_DIR


def read_model(folder: str) -> Dict[str, Any]:
    """The model in ``folder`` as transformers and safetensors read it: {"vocab_size", "tensors", "tokenizer"}.
    Raises what they raise."""
    from safetensors import safe_open
    from transformers import AutoConfig, AutoTokenizer

    config = AutoConfig.from_pretrained(folder)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    with safe_open(os.path.join(folder, "model.safetensors"), framework="pt") as weights:
        tensors = len(list(weights.keys()))
    return {"vocab_size": config.vocab_size, "tensors": tensors, "tokenizer": type(tokenizer).__name__}


def ensure_model() -> Any:
    """Make the tiny random Llama + locally trained tokenizer once per container; return its folder.

    Interpreters of parallel groups may ask at once: a lock file serialises them, and the model is written to a
    temporary folder that is renamed into place. Raises what making the model raises."""
    import fcntl

    if os.path.isfile(os.path.join(MODEL_DIR, "config.json")):
        return MODEL_DIR
    os.makedirs(os.path.dirname(MODEL_DIR), exist_ok=True)
    # A lock file of another UID (an earlier profile's container, on the same volume) opens for reading only
    # (flock needs no more): a sticky folder refuses to open it for writing.
    # Profile runs side by side ask at once: the other may create it between the look and the open.
    lock_path = MODEL_DIR + ".lock"
    mode = "r" if os.path.exists(lock_path) and os.stat(lock_path).st_uid != os.geteuid() else "w"
    try:
        opened = open(lock_path, mode)  # noqa: SIM115 (closed by the with below)
    except PermissionError:
        opened = open(lock_path)  # noqa: SIM115
    with opened as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not os.path.isfile(os.path.join(MODEL_DIR, "config.json")):
            from .programs import make_model

            partial = f"{MODEL_DIR}.{os.getpid()}"
            make_model.make(partial)
            os.replace(partial, MODEL_DIR)
    return MODEL_DIR
