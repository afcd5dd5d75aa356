"""The command registry and the unit-test guard: every command module is registered, each has the parts of
the convention, and a unit test cannot start a program unless it says so."""

from __future__ import annotations

import dataclasses
import enum
import importlib
import os
import re
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from matrixtool import commands
from matrixtool.cli import main
from matrixtool.commands._registry import MODULES

COMMANDS_DIR = Path(commands.__file__).parent


def test_every_command_module_is_registered_once() -> None:
    files = sorted(p.stem for p in COMMANDS_DIR.glob("*.py") if not p.stem.startswith("_"))
    assert sorted(MODULES) == files
    assert len(set(MODULES)) == len(MODULES)
    assert list(main.commands) == [importlib.import_module(f"matrixtool.commands.{m}").command.name for m in MODULES]


@pytest.mark.parametrize("name", MODULES)
def test_each_command_module_has_frozen_kw_only_args_run_and_command(name: str) -> None:
    module = importlib.import_module(f"matrixtool.commands.{name}")
    params = module.Args.__dataclass_params__
    assert params.frozen and module.Args.__dataclass_fields__  # a frozen dataclass
    assert all(f.kw_only for f in dataclasses.fields(module.Args))
    assert callable(module.run) and isinstance(module.command, click.Command)


def test_a_unit_test_cannot_start_a_program() -> None:
    with pytest.raises(BaseException, match=r"mark the test @pytest\.mark\.subprocess") as info:
        subprocess.run(["true"], check=False)
    assert "'true'" in str(info.value)
    with pytest.raises(BaseException, match=r"os\.system"):
        os.system("true")
    with pytest.raises(BaseException, match=r"subprocess\.Popen"):
        os.popen("true")


@pytest.mark.subprocess
def test_a_marked_unit_test_can() -> None:
    assert subprocess.run([sys.executable, "-c", "print(1)"], capture_output=True, text=True).stdout == "1\n"


@pytest.mark.parametrize("name", list(main.commands))
def test_help_shows_each_default_as_it_is_typed(name: str) -> None:
    """An enum default shows its repr (``[default: FULL]``) where the flag takes its value (``full``)."""
    command = main.commands[name]
    for param in command.params:
        if isinstance(param, click.Option) and param.show_default:
            assert not isinstance(param.default, enum.Enum), f"{name} {param.opts[0]}: default {param.default!r}"
    text = CliRunner().invoke(main, [name, "--help"], catch_exceptions=False).output
    shown = re.findall(r"\[default: ([^;\]]+)", " ".join(text.split()))
    assert [s for s in shown if s != s.lower() and not s.startswith("/")] == [], shown
