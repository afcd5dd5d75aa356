"""Native libraries: every shared object of torch and vLLM resolves, LD_PRELOAD names files (class 11)."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Set, Tuple

from .declarations import check
from .errortext import listed
from .gpuprobe import gpu_visible
from .results import result


# --- native-libs (class 11) --------------------------------------------------------------------------
def _package_dir(name: str) -> Any:
    spec = importlib.util.find_spec(name)
    return os.path.dirname(spec.origin) if spec and spec.origin else None


# Libraries of the NVIDIA driver: the container toolkit mounts them from the host when a GPU is passed
# through (`--gpus`); an image must not ship them, so ldd may rightly report them missing without a GPU.
DRIVER_LIBS = re.compile(r"^lib(cuda|cudadebugger|nvidia-[A-Za-z0-9_-]+)\.so(\.[0-9]+)*$")


# ldd's lines for a library that is absent, and for one built against a newer C library than the image's
# (``…/libc.so.6: version `GLIBC_2.38' not found (required by /opt/vendor/lib/libnuma.so.1)``: the library that
# needs it is named, and it is often not the object ldd was asked about but a library that object loads).
_MISSING = re.compile(r"^\s*\S+\s*=>\s*not found")
_VERSION = re.compile(r"version `(GLIBC|GLIBCXX|CXXABI)_[0-9.]+' not found")
_REQUIRED_BY = re.compile(r"version `((?:GLIBC|GLIBCXX|CXXABI)_[0-9.]+)' not found \(required by ([^)]+)\)")
# Folders of the system's own libraries (Debian's multiarch layout and the classic ones).
SYSTEM_LIB_DIRS = ("/usr/lib/x86_64-linux-gnu", "/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu",
                   "/lib/aarch64-linux-gnu", "/usr/lib", "/lib", "/usr/lib64", "/lib64")  # fmt: skip
# What a vLLM extension that failed to load looks like later: vLLM only warns at import ("Failed to import from
# vllm._C…"), and the engine then fails on an op the extension would have registered.
EXTENSION_SYMPTOMS = ("Failed to import from vllm._C", "'_OpNamespace' '_C' object has no attribute")


def too_new_needers(ldd_lines: Iterable[str]) -> Dict[Optional[str], List[str]]:
    """{library that needs them: sorted versions} from ldd's lines (``_REQUIRED_BY``); a line without
    ``required by`` (an older ldd) is keyed None."""
    found: Dict[Optional[str], Set[str]] = {}
    for line in ldd_lines:
        m = _REQUIRED_BY.search(line)
        if m:
            found.setdefault(m.group(2).strip(), set()).add(m.group(1))
        elif _VERSION.search(line):
            found.setdefault(None, set()).add(_VERSION.search(line).group(0).split("`")[1].split("'")[0])  # type: ignore[union-attr]
    return {k: sorted(v) for k, v in found.items()}


def missing_libraries(broken: Any, shown: int = 3) -> str:
    """One line for ``broken`` ({shared object: the libraries ldd finds no file for}): each missing library
    named once, with the objects that need it (at most ``shown`` of them, then a count)."""
    by_lib: Dict[str, Any] = {}
    for obj, gone in broken.items():
        for lib in gone:
            by_lib.setdefault(lib, []).append(obj)
    parts = []
    for lib, objs in sorted(by_lib.items()):
        parts.append(f"{lib} (needed by {listed(sorted(objs), shown, ', ')})")
    return f"{len(broken)} shared object(s) miss a library that is not found: {'; '.join(parts)}"


def library_origin(path: str, ld_library_path: Any, site_dirs: Any, package_of: Any, system_copies: Any) -> Any:
    """Where a shared object that another one loads comes from, as a dict: ``kind`` is ``ld_library_path``
    (a folder of ``LD_LIBRARY_PATH``: ``entry``), ``wheel`` (under a site-packages folder, e.g. a wheel's
    ``*.libs``: ``site``), ``system`` (a system package owns it: ``package``) or ``unowned`` (a copy no package
    owns); ``system_copies``: the other files of that name in the system's folders, the ones the loader would use
    without it. Pure: ``package_of(path)`` (dpkg -S) and ``system_copies`` come from the caller."""
    folder = os.path.dirname(path)
    entries = [e for e in (ld_library_path or "").split(":") if e]
    entry = next((e for e in entries if os.path.normpath(e) == os.path.normpath(folder)), None)
    site = next((d for d in site_dirs if path.startswith(d.rstrip("/") + "/")), None)
    package = package_of(path)
    origin = {"path": path, "package": package, "system_copies": list(system_copies)}
    if site is not None:  # a wheel's library, even where LD_LIBRARY_PATH names its folder (nvidia/*/lib)
        origin.update(kind="wheel", site=site)
    elif entry is not None and package is None:
        origin.update(kind="ld_library_path", entry=entry)
    elif package is not None:
        origin.update(kind="system")
    else:
        origin.update(kind="unowned")
    return origin


def describe_too_new_dependency(origin: Any, needs: Any, loaded_by: Any, glibc: Any, owners: Any = ()) -> Any:
    """(problem, hint) for a library ``origin`` (``library_origin``) that needs the C library versions ``needs``
    newer than the image's ``glibc`` and that the shared objects ``loaded_by`` load (so each of them fails to
    load by it): the library is named once, with where it comes from, and the fix fits that origin."""
    path, versions = origin["path"], ", ".join(needs)
    shown = listed(loaded_by, 4, ", ")
    instead = origin.get("system_copies") or []
    system = f" (the system's {instead[0]} would load without it)" if instead else ""
    base = f"or use a base image whose glibc provides {versions}"
    kind = origin["kind"]
    if kind == "ld_library_path":
        where = (f"a vendored copy no package owns, found first through LD_LIBRARY_PATH={origin['entry']}"
                 f"{system}")  # fmt: skip
        name = os.path.basename(path)
        # Removing the copy helps only where the system has its own; else the library would just be missing.
        instead_fix = f" so the system's {name} loads" if instead else f" and install the system package of {name}"
        hint = (
            f"remove the vendored {path} (or the LD_LIBRARY_PATH entry {origin['entry']}){instead_fix}, "
            f"or replace it with a build for glibc {glibc}, {base}"
        )
    elif kind == "wheel":
        dists = ", ".join(owners) or "the wheel that ships it"
        where = f"vendored inside {dists} (under {origin['site']})"
        hint = (
            f"install a build of {dists} made for glibc {glibc} (a manylinux tag no newer than "
            f"manylinux_{glibc.replace('.', '_')}), {base}"
        )
    elif kind == "system":
        where = f"from the system package {origin['package']}, built for a newer release than this image's"
        hint = f"install {origin['package']} from this image's release (apt-get install --reinstall), {base}"
    else:
        where = f"a copy no package owns{system}"
        hint = f"remove or replace {path} (a copy made for a newer glibc), {base}"
    problem = (
        f"{path} needs a newer C library than the image's glibc {glibc} ({versions}): {where}; "
        f"{len(loaded_by)} shared object(s) of torch/vLLM load it and fail by it: {shown}"
    )
    return problem, hint


def _glibc() -> Any:
    """This image's glibc version, e.g. ``2.36`` (``os.confstr``), or ``unknown``."""
    try:
        return (os.confstr("CS_GNU_LIBC_VERSION") or "glibc unknown").split()[-1]
    except (ValueError, OSError):
        return "unknown"


