#!/usr/bin/env python3
"""Rewrite the generated tables of ``docs/`` from the code: the check table from the checks' declarations
(``docs/checks.md``), the command table from the click commands and the exit-code table from
``errors.ExitCode`` (``docs/commands.md``), the run-condition table from ``conditions.ROWS``
(``docs/profiles.md``), and the README's serve command line from the one the serve check
runs (``matrixtool.smoke.serve.readme_block``).

Each table sits between ``<!-- NAME:start -->`` and ``<!-- NAME:end -->`` in its file. ``tools/docs_tables.py``
rewrites them; ``--check`` only compares (exit 1 on drift, naming the file and table). A unit test
(tests/unit/test_checks_package.py) fails when a table drifts from the code.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from matrixtool.core.errors import exit_code_table
from matrixtool.model.checks import readme_table
from matrixtool.smoke.serve import readme_block

ROOT = Path(__file__).resolve().parent.parent


def commands_table() -> str:
    """The command table: one row per command of ``tools/matrix``: its usage, its help text and its options."""
    import click

    from matrixtool.cli import main

    rows = ["| command | does | options |", "|---|---|---|"]
    parent = click.Context(main, info_name="tools/matrix")
    for name, command in main.commands.items():
        usage = " ".join(command.collect_usage_pieces(click.Context(command, info_name=name, parent=parent)))
        does = " ".join((command.help or "").split()).replace("|", "\\|")
        flags = [
            " / ".join(f"`{o}`" for o in (*p.opts, *p.secondary_opts))
            for p in command.params
            if isinstance(p, click.Option) and "--help" not in p.opts
        ]
        synopsis = f"tools/matrix {name} {usage.replace('[OPTIONS]', '')}".strip()
        rows.append(f"| `{synopsis}` | {does} | {', '.join(flags)} |")
    return "\n".join(rows) + "\n"


def conditions_table() -> str:
    """The run-condition table (``conditions.markdown_table``) with the checks that declare each condition."""
    from matrixtool.model import conditions
    from matrixtool.model.checks import CHECKS

    affects = {c: [n for n, info in CHECKS.items() if c in info.affected_by] for c in conditions.Condition}
    return conditions.markdown_table(affects)


# (file under the repository root, table name, generator)
TABLES: tuple[tuple[str, str, Callable[[], str]], ...] = (
    ("docs/checks.md", "checks-table", readme_table),
    ("docs/commands.md", "commands-table", commands_table),
    ("docs/commands.md", "exit-codes-table", exit_code_table),
    ("docs/profiles.md", "conditions-table", conditions_table),
    ("README.md", "serve-command", readme_block),
)


def rewritten(text: str, name: str, table: str) -> str:
    """``text`` with the table ``name`` replaced by ``table``.

    Raises:
        ValueError: ``text`` lacks the table's start or end marker.
    """
    start, end = f"<!-- {name}:start -->\n", f"<!-- {name}:end -->\n"
    head, found_start, rest = text.partition(start)
    _, found_end, tail = rest.partition(end)
    if not found_start or not found_end:
        raise ValueError(f"lacks the markers {start.strip()} ... {end.strip()}")
    return head + start + table + end + tail


def drifted(root: Path = ROOT) -> list[str]:
    """``file: table`` for each generated table that differs from the code."""
    found = []
    for path, name, make in TABLES:
        text = (root / path).read_text(encoding="utf-8")
        if rewritten(text, name, make()) != text:
            found.append(f"{path}: {name}")
    return found


def main(argv: list[str]) -> int:
    """Rewrite the tables (or with ``--check``, return 1 when one differs); the exit status."""
    if "--check" in argv:
        stale = drifted()
        for line in stale:
            print(f"{line} differs from the code: run tools/docs_tables.py", file=sys.stderr)
        return 1 if stale else 0
    for path, name, make in TABLES:
        file = ROOT / path
        text = file.read_text(encoding="utf-8")
        new = rewritten(text, name, make())
        if new != text:
            partial = file.with_suffix(".md.partial")
            partial.write_text(new, encoding="utf-8")
            partial.replace(file)
            print(f"rewrote {path}: {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
