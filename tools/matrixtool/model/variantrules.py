"""The rules of ``matrix.yaml`` a JSON Schema cannot say; each problem is one ``key.path: message`` line."""

from __future__ import annotations

import difflib
import math
import re
import urllib.parse
from collections.abc import Mapping
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from matrixtool.model import builds, cpufloor
from matrixtool.model.checks import CHECKS, applicable
from matrixtool.model.model import CheckSpec
from matrixtool.model.reference import image_problem

# The Python each Debian suite a stand-in base can be made from ships (Debian's python3 package).
SUITE_PYTHON = {"bookworm": "3.11", "trixie": "3.13"}
# The longest timeout a check may get, in seconds (matrix.schema.json says the same for smoke.timeouts).
MAX_TIMEOUT = 7200


# Whole-value patterns (re.fullmatch: `$` would also accept a trailing newline) for the strings that reach
# the Dockerfile; matrix.schema.json states the same patterns for editors.
_NAME = re.compile(r"[a-z][a-z0-9-]*")
_DIST = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?")
_VERSION = re.compile(r"[0-9][A-Za-z0-9.+!-]*")
_PYTHON = re.compile(r"3\.[0-9]+")
_ENV_KEY = re.compile(r"[A-Z_][A-Z0-9_]*")
# Characters a package index URL may hold: RFC 3986 unreserved and the delimiters an index URL uses, and
# none that a shell or a Dockerfile gives meaning to (quotes, `$`, `&`, `;`, `|`, `<`, `>`, backticks,
# parentheses, `*`, `!`, backslash, whitespace).
_URL_CHARS = re.compile(r"[A-Za-z0-9._~:/?#@%=+,\[\]-]+")


# Units as Docker and the SI/IEC standards write them: decimal kB/MB/GB/TB, binary KiB/MiB/GiB/TiB.
SIZE_UNITS: Mapping[str, int] = {
    "B": 1,
    "kB": 10**3,
    "KB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "TB": 10**12,
    "KiB": 2**10,
    "MiB": 2**20,
    "GiB": 2**30,
    "TiB": 2**40,
}
# The largest size_budget accepted (1 PB): a float beyond it is a typo, and one beyond 1.8e308 is infinite.
MAX_SIZE_BYTES = 10**15

_SIZE_TEXT = re.compile(r"([0-9]+(?:\.[0-9]+)?) ?([A-Za-z]+)")


def show(value: str, limit: int = 60) -> str:
    """How a problem quotes a value: its ``repr``, cut after ``limit`` characters (``…`` marks the cut)."""
    return repr(value if len(value) <= limit else value[:limit] + "…")


def parse_size(text: str) -> int:
    """Bytes of a size written as a number and a unit: ``"3GiB"`` -> 3221225472, ``"2500MB"`` -> 2500000000,
    ``"2.5 GB"`` -> 2500000000 (units: ``SIZE_UNITS``, case as written there; one optional space). Raises ValueError:
    not such a size, not above zero, or above ``MAX_SIZE_BYTES``; the message says what to write instead."""
    match = _SIZE_TEXT.fullmatch(text) if isinstance(text, str) else None
    if match is None or match.group(2) not in SIZE_UNITS:
        raise ValueError(
            f'{text!r} is not a size; write a number and a unit, e.g. "3GiB" or "2500MB" '
            f"(units: {', '.join(SIZE_UNITS)})"
        )
    try:
        size = round(float(match.group(1)) * SIZE_UNITS[match.group(2)])
    except OverflowError:
        size = -1
    if size < 0 or size > MAX_SIZE_BYTES:
        raise ValueError(
            f'{text!r} is beyond any image (at most 1 PB); write the largest size of the image, e.g. "3GiB"'
        )
    if size <= 0:
        raise ValueError(f'{text!r} is not above zero; write the largest size the image may have, e.g. "3GiB"')
    return size


