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
from mcp_agent.sessions.errors import SessionError
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
    nodes: list[OutlineRow] = []
    parent: dict[str, str | None] = {}
    children: dict[str, list[str]] = {}
    # One pass over what may be a million rows: locals only, and tree_parent only when the
    # session has leaf moves at all.
    for row in rows:
        entry_id, parent_id = row[0], row[1]
        if moves:
            if entry_id in moves:
                continue
            parent_id = tree_parent(parent_id, moves)
        siblings = children.get(parent_id) if parent_id is not None else None
        if siblings is None:
            parent_id = None
        else:
            siblings.append(entry_id)
        parent[entry_id] = parent_id
        children[entry_id] = []
        nodes.append(row)
    return TreeIndex(nodes, parent, children)


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


# Entries an outline always lists, however long the chain around them.
_LANDMARKS = ("compaction", "branch_summary")


def outline(
    session: Session, entry_id: str | None = None, preview_chars: int = 120
) -> list[dict[str, Any]]:
    """The tree as a reader opens it, in time that grows with what is shown, not with the
    session: one chain (from ``entry_id``, or from the root along the current branch), then
    at each entry that branches, the first entry of every other branch, unopened.

    The chain runs from ``entry_id`` (None: the root) down the current branch where it can,
    else down the newest child, to its end. Along it the first and last entries, branch
    points, labelled entries, compactions, branch summaries and the leaf are listed; a run of
    other entries between two of those (six or more) folds, and the entry before the fold says
    how many it hides (``folded``; the entries are the path to the next listed entry's parent,
    ``session_get`` view branch). Rows are ``flat_tree``'s nodes plus ``kind`` (the style of
    the preview), ``spine`` (on the chain, else the head of an unopened branch) and
    ``folded``."""
    storage = session.storage
    leaf_id = storage.get_leaf_id()
    branch = storage.get_branch(leaf_id) if leaf_id is not None else []
    on_branch = {entry.id for entry in branch}
    children: dict[str | None, list[SessionEntry]] = {}

    def children_of(parent: str | None) -> list[SessionEntry]:
        if parent not in children:
            children[parent] = storage.get_children(parent)
        return children[parent]

    if entry_id is None:
        chain = [entry for entry in branch if entry.type != "leaf"]
        start = children_of(None)
        if not chain and start:
            chain.append(_next_on_chain(start, on_branch))
    else:
        entry = storage.get_entry(entry_id)
        if entry is None or entry.type == "leaf":
            raise SessionError("not_found", f"entry {entry_id} not found")
        chain = [entry]
    if entry_id is not None or not branch:
        while chain and children_of(chain[-1].id) and len(chain) <= MAX_CHAIN:
            chain.append(_next_on_chain(children_of(chain[-1].id), on_branch))
    labels = {entry.id: storage.get_label(entry.id) for entry in chain}
    parent_of = {entry.id: entry.parent_id for entry in chain}

    # Listed: the chain's ends, branch points and the first entry of each branch below one,
    # labelled entries, compactions, branch summaries and the leaf; a short run is listed too.
    listed = [
        index in (0, len(chain) - 1)
        or len(children_of(entry.id)) > 1
        or len(children_of(parent_of[entry.id])) > 1
        or labels[entry.id] is not None
        or entry.type in _LANDMARKS
        or entry.id == leaf_id
        for index, entry in enumerate(chain)
    ]
    run: list[int] = []
    for index in range(len(chain) + 1):
        if index < len(chain) and not listed[index]:
            run.append(index)
            continue
        if len(run) < MIN_FOLD:
            for hidden in run:
                listed[hidden] = True
        run = []

    def row(entry: SessionEntry, parent_id: str | None, spine: bool) -> dict[str, Any]:
        parts = entry_parts(entry, preview_chars)
        label = labels[entry.id] if spine else storage.get_label(entry.id)
        return {
            "id": entry.id,
            "parentId": parent_id,
            "type": entry.type,
            "timestamp": entry.timestamp,
            "children": [child.id for child in children_of(entry.id)],
            "label": label,
            "onBranch": entry.id in on_branch,
            "preview": "".join(text for text, _ in parts),
            "kind": next((kind for _, kind in parts if kind), "meta"),
            "spine": spine,
            "folded": 0,
        }

    rows: list[dict[str, Any]] = []
    if entry_id is None:
        rows.extend(row(root, None, False) for root in children_of(None) if root.id != chain[0].id)
    previous: dict[str, Any] | None = None
    for index, entry in enumerate(chain):
        if not listed[index]:
            assert previous is not None  # the first entry is always listed
            previous["folded"] += 1
            continue
        previous = row(entry, chain[index - 1].id if index else entry.parent_id, True)
        rows.append(previous)
        next_id = chain[index + 1].id if index + 1 < len(chain) else None
        rows.extend(
            row(child, entry.id, False) for child in children_of(entry.id) if child.id != next_id
        )
    return rows


# Fewer entries than this between two listed ones are listed, not folded.
MIN_FOLD = 6
# A chain longer than this (a corrupt cycle, or a session beyond reason) is cut there.
MAX_CHAIN = 10_000_000


def _next_on_chain(children: list[SessionEntry], on_branch: set[str]) -> SessionEntry:
    """The child a chain goes on with: the one on the current branch, else the newest."""
    return next((child for child in children if child.id in on_branch), children[-1])
