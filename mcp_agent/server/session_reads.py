"""Pages of a session, read so that a page costs what it shows.

With a backend that keeps each entry's JSON as text (``StoredPages``: SQLite, PostgreSQL), a
page is found from ids and positions alone, only the entries that may be on it are read, and
they are served as the JSON text stored (pi's v3 form) instead of parse → model → dump; the
tree parses only its page's entries (for their previews), the context only the entries that
are not plain messages. Other backends give parsed entries, which are shown the same way. Pages come as
compact JSON texts, one per item, for ``schemas.compact_result``.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from mcp_agent.server.cut_entry import cut_to_fit
from mcp_agent.server.entry_pieces import piece_call
from mcp_agent.server.paging import (
    ANSWER_BYTES,
    TEXT_BYTES,
    WHOLE_MAX,
    PagedAs,
    PageFrom,
    PageOf,
    check_whole,
    cursor_before,
    cursor_end,
    cursor_start,
    fits_whole,
    json_size,
    newest_page,
    parse_cursor,
)
from mcp_agent.server.schemas import CompactAnswer
from mcp_agent.sessions import Session
from mcp_agent.sessions.context import SessionContext, stored_context
from mcp_agent.sessions.entries import (
    SessionEntry,
    clip_long,
    entry_to_json,
)
from mcp_agent.sessions.errors import SessionError
from mcp_agent.sessions.kept import Kept
from mcp_agent.sessions.outline import (
    CHILDREN_SHOWN,
    OutlineRows,
    flat_tree,
    lazy_outline,
    stored_tree_nodes,
)
from mcp_agent.sessions.pi import entries_loader, export_loader
from mcp_agent.sessions.storage import (
    StoredPages,
    TreeIndex,
    pi_child_order,
    stored_pages,
    tree_index,
)

# An entry larger than this is shown as a stub naming the resource that has all of it.
ENTRY_BYTES = ANSWER_BYTES // 2
# What an entry asked for alone is cut to (``cut_to_fit``): a page's room less its note (which
# names a resource and a tool call, each with the session's and entry's ids).
CUT_BYTES = ENTRY_BYTES - 1024
PREVIEW_CHARS = 120

# (start, end) -> the JSON texts of the items in positions start .. end - 1
Loader = Callable[[int, int], list[str]]


def compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def stored(session: Session) -> StoredPages | None:
    """The session's storage when it serves stored JSON and the session reads as stored (no
    context options of its own)."""
    storage = session.storage
    options = session.context_build_options
    if options.entry_transforms or options.entry_projectors:
        return None
    return stored_pages(storage)


def shown_entry(session_id: str, text: str, alone: bool = False) -> tuple[str, int]:
    """An entry's JSON as a page shows it, with its size: the entry, or, when it is too large
    for a page, a stub that says so and where to read it whole; asked for ``alone`` (a page
    of one), the entry with its long texts cut, when they are its bulk."""
    size = len(text.encode())
    if size <= ENTRY_BYTES:
        return text, size
    data = json.loads(text)
    fitted = cut_to_fit(data, CUT_BYTES) if alone else None
    if fitted is not None:
        cut, most = fitted
        whole = entry_whole(session_id, data, cut_here=True)
        cut["omitted"] = (
            f"{size:,} bytes, too large for a page: its texts over {most:,} characters are"
            f" cut here, each saying how long it is; for it whole, {whole}"
        )
        shown = compact(cut)
        return shown, len(shown.encode())
    stub: dict[str, Any] = {
        key: data[key] for key in ("type", "id", "parentId", "timestamp") if key in data
    }
    message = data.get("message")
    if isinstance(message, dict) and "role" in message:
        stub["role"] = message["role"]
    stub["omitted"] = f"{size:,} bytes, too large for a page: {entry_whole(session_id, data)}"
    shown = compact(stub)
    return shown, len(shown.encode())


def entry_uri(session_id: str, entry_id: str) -> str:
    """The URI of one entry's resource; an id from a file may hold any character, and one
    such as ``/``, ``?``, ``#`` or ``%`` would otherwise name another entry or none."""
    return f"session://{session_id}/entries/{quote(entry_id, safe='')}"


