"""Session repos: create, open, list, delete, fork, import and export sessions.

All three backends satisfy :class:`SessionRepo`. :class:`BaseSessionRepo` holds what they
share (fork, pi import/export, listeners); a backend supplies storage creation, opening,
listing and deletion.
"""

from __future__ import annotations

import base64
import builtins
import json
from collections.abc import Generator, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol, Self, runtime_checkable

from mcp_agent.messages import UserMessage
from mcp_agent.sessions.context import SessionContextBuildOptions
from mcp_agent.sessions.entries import (
    CURRENT_SESSION_VERSION,
    CWD_CHARS,
    NAME_CHARS,
    CustomEntry,
    LabelEntry,
    LeafEntry,
    MessageEntry,
    SessionEntry,
    SessionHeader,
    SessionInfoEntry,
    check_length,
    check_metadata,
    clip_long,
    entry_text,
    is_session_id,
    iso_now,
    new_entry_id,
    new_header,
    new_session_id,
    session_name,
    shown_time,
    sortable_time,
)
from mcp_agent.sessions.errors import SessionError
from mcp_agent.sessions.folders import session_id_of
from mcp_agent.sessions.hits import (
    HITS_LISTED,
    HitPage,
    check_hits_limit,
    page_scored,
    parse_hit_cursor,
    scored,
    search_tag,
)
from mcp_agent.sessions.memory import InMemorySessionStorage
from mcp_agent.sessions.pi import (
    EXPORT_CHUNK_LINES,
    SessionStream,
    export_chunks,
    open_session_stream,
)
from mcp_agent.sessions.session import UNREAD, Session, SessionListener, Unread
from mcp_agent.sessions.storage import (
    SessionStorage,
    leaf_after,
    listing_text,
    tree_parent,
)
from mcp_agent.sessions.words import query_words, search_words, text_matches

ForkPosition = Literal["before", "at"]


# The header's metadata key of a sub-agent's session: the session and run whose tool call
# started it (``{"sessionId": …, "runId": …}``).
STARTED_BY = "startedBy"
# The custom entry a sub-agent's parent session links its session by.
SUBAGENT_LINK = "subagent"


def parent_id(parent_session: str | None) -> str | None:
    """A header's ``parentSession`` as a session id (pi names a fork's parent by its file)."""
    if parent_session and parent_session.endswith(".jsonl"):
        return session_id_of(Path(parent_session)) or parent_session
    return parent_session


def started_by(header: SessionHeader) -> tuple[str, str | None] | None:
    """(the parent session's id, the run's id or None) when the session is a sub-agent's,
    started by a run of its ``parentSession``; None for any other session, a fork among them
    (a fork of a sub-agent's session keeps its metadata, but names another parent)."""
    metadata = header.metadata or {}
    origin = metadata.get(STARTED_BY)
    if not isinstance(origin, Mapping):
        return None
    parent = parent_id(header.parent_session)
    if parent is None or origin.get("sessionId") != parent:
        return None
    run_id = origin.get("runId")
    return parent, run_id if isinstance(run_id, str) else None


def started_json(header: SessionHeader) -> dict[str, str | None] | None:
    """``started_by`` as answers give it: ``{"sessionId": …, "runId": …}`` or None."""
    origin = started_by(header)
    return None if origin is None else {"sessionId": origin[0], "runId": origin[1]}


def linked_origin(repo: SessionRepo, header: SessionHeader) -> dict[str, str | None] | None:
    """``started_json(header)``; for a sub-agent's session made before headers said so, what
    its parent's link says: a ``subagent`` entry there naming this session (a fork names its
    parent too, but no link of the parent names a fork). One session's read, not a listing's:
    it opens the parent. A parent that does not read (damaged, gone meanwhile) says nothing:
    this session reads as it did before the link was looked for."""
    found = started_json(header)
    parent = parent_id(header.parent_session)
    if found is not None or parent is None:
        return found
    links = subagent_links(repo, parent)
    return {"sessionId": parent, "runId": links[header.id]} if header.id in links else None


def subagent_links(repo: SessionRepo, parent: str) -> dict[str, str | None]:
    """The sessions ``parent`` started sub-agents in, by its ``subagent`` entries: each
    session's id and the run's (or None). Nothing for a parent this store does not have or
    cannot read."""
    if not repo.exists(parent):
        return {}
    try:
        entries = repo.open_read(parent).find_entries("custom")
    except SessionError:
        return {}
    links: dict[str, str | None] = {}
    for entry in entries:
        if not isinstance(entry, CustomEntry) or entry.custom_type != SUBAGENT_LINK:
            continue
        data = entry.data
        if isinstance(data, Mapping) and isinstance(data.get("sessionId"), str):
            run_id = data.get("runId")
            links[data["sessionId"]] = run_id if isinstance(run_id, str) else None
    return links


