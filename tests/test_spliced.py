"""Answers spliced on their way out (mcp_agent/server/spliced.py): over our stdio transport and
2026 streamable HTTP a long answer's structured content goes to the wire as the stored JSON
text, and the client gets exactly what any other transport gives it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any, cast

import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.server import MCPServer, _streamable_http_modern
from mcp.server.mcpserver import Context
from mcp.shared.message import SessionMessage
from mcp_support import (
    Served,
    initialize_request,
    make_server,
    started_fixture,  # noqa: F401  (the started fixture)
)
from mcp_types import ErrorData, JSONRPCError, JSONRPCResponse, TextContent
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS
from narrow import narrow
from test_session_reads import busy_session

from mcp_agent.messages import UserMessage
from mcp_agent.runtime.settings import ServerSettings
from mcp_agent.server import spliced
from mcp_agent.server.streamable_http import build_http_app
from mcp_agent.sessions import SqliteSessionRepo

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="the POSIX stdio transport")

BASE = "http://127.0.0.1:8000"
READS: list[tuple[str, dict[str, Any]]] = [
    ("session_context", {"limit": 0}),
    ("session_context", {}),
    ("session_context", {"limit": 3}),
    ("session_get", {"limit": 0}),
    ("session_get", {"view": "entries", "limit": 0}),
    ("session_get", {"view": "entries", "limit": 4}),
    ("session_get", {"view": "tree"}),
    ("session_get", {"view": "outline", "limit": 0}),
]


def wire(line: str) -> dict[str, Any]:
    parsed: dict[str, Any] = json.loads(line)
    return parsed


def test_a_response_is_written_with_its_structured_content_in_place() -> None:
    whole = '{"total":2,"messages":[{"role":"user","content":"é \\"q\\" \\u2028"},{"n":9007199254740993}]}'
    result = {
        "content": [{"type": "text", "text": "shortened"}],
        "structuredContent": {"total": 2, "messages": []},
        "_meta": {spliced.KEY: whole, "io.modelcontextprotocol/serverInfo": {"name": "s"}},
    }
    item = SessionMessage(JSONRPCResponse(jsonrpc="2.0", id=7, result=result))
    line = spliced.spliced(item).message.model_dump_json(by_alias=True, exclude_unset=True)
    assert wire(line) == {
        "jsonrpc": "2.0",
        "id": 7,
        "result": {
            "content": [{"type": "text", "text": "shortened"}],
            "structuredContent": json.loads(whole),
            "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "s"}},
        },
    }
    assert whole in line  # as it was: 2^53 + 1 and the escapes untouched
    # Only the splice's own key is taken out of _meta; a result of nothing else still works.
    alone = SessionMessage(
        JSONRPCResponse(
            jsonrpc="2.0", id="x", result={"structuredContent": {}, "_meta": {spliced.KEY: "[]"}}
        )
    )
    text = spliced.spliced(alone).message.model_dump_json()
    assert wire(text) == {"jsonrpc": "2.0", "id": "x", "result": {"structuredContent": []}}


def test_a_result_without_structured_content_loses_only_the_text() -> None:
    result = {"content": [], "_meta": {spliced.KEY: '{"a":1}'}}
    item = SessionMessage(JSONRPCResponse(jsonrpc="2.0", id=4, result=result))
    line = spliced.spliced(item).message.model_dump_json(by_alias=True, exclude_unset=True)
    assert wire(line) == {"jsonrpc": "2.0", "id": 4, "result": {"content": []}}


def test_other_messages_pass_as_they_are() -> None:
    plain = SessionMessage(JSONRPCResponse(jsonrpc="2.0", id=1, result={"content": []}))
    error = SessionMessage(
        JSONRPCError(jsonrpc="2.0", id=2, error=ErrorData(code=-1, message="no"))
    )
    other_meta = SessionMessage(
        JSONRPCResponse(jsonrpc="2.0", id=3, result={"_meta": {spliced.KEY: {"not": "text"}}})
    )
    for item in (plain, error, other_meta):
        assert spliced.spliced(item) is item


def test_only_the_server_being_served_splices() -> None:
    served, nested = MCPServer("served"), MCPServer("nested")

    def context(server: MCPServer) -> Context:
        return cast(Context, type("Ctx", (), {"mcp_server": server})())

    assert not spliced.wanted(context(served))
    with spliced.splicing(served):
        assert spliced.wanted(context(served))
        # A server called in process from a handler shares its context variables.
        assert not spliced.wanted(context(nested))
    assert not spliced.wanted(context(served))
    assert not spliced.usable('{"a":"b"}\n') and spliced.usable('{"a":"b\\n"}')


def long_session(db: Path) -> str:
    """A session with branches, a compaction and a context longer than a text block holds."""
    with SqliteSessionRepo(db) as repo:
        session = repo.create()
        busy_session(session, compacted=True)
        for n in range(40):
            session.append_message(UserMessage(content=f"question {n}: " + "é" * 2_000))
        return session.id


async def read_all(
    client: Client, session_id: str, progress: bool = False
) -> list[tuple[Any, str]]:
    """Every one of READS through ``client``: its structured content and text; ``progress``:
    asking for progress, as a client showing it does."""

    async def shown(progress: float, total: float | None, message: str | None) -> None:
        pass

    answers = []
    for name, arguments in READS:
        result = await client.call_tool(
            name,
            {"session_id": session_id, **arguments},
            progress_callback=shown if progress else None,
        )
        assert not result.is_error, result.content
        assert spliced.KEY not in (result.meta or {})
        answers.append((result.structured_content, narrow(result.content[0], TextContent).text))
    return answers


@pytest.mark.anyio
async def test_answers_over_stdio_are_what_an_in_process_client_gets(tmp_path: Path) -> None:
    session_id = long_session(tmp_path / "sessions.db")
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "mcp_agent", "serve", "--db", str(tmp_path / "sessions.db")],
    )
    async with Client(params) as over_stdio, Client(make_server(tmp_path)) as in_process:
        stdio = await read_all(over_stdio, session_id)
        assert stdio == await read_all(in_process, session_id)
    whole = stdio[0][0]
    assert whole["total"] == len(whole["messages"]) > 20 and not whole["truncated"]
    assert "textNote" in json.loads(stdio[0][1])  # the text was shortened: 64 KB


def counting_splices(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Each HTTP body that had a structured content put in, by its length."""
    done: list[int] = []
    real = spliced._spliced_body

    def counted(body: bytes, answer: spliced.HttpAnswer) -> bytes:
        before = len(answer.texts)
        found = real(body, answer)
        if len(answer.texts) < before:
            done.append(len(found))
        return found

    monkeypatch.setattr(spliced, "_spliced_body", counted)
    return done


