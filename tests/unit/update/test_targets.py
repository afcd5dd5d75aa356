"""The wheel tags a target accepts."""

from __future__ import annotations

from tests.unit.update._index_fixtures import AMD64, index_page, wheel_name


def test_target_tags_accept_abi3_and_reject_other_platforms() -> None:
    project = index_page(
        (wheel_name("1.0"), False, None),
        ("vllm-1.0-cp312-cp312-manylinux_2_28_x86_64.whl", False, None),
        ("vllm-1.0-cp311-cp311-musllinux_1_2_x86_64.whl", False, None),
        ("vllm-1.0-cp311-cp311-manylinux_2_17_aarch64.whl", False, None),
        ("vllm-1.0-py3-none-any.whl", False, None),
    )
    assert [AMD64.fits(f) for f in project.files] == [True, False, False, False, True]
