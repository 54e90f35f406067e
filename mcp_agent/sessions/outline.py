"""A session in outline: a one-line account of each entry (its kind and the start of its text)
and the tree as flat nodes, for the terminal and for the MCP tools.

An account comes as parts, each with the kind of text it is (``user``, ``assistant``,
``toolResult``, ``error``, ``meta``, ``summary``, ``custom``, ``call``), so a renderer can
style them; ``entry_preview`` joins them. The flat tree has parent and children by id, so it
has no nesting whatever the session's depth."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, overload

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
    SessionInfoEntry,
    ThinkingLevelChangeEntry,
    clip_long,
)
from mcp_agent.sessions.errors import SessionError
from mcp_agent.sessions.storage import (
    OutlineRow,
    StoredPages,
    TreeIndex,
    TreeRow,
    pi_child_order,
    tree_index,
)
from mcp_agent.wire import one_line

if TYPE_CHECKING:
    from mcp_agent.sessions.session import Session

Parts = list[tuple[str, str]]


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
            return [
                (f"compaction ({tokens:,} tokens before): {one_line(summary, limit)}", "summary")
            ]
        case BranchSummaryEntry(summary=summary):
            return [(f"branch summary: {one_line(summary, limit)}", "summary")]
        case CustomMessageEntry(custom_type=kind, content=content):
            return [(f"{kind}: {one_line(content_text(content), limit)}", "custom")]
        case CustomEntry(custom_type=kind, data=data):
            said = data_preview(data, limit)
            return [(f"custom {kind}", "meta"), *([(f": {said}", "")] if said else [])]
        case LabelEntry(target_id=target, label=label):
            if not label:
                return [(f"label {target} cleared", "meta")]
            return [(f"label {target} = “{one_line(label, limit)}”", "meta")]
        case SessionInfoEntry(name=name):
            # Quoted as a listing quotes it: repr() doubled every backslash, a path's or an
            # escaped control character's, and switched quotes for a name with an apostrophe.
            return [(f"name → “{one_line(name, limit)}”" if name else "name cleared", "meta")]
        case LeafEntry(target_id=target):
            return [(f"leaf → {target}", "meta")]
    return [(entry.type, "meta")]


def data_preview(data: Any, limit: int) -> str:
    """A custom entry's data in a line (a sub-agent's link: which session, agent and task):
    an object's fields of text, numbers or booleans as ``key=value``, each value cut, read
    only until ``limit`` characters are made (data may be megabytes)."""
    if isinstance(data, str | int | float | bool):
        return one_line(str(data)[: limit + 1], limit)
    if not isinstance(data, dict):
        return ""
    said: list[str] = []
    length = 0
    for key, value in data.items():
        if length > limit:
            break
        if isinstance(value, str | int | float | bool) and isinstance(key, str):
            item = f"{key[:limit]}={str(value)[: limit + 1]}"
            said.append(item)
            length += len(item) + 2
    return one_line(", ".join(said), limit)


def message_parts(message: Any, limit: int = 80) -> Parts:
    match message:
        case UserMessage():
            return [("user: ", "user"), (one_line(message.text, limit), "")]
        case AssistantMessage():
            failure = message.failure
            parts: Parts = [("assistant:", "assistant" if failure is None else "error")]
            if message.text:
                parts.append((" " + one_line(message.text, limit), ""))
            calls = message.tool_calls
            if calls:
                parts.append((f" → {', '.join(c.name for c in calls)}", "call"))
            if failure is not None:
                parts.append((f" ({one_line(failure, 60)})", ""))
            return parts
        case ToolResultMessage():
            kind = "error" if message.is_error else "toolResult"
            return [(f"{message.tool_name} result: ", kind), (one_line(message.text, limit), "")]
        case BashExecutionMessage():
            return [("bash: ", "call"), (one_line(f"$ {message.command}", limit), "")]
        case CustomMessage():
            text = one_line(content_text(message.content), limit)
            return [(f"{message.custom_type}: ", "custom"), (text, "")]
        case BranchSummaryMessage() | CompactionSummaryMessage():
            return [("summary: ", "summary"), (one_line(message.summary, limit), "")]
    return [(f"{message.role} message", "meta")]


def entry_preview(entry: SessionEntry, limit: int = 80) -> str:
    return joined_preview(entry_parts(entry, limit), limit)


def joined_preview(parts: Parts, limit: int) -> str:
    """The parts as one line: each text part is cut at ``limit``, but names (a custom type,
    a model, a list of tools) are not, so the whole is cut at twice that."""
    text = "".join(text for text, _ in parts)
    return text if len(text) <= 2 * limit else one_line(text, 2 * limit)


# The children a row of a page names (of ``childCount``): a row is then bounded whatever its
# entry's children (a root with 20,000 branches made a one-row page of 222 KB, past the
# ``ANSWER_BYTES`` pages keep to). The rest are read with the parent's outline or its branch.
CHILDREN_SHOWN = 20


def tree_node(
    index: TreeIndex,
    row: TreeRow,
    entry: SessionEntry,
    label: str | None,
    on_branch: bool,
    preview_chars: int,
    children_shown: int | None = None,
) -> dict[str, Any]:
    """One node of the flat tree (see ``flat_tree``): ``row``'s ``entry``, its preview cut at
    ``preview_chars``, naming its first ``children_shown`` children (None: all)."""
    entry_id = row[0]
    children = index.children.get(entry_id, [])
    return {
        "id": entry_id,
        "parentId": index.parent[entry_id],
        "type": row[2],
        "timestamp": entry.timestamp,
        "children": children[:children_shown],
        "childCount": len(children),
        "label": None if label is None else clip_long(label, NAME_CHARS),
        "onBranch": on_branch,
        "preview": entry_preview(entry, preview_chars),
    }


def flat_tree(
    session: Session, preview_chars: int = 120, children_shown: int | None = None
) -> list[dict[str, Any]]:
    """Every entry but leaf moves, in the order appended, as ``{id, parentId, type,
    timestamp, children, childCount, label, onBranch, preview}``. ``parentId`` is the tree
    parent (a leaf move between is skipped); ``children`` the first ``children_shown`` (None:
    all) of its ``childCount`` children; ``onBranch``: on the path from the root to the
    leaf."""
    entries = {entry.id: entry for entry in session.get_entries()}
    index = tree_index([(e.id, e.parent_id, e.type, e.timestamp) for e in entries.values()])
    on_branch = {entry.id for entry in session.get_branch()}
    return [
        tree_node(
            index,
            row,
            entries[row[0]],
            session.get_label(row[0]),
            row[0] in on_branch,
            preview_chars,
            children_shown,
        )
        for row in index.nodes
    ]


class TreeLike(Protocol):
    """A node of the session tree: ``Session.tree``'s ``TreeNode`` or an ``OutlineNode``."""

    @property
    def id(self) -> str: ...
    @property
    def label(self) -> str | None: ...
    @property
    def children(self) -> Sequence[TreeLike]: ...
    @property
    def entry(self) -> SessionEntry: ...


