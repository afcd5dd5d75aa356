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


def test_sections_run_from_a_begin_line_through_the_next_end_line() -> None:
    output = "noise\nB one\nout 1\nE {}\nbetween\nB two\nout 2\nE {}\nB one\nagain\n"
    assert markers.sections(output, "B ", "E ") == {
        "one": "B one\nout 1\nE {}\nB one\nagain\n",
        "two": "B two\nout 2\nE {}\n",
    }


def test_a_checks_result_lines_are_read_back_per_check() -> None:
    from matrixtool.incontainer.vllm_smoke import results
    from matrixtool.smoke import result

    passed = results.result_line("a", results.result("passed"))
    failed = results.result_line("b", results.result("failed", "x"))
    output = f"{results.BEGIN_MARK}a\nlog a\n{passed}\n{results.BEGIN_MARK}b\nlog b\n{failed}\ntrailer\n"
    assert result.split_logs(output) == {
        "a": f"{results.BEGIN_MARK}a\nlog a\n{passed}\n",
        "b": f"{results.BEGIN_MARK}b\nlog b\n{failed}\n",
    }
    assert result.parse_output(output, "b") == {
        "status": "failed",
        "diagnosis": "x",
        "hint": None,
        "facts": {},
        "check": "b",
    }
    with pytest.raises(ValueError, match="a result is no object"):
        result.parse_output(f"{results.RESULT_MARK}[1]\n")
    with pytest.raises(ValueError, match="nested too deeply"):
        result.parse_output(results.RESULT_MARK + "[" * 100_000 + "\n")
