"""Prompts: a session's context, ready to continue in the client's own model."""

from __future__ import annotations

import json
from typing import Annotated, Any

import mcp.types as types
from mcp.server import MCPServer
from mcp.server.mcpserver import AssistantMessage, Context, Message, UserMessage
from mcp.shared.exceptions import MCPError
from pydantic import Field

from mcp_agent.messages import AssistantMessage as OurAssistant
from mcp_agent.messages import ImageContent, ToolResultMessage, content_text
from mcp_agent.server.lifespan import app_state
from mcp_agent.server.paging import TEXT_BYTES, utf8_size
from mcp_agent.server.session_reads import ENTRY_BYTES
from mcp_agent.server.tool_errors import check_given, hint_for
from mcp_agent.sessions import SessionError

# A prompt is read by a model: at most about as much as a tool's text (``paging.TEXT_BYTES``),
# no message longer than an entry a page shows whole; both in bytes of UTF-8, as a tool's.
PROMPT_BYTES = TEXT_BYTES
MESSAGE_BYTES = ENTRY_BYTES


def register(server: MCPServer) -> None:
    @server.prompt(title="Continue session")
    async def continue_session(
        session_id: Annotated[str, Field(description="the session to continue")],
        ctx: Context,
    ) -> list[Message]:
        """The session's context (its current branch, compacted as the model sees it)."""
        state = app_state(ctx)
        check_given("session_id", session_id, "session_list shows the sessions")
        try:
            context = await state.offload(lambda: state.repo.open(session_id).build_context())
        except SessionError as error:
            hint = f" ({said})" if (said := hint_for(error)) else ""
            raise MCPError(types.INVALID_PARAMS, f"{error.code}: {error}{hint}") from None
        from mcp_agent.messages import convert_to_llm

        messages: list[Message] = []
        for message in convert_to_llm(context.messages):
            if isinstance(message, OurAssistant):
                parts = [message.text] if message.text else []
                parts += [
                    f"[called tool {call.name} with {json.dumps(call.arguments, ensure_ascii=False)}]"
                    for call in message.tool_calls
                ]
                if parts:
                    messages.append(AssistantMessage(_bounded("\n".join(parts))))
            elif isinstance(message, ToolResultMessage):
                status = "failed" if message.is_error else "returned"
                text = f"[tool {message.tool_name} {status}]\n{_said(message.content)}"
                messages.append(UserMessage(_bounded(text)))
            else:
                messages.append(UserMessage(_bounded(_said(message.content) or "(no text)")))
        if not messages:
            messages.append(UserMessage(f"(session {session_id} is empty)"))
        return _newest(session_id, messages)


def _said(content: str | list[Any]) -> str:
    """A message's text, each image in it named where it was (a prompt message here is text:
    an image left out without a word is one the model never knows it was shown)."""
    if isinstance(content, str):
        return content
    parts: list[str] = []
    for block in content:
        if isinstance(block, ImageContent):
            parts.append(
                f"[an image ({block.mime_type}) left out of this prompt; session_context has it]"
            )
        elif text := content_text([block]):
            parts.append(text)
    return "\n".join(parts)


def _text(message: Message) -> str:
    content = message.content
    return content.text if isinstance(content, types.TextContent) else ""


def _bounded(text: str) -> str:
    """A message's text, cut at ``MESSAGE_BYTES`` with a note saying where it is whole."""
    if utf8_size(text) <= MESSAGE_BYTES:
        return text
    kept = text.encode()[:MESSAGE_BYTES].decode(errors="ignore")  # not in a character
    return (
        f"{kept}\n[… {len(text) - len(kept):,} more characters of this"
        " message are left out of this prompt; session_context has the message (a message too"
        " large for its page names the entry to read whole)]"
    )


def _newest(session_id: str, messages: list[Message]) -> list[Message]:
    """The newest ``messages`` that fit in ``PROMPT_BYTES``, after a note saying how many
    older ones are left out and where they are."""
    used, start = 0, len(messages)
    while start > 0 and used + (size := utf8_size(_text(messages[start - 1]))) <= PROMPT_BYTES:
        used += size
        start -= 1
    if start == 0:
        return messages
    note = (
        f"[The {start:,} oldest of the {len(messages):,} messages of session {session_id} are"
        f" left out to keep this prompt within about {PROMPT_BYTES // 1024} KB; session_context"
        " pages back to them.]"
    )
    return [UserMessage(note), *messages[start:]]
