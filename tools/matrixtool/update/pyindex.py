"""A package index, read the way an installer reads it: PEP 691 JSON (PEP 503 HTML as fallback), the JSON
API for upload times and latest requirements, and files inside remote wheels by HTTP range requests.

``remotezip`` reads a 900 MB torch wheel's ``METADATA`` for a few hundred KiB; a server that answers a range
request with the whole file gets a download to a temporary file (at most ``MAX_DOWNLOAD_BYTES``).
Only ``http``/``https`` URLs from a page are opened; ``os.environ`` is never read.
"""

from __future__ import annotations

import contextlib
import sys
import tempfile
import urllib.parse
import zipfile
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

import remotezip
import requests
from packaging.utils import canonicalize_name
from packaging.version import Version

from matrixtool.core import http
from matrixtool.core.errors import ConfigError, IndexUnreachableError
from matrixtool.core.untrusted import shown
from matrixtool.update.pages import (
    LatestRelease,
    Project,
    json_api_url,
    parse_html_page,
    parse_json_page,
    parse_time,
    response_json,
)

PEP691_JSON = "application/vnd.pypi.simple.v1+json"
ACCEPT = f"{PEP691_JSON}, application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.01"
USER_AGENT = "vllm-image-matrix (tools/matrix update)"
# Seconds for one request; an index answers a project page in well under this.
TIMEOUT = 60.0
# A project page of PyPI's torch is about 4 MB of JSON; anything far larger is not an index page.
MAX_PAGE_BYTES = 64 * 1024 * 1024
# The largest wheel downloaded whole where the server ignores Range (torch CUDA wheels are about 1 GB).
MAX_DOWNLOAD_BYTES = 4 * 1024 * 1024 * 1024
# The largest archive member read (a METADATA is a few KiB; vllm/config/vllm.py about 200 KiB).
MAX_MEMBER_BYTES = 8 * 1024 * 1024


def _body(response: requests.Response, url: str) -> Iterator[bytes]:
    """``response``'s body in 1 MiB chunks. Raises IndexUnreachableError: the connection broke mid-body (requests'
    ConnectionError, ChunkedEncodingError, a read timeout): the index's fault, never to be taken for the Docker engine's
    (exit 10, not 8)."""
    try:
        yield from response.iter_content(1024 * 1024)
    except requests.RequestException as exc:
        raise IndexUnreachableError(f"{url}: the answer broke off ({type(exc).__name__}: {exc})") from exc


