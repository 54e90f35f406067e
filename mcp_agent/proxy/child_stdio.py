"""The stdio transport to an MCP server we start as a child process.

The SDK's ``stdio_client`` joins what it has buffered to every 64 KB it reads, so a line takes
time that grows with the square of its length (an answer of 20 MB, a big picture as base64,
took 1.3 to 3.2 s here), and it holds a line whole however long it grows. Here the child's
stdout is a pipe of our own, read in the event loop by ``pipes.LineReader``: in time that
grows with the line (0.11 s), and a line over ``max_line`` bytes is dropped as it comes. An
answer dropped so is read as an error answer to its request, which fails at once saying why;
any other line dropped is heard as a message that could not be read (as one that is not
JSON-RPC). Starting, the environment and stopping follow the SDK's: the child gets its own
process group, whose leader is its guard (``child_guard.py``: it starts the server, ends as
it ends, and ends the group should this process end first, even by SIGKILL); to stop it, its
stdin is closed, it is given ``CLOSE_GRACE`` seconds to exit, then its group is sent SIGTERM
and, after ``FORCE_KILL`` seconds, SIGKILL; a child that
exits by itself may leave processes it started in its group, and they get the same. Once the
whole server is told to stop in a hurry (``hurry_stops``: it got SIGTERM), what is left of
each grace is cut to ``HURRIED_KILL`` seconds from then. On Windows the SDK's transport serves.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager, suppress
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
from anyio.abc import Process
from mcp import StdioServerParameters
from mcp.client.stdio import get_default_environment, stdio_client
from mcp.shared.message import SessionMessage
from mcp_types import ErrorData, JSONRPCError, jsonrpc_message_adapter
from pydantic import ValidationError

from mcp_agent.pipes import (
    ANSWER_UNREAD,
    EDGE,
    MAX_LINE,
    DroppedLine,
    LineReader,
    PeerGone,
    Writer,
    fd_reads,
)

log = logging.getLogger(__name__)

# How long the child has to exit by itself once its stdin is closed, and then after SIGTERM.
CLOSE_GRACE = 2.0
FORCE_KILL = 2.0
# How long SIGTERM is given once the server itself was told to stop (see ``hurry_stops``):
# a client that stops its server so (the SDK's stdio client) sends SIGKILL 2 s later, and a
# downstream server still running then would be left running for good.
HURRIED_KILL = 1.0
# How often a stopped server's process group is looked at until it is empty.
GROUP_POLL = 0.05
# How long messages already taken may take to reach the child's stdin when stopping.
FLUSH_TIMEOUT = 0.5
# How long the child may take to exit once its output has ended, for its exit status.
EXIT_WAIT = 0.5
# The script that starts a server and ends its process group once we are gone.
GUARD = Path(__file__).with_name("child_guard.py")
# The child's stdout pipe, widened (Linux) so that a long answer comes in few reads.
PIPE_SIZE = 1 << 20


class LineTooLong(ValueError):
    """The server wrote a line longer than the transport reads: it was left out."""


class ServerExited(ConnectionError):
    """The server's process ended by itself: said in place of the bare "Connection closed"
    that the client hears (a server that exits at once, say for a missing key, said no more)."""


@asynccontextmanager
async def child_stdio(
    params: StdioServerParameters, max_line: int = MAX_LINE
) -> AsyncIterator[tuple[Any, Any]]:
    """Start the server ``params`` names and yield the read and write streams of an MCP
    client to it; on leaving, stop it (and whatever it started in its process group)."""
    if sys.platform == "win32":
        async with stdio_client(params) as streams:
            yield streams
        return
    child_in, to_child = os.pipe()
    from_child, child_out = os.pipe()
    with suppress(OSError, AttributeError):
        import fcntl

        fcntl.fcntl(from_child, fcntl.F_SETPIPE_SZ, PIPE_SIZE)
    try:
        chunks, close_reads = await _pipe_reads(from_child)  # before the child: no leak after
    except BaseException:
        for fd in (child_in, to_child, child_out):
            os.close(fd)
        raise
    try:
        process, alive = await _start_guarded(params, child_in, child_out)
    except BaseException:
        os.close(to_child)
        close_reads()
        raise
    finally:
        os.close(child_in)
        os.close(child_out)
    os.set_blocking(to_child, False)

    read_sender, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_stream, write_receiver = anyio.create_memory_object_stream[SessionMessage](0)
    written = anyio.Event()
    writing = anyio.CancelScope()
    output_ended = anyio.Event()

    async def read() -> None:
        async def dropped(line: DroppedLine) -> str | None:
            # An answer fails its call at once; anything else is said as a line not read.
            instead = line.error_in_place()
            if instead is None:
                too_long = f"a line of over {line.limit:,} bytes was left out unread"
                await read_sender.send(LineTooLong(too_long))
            return instead

        try:
            async with read_sender:
                async for line in LineReader(from_child, max_line, dropped=dropped, chunks=chunks):
                    if line.strip():
                        await read_sender.send(_parse(line))
                output_ended.set()  # before the client hears of it
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass  # the client is gone
        # Read on to the end: a child blocked writing to a full pipe could not exit.
        while await chunks():
            pass

    async def write() -> None:
        writer = Writer(to_child)
        try:
            with writing, write_receiver:
                async for item in write_receiver:
                    text = item.message.model_dump_json(by_alias=True, exclude_unset=True)
                    await writer.write(text + "\n")
        except (PeerGone, OSError, anyio.ClosedResourceError, anyio.BrokenResourceError):
            # The child stopped reading: the client hears the connection end.
            await read_sender.aclose()
        finally:
            written.set()

    async def stop() -> None:
        read_stream.close()
        write_stream.close()
        with anyio.move_on_after(FLUSH_TIMEOUT):
            await written.wait()
        writing.cancel()  # a child that does not read: its pipe is closed under no write
        await written.wait()
        os.close(to_child)  # the child reads the end of its input
        await _exited(process, CLOSE_GRACE)
        # SIGTERM and SIGKILL to what is left: the child, and what it started and left running.
        await _end_group(process.pid)
        if not await _exited(process, CLOSE_GRACE, hurried=False):  # killed: it is reaped
            log.warning("MCP server process %d is alive after SIGKILL; left behind", process.pid)

    try:
        async with anyio.create_task_group() as group:
            group.start_soon(read)
            group.start_soon(write)
            try:
                yield read_stream, write_stream
            except Exception as error:
                # Before stop(): an exit seen here is the child's own.
                status = process.returncode
                if status is None and output_ended.is_set():
                    with anyio.move_on_after(EXIT_WAIT):
                        status = await process.wait()
                if status is not None:
                    raise ServerExited(f"its process exited with status {status}") from error
                raise
            finally:
                # Bounded at every step, and done even when the caller is cancelled: a child
                # left running would outlive us.
                with anyio.CancelScope(shield=True):
                    await stop()
                group.cancel_scope.cancel()
    finally:
        close_reads()
        os.close(alive)  # the guard, if still there, ends what is left of the group


async def _start_guarded(
    params: StdioServerParameters, stdin: int, stdout: int
) -> tuple[Process, int]:
    """Start the server ``params`` names under its guard (``child_guard.py``), in a process
    group of its own with the guard as leader, and give the guard's process and the pipe's
    write end that keeps the guard waiting: once it is closed, by us or by our end, the
    guard ends the group. A server that cannot be started raises the ``OSError`` that
    starting it raised (``FileNotFoundError`` for a command not found)."""
    keep_r, alive = os.pipe()
    said, status = os.pipe()
    guard = [sys.executable, "-I", "-S", str(GUARD), str(keep_r), str(status), str(FORCE_KILL)]
    try:
        try:
            process = await anyio.open_process(
                [*guard, params.command, *params.args],
                stdin=stdin,
                stdout=stdout,
                stderr=sys.stderr,
                env=get_default_environment() | (params.env or {}),
                cwd=params.cwd,
                start_new_session=True,
                pass_fds=(keep_r, status),
            )
        finally:
            os.close(keep_r)
            os.close(status)
        os.set_blocking(said, False)
        reads, failure = fd_reads(said, 64), b""
        while piece := await reads():  # its end: the server started (or the guard ended)
            failure += piece
    except BaseException:
        os.close(alive)  # a guard started ends its group
        raise
    finally:
        os.close(said)
    if failure:
        await process.wait()
        os.close(alive)
        code = int(failure)
        raise OSError(code, os.strerror(code), params.command)  # its subclass for the code
    return process, alive


async def _pipe_reads(fd: int) -> tuple[Callable[[], Awaitable[bytes]], Callable[[], None]]:
    """Reads of the pipe ``fd`` (up to ``PIPE_SIZE`` bytes each; empty at its end) and what
    closes it. On asyncio's event loop through its pipe transport, which stays registered with
    the loop: waiting for the descriptor at each read instead cost about 15 µs a message (a
    small answer took 1.07 to 1.26 times the SDK's). On another loop, that wait at each read."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        os.set_blocking(fd, False)
        return fd_reads(fd, PIPE_SIZE), lambda: os.close(fd)
    reader = asyncio.StreamReader(limit=PIPE_SIZE, loop=loop)
    pipe = os.fdopen(fd, "rb", buffering=0)
    try:
        transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader, loop=loop), pipe
        )
    except BaseException:
        pipe.close()
        raise

    async def read() -> bytes:
        try:
            return await reader.read(PIPE_SIZE)
        except OSError:  # the pipe broke: as its end
            return b""

    return read, transport.close


