"""One session in a PostgreSQL session database: its entries, its leaf, its row's counters."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg import errors as pg_errors

from mcp_agent.sessions.entries import (
    LeafEntry,
    SessionEntry,
    SessionHeader,
    entry_to_json,
    iso_now,
    new_entry_id,
    sortable_time,
)
from mcp_agent.sessions.errors import SessionError, Unreachable
from mcp_agent.sessions.pi import SessionStream
from mcp_agent.sessions.postgres.database import BrokenConnection, PostgresDatabase
from mcp_agent.sessions.postgres.row_lock import lock_session_row
from mcp_agent.sessions.row_sql import (
    for_psycopg,
    label_changes,
    recount_sql,
    row_update,
    tree_delta,
)
from mcp_agent.sessions.sql.storage import SqlSessionStorage, entry_row, new_incarnation
from mcp_agent.sessions.sqlite.storage import IMPORT_BATCH_ROWS
from mcp_agent.sessions.storage import RowDelta, SessionStats, leaf_after

Conn = psycopg.Connection[Any]

# An append whose connection broke is read back to say whether it was written; while the
# database is out of reach (a restart, a failover), it is read again every SETTLE_TURN_S,
# up to SETTLE_S, before its fate is said to be unknown.
SETTLE_S = 30.0
SETTLE_TURN_S = 0.5

_INSERT_ENTRY = (
    "INSERT INTO entries (session_id, id, parent_id, type, role, timestamp, seq, data, text)"
    " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)"
)

# A session's ``modified`` time (which orders listings) is the database's: replicas on
# several machines need not agree on the time, and the one whose clock is behind would list
# what it wrote below older changes made elsewhere. The same text as sessions.write_time.
DB_WRITE_TIME = "to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')"

_APPLY_DELTA = f"""
UPDATE sessions SET
  leaf = %(leaf)s,
  modified = {DB_WRITE_TIME},
  next_seq = next_seq + %(count)s,
  entry_count = entry_count + %(entries)s,
  message_count = message_count + %(messages)s,
  tool_call_count = tool_call_count + %(tool_calls)s,
  input_tokens = input_tokens + %(input)s,
  output_tokens = output_tokens + %(output)s,
  cache_read_tokens = cache_read_tokens + %(cache_read)s,
  cache_write_tokens = cache_write_tokens + %(cache_write)s,
  total_tokens = total_tokens + %(total)s,
  cost_total = cost_total + %(cost)s,
  leaf_count = leaf_count + %(leaves)s,
  branch_point_count = branch_point_count + %(branch_points)s,
  first_timestamp = coalesce(first_timestamp, %(first_timestamp)s),
  last_timestamp = coalesce(%(last_timestamp)s, last_timestamp),
  first_user_message = coalesce(first_user_message, %(first_user_message)s),
  name = CASE WHEN %(renames)s THEN %(name)s ELSE name END
