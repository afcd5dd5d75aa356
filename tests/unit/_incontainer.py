"""The in-image package ``vllm_smoke`` as one flat namespace for the unit tests that look names up across its
modules (a test that calls one module's function imports that module: the package is typed)."""

from __future__ import annotations

import dataclasses
import importlib
from types import ModuleType
from typing import Any

MODULES: tuple[str, ...] = ("declarations", "results", "errortext", "installed", "toolkits", "children", "gpuprobe")
MODULES += ("runner", "catalogue", "conditions", "distributions", "nativelibs", "torchchecks", "tritonchecks")
MODULES += ("vllmchecks", "generation", "tinymodel", "tritonruntime", "cpuengine", "podlimits", "gpudriver", "elf")
MODULES += ("rocmbuild", "gpuarchs", "jittoolchain")


class _Flat:
    """Attribute lookup across the package's modules, in ``MODULES`` order; ``.<module>`` gives the module."""

    def __init__(self) -> None:
        self.modules: dict[str, ModuleType] = {
            name: importlib.import_module(f"matrixtool.incontainer.vllm_smoke.{name}") for name in MODULES
        }

    def __getattr__(self, name: str) -> Any:
        if name in self.modules:
            return self.modules[name]
        for module in self.modules.values():
            if hasattr(module, name):
                return getattr(module, name)
        raise AttributeError(name)


def incontainer() -> Any:
    """The package's modules as one namespace (see ``_Flat``)."""
    return _Flat()


def stub_check(monkeypatch: Any, name: str, function: Any) -> None:
    """Make check ``name`` run ``function`` for this test (its ``Declaration`` is frozen: a copy replaces it)."""
    declarations = importlib.import_module("matrixtool.incontainer.vllm_smoke.catalogue").DECLARATIONS
    monkeypatch.setitem(declarations, name, dataclasses.replace(declarations[name], function=function))
