"""The shape of a bundle's facts (``standalone.BUNDLE_FACTS``, written by ``tools/matrix bundle``): checked before the
run reads them, as the tool checks any file it reads, so a hand-edited bundle is one message naming the key path
(``serve.options.2``) and what it must be, never a traceback.

Standard library only, Python >= 3.9. ``problems`` returns every problem found (at most ``MAX_PROBLEMS``), in key
order.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Set, Tuple

MAX_PROBLEMS = 20
# The longest value shown in a message (a hand-edited value may be any length).
SHOWN = 60

_STR, _INT, _NUM, _BOOL, _NULL = "a string", "a whole number", "a number", "true or false", "null"
# {key: (the kinds it may be, whether it must be above 0)}
Keys = Mapping[str, Tuple[Tuple[str, ...], bool]]


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= SHOWN else text[: SHOWN - 1] + "…"


def _kind(value: object) -> str:
    """What ``value`` is, in JSON's words."""
    if value is None:
        return _NULL
    if isinstance(value, bool):
        return _BOOL
    if isinstance(value, int):
        return _INT
    if isinstance(value, float):
        return _NUM
    if isinstance(value, str):
        return _STR
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return type(value).__name__


def _is(value: object, kind: str) -> bool:
    if kind == _NUM:
        return not isinstance(value, bool) and isinstance(value, (int, float))
    if kind == _INT:
        return not isinstance(value, bool) and isinstance(value, int)
    return _kind(value) == kind


class _Checker:
    def __init__(self) -> None:
        self.found: List[str] = []

    def add(self, path: str, problem: str) -> None:
        if len(self.found) < MAX_PROBLEMS:
            self.found.append(f"{path or '(top)'}: {problem}")

    def value(self, path: str, value: Any, *kinds: str, positive: bool = False) -> bool:
        """Whether ``value`` is of one of ``kinds`` (and above 0 where ``positive``); a problem when not."""
        if not any(_is(value, k) for k in kinds):
            self.add(path, f"must be {' or '.join(kinds)}, not {_kind(value)} ({_shown(value)})")
            return False
        if positive and _is(value, _NUM) and value <= 0:
            self.add(path, f"must be above 0, not {_shown(value)}")
            return False
        return True

    def mapping(self, path: str, value: object, keys: Keys, required: bool = True) -> Optional[Dict[str, Any]]:
        """``value`` is a mapping; each key of ``keys`` (``{key: (kinds, positive)}``) present (when ``required``)
        and of its kind. Returns the mapping, or None."""
        if not isinstance(value, dict):
            self.add(path, f"must be a mapping, not {_kind(value)} ({_shown(value)})")
            return None
        for key, (kinds, positive) in keys.items():
            where = f"{path}.{key}" if path else key
            if key not in value:
                if required:
                    self.add(where, "is missing")
                continue
            self.value(where, value[key], *kinds, positive=positive)
        return value

    def child(self, top: Mapping[str, Any], key: str, keys: Keys) -> Optional[Dict[str, Any]]:
        """``top[key]`` checked by ``mapping``; a problem when it is missing."""
        if key not in top:
            self.add(key, "is missing")
            return None
        return self.mapping(key, top[key], keys)

    def strings(self, path: str, value: object) -> Optional[List[Any]]:
        """``value`` is a list of strings; returns it, or None."""
        if not isinstance(value, list):
            self.add(path, f"must be a list of strings, not {_kind(value)} ({_shown(value)})")
            return None
        ok = True
        for i, item in enumerate(value):
            ok = self.value(f"{path}.{i}", item, _STR) and ok
        return value if ok else None