def url_problem(url: str) -> str | None:
    """Why ``url`` is not a package index URL this tool writes into a Dockerfile (None: it is one).

    Parsed with ``urllib.parse``: scheme http or https, a host, an optional numeric port, no user
    information (credentials would land in the image history: use a build secret), and only characters
    of ``_URL_CHARS``.
    """
    if not _URL_CHARS.fullmatch(url):
        bad = next((c for c in url if not _URL_CHARS.fullmatch(c)), "")
        return f"holds {bad!r}; an index URL has no whitespace, quotes or shell characters"
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except ValueError as exc:
        return f"is not a URL ({exc})"
    if parts.scheme not in ("http", "https"):
        return f"has scheme {parts.scheme or '(none)'!r}; give an http:// or https:// URL"
    if not parts.hostname:
        return "has no host; give https://HOST/PATH"
    if parts.username is not None or parts.password is not None:
        return "holds user information (credentials); pass them at build time, never in matrix.yaml"
    if port is not None and not 0 < port < 65536:
        return f"has port {port}; give a port between 1 and 65535"
    return None


def semantic_problems(data: Mapping[str, Any]) -> list[str]:
    """Rules a JSON Schema cannot say: a stand-in's Python, whole values, the smoke checks (``resolve_checks``)
    and ``publish_as``."""
    problems: list[str] = []
    for name, variant in data["variants"].items():
        suite = variant.get("stand_in", {}).get("suite")
        stated = variant.get("stand_in", {}).get("python")
        ships = SUITE_PYTHON.get(suite) if suite else None
        if suite and stated is not None and stated != ships:
            problems.append(
                f"variants.{name}.stand_in.python: Debian {suite} ships Python {ships}, not {stated}; "
                f'write python: "{ships}" or pick another suite'
            )
        elif suite and ships != variant["python"] and stated is None:
            problems.append(
                f"variants.{name}.stand_in.suite: Debian {suite} ships Python {ships}, the variant "
                f"needs {variant['python']}; pick the suite that matches, or accept that builds on the "
                f'stand-in use Python {ships} by adding python: "{ships}" to stand_in'
            )
        problems += _value_problems(name, variant)
        problems += resolve_checks(name, variant)[1]
    problems += _publish_as_problems(data["variants"])
    return problems


def resolve_checks(name: str, variant: Mapping[str, Any]) -> tuple[tuple[CheckSpec, ...], list[str]]:
    """The smoke checks of the resolved variant ``name`` and the problems of its ``smoke`` keys.

    The checks are those whose declaration applies to the variant's accelerator (``Declaration.accelerators``),
    in the catalogue's order, less ``smoke.skip``. A check's timeout is its declared one, or ``smoke.timeouts``'
    value for it, times ``smoke.timeout_scale`` (default 1), rounded up to whole seconds. A problem: a skip or
    timeout names no check, or one the variant does not run; no check is left; a timeout comes out over
    ``MAX_TIMEOUT``.
    """
    smoke: Mapping[str, Any] = variant.get("smoke") or {}
    accelerator = str(variant["accelerator"])
    skip: list[str] = list(smoke.get("skip", ()))
    timeouts: Mapping[str, int] = smoke.get("timeouts") or {}
    scale = smoke.get("timeout_scale", 1)
    applies = applicable(accelerator)
    names = [n for n in applies if n not in skip]
    problems: list[str] = []
    for key, listed in (("skip", skip), ("timeouts", list(timeouts))):
        for check in listed:
            at = f"variants.{name}.smoke.{key}.{check}"
            if check not in CHECKS:
                close = difflib.get_close_matches(check, list(CHECKS), n=1)
                hint = f"did you mean '{close[0]}'?" if close else f"known checks: {', '.join(sorted(CHECKS))}"
                problems.append(f"{at}: unknown smoke check; {hint}")
            elif check not in applies:
                declared = ", ".join(CHECKS[check].accelerators)
                problems.append(
                    f"{at}: {check} does not apply to {accelerator} variants (declared for {declared}); remove it"
                )
            elif key == "timeouts" and check in skip:
                problems.append(f"{at}: {check} is skipped (smoke.skip); remove one of the two")
    if not names and not problems:
        problems.append(f"variants.{name}.smoke.skip: leaves no check to run; skip fewer")
    checks = tuple(CheckSpec(name=n, timeout=math.ceil(scale * timeouts.get(n, CHECKS[n].timeout))) for n in names)
    for spec in checks:
        if spec.timeout > MAX_TIMEOUT and not problems:
            problems.append(
                f"variants.{name}.smoke.timeout_scale: makes {spec.name}'s timeout {spec.timeout} s, over "
                f"{MAX_TIMEOUT}; use a smaller scale or a smaller smoke.timeouts.{spec.name}"
            )
    return checks, problems


