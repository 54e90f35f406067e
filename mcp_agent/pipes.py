"""Newline-delimited text over non-blocking pipes, waited for in the event loop: how MCP's
stdio transport frames its messages, for our server's stdin and stdout and for the pipes of
the MCP servers we start as child processes.

Lines are found in time that grows with their length (the SDK's stdio client joins its
buffer to every 64 KB it reads, which grows with the square: a 21 MB line took 3.2 s), and a
line longer than a bound is dropped whole, so that a peer writing without end cannot fill the
memory."""

from __future__ import annotations

import logging
import os
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import anyio

log = logging.getLogger(__name__)

READ_CHUNK = 1 << 16
# The longest line read (a session_import of a big pi file fits); a longer one is dropped.
MAX_LINE = 64 << 20
# How much of a dropped line's beginning and end is kept, to say which message it was.
EDGE = 4096


@dataclass(frozen=True)
class DroppedLine:
    """A line longer than the reader takes, left out: its first and last ``EDGE`` bytes."""

    limit: int
    head: bytes
    tail: bytes


class PeerGone(Exception):
    """The other end closed the pipe we write to: nobody is left to read."""


class LineReader:
    """Lines (each with its newline) from a non-blocking file descriptor, as text. A line
    longer than ``max_line`` bytes is dropped as it comes: once it has ended, ``dropped`` is
    awaited with its edges, or by default it is said on stderr. Each line read is also put on
    ``lines``, when given, for whoever sees what the transport made of it."""

    def __init__(
        self,
        fd: int,
        max_line: int = MAX_LINE,
        lines: deque[str] | None = None,
        dropped: Callable[[DroppedLine], Awaitable[None]] | None = None,
    ) -> None:
        self.fd = fd
        self.max_line = max_line
        self.lines = lines
        self._dropped = dropped
        self._buffer = bytearray()
        self._scanned = 0  # bytes already known to hold no newline
        self._dropping = False  # inside a line that is too long, until its newline
        self._head = self._tail = b""  # the edges of the line being dropped

    def __aiter__(self) -> LineReader:
        return self

    async def __anext__(self) -> str:
        while True:
            end = self._buffer.find(b"\n", self._scanned)
            if end >= 0 and self._dropping:
                self._tail = (self._tail + self._buffer[:end])[-EDGE:]
                del self._buffer[: end + 1]
                self._scanned = 0
                await self._said_dropped()
                continue
            if end >= 0:
                return self._take(end + 1)
            if len(self._buffer) > self.max_line:
                if not self._dropping:
                    self._dropping, self._head, self._tail = True, bytes(self._buffer[:EDGE]), b""
                self._tail = (self._tail + self._buffer[-EDGE:])[-EDGE:]
                self._buffer.clear()
                self._scanned = 0
            self._scanned = len(self._buffer)
            try:
                chunk = os.read(self.fd, READ_CHUNK)
            except BlockingIOError:
                await anyio.wait_readable(self.fd)
                continue
            if not chunk:
                if self._dropping:  # the input ended inside the line
                    self._tail = (self._tail + self._buffer)[-EDGE:]
                    self._buffer.clear()
                    await self._said_dropped()
                if self._buffer:  # a last line without its newline
                    return self._take(len(self._buffer))
                raise StopAsyncIteration
            self._buffer += chunk

    async def _said_dropped(self) -> None:
        line = DroppedLine(self.max_line, self._head, self._tail)
        self._dropping, self._head, self._tail = False, b"", b""
        if self._dropped is not None:
            await self._dropped(line)
        else:
            log.error("a message of over %s bytes from the client was dropped", f"{line.limit:,}")

    def _take(self, size: int) -> str:
        line = self._buffer[:size].decode("utf-8", errors="replace")
        del self._buffer[:size]
        self._scanned = 0
        if self.lines is not None:
            self.lines.append(line)
        return line


class Writer:
    """Text written whole to a non-blocking file descriptor, waiting while the pipe is full."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    async def write(self, text: str) -> None:
        data = memoryview(text.encode("utf-8"))
        while data:
            try:
                written = os.write(self.fd, data)
            except BlockingIOError:
                await anyio.wait_writable(self.fd)
                continue
            except BrokenPipeError:
                raise PeerGone from None
            data = data[written:]

    async def flush(self) -> None:
        """Nothing is buffered: every write reached the pipe."""
