"""JSON from outside the tool (a user's file, a record, an image's or a server's output), parsed so that every way
it can be malformed is one ``ValueError``.

The standard library's decoder recurses once per nested array or object: a document nested past Python's
recursion limit (``[[[[…`` 100 000 deep, a few hundred kB) raises ``RecursionError``, which no caller expects
from a parse and which would end the tool as an unexpected error (exit 1).
"""

from __future__ import annotations

import json
from typing import Any


def loads(text: str | bytes) -> Any:
    """``json.loads(text)``.

    Raises:
        ValueError: ``text`` is not JSON (``json.JSONDecodeError``), or it is nested deeper than the decoder can
            recurse (``RecursionError`` becomes a ``ValueError`` saying so).
    """
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("JSON nested too deeply to read (past Python's recursion limit)") from None
