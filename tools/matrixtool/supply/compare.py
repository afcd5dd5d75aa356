"""What differs between two SBOM documents, package by package, and what one holds in a few numbers."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from packageurl import PackageURL

from matrixtool.core import untrusted
from matrixtool.supply.sbom import CYCLONEDX_SCHEMA, PROPERTY_PREFIX, SbomError, normal_name


class Kind(str, Enum):
    PYTHON = "python"
    DEBIAN = "debian"
    OTHER = "other"


@dataclass(frozen=True, kw_only=True)
class Package:
    """One component of an SBOM document, as ``compare`` sees it: ``key`` is ``<purl type>/<name>`` (the purl
    without version and qualifiers other than ``arch``), ``sha256`` the component's SHA-256 hash ('' if none)."""

    key: str
    kind: Kind
    name: str
    version: str
    sha256: str
    size: int


# A size a property may give: ASCII digits (``str.isdigit`` takes ``²``, which ``int`` refuses), at most 18 of them
# (bytes fit an int64; 5000 digits are past what ``int`` converts at all).
_COUNT_TEXT = re.compile(r"[0-9]{1,18}")


def _property(component: Mapping[str, Any], name: str) -> str:
    for prop in component.get("properties") or ():
        if isinstance(prop, Mapping) and prop.get("name") == PROPERTY_PREFIX + name:
            return str(prop.get("value", ""))
    return ""


def packages_of(doc: Mapping[str, Any]) -> dict[str, Package]:
    """The packages of a CycloneDX JSON document (any producer's: components with a ``pkg:pypi`` or ``pkg:deb`` purl),
    by key. A key seen twice (one distribution in two folders) gets ``#2``, ``#3``. Raises SbomError: ``doc`` is not a
    CycloneDX document."""
    if not isinstance(doc, Mapping) or doc.get("bomFormat") != "CycloneDX":
        raise SbomError('not a CycloneDX document (no "bomFormat": "CycloneDX")')
    untrusted.check_shape(doc, CYCLONEDX_SCHEMA, source="the SBOM", what="a CycloneDX JSON document", error=SbomError)
    found: dict[str, Package] = {}
    for component in doc.get("components") or ():
        if not isinstance(component, Mapping):
            continue
        purl_text = component.get("purl")
        if not isinstance(purl_text, str):
            continue
        try:
            purl = PackageURL.from_string(purl_text)
        except ValueError:
            continue
        kind = {"pypi": Kind.PYTHON, "deb": Kind.DEBIAN}.get(purl.type, Kind.OTHER)
        name = normal_name(purl.name) if kind is Kind.PYTHON else purl.name
        arch = (purl.qualifiers or {}).get("arch") if isinstance(purl.qualifiers, dict) else None
        key = f"{purl.type}/{name}" + (f":{arch}" if arch else "")
        sha = next((str(h.get("content", "")) for h in component.get("hashes") or () if h.get("alg") == "SHA-256"), "")
        size_text = _property(component, "size-bytes") or ""
        kib = _property(component, "installed-size-kib") or ""
        size = (
            int(size_text) if _COUNT_TEXT.fullmatch(size_text) else int(kib) * 1024 if _COUNT_TEXT.fullmatch(kib) else 0
        )
        n, unique = 1, key
        while unique in found:
            n += 1
            unique = f"{key}#{n}"
        found[unique] = Package(
            key=unique, kind=kind, name=name, version=str(purl.version or ""), sha256=sha, size=size
        )
    return found


def image_of(doc: Mapping[str, Any]) -> str:
    """The image ID (version of the metadata component) a document is bound to ('' if none)."""
    component = (doc.get("metadata") or {}).get("component") or {}
    return str(component.get("version", "")) if isinstance(component, Mapping) else ""


@dataclass(frozen=True, kw_only=True)
class Change:
    """A package in both documents whose ``field`` (``version`` or ``sha256``) differs."""

    key: str
    field: str
    published: str
    derived: str


@dataclass(frozen=True, kw_only=True)
class Comparison:
    """What differs between a published SBOM and one derived now: ``added`` are only in the derived one."""

    published_image: str
    derived_image: str
    added: tuple[Package, ...]
    removed: tuple[Package, ...]
    changed: tuple[Change, ...]

    @property
    def same(self) -> bool:
        return not (self.added or self.removed or self.changed)


def compare(published: Mapping[str, Any], derived: Mapping[str, Any]) -> Comparison:
    """Raises SbomError: either is not a CycloneDX document."""
    old, new = packages_of(published), packages_of(derived)
    changed: list[Change] = []
    for key in sorted(old.keys() & new.keys()):
        a, b = old[key], new[key]
        if a.version != b.version:
            changed.append(Change(key=key, field="version", published=a.version, derived=b.version))
        elif a.sha256 and b.sha256 and a.sha256 != b.sha256:
            changed.append(Change(key=key, field="sha256", published=a.sha256, derived=b.sha256))
    return Comparison(
        published_image=image_of(published),
        derived_image=image_of(derived),
        added=tuple(new[k] for k in sorted(new.keys() - old.keys())),
        removed=tuple(old[k] for k in sorted(old.keys() - new.keys())),
        changed=tuple(changed),
    )


def comparison_lines(result: Comparison) -> list[str]:
    """``result`` as lines for the terminal: one per package that differs, then a count (names and versions of
    a published document with control characters escaped)."""
    lines = []
    if result.published_image != result.derived_image:
        lines.append(f"image: published {result.published_image or '?'}, derived {result.derived_image or '?'}")
    lines += [f"+ {p.key} {p.version}" for p in result.added]
    lines += [f"- {p.key} {p.version}" for p in result.removed]
    lines += [f"~ {c.key} {c.field}: {c.published} -> {c.derived}" for c in result.changed]
    lines.append(
        "no package differs"
        if result.same
        else f"{len(result.added)} added, {len(result.removed)} removed, {len(result.changed)} changed"
    )
    return [untrusted.shown(line) for line in lines]


@dataclass(frozen=True, kw_only=True)
class Summary:
    """Counts of an SBOM's packages by kind, and the largest (bytes: RECORD sizes, dpkg's Installed-Size)."""

    counts: Mapping[str, int]
    largest: tuple[Package, ...]


def summarize(doc: Mapping[str, Any], *, top: int = 10) -> Summary:
    """The ``Summary`` of a CycloneDX document (``top`` largest packages)."""
    packages = list(packages_of(doc).values())
    counts: dict[str, int] = {}
    for p in packages:
        counts[p.kind.value] = counts.get(p.kind.value, 0) + 1
    largest = tuple(sorted(packages, key=lambda p: -p.size)[:top])
    return Summary(counts=counts, largest=largest)
