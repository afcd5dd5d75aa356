"""An image the engine does not have is one error class for every command that reads a local image (exit 11, "not
built"): `static` said config (3) and `sbom` sbom (16), while `size` and `diff` said 11 (helper "hostile",
2026-12-07)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import docker
import pytest
from click.testing import CliRunner

from matrixtool.cli import main
from matrixtool.core import engine
from matrixtool.core.errors import ExitCode


class _NoImages:
    """A client whose engine holds no image; records whether a container was asked for."""

    def __init__(self) -> None:
        self.containers_asked = False

    class images:
        @staticmethod
        def get(ref: str) -> Any:
            raise docker.errors.ImageNotFound(f"No such image: {ref}")

    @property
    def containers(self) -> Any:
        self.containers_asked = True
        raise AssertionError("a container was asked for an image the engine lacks")


@pytest.mark.parametrize(
    "args",
    [["static", "nosuch/image:1"], ["sbom", "nosuch/image:1", "--as", "cpu"], ["size", "nosuch/image:1"]],
    ids=lambda a: a[0],
)
def test_an_absent_image_is_not_built(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str]) -> None:
    client = _NoImages()
    monkeypatch.setattr(engine, "connect", lambda: client)
    result = CliRunner().invoke(main, ["--out", str(tmp_path / "out"), *args], catch_exceptions=False)
    assert result.exit_code == ExitCode.NOT_BUILT, result.output
    assert result.output == "error: no image 'nosuch/image:1' on this engine; " + result.output.split("; ", 1)[1]
    assert "build" in result.output and "pull" in result.output
    assert not client.containers_asked and not (tmp_path / "out").exists()
