"""One downstream MCP server, reached through an MCP client that a task of its own owns.

The server starts on first use, within a time limit. A crash or a hang turns the call into an
error result naming the server and stops the client (killing a stdio child), so the next call
starts it afresh. A live server is not restarted: not for a JSON-RPC error answer, nor an answer
that is not valid MCP, nor one slow call while it answers others (that call alone is cancelled).
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import anyio
import httpx2
import mcp.types as types
from anyio.abc import TaskGroup, TaskStatus
from mcp import Client, StdioServerParameters
from mcp.client.session import IncomingMessage, MessageHandlerFnT
from mcp.shared.dispatcher import ProgressFnT
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError

from mcp_agent.abort import AbortSignal, abort_message
from mcp_agent.manifests import ServerConfig
from mcp_agent.pipes import ANSWER_UNREAD, MAX_LINE
from mcp_agent.proxy.child_stdio import child_stdio
from mcp_agent.proxy.convert import to_agent_result
from mcp_agent.proxy.tool_listing import valid_tools_only
from mcp_agent.tools import AgentToolResult, schema_fault
from mcp_agent.wire import one_line

log = logging.getLogger(__name__)

# The SDK's progress callback: ``async (progress, total, message) -> None``.
ProgressCallback = ProgressFnT
# How long closing may take before we stop waiting (the SDK kills a stdio child within ~4 s).
CLOSE_TIMEOUT = 10.0
START_RETRY_DELAY = 30.0
# The tools taken from one server: a server that pages without end must not fill the memory
# (and a model API takes a few hundred tools in a request at most).
MAX_TOOLS = 1000
MAX_TOOL_PAGES = 100
# A tool's input schema goes with every request to the model, as its description does.
MAX_SCHEMA_CHARS = 64 * 1024
# Error codes the SDK gives a call whose connection was lost (or its own timeout); a server
# may send them too, as error answers of its own.
LOST_CODES = (types.CONNECTION_CLOSED, types.REQUEST_TIMEOUT)
# How long a server has to answer, after such an error, to show it is up.
PROBE_TIMEOUT = 5.0
# How much of a server's error text a result or a log line quotes.
MAX_ERROR_CHARS = 500
# One message from a server over HTTP (a JSON body, or one event of a stream), as a line over
# stdio: the SDK's client takes an event of 1 MiB at most (a picture is more), and a JSON body
# of any size, read whole into memory.
MAX_HTTP_MESSAGE = MAX_LINE


# How to make a client to a server: given the handler of its transport's faults.
Connect = Callable[[MessageHandlerFnT], AbstractAsyncContextManager[Client]]


class DownstreamError(RuntimeError):
    pass


class McpServerConnection:
    """An MCP client to one server (downstream or in-process), owned by a task of its own."""

    def __init__(
        self,
        name: str,
        connect: Connect,
        start_timeout: float | None = None,
    ):
        """``connect(message_handler)`` makes the client (not yet entered) whose transport's
        faults go to ``message_handler``."""
        self.name = name
        self._connect = connect
        self._start_timeout = start_timeout
        self._client: Client | None = None
        self._tools: list[types.Tool] = []
        self._stop: anyio.Event | None = None
        self._done: anyio.Event | None = None
        self._lock = anyio.Lock()
        self.starts = 0
        # What the server said that shows it is up: answers to calls (results and error
        # answers), progress and other notifications. A call that times out while the server
        # said anything is slow on a server that is up: stopping the server would fail the
        # calls of other runs too.
        self._heard = 0
        # What the server sent that could not be read (a line that is not JSON-RPC): said when
        # a call goes unanswered meanwhile, as it may have been the answer.
        self._unreadable: tuple[int, str] = (0, "")
        self._stale = False  # the server said its tools changed (notifications/tools/list_changed)
        # The last failed start: within START_RETRY_DELAY it is reported again at once, so
        # that a broken server does not cost every run its start-up time limit.
        self._failed: tuple[float, DownstreamError] | None = None

    @property
    def running(self) -> bool:
        return self._client is not None

    async def ensure_started(self, task_group: TaskGroup) -> Client:
        client = self._client
        if client is not None:
            # Up: nothing to wait for. Taking the lock cost each call a turn of the event loop
            # (anyio's checkpoint), a tenth of a built-in tool's call.
            return client
        async with self._lock:
            if self._client is None:
                if self._failed is not None:
                    when, error = self._failed
                    waited = time.monotonic() - when
                    if waited < START_RETRY_DELAY:
                        raise DownstreamError(
                            f"{error} (tried {waited:.0f} s ago; trying again after "
                            f"{START_RETRY_DELAY:g} s)"
                        )
                try:
                    try:
                        with anyio.fail_after(self._start_timeout):
                            await task_group.start(self._own)
                    except TimeoutError:
                        # The starting task was cancelled with us: its child process is gone.
                        raise DownstreamError(
                            f"MCP server {self.name!r} could not be started: it did not answer "
                            f"within {self._start_timeout:g} s (the entry's start_timeout in"
                            " servers.json sets this)"
                        ) from None
                except DownstreamError as error:
                    self._failed = (time.monotonic(), error)
                    raise
                self._failed = None
            assert self._client is not None
            return self._client

    async def tools(self, task_group: TaskGroup) -> list[types.Tool]:
        """The server's tools, started if need be, listed again if it said they changed."""
        client = await self.ensure_started(task_group)
        if self._stale:
            async with self._lock:
                if self._stale and self._client is client:
                    self._stale = False
                    try:
                        with anyio.fail_after(self._start_timeout):
                            self._tools = await self._list_tools(client)
                    except Exception as error:  # the tools as they were listed before
                        log.warning(
                            "MCP server %r: its changed tools could not be listed: %s",
                            self.name,
                            _describe(error),
                        )
        return self._tools

    async def _list_tools(self, client: Client) -> list[types.Tool]:
        tools: list[types.Tool] = []
        cursor: str | None = None
        cursors: set[str] = set()
        while True:
            page = await client.list_tools(cursor=cursor)
            room = MAX_TOOLS - len(tools)
            tools.extend(page.tools[:room])
            cursor = page.next_cursor
            if len(page.tools) > room or (cursor and len(tools) >= MAX_TOOLS):
                log.warning(
                    "MCP server %r lists more than %d tools: the rest are left out",
                    self.name,
                    MAX_TOOLS,
                )
                return await anyio.to_thread.run_sync(self._usable, tools)
            if not cursor:
                return await anyio.to_thread.run_sync(self._usable, tools)
            if cursor in cursors or len(cursors) >= MAX_TOOL_PAGES:
                # Paging in a circle, or page after page of nothing: it would go on until
                # the start's time limit gave up on the server.
                log.warning(
                    "MCP server %r pages its tools without end (a cursor again, or over %d "
                    "pages): the tools of the pages read are taken",
                    self.name,
                    MAX_TOOL_PAGES,
                )
                return await anyio.to_thread.run_sync(self._usable, tools)
            cursors.add(cursor)

    def _usable(self, tools: list[types.Tool]) -> list[types.Tool]:
        """``tools`` without those a model API would refuse a request for: an input schema
        that is no JSON Schema (OpenAI and Anthropic check each tool's, and one bad tool would
        fail every request of every run offered the server), or one too long to send with
        every request. Each left out is said in one line. (On a worker thread: checking a
        schema takes about a millisecond.)"""
        kept = []
        for tool in tools:
            fault = schema_fault(tool.input_schema, MAX_SCHEMA_CHARS)
            if fault is None:
                kept.append(tool)
            else:
                log.warning(
                    "MCP server %r lists tool %r, whose input schema a model could not be sent,"
                    " and it is left out: %s",
                    self.name,
                    tool.name,
                    fault,
                )
        return kept

    async def _own(self, *, task_status: TaskStatus[None]) -> None:
        stop, done = anyio.Event(), anyio.Event()
        self._stop, self._done = stop, done
        started = False
        try:
            async with self._connect(self._on_message) as client:
                self._stale = False
                tools = await self._list_tools(client)
                self._client, self._tools = client, tools
                self.starts += 1
                started = True
                task_status.started()
                async with anyio.create_task_group() as group:
                    group.start_soon(self._listen, client)
                    await stop.wait()
                    group.cancel_scope.cancel()
        except Exception as error:
            if not started:
                raise DownstreamError(
                    f"MCP server {self.name!r} could not be started: {_describe(error)}"
                ) from None
            log.warning("MCP server %r stopped: %s", self.name, _describe(error))
        finally:
            self._client = None
            done.set()

    async def _listen(self, client: Client) -> None:
        """Hear that the server's tools changed: on the 2026 protocol a client asks for that
        (``subscriptions/listen``); before it, the notification comes to ``_on_message``."""
        capability = client.server_capabilities.tools
        if capability is None or not capability.list_changed:
            return
        try:
            async with client.listen(tools_list_changed=True) as subscription:
                async for _ in subscription:
                    self._stale = True
        except Exception as error:  # an older protocol, a refusal, the stream dropped
            log.debug("MCP server %r: no tool changes heard: %s", self.name, _describe(error))

    async def _on_message(self, message: IncomingMessage) -> None:
        if not isinstance(message, Exception):
            self._heard += 1
        if isinstance(message, types.ToolListChangedNotification):
            self._stale = True  # listed again when tools are next asked for (a run starts)
        elif isinstance(message, Exception):
            said = _describe(message)
            count = self._unreadable[0] + 1
            self._unreadable = (count, said)
            if count <= 10 or count % 1000 == 0:  # a server printing to stdout: not a flood
                times = "once" if count == 1 else f"{count:,} times"
                log.warning(
                    "MCP server %r sent what could not be read (%s): %s", self.name, times, said
                )

    async def _answers(self, client: Client) -> bool:
        """Whether the server answers a request (its tools, not from the cache) within
        ``PROBE_TIMEOUT``: after an error whose code the SDK also gives a connection it lost
        (-32000, -32001), which a server that is up may send as its own error answer (JSON-RPC
        leaves -32000 to -32099 to servers). A closed connection fails the request at once."""
        with anyio.move_on_after(PROBE_TIMEOUT):
            try:
                await client.list_tools(cache_mode="bypass")
            except MCPError as error:
                return error.code not in LOST_CODES
            except Exception:
                return False
            return True
        return False

    async def stop(self) -> None:
        stop, done = self._stop, self._done
        if stop is None or done is None:
            return
        stop.set()
        with anyio.move_on_after(CLOSE_TIMEOUT, shield=True):
            await done.wait()

    async def call(
        self,
        task_group: TaskGroup,
        tool: str,
        arguments: dict[str, Any],
        *,
        time_limit: float | None,
        signal: AbortSignal | None = None,
        on_progress: ProgressCallback | None = None,
        meta: dict[str, Any] | None = None,
    ) -> AgentToolResult:
        with anyio.CancelScope() as scope:
            remove = signal.on_abort(scope.cancel) if signal else None
            heard, unreadable = self._heard, self._unreadable[0]

            async def progressed(progress: float, total: float | None, message: str | None) -> None:
                self._heard += 1
                if on_progress is not None:
                    await on_progress(progress, total, message)

            try:
                try:
                    client = await self.ensure_started(task_group)
                except DownstreamError as error:
                    return AgentToolResult.error(str(error))
                with anyio.fail_after(time_limit):
                    try:
                        result = await client.call_tool(
                            tool,
                            arguments,
                            progress_callback=progressed,
                            # RequestParamsMeta is an open TypedDict (PEP 728 extra_items) that
                            # mypy does not support yet: our own key cannot be typed as one.
                            meta=meta,  # type: ignore[arg-type]
                        )
                    except (ValidationError, RuntimeError) as error:
                        # An answer the SDK refused (not MCP, or structured content its
                        # output schema refuses): the server is up and stays so.
                        self._heard += 1
                        return AgentToolResult.error(
                            f"MCP server {self.name!r} answered {tool} with a result that "
                            f"could not be used: {_describe(error)}"
                        )
                    except MCPError as error:
                        if error.code not in LOST_CODES:
                            self._heard += 1
                        raise
                self._heard += 1
                return to_agent_result(result)
            except TimeoutError:
                late = f"MCP server {self.name!r} did not answer {tool} within {time_limit:g} s"
                count, said = self._unreadable
                if count != unreadable:
                    late += f" (it sent what could not be read meanwhile: {said})"
                if self._heard != heard:
                    # The server answered other calls or said something meanwhile (this call's
                    # progress too): it is up and only this call is slow. Stopping it would
                    # fail other calls; the SDK sends notifications/cancelled for this one.
                    return AgentToolResult.error(f"{late}; the call was cancelled")
                await self.stop()
                return AgentToolResult.error(
                    f"{late}; it was stopped and will be restarted on the next call"
                )
            except MCPError as error:
                if error.code in LOST_CODES and not await self._answers(client):
                    await self.stop()
                    return AgentToolResult.error(
                        f"MCP server {self.name!r} failed during {tool}: {_describe(error)}; "
                        "it will be restarted on the next call"
                    )
                if error.code == ANSWER_UNREAD:  # read in place of an answer not read
                    return AgentToolResult.error(
                        f"MCP server {self.name!r} answered {tool}, but {error.message}"
                    )
                if error.code == types.PARSE_ERROR:  # the SDK's: a JSON body it could not read
                    return AgentToolResult.error(
                        f"MCP server {self.name!r} answered {tool} with what could not be read: "
                        f"{_describe(error)}"
                    )
                # An error answer from a server that is up: the call was refused, not lost.
                return AgentToolResult.error(
                    f"MCP server {self.name!r} refused {tool}: {_describe(error)}"
                )
            except Exception as error:
                await self.stop()
                return AgentToolResult.error(
                    f"MCP server {self.name!r} failed during {tool}: {_describe(error)}; "
                    "it will be restarted on the next call"
                )
            finally:
                if remove:
                    remove()
        return AgentToolResult.error(f"{tool} on MCP server {self.name!r}: {abort_message(signal)}")


