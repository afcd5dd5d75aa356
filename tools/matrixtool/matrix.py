"""Load and validate ``matrix.yaml`` into frozen values.

The whole file is validated before anything touches Docker: the JSON Schema (``matrix.schema.json``,
shipped inside this package; the copy at the repository root, which editors use, is kept identical by a
unit test) and the semantic rules below; every problem is collected with its key path and, for unknown
keys, the nearest valid key.
"""

from __future__ import annotations

import difflib
import importlib.resources
import json
import os
import re
import stat
import urllib.parse
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

import jsonschema
import yaml
import yaml.constructor
import yaml.nodes
from packaging.requirements import InvalidRequirement, Requirement

from matrixtool.checks import CHECKS
from matrixtool.errors import ConfigError
from matrixtool.profiles import Profile, merge_profiles, profile_problems
from matrixtool.reference import image_problem

# The checkout this package runs from (tools/matrixtool/ -> the repository root); meaningless once the
# package is installed from a wheel, where DEFAULT_MATRIX falls back to ./matrix.yaml.
REPO_ROOT = Path(__file__).resolve().parents[2]
# The Python each Debian suite a stand-in base can be made from ships (Debian's python3 package).
SUITE_PYTHON = {"bookworm": "3.11", "trixie": "3.13"}
SCHEMA_NAME = "matrix.schema.json"
# Templates are the checkout's, next to its matrix file (like images/, which is written there).
TEMPLATES_DIR_NAME = "templates"
DEFAULT_MATRIX = REPO_ROOT / "matrix.yaml" if (REPO_ROOT / "matrix.yaml").is_file() else Path("matrix.yaml")
# Bounds on what is read: a matrix file is a few KiB; a YAML alias bomb ("billion laughs") expands to
# billions of nodes from a few hundred bytes, so the expanded node count is bounded before any value is built.
MAX_FILE_BYTES = 1024 * 1024
MAX_YAML_NODES = 100_000
# Longest string value anywhere in matrix.yaml (a URL may be longer: MAX_URL_LENGTH).
MAX_STRING_LENGTH = 512
MAX_URL_LENGTH = 2048


class TritonState(str, Enum):
    """What a variant promises about Triton inside its image.

    ``absent``: no distribution provides ``triton`` (CPU and Arm: vllm#14888 says vLLM must work).
    ``present-unused``: installed, but vLLM cannot use it on this accelerator (``HAS_TRITON`` False).
    ``required``: installed at the version torch pins, the only distribution providing ``triton``.
    Source: docs/failure-classes.md classes 1-5.
    """

    ABSENT = "absent"
    PRESENT_UNUSED = "present-unused"
    REQUIRED = "required"


class Accelerator(str, Enum):
    """The device family a variant targets."""

    CPU = "cpu"
    CUDA = "cuda"
    ROCM = "rocm"


@dataclass(frozen=True, order=True)
class Platform:
    """An OCI platform: ``os``/``arch``[/``variant``] (``linux/amd64``, ``linux/arm64``, ``linux/arm/v7``).

    ``str()`` gives the form BuildKit, the engine and matrix.yaml use; ``parse`` reads it back.
    """

    os: str
    arch: str
    variant: str = ""

    @classmethod
    def parse(cls, text: str) -> Platform:
        """``linux/arm64`` -> ``Platform("linux", "arm64")``.

        Raises:
            ValueError: not two or three non-empty ``/``-separated parts.
        """
        parts = text.split("/")
        if len(parts) not in (2, 3) or not all(parts):
            raise ValueError(f"{text!r} is not an OS/ARCH[/VARIANT] platform")
        return cls(*parts)

    def __str__(self) -> str:
        return "/".join(p for p in (self.os, self.arch, self.variant) if p)


@dataclass(frozen=True, kw_only=True)
class PackagePin:
    """A distribution name and exact version, e.g. ``torch`` ``2.13.0+cpu``."""

    package: str
    version: str

    @property
    def requirement(self) -> str:
        """The PEP 508 requirement ``package==version``."""
        return f"{self.package}=={self.version}"


@dataclass(frozen=True, kw_only=True)
class IndexSettings:
    """Where the installer finds packages (``index`` in matrix.yaml)."""

    url: str
    extra_urls: tuple[str, ...] = ()
    wheelhouse: bool = False
    exclude: tuple[str, ...] = ()
    overrides: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class CheckSpec:
    """One smoke check enabled for a variant; ``timeout`` in seconds."""

    name: str
    timeout: int


