"""Every parameter of the command tree that takes a path or an image reference declares its kind
(``commands._params``), and every parameter of a kind gets the same hostile values and the same verdict: refused
(exit 3, naming the flag, nothing written) or, for a stream where a file is written, written in place. A new option
named like a path or a reference fails here until it declares its kind.

Hostile paths are made in a scratch folder only: ``/dev/null`` is reached through a scratch link to it and through a
scratch device node (``mknod``), ``/dev/stdout`` through a scratch link: a rule that replaced them would replace the
scratch name, never the machine's.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from matrixtool.cli import main
from matrixtool.commands import _params
from matrixtool.commands._params import Kind, KindType
from matrixtool.core.errors import ExitCode
from matrixtool.incontainer.vllm_smoke import streams
from tests.conftest import bug_exits, copy_checkout

# A parameter whose name reads as one of these takes that kind (the group's ``out_dir`` is a folder, ``bundle
# --out`` a file: the table below names both).
NAME_KINDS = [
    (re.compile(r"(^|_)(junit|json_file|output)$"), Kind.OUTPUT_FILE),
    (re.compile(r"(^|_)(key|report|ca_cert|compare|pushed|sbom_file|matrix_path)$"), Kind.INPUT_FILE),
    (re.compile(r"(^|_)(wheelhouse|advisories)$"), Kind.INPUT_FOLDER),
    (re.compile(r"(^|_)image$"), Kind.IMAGE),
    (re.compile(r"(^|_)registry(_prefix)?$"), Kind.REGISTRY),
    (re.compile(r"(^|_)repository$"), Kind.REPOSITORY),
]
# Parameters whose names do not say their kind.
NAMED = {
    ("", "out_dir"): Kind.OUTPUT_FOLDER,
    ("bundle", "out"): Kind.OUTPUT_FILE,
    ("diff", "a"): Kind.IMAGE,
    ("diff", "b"): Kind.IMAGE,
}


def _parameters() -> Iterator[tuple[str, click.Parameter]]:
    """(command name, parameter) of the group's own parameters (command "") and of every command's."""
    assert isinstance(main, click.Group)
    for param in main.params:
        yield "", param
    for name, command in sorted(main.commands.items()):
        for param in command.params:
            yield name, param


def _expected(command: str, param: click.Parameter) -> Kind | None:
    named = NAMED.get((command, param.name or ""))
    if named is not None:
        return named
    return next((kind for pattern, kind in NAME_KINDS if pattern.search(param.name or "")), None)


KINDED = [(c, p, p.type.kind) for c, p in _parameters() if isinstance(p.type, KindType)]


def test_every_path_or_reference_parameter_declares_its_kind() -> None:
    wrong = []
    for command, param in _parameters():
        expected = _expected(command, param)
        got = param.type.kind if isinstance(param.type, KindType) else None
        kinded = isinstance(param.type, click.Path) or expected is not None or got is not None
        if kinded and (got is None or got is not expected):
            wrong.append(f"{command or 'tools/matrix'} {param.name}: {got} (expected {expected})")
    assert not wrong, "a parameter without the rule of its kind (commands._params):\n" + "\n".join(wrong)
    assert {kind for _, _, kind in KINDED} == set(Kind), "every kind is taken by some parameter"


# --- the hostile values -----------------------------------------------------------------------------------------

LONG_NAME = "n" * 300  # over every Linux file system's NAME_MAX (255)


def _fifo(root: Path) -> Path:
    os.mkfifo(root / "fifo")
    return root / "fifo"


def _null_device(root: Path) -> Path:
    """A scratch character device 1:3, what /dev/null is; a symbolic link to /dev/null where mknod is refused."""
    try:
        os.mknod(root / "null", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    except PermissionError:
        (root / "null").symlink_to("/dev/null")
    return root / "null"


def _link(root: Path, target: Path | str, name: str = "link") -> Path:
    (root / name).symlink_to(target)
    return root / name


def _unwritable(root: Path) -> Path:
    """A folder nothing can be made in whoever runs (root too): a read-only mode is not enough for root, /proc is."""
    return Path("/proc/self/x") if os.geteuid() == 0 else _mode(root / "ro", 0o555) / "x"


def _mode(folder: Path, mode: int) -> Path:
    folder.mkdir()
    folder.chmod(mode)
    return folder


def _file(path: Path) -> Path:
    path.write_text("x")
    return path


def _folder(root: Path) -> Path:
    (root / "folder").mkdir()
    return root / "folder"


PATH_VALUES: dict[str, Callable[[Path], Path]] = {
    "folder": _folder,
    "link-to-folder": lambda r: _link(r, _folder(r)),
    "fifo": _fifo,
    "link-to-fifo": lambda r: _link(r, _fifo(r)),
    "null-device": _null_device,
    "link-to-dev-null": lambda r: _link(r, "/dev/null"),
    "link-to-dev-stdout": lambda r: _link(r, "/dev/stdout"),
    "link-to-link-to-dev-null": lambda r: _link(r, _link(r, "/dev/null", "first")),
    "dangling-link": lambda r: _link(r, r / "nowhere"),
    "unwritable-folder": _unwritable,
    "name-over-the-limit": lambda r: r / LONG_NAME,
    "missing": lambda r: r / "missing" / "deeper",
    "regular-file": lambda r: _file(r / "file.txt"),
}
STREAMS = {"fifo", "link-to-fifo", "null-device", "link-to-dev-null", "link-to-dev-stdout", "link-to-link-to-dev-null"}
# What each kind's rule says of each value: True refused (exit 3, naming the flag), False taken (a stream: in place).
REFUSED: dict[Kind, set[str]] = {
    Kind.OUTPUT_FILE: {"folder", "link-to-folder", "dangling-link", "unwritable-folder", "name-over-the-limit"},
    Kind.OUTPUT_FOLDER: {*STREAMS, "dangling-link", "unwritable-folder", "name-over-the-limit", "regular-file"},
    Kind.INPUT_FILE: set(PATH_VALUES) - {"regular-file"},
    Kind.INPUT_FOLDER: set(PATH_VALUES) - {"folder", "link-to-folder"},
}
REFERENCE_VALUES = {
    "port-over-65535": "localhost:99999/x",
    "port-0": "localhost:0/x",
    "upper-case": "localhost:5000/Upper/Case",
    "control-character": "localhost:5000/x\x1b[31m",
    "newline": "localhost:5000/x\n",
    "300-characters": "localhost:5000/" + "x" * 300,
    "empty": "",
    "scheme": "https://localhost:5000/x",
}


def _snapshot(path: Path) -> tuple[int, str | None] | None:
    """What ``path`` is (its ``lstat`` kind, and a link's target): the same after a run means it was not replaced."""
    try:
        info = os.lstat(path)
    except OSError:
        return None
    return stat.S_IFMT(info.st_mode), os.readlink(path) if stat.S_ISLNK(info.st_mode) else None


def _value_problem(kind: Kind, flag: str, value: str | Path) -> str | None:
    return _params.KindType(kind, "X").problem(flag, value)


@pytest.mark.parametrize("kind", [Kind.OUTPUT_FILE, Kind.OUTPUT_FOLDER, Kind.INPUT_FILE, Kind.INPUT_FOLDER])
@pytest.mark.parametrize("value", sorted(PATH_VALUES))
def test_each_path_kind_has_one_verdict_for_each_hostile_value(tmp_path: Path, kind: Kind, value: str) -> None:
    path = PATH_VALUES[value](tmp_path)
    before = _snapshot(path)
    problem = _value_problem(kind, "--flag", path)
    refused = value in REFUSED[kind]
    assert (problem is not None) == refused, problem
    if problem is not None:
        assert problem.startswith("--flag: ") and len(problem) < 600
    assert _snapshot(path) == before, "a rule only looks"


@pytest.mark.parametrize("kind", [Kind.IMAGE, Kind.REGISTRY, Kind.REPOSITORY])
@pytest.mark.parametrize("value", sorted(REFERENCE_VALUES))
def test_each_reference_kind_refuses_each_hostile_value(kind: Kind, value: str) -> None:
    problem = _value_problem(kind, "--flag", REFERENCE_VALUES[value])
    assert problem is not None and problem.startswith("--flag ") and len(problem) < 600, (kind, value)
    assert "\x1b" not in problem.replace("\\x1b", "") and "\n" not in problem, "the value is shown escaped"


# --- through the command line: every parameter of a kind, every hostile value ---------------------------------

# The least each command needs to reach its parameters' check; {} is the project copy's folder.
BASE_ARGS: dict[str, list[str]] = {
    "": ["render", "--check"],
    "audit": ["audit", "{}/sbom.json", "--advisories", "{}"],
    "bake": ["bake", "cpu"],
    "build": ["build", "cpu"],
    "bundle": ["bundle", "cpu"],
    "diff": ["diff", "a:1", "b:1"],
    "doctor": ["doctor"],
    "kube": ["kube", "cpu"],
    "manifest": ["manifest", "{}/sbom.json", "--registry", "localhost:5000"],
    "pin": ["pin", "cpu"],
    "push": ["push", "cpu", "--registry", "localhost:5000"],
    "run": ["run", "cpu"],
    "sbom": ["sbom", "a:1"],
    "size": ["size", "a:1"],
    "static": ["static", "a:1"],
    "test": ["test", "--image", "a:1", "--as", "cpu"],
    "update": ["update", "cpu"],
}


def _command_line(root: Path, command: str, param: click.Parameter, value: str) -> list[str]:
    base = [a.replace("{}", str(root)) for a in BASE_ARGS[command]]
    if isinstance(param, click.Argument):
        # The argument's place in the base line takes the value (diff's A, B; size's IMAGE; audit's SBOM_FILE).
        assert command in BASE_ARGS, command
        index = {"a": 1, "b": 2, "pushed": 1, "sbom_file": 1, "image": 1}[param.name or ""]
        return [*base[:index], value, *base[index + 1 :]]
    flag = max(param.opts, key=len)
    if command == "":
        return [flag, value, *base]
    if flag in base:  # a required option of the base line
        i = base.index(flag)
        return [*base[: i + 1], value, *base[i + 2 :]]
    extra = ["--sign-key", value] if flag == "--smoke-report" else []  # --smoke-report needs --sign-key
    return [*base, *extra, flag, value]


CASES = [
    pytest.param(command, param, value, id=f"{command or 'group'}-{param.name}-{value}")
    for command, param, kind in KINDED
    for value in (sorted(REFERENCE_VALUES) if kind in _params._REFERENCE_RULES else sorted(PATH_VALUES))
    if command in BASE_ARGS
]


def _tree(root: Path) -> dict[str, tuple[int, str | None] | None]:
    """Every name under ``root`` (the project copy's aside) and what it is."""
    project = str(root / "project")
    return {str(p): _snapshot(p) for p in sorted(root.rglob("*")) if not str(p).startswith(project)}


@pytest.fixture
def no_reader_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(streams, "FIFO_READER_WAIT_S", 0.2)


@pytest.fixture
def stop_after_the_check(monkeypatch: pytest.MonkeyPatch) -> None:
    """A command line whose values keep their rules stops right after the check (exit 0): nothing past it runs (no
    engine, no index); the writes of a taken stream are the bundle tests' below."""
    check = _params.check

    def check_then_stop(ctx: click.Context) -> None:
        check(ctx)
        raise click.exceptions.Exit(0)

    monkeypatch.setattr(_params, "check", check_then_stop)


@pytest.mark.parametrize(("command", "param", "value"), CASES)
def test_every_parameter_of_a_kind_gets_its_rule_from_the_command_line(
    tmp_path: Path, command: str, param: click.Parameter, value: str, stop_after_the_check: None
) -> None:
    assert isinstance(param.type, KindType)
    kind = param.type.kind
    matrix = copy_checkout(tmp_path / "project")
    (tmp_path / "sbom.json").write_text("{}")
    if kind in _params._REFERENCE_RULES:
        given, refused = REFERENCE_VALUES[value], True
    else:
        given, refused = str(PATH_VALUES[value](tmp_path)), value in REFUSED[kind]
    before = _tree(tmp_path)
    argv = ["--matrix", str(matrix), *_command_line(tmp_path, command, param, given)]
    if param.name != "out_dir":
        argv = ["--out", str(tmp_path / "out"), *argv]
    result = CliRunner().invoke(main, argv)
    assert "Traceback" not in result.output, result.output
    if refused:
        assert result.exit_code == ExitCode.CONFIG, result.output
        assert f"  - {_params.flag_of(param)}" in result.output, result.output
    else:
        assert result.exit_code == 0, result.output
    assert _tree(tmp_path) == before, "a check writes nothing, and replaces nothing"


@pytest.mark.parametrize("with_reader", [True, False], ids=["reader", "no-reader"])
def test_bundle_out_to_a_fifo_is_written_in_place_or_refused_never_replaced(
    tmp_path: Path, with_reader: bool, no_reader_wait: None
) -> None:
    """Before: ``bundle --out FIFO`` replaced the FIFO with a regular file, and its reader got nothing."""
    fifo = _fifo(tmp_path)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    if with_reader:
        reader.start()
    result = CliRunner().invoke(main, ["--out", str(tmp_path / "out"), "bundle", "cpu", "--out", str(fifo)])
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode), "the FIFO is still a FIFO"
    if with_reader:
        reader.join(30)
        assert result.exit_code == 0, result.output
        assert got and got[0].startswith(b"#!/usr/bin/env python3\n"), "the reader got the bundle"
    else:
        assert result.exit_code == ExitCode.CONFIG, result.output
        assert "FIFO no process read" in result.output and "start its reader first" in result.output


