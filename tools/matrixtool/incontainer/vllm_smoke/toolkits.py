"""Build tags of a toolkit (``cu130``, ``rocm6.4``, vLLM's dotless ``rocm721``) read as a toolkit version, never a
guess: an ambiguous tag is named as such. Standard library only, Python >= 3.9 (the host's model reads them too)."""

from __future__ import annotations

import re
from typing import List, Optional, Sequence, Tuple

from .declarations import Accelerator

_TOOLKIT_TAG = re.compile(r"^(cu|rocm)(\d+(?:\.\d+)*)$", re.IGNORECASE)


# The longest dotless ROCm label vLLM writes: its setup.py (get_vllm_version) labels a ROCm build
# "rocm" + the HIP version's digits without dots, cut to three (7.2.1 -> rocm721); its release pipeline names the
# index variant the same way (.buildkite/scripts/annotate-rocm-release.sh: rocm$(tr -d .)).
_DOTLESS_MAX = 3


def _dotless_digits(version: Tuple[int, ...]) -> str:
    """The digits vLLM's dotless label of ``version`` (a tuple of ints) holds: all its digits, cut to three."""
    return "".join(str(n) for n in version)[:_DOTLESS_MAX]


def _covered(version: Tuple[int, ...], digits: str) -> Tuple[int, ...]:
    """The leading parts of ``version`` whose digits ``digits`` (a prefix of them) states."""
    parts, used = [], 0
    for n in version:
        if used >= len(digits):
            break
        parts.append(n)
        used += len(str(n))
    return tuple(parts)


def _matching(digits: str, known: Sequence[Tuple[int, ...]]) -> List[Tuple[int, ...]]:
    """The readings of dotless ROCm ``digits`` that versions of ``known`` (dotted ROCm versions, each a tuple of
    ints) state: each version whose dotless label is ``digits``, as far as those digits state it (``710`` beside
    7.10.1: (7, 10)), once each, in the order of ``known``."""
    return list(dict.fromkeys(_covered(v, digits) for v in known if _dotless_digits(v) == digits))


def _deciding(digits: str, known: Sequence[Tuple[int, ...]]) -> Optional[Tuple[int, ...]]:
    """The one reading of dotless ROCm ``digits`` that ``known`` states (``_matching``), or None where it states none
    or more than one (the base image's 7.1.1 and torch's 7.11 both label as ``711``: they disagree, and neither is
    taken)."""
    found = _matching(digits, known)
    return found[0] if len(found) == 1 else None


def toolkit_tag_problem(tag: str, known: tuple[tuple[int, ...], ...] = ()) -> str | None:
    """Why the build tag ``tag`` names no one toolkit version, or None where it names one (or none at all:
    ``cpu``). A dotless ROCm label (vLLM's ``rocm721``, ``rocm72``) is the version's digits cut to three, so three
    of them read as more than one version (``rocm711``: 7.1.1 or 7.11; ``rocm100``: 1.0.0 or 10.0): such a label is
    ambiguous unless a version of ``known`` (the dotted ROCm versions stated for the same build: the base image's
    tag or /opt/rocm/.info/version, another pin's dotted label such as torch's ``+rocm7.11``) has exactly those
    digits, and no other version of ``known`` with those digits reads otherwise; then it is that version. One of
    more than three digits is no label vLLM writes, and one of two that starts with 1 is ROCm 10 as well as 1.0
    (which has no wheels): both ambiguous unless ``known`` decides; any other two-digit one (``rocm72``) is
    major.minor. (A part of two digits cut by the three, 7.2.10 as ``rocm721``, cannot be told from 7.2.1 at all.)
    A dotless CUDA tag (PyTorch's ``cu130``: the last digit the minor) of more than three digits is ambiguous
    (``cu1210``: 12.10 or 121.0). Dotted tags (PyTorch's ``rocm6.4``) are never ambiguous."""
    m = _TOOLKIT_TAG.match(tag or "")
    if not m or "." in m.group(2):
        return None
    kind, digits = m.group(1).lower(), m.group(2)
    if kind == "cu":
        if len(digits) <= 3:
            return None
        return (
            f"{tag!r} writes a CUDA version without dots, and {digits} reads as more than one "
            f"({int(digits[:-1])}.{digits[-1]} or {digits[:2]}.{int(digits[2:])}); PyTorch's labels have at most three "
            "digits, and this tool does not guess"
        )
    if _deciding(digits, known) is not None or not _ambiguous(digits):
        return None

    def shown(versions: Sequence[Tuple[int, ...]]) -> str:
        return ", ".join(".".join(str(n) for n in v) for v in versions)

    readings = " or ".join(_readings(digits))
    matching = _matching(digits, known)
    if matching:
        beside = f", and the ROCm versions stated dotted for this build with those digits disagree ({shown(matching)})"
    elif known:
        beside = f", and none of the ROCm versions stated dotted for this build ({shown(known)}) has those digits"
    else:
        beside = ", and no ROCm version is stated dotted for this build (base image tag, torch's label)"
    return (
        f"{tag!r} writes a ROCm version without dots, as vLLM labels its ROCm builds (the version's digits, cut to "
        f"three), and {digits} reads as more than one ({readings}){beside}; this tool does not guess"
    )


