"""The one atomic write: bytes too, whole or not at all, a failure is exit 3 naming the file; a set of files whole or
not at all."""

from __future__ import annotations

import errno
import fcntl
import os
import shutil
import tempfile
import threading
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


@pytest.fixture
def umask_027() -> object:
    old = os.umask(0o027)
    yield
    os.umask(old)


def test_every_atomic_writer_gives_the_mode_open_would(tmp_path: Path, umask_027: object) -> None:
    """A file written through a temporary one gets what ``open()`` gives a new file (0666 less the umask), not
    mkstemp's 0600: the bundle's JSON report was 0600 (seen on the H200), unreadable to the CI user's group."""
    from matrixtool.incontainer.vllm_smoke import reports, streams

    assert streams.umask() == 0o027 and os.umask(0o027) == 0o027, "reading the umask leaves it as it was"
    outputs.write_bytes(tmp_path / "a.bin", b"x")
    outputs.write_set({tmp_path / "b.yaml": "b: 1\n"})
    outputs.write_bytes(tmp_path / "prog", b"#!/bin/sh\n", mode=streams.new_file_mode(executable=True))
    reports.write(str(tmp_path / "report.json"), "{}")
    with open(tmp_path / "by-open", "w") as f:
        f.write("x")
    modes = {p.name: oct(p.stat().st_mode & 0o777) for p in tmp_path.iterdir()}
    assert modes == {"a.bin": "0o640", "b.yaml": "0o640", "prog": "0o750", "report.json": "0o640", "by-open": "0o640"}


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


def test_a_set_waits_for_another_writer_of_its_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two sets into one folder commit one after the other (an flock of the folder): while another holds it, the
    writer's own attempt at the lock is refused (tried without waiting first), and it has staged and renamed
    nothing."""
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    outputs.write_set({a: "1\n", b: "1\n"})
    errors: list[BaseException] = []
    tried = threading.Event()
    refused: list[bool] = []
    real_flock = fcntl.flock

    def flock(fd: int, operation: int) -> None:
        if threading.current_thread() is writer and not tried.is_set():
            try:
                real_flock(fd, operation | fcntl.LOCK_NB)
            except BlockingIOError:
                refused.append(True)
            else:
                real_flock(fd, fcntl.LOCK_UN)
                refused.append(False)
            tried.set()
        real_flock(fd, operation)

    def write() -> None:
        try:
            outputs.write_set({a: "2\n", b: "2\n"})
        except BaseException as exc:
            errors.append(exc)
        finally:
            tried.set()

    monkeypatch.setattr(fcntl, "flock", flock)
    writer = threading.Thread(target=write, daemon=True)
    with outputs.folders_locked([tmp_path]):
        writer.start()
        assert tried.wait(60), "the writer never asked for the lock"
        assert refused == [True], "the writer's set was not held back by the other holder's lock"
        assert a.read_text() == b.read_text() == "1\n" and _leftovers(tmp_path) == []
    writer.join(60)
    assert not writer.is_alive() and errors == []
    assert a.read_text() == b.read_text() == "2\n" and _leftovers(tmp_path) == []


def _write_set_in_thread(files: dict[Path, str | bytes | None]) -> None:
    """``write_set(files)`` in a thread that must end within 60 s (a lock waiting on itself never does)."""
    errors: list[BaseException] = []

    def write() -> None:
        try:
            outputs.write_set(files)
        except BaseException as exc:
            errors.append(exc)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    writer.join(60)
    assert not writer.is_alive(), "write_set waits on its own lock of one folder spelled twice"
    assert errors == []


def test_one_folder_spelled_several_ways_is_locked_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Relative, absolute and through a symbolic link: one folder, one lock (a second one would wait forever on the
    first, in the same process)."""
    folder = tmp_path / "reports"
    folder.mkdir()
    (tmp_path / "link").symlink_to(folder)
    monkeypatch.chdir(tmp_path)
    files: dict[Path, str | bytes | None] = {
        folder / "junit.xml": "<a/>\n",
        Path("reports") / "x.json": "{}\n",
        tmp_path / "link" / "y.json": "[]\n",
    }
    _write_set_in_thread(files)
    assert (folder / "junit.xml").read_text() == "<a/>\n" and (folder / "x.json").read_text() == "{}\n"
    assert (folder / "y.json").read_text() == "[]\n" and _leftovers(folder) == []


