"""The one reader of the marker lines the in-image programs print; everything else is the program's own output
(the image prints it, so nothing here trusts it)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from matrixtool.core import jsontext


@dataclass(frozen=True, kw_only=True)
class MarkedLine:
    """One marker line: ``line`` as printed (without its line end) and ``payload``, the text after the marker."""

    line: str
    payload: str

    def json_object(self) -> dict[str, Any]:
        """Raises ValueError: not JSON, or JSON of another type than an object."""
        data = jsontext.loads(self.payload)
        if not isinstance(data, dict):
            raise ValueError(f"a {type(data).__name__}, not an object")
        return data


def marked(output: str, mark: str) -> Iterator[MarkedLine]:
    """The lines of ``output`` that start with ``mark``, in the order printed."""
    for line in output.splitlines():
        if line.startswith(mark):
            yield MarkedLine(line=line, payload=line[len(mark) :])


def last(output: str, mark: str) -> MarkedLine | None:
    """The last line of ``output`` that starts with ``mark`` (a program's result wins over earlier ones), else
    None."""
    for line in reversed(output.splitlines()):
        if line.startswith(mark):
            return MarkedLine(line=line, payload=line[len(mark) :])
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