class IndexClient:
    """Reads project pages, the JSON API and remote wheels over one HTTP session.

    ``ca_cert`` None: the system's CA bundle (certifi); ``env``: whose proxy variables apply (``os.environ`` is
    never read); ``log`` None keeps requests unechoed (tests).
    """

    def __init__(
        self,
        *,
        ca_cert: Path | None,
        env: Mapping[str, str] | None = None,
        timeout: float = TIMEOUT,
        log: IO[str] | None = sys.stderr,
    ) -> None:
        self.session = http.session(ca_cert=ca_cert, env=env or {}, timeout=timeout)
        self.session.headers["User-Agent"] = USER_AGENT
        self.timeout = timeout
        self.log = log
        self._pages: dict[tuple[str, str], Project | None] = {}

    def _echo(self, what: str) -> None:
        if self.log is not None:
            self.log.write(f"+ {shown(what)}\n")  # one write: requests run in threads; URLs come from index pages
            self.log.flush()

    def _get(self, url: str, **headers: str) -> requests.Response:
        self._echo(f"GET {url}")
        try:
            response = self.session.get(url, headers=headers, timeout=self.timeout, stream=True)
        except requests.exceptions.SSLError as exc:
            raise IndexUnreachableError(
                f"{url}: TLS verification failed ({exc}); pass --ca-cert or set PIP_CERT to the CA bundle"
            ) from exc
        except requests.RequestException as exc:
            raise IndexUnreachableError(f"{url}: no answer ({type(exc).__name__}: {exc})") from exc
        return response

    def _read_body(self, response: requests.Response, url: str) -> bytes:
        chunks, size = [], 0
        for chunk in _body(response, url):
            size += len(chunk)
            if size > MAX_PAGE_BYTES:
                raise IndexUnreachableError(f"{url}: the answer exceeds {MAX_PAGE_BYTES} bytes; not an index page")
            chunks.append(chunk)
        return b"".join(chunks)

    def project(self, index_url: str, name: str) -> Project | None:
        """The project page of ``name`` on ``index_url`` (a PEP 503 root such as ``https://pypi.org/simple``), or None
        when the index answers 404 (no such project). Cached per (index, name). Raises IndexUnreachableError: no answer,
        TLS failure, another HTTP error, or a page that is not one."""
        key = (index_url.rstrip("/"), canonicalize_name(name))
        if key in self._pages:
            return self._pages[key]
        url = f"{key[0]}/{key[1]}/"
        response = self._get(url, Accept=ACCEPT)
        with response:
            if response.status_code == 404:
                self._pages[key] = None
                return None
            if response.status_code != 200:
                raise IndexUnreachableError(f"{url}: HTTP {response.status_code} {response.reason}")
            body = self._read_body(response, url)
            content_type = response.headers.get("Content-Type", "").split(";")[0].strip().lower()
            page_url = response.url or url
        try:
            if content_type == PEP691_JSON:
                files = parse_json_page(response_json(body, url), page_url)
                api = "json"
            else:
                files = parse_html_page(body.decode("utf-8", "replace"), page_url)
                api = "html"
        except ValueError as exc:
            raise IndexUnreachableError(f"{url}: not a PEP 691/503 project page ({exc})") from exc
        project = Project(name=key[1], url=url, api=api, files=tuple(files))
        self._pages[key] = project
        return project

    def _json_api(self, index_url: str, name: str) -> dict[str, Any] | None:
        url = json_api_url(index_url, name)
        if url is None:
            return None
        response = self._get(url, Accept="application/json")
        with response:
            if response.status_code != 200:
                return None
            body = self._read_body(response, url)
        try:
            data = response_json(body, url)
        except ValueError:
            return None
        return data

    def upload_times(self, index_url: str, name: str) -> dict[str, datetime]:
        """File name -> upload time from the JSON API (``releases.*[].upload_time_iso_8601``); empty where the
        index serves no JSON API (a URL that does not end in ``/simple``, or an error answer)."""
        data = self._json_api(index_url, name)
        releases = data.get("releases") if data else None
        out: dict[str, datetime] = {}
        if isinstance(releases, dict):
            for files in releases.values():
                for f in files if isinstance(files, list) else []:
                    if not isinstance(f, dict):
                        continue
                    when = parse_time(f.get("upload_time_iso_8601") or f.get("upload_time"))
                    if isinstance(f.get("filename"), str) and when is not None:
                        out[f["filename"]] = when if when.tzinfo else when.replace(tzinfo=UTC)
        return out

    def latest(self, index_url: str, name: str) -> LatestRelease | None:
        """The JSON API's newest release of ``name`` with its ``requires_dist``; None where not served or where
        its version is not PEP 440."""
        data = self._json_api(index_url, name)
        info = data.get("info") if data else None
        if not isinstance(info, dict) or not isinstance(info.get("version"), str):
            return None
        try:
            Version(info["version"])
        except ValueError:  # InvalidVersion, or a release number past what int() converts
            return None  # not a release an installer would pick: read the wheels instead
        requires = info.get("requires_dist") or []
        if not isinstance(requires, list):
            requires = []
        return LatestRelease(version=info["version"], requires_dist=tuple(str(r) for r in requires))

    @contextlib.contextmanager
    def open_wheel(self, url: str) -> Iterator[zipfile.ZipFile]:
        """The wheel at ``url`` as a ``ZipFile``: read by range requests where the server honours them, else downloaded
        whole to a temporary file (removed on exit). Only ``http``/``https`` URLs: a page cannot make this open a local
        file. Raises IndexUnreachableError: another URL scheme, no answer, an HTTP error, a file over
        ``MAX_DOWNLOAD_BYTES``, not a zip."""
        scheme = urllib.parse.urlsplit(url).scheme.lower()
        if scheme not in ("http", "https"):
            raise IndexUnreachableError(
                f"{url}: the index links a wheel by a {scheme or 'relative'!r} URL; only http(s) wheels are read"
            )
        self._echo(f"GET {url}  # Range: the zip central directory")
        archive: zipfile.ZipFile | None = None
        try:
            archive = remotezip.RemoteZip(url, session=self.session, timeout=self.timeout)
        except remotezip.RangeNotSupported:
            pass  # the server answered 200 with the whole file: download it below
        except (remotezip.RemoteZipError, requests.RequestException, zipfile.BadZipFile, OSError) as exc:
            raise IndexUnreachableError(f"{url}: cannot read the wheel ({type(exc).__name__}: {exc})") from exc
        if archive is not None:
            with archive:
                yield archive
            return
        with tempfile.TemporaryFile() as scratch:
            self._download(url, scratch)
            try:
                with zipfile.ZipFile(scratch) as downloaded:
                    yield downloaded
            except zipfile.BadZipFile as exc:
                raise IndexUnreachableError(f"{url}: not a wheel (zip): {exc}") from exc

    def _download(self, url: str, scratch: IO[bytes]) -> None:
        self._echo(f"GET {url}  # the server ignores Range: downloading the whole wheel")
        response = self._get(url)
        with response:
            if response.status_code != 200:
                raise IndexUnreachableError(f"{url}: HTTP {response.status_code} {response.reason}")
            size = 0
            for chunk in _body(response, url):
                size += len(chunk)
                if size > MAX_DOWNLOAD_BYTES:
                    raise IndexUnreachableError(f"{url}: larger than {MAX_DOWNLOAD_BYTES} bytes; not downloaded")
                scratch.write(chunk)
        scratch.seek(0)

    def wheel_files(self, url: str, wanted: tuple[str, ...]) -> dict[str, str]:
        """The text of the wheel's ``METADATA`` (key ``METADATA``) and of each member named in ``wanted`` that the wheel
        holds (absent keys: not in the wheel). Members over ``MAX_MEMBER_BYTES`` are left out. Raises
        IndexUnreachableError: as ``open_wheel``; also a wheel without ``*.dist-info/METADATA``."""
        with self.open_wheel(url) as archive:
            try:
                return _members(archive, wanted)
            except (remotezip.RemoteZipError, requests.RequestException, zipfile.BadZipFile, OSError) as exc:
                raise IndexUnreachableError(f"{url}: cannot read the wheel ({type(exc).__name__}: {exc})") from exc
            except NoMetadata as exc:
                raise IndexUnreachableError(f"{url}: the wheel {exc}") from exc


