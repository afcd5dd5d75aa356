"""The one atomic write: bytes too, whole or not at all, a failure is exit 3 naming the file."""

from __future__ import annotations

from pathlib import Path

import pytest

from matrixtool.core import outputs
from matrixtool.core.errors import ExitCode, OutputError


def test_write_bytes_replaces_whole(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "a.bin"
    assert outputs.write_bytes(path, b"\x00\x01") == path
    assert path.read_bytes() == b"\x00\x01" and oct(path.stat().st_mode & 0o777) == "0o644"
    outputs.write_bytes(path, b"new")
    assert path.read_bytes() == b"new" and [p.name for p in path.parent.iterdir()] == ["a.bin"]


def test_write_bytes_failure_names_the_file(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(OutputError) as caught:
        outputs.write_bytes(blocker / "a.bin", b"data")
    assert caught.value.exit_code == ExitCode.CONFIG and str(blocker) in str(caught.value)
