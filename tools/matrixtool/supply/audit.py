"""The vulnerability gate: an SBOM's packages against OSV advisories, judged by a per-variant policy.

Sources of advisories (``AdvisorySource``):
- a directory of OSV records for air-gapped runs: one folder per ecosystem, named as OSV names it (``PyPI``,
  ``Debian:12``, or ``Debian`` for every Debian release), holding OSV JSON files and/or OSV's ``all.zip`` of
  that ecosystem (``https://osv-vulnerabilities.storage.googleapis.com/<ecosystem>/all.zip``). An ecosystem
  without its folder has no advisory data here;
- the OSV API (``https://api.osv.dev``: ``/v1/querybatch``, then ``/v1/vulns/<id>``), probed first.

Fail closed: a package whose ecosystem has no advisory data, whose source did not answer, or whose version
cannot be compared with an advisory's ranges is *not audited*, and a not-audited package fails the gate
(``NotAuditedError``, exit 14), named with the reason. An advisory that affects a package fails the gate
(``VulnerableError``, exit 13) when its severity is at or above the policy's ``fail_on`` or unknown, unless the
policy accepts it (by ID or alias) with an expiry date that has not passed.

Version matching follows the OSV schema's range evaluation (``introduced``/``fixed``/``last_affected`` events
in version order; listed ``versions``): PyPI versions by ``packaging.version`` (PEP 440), Debian versions by
``debian.debian_support.Version`` (dpkg's ordering). Debian advisories name the *source* package, so a binary
package is audited as its source package and version (the SBOM's ``vllm-matrix:source`` properties).
"""

from __future__ import annotations

import datetime
import json
import re
import ssl
import urllib.request
import zipfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum, IntEnum
from pathlib import Path
from typing import Any

from cvss import CVSS3, CVSS4
from debian.debian_support import Version as DebianVersion
from packageurl import PackageURL
from packaging.version import InvalidVersion
from packaging.version import Version as PyPIVersion

from matrixtool.core import jsontext
from matrixtool.core.errors import ConfigError, ExitCode, MatrixError
from matrixtool.model.matrixfile import resolve_extends
from matrixtool.model.model import Matrix
from matrixtool.model.yamlfile import parse_yaml, read_config_text

OSV_API = "https://api.osv.dev"
MAX_RECORD_BYTES = 4 * 1024 * 1024
API_TIMEOUT_S = 15
API_BATCH = 500
PROPERTY_PREFIX = "vllm-matrix:"
NAMES_SHOWN = 10


class VulnerableError(MatrixError):
    """The gate failed: an advisory at or above the policy's severity (or of unknown severity) is not accepted."""

    exit_code = ExitCode.VULNERABLE


class NotAuditedError(MatrixError):
    """The gate failed closed: packages could not be checked (no advisory data, source unreachable)."""

    exit_code = ExitCode.NOT_AUDITED


class Severity(IntEnum):
    """Qualitative severity, CVSS's bands (GHSA's ``MODERATE`` is ``MEDIUM``)."""

    LOW = 1
    MEDIUM = 2
    HIGH = 3
    CRITICAL = 4


FAIL_ON_NONE = "none"


@dataclass(frozen=True, kw_only=True)
class Acceptance:
    """An accepted advisory: ``id`` (its OSV ID or an alias: ``GHSA-…``, ``CVE-…``), why, and until when."""

    id: str
    reason: str
    expires: datetime.date


@dataclass(frozen=True, kw_only=True)
class Policy:
    """A variant's gate (matrix.yaml ``audit``): fail on ``fail_on`` and above (None: on no severity; packages
    not audited still fail), except the ``accept`` list. The default: ``fail_on: high``, nothing accepted."""

    fail_on: Severity | None = Severity.HIGH
    accept: tuple[Acceptance, ...] = ()


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


class Verdict(str, Enum):
    FAIL = "fail"
    ACCEPTED = "accepted"
    BELOW = "below-threshold"