def _owners(paths: Iterable[str]) -> List[Any]:
    """The distributions whose RECORD lists any of ``paths`` (relative to site-packages), by name."""
    from importlib import metadata

    wanted = set(paths)
    found = []
    for dist in metadata.distributions():
        files = {str(f) for f in (dist.files or ())}
        if files & wanted:
            found.append(dist.metadata["Name"])
    return sorted(set(found))


def _package_of(path: str) -> Optional[str]:
    """The system package that owns ``path`` (``dpkg -S``, also under its /usr-merged twin), or None."""
    if shutil.which("dpkg") is None:
        return None
    twins = [path, path[4:] if path.startswith("/usr/") else "/usr" + path]
    for candidate in twins:
        proc = subprocess.run(["dpkg", "-S", candidate], capture_output=True, text=True, check=False)
        if proc.returncode == 0 and ":" in proc.stdout:
            return proc.stdout.split(":")[0].strip()
    return None


def _system_copies(path: str) -> Any:
    """The other files named like ``path`` in the system's library folders (the loader's choice without it)."""
    name, here = os.path.basename(path), os.path.realpath(path)
    found: List[Any] = []
    for folder in SYSTEM_LIB_DIRS:
        candidate = os.path.join(folder, name)
        real = os.path.realpath(candidate)
        if os.path.exists(candidate) and real != here and real not in {os.path.realpath(f) for f in found}:
            found.append(candidate)
    return found


