"""Surgical YAML edits that keep everything else of matrix.yaml."""

from __future__ import annotations

import pytest
import yaml

from matrixtool.update import yamltext


def test_yaml_edits_keep_everything_else() -> None:
    text = (
        "# head comment\nvariants:\n  cpu:\n    # a comment\n    torch: {package: torch, version: 2.13.0+cpu}\n"
        '    python: "3.11"\n    triton: absent  # why\n    index:\n      url: https://x/simple\n'
        "      wheelhouse: false\n    env: {}\n"
    )
    edits = [
        yamltext.ScalarEdit(path=("variants", "cpu", "torch", "version"), value="2.14.0+cpu"),
        yamltext.ScalarEdit(path=("variants", "cpu", "python"), value="3.12"),
        yamltext.ScalarEdit(path=("variants", "cpu", "index", "wheelhouse"), value=True),
        yamltext.ScalarEdit(path=("variants", "cpu", "triton_distribution"), value="triton", after="triton"),
        yamltext.ScalarEdit(path=("variants", "cpu", "torch", "extra"), value="yes"),
    ]
    out = yamltext.apply_edits(text, edits)
    assert out == (
        "# head comment\nvariants:\n  cpu:\n    # a comment\n"
        '    torch: {package: torch, version: 2.14.0+cpu, extra: "yes"}\n'
        '    python: "3.12"\n    triton: absent  # why\n    triton_distribution: triton\n    index:\n'
        "      url: https://x/simple\n      wheelhouse: true\n    env: {}\n"
    )
    assert yaml.safe_load(out)["variants"]["cpu"]["torch"]["extra"] == "yes"
    with pytest.raises(KeyError):
        yamltext.apply_edit(text, yamltext.ScalarEdit(path=("variants", "gpu", "python"), value="3.12"))


def test_yaml_edits_append_to_sequences_and_set_items() -> None:
    text = (
        "v:\n  a:\n    exclude:\n      - triton   # why\n      - tv\n    overrides: ['torch==1', x]\n"
        "  b: {exclude: [q]}\n  c: {url: u}\n"
    )

    def add(path: tuple[str, ...], value: str) -> str:
        return yamltext.apply_edit(text, yamltext.ScalarEdit(path=path, value=value, append=True))

    assert add(("v", "a", "exclude"), "xg") == text.replace("      - tv\n", "      - tv\n      - xg\n")
    assert add(("v", "b", "exclude"), "xg") == text.replace("[q]", "[q, xg]")
    assert add(("v", "c", "exclude"), "xg") == text.replace("{url: u}", "{url: u, exclude: [xg]}")
    assert add(("v", "a", "exclude"), "tv") == text  # there already
    item = yamltext.ScalarEdit(path=("v", "a", "overrides", "0"), value="torch==2")
    assert yamltext.apply_edit(text, item) == text.replace("'torch==1'", "'torch==2'")
    with pytest.raises(KeyError, match="not a sequence"):
        add(("v", "c", "url"), "xg")
