"""Facts about a variant's packages from its indexes together (pip's view with ``--extra-index-url``) and its
wheelhouse."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Protocol

from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from matrixtool.core.errors import ConfigError
from matrixtool.model.model import Variant
from matrixtool.update.pages import DistFile, LatestRelease, Project, requires_dist
from matrixtool.update.targets import Line, Target, applying

# Dependencies whose metadata is read at once (one level below vLLM).
WORKERS = 8


class Index(Protocol):
    """What ``propose`` asks of a package index (``pyindex.IndexClient``)."""

    def project(self, index_url: str, name: str) -> Project | None: ...
    def upload_times(self, index_url: str, name: str) -> dict[str, datetime]: ...
    def latest(self, index_url: str, name: str) -> LatestRelease | None: ...
    def wheel_files(self, url: str, wanted: tuple[str, ...]) -> dict[str, str]: ...


def index_urls(variant: Variant) -> list[str]:
    return [variant.index.url, *variant.index.extra_urls]


def merged_project(index: Index, variant: Variant, name: str) -> Project:
    """``name``'s files on every index of ``variant`` together (pip's view with ``--extra-index-url``).

    Raises ConfigError: no index of the variant has ``name``.
    """
    pages = [p for p in (index.project(url, name) for url in index_urls(variant)) if p is not None]
    if not pages:
        raise ConfigError(
            f"variants.{variant.name}.vllm.package",
            [f"{name!r} is on none of {', '.join(index_urls(variant))}; check the package name and index.url"],
        )
    return Project(
        name=pages[0].name, url=pages[0].url, api=pages[0].api, files=tuple(f for p in pages for f in p.files)
    )


def versions_on(index: Index, variant: Variant, name: str, target: Target) -> dict[Version, list[DistFile]]:
    """Version -> fitting, non-yanked wheels of ``name`` on every index of ``variant`` (pip's view with
    ``--extra-index-url``: all indexes together)."""
    out: dict[Version, list[DistFile]] = {}
    for url in index_urls(variant):
        for version, files in versions_on_one(index, url, name, target).items():
            out.setdefault(version, []).extend(files)
    return out


def wheelhouse_wheel(folder: Path | None, name: str, version: str, target: Target) -> Path | None:
    if folder is None or not folder.is_dir():
        return None
    tags = target.tags()
    for path in sorted(folder.glob("*.whl")):
        try:
            dist, v, _, wheel_tags = parse_wheel_filename(path.name)
        except (ValueError, InvalidVersion):
            continue
        if canonicalize_name(dist) == canonicalize_name(name) and str(v) == version and wheel_tags & tags:
            return path
    return None


def dependency_lines(index: Index, variant: Variant, line: Line, target: Target) -> list[Line]:
    """The ``Requires-Dist`` lines (for ``target``) of the release pip would likely pick for ``line``: the JSON
    API's latest where it is inside the specifier, else the newest fitting wheel inside it (METADATA read)."""
    req = line.requirement
    for url in index_urls(variant):
        latest = index.latest(url, req.name)
        if latest is not None and req.specifier.contains(latest.version, prereleases=True):
            return applying(latest.requires_dist, f"{req.name} {latest.version} (JSON API)", target)
        versions = {
            v: fs
            for v, fs in versions_on_one(index, url, req.name, target).items()
            if req.specifier.contains(v, prereleases=False)
        }
        if versions:
            best = max(versions)
            meta = index.wheel_files(versions[best][0].url, ())
            return applying(requires_dist(meta["METADATA"]), f"{req.name} {best} METADATA", target)
    return []


def versions_on_one(index: Index, url: str, name: str, target: Target) -> dict[Version, list[DistFile]]:
    project = index.project(url, name)
    tags = target.tags()
    out: dict[Version, list[DistFile]] = {}
    for f in project.files if project else ():
        if f.version is not None and not f.yanked and target.fits(f, tags):
            out.setdefault(f.version, []).append(f)
    return out