@check(
    "native-libs",
    proves=(
        "no `not found` from `ldd` on torch's and vLLM's shared objects (with the folders torch loads first: "
        "`torch/lib`, the nvidia wheels' `lib`; the GPU driver's own `libcuda.so.1`, `libnvidia-*` are named,"
        " not failed); every `LD_PRELOAD` path exists"
    ),
    classes=(11,),
    reports=("https://github.com/vllm-project/vllm/issues/18743", "https://github.com/vllm-project/vllm/pull/37561"),
    hint="install the system packages providing the missing libraries (libnuma1 for libnuma.so.1); "
    "point LD_PRELOAD only at files that exist",
    timeout=300,
    group="light",
)
def check_native_libs(params: Dict[str, Any]) -> Dict[str, Any]:
    missing_preload = [p for p in os.environ.get("LD_PRELOAD", "").replace(":", " ").split() if not os.path.exists(p)]
    if shutil.which("ldd") is None:
        return result("skipped", "no ldd in the image")
    dirs = [d for d in (_package_dir("torch"), _package_dir("vllm")) if d]
    # Without a GPU the driver's libraries are rightly absent; with one, the container toolkit mounts them
    # and their absence is a defect. CPU variants get no GPU: no need to import torch to find out.
    waive_driver = params.get("accelerator", "cpu") == "cpu" or not gpu_visible()
    scan = _scan(dirs, _ldd_env(dirs), waive_driver)
    broken, dependencies = scan["broken"], scan["dependencies"]
    # A library of torch/vLLM that others load is named once, as the dependency (with what loads it), not again
    # as a shared object of its own.
    as_dependency = {
        os.path.relpath(n, os.path.dirname(t)) for n in dependencies for t in dirs if n.startswith(t + "/")
    }
    too_new = {rel: found for rel, found in scan["too_new"].items() if rel not in as_dependency}
    versions = sorted({v for found in too_new.values() for v in found})
    versions += sorted({f"version `{v}' not found" for d in dependencies.values() for v in d["needs"]} - set(versions))
    libs = sorted({lib for gone in broken.values() for lib in gone})
    failing = [*broken, *too_new, *(o for d in dependencies.values() for o in d["loaded_by"])]
    symptoms = list(EXTENSION_SYMPTOMS) if any(o.startswith("vllm/_C") for o in failing) else []
    facts: Dict[str, Any] = {
        "shared_objects": scan["count"],
        "broken": broken,
        "too_new": {k: sorted(v) for k, v in too_new.items()},
        "too_new_dependencies": {
            k: {"needs": sorted(v["needs"]), "loaded_by": sorted(v["loaded_by"])} for k, v in dependencies.items()
        },
        "missing_preload": missing_preload,
        "driver_provided": sorted(scan["driver_provided"]),
        # What other checks fail by when this one fails (the host reports their failures as consequences).
        "root_errors": [*versions, *libs, *symptoms],
    }
    problems, hints = _problems(missing_preload, too_new, versions, broken)
    if dependencies:
        facts["too_new_origins"] = _dependency_problems(dependencies, dirs, problems, hints)
    if broken:
        problems.append(missing_libraries(broken))
        hints.append("install the system packages that provide the missing libraries (e.g. libnuma1 for libnuma.so.1)")
    if problems:
        return result("failed", "; ".join(problems), "; ".join(hints), **facts)
    driver = (
        f"; {', '.join(sorted(scan['driver_provided']))} come(s) from the GPU driver at run time, not the image"
        if scan["driver_provided"]
        else ""
    )
    return result(
        "passed", f"{scan['count']} shared objects of torch/vLLM resolve every library{driver}; LD_PRELOAD ok", **facts
    )


def _ldd_env(dirs: Sequence[str]) -> Dict[str, str]:
    """The environment ldd runs in: no LD_PRELOAD, and the folders torch loads its libraries from first.

    vLLM's extensions link libtorch, and on CUDA libcudart/libnvrtc, without an RPATH: torch loads them first at
    run time (its own folder, and the nvidia-* wheels' lib folders in torch/__init__.py's _load_global_deps), so
    those folders go on LD_LIBRARY_PATH."""
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    torch_lib = os.path.join(dirs[0], "lib") if dirs and dirs[0].endswith("torch") else None
    preloaded = [torch_lib] if torch_lib else []
    if dirs and dirs[0].endswith("torch"):
        nvidia = os.path.join(os.path.dirname(dirs[0]), "nvidia")
        for root, subdirs, _ in os.walk(nvidia):
            if os.path.basename(root) == "lib":
                preloaded.append(root)
                subdirs[:] = []
    if preloaded:
        env["LD_LIBRARY_PATH"] = ":".join(filter(None, [*preloaded, env.get("LD_LIBRARY_PATH")]))
    return env


