"""The storage protocol every backend implements (seed: SessionStorage), and the tree walks and
statistics that backends keeping entries in memory share."""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol, TypeVar, cast, runtime_checkable

from pydantic.alias_generators import to_camel

from mcp_agent.messages import AssistantMessage, TextContent, UserMessage
from mcp_agent.sessions.entries import (
    LeafEntry,
    MessageEntry,
    SessionEntry,
    SessionHeader,
    SessionInfoEntry,
    entry_usage,
    is_tree_node,
    js_time_ms,
    session_name,
)
from mcp_agent.sessions.errors import SessionError


@dataclass
class SessionStats:
    """Counts over every entry of a session (all branches); leaf moves are not counted."""

    entry_count: int = 0
    message_count: int = 0
    messages_by_role: dict[str, int] = field(default_factory=dict)
    tool_call_count: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    total_tokens: int = 0
    cost_total: float = 0.0
    leaf_count: int = 0
    branch_point_count: int = 0
    first_timestamp: str | None = None
    last_timestamp: str | None = None

    def to_json_dict(self) -> dict[str, Any]:
        """camelCase, as every JSON this project writes outside pi's own message form."""
        return {to_camel(key): value for key, value in asdict(self).items()}


@runtime_checkable
class SessionStorage(Protocol):
    """Where one session's header and entries live.

    ``append_entry`` stores an entry and makes it the leaf; it returns the entry as stored
    (the SQL backends may re-parent it onto a leaf that another process moved meanwhile).
    ``set_leaf_id`` persists a leaf move as a ``leaf`` entry and returns it, or None when the
    leaf is already there. ``leaf_for_append`` is the parent for the next append: the leaf, or
    for a backend that re-reads the leaf inside the append (SQL), the leaf as last seen.
    ``get_context_path`` is what a branch's context is built from: the branch, or only the part
    of it that ``build_session_context`` reads (SQL, so that a long branch with compactions
    costs what it keeps). Paths are returned root first.
    """

    def get_metadata(self) -> SessionHeader: ...
    def get_leaf_id(self) -> str | None: ...
    def leaf_for_append(self) -> str | None: ...
    def set_leaf_id(self, leaf_id: str | None) -> LeafEntry | None: ...
    def create_entry_id(self) -> str: ...
    def append_entry(self, entry: SessionEntry) -> SessionEntry: ...
    def get_entry(self, entry_id: str) -> SessionEntry | None: ...
    def find_entries(self, entry_type: str) -> list[SessionEntry]: ...
    def get_label(self, entry_id: str) -> str | None: ...
    def get_session_name(self) -> str | None: ...
    def get_path_to_root_or_compaction(self, leaf_id: str | None) -> list[SessionEntry]: ...
    def get_branch(self, leaf_id: str | None) -> list[SessionEntry]: ...
    def get_context_path(self, leaf_id: str | None) -> list[SessionEntry]: ...
    def get_children(self, entry_id: str | None) -> list[SessionEntry]: ...
    def get_entries(self, options: dict[str, Any] | None = None) -> list[SessionEntry]: ...
    def get_session_stats(self) -> SessionStats: ...
    def close(self) -> None: ...


# One entry in outline, without its content: (id, parentId, type, timestamp).
OutlineRow = tuple[str, str | None, str, str]
# One entry's place in the tree: (id, parentId, type, timestamp), as in outline.
TreeRow = OutlineRow