def entry_text(data: dict[str, Any]) -> str:
    """One entry as its resource gives it whole: compact JSON, as every answer's text."""
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))


def entry_size(text: str) -> int:
    """The bytes an entry's resource text (``entry_text``) takes as sent, in a JSON string."""
    return json_size(text)


def too_large_entry(session_id: str, entry_id: str, data: dict[str, Any] | None = None) -> str:
    """Where an entry too large for any one answer is: in pieces by ``session_get`` with
    ``offset``, whole only in the session's file; and, given its JSON ``data`` when its bulk is
    text, cut to fit by ``session_get`` with ``limit=1``."""
    cut = ""
    if data is not None and cut_to_fit(data, CUT_BYTES) is not None:
        cut = (
            f"session_get with entry_id {data['id']!r} and limit 1 shows it with its long"
            " texts cut; "
        )
    return (
        f"{cut}{piece_call(session_id, entry_id, 0)} reads it in pieces (each answer names the"
        " next); no one answer has it whole, and `mcp-agent-sessions sessions export"
        f" {session_id} -o FILE` writes the session's file, the entry one line of it"
    )


# The most an entry may take for session_get to answer with it whole in its text too: what
# the text holds less room for the answer's other fields (the session's summary, bounded).
TEXT_ENTRY_BYTES = TEXT_BYTES - 8 * 1024


def whole_entry_call(session_id: str, data: dict[str, Any], size: int) -> str:
    """The tool call that answers with one entry (its JSON ``data``, ``size`` bytes) alone and
    whole, for a model whose host gives it tools and no resource reads: the branch to it read
    from it (``entries_from``), asked for whole."""
    entry_id = data["id"]
    call = (
        f"session_get with session_id {session_id!r}, entry_id {entry_id!r}, from_entry_id"
        f" {entry_id!r} and limit 0"
    )
    if size <= TEXT_ENTRY_BYTES:
        return f"{call} (it alone, whole)"
    # Past what a text holds, the call whose answers' texts have all of it, a piece at a time,
    # first: a model whose host shows it the text block alone reads that.
    return (
        f"{piece_call(session_id, entry_id, 0)} (in pieces, each answer naming the next), or"
        f" {call} (it alone, whole in the structured content only: past the"
        f" {TEXT_BYTES // 1024} KB an answer's text holds)"
    )


def entry_whole(session_id: str, data: dict[str, Any], cut_here: bool = False) -> str:
    """Where an entry too large for a page (its JSON ``data``) is read whole: its resource,
    or, past what one answer holds, in pieces (``entry_pieces``) or by the command line's
    export (the resource refuses it), and
    ``session_get`` shows it cut unless this is that (``cut_here``)."""
    size = entry_size(entry_text(data))
    if fits_whole(size):
        # The call first (most hosts give a model no resource reads), the URI last: it ends
        # the note, as a reader that cuts it out takes it.
        return f"{whole_entry_call(session_id, data, size)}, or read {entry_uri(session_id, data['id'])}"
    whole = too_large_entry(session_id, data["id"], None if cut_here else data)
    return f"more than one answer holds, so {whole}"


def shown_message(
    session_id: str, index: int, item: dict[str, Any] | str, text: str, paged_as: PagedAs
) -> str:
    """A context message's JSON as a page shows it: the message, or, when it is too large for
    a page, a stub with its role and time that says so and where to read it whole (``item``:
    the message entry's id, or the message itself when an entry of another kind made it;
    ``paged_as``: the context's, for the cursor that ends with it)."""
    if len(text) <= ENTRY_BYTES // 4:  # at most 4 bytes a character: no need to count them
        return text
    size = len(text.encode())
    if size <= ENTRY_BYTES:
        return text
    data = json.loads(text)
    stub = {key: data[key] for key in ("role", "timestamp") if key in data}
    # The entry around a message: a few ids and a time, at their longest.
    moment = "2026-01-01T00:00:00.000Z"
    envelope: dict[str, Any] = {
        "type": "message",
        "id": item,
        "parentId": item,
        "timestamp": moment,
    }
    envelope["message"] = data
    where = (
        entry_whole(session_id, envelope)
        if isinstance(item, str)
        else f"session_context with limit=0 and cursor {cursor_before(index + 1, paged_as)} ends"
        " with it, whole"
    )
    stub["omitted"] = f"{size:,} bytes, too large for a page: {where}"
    return compact(stub)


