"""The one atomic write: bytes too, whole or not at all, a failure is exit 3 naming the file; a set of files whole or
not at all."""

from __future__ import annotations

import errno
import os
import threading
import time
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


def _leftovers(folder: Path) -> list[str]:
    """Staged or backed-up files a set write left behind."""
    return sorted(p.name for p in folder.iterdir() if outputs.is_staging(p))


def test_a_set_is_written_whole(tmp_path: Path) -> None:
    a, b = tmp_path / "k" / "a.yaml", tmp_path / "k" / "b.yaml"
    assert outputs.write_set({a: "a: 1\n", b: b"b: 2\n"}) == [a, b]
    assert a.read_text() == "a: 1\n" and b.read_text() == "b: 2\n"
    assert oct(a.stat().st_mode & 0o777) == "0o644" and _leftovers(a.parent) == []
    outputs.write_set({a: "a: 3\n"})
    assert a.read_text() == "a: 3\n" and b.read_text() == "b: 2\n" and _leftovers(a.parent) == []


@pytest.mark.parametrize("kind", ["folder", "fifo", "symlink to a folder", "under a file"])
def test_a_target_that_is_no_regular_file_refuses_the_whole_set(tmp_path: Path, kind: str) -> None:
    """A folder (EISDIR), a FIFO (a write would wait for a reader), a symbolic link to a folder or a path under a
    file: refused before anything is written, naming it."""
    first, second = tmp_path / "a.yaml", tmp_path / "b.yaml"
    first.write_text("old\n")
    named = second
    if kind == "folder":
        second.mkdir()
    elif kind == "fifo":
        os.mkfifo(second)
    elif kind == "symlink to a folder":
        (tmp_path / "folder").mkdir()
        second.symlink_to(tmp_path / "folder")
    else:
        (tmp_path / "file").write_text("x")
        second = tmp_path / "file" / "b.yaml"
        named = tmp_path / "file"
    with pytest.raises(OutputError) as caught:
        outputs.write_set({first: "new\n", second: "new\n"})
    assert caught.value.exit_code == ExitCode.CONFIG and str(named) in str(caught.value)
    assert "nothing was written" in str(caught.value)
    assert first.read_text() == "old\n" and _leftovers(tmp_path) == []


def test_a_failed_write_of_one_file_replaces_none(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first, second = tmp_path / "a.yaml", tmp_path / "b.yaml"
    first.write_text("old\n")
    real = os.fsync
    calls = []

    def full_disk(fd: int) -> None:
        calls.append(fd)
        if len(calls) == 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        real(fd)

    monkeypatch.setattr(os, "fsync", full_disk)
    with pytest.raises(OutputError, match=r"cannot write .*b\.yaml: No space left on device \(ENOSPC\)"):
        outputs.write_set({first: "new\n", second: "new\n"})
    assert first.read_text() == "old\n" and not second.exists() and _leftovers(tmp_path) == []


def test_a_failed_rename_puts_back_the_files_renamed_before_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The second rename fails: the first target has its old content again, a target that was absent is absent."""
    old, new_file, third = tmp_path / "a.yaml", tmp_path / "b.yaml", tmp_path / "c.yaml"
    old.write_text("old\n")
    third.write_text("third\n")
    real = os.replace
    renames = []

    def failing(src: str | Path, dst: str | Path) -> None:
        renames.append(Path(dst))
        if Path(dst) == third:
            raise OSError(errno.EIO, "Input/output error")
        real(src, dst)

    monkeypatch.setattr(os, "replace", failing)
    with pytest.raises(OutputError, match=r"c\.yaml: Input/output error"):
        outputs.write_set({old: "new\n", new_file: "new\n", third: "new\n"})
    assert old.read_text() == "old\n" and not new_file.exists() and third.read_text() == "third\n"
    assert _leftovers(tmp_path) == []


def test_a_set_waits_for_another_writer_of_its_folder(tmp_path: Path) -> None:
    """Two sets into one folder commit one after the other (an flock of the folder): while another holds it, this
    one is staged but renames nothing."""
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    outputs.write_set({a: "1\n", b: "1\n"})
    errors: list[BaseException] = []

    def write() -> None:
        try:
            outputs.write_set({a: "2\n", b: "2\n"})
        except BaseException as exc:
            errors.append(exc)

    with outputs._folders_locked([tmp_path]):
        writer = threading.Thread(target=write)
        writer.start()
        deadline = time.monotonic() + 60
        while len(_leftovers(tmp_path)) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(_leftovers(tmp_path)) == 2, "the writer never staged its files"
        assert a.read_text() == b.read_text() == "1\n"  # staged, waiting for the lock
    writer.join(60)
    assert not writer.is_alive() and errors == []
    assert a.read_text() == b.read_text() == "2\n" and _leftovers(tmp_path) == []


def test_a_symbolic_link_to_a_file_is_replaced_and_what_it_points_to_kept(tmp_path: Path) -> None:
    kept, link = tmp_path / "kept.yaml", tmp_path / "a.yaml"
    kept.write_text("kept\n")
    link.symlink_to(kept)
    outputs.write_set({link: "new\n"})
    assert not link.is_symlink() and link.read_text() == "new\n" and kept.read_text() == "kept\n"
