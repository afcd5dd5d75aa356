"""Which wheel of a wheelhouse a variant's build can install, per platform: its tags must fit the variant's
Python and the platform (PEP 427 file names, PEP 425 tags, read by ``packaging.utils.parse_wheel_filename``).
"""

from __future__ import annotations

from pathlib import Path

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from matrixtool.core.errors import ConfigError
from matrixtool.model.model import Platform, Variant

# The machine part of a wheel's platform tag per Docker architecture (manylinux_2_28_x86_64 -> x86_64); another
# architecture is written as Docker writes it.
WHEEL_ARCH = {"amd64": "x86_64", "arm64": "aarch64"}


# PyTorch's wheel index per local version label: torch==2.13.0+cpu lives under .../whl/cpu.
PYTORCH_INDEX = "https://download.pytorch.org/whl/{label}"


def wheelhouse_index(variant: Variant) -> str:
    """Where CI downloads the torch wheel of a ``wheelhouse`` variant: PyTorch's index for the local version label of
    its torch pin (``2.13.0+cpu`` -> ``https://download.pytorch.org/whl/cpu``). Raises ConfigError: the pin has no local
    label, so no index can be derived."""
    _, plus, label = variant.torch.version.partition("+")
    if not plus or not label:
        raise ConfigError(
            f"variants.{variant.name}",
            [
                f"index.wheelhouse is true but torch {variant.torch.version} has no local version label "
                "(like +cpu), so CI cannot tell which PyTorch index holds the wheel"
            ],
        )
    return PYTORCH_INDEX.format(label=label)


def wheel_arch(platform: Platform) -> str:
    """The machine part of a Linux wheel tag for ``platform`` (``linux/arm64`` -> ``aarch64``)."""
    return WHEEL_ARCH.get(platform.arch, platform.arch)


def wheel_platform(platform: Platform) -> str:
    """The platform tag ``pip download --platform`` fetches a wheelhouse wheel for on ``platform``
    (``manylinux_2_28_x86_64``: PyTorch's Linux wheels are manylinux_2_28; pip also accepts older manylinux tags
    for it)."""
    return f"manylinux_2_28_{wheel_arch(platform)}"


def wheel_fits(filename: str, *, package: str, version: str, python: str, platform: Platform) -> bool:
    """True when the wheel ``filename`` is ``package==version`` and one of its tags installs on CPython
    ``python`` (``"3.13"``) on Docker ``platform`` (``linux/arm64``): interpreter ``cp313``/``py3``, ABI
    ``cp313``/``abi3``/``none``, platform ``any`` or a Linux tag of the platform's machine (``aarch64``).

    A file name that is not a wheel's is no match (never an error).
    """
    try:
        name, wheel_version, _, tags = parse_wheel_filename(filename)
        wanted = Version(version)
    except (InvalidWheelFilename, InvalidVersion):
        return False
    if name != canonicalize_name(package) or wheel_version != wanted:
        return False
    major, _, minor = python.partition(".")
    cp = f"cp{major}{minor}"
    arch = wheel_arch(platform)
    for tag in tags:
        if tag.interpreter not in (cp, f"py{major}", f"py{major}{minor}"):
            continue
        if tag.abi not in (cp, "abi3", "none"):
            continue
        if tag.platform == "any" or (tag.platform.endswith(f"_{arch}") and "linux" in tag.platform):
            return True
    return False


def find_wheel(folder: Path, variant: Variant, platform: Platform) -> Path | None:
    """The first wheel (by name) in ``folder`` that installs ``variant``'s torch pin on ``platform``, or None."""
    for path in sorted(folder.iterdir()):
        if path.is_file() and wheel_fits(
            path.name,
            package=variant.torch.package,
            version=variant.torch.version,
            python=variant.python,
            platform=platform,
        ):
            return path
    return None


def wanted_wheel(variant: Variant, platform: Platform) -> str:
    """The file name pattern of the wheel ``variant`` needs on ``platform``, for messages:
    ``torch-2.13.0+cpu-cp313-cp313-manylinux_*_aarch64.whl``."""
    cp = "cp" + variant.python.replace(".", "")
    arch = wheel_arch(platform)
    return f"{variant.torch.package}-{variant.torch.version}-{cp}-{cp}-manylinux_*_{arch}.whl"


def problems(variant: Variant, folder: Path | None, *, env_var: str) -> list[str]:
    """What keeps ``variant`` from building with the wheelhouse ``folder``: one line per platform whose wheel is
    missing, naming the wheel, PyTorch's index that has it and ``--wheelhouse``."""
    if not variant.index.wheelhouse:
        return []
    if folder is not None and not folder.is_dir():
        return [f"wheelhouse {folder} is not a folder; pass --wheelhouse DIR"]
    index = wheelhouse_index(variant)
    found: list[str] = []
    for platform in variant.platforms:
        if folder is not None and find_wheel(folder, variant, platform) is not None:
            continue
        where = f"wheelhouse {folder} has no wheel of" if folder is not None else "no wheelhouse given for"
        tag = wheel_platform(platform)
        found.append(
            f"variants.{variant.name}.index.wheelhouse: {where} {variant.torch.requirement} for {platform} and "
            f"Python {variant.python} ({wanted_wheel(variant, platform)}; PyPI does not carry it). Download it "
            f"from PyTorch's index {index} (python -m pip download {variant.torch.requirement} --index-url "
            f"{index} --no-deps --only-binary=:all: --python-version {variant.python} --platform {tag} -d DIR) "
            f"and pass --wheelhouse DIR (or set {env_var})"
        )
    return found
