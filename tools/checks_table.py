#!/usr/bin/env python3
"""Rewrite the README's generated sections: the check table from the checks' declarations
(``incontainer/vllm_smoke``), the serve command line from the one the serve check runs (``matrixtool.serve``).

``tools/checks_table.py`` rewrites the sections between ``<!-- checks-table:start -->`` and
``<!-- checks-table:end -->`` (and ``serve-command``) of README.md; ``--check`` only compares (exit 1 on drift).
A unit test (tests/unit/test_checks_package.py) fails when the README drifts from them.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from matrixtool.checks import readme_table
from matrixtool.serve import readme_block

README = Path(__file__).resolve().parent.parent / "README.md"
START, END = "<!-- checks-table:start -->\n", "<!-- checks-table:end -->\n"
SECTIONS = {"checks-table": readme_table, "serve-command": readme_block}


def rewritten(text: str) -> str:
    """``text`` (the README) with its marked sections (``SECTIONS``) replaced; raises ValueError without the
    markers."""
    for name, make in SECTIONS.items():
        start_mark, end_mark = f"<!-- {name}:start -->\n", f"<!-- {name}:end -->\n"
        head, start, rest = text.partition(start_mark)
        _, end, tail = rest.partition(end_mark)
        if not start or not end:
            raise ValueError(f"README.md lacks the markers {start_mark.strip()} ... {end_mark.strip()}")
        text = head + start_mark + make() + end_mark + tail
    return text


def main(argv: list[str]) -> int:
    """Rewrite README.md (or with ``--check``, return 1 when it differs); the exit status."""
    text = README.read_text(encoding="utf-8")
    new = rewritten(text)
    if "--check" in argv:
        if new != text:
            print("README.md's generated sections differ: run tools/checks_table.py", file=sys.stderr)
            return 1
        return 0
    if new != text:
        partial = README.with_suffix(".md.partial")
        partial.write_text(new, encoding="utf-8")
        partial.replace(README)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
