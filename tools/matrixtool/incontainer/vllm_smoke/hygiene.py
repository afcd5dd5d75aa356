"""Hygiene: dead CUDA weight in a CPU variant (failure class 14)."""

from __future__ import annotations

import importlib.metadata as metadata
import os
import re
from typing import Any, Dict, List, Set

from .declarations import check
from .errortext import listed
from .results import result

# --- cuda-weight: CUDA dead weight in a CPU variant (failure class 14) -------------------------
# Stdlib only, Python >= 3.9.
# Sizes are bytes, from each distribution's installed files (importlib.metadata RECORD, then os.lstat of
# each file; a file listed twice or missing counts once or not at all).
CW_DIST = re.compile(r"^(nvidia|cuda)-[a-z0-9._-]+$")  # canonical names: nvidia-cublas-cu12, cuda-toolkit ...
CW_LIBCUDA = re.compile(r"^libcuda[^/]*\.so(\.[0-9]+)*$")  # libcuda.so.1, libcudart.so.12, libcudadebugger.so
CW_LIB_DIRS = ("/usr/lib", "/usr/lib64", "/usr/local/lib", "/usr/local/cuda", "/lib", "/lib64", "/opt")
CW_WALK_LIMIT = 400000  # directory entries looked at, in all, before the walk stops (reported)
CW_WALK_DEPTH = 8  # folders below each root
CW_MB = 10**6


def cw_canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name or "").lower()


def cw_dist_sizes() -> Any:
    """{canonical name: (name, version, bytes, {real paths})} of every installed distribution."""
    out = {}
    for dist in metadata.distributions():
        name = dist.metadata["Name"]
        if not name or cw_canonical(name) in out:
            continue  # the first on sys.path wins, as for imports
        total, paths = 0, set()
        for entry in dist.files or ():
            path = os.path.realpath(str(dist.locate_file(entry)))
            if path in paths:
                continue
            try:
                st = os.lstat(path)
            except OSError:
                continue
            paths.add(path)
            total += st.st_size
        out[cw_canonical(name)] = (name, dist.version, total, paths)
    return out


def cw_cuda_torch(dists: Any) -> str:
    """Why torch is a CUDA build ('' when not): its version's local part (+cuXXX), or its nvidia-*/cuda-*
    requirements (PyPI's Linux torch has no local part and requires cuda-toolkit, nvidia-cudnn-cu13, ...)."""
    torch = dists.get("torch")
    if torch is None:
        return ""
    local = torch[1].partition("+")[2]
    if re.match(r"cu[0-9]+", local):
        return f"its version {torch[1]} is a CUDA build (+{local})"
    try:
        requires = metadata.distribution("torch").requires or []
    except metadata.PackageNotFoundError:
        requires = []
    names = []
    for line in requires:
        if re.search(r"extra\s*==", line):
            continue  # optional extras are not installed by a plain `pip install torch`
        m = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", line)
        if m and CW_DIST.match(cw_canonical(m.group(1))):
            names.append(cw_canonical(m.group(1)))
    if names:
        shown = listed(sorted(set(names)), 4, ", ")
        return f"it requires {shown}"
    return ""


def cw_site_dirs() -> List[Any]:
    import site
    import sysconfig

    dirs = [sysconfig.get_paths().get(k) for k in ("purelib", "platlib")]
    if hasattr(site, "getsitepackages"):  # virtualenv's old site.py has none
        dirs += site.getsitepackages()
    return [d for d in dict.fromkeys(dirs) if d and os.path.isdir(d)]


def cw_libcuda_files(roots: Any) -> Any:
    """Real paths of shared objects named libcuda*.so* under ``roots`` (symbolic links followed to their
    target, folders not), and whether the walk stopped at its bound (``CW_WALK_LIMIT`` entries, depth
    ``CW_WALK_DEPTH``)."""
    found: Set[str] = set()
    seen: Set[Any] = set()
    budget = CW_WALK_LIMIT
    for root in roots:
        base = root.rstrip("/").count("/")
        for folder, subdirs, files in os.walk(root):
            real = os.path.realpath(folder)
            if real in seen:
                subdirs[:] = []
                continue
            seen.add(real)
            budget -= len(subdirs) + len(files)
            if budget < 0:
                return found, True
            if folder.count("/") - base >= CW_WALK_DEPTH:
                subdirs[:] = []
            for name in files:
                if CW_LIBCUDA.match(name):
                    path = os.path.realpath(os.path.join(folder, name))
                    if os.path.isfile(path):
                        found.add(path)
    return found, False


