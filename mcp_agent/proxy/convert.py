"""MCP tool shapes to and from the agent's: Tool → AgentTool, CallToolResult → AgentToolResult."""

from __future__ import annotations

import json
from typing import Any

import mcp.types as types

from mcp_agent.messages import ImageContent, TextContent
from mcp_agent.tools import AgentToolResult

# Downstream tools are named "<server>__<tool>" for the model.
NAME_SEPARATOR = "__"


def qualified_name(server: str, tool: str) -> str:
    return f"{server}{NAME_SEPARATOR}{tool}"


def input_schema(tool: types.Tool) -> dict[str, Any]:
    schema = dict(tool.input_schema or {})
    schema.setdefault("type", "object")
    return schema


def to_agent_result(result: types.CallToolResult) -> AgentToolResult:
    content: list[TextContent | ImageContent] = []
    for block in result.content:
        if isinstance(block, types.TextContent):
            content.append(TextContent(text=block.text))
        elif isinstance(block, types.ImageContent):
            content.append(ImageContent(data=block.data, mime_type=block.mime_type))
        elif isinstance(block, types.EmbeddedResource):
            resource = block.resource
            text = getattr(resource, "text", None)
            content.append(
                TextContent(text=text if text is not None else f"[resource {resource.uri}]")
            )
        elif isinstance(block, types.ResourceLink):
            content.append(TextContent(text=f"[resource link {block.uri}]"))
        else:
            content.append(TextContent(text=f"[{getattr(block, 'type', 'content')} omitted]"))
    if not content and result.structured_content is not None:
        content.append(TextContent(text=json.dumps(result.structured_content, ensure_ascii=False)))
    return AgentToolResult(
        content=content,
        details=result.structured_content,
        is_error=bool(result.is_error),
    )
