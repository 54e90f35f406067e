"""Branch summaries: when the leaf moves away from a branch, summarise what is left behind
(pi's branch-summarization), so that the new branch knows what was tried there."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from mcp_agent.abort import AbortSignal
from mcp_agent.blocking import Offload, inline
from mcp_agent.compaction.cut_points import FileOps, format_file_operations
from mcp_agent.compaction.errors import CompactionError
from mcp_agent.compaction.prompts import conversation_block
from mcp_agent.compaction.summarize import complete_summary
from mcp_agent.compaction.tokens import DEFAULT_RESERVE_TOKENS, estimate_tokens
from mcp_agent.messages import BaseMessage, Model, ThinkingLevel, Usage
from mcp_agent.providers.base import StreamFn, StreamOptions
from mcp_agent.sessions.context import session_entry_to_context_messages
from mcp_agent.sessions.entries import (
    BranchSummaryEntry,
    CompactionEntry,
    CustomMessageEntry,
    MessageEntry,
    SessionEntry,
)
from mcp_agent.sessions.errors import SessionError
from mcp_agent.sessions.session import Session

BRANCH_SUMMARY_MAX_TOKENS = 2048
NO_CONTENT_SUMMARY = "No content to summarize"

BRANCH_SUMMARY_PREAMBLE = """The user explored a different conversation branch before returning here.
Summary of that exploration:

"""

BRANCH_SUMMARY_PROMPT = """Create a structured summary of this conversation branch for context when returning later.

Use this EXACT format:

## Goal
[What was the user trying to accomplish in this branch?]

## Constraints & Preferences
- [Any constraints, preferences, or requirements mentioned]
- [Or "(none)" if none were mentioned]

## Progress
### Done
- [x] [Completed tasks/changes]

### In Progress
- [ ] [Work that was started but not finished]

### Blocked
- [Issues preventing progress, if any]

## Key Decisions
- **[Decision]**: [Brief rationale]

## Next Steps
1. [What should happen next to continue this work]

Keep each section concise. Preserve exact file paths, function names, and error messages."""


@dataclass
class BranchEntries:
    # The abandoned entries, oldest first.
    entries: list[SessionEntry]
    common_ancestor_id: str | None


def collect_branch_entries(
    session: Session, old_leaf_id: str | None, target_id: str | None
) -> BranchEntries:
    """The entries left behind when moving from ``old_leaf_id`` to ``target_id``: from the old
    leaf back to (not including) the deepest entry both paths share. Compactions and earlier
    branch summaries on the way are included; their summaries become part of the context."""
    if old_leaf_id is None:
        return BranchEntries([], None)
    old_path = session.get_branch(old_leaf_id)
    target_path = {e.id for e in session.get_branch(target_id)} if target_id is not None else set()
    common = next((e.id for e in reversed(old_path) if e.id in target_path), None)
    abandoned: list[SessionEntry] = []
    for entry in reversed(old_path):
        if entry.id == common:
            break
        abandoned.append(entry)
    abandoned.reverse()
    return BranchEntries(abandoned, common)


def _branch_messages(entry: SessionEntry) -> list[BaseMessage]:
    """What an abandoned entry tells the summariser; tool results are left out (the call in
    the assistant message says what was done)."""
    if isinstance(entry, MessageEntry):
        return [] if entry.message.role == "toolResult" else [entry.message]
    if isinstance(entry, CustomMessageEntry | BranchSummaryEntry | CompactionEntry):
        return session_entry_to_context_messages(entry, 0, [entry])
    return []


@dataclass
class PreparedBranch:
    messages: list[BaseMessage]
    file_ops: FileOps = field(default_factory=FileOps)
    total_tokens: int = 0


def prepare_branch_entries(
    entries: Sequence[SessionEntry], token_budget: int = 0
) -> PreparedBranch:
    """The messages to summarise, newest first until ``token_budget`` (0: no limit) is reached
    (pi's prepareBranchEntries): the newest context matters most. A summary (compaction or
    branch summary) that does not fit still goes in while under 90% of the budget. The file
    lists cover every abandoned entry, earlier branch summaries' lists included."""
    prepared = PreparedBranch([])
    for entry in entries:
        if isinstance(entry, BranchSummaryEntry) and not entry.from_hook:
            prepared.file_ops.add_details(entry.details)
        for message in _branch_messages(entry):
            prepared.file_ops.add_message(message)
    for entry in reversed(entries):
        messages = _branch_messages(entry)
        if not messages:
            continue
        tokens = sum(estimate_tokens(m) for m in messages)
        if token_budget > 0 and prepared.total_tokens + tokens > token_budget:
            is_summary = isinstance(entry, CompactionEntry | BranchSummaryEntry)
            if is_summary and prepared.total_tokens < token_budget * 0.9:
                prepared.messages[:0] = messages
                prepared.total_tokens += tokens
            break
        prepared.messages[:0] = messages
        prepared.total_tokens += tokens
    return prepared