def connect_to(name: str, config: ServerConfig) -> Connect:
    """How to reach the server ``name``: a child process over stdio, streamable HTTP, or
    (``"type": "sse"``) the older HTTP+SSE transport. A tool it lists that is not valid MCP
    is left out, said in one line, and its other tools are kept."""

    def said(tool: str, error: ValidationError) -> None:
        log.warning(
            "MCP server %r lists tool %r, which is not valid MCP, and it is left out: %s",
            name,
            tool,
            _first_problem(error).removeprefix("tools.0."),
        )

    def client(transport: AbstractAsyncContextManager[Any], handler: MessageHandlerFnT) -> Client:
        made: list[Client] = []

        def version() -> str | None:
            try:
                return made[0].session.protocol_version if made else None
            except RuntimeError:  # not connected yet
                return None

        made.append(Client(valid_tools_only(transport, said, version), message_handler=handler))
        return made[0]

    if config.command:
        params = StdioServerParameters(
            command=config.command, args=config.args, env=config.env or None, cwd=config.cwd
        )
        return lambda handler: client(child_stdio(params), handler)

    @asynccontextmanager
    async def over_http(handler: MessageHandlerFnT) -> AsyncIterator[Client]:
        url = config.url or ""
        if config.type == "sse":
            from mcp.client.sse import sse_client

            async with client(sse_client(url, headers=config.headers), handler) as connected:
                yield connected
            return
        from mcp.client.streamable_http import streamable_http_client

        http = httpx2.AsyncClient(
            headers=config.headers,
            timeout=httpx2.Timeout(30, read=None),
            event_hooks={"response": [_bound_json_body]},
        )
        transport = streamable_http_client(
            url, http_client=http, max_sse_event_size=MAX_HTTP_MESSAGE
        )
        try:
            async with http, client(transport, handler) as connected:
                yield connected
        except* httpx2.ConnectError as refused:
            reason = refused.exceptions[0]
            raise ConnectionError(f"cannot connect to {_shown_url(url)}: {reason}") from None

    return over_http