@pytest.mark.anyio
@pytest.mark.parametrize("reply", ["json", "event stream"])
async def test_answers_over_2026_http_are_spliced_and_what_an_in_process_client_gets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reply: str
) -> None:
    session_id = long_session(tmp_path / "sessions.db")
    done = counting_splices(monkeypatch)
    kinds: list[str] = []

    async def kind(response: httpx2.Response) -> None:
        kinds.append(response.headers.get("content-type", "").split(";")[0])

    server = make_server(tmp_path)
    app = build_http_app(server, ServerSettings(db_path=tmp_path / "sessions.db", no_auth=True))
    async with (
        server.session_manager.run(),
        httpx2.AsyncClient(
            transport=httpx2.ASGITransport(app), base_url=BASE, event_hooks={"response": [kind]}
        ) as http,
        Client(streamable_http_client(f"{BASE}/mcp", http_client=http)) as over_http,
        Client(make_server(tmp_path)) as in_process,
    ):
        assert over_http.protocol_version not in HANDSHAKE_PROTOCOL_VERSIONS
        if reply == "event stream":
            # The SDK goes over to an event stream when a tool takes longer than this; a call
            # that asks for progress is one that may (a call that does not is answered as JSON
            # straight away: streamable_http.PLAIN_TOOLS).
            monkeypatch.setattr(_streamable_http_modern, "_SSE_PING_INTERVAL", 0.001)
        answers = await read_all(over_http, session_id, progress=reply == "event stream")
        assert answers == await read_all(in_process, session_id)
    assert len(done) == len(READS)  # every read was spliced
    if reply == "event stream":
        # Which calls outlast the SDK's window depends on the machine; the whole context (over
        # 100 KB, below) always does, so the splice into an event stream is always exercised.
        assert "text/event-stream" in kinds, kinds
    else:
        assert kinds.count("application/json") >= len(READS) // 2, kinds
    assert max(done) > 100_000  # the whole context, not its 64 KB text


