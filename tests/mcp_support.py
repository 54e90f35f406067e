"""Calling our MCP tools from tests: a result's structured content, or an error's text."""

from __future__ import annotations

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