def _shown_url(url: str) -> str:
    """``url`` as a message shows it: without a user, password or query, which may hold a key
    (the message reaches the model, in a run's warnings)."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


class AnswerTooLong(httpx2.StreamError):
    """A body over ``MAX_HTTP_MESSAGE``; the SDK's client fails the request it answers."""


async def _bound_json_body(response: httpx2.Response) -> None:
    """Read ``response``'s body (one JSON-RPC message) up to ``MAX_HTTP_MESSAGE`` bytes. An
    event stream is left as it is: the SDK bounds each of its events."""
    body = response.stream
    if isinstance(body, httpx2.AsyncByteStream) and not response.headers.get(
        "content-type", ""
    ).startswith("text/event-stream"):
        response.stream = _BoundedBody(body, MAX_HTTP_MESSAGE)


class _BoundedBody(httpx2.AsyncByteStream):
    def __init__(self, inner: httpx2.AsyncByteStream, limit: int) -> None:
        self._inner, self._limit = inner, limit

    async def __aiter__(self) -> AsyncIterator[bytes]:
        read = 0
        async for part in self._inner:
            read += len(part)
            if read > self._limit:
                raise AnswerTooLong(
                    f"its answer is over the limit of {self._limit:,} bytes and was left out"
                )
            yield part

    async def aclose(self) -> None:
        await self._inner.aclose()


