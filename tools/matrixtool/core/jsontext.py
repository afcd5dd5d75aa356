"""JSON from outside the tool, every malformation one ``ValueError``: the standard decoder recurses once per
nesting level, so ``[[[[…`` 100 000 deep (a few hundred kB) would raise ``RecursionError`` (exit 1). The one
definition is the in-image package's (``markers.json_payload``): the bundle reads its results the same way."""

from __future__ import annotations

from typing import Any

from matrixtool.incontainer.vllm_smoke import markers


def loads(text: str | bytes) -> Any:
    """Raises ValueError: not JSON, or nested deeper than the decoder can recurse."""
    return markers.json_payload(text)
