"""A 2025 session's calls that send nothing before their answer (``QUIET_TOOLS``, and resource
reads) are answered as one JSON body when the answer comes first: the Python SDK's client reads
a body of any size, and refuses an event over 1 MiB. A call that sends anything first (its
progress), or is slow past its stream's first ping, keeps its event stream, nothing lost; a
call of a tool that may take long and send first (it runs a model or
waits for a run) keeps it from the start."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp_support import (  # noqa: F401  (started_fixture: the started fixture)
    HTTP_HEADERS,
    Served,
    make_server,
    started_fixture,
)
from mcp_types import TextResourceContents
from sse_starlette import EventSourceResponse

from mcp_agent.runtime.settings import ServerSettings
from mcp_agent.server.event_store import SessionEvents
from mcp_agent.server.streamable_http import (
    PLAIN_TOOLS,
    QUIET_TOOLS,
    STREAMING_TOOLS,
    build_http_app,
    quiet_request,
)

MEBIBYTE = 1 << 20
BASE = "http://127.0.0.1:8000"


def request(name: str, method: str = "tools/call", **params: Any) -> bytes:
    if method == "tools/call":
        params = {"name": name, "arguments": {}, **params}
    return json.dumps({"jsonrpc": "2.0", "id": 7, "method": method, "params": params}).encode()


def test_a_quiet_request_is_a_call_of_a_tool_that_sends_nothing_first_or_a_read() -> None:
    assert PLAIN_TOOLS <= QUIET_TOOLS and not QUIET_TOOLS & STREAMING_TOOLS
    assert quiet_request(request("session_get", arguments={"view": "tree", "limit": 0}))
    assert quiet_request(request("session_export", _meta={"progressToken": 1}))
    assert quiet_request(request("", "resources/read", uri="session://s/export.jsonl"))
    for name in (*STREAMING_TOOLS, "another_servers_tool", ""):
        assert not quiet_request(request(name))
    assert not quiet_request(request("", "tools/list"))
    for body in (b"", b"{", b"[]", b'{"method": "tools/call", "params": 1}'):
        assert not quiet_request(body)


@pytest.mark.anyio
async def test_every_tool_of_the_server_is_quiet_or_streaming(tmp_path: Path) -> None:
    async with Client(make_server(tmp_path)) as client:
        names = {tool.name for tool in (await client.list_tools()).tools}
    assert names == QUIET_TOOLS | STREAMING_TOOLS


@pytest.mark.anyio
async def test_the_python_sdk_client_reads_a_session_over_a_mebibyte_on_a_2025_session(
    tmp_path: Path, started: list[Served]
) -> None:
    # Before, every whole read failed: "Server-sent event exceeded the 1048576 byte limit".
    served = Served(tmp_path, "--no-auth")
    started.append(served)
    heard: list[float] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        heard.append(progress)

    async with Client(streamable_http_client(served.url), mode="legacy") as client:
        created = await client.call_tool("session_create", {"name": "big"})
        assert created.structured_content is not None
        sid = created.structured_content["id"]
        entry = {"type": "message", "role": "user", "content": "x" * 360_000}
        for _ in range(3):
            added = await client.call_tool("session_append", {"session_id": sid, "entry": entry})
            assert not added.is_error, added
        # A plain read, one asking for progress, one that may take long (pinged if it does).
        for name, asked in [
            ("session_get", False),
            ("session_context", True),
            ("session_export", False),
        ]:
            arguments = {"session_id": sid, "limit": 0}
            callback = on_progress if asked else None
            whole = await client.call_tool(name, arguments, progress_callback=callback)
            assert not whole.is_error, name
            assert len(json.dumps(whole.structured_content)) > MEBIBYTE, name
        read = await client.read_resource(f"session://{sid}/export.jsonl")
        text = read.contents[0]
        assert isinstance(text, TextResourceContents) and len(text.text) > MEBIBYTE
        # The session goes on: a page, as before.
        page = await client.call_tool("session_get", {"session_id": sid, "limit": 1})
        assert page.structured_content is not None
        assert page.structured_content["truncated"] is True
    assert heard == []  # none is sent


# --- the wire, in process -----------------------------------------------------------------------


def tools_server() -> MCPServer:
    """A server whose tools bear our quiet tools' names and send what a test needs."""
    server = MCPServer("json-answers")

    @server.tool()
    async def session_get() -> str:
        return "z" * (2 * MEBIBYTE)

    @server.tool()
    async def session_stats(ctx: Context) -> str:
        await ctx.report_progress(1, 2, "half way")
        return "after progress"

    @server.tool()
    async def session_list() -> str:
        await anyio.sleep(0.5)  # past the stream's first ping (see ``pings_soon``)
        return "after a ping"

    @server.tool()
    async def agent_run() -> str:
        return "at once"

    @server.tool()
    async def session_create() -> str:
        return "at once"

    @server.tool()
    async def session_fork() -> str:
        server.entered.set()  # type: ignore[attr-defined]
        await server.gate.wait()  # type: ignore[attr-defined]
        return "once let through"

    server.entered = anyio.Event()  # type: ignore[attr-defined]
    server.gate = anyio.Event()  # type: ignore[attr-defined]
    return server