@dataclass
class BranchSummary:
    summary: str
    read_files: list[str]
    modified_files: list[str]
    usage: Usage | None
    # A summary cut at the summariser's output limit says so here.
    warnings: list[str] = field(default_factory=list)

    def details(self) -> dict[str, list[str]]:
        return {"readFiles": self.read_files, "modifiedFiles": self.modified_files}


async def generate_branch_summary(
    entries: Sequence[SessionEntry],
    model: Model,
    stream_fn: StreamFn,
    *,
    token_budget: int | None = None,
    reserve_tokens: int = DEFAULT_RESERVE_TOKENS,
    instructions: str | None = None,
    replace_instructions: bool = False,
    signal: AbortSignal | None = None,
    options: StreamOptions | None = None,
    thinking_level: ThinkingLevel | str = ThinkingLevel.OFF,
) -> BranchSummary:
    """A structured summary of abandoned ``entries`` (pi's generateBranchSummary). The budget
    defaults to the model's context window minus ``reserve_tokens`` (at least half the window)."""
    if token_budget is None:
        window = model.context_window
        token_budget = max(window - reserve_tokens, window // 2)
    prepared = prepare_branch_entries(entries, max(token_budget, 1))
    read_files, modified_files = prepared.file_ops.lists()
    if not prepared.messages:
        return BranchSummary(NO_CONTENT_SUMMARY, read_files, modified_files, None)
    if replace_instructions and instructions:
        prompt = instructions
    elif instructions:
        prompt = f"{BRANCH_SUMMARY_PROMPT}\n\nAdditional focus: {instructions}"
    else:
        prompt = BRANCH_SUMMARY_PROMPT
    completion = await complete_summary(
        model,
        stream_fn,
        conversation_block(prepared.messages) + prompt,
        max_tokens=BRANCH_SUMMARY_MAX_TOKENS,
        what="Branch summarization",
        signal=signal,
        options=options,
        thinking_level=thinking_level,
    )
    summary = (
        BRANCH_SUMMARY_PREAMBLE
        + completion.text
        + format_file_operations(read_files, modified_files)
    )
    return BranchSummary(summary, read_files, modified_files, completion.usage, completion.warnings)


async def summarize_branch(
    session: Session,
    target_id: str,
    model: Model,
    stream_fn: StreamFn,
    *,
    token_budget: int | None = None,
    instructions: str | None = None,
    signal: AbortSignal | None = None,
    options: StreamOptions | None = None,
    offload: Offload = inline,
    warnings: list[str] | None = None,
) -> str:
    """Move the leaf to ``target_id``, adding a summary of the branch being left as a
    ``branch_summary`` entry (the new leaf, a child of the target); returns its id. Raises
    SessionError (not_found) for an unknown target and CompactionError, with nothing written,
    when nothing would be left behind or the summariser fails. ``offload`` runs the session's
    reads and the write (e.g. on worker threads). ``warnings`` gets what went wrong without
    stopping it (a summary cut at the summariser's output limit)."""

    def collect() -> tuple[str | None, BranchEntries]:
        if session.get_entry(target_id) is None:
            raise SessionError("not_found", f"entry {target_id} not found in session {session.id}")
        leaf_id = session.leaf_id
        return leaf_id, collect_branch_entries(session, leaf_id, target_id)

    leaf_id, collected = await offload(collect)
    if not collected.entries:
        raise CompactionError(
            "nothing_to_compact",
            f"nothing to summarise: moving from {leaf_id} to {target_id} leaves no entries "
            "behind (move without a summary)",
        )
    result = await generate_branch_summary(
        collected.entries,
        model,
        stream_fn,
        token_budget=token_budget,
        instructions=instructions,
        signal=signal,
        options=options,
    )

    def write() -> str | None:
        if session.leaf_id != leaf_id:
            raise CompactionError(
                "conflict", "the session changed while the branch was being summarised"
            )
        return session.move_to(
            target_id,
            {"summary": result.summary, "details": result.details(), "usage": result.usage},
        )

    summary_id = await offload(write)
    assert summary_id is not None
    if warnings is not None:
        warnings.extend(result.warnings)
    return summary_id
