"""Deployment profiles: named sets of run conditions the smoke checks run under (docs/profiles.md).

The conditions come from real reports:

- arbitrary UID with GID 0 (OpenShift): ``KeyError: 'getpwuid(): uid not found'``, pytorch/pytorch#140765;
- read-only root without a tmpfs: ``No usable temporary directory found`` at ``import torch``;
- ``/tmp`` mounted ``noexec``: ``failed to map segment from shared object``, pytorch/pytorch#91005;
- memory limit and CPU quota (cgroups): vllm-project/vllm#29233;
- no network (air-gapped clusters);
- the Pod Security Standard "restricted" (capabilities dropped, no privilege escalation, a seccomp profile)
  and a pod's 64 MB ``/dev/shm`` unless an ``emptyDir`` of medium Memory is mounted there.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import jsonschema

from matrixtool.model.conditions import ROW, ROWS, Condition, Row, Shape, docker_kwargs, parse_value
from matrixtool.model.names import unknown_hint

__all__ = ["DEFAULT", "KEYS", "PROMISES", "Overrides", "Profile", "ProfileChoice"]

DEFAULT = "default"
# Keys of a profile in matrix.yaml (one per row of conditions.ROWS).
KEYS = tuple(row.key for row in ROWS)


def _normal(values: Mapping[Condition, Any]) -> dict[Condition, Any]:
    """``values`` without the conditions left at the engine's default, in table order."""
    return {
        row.condition: values[row.condition] for row in ROWS if values.get(row.condition, row.default) != row.default
    }


@dataclass(frozen=True, kw_only=True)
class Profile:
    """Run conditions of the check container (``conditions.ROWS`` gives each one's meaning and normal form); one
    left out keeps the engine's default, and reading it gives the row's default."""

    name: str
    values: Mapping[Condition, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "values", _normal(self.values))

    def __getattr__(self, key: str) -> Any:
        try:
            return self.value(Condition(key))
        except ValueError:
            raise AttributeError(key) from None

    def value(self, condition: Condition) -> Any:
        """The setting of ``condition`` in this profile (the row's default when not set; dicts copied)."""
        got = self.values.get(condition, ROW[condition].default)
        return dict(got) if isinstance(got, Mapping) else got

    def differs(self, other: Profile) -> frozenset[Condition]:
        """The conditions this profile sets differently from ``other``."""
        return frozenset(c for c in Condition if self.value(c) != other.value(c))

    def describe(self) -> str:
        """One line naming every condition set, e.g. ``user 1000770000:0, read-only root, tmpfs /tmp (rw,exec)``."""
        parts = [part for c, v in self.values.items() for part in ROW[c].describe(v)]
        return ", ".join(parts) or "the engine's defaults"


def _merge(row: Row, base: Any, value: Any) -> Any:
    """``value`` (a matrix.yaml value) over ``base`` (normal form): mappings entry by entry, a null entry removing
    one; anything else replaced, a null resetting to the engine's default."""
    if row.shape is not Shape.MAPPING:
        return row.default if value is None else parse_value(row, value)
    merged = dict(base)
    for k, v in (value or {}).items():
        if v is None:
            merged.pop(str(k), None)
    merged.update(parse_value(row, {k: v for k, v in (value or {}).items() if v is not None}))
    return merged


def profile_from_mapping(name: str, data: Mapping[str, Any], base: Profile | None = None) -> Profile:
    """A profile from its matrix.yaml mapping, merged onto ``base`` (the shared profile of that name).

    Scalar and list keys replace the base's value (``null`` resets it to the engine's default); ``tmpfs`` and
    ``env`` merge by mount point / variable, a ``null`` value removing that entry. Raises ValueError for a
    value ``profile_problems`` refuses (``matrixfile`` reports those first, naming the key).
    """
    profile = base if base is not None else Profile(name=name)
    values = dict(profile.values)
    for row in ROWS:
        if row.key in data:
            values[row.condition] = _merge(row, profile.value(row.condition), data[row.key])
    return Profile(name=name, values=values)


def profile_problems(data: Any) -> list[str]:
    """Every profile value of a matrix.yaml document as written (``profiles`` and ``variants.*.profiles``) that
    ``conditions.ROWS`` refuses, as ``<key path>: <value>: <what to write>``. A value of a type the row's JSON
    Schema refuses is left to the schema's own message."""

    def mappings(doc: Any) -> dict[str, Any]:
        return {str(k): v for k, v in doc.items()} if isinstance(doc, Mapping) else {}

    data = mappings(data)
    found = [(f"profiles.{name}", p) for name, p in mappings(data.get("profiles")).items()]
    for variant, v in mappings(data.get("variants")).items():
        found += [
            (f"variants.{variant}.profiles.{name}", p) for name, p in mappings(mappings(v).get("profiles")).items()
        ]
    problems = []
    for at, mapping in found:
        for row in ROWS:
            value = mappings(mapping).get(row.key)
            if value is None or not jsonschema.Draft202012Validator(dict(row.schema)).is_valid(value):
                continue
            try:
                parse_value(row, value)
            except ValueError as exc:
                shown = "" if row.shape in (Shape.MAPPING, Shape.LIST) else f"{value!r}: "
                problems.append(f"{at}.{row.key}: {shown}{exc}")
    return problems


