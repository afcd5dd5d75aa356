"""Load and validate ``matrix.yaml`` into frozen values.

The whole file is validated before anything touches Docker: the JSON Schema (``matrix.schema.json``
at the repository root, also used by editors) and the semantic rules below; every problem is
collected with its key path and, for unknown keys, the nearest valid key.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from matrixtool.checks import CHECKS
from matrixtool.errors import ConfigError

REPO_ROOT = Path(__file__).resolve().parents[2]
# The Python each Debian suite a stand-in base can be made from ships (Debian's python3 package).
SUITE_PYTHON = {"bookworm": "3.11", "trixie": "3.13"}
SCHEMA_PATH = REPO_ROOT / "matrix.schema.json"
DEFAULT_MATRIX = REPO_ROOT / "matrix.yaml"


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
    platforms: tuple[str, ...]
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
    # The variant whose name this one is published under, as one multi-arch manifest list (matrix.yaml
    # publish_as); None: published under its own name.
    publish_as: str | None = None

    @property
    def publish_name(self) -> str:
        """The name of the published (multi-arch) image: ``publish_as``, else the variant's own name."""
        return self.publish_as or self.name

    def check(self, name: str) -> CheckSpec | None:
        """The enabled check called ``name``, or None."""
        return next((c for c in self.checks if c.name == name), None)


@dataclass(frozen=True, kw_only=True)
class Matrix:
    """The validated matrix: ``variants`` in file order, ``source`` the file it came from."""

    schema_version: int
    variants: tuple[Variant, ...]
    source: Path = field(default=DEFAULT_MATRIX)

    def names(self) -> list[str]:
        """Variant names in file order."""
        return [v.name for v in self.variants]


def load_schema() -> dict[str, Any]:
    """The JSON Schema of matrix.yaml, read from ``matrix.schema.json``."""
    with SCHEMA_PATH.open(encoding="utf-8") as f:
        schema: dict[str, Any] = json.load(f)
    return schema


def load_matrix(path: Path = DEFAULT_MATRIX) -> Matrix:
    """Read, validate and convert ``path``.

    Raises:
        ConfigError: the file is missing, is not YAML, or breaks the schema or a semantic rule;
            ``problems`` holds one line per problem (``variants.cpu.tourch: unknown key; did you mean 'torch'?``).
    """
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(str(path), [f"cannot read the file ({exc.strerror}); pass --matrix PATH"]) from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        raise ConfigError(str(path), [f"{where}not valid YAML ({getattr(exc, 'problem', exc)})"]) from exc
    problems = validate(data)
    if problems:
        raise ConfigError(str(path), problems)
    return _convert(data, path)


def validate(data: Any) -> list[str]:
    """Every problem of a parsed matrix document, as ``key.path: message`` lines (empty: valid)."""
    schema = load_schema()
    validator = jsonschema.Draft202012Validator(schema)
    problems: list[str] = []
    for error in sorted(validator.iter_errors(data), key=lambda e: [str(p) for p in e.absolute_path]):
        problems.extend(_describe(error, schema))
    if not problems:
        problems.extend(_semantic_problems(data))
    return problems


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


def _convert(data: Mapping[str, Any], source: Path) -> Matrix:
    variants = []
    for name, v in data["variants"].items():
        index = v["index"]
        runner = v["runner"]
        variants.append(
            Variant(
                name=name,
                description=v.get("description", ""),
                accelerator=Accelerator(v["accelerator"]),
                platforms=tuple(v["platforms"]),
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
                checks=tuple(CheckSpec(name=c, timeout=s["timeout"]) for c, s in v["smoke"]["checks"].items()),
                accept_clashes=tuple(v["smoke"].get("accept_clashes", ())),
                publish_as=v.get("publish_as"),
            )
        )
    return Matrix(schema_version=data["schema_version"], variants=tuple(variants), source=source)
