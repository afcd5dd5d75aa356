"""Hostile and odd inputs of `tools/matrix update` and `tools/matrix diff` that need no index and no engine:
URLs a page gives, corrupt wheels, odd pins, crafted JSON API data, out-of-range flags, bad image references,
images without python3, malformed facts; the all-or-nothing --write; proxies from the injected environment;
the groups of the workflow; the last green image of run/test."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path
from typing import Any, ClassVar

import docker.errors
import pytest
import yaml

from matrixtool import report
from matrixtool.build import render
from matrixtool.commands import _green
from matrixtool.commands import diff as diff_command
from matrixtool.commands import update as update_command
from matrixtool.core import engine
from matrixtool.core.errors import ConfigError, IndexUnreachableError, NotBuiltError, SmokeFailure
from matrixtool.core.http import env_proxies
from matrixtool.model.matrixfile import load_matrix
from matrixtool.smoke.result import CheckResult, Status
from matrixtool.supply import imagediff
from matrixtool.update import edits, pyindex, release, targets, updatefiles
from matrixtool.update.pyindex import IndexClient, local_wheel_files
from tests.conftest import REPO_ROOT, copy_checkout


@pytest.mark.parametrize("url", ["file:///etc/passwd", "/etc/passwd", "ftp://x/a.whl", "FILE:///etc/passwd"])
def test_a_page_cannot_make_update_open_a_local_file(url: str) -> None:
    client = IndexClient(ca_cert=None, log=None)
    with pytest.raises(IndexUnreachableError, match=r"only http\(s\) wheels are read"):
        client.wheel_files(url, ())


def test_a_corrupt_wheelhouse_wheel_is_a_config_error_naming_it(tmp_path: Path) -> None:
    bad = tmp_path / "torch-2.14.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"
    bad.write_bytes(b"not a zip")
    with pytest.raises(ConfigError, match="--wheelhouse") as info:
        local_wheel_files(bad, ())
    assert str(bad) in str(info.value) and "not a readable wheel" in str(info.value)
    empty = tmp_path / "empty.whl"
    with zipfile.ZipFile(empty, "w") as archive:
        archive.writestr("x.txt", "")
    with pytest.raises(ConfigError, match=r"has no \*\.dist-info/METADATA"):
        local_wheel_files(empty, ())


def test_an_odd_pin_in_matrix_yaml_is_a_config_error(tmp_path: Path) -> None:
    text = (REPO_ROOT / "matrix.yaml").read_text().replace("version: 0.32.0}", "version: 0.32.0.x}", 1)
    matrix = copy_checkout(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_matrix(matrix)
    assert "variants.cpu.vllm.version: '0.32.0.x' is not a PEP 440 version" in str(info.value)


def test_proxies_come_from_the_injected_environment() -> None:
    env = {"HTTPS_PROXY": "http://proxy:3128", "no_proxy": "localhost,.internal.example,127.0.0.1:8080"}
    assert env_proxies("https://pypi.org/simple", env) == {"https": "http://proxy:3128"}
    assert env_proxies("https://pkgs.internal.example/simple", env) == {}
    assert env_proxies("https://127.0.0.1:8080/simple", env) == {}
    assert env_proxies("https://127.0.0.1:9/simple", env) == {"https": "http://proxy:3128"}
    assert env_proxies("http://pypi.org/simple", env) == {}  # no http proxy given
    assert env_proxies("http://a/simple", {"all_proxy": "http://p", "NO_PROXY": "*"}) == {}
    client = IndexClient(ca_cert=None, env=env, log=None)
    merged = client.session.merge_environment_settings("https://pypi.org/simple", {}, None, None, None)
    assert merged["proxies"] == {"https": "http://proxy:3128"}
    assert client.session.trust_env is False  # os.environ is never read


def test_crafted_json_api_data_is_ignored_not_a_crash(monkeypatch: pytest.MonkeyPatch) -> None:
    client = IndexClient(ca_cert=None, log=None)
    doc = {
        "info": {"version": "weird", "requires_dist": "not a list"},
        "releases": {"1.0": ["a string", {"filename": "x-1.0.tar.gz", "upload_time": "2026-01-01T00:00:00"}]},
    }
    monkeypatch.setattr(client, "_json_api", lambda url, name: doc)
    assert list(client.upload_times("https://i/simple", "x")) == ["x-1.0.tar.gz"]
    assert client.latest("https://i/simple", "x") is None  # no PEP 440 version
    doc["info"] = {"version": "1.0", "requires_dist": "not a list"}
    latest = client.latest("https://i/simple", "x")
    assert latest is not None and latest.requires_dist == ()


def test_cooldown_is_bounded() -> None:
    with pytest.raises(ConfigError, match="--cooldown 99999999999: give 0 to 36500 days"):
        update_command.Args(matrix_path=Path("m"), variants=(), cooldown_days=99999999999, env={})
    proc_ok = update_command.Args(matrix_path=Path("m"), variants=(), cooldown_days=36500, env={})
    assert proc_ok.cooldown_days == 36500


@pytest.mark.parametrize(
    ("a", "b", "what"), [("UPPER/Bad", "x", "A 'UPPER/Bad'"), ("x", "a@@b", "B 'a@@b'"), ("", "x", "A ''")]
)
def test_diff_names_a_bad_image_reference_before_the_engine(a: str, b: str, what: str) -> None:
    with pytest.raises(ConfigError) as info:
        diff_command.Args(a=a, b=b)
    assert what in str(info.value) and info.value.exit_code == 3


class _Container:
    def __init__(self, start_error: Exception | None) -> None:
        self.start_error, self.removed = start_error, False

    def start(self) -> None:
        if self.start_error is not None:
            raise self.start_error

    def remove(self, force: bool) -> None:
        self.removed = force


class _Client:
    """Images ``known``; containers whose start raises ``start_error`` (runc: no python3 in the image)."""

    def __init__(self, known: set[str], start_error: Exception | None = None) -> None:
        self.known = known
        self.created: list[tuple[dict[str, Any], _Container]] = []
        self.images, self.containers = self, self
        self.start_error = start_error

    def get(self, ref: str) -> Any:
        if ref not in self.known:
            raise docker.errors.ImageNotFound(ref)
        return _Image()

    def create(self, **kwargs: Any) -> _Container:
        container = _Container(self.start_error)
        self.created.append((kwargs, container))
        return container


class _Image:
    id = "sha256:1"
    attrs: ClassVar[dict[str, Any]] = {"Config": {}}

    def history(self) -> list[Any]:
        return []


def test_an_image_without_python3_is_a_smoke_failure_and_its_container_removed() -> None:
    runc = docker.errors.APIError("500", explanation='exec: "python3": executable file not found in $PATH')
    client = _Client({"debian:bookworm-slim"}, start_error=runc)
    with pytest.raises(SmokeFailure, match="needs python3 in the image") as info:
        imagediff.read_facts(client, "debian:bookworm-slim", env={"MATRIX_OWNER": "me"})  # type: ignore[arg-type]
    assert info.value.exit_code == 7
    ((kwargs, container),) = client.created
    assert container.removed is True and kwargs["network_disabled"] is True


def test_malformed_facts_output_is_a_smoke_failure() -> None:
    with pytest.raises(SmokeFailure, match="malformed result"):
        imagediff.parse_output("@@image-facts@@{not json", "r")


def test_diff_looks_both_images_up_before_running_anything(monkeypatch: pytest.MonkeyPatch) -> None:
    client = _Client({"a:1"})
    monkeypatch.setattr(engine, "connect", lambda: client)
    with pytest.raises(NotBuiltError, match="'b:1'"):
        diff_command.run(diff_command.Args(a="a:1", b="b:1"))
    assert client.created == []  # the facts program ran in no image


def test_write_is_all_or_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    matrix = copy_checkout(tmp_path)
    before = matrix.read_text()
    edited = before.replace("version: 0.33.0}", "version: 0.34.0}", 1)
    files = updatefiles.render_text(edited, matrix)

    def refuse(*args: Any) -> Any:
        raise ConfigError(str(tmp_path / "images"), ["images/cuda is a symbolic link"])

    monkeypatch.setattr(render, "write", refuse)
    with pytest.raises(ConfigError):
        updatefiles.write_all(matrix, edited, files)
    assert matrix.read_text() == before and not list(tmp_path.glob(".matrix.yaml.*"))
    monkeypatch.undo()
    changed = updatefiles.write_all(matrix, edited, files)
    assert matrix.read_text() == edited and changed and not list(tmp_path.glob(".matrix.yaml.*"))


def test_groups_follow_the_key_owner() -> None:
    raw = yaml.safe_load((REPO_ROOT / "matrix.yaml").read_text())
    names = [v.name for v in load_matrix().variants]
    got = dict(edits.groups(raw, names))
    assert got["cuda"] == ["cuda", "cuda-arm64"] and "cuda-arm64" not in got
    assert sorted(n for members in got.values() for n in members) == sorted(names)
    assert edits.groups(raw, ["cuda-arm64"]) == [("cuda", ["cuda-arm64"])]
    line = json.loads(updatefiles.groups_json(REPO_ROOT / "matrix.yaml", ("cuda-arm64", "cuda")))
    assert {"group": "cuda", "variants": "cuda cuda-arm64"} in line["include"]


def _check(variant: str, image: str, status: Status, check: str = "triton-import") -> CheckResult:
    return CheckResult(variant=variant, image=image, check=check, status=status, diagnosis="", hint="", seconds=1.0)


def _OWN(image: str) -> dict[str, str]:
    """The labels of an image of the variant its ref names (``m/cpu:1``: ``name=vllm-cpu``)."""
    return {"name": "vllm-" + image.split("/")[-1].split(":")[0]}


def test_a_green_run_of_another_image_is_not_the_variants_last_green(tmp_path: Path) -> None:
    """``test --image ANY --as cpu`` that passes keeps its report, but ANY is no green image of cpu."""
    reports = tmp_path / "reports"
    own = report.RunReport(checks=[_check("cpu", "m/cpu:1", Status.PASSED)])
    _green.write_variant_reports(own, reports, labels=_OWN)
    notices: list[str] = []
    other = report.RunReport(checks=[_check("cpu", "bad/kept:back", Status.PASSED)])
    labels = {"bad/kept:back": {"name": "vllm-cuda"}, "m/cpu:1": {"name": "vllm-cpu"}}
    written = _green.write_variant_reports(other, reports, labels=labels.get, notice=notices.append)
    assert written == [reports / "cpu.json"]
    assert json.loads((reports / "cpu.green.json").read_text())["checks"][0]["image"] == "m/cpu:1"
    assert notices == [
        "cpu.green.json not updated: bad/kept:back is no image of cpu (its label name is 'vllm-cuda', not 'vllm-cpu')"
    ]
    unlabelled = report.RunReport(checks=[_check("cpu", "x:1", Status.PASSED)])
    assert _green.write_variant_reports(unlabelled, reports, labels=lambda image: None) == [reports / "cpu.json"]
    assert _green.own_image_problem("m/cpu:1", {"name": "vllm-cpu\x1b[2J"}, "cpu") == (
        "its label name is 'vllm-cpu\\x1b[2J', not 'vllm-cpu'"
    )


@pytest.mark.parametrize(
    ("ref", "labels", "own"),
    [
        ("vllm-matrix/cpu:18eb263afca0f693", {"name": "vllm-cpu"}, True),
        ("127.0.0.1:5000/vllm-matrix/cpu@sha256:" + "a" * 64, {"name": "vllm-cpu"}, True),
        ("vllm-matrix/arm64-arm64:0.32.0", {"name": "vllm-arm64", "io.vllm-matrix.platform": "linux/arm64"}, True),
        # built FROM the cpu image: its labels are cpu's, its ref is not
        ("vllm-matrix-test/bad-1a2b3c4d:latest", {"name": "vllm-cpu"}, False),
        ("vllm-matrix/cuda:1", {"name": "vllm-cpu"}, False),
        ("cpu:1", {"name": "vllm-cpu"}, False),
        ("sha256:" + "a" * 64, {"name": "vllm-cpu"}, False),
        ("vllm-matrix/cpu:1", {"name": "vllm-cuda"}, False),
        ("vllm-matrix/cpu:1", None, False),
    ],
)
def test_an_image_is_a_variants_own_when_its_label_and_its_ref_say_so(
    ref: str, labels: dict[str, str] | None, own: bool
) -> None:
    assert (_green.own_image_problem(ref, labels, "arm64" if "arm64" in ref else "cpu") is None) == own


def test_run_and_test_keep_a_green_report_and_name_the_last_green_image(tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    green = report.RunReport(checks=[_check("cpu", "m/cpu:1", Status.PASSED), _check("cpu", "m/cpu:1", Status.SKIPPED)])
    assert _green.write_variant_reports(green, reports, labels=_OWN) == [
        reports / "cpu.json",
        reports / "cpu.green.json",
    ]
    red = report.RunReport(checks=[_check("cpu", "m/cpu:2", Status.FAILED), _check("cuda", "m/cuda:1", Status.FAILED)])
    # The engine lacks the green image: the line names it and says why there is no diff.
    lines = _green.failure_lines(red, reports, {}, connect=lambda: _Client({"m/cpu:2"}))  # type: ignore[arg-type,return-value]
    assert lines[0].startswith(
        "cpu (triton-import failed on m/cpu:2): last green image of cpu: m/cpu:1 (cpu.green.json)"
    )
    assert "no diff: no image 'm/cpu:1'" in lines[0]
    assert lines[1] == f"cuda: no earlier green image of cuda in {reports}"
    _green.write_variant_reports(red, reports, labels=_OWN)  # a red run keeps the green report
    assert json.loads((reports / "cpu.green.json").read_text())["checks"][0]["image"] == "m/cpu:1"
    assert imagediff.last_green(reports, "cpu", exclude_image="m/cpu:2") is not None


def test_a_failing_last_green_lookup_is_one_warning(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from matrixtool.commands import _shared

    reports = tmp_path / "reports"
    _green.write_variant_reports(
        report.RunReport(checks=[_check("cpu", "m/cpu:1", Status.PASSED)]), reports, labels=_OWN
    )
    red = report.RunReport(checks=[_check("cpu", "m/cpu:2", Status.FAILED)])
    with pytest.raises(SmokeFailure):  # the command's own outcome, unchanged
        _shared.finish(red, _shared.ReportFlags(), out_dir=tmp_path, env={}, last_green=_green.report_last_green)
    err = capsys.readouterr().err
    assert "warning: no diff against the last green image (" in err
    assert "Traceback" not in err and (reports / "cpu.json").is_file()


def test_an_index_connection_broken_mid_body_is_the_index_s_fault_not_the_engine_s() -> None:
    """requests' ChunkedEncodingError/ConnectionError while reading a body is exit 10 (IndexUnreachableError);
    uncaught it reached the CLI's handler for an engine that went away (exit 8, naming the Docker socket)."""
    import requests

    class Broken:
        def iter_content(self, size: int) -> Any:
            yield b"{"
            raise requests.exceptions.ChunkedEncodingError("Connection broken: IncompleteRead")

    with pytest.raises(IndexUnreachableError, match="simple/x/: the answer broke off"):
        list(pyindex._body(Broken(), "https://pypi.org/simple/x/"))  # type: ignore[arg-type]