class OutlineNode:
    """A node of the tree made from the entries in outline, as ``Session.tree`` gives them:
    its entry is read and parsed when first asked for (``read_together``: many at once)."""

    __slots__ = ("_entry", "_storage", "children", "id", "label", "type")

    def __init__(self, entry_id: str, kind: str, label: str | None, storage: StoredPages) -> None:
        self.id = entry_id
        self.type = kind
        self.label = label
        self.children: list[OutlineNode] = []
        self._entry: SessionEntry | None = None
        self._storage = storage

    @property
    def entry(self) -> SessionEntry:
        if self._entry is None:
            text = self._storage.stored_json([self.id]).get(self.id)
            if text is None:
                raise SessionError("not_found", f"entry {self.id} not found")
            self._entry = self._storage.parse_stored(self.id, self.type, text)
        return self._entry


def read_together(nodes: Sequence[TreeLike]) -> None:
    """Read and parse the entries of those of ``nodes`` made from the outline and not read
    yet, ``TREE_BATCH`` in a query: a drawing of every entry of a 10,000-entry session read
    them one query each (6 s of CPU). Those not found are left to ``entry``, which says so."""
    unread = [node for node in nodes if isinstance(node, OutlineNode) and node._entry is None]
    for start in range(0, len(unread), TREE_BATCH):
        chunk = unread[start : start + TREE_BATCH]
        storage = chunk[0]._storage
        texts = storage.stored_json([node.id for node in chunk])
        for node in chunk:
            if (text := texts.get(node.id)) is not None:
                node._entry = storage.parse_stored(node.id, node.type, text)


