"""Newline-delimited text over non-blocking pipes, waited for in the event loop: how MCP's
stdio transport frames its messages, for our server's stdin and stdout and for the pipes of
the MCP servers we start as child processes.

Lines are found in time that grows with their length (the SDK's stdio client joins its
buffer to every 64 KB it reads, which grows with the square: 20 MB took 1.3 to 3.2 s), and a
line longer than a bound is dropped whole, so that a peer writing without end cannot fill the
memory."""

from __future__ import annotations

import json
import logging
import os
import re
from collections import deque
from collections.abc import Awaitable, Callable
from contextlib import suppress
from dataclasses import dataclass
from typing import Any

import anyio

log = logging.getLogger(__name__)

READ_CHUNK = 1 << 16
# The longest line read (a session_import of a big pi file fits); a longer one is dropped.
MAX_LINE = 64 << 20
# How much of a dropped line's beginning and end is kept, to say which message it was.
EDGE = 4096
# The code of the error read in place of an answer that could not be read: too long, or (from
# a server we started) not JSON-RPC (JSON-RPC leaves -32000 to -32099 to implementations; this
# one never leaves the process).
ANSWER_UNREAD = -32099


@dataclass(frozen=True)
class DroppedLine:
    """A line longer than the reader takes, left out: its first and last ``EDGE`` bytes."""

    limit: int
    head: bytes
    tail: bytes

    def members(self) -> dict[str, Any]:
        """The JSON-RPC message's top-level members that its edges hold whole: those before
        its first long one (as the Python SDK writes a message: jsonrpc, id, method) and those
        after its last (as the TypeScript SDK does: its jsonrpc and id come last)."""
        found: dict[str, Any] = {}
        text = self.head.decode("utf-8", errors="ignore")
        decoder = json.JSONDecoder()
        at = _skip_space(text, 0)
        if text[at : at + 1] == "{":
            at += 1
            while True:  # "key": value, until a value too long for the head
                try:
                    key, at = decoder.raw_decode(text, _skip_space(text, at))
                    at = _skip_space(text, at)
                    if not isinstance(key, str) or text[at : at + 1] != ":":
                        break
                    value, at = decoder.raw_decode(text, _skip_space(text, at + 1))
                except (ValueError, RecursionError):
                    break
                found[key] = value
                at = _skip_space(text, at)
                if text[at : at + 1] != ",":
                    break
                at += 1
        last = _LAST_MEMBERS.search(self.tail.decode("utf-8", errors="ignore"))
        if last is not None:
            with suppress(ValueError):  # a number JSON does not allow (01): not a message
                found.update(json.loads("{" + last.group(1) + "}"))
        return found

    def answered_id(self) -> int | str | None:
        """The id of the request this line answered, if it is a response whose id its edges
        hold (a response has an id and no method)."""
        members = self.members()
        if "method" in members:
            return None
        return _message_id(members.get("id"))

    def request_id(self) -> int | str | None:
        """The line's id, if it is a request whose id its edges hold."""
        members = self.members()
        return _message_id(members.get("id")) if "method" in members else None

    def error_in_place(self) -> str | None:
        """When the line is an answer whose id its edges hold, an error answer to the same
        request (``ANSWER_UNREAD``) to read in its place: the request then fails at once,
        saying why, instead of waiting for an answer that will never come."""
        answered = self.answered_id()
        if answered is None:
            return None
        message = (
            f"its answer is over {self.limit:,} bytes on one line, the most that is read, and"
            " was left out unread"
        )
        error = {"code": ANSWER_UNREAD, "message": message}
        return json.dumps({"jsonrpc": "2.0", "id": answered, "error": error}) + "\n"


# Scalar members to the end of a line: they follow the message's last long member, and only
# scalars stand between the first of them and the closing brace, so none of a nested object's
# members can be taken for the message's.
_STRING = r'"(?:[^"\\]|\\.)*"'
_SCALAR = rf"(?:{_STRING}|-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?|true|false|null)"
_LAST_MEMBERS = re.compile(
    rf"[{{,]\s*({_STRING}\s*:\s*{_SCALAR}(?:\s*,\s*{_STRING}\s*:\s*{_SCALAR})*)\s*}}\s*$"
)


