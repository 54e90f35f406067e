"""What only the SQLite backend promises: durability settings, concurrent writers, query plans."""

from __future__ import annotations

import json
import multiprocessing
import random
import signal
import sqlite3
import threading
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from mcp_support import another_programs_database, poll
from narrow import narrow, present

from mcp_agent.messages import AssistantMessage, BaseMessage, TextContent, Usage, UserMessage
from mcp_agent.sessions import (
    MessageEntry,
    Session,
    SessionError,
    SqliteSessionRepo,
    SqliteSessionStorage,
)
from mcp_agent.sessions.context import build_session_context
from mcp_agent.sessions.entries import entry_from_json, entry_text, iso_now
from mcp_agent.sessions.hits import SESSIONS_PER_SEARCH, EntryHit, snippet
from mcp_agent.sessions.pi import export_text
from mcp_agent.sessions.repo import SessionRepo, listed_hits
from mcp_agent.sessions.sqlite.database import (
    MAIN_THREAD_WAIT_S,
    SCHEMA_VERSION,
    WORKER_THREAD_WAIT_S,
    SqliteDatabase,
)
from mcp_agent.sessions.storage import compute_stats
from mcp_agent.sessions.words import query_words


def user(text: str) -> UserMessage:
    return UserMessage(content=text, timestamp=1)


def test_durable_settings(tmp_path: Path) -> None:
    repo = SqliteSessionRepo(tmp_path / "s.db")
    conn = repo.database.conn
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    # A write waits at least 10 s for another writer's lock: in slices, short on the main
    # thread (see test_ctrl_c_is_heard_on_the_main_thread_…), longer on a worker thread (see
    # test_stdio's test_sigterm_stops_a_server_whose_write_waits_for_another_process_lock).
    assert repo.database.busy_timeout >= 10
    assert conn.execute("PRAGMA busy_timeout").fetchone()[0] == MAIN_THREAD_WAIT_S * 1000
    worker = threading.Thread(target=repo.create)
    worker.start()
    worker.join(30)
    assert conn.execute("PRAGMA busy_timeout").fetchone()[0] == WORKER_THREAD_WAIT_S * 1000
    tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"sessions", "entries", "labels", "entries_fts"} <= tables


def test_another_programs_database_is_refused_and_left_as_it_was(tmp_path: Path) -> None:
    path = tmp_path / "bookmarks.db"
    before = another_programs_database(path)
    with pytest.raises(SessionError) as refused:
        SqliteSessionRepo(path)
    assert refused.value.code == "storage"
    assert "another program" in refused.value.message and "bookmarks" in refused.value.message
    assert path.read_bytes() == before  # still in its own journal mode, without our tables
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bookmarks.db"]


def test_a_database_of_a_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    SqliteSessionRepo(path).close()
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()
    with pytest.raises(SessionError) as refused:
        SqliteSessionRepo(path)
    assert f"schema version {SCHEMA_VERSION + 1}, newer" in refused.value.message
    assert "upgrade mcp-agent-sessions" in refused.value.message


def test_an_empty_sqlite_file_becomes_a_session_database(tmp_path: Path) -> None:
    path = tmp_path / "empty.db"
    sqlite3.connect(path).close()  # a valid, empty database (0 bytes)
    repo = SqliteSessionRepo(path)
    try:
        assert repo.create().id
    finally:
        repo.close()


@pytest.mark.parametrize("fate", ["deleted", "replaced"])
def test_a_database_file_gone_while_open_refuses_writes_and_still_reads(
    tmp_path: Path, fate: str
) -> None:
    path = tmp_path / "s.db"
    repo = SqliteSessionRepo(path)
    try:
        session = repo.create()
        first = session.append_message(UserMessage(content="kept"))
        for each in tmp_path.iterdir():  # s.db and its -wal and -shm
            each.unlink()
        if fate == "replaced":
            SqliteSessionRepo(path).close()  # another session database now at the path
        # Acknowledged, an append would have gone into a file no one can open any more.
        with pytest.raises(SessionError) as refused:
            session.append_message(UserMessage(content="lost"))
        assert refused.value.code == "storage"
        assert "was deleted or replaced" in refused.value.message
        assert [e.id for e in repo.open(session.id).get_entries()] == [first]  # still read
    finally:
        repo.close()


def test_a_reader_connection_that_cannot_open_is_a_storage_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = SqliteSessionRepo(tmp_path / "s.db")
    try:
        session_id = repo.create().id

        def out_of_descriptors(*_args: object, **_kwargs: object) -> sqlite3.Connection:
            raise sqlite3.OperationalError("unable to open database file")  # as at ulimit -n

        monkeypatch.setattr(sqlite3, "connect", out_of_descriptors)
        repo.database._idle_readers.clear()  # the next read needs a connection of its own
        with pytest.raises(SessionError) as refused:
            repo.open_read(session_id)
        assert refused.value.code == "storage"
        assert "unable to open database file" in refused.value.message
    finally:
        repo.close()


def test_one_file_holds_every_session(tmp_path: Path) -> None:
    repo = SqliteSessionRepo(tmp_path / "s.db")
    for i in range(3):
        repo.create().append_message(user(f"m{i}"))
    assert list(tmp_path.glob("*.db")) == [tmp_path / "s.db"]
    assert repo.database.conn.execute("SELECT count(*) FROM sessions").fetchone()[0] == 3


def test_branch_read_walks_the_parent_index_not_the_session(tmp_path: Path) -> None:
    repo = SqliteSessionRepo(tmp_path / "s.db")
    session = repo.create()
    session.append_message(user("a"))
    from mcp_agent.sessions.sql.storage import BRANCH_SQL as _BRANCH_SQL

    plan = repo.database.conn.execute(
        "EXPLAIN QUERY PLAN " + _BRANCH_SQL, {"s": session.id, "leaf": session.leaf_id}
    ).fetchall()
    details = " | ".join(row[-1] for row in plan)
    assert "SEARCH e USING INDEX idx_entries_session_id_id" in details
    assert "SCAN e" not in details and "SCAN entries" not in details


def test_an_append_counts_its_parents_children_with_index_searches_only(tmp_path: Path) -> None:
    # Each append asks how many children its parent had (for leaves and branch points): a
    # scan there would make every append cost the size of its session.
    from mcp_agent.sessions.row_sql import _STEP_UP, _TREE_CHILDREN

    repo = SqliteSessionRepo(tmp_path / "s.db")
    try:
        session = repo.create()
        for text in ("a", "b", "c"):
            session.append_message(user(text))
        for sql in (_STEP_UP, _TREE_CHILDREN):
            plan = repo.database.conn.execute(
                "EXPLAIN QUERY PLAN " + sql, {"s": session.id, "p": session.leaf_id}
            ).fetchall()
            details = [row[-1] for row in plan]
            searches = [d for d in details if d.startswith("SEARCH")]
            assert searches, details
            # a search on the session alone walks all of it, as a scan would
            assert not [d for d in searches if d.endswith("(session_id=?)")], details
            assert [d for d in details if d.startswith("SCAN")] in ([], ["SCAN children"])
    finally:
        repo.close()


def reopened_as(path: Path, version: int) -> SqliteSessionRepo:
    """The database at ``path`` put back into the shape of ``version`` (1 to 4), then
    opened, and so upgraded."""
    conn = sqlite3.connect(path)
    if version <= 3:
        conn.execute("ALTER TABLE sessions DROP COLUMN incarnation")
    if version <= 2:
        conn.execute("DROP INDEX idx_entries_tree")
        conn.execute(
            "CREATE INDEX idx_entries_session_id_parent_id ON entries (session_id, parent_id)"
        )
    if version == 1:  # no figures beyond the token and message counters
        for column in (
            "roles",
            "leaf_count",
            "branch_point_count",
            "first_timestamp",
            "last_timestamp",
        ):
            conn.execute(f"ALTER TABLE sessions DROP COLUMN {column}")
    if version <= 4:  # search text as it was stored, and indexed, before CJK words
        rows = conn.execute("SELECT n, data FROM entries").fetchall()
        for n, data in rows:
            conn.execute(
                "UPDATE entries SET text = ? WHERE n = ?",
                (entry_text(entry_from_json(data)) or None, n),
            )
        conn.execute("INSERT INTO entries_fts (entries_fts) VALUES ('delete-all')")
        conn.execute("DELETE FROM fts_docs")
        conn.execute("INSERT INTO entries_fts (rowid, text) SELECT n, text FROM entries")
        conn.execute("INSERT INTO fts_docs SELECT n, session_id FROM entries")
        conn.execute("UPDATE meta SET value = (SELECT max(n) FROM entries) WHERE key LIKE 'fts%'")
    conn.execute(f"PRAGMA user_version = {version}")
    conn.commit()
    conn.close()
    repo = SqliteSessionRepo(path)
    assert repo.database.read("PRAGMA user_version")[0][0] == SCHEMA_VERSION
    return repo


