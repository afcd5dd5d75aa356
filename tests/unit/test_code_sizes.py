"""The sizes the code keeps, host and in-image alike: no module over 400 lines, no function over 80 lines, no function
with more than 8 parameters. Past a limit, split along a seam (a wing, a stage, a value that carries the arguments);
where something is long by nature, it goes in ``ALLOWED`` with its reason and its present size as a ceiling.

One test rather than a linter's rules: ruff checks arguments (``PLR0913``, ``max-args``) and statements
(``PLR0915``), not lines, and no linter of this project counts a module's or a function's lines; one ``ast`` walk
holds all three limits and one allow-list in one place. Measured: a module's lines as ``wc -l`` counts them; a
function's from its ``def`` to its last line (decorators, such as click's options, not counted); its parameters
every name it takes (``*args`` and ``**kwargs`` count one each) less ``self``/``cls``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# The code: the package (host wings and the in-image ``incontainer``), the scripts beside it and `make act`'s runner
# of the workflows (tools/act: run.py, its modules, the stand-in actions' scripts).
SOURCES = (ROOT / "tools" / "matrixtool", *sorted((ROOT / "tools").glob("*.py")), ROOT / "tools" / "act")

MODULE_LINES = 400
FUNCTION_LINES = 80
PARAMETERS = 8

# (path from the checkout, what: "module" or "<qualified name> lines|parameters") -> (ceiling, why it is longer).
ALLOWED: dict[tuple[str, str], tuple[int, str]] = {
    # A click command's callback takes one keyword per option (click's calling convention); its body makes the
    # command's frozen ``Args`` of them at once.
    ("tools/matrixtool/commands/kube.py", "command parameters"): (11, "click: one keyword per option"),
    ("tools/matrixtool/commands/push.py", "command parameters"): (9, "click: one keyword per option"),
    ("tools/matrixtool/commands/test.py", "command parameters"): (9, "click: one keyword per option"),
}


def _modules() -> Iterator[Path]:
    for source in SOURCES:
        yield from sorted(source.rglob("*.py")) if source.is_dir() else [source]


def _functions(node: ast.AST, prefix: str = "") -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    """Every function under ``node`` with its qualified name (``Class.method``, ``outer.inner``)."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
            yield prefix + child.name, child
            yield from _functions(child, f"{prefix}{child.name}.")
        elif isinstance(child, ast.ClassDef):
            yield from _functions(child, f"{prefix}{child.name}.")
        else:
            yield from _functions(child, prefix)


def _parameters(function: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    args = function.args
    named = [*args.posonlyargs, *args.args, *args.kwonlyargs]
    count = len(named) + (args.vararg is not None) + (args.kwarg is not None)
    return count - (bool(named) and named[0].arg in ("self", "cls"))


def oversized() -> dict[tuple[str, str], int]:
    """Every size past its limit: (path, what) -> the size."""
    found: dict[tuple[str, str], int] = {}
    for path in _modules():
        text = path.read_text(encoding="utf-8")
        name = path.relative_to(ROOT).as_posix()
        if len(text.splitlines()) > MODULE_LINES:
            found[name, "module"] = len(text.splitlines())
        for qualified, function in _functions(ast.parse(text, filename=name)):
            lines = (function.end_lineno or function.lineno) - function.lineno + 1
            if lines > FUNCTION_LINES:
                found[name, f"{qualified} lines"] = lines
            if _parameters(function) > PARAMETERS:
                found[name, f"{qualified} parameters"] = _parameters(function)
    return found


def test_no_module_function_or_parameter_list_is_past_its_limit() -> None:
    past = {key: size for key, size in oversized().items() if key not in ALLOWED or size > ALLOWED[key][0]}
    assert not past, (
        f"past the limits ({MODULE_LINES} lines a module, {FUNCTION_LINES} a function, {PARAMETERS} parameters): "
        f"{past}; split it along a seam (see docs/architecture.md, 'Sizes')"
    )


def test_every_allowance_is_still_needed() -> None:
    found = oversized()
    stale = sorted(key for key in ALLOWED if key not in found)
    assert not stale, f"within the limits now: remove {stale} from the allow-list"
