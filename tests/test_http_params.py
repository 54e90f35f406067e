"""``Mcp-Param-*`` headers over streamable HTTP: the SDK checks them against a tool's schema only
where the tool declares one (``x-mcp-header``); our tools declare none, and their schemas are
not walked at every call to find that out (strict.SessionsServer._tool_input_schema)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import httpx2
import pytest
from mcp_support import make_server
from pydantic import Field

from mcp_agent.server.strict import SessionsServer

pytestmark = pytest.mark.anyio

HEADERS = {
    "accept": "application/json, text/event-stream",
    "content-type": "application/json",
    "mcp-protocol-version": "2026-07-28",
    "mcp-method": "tools/call",
}
META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"},
    "io.modelcontextprotocol/clientCapabilities": {},
}


def header_server() -> SessionsServer:
    server = SessionsServer("headers")

    @server.tool()
    async def where(
        region: Annotated[str, Field(json_schema_extra={"x-mcp-header": "Region"})],
    ) -> str:
        return region

    @server.tool()
    async def plain(region: str) -> str:
        return region

    return server


async def call(server: SessionsServer, tool: str, **headers: str) -> httpx2.Response:
    app = server.streamable_http_app(streamable_http_path="/mcp", host="127.0.0.1")
    body: dict[str, Any] = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": tool, "arguments": {"region": "eu"}, "_meta": META},
    }
    async with (
        server.session_manager.run(),
        httpx2.AsyncClient(
            transport=httpx2.ASGITransport(app), base_url="http://127.0.0.1:8000"
        ) as http,
    ):
        return await http.post("/mcp", json=body, headers={**HEADERS, "mcp-name": tool, **headers})


async def test_a_declared_header_is_still_checked() -> None:
    wrong = await call(header_server(), "where", **{"mcp-param-region": "us"})
    assert wrong.status_code == 400
    assert "Mcp-Param-Region" in wrong.json()["error"]["message"]
    missing = await call(header_server(), "where")
    assert missing.status_code == 400
    right = await call(header_server(), "where", **{"mcp-param-region": "eu"})
    assert right.status_code == 200
    assert right.json()["result"]["structuredContent"] == {"result": "eu"}


async def test_a_tool_without_declared_headers_is_served_as_before() -> None:
    answer = await call(header_server(), "plain", **{"mcp-param-other": "x"})
    assert answer.status_code == 200
    assert answer.json()["result"]["structuredContent"] == {"result": "eu"}


def test_our_tools_schemas_are_not_handed_to_the_header_check(tmp_path: Path) -> None:
    server = make_server(tmp_path)
    lookup = server._lowlevel_server.get_tool_input_schema
    assert lookup is not None
    names = [tool.name for tool in server._tool_manager.list_tools()]
    assert "session_append" in names
    assert [name for name in names if lookup(name) is not None] == []
    assert lookup("no such tool") is None
    declaring = header_server()._lowlevel_server.get_tool_input_schema
    assert declaring is not None
    assert declaring("where") is not None and declaring("plain") is None