# The items a page is made from at first; each next block, if the page is not full, twice the last.
FIRST_BLOCK = 100


def sized_page(
    total: int,
    load: Loader,
    cursor: str | None,
    limit: int | None,
    budget: int = ANSWER_BYTES,
    paged_as: PagedAs | None = None,
) -> tuple[list[str], PageOf]:
    """The newest page before ``cursor`` of ``total`` items, sized by their JSON texts (see
    ``paging.newest_page``, and ``paging.PagedAs`` for ``paged_as``); only the items that
    may be on it are loaded."""
    end = cursor_end(cursor, total, paged_as)
    first = 0 if limit is None else max(0, end - limit)
    if limit is None:
        texts = load(first, end)
    else:
        # Newest first, a block at a time, until the page is full: what ``newest_page`` would
        # not take is not made (a limit of 1,000 tree nodes made 1,000 previews to show 90).
        texts, size, start, block = [], 0, end, FIRST_BLOCK
        while start > first and size <= budget:
            made = load(max(first, start - block), start)
            texts[:0] = made
            size += sum(len(text.encode()) for text in made)
            start, block = start - len(made), 2 * block
        first = start
    page = newest_page(
        range(total), cursor, limit, lambda i: len(texts[i - first].encode()), budget, paged_as
    )
    return texts[page.start - first : page.end - first], page


def entries_page(
    session_id: str,
    total: int,
    load: Loader,
    cursor: str | None,
    limit: int | None,
    paged_as: PagedAs | None = None,
) -> tuple[list[str], PageOf]:
    """A page of entries (``sized_page``), an entry too large for a page as a stub (on a page
    of one, ``limit`` 1, with its long texts cut); asked for whole (``limit`` None), every
    entry is whole. ``paged_as``: ``view_paged_as``."""

    def shown(start: int, end: int) -> list[str]:
        return [shown_entry(session_id, text, limit == 1)[0] for text in load(start, end)]

    return sized_page(total, load if limit is None else shown, cursor, limit, paged_as=paged_as)


def entries_from(
    session: Session,
    end_id: str | None,
    from_id: str,
    cursor: str | None,
    limit: int | None,
    budget: int = ANSWER_BYTES,
) -> tuple[list[str], PageFrom]:
    """A page of the branch to ``end_id`` (None: to the leaf) read forward: from the entry
    ``from_id`` (a search's hit, say), or from where ``cursor`` (a ``PageFrom``'s) says, on
    toward the branch's end, as many entries as ``limit`` and ``budget`` take (one at least),
    shown as ``entries_page`` shows them."""
    session_id = session.header.id
    total, load = view_entries(session, "branch", end_id, 0)
    paged_as = view_paged_as("branch", load)
    if cursor is not None:
        start = cursor_start(cursor, total, paged_as)
    else:
        start = branch_position(session, end_id, from_id)
    if limit is None:
        return load(start, total), PageFrom(start, total, total, paged_as)
    texts: list[str] = []
    used, end, block = 0, start, FIRST_BLOCK
    stop = min(total, start + limit)
    while end < stop:
        for text in load(end, min(stop, end + block)):
            shown, size = shown_entry(session_id, text, limit == 1)
            if texts and used + size > budget:
                return texts, PageFrom(start, end, total, paged_as)
            texts.append(shown)
            used, end = used + size, end + 1
        block *= 2
    return texts, PageFrom(start, end, total, paged_as)