def _scan(dirs: Sequence[str], env: Mapping[str, str], waive_driver: bool) -> Dict[str, Any]:
    """ldd over every shared object below ``dirs``: ``count``; ``broken`` (shared object -> libraries not found);
    ``too_new`` (shared object -> {"version `GLIBC_2.38' not found"}: built for a newer C library);
    ``dependencies`` (a library they load that needs a newer C library -> {"needs", "loaded_by"});
    ``driver_provided``: the GPU driver's libraries not found where ``waive_driver``."""
    broken: Dict[str, List[str]] = {}
    too_new: Dict[str, Set[str]] = {}
    dependencies: Dict[str, Any] = {}
    driver_provided: Set[str] = set()
    count = 0
    for top in dirs:
        for root, _, files in os.walk(top):
            for name in files:
                if ".so" not in name:
                    continue
                path = os.path.join(root, name)
                count += 1
                proc = subprocess.run(["ldd", path], capture_output=True, text=True, env=env, check=False)
                lines = (proc.stdout + proc.stderr).splitlines()
                rel = os.path.relpath(path, os.path.dirname(top))
                for needer, versions in too_new_needers(lines).items():
                    if needer is None or os.path.realpath(needer) == os.path.realpath(path):
                        too_new.setdefault(rel, set()).update(f"version `{v}' not found" for v in versions)
                    else:  # a library this object loads needs them: that library is the one to name
                        entry = dependencies.setdefault(needer, {"needs": set(), "loaded_by": []})
                        entry["needs"].update(versions)
                        entry["loaded_by"].append(rel)
                gone = sorted(
                    {line.split("=>")[0].strip() for line in lines if "=> not found" in line or _MISSING.match(line)}
                )
                from_driver = [lib for lib in gone if DRIVER_LIBS.match(lib)] if waive_driver else []
                if from_driver:
                    driver_provided.update(from_driver)
                    gone = [lib for lib in gone if lib not in from_driver]
                if gone:
                    broken[rel] = gone
    return {
        "count": count,
        "broken": broken,
        "too_new": too_new,
        "dependencies": dependencies,
        "driver_provided": driver_provided,
    }


def _problems(
    missing_preload: Sequence[str], too_new: Mapping[str, Set[str]], versions: Sequence[str], broken: Any
) -> Tuple[List[str], List[str]]:
    """(problems, hints) of a missing LD_PRELOAD file and of shared objects built for a newer C library."""
    problems: List[str] = []
    hints: List[str] = []
    if missing_preload:
        problems.append(f"LD_PRELOAD names missing file(s): {', '.join(missing_preload)}")
        hints.append("point LD_PRELOAD only at files that exist")
    if too_new:
        glibc = _glibc()
        owners = _owners(too_new)
        first = ", ".join(f"{k} ({', '.join(sorted(v))})" for k, v in list(too_new.items())[:3])
        problems.append(
            f"{len(too_new)} shared object(s) need a newer C library than the image's glibc {glibc}: {first}"
            + (f"; shipped inside the wheel(s) {', '.join(owners)}, not by a system package" if owners else "")
        )
        hints.append(
            f"install a build of {', '.join(owners) or 'the package that ships them'} made for glibc {glibc} (a "
            f"manylinux tag no newer than manylinux_{glibc.replace('.', '_')}), or use a base image whose C/C++ "
            f"runtime provides {', '.join(v.split('`')[1].split(chr(39))[0] for v in versions)}"
        )
    return problems, hints


def _dependency_problems(
    dependencies: Mapping[str, Any], dirs: Sequence[str], problems: List[str], hints: List[str]
) -> List[Dict[str, Any]]:
    """Each library torch/vLLM load that needs a newer C library, with where it comes from
    (``library_origin``): its problem and hint appended; the origins (facts ``too_new_origins``)."""
    glibc = _glibc()
    site_dirs = [os.path.dirname(d) for d in dirs]
    origins = []
    for needer, found in sorted(dependencies.items()):
        origin = library_origin(
            needer, os.environ.get("LD_LIBRARY_PATH", ""), site_dirs, _package_of, _system_copies(needer)
        )
        site = origin.get("site")
        owners = _owners([os.path.relpath(needer, site)]) if site else []
        problem, hint = describe_too_new_dependency(origin, sorted(found["needs"]), sorted(found["loaded_by"]),
                                                    glibc, owners)  # fmt: skip
        origins.append(origin)
        problems.append(problem)
        hints.append(hint)
    return origins
