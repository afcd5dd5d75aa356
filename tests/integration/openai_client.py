"""The official ``openai`` client against a server the serve check started (``MATRIX_SERVE_CLIENT``).

``python openai_client.py BASE_URL``: a completion, a chat and a streamed completion through the client's own
types; prints ``MATRIX-OPENAI {json}`` and exits 0, or raises (non-zero: the serve check fails with the output).
"""

from __future__ import annotations

import json
import sys

import openai

MODEL = "/models/tiny-llama"
PROMPT = "The quick brown fox"


def main(base: str) -> int:
    """Run the three calls against ``base`` (``http://127.0.0.1:PORT``)."""
    client = openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0, timeout=120)
    models = [m.id for m in client.models.list()]
    completion = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=8, temperature=0)
    chat = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": PROMPT}], max_tokens=8, temperature=0
    )
    streamed = "".join(
        chunk.choices[0].text
        for chunk in client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=8, temperature=0, stream=True)
        if chunk.choices
    )
    out = {
        "models": models,
        "completion": completion.choices[0].text,
        "completion_tokens": completion.usage.completion_tokens if completion.usage else None,
        "chat": chat.choices[0].message.content,
        "streamed": streamed,
    }
    print("MATRIX-OPENAI " + json.dumps(out))
    assert MODEL in models, models
    assert out["completion_tokens"] == 8, out
    assert out["chat"], out
    assert streamed == out["completion"], out
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
