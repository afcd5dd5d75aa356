"""Project pages and wheels of a made-up index, shared by the tests of release choice and predictions."""

from __future__ import annotations

from matrixtool.model.model import Platform
from matrixtool.update import targets
from matrixtool.update.pages import Project, parse_json_page

AMD64 = targets.Target(platform=Platform("linux", "amd64"), python="3.11")


def index_page(*files: tuple[str, object, str | None]) -> Project:
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


def wheel_name(version: str, arch: str = "x86_64") -> str:
    return f"vllm-{version}-cp38-abi3-manylinux_2_28_{arch}.whl"