_TOP: Keys = {
    "format": ((_INT,), False),
    "variant": ((_STR,), False),
    "accelerator": ((_STR,), False),
}
_PINS: Keys = {"vllm": ((_STR,), False), "torch": ((_STR,), False), "triton": ((_STR,), False)}
# What the run reads itself; the checks read the rest with defaults (``params.get``), each key typed when present.
_PARAMS: Keys = {
    "accelerator": ((_STR,), False),
    "host": ((_BOOL,), False),
    "suite": ((_STR,), False),
    "rerun": ((_BOOL,), False),
    "triton": ((_STR,), False),
}
_PARAMS_OPTIONAL: Keys = {
    "variant": ((_STR,), False),
    "torch_build": ((_STR,), False),
    "triton_distribution": ((_STR, _NULL), False),
    "vllm_version": ((_STR,), False),
    "torch_version": ((_STR,), False),
    "max_tokens": ((_INT,), True),
    "cuda_weight_reason": ((_STR, _NULL), False),
    "ready_budget_s": ((_NUM, _NULL), True),
}
_PARAMS_LISTS = ("gpu_archs", "exclude", "overrides", "accept_clashes", "entrypoint", "features_promise")
# Mappings of a name to a string (a feature left out: its reason).
_PARAMS_STRING_MAPS = ("features_leave_out",)
# Every key of ``params`` this module knows the shape of (``smoke.plan.check_params`` writes no other).
KNOWN_PARAMS = frozenset((*_PARAMS, *_PARAMS_OPTIONAL, *_PARAMS_LISTS, *_PARAMS_STRING_MAPS, "timeouts"))
_CHECK: Keys = {"name": ((_STR,), False), "timeout": ((_INT,), True)}
_SERVE: Keys = {
    "ready_timeout_s": ((_NUM,), True),
    "stop_grace_s": ((_NUM,), True),
    "ready_budget_s": ((_NUM, _NULL), True),
    "vllm_version": ((_STR,), False),
    "prompt": ((_STR,), False),
    "max_tokens": ((_INT,), True),
    "stream_tokens": ((_INT,), True),
    "first_chunk_s": ((_NUM,), True),
}


def problems(facts: object) -> List[str]:
    """Every way ``facts`` (the parsed JSON) is not what ``tools/matrix bundle`` writes: each a line
    ``KEY.PATH: what it must be``; empty when the shape is right. The ``format`` is the caller's to compare."""
    c = _Checker()
    top = c.mapping("", facts, _TOP)
    if top is None:
        return c.found
    c.child(top, "pins", _PINS)
    params = c.child(top, "params", _PARAMS)
    if params is not None:
        c.mapping("params", params, _PARAMS_OPTIONAL, required=False)
        for key in _PARAMS_LISTS:
            if key in params:
                c.strings(f"params.{key}", params[key])
        for key in _PARAMS_STRING_MAPS:
            if key in params:
                _string_map(c, f"params.{key}", params[key])
        if "timeouts" in params:
            c.value("params.timeouts", params["timeouts"], "a mapping")
    names = _checks(c, top)
    _groups(c, top, names)
    serve = c.child(top, "serve", _SERVE)
    if serve is not None:
        if "options" in serve:
            c.strings("serve.options", serve["options"])
        else:
            c.add("serve.options", "is missing")
        fraction = serve.get("gpu_memory_utilization")
        where = "serve.gpu_memory_utilization"
        if fraction is not None and c.value(where, fraction, _NUM, positive=True) and fraction > 1:
            c.add(where, f"must be at most 1 (a share of the GPU's memory), not {fraction}")
    return c.found


def _string_map(c: _Checker, path: str, value: object) -> None:
    """``value`` must be a mapping of names to strings."""
    if not isinstance(value, dict):
        c.add(path, f"must be a mapping of names to strings, not {_kind(value)} ({_shown(value)})")
        return
    for key, item in value.items():
        if not isinstance(item, str):
            c.add(f"{path}.{key}", f"must be a string, not {_kind(item)} ({_shown(item)})")


def _checks(c: _Checker, top: Mapping[str, Any]) -> Optional[Set[str]]:
    """The check names of ``top["checks"]`` (a list of ``{name, timeout}``), or None where it is no such list."""
    if "checks" not in top:
        c.add("checks", "is missing")
        return None
    checks = top["checks"]
    if not isinstance(checks, list) or not checks:
        c.add("checks", f"must be a non-empty list of {{name, timeout}}, not {_shown(checks)}")
        return None
    names: Set[str] = set()
    for i, check in enumerate(checks):
        got = c.mapping(f"checks.{i}", check, _CHECK)
        if got is not None and isinstance(got.get("name"), str):
            if got["name"] in names:
                c.add(f"checks.{i}.name", f"{_shown(got['name'])} is named twice")
            names.add(got["name"])
    return names


def _groups(c: _Checker, top: Mapping[str, Any], names: Optional[Set[str]]) -> None:
    """``top["groups"]``: a list of lists of check names, each a check of ``checks`` (when ``names`` is known)."""
    if "groups" not in top:
        c.add("groups", "is missing")
        return
    groups = top["groups"]
    if not isinstance(groups, list):
        c.add("groups", f"must be a list of lists of check names, not {_kind(groups)} ({_shown(groups)})")
        return
    for i, group in enumerate(groups):
        got = c.strings(f"groups.{i}", group)
        for j, name in enumerate(got or ()):
            if names is not None and name not in names:
                c.add(f"groups.{i}.{j}", f"{_shown(name)} is no check of 'checks'")
