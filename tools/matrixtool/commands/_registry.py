"""The commands of ``tools/matrix``, one module each: a frozen ``Args`` (validated on construction), ``run(args)``
returning a report value, and ``command``, the click command. ``tests/unit/commands/test_commands.py`` fails
when a module is not registered in ``MODULES``.
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
    "size",
    "sbom",
    "audit",
    "static",
)


def all_commands() -> list[click.Command]:
    """Raises TypeError: a module's ``command`` is not a click command (a defect of that module)."""
    found = []
    for name in MODULES:
        command = importlib.import_module(f"matrixtool.commands.{name}").command
        if not isinstance(command, click.Command):
            raise TypeError(f"matrixtool.commands.{name}.command is {type(command).__name__}, not a click.Command")
        found.append(command)
    return found
