"""Where advisories come from: a directory of OSV records (air-gapped) or the OSV API (``/v1/querybatch``,
then ``/v1/vulns/<id>``), probed first. A package a source cannot look up is named with the reason."""

from __future__ import annotations

import json
import zipfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests

from matrixtool.core import http, jsontext, untrusted
from matrixtool.core.errors import ConfigError
from matrixtool.model.yamlfile import read_config_text
from matrixtool.supply.osv import OSV_BATCH_SCHEMA, OSV_RECORD_SCHEMA, Advisory, Target, advisory_of, normal

OSV_API = "https://api.osv.dev"
MAX_RECORD_BYTES = 4 * 1024 * 1024
API_TIMEOUT_S = 15
API_BATCH = 500
MAX_ANSWER_BYTES = 64 * 1024 * 1024


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
    """The OSV records of ``folder``: its ``*.json`` files (any depth) and the members of its ``*.zip`` files. Raises
    ConfigError: a file over ``MAX_RECORD_BYTES``, not JSON, or a broken zip."""
    for path in sorted(folder.rglob("*")):
        if path.is_symlink() or path.is_dir():
            continue  # a FIFO or a device named *.json is read, and refused (``_bounded_read``): never skipped
        if path.suffix == ".json":
            texts: Iterable[tuple[str, str | bytes]] = [(str(path), _bounded_read(path))]
        elif path.suffix == ".zip":
            texts = _zip_members(path)
        else:
            continue
        for name, data in texts:
            try:
                record = jsontext.loads(data)
            except ValueError as exc:  # json.JSONDecodeError, UnicodeDecodeError, too deep (jsontext)
                raise ConfigError(name, [f"is not an OSV JSON record ({exc})"]) from exc
            if isinstance(record, Mapping) and "id" in record:
                untrusted.check_shape(
                    record,
                    OSV_RECORD_SCHEMA,
                    source=name,
                    what="an OSV JSON record (https://ossf.github.io/osv-schema/)",
                )
                yield record


def _bounded_read(path: Path) -> str:
    return read_config_text(path, limit=MAX_RECORD_BYTES, what="an OSV JSON record of a few KiB")


def _zip_members(path: Path) -> Iterable[tuple[str, str | bytes]]:
    if not path.is_file():  # a FIFO would block the open
        raise ConfigError(str(path), ["is not a regular file; pass OSV's all.zip of an ecosystem"])
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
                    key = (ecosystem.split(":")[0], normal(ecosystem, str(package.get("name", ""))))
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


def default_fetch(env: Mapping[str, str], ca_cert: Path | None = None) -> Fetch:
    """HTTP through the tool's session (``core.http``: the CA bundle and proxies of ``env``): POST when a body
    is given, at most ``MAX_ANSWER_BYTES`` read. Raises OSError when the service does not answer or answers
    with an HTTP error status."""
    session = http.session(ca_cert=http.ca_bundle(ca_cert, env), env=env, timeout=API_TIMEOUT_S)

    def fetch(url: str, body: bytes | None) -> bytes:
        try:
            with session.request(
                "POST" if body is not None else "GET",
                url,
                data=body,
                headers={"Content-Type": "application/json"},
                stream=True,
            ) as response:
                if response.status_code >= 400:
                    raise OSError(f"HTTP Error {response.status_code}: {response.reason}")
                data: bytes = response.raw.read(MAX_ANSWER_BYTES, decode_content=True)
                return data
        except requests.RequestException as exc:
            raise OSError(http.reason(exc)) from exc

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
                if problems := untrusted.shape_problems(answer, OSV_BATCH_SCHEMA, limit=1):
                    raise ValueError(f"its /v1/querybatch answer is no OSV batch answer: {problems[0]}")
                for query, result in zip(chunk, answer.get("results") or [], strict=False):
                    ids[query] = [str(v["id"]) for v in result.get("vulns") or ()]
            records: dict[str, Advisory] = {}
            for vuln_id in sorted({i for found in ids.values() for i in found}):
                record = jsontext.loads(self.fetch(f"{self.base}/v1/vulns/{vuln_id}", None))
                if problems := untrusted.shape_problems(record, OSV_RECORD_SCHEMA, limit=1):
                    raise ValueError(f"its record {vuln_id} is no OSV record: {problems[0]}")
                records[vuln_id] = advisory_of(record)
        except (OSError, ValueError) as exc:
            reason = f"{self.name} did not answer ({exc}); use --advisories DIR with OSV records"
            return Lookup(advisories={}, missing={**missing, **{t.key: reason for t in queryable}})
        index: dict[tuple[str, str], list[Advisory]] = {}
        for (ecosystem, name, _), found in ids.items():
            key = (ecosystem.split(":")[0], normal(ecosystem, name))
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
