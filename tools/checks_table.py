#!/usr/bin/env python3
"""Rewrite the README's check table from the checks' declarations (``incontainer/vllm_smoke``).

``tools/checks_table.py`` rewrites the section between ``<!-- checks-table:start -->`` and
``<!-- checks-table:end -->`` of README.md; ``--check`` only compares (exit 1 on drift). A unit test
(tests/unit/test_checks_package.py) fails when the README's table drifts from the declarations.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from matrixtool.checks import readme_table

README = Path(__file__).resolve().parent.parent / "README.md"
START, END = "<!-- checks-table:start -->\n", "<!-- checks-table:end -->\n"


def rewritten(text: str) -> str:
    """``text`` (the README) with its marked check table replaced; raises ValueError without the markers."""
    head, start, rest = text.partition(START)
    _, end, tail = rest.partition(END)
    if not start or not end:
        raise ValueError(f"README.md lacks the markers {START.strip()} ... {END.strip()}")
    return head + START + readme_table() + END + tail


def main(argv: list[str]) -> int:
    """Rewrite README.md (or with ``--check``, return 1 when it differs); the exit status."""
    text = README.read_text(encoding="utf-8")
    new = rewritten(text)
    if "--check" in argv:
        if new != text:
            print("README.md's check table differs from the declarations: run tools/checks_table.py", file=sys.stderr)
            return 1
        return 0
    if new != text:
        partial = README.with_suffix(".md.partial")
        partial.write_text(new, encoding="utf-8")
        partial.replace(README)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
