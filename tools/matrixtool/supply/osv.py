"""OSV records and what they affect: the SBOM's packages as OSV looks them up, a record's severity, and the
OSV schema's range evaluation (PyPI versions by PEP 440, Debian versions by dpkg's ordering)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

from cvss import CVSS3, CVSS4
from debian.debian_support import Version as DebianVersion
from packageurl import PackageURL
from packaging.version import InvalidVersion
from packaging.version import Version as PyPIVersion

from matrixtool.core import untrusted

PROPERTY_PREFIX = "vllm-matrix:"


class Severity(IntEnum):
    """Qualitative severity, CVSS's bands (GHSA's ``MODERATE`` is ``MEDIUM``)."""

    LOW = 1
    MEDIUM = 2
    HIGH = 3
    CRITICAL = 4


@dataclass(frozen=True, kw_only=True)
class Target:
    """A package to audit: its SBOM ``key`` (purl type/name[:arch]) and the OSV ``ecosystem``/``name``/``version``
    it is looked up as ('' ecosystem: no OSV ecosystem is known for it)."""

    key: str
    ecosystem: str
    name: str
    version: str


@dataclass(frozen=True, kw_only=True)
class Advisory:
    """One OSV record, reduced: ``affected`` holds its raw ``affected`` entries."""

    id: str
    aliases: tuple[str, ...]
    summary: str
    severity: Severity | None
    affected: tuple[Mapping[str, Any], ...]


def _property(component: Mapping[str, Any], name: str) -> str:
    for prop in component.get("properties") or ():
        if isinstance(prop, Mapping) and prop.get("name") == PROPERTY_PREFIX + name:
            return str(prop.get("value", ""))
    return ""


def _debian_ecosystem(distro: str) -> str:
    """OSV's Debian ecosystem of a purl ``distro`` qualifier (``debian-12``, ``bookworm``): ``Debian:12``."""
    codenames = {"bullseye": "11", "bookworm": "12", "trixie": "13", "forky": "14"}
    match = re.fullmatch(r"debian-(\d+)(?:\.\d+)*", distro)
    release = match.group(1) if match else codenames.get(distro, "")
    return f"Debian:{release}" if release else "Debian"


def targets_of(doc: Mapping[str, Any]) -> list[Target]:
    """The packages of a CycloneDX document to audit: every component with a purl. ``pkg:pypi`` is OSV's ``PyPI``;
    ``pkg:deb/debian`` is ``Debian:<release>`` (from ``distro``) looked up as its source package and version;
    any other purl type has no ecosystem here (and will not be audited)."""
    targets = []
    for component in doc.get("components") or ():
        if not isinstance(component, Mapping) or not isinstance(component.get("purl"), str):
            continue
        try:
            purl = PackageURL.from_string(component["purl"])
        except ValueError:
            continue
        qualifiers = purl.qualifiers if isinstance(purl.qualifiers, dict) else {}
        version = str(purl.version or component.get("version") or "")
        if purl.type == "pypi":
            key = f"pypi/{purl.name}"
            targets.append(Target(key=key, ecosystem="PyPI", name=purl.name, version=version))
        elif purl.type == "deb" and purl.namespace == "debian":
            key = f"deb/{purl.name}" + (f":{qualifiers['arch']}" if qualifiers.get("arch") else "")
            targets.append(
                Target(
                    key=key,
                    ecosystem=_debian_ecosystem(qualifiers.get("distro", "")),
                    name=_property(component, "source") or purl.name,
                    version=_property(component, "source-version") or version,
                )
            )
        else:
            targets.append(Target(key=f"{purl.type}/{purl.name}", ecosystem="", name=purl.name, version=version))
    return targets


def _severity_of_vector(kind: str, vector: str) -> Severity | None:
    try:
        if kind == "CVSS_V3":
            rating = CVSS3(vector).severities()[0]
        elif kind == "CVSS_V4":
            rating = CVSS4(vector).severity
        else:
            return None
    except Exception:  # the cvss library raises its own errors, or ValueError, for a bad vector
        return None
    return Severity.__members__.get(str(rating).upper())


_STRINGS = {"type": "array", "items": {"type": "string"}}
_SPECIFIC = {"type": ["object", "null"], "properties": {"severity": {"type": ["string", "null"]}}}
# The part of the OSV schema (https://ossf.github.io/osv-schema/) this module reads; other keys are free.
OSV_RECORD_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["id"],
    "properties": {
        "id": {"type": "string", "minLength": 1, "maxLength": 200},
        "aliases": {"type": ["array", "null"], "items": {"type": "string"}},
        "summary": {"type": ["string", "null"]},
        "details": {"type": ["string", "null"]},
        "database_specific": _SPECIFIC,
        "severity": {
            "type": ["array", "null"],
            "items": {"type": "object", "properties": {"type": {"type": "string"}, "score": {"type": "string"}}},
        },
        "affected": {
            "type": ["array", "null"],
            "items": {
                "type": "object",
                "properties": {
                    "package": {
                        "type": "object",
                        "properties": {"ecosystem": {"type": "string"}, "name": {"type": "string"}},
                    },
                    "versions": {"type": ["array", "null"], "items": {"type": "string"}},
                    "ranges": {
                        "type": ["array", "null"],
                        "items": {
                            "type": "object",
                            "properties": {
                                "type": {"type": "string"},
                                "events": {
                                    "type": "array",
                                    "items": {
                                        "type": "object",
                                        "properties": {
                                            k: {"type": "string"} for k in ("introduced", "fixed", "last_affected")
                                        },
                                    },
                                },
                            },
                        },
                    },
                    "ecosystem_specific": _SPECIFIC,
                    "database_specific": _SPECIFIC,
                },
            },
        },
    },
}
# An answer of the OSV API's /v1/querybatch.
OSV_BATCH_SCHEMA: dict[str, Any] = {
    "$defs": {"id": {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9._:-]{0,199}$"}},
    "type": "object",
    "properties": {
        "results": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "vulns": {
                        "type": ["array", "null"],
                        # an ID goes into the URL of /v1/vulns/<id>: no '/', '?', '%' or space
                        "items": {"type": "object", "required": ["id"], "properties": {"id": {"$ref": "#/$defs/id"}}},
                    }
                },
            },
        }
    },
}


