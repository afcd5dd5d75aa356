"""GPU checks that need no GPU (vllm_smoke: gpudriver, rocmbuild, gpuarchs, jittoolchain, elf): their pure logic,
on the texts and settings
of real images (nvidia/cuda base images, vLLM's own image with cuda-compat on ld.so.conf, NixOS without
/sbin/ldconfig)."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest

from tests.unit._incontainer import incontainer


def _findings(**kw: Any) -> tuple[list[str], list[str]]:
    args: dict[str, Any] = {"ldconfig": True, "libcuda_env": None, "compat": [], "declared": None, "torch_cuda": None}
    return incontainer().driver_findings(**{**args, **kw})  # type: ignore[no-any-return]


def test_a_good_cuda_image_has_no_finding() -> None:
    # nvidia/cuda:13.0.2-base-ubuntu24.04 declares cuda>=13.0; PyPI's torch 2.14.0 is a CUDA 13.0 build.
    declared = incontainer().declared_cuda({"NVIDIA_REQUIRE_CUDA": "cuda>=13.0 brand=unknown,driver>=535"})
    assert declared == ((13, 0), "NVIDIA_REQUIRE_CUDA")
    assert _findings(declared=declared, torch_cuda="13.0") == ([], [])


def test_no_ldconfig_without_triton_libcuda_path_is_named_with_both_fixes() -> None:
    problems, fixes = _findings(ldconfig=False)
    assert "/sbin/ldconfig is missing and TRITON_LIBCUDA_PATH is unset" in problems[0]
    assert "libcuda_dirs()" in problems[0] and "libc-bin" in fixes[0] and "TRITON_LIBCUDA_PATH" in fixes[0]
    assert _findings(ldconfig=False, libcuda_env="/usr/lib/x86_64-linux-gnu") == ([], [])


def test_a_declared_cuda_older_than_torchs_is_named() -> None:
    declared = incontainer().declared_cuda({"CUDA_VERSION": "12.1.1"})
    problems, fixes = _findings(declared=declared, torch_cuda="12.8")
    assert "declares CUDA 12.1 (CUDA_VERSION) but torch is built for CUDA 12.8" in problems[0]
    assert "driver on your system is too old" in problems[0] and "cuda>=12.8" in fixes[0]
    assert _findings(declared=declared, torch_cuda=None) == ([], [])  # a CPU torch: nothing to compare


def test_forward_compat_libcuda_on_the_loaders_path_is_named(tmp_path: Path) -> None:
    mod = incontainer()
    conf = tmp_path / "ld.so.conf"
    (tmp_path / "ld.so.conf.d").mkdir()
    conf.write_text(f"include {tmp_path}/ld.so.conf.d/*.conf\n")
    (tmp_path / "ld.so.conf.d" / "00-cuda-compat.conf").write_text("/usr/local/cuda-12.9/compat  # vLLM image\n")
    (tmp_path / "ld.so.conf.d" / "x86_64-linux-gnu.conf").write_text("/usr/lib/x86_64-linux-gnu\n")
    dirs = mod.ld_conf_dirs(str(conf))
    assert dirs == ["/usr/local/cuda-12.9/compat", "/usr/lib/x86_64-linux-gnu"]
    # The loader takes the first folder holding a libcuda.so.1: LD_LIBRARY_PATH's, then ld.so.conf's.
    found = mod.compat_shadows("/usr/local/cuda/compat:/usr/local/nvidia/lib64", dirs, exists=lambda p: True)
    assert found == [("/usr/local/cuda/compat", "LD_LIBRARY_PATH")]
    # The host driver's folder first on LD_LIBRARY_PATH (the H200 host's /usr/local/nvidia/lib64): the compat
    # folder in ld.so.conf shadows nothing there, and CUDA worked on that host with it in place.
    assert mod.compat_shadows("/usr/local/nvidia/lib64:/usr/local/cuda/compat", dirs, exists=lambda p: True) == []
    # An image without a GPU: the compat folder of ld.so.conf is the only libcuda.so.1 the loader finds.
    only_compat = lambda p: "compat" in p  # noqa: E731
    assert mod.compat_shadows("/usr/local/nvidia/lib64", dirs, exists=only_compat) == [
        ("/usr/local/cuda-12.9/compat", "ld.so.conf")
    ]
    assert mod.compat_shadows("", dirs, exists=lambda p: False) == []
    problems, fixes = _findings(compat=found)
    assert "Error 803" in problems[0] and "/usr/local/cuda/compat (LD_LIBRARY_PATH" in problems[0]
    assert "driver on your system is too old" in problems[0] and "ld.so.conf.d" in fixes[0]


def test_the_compat_libcuda_names_its_driver(tmp_path: Path) -> None:
    mod = incontainer()
    (tmp_path / "libcuda.so.535.261.03").touch()
    (tmp_path / "libcuda.so.1").symlink_to("libcuda.so.535.261.03")
    assert mod.driver_of(str(tmp_path)) == "535.261.03"
    assert mod.driver_of(str(tmp_path / "none")) is None


def test_every_cache_of_the_gpu_libraries_is_known() -> None:
    mod = incontainer()
    # llm-d#1430: an arbitrary UID with HOME=/ and no TRITON_CACHE_DIR; FlashInfer's workspace under $HOME.
    bare = {"HOME": "/"}
    dirs = dict(mod.gpu_cache_dirs(bare, {"triton", "flashinfer", "deep_gemm"}, "cuda"))
    assert dirs == {
        "TRITON_CACHE_DIR": "/.triton/cache",
        "FLASHINFER_WORKSPACE_BASE": "/.cache/flashinfer",
        "DG_JIT_CACHE_DIR": "/.deep_gemm",
        "TORCH_EXTENSIONS_DIR": "/.cache/torch_extensions",
    }
    # The cuda variant's image: the template's cache root, matrix.yaml's env for FlashInfer and DeepGEMM.
    image = {
        "HOME": "/home/vllm",
        "XDG_CACHE_HOME": "/tmp/.cache",
        "TRITON_CACHE_DIR": "/tmp/.cache/triton",
        "FLASHINFER_WORKSPACE_BASE": "/tmp",
        "DG_JIT_CACHE_DIR": "/tmp/.cache/deep_gemm",
    }
    assert all(
        path.startswith("/tmp/.cache/") for _, path in mod.gpu_cache_dirs(image, {"triton", "flashinfer"}, "cuda")
    )
    assert mod.gpu_cache_dirs({"HOME": "/h", "TRITON_HOME": "/t"}, {"triton"}, "rocm")[0] == (
        "TRITON_CACHE_DIR",
        "/t/.triton/cache",
    )
    assert mod.gpu_cache_dirs(image, set(), "cpu") == []  # a CPU image without them: nothing more to check


def test_an_extension_linked_against_another_accelerators_runtime_is_named() -> None:
    mod = incontainer()
    cuda_build = {"/v/_C.abi3.so": ["libcudart.so.12", "libtorch.so", "libc.so.6"], "/v/_moe_C.abi3.so": ["libc.so.6"]}
    assert mod.foreign_links(cuda_build, "rocm") == {"/v/_C.abi3.so": ["libcudart.so.12"]}
    assert mod.foreign_links(cuda_build, "cuda") == {}
    assert mod.foreign_links({"/v/_C.abi3.so": ["libamdhip64.so.6"]}, "cuda") == {"/v/_C.abi3.so": ["libamdhip64.so.6"]}
    assert mod.foreign_links(cuda_build, "cpu") == {}


_DRIVER_API = set(incontainer().DRIVER_SYMBOLS)


def test_a_libcuda_is_known_by_its_soname_and_driver_api_not_its_name(tmp_path: Path) -> None:
    mod = incontainer()
    # NVIDIA's driver: SONAME libcuda.so.1 and the driver API torch and Triton call.
    assert (
        mod.not_a_driver("/x/libcuda.so.1", exports=lambda p: ("libcuda.so.1", _DRIVER_API | {"cuMemAlloc_v2"})) is None
    )
    # Another library renamed libcuda.so.1 (the H200 trial: a stand-in first on LD_LIBRARY_PATH passed before).
    why = mod.not_a_driver("/x/libcuda.so.1", exports=lambda p: ("libm.so.6", {"cos", "sin"}))
    assert "its SONAME is 'libm.so.6', not 'libcuda.so.1'" in why and "defines none of the driver API" in why
    assert "cuInit" in why and "cuGetProcAddress" in why
    partial = mod.not_a_driver("/x/libcuda.so.1", exports=lambda p: ("libcuda.so.1", {"cuInit", "cuDriverGetVersion"}))
    assert partial is not None and "defines 2 of the driver API" in partial and "cuLaunchKernel" in partial
    # Read for real: a text file and an empty one are no ELF object; libm is no driver.
    text = tmp_path / "libcuda.so.1"
    text.write_text("not an ELF file")
    assert mod.not_a_driver(str(text)) == "it is no ELF shared object"
    text.write_text("")
    assert mod.not_a_driver(str(text)) == "it is no ELF shared object"
    assert "its SONAME is 'libm.so.6'" in mod.not_a_driver("/lib/x86_64-linux-gnu/libm.so.6")
    soname, names = mod.elf_exports("/lib/x86_64-linux-gnu/libm.so.6")
    assert soname == "libm.so.6" and {"cos", "sin"} <= names and "printf" not in names  # imports are left out


def test_the_first_libcuda_follows_the_loaders_order() -> None:
    mod = incontainer()
    every = lambda p: True  # noqa: E731
    assert mod.first_libcuda("/opt/fake:/usr/local/nvidia/lib64", ["/etc/x"], exists=every) == (
        "/opt/fake/libcuda.so.1",
        "LD_LIBRARY_PATH",
    )
    assert mod.first_libcuda("", ["/usr/local/cuda/compat"], exists=every) == (
        "/usr/local/cuda/compat/libcuda.so.1",
        "ld.so.conf",
    )
    only_system = lambda p: p == "/usr/lib/x86_64-linux-gnu/libcuda.so.1"  # noqa: E731
    assert mod.first_libcuda("/opt/a", [], exists=only_system) == (
        "/usr/lib/x86_64-linux-gnu/libcuda.so.1",
        "the system folders",
    )
    assert mod.first_libcuda("/opt/a", ["/b"], exists=lambda p: False) is None  # no GPU: nothing mounted


def test_a_libcuda_that_is_no_driver_first_on_the_path_is_named_with_its_fix() -> None:
    why = "its SONAME is 'libm.so.6', not 'libcuda.so.1'"
    problems, fixes = _findings(libcuda=("/opt/fake/libcuda.so.1", "LD_LIBRARY_PATH", why))
    assert "/opt/fake/libcuda.so.1 (LD_LIBRARY_PATH), is not NVIDIA's driver: " + why in problems[0]
    assert "Found no NVIDIA driver on your system" in problems[0]
    assert "take /opt/fake out of LD_LIBRARY_PATH" in fixes[0]


def test_an_ldconfig_that_is_not_executable_is_named_with_permission_error() -> None:
    problems, fixes = _findings(ldconfig="not executable", uid=1000)
    assert "/sbin/ldconfig is present but not executable by this user (uid 1000)" in problems[0]
    assert "PermissionError: [Errno 13] Permission denied: '/sbin/ldconfig'" in problems[0]
    assert "FileNotFoundError" not in problems[0] and "chmod 755 /sbin/ldconfig" in fixes[0]
    assert _findings(ldconfig="not executable", libcuda_env="/usr/lib/x86_64-linux-gnu") == ([], [])
    assert "is missing" in _findings(ldconfig="missing")[0][0]
    assert _findings(ldconfig="ok") == ([], [])


def test_the_state_of_ldconfig_tells_missing_from_not_executable(tmp_path: Path) -> None:
    mod = incontainer()
    tool = tmp_path / "ldconfig"
    assert mod.ldconfig_state(str(tool)) == "missing"
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o644)
    assert mod.ldconfig_state(str(tool)) == "not executable"
    tool.chmod(0o755)
    assert mod.ldconfig_state(str(tool)) == "ok"


def test_a_driver_folder_off_the_loaders_path_is_named() -> None:
    mod = incontainer()
    nvidia = "/usr/local/nvidia/lib64"
    mounted = lambda p: p == f"{nvidia}/libcuda.so.1"  # noqa: E731
    # A device plugin mounted the driver there, a derived image's LD_LIBRARY_PATH dropped it: nothing else found.
    assert mod.driver_off_path("/opt/vendor/lib", [], None, exists=mounted) == (nvidia, "mounted")
    assert mod.driver_off_path(f"/opt/vendor/lib:{nvidia}", [], ("x", "LD_LIBRARY_PATH"), exists=mounted) is None
    # The runtime also put a driver in the system folders (the NVIDIA Container Toolkit): found, nothing to name.
    assert (
        mod.driver_off_path("/opt/vendor/lib", [], ("/usr/lib/x86_64-linux-gnu/libcuda.so.1", "x"), exists=mounted)
        is None
    )
    # No GPU here: LD_LIBRARY_PATH set without the folders GKE's device plugin mounts the driver into.
    assert mod.driver_off_path("/opt/vendor/lib", [], None, exists=lambda p: False) == (nvidia, "unnamed")
    assert mod.driver_off_path("/opt/vendor/lib", [], None, exists=lambda p: False, image=False) is None  # host
    assert mod.driver_off_path("", [], None, exists=lambda p: False) is None  # unset: the base's cache stands
    assert mod.driver_off_path(f"/usr/local/nvidia/lib:{nvidia}", [], None, exists=lambda p: False) is None
    problems, fixes = _findings(off_path=(nvidia, "mounted"))
    assert f"{nvidia} holds libcuda.so.1 but is off the loader's path" in problems[0]
    assert "ENV LD_LIBRARY_PATH=...:/usr/local/nvidia/lib64:/usr/local/nvidia/lib" in fixes[0]
    problems, _ = _findings(off_path=(nvidia, "unnamed"))
    assert "LD_LIBRARY_PATH is set without /usr/local/nvidia/lib64 or /usr/local/nvidia/lib" in problems[0]
    assert "GKE" in problems[0]


def test_the_elf_reader_gives_what_the_loader_needs(tmp_path: Path) -> None:
    mod = incontainer()
    assert "libc.so.6" in mod.elf_needed("/lib/x86_64-linux-gnu/libm.so.6")
    text = tmp_path / "x.so"
    text.write_text("not an ELF file")
    with pytest.raises(ValueError, match="no ELF"):
        mod.elf_needed(str(text))
    cut = tmp_path / "cut.so"
    cut.write_bytes(Path("/lib/x86_64-linux-gnu/libm.so.6").read_bytes()[:64])
    with pytest.raises(ValueError, match="cut-short"):
        mod.elf_needed(str(cut))


def _fatbin(entries: list[tuple[int, int]]) -> bytes:
    """A CUDA fat binary of ``entries`` (kind 1 PTX / 2 ELF, arch), each with a 64-byte header and 16 bytes."""
    import struct

    body = b""
    for kind, arch in entries:
        header = struct.pack("<HHIQIIHHI", kind, 0x0101, 64, 16, 0, 0, 0, 0, arch).ljust(64, b"\0")
        body += header + b"\x11" * 16
    return struct.pack("<IHHQ", 0xBA55ED50, 1, 16, len(body)) + body


def test_fat_binary_entries_give_the_archs_of_sass_and_ptx() -> None:
    mod = incontainer()
    data = _fatbin([(2, 80), (2, 90), (1, 90)]) + b"\0" * 8 + _fatbin([(2, 100)])
    assert mod.fatbin_archs(io.BytesIO(data)) == {"sass": ["sm_80", "sm_90", "sm_100"], "ptx": ["sm_90"]}
    assert mod.fatbin_archs(io.BytesIO(b"no fat binary here")) == {"sass": [], "ptx": []}


def test_the_fat_binary_section_is_found_by_its_name() -> None:
    mod = incontainer()
    libm = "/lib/x86_64-linux-gnu/libm.so.6"
    offset, size = mod.elf_section(libm, ".dynstr")
    assert size > 0 and b"libc.so.6" in Path(libm).read_bytes()[offset : offset + size]
    assert mod.elf_section(libm, ".nv_fatbin") is None


def test_an_arch_is_covered_by_its_family_sass_or_older_ptx() -> None:
    covered = incontainer().covered
    assert covered("sm_89", ["sm_80"], [])  # sm_80 cubins run on Ada (8.x, minor not above)
    assert not covered("sm_90", ["sm_80", "sm_89"], [])  # another major: no SASS
    assert covered("sm_90", [], ["sm_80"])  # PTX: the driver compiles it for a newer GPU
    assert covered("sm_90", ["sm_90a"], [])
    assert not covered("sm_100", ["sm_90a"], ["sm_90a"])  # arch-specific code: that GPU only
    assert covered("sm_103", ["sm_100f"], []) and not covered("sm_120", ["sm_100f"], [])
    assert not covered("sm_120", ["sm_80", "sm_90", "sm_100"], [])  # vllm#29469: no Blackwell consumer kernels


def test_ptxas_help_lists_the_targets_triton_can_compile_for() -> None:
    # ptxas --help (CUDA 12.8), its --gpu-name option, shortened.
    text = (
        "--gpu-name <gpu name>                      (-arch)\n"
        "        Specify name of NVIDIA GPU to generate code for.\n"
        "        Allowed values for this option:  'sm_50','sm_52','sm_80','sm_86','sm_89','sm_90','sm_90a',\n"
        "        'sm_100','sm_100a','sm_120','sm_120a'.\n"
        "\n"
        "--help                                     (-h)\n"
    )
    targets = incontainer().ptxas_targets(text)
    assert "sm_120a" in targets and "sm_121a" not in targets and "sm_90" in targets
    assert incontainer().ptxas_targets("no such option") == []


def test_hip_code_objects_name_their_gfx_targets() -> None:
    data = b"__CLANG_OFFLOAD_BUNDLE__\0hipv4-amdgcn-amd-amdhsa--gfx90a\0hipv4-amdgcn-amd-amdhsa--gfx942:sramecc+\0"
    assert incontainer().hip_archs(io.BytesIO(b"x" * 50 + data), chunk=64) == ["gfx90a", "gfx942"]


def test_flashinfer_without_prebuilt_kernels_needs_nvcc_and_the_cuda_headers() -> None:
    mod = incontainer()
    none = {"cublasLt.h": None, "curand.h": None}
    base: dict[str, Any] = {
        "prebuilt": [],
        "nvcc": None,
        "headers": none,
        "c_compiler": "cc",
        "python_h": "/p/Python.h",
    }
    problems, fixes = mod.toolchain_problems(libraries={"flashinfer"}, **base)
    assert (
        "neither its prebuilt kernels (flashinfer-jit-cache, flashinfer-cubin) nor nvcc, cublasLt.h, curand.h"
        in (problems[0])
    )
    assert "pip install flashinfer-jit-cache" in fixes[0] and "nvidia-curand" in fixes[0]
    assert mod.toolchain_problems(libraries={"flashinfer"}, **{**base, "prebuilt": ["flashinfer-jit-cache"]}) == (
        [],
        [],
    )
    have = {"cublasLt.h": "/h/cublasLt.h", "curand.h": "/h/curand.h"}
    assert mod.toolchain_problems(libraries={"flashinfer"}, **{**base, "nvcc": "/n", "headers": have}) == ([], [])


def test_triton_needs_a_c_compiler_and_python_h_and_deep_gemm_nvcc() -> None:
    mod = incontainer()
    base: dict[str, Any] = {"prebuilt": [], "nvcc": None, "headers": {}, "c_compiler": None, "python_h": None}
    problems, fixes = mod.toolchain_problems(libraries={"triton", "deep_gemm"}, **base)
    assert "no a C compiler (cc/gcc, or CC) and no Python.h" in problems[0] and "apt-get install gcc" in fixes[0]
    assert "DeepGEMM compiles its kernels at run time with nvcc" in problems[1] and "VLLM_USE_DEEP_GEMM=0" in fixes[1]


def test_cuda_tools_and_headers_are_found_in_the_nvidia_wheels(tmp_path: Path) -> None:
    mod = incontainer()
    (tmp_path / "nvidia" / "cuda_nvcc" / "bin").mkdir(parents=True)
    nvcc = tmp_path / "nvidia" / "cuda_nvcc" / "bin" / "nvcc"
    nvcc.write_text("#!/bin/sh\n")
    nvcc.chmod(0o755)
    (tmp_path / "nvidia" / "curand" / "include").mkdir(parents=True)
    (tmp_path / "nvidia" / "curand" / "include" / "curand.h").write_text("")
    env = {"PATH": "/nonexistent", "CUDA_HOME": str(tmp_path / "no-cuda")}
    assert mod.find_tool("nvcc", env, [str(tmp_path)]) == str(nvcc)
    assert mod.find_header("curand.h", env, [str(tmp_path)]) == str(tmp_path / "nvidia/curand/include/curand.h")
    assert mod.find_header("cublasLt.h", env, [str(tmp_path)]) is None


class _Dist:
    """What pip-check reads of an installed distribution (importlib.metadata.Distribution)."""

    def __init__(self, name: str, version: str, requires: list[str]) -> None:
        self.metadata = {"Name": name}
        self.version = version
        self.requires = requires
        self.files: list[Any] = []


def test_pip_check_says_when_only_gpu_kernel_packages_are_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 26's H200 host: vLLM 0.25.0 installed without its large kernel packages."""
    mod = incontainer()
    installed = [
        _Dist("vllm", "0.25.0", ["flashinfer-python==0.5.3", "nvidia-cutlass-dsl>=4.3", "openai>=1.99.1"]),
        _Dist("openai", "2.1.0", []),
    ]
    monkeypatch.setattr(mod.distributions.metadata, "distributions", lambda path=None: installed)
    out = mod.check_pip_check({})
    assert out["status"] == "failed"
    assert out["diagnosis"].startswith("2 GPU-kernel package(s) required but not installed"), out
    assert "flashinfer-python (required by vllm 0.25.0)" in out["diagnosis"]
    assert "index.exclude" in out["hint"]
    installed[1] = _Dist("openai", "1.0.0", [])
    out = mod.check_pip_check({})
    assert "3 dependency conflict(s)" in out["diagnosis"] and "2 of them GPU-kernel packages" in out["diagnosis"]


