"""Read and validate ``matrix.yaml`` into the frozen values of ``model``.

The whole file is validated before anything touches Docker: the JSON Schema (``matrix.schema.json``,
shipped inside this package; the copy at the repository root, which editors use, is kept identical by a
unit test) and the semantic rules below; every problem is collected with its key path and, for unknown
keys, the nearest valid key. ``extends`` is resolved here; a variant's checks are the declared ones that
apply to its accelerator, less ``smoke.skip``, with ``smoke.timeouts`` and ``smoke.timeout_scale`` applied.
"""

from __future__ import annotations

import difflib
import importlib.resources
import json
import math
import re
import urllib.parse
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import jsonschema
from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import InvalidVersion, Version

from matrixtool.core.errors import ConfigError
from matrixtool.incontainer.vllm_smoke.common import Accelerator
from matrixtool.model.checks import CHECKS, applicable
from matrixtool.model.model import (
    DEFAULT_MATRIX,
    CheckSpec,
    IndexSettings,
    Matrix,
    PackagePin,
    Platform,
    TritonState,
    Variant,
)
from matrixtool.model.profiles import merge_profiles, profile_problems
from matrixtool.model.reference import image_problem
from matrixtool.model.yamlfile import parse_yaml, read_config_text

# The Python each Debian suite a stand-in base can be made from ships (Debian's python3 package).
SUITE_PYTHON = {"bookworm": "3.11", "trixie": "3.13"}
SCHEMA_NAME = "matrix.schema.json"
# Longest string value anywhere in matrix.yaml (a URL may be longer: MAX_URL_LENGTH).
MAX_STRING_LENGTH = 512
MAX_URL_LENGTH = 2048
# The longest timeout a check may get, in seconds (matrix.schema.json says the same for smoke.timeouts).
MAX_TIMEOUT = 7200


