"""Pure logic of the engine probes (no engine needed)."""

from __future__ import annotations


def test_qemu_major_is_read_from_its_version_line() -> None:
    from matrixtool.engine import QEMU_MIN_MAJOR, qemu_major

    assert qemu_major("qemu-aarch64 version 10.0.13 (Debian 1:10.0.13+ds-0+deb13u1)") == 10
    assert qemu_major("qemu-aarch64 version 7.2.0 (Debian 1:7.2+dfsg-7+deb12u18)") == 7 < QEMU_MIN_MAJOR
    assert qemu_major("") is None