@runtime_checkable
class StoredPages(SessionStorage, Protocol):
    """What a backend that keeps each entry's JSON as text (SQLite, PostgreSQL) offers besides
    :class:`SessionStorage`, so that a page of a long session costs what it shows: entries as
    their stored JSON (pi's v3 form, compact), unparsed, and the whole log in outline. Readers
    use it when a storage has it and fall back to the parsed entries otherwise.

    ``branch_ids`` is the branch root first; ``stored_branch`` the same with the stored JSON
    of its ``newest`` last entries found (None: all), read with it; ``stored_json`` the stored
    JSON of each id found (``stored_messages``: of the message in each message entry found);
    ``entry_total`` how many entries ``get_entries`` returns (``log_end``: that and the leaf,
    read together), and ``stored_range(start, end)`` the JSON of those in positions
    ``start .. end - 1`` (``stored_log(end, batch)``: of positions ``0 .. end - 1`` in turn,
    ``batch`` at a time, for reading a whole log); ``outline`` every entry in that order, as its place in the tree
    (``TreeRow``: what arranging the whole tree needs); ``branch_outline`` the branch to
    ``leaf_id`` (root first) and ``children_outline`` what ``get_children`` returns for each
    of ``ids``, in outline; ``labels`` each labelled entry's label; ``context_rows`` the
    entries ``get_context_path`` returns, as (id, type, message role), and
    ``context_messages`` the same with the stored JSON of the messages among the ``newest``
    last entries of the branch where the walk that finds it reads them anyway (those it did
    not read are left to ``stored_messages``); ``parse_stored``
    parses an entry from its stored JSON (through the backend's parse cache);
    ``parsed_entries`` each of ``ids`` found, parsed, those not in the parse cache read
    together.
    """

    def branch_ids(self, leaf_id: str | None) -> list[str]: ...
    def stored_branch(
        self, leaf_id: str | None, newest: int | None
    ) -> tuple[list[str], dict[str, str]]: ...
    def stored_json(self, ids: Sequence[str]) -> dict[str, str]: ...
    def stored_messages(self, ids: Sequence[str]) -> dict[str, str]: ...
    def entry_total(self) -> int: ...
    def log_end(self) -> tuple[int, str | None]: ...
    def stored_range(self, start: int, end: int) -> list[str]: ...
    def stored_log(self, end: int, batch: int) -> Iterator[list[str]]: ...
    def outline(self) -> list[TreeRow]: ...
    def newest_outline(self, count: int) -> tuple[int, list[TreeRow]] | None: ...
    def branch_outline(self, leaf_id: str) -> list[OutlineRow]: ...
    def children_outline(self, ids: Sequence[str]) -> dict[str, list[OutlineRow]]: ...
    def labels(self) -> dict[str, str]: ...
    def context_rows(self, leaf_id: str | None) -> list[tuple[str, str, str | None]]: ...
    def context_messages(
        self, leaf_id: str | None, newest: int
    ) -> tuple[list[tuple[str, str, str | None]], dict[str, str]]: ...
    def parse_stored(self, entry_id: str, entry_type: str, data: str) -> SessionEntry: ...
    def parsed_entries(self, ids: Sequence[str]) -> dict[str, SessionEntry]: ...


# By storage class: whether it offers StoredPages (isinstance on a runtime protocol looks up
# each of its methods on every call, tens of microseconds; a class's answer never changes).
_STORED_PAGES: dict[type, bool] = {}


def stored_pages(storage: SessionStorage) -> StoredPages | None:
    """``storage`` when it offers :class:`StoredPages`, else None."""
    offers = _STORED_PAGES.get(type(storage))
    if offers is None:
        offers = _STORED_PAGES[type(storage)] = isinstance(storage, StoredPages)
    return cast(StoredPages, storage) if offers else None


def tree_parent(parent_id: str | None, moves: dict[str, str | None]) -> str | None:
    """The tree node an entry hangs under. pi, resuming a file that ends in one of our leaf
    moves, appends below that line; such an entry belongs under the move's target."""
    seen: set[str] = set()
    while parent_id is not None and parent_id in moves and parent_id not in seen:
        seen.add(parent_id)
        parent_id = moves[parent_id]
    return parent_id


_T = TypeVar("_T")


