"""Render ``templates/Dockerfile.j2`` into ``images/<variant>/`` and detect drift.

Python prepares every value (lists, flags, booleans); the template only branches and loops.
Jinja runs with ``StrictUndefined`` so a missing value fails the render instead of emitting "".
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2

from matrixtool.errors import StaleRenderError
from matrixtool.matrix import DEFAULT_MATRIX, REPO_ROOT, TEMPLATES_DIR_NAME, Accelerator, Matrix, PackagePin, Variant

# The checkout's templates; commands pass the folder next to their matrix file (``Matrix.templates_dir``).
TEMPLATES_DIR = DEFAULT_MATRIX.resolve().parent / TEMPLATES_DIR_NAME
TEMPLATE_NAME = "Dockerfile.j2"

# The installer inside the build; pinned so a render is reproducible.
UV_REQUIREMENT = "uv==0.13.8"
# Where requirement files land in the image (COPY), read by the vLLM install step.
REQUIREMENTS_DIR = "/opt/matrix"

# Debian/Ubuntu packages per accelerator on top of Python. g++ and python3.X-dev let torch's inductor
# compile C++ kernels (pytorch#116696); libnuma1 is loaded by vllm._C on CPU (without it vLLM fails with
# "'_C' object has no attribute 'init_cpu_memory_env'").
_COMMON_PACKAGES = ("ca-certificates", "g++", "procps")
_ACCELERATOR_PACKAGES: dict[Accelerator, tuple[str, ...]] = {
    Accelerator.CPU: ("libnuma1",),
    Accelerator.CUDA: ("libnuma1",),
    Accelerator.ROCM: ("libnuma1",),
}


@dataclass(frozen=True, kw_only=True)
class RenderedFile:
    """One generated file: ``path`` relative to the repository root, ``text`` its full content."""

    path: Path
    text: str


def requirement_files(variant: Variant) -> dict[str, str]:
    """The requirement files the vLLM install step reads, by file name -> content.

    ``constraints.txt`` pins torch so installing vLLM never replaces the torch layer;
    ``excludes.txt`` (uv ``--excludes``) keeps packages out of the resolution entirely;
    ``overrides.txt`` (uv ``--overrides``) replaces a dependency's own pin.
    """
    files = {"constraints.txt": f"{variant.torch.requirement}\n"}
    if variant.index.exclude:
        files["excludes.txt"] = "".join(f"{name}\n" for name in variant.index.exclude)
    if variant.index.overrides:
        files["overrides.txt"] = "".join(f"{req}\n" for req in variant.index.overrides)
    return files


def dist_alias_files(alias: PackagePin) -> dict[str, str]:
    """The files of a metadata-only ``.dist-info`` folder for ``alias`` (relative name -> content).

    RECORD lists every file, so an uninstall of the alias removes exactly these.
    """
    folder = f"{alias.package.replace('-', '_')}-{alias.version}.dist-info"
    metadata = (
        f"Metadata-Version: 2.1\nName: {alias.package}\nVersion: {alias.version}\n"
        "Summary: metadata-only alias written by vllm-image-matrix (see matrix.yaml dist_alias)\n"
    )
    files = {f"{folder}/METADATA": metadata, f"{folder}/INSTALLER": "vllm-image-matrix\n"}
    files[f"{folder}/RECORD"] = "".join(f"{name},,\n" for name in [*files, f"{folder}/RECORD"])
    return files


def _index_flags(variant: Variant) -> list[str]:
    flags = [f"--index-url {variant.index.url}"]
    flags += [f"--extra-index-url {url}" for url in variant.index.extra_urls]
    return flags


def template_context(variant: Variant) -> dict[str, Any]:
    """Every value the template reads, prepared for plain ``if``/``for`` use."""
    files = requirement_files(variant)
    torch_flags = _index_flags(variant)
    if variant.index.wheelhouse:
        torch_flags.append("--find-links /wheelhouse")
    vllm_flags = [*_index_flags(variant), f"--constraints {REQUIREMENTS_DIR}/constraints.txt"]
    if "excludes.txt" in files:
        # Both steps: torch's own requirements may name an excluded package (PyPI's aarch64 torch 2.13.0
        # requires triton==3.7.1, which the arm64 variant excludes).
        torch_flags.append(f"--excludes {REQUIREMENTS_DIR}/excludes.txt")
        vllm_flags.append(f"--excludes {REQUIREMENTS_DIR}/excludes.txt")
    if "overrides.txt" in files:
        vllm_flags.append(f"--overrides {REQUIREMENTS_DIR}/overrides.txt")
    python = variant.python
    return {
        "variant": variant.name,
        "description": variant.description,
        "platforms": [str(p) for p in variant.platforms],
        "base_image": variant.base_image,
        "python": python,
        "apt_packages": sorted(
            {
                # ${PYTHON_VERSION}: a build arg (default ``python``) so a stand-in base whose suite ships
                # another Python can build the same Dockerfile (matrix.yaml stand_in.python).
                "python${PYTHON_VERSION}",
                "python${PYTHON_VERSION}-venv",
                "python${PYTHON_VERSION}-dev",
                *_COMMON_PACKAGES,
                *_ACCELERATOR_PACKAGES[variant.accelerator],
            }
        ),
        "uv_requirement": UV_REQUIREMENT,
        "wheelhouse": variant.index.wheelhouse,
        "torch_requirement": variant.torch.requirement,
        "vllm_requirement": variant.vllm.requirement,
        "torch_install_flags": torch_flags,
        "vllm_install_flags": vllm_flags,
        # excludes.txt is copied before the torch step (both steps read it); the others after it, so a vLLM
        # bump does not invalidate the torch layer.
        "early_requirement_files": sorted(n for n in files if n == "excludes.txt"),
        "requirement_files": sorted(n for n in files if n != "excludes.txt"),
        "triton": variant.triton.value,
        # (path under site-packages, printf format string) pairs; printf keeps the \n escapes.
        "dist_alias_files": [
            (path, text.replace("\n", "\\n")) for path, text in dist_alias_files(variant.dist_alias).items()
        ]
        if variant.dist_alias
        else [],
        # Double-quoted, escaped Dockerfile strings: a space or quote in matrix.yaml cannot break the line.
        "env": [(key, json.dumps(value, ensure_ascii=False)) for key, value in sorted(variant.env.items())],
        "description_quoted": json.dumps(variant.description, ensure_ascii=False),
    }


def _environment(templates_dir: Path) -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(templates_dir),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,  # Dockerfiles, not HTML
    )


def render_variant(variant: Variant, templates_dir: Path | None = None) -> list[RenderedFile]:
    """The files of ``images/<variant>/``: the Dockerfile and its requirement files.

    ``templates_dir``: the folder holding ``Dockerfile.j2`` (``Matrix.templates_dir``; default: this checkout's).
    """
    directory = Path("images") / variant.name
    dockerfile = (
        _environment(templates_dir or TEMPLATES_DIR).get_template(TEMPLATE_NAME).render(**template_context(variant))
    )
    files = [RenderedFile(path=directory / "Dockerfile", text=dockerfile)]
    files += [RenderedFile(path=directory / name, text=text) for name, text in requirement_files(variant).items()]
    return files


def render_matrix(matrix: Matrix) -> list[RenderedFile]:
    """Every generated file of every variant, in matrix order, from the templates next to the matrix file."""
    return [f for v in matrix.variants for f in render_variant(v, matrix.templates_dir)]


def write(files: list[RenderedFile], root: Path = REPO_ROOT) -> list[Path]:
    """Write ``files`` under ``root``; remove stale files in the rendered variant dirs. Returns changed paths."""
    changed: list[Path] = []
    wanted = {root / f.path for f in files}
    for f in files:
        target = root / f.path
        target.parent.mkdir(parents=True, exist_ok=True)
        if not target.exists() or target.read_text(encoding="utf-8") != f.text:
            target.write_text(f.text, encoding="utf-8")
            changed.append(f.path)
    for directory in {(root / f.path).parent for f in files}:
        for extra in directory.iterdir():
            if extra.is_file() and extra not in wanted:
                extra.unlink()
                changed.append(extra.relative_to(root))
    return changed


def drift(files: list[RenderedFile], root: Path = REPO_ROOT) -> list[Path]:
    """Paths (relative to ``root``) whose checked-in content differs from ``files``, or are missing/extra."""
    stale = [
        f.path for f in files if not (root / f.path).is_file() or (root / f.path).read_text(encoding="utf-8") != f.text
    ]
    wanted = {root / f.path for f in files}
    for directory in {(root / f.path).parent for f in files}:
        if directory.is_dir():
            stale += [p.relative_to(root) for p in directory.iterdir() if p.is_file() and p not in wanted]
    return sorted(stale)


def check_fresh(files: list[RenderedFile], root: Path = REPO_ROOT) -> None:
    """Raise ``StaleRenderError`` naming each drifted file when ``images/`` is not a fresh render."""
    stale = drift(files, root)
    if stale:
        names = ", ".join(str(p) for p in stale)
        raise StaleRenderError(
            f"generated files differ from a fresh render of matrix.yaml: {names}; "
            "run 'tools/matrix render' and commit the result (never edit images/ by hand)"
        )
