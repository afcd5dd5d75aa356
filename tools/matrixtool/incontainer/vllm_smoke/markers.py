"""The one reader of marker lines (``MATRIX-RESULT {...}``, ``MATRIX-BEGIN check``, a program's ``MATRIX-TORCH
{...}``): lines of a program's output that start with a mark, the part of the output between two marks, and a
marker's JSON payload. The host (``matrixtool.core.markers``) and the in-image code read them alike.

Standard library only, Python >= 3.9."""

from __future__ import annotations

import json
from typing import Any, Iterator, Optional, Tuple


def marked(output: str, mark: str) -> Iterator[Tuple[str, str]]:
    """(line, payload) of each line of ``output`` that starts with ``mark``, in the order printed: ``line`` as
    printed (without its line end), ``payload`` the text after the mark."""
    for line in output.splitlines():
        if line.startswith(mark):
            yield line, line[len(mark) :]


def last(output: str, mark: str) -> Optional[Tuple[str, str]]:
    """(line, payload) of the last line of ``output`` that starts with ``mark`` (a program's result wins over
    earlier ones), else None."""
    for line in reversed(output.splitlines()):
        if line.startswith(mark):
            return line, line[len(mark) :]
    return None


def sections(output: str, begin: str, end: str) -> dict[str, str]:
    """{name: its part of ``output``}: from a line ``begin`` + name through the next line that starts with
    ``end`` (line ends kept); a name begun twice gets both parts, in order."""
    parts: dict[str, str] = {}
    current: str | None = None
    for line in output.splitlines(keepends=True):
        if line.startswith(begin):
            current = line[len(begin) :].strip()
        if current is not None:
            parts[current] = parts.get(current, "") + line
        if line.startswith(end):
            current = None
    return parts


def json_payload(payload: str | bytes) -> Any:
    """A marker's JSON payload. Raises ValueError: not JSON, or nested deeper than the decoder can recurse (the
    standard decoder recurses once per level: ``[[[[…`` 100 000 deep would raise RecursionError)."""
    try:
        return json.loads(payload)
    except RecursionError:
        raise ValueError("JSON nested too deeply to read (past Python's recursion limit)") from None
