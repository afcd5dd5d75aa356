"""The one marker-line reader: payloads in order, the last one, a JSON object or a ValueError."""

from __future__ import annotations

import pytest

from matrixtool.core import markers

OUTPUT = 'noise\nMARK {"a": 1}\n  MARK not at the start\nMARK [1]\nMARK {"a": 2}\ntrailing\n'


def test_marked_lines_in_order() -> None:
    assert [m.payload for m in markers.marked(OUTPUT, "MARK ")] == ['{"a": 1}', "[1]", '{"a": 2}']


def test_last_and_its_object() -> None:
    found = markers.last(OUTPUT, "MARK ")
    assert found is not None and found.line == 'MARK {"a": 2}' and found.json_object() == {"a": 2}
    assert markers.last("nothing here", "MARK ") is None


def test_a_payload_that_is_no_object() -> None:
    lines = list(markers.marked(OUTPUT, "MARK "))
    with pytest.raises(ValueError, match="list, not an object"):
        lines[1].json_object()
    with pytest.raises(ValueError):
        markers.MarkedLine(line="MARK {", payload="{").json_object()
    with pytest.raises(ValueError, match="too deeply"):
        markers.MarkedLine(line="", payload="[" * 200_000).json_object()