def pi_child_order(children: list[_T], time_of: Callable[[_T], str]) -> list[_T]:
    """``children`` (in the order appended) in the order pi's ``getTree`` shows them: sorted
    by time, oldest first, with JavaScript's ``sort`` and the comparator ``new Date(a) - new
    Date(b)``. When every time reads, that is a stable sort by time; a time that does not
    (NaN, which ``sort`` takes for equal to anything) is placed as V8 places it, by a run
    then binary insertion (V8's TimSort below 64 elements; beyond, this stays close)."""
    if len(children) < 2:
        return children
    times = [js_time_ms(time_of(child)) for child in children]
    if not any(math.isnan(t) for t in times):
        if all(a <= b for a, b in itertools.pairwise(times)):
            return children
        order = sorted(range(len(children)), key=times.__getitem__)
        return [children[i] for i in order]

    def less(a: int, b: int) -> bool:  # comparefn(a, b) < 0; NaN is never less
        return times[a] - times[b] < 0

    items = list(range(len(children)))
    run = 2  # V8's CountAndMakeRun: the first run, a strictly descending one reversed
    descending = less(1, 0)
    while run < len(items) and less(run, run - 1) == descending:
        run += 1
    if descending:
        items[:run] = reversed(items[:run])
    for start in range(run, len(items)):  # V8's BinaryInsertionSort
        pivot, left, right = items[start], 0, start
        while left < right:
            mid = (left + right) >> 1
            if less(pivot, items[mid]):
                right = mid
            else:
                left = mid + 1
        items[left + 1 : start + 1] = items[left:start]
        items[left] = pivot
    return [children[i] for i in items]


@dataclass
class TreeIndex:
    """The tree of a session from its entries in outline (no content): the tree nodes in the
    order appended (leaf moves left out), each node's tree parent and its children."""

    nodes: list[TreeRow]
    parent: dict[str, str | None]
    children: dict[str, list[str]]  # of the nodes that have any


def tree_index(rows: Sequence[TreeRow]) -> TreeIndex:
    """``rows`` (id, parentId, type) in the order appended, as a tree the way pi's ``getTree``
    makes it: a leaf move between an entry and its parent is skipped (``tree_parent``), an
    entry hangs under its parent wherever the parent's line is (a pi file may name a parent
    that comes later), and an entry whose parent is not in the session is a root. Siblings
    are in pi's order (``pi_child_order``: by time), roots in the order appended."""
    moves = {row[0]: row[1] for row in rows if row[2] == "leaf"}
    nodes: list[TreeRow] = []
    parent: dict[str, str | None] = {}
    children: dict[str, list[str]] = {}
    ahead: list[tuple[str, str]] = []  # (entry, parent not seen yet): later, or missing
    # One pass over what may be a million rows: locals only, and tree_parent only when the
    # session has leaf moves at all.
    for row in rows:
        entry_id, parent_id = row[0], row[1]
        if moves:
            if entry_id in moves:
                continue
            parent_id = tree_parent(parent_id, moves)
        if parent_id is not None:
            if parent_id not in parent:
                ahead.append((entry_id, parent_id))
                parent_id = None
            elif (siblings := children.get(parent_id)) is None:
                children[parent_id] = [entry_id]
            else:
                siblings.append(entry_id)
        parent[entry_id] = parent_id
        nodes.append(row)
    later = [(entry_id, parent_id) for entry_id, parent_id in ahead if parent_id in parent]
    if later:
        # Rare (only a pi file can name a later parent): the siblings of these are put back
        # in the order appended.
        for entry_id, parent_id in later:
            parent[entry_id] = parent_id
        touched = {parent_id for _, parent_id in later}
        for parent_id in touched:
            children[parent_id] = []
        for row in nodes:
            if (parent_id := parent[row[0]]) in touched:
                children[parent_id].append(row[0])
    branching = [parent_id for parent_id, ids in children.items() if len(ids) > 1]
    if branching:  # few: branch points only
        wanted = {child for parent_id in branching for child in children[parent_id]}
        times = {row[0]: row[3] for row in nodes if row[0] in wanted}
        for parent_id in branching:
            children[parent_id] = pi_child_order(children[parent_id], times.__getitem__)
    return TreeIndex(nodes, parent, children)


