"""Choose the variants a command works on."""

from __future__ import annotations

import difflib
from collections.abc import Sequence

from matrixtool.errors import NothingSelectedError
from matrixtool.matrix import Matrix, Variant


def select_variants(matrix: Matrix, names: Sequence[str]) -> list[Variant]:
    """The variants named in ``names`` (in matrix order), or every variant for ``all``/no names.

    Raises:
        NothingSelectedError: a name matches no variant (the message suggests the nearest one).
    """
    if not names or "all" in names:
        return list(matrix.variants)
    known = matrix.names()
    unknown = [n for n in names if n not in known]
    if unknown:
        parts = []
        for name in unknown:
            close = difflib.get_close_matches(name, known, n=1)
            parts.append(f"'{name}'" + (f" (did you mean '{close[0]}'?)" if close else ""))
        raise NothingSelectedError(
            f"no variant {', '.join(parts)} in {matrix.source.name}; variants: {', '.join(known)}"
        )
    return [v for v in matrix.variants if v.name in names]
