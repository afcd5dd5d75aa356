"""Surgical edits of a YAML text: replace one scalar, add one key, or add one item to a sequence, and leave every
other byte (comments, order, quoting, blank lines) as it was. Positions come from PyYAML's composer
(``Mark.index``)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

import yaml


@dataclass(frozen=True, kw_only=True)
class ScalarEdit:
    """Set the scalar at ``path`` (mapping keys from the document root; a decimal string indexes a sequence)
    to ``value``; with ``append``, add ``value`` as an item of the sequence at ``path`` instead (nothing
    when it is there already; a missing key becomes a one-item flow sequence).

    ``after``: where the key is missing, insert it after this sibling key (else after the mapping's last key).
    """

    path: tuple[str, ...]
    value: str | bool
    after: str | None = None
    append: bool = False

    @property
    def key(self) -> tuple[str, ...]:
        """What two edits must agree on to be one: the path, and for an ``append`` the item too."""
        return (*self.path, str(self.value)) if self.append else self.path


def _format(value: str | bool, style: str | None) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if style == '"':
        return json.dumps(value)
    if style == "'":
        return "'" + value.replace("'", "''") + "'"
    try:
        plain_ok = yaml.safe_load(value) == value and "\n" not in value and not value.startswith(("'", '"'))
    except yaml.YAMLError:
        plain_ok = False
    return value if plain_ok else json.dumps(value)


def _child(node: yaml.Node, key: str) -> tuple[yaml.Node, yaml.Node] | None:
    if isinstance(node, yaml.SequenceNode) and key.isdigit():
        i = int(key)
        return (node.value[i], node.value[i]) if i < len(node.value) else None
    if not isinstance(node, yaml.MappingNode):
        return None
    for k, v in node.value:
        if isinstance(k, yaml.ScalarNode) and k.value == key:
            return k, v
    return None


def _line_end(text: str, index: int) -> int:
    end = text.find("\n", index)
    return len(text) if end < 0 else end


def apply_edit(text: str, edit: ScalarEdit) -> str:
    """Raises KeyError: a mapping on the way to ``edit.path`` is missing, or the value there is not a scalar."""
    node = yaml.compose(text, Loader=yaml.SafeLoader)
    if node is None:
        raise KeyError(".".join(edit.path))
    for depth, key in enumerate(edit.path[:-1]):
        found = _child(node, key)
        if found is None:
            raise KeyError(".".join(edit.path[: depth + 1]))
        node = found[1]
    last = edit.path[-1]
    found = _child(node, last)
    if found is not None and edit.append:
        return _append_item(text, found[1], edit)
    if found is not None:
        value_node = found[1]
        if not isinstance(value_node, yaml.ScalarNode):
            raise KeyError(f"{'.'.join(edit.path)} is not a scalar")
        new = _format(edit.value, value_node.style)
        return text[: value_node.start_mark.index] + new + text[value_node.end_mark.index :]
    if not isinstance(node, yaml.MappingNode) or not node.value:
        raise KeyError(".".join(edit.path[:-1]))
    entry = f"{last}: " + (f"[{_format(edit.value, None)}]" if edit.append else _format(edit.value, None))
    if node.flow_style:
        close = node.end_mark.index - 1
        return text[:close] + f", {entry}" + text[close:]
    sibling = _child(node, edit.after) if edit.after else None
    key_node, value_node = sibling if sibling is not None else node.value[-1]
    indent = " " * key_node.start_mark.column
    # A block collection ends at the start of the next line; a scalar or flow value right after itself.
    at = _line_end(text, max(value_node.end_mark.index - 1, key_node.end_mark.index))
    return text[:at] + f"\n{indent}{entry}" + text[at:]


def _append_item(text: str, seq: yaml.Node, edit: ScalarEdit) -> str:
    """``text`` with ``edit.value`` added as the last item of the sequence ``seq`` (block: a new ``- item`` line under
    the others; flow: ``, item`` before the ``]``), unchanged when an item equals it already. Raises KeyError: the node
    at ``edit.path`` is not a sequence."""
    if not isinstance(seq, yaml.SequenceNode):
        raise KeyError(f"{'.'.join(edit.path)} is not a sequence")
    if any(isinstance(item, yaml.ScalarNode) and item.value == str(edit.value) for item in seq.value):
        return text
    item = _format(edit.value, None)
    if seq.flow_style or not seq.value:
        close = seq.end_mark.index - 1
        return text[:close] + (f", {item}" if seq.value else item) + text[close:]
    at = _line_end(text, seq.value[-1].end_mark.index)
    return text[:at] + f"\n{' ' * seq.start_mark.column}- {item}" + text[at:]


def apply_edits(text: str, edits: Sequence[ScalarEdit]) -> str:
    """``text`` with every edit applied in order (each re-reads the positions, so edits may touch one line)."""
    for edit in edits:
        text = apply_edit(text, edit)
    return text