def _describe(error: BaseException) -> str:
    """``error`` in one bounded line: it ends up in a tool result a model reads, and in logs."""
    while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]
    if isinstance(error, ValidationError):
        # The SDK reads each line as a union of the JSON-RPC message kinds.
        kind = "JSON-RPC message" if error.title.startswith("union[JSONRPC") else error.title
        return f"not a valid {kind}: {_first_problem(error)}"
    # A long message (jsonschema's) says what was wrong in its first paragraph.
    text = str(error).strip().split("\n\n")[0]
    return one_line(text or type(error).__name__, MAX_ERROR_CHARS)


def _first_problem(error: ValidationError) -> str:
    # Pydantic tries each member of a union (a content block's kinds), and names the member in
    # the location: those names are left out, and the first member's problem stands for all.
    problems = error.errors(include_url=False)
    first = problems[0]
    path = ".".join(str(part) for part in first["loc"] if not str(part)[:1].isupper())
    more = len({_place(p["loc"]) for p in problems}) - 1
    text = f"{path or '(top level)'}: {first['msg']}"
    return one_line(text + (f" (and {more} more)" if more else ""), MAX_ERROR_CHARS)


def _place(loc: tuple[int | str, ...]) -> tuple[int | str, ...]:
    """Where a problem is: the union a member's name begins, or the field."""
    for index, part in enumerate(loc):
        if str(part)[:1].isupper():
            return loc[:index]
    return loc
