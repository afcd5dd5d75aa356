"""The lock file ``matrix.lock.json`` beside matrix.yaml: each base image ref -> the manifest digest its
registry served when ``tools/matrix pin`` ran. A ref missing from the lock builds unpinned; pinning is
all-or-nothing (one registry not answering leaves the lock file as it was).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from matrixtool.build.registry import DIGEST, registry_host
from matrixtool.core import jsontext, outputs
from matrixtool.core.errors import ConfigError, RegistryError
from matrixtool.model.model import Variant
from matrixtool.model.yamlfile import MAX_FILE_BYTES, read_config_text

LOCK_NAME = "matrix.lock.json"
LOCK_SCHEMA_VERSION = 1


@dataclass(frozen=True, kw_only=True)
class Lock:
    """The lock file's content: ``base_images`` maps a ref as written in matrix.yaml to ``sha256:…``."""

    base_images: Mapping[str, str] = field(default_factory=dict)

    def digest(self, ref: str) -> str | None:
        """The pinned digest of ``ref``, or None when it is not pinned."""
        return self.base_images.get(ref)


def lock_path(matrix_path: Path) -> Path:
    """The lock file that belongs to ``matrix_path`` (same folder, ``matrix.lock.json``)."""
    return matrix_path.with_name(LOCK_NAME)


def parse_lock(text: str, source: str) -> Lock:
    """Raises ConfigError: not JSON, another schema_version, or an entry that is not ``ref: sha256:<64 hex>``."""
    try:
        data: Any = jsontext.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(source, [f"line {exc.lineno}: not valid JSON ({exc.msg}); run 'tools/matrix pin'"]) from exc
    except ValueError as exc:  # nested too deeply (jsontext)
        raise ConfigError(source, [f"not valid JSON ({exc}); run 'tools/matrix pin'"]) from exc
    problems = []
    if not isinstance(data, dict) or data.get("schema_version") != LOCK_SCHEMA_VERSION:
        problems.append(f"schema_version: expected {LOCK_SCHEMA_VERSION}")
    images = data.get("base_images") if isinstance(data, dict) else None
    if not isinstance(images, dict):
        problems.append("base_images: expected an object of ref -> digest")
        images = {}
    for ref, digest in images.items():
        if not isinstance(digest, str) or not DIGEST.fullmatch(digest):
            problems.append(f"base_images.{ref}: digest {digest!r} is not sha256:<64 hex>; run 'tools/matrix pin'")
    if problems:
        raise ConfigError(source, problems)
    return Lock(base_images=dict(images))


def read_lock(path: Path) -> Lock:
    """An empty ``Lock`` when ``path`` does not exist (nothing is pinned).

    Raises ConfigError: the file exists but is not a valid lock (see ``parse_lock``).
    """
    if not path.exists() and not path.is_symlink():
        return Lock()
    # Only a regular UTF-8 file of bounded size is read (a FIFO or device there must not hang the tool).
    text = read_config_text(path, limit=MAX_FILE_BYTES, what=f"a regular file {path.name} beside matrix.yaml")
    return parse_lock(text, str(path))


def lock_text(lock: Lock) -> str:
    """The lock file's text: stable JSON (sorted refs, two-space indent, trailing newline) for clean diffs."""
    doc = {"schema_version": LOCK_SCHEMA_VERSION, "base_images": dict(sorted(lock.base_images.items()))}
    return json.dumps(doc, indent=2) + "\n"


def write_lock(lock: Lock, path: Path) -> bool:
    """False when the text was already there.

    Raises OutputError: the write failed (exit 3, naming ``path``); ``path`` is unchanged."""
    text = lock_text(lock)
    with outputs.guarded(path):
        if path.is_file() and path.read_bytes() == text.encode("utf-8"):
            return False
    outputs.write_text(path, text)
    return True


def base_refs(variants: Iterable[Variant]) -> list[str]:
    """Each distinct ``base_image`` of ``variants``, in first-seen order."""
    return list(dict.fromkeys(v.base_image for v in variants))


def pin(refs: Iterable[str], *, lock: Lock, resolve: Callable[[str], str | None]) -> Lock:
    """``lock`` with every ref in ``refs`` pinned to ``resolve(ref)`` (other entries kept). Raises RegistryError: a
    registry is unreachable (raised by ``resolve``) or has no such tag; nothing is returned, so the caller writes
    nothing."""
    pinned = dict(lock.base_images)
    for ref in refs:
        digest = resolve(ref)
        if digest is None:
            host = registry_host(ref)
            raise RegistryError(
                f"registry {host} has no {ref}; check the base_image in matrix.yaml (lock file left unchanged)",
                registry=host,
                ref=ref,
            )
        pinned[ref] = digest
    return Lock(base_images=pinned)
