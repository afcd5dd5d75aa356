"""Reading a configuration file safely: a bounded, regular, UTF-8 file, parsed as one YAML document with
strict keys and a bound on alias expansion (``parse_yaml``)."""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from typing import Any

import yaml
import yaml.constructor
import yaml.nodes

from matrixtool.core.errors import ConfigError

# Bounds on what is read: a matrix file is a few KiB; a YAML alias bomb ("billion laughs") expands to
# billions of nodes from a few hundred bytes, so the expanded node count is bounded before any value is built.
MAX_FILE_BYTES = 1024 * 1024
MAX_YAML_NODES = 100_000


def read_config_text(path: Path, *, limit: int = MAX_FILE_BYTES, what: str = "--matrix FILE") -> str:
    """The UTF-8 text of the regular file ``path``, at most ``limit`` bytes (a leading BOM is dropped).

    Only a regular file is read: a FIFO, a device (``/dev/zero``), a socket or a folder is refused without reading it
    (opened non-blocking, so a FIFO with no writer cannot hang the tool). Raises ConfigError: the file is missing or
    unreadable, not a regular file, over ``limit`` bytes, or not UTF-8 (naming the byte offset); the message says to
    pass ``what``."""
    name = str(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise ConfigError(name, [f"cannot read the file ({exc.strerror}); pass {what}"]) from exc
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        kind = (
            "a folder"
            if stat.S_ISDIR(mode)
            else "a FIFO"
            if stat.S_ISFIFO(mode)
            else "a device"
            if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
            else "a socket"
            if stat.S_ISSOCK(mode)
            else "not a regular file"
        )
        raise ConfigError(name, [f"is {kind}, not a regular file; pass {what}"])
    with os.fdopen(fd, "rb") as f:
        try:
            data = f.read(limit + 1)
        except OSError as exc:
            raise ConfigError(name, [f"cannot read the file ({exc.strerror}); pass {what}"]) from exc
    if len(data) > limit:
        raise ConfigError(name, [f"is larger than {limit} bytes; pass {what}"])
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            name, [f"is not UTF-8 (byte {exc.start}: {data[exc.start : exc.start + 1]!r}); save it as UTF-8"]
        ) from exc