def branch_position(session: Session, end_id: str | None, entry_id: str) -> int:
    """Where ``entry_id`` is on the branch to ``end_id`` (None: the leaf), root first, or a
    SessionError saying it is not there and how to read it."""
    if session.get_entry(entry_id) is None:
        raise SessionError("not_found", f"entry {entry_id} not found")
    end = end_id if end_id is not None else session.leaf_id
    storage = stored(session)
    ids = (
        storage.branch_ids(end) if storage is not None else [e.id for e in session.get_branch(end)]
    )
    try:
        return ids.index(entry_id)
    except ValueError:
        path = f"the path to entry {end_id}" if end_id is not None else "the current branch"
        raise SessionError(
            "invalid_argument",
            f"entry {entry_id} is not on {path} (a search's hit of it says onBranch false): read"
            f" the path up to it with entry_id={entry_id}, or give entry_id the last entry of its"
            f" branch (view outline with entry_id={entry_id} shows what follows it)",
        ) from None


def view_paged_as(view: str, load: Loader) -> PagedAs | None:
    """How the cursors of a view (``view_entries``' ``load``) are keyed: a branch's by the
    entry just before the cursor (its stored text: an entry never changes, and names its
    parent), which holds the whole path from the root to it, so a sibling branch's cursor is
    refused and one of the same branch grown since is not; the entries in the order appended
    by index alone (an append adds one at the end, and nothing else moves)."""
    if view != "branch":
        return None
    return lambda index: load(index - 1, index)[0]


def _found(texts: dict[str, str | None], entry_id: str) -> str:
    text = texts.get(entry_id)
    if text is None:
        raise SessionError("not_found", f"entry {entry_id} was deleted while read")
    return text


def _by_ids(
    read: Callable[[Sequence[str]], dict[str, str]],
    ids: Sequence[str],
    known: dict[str, str] | None = None,
) -> Loader:
    """Load ``ids[start:end]`` with ``read``, but for those ``known`` already."""

    def load(start: int, end: int) -> list[str]:
        wanted = ids[start:end]
        found: dict[str, str | None] = dict(known or {})
        missing = [entry_id for entry_id in wanted if entry_id not in found]
        if missing:
            found.update(read(missing))
        return [_found(found, entry_id) for entry_id in wanted]

    return load


def view_entries(
    session: Session, view: str, leaf_id: str | None = None, newest: int | None = 0
) -> tuple[int, Loader]:
    """How many entries the view ``branch`` (root first; to ``leaf_id``, else to the leaf) or
    ``entries`` (in the order appended) has, and how to load a range of them as JSON.
    ``newest``: how many of the branch's last entries the caller loads (None: all), read with
    the branch itself when that has to be walked."""
    if leaf_id is not None and session.get_entry(leaf_id) is None:
        raise SessionError("not_found", f"entry {leaf_id} not found")
    storage = stored(session)
    if storage is not None:
        if view == "branch":
            end = leaf_id if leaf_id is not None else session.leaf_id
            ids, texts = storage.stored_branch(end, newest)
            return len(ids), _by_ids(storage.stored_json, ids, texts)
        return storage.entry_total(), storage.stored_range
    entries = session.get_branch(leaf_id) if view == "branch" else session.get_entries()
    return len(entries), lambda start, end: [entry_to_json(e) for e in entries[start:end]]


@dataclass(frozen=True)
class KeptTree:
    """What every page of a session's tree view needs, worked out once for its next pages."""

    index: TreeIndex
    labels: dict[str, str]
    on_branch: frozenset[str]


# The tree of the sessions last read in view tree, so that paging through one (the viewer, or a
# client reading page after page) reads and arranges its every entry once, not once a page. A
# tree is the same for as long as the session's leaf and count of entries are (every change
# appends an entry). About 500 bytes a node: 100 MB at most, one tree per session.
TREE_NODES_KEPT = 200_000
kept_trees: Kept[tuple[str | None, int], KeptTree] = Kept(
    TREE_NODES_KEPT, TREE_NODES_KEPT, 1, lambda tree: len(tree.index.nodes)
)