def severity_of(record: Mapping[str, Any]) -> Severity | None:
    """An OSV record's severity: its ``database_specific.severity`` (GHSA: LOW, MODERATE, HIGH, CRITICAL), an
    ``affected[].ecosystem_specific``/``database_specific`` severity, else the highest CVSS v3/v4 base rating
    of ``severity[]``; None when none says (unknown: the gate cannot rank it)."""
    labels = [(record.get("database_specific") or {}).get("severity")]
    for entry in record.get("affected") or ():
        for part in ("ecosystem_specific", "database_specific"):
            labels.append((entry.get(part) or {}).get("severity"))
    found = [
        Severity.__members__.get({"MODERATE": "MEDIUM"}.get(str(s).upper(), str(s).upper()))
        for s in labels
        if isinstance(s, str)
    ]
    for item in record.get("severity") or ():
        if isinstance(item, Mapping):
            found.append(_severity_of_vector(str(item.get("type")), str(item.get("score", ""))))
    ranked = [s for s in found if s is not None]
    return max(ranked) if ranked else None


def advisory_of(record: Mapping[str, Any]) -> Advisory:
    """The ``Advisory`` of one OSV JSON record (its texts with control characters escaped: ``untrusted.shown``)."""
    return Advisory(
        id=untrusted.shown(str(record.get("id", ""))),
        aliases=tuple(untrusted.shown(str(a)) for a in record.get("aliases") or ()),
        summary=untrusted.shown(str(record.get("summary") or record.get("details", ""))[:200].split("\n")[0]),
        severity=severity_of(record),
        affected=tuple(a for a in record.get("affected") or () if isinstance(a, Mapping)),
    )


def _parse_version(ecosystem: str, text: str) -> Any:
    """A comparable version of ``ecosystem``. Raises ValueError when ``text`` is not one."""
    if ecosystem == "PyPI":
        try:
            return PyPIVersion(text)
        except InvalidVersion as exc:
            raise ValueError(str(exc)) from exc
    if ecosystem.startswith("Debian"):
        return DebianVersion(text)
    raise ValueError(f"no version ordering for ecosystem {ecosystem!r}")


def _ecosystem_matches(ecosystem: str, wanted: str) -> bool:
    """OSV's ``Debian:12`` entry matches a ``Debian:12`` package; a bare ``Debian`` entry any release."""
    return ecosystem == wanted or (ecosystem == "Debian" and wanted.startswith("Debian:"))


def normal(ecosystem: str, name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower() if ecosystem == "PyPI" else name


def affects(advisory: Advisory, target: Target) -> tuple[bool, tuple[str, ...]]:
    """Whether ``advisory`` affects ``target`` (OSV range evaluation), and the ``fixed`` versions it names. Raises
    ValueError: ``target.version`` or an event's version cannot be parsed in the ecosystem."""
    hit = False
    fixed: list[str] = []
    version = _parse_version(target.ecosystem, target.version)
    for entry in advisory.affected:
        package = entry.get("package") or {}
        if not _ecosystem_matches(str(package.get("ecosystem", "")), target.ecosystem):
            continue
        if normal(target.ecosystem, str(package.get("name", ""))) != normal(target.ecosystem, target.name):
            continue
        if target.version in (entry.get("versions") or ()):
            hit = True
        for r in entry.get("ranges") or ():
            if r.get("type") not in ("ECOSYSTEM", "SEMVER"):
                continue  # GIT ranges name commits, not releases
            events = []
            for event in r.get("events") or ():
                for kind in ("introduced", "fixed", "last_affected"):
                    if kind in event:
                        text = str(event[kind])
                        point = None if text == "0" else _parse_version(target.ecosystem, text)
                        events.append((kind, text, point))
                        if kind == "fixed":
                            fixed.append(text)
            # In version order, "0" first; at one version an introduced comes before a fixed.
            events.sort(key=lambda e: (e[2] is not None, e[2] if e[2] is not None else 0, e[0] != "introduced"))
            status = False
            for kind, _, point in events:
                if kind == "introduced" and (point is None or version >= point):
                    status = True
                elif point is not None and (
                    (kind == "fixed" and version >= point) or (kind == "last_affected" and version > point)
                ):
                    status = False
            hit = hit or status
    return hit, tuple(dict.fromkeys(fixed))
