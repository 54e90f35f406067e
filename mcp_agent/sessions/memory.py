"""The in-memory backend: a list of entries plus the indexes every query needs.

The JSONL backend is this index plus a file it appends to.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

from mcp_agent.sessions.context import compaction_stop
from mcp_agent.sessions.entries import (
    LabelEntry,
    LeafEntry,
    SessionEntry,
    SessionHeader,
    SessionInfoEntry,
    iso_now,
    new_entry_id,
    new_header,
    session_name,
    write_time,
)
from mcp_agent.sessions.errors import SessionError
from mcp_agent.sessions.storage import (
    SessionStats,
    compute_stats,
    moved_leaf,
    tree_parent,
    validate_tree,
    walk_to_root,
)

# What ``_load`` swaps in, in this order: the leaf last, once all it names is indexed.
_INDEX_FIELDS = (
    "_header",
    "_entries",
    "_by_id",
    "_children",
    "_moves",
    "_labels",
    "_name",
    "_leaf_id",
)


class InMemorySessionStorage:
    """A session held in memory (seed: InMemorySessionStorage)."""

    def __init__(
        self, header: SessionHeader | None = None, entries: Iterable[SessionEntry] = ()
    ) -> None:
        self.lock = threading.RLock()  # taken by Session around read-leaf-then-append
        self._load(header or new_header(), entries)
        # When this session last changed (for listings); see entries.write_time.
        self.modified = write_time()

    def _load(self, header: SessionHeader, entries: Iterable[SessionEntry]) -> None:
        """Index ``entries`` in place of whatever was indexed (the lock stays: Sessions share it).

        The new index is built aside and swapped in a field at a time, the leaf last: reads
        take no lock, and one on another thread while a JSONL file is taken up again (a run's
        context, a page) saw the index half built, its branch cut short or empty."""
        loaded = list(entries)
        # A whole log is checked at once: pi files may name a parent that comes later.
        validate_tree(loaded)
        built = InMemorySessionStorage.__new__(InMemorySessionStorage)
        built._empty(header)
        for entry in loaded:
            built._index(entry)
        for field in _INDEX_FIELDS:  # the leaf last: a reader meanwhile finds what it names
            setattr(self, field, getattr(built, field))

    def _empty(self, header: SessionHeader) -> None:
        self._header = header
        self._entries: list[SessionEntry] = []
        self._by_id: dict[str, SessionEntry] = {}
        self._children: dict[str | None, list[SessionEntry]] = {}
        self._moves: dict[str, str | None] = {}  # leaf move id -> its target
        self._labels: dict[str, str] = {}
        self._name: str | None = None
        self._leaf_id: str | None = None

    # --- indexing -----------------------------------------------------------------------------

    def _check(self, entry: SessionEntry) -> None:
        if entry.id in self._by_id:
            raise SessionError("conflict", f"entry id {entry.id} is already taken")
        if entry.parent_id is not None and entry.parent_id not in self._by_id:
            raise SessionError(
                "invalid_entry", f"entry {entry.id}: parent {entry.parent_id} not found"
            )

    def _index(self, entry: SessionEntry) -> None:
        self._entries.append(entry)
        self._by_id[entry.id] = entry
        if isinstance(entry, LeafEntry):
            self._moves[entry.id] = entry.parent_id
        else:
            parent_id = tree_parent(entry.parent_id, self._moves)
            self._children.setdefault(parent_id, []).append(entry)
        if isinstance(entry, LabelEntry):
            if entry.label:
                self._labels[entry.target_id] = entry.label
            else:
                self._labels.pop(entry.target_id, None)
        elif isinstance(entry, SessionInfoEntry):
            self._name = session_name(entry.name)
        if isinstance(entry, LeafEntry):
            self._leaf_id = moved_leaf(entry, self._by_id.__contains__)
        else:
            self._leaf_id = entry.id

    # --- the storage protocol -----------------------------------------------------------------

    def get_metadata(self) -> SessionHeader:
        return self._header

    def get_leaf_id(self) -> str | None:
        return self._leaf_id

    def leaf_for_append(self) -> str | None:
        return self._leaf_id

    def set_leaf_id(self, leaf_id: str | None) -> LeafEntry | None:
        if leaf_id == self._leaf_id:
            return None
        if leaf_id is not None and leaf_id not in self._by_id:
            raise SessionError("not_found", f"entry {leaf_id} not found")
        entry = LeafEntry(
            id=self.create_entry_id(), parent_id=leaf_id, timestamp=iso_now(), target_id=leaf_id
        )
        self.append_entry(entry)
        return entry

    def create_entry_id(self) -> str:
        return new_entry_id(self._by_id.__contains__)

    def append_entry(self, entry: SessionEntry) -> SessionEntry:
        self._check(entry)
        self._write(entry)
        self._index(entry)
        self.modified = write_time()
        return entry

    def _write(self, entry: SessionEntry) -> None:
        """Persist ``entry`` before it is indexed; nothing to do in memory."""

    def get_entry(self, entry_id: str) -> SessionEntry | None:
        return self._by_id.get(entry_id)

    def find_entries(self, entry_type: str) -> list[SessionEntry]:
        return [entry for entry in self._entries if entry.type == entry_type]

    def get_label(self, entry_id: str) -> str | None:
        return self._labels.get(entry_id)

    def get_session_name(self) -> str | None:
        return self._name

    def get_path_to_root_or_compaction(self, leaf_id: str | None) -> list[SessionEntry]:
        return walk_to_root(self._by_id.get, leaf_id, compaction_stop())

    def get_branch(self, leaf_id: str | None) -> list[SessionEntry]:
        return walk_to_root(self._by_id.get, leaf_id)

    def get_context_path(self, leaf_id: str | None) -> list[SessionEntry]:
        return self.get_branch(leaf_id)

    def get_children(self, entry_id: str | None) -> list[SessionEntry]:
        return list(self._children.get(entry_id, ()))

    def get_entries(self, options: dict[str, Any] | None = None) -> list[SessionEntry]:
        """Every entry in the order it was appended (``options`` is reserved for filters)."""
        return list(self._entries)

    def get_session_stats(self) -> SessionStats:
        return compute_stats(self._entries)

    def close(self) -> None:
        pass

    def __len__(self) -> int:
        return len(self._entries)
