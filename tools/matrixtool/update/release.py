"""Which vLLM release to move to, and the torch its requirement line admits (PEP 440 matching)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from packaging.version import Version

from matrixtool.update.pages import DistFile, Project
from matrixtool.update.targets import Line, Target


def select_release(
    project: Project,
    *,
    current: Version,
    targets: Sequence[Target],
    same_minor: bool,
    cooldown: timedelta,
    now: datetime,
    upload_times: Mapping[str, datetime],
) -> tuple[Version | None, list[str]]:
    """The newest version above ``current`` that is final (not a pre- or dev-release), not yanked (PEP 592:
    every file of it yanked), in ``current``'s major.minor when ``same_minor``, with a wheel for every target,
    and whose wheels were uploaded at least ``cooldown`` before ``now``; and one line per newer version
    passed over, saying why. Upload times: the page's PEP 700 ``upload-time``, else ``upload_times``
    (JSON API, by file name); unknown counts as too recent while ``cooldown`` is positive."""
    by_version: dict[Version, list[DistFile]] = {}
    for f in project.files:
        if f.version is not None:
            by_version.setdefault(f.version, []).append(f)
    skipped: list[str] = []
    tag_sets = [t.tags() for t in targets]
    for version in sorted((v for v in by_version if v > current), reverse=True):
        files = by_version[version]
        if version.is_prerelease or version.is_devrelease:
            skipped.append(f"{version}: a pre-release")
            continue
        live = [f for f in files if not f.yanked]
        if not live:
            reasons = sorted({f.yanked_reason for f in files if f.yanked_reason})
            skipped.append(f"{version}: yanked" + (f" ({'; '.join(reasons)})" if reasons else ""))
            continue
        if same_minor and version.release[:2] != current.release[:2]:
            skipped.append(f"{version}: outside {current.major}.{current.minor}.* (--same-minor)")
            continue
        wheels = []
        missing = []
        for target, tags in zip(targets, tag_sets, strict=True):
            fitting = [f for f in live if target.fits(f, tags)]
            if fitting:
                wheels.append(fitting[0])
            else:
                missing.append(str(target))
        if missing:
            skipped.append(f"{version}: no wheel for {', '.join(missing)}")
            continue
        if cooldown > timedelta(0):
            times = [f.upload_time or upload_times.get(f.filename) for f in wheels]
            if any(t is None for t in times):
                skipped.append(f"{version}: upload time unknown (--cooldown needs it)")
                continue
            newest = max(t for t in times if t is not None)
            if now - newest < cooldown:
                skipped.append(f"{version}: uploaded {newest:%Y-%m-%d}, inside the {cooldown.days}-day cooldown")
                continue
        return version, skipped
    return None, skipped


def local_label(version: str) -> str | None:
    """The local part of a version (``cpu`` of ``2.13.0+cpu``), None when it has none or is not PEP 440."""
    try:
        return Version(version).local
    except ValueError:  # InvalidVersion, or a release number past what int() converts
        return None


@dataclass(frozen=True, kw_only=True)
class TorchChoice:
    """The torch of a proposal: ``version`` as pip would install it (for an unmatched range: the specifier as
    written), ``listed`` (an index of the variant has it), ``pinned`` (vLLM's line is one exact pin, ``==`` or
    ``===`` without a wildcard: then a wheelhouse may hold what no index lists)."""

    version: str
    listed: bool
    pinned: bool


def choose_torch(line: Line, candidates: Iterable[Version], *, current: str) -> TorchChoice:
    """The torch for vLLM's torch requirement ``line`` among the ``candidates`` an index lists.

    Matching is PEP 440's (``SpecifierSet.contains``: ``==2.15.0`` matches ``2.15.0+rocm6.4``); the newest
    match wins, those with ``current``'s local label (``+rocm6.4``) first; a range takes final releases only.
    An exact pin nothing matches is taken as written (a wheelhouse must hold it).
    """
    spec = line.requirement.specifier
    pins = [s.version for s in spec if s.operator in ("==", "===") and "*" not in s.version]
    pinned = len(pins) == 1
    label = local_label(current)
    inside = [v for v in set(candidates) if spec.contains(v, prereleases=pinned)]
    preferred = [v for v in inside if v.local == label] or inside
    if preferred:
        return TorchChoice(version=str(max(preferred)), listed=True, pinned=pinned)
    return TorchChoice(version=pins[0] if pinned else str(spec), listed=False, pinned=pinned)


def pep440(version: str) -> bool:
    try:
        Version(version)
    except ValueError:  # InvalidVersion, or a release number past what int() converts
        return False
    return True
