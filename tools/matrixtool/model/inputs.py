"""Checks of a command's flags that run before the engine is touched. Each raises ``ConfigError`` (exit 3)
naming the flag, its value and what to pass instead."""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Sequence
from pathlib import Path

import click

from matrixtool.core import outputs
from matrixtool.core.errors import ConfigError
from matrixtool.incontainer.vllm_smoke.declarations import SUITES, Suite
from matrixtool.model.checks import CHECKS
from matrixtool.model.model import Variant
from matrixtool.model.names import unknown_hint


def _nearest_existing(path: Path) -> Path:
    current = path
    while not os.path.exists(current) and current != current.parent:  # os.path: False for any OSError
        current = current.parent
    return current


def _writable(folder: Path) -> bool:
    """Whether a file can be made in ``folder``: tried (an unnamed temporary file, gone when closed), since
    permission bits do not tell for root, a read-only mount or a pseudo file system like /proc."""
    try:
        with tempfile.TemporaryFile(dir=folder):
            return True
    except OSError:
        return False


def _broken_link(flag: str, path: Path) -> str | None:
    """A symbolic link at ``path`` or above it that leads nowhere (dangling, or a loop): ``exists()`` says
    False, yet nothing can be made there."""
    for p in (path, *path.parents):
        if p.is_symlink() and not p.exists():
            return (
                f"{flag}: {p} is a symbolic link that leads nowhere (dangling or a loop); "
                "remove it or pass another path"
            )
    return None


# POSIX's floor for a path (``PATH_MAX`` of Linux); a name's own limit is the file system's (``PC_NAME_MAX``).
_PATH_MAX = 4096


def _length_problem(flag: str, path: Path) -> str | None:
    """A name in ``path`` longer than its file system allows (``os.pathconf`` ``PC_NAME_MAX``, 255 bytes on ext4,
    XFS, tmpfs), or a path over ``PATH_MAX``: the kernel refuses it (``ENAMETOOLONG``) wherever it is used."""
    if len(os.fsencode(path)) >= _PATH_MAX:
        return f"{flag}: the path is {len(os.fsencode(path))} bytes long (at most {_PATH_MAX - 1}); give a shorter one"
    try:
        limit = os.pathconf(_nearest_existing(path.absolute()), "PC_NAME_MAX")
    except (OSError, ValueError):
        limit = 255
    for part in path.parts:
        if len(os.fsencode(part)) > limit:
            return (
                f"{flag}: the name {part[:40]!r}… is {len(os.fsencode(part))} bytes long, over the file system's "
                f"limit ({limit}); give a shorter name"
            )
    return None


def _folder_problem(flag: str, folder: Path, *, must_exist: bool) -> str | None:
    """Why files cannot be written in ``folder`` (created with its parents when missing, unless ``must_exist``)."""
    broken = _length_problem(flag, folder) or _broken_link(flag, folder)
    if broken:
        return broken
    if folder.exists():
        if not folder.is_dir():
            return f"{flag}: {folder} is not a folder"
        if not _writable(folder):
            return f"{flag}: the folder {folder} is not writable"
        return None
    if must_exist:
        return f"{flag}: the folder {folder} does not exist; create it or pass another path"
    base = _nearest_existing(folder)
    if not base.is_dir():
        return f"{flag}: {base} is not a folder, so {folder} cannot be made"
    if not _writable(base):
        return f"{flag}: {folder} cannot be made (the folder {base} is not writable)"
    return None


def _file_problem(flag: str, path: Path, *, must_exist_parent: bool) -> str | None:
    """Why ``path`` cannot be written as a file (a stream, ``outputs.is_stream``, can: it is written in place)."""
    broken = _length_problem(flag, path) or _broken_link(flag, path)
    if broken:
        return broken
    if path.is_dir():
        return f"{flag}: {path} is a folder; give a file path"
    if path.exists() and not path.is_file() and not outputs.is_stream(path):
        return f"{flag}: {path} is not a regular file"
    if path.exists() and not os.access(path, os.W_OK):
        return f"{flag}: {path} is not writable"
    return _folder_problem(flag, path.parent, must_exist=must_exist_parent)


def output_file_problem(flag: str, path: Path) -> str | None:
    """The rule of every option that names a file the tool writes (``--junit``, ``--json-file``, ``bundle --out``,
    ``sbom -o``): not a folder (nor a link to one), no dangling link, a name the file system takes, in a folder that is
    writable or can be made. A stream (``outputs.is_stream``: a FIFO, a device, a name that leads into ``/dev`` or
    ``/proc``) is allowed: it is written in place (``outputs.write_bytes``), never replaced."""
    return _file_problem(flag, path, must_exist_parent=False)


def output_folder_problem(flag: str, folder: Path) -> str | None:
    """The rule of every option that names a folder the tool writes in (``--out``): a folder, or one that can be
    made; writable; no dangling link; a name the file system takes."""
    return _folder_problem(flag, folder, must_exist=False)


