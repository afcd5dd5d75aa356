"""``tools/wheelhouse.sh``: the pip command that fills build/wheelhouse asks for the wheel of the variant's Python
and platform (from ``tools/matrix ci-matrix``), not the host's; real pip picks it from a local folder of wheels."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from matrixtool.model.matrixfile import load_matrix
from tests.conftest import REPO_ROOT

pytestmark = pytest.mark.subprocess  # runs tools/wheelhouse.sh (tools/matrix ci-matrix) and real pip, no network

SCRIPT = REPO_ROOT / "tools" / "wheelhouse.sh"
VARIANTS = {v.name: v for v in load_matrix().variants}


def _commands(*variants: str) -> list[list[str]]:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT / "tools")}
    result = subprocess.run(
        [SCRIPT, "--print-command", *variants], capture_output=True, text=True, env=env, check=False, timeout=120
    )
    assert result.returncode == 0, result.stderr
    return [shlex.split(line) for line in result.stdout.splitlines()]


def _wheel(folder: Path, tag: str) -> Path:
    """A minimal valid wheel of torch 2.13.0+cpu with ``tag`` (``cp311-cp311-manylinux_2_28_x86_64``)."""
    path = folder / f"torch-2.13.0+cpu-{tag}.whl"
    info = "torch-2.13.0+cpu.dist-info"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"{info}/METADATA", "Metadata-Version: 2.1\nName: torch\nVersion: 2.13.0+cpu\n")
        z.writestr(f"{info}/WHEEL", f"Wheel-Version: 1.0\nRoot-Is-Purelib: false\nTag: {tag}\n")
        z.writestr(f"{info}/RECORD", "")
    return path


def _option(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_one_command_per_wheelhouse_variant_and_platform_for_its_python_and_platform() -> None:
    commands = _commands()
    wanted = {
        (v.python, f"manylinux_2_28_{'aarch64' if p.arch == 'arm64' else 'x86_64'}")
        for v in VARIANTS.values()
        if v.index.wheelhouse
        for p in v.platforms
    }
    got = {(_option(c, "--python-version"), _option(c, "--platform")) for c in commands}
    assert got == wanted and len(commands) == len(wanted)
    for argv in commands:
        python = _option(argv, "--python-version")
        assert _option(argv, "--abi") == "cp" + python.replace(".", "")
        assert _option(argv, "--implementation") == "cp" and "--only-binary=:all:" in argv
    assert _commands("cuda") == []


@pytest.mark.parametrize("variant", [n for n, v in VARIANTS.items() if v.index.wheelhouse])
def test_pip_downloads_the_variants_wheel_whatever_the_hosts_python(variant: str, tmp_path: Path) -> None:
    (argv,) = _commands(variant)
    links, out = tmp_path / "links", tmp_path / "out"
    links.mkdir()
    python = _option(argv, "--python-version").replace(".", "")
    arch = "aarch64" if _option(argv, "--platform").endswith("aarch64") else "x86_64"
    wanted = _wheel(links, f"cp{python}-cp{python}-manylinux_2_28_{arch}")
    # The host Python's wheel and the other machine's: neither may be taken.
    host = f"cp{sys.version_info.major}{sys.version_info.minor}"
    other_arch = "x86_64" if arch == "aarch64" else "aarch64"
    others = {f"{host}-{host}-manylinux_2_28_{arch}", f"cp{python}-cp{python}-manylinux_2_28_{other_arch}"}
    for tag in others - {wanted.name.removeprefix("torch-2.13.0+cpu-").removesuffix(".whl")}:
        _wheel(links, tag)
    i = argv.index("--index-url")
    argv[i : i + 2] = ["--no-index", "--find-links", str(links)]
    argv[argv.index("-d") + 1] = str(out)
    argv[0] = sys.executable
    result = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=120)
    assert result.returncode == 0, result.stderr
    assert [p.name for p in out.iterdir()] == [wanted.name]


def _script(*args: str, cwd: Path, links: str | None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT / "tools"), "PIP_CONFIG_FILE": os.devnull}
    env.pop("PIP_FIND_LINKS", None)
    if links is not None:
        env["PIP_FIND_LINKS"] = links
    return subprocess.run([SCRIPT, *args], capture_output=True, text=True, env=env, cwd=cwd, check=False, timeout=120)


def test_a_configured_folder_is_the_callers_never_a_glob_and_variants_are_checked_first(tmp_path: Path) -> None:
    (tmp_path / "wheels").mkdir()
    found = _script("cpu", cwd=tmp_path, links="wheels")
    assert found.returncode == 0 and found.stdout.strip() == str(tmp_path / "wheels"), found.stderr
    bad = _script("nope", cwd=tmp_path, links=str(tmp_path / "wheels"))
    assert bad.returncode == 4 and "no variant 'nope'" in bad.stderr and not bad.stdout
    late = _script("cpu", "--print-command", cwd=tmp_path, links=str(tmp_path / "wheels"))
    assert late.returncode == 0 and late.stdout.startswith("python3 -m pip download"), late.stderr
    assert _script("--help", cwd=tmp_path, links=None).stdout.startswith("usage: tools/wheelhouse.sh")
    unknown = _script("--bogus", cwd=tmp_path, links=None)
    assert unknown.returncode == 2 and "unknown option --bogus" in unknown.stderr
    # `*` is a name, never a glob: the caller's `wheels` folder is not what it names, the next folder listed is.
    (tmp_path / "other").mkdir()
    star = _script("cpu", cwd=tmp_path, links=f"* {tmp_path / 'other'}")
    assert star.returncode == 0 and star.stdout.strip() == str(tmp_path / "other"), star.stderr