# The nodes a tree's page is made by at a time, each block's size added before the next.
TREE_BLOCK = 1_000


# The sessions whose tree view's newest page was made from their newest entries alone
# (``newest_tree``), by session, leaf and count of entries: a page asked for again is made from
# the whole tree, arranged then and kept (``kept_trees``).
FIRST_TREES = 1024
first_trees: OrderedDict[tuple[str, str | None, int], None] = OrderedDict()
first_trees_lock = threading.Lock()


def newest_tree(
    storage: StoredPages, leaf_id: str | None, limit: int, budget: int
) -> tuple[list[str], PageOf] | None:
    """The newest page of the tree view, as ``tree_page`` makes it, from the session's last
    ``limit`` entries, their children and the branch alone, when no entry is a leaf move (None
    when one is): a fresh server took half a second to show the newest 50 of 100,000 entries,
    reading and arranging them all."""
    found = storage.newest_outline(limit)
    if found is None:
        return None
    total, rows = found
    children = storage.children_outline([row[0] for row in rows])
    index = TreeIndex(
        rows,
        {row[0]: row[1] for row in rows},
        {
            entry_id: [child[0] for child in pi_child_order(kids, lambda child: child[3])]
            for entry_id, kids in children.items()
            if kids
        },
    )
    labels = storage.labels()
    on_branch = frozenset(storage.branch_ids(leaf_id))
    first = total - len(rows)

    def load(start: int, end: int) -> list[str]:
        part = rows[start - first : end - first]
        nodes = stored_tree_nodes(
            storage, index, part, labels, on_branch, PREVIEW_CHARS, CHILDREN_SHOWN
        )
        return [compact(node) for node in nodes]

    return sized_page(total, load, None, limit, budget)


def tree_page(
    session: Session, cursor: str | None, limit: int | None, budget: int = ANSWER_BYTES
) -> tuple[list[str], PageOf]:
    """A page of ``outline.flat_tree``: the tree from the entries in outline, previews only
    for the nodes that may be on the page."""
    storage = stored(session)
    if storage is None:
        nodes = [compact(node) for node in flat_tree(session, PREVIEW_CHARS, CHILDREN_SHOWN)]
        return sized_page(len(nodes), lambda start, end: nodes[start:end], cursor, limit, budget)
    leaf_id = session.leaf_id

    def arrange() -> KeptTree:
        return KeptTree(
            tree_index(storage.outline()),
            storage.labels(),
            frozenset(storage.branch_ids(leaf_id)),
        )

    state = (leaf_id, storage.entry_total())
    if cursor is None and limit is not None and kept_trees.get(storage, state) is None:
        seen = (session.id, *state)
        with first_trees_lock:
            first = seen not in first_trees
            first_trees[seen] = None
            while len(first_trees) > FIRST_TREES:
                first_trees.popitem(last=False)
        if first:
            newest = newest_tree(storage, leaf_id, limit, budget)
            if newest is not None:
                return newest
    tree = kept_trees.get_or_work(storage, state, arrange)
    index, labels, on_branch = tree.index, tree.labels, tree.on_branch

    def load(start: int, end: int) -> list[str]:
        # A block at a time, measured as it is made: a whole tree too large for one answer is
        # refused once its nodes so far pass the bound, not after every entry was parsed for
        # its preview (33,000 entries took 7 s to be refused).
        texts: list[str] = []
        made = 0
        for block in range(start, end, TREE_BLOCK):
            rows = index.nodes[block : min(end, block + TREE_BLOCK)]
            nodes = stored_tree_nodes(
                storage, index, rows, labels, on_branch, PREVIEW_CHARS, CHILDREN_SHOWN
            )
            texts += (made_now := [compact(node) for node in nodes])
            made += sum(len(text.encode()) + 1 for text in made_now)
            check_whole(made, f"the tree of {len(index.nodes):,} nodes", so_far=True)
        return texts

    return sized_page(len(index.nodes), load, cursor, limit, budget)


