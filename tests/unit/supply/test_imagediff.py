"""Image facts compared and ranked for a failing check, bad references, images without python3, the last green."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, ClassVar

import docker.errors
import pytest

from matrixtool import report
from matrixtool.commands import _green, _shared
from matrixtool.commands import diff as diff_command
from matrixtool.core import engine
from matrixtool.core.container import SESSION_LABEL
from matrixtool.core.errors import ConfigError, NotBuiltError, SmokeFailure
from matrixtool.model.checks import CHECKS
from matrixtool.smoke.result import CheckResult, Status
from matrixtool.supply import imagediff


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
    kwargs = imagediff.container_spec("img").run_kwargs(session="diff-1", owner="")
    assert kwargs["network_disabled"] is True and kwargs["labels"][SESSION_LABEL] == "diff-1"
    assert kwargs["entrypoint"][:2] == ["python3", "-c"] and "@@image-facts@@" in kwargs["entrypoint"][2]


def test_last_green(tmp_path: Path) -> None:
    """Only the variant's own green report counts: a passing ``test --image vllm-matrix/cpu --as cuda`` wrote
    ``cuda.json`` all green, and a later cuda failure named vllm-matrix/cpu as "the last green image of cuda"."""

    def report(name: str, checks: list[tuple[str, str, str]]) -> None:
        doc = {
            "checks": [
                {"variant": v, "profile": "default", "image": i, "status": s, "check": "c"} for v, i, s in checks
            ]
        }
        (tmp_path / name).write_text(json.dumps(doc))

    report("cpu.green.json", [("cpu", "img:1", "passed"), ("cpu", "img:1", "skipped")])
    report("cpu.json", [("cpu", "img:2", "passed")])  # the latest, of an image merely tested as cpu
    report("cuda.json", [("cuda", "vllm-matrix/cpu:0.32.0", "passed")])
    report("other.json", [("cuda", "img:9", "passed")])
    green = imagediff.last_green(tmp_path, "cpu")
    assert green is not None and green.image == "img:1" and green.report.name == "cpu.green.json"
    assert imagediff.last_green(tmp_path, "cpu", exclude_image="img:1") is None
    assert imagediff.last_green(tmp_path, "cpu", own=lambda image: image != "img:1") is None, "no longer its own"
    assert imagediff.last_green(tmp_path, "cuda") is None, "no green report of cuda's own image"
    report("cuda.green.json", [("cpu", "img:1", "passed")])  # another variant's checks under cuda's name
    assert imagediff.last_green(tmp_path, "cuda") is None
    (tmp_path / "cpu.green.json").write_text("{")
    assert imagediff.last_green(tmp_path, "cpu") is None
    assert imagediff.last_green(tmp_path / "none", "cpu") is None


@pytest.mark.parametrize(
    ("a", "b", "what"), [("UPPER/Bad", "x", "A 'UPPER/Bad'"), ("x", "a@@b", "B 'a@@b'"), ("", "x", "A ''")]
)
def test_diff_names_a_bad_image_reference_before_the_engine(a: str, b: str, what: str) -> None:
    with pytest.raises(ConfigError) as info:
        diff_command.Args(a=a, b=b)
    assert what in str(info.value) and info.value.exit_code == 3


class _Container:
    def __init__(self, labels: dict[str, str]) -> None:
        self.labels, self.removed = labels, False

    def remove(self, force: bool) -> None:
        self.removed = force


class _Client:
    """Images ``known``; containers whose start raises ``start_error`` (runc: no python3 in the image), found
    by label."""

    def __init__(self, known: set[str], start_error: Exception | None = None) -> None:
        self.known = known
        self.created: list[tuple[dict[str, Any], _Container]] = []
        self.images, self.containers = self, self
        self.start_error = start_error

    def get(self, ref: str) -> Any:
        if ref not in self.known:
            raise docker.errors.ImageNotFound(ref)
        return _Image()

    def run(self, **kwargs: Any) -> _Container:
        """As the Docker SDK's: the container is created, then its start may fail (it stays behind)."""
        container = _Container(kwargs["labels"])
        self.created.append((kwargs, container))
        if self.start_error is not None:
            raise self.start_error
        return container

    def list(self, all: bool, filters: dict[str, str]) -> list[_Container]:
        key, _, value = filters["label"].partition("=")
        return [c for _, c in self.created if c.labels.get(key) == value and not c.removed]


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


def test_the_last_green_image_is_of_the_failing_images_matrix(tmp_path: Path) -> None:
    """Two matrices (``--repository``) with a variant of one name and one ``--out``: the failing image of one is never
    compared with the other's green image."""
    reports = tmp_path / "reports"
    _green.write_variant_reports(
        report.RunReport(checks=[_check("cpu", "other/cpu:1", Status.PASSED)]), reports, labels=_OWN
    )
    red = report.RunReport(checks=[_check("cpu", "m/cpu:2", Status.FAILED)])
    labels = {"m/cpu:2": {"name": "vllm-cpu"}, "other/cpu:1": {"name": "vllm-cpu"}}

    class Client:
        class images:
            @staticmethod
            def get(ref: str) -> Any:
                if ref not in labels:
                    raise KeyError(ref)
                return type("Image", (), {"attrs": {"Config": {"Labels": labels[ref]}}})()

    lines = _green.failure_lines(red, reports, {}, connect=lambda: Client())  # type: ignore[arg-type,return-value]
    assert lines == [f"cpu: no earlier green image of cpu in {reports}"]
    assert _green.repository_of("127.0.0.1:5000/vllm-matrix/cpu@sha256:" + "a" * 64) == "127.0.0.1:5000/vllm-matrix"


def test_a_failing_last_green_lookup_is_one_warning(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
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


def test_per_variant_reports_that_cannot_be_written_are_one_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The last-green part never fails the command: an unwritable ``<out>/reports`` (a file there) is a warning, the
    run's own JUnit report at another path is written."""
    reports = tmp_path / "reports"
    reports.write_text("not a folder")
    green = report.RunReport(checks=[_check("cpu", "m/cpu:1", Status.PASSED)])
    flags = _shared.ReportFlags(junit=tmp_path / "junit.xml")
    _shared.finish(green, flags, out_dir=tmp_path, env={}, last_green=_green.report_last_green)
    err = capsys.readouterr().err
    assert f"warning: per-variant reports not written under {reports} ({reports} is a regular file" in err
    assert "Traceback" not in err and (tmp_path / "junit.xml").is_file()
