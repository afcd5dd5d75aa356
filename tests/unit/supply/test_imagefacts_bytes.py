"""imagefacts' installed bytes per distribution (the size report's source): RECORD files plus their bytecode, each
file counted once."""

from __future__ import annotations

import importlib
import importlib.util
import os
from pathlib import Path
from types import ModuleType

# Untyped (it runs in images on Python >= 3.9): reached as a module value, as tests/unit/_incontainer.py does.
imagefacts: ModuleType = importlib.import_module("matrixtool.incontainer.imagefacts")


class _Dist:
    """The part of importlib.metadata.Distribution that ``installed_bytes`` reads."""

    def __init__(self, root: Path, files: list[str] | None) -> None:
        self.root = root
        self.files = files

    def locate_file(self, entry: str) -> Path:
        return self.root / entry


def test_installed_bytes_count_record_files_and_their_bytecode_once(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "mod.py").write_bytes(b"x" * 100)
    (tmp_path / "pkg" / "lib.so").write_bytes(b"y" * 1000)
    pyc = Path(importlib.util.cache_from_source(str(tmp_path / "pkg" / "mod.py")))
    pyc.parent.mkdir()
    pyc.write_bytes(b"z" * 10)
    seen: set[str] = set()
    dist = _Dist(tmp_path, ["pkg/mod.py", "pkg/lib.so", "pkg/missing.py", "pkg-1.dist-info/RECORD"])
    assert imagefacts.installed_bytes(dist, seen) == 1110
    assert os.path.realpath(pyc) in {os.path.realpath(p) for p in seen}
    # A second distribution that lists the same file adds nothing for it.
    assert imagefacts.installed_bytes(_Dist(tmp_path, ["pkg/lib.so"]), seen) == 0


def test_installed_bytes_without_record(tmp_path: Path) -> None:
    assert imagefacts.installed_bytes(_Dist(tmp_path, None), set()) is None