def _parse(line: str) -> SessionMessage | Exception:
    """``line`` as a message; when it cannot be read, an error answer in its place if it is an
    answer whose id its edges hold (JSON nested deeper than the SDK reads, a trailing comma,
    a result that is not an object): its call fails at once, saying why, instead of waiting
    out its time limit and then stopping the server with the other calls it had under way.
    Any other line is the error, heard as a message that could not be read."""
    try:
        return SessionMessage(jsonrpc_message_adapter.validate_json(line, by_name=False))
    except ValueError as error:  # pydantic's ValidationError is one
        edges = (line[:EDGE].encode(errors="replace"), line[-EDGE:].encode(errors="replace"))
        answered = DroppedLine(len(line), *edges).answered_id()
        if answered is None:
            return error
        problem = "it is not a valid JSON-RPC answer"
        if isinstance(error, ValidationError) and error.errors()[0]["type"] == "json_invalid":
            problem = error.errors(include_url=False)[0]["msg"]  # "Invalid JSON: … at column N"
        said = ErrorData(code=ANSWER_UNREAD, message=f"its answer could not be read: {problem}")
        return SessionMessage(JSONRPCError(jsonrpc="2.0", id=answered, error=said))


class _Hurry:
    """When the whole server was told to stop at once (None until then)."""

    since: float | None = None


