"""Files an image holds where a profile mounts a tmpfs: the mount hides them at run time.

A build step that writes under ``/tmp`` (the Hugging Face cache lives there: a baked model) works under
``default`` and vanishes under ``restricted``, whose ``/tmp`` is a fresh tmpfs (Kubernetes: an ``emptyDir``).
The files are read from a created, never started container (Docker's archive API, ``GET
/containers/{id}/archive``), so no condition of the image runs; the tar stream is read with bounds.
"""

from __future__ import annotations

import tarfile
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import IO

import docker
import docker.errors

from matrixtool.core.container import ContainerSpec, TrackedContainer

# Stop reading a mount point's archive after this many bytes of the stream or this many entries.
MAX_BYTES = 256 * 2**20
MAX_ENTRIES = 10_000
SHOWN = 5


@dataclass(frozen=True, kw_only=True)
class Hidden:
    """What the image holds under ``mount_point``: ``files`` (paths, at most ``SHOWN``), their ``count`` and
    ``size_bytes`` (file sizes from the tar headers), ``partial`` when the bounds stopped the listing."""

    mount_point: str
    files: tuple[str, ...]
    count: int
    size_bytes: int
    partial: bool = False

    def describe(self) -> str:
        """One line: ``/tmp: 3 file(s), 12.0 MB hidden by the tmpfs: /tmp/.cache/huggingface/...``."""
        more = "at least " if self.partial else ""
        return (
            f"{self.mount_point}: {more}{self.count} file(s), {self.size_bytes / 1e6:.1f} MB the image holds there "
            f"are hidden by the profile's tmpfs at run time: {', '.join(self.files)}"
            + (" …" if self.count > len(self.files) else "")
        )


class _Bounded:
    """A file-like view of ``chunks`` that ends after ``limit`` bytes (``truncated`` then True)."""

    def __init__(self, chunks: Iterable[bytes], limit: int) -> None:
        self._chunks: Iterator[bytes] = iter(chunks)
        self._buffer = b""
        self._left = limit
        self.truncated = False

    def read(self, size: int = -1) -> bytes:
        while (size < 0 or len(self._buffer) < size) and self._left > 0:
            chunk = next(self._chunks, b"")
            if not chunk:
                break
            chunk = chunk[: self._left]
            self._left -= len(chunk)
            self._buffer += chunk
            if self._left <= 0:
                self.truncated = True
        if size < 0:
            size = len(self._buffer)
        out, self._buffer = self._buffer[:size], self._buffer[size:]
        return out


def list_archive(mount_point: str, stream: IO[bytes] | _Bounded, *, max_entries: int = MAX_ENTRIES) -> Hidden:
    """The regular files in a tar ``stream`` of ``mount_point`` (as Docker's archive API sends it: the folder's
    own name first, e.g. ``tmp/.cache/x``); directories and empty folders are not files, and hide nothing."""
    files: list[str] = []
    count = size = 0
    partial = False
    parent = mount_point.rstrip("/").rpartition("/")[0]
    try:
        with tarfile.open(fileobj=stream, mode="r|") as archive:  # type: ignore[call-overload]
            for n, member in enumerate(archive):
                if n >= max_entries:
                    partial = True
                    break
                if member.isfile():
                    count += 1
                    size += member.size
                    if len(files) < SHOWN:
                        files.append(f"{parent}/{member.name}")
    except (tarfile.ReadError, EOFError):
        partial = True
    partial = partial or bool(getattr(stream, "truncated", False))
    return Hidden(mount_point=mount_point, files=tuple(files), count=count, size_bytes=size, partial=partial)


def hidden_files(
    client: docker.DockerClient, image: str, mount_points: Sequence[str], *, session: str, owner: str
) -> list[Hidden]:
    """What ``image`` holds under each of ``mount_points`` (a profile's tmpfs mounts), for those that hold files.

    The container is a ``TrackedContainer`` of ``session`` and ``owner`` (so a signal sweep finds it), created,
    never started, and always removed. A mount point the image lacks holds nothing.

    Raises:
        docker.errors.DockerException: the engine refused to create the container.
    """
    found = []
    spec = ContainerSpec(image=image, entrypoint=["true"], command=[])
    with TrackedContainer(client, spec, session=session, owner=owner, create_only=True) as tracked:
        for point in mount_points:
            try:
                chunks, _ = tracked.held().get_archive(point)
            except docker.errors.NotFound:
                continue
            listed = list_archive(point, _Bounded(chunks, MAX_BYTES))
            if listed.count:
                found.append(listed)
    return found
