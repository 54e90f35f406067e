"""Sessions: trees of entries, their storage backends, context building, repos and pi interop.

What is exported here is the package's public surface; the helpers the backends share stay in
their modules."""

from mcp_agent.sessions.context import (
    EntryProjector,
    EntryTransform,
    SessionContext,
    SessionContextBuildOptions,
    build_session_context,
)
from mcp_agent.sessions.entries import (
    CURRENT_SESSION_VERSION,
    ActiveToolsChangeEntry,
    BranchSummaryEntry,
    CompactionEntry,
    CustomEntry,
    CustomMessageEntry,
    LabelEntry,
    LeafEntry,
    MessageEntry,
    ModelChangeEntry,
    SessionEntry,
    SessionHeader,
    SessionInfoEntry,
    ThinkingLevelChangeEntry,
    UnknownEntry,
    new_header,
    parse_entry,
    parse_header,
)
from mcp_agent.sessions.errors import SessionError, Unreachable
from mcp_agent.sessions.jsonl import JsonlSessionRepo, JsonlSessionStorage
from mcp_agent.sessions.memory import InMemorySessionStorage
from mcp_agent.sessions.pi import ParsedSession, export_text, parse_session_text
from mcp_agent.sessions.repo import (
    InMemorySessionRepo,
    SessionPage,
    SessionRepo,
    SessionSummary,
)
from mcp_agent.sessions.session import Session, SessionListener, TreeNode
from mcp_agent.sessions.sqlite import SqliteSessionRepo, SqliteSessionStorage
from mcp_agent.sessions.storage import SessionStats, SessionStorage

__all__ = [
    "CURRENT_SESSION_VERSION",
    "ActiveToolsChangeEntry",
    "BranchSummaryEntry",
    "CompactionEntry",
    "CustomEntry",
    "CustomMessageEntry",
    "EntryProjector",
    "EntryTransform",
    "InMemorySessionRepo",
    "InMemorySessionStorage",
    "JsonlSessionRepo",
    "JsonlSessionStorage",
    "LabelEntry",
    "LeafEntry",
    "MessageEntry",
    "ModelChangeEntry",
    "ParsedSession",
    "Session",
    "SessionContext",
    "SessionContextBuildOptions",
    "SessionEntry",
    "SessionError",
    "SessionHeader",
    "SessionInfoEntry",
    "SessionListener",
    "SessionPage",
    "SessionRepo",
    "SessionStats",
    "SessionStorage",
    "SessionSummary",
    "SqliteSessionRepo",
    "SqliteSessionStorage",
    "ThinkingLevelChangeEntry",
    "TreeNode",
    "UnknownEntry",
    "Unreachable",
    "build_session_context",
    "export_text",
    "new_header",
    "parse_entry",
    "parse_header",
    "parse_session_text",
]
