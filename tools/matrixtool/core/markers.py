"""The one reader of the marker lines the in-image programs print (``incontainer.vllm_smoke.markers``, which the
in-image code reads them with too), as values; everything else is the program's own output (the image prints it,
so nothing here trusts it)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from matrixtool.incontainer.vllm_smoke import markers


@dataclass(frozen=True, kw_only=True)
class MarkedLine:
    """One marker line: ``line`` as printed (without its line end) and ``payload``, the text after the marker."""

    line: str
    payload: str

    def json_object(self) -> dict[str, Any]:
        """Raises ValueError: not JSON, or JSON of another type than an object."""
        data = markers.json_payload(self.payload)
        if not isinstance(data, dict):
            raise ValueError(f"a {type(data).__name__}, not an object")
        return data


def marked(output: str, mark: str) -> Iterator[MarkedLine]:
    """The lines of ``output`` that start with ``mark``, in the order printed."""
    for line, payload in markers.marked(output, mark):
        yield MarkedLine(line=line, payload=payload)


def last(output: str, mark: str) -> MarkedLine | None:
    """The last line of ``output`` that starts with ``mark`` (a program's result wins over earlier ones), else
    None."""
    found = markers.last(output, mark)
    return MarkedLine(line=found[0], payload=found[1]) if found else None


def sections(output: str, begin: str, end: str) -> dict[str, str]:
    """{name: its part of ``output``}: from a line ``begin`` + name through the next line that starts with
    ``end`` (line ends kept); a name begun twice gets both parts, in order."""
    return markers.sections(output, begin, end)
