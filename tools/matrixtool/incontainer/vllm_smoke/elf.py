"""A reader of ELF files, enough for the GPU checks: the libraries a shared object needs (``DT_NEEDED``), a
section's bytes, and the GPU architectures of the CUDA fatbinary a library carries (``.nv_fatbin``).

Standard library only, Python >= 3.9: the ELF format (System V ABI) and NVIDIA's fatbinary header read with
``struct``; no ``readelf`` or ``cuobjdump`` needed in the image."""

from __future__ import annotations

import struct
from typing import Any, Dict, List, Set, Tuple

_DT_NEEDED, _DT_STRTAB, _SHT_DYNAMIC = 1, 5, 6


def _sections(data: Any, wide: bool, order: str) -> List[Tuple[int, int, int, int, int]]:
    """The section headers of the ELF image ``data`` as (type, offset, size, link, entsize), 64- or 32-bit
    (``wide``) in byte order ``order``. Raises struct.error for a header table past the end of ``data``."""
    if wide:
        (shoff,) = struct.unpack_from(order + "Q", data, 0x28)
        shentsize, shnum = struct.unpack_from(order + "HH", data, 0x3A)
    else:
        (shoff,) = struct.unpack_from(order + "I", data, 0x20)
        shentsize, shnum = struct.unpack_from(order + "HH", data, 0x2E)
    fmt = order + ("IIQQQQIIQQ" if wide else "IIIIIIIIII")
    sections = []
    for i in range(shnum):
        _, stype, _, _, offset, size, link, _, _, entsize = struct.unpack_from(fmt, data, shoff + i * shentsize)
        sections.append((stype, offset, size, link, entsize))
    return sections


def elf_needed(path: str) -> Any:
    """The DT_NEEDED entries (sonames) of the ELF shared object ``path``, read from its ``.dynamic`` section and
    the string table it links to (64- and 32-bit, either byte order). Raises OSError for an unreadable file,
    ValueError for a file that is no ELF object or is cut short."""

    with open(path, "rb") as f:
        data = f.read()
    if data[:4] != b"\x7fELF":
        raise ValueError(f"{path} is no ELF file")
    wide, order = data[4] == 2, "<" if data[5] == 1 else ">"
    try:
        sections = _sections(data, wide, order)
        needed = []
        for stype, offset, size, link, entsize in sections:
            if stype != _SHT_DYNAMIC:
                continue
            _, str_off, str_size, _, _ = sections[link]
            fmt = order + ("qQ" if wide else "iI")
            step = entsize or struct.calcsize(fmt)
            for pos in range(offset, offset + size, step):
                tag, value = struct.unpack_from(fmt, data, pos)
                if tag == 0:
                    break
                if tag == _DT_NEEDED and value < str_size:
                    end = data.index(b"\0", str_off + value)
                    needed.append(data[str_off + value : end].decode("utf-8", "replace"))
        return needed
    except (struct.error, IndexError) as exc:
        raise ValueError(f"{path}: a cut-short ELF file ({exc})") from exc


_FATBIN_MAGIC = 0xBA55ED50


_FATBIN_PTX, _FATBIN_ELF = 1, 2


def elf_section(path: str, name: str) -> Any:
    """(offset, size) of the section ``name`` (``.nv_fatbin``) of the ELF file ``path`` (64-bit little-endian,
    as every Linux x86-64 and arm64 object), read from its section headers only; None where it has none or is no
    such ELF file. Raises OSError for an unreadable file."""

    with open(path, "rb") as f:
        head = f.read(64)
        if head[:4] != b"\x7fELF" or head[4] != 2 or head[5] != 1:
            return None
        shoff = struct.unpack_from("<Q", head, 0x28)[0]
        shentsize, shnum, shstrndx = struct.unpack_from("<HHH", head, 0x3A)
        f.seek(shoff)
        table = f.read(shentsize * shnum)
        if len(table) < shentsize * shnum or shstrndx >= shnum:
            return None
        headers = [struct.unpack_from("<IIQQQQIIQQ", table, i * shentsize) for i in range(shnum)]
        str_off, str_size = headers[shstrndx][4], headers[shstrndx][5]
        f.seek(str_off)
        names = f.read(str_size)
    wanted = name.encode()
    for h in headers:
        end = names.find(b"\0", h[0])
        if names[h[0] : end if end >= 0 else None] == wanted:
            return h[4], h[5]
    return None