@dataclass
class ContextPage:
    messages: list[str]
    page: PageOf
    context: SessionContext


# A context's settings as a page shows them (a pi file may hold a model id of a megabyte, or
# 100,000 active tool names, which made a page's structured content 3 MB): each text cut to
# SETTING_CHARS, the tool names kept, in order, up to TOOL_NAMES_CHARS together.
SETTING_CHARS = 256
TOOL_NAMES_CHARS = 16_384


def shown_settings(context: SessionContext, whole: bool = False) -> dict[str, Any]:
    """The context's thinking level, model and active tool names as ``ContextResult``'s
    fields, bounded unless asked for ``whole``, and ``settings_cut`` saying what a bound left
    out and where it is whole (None: nothing)."""
    level, model, names = context.thinking_level, context.model, context.active_tool_names
    if whole:
        return dict(thinking_level=level, model=model, active_tool_names=names, settings_cut=None)
    cut: list[str] = []
    if len(level) > SETTING_CHARS:
        level = clip_long(level, SETTING_CHARS)
        cut.append("the thinking level")
    if model is not None and any(len(value) > SETTING_CHARS for value in model.values()):
        model = {key: clip_long(value, SETTING_CHARS) for key, value in model.items()}
        cut.append("the model")
    if names is not None:
        kept, room = [], TOOL_NAMES_CHARS
        for name in names:
            room -= len(name) + 3  # its quotes and comma
            if room < 0:
                break
            kept.append(name)
        if len(kept) < len(names):
            cut.append(f"{len(names) - len(kept):,} more of the {len(names):,} active tool names")
            names = kept
    said = None
    if cut:
        said = (
            f"cut here: {', '.join(cut)} (texts to {SETTING_CHARS} characters, tool names to"
            f" {TOOL_NAMES_CHARS:,} characters in all); session_context with limit=0 has them"
            " whole, as do the entries that set them (model_change, thinking_level_change,"
            " active_tools_change) on session_get's branch"
        )
    return dict(thinking_level=level, model=model, active_tool_names=names, settings_cut=said)


# The most entries at the end of a branch whose messages the walk of a first whole context
# read reads (as it passes their rows anyway): older ones are read by id, if a compaction
# has not left them out.
WALKED_MESSAGES = 2_000


def context_page(
    session: Session, cursor: str | None, limit: int | None, keep_texts: bool = True
) -> ContextPage:
    """A page of the session's context (newest last) and its settings; a message entry's
    message is read only when it may be on the page. ``keep_texts``: keep the messages' texts
    of a whole context read (``kept_context_texts``); a caller that keeps what it makes of
    them (``kept_whole_context``) says False, so that they are not held twice."""
    storage = stored(session)

    # Keyed by the message just before the cursor (its JSON, with its time): a context of
    # another branch, or compacted since, holds another there; one grown since, the same.
    def paged_as(index: int) -> str:
        return f"{session.id} {load(index - 1, index)[0]}"

    items: list[dict[str, Any] | str]
    walked: dict[str, str] = {}
    if storage is not None:
        # The newest page, or all: a first read finds the messages it shows in its walk.
        newest = 0 if cursor is not None else WALKED_MESSAGES if limit is None else limit
        items, context = _stored_context(storage, session.leaf_id, newest, walked)
    else:
        context = session.build_context()
        items = [m.to_json_dict() for m in context.messages]

    def load(start: int, end: int) -> list[str]:
        wanted = items[start:end]
        found: dict[str, str | None] = {}
        if storage is not None:
            found.update(walked)
            unread = [i for i in wanted if isinstance(i, str) and i not in walked]
            found.update(storage.stored_messages(unread))
        return [compact(item) if isinstance(item, dict) else _found(found, item) for item in wanted]

    def load_kept(start: int, end: int) -> list[str]:
        whole = (start, end) == (0, len(items))
        if not keep_texts or storage is None or session.leaf_id is None or not whole:
            return load(start, end)
        return kept_context_texts.get_or_work(storage, session.leaf_id, lambda: load(start, end))

    def load_shown(start: int, end: int) -> list[str]:
        # A page (not the whole context, asked for with limit 0) shows a message too large
        # for it as a stub.
        texts = load_kept(start, end)
        return [
            shown_message(session.id, index, items[index], text, paged_as)
            for index, text in enumerate(texts, start)
        ]

    messages, page = sized_page(
        len(items), load_kept if limit is None else load_shown, cursor, limit, paged_as=paged_as
    )
    return ContextPage(messages, page, context)


