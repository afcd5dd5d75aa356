"""Drift of the checked-in ``images/`` from a fresh render (``render.render_matrix``): which files differ, are
missing or extra, with a unified diff; ``check_fresh`` turns drift into ``StaleRenderError`` (exit 5)."""

from __future__ import annotations

import difflib
import os
import stat
from pathlib import Path

from matrixtool.build.imagedir import extra_variant_dirs, variant_dirs
from matrixtool.build.render import RenderedFile
from matrixtool.core.errors import StaleRenderError
from matrixtool.model.model import REPO_ROOT


def _read(path: Path) -> str | None:
    try:
        mode = path.lstat().st_mode
        if not stat.S_ISREG(mode):
            return None
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def drift_report(files: list[RenderedFile], root: Path = REPO_ROOT) -> tuple[list[Path], str]:
    """(paths that differ from a fresh render, a unified diff of the changed files and a list of the
    missing and extra ones). Paths are relative to ``root``; extra ones include every file in a folder of
    ``images/`` that no variant renders (a removed variant's), and the folder itself when empty."""
    stale: list[Path] = []
    notes: list[str] = []
    linked = {d for d in variant_dirs(files, root) | {root / "images"} if d.is_symlink()}
    for folder in sorted(linked):
        stale.append(folder.relative_to(root))
        notes.append(f"not a folder: {folder.relative_to(root)} is a symbolic link to {os.readlink(folder)}")
    for f in files:
        if any(d in linked for d in (root / f.path).parents):
            continue
        current = _read(root / f.path)
        if current is None:
            stale.append(f.path)
            notes.append(f"missing: {f.path}")
        elif current != f.text:
            stale.append(f.path)
            notes.extend(
                difflib.unified_diff(
                    current.splitlines(keepends=True),
                    f.text.splitlines(keepends=True),
                    fromfile=f"{f.path} (checked in)",
                    tofile=f"{f.path} (fresh render)",
                )
            )
    wanted = {root / f.path for f in files}
    for directory in variant_dirs(files, root) - linked:
        if directory.is_dir() and root / "images" not in linked:
            for p in directory.iterdir():
                if p not in wanted:
                    stale.append(p.relative_to(root))
                    notes.append(f"extra: {p.relative_to(root)}")
    for folder in extra_variant_dirs(files, root):
        inside = sorted(folder.rglob("*"))
        for p in inside or [folder]:
            stale.append(p.relative_to(root))
            notes.append(f"extra: {p.relative_to(root)} (no variant of the matrix renders {folder.name})")
    diff = "".join(line if line.endswith("\n") else line + "\n" for line in notes)
    return sorted(stale), diff


def drift(files: list[RenderedFile], root: Path = REPO_ROOT) -> list[Path]:
    """Paths (relative to ``root``) whose checked-in content differs from ``files``, or are missing/extra."""
    return drift_report(files, root)[0]


MAX_DIFF_LINES = 200


def check_fresh(files: list[RenderedFile], root: Path = REPO_ROOT) -> None:
    """Raise ``StaleRenderError`` naming each drifted file, with a unified diff (at most ``MAX_DIFF_LINES``
    lines), when ``images/`` is not a fresh render."""
    stale, diff = drift_report(files, root)
    if stale:
        names = ", ".join(str(p) for p in stale)
        lines = diff.splitlines()
        if len(lines) > MAX_DIFF_LINES:
            lines = [*lines[:MAX_DIFF_LINES], f"... {len(lines) - MAX_DIFF_LINES} more line(s)"]
        raise StaleRenderError(
            f"generated files differ from a fresh render of matrix.yaml: {names}; "
            "run 'tools/matrix render' and commit the result (never edit images/ by hand)\n" + "\n".join(lines)
        )