@pytest.mark.anyio
async def test_a_2025_http_session_gets_its_answers_whole_as_before(
    tmp_path: Path, started: list[Served]
) -> None:
    session_id = long_session(tmp_path / "http.db")
    server = Served(tmp_path, "--no-auth")
    started.append(server)
    async with (
        httpx2.AsyncClient(timeout=60) as http,
        Client(streamable_http_client(server.url, http_client=http), mode="legacy") as legacy,
        Client(streamable_http_client(server.url, http_client=http)) as modern,
        Client(make_server(tmp_path, db_path=tmp_path / "http.db")) as in_process,
    ):
        assert legacy.protocol_version in HANDSHAKE_PROTOCOL_VERSIONS
        expected = await read_all(in_process, session_id)
        assert await read_all(legacy, session_id) == expected
        assert await read_all(modern, session_id) == expected


def test_only_2026_requests_to_the_mcp_endpoint_are_spliced() -> None:
    def scope(method: str, version: bytes | None) -> dict[str, Any]:
        headers = [(b"mcp-protocol-version", version)] if version else []
        return {"type": "http", "method": method, "headers": headers}

    modern = sorted(MODERN_PROTOCOL_VERSIONS)[-1].encode()
    assert spliced.is_modern(scope("POST", modern))
    assert not spliced.is_modern(scope("GET", modern))
    assert not spliced.is_modern(scope("POST", None))
    for version in HANDSHAKE_PROTOCOL_VERSIONS:
        assert not spliced.is_modern(scope("POST", version.encode()))
    assert not spliced.is_modern({"type": "websocket", "headers": []})


@pytest.mark.anyio
async def test_a_body_without_a_token_goes_out_as_it_is() -> None:
    answer = spliced.HttpAnswer(MCPServer("s"))
    answer.texts["splice-0"] = '{"messages":[1]}'
    untouched = [
        b"not json",
        b'{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"no"}}',
        b'{"jsonrpc":"2.0","id":1,"result":{"_meta":{"other":"splice-0"}}}',
    ]
    for body in untouched:
        assert spliced._spliced_body(body, answer) == body
    body = b'{"jsonrpc":"2.0","id":1,"result":{"structuredContent":{"messages":[]},"_meta":{"%s":"splice-0"}}}'
    assert json.loads(spliced._spliced_body(body % spliced.KEY.encode(), answer)) == {
        "jsonrpc": "2.0",
        "id": 1,
        "result": {"structuredContent": {"messages": [1]}},
    }
    assert not answer.texts


def test_a_token_that_cannot_be_put_in_place_is_an_internal_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Sent as it was, the reply would carry the token, and the small fields beside it, for the
    # answer (before: a reply whose id pydantic could not read back went out so, unnoticed).
    answer = spliced.HttpAnswer(MCPServer("s"))
    answer.texts["splice-0"] = '{"sessions":[1]}'
    key = spliced.KEY.encode()
    refused = {
        1: b'{"jsonrpc":"2.0","id":1,"result":{"structuredContent":{},"_meta":{"%s":"splice-9"}}}'
        % key,
        None: b'{"jsonrpc":"2.0","id":"\\ud800","result":{"structuredContent":{},"_meta":{"%s":"splice-0"}}}'
        % key,
    }
    for request_id, body in refused.items():
        error = json.loads(spliced._spliced_body(body, answer))
        assert error["id"] == request_id and error["error"]["code"] == -32603, error
        assert "splice" not in json.dumps(error)
    assert caplog.text.count("could not be spliced") == 2


