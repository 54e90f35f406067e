"""Session: the operations on one session tree, over any storage backend (seed: Session)."""

from __future__ import annotations

import contextvars
import enum
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from mcp_agent.messages import BaseMessage, ThinkingLevel, Usage
from mcp_agent.sessions.context import (
    SessionContext,
    SessionContextBuildOptions,
    build_session_context,
    merge_context_build_options,
)
from mcp_agent.sessions.entries import (
    NAME_CHARS,
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
    check_length,
    iso_now,
    parse_entry,
    session_name,
)
from mcp_agent.sessions.errors import SessionError
from mcp_agent.sessions.memory import InMemorySessionStorage
from mcp_agent.sessions.row_waits import RowHeld
from mcp_agent.sessions.storage import SessionStats, SessionStorage, tree_index

log = logging.getLogger(__name__)

_ID_ATTEMPTS = 5

# The entry types a caller may append with append_entry; the others have operations of their
# own (compact, move_to) or are the session's bookkeeping.
APPENDABLE = (
    "message",
    "custom",
    "custom_message",
    "label",
    "session_info",
    "model_change",
    "thinking_level_change",
    "active_tools_change",
)
_NOT_APPENDABLE = {
    "compaction": "compact the session instead (session_compact)",
    "branch_summary": "move the leaf with a summary instead (session_move_to)",
    "leaf": "move the leaf instead (session_move_to)",
}

# Called after each entry is stored, with the session id and the stored entry.
SessionListener = Callable[[str, SessionEntry], None]


# When a write of this context must have had its turn (``time.monotonic()``): set by a caller
# that had it wait for its turn before (runtime.write_turns), so that both waits together are
# bounded by the storage's lock wait. None: the lock wait from now.
TURN_DEADLINE: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "mcp_agent_turn_deadline", default=None
)


def turn_refused(session_id: str, wait: float | None) -> SessionError:
    """A write that waited ``wait`` seconds for its turn behind another write to the session in
    this process, which waits for the database meanwhile."""
    waited = "" if wait is None else f" {wait:g} s"
    return SessionError(
        "busy",
        f"session {session_id} is busy: another write to it here has waited{waited}"
        " for the database (its row held by another transaction); nothing was written,"
        " try again",
    )


# How often a write queued for the storage's lock looks whether the write holding it waits
# for a held row (then it gives its thread back: sessions.row_waits).
LOCK_SLICE = 0.05


class Unread(enum.Enum):
    """A leaf not read yet (None is a leaf: an empty session's)."""

    UNREAD = "unread"


UNREAD = Unread.UNREAD


@dataclass
class TreeNode:
    entry: SessionEntry
    label: str | None = None
    children: list[TreeNode] = field(default_factory=list)

    @property
    def id(self) -> str:
        return self.entry.id

    def to_json_dict(self) -> dict[str, Any]:
        """The subtree as JSON; built without recursion so deep chains are fine."""
        root: dict[str, Any] = {}
        stack: list[tuple[TreeNode, dict[str, Any]]] = [(self, root)]
        while stack:
            node, out = stack.pop()
            out["entry"] = node.entry.to_json_dict()
            if node.label is not None:
                out["label"] = node.label
            out["children"] = [{} for _ in node.children]
            stack.extend(zip(node.children, out["children"], strict=True))
        return root