@dataclass(frozen=True, kw_only=True)
class Finding:
    """An advisory that affects a package, and the policy's verdict with its ``reason``."""

    package: str
    version: str
    advisory: str
    aliases: tuple[str, ...]
    severity: Severity | None
    fixed: tuple[str, ...]
    verdict: Verdict
    reason: str
    summary: str = ""


@dataclass(frozen=True, kw_only=True)
class Unaudited:
    """A package the gate could not check, and why."""

    package: str
    version: str
    reason: str


@dataclass(frozen=True, kw_only=True)
class AuditReport:
    """The gate's result for one SBOM: ``source`` names the advisory source; ``audited`` counts the packages
    checked against advisories."""

    source: str
    image: str
    audited: int
    findings: tuple[Finding, ...]
    unaudited: tuple[Unaudited, ...]

    @property
    def failing(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.verdict is Verdict.FAIL)

    @property
    def passed(self) -> bool:
        return not self.failing and not self.unaudited


# --- policy --------------------------------------------------------------------------------------------------
def parse_policy(raw: Mapping[str, Any] | None, *, where: str) -> Policy:
    """The ``Policy`` of a matrix.yaml ``audit`` mapping (None: the default). ``expires``: ``YYYY-MM-DD`` (YAML may
    give a date already).

    Raises:
        ConfigError: a value the schema lets through but is not a date or a severity.
    """
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
    """``variant``'s ``audit`` policy, read from the matrix file (already validated by ``load_matrix``).

    Raises:
        ConfigError: ``variant`` is not in the matrix, or a date is not a date.
    """
    data = parse_yaml(read_config_text(matrix.source), str(matrix.source))
    resolved, _ = resolve_extends(data)
    variants = resolved.get("variants") or {}
    if variant not in variants:
        raise ConfigError("--as", [f"no variant {variant!r} in {matrix.source}; variants: {', '.join(variants)}"])
    return parse_policy(variants[variant].get("audit"), where=f"variants.{variant}.audit")


# --- the SBOM's packages -------------------------------------------------------------------------------------
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


