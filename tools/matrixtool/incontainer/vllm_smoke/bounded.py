"""Bounded reading of a stream (a container's exec or log, a host process): its head and its tail are kept,
what lies between is counted and named, so a huge or endless stream cannot exhaust the tool's memory.

Standard library only, Python >= 3.9: the host reads its containers' and programs' output through it, the bundle
its check groups' (``suite``)."""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass
from typing import IO, Deque, Iterable


@dataclass(frozen=True)
class OutputLimit:
    """How much of a stream is kept, in bytes: its first ``head_bytes`` and its last ``tail_bytes``."""

    head_bytes: int = 1 << 20
    tail_bytes: int = 4 << 20


DEFAULT_LIMIT = OutputLimit()


class BoundedOutput:
    """A byte sink that keeps the head and the tail of what it is fed (``limit``), and counts what it drops.

    Thread-safe: one thread may feed it while another reads ``text()``."""

    def __init__(self, limit: OutputLimit = DEFAULT_LIMIT) -> None:
        self.limit = limit
        self._head = bytearray()
        self._tail: Deque[bytes] = deque()
        self._tail_size = 0
        self.dropped = 0
        self._lock = threading.Lock()

    def feed(self, chunk: bytes) -> None:
        """Keep ``chunk`` as far as the limit allows (the head first, then the tail, the oldest tail bytes out)."""
        with self._lock:
            room = self.limit.head_bytes - len(self._head)
            if room > 0:
                self._head += chunk[:room]
                chunk = chunk[room:]
            if not chunk:
                return
            self._tail.append(chunk)
            self._tail_size += len(chunk)
            while self._tail_size > self.limit.tail_bytes:
                excess = self._tail_size - self.limit.tail_bytes
                first = self._tail[0]
                if len(first) <= excess:
                    self._tail.popleft()
                    self._tail_size -= len(first)
                    self.dropped += len(first)
                else:
                    self._tail[0] = first[excess:]
                    self._tail_size -= excess
                    self.dropped += excess

    def pump(self, stream: IO[bytes]) -> None:
        """Feed every chunk of ``stream`` (a binary pipe) until its end."""
        for chunk in iter(lambda: stream.read1(1 << 16), b""):  # type: ignore[attr-defined]
            self.feed(chunk)

    def text(self) -> str:
        """What was kept, as UTF-8 (undecodable bytes replaced), with one line naming the bytes left out."""
        with self._lock:
            head, tail, dropped = bytes(self._head), b"".join(self._tail), self.dropped
        if not dropped:
            return (head + tail).decode("utf-8", errors="replace")
        mark = f"\n[... {dropped} bytes of output left out ...]\n"
        return head.decode("utf-8", errors="replace") + mark + tail.decode("utf-8", errors="replace")


def read_bounded(chunks: Iterable[bytes], limit: OutputLimit = DEFAULT_LIMIT) -> str:
    """Every chunk of ``chunks`` read, only ``limit``'s head and tail kept (see ``BoundedOutput.text``)."""
    sink = BoundedOutput(limit)
    for chunk in chunks:
        sink.feed(chunk)
    return sink.text()