# --- index pages and wheel metadata: typed, bounded, escaped -------------------------------------------------
def _page_of(files: list[dict[str, Any]]) -> Any:
    from matrixtool.update.pages import Project, parse_json_page

    url = "https://i/simple/vllm/"
    return Project(name="vllm", url=url, api="json", files=tuple(parse_json_page({"files": files}, url)))


def test_an_upload_time_without_an_offset_is_utc_not_a_type_error() -> None:
    from datetime import UTC, datetime, timedelta

    from packaging.version import Version

    from matrixtool.model.model import Platform

    wheel = "vllm-0.33.0-cp38-abi3-manylinux_2_28_x86_64.whl"
    target = targets.Target(platform=Platform("linux", "amd64"), python="3.11")
    for when, picked in (
        ("2026-11-29T00:00:00", None),
        ("2026-11-01T00:00:00", "0.33.0"),
        ("9999-12-31T23:59:59-23:59", None),
    ):
        page = _page_of([{"filename": wheel, "url": wheel, "upload-time": when}])
        version, skipped = release.select_release(
            page, current=Version("0.32.0"), targets=[target], same_minor=False, cooldown=timedelta(days=7),
            now=datetime(2026, 12, 1, tzinfo=UTC), upload_times={},
        )  # fmt: skip
        assert (str(version) if version else None) == picked, skipped