def test_folders_are_locked_in_one_order_however_spelled(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two holders naming the same two folders by different spellings lock them in the same order (else each could
    hold one and wait for the other)."""
    first, second = tmp_path / "b", tmp_path / "a"
    first.mkdir()
    second.mkdir()
    (tmp_path / "z").symlink_to(first)
    monkeypatch.chdir(tmp_path)
    order: list[int] = []
    real_flock = fcntl.flock

    def flock(fd: int, operation: int) -> None:
        order.append(os.fstat(fd).st_ino)
        real_flock(fd, operation)

    monkeypatch.setattr(fcntl, "flock", flock)
    with outputs.folders_locked([tmp_path / "a", tmp_path / "z"]):
        pass
    one, order[:] = list(order), []
    with outputs.folders_locked([tmp_path / "b", Path("a")]):
        pass
    assert one == order and len(order) == 2


@pytest.mark.subprocess
def test_a_folder_that_cannot_be_read_is_written_unlocked() -> None:
    """A folder of mode 0333 (writable, not readable) cannot be opened for its lock: the set is written unlocked,
    as ``write_text`` writes there. Run as user 65534 in a child process (mode bits do not stop root)."""
    base = Path(tempfile.mkdtemp())
    try:
        os.chmod(base, 0o711)
        folder = base / "drop"
        folder.mkdir(mode=0o333)
        os.chmod(folder, 0o333)
        if os.geteuid() == 0:
            os.chown(folder, 65534, 65534)
        pid = os.fork()
        if pid == 0:  # the child: exits, never returns into pytest
            code = 1
            try:
                if os.geteuid() == 0:
                    os.setresgid(65534, 65534, 65534)
                    os.setgroups([])
                    os.setresuid(65534, 65534, 65534)
                try:
                    os.listdir(folder)
                    code = 2  # readable: the test would show nothing
                except PermissionError:
                    outputs.write_set({folder / "a.json": "{}\n", folder / "b.json": "[]\n"})
                    code = 0
            except BaseException as exc:
                os.write(2, f"{exc}\n".encode())
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert (folder / "a.json").read_text() == "{}\n" and (folder / "b.json").read_text() == "[]\n"
        assert _leftovers(folder) == []
    finally:
        shutil.rmtree(base)


def test_none_removes_a_file_in_the_set(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """None: the target goes with the set (an absent one stays absent); a failed rename after it puts it back."""
    kept, gone, absent = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "c.json"
    gone.write_text("old\n")
    outputs.write_set({kept: "new\n", gone: None, absent: None})
    assert kept.read_text() == "new\n" and not gone.exists() and not absent.exists() and _leftovers(tmp_path) == []
    gone.write_text("old\n")
    real = os.replace

    def failing(src: str | Path, dst: str | Path) -> None:
        if Path(dst) == kept:
            raise OSError(errno.EIO, "Input/output error")
        real(src, dst)

    monkeypatch.setattr(os, "replace", failing)
    with pytest.raises(OutputError, match=r"a\.json: Input/output error"):
        outputs.write_set({gone: None, kept: "newer\n"})
    assert gone.read_text() == "old\n" and kept.read_text() == "new\n" and _leftovers(tmp_path) == []


def test_remove_staging_removes_what_a_killed_set_left(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text("a\n")
    left = [tmp_path / ".a.yaml.x1y2.tmp", tmp_path / ".a.yaml.0123456789ab.old"]
    for path in left:
        path.write_text("partial")
    assert outputs.remove_staging([tmp_path, tmp_path / "absent"]) == sorted(left)
    assert [p.name for p in tmp_path.iterdir()] == ["a.yaml"]


def test_a_symbolic_link_to_a_file_is_replaced_and_what_it_points_to_kept(tmp_path: Path) -> None:
    kept, link = tmp_path / "kept.yaml", tmp_path / "a.yaml"
    kept.write_text("kept\n")
    link.symlink_to(kept)
    outputs.write_set({link: "new\n"})
    assert not link.is_symlink() and link.read_text() == "new\n" and kept.read_text() == "kept\n"


def test_a_name_that_leads_into_proc_or_dev_is_a_stream_written_in_place(tmp_path: Path) -> None:
    """``/dev/stdout`` is a link to ``/proc/self/fd/1``, which leads to a regular file when stdout is redirected to
    one: replacing the name would put a regular file where the machine's link was."""
    redirected = tmp_path / "log"
    redirected.write_text("", encoding="utf-8")
    link = tmp_path / "mystdout"
    fd = os.open(redirected, os.O_WRONLY)
    try:
        link.symlink_to(f"/proc/self/fd/{fd}")
        assert outputs.is_stream(link) and outputs.is_stream(Path(f"/proc/self/fd/{fd}"))
        outputs.write_text(link, "report\n")
        assert link.is_symlink() and redirected.read_text(encoding="utf-8") == "report\n"
        assert "a stream such as /dev/stdout" in str(outputs.target_problem(link))
    finally:
        os.close(fd)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert outputs.is_stream(fifo)
    plain = tmp_path / "plain"
    plain.write_text("x", encoding="utf-8")
    (tmp_path / "to-plain").symlink_to(plain)
    assert not outputs.is_stream(plain) and not outputs.is_stream(tmp_path / "to-plain")
    assert not outputs.is_stream(tmp_path) and not outputs.is_stream(tmp_path / "absent")
