"""Plain tool calls over 2026 streamable HTTP (streamable_http.PLAIN_TOOLS) are answered on the
SDK's JSON-response path, with the answers any other call path gives; every other call, and a
plain one that asks for progress, keeps the event-stream path."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.server import streamable_http_manager
from mcp_support import make_server

from mcp_agent.runtime.settings import ServerSettings
from mcp_agent.server import streamable_http
from mcp_agent.server.streamable_http import (
    PLAIN_BODY_BYTES,
    PLAIN_TOOLS,
    build_http_app,
    plain_call,
)

BASE = "http://127.0.0.1:8000"


def call(
    name: str, arguments: dict[str, Any] | None = None, meta: dict[str, Any] | None = None
) -> bytes:
    params: dict[str, Any] = {"name": name, "arguments": arguments or {}}
    if meta is not None:
        params["_meta"] = meta
    return json.dumps(
        {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}
    ).encode()


def test_a_plain_call_is_a_call_of_a_plain_tool_asking_for_no_progress() -> None:
    assert plain_call(call("session_list"))
    assert plain_call(call("session_append", meta={"other": 1}))
    assert not plain_call(call("session_list", meta={"progressToken": 7}))
    assert not plain_call(call("session_export"))  # can take long: pings keep it alive
    assert not plain_call(call("agent_run"))
    other = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    assert not plain_call(json.dumps(other).encode())
    for body in (b"", b"{", b"[]", b"[" + call("session_list") + b"]", b'{"params": 1}'):
        assert not plain_call(body)
    assert not plain_call(b'{"method": "tools/call", "params": {"name": ["session_list"]}}')
    # A search, the whole tree, or a large body keep the event-stream path.
    assert plain_call(call("session_list", {"limit": 5, "query": None}))
    assert not plain_call(call("session_list", {"query": "words"}))
    assert plain_call(call("session_get", {"view": "outline"}))
    assert not plain_call(call("session_get", {"view": "tree"}))
    entry = {"type": "message", "role": "user", "content": "x" * PLAIN_BODY_BYTES}
    assert not plain_call(call("session_append", {"session_id": "s", "entry": entry}))


@pytest.mark.anyio
async def test_the_plain_tools_are_tools_of_the_server(tmp_path: Path) -> None:
    async with Client(make_server(tmp_path)) as client:
        names = {tool.name for tool in (await client.list_tools()).tools}
    assert PLAIN_TOOLS <= names


@pytest.mark.anyio
async def test_plain_calls_take_the_json_path_and_answer_as_the_others_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Which path each request took (the JSON-response one or not), by its method: ours calls
    # the SDK's handler with json_response=True, the SDK's manager with its own setting.
    paths: list[tuple[str, bool]] = []
    bodies: list[bytes] = []
    real = streamable_http.handle_modern_request

    async def traced(app: Any, security: Any, json_response: bool, *rest: Any) -> None:
        paths.append((json.loads(bodies[-1])["method"], json_response))
        await real(app, security, json_response, *rest)

    async def request(request: httpx2.Request) -> None:
        bodies.append(request.content)

    monkeypatch.setattr(streamable_http, "handle_modern_request", traced)
    monkeypatch.setattr(streamable_http_manager, "handle_modern_request", traced)
    server = make_server(tmp_path)
    app = build_http_app(server, ServerSettings(db_path=tmp_path / "sessions.db", no_auth=True))

    async def progress(progress: float, total: float | None, message: str | None) -> None:
        pass

    async with (
        server.session_manager.run(),
        httpx2.AsyncClient(
            transport=httpx2.ASGITransport(app),
            base_url=BASE,
            event_hooks={"request": [request]},
        ) as http,
        Client(streamable_http_client(f"{BASE}/mcp", http_client=http)) as client,
        Client(make_server(tmp_path)) as in_process,
    ):
        created = await client.call_tool("session_create", {"name": "plain"})
        session_id = created.structured_content["id"]
        entry = {"type": "message", "role": "user", "content": "hello"}
        await client.call_tool("session_append", {"session_id": session_id, "entry": entry})
        paths.clear()
        plain = await client.call_tool("session_context", {"session_id": session_id})
        asked = await client.call_tool(
            "session_context", {"session_id": session_id}, progress_callback=progress
        )
        exported = await client.call_tool("session_export", {"session_id": session_id})
        here = await in_process.call_tool("session_context", {"session_id": session_id})
    calls = [json_path for method, json_path in paths if method == "tools/call"]
    assert calls == [True, False, False]
    assert "session_export" not in PLAIN_TOOLS and not exported.is_error
    for answer in (plain, asked):
        assert not answer.is_error
        assert answer.structured_content == here.structured_content
        assert answer.content == here.content
    assert plain.structured_content["messages"][-1]["content"] == "hello"