def test_index_page_and_metadata_text_is_escaped() -> None:
    from datetime import UTC, datetime, timedelta

    from packaging.version import Version

    from matrixtool.model.model import Platform

    wheel = "vllm-0.33.0-cp38-abi3-manylinux_2_28_x86_64.whl"
    page = _page_of([{"filename": wheel, "url": wheel, "yanked": "bad pin\x1b[2J\nerror: forged"}])
    target = targets.Target(platform=Platform("linux", "amd64"), python="3.11")
    _, skipped = release.select_release(
        page, current=Version("0.32.0"), targets=[target], same_minor=False, cooldown=timedelta(0),
        now=datetime(2026, 12, 1, tzinfo=UTC), upload_times={},
    )  # fmt: skip
    assert skipped == ["0.33.0: yanked (bad pin\\x1b[2J\\x0aerror: forged)"]
    line = targets.Line(source="vllm 0.33.0 METADATA", text="torch==2.9; extra == '\x1b]0;x\x07'")
    assert str(line) == "vllm 0.33.0 METADATA: Requires-Dist: torch==2.9; extra == '\\x1b]0;x\\x07'"


def test_an_index_page_of_another_shape_is_refused_not_a_crash() -> None:
    from matrixtool.update.pages import parse_json_page

    for files in (5, [5], [{"filename": 5, "url": "u"}], [{"filename": "x.whl"}]):
        with pytest.raises(ValueError):
            parse_json_page({"files": files}, "https://i/simple/vllm/")
    odd = parse_json_page(
        {"files": [{"filename": "vllm-1.0.tar.gz", "url": "u", "upload-time": 5, "requires-python": ["x"]}]},
        "https://i/",
    )
    assert odd[0].upload_time is None and odd[0].requires_python is None


