"""The structured results of the server's tools (their output schemas come from these)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field


class SessionInfo(BaseModel):
    id: str
    name: str | None = None
    cwd: str = ""
    created: str = ""
    modified: str = ""
    entry_count: int = 0
    message_count: int = 0
    first_user_message: str | None = None
    parent_session: str | None = None
    leaf_id: str | None = None
    uri: str = ""


class SessionListResult(BaseModel):
    sessions: list[SessionInfo]
    next_cursor: str | None = Field(default=None, description="pass as cursor for the next page")


class SessionView(BaseModel):
    session: SessionInfo
    view: Literal["branch", "tree", "entries"]
    leaf_id: str | None
    entries: list[dict[str, Any]] | None = Field(
        default=None, description="pi v3 entries, root first (views branch and entries)"
    )
    tree: list[dict[str, Any]] | None = Field(
        default=None, description="nested {entry, label?, children} nodes (view tree)"
    )


class AppendResult(BaseModel):
    session_id: str
    entry_id: str
    leaf_id: str = Field(description="the session's leaf after the append: the new entry")


class MoveResult(BaseModel):
    session_id: str
    leaf_id: str | None
    branch_summary_id: str | None = None


class DeleteResult(BaseModel):
    session_id: str
    deleted: bool


class ContextResult(BaseModel):
    session_id: str
    messages: list[dict[str, Any]]
    thinking_level: str
    model: dict[str, str] | None
    active_tool_names: list[str] | None


class StatsResult(BaseModel):
    session_id: str
    stats: dict[str, Any]


class ExportResult(BaseModel):
    session_id: str
    jsonl: str
    lines: int


class CompactResult(BaseModel):
    session_id: str
    compaction_id: str | None
    tokens_before: int = 0
    tokens_after: int = 0
    summary: str = ""


class RunInfo(BaseModel):
    run_id: str
    session_id: str
    agent: str
    model: str
    status: str = Field(description="running, completed, error or aborted")
    answer: str | None = Field(default=None, description="the final assistant text")
    error: str | None = None
    stop_reason: str | None = None
    started: float
    finished: float | None = None
    events: int = 0
    last_event: str = ""
    new_messages: int = 0
    usage: dict[str, Any] = Field(default_factory=dict)
    depth: int = 0


class RunList(BaseModel):
    runs: list[RunInfo]


class AgentInfo(BaseModel):
    name: str
    description: str
    model: str | None
    thinking_level: str
    tools: list[str]
    servers: list[str] | None
    max_turns: int
    uri: str


class AgentList(BaseModel):
    agents: list[AgentInfo]


class QueueResult(BaseModel):
    run_id: str
    queued: str
    status: str