class NoMetadata(Exception):
    """A wheel whose ``METADATA`` cannot be read: none at the top of the archive, or one over ``MAX_MEMBER_BYTES``
    (the message says which, as a predicate of "the wheel")."""


def _members(archive: zipfile.ZipFile, wanted: tuple[str, ...]) -> dict[str, str]:
    """``METADATA`` and each of ``wanted`` the archive holds (each at most ``MAX_MEMBER_BYTES``), as text. Raises
    NoMetadata: no ``*.dist-info/METADATA`` at the top of the archive, or one over ``MAX_MEMBER_BYTES``."""
    infos = {i.filename: i for i in archive.infolist()}
    metadata = [n for n in infos if n.count("/") == 1 and n.endswith(".dist-info/METADATA")]
    if not metadata:
        raise NoMetadata("has no *.dist-info/METADATA")
    if infos[metadata[0]].file_size > MAX_MEMBER_BYTES:
        raise NoMetadata(
            f"has a {metadata[0]} of {infos[metadata[0]].file_size} bytes, over the {MAX_MEMBER_BYTES} read "
            "(a METADATA is a few KiB): not a wheel to trust"
        )
    out: dict[str, str] = {}
    for key, name in [("METADATA", metadata[0]), *((w, w) for w in wanted)]:
        info = infos.get(name)
        if info is not None and info.file_size <= MAX_MEMBER_BYTES:
            out[key] = archive.read(info).decode("utf-8", "replace")
    return out


def local_wheel_files(path: Path, wanted: tuple[str, ...]) -> dict[str, str]:
    """``IndexClient.wheel_files`` for a wheel in a wheelhouse. Raises ConfigError: not a readable wheel (not a zip,
    unreadable, no METADATA), naming it and ``--wheelhouse``."""
    try:
        with zipfile.ZipFile(path) as archive:
            return _members(archive, wanted)
    except (zipfile.BadZipFile, OSError, NoMetadata, ValueError) as exc:
        problem = str(exc) if isinstance(exc, NoMetadata) else f"is not a readable wheel ({exc})"
        raise ConfigError(
            "--wheelhouse", [f"{path} {problem}; replace or remove it (--wheelhouse DIR or PIP_FIND_LINKS)"]
        ) from exc