# --- walks shared by the in-memory indexes ----------------------------------------------------


def walk_to_root(
    get: Callable[[str], SessionEntry | None],
    leaf_id: str | None,
    stop: Callable[[SessionEntry], bool] | None = None,
) -> list[SessionEntry]:
    """Entries from the root (or from where ``stop`` says) down to ``leaf_id``."""
    path: list[SessionEntry] = []
    seen: set[str] = set()
    current = get(leaf_id) if leaf_id is not None else None
    if leaf_id is not None and current is None:
        raise SessionError("not_found", f"entry {leaf_id} not found")
    while current is not None:
        if current.id in seen:
            raise SessionError("corrupt", f"entry {current.id} is its own ancestor")
        seen.add(current.id)
        path.append(current)
        if stop is not None and stop(current):
            break
        current = get(current.parent_id) if current.parent_id is not None else None
    path.reverse()
    return path


def count_entry(stats: SessionStats, entry: SessionEntry) -> bool:
    """Add what ``entry`` counts for (entries, messages, tool calls, tokens and cost) to
    ``stats``; False, adding nothing, for a leaf move. The one place these totals are summed:
    the backends that keep them in a row add each append's the same way."""
    if not is_tree_node(entry):
        return False
    stats.entry_count += 1
    if isinstance(entry, MessageEntry):
        stats.message_count += 1
        if isinstance(entry.message, AssistantMessage):
            stats.tool_call_count += len(entry.message.tool_calls)
    usage = entry_usage(entry)
    if usage is not None:
        stats.input_tokens += usage.input
        stats.output_tokens += usage.output
        stats.cache_read_tokens += usage.cache_read
        stats.cache_write_tokens += usage.cache_write
        stats.total_tokens += usage.total_tokens
        stats.cost_total += usage.cost.total
    return True


# The first user message a listing shows, cut to this many characters.
FIRST_MESSAGE_CHARS = 200


def listing_text(message: UserMessage) -> str | None:
    """What a session listing shows of a user message, as pi's does: its text blocks joined
    by spaces, cut to ``FIRST_MESSAGE_CHARS``; None when it has no text (an image only), so
    that the listing shows the first user message that has some."""
    content = message.content
    if not isinstance(content, str):
        content = " ".join(block.text for block in content if isinstance(block, TextContent))
    return content[:FIRST_MESSAGE_CHARS] or None


# Counters are 64-bit integers in SQLite and PostgreSQL alike.
MAX_INTEGER = 2**63 - 1
TOKEN_COUNTS = (
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "total_tokens",
)


def check_counts_fit(counts: SessionStats) -> None:
    """A larger count would fail deep inside the database driver."""
    if any(abs(getattr(counts, name)) > MAX_INTEGER for name in TOKEN_COUNTS):
        raise SessionError(
            "invalid_entry", f"a token count is too large to store (over {MAX_INTEGER})"
        )


@dataclass
class RowDelta:
    """The change entries make to the row a database keeps for their session: the counters
    (summed by :func:`count_entry`, with messages by role and the first and last entry time),
    the first user message, a new name. The figures that need the tree (leaves, branch
    points) come from ``row_sql``."""

    counts: SessionStats = field(default_factory=SessionStats)
    first_user_message: str | None = None
    name: tuple[str | None] | None = None  # (new name,) when the entry renames the session

    def add(self, entry: SessionEntry) -> None:
        if not count_entry(self.counts, entry):
            return
        counts = self.counts
        counts.first_timestamp = counts.first_timestamp or entry.timestamp
        counts.last_timestamp = entry.timestamp
        if isinstance(entry, MessageEntry):
            message = entry.message
            roles = counts.messages_by_role
            roles[message.role] = roles.get(message.role, 0) + 1
            if isinstance(message, UserMessage) and self.first_user_message is None:
                self.first_user_message = listing_text(message)
        if isinstance(entry, SessionInfoEntry):
            self.name = (session_name(entry.name),)

    def check_fits(self) -> None:
        check_counts_fit(self.counts)

    def add_into(self, totals: SessionStats) -> None:
        """Add these token counts to ``totals`` (what several writes in one transaction add
        to the row), checked as a whole."""
        for name in TOKEN_COUNTS:
            setattr(totals, name, getattr(totals, name) + getattr(self.counts, name))
        check_counts_fit(totals)


