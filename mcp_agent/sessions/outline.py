"""A session in outline: a one-line account of each entry (its kind and the start of its text)
and the tree as flat nodes, for the terminal and for the MCP tools.

An account comes as parts, each with the kind of text it is (``user``, ``assistant``,
``toolResult``, ``error``, ``meta``, ``summary``, ``custom``, ``call``), so a renderer can
style them; ``entry_preview`` joins them. The flat tree has parent and children by id, so it
has no nesting whatever the session's depth."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mcp_agent.messages import (
    AssistantMessage,
    BashExecutionMessage,
    BranchSummaryMessage,
    CompactionSummaryMessage,
    CustomMessage,
    ToolResultMessage,
    UserMessage,
    content_text,
)
from mcp_agent.sessions.entries import (
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
    SessionInfoEntry,
    ThinkingLevelChangeEntry,
)
from mcp_agent.sessions.storage import OutlineRow, tree_parent

if TYPE_CHECKING:
    from mcp_agent.sessions.session import Session

Parts = list[tuple[str, str]]


def clip(text: str, limit: int = 100) -> str:
    """One line of at most ``limit`` characters."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def entry_parts(entry: SessionEntry, limit: int = 80) -> Parts:
    match entry:
        case MessageEntry(message=message):
            return message_parts(message, limit)
        case ModelChangeEntry(provider=provider, model_id=model_id):
            return [(f"model → {provider}:{model_id}", "meta")]
        case ThinkingLevelChangeEntry(thinking_level=level):
            return [(f"thinking → {level}", "meta")]
        case ActiveToolsChangeEntry(active_tool_names=names):
            return [(f"tools → {', '.join(names) or '(none)'}", "meta")]
        case CompactionEntry(summary=summary, tokens_before=tokens):
            return [(f"compaction ({tokens:,} tokens before): {clip(summary, limit)}", "summary")]
        case BranchSummaryEntry(summary=summary):
            return [(f"branch summary: {clip(summary, limit)}", "summary")]
        case CustomMessageEntry(custom_type=kind, content=content):
            return [(f"{kind}: {clip(content_text(content), limit)}", "custom")]
        case CustomEntry(custom_type=kind):
            return [(f"custom {kind}", "meta")]
        case LabelEntry(target_id=target, label=label):
            return [(f"label {target} = {label!r}" if label else f"label {target} cleared", "meta")]
        case SessionInfoEntry(name=name):
            return [(f"name → {name!r}" if name else "name cleared", "meta")]
        case LeafEntry(target_id=target):
            return [(f"leaf → {target}", "meta")]
    return [(entry.type, "meta")]


def message_parts(message: Any, limit: int = 80) -> Parts:
    match message:
        case UserMessage():
            return [("user: ", "user"), (clip(message.text, limit), "")]
        case AssistantMessage():
            failed = message.stop_reason in ("error", "aborted")
            parts: Parts = [("assistant:", "error" if failed else "assistant")]
            if message.text:
                parts.append((" " + clip(message.text, limit), ""))
            calls = message.tool_calls
            if calls:
                parts.append((f" → {', '.join(c.name for c in calls)}", "call"))
            if failed:
                parts.append(
                    (f" ({message.stop_reason}: {clip(message.error_message or '', 60)})", "")
                )
            return parts
        case ToolResultMessage():
            kind = "error" if message.is_error else "toolResult"
            return [(f"{message.tool_name} result: ", kind), (clip(message.text, limit), "")]
        case BashExecutionMessage():
            return [("bash: ", "call"), (clip(f"$ {message.command}", limit), "")]
        case CustomMessage():
            text = clip(content_text(message.content), limit)
            return [(f"{message.custom_type}: ", "custom"), (text, "")]
        case BranchSummaryMessage() | CompactionSummaryMessage():
            return [("summary: ", "summary"), (clip(message.summary, limit), "")]
    return [(f"{message.role} message", "meta")]


def entry_preview(entry: SessionEntry, limit: int = 80) -> str:
    return "".join(text for text, _ in entry_parts(entry, limit))


@dataclass
class TreeIndex:
    """The tree of a session from its entries in outline (no content): the tree nodes in the
    order appended (leaf moves left out), each node's tree parent and its children."""

    nodes: list[OutlineRow]
    parent: dict[str, str | None]
    children: dict[str, list[str]]


def tree_index(rows: Sequence[OutlineRow]) -> TreeIndex:
    """``rows`` (id, parentId, type, timestamp) in the order appended, as ``Session.tree``
    makes them a tree: a leaf move between an entry and its parent is skipped (``tree_parent``),
    and an entry whose parent is not an earlier node is a root."""
    moves = {row[0]: row[1] for row in rows if row[2] == "leaf"}
    index = TreeIndex([], {}, {})
    for row in rows:
        entry_id = row[0]
        if entry_id in moves:
            continue
        parent_id = tree_parent(row[1], moves)
        if parent_id not in index.children:
            parent_id = None
        index.parent[entry_id] = parent_id
        index.children[entry_id] = []
        if parent_id is not None:
            index.children[parent_id].append(entry_id)
        index.nodes.append(row)
    return index


def tree_node(
    index: TreeIndex, row: OutlineRow, label: str | None, on_branch: bool, preview: str
) -> dict[str, Any]:
    """One node of the flat tree (see ``flat_tree``)."""
    entry_id = row[0]
    return {
        "id": entry_id,
        "parentId": index.parent[entry_id],
        "type": row[2],
        "timestamp": row[3],
        "children": index.children[entry_id],
        "label": label,
        "onBranch": on_branch,
        "preview": preview,
    }


def flat_tree(session: Session, preview_chars: int = 120) -> list[dict[str, Any]]:
    """Every entry but leaf moves, in the order appended, as ``{id, parentId, type,
    timestamp, children, label, onBranch, preview}``. ``parentId`` is the tree parent (a leaf
    move between is skipped); ``onBranch``: on the path from the root to the leaf."""
    entries = {entry.id: entry for entry in session.get_entries()}
    index = tree_index([(e.id, e.parent_id, e.type, e.timestamp) for e in entries.values()])
    on_branch = {entry.id for entry in session.get_branch()}
    return [
        tree_node(
            index,
            row,
            session.get_label(row[0]),
            row[0] in on_branch,
            entry_preview(entries[row[0]], preview_chars),
        )
        for row in index.nodes
    ]