def load_schema() -> dict[str, Any]:
    """The JSON Schema of matrix.yaml: ``matrix.schema.json``, package data of ``matrixtool.model``."""
    text = importlib.resources.files("matrixtool.model").joinpath(SCHEMA_NAME).read_text(encoding="utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema


def load_matrix(path: Path = DEFAULT_MATRIX) -> Matrix:
    """Read, validate and convert ``path``.

    Raises:
        ConfigError: the file is missing, not a regular file, too large, not UTF-8, is not YAML (duplicate
            keys, non-string keys, alias bombs included), or breaks the schema or a semantic rule;
            ``problems`` holds one line per problem (``variants.cpu.tourch: unknown key; did you mean 'torch'?``).
    """
    data = parse_yaml(read_config_text(path), str(path))
    if data is None:
        raise ConfigError(str(path), ["the file is empty; a matrix file has schema_version and variants (README)"])
    try:
        problems = validate(data)
    except RecursionError as exc:
        raise ConfigError(str(path), ["nested too deeply to be a matrix file"]) from exc
    if problems:
        raise ConfigError(str(path), problems)
    resolved, _ = resolve_extends(data)
    return _convert(resolved, path)


def validate(data: Any) -> list[str]:
    """Every problem of a parsed matrix document, as ``key.path: message`` lines (empty: valid).

    The file as written is checked against the schema first (an ``extends`` variant may leave keys out),
    then ``extends`` is resolved (``resolve_extends``) and every resolved variant is checked whole.
    """
    schema = load_schema()
    validator = jsonschema.Draft202012Validator(schema)

    def schema_problems(doc: Any) -> list[str]:
        problems: list[str] = []
        for error in sorted(validator.iter_errors(doc), key=lambda e: [str(p) for p in e.absolute_path]):
            problems.extend(_describe(error, schema))
        return problems

    own = _string_problems(data, [])
    # One message per value: the schema's word on a key the whole-document rules already refused is dropped.
    refused = {p.split(": ", 1)[0] for p in own}
    problems = own + [p for p in schema_problems(data) if p.split(": ", 1)[0] not in refused] + profile_problems(data)
    if problems:
        return problems
    resolved, problems = resolve_extends(data)
    if problems:
        return problems
    return schema_problems(resolved) or _semantic_problems(resolved)


def _merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with ``override`` on top: mappings merge key by key (recursively); any other value replaces."""
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def resolve_extends(data: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """``data`` with every variant's ``extends: <other variant>`` resolved, and the problems found.

    A variant that extends another starts from that variant's resolved keys; its own keys override them,
    mappings key by key (``smoke: {timeouts: {...}}`` changes only the timeouts named), lists and scalars whole
    (as cibuildwheel's overrides cascade). Chains are allowed; an unknown base or a cycle is a problem
    (``variants.a.extends: ...``). ``extends`` itself is not in the result.
    """
    variants: Mapping[str, Any] = data.get("variants") or {}
    problems: list[str] = []
    resolved: dict[str, dict[str, Any]] = {}

    def resolve(name: str, chain: tuple[str, ...]) -> dict[str, Any] | None:
        if name in resolved:
            return resolved[name]
        own = dict(variants[name])
        base_name = own.pop("extends", None)
        if base_name is None:
            resolved[name] = own
            return own
        if base_name not in variants:
            close = difflib.get_close_matches(str(base_name), [str(n) for n in variants], n=1)
            hint = f"did you mean '{close[0]}'?" if close else f"variants: {', '.join(str(n) for n in variants)}"
            problems.append(f"variants.{name}.extends: no variant '{base_name}' to extend; {hint}")
            return None
        if base_name in chain:
            cycle = " -> ".join([*chain[chain.index(base_name) :], base_name])
            problems.append(f"variants.{chain[0]}.extends: a cycle ({cycle}); one variant of it must not extend")
            return None
        base = resolve(base_name, (*chain, base_name))
        if base is None:
            return None
        resolved[name] = _merge(base, own)
        return resolved[name]

    for name in variants:
        if name not in resolved:
            resolve(name, (name,))
    if problems:
        return dict(data), sorted(set(problems))
    return {**data, "variants": {name: resolved[name] for name in variants}}, []


def _show(value: str, limit: int = 60) -> str:
    return repr(value if len(value) <= limit else value[:limit] + "…")


def _string_problems(data: Any, path: list[Any]) -> list[str]:
    """Whole-document rules for every string, key or value: printable (no newline, tab, NUL, escape or
    other control or format character) and at most ``MAX_STRING_LENGTH`` characters (URLs
    ``MAX_URL_LENGTH``). A value that reaches a Dockerfile can therefore never start a new line there.
    Every number is finite (YAML's ``.nan``, ``.inf`` are refused wherever they stand)."""
    problems: list[str] = []
    if isinstance(data, dict):
        for key, value in data.items():
            if isinstance(key, str):
                problems += _one_string(key, [*path, key], is_key=True)
            problems += _string_problems(value, [*path, key])
    elif isinstance(data, list):
        for i, item in enumerate(data):
            problems += _string_problems(item, [*path, i])
    elif isinstance(data, str):
        problems += _one_string(data, path, is_key=False)
    elif isinstance(data, float) and not math.isfinite(data):
        # YAML's .nan/.inf: NaN passes every schema bound (nan > 100 is False) and crashed later in round().
        problems.append(f"{_key_path(path)}: {data!r} is not a number this file can hold; write a finite number")
    return problems


def _one_string(value: str, path: list[Any], *, is_key: bool) -> list[str]:
    where = _key_path(path[:-1] if is_key else path)
    what = f"key {_show(value)}" if is_key else _show(value)
    is_url = any(p in ("url", "extra_urls") for p in path[-2:]) and not is_key
    limit = MAX_URL_LENGTH if is_url else MAX_STRING_LENGTH
    bad = next((c for c in value if not c.isprintable()), None)
    if bad is not None:
        return [
            f"{where}: {what} holds the control character {bad!r} at position {value.index(bad)}; "
            "values are single lines of printable text (no newline, tab or escape)"
        ]
    if len(value) > limit:
        return [f"{where}: {what} is {len(value)} characters long; at most {limit}"]
    return []


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


def parse_size(text: str) -> int:
    """Bytes of a size written as a number and a unit: ``"3GiB"`` -> 3221225472, ``"2500MB"`` -> 2500000000,
    ``"2.5 GB"`` -> 2500000000 (units: ``SIZE_UNITS``, case as written there; one optional space).

    Raises:
        ValueError: not such a size, not above zero, or above ``MAX_SIZE_BYTES``; the message says what to
            write instead.
    """
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


def _key_path(parts: Iterable[Any]) -> str:
    path = ".".join(str(p) for p in parts)
    return path or "(top level)"


def _allowed_keys(error: jsonschema.ValidationError, schema: dict[str, Any]) -> list[str]:
    sub = error.schema if isinstance(error.schema, dict) else {}
    return sorted(sub.get("properties", {}))


def _describe(error: jsonschema.ValidationError, schema: dict[str, Any]) -> list[str]:
    where = _key_path(error.absolute_path)
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        allowed = _allowed_keys(error, schema)
        out = []
        for key in sorted(set(error.instance) - set(allowed)):
            close = difflib.get_close_matches(str(key), allowed, n=1)
            hint = f"; did you mean '{close[0]}'?" if close else f"; allowed keys: {', '.join(allowed)}"
            out.append(f"{_key_path([*error.absolute_path, key])}: unknown key{hint}")
        return out
    if error.validator == "not" and where == "variants":
        return [f"variants.{error.instance}: '{error.instance}' is reserved (it selects variants); rename the variant"]
    if error.validator == "required":
        return [f"{where}: {error.message}"]
    if error.validator == "enum":
        choices = [str(v) for v in error.validator_value]  # type: ignore[union-attr]
        close = difflib.get_close_matches(str(error.instance), choices, n=1)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        listed = ", ".join(repr(v) for v in choices)
        return [f"{where}: {error.instance!r} is not one of {listed}{hint}"]
    return [f"{where}: {error.message}"]


def _semantic_problems(data: Mapping[str, Any]) -> list[str]:
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
            problems.append(f"{at}.{key}: {_show(value)} must match {pattern.pattern} as a whole")
        elif pattern is _VERSION and not _is_pep440(value):
            problems.append(f"{at}.{key}: {_show(value)} is not a PEP 440 version (such as 0.32.0 or 2.13.0+cpu)")
    problem = image_problem(variant["base_image"])
    if problem is not None:
        problems.append(f"{at}.base_image: {_show(variant['base_image'])} {problem}")
    urls = [("index.url", variant["index"]["url"])]
    urls += [(f"index.extra_urls.{i}", u) for i, u in enumerate(variant["index"].get("extra_urls", []))]
    for key, url in urls:
        problem = url_problem(url)
        if problem is not None:
            problems.append(f"{at}.{key}: {_show(url)} {problem}")
    for i, line in enumerate(variant["index"].get("overrides", [])):
        try:
            Requirement(line)
        except InvalidRequirement as exc:
            problems.append(
                f"{at}.index.overrides.{i}: {_show(line)} is not a PEP 508 requirement ({str(exc).splitlines()[0]})"
            )
    return problems


def _convert(data: Mapping[str, Any], source: Path) -> Matrix:
    variants = []
    shared_profiles = data.get("profiles") or {}
    for name, v in data["variants"].items():
        index = v["index"]
        runner = v["runner"]
        variants.append(
            Variant(
                name=name,
                description=v.get("description", ""),
                accelerator=Accelerator(v["accelerator"]),
                platforms=tuple(Platform.parse(p) for p in v["platforms"]),
                base_image=v["base_image"],
                stand_in_suite=v.get("stand_in", {}).get("suite"),
                python=v["python"],
                stand_in_python=v.get("stand_in", {}).get("python"),
                torch=PackagePin(**v["torch"]),
                vllm=PackagePin(**v["vllm"]),
                dist_alias=PackagePin(package=v["dist_alias"]["name"], version=v["dist_alias"]["version"])
                if "dist_alias" in v
                else None,
                triton=TritonState(v["triton"]),
                triton_distribution=v.get("triton_distribution", "triton"),
                torch_build=Accelerator(v.get("torch_build", v["accelerator"])),
                env=dict(v.get("env", {})),
                index=IndexSettings(
                    url=index["url"],
                    extra_urls=tuple(index.get("extra_urls", ())),
                    wheelhouse=bool(index.get("wheelhouse", False)),
                    exclude=tuple(index.get("exclude", ())),
                    overrides=tuple(index.get("overrides", ())),
                ),
                runner=(runner,) if isinstance(runner, str) else tuple(runner),
                checks=resolve_checks(name, v)[0],
                accept_clashes=tuple(v.get("smoke", {}).get("accept_clashes", ())),
                profiles=merge_profiles(shared_profiles, v.get("profiles") or {}),
                publish_as=v.get("publish_as"),
                size_budget=parse_size(v["size_budget"]) if "size_budget" in v else None,
                size_budget_text=v.get("size_budget"),
                cuda_weight_reason=v.get("hygiene", {}).get("cuda_weight"),
                ready_budget_s=float(v["ready_budget"]) if "ready_budget" in v else None,
                stop_grace_s=int(v["stop_grace"]) if "stop_grace" in v else None,
            )
        )
    return Matrix(schema_version=data["schema_version"], variants=tuple(variants), source=source)