# triton.compile's error for an arch its ptxas does not know (Triton 3.8.0, vllm-matrix/cuda, gpu_archs with sm_999).
_PTXAS_ERROR = (
    "PTXASError: PTXAS error: Internal Triton PTX codegen error\n`ptxas` stderr:\n"
    "ptxas-blackwell fatal   : Value 'sm_999a' is not defined for option 'gpu-name'\n\n"
    "Repro command: /opt/venv/lib/python3.11/site-packages/triton/backends/nvidia/bin/ptxas-blackwell -lineinfo -v "
    "--gpu-name=sm_999a /tmp/tmpp6qeycrz.ptx -o /tmp/tmpp6qeycrz.ptx.o\n"
)


def test_a_triton_compile_error_is_told_by_ptxas_fatal_line() -> None:
    mod = incontainer()
    assert (
        mod.aot_error_line(_PTXAS_ERROR)
        == "ptxas-blackwell fatal : Value 'sm_999a' is not defined for option 'gpu-name'"
    )
    assert mod.aot_error_line("\nCompilationError: at 1:4\nmore") == "CompilationError: at 1:4"
    assert mod.aot_error_line("") == "no error text"


def test_an_arch_triton_cannot_compile_for_fails_naming_it_the_version_and_the_fix() -> None:
    report = {"triton": "3.8.0", "results": {"sm_90": "ok", "sm_999": _PTXAS_ERROR}, "lacking": None}
    problems, fixes, compiled = incontainer().aot_findings(report, ["sm_90", "sm_999"])
    assert compiled is False and len(problems) == 1
    assert "Triton 3.8.0 cannot compile a kernel for sm_999" in problems[0]
    assert "Value 'sm_999a' is not defined for option 'gpu-name'" in problems[0]
    assert "newer than 3.8.0" in fixes[0] and "sm_999" in fixes[0] and "TRITON_PTXAS_PATH" in fixes[0]


