"""The image-size budget (matrix.yaml ``size_budget``, parsed by ``matrix.parse_size``): the verdict and the
top contributors of an image over budget.

``judge`` and the ranking functions are pure; ``check_budget`` reads the image's size and layer history from
the engine and the size of each installed distribution from the in-image ``cuda-weight`` listing (its
``facts["largest"]``), and returns a ``size-budget`` result that the report renders as a check.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker

from matrixtool.core.imagebytes import mb, shorten_instruction
from matrixtool.model.model import CheckSpec, Variant
from matrixtool.smoke import executor as smoke
from matrixtool.smoke import result as smoke_result

TOP = 5  # layers and distributions listed when over budget
CHECK = "size-budget"  # the name of the result in the table, JSON and JUnit


def top_layers(history: Sequence[Mapping[str, Any]], n: int = TOP) -> list[tuple[int, str]]:
    """The ``n`` largest layers of an image's history (``docker image history``: the Docker SDK's
    ``Image.history()``, items with ``Size`` in bytes and ``CreatedBy``), biggest first, as
    (bytes, shortened instruction); empty layers (ENV, LABEL ...) are left out."""
    layers = [(int(h.get("Size") or 0), shorten_instruction(str(h.get("CreatedBy") or "?"))) for h in history]
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
        return BudgetVerdict(ok=True, size_bytes=size_bytes, budget_bytes=budget_bytes, diagnosis=head, hint="")
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
        f"build caches left in a layer; `tools/matrix size {image}` lists every layer and distribution), or raise "
        f"{where} in matrix.yaml if the growth is expected"
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


LISTING_CHECK = "cuda-weight"  # the in-image check whose facts["largest"] lists the largest distributions
LISTING_TIMEOUT = 300  # seconds


def _listing(results: Sequence[smoke_result.CheckResult]) -> list[list[Any]] | None:
    for r in results:
        if r.check == LISTING_CHECK and isinstance(r.facts.get("largest"), list):
            return list(r.facts["largest"])
    return None


def check_budget(
    client: docker.DockerClient,
    image: str,
    variant: Variant,
    results: Sequence[smoke_result.CheckResult],
    *,
    log_dir: Path,
) -> smoke_result.CheckResult | None:
    """The ``size-budget`` result of ``image`` against ``variant.size_budget`` (None: the variant declares none).

    Over budget, the largest distributions come from ``results``' ``cuda-weight`` facts when that check ran,
    else from one run of it in a container of its own (``smoke.run_suite``: a ``container.TrackedContainer``,
    labelled and removed as every check container; its log is ``log_dir/<variant>.cuda-weight.log``).
    Raises docker.errors.ImageNotFound when ``image`` is not on the engine.
    """
    if variant.size_budget is None:
        return None
    started = time.monotonic()
    got = client.images.get(image)
    size = int(got.attrs.get("Size") or 0)
    history: list[dict[str, Any]] = []
    listing = None
    if size > variant.size_budget:
        history = list(got.history())
        listing = _listing(results)
        if listing is None:
            spec = CheckSpec(name=LISTING_CHECK, timeout=LISTING_TIMEOUT)
            listing = _listing(smoke.run_suite(client, image, variant, [spec], log_dir=log_dir))
    verdict = judge(
        image=image,
        size_bytes=size,
        budget_bytes=variant.size_budget,
        budget_text=variant.size_budget_text or str(variant.size_budget),
        history=history,
        listing=listing,
        variant=variant.name,
    )
    return smoke_result.CheckResult(
        variant=variant.name,
        image=image,
        check=CHECK,
        status=smoke_result.Status.PASSED if verdict.ok else smoke_result.Status.FAILED,
        diagnosis=verdict.diagnosis,
        hint=verdict.hint,
        seconds=time.monotonic() - started,
        facts={
            "size_bytes": verdict.size_bytes,
            "budget_bytes": verdict.budget_bytes,
            "layers": [list(layer) for layer in verdict.layers],
            "distributions": [list(d) for d in verdict.distributions],
        },
    )
