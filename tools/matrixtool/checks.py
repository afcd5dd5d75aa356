"""The catalogue of smoke checks: what each proves, the failure classes it covers, its fix hint.

The checks themselves run *inside* the image (``incontainer/smoke_checks.py``); this module holds the
host-side facts the reports need. Failure classes are numbered as in ``docs/failure-classes.md``.
"""

from __future__ import annotations

from dataclasses import dataclass

from matrixtool.profiles import Condition as C


@dataclass(frozen=True, kw_only=True)
class CheckInfo:
    """Static facts about one smoke check.

    ``classes``: failure-class numbers it covers; ``reports``: public reports behind it (URLs);
    ``hint``: what to do when it fails (the in-image script may add a more specific one).
    ``affected_by``: the run conditions (deployment profiles) that can change its verdict beyond what
    ``run-conditions`` proves for every check (a usable temp dir, writable caches, a passwd entry or none);
    a profile other than ``default`` runs the check again only when it sets one of them differently.
    """

    name: str
    proves: str
    classes: tuple[int, ...]
    reports: tuple[str, ...]
    hint: str
    affected_by: frozenset[C] = frozenset({C.ENV})


# Conditions of the file system and identity: where caches and compiled kernels are written. model-runner and
# vllm-cli are not affected beyond run-conditions' proof: they import vLLM and read the tiny model from the
# tool's own tmpfs; offline-generate starts the whole engine (workers, IPC, compile cache) under them.
_FILES = frozenset({C.USER, C.READ_ONLY, C.TMPFS, C.ENV})


_VLLM = "https://github.com/vllm-project/vllm"