# The context of the last few leaves of each open session: its outline and settings (in rows:
# the most kept for all sessions, the largest kept, and per session).
CONTEXT_ROWS_KEPT = 400_000
kept_contexts: Kept[str, tuple[list[dict[str, Any] | str], SessionContext]] = Kept(
    CONTEXT_ROWS_KEPT, 100_000, 4, lambda found: len(found[0])
)


def _stored_context(
    storage: StoredPages, leaf_id: str | None, newest: int, walked: dict[str, str]
) -> tuple[list[dict[str, Any] | str], SessionContext]:
    """``context.stored_context`` of the branch ending at ``leaf_id``; the caller must not
    change what it gets. A walk of the branch puts the messages it reads (among the
    ``newest`` last entries, see ``StoredPages.context_messages``) in ``walked``."""
    if leaf_id is None:
        return [], SessionContext()

    def work() -> tuple[list[dict[str, Any] | str], SessionContext]:
        rows, messages = storage.context_messages(leaf_id, newest)
        walked.update(messages)

        def parse(indices: Sequence[int]) -> list[SessionEntry]:
            found = storage.parsed_entries([rows[i][0] for i in indices])
            return [_parsed(found, rows[i][0]) for i in indices]

        return stored_context(rows, parse, messages)

    return kept_contexts.get_or_work(storage, leaf_id, work)


# The messages of the last whole contexts read of each open session, as their JSON texts: a
# client reading the whole context again (resuming) is not served by reading every one of its
# rows again. A context's messages never change: the key is its leaf.
CONTEXT_CHARS_KEPT = 16_000_000
kept_context_texts: Kept[str, list[str]] = Kept(
    CONTEXT_CHARS_KEPT, 4_000_000, 2, lambda texts: sum(map(len, texts))
)


# The answers to whole contexts (limit 0) at the last leaves of each open session, as sent:
# a client resuming again gets the same answer with nothing joined, measured or cut again
# (about a tenth of the time a client waits for a long one, the rest being its own).
kept_context_answers: Kept[str, CompactAnswer] = Kept(
    CONTEXT_CHARS_KEPT, 4_000_000, 2, CompactAnswer.weight
)


def kept_whole_context(session: Session, work: Callable[[], CompactAnswer]) -> CompactAnswer:
    """The answer to the whole context of ``session`` at its leaf, made by ``work`` (which
    must make that and nothing else: the leaf is the key), kept for the next read of the
    same; a session that does not read as stored makes it each time."""
    storage = stored(session)
    if storage is None or session.leaf_id is None:
        return work()
    return kept_context_answers.get_or_work(storage, session.leaf_id, work)


# The last few outlines of each open session, so that reading one page after another (the
# viewer opening a long branch) works it out once. A row is made when first read, so one
# kept holds its rows' places and the rows read so far: the bound is in rows.
OUTLINE_ROWS_KEPT = 100_000
kept_outlines: Kept[tuple[str | None, str | None, int], OutlineRows] = Kept(
    OUTLINE_ROWS_KEPT, OUTLINE_ROWS_KEPT, 4, len
)


def outline_paged_as(session: Session, entry_id: str | None, rows: OutlineRows) -> PagedAs:
    """How the cursors of an outline are keyed: by its chain's start and the row just before
    the cursor (its entry, and the entries it folds), which an append at the end leaves as
    it was; a move of the leaf onto another branch, or a refold, does not."""
    return lambda index: f"{session.id} {entry_id} {compact(_row_place(rows[index - 1]))}"


