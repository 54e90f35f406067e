"""Prompts: a session's context, ready to continue in the client's own model."""

from __future__ import annotations

import json
from typing import Annotated

import mcp.types as types
from mcp.server import MCPServer
from mcp.server.mcpserver import AssistantMessage, Context, Message, UserMessage
from mcp.shared.exceptions import MCPError
from pydantic import Field

from mcp_agent.messages import AssistantMessage as OurAssistant
from mcp_agent.messages import ToolResultMessage, content_text
from mcp_agent.server.lifespan import app_state
from mcp_agent.sessions import SessionError


def register(server: MCPServer) -> None:
    @server.prompt(title="Continue session")
    async def continue_session(
        session_id: Annotated[str, Field(description="the session to continue")],
        ctx: Context,
    ) -> list[Message]:
        """The session's context (its current branch, compacted as the model sees it)."""
        state = app_state(ctx)
        try:
            context = await state.offload(lambda: state.repo.open(session_id).build_context())
        except SessionError as error:
            raise MCPError(types.INVALID_PARAMS, f"{error.code}: {error}") from None
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
                    messages.append(AssistantMessage("\n".join(parts)))
            elif isinstance(message, ToolResultMessage):
                status = "failed" if message.is_error else "returned"
                messages.append(UserMessage(f"[tool {message.tool_name} {status}]\n{message.text}"))
            else:
                messages.append(UserMessage(content_text(message.content) or "(image)"))
        if not messages:
            messages.append(UserMessage(f"(session {session_id} is empty)"))
        return messages