def _outline_plan(repo: SqliteSessionRepo) -> str:
    plan = repo.database.conn.execute(
        "EXPLAIN QUERY PLAN SELECT id, parent_id, type FROM entries"
        " WHERE session_id = ? ORDER BY n",
        ("x",),
    ).fetchall()
    return " | ".join(row[-1] for row in plan)


def test_the_tree_is_read_from_the_tree_index_also_in_an_older_database(
    tmp_path: Path,
) -> None:
    # The tree and outline views read every entry's place in the tree: from the entry rows
    # that is the whole session's content.
    path = tmp_path / "s.db"
    repo = SqliteSessionRepo(path)
    session = repo.create()
    random_tree(session, random.Random(7), 30)
    rows = session.storage.outline()  # type: ignore[attr-defined]
    plan = _outline_plan(repo)
    assert "SEARCH entries USING COVERING INDEX idx_entries_tree (session_id=?)" in plan, plan
    repo.close()
    repo = reopened_as(path, 2)
    try:
        assert "COVERING INDEX idx_entries_tree" in _outline_plan(repo)
        indexes = repo.database.read("SELECT name FROM sqlite_master WHERE type = 'index'")
        assert ("idx_entries_session_id_parent_id",) not in indexes  # replaced, not added to
        assert repo.open(session.id).storage.outline() == rows  # type: ignore[attr-defined]
    finally:
        repo.close()


@pytest.mark.parametrize("moved", [False, True], ids=["at the leaf", "after a move"])
def test_an_append_is_one_read_one_insert_one_update_all_index_searches(
    tmp_path: Path, moved: bool
) -> None:
    # Each statement inside a durable append is a round through the driver while the write
    # lock is held: the leaf, the id check, the parent and its children are one read, and the
    # row's counters (messages by role too) one update.
    repo = SqliteSessionRepo(tmp_path / "s.db")
    try:
        session = repo.create()
        first = session.append_message(user("a"))
        session.append_message(user("b"))
        if moved:  # the new entry makes a branch point: the children count matters
            session.move_to(first)
        statements: list[str] = []
        conn = repo.database.conn
        conn.set_trace_callback(statements.append)
        try:
            session.append_message(user("c"))
        finally:
            conn.set_trace_callback(None)
        kinds = [" ".join(sql.split()[:3]).upper() for sql in statements]
        assert kinds[0] == "BEGIN IMMEDIATE" and kinds[-1] == "COMMIT", kinds
        inner = statements[1:-1]
        assert [sql.split()[0].upper() for sql in inner] == ["SELECT", "INSERT", "UPDATE"], inner
        for sql in inner:
            details = [row[-1] for row in conn.execute("EXPLAIN QUERY PLAN " + sql)]
            assert [d for d in details if d.startswith("SCAN")] in ([], ["SCAN children"]), sql
            searches = [d for d in details if d.startswith("SEARCH")]
            # a search on the session alone walks all of it, as a scan would
            assert not [d for d in searches if d.endswith("(session_id=?)")], details
        assert session.stats() == compute_stats(session.get_entries())
        assert session.stats().branch_point_count == (1 if moved else 0)
        assert session.stats().messages_by_role == {"user": 3}
    finally:
        repo.close()


def test_creating_an_empty_session_is_one_insert(tmp_path: Path) -> None:
    # A session made without a name (session_create, a run's new session) has no entries: its
    # row as inserted is the whole of it, and an update adding nothing (with an insert of no
    # rows) cost two more statements under the write lock in every such create.
    repo = SqliteSessionRepo(tmp_path / "s.db")
    try:
        repo.create()  # the schema is made
        statements: list[str] = []
        conn = repo.database.conn
        conn.set_trace_callback(statements.append)
        try:
            session = repo.create(cwd="/w", metadata={"k": 1})
        finally:
            conn.set_trace_callback(None)
        kinds = [" ".join(sql.split()[:3]).upper() for sql in statements]
        assert kinds == ["BEGIN IMMEDIATE", "INSERT INTO SESSIONS", "COMMIT"], kinds
        summary = repo.summary(session.id)
        assert (summary.name, summary.cwd, summary.leaf_id) == (None, "/w", None)
        assert (summary.entry_count, summary.message_count) == (0, 0)
        assert session.stats() == compute_stats([])
        # The row's figures are those an append starts from.
        entry_id = session.append_message(user("a"))
        assert repo.summary(session.id).leaf_id == entry_id
        assert session.stats() == compute_stats(session.get_entries())
        assert session.stats().messages_by_role == {"user": 1}
    finally:
        repo.close()


def test_a_listing_parses_no_header_it_parsed_before(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A listing shows each session's origin (a sub-agent's, from its header): the header was
    # parsed (JSON, then its model) for each listed row at every listing, though a header never
    # changes; a listing of 20 sessions was half of its Python calls.
    import mcp_agent.sessions.sql.storage as sql_storage
    from mcp_agent.sessions.entries import parse_header
    from mcp_agent.sessions.sql.repo import KEPT_HEADER_CHARS

    parsed: list[str] = []
    parse = parse_header

    def counted(data: Any, where: str = "header") -> Any:
        parsed.append(where)
        return parse(data, where)

    repo = SqliteSessionRepo(tmp_path / "s.db")
    try:
        parent = repo.create(name="parent")
        origin = {"startedBy": {"sessionId": parent.id, "runId": "r1"}}
        child = repo.create(name="child", parent_session=parent.id, metadata=origin)
        long_one = repo.create(name="long", metadata={"notes": "x" * KEPT_HEADER_CHARS})
        for n in range(20):
            repo.create(name=f"s{n}")
        monkeypatch.setattr(sql_storage, "parse_header", counted)
        first = repo.list(limit=50).items
        assert len(first) == 23
        by_id = {item.id: item for item in first}
        assert by_id[child.id].started_by == {"sessionId": parent.id, "runId": "r1"}
        assert by_id[parent.id].started_by is None
        # Each listing's origin is its own: a caller that changes it changes no other.
        by_id[child.id].started_by["runId"] = "changed"  # type: ignore[index]
        parsed.clear()
        again = repo.list(limit=50).items
        # Only the header too long to be kept is parsed again.
        assert parsed == [f"session {long_one.id} header"]
        assert {item.id: item.started_by for item in again}[child.id] == {
            "sessionId": parent.id,
            "runId": "r1",
        }
        assert [item.id for item in again] == [item.id for item in first]
    finally:
        repo.close()


def test_a_listing_checks_its_kept_hits_against_the_rows_it_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A listing with a query read its sessions' rows, then read them again (a statement of
    # its own, on a reader each write since left cold) to see whether their kept first hits
    # still hold. Given the rows it listed, the search takes the state from them: no row is
    # read again, a session changed since its hits were found is searched again, and what it
    # shows is what a repo that keeps nothing finds.
    from mcp_agent.sessions.sql.repo import SqlSessionRepo

    repo = SqliteSessionRepo(tmp_path / "s.db")
    searched: list[str] = []
    statements: list[str] = []
    first_hits, read = SqlSessionRepo._first_hits, SqlSessionRepo._read

    def counted(self: Any, session_ids: Any, words: Any, limit: int) -> Any:
        if self is repo:
            searched.extend(session_ids)
        return first_hits(self, session_ids, words, limit)

    def reading(self: Any, sql: str, params: Any) -> Any:
        if self is repo:
            statements.append(sql)
        return read(self, sql, params)

    monkeypatch.setattr(SqlSessionRepo, "_first_hits", counted)
    monkeypatch.setattr(SqlSessionRepo, "_read", reading)

    def listing() -> dict[str, Any]:
        rows = {summary.id: summary for summary in repo.list(query="apple").items}
        assert all(row.incarnation for row in rows.values())
        statements.clear()
        found = repo.search_sessions(list(rows), "apple", listed=rows)
        fresh = SqliteSessionRepo(tmp_path / "s.db")  # keeps nothing
        try:
            expected = fresh.search_sessions(list(rows), "apple")
        finally:
            fresh.close()
        shown = {
            sid: (page.total, page.next_cursor, [hit.to_json_dict(["apple"]) for hit in page.hits])
            for sid, page in found.items()
        }
        assert shown == {
            sid: (page.total, page.next_cursor, [hit.to_json_dict(["apple"]) for hit in page.hits])
            for sid, page in expected.items()
        }
        return shown

    try:
        sessions = [repo.create(name=f"s{n}") for n in range(3)]
        for session in sessions:
            for k in range(4):
                session.append_message(user(f"apple {k}"))
        first = listing()
        assert sorted(searched) == sorted(session.id for session in sessions)
        searched.clear()
        assert listing() == first
        assert searched == []
        assert not [sql for sql in statements if "FROM sessions WHERE id IN" in sql]
        sessions[0].append_message(user("apple pie"))
        changed = listing()
        assert searched == [sessions[0].id]
        assert "«apple» pie" in [hit["snippet"] for hit in changed[sessions[0].id][2]]
        assert not [sql for sql in statements if "SELECT id, incarnation" in sql]
    finally:
        repo.close()


