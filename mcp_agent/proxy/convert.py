"""MCP tool shapes to and from the agent's: Tool → AgentTool, CallToolResult → AgentToolResult."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Container
from typing import Any

import mcp.types as types

from mcp_agent.messages import ImageContent, TextContent
from mcp_agent.tools import AgentToolResult
from mcp_agent.wire import utf8_only

# Downstream tools are named "<server>__<tool>" for the model.
NAME_SEPARATOR = "__"


def qualified_name(server: str, tool: str) -> str:
    return f"{server}{NAME_SEPARATOR}{tool}"


# What every model API takes as a tool's name: OpenAI's pattern and length, which Anthropic's
# and Google's also accept. MCP allows more (dots, 128 characters): one such name in a request
# made every run of the agent fail with the API's 400.
_NOT_IN_NAMES = re.compile(r"[^A-Za-z0-9_-]")
MAX_NAME_CHARS = 64


def model_tool_name(name: str, taken: Container[str]) -> str:
    """``name`` as a model API takes it, and not one of ``taken``: other characters become
    ``_``, and a name that had to change beyond that, or is taken, ends in a digest of the
    original (so that ``a.b`` and ``a_b`` stay two tools)."""
    safe = _NOT_IN_NAMES.sub("_", name) or "tool"
    if len(safe) <= MAX_NAME_CHARS and safe not in taken:
        return safe
    digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()
    for more in range(8, len(digest) + 1):
        candidate = f"{safe[: MAX_NAME_CHARS - more - 1]}_{digest[:more]}"
        if candidate not in taken:
            return candidate
    raise ValueError(f"no free name for tool {name!r}")  # 57 digests taken: never in practice


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
    if structured is not None:
        whole = json.dumps(structured, ensure_ascii=False)
        if not content:
            content.append(TextContent(text=whole))
        if len(whole) > MAX_RESULT_CHARS:
            # Kept as details (not sent to the model) it would be kept whole: the text, cut,
            # is what the model sees (servers send the same data as JSON text too).
            structured = None
    return AgentToolResult(
        content=_bounded(content),
        details=structured,
        is_error=bool(result.is_error),
    )


# What one result of a downstream tool may hold of text (about 25,000 tokens: Claude Code's
# bound for MCP tools): more fills the model's context at once, and stays in the session for
# every turn after.
MAX_RESULT_CHARS = 100_000
# One image's base64 (Anthropic takes 5 MB an image).
MAX_IMAGE_CHARS = (5 << 20) * 4 // 3
# The images of one result, in number and in all (a request to a model API holds 20 to 100
# images and 32 MB at most; each result stays in the session and is sent again every turn).
MAX_RESULT_IMAGES = 20
MAX_RESULT_IMAGE_CHARS = 2 * MAX_IMAGE_CHARS
# Blocks of one result: empty text blocks cost no characters but still a list entry each.
MAX_RESULT_BLOCKS = 1000


def _bounded(content: list[TextContent | ImageContent]) -> list[TextContent | ImageContent]:
    """``content`` with its text cut at ``MAX_RESULT_CHARS`` in all, images too large to send
    and those past the bounds of a result left out, and at most ``MAX_RESULT_BLOCKS`` blocks,
    each cut saying so."""
    kept: list[TextContent | ImageContent] = []
    left = MAX_RESULT_CHARS
    total = 0
    images = image_chars = 0
    over: list[int] = []  # sizes of the images left out for the bounds of a result
    for block in content[:MAX_RESULT_BLOCKS]:
        if isinstance(block, ImageContent):
            # What the base64 decodes to: its padding ("=") stands for no byte.
            size = len(block.data) * 3 // 4 - block.data[-2:].count("=")
            if len(block.data) > MAX_IMAGE_CHARS:
                kept.append(TextContent(text=f"[an image of {size:,} bytes left out: over 5 MB]"))
            elif images < MAX_RESULT_IMAGES and image_chars + len(block.data) <= (
                MAX_RESULT_IMAGE_CHARS
            ):
                images += 1
                image_chars += len(block.data)
                kept.append(block)
            else:
                over.append(size)
            continue
        total += len(block.text)
        if left > 0:
            kept.append(block if len(block.text) <= left else TextContent(text=block.text[:left]))
            left -= len(block.text)
    if total > MAX_RESULT_CHARS:
        kept.append(
            TextContent(
                text=f"[cut: the tool's result held {total:,} characters of text; the first"
                f" {MAX_RESULT_CHARS:,} are kept]"
            )
        )
    if over:
        kept.append(
            TextContent(
                text=f"[{len(over)} more images ({sum(over):,} bytes) left out: a result keeps"
                f" at most {MAX_RESULT_IMAGES} images, {MAX_RESULT_IMAGE_CHARS * 3 // 4:,} bytes"
                " in all]"
            )
        )
    if len(content) > MAX_RESULT_BLOCKS:
        kept.append(
            TextContent(
                text=f"[cut: the tool's result held {len(content):,} blocks; the first"
                f" {MAX_RESULT_BLOCKS:,} are kept]"
            )
        )
    return kept
