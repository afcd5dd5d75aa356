"""The commands of ``tools/matrix``, one module each (``commands/<name>.py``).

Each module holds a frozen keyword-only ``Args`` (validated on construction), ``run(args)`` returning a
report value (no click, no printing of the result), and ``command``, the click command that parses its
flags into ``Args`` by name, calls ``run`` and renders the value. A new command is a new module and one
line in ``MODULES`` (here); ``tests/unit/commands/test_commands.py`` fails when a module is not registered.
"""

from __future__ import annotations

import importlib

import click

# One line per command: the module name under ``matrixtool.commands`` (``--help`` lists them sorted).
MODULES = (
    "render",
    "doctor",
    "base",
    "build",
    "run",
    "test",
    "bundle",
    "ci_matrix",
    "bake",
    "push",
    "manifest",
    "pin",
    "kube",
    "update",
    "diff",
    "sbom",
    "audit",
    "static",
)


def all_commands() -> list[click.Command]:
    """The ``command`` of every module of ``MODULES``, imported now.

    Raises:
        TypeError: a module's ``command`` is not a click command (a defect of that module).
    """
    found = []
    for name in MODULES:
        command = importlib.import_module(f"matrixtool.commands.{name}").command
        if not isinstance(command, click.Command):
            raise TypeError(f"matrixtool.commands.{name}.command is {type(command).__name__}, not a click.Command")
        found.append(command)
    return found