WHERE id = %(id)s
"""


def _no_nul(text: str | None) -> str | None:
    # PostgreSQL text cannot hold NUL; the JSON keeps it escaped (\u0000), the search text
    # drops it.
    return text.replace("\x00", " ") if text else text


_RECOUNT = for_psycopg(recount_sql("coalesce(jsonb_object_agg(role, n), '{}'::jsonb)"))
_ADD_ROLE = (
    "UPDATE sessions SET roles = jsonb_set(roles, ARRAY[%(role)s],"
    " to_jsonb(coalesce((roles->>%(role)s)::bigint, 0) + %(n)s)) WHERE id = %(s)s"
)


def _recount(conn: Conn, session_id: str) -> None:
    """Count the row's figures that need every entry, after entries were stored in bulk.
    The table's statistics know nothing yet of a session just written: PostgreSQL guessed it
    one entry and joined each entry to its parent by reading every entry of the session
    (17 s for 5,000 entries; an import of 10,000 passed the statement timeout). The join is
    made by hash, the setting put back as it was for the rest of the transaction."""
    [(prior,)] = conn.execute("SELECT current_setting('enable_nestloop')").fetchall()
    conn.execute("SELECT set_config('enable_nestloop', 'off', true)")
    conn.execute(_RECOUNT, {"s": session_id})
    conn.execute("SELECT set_config('enable_nestloop', %s, true)", (prior,))


def _write_entries(
    conn: Conn,
    session_id: str,
    entries: Sequence[SessionEntry],
    first_seq: int,
    leaf_id: str | None,
    totals: SessionStats | None = None,
    bulk: bool = False,
) -> list[tuple[Any, ...]]:
    """Insert ``entries`` and fold them into the session row (inside a transaction); ``bulk``
    leaves the figures that need the tree to a :func:`_recount` once all are stored."""
    delta = RowDelta()
    rows = []
    for offset, entry in enumerate(entries):
        row = entry_row(session_id, entry, first_seq + offset)
        rows.append((*row[:-1], _no_nul(row[-1])))
        delta.add(entry)
    delta.check_fits()
    if totals is not None:
        delta.add_into(totals)
    leaves = branch_points = 0
    with conn.cursor() as cursor:
        if bulk:
            if rows:
                cursor.executemany(_INSERT_ENTRY, rows)
        else:

            def fetch_one(sql: str, params: dict[str, Any]) -> Any:
                return cursor.execute(sql, params).fetchone()

            for entry, row in zip(entries, rows, strict=True):
                added = tree_delta(fetch_one, session_id, entry, psycopg=True)
                leaves += added[0]
                branch_points += added[1]
                cursor.execute(_INSERT_ENTRY, row)
            for role, count in delta.counts.messages_by_role.items():
                cursor.execute(_ADD_ROLE, {"role": role, "n": count, "s": session_id})
    for target_id, label in label_changes(entries).items():
        if label:
            conn.execute(
                "INSERT INTO labels (session_id, target_id, label) VALUES (%s, %s, %s)"
                " ON CONFLICT (session_id, target_id) DO UPDATE SET label = excluded.label",
                (session_id, target_id, label),
            )
        else:
            conn.execute(
                "DELETE FROM labels WHERE session_id = %s AND target_id = %s",
                (session_id, target_id),
            )
    update = row_update(delta, session_id, leaf_id, len(entries), leaves, branch_points, _no_nul)
    conn.execute(_APPLY_DELTA, update)
    return rows


def _insert_imported(
    conn: Conn, database: PostgresDatabase, header: SessionHeader, incarnation: str
) -> None:
    """Insert an imported session's row. Another transaction inserting the same id and not
    committed yet (another replica's import of the same file, the command line's import of a
    slow pipe) makes this insert wait for its end, on a worker thread, up to the lock
    timeout: in a server that bounds its waits for held rows (``row_waits``) the wait counts
    among them, as a held row's does, so that imports of one file hold up no other session;
    past the bound, ``RowHeld`` at once, nothing written."""
    waits = database.row_waits
    if waits is None:
        _insert_session(conn, header, incarnation)
        return
    conn.execute("SELECT set_config('lock_timeout', '1ms', true)")
    try:
        with conn.transaction():  # a savepoint: the insert that would wait is undone alone
            _insert_session(conn, header, incarnation)
        waited = False
    except pg_errors.LockNotAvailable:
        waited = True
    conn.execute(
        "SELECT set_config('lock_timeout', %s, true)", (f"{round(database.lock_timeout * 1000)}ms",)
    )
    if waited:
        waits.enter(header.id)
        try:
            _insert_session(conn, header, incarnation)
        finally:
            waits.leave(header.id)


def _insert_session(conn: Conn, header: SessionHeader, incarnation: str) -> None:
    inserted = conn.execute(
        "INSERT INTO sessions (id, header, cwd, created, modified, parent_session, incarnation)"
        f" VALUES (%s, %s, %s, %s, {DB_WRITE_TIME}, %s, %s) ON CONFLICT (id) DO NOTHING",
        (
            header.id,
            entry_to_json(header),
            _no_nul(header.cwd),
            sortable_time(header.timestamp),
            header.parent_session,
            incarnation,
        ),
    ).rowcount
    if not inserted:
        raise SessionError("conflict", f"session {header.id} already exists")


class PostgresSessionStorage(SqlSessionStorage):
    """One session in a PostgreSQL session database (see ``database``): the reads are
    SqlSessionStorage's, the writes this class's."""

    sql = staticmethod(for_psycopg)
    # Every entry takes the next sequence number: positions are seq values, found in the
    # (session_id, seq) index.
    RANGE_SQL = (
        "SELECT data FROM entries WHERE session_id = :s AND seq >= :start AND seq < :end"
        " ORDER BY seq"
    )

    def __init__(
        self, database: PostgresDatabase, session_id: str, header: SessionHeader | None = None
    ) -> None:
        self.database: PostgresDatabase = database
        super().__init__(database, session_id, header)

    @staticmethod
    def store_new(
        conn: Conn,
        header: SessionHeader,
        entries: list[SessionEntry],
        leaf_id: str | None,
        incarnation: str,
    ) -> None:
        _insert_session(conn, header, incarnation)
        _write_entries(conn, header.id, entries, 0, leaf_id, bulk=True)
        _recount(conn, header.id)

    @classmethod
    def import_stream(
        cls, database: PostgresDatabase, stream: SessionStream
    ) -> PostgresSessionStorage:
        """Store an imported session in one transaction, inserting its entries in batches as
        the stream yields them; a problem anywhere in the file rolls it all back."""
        header = stream.header
        incarnation = new_incarnation()

        def work(conn: Conn) -> None:
            # The file (a pipe, perhaps) is read between statements for as long as it takes.
            conn.execute("SET LOCAL idle_in_transaction_session_timeout = 0")
            nonlocal header
            try:
                _insert_imported(conn, database, header, incarnation)
            except SessionError as taken:  # ON CONFLICT DO NOTHING: the transaction goes on
                header = stream.retake_id(taken)
                _insert_session(conn, header, incarnation)
            totals = SessionStats()
            batch: list[SessionEntry] = []
            seq = 0
            for entry in stream:
                batch.append(entry)
                if len(batch) >= IMPORT_BATCH_ROWS:
                    _write_entries(conn, header.id, batch, seq, leaf_after(batch), totals, True)
                    seq += len(batch)
                    batch.clear()
            _write_entries(conn, header.id, batch, seq, stream.leaf_id, totals, bulk=True)
            _recount(conn, header.id)

        try:
            database.write(work)
        except SessionError as error:
            if error.code != "storage":
                stream.drain()  # a problem in the rest of the file is reported first
            raise
        return cls.stored(database, header, stream.leaf_id, incarnation)

    # --- helpers ------------------------------------------------------------------------------

    def _guard(self, conn: Conn) -> None:
        if self.database.session_guard is not None:
            self.database.session_guard(conn, self.session_id)

    def _announce(self, conn: Conn) -> None:
        if self.database.announce is not None:
            self.database.announce(conn, self.session_id)

    def _locked_row(self, conn: Conn) -> tuple[str | None, int]:
        """The session's leaf and next sequence number, its row locked until the commit (a
        holder that does nothing is said after a turn of the wait: ``row_lock``)."""
        database = self.database
        row = lock_session_row(
            conn, self.session_id, database.side_connection, database.where, database.row_waits
        )
        if row is None:
            raise SessionError("not_found", f"session {self.session_id} was deleted")
        return row[0], row[1]

    def row_held(self) -> bool:
        """Whether a write of this process waits for this session's row, held by another
        transaction (a write queued behind it for ``lock`` gives its thread back: see
        sessions.row_waits). Never, unless the server bounds those waits."""
        waits = self.database.row_waits
        return waits is not None and waits.waiting(self.session_id)

    @classmethod
    def lock_for_delete(cls, database: PostgresDatabase, conn: Conn, session_id: str) -> None:
        """Take the session's row before deleting it, waiting for it as an append does (and
        counted among the waits for held rows)."""
        lock_session_row(
            conn, session_id, database.side_connection, database.where, database.row_waits
        )

    def _exists(self, conn: Conn, entry_id: str) -> bool:
        row = conn.execute(
            "SELECT 1 FROM entries WHERE session_id = %s AND id = %s",
            (self.session_id, entry_id),
        ).fetchone()
        return row is not None

    def _recount_row(self) -> None:
        self.database.write(lambda conn: _recount(conn, self.session_id))

    # --- the storage protocol: writes (reads: SqlSessionStorage) --------------------------------

    def set_leaf_id(self, leaf_id: str | None) -> LeafEntry | None:
        def work(conn: Conn) -> LeafEntry | None:
            current, seq = self._locked_row(conn)
            self._guard(conn)
            if current == leaf_id:
                return None
            if leaf_id is not None and not self._exists(conn, leaf_id):
                raise SessionError("not_found", f"entry {leaf_id} not found")
            entry = LeafEntry(
                id=new_entry_id(lambda candidate: self._exists(conn, candidate)),
                parent_id=leaf_id,
                timestamp=iso_now(),
                target_id=leaf_id,
            )
            _write_entries(conn, self.session_id, [entry], seq, leaf_id)
            self._announce(conn)
            return entry

        moved = self.database.write(work)
        self._seen_leaf = leaf_id
        return moved

    def append_entry(self, entry: SessionEntry) -> SessionEntry:
        seen = self._seen_leaf

        def work(conn: Conn) -> tuple[SessionEntry, int]:
            leaf, seq = self._locked_row(conn)
            self._guard(conn)
            if self._exists(conn, entry.id):
                raise SessionError("conflict", f"entry id {entry.id} is already taken")
            stored = entry
            if entry.parent_id != leaf and entry.parent_id == seen:
                # Built on the leaf we last saw, but another replica has appended or moved the
                # leaf since: keep the conversation linear on the leaf as it is now.
                stored = entry.model_copy(update={"parent_id": leaf})
            elif entry.parent_id is not None and not self._exists(conn, entry.parent_id):
                raise SessionError(
                    "invalid_entry", f"entry {entry.id}: parent {entry.parent_id} not found"
                )
            new_leaf = stored.target_id if isinstance(stored, LeafEntry) else stored.id
            rows = _write_entries(conn, self.session_id, [stored], seq, new_leaf)
            self._announce(conn)
            return stored, len(rows[0][7])

        for attempt in range(2):
            try:
                stored, json_chars = self.database.write(work)
                break
            except BrokenConnection as broken:
                settled = self._settle(entry, broken)
                if settled is not None:
                    stored, json_chars = settled
                    break
                # Nothing was written (the connection was dropped: a restart or failover of
                # the database, pg_terminate_backend): once more, on a new connection, so
                # that a run does not end for it. The entry's id keeps it from being
                # written twice, whatever the first connection still does.
                if attempt:
                    raise broken.unwritten() from None
        self._seen_leaf = stored.target_id if isinstance(stored, LeafEntry) else stored.id
        self._cache.put(stored.id, stored, json_chars)
        return stored

    def _settle(
        self, entry: SessionEntry, broken: BrokenConnection
    ) -> tuple[SessionEntry, int] | None:
        """Whether an append whose connection broke was committed, read on another connection
        once the session's row is free (a commit under way holds it): the entry as stored, or
        None when nothing was written (unreadable, ``broken`` is raised: it is not known). The
        database out of reach, it is read again once back, for up to ``SETTLE_S``."""

        def work(conn: Conn) -> str | None:
            self._locked_row(conn)
            row = conn.execute(
                "SELECT data FROM entries WHERE session_id = %s AND id = %s",
                (self.session_id, entry.id),
            ).fetchone()
            return None if row is None else str(row[0])

        deadline = time.monotonic() + SETTLE_S
        while True:
            try:
                data = self.database.write(work)
                break
            except (Unreachable, BrokenConnection):
                if time.monotonic() >= deadline:
                    raise broken from None
                time.sleep(SETTLE_TURN_S)  # on a worker thread, as every database call
            except SessionError:
                raise broken from None
        if data is None:
            return None
        return self.parse_stored(entry.id, entry.type, data), len(data)

    def stored_messages(self, ids: Sequence[str]) -> dict[str, str]:
        # PostgreSQL's JSON operators refuse a \u0000 in a string (it cannot be text), so the
        # message is cut out here, as compact JSON (what the parsed message's JSON is).
        found: dict[str, str] = {}
        for entry_id, data in self.stored_json(ids).items():
            message = json.loads(data).get("message")
            if message is not None:
                found[entry_id] = json.dumps(message, ensure_ascii=False, separators=(",", ":"))
        return found