@pytest.mark.parametrize(
    ("facts", "says"),
    [
        ('{"distributions": []}', "distributions: [] is not of type 'object'"),
        ('{"distributions": {"torch": "2.9"}}', "distributions.torch: '2.9' is not of type 'object'"),
        ('{"debian": {"libc6": 2}}', "debian.libc6: 2 is not of type 'string'"),
        ('{"shared_libraries": {"libraries": {"a.so": {"needed_by": "x"}}}}', "libraries.a.so.needed_by: 'x'"),
        ("[1]", "(the document): [1] is not of type 'object'"),
    ],
)
def test_facts_of_another_shape_are_a_smoke_failure_naming_the_key(facts: str, says: str) -> None:
    """The image's own python3 prints the facts: whatever it prints is checked before ``compare`` reads it."""
    with pytest.raises(SmokeFailure, match="printed a result of another shape") as caught:
        imagediff.parse_output(f"{imagediff.MARK}{facts}\n", "r/x:1")
    assert says in str(caught.value)


def test_a_version_past_what_int_converts_is_no_version_not_a_refused_page() -> None:
    """packaging's ``Version`` raises a plain ValueError (no InvalidVersion) for a release of 5000 digits: such a
    file of an index page has no version, the page is still read."""
    from matrixtool.update.pages import parse_json_page

    huge = "9" * 5000
    files = [
        {"filename": f"vllm-{huge}.tar.gz", "url": "a"},
        {"filename": f"vllm-1.{huge}-py3-none-any.whl", "url": "b"},
        {"filename": "vllm-0.33.0-py3-none-any.whl", "url": "c"},
    ]
    found = parse_json_page({"files": files}, "https://i/simple/vllm/")
    assert [str(f.version) if f.version else None for f in found] == [None, None, "0.33.0"]
    assert release.local_label(huge) is None


def test_a_json_api_version_past_what_int_converts_is_no_latest_release(monkeypatch: pytest.MonkeyPatch) -> None:
    client = IndexClient(ca_cert=None, env={})
    monkeypatch.setattr(client, "_json_api", lambda index_url, name: {"info": {"version": "1." + "9" * 5000}})
    assert client.latest("https://pypi.org/simple", "vllm") is None
