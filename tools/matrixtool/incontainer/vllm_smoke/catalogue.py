"""Every check, in the declared order the reports keep: the family modules register them with
``declarations.check``.

Stdlib only at import time (the checks import torch/vLLM inside their functions), so the host reads the same
declarations (``matrixtool.model.checks``) that run inside the image.
"""

from __future__ import annotations

from . import (  # noqa: F401
    conditions,
    cpuengine,
    distributions,
    environment,
    features,
    generation,
    gpuarchs,
    gpudriver,
    hygiene,
    jittoolchain,
    nativelibs,
    rocmbuild,
    torchchecks,
    tritonchecks,
    tritonruntime,
    vllmchecks,
)
from .declarations import CATALOGUE

# The order of the report tables, the README's check table and a variant's checks without another order.
ORDER = (
    "triton-import",
    "run-conditions",
    "environment",
    "torch-import",
    "vllm-import",
    "tiny-model",
    "no-fake-triton",
    "torch-family",
    "inductor-compile",
    "model-runner",
    "offline-generate",
    "vllm-cli",
    "features",
    "serve",
    "triton-drivers",
    "triton-kernel",
    "pip-check",
    "native-libs",
    "cpu-engine-settings",
    "cuda-weight",
    "gpu-driver",
    "rocm-build",
    "gpu-archs",
    "jit-toolchain",
)
DECLARATIONS = {name: CATALOGUE[name] for name in ORDER} | {n: d for n, d in CATALOGUE.items() if n not in ORDER}
CHECKS = {name: d.function for name, d in DECLARATIONS.items()}
