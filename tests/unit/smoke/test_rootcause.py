"""One root cause across groups (rootcause.py): consequences become `skipped: <cause> failed`, and an unwritable
cache folder is traced to the root build step that made it. The texts come from real runs on derived images."""

from __future__ import annotations

from typing import Any

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