@pytest.fixture
def pings_soon(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(EventSourceResponse, "DEFAULT_PING_INTERVAL", 0.05)


class Session2025:
    """A 2025-11-25 session with an in-process server, over raw HTTP."""

    def __init__(
        self, server: MCPServer, app: Any, http: httpx2.AsyncClient, headers: dict[str, str]
    ) -> None:
        self.server = server
        self.app = app
        self.http = http
        self.headers = headers

    async def post(self, method: str, **params: Any) -> httpx2.Response:
        body = {"jsonrpc": "2.0", "id": 2, "method": method, "params": params}
        return await self.http.post("/mcp", json=body, headers=self.headers)


@pytest.fixture
async def session(tmp_path: Path, pings_soon: None) -> AsyncIterator[Session2025]:
    server = tools_server()
    app = build_http_app(server, ServerSettings(db_path=tmp_path / "unused.db", no_auth=True))
    async with (
        server.session_manager.run(),
        httpx2.AsyncClient(transport=httpx2.ASGITransport(app), base_url=BASE) as http,
    ):
        initialize = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "raw", "version": "1"},
            },
        }
        opened = await http.post("/mcp", json=initialize, headers=HTTP_HEADERS)
        headers = {
            **HTTP_HEADERS,
            "Mcp-Session-Id": opened.headers["mcp-session-id"],
            "Mcp-Protocol-Version": "2025-11-25",
        }
        initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        assert (await http.post("/mcp", json=initialized, headers=headers)).status_code == 202
        yield Session2025(server, app, http, headers)


def events(response: httpx2.Response) -> list[dict[str, str]]:
    """The events of an event stream, each as its fields (a ping: its comment)."""
    assert response.headers["content-type"].startswith("text/event-stream"), response.headers
    found = []
    for block in response.text.replace("\r\n", "\n").split("\n\n"):
        if block:
            fields = [line.partition(":")[::2] for line in block.split("\n")]
            found.append({name or "comment": value.removeprefix(" ") for name, value in fields})
    return found


def answer_of(response: httpx2.Response) -> Any:
    message = json.loads(response.text)
    return message["result"]["content"][0]["text"]


@pytest.mark.anyio
async def test_a_quiet_calls_answer_is_one_json_body_and_is_not_kept_for_a_replay(
    session: Session2025,
) -> None:
    answered = await session.post("tools/call", name="session_get", arguments={})
    assert answered.headers["content-type"] == "application/json"
    assert int(answered.headers["content-length"]) == len(answered.content) > 2 * MEBIBYTE
    assert answered.headers["mcp-session-id"] == session.headers["Mcp-Session-Id"]
    assert answer_of(answered) == "z" * (2 * MEBIBYTE)
    # No client holds an id of its events: none is kept.
    (transport,) = session.server.session_manager._server_instances.values()
    store = transport._event_store
    assert isinstance(store, SessionEvents) and store._budget.chars < MEBIBYTE


