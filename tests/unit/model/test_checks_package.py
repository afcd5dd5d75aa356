"""The in-image checks as a package: declarations next to the code, the docs table generated from them,
prerequisites (one root cause, one failure), suites, and the groups that share an interpreter."""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from matrixtool.cli import main
from matrixtool.core.errors import ConfigError, ExitCode
from matrixtool.incontainer.vllm_smoke.common import SUITES
from matrixtool.model import checks, select
from matrixtool.model.matrixfile import load_matrix
from matrixtool.model.model import CheckSpec
from matrixtool.model.profiles import Profile
from matrixtool.smoke import executor as smoke
from matrixtool.smoke import plan as smoke_plan
from matrixtool.smoke import result as smoke_result
from matrixtool.smoke import runners as smoke_runners
from tests.conftest import FIXTURE_MATRIX, REPO_ROOT
from tests.unit._incontainer import incontainer, stub_check

sys.path.insert(0, str(REPO_ROOT / "tools"))
import docs_tables


def test_the_generated_tables_of_docs_match_the_code() -> None:
    # The check table (declarations), the command table (click) and the exit-code table (errors.MEANING).
    assert docs_tables.drifted() == [], "a table in docs/ drifted: run tools/docs_tables.py"
    with pytest.raises(ValueError, match="markers"):
        docs_tables.rewritten("no markers here", "checks-table", "")


def test_a_drifted_table_is_named() -> None:
    text = (REPO_ROOT / "docs/checks.md").read_text(encoding="utf-8")
    stale = docs_tables.rewritten(text, "checks-table", "| an old table |\n")
    assert stale != text and "| an old table |" in stale


def test_the_module_map_levels_the_import_graph_and_refuses_a_circle(tmp_path: Path) -> None:
    (tmp_path / "core").mkdir()
    (tmp_path / "core" / "__init__.py").write_text('"""The core."""\n')
    (tmp_path / "core" / "errors.py").write_text('"""Errors."""\n')
    (tmp_path / "model.py").write_text("def load() -> None:\n    from matrixtool.core import errors\n")
    (tmp_path / "cli.py").write_text("from matrixtool import model\nfrom matrixtool.core.errors import X\n")
    assert docs_tables.module_map(tmp_path) == "```\n 0: core.errors\n 1: model\n 2: cli\n```\n"
    assert "- `core/`: The core. `errors`." in docs_tables.wings(tmp_path)
    (tmp_path / "core" / "errors.py").write_text("import matrixtool.cli\n")
    with pytest.raises(ValueError, match=r"circle: \['cli', 'core.errors', 'model'\]"):
        docs_tables.module_map(tmp_path)


def test_the_host_catalogue_is_the_packages_declarations() -> None:
    mod = incontainer()
    assert list(checks.CHECKS) == list(mod.DECLARATIONS) == list(mod.CHECKS)
    for name, info in checks.CHECKS.items():
        declared = mod.DECLARATIONS[name]
        assert info.hint == declared.hint and info.timeout == declared.timeout and info.needs == declared.needs
        assert all(n in checks.CHECKS for n in (*info.needs, *info.uses)), name
        assert info.suites and set(info.suites) <= set(SUITES)


def test_the_package_is_standard_library_only_at_import() -> None:
    """Every module of the package imports only the standard library (and its own modules) at top level: the
    host imports it, and it runs in images whatever they hold. Programs import torch/vLLM inside functions or
    as scripts run in a child Python."""
    root = smoke_runners.PACKAGE_DIR
    for path in root.rglob("*.py"):
        if path.parent.name == "programs" and path.name not in ("__init__.py", "make_model.py", "validate.py"):
            continue  # scripts run as child Pythons
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in tree.body:
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""]
            for name in names:
                top = name.split(".")[0]
                assert top == "__future__" or top in sys.stdlib_module_names, f"{path.name} imports {name}"


