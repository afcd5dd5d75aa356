"""The matrix edits a proposal makes, and which variant of an ``extends`` chain owns the key each one writes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from matrixtool.update.yamltext import ScalarEdit


def exclude_edit(dist: str) -> ScalarEdit:
    """The edit that adds ``dist`` to the variant's ``index.exclude`` (path below ``variants.<name>``)."""
    return ScalarEdit(path=("index", "exclude"), value=dist, append=True)


def override_edit(override: str, i: int, torch_package: str, new_torch: str | None) -> ScalarEdit | str | None:
    """For ``index.overrides[i]``: None when it does not name torch or admits ``new_torch``; the edit to
    ``torch==<new>`` when it is one exact pin without markers or extras; else a note to edit it by hand."""
    req = Requirement(override)
    if new_torch is None or canonicalize_name(req.name) != canonicalize_name(torch_package):
        return None
    if req.specifier.contains(new_torch, prereleases=True):
        return None
    simple = len(req.specifier) == 1 and next(iter(req.specifier)).operator == "==" and not req.marker
    if simple and not req.extras and not req.url:
        return ScalarEdit(path=("index", "overrides", str(i)), value=f"{req.name}=={new_torch}")
    return f"index.overrides {override!r} excludes torch {new_torch}: edit or drop it"


def key_owner(raw: Mapping[str, Any], variant: str, path: tuple[str, ...]) -> str:
    """The variant whose own mapping writes ``path`` (``torch.version``), following ``extends``; the last
    variant of the chain where none writes it."""
    variants = raw.get("variants") or {}
    name, seen = variant, set()
    while name not in seen:
        seen.add(name)
        node: Any = variants.get(name) or {}
        cursor = node
        for part in path:
            if isinstance(cursor, list) and part.isdigit():
                cursor = cursor[int(part)] if int(part) < len(cursor) else None
            else:
                cursor = cursor.get(part) if isinstance(cursor, dict) else None
        if cursor is not None:
            return name
        parent = node.get("extends")
        if not isinstance(parent, str):
            return name
        name = parent
    return variant


# The keys whose owner decides which variants one proposal (and one pull request) covers.
GROUP_KEYS = (("vllm", "version"), ("torch", "version"))


def groups(raw: Mapping[str, Any], names: Sequence[str]) -> list[tuple[str, list[str]]]:
    """``names`` grouped by the variants that own their pins (``key_owner`` of ``GROUP_KEYS``): variants that
    share an owner of either key are one group, named by the owner of its first member's ``vllm.version``
    (``cuda-arm64`` extends ``cuda``: one group ``cuda``). Groups and members keep the order of ``names``."""
    owners = {n: {key_owner(raw, n, k) for k in GROUP_KEYS} for n in names}
    out: list[tuple[set[str], list[str]]] = []  # (owners, members)
    for name in names:
        joined = [g for g in out if g[0] & owners[name]]
        merged = (set(owners[name]).union(*(g[0] for g in joined)), [m for g in joined for m in g[1]] + [name])
        out = [g for g in out if g not in joined] + [merged]
    order = {n: i for i, n in enumerate(names)}
    result = []
    for _, members in out:
        members = sorted(members, key=order.__getitem__)
        result.append((key_owner(raw, members[0], GROUP_KEYS[0]), members))
    return sorted(result, key=lambda g: order[g[1][0]])