def outline_tree(session: Session) -> Sequence[TreeLike]:
    """``session.tree()``, made from the entries in outline where the storage keeps them, so
    that only the entries a reader looks at are parsed (a drawing of a 300,000-entry session
    parsed them all: 28 s and 1.8 GB)."""
    storage = session.storage
    if not isinstance(storage, StoredPages):
        return session.tree()
    index = tree_index(storage.outline())
    labels = storage.labels()
    nodes = {
        row[0]: OutlineNode(row[0], row[2], labels.get(row[0]), storage) for row in index.nodes
    }
    for parent, children in index.children.items():
        nodes[parent].children = [nodes[child] for child in children]
    return [nodes[row[0]] for row in index.nodes if index.parent[row[0]] is None]


def iter_flat_tree(session: Session, preview_chars: int = 120) -> Iterator[dict[str, Any]]:
    """``flat_tree``'s nodes one at a time: from a storage that keeps the entries in outline,
    the tree is made from that and ``TREE_BATCH`` entries are parsed at a time, so a session
    of any size is never held parsed whole."""
    storage = session.storage
    if not isinstance(storage, StoredPages):
        yield from flat_tree(session, preview_chars)
        return
    index = tree_index(storage.outline())
    labels = storage.labels()
    on_branch = frozenset(storage.branch_ids(session.leaf_id))
    for start in range(0, len(index.nodes), TREE_BATCH):
        rows = index.nodes[start : start + TREE_BATCH]
        yield from stored_tree_nodes(storage, index, rows, labels, on_branch, preview_chars)


TREE_BATCH = 1000


def stored_tree_nodes(
    storage: StoredPages,
    index: TreeIndex,
    rows: Sequence[TreeRow],
    labels: dict[str, str],
    on_branch: frozenset[str],
    preview_chars: int,
    children_shown: int | None = None,
) -> list[dict[str, Any]]:
    """The flat tree's nodes of ``rows``, their entries read at once."""
    texts = storage.stored_json([row[0] for row in rows])
    nodes = []
    for row in rows:
        text = texts.get(row[0])
        if text is None:
            raise SessionError("not_found", f"entry {row[0]} was deleted while read")
        entry = storage.parse_stored(row[0], row[2], text)
        label = labels.get(row[0])
        on = row[0] in on_branch
        nodes.append(tree_node(index, row, entry, label, on, preview_chars, children_shown))
    return nodes


# Entries an outline always lists, however long the chain around them.
_LANDMARKS = ("compaction", "branch_summary")


