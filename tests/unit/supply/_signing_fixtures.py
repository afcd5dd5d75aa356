"""An image digest shared by the signing and provenance tests."""

from __future__ import annotations

DIGEST = "sha256:" + "ab" * 32
