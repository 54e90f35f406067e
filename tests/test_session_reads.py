"""Pages read from stored JSON (SQLite, PostgreSQL) show what pages of the parsed entries show:
the same entries, tree nodes, context messages and settings, export lines and cursors, page by
page."""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import TextContent as McpTextContent
from mcp_support import call, call_error, make_server
from narrow import narrow, present

from mcp_agent.messages import AssistantMessage, TextContent, UserMessage
from mcp_agent.server import session_reads, session_tools
from mcp_agent.server.paging import ANSWER_BYTES, newest_page, parse_cursor
from mcp_agent.server.session_reads import (
    context_page,
    entries_page,
    export_page,
    stored,
    tree_page,
    view_entries,
)
from mcp_agent.sessions import Session, SqliteSessionRepo
from mcp_agent.sessions.memory import InMemorySessionStorage
from mcp_agent.sessions.sql import repo as sql_repo
from mcp_agent.sessions.sql.storage import SqlSessionStorage, kept_branches
from mcp_agent.sessions.sqlite.storage import SqliteSessionStorage


def answer(text: str) -> AssistantMessage:
    return AssistantMessage(
        content=[TextContent(text=text)], api="a", provider="p", model=f"m-{text}"
    )


def busy_session(session: Session, compacted: bool) -> None:
    """Every kind of entry: settings, labels, a leaf move and a branch summary, custom entries,
    an entry too large for a page, and (``compacted``) a compaction keeping part of the path."""
    first = session.append_message(UserMessage(content="first question"))
    session.append_model_change("p", "m0")
    session.append_thinking_level_change("high")
    kept = session.append_message(answer("one"))
    session.append_active_tools_change(["read", "write"])
    session.append_label(first, "start")
    side = session.append_message(UserMessage(content="a side branch"))
    session.move_to(kept, {"summary": "tried a side branch"})
    session.append_custom("note", {"snake_key": 1})
    session.append_custom_message("hint", "remember this", display=False)
    if compacted:
        session.append_compaction("what happened so far", kept, 1234)
    session.append_message(UserMessage(content='quotes "q", a \\, a NUL \x00, é and \u2028'))
    for n in range(12):
        session.append_message(UserMessage(content=f"question {n} " + "x" * 300))
        session.append_message(answer(f"answer {n}"))
    session.append_message(UserMessage(content="y" * (ANSWER_BYTES // 2 + 10)))
    session.move_to(side)
    session.move_to(session.get_branch()[-2].id)  # back again: two leaf moves in the log
    session.set_name("busy")
    session.append_message(answer("last"))


@pytest.fixture(
    params=[("sqlite", False), ("sqlite", True), ("postgres", False), ("postgres", True)],
    ids=["sqlite-plain", "sqlite-compacted", "postgres-plain", "postgres-compacted"],
)
def sessions(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Session, Session]]:
    """The same session twice: in a SQL database (read from stored JSON), and in memory."""
    backend, compacted = request.param
    repo: Any
    if backend == "postgres":
        from mcp_agent.sessions.postgres import PostgresSessionRepo

        repo = PostgresSessionRepo(request.getfixturevalue("postgres_url"), max_connections=2)
    else:
        repo = SqliteSessionRepo(tmp_path / "s.db")
    session = repo.create()
    busy_session(session, compacted)
    again = repo.open(session.id)
    copy = Session(InMemorySessionStorage(again.header, again.get_entries()))
    assert stored(again) is not None and stored(copy) is None
    assert copy.leaf_id == again.leaf_id
    yield again, copy
    repo.close()


def every_page(read: Any, limit: int | None) -> list[tuple[list[Any], int, str | None]]:
    """Every page from the newest back, as (items, total, next cursor)."""
    pages, cursor = [], None
    while True:
        items, page = read(cursor, limit)
        pages.append(([json.loads(item) for item in items], page.total, page.next_cursor))
        if page.next_cursor is None:
            return pages
        cursor = page.next_cursor


@pytest.mark.parametrize("limit", [None, 1, 3, 50])
def test_entry_pages_match_the_parsed_entries(
    sessions: tuple[Session, Session], limit: int | None
) -> None:
    ours, theirs = sessions
    for view in ("branch", "entries"):

        def reader(session: Session, view: str = view) -> Any:
            return lambda cursor, most: entries_page(
                session.id, *view_entries(session, view), cursor, most
            )

        assert every_page(reader(ours), limit) == every_page(reader(theirs), limit), view

    def as_session_get(session: Session, walk: bool) -> Any:
        # The newest page read with the branch: walked afresh (a session just opened), or
        # from the branch kept in outline.
        def read(cursor: str | None, most: int | None) -> Any:
            if walk:
                kept_branches.forget(session.storage)
            newest = most if cursor is None else 0
            return entries_page(
                session.id, *view_entries(session, "branch", None, newest), cursor, most
            )

        return read

    expected = every_page(reader(theirs, "branch"), limit)
    for walk in (True, False):
        assert every_page(as_session_get(ours, walk), limit) == expected
    # A page shows the entry too large for it as a stub; asked for whole, it is whole.
    paged = [entry for items, _, _ in every_page(reader(ours), 50) for entry in items]
    stubs = [entry for entry in paged if "omitted" in entry]
    assert len(stubs) == 1 and stubs[0]["role"] == "user"
    whole = every_page(reader(ours), None)[0][0]
    assert [entry["id"] for entry in whole] == [entry["id"] for entry in paged]
    assert not any("omitted" in entry for entry in whole)


@pytest.mark.parametrize("limit", [None, 2, 50])
def test_tree_pages_match_the_flat_tree(
    sessions: tuple[Session, Session], limit: int | None
) -> None:
    ours, theirs = sessions
    mine = every_page(lambda cursor, most: tree_page(ours, cursor, most), limit)
    assert mine == every_page(lambda cursor, most: tree_page(theirs, cursor, most), limit)
    nodes = [node for page in mine for node in page[0]]
    assert any(node["label"] == "start" for node in nodes)
    assert all(node["type"] != "leaf" for node in nodes)


def branching_pi_file(path: Path) -> Path:
    """A pi file with no leaf move: siblings appended out of time order, a child before its
    parent, an orphan, a label, a long chain, and new branches from old entries at its end."""
    header = {"type": "session", "version": 3, "id": "0199aaaa-0000-7000-8000-0000000000b2"}
    header.update(timestamp="2026-01-15T08:30:00.000Z", cwd="/p")

    def user(entry_id: str, parent: str | None, text: str, second: int) -> dict[str, Any]:
        message = {"role": "user", "content": text, "timestamp": 1}
        return {
            "type": "message",
            "id": entry_id,
            "parentId": parent,
            "timestamp": f"2026-01-15T08:{30 + second // 60:02d}:{second % 60:02d}.000Z",
            "message": message,
        }

    rows = [
        header,
        user("c0000002", "r0000001", "a child before its parent", 9),
        user("r0000001", None, "the root", 1),
        user("c0000003", "r0000001", "a child after it, older", 2),
        user("o0000004", "gone0000", "an orphan", 3),
        {
            "type": "label",
            "id": "l0000005",
            "parentId": "c0000003",
            "timestamp": "2026-01-15T08:30:04.000Z",
            "targetId": "c0000002",
            "label": "early",
        },
    ]
    parent = "l0000005"
    for n in range(30):
        rows.append(user(f"k{n:07d}", parent, f"chain {n}", 10 + n))
        parent = f"k{n:07d}"
    rows += [
        user("b0000001", "k0000003", "a late branch, newer", 80),
        user("b0000002", "k0000003", "a late branch, older", 70),
        user("b0000003", "r0000001", "one more child of the root", 5),
        user("b0000004", "gone0001", "a late orphan", 90),
        user("b0000005", parent, "the leaf", 95),
    ]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def counted_outlines(storage: SqlSessionStorage, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """A list that grows by one at each arrangement of a whole tree (``outline``) by storage
    of ``storage``'s kind."""
    reads: list[int] = []
    outline_of = type(storage).outline

    def counted(self: Any) -> Any:
        reads.append(1)
        return outline_of(self)

    monkeypatch.setattr(type(storage), "outline", counted)
    return reads


@pytest.mark.parametrize("span", [2, 4096])
@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_a_tree_views_first_newest_page_is_made_from_the_newest_entries_alone(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
    backend: str,
    span: int,
) -> None:
    """The first newest page of a session's tree view (no leaf move in it) is made from its
    last entries, their children and the branch, without the whole tree (a fresh server took
    half a second for 100,000 entries); it, and every page after, is the page of the whole
    tree, whatever the page's size; the page asked for again is made from the whole tree."""
    from mcp_agent.sessions.sqlite import storage as sqlite_storage

    monkeypatch.setattr(sqlite_storage, "NEWEST_SPAN", span)  # its rows found first, or not
    repo: Any
    if backend == "postgres":
        from mcp_agent.sessions.postgres import PostgresSessionRepo

        repo = PostgresSessionRepo(request.getfixturevalue("postgres_url"), max_connections=2)
    else:
        repo = SqliteSessionRepo(tmp_path / "s.db")
    try:
        ours = repo.import_session(branching_pi_file(tmp_path / "b.jsonl")).session
        repo.create().append_message(UserMessage(content="another session's, after"))
        theirs = Session(InMemorySessionStorage(ours.header, ours.get_entries()))
        storage = narrow(ours.storage, SqlSessionStorage)
        reads = counted_outlines(storage, monkeypatch)
        for limit in (1, 2, 7, 50):
            session_reads.kept_trees.forget(storage)
            session_reads.first_trees.clear()
            first = tree_page(ours, None, limit)
            assert not reads
            again = tree_page(ours, None, limit)
            assert len(reads) == 1
            reads.clear()
            expected = every_page(lambda cursor, most: tree_page(theirs, cursor, most), limit)
            assert [
                ([json.loads(item) for item in first[0]], first[1].total, first[1].next_cursor)
            ] == expected[:1]
            assert again == first
            assert every_page(lambda cursor, most: tree_page(ours, cursor, most), limit) == expected
        nodes = {node["id"]: node for node in expected[0][0]}
        assert nodes["b0000005"]["onBranch"] and nodes["b0000004"]["parentId"] is None
        # A session with a leaf move has its tree arranged whole from the first page.
        ours.move_to("k0000001")
        session_reads.first_trees.clear()
        tree_page(ours, None, 5)
        assert len(reads) == 1
    finally:
        repo.close()


def test_a_tree_views_first_page_read_while_an_entry_is_appended_pages_every_entry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another client's append between the session's count and its newest rows: the first
    page is not made of rows the count does not cover (its places were off by one, and the
    pages after it never showed one entry)."""
    repo = SqliteSessionRepo(tmp_path / "s.db")
    try:
        session = repo.create()
        for number in range(12):
            session.append_message(UserMessage(content=f"m{number}"))
        newest_rows = SqliteSessionStorage._newest_rows
        appended: list[str] = []

        def racing(self: SqliteSessionStorage, count: int) -> Any:
            if not appended:
                other = repo.open(session.id)
                appended.append(other.append_message(UserMessage(content="meanwhile")))
            return newest_rows(self, count)

        monkeypatch.setattr(SqliteSessionStorage, "_newest_rows", racing)
        session_reads.first_trees.clear()
        reader = repo.open_read(session.id)
        pages = every_page(lambda cursor, most: tree_page(reader, cursor, most), 5)
        assert appended
        seen = [node["id"] for items, _, _ in pages for node in items]
        every = [entry.id for entry in repo.open_read(session.id).get_entries()]
        assert sorted(seen) == sorted(every) and len(every) == 13
        assert {total for _, total, _ in pages} == {13}
    finally:
        repo.close()


def test_tree_pages_are_arranged_once_and_again_after_each_change(
    sessions: tuple[Session, Session], monkeypatch: pytest.MonkeyPatch
) -> None:
    ours, _ = sessions
    storage = narrow(ours.storage, SqlSessionStorage)
    reads = counted_outlines(storage, monkeypatch)

    def same_pages() -> None:
        # The stored session's pages against the tree of its entries as they are now.
        theirs = Session(InMemorySessionStorage(ours.header, ours.get_entries()))
        mine = every_page(lambda cursor, most: tree_page(ours, cursor, most), 3)
        assert mine == every_page(lambda cursor, most: tree_page(theirs, cursor, most), 3)

    session_reads.kept_trees.forget(storage)
    same_pages()
    assert len(reads) == 1  # every page after the first from the tree kept
    # Each kind of change shows on the next page read: an entry, a label, a leaf move, and a
    # branch grown elsewhere with the leaf back where it was.
    first = ours.get_entries()[0].id

    def side_branch() -> None:
        leaf = ours.leaf_id
        ours.move_to(first)
        ours.append_message(UserMessage(content="a new branch"))
        ours.move_to(leaf)

    for change in (
        lambda: ours.append_message(UserMessage(content="one more")),
        lambda: ours.append_label(first, "again"),
        lambda: ours.move_to(first),
        side_branch,
    ):
        leaf_before = ours.leaf_id
        change()
        before = len(reads)
        same_pages()
        assert len(reads) == before + 1
    assert ours.leaf_id == leaf_before  # the last change kept the leaf


@pytest.mark.parametrize("limit", [None, 1, 4, 50])
def test_context_pages_match_the_built_context(
    sessions: tuple[Session, Session], limit: int | None
) -> None:
    ours, theirs = sessions
    assert every_page(lambda c, m: _context(ours, c, m), limit) == every_page(
        lambda c, m: _context(theirs, c, m), limit
    )
    built = theirs.build_context()
    found = context_page(ours, None, None)
    assert [json.loads(m) for m in found.messages] == built.to_json_dict()["messages"]
    assert (found.context.model, found.context.thinking_level) == (built.model, "high")
    assert found.context.active_tool_names == built.active_tool_names == ["read", "write"]


@pytest.mark.parametrize("compacted", [False, True])
def test_an_answer_naming_no_model_leaves_the_model_of_the_context_as_it_was(
    tmp_path: Path, compacted: bool
) -> None:
    """An assistant message appended over MCP names no model: the context's model stays the
    one set before it (a model change, an older answer), as the context built from the
    entries says; the stored read took the newest answer's and said null."""
    nameless = AssistantMessage(content=[TextContent(text="appended")], api="a")
    with SqliteSessionRepo(tmp_path / "s.db") as repo:
        session = repo.create()
        session.append_message(UserMessage(content="q"))
        session.append_model_change("p", "m-changed")
        session.append_message(UserMessage(content="q2"))
        kept = session.append_message(nameless)
        if compacted:
            session.append_compaction("so far", kept, 10)
        session.append_message(UserMessage(content="q3"))
        session.append_message(nameless)
        copy = Session(InMemorySessionStorage(session.header, session.get_entries()))
        found = context_page(repo.open_read(session.id), None, None)
    built = copy.build_context()
    assert found.context.model == built.model == {"provider": "p", "modelId": "m-changed"}


@pytest.mark.parametrize("compacted", [False, True])
@pytest.mark.parametrize(
    ("limit", "walked"),
    [(None, session_reads.WALKED_MESSAGES), (None, 5), (1, 5), (4, 5), (50, 5)],
)
def test_a_first_context_read_finds_its_messages_in_the_walk(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    limit: int | None,
    compacted: bool,
    walked: int,
) -> None:
    """A session's first context read (no branch of it walked yet) takes the messages of the
    branch's newest entries after its newest compaction from the walk that finds the branch,
    and reads the others (those the compaction keeps) by id: the pages are those of the
    built context either way. (``walked`` bounds a whole context's walk; a page's is its
    limit.)"""
    monkeypatch.setattr(session_reads, "WALKED_MESSAGES", walked)
    by_id: list[str] = []
    real = SqliteSessionStorage.stored_messages

    def counted(self: SqliteSessionStorage, ids: Any) -> dict[str, str]:
        by_id.extend(ids)
        return real(self, ids)

    monkeypatch.setattr(SqliteSessionStorage, "stored_messages", counted)
    from_walk: dict[str, str] = {}
    walk = SqliteSessionStorage.context_messages

    def walking(self: SqliteSessionStorage, leaf_id: Any, newest: int) -> Any:
        rows, messages = walk(self, leaf_id, newest)
        from_walk.update(messages)
        return rows, messages

    monkeypatch.setattr(SqliteSessionStorage, "context_messages", walking)
    with SqliteSessionRepo(tmp_path / "s.db") as repo:
        session = repo.create()
        before: list[str] = []
        if compacted:  # the branch read: messages, a compaction keeping three, messages
            before = [session.append_message(UserMessage(content=f"b {n}")) for n in range(6)]
            session.append_compaction("so far", before[3], 100)
            for n in range(6):
                session.append_message(answer(f"after {n}"))
        else:
            busy_session(session, compacted=False)
        built = Session(InMemorySessionStorage(session.header, session.get_entries()))
    with SqliteSessionRepo(tmp_path / "s.db") as repo:
        ours = repo.open(session.id)
        storage = stored(ours)
        assert storage is not None and kept_branches.get(storage, present(ours.leaf_id)) is None
        first = _context(ours, None, limit)
        # The newest message came with the walk, and none was read twice.
        assert from_walk and json.loads(first[0][-1]) == json.loads(
            from_walk[present(ours.leaf_id)]
        )
        assert not set(by_id) & set(from_walk)
        branch = [entry.id for entry in built.get_branch()]
        compaction = max(
            (i for i, entry in enumerate(built.get_branch()) if entry.type == "compaction"),
            default=-1,
        )
        # Nothing from before the newest compaction came with the walk.
        assert all(branch.index(entry_id) > compaction for entry_id in from_walk)
        if limit is None and walked > len(branch):
            # The whole branch was walked: every message after the compaction came with it,
            # the ones it keeps were read by id.
            assert by_id == (before[3:] if compacted else [])
        elif limit is None:
            assert by_id  # the older ones were read by id
        pages = every_page(lambda c, m: _context(ours, c, m), limit)
    assert pages == every_page(lambda c, m: _context(built, c, m), limit)
    assert [json.loads(m) for m in first[0]] == pages[0][0]


def test_a_first_context_read_takes_its_model_from_the_walked_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The model of a context is most often its newest assistant message's: a first read parsed
    that message's entry whole for two of its fields, building the entry's and the message's
    models (milliseconds the first time in a server: a fifth of its first whole context read of
    a 1,000-message branch), while the walk had read the message's JSON already."""
    parsed: list[str] = []
    real = SqlSessionStorage.parsed_entries

    def counted(self: SqlSessionStorage, ids: Any) -> Any:
        parsed.extend(ids)
        return real(self, ids)

    monkeypatch.setattr(SqlSessionStorage, "parsed_entries", counted)
    with SqliteSessionRepo(tmp_path / "s.db") as repo:
        session = repo.create()
        busy_session(session, compacted=False)
        built = Session(InMemorySessionStorage(session.header, session.get_entries()))
    types = {entry.id: entry.type for entry in built.get_entries()}
    parsed.clear()
    with SqliteSessionRepo(tmp_path / "s.db") as repo:
        found = context_page(repo.open_read(session.id), None, None)
    # The settings and custom entries were parsed (they are not messages), no message.
    assert parsed and [types[entry_id] for entry_id in parsed if types[entry_id] == "message"] == []
    expected = built.build_context()
    assert found.context.model == expected.model == {"provider": "p", "modelId": "m-last"}
    assert (found.context.thinking_level, found.context.active_tool_names) == (
        "high",
        ["read", "write"],
    )


def test_a_whole_context_read_again_is_not_read_from_storage_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads: list[int] = []
    real = SqliteSessionStorage.stored_messages

    def counted(self: SqliteSessionStorage, ids: Any) -> dict[str, str]:
        reads.append(len(ids))
        return real(self, ids)

    monkeypatch.setattr(SqliteSessionStorage, "stored_messages", counted)
    with SqliteSessionRepo(tmp_path / "s.db") as repo:
        session = repo.create()
        busy_session(session, compacted=True)
        for n in range(10):
            session.append_message(UserMessage(content=f"more {n}"))
        first = context_page(session, None, None).messages
        assert reads and context_page(session, None, None).messages == first
        assert context_page(session, None, 3).messages == first[-3:]  # a page reads its own
        assert len(reads) == 2 and reads[1] == 3
        session.append_message(UserMessage(content="one more"))  # a new leaf: read anew
        again = context_page(session, None, None).messages
        assert again[:-1] == first and json.loads(again[-1])["content"] == "one more"
        assert len(reads) == 3
        # A context longer than what is kept is read each time.
        monkeypatch.setattr(session_reads.kept_context_texts, "largest", 100)
        session.append_message(UserMessage(content="and another"))
        for _ in range(2):
            assert context_page(session, None, None).messages[:-1] == again
        assert len(reads) == 5


def _context(session: Session, cursor: str | None, limit: int | None) -> Any:
    found = context_page(session, cursor, limit)
    return found.messages, found.page


@pytest.mark.parametrize("limit", [None, 1, 7])
def test_export_pages_match_the_exported_file(
    sessions: tuple[Session, Session], limit: int | None
) -> None:
    ours, theirs = sessions

    def lines(session: Session) -> list[str]:
        found: list[str] = []
        cursor = None
        while True:
            page = export_page(session, cursor, limit)
            assert page.start == len(found)
            if page.omitted is not None:
                # A line too large for a page is alone on its page, left out, and named.
                assert limit is not None and not page.lines and page.end == page.start + 1
                assert f"line {page.start + 1} " in page.omitted, page.omitted
                found.append(f"omitted: {page.start}")
            else:
                assert page.lines and page.end == page.start + len(page.lines)
                found += page.lines
            if page.end == page.count:
                return found
            cursor = f"from:{page.end}"

    mine, whole = lines(ours), lines(theirs)
    assert len(mine) == len(whole)
    # A final leaf move, when the log needs one, is made afresh (a new id and time) each time.
    last = json.loads(mine[-1])
    moved = last.get("customType") == "mcp-agent-sessions.leaf"
    same = len(whole) - moved
    assert mine[:same] == whole[:same]
    assert (last["data"]["targetId"] if moved else last["id"]) == ours.leaf_id


def test_an_export_page_of_a_session_in_memory_writes_only_its_lines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each page of a JSONL (or memory) session wrote the whole file and kept a page of it:
    0.34 s a page at 50,000 entries, and a paged export of it quadratic."""
    from mcp_agent.sessions import JsonlSessionRepo, entries, pi

    session = JsonlSessionRepo(tmp_path).create()
    for n in range(300):
        session.append_message(UserMessage(content=f"question {n}"))
    session.move_to(None)  # the file ends on a leaf move
    written: list[str] = []
    real = entries.file_json

    def counted(entry: Any) -> str:
        written.append(entry.type)
        return real(entry)

    monkeypatch.setattr(pi, "file_json", counted)
    page = export_page(session, "from:100", 10)
    assert page.start == 100 and len(page.lines) == 10 and len(written) == 10
    last = export_page(session, f"from:{page.count - 2}", 10)
    assert [json.loads(line)["type"] for line in last.lines] == ["message", "custom"]


def test_an_export_read_while_another_writer_appends_ends_on_the_newest_entry(
    tmp_path: Path,
) -> None:
    with (
        SqliteSessionRepo(tmp_path / "s.db") as repo,
        SqliteSessionRepo(tmp_path / "s.db") as other,
    ):
        session = repo.create()
        for n in range(3):
            session.append_message(UserMessage(content=f"question {n}"))
        read = repo.open_read(session.id)  # the request's leaf is read here
        newest = other.open(session.id).append_message(UserMessage(content="from elsewhere"))
        page = export_page(read, None, None)
        assert len(page.lines) == page.count
        entries = [json.loads(line) for line in page.lines[1:]]
        # The file resumes on the newest entry: it holds it and does not end moving the leaf
        # back to the one read before the append.
        assert entries[-1]["id"] == newest
        assert [entry["type"] for entry in entries].count("leaf") == 0


def test_reads_end_on_an_entry_stored_as_its_own_parent(tmp_path: Path) -> None:
    # An import before the check refused it could store an entry as its own parent: reads walk
    # the branch up to it as to a root, instead of walking the loop until memory runs out.
    path = tmp_path / "s.db"
    with SqliteSessionRepo(path) as repo:
        session = repo.create()
        first = session.append_message(UserMessage(content="first"))
        session.append_message(UserMessage(content="second"))
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE entries SET parent_id = id WHERE id = ?", (first,))
    with SqliteSessionRepo(path) as repo:
        read = repo.open_read(session.id)
        messages = context_page(read, None, None).messages
        assert [json.loads(m)["content"] for m in messages] == ["first", "second"]
        total, _ = view_entries(read, "branch")
        assert total == 2
        assert session_reads.outline_rows(read, None)[0]["id"] == first


# --- over MCP ---------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_answers_are_their_structured_content_as_compact_text(tmp_path: Path) -> None:
    async with Client(make_server(tmp_path)) as client:
        sid = (await call(client, "session_create"))["id"]
        for n in range(3):
            entry = {"type": "message", "role": "user", "content": f"é {n}\nline"}
            await call(client, "session_append", session_id=sid, entry=entry)
        schemas = {tool.name: tool.output_schema for tool in (await client.list_tools()).tools}
        calls: list[tuple[str, dict[str, Any], str | None]] = [
            ("session_get", {"view": "branch"}, "entries"),
            ("session_get", {"view": "entries"}, "entries"),
            ("session_get", {"view": "tree"}, "nodes"),
            ("session_context", {}, "messages"),
            ("session_export", {}, None),
        ]
        for name, arguments, listed in calls:
            result = await client.call_tool(name, {"session_id": sid, **arguments})
            assert not result.is_error, result.content
            text = narrow(result.content[0], McpTextContent).text
            assert json.loads(text) == result.structured_content, name
            assert text == json.dumps(json.loads(text), ensure_ascii=False, separators=(",", ":"))
            if listed is not None:
                assert len(result.structured_content[listed]) == 3
                # A long list is checked by its client in one step, not item by item.
                shape = (schemas[name] or {})["properties"][listed]
                assert "array" in shape["type"] and "items" not in shape and shape["description"]


@pytest.mark.anyio
async def test_a_whole_context_asked_for_again_is_the_answer_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A client resuming (session_context with limit 0) again at the same leaf gets the answer
    made the first time, unchanged; a page is made each time; a change makes a new answer."""
    made: list[int | None] = []
    real = session_reads.context_page

    def counted(session: Session, cursor: str | None, limit: int | None, **options: Any) -> Any:
        made.append(limit)
        return real(session, cursor, limit, **options)

    monkeypatch.setattr(session_tools, "context_page", counted)
    async with Client(make_server(tmp_path)) as client:
        sid = (await call(client, "session_create"))["id"]
        others = (await call(client, "session_create"))["id"]
        for n in range(3):
            for session_id in (sid, others):
                entry = {"type": "message", "role": "user", "content": f"{session_id} {n}"}
                await call(client, "session_append", session_id=session_id, entry=entry)

        async def whole(session_id: str) -> Any:
            result = await client.call_tool(
                "session_context", {"session_id": session_id, "limit": 0}
            )
            assert not result.is_error, result.content
            return narrow(result.content[0], McpTextContent).text, result.structured_content

        first = await whole(sid)
        assert [m["content"] for m in first[1]["messages"]] == [f"{sid} {n}" for n in range(3)]
        assert await whole(sid) == first and made == [None]
        # Another session's whole context is its own.
        theirs = [m["content"] for m in (await whole(others))[1]["messages"]]
        assert theirs == [f"{others} {n}" for n in range(3)]
        assert len(made) == 2
        await call(client, "session_context", session_id=sid, limit=1)
        newest = await call(client, "session_context", session_id=sid, limit=1)
        # All of it from a cursor is not the whole context: made each time too.
        cursor = newest["nextCursor"]
        older = await call(client, "session_context", session_id=sid, limit=0, cursor=cursor)
        assert [m["content"] for m in older["messages"]] == [f"{sid} {n}" for n in range(2)]
        assert made[2:] == [1, 1, None]
        # A new leaf: a new answer, then that one kept.
        leaf = (await call(client, "session_get", session_id=sid))["leafId"]
        await call(
            client,
            "session_append",
            session_id=sid,
            entry={"type": "message", "role": "user", "content": "later"},
        )
        after = await whole(sid)
        assert after[1]["messages"][:-1] == first[1]["messages"]
        assert after[1]["messages"][-1]["content"] == "later" and after[1]["total"] == 4
        assert await whole(sid) == after and made[5:] == [None]
        # A setting appended (the leaf moves): the answer says it.
        change = {"type": "model_change", "provider": "p", "modelId": "m"}
        await call(client, "session_append", session_id=sid, entry=change)
        assert (await whole(sid))[1]["model"] == {"provider": "p", "modelId": "m"}
        # Moved back, the first leaf's answer again (made anew or kept: the same).
        await call(client, "session_move_to", session_id=sid, entry_id=leaf)
        assert await whole(sid) == first


# --- statements per read ----------------------------------------------------------------------


def _pi_answer(n: int) -> dict[str, Any]:
    message = answer(f"answer {n}").to_json_dict()
    return {"type": "pi", "json": json.dumps({"type": "message", "message": message})}


@pytest.mark.anyio
async def test_a_read_reads_the_sessions_row_once_and_sees_other_writers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sqlite_statements: list[str]
) -> None:
    """Each statement a worker runs costs a round through the driver (and, under load, a wait
    for the GIL). A read reads the session's row once (its leaf, with its summary for
    session_get, and its header on a first open), then only the entries it shows: a branch of
    the session it read. That row is read at every request, so an append by another process
    is seen at the next read."""
    statements = sqlite_statements
    # Four sessions open at most, so that using the others closes the first.
    monkeypatch.setattr(sql_repo, "OPEN_SESSIONS", 4)

    async with Client(make_server(tmp_path)) as client:

        async def tables(tool: str, **arguments: Any) -> list[str]:
            """The tables each statement of one call reads, in order."""
            statements.clear()
            await call(client, tool, **arguments)
            read = [" ".join(sql.split()) for sql in statements]
            read = [sql for sql in read if sql.split()[0].upper() in ("SELECT", "WITH")]
            return [
                "path" if sql.startswith("WITH RECURSIVE") else sql.split(" FROM ")[1].split()[0]
                for sql in read
            ]

        sids = [(await call(client, "session_create", name=f"s{n}"))["id"] for n in range(5)]
        sid = sids[0]
        for n in range(3):
            user = {"type": "message", "role": "user", "content": f"question {n}"}
            await call(client, "session_append", session_id=sid, entry=user)
            await call(client, "session_append", session_id=sid, entry=_pi_answer(n))

        # Not open (the other four were used since): header, leaf and summary in one read,
        # then the branch with the entries of its newest page; for the context, the branch
        # with the messages of its newest page, then the entries it needs parsed (settings,
        # the name) in one read.
        for other in sids[1:]:
            await call(client, "session_stats", session_id=other)
        assert await tables("session_get", session_id=sid) == ["sessions", "path"]
        for other in sids[1:]:
            await call(client, "session_stats", session_id=other)
        context = ["sessions", "path", "entries"]
        assert await tables("session_context", session_id=sid) == context

        # Open, after an append here: the row, then the entries shown.
        await call(client, "session_append", session_id=sid, entry=_pi_answer(3))
        assert await tables("session_get", session_id=sid) == ["sessions", "entries"]
        assert await tables("session_context", session_id=sid) == ["sessions", "entries"]
        # The same context again is kept: only the row.
        assert await tables("session_context", session_id=sid) == ["sessions"]

        # Another process appends: the next reads show it.
        with SqliteSessionRepo(tmp_path / "sessions.db") as elsewhere:
            added = elsewhere.open(sid).append_message(UserMessage(content="from elsewhere"))
        got = await call(client, "session_get", session_id=sid)
        assert got["leafId"] == got["session"]["leafId"] == got["entries"][-1]["id"] == added
        found = await call(client, "session_context", session_id=sid)
        assert found["messages"][-1]["content"] == "from elsewhere"


@pytest.mark.parametrize("digits", ["\u0663", "\uff13", "3\u0663"])  # Arabic-Indic, full-width
def test_a_cursor_holds_ascii_digits_only(sessions: tuple[Session, Session], digits: str) -> None:
    """``int()`` reads digits of any script: such a cursor was never handed out."""
    ours, _ = sessions
    assert export_page(ours, "from:3", 1).start == 3
    with pytest.raises(ToolError, match="is not one this tool handed out"):
        export_page(ours, f"from:{digits}", 1)
    assert parse_cursor("before:3", "before:", 1, 10) == 3
    with pytest.raises(ToolError, match="is not one this tool handed out"):
        parse_cursor(f"before:{digits}", "before:", 1, 10)


def test_a_cursor_past_the_end_is_refused_saying_how_long_the_list_is(
    sessions: tuple[Session, Session],
) -> None:
    """A cursor past the end of session_export's file (or of a list) was refused as "not one
    this tool handed out" alone: a client that made it (or kept it while the list changed)
    was not told where the end is."""
    ours, _ = sessions
    count = export_page(ours, None, 1).count
    assert export_page(ours, f"from:{count - 1}", 1).end == count
    with pytest.raises(ToolError) as past:
        export_page(ours, f"from:{count + 4}", 1)
    said = str(past.value)
    assert "is not one this tool handed out" in said, said
    assert f"the file has {count} lines (from:0 to from:{count - 1})" in said, said
    with pytest.raises(ToolError) as listed:
        parse_cursor("before:12", "before:", 1, 10)
    assert "the list has 10 items now" in str(listed.value), listed.value


# How every cursor of ours that no longer pages its list is refused.
CHANGED = "is not one this tool handed out for this list (it may have changed since)"


@pytest.mark.anyio
async def test_a_cursor_pages_the_branch_it_came_from_or_none(tmp_path: Path) -> None:
    """A page's cursor carries what it pages: after a move to a sibling branch as long, the
    cursor of the branch (its context, its outline) left is refused, not read as the same
    place on the other (before: the cursor was a bare index, and paged the other branch).
    Back on the branch, it pages it again; the entries in the order appended only grow, and
    keep their bare cursors."""
    async with Client(make_server(tmp_path)) as client:
        sid = (await call(client, "session_create"))["id"]

        async def append(text: str) -> str:
            entry = {"type": "message", "role": "user", "content": text}
            found = await call(client, "session_append", session_id=sid, entry=entry)
            return str(found["entryId"])

        main = [await append(f"main{n}") for n in range(10)]
        await call(client, "session_move_to", session_id=sid, entry_id=main[1])
        alt = [await append(f"alt{n}") for n in range(8)]  # as long as main: 10 entries

        def texts(answer: dict[str, Any], key: str) -> list[str]:
            return [item.get("message", item).get("content") for item in answer[key]]

        reads: list[tuple[str, dict[str, str], str]] = [
            ("session_context", {}, "messages"),
            ("session_get", {}, "entries"),
        ]
        reads += [("session_get", {"view": "outline"}, "outline")]
        for tool, view, key in reads:
            # An outline folds runs of entries: one row a page lands its cursor past the two
            # rows both branches share.
            most = 1 if key == "outline" else 3
            await call(client, "session_move_to", session_id=sid, entry_id=main[-1])
            first = await call(client, tool, session_id=sid, limit=most, **view)
            cursor = first["nextCursor"]
            before = await call(client, tool, session_id=sid, limit=most, cursor=cursor, **view)
            await call(client, "session_move_to", session_id=sid, entry_id=alt[-1])
            refused = await call_error(
                client, tool, session_id=sid, limit=most, cursor=cursor, **view
            )
            assert CHANGED in refused, (tool, view)
            # The other branch pages from its own first page.
            other = await call(client, tool, session_id=sid, limit=most, **view)
            assert other["nextCursor"] != cursor
            # Back on the branch, grown since (each move was one more entry at its end): what
            # is before the cursor is as it was, and the cursor pages it.
            await call(client, "session_move_to", session_id=sid, entry_id=main[-1])
            again = await call(client, tool, session_id=sid, limit=most, cursor=cursor, **view)
            assert again[key] == before[key], (tool, view)
            if key != "outline":
                assert texts(first, key) == ["main7", "main8", "main9"]
                assert texts(again, key) == ["main4", "main5", "main6"]
            # A bare index, as cursors were, says nothing of the branch: refused as well.
            bare = cursor.partition(".")[0]
            refused = await call_error(client, tool, session_id=sid, limit=3, cursor=bare, **view)
            assert CHANGED in refused
        # The path to an entry pages that path whatever the leaf; not another entry's path.
        to = await call(client, "session_get", session_id=sid, entry_id=alt[-1], limit=3)
        await call(client, "session_move_to", session_id=sid, entry_id=main[-1])
        older = await call(
            client,
            "session_get",
            session_id=sid,
            entry_id=alt[-1],
            limit=3,
            cursor=to["nextCursor"],
        )
        assert texts(older, "entries") == ["alt2", "alt3", "alt4"]
        refused = await call_error(
            client,
            "session_get",
            session_id=sid,
            entry_id=main[-1],
            limit=3,
            cursor=to["nextCursor"],
        )
        assert CHANGED in refused
        # Entries in the order appended: a move appends nothing, an append only adds at the end.
        every = await call(client, "session_get", session_id=sid, view="entries", limit=0)
        ids = [entry["id"] for entry in every["entries"]]
        newest = await call(client, "session_get", session_id=sid, view="entries", limit=3)
        assert newest["nextCursor"] == f"before:{newest['total'] - 3}"
        await call(client, "session_move_to", session_id=sid, entry_id=alt[-1])
        await append("one more")
        older = await call(
            client,
            "session_get",
            session_id=sid,
            view="entries",
            limit=3,
            cursor=newest["nextCursor"],
        )
        total = newest["total"]
        assert [entry["id"] for entry in older["entries"]] == ids[total - 6 : total - 3]


def test_a_cursor_of_a_list_keyed_by_its_items_pages_from_the_same_item() -> None:
    """A list keyed by what its index holds (agent_runs: the run) takes a cursor while that
    item is where it was (newer items added at the end), and refuses it once the older items
    before it are gone (before: the same index named a newer item, and a page repeated)."""
    runs = [f"run{n}" for n in range(10)]

    def page(items: list[str], cursor: str | None) -> Any:
        return newest_page(items, cursor, 3, len, paged_as=lambda index: items[index])

    first = page(runs, None)
    assert (first.start, first.end) == (7, 10) and first.next_cursor is not None
    grown = [*runs, "run10"]
    assert (page(grown, first.next_cursor).start, page(grown, first.next_cursor).end) == (4, 7)
    with pytest.raises(ToolError, match=re.escape(CHANGED)):
        page(grown[2:], first.next_cursor)
    with pytest.raises(ToolError, match=re.escape(CHANGED)):
        page(runs, "before:7")  # bare: which run it meant is not known
    with pytest.raises(ToolError, match=re.escape(CHANGED)):
        newest_page(runs, first.next_cursor, 3, len)  # tagged, to a list paged by index
