"""The schema's errors of ``matrix.yaml`` that jsonschema words for a schema's author, in a newcomer's words: a name
that breaks a ``propertyNames`` rule at its own key path with the rule in words (not the regular expression), a
``oneOf`` as its alternatives (``a string or a list of strings``), and a number, boolean or null where text goes
as what YAML made of it and how to quote it. ``matrixfile._describe`` words the rest."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import jsonschema

from matrixtool.model.variantrules import show

# The longest name a problem line writes out in its key path; a longer one is cut (``…`` marks the cut).
SHOWN_NAME = 60


def key_path(parts: Iterable[Any]) -> str:
    """A problem line's key path: ``variants.cpu.env`` (``(top level)`` for none)."""
    return ".".join(str(p) for p in parts) or "(top level)"


# The name rules of the schema's ``propertyNames``, in words (a regular expression is no instruction to a newcomer).
_NAME_RULES = {
    "^[a-z][a-z0-9-]*$": "lowercase letters, digits and '-', starting with a letter",
    "^[a-z0-9][a-z0-9-]*$": "lowercase letters, digits and '-', starting with a letter or digit",
    "^[A-Z_][A-Z0-9_]*$": "upper-case letters, digits and '_', not starting with a digit",
}
# What the mapping a name is a key of calls it: ``variants.<name>`` is a variant name.
_NAME_NOUNS = {"variants": "variant name", "profiles": "profile name", "env": "variable name"}
# The words for a JSON type a value of the wrong type should have been.
_TYPE_WORDS = {
    "string": "a string",
    "integer": "a whole number",
    "number": "a number",
    "boolean": "true or false",
    "object": "a mapping",
    "array": "a list",
}


def _name_problem(error: jsonschema.ValidationError, limit: int) -> str | None:
    """A ``propertyNames`` error as one line at the name's own key path (``variants.a/b: the variant name must be
    ...``, the line ``variantrules`` writes for a variant, so the two are one), or None where the name cannot be
    shown as a key (a control character, past the string limit: ``_string_problems`` names it)."""
    name = error.instance
    if "propertyNames" not in error.absolute_schema_path or not isinstance(name, str):
        return None
    if not name.isprintable() or len(name) > limit:
        return None
    parent = list(error.absolute_path)
    noun = _NAME_NOUNS.get(str(parent[-1]) if parent else "", "name")
    where = key_path([*parent, name if len(name) <= SHOWN_NAME else name[:SHOWN_NAME] + "…"])
    if error.validator == "pattern":
        rule = _NAME_RULES.get(str(error.validator_value), f"a match of {error.validator_value}")
        return f"{where}: the {noun} must be {rule}"
    if error.validator == "maxLength":
        return f"{where}: the {noun} is too long ({len(name)} characters; at most {error.validator_value})"
    return None


def _alternatives(subschemas: Any) -> str:
    """The alternatives of a ``oneOf``/``anyOf`` in words: ``a string or a list of strings``."""
    words = []
    for sub in subschemas if isinstance(subschemas, list) else []:
        kind = sub.get("type") if isinstance(sub, dict) else None
        items = sub.get("items", {}).get("type") if kind == "array" and isinstance(sub.get("items"), dict) else None
        if items in ("string", "object"):
            words.append(f"a list of {'strings' if items == 'string' else 'mappings'}")
        elif isinstance(kind, str):
            words.append(_TYPE_WORDS.get(kind, kind))
    return " or ".join(dict.fromkeys(words)) or "one of the forms the schema allows"


def _type_problem(error: jsonschema.ValidationError, where: str) -> str | None:
    """A value of the wrong type that YAML made of text the user meant as a string: an unquoted ``3.10`` is the
    number 3.1, ``yes``/``on`` are booleans, an empty value is null. None for other type errors."""
    wanted = error.validator_value
    if error.validator != "type" or (
        wanted != "string" and "string" not in (wanted if isinstance(wanted, list) else [])
    ):
        return None
    value = error.instance
    if value is None:
        return f"{where}: is empty (YAML reads a key with no value as null); write the value or remove the key"
    if isinstance(value, bool):
        return (
            f"{where}: {str(value).lower()} is read as a boolean (YAML 1.1 reads yes/no/on/off/true/false so), "
            "not as text; quote the value as written"
        )
    if isinstance(value, float):
        return (
            f"{where}: {value!r} is read as a number, not as text; quote the value as written (an unquoted 3.10 "
            'is the number 3.1: write "3.10")'
        )
    if isinstance(value, int):
        return f"{where}: {value!r} is read as a number, not as text; quote the value as written"
    return None


def describe(error: jsonschema.ValidationError, *, limit: int) -> str | None:
    """One problem line for ``error`` where this module words it better than jsonschema, else None; ``limit``: the
    longest string a name may be and still be shown as a key (characters)."""
    where = key_path(error.absolute_path)
    named = _name_problem(error, limit)
    if named is not None:
        return named
    typed = _type_problem(error, where)
    if typed is not None:
        return typed
    if error.validator in ("oneOf", "anyOf"):
        value = error.instance
        shown = show(value) if isinstance(value, str) else show(repr(value)).strip("'\"")
        return f"{where}: {shown} is not {_alternatives(error.validator_value)}"
    return None
