"""Is a GPU here: torch's view (probed in a child process), the device node that shows one is attached, and the
decorators that skip a check where a GPU or vLLM is missing. Standard library only, Python >= 3.9."""

from __future__ import annotations

import importlib.util
import json
import os
from typing import Optional, Tuple

from .children import run_python
from .declarations import CheckFunction, Outcome, Params
from .errortext import last_error_line
from .results import result

# torch's own words where it sees no GPU: the exception torch.cuda.init() raises (with a driver older than torch's
# CUDA: "The NVIDIA driver on your system is too old (found version 12020)"; with a libcuda of another driver than
# the kernel module: "Error 803: system has unsupported display driver / cuda driver combination").
_GPU_PROBE = (
    "import json, torch\n"
    "ok = torch.cuda.is_available()\n"
    "why = ''\n"
    "if not ok:\n"
    "    try:\n"
    "        torch.cuda.init()\n"
    "    except Exception as e:\n"
    "        why = ('%s: %s' % (type(e).__name__, e)).strip()\n"
    "print('MATRIX-GPU', ok, json.dumps(why))\n"
)


def gpu_probe() -> Tuple[Optional[bool], Optional[str]]:
    """(visible, error): whether torch sees a GPU (CUDA or ROCm: torch.cuda covers both), probed in a child
    process so a crashing ``import torch`` (seen under QEMU 7.2: SIGSEGV) cannot take this check down.
    ``visible`` is None, with ``error`` set, when torch does not import; False with ``error`` torch's reason
    (``torch.cuda.init()``'s exception, "" where it gave none)."""
    proc = run_python(_GPU_PROBE, timeout=600)
    for line in proc.stdout.splitlines():
        if line.startswith("MATRIX-GPU "):
            _, visible, why = line.split(" ", 2)
            return visible == "True", json.loads(why) if visible != "True" else None
    return None, last_error_line(proc.stderr) or f"exit {proc.returncode}"


def gpu_visible() -> bool:
    """True when torch sees a GPU; False when it sees none or does not import (see gpu_probe)."""
    return bool(gpu_probe()[0])


def attached_gpu(accelerator: str, dev: str = "/dev") -> Optional[str]:
    """The device node that shows a GPU of ``accelerator`` is attached here (``/dev/nvidiaN`` for cuda: a pod's
    device plugin or ``--gpus`` passes the GPU it allocated, whatever its number; ``/dev/kfd`` for rocm), or None."""
    try:
        names = sorted(os.listdir(dev))
    except OSError:
        return None
    if accelerator == "cuda":
        found = [n for n in names if n.startswith("nvidia") and n[len("nvidia") :].isdigit()]
        return os.path.join(dev, found[0]) if found else None
    return os.path.join(dev, "kfd") if accelerator == "rocm" and "kfd" in names else None


UNUSABLE_GPU_HINT = (
    "the process loads another libcuda.so.1 than the host driver's (see gpu-driver: a forward-compat folder on "
    "LD_LIBRARY_PATH or in /etc/ld.so.conf.d), or the host's driver is older than torch's CUDA (nvidia-smi "
    "names its version): use the host's driver libraries, or a driver that covers torch's CUDA"
)


def unusable_gpu(accelerator: str, probed: Optional[Tuple[Optional[bool], Optional[str]]] = None) -> Optional[str]:
    """A failure diagnosis where a GPU of ``accelerator`` is attached (a device node) but torch sees none: not
    "no GPU visible", which would skip the checks that use it. None otherwise. ``probed``: ``gpu_probe()``'s
    answer where the caller has one; else torch is probed here, only where a device node exists."""
    # cuda only: on ROCm the usual cause is access to /dev/dri and /dev/kfd (the render and video groups), which
    # this hint does not name; not yet seen on a ROCm machine.
    node = attached_gpu(accelerator) if accelerator == "cuda" else None
    if node is None:
        return None
    visible, why = probed if probed is not None else gpu_probe()
    if visible is not False:
        return None
    return f"a GPU is attached ({node}) but torch cannot use it: {why or 'torch.cuda.is_available() is False'}"


def needs_vllm(function: CheckFunction) -> CheckFunction:
    """Decorator: in host mode (params["host"]) a missing vLLM skips the check instead of failing it.

    Bare-metal GPU runners may check torch/triton before vLLM is installed (issue: GPU proof in host mode).
    """

    def wrapped(params: Params) -> Outcome:
        if params.get("host") and importlib.util.find_spec("vllm") is None:
            return result("skipped", "vLLM is not installed in this Python environment (host mode)")
        return function(params)

    return wrapped


def needs_gpu(function: CheckFunction) -> CheckFunction:
    """Decorator: on a GPU variant (params["accelerator"] is not "cpu") with no GPU visible, the check
    reports ``skipped: no GPU visible``: never a silent pass. A GPU attached that torch cannot use
    (``unusable_gpu``) and a torch that does not import are failures. On CPU variants the check always runs."""

    def wrapped(params: Params) -> Outcome:
        accelerator = params.get("accelerator", "cpu")
        if accelerator == "cpu":
            return function(params)
        visible, error = gpu_probe()
        if visible is None:
            return result("failed", f"`import torch` fails, so no GPU can be looked for: {error}", None)
        unusable = unusable_gpu(accelerator, (visible, error))
        if unusable:
            return result("failed", unusable, UNUSABLE_GPU_HINT)
        if not visible:
            return result(
                "skipped",
                f"no GPU visible (a {accelerator} variant: run on a host with a GPU, which then gets "
                + ("`--device /dev/kfd --device /dev/dri`)" if accelerator == "rocm" else "`--gpus all`)"),
            )
        return function(params)

    return wrapped