# --- OSV records ---------------------------------------------------------------------------------------------
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
    """The ``Advisory`` of one OSV JSON record."""
    return Advisory(
        id=str(record.get("id", "")),
        aliases=tuple(str(a) for a in record.get("aliases") or ()),
        summary=str(record.get("summary") or record.get("details", ""))[:200].split("\n")[0],
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


def _normal(ecosystem: str, name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower() if ecosystem == "PyPI" else name


def affects(advisory: Advisory, target: Target) -> tuple[bool, tuple[str, ...]]:
    """Whether ``advisory`` affects ``target`` (OSV range evaluation), and the ``fixed`` versions it names.

    Raises:
        ValueError: ``target.version`` or an event's version cannot be parsed in the ecosystem.
    """
    hit = False
    fixed: list[str] = []
    version = _parse_version(target.ecosystem, target.version)
    for entry in advisory.affected:
        package = entry.get("package") or {}
        if not _ecosystem_matches(str(package.get("ecosystem", "")), target.ecosystem):
            continue
        if _normal(target.ecosystem, str(package.get("name", ""))) != _normal(target.ecosystem, target.name):
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


# --- sources -------------------------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class Lookup:
    """What a source knows of some targets: advisories by ``(ecosystem, normalised name)``, and the targets it
    could not look up with the reason (``missing``, by target key)."""

    advisories: Mapping[tuple[str, str], tuple[Advisory, ...]]
    missing: Mapping[str, str] = field(default_factory=dict)


class AdvisorySource:
    """Looks up the advisories of targets; ``name`` says where they come from (the report names it)."""

    name: str

    def lookup(self, targets: Sequence[Target]) -> Lookup:
        raise NotImplementedError


def _records_of_folder(folder: Path) -> Iterable[Mapping[str, Any]]:
    """The OSV records of ``folder``: its ``*.json`` files (any depth) and the members of its ``*.zip`` files.

    Raises:
        ConfigError: a file over ``MAX_RECORD_BYTES``, not JSON, or a broken zip.
    """
    for path in sorted(folder.rglob("*")):
        if path.is_symlink() or not path.is_file():
            continue
        if path.suffix == ".json":
            texts: Iterable[tuple[str, bytes]] = [(str(path), _bounded_read(path))]
        elif path.suffix == ".zip":
            texts = _zip_members(path)
        else:
            continue
        for name, data in texts:
            try:
                record = jsontext.loads(data)
            except ValueError as exc:  # json.JSONDecodeError, UnicodeDecodeError, too deep (jsontext)
                raise ConfigError(name, [f"is not an OSV JSON record ({exc})"]) from exc
            if isinstance(record, Mapping) and record.get("id"):
                yield record


def _bounded_read(path: Path) -> bytes:
    if path.stat().st_size > MAX_RECORD_BYTES:
        raise ConfigError(str(path), [f"is larger than {MAX_RECORD_BYTES} bytes; an OSV record is a few KiB"])
    return path.read_bytes()


def _zip_members(path: Path) -> Iterable[tuple[str, bytes]]:
    try:
        with zipfile.ZipFile(path) as archive:
            for info in archive.infolist():
                if not info.filename.endswith(".json"):
                    continue
                if info.file_size > MAX_RECORD_BYTES:
                    raise ConfigError(f"{path}:{info.filename}", [f"is larger than {MAX_RECORD_BYTES} bytes"])
                yield f"{path}:{info.filename}", archive.read(info)
    except zipfile.BadZipFile as exc:
        raise ConfigError(str(path), [f"is not a zip archive ({exc})"]) from exc


class DirectorySource(AdvisorySource):
    """OSV records in ``root``: one folder per ecosystem (see the module docstring)."""

    def __init__(self, root: Path) -> None:
        if not root.is_dir():
            raise ConfigError(
                "--advisories", [f"{str(root)!r} is not a folder of OSV records (one folder per ecosystem)"]
            )
        self.root = root
        self.name = f"OSV records in {root}"
        self.ecosystems = sorted(p.name for p in root.iterdir() if p.is_dir() and not p.is_symlink())

    def covers(self, ecosystem: str) -> str | None:
        """The folder that holds ``ecosystem``'s advisories (``Debian`` serves every ``Debian:N``), or None."""
        if ecosystem in self.ecosystems:
            return ecosystem
        if ecosystem.startswith("Debian:") and "Debian" in self.ecosystems:
            return "Debian"
        return None

    def lookup(self, targets: Sequence[Target]) -> Lookup:
        folders = {f for t in targets if (f := self.covers(t.ecosystem)) is not None}
        index: dict[tuple[str, str], list[Advisory]] = {}
        for folder in sorted(folders):
            for record in _records_of_folder(self.root / folder):
                advisory = advisory_of(record)
                for entry in advisory.affected:
                    package = entry.get("package") or {}
                    ecosystem = str(package.get("ecosystem", ""))
                    key = (ecosystem.split(":")[0], _normal(ecosystem, str(package.get("name", ""))))
                    if advisory not in index.setdefault(key, []):
                        index[key].append(advisory)
        missing = {
            t.key: (
                f"no advisory data for ecosystem {t.ecosystem} in {self.root} (a folder {t.ecosystem!r} of OSV records)"
                if t.ecosystem
                else "no OSV ecosystem for this kind of package"
            )
            for t in targets
            if self.covers(t.ecosystem) is None
        }
        return Lookup(advisories={k: tuple(v) for k, v in index.items()}, missing=missing)


Fetch = Callable[[str, bytes | None], bytes]


def default_fetch(env: Mapping[str, str]) -> Fetch:
    """HTTP through urllib: POST when a body is given; the CA bundle of SSL_CERT_FILE, PIP_CERT or
    REQUESTS_CA_BUNDLE when set. Raises OSError (URLError) when the service does not answer."""
    cafile = next((env[k] for k in ("SSL_CERT_FILE", "PIP_CERT", "REQUESTS_CA_BUNDLE") if env.get(k)), None)
    context = ssl.create_default_context(cafile=cafile)

    def fetch(url: str, body: bytes | None) -> bytes:
        request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=API_TIMEOUT_S, context=context) as response:
            data: bytes = response.read(64 * 1024 * 1024)
            return data

    return fetch


class ApiSource(AdvisorySource):
    """The OSV API at ``base`` (default https://api.osv.dev), through ``fetch``."""

    def __init__(self, fetch: Fetch, base: str = OSV_API) -> None:
        self.fetch = fetch
        self.base = base.rstrip("/")
        self.name = f"the OSV API {self.base}"

    def lookup(self, targets: Sequence[Target]) -> Lookup:
        queryable = [t for t in targets if t.ecosystem]
        missing = {t.key: "no OSV ecosystem for this kind of package" for t in targets if not t.ecosystem}
        queries = list(dict.fromkeys((t.ecosystem, t.name, t.version) for t in queryable))
        ids: dict[tuple[str, str, str], list[str]] = {}
        try:
            for start in range(0, len(queries), API_BATCH):
                chunk = queries[start : start + API_BATCH]
                body = json.dumps(
                    {"queries": [{"package": {"ecosystem": e, "name": n}, "version": v} for e, n, v in chunk]}
                ).encode()
                answer = jsontext.loads(self.fetch(f"{self.base}/v1/querybatch", body))
                for query, result in zip(chunk, answer.get("results") or [], strict=False):
                    ids[query] = [str(v["id"]) for v in result.get("vulns") or ()]
            records: dict[str, Advisory] = {}
            for vuln_id in sorted({i for found in ids.values() for i in found}):
                records[vuln_id] = advisory_of(jsontext.loads(self.fetch(f"{self.base}/v1/vulns/{vuln_id}", None)))
        except (OSError, ValueError) as exc:
            reason = f"{self.name} did not answer ({exc}); use --advisories DIR with OSV records"
            return Lookup(advisories={}, missing={**missing, **{t.key: reason for t in queryable}})
        index: dict[tuple[str, str], list[Advisory]] = {}
        for (ecosystem, name, _), found in ids.items():
            key = (ecosystem.split(":")[0], _normal(ecosystem, name))
            for vuln_id in found:
                if records[vuln_id] not in index.setdefault(key, []):
                    index[key].append(records[vuln_id])
        lost = {
            t.key: f"{self.name} gave no answer for it"
            for t in queryable
            if (t.ecosystem, t.name, t.version) not in ids
        }
        return Lookup(advisories={k: tuple(v) for k, v in index.items()}, missing={**missing, **lost})


def probe_api(fetch: Fetch, base: str = OSV_API) -> str | None:
    """None when the OSV API answers a query (one ``/v1/query`` for a known package), else why not."""
    try:
        fetch(
            f"{base.rstrip('/')}/v1/query",
            json.dumps({"package": {"ecosystem": "PyPI", "name": "pip"}, "version": "0"}).encode(),
        )
    except (OSError, ValueError) as exc:
        return f"{base} does not answer from this machine ({exc})"
    return None


# --- the gate ------------------------------------------------------------------------------------------------
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


def audit(doc: Mapping[str, Any], source: AdvisorySource, policy: Policy, *, today: datetime.date) -> AuditReport:
    """Check every package of the CycloneDX document ``doc`` against ``source`` under ``policy`` (pure, given
    the source). A package is *audited* when the source has data for it and every advisory of its name could
    be compared with its version."""
    targets = targets_of(doc)
    lookup = source.lookup(targets)
    findings: list[Finding] = []
    unaudited: list[Unaudited] = []
    audited = 0
    for target in targets:
        if target.key in lookup.missing:
            unaudited.append(Unaudited(package=target.key, version=target.version, reason=lookup.missing[target.key]))
            continue
        candidates = lookup.advisories.get((target.ecosystem.split(":")[0], _normal(target.ecosystem, target.name)), ())
        problem = None
        hits: list[tuple[Advisory, tuple[str, ...]]] = []
        for advisory in candidates:
            try:
                hit, fixed = affects(advisory, target)
            except ValueError as exc:
                problem = f"version {target.version!r} cannot be compared with {advisory.id}'s ranges ({exc})"
                break
            if hit:
                hits.append((advisory, fixed))
        if problem is not None:
            unaudited.append(Unaudited(package=target.key, version=target.version, reason=problem))
            continue
        audited += 1
        for advisory, fixed in hits:
            verdict, reason = judge(advisory, policy, today)
            findings.append(
                Finding(
                    package=target.key,
                    version=target.version,
                    advisory=advisory.id,
                    aliases=advisory.aliases,
                    severity=advisory.severity,
                    fixed=fixed,
                    verdict=verdict,
                    reason=reason,
                    summary=advisory.summary,
                )
            )
    component = (doc.get("metadata") or {}).get("component") or {}
    return AuditReport(
        source=source.name,
        image=str(component.get("version", "")) if isinstance(component, Mapping) else "",
        audited=audited,
        findings=tuple(findings),
        unaudited=tuple(unaudited),
    )


def report_lines(report: AuditReport, *, limit: int = 50) -> list[str]:
    """The report for the terminal: findings (failing first; at most ``limit``), packages not audited (one line
    per reason, naming at most ``NAMES_SHOWN``), and the verdict line."""
    lines = [f"advisory source: {report.source}"]
    order = {Verdict.FAIL: 0, Verdict.ACCEPTED: 1, Verdict.BELOW: 2}
    for f in sorted(report.findings, key=lambda f: (order[f.verdict], f.package))[:limit]:
        severity = f.severity.name.lower() if f.severity else "unknown"
        fixed = f", fixed in {', '.join(f.fixed)}" if f.fixed else ""
        lines.append(f"{f.verdict.value:15} {f.advisory} ({severity}) {f.package} {f.version}{fixed}: {f.reason}")
    by_reason: dict[str, list[Unaudited]] = {}
    for u in report.unaudited:
        by_reason.setdefault(u.reason, []).append(u)
    for reason, packages in by_reason.items():
        if len(packages) == 1:
            lines.append(f"{'not audited':15} {packages[0].package} {packages[0].version}: {reason}")
            continue
        names = ", ".join(p.package for p in packages[:NAMES_SHOWN])
        more = f" and {len(packages) - NAMES_SHOWN} more" if len(packages) > NAMES_SHOWN else ""
        lines.append(f"{'not audited':15} {len(packages)} packages ({names}{more}): {reason}")
    lines.append(
        f"gate: {'passed' if report.passed else 'FAILED'}: {report.audited} package(s) audited, "
        f"{len(report.failing)} failing advisory(ies), {len(report.unaudited)} not audited"
    )
    return lines


def to_dict(report: AuditReport) -> dict[str, Any]:
    """The report as a JSON-ready mapping."""
    return {
        "source": report.source,
        "image": report.image,
        "passed": report.passed,
        "audited": report.audited,
        "findings": [
            {
                "package": f.package,
                "version": f.version,
                "advisory": f.advisory,
                "aliases": list(f.aliases),
                "severity": f.severity.name.lower() if f.severity else None,
                "fixed": list(f.fixed),
                "verdict": f.verdict.value,
                "reason": f.reason,
            }
            for f in report.findings
        ],
        "not_audited": [{"package": u.package, "version": u.version, "reason": u.reason} for u in report.unaudited],
    }


def raise_for(report: AuditReport) -> None:
    """Raise the gate's error when it failed: ``VulnerableError`` when an advisory fails it (exit 13), else
    ``NotAuditedError`` when packages were not audited (exit 14).

    Raises:
        VulnerableError, NotAuditedError.
    """
    if report.failing:
        names = ", ".join(sorted({f"{f.advisory} ({f.package})" for f in report.failing})[:10])
        raise VulnerableError(f"the vulnerability gate failed: {names}; upgrade, or accept in matrix.yaml audit.accept")
    if report.unaudited:
        names = ", ".join(u.package for u in report.unaudited[:10])
        more = f" and {len(report.unaudited) - 10} more" if len(report.unaudited) > 10 else ""
        raise NotAuditedError(
            f"the vulnerability gate failed closed: {len(report.unaudited)} package(s) not audited ({names}{more}): "
            f"{report.unaudited[0].reason}"
        )
