"""Choose the variants a command works on, and the checks it runs on each."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from matrixtool.core.errors import ConfigError, NothingSelectedError
from matrixtool.model.checks import CHECKS, DEFAULT_SUITE, in_suite, needed_skips, prerequisites
from matrixtool.model.inputs import check_selection, check_suite
from matrixtool.model.model import CheckSpec, Matrix, Variant
from matrixtool.model.names import unknown_hint


def select_variants(matrix: Matrix, names: Sequence[str]) -> list[Variant]:
    """Every variant for ``all``/no names.

    Raises NothingSelectedError: a name matches no variant (the message suggests the nearest one).
    """
    if not names or "all" in names:
        return list(matrix.variants)
    known = matrix.names()
    unknown = [n for n in names if n not in known]
    if unknown:
        parts = []
        for name in unknown:
            hint = unknown_hint(name, known, each="{}")
            parts.append(repr(name) + (f" ({hint[2:]})" if hint else ""))
        raise NothingSelectedError(
            f"no variant {', '.join(parts)} in {matrix.source.name}; variants: {', '.join(known)}"
        )
    return [v for v in matrix.variants if v.name in names]


def select_checks(
    variant: Variant, only: Sequence[str], skip: Sequence[str], suite: str = DEFAULT_SUITE
) -> list[CheckSpec]:
    """``variant``'s checks of ``suite``, narrowed by ``--only`` (when given: those run whatever their suites) and
    ``--skip``, plus every check they need or use (``checks.prerequisites``: a check whose prerequisite failed reports
    ``skipped: <check> failed``, so the prerequisite's own failure must be in the report); a skipped check that is only
    used is left out (serve without offline-generate compares no tokens, and says so), a skipped check that is needed
    is refused (``checks.needed_skips``), never silently run. Prerequisites the variant
    does not list come first, with their declared timeouts. Raises ConfigError: a name is not a check of the variant,
    a skipped check is needed by a selected one,
    nothing is left to run (``inputs.check_selection``, the one place that validates a selection), or an unknown suite.
    """
    check_selection([variant], only, skip)
    suite = check_suite(suite)
    names = [c.name for c in variant.checks if (not only or c.name in only) and c.name not in skip]
    if not only:
        names = in_suite(names, suite)
    refused = needed_skips(names, skip)
    if refused:
        raise ConfigError(
            "--skip",
            [
                f"--skip {need}: {', '.join(by)} need{'s' if len(by) == 1 else ''} it (a check whose need did not "
                f"run cannot be judged); skip {' and '.join(by)} too (--skip {' --skip '.join(by)}), or run {need}"
                for need, by in refused.items()
            ],
        )
    wanted = prerequisites(names, skip)
    listed = {c.name: c for c in variant.checks}
    extra = [CheckSpec(name=n, timeout=CHECKS[n].timeout) for n in wanted if n not in listed]
    return extra + [c for c in variant.checks if c.name in wanted]


@dataclass(frozen=True, kw_only=True)
class Selection:
    """The checks a smoke run asks for: ``--only``/``--skip`` names and the ``--suite`` (``checks.SUITES``)."""

    only: tuple[str, ...] = ()
    skip: tuple[str, ...] = ()
    suite: str = DEFAULT_SUITE

    def check(self, variants: Sequence[Variant]) -> None:
        """Raises ConfigError: an unknown suite, or a name no check of a variant (``inputs.check_selection``)."""
        check_suite(self.suite)
        if self.only or self.skip:
            check_selection(variants, self.only, self.skip)

    def checks_of(self, variant: Variant) -> list[CheckSpec]:
        """``select_checks`` of ``variant`` under this selection."""
        return select_checks(variant, self.only, self.skip, self.suite)