def test_a_listing_searches_again_only_the_sessions_changed_since(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A listing with a query found each listed session's first hits in the whole text index,
    # parsed their entries and cut their snippets at every call, though a session's hits are
    # the same while its row is: about half of the listing's CPU under load. What it shows
    # is still what a repo that kept nothing finds: after an append, a leaf moved back, a
    # session deleted and made again under the same id by another process, and an append the
    # text index did not hold yet when the hits were found.
    from mcp_agent.sessions.sql.repo import SqlSessionRepo

    repo = SqliteSessionRepo(tmp_path / "s.db")
    other = SqliteSessionRepo(tmp_path / "s.db")  # another process
    searched: list[str] = []
    first_hits = SqlSessionRepo._first_hits

    def counted(self: Any, session_ids: Any, words: Any, limit: int) -> Any:
        if self is repo:
            searched.extend(session_ids)
        return first_hits(self, session_ids, words, limit)

    monkeypatch.setattr(SqlSessionRepo, "_first_hits", counted)

    def shown(found: dict[str, Any]) -> dict[str, Any]:
        return {
            sid: (page.total, page.next_cursor, [hit.to_json_dict(["apple"]) for hit in page.hits])
            for sid, page in found.items()
        }

    def listing() -> dict[str, Any]:
        ids = [summary.id for summary in repo.list(query="apple").items]
        found = shown(repo.search_sessions(ids, "apple"))
        fresh = SqliteSessionRepo(tmp_path / "s.db")  # keeps nothing
        try:
            assert found == shown(fresh.search_sessions(ids, "apple"))
        finally:
            fresh.close()
        return found

    try:
        sessions = [repo.create(name=f"s{n}") for n in range(4)]
        made = {}
        for session in sessions:
            made[session.id] = [session.append_message(user(f"apple {k}")) for k in range(4)]
        first = listing()
        assert len(first) == 4 and all(total == 4 for total, _, _ in first.values())
        searched.clear()
        assert listing() == first
        assert searched == []  # nothing changed: nothing searched again
        a, b, c, d = sessions
        a.append_message(user("apple pie"))
        b.move_to(made[b.id][1])
        listing()
        assert sorted(searched) == sorted([a.id, b.id])
        # Deleted and made again elsewhere, same id, other text: not the kept hits.
        old = other.open(c.id)
        source = tmp_path / "c.jsonl"
        source.write_text(export_text(old.header, old.get_entries(), old.leaf_id))
        source.write_text(source.read_text().replace("apple 3", "apple tart"))
        other.delete(c.id)
        other.import_jsonl(source)
        searched.clear()
        found = listing()
        assert searched == [c.id]
        assert "«apple» tart" in [hit["snippet"] for hit in found[c.id][2]]
        # An append another process made after this search brought the index up to date: its
        # hits are found without it, and not kept as the session's hits with it.
        monkeypatch.setattr(SqliteSessionRepo, "before_search", lambda self: None)
        other.open(d.id).append_message(user("apple crumble"))
        ids = [summary.id for summary in repo.list(query="apple").items]
        repo.search_sessions(ids, "apple")
        monkeypatch.undo()
        searched.clear()
        assert "«apple» crumble" in [hit["snippet"] for hit in listing()[d.id][2]]
    finally:
        other.close()
        repo.close()


def test_listing_walks_the_modified_index(tmp_path: Path) -> None:
    repo = SqliteSessionRepo(tmp_path / "s.db")
    plan = repo.database.conn.execute(
        "EXPLAIN QUERY PLAN SELECT id FROM sessions WHERE (modified, id) < ('z', 'z')"
        " ORDER BY modified DESC, id DESC LIMIT 51"
    ).fetchall()
    details = " | ".join(row[-1] for row in plan)
    assert "idx_sessions_modified_id" in details
    assert "TEMP B-TREE" not in details


def test_two_connections_see_each_others_appends(tmp_path: Path) -> None:
    first = SqliteSessionRepo(tmp_path / "s.db")
    second = SqliteSessionRepo(tmp_path / "s.db")
    a = first.create()
    b = second.open(a.id)
    x = a.append_message(user("from a"))
    assert b.leaf_id == x
    y = b.append_message(user("from b"))
    assert present(b.get_entry(y)).parent_id == x
    assert [narrow(m, UserMessage).text for m in a.build_context().messages] == [
        "from a",
        "from b",
    ]
    b.move_to(x)
    assert a.leaf_id == x


def test_an_append_built_on_a_stale_leaf_goes_onto_the_current_one(tmp_path: Path) -> None:
    first = SqliteSessionRepo(tmp_path / "s.db")
    a = first.create()
    root = a.append_message(user("root"))
    storage = SqliteSessionStorage(tmp_path / "s.db", a.id)
    seen = storage.get_leaf_id()
    assert seen == root
    newer = a.append_message(user("meanwhile, elsewhere"))
    entry = MessageEntry(
        id=storage.create_entry_id(), parent_id=seen, timestamp=iso_now(), message=user("late")
    )
    stored = storage.append_entry(entry)
    assert stored.parent_id == newer
    assert a.stats().branch_point_count == 0
    storage.close()


def test_a_session_held_open_appends_where_the_leaf_is_now(tmp_path: Path) -> None:
    # An append takes its parent from the leaf as last seen and re-reads it in its
    # transaction: what other connections did meanwhile is never forked from silently.
    first, second = SqliteSessionRepo(tmp_path / "s.db"), SqliteSessionRepo(tmp_path / "s.db")
    held = first.create()
    other = second.open(held.id)
    one = other.append_message(user("one"))
    two = other.append_message(user("two"))
    three = held.append_message(user("three"))
    assert present(held.get_entry(three)).parent_id == two
    other.move_to(one)
    four = held.append_message(user("four"))
    assert present(held.get_entry(four)).parent_id == one
    assert [narrow(m, UserMessage).text for m in other.build_context().messages] == [
        "one",
        "four",
    ]


def test_a_failed_append_leaves_nothing_behind(tmp_path: Path) -> None:
    repo = SqliteSessionRepo(tmp_path / "s.db")
    session = repo.create()
    session.append_message(user("a"))
    before = session.stats()
    entry = MessageEntry(
        id="abcdef01", parent_id="00000000", timestamp=iso_now(), message=user("orphan")
    )
    with pytest.raises(SessionError) as error:
        session.storage.append_entry(entry)
    assert error.value.code == "invalid_entry"
    duplicate = MessageEntry(
        id=present(session.leaf_id),
        parent_id=session.leaf_id,
        timestamp=iso_now(),
        message=user("dup"),
    )
    with pytest.raises(SessionError) as error:
        session.storage.append_entry(duplicate)
    assert error.value.code == "conflict"
    assert session.stats() == before
    assert repo.list(query="orphan").items == []


def test_appending_to_a_deleted_session_fails(tmp_path: Path) -> None:
    repo = SqliteSessionRepo(tmp_path / "s.db")
    session = repo.create()
    repo.delete(session.id)
    with pytest.raises(SessionError) as error:
        session.append_message(user("x"))
    assert error.value.code == "not_found"


def test_search_accepts_any_text(tmp_path: Path) -> None:
    repo = SqliteSessionRepo(tmp_path / "s.db")
    repo.create().append_message(user('he said "NEAR(x y)" AND OR * -col:1'))
    # FTS5's syntax is never met: text with words is searched for them, and text without
    # any is refused, saying so (an empty one is no search).
    for query in ["NEAR(", "AND", "col:1", "x OR", "é", ""]:
        repo.list(query=query)
    for query in ['"', "*", "(", "-"]:
        with pytest.raises(SessionError, match="has no words"):
            repo.list(query=query)
    assert len(repo.list(query='"near').items) == 1


def test_a_damaged_row_is_reported(tmp_path: Path) -> None:
    repo = SqliteSessionRepo(tmp_path / "s.db")
    session = repo.create()
    entry_id = session.append_message(user("a"))
    conn = sqlite3.connect(tmp_path / "s.db")
    conn.execute('UPDATE entries SET data = \'{"type":"message"}\' WHERE id = ?', (entry_id,))
    conn.commit()
    conn.close()
    with pytest.raises(SessionError) as error:
        SqliteSessionRepo(tmp_path / "s.db").open(session.id).build_context()
    assert error.value.code == "corrupt" and entry_id in str(error.value)


APPENDS_PER_PROCESS = 60


def append_many(path: str, session_id: str, tag: str) -> None:
    repo = SqliteSessionRepo(path)
    session = repo.open(session_id)
    for i in range(APPENDS_PER_PROCESS):
        session.append_message(user(f"{tag}-{i}"))
    repo.close()


def test_processes_appending_to_one_file_lose_nothing(tmp_path: Path) -> None:
    path = str(tmp_path / "s.db")
    repo = SqliteSessionRepo(path)
    session = repo.create()
    context = multiprocessing.get_context("spawn")
    workers = [
        context.Process(target=append_many, args=(path, session.id, f"p{n}")) for n in range(3)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=120)
        assert worker.exitcode == 0  # a "database is locked" error would fail the worker
    entries = session.get_entries()
    assert len(entries) == 3 * APPENDS_PER_PROCESS
    stats = session.stats()
    assert stats.message_count == 3 * APPENDS_PER_PROCESS
    # every append went onto the leaf as it was: one line, no accidental forks
    assert stats.leaf_count == 1 and stats.branch_point_count == 0
    texts = [narrow(m, UserMessage).text for m in session.build_context().messages]
    assert len(texts) == 3 * APPENDS_PER_PROCESS
    for tag in ("p0", "p1", "p2"):
        assert [t for t in texts if t.startswith(tag)] == [
            f"{tag}-{i}" for i in range(APPENDS_PER_PROCESS)
        ]
    summary = repo.list().items[0]
    assert summary.entry_count == 3 * APPENDS_PER_PROCESS


def fts_is_consistent(repo: SqliteSessionRepo) -> None:
    repo.database.index_pending_text()
    conn = repo.database.conn
    conn.execute("INSERT INTO entries_fts (entries_fts) VALUES ('integrity-check')")
    indexed = conn.execute("SELECT n, session_id FROM fts_docs ORDER BY n").fetchall()
    expected = conn.execute(
        "SELECT n, session_id FROM entries WHERE text IS NOT NULL ORDER BY n"
    ).fetchall()
    assert indexed == expected


def test_an_older_database_finds_chinese_and_japanese_words_once_upgraded(
    tmp_path: Path,
) -> None:
    """Version 4 stored and indexed a run of CJK text as one word: opened by this version, its
    texts are split as new ones are and its index is built again, at the next search."""
    path = tmp_path / "s.db"
    repo = SqliteSessionRepo(path)
    weather = repo.create()
    weather.append_message(user("東京の天気は晴れ, café"))
    plain = repo.create()
    plain.append_message(user("plain words"))
    repo.close()
    repo = reopened_as(path, 4)
    try:
        assert [s.id for s in repo.list(query="天気").items] == [weather.id]
        assert [s.id for s in repo.list(query="cafe").items] == [weather.id]
        assert [s.id for s in repo.list(query="plain").items] == [plain.id]
        fts_is_consistent(repo)
        repo.delete(weather.id)  # its index rows go with the text they were made of
        fts_is_consistent(repo)
    finally:
        repo.close()


def test_search_index_stays_exact_across_appends_and_deletes(tmp_path: Path) -> None:
    repo = SqliteSessionRepo(tmp_path / "s.db")
    old = repo.create()
    old.append_message(user("zebra one"))
    assert [s.id for s in repo.list(query="zebra").items] == [old.id]  # indexed now
    newest = repo.create()
    newest.append_message(user("zebra two"))
    newest.append_message(user("giraffe"))
    assert {s.id for s in repo.list(query="zebra").items} == {old.id, newest.id}
    # deleting the newest rows lets SQLite hand their rowids out again: they must be indexed
    repo.delete(newest.id)
    again = repo.create()
    again.append_message(user("okapi"))
    assert [s.id for s in repo.list(query="okapi").items] == [again.id]
    assert repo.list(query="giraffe").items == []
    fts_is_consistent(repo)
    # an unindexed session deleted before any search leaves the index untouched
    quiet = repo.create()
    quiet.append_message(user("lemur"))
    repo.delete(quiet.id)
    assert repo.list(query="lemur").items == []
    fts_is_consistent(repo)


def test_the_search_index_catches_up_in_batches_with_appends_in_between(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Indexing what a large import left pending takes the write lock one batch at a time:
    another connection's appends go in between instead of waiting for all of it (and are the
    next search's to index)."""
    repo = SqliteSessionRepo(tmp_path / "s.db")
    other = SqliteSessionRepo(tmp_path / "s.db")
    try:
        session = repo.create()
        for n in range(25):
            session.append_message(user(f"pangolin {n}"))
        pending = repo.database.conn.execute("SELECT max(n) FROM entries").fetchone()[0]
        batches: list[int] = []
        real_write = repo.database.write

        def write(work, derived=False):
            more = real_write(work, derived)
            batches.append(len(batches))
            if len(batches) == 1:  # between two batches the lock is free
                other.open(session.id).append_message(user("tapir"))
            return more

        monkeypatch.setattr(repo.database, "write", write)
        repo.database.index_pending_text(batch_rows=10)
        monkeypatch.undo()
        assert len(batches) == -(-pending // 10) >= 3  # one per 10 positions
        upto = repo.database.conn.execute(
            "SELECT value FROM meta WHERE key = 'fts_indexed_upto'"
        ).fetchone()[0]
        assert upto == pending  # the append in between is left to the next search
        assert len(repo.list(query="pangolin").items) == 1
        assert [s.id for s in repo.list(query="tapir").items] == [session.id]
        fts_is_consistent(repo)
    finally:
        other.close()
        repo.close()


def test_search_sees_appends_from_another_connection(tmp_path: Path) -> None:
    first = SqliteSessionRepo(tmp_path / "s.db")
    second = SqliteSessionRepo(tmp_path / "s.db")
    session = first.create()
    assert second.list(query="walrus").items == []
    session.append_message(user("walrus"))
    assert [s.id for s in second.list(query="walrus").items] == [session.id]


def test_a_file_that_is_not_a_database_leaves_no_connection_open(
    tmp_path: Path, monkeypatch
) -> None:
    path = tmp_path / "notes.db"
    path.write_text("not a database\n" * 100)
    opened: list[sqlite3.Connection] = []
    real_connect = sqlite3.connect

    def connect(*args, **kwargs):
        opened.append(real_connect(*args, **kwargs))
        return opened[-1]

    monkeypatch.setattr(sqlite3, "connect", connect)
    with pytest.raises(SessionError, match="is not a SQLite database"):  # said, not a traceback
        SqliteSessionRepo(path)
    assert len(opened) == 1
    with pytest.raises(sqlite3.ProgrammingError, match="closed"):
        opened[0].execute("SELECT 1")
    assert path.read_text() == "not a database\n" * 100


@pytest.mark.parametrize("seed", range(40))
def test_the_context_read_from_part_of_the_branch_is_the_whole_branchs(
    tmp_path: Path, seed: int
) -> None:
    """SQLite builds a context from only what it needs of a long branch (the newest compaction,
    what it keeps, the newest settings before them); random sessions with compactions, model,
    thinking level and tool changes, branch switches and retained tails must give exactly the
    context of the whole branch."""
    rng = random.Random(seed)
    session = SqliteSessionRepo(tmp_path / "s.db").create()
    for step in range(rng.randint(5, 60)):
        branch = session.get_branch()
        messages = [e for e in branch if isinstance(e, MessageEntry)]
        match rng.choice(["user"] * 4 + ["assistant"] * 4 + ["setting"] * 3 + ["other"] * 3):
            case "user":
                session.append_message(user(f"question {step}"))
            case "assistant":
                session.append_message(
                    AssistantMessage(
                        content=[TextContent(text=f"answer {step}")],
                        provider=rng.choice(["openai", "anthropic"]),
                        model=rng.choice(["m1", "m2"]),
                    )
                )
            case "setting":
                match rng.randrange(3):
                    case 0:
                        session.append_thinking_level_change(rng.choice(["low", "high"]))
                    case 1:
                        session.append_model_change("openai", f"model-{step}")
                    case _:
                        session.append_active_tools_change(rng.sample(["a", "b", "c"], 2))
            case _ if messages and rng.random() < 0.5:
                kept = rng.choice([None, rng.choice(messages).id])
                tail: list[BaseMessage] | None = (
                    [user("kept in the tail")] if rng.random() < 0.2 else None
                )
                session.append_compaction(f"summary {step}", kept, 100, retained_tail=tail)
            case _ if branch and rng.random() < 0.5:
                session.move_to(rng.choice(branch).id)
            case _:
                session.append_custom("note", {"step": step})
        whole = build_session_context(session.get_branch())
        assert session.build_context().to_json_dict() == whole.to_json_dict()


def test_a_message_row_without_a_role_still_counts_for_the_model(tmp_path: Path) -> None:
    repo = SqliteSessionRepo(tmp_path / "s.db")
    session = repo.create()
    session.append_model_change("openai", "older")
    answer = session.append_message(
        AssistantMessage(content=[TextContent(text="a")], provider="anthropic", model="newer")
    )
    kept = session.append_message(user("go on"))
    session.append_compaction("summary", kept, 10)
    with sqlite3.connect(tmp_path / "s.db") as db:  # as an older writer may have left it
        db.execute("UPDATE entries SET role = NULL WHERE id = ?", (answer,))
    reopened = SqliteSessionRepo(tmp_path / "s.db").open(session.id)
    assert reopened.build_context().model == {"provider": "anthropic", "modelId": "newer"}
    whole = build_session_context(reopened.get_branch())
    assert reopened.build_context().to_json_dict() == whole.to_json_dict()


def test_a_session_kept_open_says_when_it_was_deleted(tmp_path: Path) -> None:
    ours, theirs = SqliteSessionRepo(tmp_path / "s.db"), SqliteSessionRepo(tmp_path / "s.db")
    session = ours.create()
    session.append_message(user("hi"))
    again = ours.open(session.id)  # kept open by the repo, parsed entries and all
    assert again.storage is session.storage
    theirs.delete(session.id)  # another process
    with pytest.raises(SessionError) as deleted:
        ours.open(session.id).build_context()
    assert deleted.value.code == "not_found"
    with pytest.raises(SessionError):
        ours.open(session.id).append_message(user("lost?"))
    assert not ours.exists(session.id)
    # Deleting through the repo itself forgets the open session at once.
    other = ours.create()
    ours.delete(other.id)
    with pytest.raises(SessionError) as gone:
        ours.open(other.id)
    assert gone.value.code == "not_found"


def user_said(text: str) -> dict[str, object]:
    """A user's message in the form Session.append_entry takes (pi's, without the ids)."""
    return {"type": "message", "message": {"role": "user", "content": text, "timestamp": 1}}


def test_an_append_to_a_session_kept_open_reads_nothing_before_its_transaction(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Its transaction reads the row anyway: a read on another connection first (whether the
    # session is still there) cost a durable append over stdio about 2% more.
    repo = SqliteSessionRepo(tmp_path / "s.db")
    try:
        session = repo.create()
        first = session.append_message(user("a"))
        reads: list[str] = []
        read = repo.database.read

        def noted(sql: str, params: Any = ()) -> list[Any]:
            reads.append(sql)
            return read(sql, params)

        monkeypatch.setattr(repo.database, "read", noted)
        second = repo.append_entry(session.id, user_said("b"))
        assert reads == []
        monkeypatch.undo()
        stored = repo.open_read(session.id)
        assert stored.leaf_id == second
        assert [e.id for e in stored.get_branch()] == [first, second]
    finally:
        repo.close()


def test_an_append_to_a_session_deleted_or_made_again_meanwhile(tmp_path: Path) -> None:
    with (
        SqliteSessionRepo(tmp_path / "s.db") as ours,
        SqliteSessionRepo(tmp_path / "s.db") as theirs,  # another process
    ):
        gone = ours.create()
        gone.append_message(user("a"))
        theirs.delete(gone.id)
        with pytest.raises(SessionError) as deleted:
            ours.append_entry(gone.id, user_said("lost?"))
        assert deleted.value.code == "not_found" and "was deleted" in deleted.value.message

        kept = ours.create(cwd="/orig")
        kept.append_message(user("original"))
        exported = theirs.export_jsonl(kept.id)
        theirs.delete(kept.id)
        edited = tmp_path / "edited.jsonl"
        edited.write_text(exported.replace("/orig", "/edited"))
        assert theirs.import_jsonl(edited).id == kept.id
        theirs.open(kept.id).append_message(user("theirs"))
        # The Session held from before writes nothing into the session made again...
        with pytest.raises(SessionError) as stale:
            kept.append_message(user("into another session?"))
        assert stale.value.code == "not_found"
        # ...while the repo appends to the session there now, at its leaf.
        leaf = theirs.open_read(kept.id).leaf_id
        added = ours.append_entry(kept.id, user_said("b"))
        now = ours.open_read(kept.id)
        assert now.header.cwd == "/edited"
        assert [e.id for e in now.get_branch()][-2:] == [leaf, added]
        assert len(now.get_entries()) == 3


def test_reads_do_not_wait_for_another_writer_and_a_write_ends_busy(tmp_path: Path) -> None:
    """A reader has a connection of its own (WAL): another connection holding the write lock
    delays only writes, and a write that outwaits the busy timeout says so clearly."""
    path = tmp_path / "s.db"
    repo = SqliteSessionRepo(path, busy_timeout=0.3)
    session = repo.create(name="held")
    session.append_message(user("before the lock"))
    before = [e.id for e in session.get_branch()]
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        # Each of these would raise "busy" after 0.3 s if reads queued behind the writer.
        reopened = repo.open(session.id)
        assert [e.id for e in reopened.get_branch()] == before
        assert repo.list().items[0].id == session.id
        assert repo.summary(session.id).message_count == 1
        with pytest.raises(SessionError) as raised:
            session.append_message(user("while locked"))
        assert raised.value.code == "busy"
        assert "locked by another writer" in str(raised.value)
        assert "nothing was written" in str(raised.value)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert [e.id for e in repo.open(session.id).get_branch()] == before
    second = session.append_message(user("after the lock"))
    assert [e.id for e in repo.open(session.id).get_branch()] == [*before, second]
    repo.close()


def test_a_full_disk_is_a_clear_error_and_writes_nothing(tmp_path: Path) -> None:
    """SQLITE_FULL (here: the page limit reached, as a full disk reports it) comes back as a
    storage error that says the disk is full, and the session is as it was."""
    repo = SqliteSessionRepo(tmp_path / "s.db")
    session = repo.create()
    session.append_message(user("small"))
    kept = [e.id for e in session.get_branch()]
    pages = repo.database.conn.execute("PRAGMA page_count").fetchone()[0]
    repo.database.conn.execute(f"PRAGMA max_page_count = {pages}")
    with pytest.raises(SessionError) as raised:
        session.append_message(user("x" * 200_000))
    assert raised.value.code == "storage"
    assert "full" in str(raised.value)
    assert "nothing was written" in str(raised.value)
    assert [e.id for e in repo.open(session.id).get_branch()] == kept
    assert repo.summary(session.id).message_count == 1
    repo.close()


def test_read_connections_are_pooled_bounded_and_closed_with_the_database(
    tmp_path: Path,
) -> None:
    import threading

    from mcp_agent.sessions.sqlite.database import IDLE_READERS

    repo = SqliteSessionRepo(tmp_path / "s.db")
    session = repo.create()
    session.append_message(user("hello"))
    database = repo.database
    # Reads at once each get a connection of their own.
    held = [database._borrow_reader() for _ in range(IDLE_READERS + 3)]
    assert len(set(map(id, held))) == IDLE_READERS + 3
    for conn in held:
        database._return_reader(conn)
    # Beyond the idle bound they are closed as they come back; threads that come and go
    # leave no connection behind.
    assert len(database._reader_conns) == IDLE_READERS
    for _ in range(20):
        thread = threading.Thread(target=repo.list)
        thread.start()
        thread.join()
    assert len(database._reader_conns) <= IDLE_READERS
    readers = list(database._reader_conns)
    repo.close()
    for conn in [*readers, *held]:
        with pytest.raises(sqlite3.ProgrammingError, match="closed"):
            conn.execute("SELECT 1")


# --- statistics live in the sessions row ------------------------------------------------------


def random_tree(session: Session, rng: random.Random, steps: int) -> None:
    """Appends of every role, labels, renames, leaf moves and moves with a summary."""
    for step in range(steps):
        ids: list[str | None] = [e.id for e in session.get_entries() if e.type != "leaf"]
        roll = rng.random()
        if ids and roll < 0.2:
            session.move_to(rng.choice([*ids, None]))
        elif ids and roll < 0.25:
            session.move_to(rng.choice(ids), summary={"summary": f"left {step}"})
        elif ids and roll < 0.3:
            session.append_label(str(rng.choice(ids)), f"mark {step}")
        elif roll < 0.35:
            session.set_name(f"name {step}")
        elif roll < 0.7:
            session.append_message(user(f"q{step}"))
        else:
            session.append_message(
                AssistantMessage(
                    content=[TextContent(text=f"a{step}")],
                    usage=Usage(input=step, output=1, total_tokens=step + 1),
                    timestamp=step,
                )
            )


@pytest.mark.parametrize("seed", range(4))
def test_stats_kept_in_the_row_match_a_count_of_every_entry(tmp_path: Path, seed: int) -> None:
    repo = SqliteSessionRepo(tmp_path / "s.db")
    try:
        session = repo.create()
        rng = random.Random(seed)
        for _ in range(6):
            random_tree(session, rng, 15)
            assert session.stats() == compute_stats(session.get_entries())
        assert session.stats().branch_point_count > 0
    finally:
        repo.close()


@pytest.mark.parametrize("seed", range(3))
def test_a_session_stored_whole_counts_its_row_as_a_recount_does(tmp_path: Path, seed: int) -> None:
    # A new session stored with its entries (a copy, a fork) has its row's figures worked
    # out from the entries in hand; a recount from the stored rows finds the same.
    from mcp_agent.sessions.entries import new_header
    from mcp_agent.sessions.sqlite.storage import SqliteSessionStorage

    repo = SqliteSessionRepo(tmp_path / "s.db")
    try:
        source = repo.create()
        random_tree(source, random.Random(seed), 60)
        entries = source.get_entries()
        copy = SqliteSessionStorage.create(repo.database, new_header(), entries)
        counted = compute_stats(entries)
        assert counted.branch_point_count > 0 and counted.leaf_count > 1
        assert copy.get_session_stats() == counted == source.stats()
        copy._recount_row()
        assert copy.get_session_stats() == counted
    finally:
        repo.close()


def test_stats_are_read_from_the_row_not_the_entries(tmp_path: Path) -> None:
    repo = SqliteSessionRepo(tmp_path / "s.db")
    try:
        session = repo.create()
        random_tree(session, random.Random(7), 60)
        expected = compute_stats(session.get_entries())
        imported = repo.import_session(repo.export_jsonl(session.id), copy_if_taken=True).session
        assert imported.stats() == expected  # counted once, when it was imported
        forked = repo.fork(session.id, position="at")
        assert forked.stats() == compute_stats(forked.get_entries())
    finally:
        repo.close()
    conn = sqlite3.connect(tmp_path / "s.db")
    conn.execute("DELETE FROM entries")
    conn.commit()
    conn.close()
    repo = SqliteSessionRepo(tmp_path / "s.db")
    try:
        assert repo.open(session.id).stats() == expected
        assert repo.open(imported.id).stats() == expected
    finally:
        repo.close()


def test_a_database_made_before_the_row_kept_stats_counts_them_once(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    repo = SqliteSessionRepo(path)
    session = repo.create()
    random_tree(session, random.Random(3), 40)
    expected = compute_stats(session.get_entries())
    repo.close()
    repo = reopened_as(path, 1)
    try:
        old = repo.open(session.id)
        # appends before the first count leave the figures to it
        old.append_message(user("after the upgrade"))
        assert old.stats() == compute_stats(old.get_entries())
        assert old.stats().entry_count == expected.entry_count + 1
        random_tree(old, random.Random(4), 30)
        assert old.stats() == compute_stats(old.get_entries())
        new = repo.create()
        random_tree(new, random.Random(5), 20)
        assert new.stats() == compute_stats(new.get_entries())
    finally:
        repo.close()


def test_writes_waiting_while_one_commits_share_the_next_commit(tmp_path: Path) -> None:
    """Group commit: writes that queue up behind the write lock go into one transaction (one
    commit, one fsync), each in a savepoint of its own: the one that fails rolls back only
    itself and gets its own error, and every caller returns only once its write is
    committed (another connection sees it)."""
    path = tmp_path / "s.db"
    database = SqliteDatabase(path)
    database.write(lambda conn: conn.execute("CREATE TABLE t (x INTEGER)"))
    commits: list[str] = []
    database.conn.set_trace_callback(lambda sql: commits.append(sql) if sql == "COMMIT" else None)
    outcomes: dict[int, object] = {}

    def write(x: int) -> None:
        def work(conn: sqlite3.Connection) -> int:
            conn.execute("INSERT INTO t VALUES (?)", (x,))
            if x == 3:
                raise SessionError("invalid_argument", "three is refused")
            return x * 10

        try:
            outcomes[x] = database.write(work)
        except SessionError as error:
            outcomes[x] = error.message
            return
        with sqlite3.connect(path) as other:  # committed before write returned
            seen = other.execute("SELECT count(*) FROM t WHERE x = ?", (x,)).fetchone()[0]
        assert seen == 1

    writers = [threading.Thread(target=write, args=(x,)) for x in range(6)]
    with database.lock:  # as a commit in progress holds it
        for writer in writers:
            writer.start()
        poll(lambda: len(database._writes) == len(writers) or None, "the writes to queue up")
    for writer in writers:
        writer.join()
    assert commits == ["COMMIT"]
    assert outcomes == {0: 0, 1: 10, 2: 20, 3: "three is refused", 4: 40, 5: 50}
    with sqlite3.connect(path) as other:
        rows = sorted(x for (x,) in other.execute("SELECT x FROM t"))
    assert rows == [0, 1, 2, 4, 5]
    database.close()


class _Stop(BaseException):
    """Not an Exception: fails the whole group it is in (as an interrupt would)."""


def test_a_group_that_fails_whole_fails_each_write_and_the_next_writes_commit(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.db"
    database = SqliteDatabase(path)
    database.write(lambda conn: conn.execute("CREATE TABLE t (x INTEGER)"))
    outcomes: dict[int, str] = {}

    def write(x: int) -> None:
        def work(conn: sqlite3.Connection) -> int:
            conn.execute("INSERT INTO t VALUES (?)", (x,))
            if x == 2:
                raise _Stop
            return x

        try:
            outcomes[x] = f"wrote {database.write(work)}"
        except BaseException as error:
            outcomes[x] = type(error).__name__

    writers = [threading.Thread(target=write, args=(x,)) for x in range(5)]
    with database.lock:
        for writer in writers:
            writer.start()
        poll(lambda: len(database._writes) == len(writers) or None, "the writes to queue up")
    for writer in writers:
        writer.join(30)
        assert not writer.is_alive()  # no write left waiting for a group that failed
    assert outcomes == dict.fromkeys(range(5), "_Stop")
    assert database.read("SELECT count(*) FROM t") == [(0,)]
    # The writers after it lead their own commits.
    later = [threading.Thread(target=write, args=(x,)) for x in range(10, 16)]
    for writer in later:
        writer.start()
    for writer in later:
        writer.join(30)
    assert {x: outcomes[x] for x in range(10, 16)} == {x: f"wrote {x}" for x in range(10, 16)}
    assert database.read("SELECT count(*) FROM t") == [(6,)]
    database.close()


def _queued(database: SqliteDatabase, count: int) -> bool | None:
    return len(database._writes) == count or None


def test_derived_writes_alone_commit_unsynced_and_every_other_write_synced(
    tmp_path: Path,
) -> None:
    """At durability full, a transaction of derived writes only (the text index) is
    committed without a sync to the disk; any other write, and a group holding one (with
    the derived writes in it), is synced, also right after an unsynced one."""
    database = SqliteDatabase(tmp_path / "s.db")
    database.write(lambda conn: conn.execute("CREATE TABLE t (x INTEGER)"))
    seen: dict[str, int] = {}

    def write(name: str, derived: bool) -> None:
        def work(conn: sqlite3.Connection) -> None:
            conn.execute("INSERT INTO t VALUES (1)")
            seen[name] = conn.execute("PRAGMA synchronous").fetchone()[0]

        database.write(work, derived=derived)

    def write_queued(queued: list[tuple[str, bool]]) -> None:
        # The first writer leads, and waits for the lock: the rest queue up behind it.
        writers = [threading.Thread(target=write, args=each) for each in queued]
        with database.lock:
            for count, writer in enumerate(writers, 1):
                writer.start()
                poll(partial(_queued, database, count), "the write to queue up")
        for writer in writers:
            writer.join(30)
            assert not writer.is_alive()

    write("alone, derived", True)
    write("alone, after it", False)
    assert seen == {"alone, derived": 1, "alone, after it": 2}  # NORMAL, then FULL
    queued = [("d0", True), ("d1", True), ("w2", False), ("d3", True)]
    write_queued(queued)
    assert {name: seen[name] for name, _ in queued} == dict.fromkeys(["d0", "d1", "w2", "d3"], 2)
    queued = [("d4", True), ("d5", True)]
    write_queued(queued)
    assert {name: seen[name] for name, _ in queued} == {"d4": 1, "d5": 1}
    assert database.read("SELECT count(*) FROM t") == [(8,)]
    database.close()
    normal = SqliteDatabase(tmp_path / "n.db", durability="normal")
    normal.write(lambda conn: conn.execute("CREATE TABLE t (x INTEGER)"))
    seen.clear()
    database = normal
    write("derived at normal", True)
    write("at normal", False)
    assert seen == {"derived at normal": 1, "at normal": 1}
    normal.close()


def test_appends_from_many_threads_at_once_stay_one_chain(tmp_path: Path) -> None:
    """Appends to one session from many threads, committed in groups, each go onto the leaf
    the one before left: one linear branch, every entry counted."""
    repo = SqliteSessionRepo(tmp_path / "s.db")
    session_id = repo.create(name="busy").id
    repo.open(session_id).append_message(user("first"))

    def append(n: int) -> None:
        for k in range(10):
            repo.open(session_id).append_message(user(f"thread {n} message {k}"))

    threads = [threading.Thread(target=append, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    session = repo.open(session_id)
    branch = session.get_branch()
    assert len(branch) == 1 + 1 + 80  # the name, the first message, the appends
    assert [e.parent_id for e in branch[1:]] == [e.id for e in branch[:-1]]
    assert repo.summary(session_id).message_count == 81
    repo.close()


def test_a_writer_interrupted_when_handed_the_commit_hands_it_on(tmp_path: Path) -> None:
    from mcp_agent.sessions.sqlite.database import _Write

    database = SqliteDatabase(tmp_path / "s.db")
    database.write(lambda conn: conn.execute("CREATE TABLE t (x INTEGER)"))
    interrupted = _Write(lambda conn: None)
    interrupted.ready = threading.Event()  # as every write that waits for another's commit
    with database._writes_lock:  # as a committer leaves it: waiting, and told to commit next
        database._writes.append(interrupted)
        database._leading = True
    interrupted.ready.set()
    database._abandon(interrupted)
    assert interrupted not in database._writes
    writer = threading.Thread(
        target=database.write, args=(lambda conn: conn.execute("INSERT INTO t VALUES (1)"),)
    )
    writer.start()
    writer.join(30)
    assert not writer.is_alive()  # a later write leads its own commit
    assert database.read("SELECT count(*) FROM t") == [(1,)]
    database.close()


def test_ctrl_c_is_heard_on_the_main_thread_while_another_process_holds_the_lock(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """A write on the main thread (the command line's `sessions rename`) waited for the lock
    inside SQLite, in C, where Ctrl-C cannot reach it: for the whole busy timeout."""
    import _thread

    # Ctrl-C as a terminal's foreground process hears it: a suite started in the background
    # of a shell without job control inherits SIGINT ignored, and interrupt_main then does
    # nothing (the write waited out the other writer and the test failed).
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    request.addfinalizer(lambda: signal.signal(signal.SIGINT, previous))
    database = SqliteDatabase(tmp_path / "s.db", busy_timeout=10)
    database.write(lambda conn: conn.execute("CREATE TABLE t (x INTEGER)"))
    other = sqlite3.connect(tmp_path / "s.db", isolation_level=None, check_same_thread=False)
    other.execute("BEGIN EXCLUSIVE")  # another process's writer
    released = threading.Event()

    def release() -> None:  # long after the Ctrl-C: heard only once SQLite stops waiting
        other.execute("ROLLBACK")
        released.set()

    letting_go = threading.Timer(8, release)
    letting_go.start()
    threading.Timer(0.5, _thread.interrupt_main).start()
    with pytest.raises(KeyboardInterrupt):
        database.write(lambda conn: conn.execute("INSERT INTO t VALUES (1)"))
    assert not released.is_set()  # heard while the other writer still held the lock
    letting_go.cancel()
    release()
    database.write(lambda conn: conn.execute("INSERT INTO t VALUES (2)"))
    # A worker thread waits in SQLite in its longer slices again.
    worker = threading.Thread(
        target=database.write, args=(lambda conn: conn.execute("INSERT INTO t VALUES (3)"),)
    )
    worker.start()
    worker.join(30)
    assert database.conn.execute("PRAGMA busy_timeout").fetchone() == (WORKER_THREAD_WAIT_S * 1000,)
    assert database.read("SELECT x FROM t ORDER BY x") == [(2,), (3,)]
    other.close()
    database.close()


def test_a_log_exported_in_pieces_is_read_by_position_across_interleaved_sessions(
    tmp_path: Path,
) -> None:
    repo = SqliteSessionRepo(tmp_path / "s.db")
    one, two = repo.create(), repo.create()
    for n in range(7):  # the two sessions' rows alternate in the table
        one.append_message(user(f"one {n}"))
        two.append_message(user(f"two {n}"))
    for session in (one, two):
        parsed = export_text(session.header, session.get_entries(), session.leaf_id)
        pieces = list(repo.export_chunks(session.id, 2))
        assert "".join(pieces) == parsed
        assert [piece.count("\n") for piece in pieces] == [1, 2, 2, 2, 1]
    # Deleted while its file is written out, and its rowids handed out again to another
    # session's appends: an error, not a file that ends early or holds the other's lines.
    newest = repo.create()
    for n in range(8):  # the newest rows of the table: theirs are the rowids given out next
        newest.append_message(user(f"newest {n}"))
    chunks = repo.export_chunks(newest.id, 2)
    next(chunks)
    next(chunks)
    repo.delete(newest.id)
    for n in range(8):
        one.append_message(user(f"secret {n}"))
    with pytest.raises(SessionError) as error:
        list(chunks)
    assert error.value.code == "not_found" and "deleted" in str(error.value)
    repo.close()


def test_an_import_committed_by_another_writers_thread_reads_its_file_there(
    tmp_path: Path,
) -> None:
    # Group commit runs each waiting write on the thread that commits the group: an import,
    # whose file is read as it is written, must not be tied to the thread that began it.
    repo = SqliteSessionRepo(tmp_path / "s.db")
    source = repo.create()
    for n in range(5):
        source.append_message(user(f"m{n}"))
    text = repo.export_jsonl(source.id).replace(source.id, "0" * 8 + source.id[8:])
    blocker = sqlite3.connect(tmp_path / "s.db", isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")  # every writer of the repo waits until it commits
    outcomes: dict[str, object] = {}

    def run(name: str, action: Callable[[], object]) -> None:
        try:
            outcomes[name] = action()
        except Exception as error:
            outcomes[name] = error

    leader = threading.Thread(target=run, args=("create", repo.create))
    leader.start()
    poll(lambda: repo.database._leading, "the first writer never took the lead")
    follower = threading.Thread(target=run, args=("import", lambda: repo.import_jsonl(text)))
    follower.start()
    poll(lambda: len(repo.database._writes) == 2, "the import never queued behind the first")
    blocker.execute("COMMIT")  # both go into one transaction, on the leader's thread
    blocker.close()
    leader.join(60)
    follower.join(60)
    imported = outcomes["import"]
    assert not isinstance(imported, Exception), imported
    assert len(repo.open(imported.id).get_entries()) == 5  # type: ignore[attr-defined]
    repo.close()


def check_a_session_made_again_is_read_afresh(
    first: SessionRepo, second: SessionRepo, tmp_path: Path
) -> None:
    """Two repos on one database (two processes, or replicas): a session the first keeps open
    is deleted by the second and imported again under its id, edited. The first reads the new
    one whole: header, entries and context (before: its kept header, parsed entries and
    context were served, mixed with the new rows)."""
    from mcp_agent.messages import UserMessage, content_text

    session = first.create(cwd="/orig")
    for n in range(3):
        session.append_message(UserMessage(content=f"original text {n}"))
    kept = first.open(session.id)

    def said(session: Session) -> list[str]:
        return [content_text(getattr(m, "content", "")) for m in session.build_context().messages]

    assert said(kept)[-1] == "original text 2"
    exported = second.export_jsonl(session.id)
    second.delete(session.id)
    edited = tmp_path / "edited.jsonl"
    edited.write_text(exported.replace("/orig", "/edited").replace("original", "edited"))
    assert second.import_jsonl(edited).id == session.id
    again = first.open(session.id)
    assert said(again) == ["edited text 0", "edited text 1", "edited text 2"]
    assert again.header.cwd == "/edited"
    assert "/orig" not in first.export_jsonl(session.id)
    assert [e.type for e in again.get_branch()] == [e.type for e in kept.get_branch()]


def test_a_session_made_again_by_another_process_is_read_afresh(tmp_path: Path) -> None:
    with (
        SqliteSessionRepo(tmp_path / "s.db") as first,
        SqliteSessionRepo(tmp_path / "s.db") as second,
    ):
        check_a_session_made_again_is_read_afresh(first, second, tmp_path)


def many_hits(path: Path, count: int) -> tuple[SqliteSessionRepo, str]:
    """A session of ``count`` messages, each holding "entry", every third also "apple"."""
    header = {"type": "session", "version": 3, "id": "0190a000-0000-7000-8000-000000000001"}
    lines = [json.dumps(header | {"timestamp": iso_now()})]
    parent = None
    for i in range(count):
        text = f"entry {i}" + (" apple" if i % 3 == 0 else "") + " and more words"
        entry_id = f"{i:08x}"
        message = {"role": "user", "content": text, "timestamp": 1}
        lines.append(
            json.dumps(
                {"type": "message", "id": entry_id, "parentId": parent, "timestamp": iso_now()}
                | {"message": message}
            )
        )
        parent = entry_id
    source = path.parent / "many.jsonl"
    source.write_text("\n".join(lines) + "\n")
    repo = SqliteSessionRepo(path, durability="normal")
    return repo, repo.import_jsonl(source).id


def test_a_page_of_a_search_scores_no_more_than_it_must(tmp_path: Path) -> None:
    """A page of a session's hits ranked every hit with a window over them all and read each
    one's row for its position: 0.3 s a page of a session with 60,000 hits, about 80 SQLite
    instructions a hit. A page now finds its hits best first with no window, from the text
    index alone (a query of several words first from the entries that hold them all), and
    counts them: a few instructions a hit."""
    repo, session_id = many_hits(tmp_path / "s.db", 3000)
    steps = [0]

    def step() -> int:
        steps[0] += 1
        return 0

    try:
        for query, total in (("entry", 3000), ("entry apple", 3000), ("apple", 1000)):
            page = repo.search_session(session_id, query, limit=10)  # the text indexed
            steps[0] = 0
            for conn in repo.database._reader_conns:
                conn.set_progress_handler(step, 100)
            try:
                page = repo.search_session(session_id, query, limit=10)
                after = repo.search_session(session_id, query, limit=10, cursor=page.next_cursor)
            finally:
                for conn in repo.database._reader_conns:
                    conn.set_progress_handler(None, 100)
            assert page.total == after.total == total
            assert len(page.hits) == len(after.hits) == 10
            per_hit = steps[0] * 100 / total / 2
            assert per_hit < 20, (query, per_hit)
    finally:
        repo.close()


def test_a_listing_finds_the_hits_of_its_sessions_in_a_query_or_two(tmp_path: Path) -> None:
    """session_list with a query searched each listed session on its own, and each search read
    every hit of the words in every session: a listing of 40 sessions of 5,000 entries took 2
    to 5 s. The hits of a listing's sessions are found SESSIONS_PER_SEARCH at a time."""
    repo = SqliteSessionRepo(tmp_path / "s.db")
    try:
        made = []
        for i in range(SESSIONS_PER_SEARCH + 4):
            session = repo.create()
            for j in range(4):
                session.append_message(user(f"apple {i} {j}" + (" water" if j == 1 else "")))
            made.append(session.id)
        ids = [summary.id for summary in repo.list(query="apple water", limit=100).items]
        assert sorted(ids) == sorted(made)
        statements: list[str] = []
        repo.list(query="apple")  # the text indexed, a reader connection open
        for conn in repo.database._reader_conns:
            conn.set_trace_callback(statements.append)
        try:
            found = listed_hits(repo, [*ids, "0" * 36], "apple water")
        finally:
            for conn in repo.database._reader_conns:
                conn.set_trace_callback(None)
        searches = [sql for sql in statements if sql.startswith("SELECT") and "MATCH" in sql]
        assert len(searches) == 2, searches
        for session_id in ids:
            assert found[session_id] == repo.search_session(session_id, "apple water", 3)
        assert found["0" * 36].hits == [] and found["0" * 36].total == 0
    finally:
        repo.close()


def test_a_listing_of_20_sessions_with_a_query_reads_the_text_index_twice(tmp_path: Path) -> None:
    """session_list with a query and a limit of 20 read the text index three times: for its
    sessions, then for the hits of the first 16 and of the other 4, each query reading every
    hit of the words in the whole index (the most CPU of any call under load, measured). A
    page's sessions have their hits found in one query; the listing of a word this common
    reads it twice itself (how common, then the newest sessions walked)."""
    from mcp_agent.server.search_hits import listed_with_hits
    from mcp_agent.server.session_tools import session_wire

    repo = SqliteSessionRepo(tmp_path / "s.db")
    try:
        for i in range(30):
            repo.create().append_message(user(f"question {i}"))
        repo.list(query="question")  # the text indexed, a reader connection open
        statements: list[str] = []
        for conn in repo.database._reader_conns:
            conn.set_trace_callback(statements.append)
        try:
            page = repo.list(query="question", limit=20)
            listed = len([sql for sql in statements if "MATCH" in sql])
            words = query_words("question")
            items, page = listed_with_hits(repo, page, "question", words, session_wire)
        finally:
            for conn in repo.database._reader_conns:
                conn.set_trace_callback(None)
        assert listed == 2 and len([sql for sql in statements if "MATCH" in sql]) == 3
        assert len(items) == 20 and page.next_cursor is not None
        for item in items:
            listed = json.loads(item)
            assert listed["hitCount"] == 1 and listed["hits"][0]["snippet"].startswith("«question»")
    finally:
        repo.close()


def test_a_listings_hits_of_a_session_made_again_elsewhere_are_the_new_ones(
    tmp_path: Path,
) -> None:
    """A session deleted and imported again by another process, with the same ids: a repo
    that had it open shows the hits of what it holds now, not what it parsed before."""
    path = tmp_path / "s.db"
    repo, session_id = many_hits(path, 3)
    other = SqliteSessionRepo(path)
    try:
        first = listed_hits(repo, [session_id], "entry")[session_id]
        assert "«entry» 2 and more words" in snippet_of(first.hits[0], "entry")
        other.delete(session_id)
        source = tmp_path / "many.jsonl"
        source.write_text(source.read_text().replace("and more words", "then other words"))
        other.import_jsonl(source)
        again = listed_hits(repo, [session_id], "entry")[session_id]
        assert [hit.entry.id for hit in again.hits] == [hit.entry.id for hit in first.hits]
        assert "«entry» 2 then other words" in snippet_of(again.hits[0], "entry")
    finally:
        repo.close()
        other.close()


def snippet_of(hit: EntryHit, query: str) -> str:
    return snippet(entry_text(hit.entry), query_words(query))


def test_a_listing_walking_the_newest_sessions_first_answers_as_the_text_index_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A search looks at the newest sessions one by one first, at most so many of so many
    entries, then finds the rest in the text index: every page, cursor and row is the one the
    text index alone gives, wherever a page starts or ends, a long session stops the walk, or
    the walk covers every session left."""
    from mcp_agent.sessions.sql import repo as sql_repo

    repo = SqliteSessionRepo(tmp_path / "s.db")
    rng = random.Random(5)
    for index in range(40):
        session = repo.create(name=f"session {index}")
        # Words in every session, most, few and one; a few long sessions stop a walk.
        words = ["every"] + (["most"] if index % 4 else []) + (["few"] if index % 9 == 0 else [])
        words += ["one"] if index == 17 else []
        for turn in range(30 if index in (5, 33) else rng.randint(1, 3)):
            session.append_message(user(" ".join([*words, f"turn{turn}"])))
    monkeypatch.setattr(sql_repo, "WALK_ENTRIES", 20)

    def pages(query: str, limit: int) -> list[tuple[list[Any], str | None]]:
        found, cursor = [], None
        while True:
            page = repo.list(query=query, limit=limit, cursor=cursor)
            found.append(([item.to_json_dict() for item in page.items], page.next_cursor))
            if (cursor := page.next_cursor) is None:
                return found

    queries = ["every", "most", "few", "one", "none", "every most", "most few", "turn2 most"]
    walked = {}
    for walk in (1, 8, 256):
        monkeypatch.setattr(sql_repo, "WALK_SESSIONS", walk)
        for query in queries:
            for limit in (1, 3, 50):
                walked[walk, query, limit] = pages(query, limit)
    monkeypatch.setattr(SqliteSessionRepo, "walk_condition", lambda self, param: None)
    for (walk, query, limit), found in walked.items():
        assert found == pages(query, limit), (walk, query, limit)
    assert [len(found[0][0]) for found in (walked[8, q, 50] for q in queries)] == [
        40,
        30,
        5,
        1,
        0,
        30,
        3,
        8,
    ]
    repo.close()


def test_a_listing_whose_walk_filled_no_page_misses_no_session_appended_to_meanwhile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An append to an older session between the walk of the newest sessions and the read of
    the rest moves it from the rest into the walked part: it is still listed (it was in no
    page, and the listing said it was whole)."""
    from mcp_agent.sessions.sql import repo as sql_repo

    repo = SqliteSessionRepo(tmp_path / "s.db")
    try:
        ids = []
        for index in range(6):
            session = repo.create(name=f"session {index}")
            session.append_message(user(f"apple {index}"))
            ids.append(session.id)
        monkeypatch.setattr(sql_repo, "WALK_SESSIONS", 2)
        walk = SqliteSessionRepo._walk_newest
        walked: list[int] = []

        def racing(self: SqliteSessionRepo, *args: Any) -> Any:
            found = walk(self, *args)
            if not walked:  # another client appends to the oldest session now
                walked.append(1)
                repo.open(ids[0]).append_message(user("apple again"))
            return found

        monkeypatch.setattr(SqliteSessionRepo, "_walk_newest", racing)
        listed, cursor = [], None
        while True:
            page = repo.list(query="apple", limit=5, cursor=cursor)
            listed += [item.id for item in page.items]
            if (cursor := page.next_cursor) is None:
                break
        assert walked and sorted(listed) == sorted(ids) and listed[0] == ids[0]
    finally:
        repo.close()