def compute_stats(entries: Iterable[SessionEntry]) -> SessionStats:
    stats = SessionStats()
    roles: Counter[str] = Counter()
    child_counts: Counter[str | None] = Counter()
    nodes: list[str] = []
    entries = list(entries)
    moves = {e.id: e.parent_id for e in entries if isinstance(e, LeafEntry)}
    for entry in entries:
        if not count_entry(stats, entry):
            continue
        nodes.append(entry.id)
        child_counts[tree_parent(entry.parent_id, moves)] += 1
        if stats.first_timestamp is None:
            stats.first_timestamp = entry.timestamp
        stats.last_timestamp = entry.timestamp
        if isinstance(entry, MessageEntry):
            roles[entry.message.role] += 1
    stats.messages_by_role = dict(roles)
    stats.leaf_count = sum(1 for node in nodes if child_counts[node] == 0)
    stats.branch_point_count = sum(1 for node in nodes if child_counts[node] > 1)
    return stats


# --- checks for entries that arrive all at once (import, fork, reload) ------------------------


def validate_tree(
    entries: list[SessionEntry], where: Callable[[int], str] = lambda i: f"entry {i + 1}"
) -> None:
    """Raise unless ids are unique and no entry is its own ancestor (an entry whose parent is
    not among them is a root, as pi shows it).

    ``where(i)`` names the i-th entry in messages (e.g. ``file.jsonl line 12``).
    """
    position: dict[str, int] = {}
    for index, entry in enumerate(entries):
        if entry.id in position:
            first = where(position[entry.id])
            raise SessionError(
                "invalid_entry", f"{where(index)}: duplicate entry id {entry.id} (also {first})"
            )
        position[entry.id] = index
    by_id = {entry.id: entry for entry in entries}
    rooted: set[str] = set()  # entries known to reach a root
    for index, entry in enumerate(entries):
        walk: list[str] = []
        on_walk: set[str] = set()
        current: SessionEntry | None = entry
        while current is not None and current.id not in rooted:
            if current.id in on_walk:
                raise SessionError(
                    "invalid_entry", f"{where(index)}: parentId chain of {entry.id} has a cycle"
                )
            walk.append(current.id)
            on_walk.add(current.id)
            # A parent not among the entries: a root, as pi shows it.
            current = by_id.get(current.parent_id) if current.parent_id is not None else None
        rooted.update(walk)


def leaf_after(entries: list[SessionEntry]) -> str | None:
    """The leaf a log of entries ends on: the last entry, or the target of a final leaf move
    (pi resumes at the last line; our ``leaf`` lines point it back to the right branch)."""
    if not entries:
        return None
    last = entries[-1]
    return last.target_id if isinstance(last, LeafEntry) else last.id


def moved_leaf(move: LeafEntry, known: Callable[[str], bool]) -> str | None:
    """The leaf a leaf line leaves, ``known`` telling the entries of the session: its target.
    A target that is no entry (a damaged or hand-made file: we never write one) leaves it
    where pi resumes such a file, at the line's parent, or before the first entry when that
    is no entry either; a leaf on no entry would fail every read and append of the session."""
    if move.target_id is None or known(move.target_id):
        return move.target_id
    if move.parent_id is not None and known(move.parent_id):
        return move.parent_id
    return None
