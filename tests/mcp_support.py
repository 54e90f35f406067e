"""Talking MCP from tests: our tools' structured results and error texts, a free loopback port,
and the raw initialize request for tests that speak JSON-RPC themselves."""

from __future__ import annotations

import socket
from typing import Any

import anyio
from mcp import Client

CALL_LIMIT_S = 60


async def call(client: Client, name: str, /, **arguments: Any) -> dict[str, Any]:
    """The structured result of a tool call that must succeed."""
    with anyio.fail_after(CALL_LIMIT_S):
        result = await client.call_tool(name, arguments)
    assert not result.is_error, result.content[0].text
    assert result.structured_content is not None
    return result.structured_content


async def call_error(client: Client, name: str, /, **arguments: Any) -> str:
    """The text of a tool call that must fail with a tool error."""
    with anyio.fail_after(CALL_LIMIT_S):
        result = await client.call_tool(name, arguments)
    assert result.is_error, result.structured_content
    return result.content[0].text


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def initialize_request(request_id: int = 1) -> dict[str, Any]:
    """A raw JSON-RPC initialize request on the 2025 handshake."""
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "raw", "version": "1"},
        },
    }
