"""The agent's context snapshot and its mutable runtime state (seed: AgentContext, AgentState)."""

from __future__ import annotations

from dataclasses import dataclass, field

from mcp_agent.messages import BaseMessage, Model, ThinkingLevel
from mcp_agent.tools import AgentTool


@dataclass
class AgentContext:
    """A read-only snapshot handed to a model call: system prompt, messages, tools."""

    system_prompt: str
    messages: list[BaseMessage]
    tools: list[AgentTool] | None = None


@dataclass
class AgentState:
    system_prompt: str
    model: Model
    thinking_level: ThinkingLevel = ThinkingLevel.OFF
    tools: list[AgentTool] = field(default_factory=list)
    messages: list[BaseMessage] = field(default_factory=list)
    is_streaming: bool = False
    streaming_message: BaseMessage | None = None
    pending_tool_calls: set[str] = field(default_factory=set)
    error_message: str | None = None
