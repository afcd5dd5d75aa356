"""``tools/matrix size``: the matrix file is read before any container starts (a bad one is exit 3, no container)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from matrixtool.cli import main
from matrixtool.commands import size
from matrixtool.core import engine
from matrixtool.core.errors import ConfigError, ExitCode


class _Image:
    id = "sha256:1"

    def __init__(self, labels: dict[str, str]) -> None:
        self.attrs = {"Config": {"Labels": labels}, "Size": 1}

    def history(self) -> list[dict[str, Any]]:
        return []


class _Client:
    """One image with ``labels``; a container run is recorded and refused (the test fails by it)."""

    def __init__(self, labels: dict[str, str]) -> None:
        self.image = _Image(labels)
        self.images, self.containers = self, self
        self.runs: list[dict[str, Any]] = []

    def get(self, ref: str) -> _Image:
        return self.image

    def run(self, **kwargs: Any) -> Any:
        self.runs.append(kwargs)
        raise AssertionError("a container started before the matrix file was read")


def test_a_bad_matrix_file_fails_before_the_engine_is_asked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text("variants: [unclosed\n")
    asked: list[bool] = []
    monkeypatch.setattr(engine, "connect", lambda: asked.append(True))
    result = CliRunner().invoke(main, ["--matrix", str(matrix), "size", "vllm-matrix/cpu:1"], catch_exceptions=False)
    assert result.exit_code == ExitCode.CONFIG and str(matrix) in result.output, result.output
    assert "Traceback" not in result.output and asked == []


def test_an_absent_matrix_file_fails_before_a_container_when_the_image_names_a_variant(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = _Client({size.VARIANT_LABEL: "cpu"})
    monkeypatch.setattr(engine, "connect", lambda: client)
    with pytest.raises(ConfigError, match=r"missing\.yaml"):
        size.run(size.Args(image="vllm-matrix/cpu:1"), tmp_path / "missing.yaml")
    assert client.runs == []
