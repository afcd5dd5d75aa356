"""Input the tool did not write itself: shown with its control characters escaped, and checked against a JSON
Schema before any field of it is used."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jsonschema

from matrixtool.core.errors import ConfigError, MatrixError

# Characters escaped by ``shown``: C0 and C1 controls, DEL, and the line and paragraph separators and bidi
# overrides a terminal or an editor shows as something else (Trojan Source).
_INVISIBLE = frozenset("\u2028\u2029\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f")


def _escaped(c: str) -> str:
    code = ord(c)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def shown(text: str, *, lines: bool = False) -> str:
    """``text`` with every control character (``\\x1b``, ``\\r``, C1, DEL, bidi overrides) written as an
    escape (``\\x1b``), so a terminal shows it and never acts on it. ``lines``: newlines are kept (a log's
    lines), else written ``\\n`` too, so a value cannot start a line of its own (a forged ``error:`` line)."""
    out = []
    for c in text:
        if c in "\n\t" and lines:
            out.append(c)
        elif c in _INVISIBLE or not c.isprintable():
            out.append(_escaped(c))
        else:
            out.append(c)
    return "".join(out)


def _where(error: jsonschema.ValidationError) -> str:
    path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path).lstrip(".")
    return shown(path) or "(the document)"


def shape_problems(doc: Any, schema: Mapping[str, Any], *, limit: int = 10) -> list[str]:
    """Where ``doc`` (parsed JSON) departs from the JSON Schema ``schema``, as ``key.path[0]: what is wrong``,
    the first ``limit`` by position (empty: it fits)."""
    validator = jsonschema.Draft202012Validator(schema)
    try:
        errors = sorted(validator.iter_errors(doc), key=lambda e: [str(p) for p in e.absolute_path])
    except RecursionError:
        return ["(the document): nested too deeply"]
    problems = []
    for error in errors[:limit]:
        message = error.message if len(error.message) <= 200 else error.message[:200] + "..."
        problems.append(f"{_where(error)}: {shown(message)}")
    return problems


def check_shape(
    doc: Any,
    schema: Mapping[str, Any],
    *,
    source: str,
    what: str,
    error: type[MatrixError] | None = None,
) -> None:
    """Refuse ``doc`` unless it fits ``schema``: one message naming ``source`` (the file), each key path and what is
    wrong there, and that it is not ``what`` (a noun phrase: "a CycloneDX JSON document"), to pass one. Raises
    ConfigError (exit 3), or ``error`` (its message holds the same lines) where a command documents another exit code
    for such a file (``SbomError``, exit 16)."""
    problems = shape_problems(doc, schema)
    if not problems:
        return
    problems.append(f"not {what}; pass one")
    if error is None:
        raise ConfigError(shown(source), problems)
    raise error(f"{shown(source)}: not {what}; pass one:\n" + "\n".join(f"  - {p}" for p in problems[:-1]))