def _kind_of(path: Path) -> str:
    """What ``path`` (followed) is, in words."""
    mode = path.stat().st_mode
    for test, name in (
        (stat.S_ISREG, "a file"),
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a device"),
        (stat.S_ISBLK, "a device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def input_file_problem(flag: str, path: Path) -> str | None:
    """The rule of every option that names a file the tool reads (``--matrix``, ``--ca-cert``, key flags, reports,
    push records, SBOMs): it exists, is a regular file (a FIFO, device or socket is never opened: a FIFO without a
    writer would hang the run, ``/dev/zero`` never ends) and is readable; what it holds is its reader's to check
    (``yamlfile.read_config_text``: size, UTF-8, then the format)."""
    broken = _length_problem(flag, path) or _broken_link(flag, path)
    if broken:
        return broken
    try:
        exists = path.exists()
    except OSError as exc:
        return f"{flag}: {path} cannot be looked at ({exc.strerror or exc})"
    if not exists:
        return f"{flag}: {path} does not exist; give the path of an existing file"
    if not path.is_file():
        return f"{flag}: {path} is {_kind_of(path)}, not a regular file; give a file"
    if outputs.is_stream(path):
        return f"{flag}: {path} leads into /dev or /proc (a stream such as /dev/stdin), not to a file; give a file"
    if not os.access(path, os.R_OK):
        return f"{flag}: {path} is not readable; make it readable for this user or give another file"
    return None


def input_folder_problem(flag: str, folder: Path) -> str | None:
    """The rule of every option that names a folder the tool reads (``--wheelhouse``, ``--advisories``): an existing,
    readable folder."""
    broken = _length_problem(flag, folder) or _broken_link(flag, folder)
    if broken:
        return broken
    if not folder.exists():
        return f"{flag}: {folder} does not exist; give an existing folder"
    if not folder.is_dir():
        return f"{flag}: {folder} is {_kind_of(folder)}, not a folder; give an existing folder"
    if not os.access(folder, os.R_OK | os.X_OK):
        return f"{flag}: the folder {folder} is not readable; make it readable for this user or give another"
    return None


def check_outputs(out_dir: Path, *, junit: Path | None = None, json_file: Path | None = None) -> None:
    """Everything a command will write can be written: ``--out`` is (or can be made) a writable folder, ``--junit``
    (default ``<out>/reports/junit.xml``) and ``--json-file`` are files (not folders) whose folder exists and is
    writable, or can be made: its nearest existing ancestor is a writable folder (CI passes
    ``--junit build/reports/junit-<variant>.xml`` before ``build/`` exists). Raises ConfigError: one line per flag that
    cannot be honoured."""
    problems = [_folder_problem("--out", out_dir, must_exist=False)]
    if junit is not None:
        problems.append(_file_problem("--junit", junit, must_exist_parent=False))
    elif not problems[0]:
        problems.append(_file_problem("--out", out_dir / "reports" / "junit.xml", must_exist_parent=False))
    if json_file is not None:
        problems.append(_file_problem("--json-file", json_file, must_exist_parent=False))
        junit_path = junit if junit is not None else out_dir / "reports" / "junit.xml"
        if os.path.realpath(junit_path) == os.path.realpath(json_file):
            problems.append(
                f"--json-file: {json_file} is the JUnit report's file too ({junit_path}); one of them would be lost: "
                "give --json-file or --junit another path"
            )
    found = [p for p in problems if p]
    if found:
        raise ConfigError("output paths", found)


def check_selection(variants: Sequence[Variant], only: Sequence[str], skip: Sequence[str]) -> None:
    """Raises ConfigError: naming each unknown check (with the variant's checks), before any build."""
    problems = []
    unknown = [n for n in dict.fromkeys([*only, *skip]) if n not in CHECKS]
    for name in unknown:
        flag = "--only" if name in only else "--skip"
        hint = unknown_hint(name, sorted(CHECKS), each=flag + " {}")
        problems.append(f"{name!r} is no smoke check{hint}; known checks: {', '.join(sorted(CHECKS))}")
    for variant in variants:
        names = [c.name for c in variant.checks]
        for n in dict.fromkeys([*only, *skip]):
            if n in CHECKS and n not in names:
                problems.append(f"{n!r} is not a check of variant {variant.name}; its checks: {', '.join(names)}")
        if not problems and not [c for c in names if (not only or c in only) and c not in skip]:
            problems.append(f"the selection leaves no check of variant {variant.name} to run")
    if problems:
        raise ConfigError("--only/--skip", problems)


def check_suite(suite: str) -> Suite:
    """Raises ConfigError: naming the value and the suites there are."""
    if suite not in SUITES:
        raise ConfigError("--suite", [f"{suite!r} is no suite of checks; use one of: {', '.join(SUITES)}"])
    return Suite(suite)


def warn_unused_wheelhouse(variants: Sequence[Variant], wheelhouse: Path | None) -> None:
    """A warning on stderr when ``--wheelhouse`` is given but no selected variant takes one (matrix.yaml
    ``index.wheelhouse``): the flag is then ignored, which the user should know. A warning, not an error,
    so one command line (``make images``) can serve every variant."""
    if wheelhouse is not None and variants and not any(v.index.wheelhouse for v in variants):
        names = ", ".join(v.name for v in variants)
        click.echo(
            f"warning: --wheelhouse {wheelhouse} is ignored: no selected variant ({names}) takes a wheelhouse "
            "(matrix.yaml index.wheelhouse)",
            err=True,
        )
