"""A variant's vulnerability gate policy (matrix.yaml ``audit``) and its verdict on one advisory."""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from matrixtool.core.errors import ConfigError
from matrixtool.model.matrixfile import resolve_extends
from matrixtool.model.model import Matrix
from matrixtool.model.yamlfile import parse_yaml, read_config_text
from matrixtool.supply.osv import Advisory, Severity

FAIL_ON_NONE = "none"


@dataclass(frozen=True, kw_only=True)
class Acceptance:
    """An accepted advisory; ``id`` may be its OSV ID or an alias (``GHSA-…``, ``CVE-…``); ``expires`` inclusive."""

    id: str
    reason: str
    expires: datetime.date


@dataclass(frozen=True, kw_only=True)
class Policy:
    """A variant's gate (matrix.yaml ``audit``): fail on ``fail_on`` and above (None: on no severity; packages
    not audited still fail), except the ``accept`` list. The default: ``fail_on: high``, nothing accepted."""

    fail_on: Severity | None = Severity.HIGH
    accept: tuple[Acceptance, ...] = ()


class Verdict(str, Enum):
    FAIL = "fail"
    ACCEPTED = "accepted"
    BELOW = "below-threshold"


def parse_policy(raw: Mapping[str, Any] | None, *, where: str) -> Policy:
    """The ``Policy`` of a matrix.yaml ``audit`` mapping (None: the default). ``expires``: ``YYYY-MM-DD`` (YAML may give
    a date already). Raises ConfigError: a value the schema lets through but is not a date or a severity."""
    if raw is None:
        return Policy()
    problems: list[str] = []
    fail_on_text = str(raw.get("fail_on", "high")).lower()
    fail_on: Severity | None = None
    if fail_on_text != FAIL_ON_NONE:
        try:
            fail_on = Severity[fail_on_text.upper()]
        except KeyError:
            problems.append(f"{where}.fail_on: {fail_on_text!r} is not one of low, medium, high, critical, none")
    accepted = []
    for i, item in enumerate(raw.get("accept") or ()):
        expires = item.get("expires")
        if isinstance(expires, datetime.datetime):
            expires = expires.date()
        if not isinstance(expires, datetime.date):
            try:
                expires = datetime.date.fromisoformat(str(expires))
            except ValueError:
                problems.append(f"{where}.accept[{i}].expires: {expires!r} is not a date YYYY-MM-DD")
                continue
        accepted.append(Acceptance(id=str(item["id"]), reason=str(item["reason"]), expires=expires))
    if problems:
        raise ConfigError("matrix.yaml", problems)
    return Policy(fail_on=fail_on, accept=tuple(accepted))


def policy_for(matrix: Matrix, variant: str) -> Policy:
    """Raises ConfigError: ``variant`` is not in the matrix, or a date is not a date."""
    data = parse_yaml(read_config_text(matrix.source), str(matrix.source))
    resolved, _ = resolve_extends(data)
    variants = resolved.get("variants") or {}
    if variant not in variants:
        raise ConfigError("--as", [f"no variant {variant!r} in {matrix.source}; variants: {', '.join(variants)}"])
    return parse_policy(variants[variant].get("audit"), where=f"variants.{variant}.audit")


def judge(advisory: Advisory, policy: Policy, today: datetime.date) -> tuple[Verdict, str]:
    """The policy's verdict on an advisory that affects a package, and why."""
    names = {advisory.id, *advisory.aliases}
    expired = None
    for acceptance in policy.accept:
        if acceptance.id in names:
            if acceptance.expires >= today:
                return Verdict.ACCEPTED, f"accepted until {acceptance.expires}: {acceptance.reason}"
            expired = acceptance
    prefix = f"its acceptance expired on {expired.expires} ({expired.reason}); " if expired is not None else ""
    if policy.fail_on is None:
        return Verdict.BELOW, prefix + "the policy fails on no severity (fail_on: none)"
    if advisory.severity is None:
        return Verdict.FAIL, prefix + "severity unknown (the record gives none): cannot rank it below fail_on"
    if advisory.severity >= policy.fail_on:
        return Verdict.FAIL, prefix + f"{advisory.severity.name.lower()} >= fail_on {policy.fail_on.name.lower()}"
    return Verdict.BELOW, prefix + f"{advisory.severity.name.lower()} < fail_on {policy.fail_on.name.lower()}"