def _publish_as_problems(variants: Mapping[str, Any]) -> list[str]:
    """``publish_as`` names another variant that publishes under its own name, with the same accelerator, and
    no two variants publish one platform under one name (a manifest list holds one image per platform).
    That the vLLM versions agree is checked when the manifest list is made (``manifest.plan_manifests``)."""
    problems: list[str] = []
    platforms: dict[str, dict[str, str]] = {}
    for name, variant in variants.items():
        target = variant.get("publish_as", name)
        key = f"variants.{name}.publish_as"
        if target != name:
            other = variants.get(target)
            if other is None:
                close = difflib.get_close_matches(target, list(variants), n=1)
                hint = f"did you mean '{close[0]}'?" if close else f"variants: {', '.join(variants)}"
                problems.append(f"{key}: {target!r} is not a variant; {hint}")
                continue
            if "publish_as" in other and other["publish_as"] != target:
                problems.append(f"{key}: {target!r} is itself published as {other['publish_as']!r}; name that one")
                continue
            if variant["accelerator"] != other["accelerator"]:
                problems.append(
                    f"{key}: accelerator {variant['accelerator']} differs from {target}'s {other['accelerator']}; "
                    "one tag is one stack on several platforms"
                )
        for platform in variant["platforms"]:
            seen = platforms.setdefault(target, {})
            if platform in seen:
                problems.append(
                    f"{key}: {name} and {seen[platform]} both publish {platform} as {target!r}; a manifest list "
                    "holds one image per platform"
                )
            seen[platform] = name
    return problems


def _is_pep440(value: str) -> bool:
    """``value`` parses as a PEP 440 version (``packaging.version.Version``), as pip and ``update`` read pins."""
    try:
        Version(value)
    except InvalidVersion:
        return False
    return True


def _gpu_arch_problems(at: str, variant: Mapping[str, Any]) -> list[str]:
    """``gpu_archs`` named on a variant without a GPU, or not of its accelerator (CUDA ``sm_*``, ROCm ``gfx*``)."""
    prefix = {"cuda": "sm_", "rocm": "gfx"}.get(variant.get("accelerator", ""))
    problems: list[str] = []
    for arch in variant.get("gpu_archs", []):
        if prefix is None:
            problems.append(
                f"{at}.gpu_archs: {show(arch)} on a {variant.get('accelerator')} variant: only GPU "
                "variants name GPU architectures"
            )
        elif not str(arch).startswith(prefix):
            problems.append(
                f"{at}.gpu_archs: {show(arch)} is no {variant['accelerator']} architecture (they begin with {prefix})"
            )
    return problems


