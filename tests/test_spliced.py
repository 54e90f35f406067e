"""Answers spliced on their way out (mcp_agent/server/spliced.py): over our stdio transport a
long answer's structured content goes to the wire as the stored JSON text, and the client gets
exactly what any other transport gives it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any, cast

import pytest
from mcp import Client, StdioServerParameters
from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.shared.message import SessionMessage
from mcp_support import initialize_request, make_server
from mcp_types import ErrorData, JSONRPCError, JSONRPCResponse
from test_session_reads import busy_session

from mcp_agent.messages import UserMessage
from mcp_agent.server import spliced
from mcp_agent.sessions import SqliteSessionRepo

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="the POSIX stdio transport")

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


@pytest.mark.anyio
async def test_answers_over_stdio_are_what_an_in_process_client_gets(tmp_path: Path) -> None:
    with SqliteSessionRepo(tmp_path / "sessions.db") as repo:
        session = repo.create()
        busy_session(session, compacted=True)
        for n in range(40):  # a context longer than a text block holds
            session.append_message(UserMessage(content=f"question {n}: " + "é" * 2_000))
        session_id = session.id
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "mcp_agent", "serve", "--db", str(tmp_path / "sessions.db")],
    )
    answers: dict[str, list[Any]] = {}
    async with Client(params) as over_stdio, Client(make_server(tmp_path)) as in_process:
        for name, arguments in READS:
            for client, kind in ((over_stdio, "stdio"), (in_process, "memory")):
                result = await client.call_tool(name, {"session_id": session_id, **arguments})
                assert not result.is_error, result.content
                assert spliced.KEY not in (result.meta or {})
                text = result.content[0].text  # type: ignore[union-attr]
                answers.setdefault(kind, []).append((result.structured_content, text))
    assert answers["stdio"] == answers["memory"]
    whole = answers["stdio"][0][0]
    assert whole["total"] == len(whole["messages"]) > 20 and not whole["truncated"]
    assert "textNote" in json.loads(answers["stdio"][0][1])  # the text was shortened: 64 KB


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