class _TreeReader:
    """What ``outline`` reads of a session: entries in outline (id, parentId, type, timestamp)
    and, for the rows it shows, the entries themselves. A storage with ``StoredPages`` gives
    the outline from its index and parses only the entries shown; any other gives its
    entries, kept for the rows."""

    def __init__(self, session: Session) -> None:
        self.storage = session.storage
        self.stored = self.storage if isinstance(self.storage, StoredPages) else None
        self.entries: dict[str, SessionEntry] = {}
        self._labels: dict[str, str] | None = None
        self._children: dict[str | None, list[OutlineRow]] = {}

    def branch(self, leaf_id: str) -> list[OutlineRow]:
        if self.stored is not None:
            return self.stored.branch_outline(leaf_id)
        return self._outlined(self.storage.get_branch(leaf_id))

    def children(self, parent: str | None) -> list[OutlineRow]:
        found = self._children.get(parent)
        if found is None:
            if self.stored is not None and parent is not None:
                found = self.stored.children_outline([parent])[parent]
            else:
                found = self._outlined(self.storage.get_children(parent))
            if parent is not None:  # pi orders children by time, roots as appended
                found = pi_child_order(found, _time_of)
            self._children[parent] = found
        return found

    def read_children(self, ids: Sequence[str | None]) -> None:
        """Read the children of all of ``ids`` at once (one query instead of one each)."""
        if self.stored is not None:
            wanted = [i for i in ids if i is not None and i not in self._children]
            for parent, found in self.stored.children_outline(wanted).items():
                self._children[parent] = pi_child_order(found, _time_of)

    def place(self, entry_id: str) -> OutlineRow | None:
        entry = self.entry(entry_id)
        return None if entry is None else (entry.id, entry.parent_id, entry.type, entry.timestamp)

    def entry(self, entry_id: str) -> SessionEntry | None:
        found = self.entries.get(entry_id)
        return found if found is not None else self.storage.get_entry(entry_id)

    def read_entries(self, places: Sequence[OutlineRow]) -> None:
        """Read the entries of all of ``places`` at once."""
        if self.stored is not None:
            wanted = {place[0]: place[2] for place in places if place[0] not in self.entries}
            for entry_id, text in self.stored.stored_json(list(wanted)).items():
                self.entries[entry_id] = self.stored.parse_stored(entry_id, wanted[entry_id], text)

    def label(self, entry_id: str) -> str | None:
        if self.stored is None:
            return self.storage.get_label(entry_id)
        if self._labels is None:
            self._labels = self.stored.labels()
        return self._labels.get(entry_id)

    def _outlined(self, entries: list[SessionEntry]) -> list[OutlineRow]:
        self.entries.update((entry.id, entry) for entry in entries)
        return [(entry.id, entry.parent_id, entry.type, entry.timestamp) for entry in entries]


def _time_of(row: OutlineRow) -> str:
    return row[3]