def _value_problems(name: str, variant: Mapping[str, Any]) -> list[str]:
    """Whole-value checks of one variant's strings that reach the Dockerfile or a requirement file."""
    problems: list[str] = []
    at = f"variants.{name}"
    if not _NAME.fullmatch(name):
        problems.append(f"{at}: the variant name must be lowercase letters, digits and '-', starting with a letter")
    patterned = [
        ("python", variant["python"], _PYTHON),
        ("torch.package", variant["torch"]["package"], _DIST),
        ("torch.version", variant["torch"]["version"], _VERSION),
        ("vllm.package", variant["vllm"]["package"], _DIST),
        ("vllm.version", variant["vllm"]["version"], _VERSION),
        ("triton_distribution", variant.get("triton_distribution", "triton"), _DIST),
    ]
    if "dist_alias" in variant:
        patterned += [
            ("dist_alias.name", variant["dist_alias"]["name"], _DIST),
            ("dist_alias.version", variant["dist_alias"]["version"], _VERSION),
        ]
    if "python" in variant.get("stand_in", {}):
        patterned.append(("stand_in.python", variant["stand_in"]["python"], _PYTHON))
    if "size_budget" in variant:
        try:
            parse_size(variant["size_budget"])
        except ValueError as exc:
            problems.append(f"{at}.size_budget: {exc}")
    patterned += [(f"index.exclude.{i}", v, _DIST) for i, v in enumerate(variant["index"].get("exclude", []))]
    patterned += [(f"env.{k}", k, _ENV_KEY) for k in variant.get("env", {})]
    for key, value, pattern in patterned:
        if not pattern.fullmatch(value):
            problems.append(f"{at}.{key}: {show(value)} must match {pattern.pattern} as a whole")
        elif pattern is _VERSION and not _is_pep440(value):
            problems.append(f"{at}.{key}: {show(value)} is not a PEP 440 version (such as 0.32.0 or 2.13.0+cpu)")
    problem = image_problem(variant["base_image"])
    if problem is not None:
        problems.append(f"{at}.base_image: {show(variant['base_image'])} {problem}")
    problems += _gpu_arch_problems(at, variant)
    if "cpu_floor" in variant:
        archs = [str(p).split("/")[1] if "/" in str(p) else str(p) for p in variant["platforms"]]
        floor = cpufloor.floor_problem(variant["cpu_floor"], archs)
        if floor is not None:
            problems.append(f"{at}.cpu_floor: {floor}")
    features = variant.get("features", {})
    for both in sorted(set(features.get("promise", [])) & set(features.get("leave_out", {}))):
        problems.append(f"{at}.features: {show(both)} is both promised and left out: keep one")
    urls = [("index.url", variant["index"]["url"])]
    urls += [(f"index.extra_urls.{i}", u) for i, u in enumerate(variant["index"].get("extra_urls", []))]
    for key, url in urls:
        problem = url_problem(url)
        if problem is not None:
            problems.append(f"{at}.{key}: {show(url)} {problem}")
    if not problems:  # the labels are read from values that passed the checks above
        problems += builds.label_problems(variant, at)
    problems += _installed_problems(at, variant)
    return problems


def _installed_problems(at: str, variant: Mapping[str, Any]) -> list[str]:
    """The distributions the image installs (torch, vLLM, its Triton, pip, ``index.overrides``) against the keys that
    must not name one: ``index.exclude`` (uv ``--excludes``: the image would lack it) and ``dist_alias.name`` (an
    alias beside the real one), and an override that is no PEP 508 requirement."""
    problems: list[str] = []
    installed = {
        canonicalize_name(variant["torch"]["package"]): "torch.package",
        canonicalize_name(variant["vllm"]["package"]): "vllm.package",
        "torch": "the torch stack",
        "pip": "the image's pip",
    }
    if variant.get("triton") != "absent":
        installed.setdefault(canonicalize_name(variant.get("triton_distribution", "triton")), "triton_distribution")
    for i, line in enumerate(variant["index"].get("overrides", [])):
        try:
            installed.setdefault(canonicalize_name(Requirement(line).name), f"index.overrides.{i}")
        except InvalidRequirement as exc:
            problems.append(
                f"{at}.index.overrides.{i}: {show(line)} is not a PEP 508 requirement ({str(exc).splitlines()[0]})"
            )
    for i, name in enumerate(variant["index"].get("exclude", [])):
        part = installed.get(canonicalize_name(name)) if isinstance(name, str) else None
        if part is not None and part != "the image's pip":
            problems.append(
                f"{at}.index.exclude.{i}: {show(name)} is what the image installs ({part}); excluded from the "
                "resolution, the image would lack it: remove it from index.exclude"
            )
    alias = variant.get("dist_alias", {}).get("name")
    if isinstance(alias, str) and canonicalize_name(alias) in installed:
        problems.append(
            f"{at}.dist_alias.name: {show(alias)} is a distribution the image installs "
            f"({installed[canonicalize_name(alias)]}); an alias beside it would make the image report a version "
            "it does not hold: name a distribution the image lacks (the one its code asks importlib.metadata "
            "for) or remove dist_alias"
        )
    return problems
