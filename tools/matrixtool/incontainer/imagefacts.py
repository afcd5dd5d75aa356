"""Facts about the image it runs in, as one JSON line after a marker: Python distributions (version, installer,
origin, installed bytes), Debian packages (dpkg status) and the shared libraries the extension modules of vLLM,
torch and Triton need (``ldd``, else ``readelf -d``). Standard library only, Python >= 3.9; run by
``tools/matrix diff`` and ``tools/matrix size``."""

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
from typing import Any, Dict, Optional, Set

MARK = "@@image-facts@@"
PACKAGES = ("vllm", "torch", "triton")
MAX_SO_FILES = 600
LDD_TIMEOUT = 10


def installed_bytes(dist: Any, seen: Set[str]) -> Optional[int]:
    """Bytes of the files ``dist``'s RECORD lists and of the bytecode of its ``.py`` files (installers leave the
    ``__pycache__`` files they compile out of RECORD); os.lstat, a file counted once across distributions (``seen``:
    real paths), a missing one not at all. None when it has no RECORD."""
    import importlib.util

    try:
        files = dist.files
    except Exception:
        return None
    if files is None:
        return None
    total = 0
    for entry in files:
        path = os.path.realpath(str(dist.locate_file(entry)))
        paths = [path]
        if path.endswith(".py"):
            with contextlib.suppress(ValueError, NotImplementedError):
                paths.append(importlib.util.cache_from_source(path))
        for one in paths:
            if one in seen:
                continue
            seen.add(one)
            with contextlib.suppress(OSError):
                total += os.lstat(one).st_size
    return total


def distributions() -> Any:
    from importlib import metadata

    out = {}
    seen: Set[Any] = set()
    for dist in metadata.distributions():
        name = (dist.metadata["Name"] or "").strip()
        if not name:
            continue
        key = re.sub(r"[-_.]+", "-", name).lower()
        installer = (dist.read_text("INSTALLER") or "").strip() or None
        origin = None
        direct = dist.read_text("direct_url.json")
        if direct:
            try:
                data = json.loads(direct)
                origin = data.get("url")
                if data.get("dir_info", {}).get("editable"):
                    origin = "editable " + str(origin)
            except ValueError:
                origin = "direct_url.json unreadable"
        location = str(getattr(dist, "_path", "") or "")
        if key in out:
            continue  # the first on sys.path wins, as for imports
        out[key] = {
            "version": dist.version,
            "installer": installer,
            "origin": origin or "index",
            "location": location,
            "bytes": installed_bytes(dist, seen),
        }
    return out


def debian_packages(path: str = "/var/lib/dpkg/status") -> Any:
    out: Dict[str, Any] = {}
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError:
        return out
    for stanza in text.split("\n\n"):
        fields = dict(re.findall(r"^([A-Za-z-]+): ?(.*)$", stanza, re.M))
        if fields.get("Package") and "installed" in fields.get("Status", "").split():
            arch = fields.get("Architecture", "")
            out[fields["Package"]] = fields.get("Version", "") + (f" ({arch})" if arch else "")
    return out


def _package_dirs() -> Any:
    import importlib.util

    dirs = []
    for name in PACKAGES:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            spec = None
        for loc in (spec.submodule_search_locations or []) if spec else []:
            dirs.append((name, loc))
    return dirs


def _needed(path: str) -> Any:
    if shutil.which("ldd"):
        run = subprocess.run(["ldd", path], capture_output=True, text=True, timeout=LDD_TIMEOUT)
        found = {}
        for line in run.stdout.splitlines():
            m = re.match(r"\s*(\S+) => (not found|\S+)", line)
            if m:
                found[m.group(1)] = m.group(2)
        return found, "ldd"
    if shutil.which("readelf"):
        run = subprocess.run(["readelf", "-d", path], capture_output=True, text=True, timeout=LDD_TIMEOUT)
        return {m: "needed" for m in re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", run.stdout)}, "readelf"
    return {}, None


def shared_libraries() -> Dict[str, Any]:
    libs: Dict[str, Any] = {}
    tool = None
    count = 0
    for _package, root in _package_dirs():
        for folder, _, files in os.walk(root):
            for name in sorted(files):
                if not (name.endswith(".so") or ".so." in name) or count >= MAX_SO_FILES:
                    continue
                count += 1
                try:
                    found, tool = _needed(os.path.join(folder, name))
                except (OSError, subprocess.SubprocessError):
                    continue
                for lib, where in found.items():
                    entry = libs.setdefault(lib, {"path": where, "needed_by": []})
                    if where == "not found":
                        entry["path"] = where
                    if len(entry["needed_by"]) < 3:
                        entry["needed_by"].append(os.path.relpath(os.path.join(folder, name), os.path.dirname(root)))
    return {"tool": tool, "files": count, "libraries": libs}


def main() -> None:
    facts = {
        "python": sys.version.split()[0],
        "distributions": distributions(),
        "debian": debian_packages(),
        "shared_libraries": shared_libraries(),
    }
    sys.stdout.write(MARK + json.dumps(facts, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