def fatbin_archs(f: Any, start: int = 0, end: Any = None) -> Dict[str, Any]:
    """``{"sass": [...], "ptx": [...]}``: the ``sm_XY`` of each cubin and PTX entry of the CUDA fat binaries
    between ``start`` and ``end`` of the open binary file ``f`` (an ELF object's ``.nv_fatbin`` section). Each fat
    binary: a 16-byte header (magic 0xBA55ED50, version, header size, payload size), then entries of a header
    (kind 1 PTX / 2 ELF, header size, payload size at 8, the arch at 28) and their payload, which is skipped
    (only headers are read: vLLM's _C is hundreds of MB). Pure but for reading ``f``."""

    if end is None:
        f.seek(0, 2)
        end = f.tell()
    sass: Set[str] = set()
    ptx: Set[str] = set()
    pos = start
    while pos + 16 <= end:
        f.seek(pos)
        header = f.read(16)
        magic, _, header_size, fat_size = struct.unpack("<IHHQ", header)
        if magic != _FATBIN_MAGIC:  # padding between fat binaries: look for the next one, 8-byte aligned
            pos += 8
            continue
        entry, stop = pos + header_size, min(end, pos + header_size + fat_size)
        while entry + 32 <= stop:
            f.seek(entry)
            kind, _, entry_header, payload = struct.unpack("<HHIQ", f.read(16))
            f.seek(entry + 28)
            arch = struct.unpack("<I", f.read(4))[0]
            if entry_header < 32 or kind not in (_FATBIN_PTX, _FATBIN_ELF):
                break
            (sass if kind == _FATBIN_ELF else ptx).add(arch)
            entry += entry_header + payload
        pos = max(stop, pos + 16)
    return {"sass": [f"sm_{a}" for a in sorted(sass)], "ptx": [f"sm_{a}" for a in sorted(ptx)]}


_DT_SONAME, _SHT_DYNSYM = 14, 11


def elf_exports(path: str) -> Any:
    """(soname, names): the ``DT_SONAME`` of the ELF shared object ``path`` (None where it has none) and the names
    of the symbols its ``.dynsym`` defines (what ``dlsym`` finds in it; undefined imports left out). 64- and
    32-bit, either byte order; the file is mapped, not read (NVIDIA's libcuda is some 100 MB). Raises OSError for an
    unreadable file, ValueError for a file that is no ELF object or is cut short."""
    import mmap

    with open(path, "rb") as f:
        try:
            data: Any = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except ValueError as exc:  # an empty file
            raise ValueError(f"{path} is no ELF file ({exc})") from None
    try:
        if data[:4] != b"\x7fELF":
            raise ValueError(f"{path} is no ELF file")
        return _exports(path, data)
    finally:
        data.close()


def _cstring(data: Any, at: int) -> str:
    end = data.find(b"\0", at)
    return bytes(data[at : end if end >= 0 else len(data)]).decode("utf-8", "replace")


def _exports(path: str, data: Any) -> Any:
    wide, order = data[4] == 2, "<" if data[5] == 1 else ">"
    try:
        sections = _sections(data, wide, order)
        soname, names = None, set()
        for stype, offset, size, link, entsize in sections:
            if stype == _SHT_DYNAMIC:
                str_off = sections[link][1]
                fmt = order + ("qQ" if wide else "iI")
                for pos in range(offset, offset + size, entsize or struct.calcsize(fmt)):
                    tag, value = struct.unpack_from(fmt, data, pos)
                    if tag == 0:
                        break
                    if tag == _DT_SONAME:
                        soname = _cstring(data, str_off + value)
            elif stype == _SHT_DYNSYM:
                str_off = sections[link][1]
                step = entsize or (24 if wide else 16)
                for pos in range(offset + step, offset + size, step):  # entry 0 is the null symbol
                    if wide:
                        name, _, _, shndx = struct.unpack_from(order + "IBBH", data, pos)
                    else:
                        name, _, _, _, _, shndx = struct.unpack_from(order + "IIIBBH", data, pos)
                    if shndx != 0 and name:
                        names.add(_cstring(data, str_off + name))
        return soname, names
    except (struct.error, IndexError) as exc:
        raise ValueError(f"{path}: a cut-short ELF file ({exc})") from exc