def test_every_arch_compiled_is_proof_and_no_compile_falls_back_on_ptxas_help() -> None:
    mod = incontainer()
    ok = {"triton": "3.8.0", "results": {"sm_90": "ok", "sm_120": "ok"}, "lacking": None}
    assert mod.aot_findings(ok, ["sm_90", "sm_120"]) == ([], [], True)
    # An arch the program was not asked about (gfx*, or a report cut short) proves nothing either way.
    assert mod.aot_findings(ok, ["sm_90", "sm_100"]) == ([], [], None)
    old = {"triton": "3.1.0", "results": {}, "lacking": "TypeError: ASTSource takes neither constexprs nor constants"}
    assert mod.aot_findings(old, ["sm_90"]) == ([], [], None)
    assert mod.aot_findings(None, ["sm_90"]) == ([], [], None)


def test_compiles_that_all_fail_before_ptxas_are_this_tritons_api_not_the_archs() -> None:
    error = "TypeError: ASTSource.__init__() got an unexpected keyword argument 'constexprs'"
    results = {"sm_80": error, "sm_90": error}
    report: dict[str, Any] = {"triton": "3.2.0", "results": results, "lacking": None}
    assert incontainer().aot_findings(report, ["sm_80", "sm_90"]) == ([], [], None)
    # One arch compiled: the others' errors are theirs, whatever stage they failed at.
    results["sm_80"] = "ok"
    assert incontainer().aot_findings(report, ["sm_80", "sm_90"])[2] is False


