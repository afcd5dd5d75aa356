"""templates/slim.py, the in-image step that strips debug sections and compiles bytecode (stdlib only)."""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import shutil
import subprocess
from pathlib import Path
from types import ModuleType

import pytest

from matrixtool.model.model import REPO_ROOT


def _slim() -> ModuleType:
    spec = importlib.util.spec_from_file_location("slim", REPO_ROOT / "templates" / "slim.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def test_strippable_bytes_of_files_that_are_not_elf(tmp_path: Path) -> None:
    slim = _slim()
    (tmp_path / "text.so").write_bytes(b"not an ELF file at all" * 10)
    (tmp_path / "short.so").write_bytes(b"\x7fELF")
    assert slim.strippable_bytes(str(tmp_path / "text.so")) == 0
    assert slim.strippable_bytes(str(tmp_path / "short.so")) == 0
    assert slim.strippable_bytes(str(tmp_path / "missing.so")) == 0


@pytest.mark.subprocess
@pytest.mark.skipif(shutil.which("cc") is None or shutil.which("strip") is None, reason="needs cc and strip")
def test_strip_record_strips_debug_sections_and_symbols_and_rewrites_record(tmp_path: Path) -> None:
    slim = _slim()
    site = tmp_path / "site"
    (site / "pkg").mkdir(parents=True)
    (site / "pkg-1.0.dist-info").mkdir()
    source = tmp_path / "m.c"
    source.write_text("int answer(void) { return 42; }\n")
    so = site / "pkg" / "_m.so"
    subprocess.run(["cc", "-g", "-shared", "-fPIC", "-o", str(so), str(source)], check=True)
    other = site / "pkg" / "_other.so"
    shutil.copy(so, other)
    record = site / "pkg-1.0.dist-info" / "RECORD"
    data = so.read_bytes()
    # _other.so's row does not match its file (another distribution overwrote it): it is left alone.
    record.write_text(f"pkg/_m.so,{_hash(data)},{len(data)}\npkg/_other.so,sha256=abc,1\npkg-1.0.dist-info/RECORD,,\n")
    assert slim.strippable_bytes(str(so)) > 0
    saved = slim.strip_record(str(site), record)
    stripped = so.read_bytes()
    assert saved == len(data) - len(stripped) > 0
    assert slim.strippable_bytes(str(so)) == 0
    assert record.read_text().splitlines() == [
        f"pkg/_m.so,{_hash(stripped)},{len(stripped)}",
        "pkg/_other.so,sha256=abc,1",
        "pkg-1.0.dist-info/RECORD,,",
    ]
    assert other.read_bytes() == data
    # A second pass finds nothing left to strip and rewrites nothing.
    assert slim.strip_record(str(site), record) == 0


def test_main_refuses_a_missing_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _slim().main(["slim.py", str(tmp_path / "nowhere")]) == 2
    assert "usage" in capsys.readouterr().err


@pytest.mark.subprocess
@pytest.mark.skipif(shutil.which("strip") is None, reason="needs strip")
def test_main_compiles_bytecode_and_keeps_what_does_not_compile(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "mod.py").write_text("X = 1\n")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_mod.py").write_text("X = 2\n")
    (tmp_path / "broken.py").write_text("def f(:\n")
    assert _slim().main(["slim.py", str(tmp_path), "mod==1"]) == 0
    assert list((tmp_path / "__pycache__").glob("mod.*.pyc"))
    assert not list((tmp_path / "__pycache__").glob("broken.*.pyc"))
    assert not (tmp_path / "tests" / "__pycache__").exists()
    assert (tmp_path / "broken.py").exists()
    out = capsys.readouterr().out
    assert "some files did not compile" in out and "slim (mod==1): bytecode:" in out


def _elf_with_load(path: Path, offset: int, vaddr: int, align: int, filesz: int = 16) -> None:
    """A minimal 64-bit little-endian ELF header and one PT_LOAD program header, padded to 4 KiB."""
    import struct

    head = bytearray(64)
    head[:6] = b"\x7fELF\x02\x01"
    struct.pack_into("<Q", head, 0x20, 64)  # e_phoff
    struct.pack_into("<HH", head, 0x36, 56, 1)  # e_phentsize, e_phnum
    phdr = struct.pack("<IIQQQQQQ", 1, 5, offset, vaddr, vaddr, filesz, filesz, align)
    path.write_bytes(bytes(head) + phdr + b"\0" * (4096 - 64 - 56))


def test_loads_aligned_refuses_what_the_loader_refuses(tmp_path: Path) -> None:
    slim = _slim()
    _elf_with_load(tmp_path / "good.so", offset=0x100, vaddr=0x200100, align=0x200000)
    assert slim.loads_aligned(str(tmp_path / "good.so"))
    # p_vaddr - p_offset not a multiple of the page: "ELF load command address/offset not page-aligned".
    _elf_with_load(tmp_path / "bad.so", offset=0x1008, vaddr=0x201000, align=0x1000)
    assert not slim.loads_aligned(str(tmp_path / "bad.so"))
    # A segment that ends past the file.
    _elf_with_load(tmp_path / "short.so", offset=0, vaddr=0, align=0x1000, filesz=1 << 20)
    assert not slim.loads_aligned(str(tmp_path / "short.so"))
    assert not slim.loads_aligned(str(tmp_path / "missing.so"))
