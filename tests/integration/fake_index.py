"""A real HTTP package index on loopback for `tools/matrix update`: PEP 691 JSON and PEP 503 HTML project pages,
the JSON API (``/pypi/NAME/json``) and wheel files with byte ranges (``Range: bytes=A-B`` and ``bytes=-N``),
from wheels built here (``make_wheel``). ``ranges=False`` answers every Range request with the whole file;
``json_pages=False`` serves PEP 503 HTML whatever the ``Accept`` header asks for."""

from __future__ import annotations

import html
import http.server
import json
import os
import re
import threading
import zipfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name, parse_wheel_filename


def make_wheel(
    folder: Path,
    name: str,
    version: str,
    *,
    tag: str = "py3-none-any",
    requires: Sequence[str] = (),
    files: Mapping[str, str] | None = None,
    padding: int = 0,
) -> Path:
    """A wheel ``{name}-{version}-{tag}.whl`` in ``folder`` with ``Requires-Dist`` lines, extra ``files``, and
    ``padding`` bytes of stored (uncompressed) data before its metadata, to make range reads measurable."""
    dist = re.sub(r"[-.]+", "_", name)
    path = folder / f"{dist}-{version}-{tag}.whl"
    info = f"{dist}-{version}.dist-info"
    metadata = "\n".join(
        ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}", *(f"Requires-Dist: {r}" for r in requires)]
    )
    with zipfile.ZipFile(path, "w") as archive:
        if padding:
            archive.writestr(zipfile.ZipInfo(f"{dist}/blob.bin"), os.urandom(padding), zipfile.ZIP_STORED)
        for member, text in (files or {}).items():
            archive.writestr(member, text)
        archive.writestr(f"{info}/METADATA", metadata + "\n\n", zipfile.ZIP_DEFLATED)
        archive.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\n")
        archive.writestr(f"{info}/RECORD", "")
    return path


@dataclass
class Entry:
    """One file the index lists: ``yanked`` (False, True or a reason), ``upload_time`` (ISO 8601 or None);
    ``url``: the link the pages give instead of the file's own (a hostile page: ``file:///etc/passwd``)."""

    path: Path
    yanked: bool | str = False
    upload_time: str | None = None
    requires: tuple[str, ...] = ()
    url: str | None = None


@dataclass
class FakeIndex:
    """The index's content and what it served (``served[filename]``: bytes sent)."""

    entries: list[Entry] = field(default_factory=list)
    ranges: bool = True
    json_api_times: bool = True
    json_pages: bool = True
    served: dict[str, int] = field(default_factory=dict)
    url: str = ""
    # Project name -> the JSON API document served instead of the one made from the entries.
    json_api: dict[str, Any] = field(default_factory=dict)

    def add(
        self,
        path: Path,
        *,
        yanked: bool | str = False,
        upload_time: str | None = None,
        requires: Sequence[str] = (),
        url: str | None = None,
    ) -> None:
        self.entries.append(Entry(path=path, yanked=yanked, upload_time=upload_time, requires=tuple(requires), url=url))

    def project(self, name: str) -> list[Entry]:
        return [e for e in self.entries if canonicalize_name(parse_wheel_filename(e.path.name)[0]) == name]


def _handler(index: FakeIndex) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def _send(self, status: int, body: bytes, content_type: str, extra: Mapping[str, str] = {}) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            for k, v in extra.items():
                self.send_header(k, v)
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def do_HEAD(self) -> None:
            self.do_GET()

        def do_GET(self) -> None:
            path = self.path.split("?")[0]
            if m := re.fullmatch(r"/simple/([^/]+)/", path):
                return self._page(canonicalize_name(m.group(1)))
            if m := re.fullmatch(r"/pypi/([^/]+)/json", path):
                return self._json_api(canonicalize_name(m.group(1)))
            if m := re.fullmatch(r"/files/([^/]+)", path):
                return self._file(m.group(1))
            self._send(404, b"not found", "text/plain")

        def _page(self, name: str) -> None:
            entries = index.project(name)
            if not entries:
                return self._send(404, b"no such project", "text/plain")
            if index.json_pages and "application/vnd.pypi.simple.v1+json" in self.headers.get("Accept", ""):
                files = []
                for e in entries:
                    f: dict[str, Any] = {
                        "filename": e.path.name,
                        "url": e.url or f"../../files/{e.path.name}",
                        "hashes": {},
                        "yanked": e.yanked,
                    }
                    if e.upload_time:
                        f["upload-time"] = e.upload_time
                    files.append(f)
                body = json.dumps({"meta": {"api-version": "1.1"}, "name": name, "files": files})
                return self._send(200, body.encode(), "application/vnd.pypi.simple.v1+json")
            links = []
            for e in entries:
                yanked = "" if e.yanked is False else f' data-yanked="{html.escape(str(e.yanked))}"'
                href = html.escape(e.url or f"/files/{e.path.name}")
                links.append(f'<a href="{href}"{yanked}>{e.path.name}</a><br/>')
            self._send(200, ("<html><body>" + "".join(links) + "</body></html>").encode(), "text/html")

        def _json_api(self, name: str) -> None:
            if name in index.json_api:
                return self._send(200, json.dumps(index.json_api[name]).encode(), "application/json")
            entries = index.project(name)
            if not entries:
                return self._send(404, b"{}", "application/json")
            versions = sorted({parse_wheel_filename(e.path.name)[1] for e in entries if not e.yanked})
            latest = str(versions[-1]) if versions else ""
            releases: dict[str, list[dict[str, Any]]] = {}
            requires: list[str] = []
            for e in entries:
                v = str(parse_wheel_filename(e.path.name)[1])
                item: dict[str, Any] = {"filename": e.path.name}
                if index.json_api_times and e.upload_time:
                    item["upload_time_iso_8601"] = e.upload_time
                releases.setdefault(v, []).append(item)
                if v == latest:
                    requires = list(e.requires)
            body = {"info": {"version": latest, "requires_dist": requires}, "releases": releases}
            self._send(200, json.dumps(body).encode(), "application/json")

        def _file(self, filename: str) -> None:
            match = [e for e in index.entries if e.path.name == filename]
            if not match:
                return self._send(404, b"no such file", "text/plain")
            data = match[0].path.read_bytes()
            wanted = self.headers.get("Range")
            if index.ranges and wanted and (m := re.fullmatch(r"bytes=(\d*)-(\d*)", wanted)):
                size = len(data)
                if m.group(1) == "":
                    start, end = max(0, size - int(m.group(2))), size - 1
                else:
                    start, end = int(m.group(1)), min(int(m.group(2) or size - 1), size - 1)
                part = data[start : end + 1]
                index.served[filename] = index.served.get(filename, 0) + len(part)
                return self._send(
                    206,
                    part,
                    "application/octet-stream",
                    {"Content-Range": f"bytes {start}-{end}/{size}", "Accept-Ranges": "bytes"},
                )
            index.served[filename] = index.served.get(filename, 0) + len(data)
            self._send(200, data, "application/octet-stream")

    return Handler


@contextmanager
def serving(index: FakeIndex) -> Iterator[FakeIndex]:
    """Serve ``index`` on 127.0.0.1 (a free port) in a thread; ``index.url`` is its ``/simple`` root."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _handler(index))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    index.url = f"http://127.0.0.1:{server.server_address[1]}/simple"
    try:
        yield index
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)