def lazy_outline(
    session: Session, entry_id: str | None = None, preview_chars: int = 120
) -> OutlineRows:
    """The tree as a reader opens it, in time that grows with what is shown, not with the
    session: one chain (from ``entry_id``, or from the root along the current branch), then
    at each entry that branches, the first entry of every other branch, unopened.

    The chain runs from ``entry_id`` (None: the root) down the current branch where it can,
    else down the newest child, to its end. Along it the first and last entries, branch
    points, labelled entries, compactions, branch summaries and the leaf are listed; a run of
    other entries between two of those (six or more) folds, and the entry before the fold says
    how many it hides (``folded``; the entries are the path to the next listed entry's parent,
    ``session_get`` view branch). Rows are ``flat_tree``'s nodes (naming ``CHILDREN_SHOWN``
    children at most) plus ``kind`` (the style of the preview), ``spine`` (on the chain, else
    the head of an unopened branch) and ``folded``."""
    read = _TreeReader(session)
    leaf_id = session.leaf_id
    branch = read.branch(leaf_id) if leaf_id is not None else []
    on_branch = {place[0] for place in branch}

    if entry_id is None:
        chain = [place for place in branch if place[2] != "leaf"]
        start = read.children(None)
        if not chain and start:
            chain.append(_next_on_chain(start, on_branch))
    else:
        place = read.place(entry_id)
        if place is None or place[2] == "leaf":
            raise SessionError("not_found", f"entry {entry_id} not found")
        chain = [place]
    if entry_id is not None or not branch:
        while chain and read.children(chain[-1][0]) and len(chain) <= MAX_CHAIN:
            chain.append(_next_on_chain(read.children(chain[-1][0]), on_branch))

    read.read_children([id_ for place in chain for id_ in place[:2]])
    # Listed: the chain's ends, branch points and the first entry of each branch below one,
    # labelled entries, compactions, branch summaries and the leaf; a short run is listed too.
    listed = [
        index in (0, len(chain) - 1)
        or len(read.children(place[0])) > 1
        or len(read.children(place[1])) > 1
        or read.label(place[0]) is not None
        or place[2] in _LANDMARKS
        or place[0] == leaf_id
        for index, place in enumerate(chain)
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

    # Every row names its children: those of the branches' heads too, read at once.
    on_chain = {place[0] for place in chain}
    heads = [
        child
        for parent in [None, *on_chain]
        for child in read.children(parent)
        if child[0] not in on_chain
    ]
    read.read_children([head[0] for head in heads])
    rows: list[_Row] = []
    if entry_id is None:
        rows.extend(
            _Row(root, None, False) for root in read.children(None) if root[0] != chain[0][0]
        )
    previous: _Row | None = None
    for index, place in enumerate(chain):
        if not listed[index]:
            assert previous is not None  # the first entry is always listed
            previous.folded += 1
            continue
        previous = _Row(place, chain[index - 1][0] if index else place[1], True)
        rows.append(previous)
        next_id = chain[index + 1][0] if index + 1 < len(chain) else None
        rows.extend(
            _Row(child, place[0], False) for child in read.children(place[0]) if child[0] != next_id
        )
    return OutlineRows(read, rows, on_branch, preview_chars)


def outline(
    session: Session, entry_id: str | None = None, preview_chars: int = 120
) -> list[dict[str, Any]]:
    """The rows of ``lazy_outline``, every one made."""
    return list(lazy_outline(session, entry_id, preview_chars))


@dataclass
class _Row:
    """A row of an outline before its entry is read."""

    place: OutlineRow
    parent_id: str | None
    spine: bool
    folded: int = 0


class OutlineRows(Sequence[dict[str, Any]]):
    """The rows of an outline, each made (its entry read and its preview written) when first
    asked for, a block at a time: a page of a long outline reads the entries it shows, not
    all of the outline's (a page of a 50,000-deep comb took 4 s of parsing). Safe to share
    between threads; a row once made is never changed."""

    BLOCK = 256

    def __init__(
        self, read: _TreeReader, rows: list[_Row], on_branch: set[str], preview_chars: int
    ) -> None:
        self._read = read
        self._rows = rows
        self._made: list[dict[str, Any] | None] = [None] * len(rows)
        self._on_branch = on_branch
        self._preview_chars = preview_chars
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._rows)

    @overload
    def __getitem__(self, index: int) -> dict[str, Any]: ...
    @overload
    def __getitem__(self, index: slice) -> list[dict[str, Any]]: ...
    def __getitem__(self, index: int | slice) -> dict[str, Any] | list[dict[str, Any]]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        made = self._made[index]  # IndexError past the end, as a list's
        if made is None:
            with self._lock:
                start = (index % len(self)) // self.BLOCK * self.BLOCK
                self._make(start, min(start + self.BLOCK, len(self)))
            made = self._made[index]
            assert made is not None
        return made

    def _make(self, start: int, end: int) -> None:
        read = self._read
        wanted = self._rows[start:end]
        read.read_entries([row.place for row in wanted])
        for offset, row in enumerate(wanted, start):
            if self._made[offset] is None:
                self._made[offset] = self._row(row)
        # The parsed entries are not kept: each row is made once.
        for row in wanted:
            read.entries.pop(row.place[0], None)

    def _row(self, row: _Row) -> dict[str, Any]:
        read, place = self._read, row.place
        entry = read.entry(place[0])
        if entry is None:
            raise SessionError("not_found", f"entry {place[0]} was deleted while read")
        parts = entry_parts(entry, self._preview_chars)
        label = read.label(place[0])
        children = read.children(place[0])
        return {
            "id": place[0],
            "parentId": row.parent_id,
            "type": place[2],
            "timestamp": place[3],
            "children": [child[0] for child in children[:CHILDREN_SHOWN]],
            "childCount": len(children),
            "label": None if label is None else clip_long(label, NAME_CHARS),
            "onBranch": place[0] in self._on_branch,
            "preview": joined_preview(parts, self._preview_chars),
            "kind": next((kind for _, kind in parts if kind), "meta"),
            "spine": row.spine,
            "folded": row.folded,
        }


# Fewer entries than this between two listed ones are listed, not folded.
MIN_FOLD = 6
# A chain longer than this (a corrupt cycle, or a session beyond reason) is cut there.
MAX_CHAIN = 10_000_000


def _next_on_chain(children: list[OutlineRow], on_branch: set[str]) -> OutlineRow:
    """The child a chain goes on with: the one on the current branch, else the newest."""
    return next((child for child in children if child[0] in on_branch), children[-1])