def _ambiguous(digits: str) -> bool:
    """Whether dotless ROCm ``digits`` read as more than one version on their own: three or more of them (three are
    X.Y.Z or X.YZ, and X.Y.Z may be X.Y.Z0-Z9 cut), or two starting with 1 (ROCm 1, which has no wheels, or 10)."""
    return len(digits) >= _DOTLESS_MAX or (len(digits) > 1 and digits[0] == "1")


def _readings(digits: str) -> List[str]:
    """The versions ambiguous dotless ``digits`` can be: one digit per part, a two-digit major (where the first is
    1: ROCm 10 and later), a two-digit minor."""
    splits = [[*digits]]
    if digits[0] == "1":
        splits.append([digits[:2], *digits[2:]])
    if len(digits) > 2:
        splits.append([digits[0], digits[1:3], *digits[3:]])
    found = [".".join(parts) for parts in splits if all(p == "0" or not p.startswith("0") for p in parts)]
    return sorted(set(found), key=found.index)


def rocm_readings(tag: str) -> list[tuple[int, ...]]:
    """Every version a dotless ROCm label ``tag`` can be read as (``rocm711``: [(7, 1, 1), (7, 11)]), or [] for any
    other tag (dotted, CUDA, ``cpu``)."""
    m = _TOOLKIT_TAG.match(tag or "")
    if not m or m.group(1).lower() != "rocm" or "." in m.group(2):
        return []
    return [tuple(int(p) for p in r.split(".")) for r in _readings(m.group(2))]


def toolkit_of_tag(tag: str, known: tuple[tuple[int, ...], ...] = ()) -> tuple[Accelerator, tuple[int, ...]] | None:
    """``(accelerator, version)`` of a build tag: ``cu130`` is CUDA (13, 0) (the last digit the minor, as PyTorch
    names them), ``rocm6.4`` / ``rocm6.4.1`` ROCm dotted (PyTorch's labels), ``rocm72`` (7, 2) (vLLM's dotless
    label of two digits), or, for a dotless ROCm label of three, the parts of the first version of ``known`` (dotted
    ROCm versions stated for the same build) whose digits it holds (``rocm721`` beside 7.2.1 is (7, 2, 1);
    ``rocm710`` beside 7.10.1 is (7, 10)); None for any other tag (``cpu``, ``git1c57644``) and for one
    ``toolkit_tag_problem`` finds ambiguous (``rocm711`` beside no 7.1.1 or 7.11: never a guess)."""
    m = _TOOLKIT_TAG.match(tag or "")
    if not m or toolkit_tag_problem(tag, known) is not None:
        return None
    kind, digits = m.group(1).lower(), m.group(2)
    if kind == "cu":
        if "." in digits or len(digits) < 2:
            return None
        return Accelerator.CUDA, (int(digits[:-1]), int(digits[-1]))
    if "." in digits:
        return Accelerator.ROCM, tuple(int(part) for part in digits.split("."))
    decided = _deciding(digits, known)
    if decided is not None:
        return Accelerator.ROCM, decided
    return Accelerator.ROCM, tuple(int(part) for part in digits)
