"""Read and validate ``matrix.yaml``, whole, before anything touches Docker. The schema is the one file
``matrix.schema.json`` of this package (matrix.yaml's ``yaml-language-server`` line points editors at it); its
profile part is generated from ``conditions.ROWS`` by ``make docs`` (tools/docs_tables.py).
"""

from __future__ import annotations

import difflib
import importlib.resources
import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jsonschema

from matrixtool.core.errors import ConfigError
from matrixtool.incontainer.vllm_smoke.declarations import Accelerator
from matrixtool.model import cpufloor, schemawords
from matrixtool.model.model import (
    DEFAULT_MATRIX,
    IndexSettings,
    Matrix,
    PackagePin,
    Platform,
    TritonState,
    Variant,
)
from matrixtool.model.profiles import merge_profiles, profile_problems, promise_problems
from matrixtool.model.schemawords import key_path
from matrixtool.model.variantrules import parse_size, resolve_checks, semantic_problems, show
from matrixtool.model.yamlfile import parse_yaml, read_config_text

SCHEMA_NAME = "matrix.schema.json"
# Longest string value anywhere in matrix.yaml (a URL may be longer: MAX_URL_LENGTH).
MAX_STRING_LENGTH = 512
MAX_URL_LENGTH = 2048
# How many members of an ``extends`` cycle a problem names (the rest are counted).
CYCLE_SHOWN = 5