@pytest.mark.anyio
async def test_a_quiet_call_that_sends_progress_first_keeps_its_event_stream_whole(
    session: Session2025,
) -> None:
    meta = {"progressToken": "p"}
    streamed = await session.post("tools/call", name="session_stats", arguments={}, _meta=meta)
    priming, progress, answer = [e for e in events(streamed) if "comment" not in e]
    assert priming["data"] == "" and priming["retry"] == "1000" and priming["id"]
    assert json.loads(progress["data"])["params"]["progress"] == 1
    assert json.loads(answer["data"])["result"]["content"][0]["text"] == "after progress"
    assert progress["id"] and answer["id"]


@pytest.mark.anyio
async def test_a_call_slow_past_its_first_ping_and_a_streaming_call_keep_their_event_streams(
    session: Session2025,
) -> None:
    slow = events(await session.post("tools/call", name="session_list", arguments={}))
    # The ping that let the stream go on came after its priming event (a client whose stream
    # drops then can resume it from its start).
    assert "comment" in slow[1]
    priming, answer = [e for e in slow if "comment" not in e]
    assert priming == slow[0] and priming["data"] == "" and priming["retry"] == "1000"
    assert json.loads(answer["data"])["result"]["content"][0]["text"] == "after a ping"
    run = events(await session.post("tools/call", name="agent_run", arguments={}))
    assert [e["data"] == "" for e in run] == [True, False]
    listed = events(await session.post("tools/list"))
    assert json.loads(listed[-1]["data"])["result"]["tools"]


async def post_asgi(
    session: Session2025, tool: str, answered: Callable[[], Awaitable[None]] | None = None
) -> int:
    """A call of ``tool`` (request id 1) straight to the app: its status. ``answered`` is
    awaited in the app's last send of the answer, before its handler has ended."""
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call"}
    call["params"] = {"name": tool, "arguments": {}}
    headers = {**session.headers, "Host": "127.0.0.1:8000"}
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/mcp",
        "raw_path": b"/mcp",
        "query_string": b"",
        "root_path": "",
        "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
    }
    bodies = [{"type": "http.request", "body": json.dumps(call).encode(), "more_body": False}]
    status: list[int] = []

    async def receive() -> dict[str, Any]:
        if bodies:
            return bodies.pop()
        await anyio.sleep_forever()
        raise AssertionError

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            status.append(message["status"])
        elif not message.get("more_body", False) and answered is not None:
            await answered()

    await session.app(scope, receive, send)
    return status[0]


@pytest.mark.anyio
async def test_an_id_is_free_once_its_json_answer_went_while_its_handler_still_ends(
    session: Session2025,
) -> None:
    """A client sends its next request with the id of one just answered (free once answered,
    as the spec has it) while the server is still ending the first one's handler: the first
    one's end unregistered the second's wait for its answer, so the second one held its id
    until its own handler ended, and a third sent as soon as it was answered was refused
    (409) as one with an id still under way. Under load a client met it now and then."""
    gate, entered = session.server.gate, session.server.entered  # type: ignore[attr-defined]
    statuses: list[int] = []

    async def third() -> None:
        statuses.append(await post_asgi(session, "session_create"))

    async with anyio.create_task_group() as tasks:

        async def second() -> None:
            statuses.append(await post_asgi(session, "session_fork", third))

        async def after_first() -> None:
            tasks.start_soon(second)
            await entered.wait()  # the second is under way: the first's handler ends now

        statuses.append(await post_asgi(session, "session_create", after_first))
        gate.set()
    assert statuses == [200, 200, 200]