# --- rocm-build: vLLM's ROCm release against torch's and the image's ------------------------------------------
# torch/version.py of PyTorch's 2.14.0+rocm6.4 wheel, as it writes it (hip: the HIP version and its build).
_TORCH_ROCM64 = """__version__ = '2.14.0+rocm6.4'
debug = False
cuda: Optional[str] = None
git_version = '0000000000000000000000000000000000000000'
hip: Optional[str] = '6.4.43482-0f2d60242'
xpu: Optional[str] = None
"""


def test_torch_hip_is_read_from_its_version_file_without_importing_torch() -> None:
    mod = incontainer()
    assert mod.hip_of_version_py(_TORCH_ROCM64) == "6.4.43482-0f2d60242"
    assert mod.hip_of_version_py(_TORCH_ROCM64.replace("'6.4.43482-0f2d60242'", "None")) is None


def test_a_torch_and_image_of_another_rocm_than_vllms_build_are_named_with_their_fixes() -> None:
    mod = incontainer()
    problems, fixes = mod.rocm_toolkit_problems("0.33.0+rocm721", "6.4.43482-0f2d60242", "7.2.1-81\n")
    assert problems == [
        "vLLM 0.33.0+rocm721 is built for ROCm 7.2, but torch for ROCm 6.4 (torch.version.hip 6.4.43482-0f2d60242): "
        "vLLM's extensions, compiled against another torch and ROCm, fail to load (undefined symbol) or misbehave"
    ]
    assert "vLLM's ROCm index" in fixes[0] and "Requires-Dist" in fixes[0]
    # An image of ROCm 6.4.1 does not decide rocm721 (7.2.1 or 7.21): neither reading is 6.4, so both are named.
    problems, fixes = mod.rocm_toolkit_problems("0.33.0+rocm721", "6.4.43482-0f2d60242", "6.4.1-103\n")
    assert problems[0].startswith(
        "vLLM 0.33.0+rocm721 is built for ROCm 7.2 or 7.21 (its label 'rocm721' reads as either), but torch for ROCm "
        "6.4 (torch.version.hip 6.4.43482-0f2d60242)"
    )
    assert "the image's ROCm is 6.4 (/opt/rocm/.info/version 6.4.1-103)" in problems[1]
    assert fixes[1] == "base the image on ROCm 7.2 or 7.21 (matrix.yaml base_image)"