@pytest.mark.parametrize("target", ["/dev/null", "/dev/stdout"])
def test_bundle_out_through_a_link_into_dev_writes_in_place(tmp_path: Path, target: str) -> None:
    """Before: ``bundle --out`` replaced the name (as root, ``--out /dev/null`` replaced the machine's /dev/null)."""
    link = _link(tmp_path, target)
    result = CliRunner().invoke(main, ["--out", str(tmp_path / "out"), "bundle", "cpu", "--out", str(link)])
    assert result.exit_code == 0, result.output
    assert os.readlink(link) == target, "the link is still the link"


def test_bundle_out_to_a_device_node_writes_in_place(tmp_path: Path) -> None:
    device = _null_device(tmp_path)
    before = _snapshot(device)
    result = CliRunner().invoke(main, ["--out", str(tmp_path / "out"), "bundle", "cpu", "--out", str(device)])
    assert result.exit_code == 0, result.output
    assert _snapshot(device) == before


NAMESPACE_SCRIPT = """set -e
mount -t tmpfs tmpfs /dev
mknod -m 666 /dev/null c 1 3
ln -s /proc/self/fd/1 /dev/stdout
"$1" -m matrixtool --out "$2/out" bundle cpu --out /dev/null
"$1" -m matrixtool --out "$2/out" bundle cpu --out /dev/stdout > "$2/redirected"
stat -c '%F %t:%T' /dev/null > "$2/null"
readlink /dev/stdout > "$2/stdout"
"""


