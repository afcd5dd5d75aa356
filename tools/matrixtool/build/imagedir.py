"""The generated ``images/`` folder: a render (``render.render_matrix``) written into it all or nothing (``write``:
every obstacle found first, then the changed files replaced as one set), and the folders of variants the matrix no
longer has (removed where ``render`` wrote them, refused where it did not).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from matrixtool.build.render import GENERATED_MARK, RenderedFile
from matrixtool.core import outputs
from matrixtool.core.errors import ConfigError
from matrixtool.model.model import REPO_ROOT


def variant_dirs(files: list[RenderedFile], root: Path) -> set[Path]:
    return {(root / f.path).parent for f in files}


def extra_variant_dirs(files: list[RenderedFile], root: Path) -> list[Path]:
    """Folders under ``root/images`` that no variant renders (a removed or renamed variant's)."""
    images = root / "images"
    if not images.is_dir():
        return []
    wanted = variant_dirs(files, root)
    return sorted(p for p in images.iterdir() if p.is_dir() and p not in wanted)


def _is_generated_dir(folder: Path) -> bool:
    dockerfile = folder / "Dockerfile"
    if not all(p.is_file() and not p.is_symlink() for p in folder.iterdir()):
        return False
    try:
        return dockerfile.is_file() and dockerfile.read_text(encoding="utf-8").startswith(GENERATED_MARK)
    except (OSError, UnicodeDecodeError):
        return False


def _preflight_write(files: list[RenderedFile], root: Path) -> None:
    """Every reason ``write`` could not finish, found before it writes anything. Raises ConfigError: ``images`` or
    ``images/<variant>`` is not a folder or is a symbolic link (render would write, and remove files, where it points),
    a generated path is not a regular file, or a folder of a removed variant holds files ``render`` did not write."""
    problems = []
    for folder in sorted({root / "images", *variant_dirs(files, root)}):
        if folder.is_symlink():
            # Followed, it would make render write (and remove unrendered files) in the folder it names.
            problems.append(
                f"{folder} is a symbolic link to {os.readlink(folder)}; replace it with a folder so render "
                "writes inside the checkout"
            )
        elif folder.exists() and not folder.is_dir():
            problems.append(f"{folder} is not a folder; move it away so render can write the variant's files")
    for folder in extra_variant_dirs(files, root):
        if folder.is_symlink():
            problems.append(f"{folder} is a symbolic link and no variant of the matrix; remove it by hand")
    for f in files:
        target = root / f.path
        if (target.exists() or target.is_symlink()) and (target.is_symlink() or not target.is_file()):
            problems.append(f"{target} is not a regular file; move it away so render can write it")
    for folder in extra_variant_dirs(files, root):
        if not folder.is_symlink() and not _is_generated_dir(folder):
            problems.append(
                f"{folder} is no variant of the matrix and holds files render did not write; remove it by hand"
            )
    if problems:
        raise ConfigError(str(root / "images"), problems)


def write(
    files: list[RenderedFile], root: Path = REPO_ROOT, *, together: Mapping[Path, str] | None = None
) -> list[Path]:
    """Write ``files`` under ``root``, all or nothing as far as a file system allows: every obstacle is found
    first, then the changed files are replaced as one set (``outputs.write_set``); stale files and folders of removed
    variants go.
    Returns the changed paths (relative to ``root``).

    ``together``: other files (path: text) written in the same set, replaced only with the changed ones (``update``'s
    edited matrix); not in the returned paths.

    Raises ConfigError: an obstacle found before anything was written; OutputError: a write failed (exit 3; every file
    keeps its old content)."""
    _preflight_write(files, root)
    wanted = {root / f.path for f in files}
    differing = {}
    for f in files:
        target = root / f.path
        with outputs.guarded(target):
            if not target.exists() or target.read_bytes() != f.text.encode("utf-8"):
                differing[target] = f.text
    outputs.write_set({**differing, **(together or {})})  # every changed file, or none of them
    changed: list[Path] = [target.relative_to(root) for target in differing]
    # What a killed run staged here (``outputs.is_staging``); a running one stages and renames under the same locks.
    changed += [p.relative_to(root) for p in outputs.remove_staging(sorted(variant_dirs(files, root)))]
    for directory in sorted(variant_dirs(files, root)):
        for extra in sorted(directory.iterdir()):
            if extra.is_file() and extra not in wanted and not outputs.is_staging(extra):
                with outputs.guarded(extra):
                    extra.unlink()
                changed.append(extra.relative_to(root))
    for folder in extra_variant_dirs(files, root):
        for extra in sorted(folder.iterdir()):
            with outputs.guarded(extra):
                extra.unlink()
            changed.append(extra.relative_to(root))
        with outputs.guarded(folder):
            folder.rmdir()
    return changed