def test_a_three_digit_vllm_label_is_read_by_the_images_dotted_rocm_never_guessed() -> None:
    """vLLM's rocm711 is 7.1.1 or 7.11: /opt/rocm/.info/version decides it; without it no reading is taken, and a
    mismatch is named only where none of them agrees."""
    mod = incontainer()
    assert mod.rocm_toolkit_problems("0.33.0+rocm711", "7.11.60000-abc", "7.11.0-1") == ([], [])
    assert mod.rocm_toolkit_problems("0.33.0+rocm711", "7.1.40000-abc", "7.1.1-1") == ([], [])
    assert mod.rocm_toolkit_problems("0.33.0+rocm711", "7.11.60000-abc", None) == ([], [])
    (problem,), _ = mod.rocm_toolkit_problems("0.33.0+rocm711", "7.1.40000-abc", "7.11.0-1")
    assert problem.startswith("vLLM 0.33.0+rocm711 is built for ROCm 7.11, but torch for ROCm 7.1")
    (problem,), _ = mod.rocm_toolkit_problems("0.33.0+rocm711", "6.4.43482-abc", None)
    assert problem.startswith(
        "vLLM 0.33.0+rocm711 is built for ROCm 7.1 or 7.11 (its label 'rocm711' reads as either), but torch for "
        "ROCm 6.4"
    )