def mark_linked(repo: SessionRepo, items: Sequence[SessionSummary]) -> None:
    """Mark a listing's sub-agent sessions made before headers said so (``linked_origin``):
    one read of each parent named by a row its header leaves unmarked (a fork's, or such a
    session's), so a page costs at most a read per row it shows."""
    read: dict[str, dict[str, str | None]] = {}
    for item in items:
        parent = item.parent_session
        if item.started_by is not None or parent is None:
            continue
        if parent not in read:
            read[parent] = subagent_links(repo, parent)
        if item.id in read[parent]:
            item.started_by = {"sessionId": parent, "runId": read[parent][item.id]}


def listed_hits(
    repo: SessionRepo,
    session_ids: Sequence[str],
    query: str,
    listed: Mapping[str, SessionSummary] | None = None,
) -> dict[str, HitPage]:
    """Where each listed session matched ``query``: its first ``HITS_LISTED`` hits (none for
    a session deleted since it was listed); ``listed``: the listing's rows (``search_sessions``)."""
    found = repo.search_sessions(session_ids, query, HITS_LISTED, listed)
    return {sid: found.get(sid) or HitPage([], 0, None) for sid in session_ids}


def hits_in(
    storage: SessionStorage, words: list[str], limit: int, cursor: str | None, tag: str
) -> HitPage:
    """A page of the hits of ``words`` in a session without a text index: every entry read."""
    branch = {entry.id for entry in storage.get_branch(storage.get_leaf_id())}
    return page_scored(scored(storage.get_entries(), words, branch), limit, cursor, tag)


@dataclass
class SessionSummary:
    """One row of a session listing."""

    id: str
    name: str | None
    cwd: str
    created: str
    modified: str
    entry_count: int
    message_count: int
    first_user_message: str | None
    parent_session: str | None
    total_tokens: int = 0
    cost_total: float = 0.0
    leaf_id: str | None = None
    # A sub-agent's session: the session and run that started it (``started_json``).
    started_by: dict[str, str | None] | None = None
    # The row's incarnation as a SQL store listed it (None elsewhere): with entry_count and
    # leaf_id, the state its kept first hits are checked against (``search_sessions``).
    incarnation: str | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        # pi names a fork's parent by its file (``…/<time>_<id>.jsonl``), and the header keeps
        # that in every store it is copied to; a listing gives the parent's id, to open it by.
        self.parent_session = parent_id(self.parent_session)

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "cwd": self.cwd,
            # In pi's milliseconds, as every other time the command line and the tools give.
            "created": shown_time(self.created),
            "modified": shown_time(self.modified),
            "entryCount": self.entry_count,
            "messageCount": self.message_count,
            "firstUserMessage": self.first_user_message,
            "parentSession": self.parent_session,
            "totalTokens": self.total_tokens,
            "costTotal": self.cost_total,
            "leafId": self.leaf_id,
            "startedBy": self.started_by,
        }


# What a listing says of the files it left out: the reasons of the first few, each cut (a
# reason names its file, whose path may be long).
UNREADABLE_SAID = 3
UNREADABLE_CHARS = 200


def unreadable_note(whys: list[str], named_in: str = "the server's log") -> str | None:
    """What a page says of the session files it left out, unreadable (None: none): the
    ``session_list`` tool's and the command line's ``sessions list --json`` alike, each saying
    where every one is named (``named_in``)."""
    if not whys:
        return None
    files = f"{len(whys)} session file{'s' if len(whys) > 1 else ''}"
    said = "; ".join(clip_long(why, UNREADABLE_CHARS) for why in whys[:UNREADABLE_SAID])
    more = f"; and {len(whys) - UNREADABLE_SAID} more" if len(whys) > UNREADABLE_SAID else ""
    return (
        f"{files} of the folder could not be read and are not listed ({named_in} names"
        f" each): {said}{more}"
    )


