"""The QEMU user-mode emulator the cpu-floor check runs the image's Python under: the host's static
``qemu-x86_64`` / ``qemu-aarch64`` (Debian's qemu-user, from trixie: tools/setup-engine.sh), mounted read-only into
the check container. Static, so it runs in any image whatever its C library."""

from __future__ import annotations

import shutil
import struct
from collections.abc import Mapping
from pathlib import Path

from matrixtool.model.model import Variant
from matrixtool.smoke.plan import ProfileRun

# Where the emulator lies in the check container (beside the tool's tmpfs, outside every search path).
QEMU_DIR = "/run/matrix-qemu"
CHECK = "cpu-floor"
_PT_INTERP = 3


def is_static(path: Path) -> bool:
    """True when ``path`` is a 64-bit little-endian ELF executable without a program interpreter (PT_INTERP): it
    needs no C library of the image it runs in. False for anything else, or an unreadable file."""
    try:
        with path.open("rb") as f:
            head = f.read(64)
            if head[:6] != b"\x7fELF\x02\x01":
                return False
            (phoff,) = struct.unpack_from("<Q", head, 0x20)
            phentsize, phnum = struct.unpack_from("<HH", head, 0x36)
            f.seek(phoff)
            table = f.read(phentsize * phnum)
    except OSError:
        return False
    return all(struct.unpack_from("<I", table, i * phentsize)[0] != _PT_INTERP for i in range(phnum))


def static_emulator(name: str) -> Path | None:
    """The host's static ``name`` (qemu-x86_64, qemu-aarch64), ``NAME-static`` first, links resolved; None where
    neither is on PATH or neither is static."""
    for candidate in (f"{name}-static", name):
        found = shutil.which(candidate)
        if found and is_static(Path(found).resolve()):
            return Path(found).resolve()
    return None


def floor_mount(variant: Variant, run: ProfileRun) -> tuple[dict[str, Mapping[str, str]], str | None]:
    """(the check container's volumes, the emulator's path in it) for ``run`` of ``variant``: the variant's
    emulator where ``run`` runs cpu-floor and the variant has a floor; ({}, None) otherwise or where the host has
    no static emulator (the check then says so)."""
    floor = variant.cpu_floor
    if floor is None or CHECK not in {c.name for c in run.checks}:
        return {}, None
    host = static_emulator(floor.qemu)
    if host is None:
        return {}, None
    inside = f"{QEMU_DIR}/{floor.qemu}"
    return {str(host): {"bind": inside, "mode": "ro"}}, inside
