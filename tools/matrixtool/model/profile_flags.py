"""The command-line flags of deployment profiles for ``run`` and ``test``: each value goes through its row's
``parse``, as ``matrix.yaml`` values do, so a bad one is a ConfigError (exit 3) before the command runs."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import click

from matrixtool.core.errors import ConfigError
from matrixtool.model import profiles
from matrixtool.model.conditions import ROWS, Row, Shape


def _option(row: Row) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    if row.shape is Shape.SWITCH:
        return click.option(f"{row.flag}/{row.flag_off}", row.key, default=None, help=row.help)
    many = row.shape in (Shape.MAPPING, Shape.LIST)
    return click.option(row.flag, row.key, multiple=many, default=None, metavar=row.metavar, help=row.help)


def _from_flag(row: Row, given: Any) -> Any:
    """The normal form of one flag's value(s); None when not given. Raises ValueError naming the flag and value."""
    if given is None or given == ():
        return None
    if row.shape is Shape.SWITCH:
        return bool(given)
    if row.shape is Shape.MAPPING:
        return profiles.parse_flag_entries(row, given)
    items = list(given) if row.shape is Shape.LIST else [given]
    parsed = []
    for item in items:
        try:
            parsed.append(row.parse(item))
        except ValueError as exc:
            raise ValueError(f"{row.flag} {item!r}: {exc}") from None
    return tuple(dict.fromkeys(parsed)) if row.shape is Shape.LIST else parsed[0]


def overrides_from_flags(flags: dict[str, Any]) -> profiles.Overrides:
    """``flags``: click's values, popped. Raises ConfigError (exit 3) listing every bad value."""
    values, problems = {}, []
    for row in ROWS:
        try:
            value = _from_flag(row, flags.pop(row.key))
        except ValueError as exc:
            problems.append(str(exc))
            continue
        if value is not None:
            values[row.condition] = value
    if problems:
        raise ConfigError("flags", problems)
    return profiles.Overrides(values=values)


def options(default_names: tuple[str, ...]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """--profile and the flags that override one condition (docs/profiles.md), as one
    ``choice: profiles.ProfileChoice`` argument."""

    def wrap(f: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(f)
        def wrapper(*args: Any, **kw: Any) -> Any:
            overrides = overrides_from_flags(kw)
            names = tuple(kw.pop("profile_names")) or default_names
            return f(*args, choice=profiles.ProfileChoice(names=names, overrides=overrides), **kw)

        default = ", ".join(default_names) if default_names else "every profile of the variant"
        command: Callable[..., Any] = wrapper
        for option in reversed([*(_option(row) for row in ROWS)]):
            command = option(command)
        return click.option(
            "--profile", "profile_names", multiple=True, help=f"Deployment profile (repeatable; default: {default})."
        )(command)

    return wrap