@pytest.mark.subprocess
@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"), reason="needs root and unshare(1)")
def test_as_root_bundle_out_dev_null_and_dev_stdout_are_written_in_place(tmp_path: Path) -> None:
    """The literal names, as root: in a mount namespace of its own whose ``/dev`` is a scratch tmpfs holding a null
    device and the ``/dev/stdout`` link, so a rule that replaced them would replace those, never the machine's (``set
    -e``: nothing runs unless the scratch ``/dev`` is mounted). Before: both were replaced by the 111 kB bundle."""
    script = tmp_path / "ns.sh"
    script.write_text(NAMESPACE_SCRIPT)
    proc = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", str(script), sys.executable, str(tmp_path)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    if proc.returncode != 0 and "mount" in proc.stderr and not (tmp_path / "null").exists():
        pytest.skip(f"no mount namespace here: {proc.stderr.strip()[-200:]}")
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "null").read_text().split() == ["character", "special", "file", "1:3"]
    assert (tmp_path / "stdout").read_text().strip() == "/proc/self/fd/1"
    assert (tmp_path / "redirected").read_bytes().startswith(b"#!/usr/bin/env python3\n"), "the bundle went to stdout"


@pytest.mark.subprocess
def test_a_report_to_dev_stdout_redirected_to_a_file_is_written_through_stdout_in_order(tmp_path: Path) -> None:
    """Before: ``--json-file /dev/stdout`` opened a new description of the redirected file at offset 0, and the table
    printed after it overwrote the report. A scratch link to ``/dev/stdout`` stands for the name."""
    link = _link(tmp_path, "/dev/stdout")
    argv = [sys.executable, "-m", "matrixtool", "--out", str(tmp_path / "out"), "test", "--host", "--as", "cpu"]
    argv += ["--only", "triton-import", "--json-file", str(link)]
    with open(tmp_path / "redirected", "w") as out:
        proc = subprocess.run(argv, stdout=out, stderr=subprocess.PIPE, text=True, timeout=300, check=False)
    assert proc.returncode in (0, ExitCode.SMOKE), proc.stderr
    assert os.readlink(link) == "/dev/stdout"
    text = (tmp_path / "redirected").read_text()
    document, end = json.JSONDecoder().raw_decode(text)
    assert document["checks"][0]["check"] == "triton-import", "the whole report, first"
    assert "triton-import" in text[end:] and "suite: full" in text[end:], "then the table, after it"