def cw_mb(size: int) -> Any:
    return f"{size / CW_MB:.1f} MB" if size < 10 * CW_MB else f"{size / CW_MB:.0f} MB"


@check(
    "cuda-weight",
    proves="a CPU variant carries no CUDA wheels (nvidia-*, cuda-*), no CUDA torch and no libcuda*.so*, "
    "or declares why (matrix.yaml hygiene.cuda_weight); lists each such package with its size",
    classes=(14,),
    reports=(
        "https://github.com/kyutai-labs/pocket-tts/pull/219",
        "https://github.com/data-apis/array-api-compat/issues/284",
    ),
    hint="install torch from PyTorch's CPU index (the +cpu wheel), pip uninstall the nvidia-*/cuda-* "
    'packages (and keep them out with index.exclude), or declare why: hygiene: {cuda_weight: "<reason>"}',
    timeout=300,
    accelerators=("cpu",),
    affected_by=(),
    group="light",
)
def check_cuda_weight(params: Dict[str, Any]) -> Dict[str, Any]:
    """Class 14: CUDA wheels (nvidia-*, cuda-*), a CUDA torch or libcuda* in a CPU variant are dead weight.

    params: accelerator; cuda_weight_reason (matrix.yaml hygiene.cuda_weight: the variant's declared reason,
    or None). Facts: flagged [[name, version, bytes]] biggest first, libcuda [[path, bytes]], total_bytes,
    largest [[name, version, bytes]] (the 10 largest distributions of the image, for size-budget).
    """
    dists = cw_dist_sizes()
    largest = sorted(((n, v, s) for n, v, s, _ in dists.values()), key=lambda d: (-d[2], d[0]))[:10]
    facts: Dict[str, Any] = {"largest": [list(d) for d in largest]}
    if params.get("accelerator", "cpu") != "cpu":
        return result("skipped", f"not a CPU variant ({params.get('accelerator')}): CUDA libraries belong", **facts)
    flagged = [(n, v, s) for key, (n, v, s, _) in dists.items() if CW_DIST.match(key)]
    torch_why = cw_cuda_torch(dists)
    if torch_why:
        flagged.append(dists["torch"][:3])
    owned = set()
    for key, (_, _, _, paths) in dists.items():
        if CW_DIST.match(key) or (key == "torch" and torch_why):
            owned |= paths
    libs, truncated = cw_libcuda_files(cw_site_dirs() + [d for d in CW_LIB_DIRS if os.path.isdir(d)])
    stray = sorted((p, os.stat(p).st_size) for p in libs if p not in owned)
    flagged.sort(key=lambda d: (-d[2], d[0]))
    total = sum(s for _, _, s in flagged) + sum(s for _, s in stray)
    facts.update(
        flagged=[list(d) for d in flagged],
        libcuda=[list(x) for x in stray],
        total_bytes=total,
        walk_truncated=truncated,
        torch_cuda=torch_why or None,
    )
    if not flagged and not stray:
        return result(
            "passed",
            "no nvidia-*/cuda-* distributions, torch is not a CUDA build, no libcuda*.so* in site-packages or "
            "the library folders" + (" (the library walk stopped at its bound)" if truncated else ""),
            **facts,
        )
    items = [
        f"{n} {v} {cw_mb(s)}" + (" (a CUDA torch: " + torch_why + ")" if n.lower() == "torch" else "")
        for n, v, s in flagged
    ]
    items += [f"{p} {cw_mb(s)}" for p, s in stray]
    what = f"{len(flagged)} CUDA package(s) and {len(stray)} libcuda* file(s), {cw_mb(total)} in all: " + listed(
        items, 12, ", "
    )
    reason = params.get("cuda_weight_reason")
    if reason:
        return result("passed", f"carries CUDA weight on purpose ({reason}): {what}", **facts)
    fixes = []
    if torch_why:
        fixes.append(
            "install torch from PyTorch's CPU index (--index-url https://download.pytorch.org/whl/cpu: the +cpu "
            "wheel, which requires no nvidia-* wheels)"
        )
    extra = [n for n, _, _ in flagged if n.lower() != "torch"]
    if extra and not torch_why:
        fixes.append(
            f"pip uninstall {' '.join(extra[:8])}"
            + (" ..." if len(extra) > 8 else "")
            + " (and keep them out: matrix.yaml index.exclude)"
        )
    if stray:
        fixes.append("remove the libcuda* files named (or the package that copies them into the image)")
    fixes.append('or, if the variant needs them, declare why in matrix.yaml: hygiene: {cuda_weight: "<reason>"}')
    return result("failed", f"a CPU variant carries dead CUDA weight: {what}", "; ".join(fixes), **facts)