def hurry_stops() -> None:
    """The server is stopping because it was told to (SIGTERM): every stop of a downstream
    server, under way or to come, gives what is left of its graces ``HURRIED_KILL`` seconds
    from now, so that none outlives a client that kills its server soon after."""
    if _Hurry.since is None:
        _Hurry.since = time.monotonic()


def _left(end: float) -> float:
    """Seconds left of a grace that ends at ``end`` (on the monotonic clock), hurried or not."""
    if _Hurry.since is not None:
        end = min(end, _Hurry.since + HURRIED_KILL)
    return end - time.monotonic()


async def _end_group(group: int) -> None:
    """Stop what is left of the process group ``group`` (its leader, if it runs, and what it
    started and did not stop): SIGTERM, then SIGKILL after ``FORCE_KILL`` seconds. Nothing is
    sent to a group that is empty."""
    # /proc is read on a worker thread: nothing that reads files runs on the event loop.
    for sig, then in ((signal.SIGTERM, FORCE_KILL), (signal.SIGKILL, CLOSE_GRACE)):
        if not await anyio.to_thread.run_sync(_group_alive, group):
            return
        try:
            os.killpg(group, sig)
        except (ProcessLookupError, PermissionError):
            return  # no process is left in it (or none that is ours)
        end = time.monotonic() + then
        while True:
            await anyio.sleep(GROUP_POLL)
            if not await anyio.to_thread.run_sync(_group_alive, group):
                return
            # SIGKILL's wait is only for the kernel to be done: no hurry cuts it.
            if (_left(end) if sig == signal.SIGTERM else end - time.monotonic()) <= 0:
                break
    log.warning("a process of MCP server group %d is alive after SIGKILL; left behind", group)


def _group_alive(group: int) -> bool:
    """Whether a process of ``group`` is running: one that has ended but is not reaped yet
    (a zombie, its parent's to reap) still answers a signal, so on Linux /proc says."""
    try:
        os.killpg(group, 0)
    except (ProcessLookupError, PermissionError):
        return False
    try:
        names = os.listdir("/proc")
    except OSError:
        return True  # no /proc: the signal's answer is all there is
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as stat:
                fields = stat.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue  # gone meanwhile
        if len(fields) > 2 and fields[2] == str(group).encode() and fields[0] != b"Z":
            return True
    return False


async def _exited(process: Process, seconds: float, hurried: bool = True) -> bool:
    """Whether ``process`` exited within ``seconds`` (fewer once the stops are hurried, if
    ``hurried``). (Its pipes are ours, not asyncio's, so the wait is for the process alone,
    not for whatever it started holding them open.)"""
    end = time.monotonic() + seconds
    while (left := _left(end) if hurried else end - time.monotonic()) > 0:
        # A hurry is looked for every GROUP_POLL seconds; the process's end is heard at once.
        with anyio.move_on_after(min(left, GROUP_POLL)):
            await process.wait()
            return True
    return process.returncode is not None