@dataclass
class SessionPage:
    items: list[SessionSummary] = field(default_factory=list)
    next_cursor: str | None = None
    # Session files a folder's listing read for this page and had to leave out (a damaged
    # line, no permission), each as how many items were listed before it and why.
    left_out: list[tuple[int, str]] = field(default_factory=list)

    def first(self, count: int) -> SessionPage:
        """The page cut to its first ``count`` items, its cursor after the last of them (the
        files left out past them are the next page's)."""
        if count >= len(self.items):
            return self
        last = self.items[count - 1]
        left_out = [(before, why) for before, why in self.left_out if before < count]
        return SessionPage(self.items[:count], encode_cursor(last.modified, last.id), left_out)


@runtime_checkable
class SessionRepo(Protocol):
    listeners: list[SessionListener]

    def create(
        self,
        name: str | None = None,
        cwd: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        parent_session: str | None = None,
    ) -> Session: ...
    def create_described(
        self,
        name: str | None = None,
        cwd: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> tuple[Session, SessionSummary]: ...
    def open(self, session_id: str) -> Session: ...
    def append_entry(self, session_id: str, partial: Mapping[str, Any]) -> str: ...
    def open_read(self, session_id: str) -> Session: ...
    def open_described(self, session_id: str) -> tuple[Session, SessionSummary]: ...
    def exists(self, session_id: str) -> bool: ...
    def summary(self, session_id: str) -> SessionSummary: ...
    def list(
        self, query: str | None = None, limit: int = 50, cursor: str | None = None
    ) -> SessionPage: ...
    def delete(self, session_id: str) -> None: ...
    def fork(
        self, session_id: str, entry_id: str | None = None, position: ForkPosition = "before"
    ) -> Session: ...
    def import_jsonl(self, source: str | Path) -> Session: ...
    def import_session(self, source: str | Path, copy_if_taken: bool = False) -> Imported: ...
    def export_jsonl(self, session_id: str) -> str: ...
    def export_chunks(self, session_id: str, lines: int = ...) -> Generator[str, None, None]: ...
    def search_session(
        self, session_id: str, query: str, limit: int = 10, cursor: str | None = None
    ) -> HitPage: ...
    def search_sessions(
        self,
        session_ids: Sequence[str],
        query: str,
        limit: int = HITS_LISTED,
        listed: Mapping[str, SessionSummary] | None = None,
    ) -> dict[str, HitPage]: ...
    def index_search_text(self) -> bool: ...
    def close(self) -> None: ...


# --- listing helpers --------------------------------------------------------------------------


def encode_cursor(modified: str, session_id: str) -> str:
    raw = json.dumps([modified, session_id], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


# A cursor we hand out is well under this; anything longer was not made here.
MAX_CURSOR_CHARS = 1024


def decode_cursor(cursor: str) -> tuple[str, str]:
    if len(cursor) <= MAX_CURSOR_CHARS:
        try:
            padded = cursor + "=" * (-len(cursor) % 4)
            modified, session_id = json.loads(base64.urlsafe_b64decode(padded))
            if isinstance(modified, str) and isinstance(session_id, str):
                return modified, session_id
        except (ValueError, TypeError, RecursionError):
            pass
    shown = cursor if len(cursor) <= 60 else cursor[:60] + "…"
    raise SessionError(
        "invalid_argument",
        f"invalid cursor {shown!r}: pass the cursor that the previous page returned",
    )


def page_summaries(
    summaries: Iterable[SessionSummary], limit: int, cursor: str | None
) -> SessionPage:
    """Newest first by (modified, id); the cursor is the last row of the previous page."""
    if limit < 1:
        raise SessionError("invalid_argument", "limit must be at least 1")
    ordered = sorted(summaries, key=lambda s: (s.modified, s.id), reverse=True)
    if cursor is not None:
        after = decode_cursor(cursor)
        ordered = [s for s in ordered if (s.modified, s.id) < after]
    items = ordered[:limit]
    more = len(ordered) > limit
    next_cursor = encode_cursor(items[-1].modified, items[-1].id) if more and items else None
    return SessionPage(items, next_cursor)


def first_user_text(entries: Iterable[SessionEntry]) -> str | None:
    for entry in entries:
        if isinstance(entry, MessageEntry) and isinstance(entry.message, UserMessage):
            text = listing_text(entry.message)
            if text is not None:
                return text
    return None


def summarize(storage: SessionStorage) -> SessionSummary:
    """A listing row computed from all entries (the SQLite repo keeps these as columns)."""
    header = storage.get_metadata()
    entries = storage.get_entries()
    stats = storage.get_session_stats()
    return SessionSummary(
        id=header.id,
        name=storage.get_session_name(),
        cwd=header.cwd,
        created=sortable_time(header.timestamp),
        modified=getattr(storage, "modified", None) or sortable_time(header.timestamp),
        entry_count=stats.entry_count,
        message_count=stats.message_count,
        first_user_message=first_user_text(entries),
        parent_session=header.parent_session,
        total_tokens=stats.total_tokens,
        cost_total=stats.cost_total,
        leaf_id=storage.get_leaf_id(),
        started_by=started_json(header),
    )


def matches(storage: SessionStorage, words: list[str]) -> bool:
    texts = [storage.get_session_name() or ""]
    texts.extend(entry_text(entry) for entry in storage.get_entries())
    return text_matches(words, texts)


# --- fork -------------------------------------------------------------------------------------


@dataclass
class Imported:
    """An imported session, the id its file gave it, what was read but not kept, and the
    file's session format version (pi's 1 to 3)."""

    session: Session
    file_id: str
    notes: builtins.list[str] = field(default_factory=list)
    version: int = CURRENT_SESSION_VERSION


def entries_to_fork(
    source: Session, entry_id: str | None, position: str
) -> tuple[builtins.list[SessionEntry], str | None]:
    """The entries a fork copies, and its leaf (seed: getEntriesToFork).

    No entry id: the whole session, leaf included. ``at``: the path from the root to the entry.
    ``before``: the path to the parent of a user message (to ask it again differently).
    Labels of copied entries are re-applied at the end, as pi's createBranchedSession does.
    """
    if position not in ("before", "at"):
        raise SessionError(
            "invalid_fork_target", f"position must be 'before' or 'at', not {position!r}"
        )
    if entry_id is None:
        return source.get_entries(), source.leaf_id
    target = source.require_entry(entry_id)
    if position == "at":
        end: str | None = target.id
    else:
        if not (isinstance(target, MessageEntry) and isinstance(target.message, UserMessage)):
            raise SessionError(
                "invalid_fork_target",
                f"entry {entry_id} is not a user message; fork 'before' needs one (or use 'at')",
            )
        end = target.parent_id
    path = source.get_branch(end) if end is not None else []
    # Labels and leaf moves are not copied (labels are re-applied below): an entry that hangs
    # under one (the next append after a label; pi, resuming a file that ends in a leaf move,
    # appends below that line) is copied under the entry above it instead.
    skipped = {e.id: e.parent_id for e in path if isinstance(e, LabelEntry | LeafEntry)}
    copied = [
        e
        if e.parent_id not in skipped
        else e.model_copy(update={"parent_id": tree_parent(e.parent_id, skipped)})
        for e in path
        if not isinstance(e, LabelEntry | LeafEntry)
    ]
    taken = {e.id for e in copied}
    parent = copied[-1].id if copied else None
    for entry in list(copied):
        label = source.get_label(entry.id)
        if label is None:
            continue
        new_id = new_entry_id(taken.__contains__)
        taken.add(new_id)
        copied.append(
            LabelEntry(
                id=new_id, parent_id=parent, timestamp=iso_now(), target_id=entry.id, label=label
            )
        )
        parent = new_id
    return copied, leaf_after(copied)


# --- the shared part of every repo ------------------------------------------------------------


class BaseSessionRepo:
    """Fork, import, export and listeners on top of four backend operations."""

    def __init__(self, context_build_options: SessionContextBuildOptions | None = None) -> None:
        self.listeners: builtins.list[SessionListener] = []
        self.context_build_options = context_build_options

    # Backend operations -----------------------------------------------------------------------

    def _create_storage(
        self, header: SessionHeader, entries: builtins.list[SessionEntry]
    ) -> SessionStorage:
        """Store a new session with its first entries, all or nothing."""
        raise NotImplementedError

    def _open_storage(self, session_id: str) -> SessionStorage:
        raise NotImplementedError

    def exists(self, session_id: str) -> bool:
        raise NotImplementedError

    def list(
        self, query: str | None = None, limit: int = 50, cursor: str | None = None
    ) -> SessionPage:
        raise NotImplementedError

    def delete(self, session_id: str) -> None:
        raise NotImplementedError

    def index_search_text(self) -> bool:
        """Index one batch of the text searches read that is not indexed yet; whether more
        remains. A backend that indexes as it writes (or searches without an index) has
        nothing to do."""
        return False

    def close(self) -> None:
        pass

    def search_session(
        self, session_id: str, query: str, limit: int = 10, cursor: str | None = None
    ) -> HitPage:
        """A page of the entries of a session that hold words of ``query``, best first
        (``hits``); a store without a text index reads every entry, outside its locks."""
        words = search_words(query)
        check_hits_limit(limit)
        tag = search_tag(session_id, words)
        if cursor is not None:
            parse_hit_cursor(cursor, tag)  # a bad cursor is refused before anything is read
        return hits_in(self._open_storage(session_id), words, limit, cursor, tag)

    def search_sessions(
        self,
        session_ids: Sequence[str],
        query: str,
        limit: int = HITS_LISTED,
        listed: Mapping[str, SessionSummary] | None = None,
    ) -> dict[str, HitPage]:
        """The first page (``limit`` hits) of ``search_session`` of each of ``session_ids``
        that is still there (a listing's sessions: a backend with an index finds them all at
        once). ``listed``: the rows of a listing that just read them, which a backend that
        keeps first hits may check its kept ones against instead of reading the rows again."""
        found: dict[str, HitPage] = {}
        for session_id in session_ids:
            try:
                found[session_id] = self.search_session(session_id, query, limit)
            except SessionError as error:
                if error.code != "not_found":
                    raise
        return found

    def summary(self, session_id: str) -> SessionSummary:
        """One session's listing row (backends that keep the row read it instead of the
        entries)."""
        return summarize(self._open_storage(session_id))

    # Shared operations ------------------------------------------------------------------------

    def _session(self, storage: SessionStorage, leaf_id: str | Unread | None = UNREAD) -> Session:
        return Session(
            storage, self.context_build_options, listeners=self.listeners, leaf_id=leaf_id
        )

    def _create(self, header: SessionHeader, entries: builtins.list[SessionEntry]) -> Session:
        if self.exists(header.id):
            raise SessionError("conflict", f"session {header.id} already exists")
        return self._session(self._create_storage(header, entries))

    def create(
        self,
        name: str | None = None,
        cwd: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        parent_session: str | None = None,
    ) -> Session:
        return self._create(*self._new_session(name, cwd, metadata, parent_session))

    def create_described(
        self,
        name: str | None = None,
        cwd: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> tuple[Session, SessionSummary]:
        """``create`` and the new session's listing row."""
        session = self.create(name=name, cwd=cwd, metadata=metadata)
        return session, self.summary(session.id)

    def _new_session(
        self,
        name: str | None,
        cwd: str | None,
        metadata: Mapping[str, Any] | None,
        parent_session: str | None,
    ) -> tuple[SessionHeader, builtins.list[SessionEntry]]:
        """A new session's header and first entries (its name's), its arguments checked."""
        name = session_name(name)
        check_length(name, "name", NAME_CHARS)
        check_length(cwd, "cwd", CWD_CHARS)
        if cwd is not None and "\x00" in cwd:
            raise SessionError("invalid_argument", "cwd holds a NUL character, which no path can")
        check_metadata(metadata)
        header = new_header(cwd=cwd, parent_session=parent_session, metadata=metadata)
        entries: builtins.list[SessionEntry] = []
        if name is not None:
            entries.append(
                SessionInfoEntry(id=new_entry_id(), parent_id=None, timestamp=iso_now(), name=name)
            )
        return header, entries

    def open(self, session_id: str) -> Session:
        return self._session(self._open_storage(session_id))

    def append_entry(self, session_id: str, partial: Mapping[str, Any]) -> str:
        """``open(session_id).append_entry(partial)``: the new entry's id."""
        return self.open(session_id).append_entry(partial)

    def open_read(self, session_id: str) -> Session:
        """The session for one read (a request): its leaf is read here, once, and its
        ``leaf_id`` stays that leaf, so every part of the answer shows the session at one leaf
        (until a write through it). A later read sees later appends, from any process."""
        storage = self._open_storage(session_id)
        return self._session(storage, storage.get_leaf_id())

    def open_described(self, session_id: str) -> tuple[Session, SessionSummary]:
        """``open_read`` and the session's listing row (SQL backends read both, and the
        header of a session not open yet, in one statement)."""
        session = self.open_read(session_id)
        return session, self.summary(session_id)

    def fork(
        self, session_id: str, entry_id: str | None = None, position: ForkPosition = "before"
    ) -> Session:
        source = self.open(session_id)
        try:
            entries, _leaf = entries_to_fork(source, entry_id, position)
            header = new_header(
                cwd=source.header.cwd, parent_session=source.id, metadata=source.header.metadata
            )
        finally:
            source.close()
        return self._create(header, entries)

    def import_jsonl(self, source: str | Path) -> Session:
        """Import a pi session file (version 1, 2 or 3) or its text under the file's id (a
        conflict if taken); see :meth:`import_session`."""
        return self.import_session(source).session

    def import_session(self, source: str | Path, copy_if_taken: bool = False) -> Imported:
        """Import a pi session file (version 1, 2 or 3) or its text; nothing is stored unless
        the whole file is valid (a last line torn by a crash is skipped, and said so). The file is read one line at a
        time and each entry stored as it is read (see :meth:`_import_storage`), so memory does
        not grow with its entries.

        The session keeps the file's id unless that is not a UUID (pi's ids are; anything else
        may not make a file name or a URI), which gets a new one. An id already taken is a
        conflict, or with ``copy_if_taken`` the session is imported as a copy under a new id."""
        with open_session_stream(source) as stream:
            original = stream.header.id
            if not is_session_id(original):
                stream.header = stream.header.model_copy(update={"id": new_session_id()})
            elif self.exists(original):
                if not copy_if_taken:
                    stream.drain()  # a problem in the file is reported before the conflict
                    raise SessionError(
                        "conflict", f"a session with the file's id {original} exists already"
                    )
                stream.header = stream.header.model_copy(update={"id": new_session_id()})
            stream.copy_if_taken = copy_if_taken
            session = self._session(self._import_storage(stream))
            return Imported(session, original, list(stream.notes), stream.migrated_from)

    def _import_storage(self, stream: SessionStream) -> SessionStorage:
        """Store an imported session, all or nothing. Iterating ``stream`` yields the entries
        and raises, at the latest after the last one, if the file is bad: then nothing may be
        left behind. Backends that can store entries as they come override this; by default
        they are collected and stored at once."""
        return self._create_storage(stream.header, builtins.list(stream))

    def export_jsonl(self, session_id: str) -> str:
        """The session as a pi version-3 JSONL file."""
        return "".join(self.export_chunks(session_id))

    def export_chunks(
        self, session_id: str, lines: int = EXPORT_CHUNK_LINES
    ) -> Generator[str, None, None]:
        """The same file in pieces of at most ``lines`` lines, read as they are taken: a
        session of any size written out in the memory of one piece. The session is opened at
        the first piece taken."""
        storage = self._open_storage(session_id)
        try:
            yield from export_chunks(storage, lines)
        finally:
            storage.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class InMemorySessionRepo(BaseSessionRepo):
    """Sessions kept in a dict: for tests and throwaway work."""

    def __init__(self, context_build_options: SessionContextBuildOptions | None = None) -> None:
        super().__init__(context_build_options)
        self._storages: dict[str, InMemorySessionStorage] = {}

    def _create_storage(
        self, header: SessionHeader, entries: builtins.list[SessionEntry]
    ) -> SessionStorage:
        storage = InMemorySessionStorage(header, entries)
        self._storages[header.id] = storage
        return storage

    def _open_storage(self, session_id: str) -> SessionStorage:
        try:
            return self._storages[session_id]
        except KeyError:
            raise SessionError("not_found", f"session {session_id} not found") from None

    def exists(self, session_id: str) -> bool:
        return session_id in self._storages

    def list(
        self, query: str | None = None, limit: int = 50, cursor: str | None = None
    ) -> SessionPage:
        words = query_words(query)
        storages = [s for s in self._storages.values() if not words or matches(s, words)]
        return page_summaries((summarize(s) for s in storages), limit, cursor)

    def delete(self, session_id: str) -> None:
        if self._storages.pop(session_id, None) is None:
            raise SessionError("not_found", f"session {session_id} not found")


# --- copying between repos --------------------------------------------------------------------


def session_ids(repo: SessionRepo, page: int = 500) -> Iterator[str]:
    """Every session id in ``repo``, newest first, a page at a time."""
    cursor: str | None = None
    while True:
        listing = repo.list(limit=page, cursor=cursor)
        for summary in listing.items:
            yield summary.id
        if listing.next_cursor is None:
            return
        cursor = listing.next_cursor


CopyOutcome = Literal["copied", "present"]


def copy_session(source: SessionRepo, target: SessionRepo, session_id: str) -> CopyOutcome:
    """Copy one session to ``target`` whole or not at all, under its own id: its pi JSONL form
    is imported there (one transaction in a database, a file renamed into place in a folder).
    A session ``target`` already has is left alone ("present"), so an interrupted copy can
    simply be run again."""
    if target.exists(session_id):
        return "present"
    text = source.export_jsonl(session_id)
    try:
        target.import_session(text)
    except SessionError as error:
        if error.code == "conflict":  # copied meanwhile by someone else
            return "present"
        raise
    return "copied"