CHECKS: dict[str, CheckInfo] = {
    c.name: c
    for c in (
        CheckInfo(
            name="run-conditions",
            proves="the image works under the container's run conditions: a passwd entry or a cache dir that needs "
            "none, a usable temp dir, writable caches, an exec mount for inductor's kernels, the memory and CPU "
            "quota it sees, no hub access without a network",
            classes=(13,),
            reports=(
                "https://github.com/pytorch/pytorch/issues/140765",
                "https://github.com/pytorch/pytorch/issues/91005",
                f"{_VLLM}/issues/29233",
            ),
            hint='see the condition named in the diagnosis; README "Deployment profiles" lists each fix',
            affected_by=frozenset(C),
        ),
        CheckInfo(
            name="triton-import",
            proves="`import triton` behaves as the variant's Triton state promises (absent / present / "
            "required at the version torch pins, from one distribution)",
            classes=(3, 4, 5),
            reports=(f"{_VLLM}/issues/14888", "https://github.com/coreweave/ml-containers/issues/64"),
            hint="install exactly the triton that torch pins (see torch's Requires-Dist), or none on CPU/Arm; "
            "check with: python -c 'import triton'",
        ),
        CheckInfo(
            name="no-fake-triton",
            proves="after `import vllm`, sys.modules has no placeholder `triton`, and torch's "
            "'is triton available' agrees with importlib",
            classes=(2,),
            reports=(f"{_VLLM}/issues/17309", f"{_VLLM}/pull/17317"),
            hint="remove whatever plants a module object named 'triton' (a .pth file, sitecustomize, or "
            "vLLM < 0.9.0: upgrade vLLM)",
        ),
        CheckInfo(
            name="torch-family",
            proves="torch and every installed torchvision / torchaudio / torchcodec import together",
            classes=(6,),
            reports=("https://github.com/pytorch/vision/issues/8424",),
            hint="install the torch-family wheels built for this torch (same index and local version, e.g. "
            "+cpu), or uninstall the ones the image does not need",
        ),
        CheckInfo(
            name="inductor-compile",
            proves="torch.compile (inductor) compiles a small function and matches eager",
            classes=(8,),
            reports=("https://github.com/pytorch/pytorch/issues/116696", f"{_VLLM}/issues/27890"),
            hint="install a C++ compiler and the Python headers (g++, python3-dev) for the CPU backend, and "
            "the triton torch pins for GPUs",
            affected_by=_FILES,
        ),
        CheckInfo(
            name="model-runner",
            proves="vLLM's engine configuration validates with the image's default env, and forcing "
            "VLLM_USE_V2_MODEL_RUNNER=1 behaves as the Triton state predicts",
            classes=(1,),
            reports=(f"{_VLLM}/issues/57684", f"{_VLLM}/pull/55847"),
            hint="install the triton that torch pins, or set VLLM_USE_V2_MODEL_RUNNER=0 (or leave it unset); "
            "check with: python -c 'import triton'",
        ),
        CheckInfo(
            name="offline-generate",
            proves="offline greedy generation with a tiny model made in the container gives the same tokens "
            "eager and compiled",
            classes=(9,),
            reports=(f"{_VLLM}/issues/14888",),
            hint="read the engine log in the check output; on CPU check libnuma1, /dev/shm size "
            "(--shm-size) and VLLM_CPU_KVCACHE_SPACE",
            affected_by=_FILES | {C.NETWORK, C.MEMORY, C.CPUS},
        ),
        CheckInfo(
            name="vllm-cli",
            proves="`vllm --version` runs and prints the version the variant pins",
            classes=(10,),
            reports=(f"{_VLLM}/issues/15007",),
            hint="make sure the vllm console script is on PATH and its environment imports",
        ),
        CheckInfo(
            name="triton-drivers",
            proves="Triton's backends and active drivers give vLLM's HAS_TRITON the value the variant expects "
            "(exactly one active driver where Triton is required and a GPU is visible)",
            classes=(4,),
            reports=(f"{_VLLM}/pull/53530",),
            hint="install the triton build torch pins for this accelerator only (one distribution, no extra "
            "backends); on CPU/Arm images ship none",
        ),
        CheckInfo(
            name="triton-kernel",
            proves="a small Triton kernel compiles, launches on the GPU and computes the right result",
            classes=(4, 5),
            reports=("https://github.com/triton-lang/triton/issues/7594",),
            hint="install the triton that torch pins and make sure the GPU driver is visible in the container",
        ),
        CheckInfo(
            name="pip-check",
            proves="every installed distribution's requirements are met (those the variant excludes on purpose "
            "are listed, not failed)",
            classes=(7,),
            reports=(f"{_VLLM}/pull/16664",),
            hint="install the required versions, or exclude the package on purpose in matrix.yaml index.exclude",
        ),
        CheckInfo(
            name="native-libs",
            proves="no `not found` from ldd on torch's and vLLM's shared objects; every LD_PRELOAD path exists",
            classes=(11,),
            reports=(f"{_VLLM}/issues/18743", f"{_VLLM}/pull/37561"),
            hint="install the system packages providing the missing libraries (libnuma1 for libnuma.so.1); "
            "point LD_PRELOAD only at files that exist",
        ),
        CheckInfo(
            name="cpu-engine-settings",
            proves="VLLM_CPU_KVCACHE_SPACE and friends fit the container's memory",
            classes=(12,),
            reports=(f"{_VLLM}/issues/29233",),
            hint="set VLLM_CPU_KVCACHE_SPACE (GiB) well below the container's memory limit, or leave it unset",
            affected_by=frozenset({C.MEMORY, C.CPUS, C.ENV}),
        ),
        CheckInfo(
            name="cuda-weight",
            proves="a CPU variant carries no CUDA wheels (nvidia-*, cuda-*), no CUDA torch and no libcuda*.so*, "
            "or declares why (matrix.yaml hygiene.cuda_weight); lists each such package with its size",
            classes=(14,),
            reports=(
                "https://github.com/kyutai-labs/pocket-tts/pull/219",
                "https://github.com/data-apis/array-api-compat/issues/284",
            ),
            hint="install torch from PyTorch's CPU index (the +cpu wheel), pip uninstall the nvidia-*/cuda-* "
            'packages (and keep them out with index.exclude), or declare why: hygiene: {cuda_weight: "<reason>"}',
            affected_by=frozenset(),
        ),
    )
}