def test_a_failed_prerequisite_skips_its_dependents(monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    mod = incontainer()
    calls: list[str] = []

    def fails(params: dict[str, Any]) -> Any:
        calls.append("vllm-import")
        return mod.result("failed", "`import vllm` fails: ImportError: boom")

    def own(params: dict[str, Any]) -> Any:
        calls.append("own")
        return mod.result("failed", "a cascade")

    stub_check(monkeypatch, "torch-import", lambda p: mod.result("passed", "ok"))
    stub_check(monkeypatch, "vllm-import", fails)
    for name in ("model-runner", "offline-generate"):
        stub_check(monkeypatch, name, own)
    assert mod.main(["x", "run", "vllm-import,model-runner,offline-generate", "{}"]) == 0
    results = mod.parse_results(capsys.readouterr().out)
    assert results["vllm-import"]["status"] == "failed"
    for name in ("model-runner", "offline-generate"):
        assert (results[name]["status"], results[name]["diagnosis"]) == ("skipped", "vllm-import failed"), name
    assert calls == ["vllm-import"], "the prerequisite runs once per interpreter; its dependents never"


@pytest.mark.subprocess
def test_vllm_cli_skips_when_the_failure_is_vllms_import(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # vllm-cli runs in a group of its own and imports vLLM only when the console script fails: then a vLLM that
    # does not import is vllm-import's failure (reported in the vLLM group), not a second one.
    mod = incontainer()
    exe = tmp_path / "vllm"
    exe.write_text("#!/bin/sh\necho 'ImportError: boom' >&2\nexit 1\n")
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    params = {"vllm_version": "0.32.0", "accelerator": "cpu"}
    monkeypatch.setattr(mod.vllmchecks, "_vllm_imports", lambda: False)
    got = mod.DECLARATIONS["vllm-cli"].function(params)
    assert (got["status"], got["diagnosis"]) == ("skipped", "vllm-import failed")
    monkeypatch.setattr(mod.vllmchecks, "_vllm_imports", lambda: True)
    got = mod.DECLARATIONS["vllm-cli"].function(params)
    assert got["status"] == "failed" and "exits 1: ImportError: boom" in got["diagnosis"]


@pytest.mark.parametrize(
    ("params", "wanted"),
    [
        ({}, [("eager", True), ("compiled", True)]),
        ({"suite": "quick"}, [("eager", True)]),
        # A deployment profile's rerun: compiled only, with vLLM's own engine core and worker processes.
        ({"rerun": True}, [("compiled", False)]),
    ],
)
def test_generate_modes_follow_the_suite(monkeypatch: pytest.MonkeyPatch, params: dict[str, Any], wanted: Any) -> None:
    mod = incontainer()
    calls: list[tuple[str, bool]] = []

    def fake(mode: str, max_tokens: int, timeout: Any, in_process: bool) -> dict[str, Any]:
        calls.append((mode, in_process))
        return {"tokens": [[1] * max_tokens, [2] * max_tokens], "runner": "V1", "seconds": 1.0}

    monkeypatch.setattr(mod.vllmchecks, "_generate", fake)
    got = mod.vllmchecks.check_offline_generate({"max_tokens": 8, **params})
    assert got["status"] == "passed" and calls == wanted


def test_another_environment_is_validated_in_process_until_vllm_caches_its_env(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys
    import types

    mod = incontainer()
    envs = types.ModuleType("vllm.envs")
    monkeypatch.setitem(sys.modules, "vllm.envs", envs)
    assert not mod.vllmchecks._envs_cached()

    def cached(name: str) -> Any:
        return None

    cached.cache_clear = lambda: None  # type: ignore[attr-defined]  # functools.cache's mark (vllm/envs.py)
    setattr(envs, "__getattr__", cached)  # noqa: B010  # a module-level __getattr__, as vllm/envs.py has
    assert mod.vllmchecks._envs_cached()


def test_a_transitive_failure_names_the_check_that_failed(monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    mod = incontainer()
    stub_check(monkeypatch, "torch-import", lambda p: mod.result("failed", "no torch"))
    mod.main(["x", "run", "model-runner", "{}"])
    parsed = mod.parse_results(capsys.readouterr().out)["model-runner"]
    assert (parsed["status"], parsed["diagnosis"]) == ("skipped", "torch-import failed")


@pytest.mark.parametrize(
    ("error", "wanted"),
    [
        ("ModuleNotFoundError: No module named 'transformers'", "install transformers"),
        ("ModuleNotFoundError: No module named 'yaml.cyaml'", "install pyyaml"),
        ("ImportError: cannot import name 'triton_key' from 'triton.compiler' (/x)", "triton"),
    ],
)
def test_import_errors_name_the_package(error: str, wanted: str) -> None:
    assert wanted in incontainer().import_hint(error)


def test_compile_hints_follow_the_diagnosis() -> None:
    mod = incontainer()
    headers = "/tmp/torchinductor/x.cpp:1:10: fatal error: Python.h: No such file or directory"
    version = f"{sys.version_info[0]}.{sys.version_info[1]}"
    assert f"python{version}-dev" in mod.compile_hint(headers)
    compiler = "InvalidCxxCompiler: No working C++ compiler found in torch._inductor.config.cpp.cxx: (None, 'g++')"
    assert "apt-get install g++" in mod.compile_hint(compiler)
    assert mod.compile_hint("RuntimeError: something else") is None


def test_a_version_skew_hint_names_triton_only_for_triton() -> None:
    mod = incontainer()
    # yaml (pyyaml) is installed here and has no module yaml.nonexistent: a skew, and Triton is no part of it.
    assert "triton" not in mod.import_hint("ModuleNotFoundError: No module named 'yaml.nonexistent'")


def test_a_missing_gpu_kernel_package_is_named_with_the_setting_that_avoids_it() -> None:
    mod = incontainer()
    hint = mod.import_hint("ModuleNotFoundError: No module named 'flashinfer'")
    assert "pip install flashinfer-python" in hint and "VLLM_USE_FLASHINFER_SAMPLER=0" in hint
    assert "optional GPU-kernel package" in hint
    assert "VLLM_USE_DEEP_GEMM=0" in mod.import_hint("ModuleNotFoundError: No module named 'deep_gemm'")


@pytest.mark.parametrize(
    ("error", "wanted", "unwanted"),
    [
        # openai older than vLLM needs (the case): the hint names openai, never Triton.
        ("ImportError: cannot import name 'ResponseInputParam' from 'openai.types.responses' (/x)", "openai", "triton"),
        ("Model Runner V2 requires Triton.", "install the triton that torch pins", None),
        ("ModuleNotFoundError: No module named 'triton'", "VLLM_USE_V2_MODEL_RUNNER=0", None),
        ("max_model_len 4096 exceeds the model's 2048", "configuration error", "triton"),
    ],
)
def test_model_runner_names_triton_only_where_triton_is_the_cause(error: str, wanted: str, unwanted: Any) -> None:
    hint = incontainer().runner_hint(error)
    assert wanted in hint
    assert unwanted is None or unwanted not in hint.lower()


@pytest.mark.parametrize("accelerator", ["cpu", "cuda", "rocm"])
def test_the_engine_hint_fits_the_accelerator(accelerator: str) -> None:
    mod = incontainer()
    hint = mod.engine_hint("RuntimeError: Engine core initialization failed", {"accelerator": accelerator})
    assert ("libnuma1" in hint) == (accelerator == "cpu") and ("/dev/shm" in hint) == (accelerator == "cpu")
    flashinfer = mod.engine_hint(
        "RuntimeError: Engine core initialization failed (root cause: ModuleNotFoundError: No module named "
        "'flashinfer')",
        {"accelerator": accelerator},
    )
    assert "VLLM_USE_FLASHINFER_SAMPLER=0" in flashinfer and "libnuma1" not in flashinfer
    assert "apt-get install g++" in mod.engine_hint(
        "InductorError: InvalidCxxCompiler: No working C++ compiler found in torch._inductor.config.cpp.cxx: "
        "(None, 'g++')",
        {"accelerator": accelerator},
    )


def test_a_version_mismatch_names_both_versions_and_the_fix() -> None:
    hint = incontainer().version_hint("0.25.0", "0.33.0", {"variant": "cuda"})
    assert "vLLM 0.25.0 is installed, the variant pins 0.33.0" in hint
    assert "==0.33.0" in hint and "variants.cuda.vllm.version to 0.25.0" in hint


def test_compile_causes_are_one_key_per_missing_tool() -> None:
    mod = incontainer()
    compiler = "InvalidCxxCompiler: No working C++ compiler found in torch._inductor.config.cpp.cxx: (None, 'g++')"
    assert mod.compile_cause(compiler) == "c++-compiler"
    assert mod.compile_cause("x.cpp:1:10: fatal error: Python.h: No such file or directory") == "python-headers"
    assert mod.compile_cause("RuntimeError: Failed to find C compiler. Please specify via CC") == "c-compiler"
    assert mod.compile_cause("RuntimeError: something else") is None


def test_triton_drivers_says_when_vllm_is_installed_but_fails_to_import(monkeypatch: pytest.MonkeyPatch) -> None:
    mod = incontainer()
    monkeypatch.setattr(mod.tritonchecks.importlib.util, "find_spec", lambda name: object())
    said = mod.tritonchecks._no_has_triton({"vllm_error": "ImportError('boom')"})
    assert "installed but" in said and "boom" in said and "not installed" not in said


def test_quick_suite_leaves_out_compiled_generate_and_adds_prerequisites() -> None:
    cpu = next(v for v in load_matrix(FIXTURE_MATRIX).variants if v.name == "cpu")
    quick = [c.name for c in select.select_checks(cpu, [], [], "quick")]
    full = [c.name for c in select.select_checks(cpu, [], [], "full")]
    # offline-generate is in both: the quick suite runs its eager half only (test_generate_modes_follow_the_suite).
    assert "inductor-compile" not in quick and "model-runner" in quick and "offline-generate" in quick
    assert full == [c.name for c in cpu.checks]
    # --only picks checks whatever their suite, and brings their prerequisites.
    only = [c.name for c in select.select_checks(cpu, ["offline-generate"], [], "quick")]
    assert only == ["torch-import", "vllm-import", "tiny-model", "offline-generate"]
    with pytest.raises(ConfigError, match="'slow' is no suite"):
        select.select_checks(cpu, [], [], "slow")


def test_suite_flag_is_validated_with_exit_3() -> None:
    result = CliRunner().invoke(main, ["test", "--host", "--as", "cpu", "--suite", "fast"], catch_exceptions=False)
    assert result.exit_code == ExitCode.CONFIG and "'fast' is no suite" in result.output


def test_groups_share_an_interpreter_as_declared() -> None:
    specs = [CheckSpec(name=n, timeout=10) for n in checks.CHECKS]
    found = smoke_plan.groups(specs)
    by_check = {c.name: i for i, group in enumerate(found) for c in group}
    # One `import vllm` and one model inspection for every check that uses vLLM in-process (issue 10's figures);
    # the console script is a process of its own, so vllm-cli runs beside them.
    shared = ("vllm-import", "no-fake-triton", "inductor-compile", "model-runner", "offline-generate")
    assert len({by_check[name] for name in shared}) == 1
    assert by_check["vllm-cli"] != by_check["vllm-import"]
    host_side = {n for n, c in checks.CHECKS.items() if c.group == "host"}
    assert host_side == {"serve"}  # run by the host, in no exec
    assert sorted(c.name for g in found for c in g) == sorted(set(checks.CHECKS) - host_side)
    assert smoke_plan.group_timeout(found[0]) == 10 * len(found[0])


def test_a_group_reports_each_check_and_timeout_for_the_unfinished(tmp_path: Path) -> None:
    cpu = next(v for v in load_matrix(FIXTURE_MATRIX).variants if v.name == "cpu")

    class Runner:
        restarted = 0
        image = "img"

        def argv(self, group: Any, params: Any) -> list[str]:
            return [c.name for c in group]

        def exec(self, argv: list[str], env: Any, deadline: float) -> tuple[int | None, str]:
            if "offline-generate" in argv:
                return 124, "MATRIX-BEGIN tiny-model\n"
            lines = [f"MATRIX-BEGIN {n}\n" + incontainer().result_line(n, {"status": "passed"}) for n in argv]
            return 0, "\n".join(lines) + "\n"

        def restart(self) -> None:
            self.restarted += 1

        def workers(self) -> int:
            return 2

        def step(self, check: CheckSpec, run: Any, log_dir: Path) -> Any:
            raise AssertionError("this plan has no step")

    runner = Runner()
    names = ["pip-check", "offline-generate", "triton-import", "vllm-cli"]
    specs = [CheckSpec(name=n, timeout=5) for n in names]
    run = smoke_plan.profile_run(cpu.name, Profile(name="default"), specs, suite="quick")
    results = smoke.execute(run, runner, cpu.name, {"suite": "quick"}, tmp_path, lambda r: None)
    assert [r.check for r in results] == names, "the declared order, whatever finished first"
    status = {r.check: r.status for r in results}
    assert status == {
        "pip-check": smoke_result.Status.PASSED,
        "offline-generate": smoke_result.Status.TIMEOUT,
        "triton-import": smoke_result.Status.PASSED,
        "vllm-cli": smoke_result.Status.PASSED,
    }
    assert runner.restarted == 1 and all(r.suite == "quick" for r in results)
    assert (tmp_path / "cpu.pip-check.log").read_text().startswith("MATRIX-BEGIN pip-check\n")


def test_catalogue_prints_the_declarations_as_json(capsys: Any) -> None:
    mod = incontainer()
    assert mod.main(["x", "catalogue"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["inductor-compile"]["suites"] == ["full"] and "function" not in doc["offline-generate"]
    assert importlib.util.find_spec("vllm_smoke") is None, "the package is importable only as matrixtool's"


def test_the_suite_shows_in_the_table_json_and_junit(tmp_path: Path) -> None:
    from matrixtool import report

    result = smoke_result.CheckResult(
        variant="cpu",
        image="i",
        check="pip-check",
        status=smoke_result.Status.PASSED,
        diagnosis="ok",
        hint="",
        seconds=1.0,
    )
    quick = report.RunReport(checks=[dataclasses.replace(result, suite="quick")])
    assert "\nsuite: quick\n" in report.table(quick)
    assert report.to_json(quick)["checks"][0]["suite"] == "quick"
    report.write_junit(quick, tmp_path / "junit.xml")
    assert '<property name="suite" value="quick"' in (tmp_path / "junit.xml").read_text()


def test_a_skip_never_hides_a_failure_left_out_of_the_report() -> None:
    skipped = smoke_result.CheckResult(
        variant="cpu",
        image="i",
        check="offline-generate",
        status=smoke_result.Status.SKIPPED,
        diagnosis="tiny-model failed",
        hint="",
        seconds=0.0,
        facts={
            "failed_need": "tiny-model",
            "need_diagnosis": "making the tiny model fails: OSError: x",
            "need_hint": None,
        },
    )
    listed = [CheckSpec(name="tiny-model", timeout=1), CheckSpec(name="offline-generate", timeout=1)]
    assert smoke_result.unhidden(skipped, listed) is skipped, "tiny-model's own failure is in the report"
    rerun = smoke_result.unhidden(skipped, listed[1:])  # a profile's rerun, without the prerequisite
    assert (
        rerun.status is smoke_result.Status.FAILED
        and "tiny-model failed here: making the tiny model fails" in rerun.diagnosis
    )
    assert rerun.hint == checks.CHECKS["tiny-model"].hint


def test_the_package_parses_as_python_3_9() -> None:
    """Images this project did not build may have Python 3.9: the package's syntax must parse there."""
    for path in smoke_runners.PACKAGE_DIR.rglob("*.py"):
        ast.parse(path.read_text(encoding="utf-8"), filename=str(path), feature_version=(3, 9))
