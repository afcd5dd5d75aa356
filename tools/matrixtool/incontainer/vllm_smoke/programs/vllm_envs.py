"""The installed vLLM's own registry of environment variables (``vllm/envs.py``'s ``environment_variables``),
read without importing vLLM (``import vllm.envs`` imports vllm and torch: 20 s in the cpu image; this: 0.1 s).

Prints ``MATRIX-VLLM-ENVS {json}``: ``path`` of envs.py; ``names`` (the registry's keys, by ``ast``); ``defaults``
{name: the string default of its ``os.getenv(name, "...")``}; ``flags`` {name: {accepted, lower, strip}} for a
getter that compares the value with string constants (``... .strip().lower() in ("1", "true")``, ``== "1"``): any
other value reads as false; ``rejected`` {name: "ValueError: ..."} for each variable of this process's environment
that vLLM's own getter refuses (envs.py run as a standalone module, each getter called); ``executed`` (False where
envs.py did not run standalone: ``error`` says why); ``error`` where envs.py was not found or not parsed.
Standard library only, Python >= 3.9."""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import sys
from typing import Any, Dict, List, Optional, Tuple


def _env_name(call: ast.AST) -> Tuple[Optional[str], Optional[str]]:
    """The variable an ``os.getenv(NAME, ...)`` / ``os.environ.get(NAME, ...)`` call reads, with its default."""
    if not isinstance(call, ast.Call) or not isinstance(call.func, ast.Attribute):
        return None, None
    if call.func.attr not in ("getenv", "get") or not call.args:
        return None, None
    first = call.args[0]
    if not isinstance(first, ast.Constant) or not isinstance(first.value, str):
        return None, None
    default = call.args[1] if len(call.args) > 1 else None
    if isinstance(default, ast.Constant) and isinstance(default.value, str):
        return first.value, default.value
    return first.value, None


def _flag(node: ast.AST) -> Optional[Dict[str, Any]]:
    """{accepted, lower, strip} of a getter ``<getenv(...)>[.strip()][.lower()] in (consts)`` / ``== const``."""
    for sub in ast.walk(node):
        if not isinstance(sub, ast.Compare) or len(sub.ops) != 1:
            continue
        op, right = sub.ops[0], sub.comparators[0]
        if isinstance(op, ast.In) and isinstance(right, (ast.Tuple, ast.List, ast.Set)):
            values = right.elts
        elif isinstance(op, ast.Eq):
            values = [right]
        else:
            continue
        consts = [v.value for v in values if isinstance(v, ast.Constant) and isinstance(v.value, str)]
        if not values or len(consts) != len(values):
            continue
        left, methods = sub.left, []
        while (
            isinstance(left, ast.Call) and isinstance(left.func, ast.Attribute) and left.func.attr in ("lower", "strip")
        ):
            methods.append(left.func.attr)
            left = left.func.value
        if _env_name(left)[0] is not None:
            return {"accepted": consts, "lower": "lower" in methods, "strip": "strip" in methods}
    return None


def _registry(tree: ast.Module) -> Optional[ast.Dict]:
    """The ``environment_variables`` dict node of envs.py's module body, or None."""
    target: ast.expr
    for node in tree.body:
        if isinstance(node, ast.AnnAssign):
            target, value = node.target, node.value
        elif isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        else:
            continue
        if isinstance(target, ast.Name) and target.id == "environment_variables" and isinstance(value, ast.Dict):
            return value
    return None


def _read(path: str) -> Dict[str, Any]:
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    found = _registry(tree)
    if found is None:
        return {"path": path, "error": "envs.py holds no environment_variables dict"}
    names: List[str] = []
    defaults: Dict[str, str] = {}
    flags: Dict[str, Any] = {}
    for key, value in zip(found.keys, found.values):
        if not isinstance(key, ast.Constant) or not isinstance(key.value, str):
            continue
        names.append(key.value)
        for sub in ast.walk(value):
            name, default = _env_name(sub)
            if name == key.value and default is not None:
                defaults[name] = default
                break
        flag = _flag(value)
        if flag is not None:
            flags[key.value] = flag
    return {"path": path, "names": names, "defaults": defaults, "flags": flags}


def _rejected(path: str, names: List[str]) -> Dict[str, str]:
    """{name: error} of the set variables whose getter raises, envs.py run standalone (no vllm package import)."""
    spec = importlib.util.spec_from_file_location("_matrix_vllm_envs", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"no loader for {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    getters = getattr(module, "environment_variables", {})
    out: Dict[str, str] = {}
    for name in names:
        if name in os.environ and name in getters:
            try:
                getters[name]()
            except Exception as exc:  # what vLLM raises on reading it: the reason it rejects the value
                out[name] = f"{type(exc).__name__}: {exc}"
    return out


def main() -> Dict[str, Any]:
    spec = importlib.util.find_spec("vllm")  # finds the package without importing it
    if spec is None or not spec.submodule_search_locations:
        return {"error": "vllm is not installed"}
    path = os.path.join(next(iter(spec.submodule_search_locations)), "envs.py")
    try:
        out = _read(path)
    except (OSError, SyntaxError, ValueError) as exc:
        return {"path": path, "error": f"{type(exc).__name__}: {exc}"}
    if "names" in out:
        try:
            out["rejected"], out["executed"] = _rejected(path, out["names"]), True
        except Exception as exc:  # envs.py needs more than the standard library at import: names only
            out["rejected"], out["executed"] = {}, False
            out["error"] = f"envs.py did not run standalone: {type(exc).__name__}: {exc}"
    return out


if __name__ == "__main__":
    sys.stdout.write("MATRIX-VLLM-ENVS " + json.dumps(main()) + "\n")