def test_every_problem_of_a_command_line_is_named_at_once(tmp_path: Path) -> None:
    args = ["--out", str(tmp_path / "out"), "build", "cpu", "--registry", "localhost:99999", "--repository", "Up"]
    args += ["--junit", str(tmp_path), "--ca-cert", str(tmp_path / "none.pem")]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == ExitCode.CONFIG
    for flag in ("--registry 'localhost:99999'", "--repository 'Up'", "--junit:", "--ca-cert:"):
        assert flag in result.output, result.output
    assert "4 problem(s)" in result.output


@pytest.mark.parametrize("command", [["size", "localhost:99999/x"], ["diff", "localhost:99999/x", "a:1"]])
def test_an_image_reference_with_a_port_out_of_range_is_exit_3_not_the_engines_8(command: list[str]) -> None:
    """Before: the grammar took any digits as a port, and the engine refused it (exit 8)."""
    result = CliRunner().invoke(main, command)
    assert result.exit_code == ExitCode.CONFIG and "has port 99999, outside 1-65535" in result.output


def test_the_bug_exit_guard_sees_exit_1() -> None:
    assert bug_exits([("render", 0), ("kube cpu", 1), ("size x", 3)]) == ["kube cpu"]


@pytest.mark.bug_exit
def test_a_command_that_crashes_exits_1_and_the_guard_records_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """The ``bug_exit`` marker lets this one test reach exit 1; without it ``no_bug_exit`` would fail the test."""
    from matrixtool.commands import render

    def crash(*args: object, **kwargs: object) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(render, "run", crash)
    result = CliRunner().invoke(main, ["render"])
    assert result.exit_code == ExitCode.UNEXPECTED and "unexpected RuntimeError" in result.output


EMPTY_CASES = [
    pytest.param(command, param, id=f"{command or 'group'}-{param.name}")
    for command, param, kind in KINDED
    if kind in _params._PATH_RULES and command in BASE_ARGS
]


@pytest.mark.parametrize(("command", "param"), EMPTY_CASES)
def test_every_path_parameter_refuses_an_empty_path(
    tmp_path: Path, command: str, param: click.Parameter, stop_after_the_check: None
) -> None:
    """``--out "$UNSET"``: Path("") is the working folder, which no flag of a path means (helper "hostile")."""
    matrix = copy_checkout(tmp_path / "project")
    (tmp_path / "sbom.json").write_text("{}")
    before = _tree(tmp_path)
    argv = ["--matrix", str(matrix), *_command_line(tmp_path, command, param, "")]
    if command == "" and param.name == "matrix_path":
        argv = _command_line(tmp_path, command, param, "")
    if param.name != "out_dir":
        argv = ["--out", str(tmp_path / "out"), *argv]
    result = CliRunner().invoke(main, argv)
    assert result.exit_code == ExitCode.CONFIG, result.output
    assert f"  - {_params.flag_of(param)}: an empty path" in result.output, result.output
    assert _tree(tmp_path) == before
