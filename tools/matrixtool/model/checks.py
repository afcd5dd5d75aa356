"""The catalogue of smoke checks, as the in-image package (``incontainer/vllm_smoke``) declares them next to each
check's code; the host reads those ``Declaration`` values as they are."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence

from matrixtool.incontainer.vllm_smoke.catalogue import DECLARATIONS
from matrixtool.incontainer.vllm_smoke.declarations import Accelerator, Declaration, Suite

__all__ = [
    "CHECKS",
    "DEFAULT_SUITE",
    "CheckInfo",
    "applicable",
    "in_suite",
    "prerequisites",
    "readme_table",
]

# The host's name for one check's declaration.
CheckInfo = Declaration
DEFAULT_SUITE = Suite.FULL
# Every check, in the catalogue's order (``catalogue.ORDER``): the order of a variant's checks and reports.
CHECKS: Mapping[str, Declaration] = DECLARATIONS


def applicable(accelerator: Accelerator | str) -> list[str]:
    """The checks that apply by default to a variant of ``accelerator`` (``Declaration.accelerators``), in the
    catalogue's order."""
    return [name for name, d in CHECKS.items() if accelerator in d.accelerators]


def prerequisites(names: Iterable[str], skip: Collection[str] = ()) -> list[str]:
    """``names`` with every check they need or use (transitively) added, in the catalogue's order; a check they only
    use (``uses``: its verdict is referred to, it gates nothing) and ``skip`` names is left out, as asked."""
    wanted: set[str] = set()
    todo = list(names)
    while todo:
        name = todo.pop()
        if name in wanted or name not in CHECKS:
            continue
        wanted.add(name)
        todo += [*CHECKS[name].needs, *(u for u in CHECKS[name].uses if u not in skip)]
    return [n for n in CHECKS if n in wanted]


def needed_skips(names: Iterable[str], skip: Collection[str]) -> dict[str, list[str]]:
    """The checks of ``skip`` that a check of ``names`` needs (``needs``, transitively): each with the checks that
    need it. A skip of one cannot be honoured (the check would report ``skipped: <need> failed`` without its need's
    verdict), so the selection is refused rather than the skip silently overridden."""
    found: dict[str, list[str]] = {}
    for name in names:
        for need in prerequisites([name], skip=set(CHECKS)):  # needs only: every use left out
            if need != name and need in skip:
                found.setdefault(need, []).append(name)
    return found


def in_suite(names: Sequence[str], suite: Suite) -> list[str]:
    """The checks of ``names`` that ``suite`` runs (``quick`` leaves out the slow ones, e.g. compiled generate)."""
    return [n for n in names if suite in CHECKS[n].suites]


def readme_table() -> str:
    """The README's check table (between its ``checks-table`` markers), generated from the declarations."""
    rows = [
        "| check | proves | classes | applies to | suites | needs | shares an interpreter |",
        "|---|---|---|---|---|---|---|",
    ]
    for c in CHECKS.values():
        classes = ", ".join(str(n) for n in c.classes) or "—"
        needs = ", ".join(f"`{n}`" for n in c.needs) or "—"
        shares = f"group `{c.group}`" if c.group else "no: a fresh one"
        proves = c.proves.replace("|", "\\|")
        applies = ", ".join(c.accelerators)
        suites = ", ".join(str(s) for s in c.suites)
        rows.append(f"| `{c.name}` | {proves} | {classes} | {applies} | {suites} | {needs} | {shares} |")
    return "\n".join(rows) + "\n"
