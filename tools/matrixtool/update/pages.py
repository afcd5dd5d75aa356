"""An index's project pages as an installer reads them: PEP 691 JSON and PEP 503 HTML (the files, their
versions, tags, yanked state and upload times), the JSON API beside a ``/simple`` index, and core metadata."""

from __future__ import annotations

import email.parser
import html.parser
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from packaging.tags import Tag
from packaging.utils import (
    canonicalize_name,
    parse_sdist_filename,
    parse_wheel_filename,
)
from packaging.version import Version

from matrixtool.core import jsontext
from matrixtool.core.untrusted import shown


@dataclass(frozen=True, kw_only=True)
class DistFile:
    """``version`` None: the name is neither a wheel's nor an sdist's; ``upload_time``: PEP 700, aware UTC."""

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
    """A project page as read; ``api``: ``json`` (PEP 691) or ``html`` (PEP 503)."""

    name: str
    url: str
    api: str
    files: tuple[DistFile, ...]


@dataclass(frozen=True, kw_only=True)
class LatestRelease:
    """The JSON API's ``info`` of a project: its newest release and that release's ``Requires-Dist`` lines."""

    version: str
    requires_dist: tuple[str, ...]


def parse_time(text: Any) -> datetime | None:
    """An upload time of an index (ISO 8601; one without an offset is UTC, as PyPI writes them), None when
    ``text`` is none: always aware, so it compares with any other (a naive one would not: TypeError)."""
    if not isinstance(text, str) or not text or len(text) > 64:
        return None
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        return None
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def _version_of(filename: str) -> tuple[Version | None, frozenset[Tag]]:
    try:
        if filename.endswith(".whl"):
            _, version, _, tags = parse_wheel_filename(filename)
            return version, frozenset(tags)
        return parse_sdist_filename(filename)[1], frozenset()
    except ValueError:  # InvalidWheelFilename, InvalidSdistFilename, InvalidVersion; int() of 5000 digits
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
        yanked_reason=shown(yanked[:200]) if isinstance(yanked, str) and yanked else None,
        upload_time=parse_time(upload_time),
        requires_python=requires_python if isinstance(requires_python, str) and requires_python else None,
        tags=tags,
    )


def parse_json_page(data: Mapping[str, Any], page_url: str) -> list[DistFile]:
    """The files of a PEP 691 JSON project page (relative URLs resolved against ``page_url``).

    ``yanked`` is PEP 592's (``false``, ``true`` or a reason string); ``upload-time`` PEP 700's. Raises ValueError:
    ``files`` is missing or not a list of objects with ``filename`` and ``url``."""
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


def response_json(body: bytes, url: str) -> dict[str, Any]:
    """Raises ValueError: not JSON, or not an object."""
    data = jsontext.loads(body)
    if not isinstance(data, dict):
        raise ValueError(f"{url}: not a JSON object")
    return data


def requires_dist(metadata: str) -> list[str]:
    """The ``Requires-Dist`` values of a core-metadata text (RFC 822 headers up to the first blank line)."""
    headers = email.parser.HeaderParser().parsestr(metadata, headersonly=True)
    return [str(v) for v in headers.get_all("Requires-Dist") or []]