def test_the_server_widens_its_stdout_pipe(tmp_path: Path) -> None:
    fcntl = pytest.importorskip("fcntl")
    if not hasattr(fcntl, "F_GETPIPE_SZ"):
        pytest.skip("pipe sizes are Linux's")
    most = int(Path("/proc/sys/fs/pipe-max-size").read_text())
    server = subprocess.Popen(
        [sys.executable, "-m", "mcp_agent", "serve", "--db", str(tmp_path / "s.db")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert server.stdin is not None and server.stdout is not None
    try:
        before = fcntl.fcntl(server.stdout.fileno(), fcntl.F_GETPIPE_SZ)
        server.stdin.write((json.dumps(initialize_request()) + "\n").encode())
        server.stdin.flush()
        assert wire(server.stdout.readline().decode())["id"] == 1
        after = fcntl.fcntl(server.stdout.fileno(), fcntl.F_GETPIPE_SZ)
        assert after == min(most, 1 << 20) > before
    finally:
        server.stdin.close()
        server.wait(timeout=30)


def modern_scope() -> dict[str, Any]:
    version = sorted(MODERN_PROTOCOL_VERSIONS)[-1].encode()
    return {"type": "http", "method": "POST", "headers": [(b"mcp-protocol-version", version)]}


async def served_by(app: Any) -> list[dict[str, Any]]:
    """What ``SplicingHttp`` around ``app`` sends for one 2026 request."""
    sent: list[dict[str, Any]] = []

    async def send(message: Any) -> None:
        sent.append(message)

    async def receive() -> Any:
        return {"type": "http.disconnect"}

    await spliced.SplicingHttp(app, MCPServer("s"))(modern_scope(), receive, send)
    return sent


def reply(token: str) -> bytes:
    result = {"structuredContent": {"messages": []}, "_meta": {spliced.KEY: token}}
    return json.dumps({"jsonrpc": "2.0", "id": 3, "result": result}).encode()


WHOLE = '{"messages":[{"role":"user","content":"é"}]}'
SPLICED = {"jsonrpc": "2.0", "id": 3, "result": {"structuredContent": json.loads(WHOLE)}}


@pytest.mark.anyio
async def test_a_json_reply_in_several_parts_is_spliced_and_its_length_set_anew() -> None:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        body = reply(spliced.carried(WHOLE))
        headers = [(b"content-type", b"application/json"), (b"content-length", b"999")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body[:10], "more_body": True})
        await send({"type": "http.response.body", "body": body[10:], "more_body": False})

    start, body = await served_by(app)
    assert json.loads(body["body"]) == SPLICED
    assert dict(start["headers"])[b"content-length"] == str(len(body["body"])).encode()
    assert len(start["headers"]) == 2


@pytest.mark.anyio
async def test_an_event_stream_begun_before_the_answer_gets_it_spliced_in_its_last_event() -> None:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        headers = [(b"content-type", b"text/event-stream")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b": ping\r\n\r\n", "more_body": True})
        frame = b"event: message\r\ndata: " + reply(spliced.carried(WHOLE)) + b"\r\n\r\n"
        await send({"type": "http.response.body", "body": frame, "more_body": False})

    start, ping, last = await served_by(app)
    assert start["type"] == "http.response.start" and ping["body"] == b": ping\r\n\r\n"
    data = last["body"].removeprefix(b"event: message\r\ndata: ").removesuffix(b"\r\n\r\n")
    assert json.loads(data) == SPLICED


@pytest.mark.anyio
async def test_an_answer_left_unspliced_is_said_and_not_kept(
    caplog: pytest.LogCaptureFixture,
) -> None:
    kept: list[spliced.HttpAnswer] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        spliced.carried(WHOLE)
        answer = spliced._http_answer.get()
        assert answer is not None
        kept.append(answer)
        await send({"type": "http.response.start", "status": 202, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    await served_by(app)
    assert "1 answers were not spliced" in caplog.text
    assert kept[0].texts == {}
    assert spliced._http_answer.get() is None
