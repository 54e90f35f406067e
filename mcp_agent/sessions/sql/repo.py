"""What the SQL backends' repos share: create, open (keeping the last few open), list, search,
page, delete. A backend gives its database, its storage class and, for search, how one word
is matched (``word_condition``)."""

from __future__ import annotations

import builtins
import functools
import threading
from collections import OrderedDict
from collections.abc import Container, Mapping, Sequence
from typing import Any, Generic, TypeVar

from mcp_agent.sessions.context import SessionContextBuildOptions
from mcp_agent.sessions.entries import SessionEntry, SessionHeader
from mcp_agent.sessions.errors import Reincarnated, SessionError
from mcp_agent.sessions.hits import (
    HITS_LISTED,
    SESSIONS_PER_SEARCH,
    EntryHit,
    HitPage,
    check_hits_limit,
    hit_cursor,
    parse_hit_cursor,
    search_tag,
)
from mcp_agent.sessions.kept import Kept
from mcp_agent.sessions.pi import SessionStream
from mcp_agent.sessions.repo import (
    BaseSessionRepo,
    SessionPage,
    SessionSummary,
    decode_cursor,
    encode_cursor,
    started_json,
)
from mcp_agent.sessions.session import Session
from mcp_agent.sessions.sql.storage import (
    SqlDatabase,
    SqlSessionStorage,
    parse_entry,
    stored_header,
)
from mcp_agent.sessions.words import query_words, search_words

# Sessions a repo keeps open between opens: a server's clients work in many sessions at once,
# and reopening one reads its row and header again and starts its caches afresh. What an open
# session keeps is bounded for all of them together (its parsed entries by the database's
# parse cache, sql.cache.EntryCache; its branches and contexts by sessions.kept), so an open
# session costs little more than its storage object (about 14 KB with a short branch read:
# 14 MB for all). Under 50 HTTP clients working in 500 sessions, 1,024 kept open took 6 to 17%
# less server CPU per operation than 256 (medians of two sets of paired load rounds; less in
# 7 of the 8 rounds).
OPEN_SESSIONS = 1024

# A listing with a search looks at the newest sessions one by one first (``walk_condition``),
# at most this many, of this many entries together (each looked up among the word's matches;
# a session holding the word ends at its first): a word in most sessions fills a page there,
# and a rarer one is then found in the text index for the sessions after them, as before.
WALK_SESSIONS = 256
WALK_ENTRIES = 20_000

_SUMMARY_COLUMNS = (
    "id, name, cwd, created, modified, entry_count, message_count, first_user_message,"
    " parent_session, total_tokens, cost_total, leaf, incarnation, header"
)


def _summary(row: Sequence[Any]) -> SessionSummary:
    """A listing row from ``_SUMMARY_COLUMNS``: the header says a sub-agent's origin."""
    *columns, incarnation, header = row
    summary = SessionSummary(*columns)
    summary.incarnation = incarnation
    if len(header) > KEPT_HEADER_CHARS:
        summary.started_by = started_json(stored_header(summary.id, header))
        return summary
    origin = _started_by(summary.id, header)
    summary.started_by = None if origin is None else dict(origin)  # the caller's own
    return summary


# The longest header whose origin is kept (``_started_by``): a header holds the metadata given
# at its creation, which may be long; most are a few hundred characters.
KEPT_HEADER_CHARS = 4096


@functools.lru_cache(maxsize=1024)
def _started_by(session_id: str, header: str) -> dict[str, str | None] | None:
    """``started_json`` of a stored header, kept: a header never changes, and a listing read
    each listed session's (JSON, then its model) for this alone, at every listing."""
    return started_json(stored_header(session_id, header))


S = TypeVar("S", bound=SqlSessionStorage)

