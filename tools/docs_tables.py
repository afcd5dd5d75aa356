#!/usr/bin/env python3
"""Rewrite the generated tables of ``docs/`` from the code: the check table from the checks' declarations
(``docs/checks.md``), the command table from the click commands and the exit-code table from
``errors.ExitCode`` (``docs/commands.md``), the run-condition table from ``conditions.ROWS``
(``docs/profiles.md``), the README's serve command line from the one the serve check
runs (``matrixtool.smoke.serve.line.readme_block``), the profile part of ``matrix.schema.json`` from
``conditions.ROWS`` and the golden file of the shipped matrix (``FILES``), and the wings of ``tools/matrixtool/``
with the levels of its import graph from the tree (``docs/architecture.md``).

Each table sits between ``<!-- NAME:start -->`` and ``<!-- NAME:end -->`` in its file. ``tools/docs_tables.py``
rewrites them; ``--check`` only compares (exit 1 on drift, naming the file and table). A unit test
(tests/unit/model/test_checks_package.py) fails when a table drifts from the code.
"""

from __future__ import annotations

import ast
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from matrixtool.core.errors import exit_code_table
from matrixtool.model.checks import readme_table
from matrixtool.smoke.serve.line import readme_block

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "tools" / "matrixtool"
# Runs inside images (stdlib only, no imports of the host's modules): one entry of the map, not its modules.
IN_IMAGE = "incontainer"
IN_IMAGE_SAYS = (
    "Runs inside images (stdlib only, Python >= 3.9): the checks (`vllm_smoke/`, shipped as a zipapp), "
    "`imagefacts` (`diff`), `sbom_inventory` (`sbom`)."
)


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


def _host_modules(package: Path = PACKAGE) -> dict[str, Path]:
    """The host's modules by dotted name under ``matrixtool`` (``core.errors``), less ``__init__``/``__main__``
    and the in-image package."""
    found = {}
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(package).with_suffix("").parts
        if parts[0] != IN_IMAGE and parts[-1] not in ("__init__", "__main__"):
            found[".".join(parts)] = path
    return found