# libyaml's parser where PyYAML was built with it (ten times faster), else the pure-Python one; both compose
# the same nodes, which the constructor below checks.
_BaseLoader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _StrictLoader(_BaseLoader):  # type: ignore[misc]
    """``yaml.SafeLoader`` that refuses duplicate keys and keys that are not strings (``no:``, ``123:``, ``~:``)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        if not isinstance(node, yaml.MappingNode):
            return super().construct_mapping(node, deep=deep)
        seen: dict[Any, yaml.Node] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # `<<: *base`: merged keys may be overridden, as YAML says
            line = key_node.start_mark.line + 1
            if not isinstance(key_node, yaml.ScalarNode):
                kind = "list" if isinstance(key_node, yaml.SequenceNode) else "mapping"
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f"a {kind} is written as a key (YAML's complex key, `? ...`); keys are names: write the name "
                    "followed by ':'",
                    key_node.start_mark,
                )
            key = self.construct_object(key_node, deep=deep)
            if not isinstance(key, str):
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f"key {key_node.value[:60]!r} is read as {type(key).__name__} {str(key)[:60]}, not as a name; "
                    f'quote it ("{key_node.value[:60]}":)',
                    key_node.start_mark,
                )
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f"duplicate key {key!r} (first on line {seen[key].start_mark.line + 1}, again on line {line}); "
                    "keep one",
                    key_node.start_mark,
                )
            seen[key] = key_node
        self.flatten_mapping(node)
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if not isinstance(key, str):
                raise yaml.constructor.ConstructorError(
                    None, None, f"merged key {key!r} is not a name; quote it", key_node.start_mark
                )
        mapping: dict[Any, Any] = super().construct_mapping(node, deep=deep)
        return mapping


def _expanded_nodes(root: yaml.Node, limit: int) -> int:
    """How many nodes ``root`` stands for once every alias is expanded; stops counting past ``limit``. Raises
    ValueError: an alias refers to a node that holds it (a cycle)."""
    sizes: dict[int, int] = {}
    active: set[int] = set()

    def size(node: yaml.Node) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in active:
            raise ValueError(f"line {node.start_mark.line + 1}: an alias refers to a node that contains it")
        active.add(key)
        total = 1
        if isinstance(node, yaml.SequenceNode):
            for child in node.value:
                total += size(child)
                if total > limit:
                    break
        elif isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                total += size(k) + size(v)
                if total > limit:
                    break
        active.discard(key)
        sizes[key] = total
        return total

    return size(root)


# Tags a matrix file never holds: a value of these types is a slip (an unquoted date, a version like 1:30 read
# as sexagesimal 90) or a payload, never a setting.
_FOREIGN_TAGS = {
    "tag:yaml.org,2002:timestamp": "a date or timestamp",
    "tag:yaml.org,2002:binary": "binary data",
    "tag:yaml.org,2002:set": "a set",
    "tag:yaml.org,2002:omap": "an ordered map",
    "tag:yaml.org,2002:pairs": "a list of pairs",
}
# The longest integer a matrix value can be (a size in bytes, a count of seconds): longer is no setting, and
# past 4300 digits Python refuses to convert it at all.
MAX_INT_DIGITS = 20
_PLAIN_INT = re.compile(r"[-+]?(0|[1-9][0-9_]*)")


def _key_path(parts: list[str]) -> str:
    return "".join(p if p.startswith("[") else f".{p}" for p in parts).lstrip(".") or "(the document)"


def _implicit_problem(node: yaml.ScalarNode) -> str | None:
    """Why the scalar ``node`` cannot be held as a matrix value, or None: a type of ``_FOREIGN_TAGS``, an integer
    YAML 1.1 reads from another base (``0x1F``, ``017``, ``0b101``, sexagesimal ``1:30``) or with more than
    ``MAX_INT_DIGITS`` digits, a sexagesimal float (``1:30.5``). NaN and infinity are refused by ``matrixfile``,
    a key that is no string by ``_StrictLoader``."""
    value = str(node.value)
    quoted = f'"{value}"' if len(value) <= 40 else "it"
    if node.tag in _FOREIGN_TAGS:
        return (
            f"{value[:40]!r} is read as {_FOREIGN_TAGS[node.tag]}, which a matrix value never is; quote it ({quoted})"
        )
    if node.tag == "tag:yaml.org,2002:int":
        if not _PLAIN_INT.fullmatch(value):
            return (
                f"{value[:40]!r} is read as an integer in another base or sexagesimal (YAML 1.1); quote it "
                f"({quoted}) or write the decimal number"
            )
        if sum(c.isdigit() for c in value) > MAX_INT_DIGITS:
            return f"is an integer of {sum(c.isdigit() for c in value)} digits; no matrix value is that large"
    if node.tag == "tag:yaml.org,2002:float" and ":" in value:
        return f"{value[:40]!r} is read as a sexagesimal number (YAML 1.1); quote it ({quoted}) or write a number"
    return None


def _foreign_values(root: yaml.Node) -> list[str]:
    """Every scalar under ``root`` that ``_implicit_problem`` refuses, as ``key.path: why`` (first 20)."""
    problems: list[str] = []
    stack: list[tuple[yaml.Node, list[str]]] = [(root, [])]
    seen: set[int] = set()
    while stack and len(problems) < 20:
        node, path = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if not isinstance(node, yaml.ScalarNode) and node.tag in _FOREIGN_TAGS:
            problems.append(
                f"{_key_path(path)} (line {node.start_mark.line + 1}): is tagged as {_FOREIGN_TAGS[node.tag]}, "
                "which a matrix value never is; write a plain mapping or list"
            )
        elif isinstance(node, yaml.ScalarNode):
            why = _implicit_problem(node)
            if why:
                problems.append(f"{_key_path(path)} (line {node.start_mark.line + 1}): {why}")
        elif isinstance(node, yaml.SequenceNode):
            stack.extend((child, [*path, f"[{i}]"]) for i, child in reversed(list(enumerate(node.value))))
        elif isinstance(node, yaml.MappingNode):
            for key, value in reversed(node.value):
                name = str(key.value)[:60] if isinstance(key, yaml.ScalarNode) else "?"
                stack.append((value, [*path, name]))
    return problems


def parse_yaml(text: str, source: str) -> Any:
    """Parse one YAML document with ``_StrictLoader``, its alias expansion bounded by ``MAX_YAML_NODES``. Raises
    ConfigError: not YAML, a duplicate or non-string key (both lines named), an alias cycle, or an expansion past the
    bound (an alias bomb), each with its line; a value of a type a matrix never holds (``_implicit_problem``: dates,
    binary, NaN, sexagesimal, huge integers) with its key path."""
    try:
        loader = _StrictLoader(text)
        try:
            node = loader.get_single_node()
            if node is None:
                return None
            try:
                expanded = _expanded_nodes(node, MAX_YAML_NODES)
            except ValueError as exc:
                raise ConfigError(source, [f"{exc}; remove the alias"]) from exc
            except RecursionError as exc:
                raise ConfigError(source, ["nested too deeply to be a matrix file"]) from exc
            if expanded > MAX_YAML_NODES:
                raise ConfigError(
                    source,
                    [
                        f"aliases expand to more than {MAX_YAML_NODES} YAML nodes (an alias bomb?); "
                        "write the values out or use fewer aliases"
                    ],
                )
            foreign = _foreign_values(node)
            if foreign:
                raise ConfigError(source, foreign)
            return loader.construct_document(node)
        finally:
            loader.dispose()
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        raise ConfigError(source, [f"{where}not valid YAML ({getattr(exc, 'problem', None) or exc})"]) from exc
    except RecursionError as exc:
        raise ConfigError(source, ["nested too deeply to be a matrix file"]) from exc