def _row_place(row: dict[str, Any]) -> list[Any]:
    return [row.get("id"), row.get("folded"), row.get("parentId")]


def outline_rows(session: Session, entry_id: str | None) -> OutlineRows:
    """``outline.lazy_outline(session, entry_id)``, kept for the next page."""
    storage = stored(session)
    if storage is None:
        return lazy_outline(session, entry_id)
    key = (entry_id, session.leaf_id, storage.entry_total())
    return kept_outlines.get_or_work(storage, key, lambda: lazy_outline(session, entry_id))


def _parsed(found: dict[str, SessionEntry], entry_id: str) -> SessionEntry:
    entry = found.get(entry_id)
    if entry is None:
        raise SessionError("not_found", f"entry {entry_id} was deleted while read")
    return entry


@dataclass
class ExportPage:
    """Lines of the file, each with its newline, from index ``start``; ``end``: the index the
    next page starts at; ``count``: the file's lines. ``omitted``: what the page leaves out (a
    line too large for a page, alone on its page, is not in ``lines``) and where it is."""

    lines: list[str]
    start: int
    end: int
    count: int
    omitted: str | None = None


def export_page(session: Session, cursor: str | None, limit: int | None) -> ExportPage:
    """Lines of the session as a pi v3 JSONL file (``pi.export_lines``) from the line
    ``cursor`` names (``from:N``; None: the first): at most ``limit`` and about
    ``ANSWER_BYTES`` (at least one). With a limit, a line larger than ``ENTRY_BYTES`` ends the
    page before it, or is the page, left out, with a note naming where to read it."""
    count, load = _export_lines(session)
    length = f"the file has {count} lines (from:0 to from:{count - 1})"
    start = parse_cursor(cursor, "from:", 0, count - 1, length=length) if cursor else 0
    end = count if limit is None else min(count, start + limit)
    lines = [line + "\n" for line in load(start, end)]
    if limit is None:  # before the lines are joined into an answer, and that dumped
        check_whole(  # the lines, joined, are one JSON string of the answer
            2 + sum(json_size(line) - 2 for line in lines),
            f"session {session.id}'s file",
            f", or write it out with `mcp-agent-sessions sessions export {session.id} -o FILE`",
        )
    taken, used = 0, 0
    for line in lines:
        cost = len(line.encode())
        if limit is not None and (cost > ENTRY_BYTES or (taken and used + cost > ANSWER_BYTES)):
            break
        used += cost
        taken += 1
    if limit is not None and not taken and lines:
        return ExportPage([], start, start + 1, count, _omitted_line(session.id, start, lines[0]))
    return ExportPage(lines[:taken], start, start + taken, count)


def _omitted_line(session_id: str, index: int, line: str) -> str:
    written = f"`mcp-agent-sessions sessions export {session_id} -o FILE` writes the file"
    whole = (
        f"session://{session_id}/export.jsonl (or session_export with limit=0) has the file"
        f" up to {WHOLE_MAX >> 20} MiB, and {written} at any size"
    )
    size = f"{len(line.encode()) - 1:,} bytes"
    if index == 0:
        return f"line 1 (the header, {size}) is too large for a page: {whole}"
    data = json.loads(line)
    if not fits_whole(json_size(line)):  # then neither the entry nor the file is one answer
        # Said as the other stubs of the entry say it: session_get shows it cut.
        return (
            f"line {index + 1} (entry {data.get('id')}, {size}) is too large for any answer:"
            f" {too_large_entry(session_id, str(data.get('id')), data)}"
        )
    return (
        f"line {index + 1} (entry {data.get('id')}, {size}) is too large for a page:"
        f" {entry_whole(session_id, data)}; {whole}"
    )


def _export_lines(session: Session) -> tuple[int, Loader]:
    """The file's line count, and how to load a range of its lines (without newlines)."""
    if stored(session) is None:  # entries as the session's own options present them
        return entries_loader(session.header, session.get_entries(), session.leaf_id)
    return export_loader(session.storage)