def _imported(path: Path, modules: dict[str, Path]) -> set[str]:
    """The host modules that ``path`` imports anywhere in it (at the top or inside a function)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        for name in names:
            tail = name.removeprefix("matrixtool.")
            if name.startswith("matrixtool.") and tail in modules:
                found.add(tail)
    return found


def module_map(package: Path = PACKAGE) -> str:
    """The host's modules by level of the import graph: a module's level is one more than the highest level
    it imports (0: imports none of the others).

    Raises:
        ValueError: the modules import each other in a circle.
    """
    modules = _host_modules(package)
    imports = {name: _imported(path, modules) - {name} for name, path in modules.items()}
    level: dict[str, int] = {}
    while len(level) < len(imports):
        ready = {n: max((level[i] + 1 for i in deps), default=0) for n, deps in imports.items() if n not in level
                 and deps <= level.keys()}  # fmt: skip
        if not ready:
            raise ValueError(f"modules import each other in a circle: {sorted(imports.keys() - level.keys())}")
        level.update(ready)
    lines = []
    for n in range(max(level.values()) + 1):
        names = ", ".join(sorted(m for m, lv in level.items() if lv == n))
        lines += textwrap.wrap(names, 114, initial_indent=f"{n:2}: ", subsequent_indent="    ")
    return "```\n" + "\n".join(lines) + "\n```\n"


def wings(package: Path = PACKAGE) -> str:
    """One line per entry of ``tools/matrixtool/``: a folder with the first paragraph of its ``__init__``
    docstring (joined into one line) and its modules and packages, then the modules at the top with the first
    paragraph of theirs."""
    rows = []
    for entry in sorted(package.iterdir()):
        if entry.is_dir() and (entry / "__init__.py").is_file():
            doc = ast.get_docstring(ast.parse((entry / "__init__.py").read_text(encoding="utf-8"))) or ""
            inside = ", ".join(
                [f"`{p.stem}`" for p in sorted(entry.glob("*.py")) if p.stem != "__init__"]
                + [f"`{p.parent.name}/`" for p in sorted(entry.glob("*/__init__.py")) if entry.name != IN_IMAGE]
            )
            paragraph = " ".join(doc.split("\n\n")[0].split())
            first = IN_IMAGE_SAYS if entry.name == IN_IMAGE else f"{paragraph} {inside}."
            rows.append(f"- `{entry.name}/`: {first}")
    for entry in sorted(package.glob("*.py")):
        doc = ast.get_docstring(ast.parse(entry.read_text(encoding="utf-8"))) or ""
        rows.append(f"- `{entry.name}`: " + " ".join(doc.split(chr(10) + chr(10))[0].split()))
    return "\n".join(rows) + "\n"


# (file under the repository root, table name, generator)
TABLES: tuple[tuple[str, str, Callable[[], str]], ...] = (
    ("docs/checks.md", "checks-table", readme_table),
    ("docs/commands.md", "commands-table", commands_table),
    ("docs/commands.md", "exit-codes-table", exit_code_table),
    ("docs/profiles.md", "conditions-table", conditions_table),
    ("README.md", "serve-command", readme_block),
    ("docs/architecture.md", "wings", wings),
    ("docs/architecture.md", "module-map", module_map),
)


def schema_text() -> str:
    """``matrix.schema.json`` (package data of ``matrixtool.model``; editors are pointed at it) with its profile part
    generated from ``conditions.ROWS``: ``$defs.profile.properties`` is ``{row.key: row.schema}``, so a run condition
    is added by its row alone."""
    import json

    from matrixtool.model.conditions import profile_schema_properties

    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    schema["$defs"]["profile"]["properties"] = profile_schema_properties()
    return json.dumps(schema, indent=2) + "\n"


def shipped_matrix_text() -> str:
    """What the shipped ``matrix.yaml`` resolves to, as JSON (the golden file of tests/unit/model/
    test_shipped_matrix.py): each variant's accelerator, platforms, runner labels, publish_as, profiles and checks
    with their timeouts (seconds), the ``ci-matrix`` entries and the ``update`` groups. Every test of the logic
    runs on fixture matrices (tests/unit/data/matrix/); this file is the one place the shipped matrix is pinned."""
    import json

    from matrixtool.deploy import ci
    from matrixtool.model.matrixfile import load_matrix
    from matrixtool.model.yamlfile import parse_yaml, read_config_text
    from matrixtool.update import edits

    path = ROOT / "matrix.yaml"
    matrix = load_matrix(path)
    variants = {
        v.name: {
            "accelerator": v.accelerator.value,
            "platforms": [str(p) for p in v.platforms],
            "runner": list(v.runner),
            "publish_as": v.publish_as,
            "profiles": [p.name for p in v.profiles],
            "checks": {c.name: c.timeout for c in v.checks},
        }
        for v in matrix.variants
    }
    groups = edits.groups(parse_yaml(read_config_text(path), str(path)), matrix.names())
    facts = {
        "variants": variants,
        "ci_matrix": ci.ci_matrix(matrix.variants)["include"],
        "update_groups": {owner: members for owner, members in groups},
    }
    return json.dumps(facts, indent=2) + "\n"


SCHEMA = PACKAGE / "model" / "matrix.schema.json"
# Files generated whole: (path under ROOT, its text).
FILES: tuple[tuple[str, Callable[[], str]], ...] = (
    ("tools/matrixtool/model/matrix.schema.json", schema_text),
    ("tests/unit/data/matrix/shipped-matrix.json", shipped_matrix_text),
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


def drifted_files(root: Path = ROOT) -> list[str]:
    """Each file of ``FILES`` that differs from the code (tests/unit/model/test_shipped_matrix.py tests them)."""
    return [path for path, make in FILES if not (root / path).is_file() or (root / path).read_text("utf-8") != make()]


def main(argv: list[str]) -> int:
    """Rewrite the tables (or with ``--check``, return 1 when one differs); the exit status."""
    if "--check" in argv:
        stale = drifted() + drifted_files()
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
    for path, make in FILES:
        file = ROOT / path
        new = make()
        if not file.is_file() or file.read_text(encoding="utf-8") != new:
            partial = file.with_name(file.name + ".partial")
            partial.write_text(new, encoding="utf-8")
            partial.replace(file)
            print(f"rewrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
