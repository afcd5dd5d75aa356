"""OpenShift static checks of an image's config and files."""

from __future__ import annotations

import io
import tarfile
from typing import Any

import pytest

from matrixtool.core.errors import ExitCode
from matrixtool.supply import static

# --- OpenShift static checks ---------------------------------------------------------------------------------
GOOD_LABELS = {k: "x" for k in (*static.REQUIRED_LABELS, "maintainer")}


def attrs(user: str = "1000:0", labels: dict[str, str] | None = None, layers: int = 11) -> dict[str, Any]:
    return {
        "Config": {"User": user, "Labels": GOOD_LABELS if labels is None else labels},
        "RootFS": {"Layers": [f"sha256:{i}" for i in range(layers)]},
    }


def test_static_checks_pass() -> None:
    results = static.judge("vllm-matrix/cpu:0.32.0", attrs(), ["licenses/torch/LICENSE"])
    assert all(r.passed for r in results), results
    static.raise_for("x", results)


@pytest.mark.parametrize(
    ("ref", "image", "files", "failed", "detail"),
    [
        ("r/cpu:1", attrs(), [], "licenses", "/licenses is missing or empty"),
        ("r/cpu:1", attrs(layers=41), ["l"], "layers", "41 layers (at most 40)"),
        ("r/cpu:1", attrs(labels={"name": "n"}), ["l"], "labels", "missing: vendor, version, release"),
        ("r/cpu:1", attrs(user=""), ["l"], "user", "runs as root"),
        ("r/cpu:1", attrs(user="vllm"), ["l"], "user", "is a name"),
        ("r/cpu:1", attrs(user="0:0"), ["l"], "user", "is root"),
        ("r/cpu:latest", attrs(), ["l"], "tag", "not latest"),
        ("r/cpu", attrs(), ["l"], "tag", "'none'"),
    ],
)
def test_static_check_failures(ref: str, image: dict[str, Any], files: list[str], failed: str, detail: str) -> None:
    results = static.judge(ref, image, files)
    assert [r.name for r in results if not r.passed] == [failed]
    assert detail in next(r.detail for r in results if r.name == failed)
    with pytest.raises(static.StaticCheckFailure) as caught:
        static.raise_for(ref, results)
    assert caught.value.exit_code == int(ExitCode.STATIC) == 18


def test_license_listing_of_a_tar_stream() -> None:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        folder = tarfile.TarInfo("licenses/torch")
        folder.type = tarfile.DIRTYPE
        archive.addfile(folder)
        data = b"BSD"
        info = tarfile.TarInfo("licenses/torch/LICENSE")
        info.size = len(data)
        archive.addfile(info, io.BytesIO(data))
    chunks = [buffer.getvalue()[i : i + 100] for i in range(0, len(buffer.getvalue()), 100)]
    assert static.license_listing(iter(chunks)) == ["licenses/torch/LICENSE"]
