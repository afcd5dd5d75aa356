"""Deployment profiles: named sets of run conditions the smoke checks run under (README "Deployment profiles").

A profile says how the check container is run: as which user, with a read-only root or not, which tmpfs
mounts (and their options), with how much memory and how many CPUs, on which network, with which extra
environment. ``matrix.yaml`` declares them once at the top level (``profiles:``) and a variant may
override them key by key (``variants.<name>.profiles``). The conditions come from real reports:

- arbitrary UID with GID 0 (OpenShift): ``KeyError: 'getpwuid(): uid not found'``, pytorch/pytorch#140765;
- read-only root without a tmpfs: ``No usable temporary directory found`` at ``import torch``;
- ``/tmp`` mounted ``noexec``: ``failed to map segment from shared object``, pytorch/pytorch#91005;
- memory limit and CPU quota (cgroups): vllm-project/vllm#29233;
- no network (air-gapped clusters).

Pure values and functions only: ``container_kwargs`` returns the keyword arguments of
``docker.containers.run``; the executor in ``smoke.py`` passes them on.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any

DEFAULT = "default"


class Condition(str, Enum):
    """One run condition a profile may set; checks declare which of them can change their verdict."""

    USER = "user"
    READ_ONLY = "read_only"
    TMPFS = "tmpfs"
    MEMORY = "memory"
    CPUS = "cpus"
    NETWORK = "network"
    ENV = "env"


@dataclass(frozen=True, kw_only=True)
class Profile:
    """Run conditions of the check container.

    ``user``: ``UID[:GID]`` (None: the image's USER); ``read_only``: the root filesystem is read-only;
    ``tmpfs``: mount point -> mount options (``rw,exec,size=4g``; empty: Docker's defaults, which include
    ``noexec``); ``memory``: a Docker memory limit (``4g``, bytes with a unit suffix; None: none);
    ``cpus``: a CPU quota in CPUs (None: none); ``network``: a Docker network mode (``none``; None: the
    engine's default bridge); ``env``: extra environment variables.
    """

    name: str
    user: str | None = None
    read_only: bool = False
    tmpfs: Mapping[str, str] = field(default_factory=dict)
    memory: str | None = None
    cpus: float | None = None
    network: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)

    def value(self, condition: Condition) -> Any:
        """The setting of ``condition`` in this profile (dicts for tmpfs and env)."""
        got = getattr(self, condition.value)
        return dict(got) if isinstance(got, Mapping) else got

    def differs(self, other: Profile) -> frozenset[Condition]:
        """The conditions this profile sets differently from ``other``."""
        return frozenset(c for c in Condition if self.value(c) != other.value(c))

    def describe(self) -> str:
        """One line naming every condition set, e.g. ``user 1000770000:0, read-only root, tmpfs /tmp (rw,exec)``."""
        parts = []
        if self.user is not None:
            parts.append(f"user {self.user}")
        if self.read_only:
            parts.append("read-only root")
        parts += [f"tmpfs {path}" + (f" ({opts})" if opts else "") for path, opts in self.tmpfs.items()]
        if self.memory is not None:
            parts.append(f"memory {self.memory}")
        if self.cpus is not None:
            parts.append(f"cpus {self.cpus:g}")
        if self.network is not None:
            parts.append(f"network {self.network}")
        parts += [f"{k}={v}" for k, v in self.env.items()]
        return ", ".join(parts) or "the engine's defaults"


# Keys of a profile in matrix.yaml and the Profile field each sets.
KEYS = tuple(c.value for c in Condition)


def profile_from_mapping(name: str, data: Mapping[str, Any], base: Profile | None = None) -> Profile:
    """A profile from its matrix.yaml mapping, merged onto ``base`` (the shared profile of that name).

    Scalar keys replace the base's value (``null`` resets it to the engine's default); ``tmpfs`` and ``env``
    merge by mount point / variable, a ``null`` value removing that entry. The mapping is assumed valid
    (matrix.schema.json ``$defs.profile``).
    """
    profile = base if base is not None else Profile(name=name)
    changes: dict[str, Any] = {}
    for key in ("user", "memory", "network"):
        if key in data:
            changes[key] = None if data[key] is None else str(data[key])
    if "cpus" in data:
        changes["cpus"] = None if data["cpus"] is None else float(data["cpus"])
    if "read_only" in data:
        changes["read_only"] = bool(data["read_only"])
    for key in ("tmpfs", "env"):
        if key in data:
            merged = {**getattr(profile, key)}
            for k, v in (data[key] or {}).items():
                if v is None:
                    merged.pop(str(k), None)
                else:
                    merged[str(k)] = str(v)
            changes[key] = merged
    return replace(profile, name=name, **changes)


def merge_profiles(shared: Mapping[str, Any], variant: Mapping[str, Any]) -> tuple[Profile, ...]:
    """The profiles of one variant: the top-level ``profiles`` with the variant's overrides merged on.

    A name only the variant has adds a profile. ``default`` always exists (the engine's defaults) and
    comes first; the others keep file order (shared ones first).
    """
    names = list(dict.fromkeys([DEFAULT, *shared, *variant]))
    out = []
    for name in names:
        base = profile_from_mapping(name, shared.get(name) or {})
        out.append(profile_from_mapping(name, variant.get(name) or {}, base) if name in variant else base)
    return tuple(out)


@dataclass(frozen=True, kw_only=True)
class Overrides:
    """Conditions given on the command line (``--user`` ...); None or empty: keep the profile's."""

    user: str | None = None
    read_only: bool | None = None
    tmpfs: Mapping[str, str] = field(default_factory=dict)
    memory: str | None = None
    cpus: float | None = None
    network: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)

    def apply(self, profile: Profile) -> Profile:
        """``profile`` with these overrides; ``tmpfs`` and ``env`` entries add to (or replace) the profile's."""
        return replace(
            profile,
            user=self.user if self.user is not None else profile.user,
            read_only=self.read_only if self.read_only is not None else profile.read_only,
            tmpfs={**profile.tmpfs, **self.tmpfs},
            memory=self.memory if self.memory is not None else profile.memory,
            cpus=self.cpus if self.cpus is not None else profile.cpus,
            network=self.network if self.network is not None else profile.network,
            env={**profile.env, **self.env},
        )


def parse_tmpfs(values: Iterable[str]) -> dict[str, str]:
    """``--tmpfs PATH[:OPTS]`` values as mount point -> options.

    Raises ValueError naming the value when PATH is not absolute.
    """
    out = {}
    for value in values:
        path, _, opts = value.partition(":")
        if not path.startswith("/"):
            raise ValueError(f"--tmpfs {value!r}: the mount point must be an absolute path, e.g. /tmp:rw,exec")
        out[path] = opts
    return out


def parse_env(values: Iterable[str]) -> dict[str, str]:
    """``--env KEY=VALUE`` values as a dict. Raises ValueError naming a value without ``=``."""
    out = {}
    for value in values:
        key, sep, val = value.partition("=")
        if not sep or not key:
            raise ValueError(f"--env {value!r}: write KEY=VALUE")
        out[key] = val
    return out


def select_profiles(available: Sequence[Profile], names: Sequence[str]) -> list[Profile]:
    """The profiles called ``names`` (all of ``available`` when empty), in ``available``'s order.

    Raises KeyError with a message naming the unknown names and the known ones.
    """
    if not names:
        return list(available)
    known = [p.name for p in available]
    unknown = [n for n in names if n not in known]
    if unknown:
        raise KeyError(f"unknown profile(s) {', '.join(unknown)}; known: {', '.join(known)}")
    return [p for p in available if p.name in names]


def container_kwargs(profile: Profile) -> dict[str, Any]:
    """Keyword arguments of ``client.containers.run`` that put ``profile``'s conditions in place.

    ``cpus`` becomes ``nano_cpus`` (10^-9 CPUs, as ``docker run --cpus``); ``memory`` goes to ``mem_limit``
    unchanged (Docker's units: ``b``, ``k``, ``m``, ``g``).
    """
    out: dict[str, Any] = {}
    if profile.user is not None:
        out["user"] = profile.user
    if profile.read_only:
        out["read_only"] = True
    if profile.tmpfs:
        out["tmpfs"] = dict(profile.tmpfs)
    if profile.memory is not None:
        out["mem_limit"] = profile.memory
    if profile.cpus is not None:
        out["nano_cpus"] = round(profile.cpus * 1e9)
    if profile.network is not None:
        out["network_mode"] = profile.network
    if profile.env:
        out["environment"] = dict(profile.env)
    return out


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


@dataclass(frozen=True, kw_only=True)
class ProfileChoice:
    """What the command line asks for: profile ``names`` (empty: every profile of the variant) and ``overrides``."""

    names: tuple[str, ...] = ()
    overrides: Overrides = field(default_factory=Overrides)

    def resolve(self, variant: str, available: Sequence[Profile]) -> list[Profile]:
        """The chosen profiles of ``variant`` with the overrides applied, in ``available``'s order.

        Raises ConfigError (exit 3) naming an unknown profile and the known ones.
        """
        from matrixtool.errors import ConfigError

        try:
            chosen = select_profiles(available, self.names)
        except KeyError as exc:
            raise ConfigError("--profile", [f"variant {variant}: {exc.args[0]}"]) from exc
        return [self.overrides.apply(p) for p in chosen]
