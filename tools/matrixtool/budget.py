"""The image-size budget (matrix.yaml ``size_budget``): parsing, and the verdict with its top contributors.

Pure functions: ``pipeline`` reads the image's size and history from the engine and the distribution sizes
from the in-image ``cuda-weight`` listing, and turns ``judge``'s ``BudgetVerdict`` into a ``size-budget``
result of the report.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# Units as Docker and the SI/IEC standards write them: decimal kB/MB/GB/TB, binary KiB/MiB/GiB/TiB.
UNITS: Mapping[str, int] = {
    "B": 1,
    "kB": 10**3,
    "KB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "TB": 10**12,
    "KiB": 2**10,
    "MiB": 2**20,
    "GiB": 2**30,
    "TiB": 2**40,
}
_SIZE = re.compile(r"([0-9]+(?:\.[0-9]+)?) ?([A-Za-z]+)")
TOP = 5  # layers and distributions listed when over budget
CREATED_BY_WIDTH = 80  # characters of a layer's instruction shown
CHECK = "size-budget"  # the name of the result in the table, JSON and JUnit


def parse_size(text: str) -> int:
    """Bytes of a size written as a number and a unit: ``"3GiB"`` -> 3221225472, ``"2500MB"`` -> 2500000000,
    ``"2.5 GB"`` -> 2500000000 (units: ``UNITS``, case as written there; one optional space).

    Raises:
        ValueError: not such a size, or not above zero; the message says what to write instead.
    """
    match = _SIZE.fullmatch(text) if isinstance(text, str) else None
    if match is None or match.group(2) not in UNITS:
        raise ValueError(
            f"{text!r} is not a size; write a number and a unit, e.g. \"3GiB\" or \"2500MB\" "
            f"(units: {', '.join(UNITS)})"
        )
    size = round(float(match.group(1)) * UNITS[match.group(2)])
    if size <= 0:
        raise ValueError(f"{text!r} is not above zero; write the largest size the image may have, e.g. \"3GiB\"")
    return size


def mb(size_bytes: int) -> str:
    """Bytes as decimal megabytes, as ``docker images`` prints them (704288 -> '0.7 MB', 2640000000 -> '2640 MB')."""
    return f"{size_bytes / 10**6:.1f} MB" if size_bytes < 10**7 else f"{size_bytes / 10**6:.0f} MB"


def _shorten(text: str, width: int = CREATED_BY_WIDTH) -> str:
    text = " ".join(text.replace("/bin/sh -c #(nop) ", "").replace("/bin/sh -c ", "RUN ").split())
    return text if len(text) <= width else text[: width - 1] + "…"


def top_layers(history: Sequence[Mapping[str, Any]], n: int = TOP) -> list[tuple[int, str]]:
    """The ``n`` largest layers of an image's history (``docker image history``: the Docker SDK's
    ``Image.history()``, items with ``Size`` in bytes and ``CreatedBy``), biggest first, as
    (bytes, shortened instruction); empty layers (ENV, LABEL ...) are left out."""
    layers = [(int(h.get("Size") or 0), _shorten(str(h.get("CreatedBy") or "?"))) for h in history]
    return sorted((layer for layer in layers if layer[0] > 0), key=lambda layer: -layer[0])[:n]


def top_distributions(listing: Sequence[Sequence[Any]], n: int = TOP) -> list[tuple[str, str, int]]:
    """The ``n`` largest distributions of ``listing`` ([name, version, bytes] items, as the in-image
    ``cuda-weight`` check reports them in ``facts["largest"]``), biggest first."""
    rows = [(str(name), str(version), int(size)) for name, version, size in listing]
    return sorted(rows, key=lambda r: (-r[2], r[0]))[:n]


@dataclass(frozen=True, kw_only=True)
class BudgetVerdict:
    """``size-budget``'s outcome: ``ok`` (within budget), the diagnosis and fix hint; sizes in bytes."""

    ok: bool
    size_bytes: int
    budget_bytes: int
    diagnosis: str
    hint: str
    layers: tuple[tuple[int, str], ...] = ()
    distributions: tuple[tuple[str, str, int], ...] = ()


def judge(
    *,
    image: str,
    size_bytes: int,
    budget_bytes: int,
    budget_text: str,
    history: Sequence[Mapping[str, Any]] = (),
    listing: Sequence[Sequence[Any]] | None = None,
    variant: str = "",
) -> BudgetVerdict:
    """Compare ``size_bytes`` (the engine's image inspect ``Size``) with ``budget_bytes`` (``budget_text`` as
    matrix.yaml writes it); over budget, the diagnosis lists the ``TOP`` largest layers (from ``history``)
    and distributions (from ``listing``; None: the listing could not be made, and the diagnosis says so)."""
    over = size_bytes - budget_bytes
    pct = 100 * size_bytes / budget_bytes
    head = f"{image} is {mb(size_bytes)}, {pct:.0f} % of its size_budget {budget_text} ({mb(budget_bytes)})"
    if over <= 0:
        return BudgetVerdict(
            ok=True, size_bytes=size_bytes, budget_bytes=budget_bytes, diagnosis=head, hint=""
        )
    layers = top_layers(history)
    dists = top_distributions(listing or [])
    parts = [f"{head}: {mb(over)} over"]
    if layers:
        parts.append("largest layers: " + "; ".join(f"{mb(s)} {what}" for s, what in layers))
    if dists:
        parts.append("largest distributions: " + ", ".join(f"{n} {v} {mb(s)}" for n, v, s in dists))
    elif listing is None:
        parts.append("largest distributions: not listed (the in-image listing did not run; see its log)")
    where = f"variants.{variant}.size_budget" if variant else "size_budget"
    hint = (
        "shrink the largest contributors named (dead weight first: CUDA wheels in a CPU image, see cuda-weight; "
        f"build caches left in a layer), or raise {where} in matrix.yaml if the growth is expected"
    )
    return BudgetVerdict(
        ok=False,
        size_bytes=size_bytes,
        budget_bytes=budget_bytes,
        diagnosis="; ".join(parts),
        hint=hint,
        layers=tuple(layers),
        distributions=tuple(dists),
    )