@dataclass(frozen=True, kw_only=True)
class Variant:
    """One image variant of the matrix (a key under ``variants:``)."""

    name: str
    description: str
    accelerator: Accelerator
    platforms: tuple[Platform, ...]
    base_image: str
    stand_in_suite: str | None
    python: str
    # The Python of the stand-in suite when it differs from ``python`` (matrix.yaml stand_in.python).
    stand_in_python: str | None
    torch: PackagePin
    vllm: PackagePin
    dist_alias: PackagePin | None
    triton: TritonState
    triton_distribution: str
    # Which torch build the image carries (default: the accelerator's); torch-family checks it.
    torch_build: Accelerator
    env: Mapping[str, str]
    index: IndexSettings
    runner: tuple[str, ...]
    checks: tuple[CheckSpec, ...]
    # Files two distributions may both install (matrix.yaml smoke.accept_clashes; pip-check lists them).
    accept_clashes: tuple[str, ...] = ()
    # Deployment profiles (top-level `profiles` merged with the variant's own); `default` first.
    profiles: tuple[Profile, ...] = (Profile(name="default"),)
    # The largest image size allowed, in bytes, and as matrix.yaml writes it (size_budget; None: no budget).
    size_budget: int | None = None
    size_budget_text: str | None = None
    # Why this CPU variant carries CUDA weight on purpose (matrix.yaml hygiene.cuda_weight; cuda-weight shows it).
    cuda_weight_reason: str | None = None

    # The variant whose name this one is published under, as one multi-arch manifest list (matrix.yaml
    # publish_as); None: published under its own name.
    publish_as: str | None = None

    def profile(self, name: str) -> Profile | None:
        """The deployment profile called ``name``, or None."""
        return next((p for p in self.profiles if p.name == name), None)

    @property
    def publish_name(self) -> str:
        """The name of the published (multi-arch) image: ``publish_as``, else the variant's own name."""
        return self.publish_as or self.name


@dataclass(frozen=True, kw_only=True)
class Matrix:
    """The validated matrix: ``variants`` in file order, ``source`` the file it came from."""

    schema_version: int
    variants: tuple[Variant, ...]
    source: Path = field(default=DEFAULT_MATRIX)

    def names(self) -> list[str]:
        """Variant names in file order."""
        return [v.name for v in self.variants]

    @property
    def root(self) -> Path:
        """The folder of the matrix file: ``images/`` is written and ``templates/`` read there."""
        return self.source.parent

    @property
    def templates_dir(self) -> Path:
        """``templates/`` next to the matrix file."""
        return self.root / TEMPLATES_DIR_NAME