# The first hits of the sessions a listing with a query showed, kept by repo, session, words
# and limit for the next listing: a session's hits are the same for as long as its row's
# incarnation, count of entries and leaf are (every change appends an entry; a hit's onBranch
# is the leaf's branch), so only a session changed since is searched again. A listing of 20
# sessions found each one's hits in the whole text index, parsed them and cut their snippets at
# every call: about half of its CPU. Weighed by the stored JSON of the entries they hold.
HITS_KEPT_BYTES = 8 * 2**20
HITS_KEPT_PAGES = 4096
_HIT_BYTES = 512  # what a kept hit costs besides its entry's JSON (its objects, its snippet)
HitsState = tuple[str, int, str | None]  # incarnation, entry count, leaf
kept_hits: Kept[tuple[str, tuple[str, ...], int], tuple[HitsState, HitPage, int]] = Kept(
    HITS_KEPT_BYTES, HITS_KEPT_BYTES // 16, HITS_KEPT_PAGES, lambda kept: kept[2]
)


def _copy(page: HitPage) -> HitPage:
    return HitPage(list(page.hits), page.total, page.next_cursor, page.tag)


# Whether every entry of a session is on its current branch, from its row (in a query FROM
# ``sessions``): its tree is one path (one leaf, no branch point) and its leaf is that path's
# end (nothing hangs below it). A session where this does not hold has its branch read.
_WHOLE_BRANCH = (
    "(sessions.leaf_count = 1 AND sessions.branch_point_count = 0 AND sessions.leaf IS NOT NULL"
    " AND NOT EXISTS (SELECT 1 FROM entries c WHERE c.session_id = sessions.id"
    " AND c.parent_id = sessions.leaf))"
)


class _Every(Container[str]):
    def __contains__(self, entry_id: object) -> bool:
        return True


_EVERY_ENTRY: Container[str] = _Every()
_NO_ENTRY: Container[str] = frozenset()


def _branch(storage: SqlSessionStorage | None, leaf: str | None, whole: Any) -> Container[str]:
    """The ids of the entries on the branch to ``leaf`` (``whole``: ``_WHOLE_BRANCH``)."""
    if whole:
        return _EVERY_ENTRY
    if storage is None or leaf is None:
        return _NO_ENTRY
    return frozenset(storage.branch_ids(leaf))