class Session:
    """A session tree. Each append makes the new entry a child of the leaf and moves the leaf
    to it; ``move_to`` moves the leaf anywhere (a branch switch)."""

    def __init__(
        self,
        storage: SessionStorage | None = None,
        context_build_options: SessionContextBuildOptions | None = None,
        listeners: list[SessionListener] | None = None,
        leaf_id: str | Unread | None = UNREAD,
    ) -> None:
        self.storage: SessionStorage = storage if storage is not None else InMemorySessionStorage()
        # For one read (a request): the leaf as read once at its start, so that every part of
        # the answer shows the same leaf and the database is not asked again. Forgotten at the
        # first write through this Session. UNREAD: ask the storage each time.
        self._read_leaf = leaf_id
        self.context_build_options = context_build_options or SessionContextBuildOptions()
        # A repo passes its own list, so one subscription covers every session it opens.
        self.listeners: list[SessionListener] = listeners if listeners is not None else []
        # One lock per storage, shared by every Session over it (a repo hands the same storage
        # to each open), so appends from two threads never read the same leaf.
        self._lock: threading.RLock = getattr(self.storage, "lock", None) or threading.RLock()

    # --- identity -----------------------------------------------------------------------------

    @property
    def id(self) -> str:
        return self.storage.get_metadata().id

    @property
    def header(self) -> SessionHeader:
        return self.storage.get_metadata()

    @property
    def leaf_id(self) -> str | None:
        if not isinstance(self._read_leaf, Unread):
            return self._read_leaf
        return self.storage.get_leaf_id()

    @property
    def name(self) -> str | None:
        return self.storage.get_session_name()

    def close(self) -> None:
        self.storage.close()

    # --- appends ------------------------------------------------------------------------------

    def _append(
        self, build: Callable[[dict[str, Any]], SessionEntry], parent: str | Unread | None = UNREAD
    ) -> str:
        """Append what ``build`` makes of the id, parent and timestamp: the parent is the leaf,
        or ``parent`` (the entry then becomes the leaf, as in pi's branchWithSummary)."""
        self._read_leaf = UNREAD
        self._take_lock()
        try:
            for attempt in range(_ID_ATTEMPTS):
                base = {
                    "id": self.storage.create_entry_id(),
                    "parent_id": (
                        self.storage.leaf_for_append() if isinstance(parent, Unread) else parent
                    ),
                    "timestamp": iso_now(),
                }
                try:
                    stored = self.storage.append_entry(build(base))
                    break
                except SessionError as error:
                    # Another writer took the id first (or it was never checked): draw again.
                    if error.code != "conflict" or attempt == _ID_ATTEMPTS - 1:
                        raise
        finally:
            self._lock.release()
        self._notify(stored)
        return stored.id

    def _take_lock(self) -> None:
        """The storage's lock, for a write. Bounded: each write holding it may wait for the
        database as long (a session's row held by another transaction), so writers queued here
        waited one such wait after another, and each held a worker thread meanwhile. Queued
        behind a write that waits for its held row, when the server bounds those waits
        (sessions.row_waits): ``RowHeld`` at once, nothing written, the thread given back."""
        wait: float | None = getattr(self.storage, "lock_wait", None)
        timeout = -1 if wait is None else wait
        deadline = TURN_DEADLINE.get()
        if wait is not None and deadline is not None:
            timeout = max(0.0, min(wait, deadline - time.monotonic()))
        row_held: Callable[[], bool] | None = getattr(self.storage, "row_held", None)
        if row_held is None:
            if not self._lock.acquire(timeout=timeout):
                raise turn_refused(self.id, wait)
            return
        end = None if timeout < 0 else time.monotonic() + timeout
        while True:
            # In slices: the write holding the lock may start waiting for its row meanwhile.
            left = LOCK_SLICE if end is None else min(LOCK_SLICE, end - time.monotonic())
            if self._lock.acquire(timeout=max(left, 0.0)):
                return
            if row_held():
                raise RowHeld(self.id)
            if end is not None and time.monotonic() >= end:
                raise turn_refused(self.id, wait)

    def _notify(self, entry: SessionEntry) -> None:
        for listener in list(self.listeners):
            try:
                listener(self.id, entry)
            except Exception:  # a broken subscriber must not undo or block a stored append
                log.exception("session listener failed")

    def append_entry(self, partial: Mapping[str, Any]) -> str:
        """Append an entry given in pi's v3 form without ``id``, ``parentId`` and
        ``timestamp`` (the session sets those), e.g. ``{"type": "label", "targetId": …,
        "label": "good"}``: any of ``APPENDABLE``. It is validated as it will be stored."""
        kind = partial.get("type")
        if kind not in APPENDABLE:
            kinds = f"one of: {', '.join(APPENDABLE)}"
            if kind is None:
                raise SessionError("invalid_entry", f"entry.type is missing: it is {kinds}")
            hint = _NOT_APPENDABLE.get(str(kind), kinds)
            raise SessionError("invalid_entry", f"entry.type {kind!r} cannot be appended: {hint}")
        for reserved in ("id", "parentId", "timestamp"):
            if reserved in partial:
                raise SessionError(
                    "invalid_entry", f"entry.{reserved} is set by the session; leave it out"
                )
        data = dict(partial)
        if kind == "custom_message":
            data.setdefault("display", True)  # as append_custom_message (a file may lack it)
        # An empty label or name clears it, as append_label and set_name do.
        if kind == "label" and not data.get("label"):
            data.pop("label", None)
        if kind == "session_info":
            name = data.get("name")
            if isinstance(name, str) and session_name(name) is None:
                data.pop("name")
            elif isinstance(name, str):
                data["name"] = session_name(name)

        def build(base: dict[str, Any]) -> SessionEntry:
            entry = parse_entry(
                {
                    **data,
                    "id": base["id"],
                    "parentId": base["parent_id"],
                    "timestamp": base["timestamp"],
                },
                made_here=True,
            )
            if isinstance(entry, ThinkingLevelChangeEntry):
                if entry.thinking_level not in set(ThinkingLevel):
                    known = ", ".join(ThinkingLevel)
                    raise SessionError(
                        "invalid_entry",
                        f"entry.thinkingLevel {entry.thinking_level!r} is not one of: {known}",
                    )
            elif isinstance(entry, LabelEntry):
                check_length(entry.label, "entry.label", NAME_CHARS)
                self.require_entry(entry.target_id)
            elif isinstance(entry, SessionInfoEntry):
                check_length(entry.name, "entry.name", NAME_CHARS)
            return entry

        return self._append(build)

    def append_message(self, message: BaseMessage) -> str:
        return self._append(lambda base: MessageEntry(**base, message=message))

    def append_thinking_level_change(self, level: str) -> str:
        return self._append(
            lambda base: ThinkingLevelChangeEntry(**base, thinking_level=str(level))
        )

    def append_model_change(self, provider: str, model_id: str) -> str:
        return self._append(
            lambda base: ModelChangeEntry(**base, provider=provider, model_id=model_id)
        )

    def append_active_tools_change(self, names: list[str]) -> str:
        return self._append(
            lambda base: ActiveToolsChangeEntry(**base, active_tool_names=list(names))
        )

    def append_compaction(
        self,
        summary: str,
        first_kept_entry_id: str | None,
        tokens_before: int,
        details: Any = None,
        from_hook: bool = False,
        usage: Usage | None = None,
        retained_tail: Sequence[BaseMessage] | None = None,
    ) -> str:
        if first_kept_entry_id is not None:
            self.require_entry(first_kept_entry_id)
        optional = _given(
            first_kept_entry_id=first_kept_entry_id,
            details=details,
            from_hook=from_hook or None,
            usage=usage,
            retained_tail=list(retained_tail) if retained_tail is not None else None,
        )
        return self._append(
            lambda base: CompactionEntry(
                **base, summary=summary, tokens_before=tokens_before, **optional
            )
        )

    def append_custom(self, custom_type: str, data: Any = None) -> str:
        optional = _given(data=data)
        return self._append(lambda base: CustomEntry(**base, custom_type=custom_type, **optional))

    def append_custom_message(
        self, custom_type: str, content: Any, display: bool = True, details: Any = None
    ) -> str:
        optional = _given(details=details)
        return self._append(
            lambda base: CustomMessageEntry(
                **base, custom_type=custom_type, content=content, display=display, **optional
            )
        )

    def append_label(self, target_id: str, label: str | None) -> str:
        """Label an entry; an empty or None label clears it."""
        check_length(label, "label", NAME_CHARS)
        self.require_entry(target_id)
        optional = _given(label=label or None)
        return self._append(lambda base: LabelEntry(**base, target_id=target_id, **optional))

    def set_name(self, name: str | None) -> str:
        """Name the session (a ``session_info`` entry); an empty name clears it."""
        optional = _given(name=session_name(name))
        check_length(optional.get("name"), "name", NAME_CHARS)
        return self._append(lambda base: SessionInfoEntry(**base, **optional))

    def move_to(self, entry_id: str | None, summary: Mapping[str, Any] | None = None) -> str | None:
        """Move the leaf to ``entry_id`` (None: before the first entry). With ``summary``
        (``{"summary": str, "details"?, "usage"?, "from_hook"?}``) a branch summary is added as a
        child of the target and becomes the leaf; its id is returned."""
        if entry_id is not None:
            self.require_entry(entry_id)
        if summary is not None and not isinstance(summary.get("summary"), str):
            raise SessionError("invalid_argument", "summary needs a 'summary' string")
        self._read_leaf = UNREAD
        optional: dict[str, Any] = {}
        if summary is not None:
            usage = summary.get("usage")
            optional = _given(
                details=summary.get("details"),
                usage=Usage.model_validate(usage) if isinstance(usage, Mapping) else usage,
                from_hook=bool(summary.get("from_hook", summary.get("fromHook"))) or None,
            )
        if summary is None:
            moved = self.storage.set_leaf_id(entry_id)
            if moved is not None:
                self._notify(moved)
            return None
        # The summary alone, a child of the target, as pi writes it: a leaf move before it
        # would be a line pi's /tree shows as an empty row.
        return self._append(
            lambda base: BranchSummaryEntry(
                **base, from_id=entry_id or "root", summary=summary["summary"], **optional
            ),
            parent=entry_id,
        )

    # --- reads --------------------------------------------------------------------------------

    def require_entry(self, entry_id: str) -> SessionEntry:
        """The entry ``entry_id``: a place in the conversation, or SessionError(not_found)."""
        entry = self.storage.get_entry(entry_id)
        if entry is None:
            raise SessionError("not_found", f"entry {entry_id} not found in session {self.id}")
        if isinstance(entry, LeafEntry):
            # Bookkeeping of where the leaf went, not a place in the conversation.
            raise SessionError(
                "not_found",
                f"entry {entry_id} of session {self.id} is a leaf move, not a place in the"
                f" conversation: it moved the leaf to {entry.target_id or 'the root'}",
            )
        return entry

    def get_entry(self, entry_id: str) -> SessionEntry | None:
        return self.storage.get_entry(entry_id)

    def get_entries(self) -> list[SessionEntry]:
        return self.storage.get_entries()

    def find_entries(self, entry_type: str) -> list[SessionEntry]:
        return self.storage.find_entries(entry_type)

    def get_label(self, entry_id: str) -> str | None:
        return self.storage.get_label(entry_id)

    def get_branch(self, leaf_id: str | None = None) -> list[SessionEntry]:
        """The path from the root to ``leaf_id`` (default: the current leaf), root first."""
        return self.storage.get_branch(self.leaf_id if leaf_id is None else leaf_id)

    def get_path_to_root_or_compaction(self, leaf_id: str | None = None) -> list[SessionEntry]:
        return self.storage.get_path_to_root_or_compaction(
            self.leaf_id if leaf_id is None else leaf_id
        )

    def children(self, entry_id: str | None) -> list[SessionEntry]:
        """The entries whose parent is ``entry_id`` (None: the roots); leaf moves left out."""
        if entry_id is not None:
            self.require_entry(entry_id)
        return self.storage.get_children(entry_id)

    def tree(self) -> list[TreeNode]:
        """Every root with its subtree (``tree_index``); roots in append order, siblings in
        pi's (by time), leaf moves left out."""
        entries = {entry.id: entry for entry in self.storage.get_entries()}
        index = tree_index([(e.id, e.parent_id, e.type, e.timestamp) for e in entries.values()])
        nodes = {
            row[0]: TreeNode(entries[row[0]], self.storage.get_label(row[0])) for row in index.nodes
        }
        for parent_id, children in index.children.items():
            nodes[parent_id].children = [nodes[child] for child in children]
        return [nodes[row[0]] for row in index.nodes if index.parent[row[0]] is None]

    def build_context(self, options: SessionContextBuildOptions | None = None) -> SessionContext:
        leaf_id = self.leaf_id
        path = self.storage.get_context_path(leaf_id) if leaf_id is not None else []
        merged = merge_context_build_options(self.context_build_options, options)
        return build_session_context(path, merged)

    def stats(self) -> SessionStats:
        return self.storage.get_session_stats()


def _given(**fields: Any) -> dict[str, Any]:
    """Only the fields that have a value: an unset optional field stays out of the JSON."""
    return {name: value for name, value in fields.items() if value is not None}