def load_schema() -> dict[str, Any]:
    """The JSON Schema of matrix.yaml: ``matrix.schema.json``, package data of ``matrixtool``."""
    text = importlib.resources.files("matrixtool").joinpath(SCHEMA_NAME).read_text(encoding="utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema


def read_config_text(path: Path, *, limit: int = MAX_FILE_BYTES, what: str = "--matrix FILE") -> str:
    """The UTF-8 text of the regular file ``path``, at most ``limit`` bytes (a leading BOM is dropped).

    Only a regular file is read: a FIFO, a device (``/dev/zero``), a socket or a folder is refused
    without reading it (opened non-blocking, so a FIFO with no writer cannot hang the tool).

    Raises:
        ConfigError: the file is missing or unreadable, not a regular file, over ``limit`` bytes, or not
            UTF-8 (naming the byte offset); the message says to pass ``what``.
    """
    name = str(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise ConfigError(name, [f"cannot read the file ({exc.strerror}); pass {what}"]) from exc
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        kind = (
            "a folder"
            if stat.S_ISDIR(mode)
            else "a FIFO"
            if stat.S_ISFIFO(mode)
            else "a device"
            if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
            else "a socket"
            if stat.S_ISSOCK(mode)
            else "not a regular file"
        )
        raise ConfigError(name, [f"is {kind}, not a regular file; pass {what}"])
    with os.fdopen(fd, "rb") as f:
        try:
            data = f.read(limit + 1)
        except OSError as exc:
            raise ConfigError(name, [f"cannot read the file ({exc.strerror}); pass {what}"]) from exc
    if len(data) > limit:
        raise ConfigError(name, [f"is larger than {limit} bytes; a matrix file is a few KiB: pass {what}"])
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            name, [f"is not UTF-8 (byte {exc.start}: {data[exc.start : exc.start + 1]!r}); save it as UTF-8"]
        ) from exc


# libyaml's parser where PyYAML was built with it (ten times faster), else the pure-Python one; both compose
# the same nodes, which the constructor below checks.
_BaseLoader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _StrictLoader(_BaseLoader):  # type: ignore[misc]
    """``yaml.SafeLoader`` that refuses duplicate keys and keys that are not strings (``no:``, ``123:``, ``~:``)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        if not isinstance(node, yaml.MappingNode):
            return super().construct_mapping(node, deep=deep)
        seen: dict[Any, yaml.Node] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # `<<: *base`: merged keys may be overridden, as YAML says
            key = self.construct_object(key_node, deep=deep)
            line = key_node.start_mark.line + 1
            if not isinstance(key, str):
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f"key {key_node.value!r} is read as {type(key).__name__} {key!r}, not as a name; "
                    f'quote it ("{key_node.value}":)',
                    key_node.start_mark,
                )
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f"duplicate key {key!r} (first on line {seen[key].start_mark.line + 1}, again on line {line}); "
                    "keep one",
                    key_node.start_mark,
                )
            seen[key] = key_node
        self.flatten_mapping(node)
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if not isinstance(key, str):
                raise yaml.constructor.ConstructorError(
                    None, None, f"merged key {key!r} is not a name; quote it", key_node.start_mark
                )
        mapping: dict[Any, Any] = super().construct_mapping(node, deep=deep)
        return mapping


def _expanded_nodes(root: yaml.Node, limit: int) -> int:
    """How many nodes ``root`` stands for once every alias is expanded; stops counting past ``limit``.

    Raises:
        ValueError: an alias refers to a node that holds it (a cycle).
    """
    sizes: dict[int, int] = {}
    active: set[int] = set()

    def size(node: yaml.Node) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in active:
            raise ValueError(f"line {node.start_mark.line + 1}: an alias refers to a node that contains it")
        active.add(key)
        total = 1
        if isinstance(node, yaml.SequenceNode):
            for child in node.value:
                total += size(child)
                if total > limit:
                    break
        elif isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                total += size(k) + size(v)
                if total > limit:
                    break
        active.discard(key)
        sizes[key] = total
        return total

    return size(root)


def parse_yaml(text: str, source: str) -> Any:
    """Parse one YAML document with ``_StrictLoader``, its alias expansion bounded by ``MAX_YAML_NODES``.

    Raises:
        ConfigError: not YAML, a duplicate or non-string key (both lines named), an alias cycle, or an
            expansion past the bound (an alias bomb), each with its line.
    """
    try:
        loader = _StrictLoader(text)
        try:
            node = loader.get_single_node()
            if node is None:
                return None
            try:
                expanded = _expanded_nodes(node, MAX_YAML_NODES)
            except ValueError as exc:
                raise ConfigError(source, [f"{exc}; remove the alias"]) from exc
            except RecursionError as exc:
                raise ConfigError(source, ["nested too deeply to be a matrix file"]) from exc
            if expanded > MAX_YAML_NODES:
                raise ConfigError(
                    source,
                    [
                        f"aliases expand to more than {MAX_YAML_NODES} YAML nodes (an alias bomb?); "
                        "write the values out or use fewer aliases"
                    ],
                )
            return loader.construct_document(node)
        finally:
            loader.dispose()
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        raise ConfigError(source, [f"{where}not valid YAML ({getattr(exc, 'problem', None) or exc})"]) from exc
    except RecursionError as exc:
        raise ConfigError(source, ["nested too deeply to be a matrix file"]) from exc


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

    problems = _string_problems(data, []) + schema_problems(data) + profile_problems(data)
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
    mappings key by key (``smoke: {checks: {...}}`` changes only the checks named), lists and scalars whole
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
    ``MAX_URL_LENGTH``). A value that reaches a Dockerfile can therefore never start a new line there."""
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
_SIZE_TEXT = re.compile(r"([0-9]+(?:\.[0-9]+)?) ?([A-Za-z]+)")


def parse_size(text: str) -> int:
    """Bytes of a size written as a number and a unit: ``"3GiB"`` -> 3221225472, ``"2500MB"`` -> 2500000000,
    ``"2.5 GB"`` -> 2500000000 (units: ``SIZE_UNITS``, case as written there; one optional space).

    Raises:
        ValueError: not such a size, or not above zero; the message says what to write instead.
    """
    match = _SIZE_TEXT.fullmatch(text) if isinstance(text, str) else None
    if match is None or match.group(2) not in SIZE_UNITS:
        raise ValueError(
            f'{text!r} is not a size; write a number and a unit, e.g. "3GiB" or "2500MB" '
            f"(units: {', '.join(SIZE_UNITS)})"
        )
    size = round(float(match.group(1)) * SIZE_UNITS[match.group(2)])
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
    """Rules a JSON Schema cannot say: smoke check names must be known to ``checks.CHECKS``."""
    problems: list[str] = []
    known = sorted(CHECKS)
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
        for check in variant["smoke"]["checks"]:
            if check not in CHECKS:
                close = difflib.get_close_matches(check, known, n=1)
                hint = f"did you mean '{close[0]}'?" if close else f"known checks: {', '.join(known)}"
                problems.append(f"variants.{name}.smoke.checks.{check}: unknown smoke check; {hint}")
    problems += _publish_as_problems(data["variants"])
    return problems


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
                checks=tuple(
                    CheckSpec(name=c, timeout=(s or {}).get("timeout", CHECKS[c].timeout))
                    for c, s in v["smoke"]["checks"].items()
                ),
                accept_clashes=tuple(v["smoke"].get("accept_clashes", ())),
                profiles=merge_profiles(shared_profiles, v.get("profiles") or {}),
                publish_as=v.get("publish_as"),
                size_budget=parse_size(v["size_budget"]) if "size_budget" in v else None,
                size_budget_text=v.get("size_budget"),
                cuda_weight_reason=v.get("hygiene", {}).get("cuda_weight"),
            )
        )
    return Matrix(schema_version=data["schema_version"], variants=tuple(variants), source=source)
