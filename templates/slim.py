"""Slim the virtual environment in the layer that installed it (run by the image's install steps, stdlib only).

``python slim.py SITE [STEP]`` (STEP: what the step installed, named in the output) does, in SITE (the venv's
site-packages) and the files its distributions install elsewhere (intel-openmp's ``../../libiomp5.so``):

- strips what no run-time step reads (``strip --strip-unneeded``, as Debian's dh_strip does for shared
  libraries: the DWARF ``.debug_*`` sections and the static symbol table ``.symtab``; the dynamic symbols that
  linking and ``dladdr`` backtraces use stay) from every ELF file a distribution's RECORD lists that has any,
  and writes the file's new sha256 and size into that RECORD, so RECORD still describes the files on disk. A
  file whose content no longer matches its RECORD row (another distribution overwrote it) is left as it is, and
  so is a file with nothing to strip (rewriting it would only copy it into this layer), a library auditwheel
  vendored (a ``*.libs`` folder: patchelf rewrote each one) and one that stripped would not load
  (``loads_aligned``: strip breaks what patchelf laid out);
- compiles every ``.py`` under SITE to bytecode but test suites (``SKIP_BYTECODE``: folders ``tests``, ``test``
  and torch's ``testing/_internal``, which no import of the library reaches; 48 MB of bytecode in the cpu image);
  a ``.pyc`` that is up to date is kept, so the vLLM step adds only the new distributions' bytecode. Under a
  read-only root no process can write its ``__pycache__``: without this, every process start compiles torch's
  and vLLM's sources again.

Prints one line per file stripped, bytes before and after, and the totals; exits non-zero when ``strip`` fails.
"""

import base64
import compileall
import csv
import hashlib
import io
import os
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path


# The largest page size a loader may check segments against (64 KiB pages: some aarch64 kernels).
MAX_PAGE = 65536
# Paths compileall leaves as sources (a regular expression searched in each full path).
SKIP_BYTECODE = re.compile(r"/(tests?|testing/_internal)/")


def strippable_bytes(path):
    """Bytes of the ``.debug_*`` and ``.symtab`` sections of the ELF file ``path`` (0: none, or not a
    64-bit little-endian ELF)."""
    try:
        with open(path, "rb") as f:
            head = f.read(64)
            if len(head) < 64 or head[:4] != b"\x7fELF" or head[4] != 2 or head[5] != 1:
                return 0
            shoff = struct.unpack_from("<Q", head, 0x28)[0]
            entsize, count, names_index = struct.unpack_from("<HHH", head, 0x3A)
            if not shoff or not count or entsize < 64 or names_index >= count:
                return 0
            f.seek(shoff)
            table = f.read(entsize * count)
            sections = [struct.unpack_from("<IIQQQQ", table, i * entsize) for i in range(count)]
            names = sections[names_index]
            f.seek(names[4])
            strings = f.read(names[5])
    except (OSError, struct.error):
        return 0
    total = 0
    for name_at, kind, _flags, _addr, _offset, size in sections:
        end = strings.find(b"\0", name_at)
        name = strings[name_at:end]
        # 8: SHT_NOBITS (no bytes in the file)
        if kind != 8 and (name.startswith(b".debug") or name == b".symtab"):
            total += size
    return total


def loads_aligned(path):
    """Whether every PT_LOAD segment of the ELF file ``path`` keeps ``p_offset`` congruent to ``p_vaddr`` modulo
    ``p_align`` (at most ``MAX_PAGE``) and inside the file: what the dynamic loader requires ("ELF load command
    address/offset not page-aligned"). ``strip`` rewrites the layout of a file that patchelf changed (auditwheel's
    ``*.libs``, ``RPATH``s) into one that breaks it (seen: numpy.libs' OpenBLAS)."""
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            head = f.read(64)
            phoff = struct.unpack_from("<Q", head, 0x20)[0]
            entsize, count = struct.unpack_from("<HH", head, 0x36)
            f.seek(phoff)
            table = f.read(entsize * count)
        for i in range(count):
            kind, _flags, offset, vaddr, _paddr, filesz, _memsz, align = struct.unpack_from(
                "<IIQQQQQQ", table, i * entsize
            )
            if kind != 1:  # PT_LOAD
                continue
            if offset + filesz > size or (align > 1 and (vaddr - offset) % min(align, MAX_PAGE) != 0):
                return False
    except (OSError, struct.error):
        return False
    return True


def record_hash(data):
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def file_hash(path):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return "sha256=" + base64.urlsafe_b64encode(digest.digest()).rstrip(b"=").decode()


def strip_record(site, record):
    """Strip the ELF files ``record`` (a RECORD path) lists; rewrite it. Returns the bytes saved."""
    rows = list(csv.reader(io.StringIO(record.read_text(encoding="utf-8"))))
    saved = 0
    changed = False
    for row in rows:
        if len(row) < 3 or not row[1].startswith("sha256="):
            continue
        path = os.path.normpath(os.path.join(site, row[0]))
        if ".so" not in os.path.basename(path) or os.path.islink(path) or not os.path.isfile(path):
            continue
        if os.path.basename(os.path.dirname(path)).endswith(".libs"):
            continue  # auditwheel's vendored libraries: patchelf renamed and relinked every one
        if strippable_bytes(path) == 0 or file_hash(path) != row[1]:
            continue
        before = os.path.getsize(path)
        out = path + ".slim"
        subprocess.run(["strip", "--strip-unneeded", "--preserve-dates", "-o", out, path], check=True)
        if not loads_aligned(out):
            os.unlink(out)
            print(f"slim: left as is: {row[0]}: stripped, its load segments would not load (patchelf's layout)")
            continue
        os.chmod(out, os.stat(path).st_mode)
        os.replace(out, path)
        after = os.path.getsize(path)
        row[1], row[2] = file_hash(path), str(after)
        saved += before - after
        changed = True
        print(f"slim: strip --strip-unneeded {row[0]}: {before} -> {after} bytes")
    if changed:
        out = io.StringIO()
        csv.writer(out, lineterminator="\n").writerows(rows)
        tmp = record.with_name("RECORD.slim")
        tmp.write_text(out.getvalue(), encoding="utf-8")
        os.replace(tmp, record)
    return saved


def tree_bytes(root):
    total = 0
    for folder, _dirs, files in os.walk(root):
        for name in files:
            try:
                total += os.lstat(os.path.join(folder, name)).st_size
            except OSError:
                pass
    return total


def main(argv):
    if len(argv) not in (2, 3) or not os.path.isdir(argv[1]):
        print("usage: python slim.py SITE_PACKAGES_DIR [STEP]", file=sys.stderr)
        return 2
    site = argv[1]
    step = f" ({argv[2]})" if len(argv) == 3 else ""
    if shutil.which("strip") is None:
        print("slim: error: no `strip` on PATH (binutils, which g++ brings)", file=sys.stderr)
        return 1
    saved = sum(strip_record(site, record) for record in sorted(Path(site).glob("*.dist-info/RECORD")))
    print(f"slim{step}: strip --strip-unneeded: {saved} bytes less")
    before = tree_bytes(site)
    ok = compileall.compile_dir(site, quiet=1, workers=os.cpu_count() or 1, rx=SKIP_BYTECODE)
    print(f"slim{step}: bytecode: {tree_bytes(site) - before} bytes added")
    if not ok:
        # Test fixtures and templates that are not Python (a distribution's own choice) fail to compile and are
        # never imported; compileall has printed each one.
        print("slim: some files did not compile (listed above); they are left as sources")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
