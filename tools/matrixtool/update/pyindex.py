"""A package index, read the way an installer reads it: PEP 691 JSON (PEP 503 HTML as fallback), the JSON
API for upload times and latest requirements, and files inside remote wheels by HTTP range requests.

The wheel reader is ``remotezip`` (PyPI ``remotezip``: ``zipfile.ZipFile`` over HTTP ``Range`` requests, the
end of central directory first), so reading a 900 MB torch wheel's ``METADATA`` costs a few hundred KiB.
Where the server answers a range request with the whole file, the wheel is downloaded to a temporary file
(at most ``MAX_DOWNLOAD_BYTES``) and read there. One ``requests.Session`` carries the CA bundle
(``plan.resolve_ca_cert``: ``--ca-cert``, then ``plan.CA_ENV_VARS`` in order) and the proxies of the
environment it is given (``HTTPS_PROXY``, ``HTTP_PROXY``, ``ALL_PROXY``, ``NO_PROXY``; never ``os.environ``).
Only ``http``/``https`` URLs from a page are opened; a local wheel (a wheelhouse) has ``local_wheel_files``.
"""

from __future__ import annotations

import contextlib
import email.parser
import html.parser
import sys
import tempfile
import urllib.parse
import zipfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

import remotezip
import requests
from packaging.tags import Tag
from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    canonicalize_name,
    parse_sdist_filename,
    parse_wheel_filename,
)
from packaging.version import InvalidVersion, Version

from matrixtool.core import jsontext
from matrixtool.core.errors import ConfigError, IndexUnreachableError

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


@dataclass(frozen=True, kw_only=True)
class DistFile:
    """One file of a project page.

    ``version``: from the file name (None when the name is neither a wheel's nor an sdist's).
    ``upload_time``: PEP 700 ``upload-time`` where the page gives it (aware, UTC), else None.
    ``tags``: a wheel's compatibility tags (empty for an sdist).
    """

    filename: str
    url: str
    version: Version | None
    yanked: bool
    yanked_reason: str | None
    upload_time: datetime | None
    requires_python: str | None
    tags: frozenset[Tag]

    @property
    def is_wheel(self) -> bool:
        return self.filename.endswith(".whl")


@dataclass(frozen=True, kw_only=True)
class Project:
    """A project page: ``files`` as listed, ``url`` the page read, ``api`` ``json`` (PEP 691) or ``html``."""

    name: str
    url: str
    api: str
    files: tuple[DistFile, ...]


@dataclass(frozen=True, kw_only=True)
class LatestRelease:
    """The JSON API's ``info`` of a project: its newest release and that release's ``Requires-Dist`` lines."""

    version: str
    requires_dist: tuple[str, ...]


def _parse_time(text: Any) -> datetime | None:
    if not isinstance(text, str) or not text:
        return None
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        return None


def _version_of(filename: str) -> tuple[Version | None, frozenset[Tag]]:
    try:
        if filename.endswith(".whl"):
            _, version, _, tags = parse_wheel_filename(filename)
            return version, frozenset(tags)
        return parse_sdist_filename(filename)[1], frozenset()
    except (InvalidWheelFilename, InvalidSdistFilename, InvalidVersion):
        return None, frozenset()


def _dist_file(
    filename: str, url: str, yanked: Any, upload_time: Any, requires_python: Any
) -> DistFile:  # one place for both page formats
    version, tags = _version_of(filename)
    return DistFile(
        filename=filename,
        url=url,
        version=version,
        yanked=bool(yanked) or (isinstance(yanked, str)),
        yanked_reason=yanked if isinstance(yanked, str) and yanked else None,
        upload_time=_parse_time(upload_time),
        requires_python=requires_python if isinstance(requires_python, str) and requires_python else None,
        tags=tags,
    )


def parse_json_page(data: Mapping[str, Any], page_url: str) -> list[DistFile]:
    """The files of a PEP 691 JSON project page (relative URLs resolved against ``page_url``).

    ``yanked`` is PEP 592's (``false``, ``true`` or a reason string); ``upload-time`` PEP 700's.

    Raises:
        ValueError: ``files`` is missing or not a list of objects with ``filename`` and ``url``.
    """
    files = data.get("files")
    if not isinstance(files, list):
        raise ValueError("no 'files' list")
    out = []
    for entry in files:
        if not isinstance(entry, dict) or not isinstance(entry.get("filename"), str) or "url" not in entry:
            raise ValueError("a file entry without 'filename' and 'url'")
        out.append(
            _dist_file(
                entry["filename"],
                urllib.parse.urljoin(page_url, str(entry["url"])),
                entry.get("yanked", False),
                entry.get("upload-time"),
                entry.get("requires-python"),
            )
        )
    return out