def test_vllms_rocm_stack_agrees_and_what_names_no_rocm_is_left_out() -> None:
    mod = incontainer()
    # vLLM's torch 2.14.0+git<sha> built on ROCm 7.2.1: HIP 7.2.<build>.
    assert mod.rocm_toolkit_problems("0.33.0+rocm721", "7.2.53211-e4ba3ffb04", "7.2.1-81") == ([], [])
    # vLLM's dotless rocm100 is 10.0 beside an image of ROCm 10.0.0; beside another it names no one ROCm: compared
    # by both readings (1.0 and 10.0), never guessed.
    assert mod.rocm_toolkit_problems("0.40.0+rocm100", "10.0.60000-abc", "10.0.0-1") == ([], [])
    torch, image = mod.rocm_toolkit_problems("0.40.0+rocm100", "7.2.53211-e4ba3ffb04", "6.4.1")[0]
    assert torch.startswith("vLLM 0.40.0+rocm100 is built for ROCm 1.0 or 10.0 (its label 'rocm100' reads as either)")
    assert "but the image's ROCm is 6.4" in image
    assert mod.rocm_toolkit_problems("0.33.0+rocm721", None, None) == ([], [])
    assert mod.rocm_toolkit_problems("0.33.0", "7.2.53211-e4ba3ffb04", "7.2.1-81") == ([], [])
    assert mod.rocm_toolkit_problems(None, None, "7.2.1") == ([], [])
    # Without a vLLM label torch is the reference for the image's ROCm.
    (problem,), _ = mod.rocm_toolkit_problems("0.33.0", "7.2.53211-e4ba3ffb04", "6.4.1")
    assert problem.startswith("torch (HIP 7.2.53211-e4ba3ffb04) is built for ROCm 7.2, but the image's ROCm is 6.4")


