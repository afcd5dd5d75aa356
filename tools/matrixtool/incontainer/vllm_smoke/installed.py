"""What this Python has installed: a distribution's version, the distributions that provide a module, the Python
headers package. Standard library only, Python >= 3.9."""

from __future__ import annotations

import glob
import importlib.metadata as metadata
import importlib.util
import os
import sys
from typing import List, Optional


def regular_package(module: str) -> bool:
    """True when ``module`` is found and is no namespace package (``google``, ``nvidia``: folders many
    distributions share, where a missing submodule is a missing distribution, e.g. protobuf for google.protobuf)."""
    try:
        spec = importlib.util.find_spec(module)
    except (ValueError, ImportError):
        return False
    return spec is not None and spec.origin not in (None, "namespace")


def python_dev_package() -> str:
    """Debian's headers package for this Python, e.g. ``python3.11-dev``."""
    return f"python{sys.version_info[0]}.{sys.version_info[1]}-dev"


def dist_version(name: str) -> Optional[str]:
    """The installed version of distribution ``name``, or None."""
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def providers_of(module: str) -> List[str]:
    """Distributions whose files provide top-level ``module`` (e.g. triton, pytorch-triton-rocm)."""
    if hasattr(metadata, "packages_distributions"):  # Python >= 3.10
        return sorted(set(metadata.packages_distributions().get(module, [])))
    found = set()
    for dist in metadata.distributions():
        for f in dist.files or []:
            if f.parts and (f.parts[0] == module or f.parts[0] == module + ".py"):
                found.add(dist.metadata["Name"])
                break
    return sorted(found)


def vllm_extensions() -> List[str]:
    """The native extensions of the installed vLLM (``vllm/_C*.so``, ``vllm/_*_C*.so`` and the like at its top
    level), found without importing it; [] where no vLLM is installed."""
    import importlib.util

    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        return []
    found = []
    for folder in spec.submodule_search_locations:
        found += sorted(glob.glob(os.path.join(folder, "_*.so")))
    return found