def _skip_space(text: str, at: int) -> int:
    while at < len(text) and text[at] in " \t\r\n":
        at += 1
    return at


def _message_id(value: Any) -> int | str | None:
    """``value`` if it is an id JSON-RPC allows (MCP: a string or an integer)."""
    if isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    return None


def fd_reads(fd: int, size: int = READ_CHUNK) -> Callable[[], Awaitable[bytes]]:
    """Reads of the non-blocking descriptor ``fd`` (up to ``size`` bytes each; empty at its
    end), each waiting in the event loop until there is something to read."""

    async def read() -> bytes:
        while True:
            try:
                return os.read(fd, size)
            except BlockingIOError:
                await anyio.wait_readable(fd)

    return read


class PeerGone(Exception):
    """The other end closed the pipe we write to: nobody is left to read."""


class LineReader:
    """Lines (each with its newline) from a non-blocking file descriptor, as text: read with
    ``fd_reads``, or with ``chunks`` given instead. A line longer than ``max_line`` bytes is
    dropped as it comes: once it has ended, ``dropped`` is awaited with its edges, and a line
    it gives is read in its place (by default the drop is said on stderr). Each line read is
    also put on ``lines``, when given, for whoever sees what the transport made of it.

    A line that is not valid UTF-8 is read with U+FFFD for each byte that cannot be decoded,
    unless ``undecodable`` is given: then it is not read, and ``undecodable`` is awaited with
    what was wrong (a server must refuse such a request, not store it altered)."""

    def __init__(
        self,
        fd: int,
        max_line: int = MAX_LINE,
        lines: deque[str] | None = None,
        dropped: Callable[[DroppedLine], Awaitable[str | None]] | None = None,
        chunks: Callable[[], Awaitable[bytes]] | None = None,
        undecodable: Callable[[UnicodeDecodeError], Awaitable[None]] | None = None,
    ) -> None:
        self.fd = fd
        self._undecodable = undecodable
        self._chunks = chunks or fd_reads(fd)
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
            if end > self.max_line and not self._dropping:  # it came whole in one read
                head = bytes(self._buffer[: min(end, EDGE)])
                self._dropping, self._head, self._tail = True, head, b""
            if end >= 0 and self._dropping:
                self._tail = (self._tail + self._buffer[:end])[-EDGE:]
                del self._buffer[: end + 1]
                self._scanned = 0
                instead = await self._said_dropped()
                if instead is not None:
                    return self._read(instead)
                continue
            if end >= 0:
                line = await self._take(end + 1)
                if line is None:
                    continue
                return line
            if len(self._buffer) > self.max_line:
                if not self._dropping:
                    self._dropping, self._head, self._tail = True, bytes(self._buffer[:EDGE]), b""
                self._tail = (self._tail + self._buffer[-EDGE:])[-EDGE:]
                self._buffer.clear()
                self._scanned = 0
            self._scanned = len(self._buffer)
            chunk = await self._chunks()
            if not chunk:
                if self._dropping:  # the input ended inside the line
                    self._tail = (self._tail + self._buffer)[-EDGE:]
                    self._buffer.clear()
                    instead = await self._said_dropped()
                    if instead is not None:
                        return self._read(instead)
                if self._buffer:  # a last line without its newline
                    line = await self._take(len(self._buffer))
                    if line is not None:
                        return line
                raise StopAsyncIteration
            self._buffer += chunk

    async def _said_dropped(self) -> str | None:
        line = DroppedLine(self.max_line, self._head, self._tail)
        self._dropping, self._head, self._tail = False, b"", b""
        if self._dropped is not None:
            return await self._dropped(line)
        log.error("a message of over %s bytes from the client was dropped", f"{line.limit:,}")
        return None

    async def _take(self, size: int) -> str | None:
        """The next ``size`` bytes, as a line read; None when they are not UTF-8 and were
        handed to ``undecodable`` instead."""
        taken = self._buffer[:size]
        del self._buffer[:size]
        self._scanned = 0
        if self._undecodable is None:
            return self._read(taken.decode("utf-8", errors="replace"))
        try:
            line = taken.decode("utf-8")
        except UnicodeDecodeError as error:
            await self._undecodable(error)
            return None
        return self._read(line)

    def _read(self, line: str) -> str:
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
