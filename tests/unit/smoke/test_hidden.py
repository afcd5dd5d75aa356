"""Files under a profile's tmpfs mount point, listed from a tar stream as Docker's archive API sends it."""

from __future__ import annotations

import io
import tarfile

from matrixtool.smoke import hidden


def _tar(entries: dict[str, bytes | None]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for name, data in entries.items():
            info = tarfile.TarInfo(name)
            if data is None:
                info.type = tarfile.DIRTYPE
                archive.addfile(info)
            else:
                info.size = len(data)
                archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def test_files_under_the_mount_point_are_named_and_folders_are_not() -> None:
    raw = _tar({"tmp": None, "tmp/.cache": None, "tmp/.cache/huggingface/model.safetensors": b"x" * 1000})
    got = hidden.list_archive("/tmp", io.BytesIO(raw))
    assert got.files == ("/tmp/.cache/huggingface/model.safetensors",) and got.count == 1 and got.size_bytes == 1000
    assert "hidden by the profile's tmpfs" in got.describe() and not got.partial
    assert hidden.list_archive("/tmp", io.BytesIO(_tar({"tmp": None, "tmp/.cache": None}))).count == 0


def test_the_stream_is_read_with_bounds() -> None:
    raw = _tar({f"tmp/f{i}": b"y" * 600 for i in range(50)})
    bounded = hidden._Bounded([raw[i : i + 512] for i in range(0, len(raw), 512)], limit=8 * 1024)
    got = hidden.list_archive("/tmp", bounded)
    assert got.partial and 0 < got.count < 50 and len(got.files) == hidden.SHOWN
    assert "at least" in got.describe()
    many = hidden.list_archive("/tmp", io.BytesIO(raw), max_entries=10)
    assert many.partial and many.count == 10