@dataclass(frozen=True, kw_only=True)
class Promise:
    """One condition a profile's name promises: ``holds`` tells whether a value (normal form) keeps it; ``needs``:
    what the profile must state instead, as matrix.yaml writes it."""

    condition: Condition
    holds: Callable[[Any], bool]
    needs: str


def _non_root(user: str | None) -> bool:
    return user is not None and int(user.split(":")[0]) != 0


# What a profile's name promises, by name. ``restricted`` is the Pod Security Standard "restricted" (whose rules
# ``kube`` checks on the manifests of the profile of that name: ``deploy.kube_checks.pss_restricted_problems``),
# stated on the conditions that decide it: a non-root UID (runAsNonRoot, runAsUser not 0), no privilege
# escalation, capabilities dropped ALL, the runtime's seccomp profile, and no host network namespace. A profile of
# that name that breaks one cannot be what it says: refused when the matrix loads, never found by ``kube`` later.
PROMISES: Mapping[str, tuple[Promise, ...]] = {
    "restricted": (
        Promise(condition=Condition.USER, holds=_non_root, needs='a non-root UID, e.g. user: "1000770000:0"'),
        Promise(condition=Condition.NO_NEW_PRIVILEGES, holds=lambda on: on is True, needs="no_new_privileges: true"),
        Promise(condition=Condition.CAP_DROP, holds=lambda caps: "ALL" in caps, needs="cap_drop: [ALL]"),
        Promise(condition=Condition.SECCOMP, holds=lambda v: v == "RuntimeDefault", needs="seccomp: RuntimeDefault"),
        Promise(
            condition=Condition.NETWORK,
            holds=lambda v: v != "host",
            needs="a network other than host (none, or leave it out)",
        ),
    ),
}


def promise_problems(data: Mapping[str, Any]) -> list[str]:
    """Every profile of a resolved matrix document (``extends`` merged) whose name promises what one of its values
    breaks (``PROMISES``), as ``<key path>: <what>; write <fix>, or rename the profile``; the key path is where the
    value is written: the variant's own profile when it sets the key, else the shared one (once for all variants).
    Profiles with values ``profile_problems`` refuses are skipped (those are reported already)."""
    shared: Mapping[str, Any] = data.get("profiles") or {}
    problems: dict[str, None] = {}
    for variant, v in (data.get("variants") or {}).items():
        own: Mapping[str, Any] = v.get("profiles") or {} if isinstance(v, Mapping) else {}
        try:
            profiles = merge_profiles(shared, own)
        except (ValueError, TypeError, AttributeError):
            continue
        for profile in profiles:
            for promise in PROMISES.get(profile.name, ()):
                value = profile.value(promise.condition)
                if promise.holds(value):
                    continue
                key = promise.condition.value
                written = isinstance(own.get(profile.name), Mapping) and key in own[profile.name]
                at = f"variants.{variant}.profiles" if written else "profiles"
                shown = "not set" if value == ROW[promise.condition].default else f"{value!r}"
                problems[
                    f"{at}.{profile.name}.{key}: {shown}, which a profile named {profile.name!r} cannot have (the "
                    f"Pod Security Standard {profile.name!r}); write {promise.needs}, or rename the profile"
                ] = None
    return list(problems)


def merge_profiles(shared: Mapping[str, Any], variant: Mapping[str, Any]) -> tuple[Profile, ...]:
    """The profiles of one variant: ``default`` always exists (the engine's defaults unless matrix.yaml declares
    it) and comes first; the others keep file order (shared ones first)."""
    names = list(dict.fromkeys([DEFAULT, *shared, *variant]))
    out = []
    for name in names:
        base = profile_from_mapping(name, shared.get(name) or {})
        out.append(profile_from_mapping(name, variant.get(name) or {}, base) if name in variant else base)
    return tuple(out)