class SqlSessionRepo(BaseSessionRepo, Generic[S]):
    """Every session in one SQL database; ``storage_class`` is the backend's storage."""

    storage_class: type[S]

    def __init__(
        self, database: SqlDatabase, context_build_options: SessionContextBuildOptions | None
    ) -> None:
        super().__init__(context_build_options)
        self.database = database
        # The sessions opened last, kept with their parsed entries: a server opens the same
        # few sessions request after request. A session deleted elsewhere meanwhile still says
        # so at its next read or write.
        self._opened: OrderedDict[str, S] = OrderedDict()
        self._opened_lock = threading.Lock()

    @property
    def lock_wait(self) -> float:
        """How long a write waits for a lock another transaction holds (seconds)."""
        return self.database.lock_wait

    # --- what a backend says ------------------------------------------------------------------

    def word_condition(self, param: str) -> str:
        """The condition on ``sessions`` that one search word (the parameter named ``param``,
        as ``search_term`` gives it) holds; user text must never reach query syntax."""
        raise NotImplementedError

    def search_term(self, word: str) -> str:
        return word

    def walk_condition(self, param: str) -> str | None:
        """Like ``word_condition``, cheap for each session a listing walks newest first once
        the word's matches are read (in the statement, once): a word found in most sessions
        then needs no more than the page's sessions looked at. None: the backend has none."""
        return None

    def matches_sql(self, param: str) -> str:
        """A query of how many entries hold the word ``param`` (one row, one column), for
        a backend with a ``walk_condition``."""
        raise NotImplementedError

    def search_params(self, words: builtins.list[str]) -> dict[str, str]:
        """The parameters of a search for ``words`` (``search_words``): ``w0`` .. each as
        ``search_term`` gives it."""
        return {f"w{index}": self.search_term(word) for index, word in enumerate(words)}

    # The column that orders a session's entries as appended, which a search ranks by (a hit's
    # ``place``): one that costs no read of the entry's row to find.
    place_column = "seq"

    def hits_sql(self, words: int, sessions: int, every: bool = False) -> str:
        """A query of the entries of the sessions ``:s0`` .. (``sessions`` of them) that hold
        one of ``words`` search words (``:w0`` .., parameters as ``search_params`` gives them)
        (``every``: that hold them all): each one's ``session_id``, ``place`` (its
        ``place_column``) and ``score``, how many of the words it holds."""
        raise NotImplementedError

    def matched_sql(self, words: int, sessions: int) -> str:
        """The rows of ``hits_sql`` without their score (``session_id``, ``place``), where a
        backend finds the entries that hold any of the words for less: a count needs no
        score."""
        return self.hits_sql(words, sessions)

    def before_search(self) -> None:
        """Called before a search reads the text index."""

    # Whether the text index holds every entry, as a statement reads the database (a query's
    # column): hits found while some are not in it yet are not kept.
    indexed_sql = "1"

    def delete_rows(self, conn: Any, session_id: str) -> None:
        """Delete what the session's row does not take with it (inside the transaction)."""

    # --- the repo -----------------------------------------------------------------------------

    def _read(self, sql: str, params: dict[str, Any]) -> builtins.list[Any]:
        return self.database.read(self.storage_class.sql(sql), params)

    def _create(self, header: SessionHeader, entries: builtins.list[SessionEntry]) -> Session:
        # No read first: inserting the row refuses a taken id (a conflict) in its transaction.
        return self._session(self._create_storage(header, entries))

    def create_described(
        self,
        name: str | None = None,
        cwd: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> tuple[Session, SessionSummary]:
        # The row read in the creation's own transaction: the same row, one reader less.
        header, entries = self._new_session(name, cwd, metadata, None)
        read_back = self.storage_class.sql(
            f"SELECT {_SUMMARY_COLUMNS} FROM sessions WHERE id = :id"
        )
        storage, row = self.storage_class.create_reading(self.database, header, entries, read_back)
        return self._session(self._keep_open(storage)), _summary(row)

    def _create_storage(self, header: SessionHeader, entries: builtins.list[SessionEntry]) -> S:
        return self._keep_open(self.storage_class.create(self.database, header, entries))

    def _import_storage(self, stream: SessionStream) -> S:
        return self._keep_open(self.storage_class.import_stream(self.database, stream))

    def _open_storage(self, session_id: str) -> S:
        # One read of the row, also for a session kept open: it may have been deleted and
        # made again since (see _read_row).
        return self._read_row(session_id, "")[0]

    def _read_row(
        self, session_id: str, columns: str, gone: str = "was deleted"
    ) -> tuple[S, str | None, tuple[Any, ...]]:
        """The session's storage (kept open), its leaf as read now and ``columns`` of its row,
        in one statement; a session not open yet has its header read in it too. ``gone``: what
        a session that was open says when its row is gone."""
        with self._opened_lock:
            storage = self._opened.get(session_id)
            if storage is not None:
                self._opened.move_to_end(session_id)
        head = "leaf, incarnation" if storage is not None else "leaf, incarnation, header"
        rows = self._read(
            f"SELECT {head}{', ' if columns else ''}{columns} FROM sessions WHERE id = :id",
            {"id": session_id},
        )
        if not rows:
            said = "not found" if storage is None else gone
            raise SessionError("not_found", f"session {session_id} {said}")
        if storage is None:
            leaf, incarnation, header, *rest = rows[0]
        else:
            leaf, incarnation, *rest = rows[0]
            if incarnation == storage.incarnation:
                return storage, leaf, tuple(rest)
            # Deleted and made again since it was opened here (by another process, or
            # replica): what was kept of it is another session's.
            again = self._read("SELECT header FROM sessions WHERE id = :id", {"id": session_id})
            if not again:
                raise SessionError("not_found", f"session {session_id} {gone}")
            header = again[0][0]
        fresh = self.storage_class.stored(
            self.database, stored_header(session_id, header), leaf, incarnation
        )
        return self._keep_open(fresh, opened=storage is None, replacing=storage), leaf, tuple(rest)

    def append_entry(self, session_id: str, partial: Mapping[str, Any]) -> str:
        # A session kept open is not read first (one statement less, on another connection):
        # its append's transaction reads the row anyway, and refuses a deleted session, or
        # one made again since (Reincarnated: nothing written), which is then opened afresh.
        with self._opened_lock:
            storage = self._opened.get(session_id)
            if storage is not None:
                self._opened.move_to_end(session_id)
        if storage is not None and storage.APPEND_CHECKS_INCARNATION and storage.incarnation:
            try:
                return self._session(storage).append_entry(partial)
            except Reincarnated:
                pass
        return super().append_entry(session_id, partial)

    def open_read(self, session_id: str) -> Session:
        storage, leaf, _ = self._read_row(session_id, "")
        return self._session(storage, leaf)

    def open_described(self, session_id: str) -> tuple[Session, SessionSummary]:
        # Gone, it says so as summary does.
        storage, leaf, row = self._read_row(session_id, _SUMMARY_COLUMNS, "not found")
        return self._session(storage, leaf), _summary(row)

    def _keep_open(self, storage: S, opened: bool = False, replacing: S | None = None) -> S:
        """Keep ``storage`` among the sessions open; ``opened``: it was opened from the
        database, and one that another thread opened meanwhile is kept instead (one storage,
        so one lock, one cache share and one leaf seen, per open session). ``replacing``: the
        storage of an older incarnation of the session, which it replaces unless another
        thread replaced it first."""
        with self._opened_lock:
            kept = self._opened.get(storage.session_id)
            if kept is not None and (
                (opened and replacing is None) or (replacing is not None and kept is not replacing)
            ):
                self._opened.move_to_end(storage.session_id)
                return kept
            self._opened[storage.session_id] = storage
            while len(self._opened) > OPEN_SESSIONS:
                self._opened.popitem(last=False)
        return storage

    def exists(self, session_id: str) -> bool:
        return bool(self._read("SELECT 1 FROM sessions WHERE id = :id", {"id": session_id}))

    def summary(self, session_id: str) -> SessionSummary:
        rows = self._read(
            f"SELECT {_SUMMARY_COLUMNS} FROM sessions WHERE id = :id", {"id": session_id}
        )
        if not rows:
            raise SessionError("not_found", f"session {session_id} not found")
        return _summary(rows[0])

    def list(
        self, query: str | None = None, limit: int = 50, cursor: str | None = None
    ) -> SessionPage:
        if limit < 1:
            raise SessionError("invalid_argument", "limit must be at least 1")
        conditions: builtins.list[str] = []
        params: dict[str, Any] = {"limit": limit + 1}
        if cursor is not None:
            params["modified"], params["after_id"] = decode_cursor(cursor)
            conditions.append("(modified, id) < (:modified, :after_id)")
        words = query_words(query)
        if words:
            self.before_search()
        for index, word in enumerate(words):
            params[f"w{index}"] = self.search_term(word)
        rows: builtins.list[Any] = []
        if words and self.walk_condition("w0") is not None and self._common(words, params):
            rows, rest = self._walk_newest(conditions, params, len(words))
            if len(rows) > limit or not rest:
                return self._page(rows, limit)
        # Every word must occur in the session, not necessarily in one entry. (A walk that
        # filled no page is not taken up: the sessions after it read in a statement of their
        # own would miss one appended to in between, gone from theirs into the walked ones.)
        conditions += [self.word_condition(f"w{index}") for index in range(len(words))]
        where = f"WHERE {' AND '.join(conditions)}" if conditions else ""
        rows = self._read(
            f"SELECT {_SUMMARY_COLUMNS} FROM sessions {where}"
            " ORDER BY modified DESC, id DESC LIMIT :limit",
            params,
        )
        return self._page(rows, limit)

    def _common(self, words: builtins.list[str], params: dict[str, Any]) -> bool:
        """Whether each of ``words`` (in ``params``) is in at least as many entries as half
        the sessions: a page of a word in fewer sessions than that takes a walk of more
        sessions than its page's twice, and the sessions of a rarer word are read from the
        text index for less (a word in 1% of 10,000 sessions: 1 ms; walked, 10 ms)."""
        sessions = self._read("SELECT count(*) FROM sessions", {})[0][0]
        for index in range(len(words)):
            if self._read(self.matches_sql(f"w{index}"), params)[0][0] * 2 < sessions:
                return False
        return True

    def _walk_newest(
        self, conditions: builtins.list[str], params: dict[str, Any], words: int
    ) -> tuple[builtins.list[Any], bool]:
        """The first ``:limit`` sessions (the cursor's ``conditions``) holding the ``words``
        search words among the newest few (``WALK_SESSIONS``, ``WALK_ENTRIES``), looked at
        one by one (``walk_condition``), and whether sessions are left after them. A word in every session of 10,000
        found each one's sessions in the text index, then sorted them all (60 to 130 ms here),
        for a page of 50."""
        where = f"WHERE {' AND '.join(conditions)}" if conditions else ""
        window = self._read(
            f"SELECT modified, id, entry_count FROM sessions {where}"
            " ORDER BY modified DESC, id DESC LIMIT :walk",
            params | {"walk": WALK_SESSIONS},
        )
        end, entries = None, 0
        for modified, session_id, entry_count in window:
            entries += entry_count or 0
            if entries > WALK_ENTRIES:
                break
            end = (modified, session_id)
        if end is None:  # the newest session alone is too long
            return [], True
        params["walk_modified"], params["walk_id"] = end
        walked = [*conditions, "(modified, id) >= (:walk_modified, :walk_id)"]
        walked += [self.walk_condition(f"w{index}") or "" for index in range(words)]
        rows = self._read(
            f"SELECT {_SUMMARY_COLUMNS} FROM sessions WHERE {' AND '.join(walked)}"
            " ORDER BY modified DESC, id DESC LIMIT :limit",
            params,
        )
        return rows, end != tuple(window[-1][:2]) or len(window) == WALK_SESSIONS

    def _page(self, rows: builtins.list[Any], limit: int) -> SessionPage:
        items = [_summary(row) for row in rows[:limit]]
        next_cursor = None
        if len(rows) > limit:
            next_cursor = encode_cursor(items[-1].modified, items[-1].id)
        return SessionPage(items, next_cursor)

    def search_session(
        self, session_id: str, query: str, limit: int = 10, cursor: str | None = None
    ) -> HitPage:
        words = search_words(query)
        check_hits_limit(limit)
        tag = search_tag(session_id, words)
        params: dict[str, Any] = {"s0": session_id, "limit": limit + 1}
        condition = ""
        if cursor is not None:
            params["score"], params["place"] = parse_hit_cursor(cursor, tag)
            condition = "WHERE (score, place) < (:score, :place)"
        storage, leaf, (whole,) = self._read_row(session_id, _WHOLE_BRANCH)
        self.before_search()
        params.update(self.search_params(words))
        rows: builtins.list[Any] = []
        if len(words) > 1 and params.get("score", len(words)) == len(words):
            # A page of entries that hold every word, if there are enough of them: found
            # without scoring every entry that holds one.
            rows = self._page_rows(self.hits_sql(len(words), 1, every=True), condition, params)
        if len(rows) <= limit:
            rows = self._page_rows(self.hits_sql(len(words), 1), condition, params)
        page = rows[:limit]
        if cursor is None and len(rows) <= limit:
            total = len(rows)  # the first page holds them all
        else:
            del params["limit"]
            matched = self.matched_sql(len(words), 1)
            total = self._read(f"SELECT count(*) FROM ({matched}) h", params)[0][0]
        entries = storage.parsed_entries([row[2] for row in page])
        branch = _branch(storage, leaf, whole) if page else _NO_ENTRY
        hits = [
            EntryHit(entries[i], place, score, i in branch)
            for place, score, i in page
            if i in entries
        ]
        more = len(rows) > limit and bool(hits)
        return HitPage(hits, total, hit_cursor(hits[-1], tag) if more else None, tag)

    def search_sessions(
        self,
        session_ids: Sequence[str],
        query: str,
        limit: int = HITS_LISTED,
        listed: Mapping[str, SessionSummary] | None = None,
    ) -> dict[str, HitPage]:
        words = search_words(query)
        check_hits_limit(limit)
        self.before_search()
        found: dict[str, HitPage] = {}
        rest = self._kept_first_hits(session_ids, words, limit, found, listed or {})
        for start in range(0, len(rest), SESSIONS_PER_SEARCH):
            chunk = rest[start : start + SESSIONS_PER_SEARCH]
            found.update(self._first_hits(chunk, words, limit))
        return found

    def _kept_first_hits(
        self,
        session_ids: Sequence[str],
        words: builtins.list[str],
        limit: int,
        found: dict[str, HitPage],
        listed: Mapping[str, SessionSummary],
    ) -> builtins.list[str]:
        """Put in ``found`` the kept first hits (``kept_hits``) of each of ``session_ids``
        whose row is as it was when they were found (as ``listed`` has it, or as read now);
        returns the others."""
        said = tuple(words)
        kept = {}
        for session_id in session_ids:
            page = kept_hits.get(self, (session_id, said, limit))
            if page is not None:
                kept[session_id] = page
        if not kept:
            return builtins.list(session_ids)
        # The rows a listing just read say the state its page shows: read again, they cost a
        # statement per listing with a query, on a reader that each write since left cold.
        now: dict[str, tuple[Any, ...]] = {
            sid: (row.incarnation, row.entry_count, row.leaf_id)
            for sid, row in listed.items()
            if sid in kept
        }
        unlisted = [sid for sid in kept if sid not in now]
        if unlisted:
            params = {f"s{index}": sid for index, sid in enumerate(unlisted)}
            marks = ", ".join(f":{name}" for name in params)
            rows = self._read(
                f"SELECT id, incarnation, entry_count, leaf FROM sessions WHERE id IN ({marks})",
                params,
            )
            now.update((session_id, tuple(state)) for session_id, *state in rows)
        rest = []
        for session_id in session_ids:
            page = kept.get(session_id)
            if page is not None and now.get(session_id) == page[0]:
                found[session_id] = _copy(page[1])
            else:
                rest.append(session_id)
        return rest

    def _first_hits(
        self, session_ids: Sequence[str], words: builtins.list[str], limit: int
    ) -> dict[str, HitPage]:
        """The first ``limit`` hits of each of ``session_ids`` (a few dozen), in one query: a
        query for each session read every hit of the words in every session (a listing of
        40 sessions of 5,000 entries took 2 to 5 s)."""
        params: dict[str, Any] = {f"s{index}": sid for index, sid in enumerate(session_ids)}
        params.update(self.search_params(words), limit=limit, sessions=len(session_ids))
        marks = ", ".join(f":s{index}" for index in range(len(session_ids)))
        # Each session's row (and whether its branch is whole) read once, in a subquery its
        # LIMIT keeps whole: joined to every hit, PostgreSQL guessed thousands of rows and
        # answered the branch's NOT EXISTS from a hash of every entry of every session (the
        # whole table read, 0.3 s a listing of 260,000 entries), where a look-up in the
        # parent index per session is enough.
        rows = self._read(
            "SELECT t.session_id, t.place, t.score, t.total, e.id, e.type, e.data,"
            " s.leaf, s.incarnation, s.whole, s.entry_count, s.indexed FROM"
            " (SELECT session_id, place, score, row_number() OVER (PARTITION BY session_id"
            " ORDER BY score DESC, place DESC) AS rank, count(*) OVER (PARTITION BY"
            f" session_id) AS total FROM ({self.hits_sql(len(words), len(session_ids))}) h) t"
            f" JOIN entries e ON e.session_id = t.session_id AND e.{self.place_column} = t.place"
            f" JOIN (SELECT id, leaf, incarnation, {_WHOLE_BRANCH} AS whole, entry_count,"
            f" {self.indexed_sql} AS indexed FROM sessions"
            f" WHERE id IN ({marks}) LIMIT :sessions) s ON s.id = t.session_id"
            " WHERE t.rank <= :limit ORDER BY t.session_id, t.score DESC, t.place DESC",
            params,
        )
        found: dict[str, HitPage] = {}
        states: dict[str, tuple[HitsState, bool]] = {}
        weights: dict[str, int] = {}
        branch: Container[str] = _NO_ENTRY
        for session_id, place, score, total, entry_id, entry_type, data, *row in rows:
            leaf, incarnation, whole, entry_count, indexed = row
            with self._opened_lock:
                storage = self._opened.get(session_id)
            if storage is not None and storage.incarnation != incarnation:
                storage = None  # made again since it was opened here: what it keeps is stale
            page = found.get(session_id)
            if page is None:
                page = found[session_id] = HitPage([], total, None, search_tag(session_id, words))
                if not whole and storage is None:
                    storage = self._storage_if_there(session_id)
                branch = _branch(storage, leaf, whole)
                states[session_id] = ((incarnation, entry_count, leaf), bool(indexed))
            weights[session_id] = weights.get(session_id, 0) + len(data) + _HIT_BYTES
            entry = (
                parse_entry(session_id, entry_id, entry_type, data)
                if storage is None
                else storage.parse_stored(entry_id, entry_type, data)
            )
            page.hits.append(EntryHit(entry, place, score, entry_id in branch))
        said = tuple(words)
        for session_id, page in found.items():
            if page.total > len(page.hits):
                page.next_cursor = page.cursor_after(len(page.hits))
            state, indexed = states[session_id]
            if indexed and state[0] is not None:  # a row of an old version has no incarnation
                kept = (state, _copy(page), weights[session_id])
                kept_hits.put(self, (session_id, said, limit), kept)
        return found

    def _storage_if_there(self, session_id: str) -> S | None:
        try:
            return self._read_row(session_id, "")[0]
        except SessionError as error:
            if error.code != "not_found":
                raise
            return None  # deleted since: its hits are shown without a branch

    def _page_rows(self, found: str, condition: str, params: dict[str, Any]) -> builtins.list[Any]:
        """(place, score, id) of the hits ``found`` (``hits_sql``) of the session ``:s0``
        after ``condition``, best first, ``:limit`` at most: ranked in the database, with no
        window over every hit (which sorts them all: 0.3 s a page of a session with 60,000
        hits), and only the page's entries read."""
        return self._read(
            f"SELECT t.place, t.score, e.id FROM (SELECT place, score FROM ({found}) h"
            f" {condition} ORDER BY score DESC, place DESC LIMIT :limit) t JOIN entries e"
            f" ON e.session_id = :s0 AND e.{self.place_column} = t.place"
            " ORDER BY t.score DESC, t.place DESC",
            params,
        )

    def delete(self, session_id: str) -> None:
        sql = self.storage_class.sql("DELETE FROM sessions WHERE id = :id")

        def work(conn: Any) -> None:
            self.storage_class.lock_for_delete(self.database, conn, session_id)
            if self.database.session_guard is not None:
                self.database.session_guard(conn, session_id)
            gone = conn.execute(sql, {"id": session_id}).rowcount
            if not gone:
                raise SessionError("not_found", f"session {session_id} not found")
            self.delete_rows(conn, session_id)

        self.database.write(work)
        with self._opened_lock:
            self._opened.pop(session_id, None)

    def close(self) -> None:
        self.database.close()