def load_schema() -> dict[str, Any]:
    """The JSON Schema of matrix.yaml: ``matrix.schema.json``, package data of ``matrixtool.model``."""
    text = importlib.resources.files("matrixtool.model").joinpath(SCHEMA_NAME).read_text(encoding="utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema


def load_matrix(path: Path = DEFAULT_MATRIX) -> Matrix:
    """Read, validate and convert ``path``. Raises ConfigError: the file is missing, not a regular file, too large, not
    UTF-8, is not YAML (duplicate keys, non-string keys, alias bombs included), or breaks the schema or a semantic rule;
    ``problems`` holds one line per problem (``variants.cpu.tourch: unknown key; did you mean 'torch'?``)."""
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
    """Every problem of a parsed matrix document, as ``key.path: message`` lines (empty: valid), all at once.

    The file as written is checked against the schema (a variant with ``extends`` may state any part of a mapping)
    and its profile values against ``conditions.ROWS``; then ``extends`` is resolved (``resolve_extends``) and each
    merged variant is checked whole against the schema, reporting only what its base does not already; then the
    rules a schema cannot say (``semantic_problems``) on every variant the schema found whole, and the promises of
    the profiles' names (``profiles.promise_problems``). At most ``MAX_PROBLEMS`` lines (``bounded``).
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
    if not isinstance(data, Mapping) or not isinstance(data.get("variants"), Mapping):
        return bounded(problems)
    if any(not isinstance(v, Mapping) for v in data["variants"].values()):
        return bounded(problems)
    said = {p.split(": ", 1)[0] for p in problems}
    if any(f"variants.{name}.extends" in said for name in data["variants"]):
        return bounded(problems)  # an ``extends`` that is no variant's name (a number, a list, ''): named once
    resolved, extends_problems = resolve_extends(data)
    problems += extends_problems
    if extends_problems:
        return bounded(problems)
    problems += _merged_problems(data, schema_problems(resolved), problems)
    bad = {_variant_of(p) for p in problems} - {None}
    # A variant that extends one with a problem holds the bad value too (NaN passes the schema's bounds).
    for name in data["variants"]:
        chain, base = [name], data["variants"][name].get("extends")
        while base in data["variants"] and base not in chain:
            chain.append(base)
            base = data["variants"][base].get("extends")
        if bad & set(chain):
            bad.add(name)
    whole = {
        name: v
        for name, v in resolved["variants"].items()
        if name not in bad and str(v.get("publish_as", name)) not in bad
    }
    problems += semantic_problems({**resolved, "variants": whole})
    problems += _own(data, promise_problems(resolved))
    return bounded(problems)


# The most problem lines one message lists (the rest are counted): a file with a 10,000-entry list of bad values
# is reported in a few kB, not in a line per entry.
MAX_PROBLEMS = 20


def bounded(problems: list[str]) -> list[str]:
    """``problems`` without repeats, at most ``MAX_PROBLEMS`` of them, then one line counting the others."""
    unique = list(dict.fromkeys(problems))
    if len(unique) <= MAX_PROBLEMS:
        return unique
    return [*unique[:MAX_PROBLEMS], f"... and {len(unique) - MAX_PROBLEMS} more problem(s); fix these and run again"]


def _variant_of(problem: str) -> str | None:
    """The variant a problem line is about (``variants.cpu.torch: ...``: ``cpu``), or None; a problem of the
    variant's own profiles leaves the variant's other keys whole."""
    key = problem.split(": ", 1)[0]
    parts = key.split(".")
    if parts[0] != "variants" or len(parts) < 2 or (len(parts) > 2 and parts[2] == "profiles"):
        return None
    return parts[1]


def _merged_problems(data: Mapping[str, Any], merged: list[str], reported: list[str]) -> list[str]:
    """The schema's problems of the merged variants that the file as written did not show: those of variants with
    ``extends`` (a variant without one is the same merged), less those it inherits (``_own``)."""
    variants: Mapping[str, Any] = data["variants"]
    seen = set(reported)
    fresh = [p for p in merged if p not in seen and "extends" in variants.get(_variant_of(p) or "", {})]
    return _own(data, fresh)


def _own(data: Mapping[str, Any], problems: list[str]) -> list[str]:
    """``problems`` less those of a variant that its base (or the base's base) has at the same key: an inherited
    value is reported where it is written."""
    variants: Mapping[str, Any] = data["variants"]
    found = set(problems)
    out = []
    for problem in problems:
        key = problem.split(": ", 1)[0]
        name = key.split(".")[1] if key.startswith("variants.") and key.count(".") >= 1 else ""
        rest = problem[len(f"variants.{name}") :]
        base, inherited = variants.get(name, {}).get("extends"), False
        for _ in range(len(variants)):
            if base not in variants:
                break
            inherited = inherited or f"variants.{base}{rest}" in found
            base = variants[base].get("extends")
        if not inherited:
            out.append(problem)
    return out


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
    cycles: set[frozenset[str]] = set()

    def resolve(name: str, chain: tuple[str, ...]) -> dict[str, Any] | None:
        if name in resolved:
            return resolved[name]
        own = dict(variants[name])
        base_name = own.pop("extends", None)
        if base_name is None:
            resolved[name] = own
            return own
        if not isinstance(base_name, str):
            problems.append(f"variants.{name}.extends: must be the name of another variant, as text")
            return None
        if base_name not in variants:
            close = difflib.get_close_matches(str(base_name), [str(n) for n in variants], n=1)
            hint = f"did you mean '{close[0]}'?" if close else f"variants: {', '.join(str(n) for n in variants)}"
            problems.append(f"variants.{name}.extends: no variant '{base_name}' to extend; {hint}")
            return None
        if base_name in chain:
            members = chain[chain.index(base_name) :]
            if frozenset(members) not in cycles:
                cycles.add(frozenset(members))
                shown = " -> ".join([*members[:CYCLE_SHOWN], *(["..."] if len(members) > CYCLE_SHOWN else [])])
                problems.append(
                    f"variants.{members[0]}.extends: a cycle of {len(members)} variant(s) ({shown} -> {members[0]}); "
                    "one variant of it must not extend"
                )
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
        return dict(data), problems
    return {**data, "variants": {name: resolved[name] for name in variants}}, []


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
        problems.append(f"{key_path(path)}: {data!r} is not a number this file can hold; write a finite number")
    return problems


def _one_string(value: str, path: list[Any], *, is_key: bool) -> list[str]:
    where = key_path(path[:-1] if is_key else path)
    what = f"key {show(value)}" if is_key else show(value)
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


def _allowed_keys(error: jsonschema.ValidationError, schema: dict[str, Any]) -> list[str]:
    sub = error.schema if isinstance(error.schema, dict) else {}
    return sorted(sub.get("properties", {}))


def _describe(error: jsonschema.ValidationError, schema: dict[str, Any]) -> list[str]:
    where = key_path(error.absolute_path)
    worded = schemawords.describe(error, limit=MAX_STRING_LENGTH)
    if worded is not None:
        return [worded]
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        allowed = _allowed_keys(error, schema)
        out = []
        for key in sorted(set(error.instance) - set(allowed)):
            close = difflib.get_close_matches(str(key), allowed, n=1)
            hint = f"; did you mean '{close[0]}'?" if close else f"; allowed keys: {', '.join(allowed)}"
            out.append(f"{key_path([*error.absolute_path, key])}: unknown key{hint}")
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
    return [f"{where}: {_short_message(error)}"]


def _short_message(error: jsonschema.ValidationError) -> str:
    """jsonschema's message with the value it quotes cut to ``show``'s length: a 10,000-entry list is named by its
    first entries and its length, not written out."""
    quoted = repr(error.instance)
    if len(quoted) <= 80:
        return error.message
    if isinstance(error.instance, (list, dict)):
        first = quoted[:60].rstrip(", ")
        short = f"{first}... ({len(error.instance)} entries)"
    else:
        short = show(str(error.instance))
    return error.message.replace(quoted, short)


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
                gpu_archs=tuple(v.get("gpu_archs", ())),
                features_promise=tuple(v.get("features", {}).get("promise", ())),
                features_leave_out=dict(v.get("features", {}).get("leave_out", {})),
                cpu_floor=cpufloor.resolve(
                    v.get("cpu_floor"), [p.split("/")[1] for p in v["platforms"]], v["accelerator"]
                ),
            )
        )
    return Matrix(schema_version=data["schema_version"], variants=tuple(variants), source=source)