def test_inductor_without_triton_names_torchs_error_not_dynamos_advice() -> None:
    """The H200 run with Triton hidden (2026-12-03): torch 2.11's inductor raises ``TritonMissing`` (no "Error" in
    its name) and Dynamo appends its advice; the diagnosis was that advice ("Set TORCHDYNAMO_VERBOSE=1 …")."""
    text = (
        "Traceback (most recent call last):\n"
        '  File "<string>", line 20, in check_inductor_compile\n'
        '    got = torch.compile(f, backend="inductor")(x)\n'
        "torch._inductor.exc.TritonMissing: Cannot find a working triton installation. Either the package is not "
        "installed or it is too old. More information on installing Triton can be found at: "
        "https://github.com/triton-lang/triton\n\n"
        "Set TORCHDYNAMO_VERBOSE=1 for the internal stack trace (please do this especially if you're reporting a bug "
        'to PyTorch). For even more developer context, set TORCH_LOGS="+dynamo"\n\n'
    )
    error = incontainer().last_error_line(text)
    assert error.startswith("torch._inductor.exc.TritonMissing: Cannot find a working triton installation")
    # An Error line still wins, and a message without a traceback is its last line, as before.
    assert incontainer().last_error_line(text + "RuntimeError: later\n") == "RuntimeError: later"
    assert incontainer().last_error_line("plain words\nNote: not an exception") == "Note: not an exception"
