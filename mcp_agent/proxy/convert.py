"""MCP tool shapes to and from the agent's: Tool → AgentTool, CallToolResult → AgentToolResult."""

from __future__ import annotations

import json
from typing import Any

import mcp.types as types

from mcp_agent.messages import ImageContent, TextContent
from mcp_agent.tools import AgentToolResult
from mcp_agent.wire import utf8_only

# Downstream tools are named "<server>__<tool>" for the model.
NAME_SEPARATOR = "__"


def qualified_name(server: str, tool: str) -> str:
    return f"{server}{NAME_SEPARATOR}{tool}"


def input_schema(tool: types.Tool) -> dict[str, Any]:
    schema = dict(tool.input_schema or {})
    schema.setdefault("type", "object")
    return schema


def to_agent_result(result: types.CallToolResult) -> AgentToolResult:
    """The agent's shape of a downstream tool's result; text that no UTF-8 holds (a lone
    surrogate a server wrote as JSON) becomes U+FFFD, so the result can be stored and sent."""
    content: list[TextContent | ImageContent] = []
    structured = utf8_only(result.structured_content)
    for block in result.content:
        if isinstance(block, types.TextContent):
            content.append(TextContent(text=utf8_only(block.text)))
        elif isinstance(block, types.ImageContent):
            content.append(ImageContent(data=block.data, mime_type=block.mime_type))
        elif isinstance(block, types.EmbeddedResource):
            resource = block.resource
            text = getattr(resource, "text", None)
            content.append(
                TextContent(
                    text=utf8_only(text) if text is not None else f"[resource {resource.uri}]"
                )
            )
        elif isinstance(block, types.ResourceLink):
            content.append(TextContent(text=f"[resource link {block.uri}]"))
        else:
            content.append(TextContent(text=f"[{getattr(block, 'type', 'content')} omitted]"))
    if not content and structured is not None:
        content.append(TextContent(text=json.dumps(structured, ensure_ascii=False)))
    return AgentToolResult(
        content=content,
        details=structured,
        is_error=bool(result.is_error),
    )
