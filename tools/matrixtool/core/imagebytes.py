"""What an image's bytes are made of: its layers (the engine's ``docker image history``) and its Python
distributions (the bytes of the files each one's RECORD lists, as ``incontainer/imagefacts.py`` reports them).
Pure functions; sizes in bytes, shown in decimal units as ``docker images`` shows them."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

CREATED_BY_WIDTH = 100  # characters of a layer's instruction shown


def mb(size_bytes: int) -> str:
    """Bytes in decimal units, as ``docker images`` prints them: 5000 -> '5.0 kB', 704288 -> '0.7 MB',
    74800000 -> '74.8 MB', 2640000000 -> '2640 MB'."""
    if size_bytes < 10**6:
        return f"{size_bytes / 10**3:.1f} kB"
    return f"{size_bytes / 10**6:.1f} MB" if size_bytes < 10**8 else f"{size_bytes / 10**6:.0f} MB"


# How the engine writes a layer's instruction: BuildKit `RUN |1 ARG=v /bin/sh -c CMD # buildkit`, the classic
# builder `/bin/sh -c CMD` (RUN) and `/bin/sh -c #(nop) ENV ...` (the other instructions).
_BUILD_ARGS = re.compile(r"^RUN (\|[0-9]+ (?:[A-Za-z_][A-Za-z0-9_]*=\S* )*)?/bin/sh -c ")
_NOP = re.compile(r"^/bin/sh -c #\(nop\)\s*")


def shorten_instruction(text: str, width: int = CREATED_BY_WIDTH) -> str:
    """A layer's ``CreatedBy`` as its Dockerfile instruction, whitespace collapsed, at most ``width`` characters:
    a longer one keeps its start and its end (where an install names its packages), ``…`` between."""
    text = _NOP.sub("", _BUILD_ARGS.sub("RUN ", " ".join(text.split())))
    text = re.sub(r"^/bin/sh -c ", "RUN ", text).removesuffix(" # buildkit")
    if len(text) <= width:
        return text
    head = width * 2 // 5
    return text[:head] + "…" + text[len(text) - (width - head - 1) :]


@dataclass(frozen=True, kw_only=True)
class Layer:
    """One layer that holds bytes: ``number`` counts them from the base (1) in build order."""

    number: int
    size: int
    instruction: str


def layers(history: Sequence[Mapping[str, Any]], width: int = CREATED_BY_WIDTH) -> list[Layer]:
    """The layers of ``history`` (``docker image history``: the Docker SDK's ``Image.history()``, newest first,
    items with ``Size`` in bytes and ``CreatedBy``) that hold bytes, in build order; instructions that add none
    (ENV, LABEL, an empty RUN ...) are left out."""
    out: list[Layer] = []
    for item in reversed(history):
        size = int(item.get("Size") or 0)
        if size > 0:
            out.append(
                Layer(
                    number=len(out) + 1,
                    size=size,
                    instruction=shorten_instruction(str(item.get("CreatedBy") or "?"), width),
                )
            )
    return out


@dataclass(frozen=True, kw_only=True)
class Distribution:
    name: str
    version: str
    size: int


def distributions(facts: Mapping[str, Mapping[str, Any]]) -> list[Distribution]:
    """``facts`` (imagefacts' ``distributions``: canonical name -> {version, bytes, ...}) biggest first, then by
    name; a distribution without RECORD (``bytes`` null or missing) is left out."""
    rows = [
        Distribution(name=str(name), version=str(d.get("version") or "?"), size=int(d["bytes"]))
        for name, d in facts.items()
        if isinstance(d.get("bytes"), int) and not isinstance(d.get("bytes"), bool)
    ]
    return sorted(rows, key=lambda r: (-r.size, r.name))


def share(part: int, whole: int) -> str:
    """``part`` as a percentage of ``whole`` ('-' when ``whole`` is 0): 1, 3 -> '33 %'; under 1 %: '<1 %'."""
    if whole <= 0:
        return "-"
    pct = 100 * part / whole
    return "<1 %" if 0 < pct < 1 else f"{pct:.0f} %"


def report_lines(
    *,
    image: str,
    size: int,
    image_layers: Sequence[Layer],
    dists: Sequence[Distribution],
    budget: tuple[int, str] | None = None,
    limit: int = 0,
) -> list[str]:
    """The size report: a head line (``size``: the engine's ``Size``; ``budget``: (bytes, as matrix.yaml writes
    it) or None), every layer in build order with its share of ``size``, then the distributions biggest first
    (the first ``limit``, 0: all) and what the rest add up to."""
    head = f"{image}: {mb(size)} (engine Size)"
    if budget is not None:
        head += f", {share(size, budget[0])} of its size_budget {budget[1]}"
    lines = [head, f"layers ({len(image_layers)} holding bytes, base first):"]
    lines += [
        f"  {layer.number:>3}  {mb(layer.size):>9}  {share(layer.size, size):>5}  {layer.instruction}"
        for layer in image_layers
    ]
    total = sum(d.size for d in dists)
    lines.append(
        f"Python distributions ({len(dists)}, {mb(total)} installed: RECORD files and their bytecode), biggest first:"
    )
    shown = dists[:limit] if limit else dists
    lines += [f"  {mb(d.size):>9}  {share(d.size, size):>5}  {d.name} {d.version}" for d in shown]
    rest = dists[len(shown) :]
    if rest:
        lines.append(f"  {mb(sum(d.size for d in rest)):>9}  in {len(rest)} more (--limit 0 lists all)")
    return lines
