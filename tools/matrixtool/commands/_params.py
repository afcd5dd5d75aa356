"""The kinds of input a parameter can take, each with its one rule: every option or argument that names a file the
tool writes or reads, a folder, an image reference, a registry or a repository declares its kind by its click type
(``OUTPUT_FILE``, ``IMAGE``, ...), and ``check`` applies the kind's rule to every such parameter of a command before
the command runs, every problem at once (exit 3). A new option of one of these kinds gets the rule by its type;
``tests/unit/test_parameter_kinds.py`` walks the command tree and fails for a path or reference parameter without
one.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from matrixtool.core.errors import ConfigError
from matrixtool.model import inputs, reference


class Kind(enum.Enum):
    """A kind of input, and the rule every parameter of that kind goes through."""

    OUTPUT_FILE = "output file"  # inputs.output_file_problem: a stream is written in place, never replaced
    OUTPUT_FOLDER = "output folder"  # inputs.output_folder_problem
    INPUT_FILE = "input file"  # inputs.input_file_problem, then its reader (yamlfile.read_config_text)
    INPUT_FOLDER = "input folder"  # inputs.input_folder_problem
    IMAGE = "image reference"  # reference.image_problem
    REGISTRY = "registry"  # reference.registry_problem
    REPOSITORY = "repository"  # reference.repository_problem


_PATH_RULES: dict[Kind, Callable[[str, Path], str | None]] = {
    Kind.OUTPUT_FILE: inputs.output_file_problem,
    Kind.OUTPUT_FOLDER: inputs.output_folder_problem,
    Kind.INPUT_FILE: inputs.input_file_problem,
    Kind.INPUT_FOLDER: inputs.input_folder_problem,
}
_REFERENCE_RULES: dict[Kind, Callable[[str], str | None]] = {
    Kind.IMAGE: reference.image_problem,
    Kind.REGISTRY: reference.registry_problem,
    Kind.REPOSITORY: reference.repository_problem,
}


# ``ctx.meta`` key (shared by a command's and its group's contexts): the (command, parameter) names given "".
_EMPTY = "matrixtool.empty_paths"
_NOUN = {
    Kind.OUTPUT_FILE: "file",
    Kind.OUTPUT_FOLDER: "folder",
    Kind.INPUT_FILE: "file",
    Kind.INPUT_FOLDER: "folder",
}


class KindType(click.ParamType[Any, Any]):
    """A click type that converts as a path (``Path``) or a string and declares its ``kind``; the value is checked by
    the kind's rule in ``check``, not here (so every problem of a command line is reported at once)."""

    def __init__(self, kind: Kind, metavar: str) -> None:
        self.kind = kind
        self.name = metavar

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if value is None or isinstance(value, Path):
            return value
        if self.kind in _PATH_RULES:
            if value == "" and ctx is not None and param is not None:
                # Path("") is Path("."): `--out "$UNSET"` would write in the working folder. Noted here, refused by
                # ``check`` with the other problems (exit 3).
                ctx.meta.setdefault(_EMPTY, set()).add((ctx.command.name, param.name))
            return Path(value)
        return str(value)

    def problem(self, flag: str, value: Any) -> str | None:
        """Why ``value`` breaks this kind's rule, naming ``flag`` (None: it keeps it)."""
        if self.kind in _PATH_RULES:
            return _PATH_RULES[self.kind](flag, Path(value))
        problem = _REFERENCE_RULES[self.kind](str(value))
        return None if problem is None else f"{flag} {str(value)[:100]!r} {problem}"


OUTPUT_FILE = KindType(Kind.OUTPUT_FILE, "FILE")
OUTPUT_FOLDER = KindType(Kind.OUTPUT_FOLDER, "DIR")
INPUT_FILE = KindType(Kind.INPUT_FILE, "FILE")
INPUT_FOLDER = KindType(Kind.INPUT_FOLDER, "DIR")
IMAGE = KindType(Kind.IMAGE, "IMAGE")
REGISTRY = KindType(Kind.REGISTRY, "HOST[:PORT][/NAMESPACE]")
REPOSITORY = KindType(Kind.REPOSITORY, "NAME")


def flag_of(param: click.Parameter) -> str:
    """How a message names ``param``: its longest option name (``--json-file``), or an argument's name (``IMAGE``)."""
    if isinstance(param, click.Option):
        return max(param.opts, key=len)
    return (param.name or "argument").upper()


def problems_of(ctx: click.Context) -> list[str]:
    """Every broken rule among the values given to ``ctx``'s parameters of a kind, and to its parents' (the group's
    ``--out``, ``--matrix``); a default is not checked here (the command checks its own, as ``--out``'s)."""
    found = []
    contexts = []
    current: click.Context | None = ctx
    while current is not None:
        contexts.append(current)
        current = current.parent
    for context in reversed(contexts):
        for param in context.command.params:
            if not isinstance(param.type, KindType):
                continue
            source = context.get_parameter_source(param.name or "")
            if source in (None, click.core.ParameterSource.DEFAULT, click.core.ParameterSource.DEFAULT_MAP):
                continue  # a default is the command's own to check (--out: build/ beside matrix.yaml)
            if (context.command.name, param.name) in context.meta.get(_EMPTY, ()):
                noun = _NOUN.get(param.type.kind, "path")
                found.append(
                    f"{flag_of(param)}: an empty path (an unset variable?) would be the working folder; give a {noun}"
                )
                continue
            value = context.params.get(param.name or "")
            values = value if isinstance(value, tuple | list) else (value,)
            for item in values:
                if item is not None and (problem := param.type.problem(flag_of(param), item)) is not None:
                    found.append(problem)
    return found


def check(ctx: click.Context) -> None:
    """Raises ConfigError: a parameter of ``ctx`` (or its group) breaks its kind's rule, every one named (exit 3)."""
    found = problems_of(ctx)
    if found:
        raise ConfigError("flags", found)
