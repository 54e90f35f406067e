"""Serving MCP over stdin and stdout without a thread per message.

The SDK's ``stdio_server`` reads and writes through ``anyio.wrap_file``: every line read and
every message written is a hop to a worker thread and back, which is most of an MCP round
trip over stdio (and those threads contend with the request for the GIL). On POSIX we give
it streams over the same pipes that wait for readiness in the event loop instead; framing,
parsing and the message loop stay the SDK's. Elsewhere (Windows) the SDK's own streams serve.

Like the SDK, we keep the wire to ourselves while serving: fd 0 reads the null device and fd 1
goes to stderr, so a stray ``print`` or a child process cannot corrupt the protocol stream.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress
from typing import Any

import anyio
from mcp.server import MCPServer
from mcp.server.stdio import stdio_server

log = logging.getLogger(__name__)

READ_CHUNK = 1 << 16


class LineReader:
    """Lines (each with its newline) from a non-blocking file descriptor, as text."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._buffer = bytearray()
        self._scanned = 0  # bytes already known to hold no newline

    def __aiter__(self) -> LineReader:
        return self

    async def __anext__(self) -> str:
        while True:
            end = self._buffer.find(b"\n", self._scanned)
            if end >= 0:
                line = bytes(self._buffer[: end + 1])
                del self._buffer[: end + 1]
                self._scanned = 0
                return line.decode("utf-8", errors="replace")
            self._scanned = len(self._buffer)
            try:
                chunk = os.read(self.fd, READ_CHUNK)
            except BlockingIOError:
                await anyio.wait_readable(self.fd)
                continue
            if not chunk:
                if self._buffer:  # a last line without its newline
                    line = bytes(self._buffer)
                    self._buffer.clear()
                    self._scanned = 0
                    return line.decode("utf-8", errors="replace")
                raise StopAsyncIteration
            self._buffer += chunk


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
            data = data[written:]

    async def flush(self) -> None:
        """Nothing is buffered: every write reached the pipe."""


def claim_wire() -> tuple[int, int, Callable[[], None]]:
    """Private non-blocking copies of fd 0 and 1, and the function that puts everything back;
    meanwhile fd 0 reads the null device and fd 1 writes to stderr. Raises OSError, having
    changed nothing, when the descriptors cannot be copied (fd 0 or 1 closed)."""
    sys.stdout.flush()
    opened: list[int] = []
    try:
        for fd in (0, 1, 0, 1):
            opened.append(os.dup(fd))
        opened.append(os.open(os.devnull, os.O_RDONLY))
    except OSError:
        for fd in opened:
            os.close(fd)
        raise
    wire_in, wire_out, saved_in, saved_out, devnull = opened
    blocking = os.get_blocking(wire_in), os.get_blocking(wire_out)
    os.dup2(devnull, 0)
    os.dup2(2, 1)
    # O_NONBLOCK belongs to the pipe's open file, which the saved descriptors (and maybe a
    # terminal or a parent) share: it is put back on release.
    os.set_blocking(wire_in, False)
    os.set_blocking(wire_out, False)

    def release() -> None:
        os.set_blocking(wire_in, blocking[0])
        os.set_blocking(wire_out, blocking[1])
        os.dup2(saved_in, 0)
        os.dup2(saved_out, 1)
        for fd in opened:
            os.close(fd)

    return wire_in, wire_out, release


@asynccontextmanager
async def event_loop_stdio() -> AsyncIterator[tuple[Any, Any]]:
    """The SDK's stdio transport over event-loop streams (POSIX), or as it is (elsewhere, or
    when the standard descriptors cannot be copied)."""
    claimed = None
    if sys.platform != "win32":
        with suppress(OSError):
            claimed = claim_wire()
    if claimed is None:
        async with stdio_server() as streams:
            yield streams
        return
    wire_in, wire_out, release = claimed
    try:
        async with stdio_server(LineReader(wire_in), Writer(wire_out)) as streams:  # type: ignore[arg-type]
            yield streams
    finally:
        release()


async def run_stdio(server: MCPServer) -> None:
    """``server.run_stdio_async()``, on the event-loop stdio transport."""
    lowlevel = server._lowlevel_server
    try:
        async with event_loop_stdio() as (read_stream, write_stream):
            await lowlevel.run(read_stream, write_stream, lowlevel.create_initialization_options())
    except* BrokenPipeError:
        # The client stopped reading (it closed the pipe or died): nobody is left to serve.
        log.info("the client closed the pipe; stopping")
