"""mcp-agent-sessions: an MCP server that runs agents and keeps conversations as session trees.

The public API, importable from here (each name is loaded when first used, so that the command
line starts fast):

    from mcp_agent import SessionAgent, SqliteSessionRepo, UserMessage, resolve_model, stream_fn_for

Layers, each importing only those below it: messages < sessions < compaction < agent < runtime <
{server, cli}; providers < loop. See ARCHITECTURE.md.
"""

from __future__ import annotations

# Nothing is imported here at first, not even typing (20 ms at the command line's start, when
# a Ctrl-C could not be ended quietly yet: see mcp_agent.cli); type checkers take this name as
# typing's.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

# name -> the module that defines it
_EXPORTS = {
    # messages
    "AssistantMessage": "mcp_agent.messages",
    "ImageContent": "mcp_agent.messages",
    "Message": "mcp_agent.messages",
    "MessageParseError": "mcp_agent.messages",
    "Model": "mcp_agent.messages",
    "StopReason": "mcp_agent.messages",
    "TextContent": "mcp_agent.messages",
    "ThinkingLevel": "mcp_agent.messages",
    "ToolCall": "mcp_agent.messages",
    "ToolResultMessage": "mcp_agent.messages",
    "Usage": "mcp_agent.messages",
    "UserMessage": "mcp_agent.messages",
    "convert_to_llm": "mcp_agent.messages",
    "parse_message": "mcp_agent.messages",
    # tools and events
    "AgentTool": "mcp_agent.tools",
    "AgentToolResult": "mcp_agent.tools",
    "AgentEvent": "mcp_agent.events",
    # the loop and the agent
    "AgentLoopConfig": "mcp_agent.loop",
    "agent_loop": "mcp_agent.loop",
    "agent_loop_continue": "mcp_agent.loop",
    "Agent": "mcp_agent.agent",
    "AgentBusyError": "mcp_agent.agent",
    # models
    "resolve_model": "mcp_agent.providers.registry",
    "stream_fn_for": "mcp_agent.providers.registry",
    "StreamOptions": "mcp_agent.providers.base",
    # sessions
    "Session": "mcp_agent.sessions",
    "SessionContext": "mcp_agent.sessions",
    "SessionEntry": "mcp_agent.sessions",
    "SessionError": "mcp_agent.sessions",
    "SessionRepo": "mcp_agent.sessions",
    "InMemorySessionRepo": "mcp_agent.sessions",
    "JsonlSessionRepo": "mcp_agent.sessions",
    "SqliteSessionRepo": "mcp_agent.sessions",
    "build_session_context": "mcp_agent.sessions",
    # compaction
    "CompactionSettings": "mcp_agent.compaction",
    "compact": "mcp_agent.compaction",
    "summarize_branch": "mcp_agent.compaction",
    # the runtime
    "SessionAgent": "mcp_agent.runtime.session_agent",
    "RetrySettings": "mcp_agent.runtime.session_agent",
}

__all__ = [
    "Agent",
    "AgentBusyError",
    "AgentEvent",
    "AgentLoopConfig",
    "AgentTool",
    "AgentToolResult",
    "AssistantMessage",
    "CompactionSettings",
    "ImageContent",
    "InMemorySessionRepo",
    "JsonlSessionRepo",
    "Message",
    "MessageParseError",
    "Model",
    "RetrySettings",
    "Session",
    "SessionAgent",
    "SessionContext",
    "SessionEntry",
    "SessionError",
    "SessionRepo",
    "SqliteSessionRepo",
    "StopReason",
    "StreamOptions",
    "TextContent",
    "ThinkingLevel",
    "ToolCall",
    "ToolResultMessage",
    "Usage",
    "UserMessage",
    "__version__",
    "agent_loop",
    "agent_loop_continue",
    "build_session_context",
    "compact",
    "convert_to_llm",
    "parse_message",
    "resolve_model",
    "stream_fn_for",
    "summarize_branch",
]


def _version() -> str:
    # Read when first asked for: importlib.metadata (and the email package it loads) took a
    # quarter of the command line's start, and a Ctrl-C then, before the command line could
    # end it quietly, printed the traceback of that import.
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("mcp-agent-sessions")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "0.0.0+unknown"


def __getattr__(name: str) -> Any:
    if name == "__version__":
        globals()[name] = found = _version()
        return found
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'mcp_agent' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return list(__all__)


if TYPE_CHECKING:
    from mcp_agent.agent import Agent, AgentBusyError
    from mcp_agent.compaction import CompactionSettings, compact, summarize_branch
    from mcp_agent.events import AgentEvent
    from mcp_agent.loop import AgentLoopConfig, agent_loop, agent_loop_continue
    from mcp_agent.messages import (
        AssistantMessage,
        ImageContent,
        Message,
        MessageParseError,
        Model,
        StopReason,
        TextContent,
        ThinkingLevel,
        ToolCall,
        ToolResultMessage,
        Usage,
        UserMessage,
        convert_to_llm,
        parse_message,
    )
    from mcp_agent.providers.base import StreamOptions
    from mcp_agent.providers.registry import resolve_model, stream_fn_for
    from mcp_agent.runtime.session_agent import RetrySettings, SessionAgent
    from mcp_agent.sessions import (
        InMemorySessionRepo,
        JsonlSessionRepo,
        Session,
        SessionContext,
        SessionEntry,
        SessionError,
        SessionRepo,
        SqliteSessionRepo,
        build_session_context,
    )
    from mcp_agent.tools import AgentTool, AgentToolResult