@dataclass(frozen=True, kw_only=True)
class Overrides:
    """Conditions given on the command line (``--user`` ...), in normal form; a condition left out keeps the
    profile's. ``Overrides.of(user="1:0", tmpfs={...})`` builds one from condition keys."""

    values: Mapping[Condition, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, **values: Any) -> Overrides:
        """Overrides from condition keys (``user=``, ``cpus=`` ...); None or empty leaves a condition out."""
        return cls(values={Condition(k): v for k, v in values.items() if v is not None and v != {} and v != ()})

    def apply(self, profile: Profile) -> Profile:
        """``profile`` with these overrides; ``tmpfs`` and ``env`` entries add to (or replace) the profile's."""
        values = dict(profile.values)
        for condition, value in self.values.items():
            mapping = ROW[condition].shape is Shape.MAPPING
            values[condition] = {**profile.value(condition), **value} if mapping else value
        return replace(profile, values=values)


def parse_flag_entries(row: Row, values: Iterable[str]) -> dict[str, str]:
    assert row.split is not None
    out: dict[str, str] = {}
    for value in values:
        try:
            key, val = row.split(value)
            out.update(parse_value(row, {key: val}))
        except ValueError as exc:
            raise ValueError(f"{row.flag} {value!r}: {exc}") from None
    return out


def select_profiles(available: Sequence[Profile], names: Sequence[str]) -> list[Profile]:
    """The profiles called ``names`` (all when empty), in ``available``'s order.

    Raises KeyError naming the unknown names and the known ones."""
    if not names:
        return list(available)
    known = [p.name for p in available]
    unknown = [n for n in names if n not in known]
    if unknown:
        named = ", ".join(
            repr(n) + (f" ({h[2:]})" if (h := unknown_hint(n, known, each="--profile {}")) else "") for n in unknown
        )
        raise KeyError(f"unknown profile(s) {named}; known: {', '.join(known)}")
    return [p for p in available if p.name in names]


def container_kwargs(profile: Profile) -> dict[str, Any]:
    """Keyword arguments of ``client.containers.run`` that put ``profile``'s conditions in place
    (``conditions.ROWS``: e.g. ``cpus`` becomes ``nano_cpus``, 10^-9 CPUs as ``docker run --cpus``)."""
    return docker_kwargs(profile.values)


def checks_to_run(
    profile: Profile,
    reference: Profile | None,
    checks: Sequence[Any],
    affects: Mapping[str, frozenset[Condition]],
) -> tuple[list[Any], list[Any]]:
    """(checks to run under ``profile``, checks left out), for ``checks`` (objects with a ``name``).

    With a ``reference`` profile in the same run (``default``), a check runs again under ``profile`` only when
    a condition ``profile`` sets differently from ``reference`` is among those that can change the check's
    verdict (``affects[name]``, declared in checks.py); without one, every check runs.
    """
    if reference is None or profile.name == reference.name:
        return list(checks), []
    changed = profile.differs(reference)
    run = [c for c in checks if affects.get(c.name, frozenset(Condition)) & changed]
    return run, [c for c in checks if c not in run]


# Conditions for the check container of an image the tool did not build (``test --image``): no capability, no
# privilege escalation, a bounded number of processes. Each applies under every profile that leaves its
# condition at the engine's default; a profile or flag that sets one keeps its own value.
UNTRUSTED: Mapping[Condition, Any] = {
    Condition.CAP_DROP: ("ALL",),
    Condition.NO_NEW_PRIVILEGES: True,
    Condition.PIDS_LIMIT: 4096,
}


def hardened(profile: Profile, given: Collection[Condition] = ()) -> Profile:
    """``profile`` with each condition of ``UNTRUSTED`` it leaves at the engine's default set, but those ``given``
    on the command line: a flag that asks for the engine's default (``--allow-new-privileges``) is honoured, never
    silently overridden."""
    values = dict(profile.values)
    for condition, value in UNTRUSTED.items():
        if condition not in given and profile.value(condition) == ROW[condition].default:
            values[condition] = value
    return replace(profile, values=values)


@dataclass(frozen=True, kw_only=True)
class ProfileChoice:
    """What the command line asks for: profile ``names`` (empty: every profile of the variant) and ``overrides``;
    ``untrusted``: the image is not one this tool built, so every profile is ``hardened`` after the overrides."""

    names: tuple[str, ...] = ()
    overrides: Overrides = field(default_factory=Overrides)
    untrusted: bool = False

    def resolve(self, variant: str, available: Sequence[Profile]) -> list[Profile]:
        """The chosen profiles of ``variant`` with the overrides applied, in ``available``'s order.

        Raises ConfigError (exit 3) naming an unknown profile and the known ones.
        """
        from matrixtool.core.errors import ConfigError

        try:
            chosen = select_profiles(available, self.names)
        except KeyError as exc:
            raise ConfigError("--profile", [f"variant {variant}: {exc.args[0]}"]) from exc
        applied = [self.overrides.apply(p) for p in chosen]
        return [hardened(p, self.overrides.values) for p in applied] if self.untrusted else applied
