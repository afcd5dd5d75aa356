"""JSON from outside the tool, every malformation one ``ValueError``: the standard decoder recurses once per
nesting level, so ``[[[[…`` 100 000 deep (a few hundred kB) would raise ``RecursionError`` (exit 1)."""

from __future__ import annotations

import json
from typing import Any


def loads(text: str | bytes) -> Any:
    """Raises ValueError: not JSON, or nested deeper than the decoder can recurse."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("JSON nested too deeply to read (past Python's recursion limit)") from None
