"""How a problem names the way out of an unknown name a user typed (a variant, a check, a profile): the names a
list written as one value holds (``--only serve,pip-check``, ``run cpu,arm64``: each is its own flag or argument), or
the nearest known name (``Serve``: did you mean 'serve'?)."""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence

_SEPARATORS = re.compile(r"[,;\s]+")


def unknown_hint(value: str, known: Sequence[str], *, each: str) -> str:
    """The clause to append to "no NAME ..." (starting with ``"; "``, or "" when there is none). ``each``: how one
    name is given, ``{}`` standing for it (``"--only {}"``, ``"{}"`` for an argument). A value that splits on commas,
    semicolons or whitespace into known names only is a list: the clause gives each one its own flag or argument."""
    parts = [p for p in _SEPARATORS.split(value.strip()) if p]
    if len(parts) > 1 and all(p in known for p in parts):
        return (
            "; one name per "
            + ("flag" if each.strip() != "{}" else "argument")
            + ": "
            + " ".join(each.format(p) for p in parts)
        )
    close = difflib.get_close_matches(value, known, n=1) or difflib.get_close_matches(value.lower(), known, n=1)
    return f"; did you mean '{close[0]}'?" if close else ""
