"""What is installed in this image, as one JSON line on stdout: run inside the image by ``matrixtool.supply.inventory``.

Standard library only, Python >= 3.9 (whatever the image holds). Reads:
- every Python distribution (``*.dist-info``) on the interpreter's ``sys.path`` and in the usual system folders:
  name, version, license (``License-Expression``, else a one-line ``License``, else the ``License ::``
  classifiers), ``INSTALLER``, and the SHA-256 of its ``RECORD`` (which lists every installed file's hash);
- every installed Debian package of ``/var/lib/dpkg/status``: name, version, architecture, source package and
  version, and the licenses of a machine-readable ``/usr/share/doc/<package>/copyright`` (DEP-5);
- ``/etc/os-release`` (ID, VERSION_ID, VERSION_CODENAME).
Strings are cut to ``MAX_TEXT`` characters, so the output stays bounded whatever the metadata says.
"""

import csv
import glob
import hashlib
import json
import os
import sys
from email.parser import HeaderParser
from typing import Any, Optional

MAX_TEXT = 200
MAX_COPYRIGHT = 512 * 1024
DEP5 = "https://www.debian.org/doc/packaging-manuals/copyright-format/1.0"
SYSTEM_SITES = (
    "/usr/lib/python3/dist-packages",
    "/usr/lib/python3*/site-packages",
    "/usr/local/lib/python3*/site-packages",
    "/usr/local/lib/python3*/dist-packages",
    "/opt/*/lib/python3*/site-packages",
)


def cut(text: Optional[str]) -> Any:
    text = (text or "").strip()
    return text if len(text) <= MAX_TEXT else text[: MAX_TEXT - 1] + "…"


def read_text(path: str, limit: int = MAX_COPYRIGHT) -> Any:
    try:
        with open(path, "rb") as f:
            return f.read(limit).decode("utf-8", "replace")
    except OSError:
        return None


def python_license(meta: Any) -> Any:
    expression = meta.get("License-Expression")
    if expression:
        return cut(expression), "License-Expression"
    text = meta.get("License") or ""
    if text.strip() and "\n" not in text.strip() and len(text.strip()) <= 100 and text.strip() != "UNKNOWN":
        return cut(text), "License"
    classifiers = [c.split("::")[-1].strip() for c in meta.get_all("Classifier") or [] if c.startswith("License ::")]
    classifiers = [c for c in classifiers if c and c != "OSI Approved"]
    if classifiers:
        return cut(" OR ".join(sorted(set(classifiers)))), "classifier"
    return "", ""


def python_dists() -> Any:
    folders = []
    for entry in list(sys.path) + [p for pattern in SYSTEM_SITES for p in sorted(glob.glob(pattern))]:
        real = os.path.realpath(entry) if entry else ""
        if real and os.path.isdir(real) and real not in folders:
            folders.append(real)
    seen = set()
    dists = []
    for folder in folders:
        for info in sorted(glob.glob(os.path.join(folder, "*.dist-info"))):
            text = read_text(os.path.join(info, "METADATA"))
            if text is None or info in seen:
                continue
            seen.add(info)
            meta = HeaderParser().parsestr(text)
            record = os.path.join(info, "RECORD")
            digest, files, size = "", 0, 0
            try:
                with open(record, "rb") as f:
                    data = f.read()
            except OSError:
                data = b""
            if data:
                digest = hashlib.sha256(data).hexdigest()
                for row in csv.reader(data.decode("utf-8", "replace").splitlines()):
                    if row:
                        files += 1
                        if len(row) >= 3 and row[2].isdigit():
                            size += int(row[2])
            license_text, license_source = python_license(meta)
            dists.append(
                {
                    "name": cut(meta.get("Name")),
                    "version": cut(meta.get("Version")),
                    "summary": cut(meta.get("Summary")),
                    "license": license_text,
                    "license_source": license_source,
                    "installer": cut(read_text(os.path.join(info, "INSTALLER"), 1024)),
                    "record_sha256": digest,
                    "files": files,
                    "size": size,
                    "path": cut(info),
                }
            )
    return dists


def dep5_licenses(text: str) -> Any:
    """The short license names of a DEP-5 copyright file's ``Files`` paragraphs (empty: not machine-readable)."""
    if not text.lstrip().lower().startswith("format:") or "copyright-format" not in text.split("\n", 1)[0]:
        return []
    names = []
    for paragraph in text.split("\n\n"):
        if not any(line.startswith("Files:") for line in paragraph.splitlines()):
            continue
        for line in paragraph.splitlines():
            if line.startswith("License:"):
                name = line[len("License:") :].strip()
                if name and name not in names:
                    names.append(cut(name))
    return names[:20]


def debian_packages() -> Any:
    text = read_text("/var/lib/dpkg/status", 64 * 1024 * 1024)
    if text is None:
        return []
    packages = []
    for paragraph in text.split("\n\n"):
        fields = {}
        for line in paragraph.splitlines():
            if line[:1] in (" ", "\t") or ":" not in line:
                continue
            key, _, value = line.partition(":")
            fields[key] = value.strip()
        if "Package" not in fields or "install ok installed" not in fields.get("Status", ""):
            continue
        source, _, source_version = fields.get("Source", fields["Package"]).partition(" ")
        name = fields["Package"]
        copyright_text = read_text("/usr/share/doc/%s/copyright" % name) or ""
        packages.append(
            {
                "name": cut(name),
                "version": cut(fields.get("Version")),
                "arch": cut(fields.get("Architecture")),
                "source": cut(source),
                "source_version": cut(source_version.strip("()") or fields.get("Version")),
                "licenses": dep5_licenses(copyright_text),
                "copyright": bool(copyright_text),
                "installed_size_kib": int(fields.get("Installed-Size", "0") or 0)
                if fields.get("Installed-Size", "0").isdigit()
                else 0,
            }
        )
    return packages


def os_release() -> Any:
    fields = {}
    for line in (read_text("/etc/os-release", 65536) or "").splitlines():
        key, _, value = line.partition("=")
        if key in ("ID", "VERSION_ID", "VERSION_CODENAME", "PRETTY_NAME"):
            fields[key] = cut(value.strip().strip('"'))
    return fields


def main() -> None:
    doc = {"python": python_dists(), "debian": debian_packages(), "os": os_release()}
    sys.stdout.write("MATRIX-SBOM " + json.dumps(doc, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