class _AnchorParser(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.anchors: list[tuple[dict[str, str | None], str]] = []
        self._open: dict[str, str | None] | None = None
        self._text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self._open, self._text = dict(attrs), []

    def handle_data(self, data: str) -> None:
        if self._open is not None:
            self._text.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "a" and self._open is not None:
            self.anchors.append((self._open, "".join(self._text).strip()))
            self._open = None


def parse_html_page(text: str, page_url: str) -> list[DistFile]:
    """The files of a PEP 503 HTML project page: one per ``<a href>``; ``data-yanked`` (PEP 592) marks a
    yanked file (its value the reason), ``data-requires-python`` is unescaped by the parser."""
    parser = _AnchorParser()
    parser.feed(text)
    out = []
    for attrs, label in parser.anchors:
        href = attrs.get("href")
        if not href:
            continue
        url = urllib.parse.urljoin(page_url, href)
        filename = label or urllib.parse.unquote(urllib.parse.urlsplit(url).path.rsplit("/", 1)[-1])
        yanked: Any = attrs.get("data-yanked", False)
        if yanked is None:
            yanked = True
        out.append(_dist_file(filename, url, yanked, None, attrs.get("data-requires-python")))
    return out


def json_api_url(index_url: str, name: str) -> str | None:
    """The JSON API URL (``/pypi/NAME/json``) beside a ``.../simple`` index, None for any other index URL."""
    parts = urllib.parse.urlsplit(index_url)
    path = parts.path.rstrip("/")
    if not path.endswith("/simple"):
        return None
    base = path[: -len("/simple")]
    return urllib.parse.urlunsplit(parts._replace(path=f"{base}/pypi/{canonicalize_name(name)}/json", query=""))


def env_proxies(url: str, env: Mapping[str, str]) -> dict[str, str]:
    """The proxy ``requests`` should use for ``url`` by ``env`` (curl's and pip's variables: ``https_proxy``,
    ``http_proxy``, ``all_proxy``, lower case first, then upper case; ``no_proxy`` hosts, domain suffixes or
    ``*`` bypass them): ``{scheme: proxy}``, empty for a direct connection."""

    def get(name: str) -> str:
        return env.get(name) or env.get(name.upper()) or ""

    parts = urllib.parse.urlsplit(url)
    proxy = get(f"{parts.scheme}_proxy") or get("all_proxy")
    if not proxy or not parts.hostname:
        return {}
    if _bypassed(parts.hostname.lower(), parts.port, get("no_proxy")):
        return {}
    return {parts.scheme: proxy}


def _bypassed(host: str, port: int | None, no_proxy: str) -> bool:
    """``host`` is named by ``no_proxy`` (comma-separated: ``*``, a host, a domain with or without its
    leading dot, each with an optional ``:port``)."""
    for entry in (e.strip().lower() for e in no_proxy.split(",")):
        name, _, entry_port = entry.rpartition(":") if entry.count(":") == 1 else (entry, "", "")
        if entry == "*":
            return True
        if not name or (entry_port and str(port) != entry_port):
            continue
        name = name.lstrip(".")
        if host == name or host.endswith(f".{name}"):
            return True
    return False


def _body(response: requests.Response, url: str) -> Iterator[bytes]:
    """``response``'s body in 1 MiB chunks.

    Raises:
        IndexUnreachableError: the connection broke mid-body (requests' ConnectionError, ChunkedEncodingError,
            a read timeout): the index's fault, never to be taken for the Docker engine's (exit 10, not 8).
    """
    try:
        yield from response.iter_content(1024 * 1024)
    except requests.RequestException as exc:
        raise IndexUnreachableError(f"{url}: the answer broke off ({type(exc).__name__}: {exc})") from exc


class _Session(requests.Session):
    """A session whose proxies come from the given environment only (``env_proxies``), for every request,
    the range reads of ``remotezip`` included; no netrc, no ``os.environ``."""

    def __init__(self, env: Mapping[str, str]) -> None:
        super().__init__()
        self.trust_env = False
        self.env = dict(env)

    def merge_environment_settings(self, url: Any, proxies: Any, stream: Any, verify: Any, cert: Any) -> Any:
        merged = dict(proxies or {})
        for scheme, proxy in env_proxies(str(url), self.env).items():
            merged.setdefault(scheme, proxy)
        return super().merge_environment_settings(url, merged, stream, verify, cert)


class IndexClient:
    """Reads project pages, the JSON API and remote wheels over one HTTP session.

    ``ca_cert``: the CA bundle every TLS connection verifies against (None: the system's, via certifi).
    ``env``: the environment whose proxy variables apply (``env_proxies``; ``os.environ`` is never read).
    ``log``: where each request is echoed (``+ GET URL``); None keeps it quiet (tests).
    """

    def __init__(
        self,
        *,
        ca_cert: Path | None,
        env: Mapping[str, str] | None = None,
        timeout: float = TIMEOUT,
        log: IO[str] | None = sys.stderr,
    ) -> None:
        self.session = _Session(env or {})
        self.session.headers["User-Agent"] = USER_AGENT
        self.session.verify = str(ca_cert) if ca_cert else True
        self.timeout = timeout
        self.log = log
        self._pages: dict[tuple[str, str], Project | None] = {}

    def _echo(self, what: str) -> None:
        if self.log is not None:
            self.log.write(f"+ {what}\n")  # one write: requests run in threads
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
        """The project page of ``name`` on ``index_url`` (a PEP 503 root such as ``https://pypi.org/simple``),
        or None when the index answers 404 (no such project). Cached per (index, name).

        Raises:
            IndexUnreachableError: no answer, TLS failure, another HTTP error, or a page that is not one.
        """
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
                    when = _parse_time(f.get("upload_time_iso_8601") or f.get("upload_time"))
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
        except InvalidVersion:
            return None  # not a release an installer would pick: read the wheels instead
        requires = info.get("requires_dist") or []
        if not isinstance(requires, list):
            requires = []
        return LatestRelease(version=info["version"], requires_dist=tuple(str(r) for r in requires))

    @contextlib.contextmanager
    def open_wheel(self, url: str) -> Iterator[zipfile.ZipFile]:
        """The wheel at ``url`` as a ``ZipFile``: read by range requests where the server honours them, else
        downloaded whole to a temporary file (removed on exit). Only ``http``/``https`` URLs: a page cannot make
        this open a local file.

        Raises:
            IndexUnreachableError: another URL scheme, no answer, an HTTP error, a file over
                ``MAX_DOWNLOAD_BYTES``, not a zip.
        """
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
        """The text of the wheel's ``METADATA`` (key ``METADATA``) and of each member named in ``wanted`` that
        the wheel holds (absent keys: not in the wheel). Members over ``MAX_MEMBER_BYTES`` are left out.

        Raises:
            IndexUnreachableError: as ``open_wheel``; also a wheel without ``*.dist-info/METADATA``.
        """
        with self.open_wheel(url) as archive:
            try:
                return _members(archive, wanted)
            except (remotezip.RemoteZipError, requests.RequestException, zipfile.BadZipFile, OSError) as exc:
                raise IndexUnreachableError(f"{url}: cannot read the wheel ({type(exc).__name__}: {exc})") from exc
            except KeyError as exc:
                raise IndexUnreachableError(f"{url}: the wheel has no *.dist-info/METADATA") from exc


def _members(archive: zipfile.ZipFile, wanted: tuple[str, ...]) -> dict[str, str]:
    """``METADATA`` and each of ``wanted`` the archive holds (each at most ``MAX_MEMBER_BYTES``), as text.

    Raises:
        KeyError: no ``*.dist-info/METADATA`` at the top of the archive.
    """
    infos = {i.filename: i for i in archive.infolist()}
    metadata = [n for n in infos if n.count("/") == 1 and n.endswith(".dist-info/METADATA")]
    if not metadata:
        raise KeyError("METADATA")
    out: dict[str, str] = {}
    for key, name in [("METADATA", metadata[0]), *((w, w) for w in wanted)]:
        info = infos.get(name)
        if info is not None and info.file_size <= MAX_MEMBER_BYTES:
            out[key] = archive.read(info).decode("utf-8", "replace")
    return out


def response_json(body: bytes, url: str) -> dict[str, Any]:
    """``body`` parsed as a JSON object.

    Raises:
        ValueError: not JSON, or not an object.
    """
    data = jsontext.loads(body)
    if not isinstance(data, dict):
        raise ValueError(f"{url}: not a JSON object")
    return data


def requires_dist(metadata: str) -> list[str]:
    """The ``Requires-Dist`` values of a core-metadata text (RFC 822 headers up to the first blank line)."""
    headers = email.parser.HeaderParser().parsestr(metadata, headersonly=True)
    return [str(v) for v in headers.get_all("Requires-Dist") or []]


def local_wheel_files(path: Path, wanted: tuple[str, ...]) -> dict[str, str]:
    """``IndexClient.wheel_files`` for a wheel on the local file system (a wheelhouse).

    Raises:
        ConfigError: the file is not a readable wheel (not a zip, unreadable, no METADATA), naming it and
            ``--wheelhouse``.
    """
    try:
        with zipfile.ZipFile(path) as archive:
            return _members(archive, wanted)
    except (zipfile.BadZipFile, OSError, KeyError, ValueError) as exc:
        problem = "has no *.dist-info/METADATA" if isinstance(exc, KeyError) else f"is not a readable wheel ({exc})"
        raise ConfigError(
            "--wheelhouse", [f"{path} {problem}; replace or remove it (--wheelhouse DIR or PIP_FIND_LINKS)"]
        ) from exc
