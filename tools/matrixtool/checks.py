"""The catalogue of smoke checks, as the in-image package declares it next to each check's code.

The checks run *inside* the image (``incontainer/vllm_smoke``, one module per family); each declares its name,
what it proves, failure classes (``docs/failure-classes.md``), reports, fix hint, default timeout, the run
conditions that can change its verdict, its suites, its prerequisites and whether it shares an interpreter
(``vllm_smoke.common.check``). This module turns those declarations into typed values for the host.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from matrixtool.incontainer.vllm_smoke.catalogue import DECLARATIONS
from matrixtool.profiles import Condition as C

SUITES = ("quick", "full")
DEFAULT_SUITE = "full"


@dataclass(frozen=True, kw_only=True)
class CheckInfo:
    """Static facts about one smoke check (declared in ``incontainer/vllm_smoke``).

    ``classes``: failure-class numbers it covers; ``reports``: public reports behind it (URLs);
    ``hint``: what to do when it fails (the in-image check may give a more specific one);
    ``timeout``: seconds, the default of matrix.yaml ``smoke.checks.<name>.timeout``;
    ``affected_by``: the run conditions (deployment profiles) that can change its verdict beyond what
    ``run-conditions`` proves for every check; a profile other than ``default`` runs the check again only when
    it sets one of them differently. ``suites``: the suites that run it; ``needs``: prerequisite checks (when
    one does not pass, this one is ``skipped``); ``uses``: checks whose verdict it refers to (run with it);
    ``group``: the checks of one group share an interpreter, None for a check that needs a fresh one.
    """

    name: str
    proves: str
    classes: tuple[int, ...]
    reports: tuple[str, ...]
    hint: str
    timeout: int = 300
    affected_by: frozenset[C] = frozenset({C.ENV})
    suites: tuple[str, ...] = SUITES
    needs: tuple[str, ...] = ()
    uses: tuple[str, ...] = ()
    group: str | None = None


CHECKS: dict[str, CheckInfo] = {
    name: CheckInfo(
        name=name,
        proves=d.proves,
        classes=tuple(d.classes),
        reports=tuple(d.reports),
        hint=d.hint,
        timeout=d.timeout,
        affected_by=frozenset(C(c) for c in d.affected_by),
        suites=tuple(d.suites),
        needs=tuple(d.needs),
        uses=tuple(d.uses),
        group=d.group,
    )
    for name, d in DECLARATIONS.items()
}


def prerequisites(names: Iterable[str]) -> list[str]:
    """``names`` with every check they need or use (transitively) added, in the catalogue's order."""
    wanted: set[str] = set()
    todo = list(names)
    while todo:
        name = todo.pop()
        if name in wanted or name not in CHECKS:
            continue
        wanted.add(name)
        todo += [*CHECKS[name].needs, *CHECKS[name].uses]
    return [n for n in CHECKS if n in wanted]


def in_suite(names: Sequence[str], suite: str) -> list[str]:
    """The checks of ``names`` that ``suite`` runs (``quick`` leaves out the slow ones, e.g. compiled generate)."""
    return [n for n in names if suite in CHECKS[n].suites]


def readme_table() -> str:
    """The README's check table (between its ``checks-table`` markers), generated from the declarations."""
    rows = [
        "| check | proves | classes | suites | needs | shares an interpreter |",
        "|---|---|---|---|---|---|",
    ]
    for c in CHECKS.values():
        classes = ", ".join(str(n) for n in c.classes) or "—"
        needs = ", ".join(f"`{n}`" for n in c.needs) or "—"
        shares = f"group `{c.group}`" if c.group else "no: a fresh one"
        proves = c.proves.replace("|", "\\|")
        rows.append(f"| `{c.name}` | {proves} | {classes} | {', '.join(c.suites)} | {needs} | {shares} |")
    return "\n".join(rows) + "\n"
