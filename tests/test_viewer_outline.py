"""session_get's outline view and branch to an entry: what the viewer reads a tree with."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.server import MCPServer
from mcp_support import call, call_error, client_fixture, make_server  # noqa: F401
from narrow import narrow
from test_sessions_sqlite import random_tree
from viewer_support import CHAIN, build_picnic

from mcp_agent import SqliteSessionRepo
from mcp_agent.messages import UserMessage
from mcp_agent.sessions import Session
from mcp_agent.sessions.entries import SessionEntry
from mcp_agent.sessions.memory import InMemorySessionStorage
from mcp_agent.sessions.outline import CHILDREN_SHOWN, OutlineRows, lazy_outline, outline
from mcp_agent.sessions.sqlite.storage import SqliteSessionStorage
from mcp_agent.sessions.storage import StoredPages

pytestmark = pytest.mark.anyio


@pytest.fixture(name="server")
def server_fixture(tmp_path: Path) -> MCPServer:
    return make_server(tmp_path)


def by_id(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {row["id"]: row for row in rows}


def test_outline_lists_branch_points_labels_and_folds_long_runs() -> None:
    session = Session()
    ids = build_picnic(session)
    rows = outline(session)
    spine = [row for row in rows if row["spine"]]
    heads = [row for row in rows if not row["spine"]]
    # the other branch is listed unopened, under the entry it branches from
    assert [row["id"] for row in heads] == [ids["sandwiches"]]
    assert heads[0]["parentId"] == ids["plan"] and heads[0]["children"] == [
        ids["sandwiches_answer"]
    ]
    listed = {row["id"] for row in spine}
    assert {ids["plan"], ids["summary"], ids["compaction"], ids["leaf"]} <= listed
    rows_by_id = by_id(rows)
    assert rows_by_id[ids["plan"]]["label"] == "weather-ok"
    assert rows_by_id[ids["plan"]]["children"] == [ids["sandwiches"], ids["summary"]]
    assert rows_by_id[ids["summary"]]["kind"] == "summary"
    assert rows_by_id[ids["leaf"]]["onBranch"] and rows_by_id[ids["leaf"]]["kind"] == "assistant"
    # the chain of small talk folds to its ends; nothing is lost
    folded = [row for row in spine if row["folded"]]
    assert len(folded) == 1 and folded[0]["folded"] >= CHAIN - 2
    assert len(spine) + sum(row["folded"] for row in spine) == len(session.get_branch())


def test_outline_from_an_entry_follows_the_newest_child() -> None:
    session = Session()
    ids = build_picnic(session)
    rows = outline(session, ids["sandwiches"])
    assert [row["id"] for row in rows] == [ids["sandwiches"], ids["sandwiches_answer"]]
    assert all(row["spine"] and not row["onBranch"] for row in rows)
    # after moving the leaf up, the chain from the root stops there and the rest is a branch
    session.move_to(ids["ask"])
    rows = outline(session)
    assert [row["id"] for row in rows if row["spine"]][-1] == ids["ask"]
    assert [row["id"] for row in rows if not row["spine"]] == [ids["call"]]


def test_outline_of_an_empty_and_a_rootless_session() -> None:
    session = Session()
    assert outline(session) == []
    first = session.append_message(UserMessage(content="one"))
    session.move_to(None)
    second = session.append_message(UserMessage(content="two"))
    session.move_to(None)
    rows = outline(session)  # no leaf: the newest root's chain, the other root unopened
    assert [(row["id"], row["spine"]) for row in rows] == [(first, False), (second, True)]


async def test_session_get_outline_and_branch_to_an_entry(tmp_path: Path, client: Client) -> None:
    with SqliteSessionRepo(tmp_path / "sessions.db") as repo:
        session = repo.create(name="Picnic plans")
        ids = build_picnic(session)
    answer = await call(client, "session_get", session_id=session.id, view="outline", limit=0)
    assert answer["view"] == "outline" and answer["leafId"] == ids["leaf"]
    rows = by_id(answer["outline"])
    assert rows[ids["sandwiches"]]["spine"] is False
    fold = next(row for row in answer["outline"] if row["folded"])
    after = answer["outline"][answer["outline"].index(fold) + 1]
    # the folded entries are the path to the next listed entry's parent
    hidden = await call(
        client,
        "session_get",
        session_id=session.id,
        entry_id=after["parentId"],
        limit=fold["folded"],
    )
    assert len(hidden["entries"]) == fold["folded"]
    assert hidden["entries"][0]["parentId"] == fold["id"]
    opened = await call(
        client, "session_get", session_id=session.id, view="outline", entry_id=ids["sandwiches"]
    )
    assert [row["id"] for row in opened["outline"]] == [ids["sandwiches"], ids["sandwiches_answer"]]
    # one entry: the last of the path to it
    one = await call(client, "session_get", session_id=session.id, entry_id=ids["call"], limit=1)
    assert one["entries"][0]["message"]["content"][1]["name"] == "weather"
    # a page of the outline is its end, with a cursor for the rows before
    page = await call(client, "session_get", session_id=session.id, view="outline", limit=2)
    assert page["truncated"] and page["outline"][-1]["id"] == ids["leaf"]

    wrong = await call_error(
        client, "session_get", session_id=session.id, view="tree", entry_id="x"
    )
    assert "entry_id applies to the views branch and outline" in wrong
    missing = await call_error(
        client, "session_get", session_id=session.id, view="outline", entry_id="nope"
    )
    assert "nope" in missing and "not found" in missing


class CountingStorage(InMemorySessionStorage):
    """Counts the reads an outline makes, to show they follow what it shows."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: Counter[str] = Counter()

    def get_children(self, entry_id: str | None) -> list[SessionEntry]:
        self.reads["children"] += 1
        return super().get_children(entry_id)

    def get_entries(self, options: dict[str, Any] | None = None) -> list[SessionEntry]:
        self.reads["entries"] += 1
        return super().get_entries(options)


def test_an_outline_reads_what_it_shows_not_the_session() -> None:
    # A comb: a chain of 300 with a branch of 40 entries off every 10th entry (1,500 in all).
    storage = CountingStorage()
    session = Session(storage)
    spine: list[str] = []
    for index in range(300):
        spine.append(session.append_message(UserMessage(content=f"spine {index}")))
    for index in range(0, 300, 10):
        session.move_to(spine[index])
        for side in range(40):
            session.append_message(UserMessage(content=f"side {index}.{side}"))
    session.move_to(spine[-1])
    storage.reads.clear()
    rows = outline(session)
    heads = [row for row in rows if not row["spine"]]
    assert len(heads) == 30 and all(row["folded"] == 0 for row in heads)
    assert storage.reads["entries"] == 0  # never the whole session
    # one look at the children of each chain entry, each listed head and the roots
    assert storage.reads["children"] <= len(spine) + len(heads) + 1
    storage.reads.clear()
    opened = outline(session, heads[0]["id"])
    assert [row["folded"] for row in opened] == [38, 0]
    assert storage.reads["children"] <= 41 and storage.reads["entries"] == 0


@pytest.mark.parametrize(
    ("backend", "seed"), [*(("sqlite", seed) for seed in range(4)), ("postgres", 0)]
)
def test_an_outline_from_the_stored_index_is_the_outline_from_the_entries(
    tmp_path: Path, backend: str, seed: int, request: pytest.FixtureRequest
) -> None:
    # A SQL backend gives the outline from its index and parses only the entries shown; read
    # from the parsed entries instead, every outline of a random tree must be the same.
    repo: Any
    if backend == "postgres":
        from mcp_agent.sessions.postgres import PostgresSessionRepo

        repo = PostgresSessionRepo(request.getfixturevalue("postgres_url"), max_connections=2)
    else:
        repo = SqliteSessionRepo(tmp_path / "s.db")
    monkeypatch = request.getfixturevalue("monkeypatch")
    try:
        session = repo.create()
        rng = random.Random(seed)
        random_tree(session, rng, 80)
        starts: list[str | None] = [
            None,
            *(e.id for e in session.get_entries() if e.type != "leaf"),
        ]
        picked = [starts[0], *rng.sample(starts[1:], 8)]
        assert isinstance(repo.open(session.id).storage, StoredPages)
        stored = [outline(repo.open(session.id), start) for start in picked]
        monkeypatch.setattr("mcp_agent.sessions.outline.StoredPages", type("Nothing", (), {}))
        assert [outline(repo.open(session.id), start) for start in picked] == stored
        assert any(row["label"] for rows in stored for row in rows)
        assert any(not row["spine"] for rows in stored for row in rows)
    finally:
        repo.close()


def test_a_page_of_a_long_outline_reads_only_the_entries_it_shows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A comb (a branch point at every step) lists every entry: 2,001 rows. Reading its newest
    rows parses the entries of their blocks, not the whole outline's (4 s for a 50,000-deep
    comb's page), and rows made in any order are the rows made all at once. (The comb's 3,000
    writes are made with durability normal, which keeps all but what a power cut takes and
    halves their time: what is stored, and so read, is the same.)"""
    with SqliteSessionRepo(tmp_path / "s.db", durability="normal") as repo:
        comb = repo.create(name="comb")
        for i in range(1000):
            main = comb.append_message(UserMessage(content=f"main {i}"))
            comb.append_message(UserMessage(content=f"side {i}"))
            comb.move_to(main)
        whole = outline(repo.open(comb.id))
        total = len(whole)  # the name's entry, then two rows a step
        assert total == 2001 and sum(row["spine"] for row in whole) == 1001
        parsed: list[str] = []
        storage_class = type(narrow(repo.open(comb.id).storage, SqliteSessionStorage))
        real = storage_class.parse_stored

        def counted(self: Any, entry_id: str, entry_type: str, data: str) -> SessionEntry:
            parsed.append(entry_id)
            return real(self, entry_id, entry_type, data)

        monkeypatch.setattr(storage_class, "parse_stored", counted)
        opened = repo.open(comb.id)
        parsed.clear()
        rows = lazy_outline(opened)
        assert len(rows) == total and len(parsed) == 1  # the places alone, and the root
        assert rows[-50:] == whole[-50:]
        assert 50 <= len(parsed) <= 2 * OutlineRows.BLOCK
        order = list(range(len(rows)))
        random.Random(7).shuffle(order)
        assert [rows[i] for i in order] == [whole[i] for i in order]
        assert len(parsed) == len(set(parsed)) == total  # each row made once
        with pytest.raises(IndexError):
            rows[total]


async def test_pages_of_an_outline_work_it_out_once_and_any_change_anew(
    tmp_path: Path, client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    import mcp_agent.server.session_reads as reads

    worked: list[str | None] = []
    real = reads.lazy_outline

    def counted(session: Session, entry_id: str | None = None) -> OutlineRows:
        worked.append(entry_id)
        return real(session, entry_id)

    monkeypatch.setattr(reads, "lazy_outline", counted)
    with SqliteSessionRepo(tmp_path / "sessions.db") as repo:
        session = repo.create(name="Picnic plans")
        ids = build_picnic(session)

    async def page(cursor: str | None = None) -> dict[str, Any]:
        arguments: dict[str, Any] = {"session_id": session.id, "view": "outline", "limit": 3}
        return await call(client, "session_get", **arguments, cursor=cursor)

    whole = await call(client, "session_get", session_id=session.id, view="outline", limit=0)
    first = await page()
    second = await page(first["nextCursor"])
    assert worked == [None]
    assert first["outline"] == whole["outline"][-3:]
    assert second["outline"] == whole["outline"][-6:-3]
    await call(client, "session_move_to", session_id=session.id, entry_id=ids["sandwiches"])
    moved = await page()
    assert len(worked) == 2 and moved["leafId"] == ids["sandwiches"]
    assert any(row["id"] == ids["sandwiches"] and row["spine"] for row in moved["outline"])
    await call(
        client,
        "session_append",
        session_id=session.id,
        entry={"type": "label", "target_id": ids["sandwiches"], "label": "lunch"},
    )
    labelled = await page()
    assert len(worked) == 3
    assert [row["label"] for row in labelled["outline"] if row["id"] == ids["sandwiches"]] == [
        "lunch"
    ]


async def test_a_row_names_its_first_children_and_counts_them_all(
    tmp_path: Path, client: Client
) -> None:
    """A row's size is bounded whatever the entry's children: a root with 20,000 branches made
    one row (and so a one-row page, which always holds a row) of 222 KB, past the 40 KB pages
    keep to. Rows name the first CHILDREN_SHOWN children and count them all."""
    with SqliteSessionRepo(tmp_path / "sessions.db") as repo:
        session = repo.create(name="star")
        root = session.append_message(UserMessage(content="the root"))
        children = []
        for index in range(CHILDREN_SHOWN * 3):
            session.move_to(root)
            children.append(session.append_message(UserMessage(content=f"try {index}")))
        parsed = Session(InMemorySessionStorage(session.header, session.get_entries()))
    for view, key in (("outline", "outline"), ("tree", "nodes")):
        answer = await call(client, "session_get", session_id=session.id, view=view, limit=0)
        [row] = [row for row in answer[key] if row["id"] == root]
        assert row["childCount"] == len(children), view
        assert row["children"] == children[:CHILDREN_SHOWN], view
        leaf = next(row for row in answer[key] if row["id"] == children[-1])
        assert leaf["childCount"] == 0 and leaf["children"] == []
    # from the parsed entries too
    rows = by_id(outline(parsed))
    assert rows[root]["childCount"] == len(children)
    assert rows[root]["children"] == children[:CHILDREN_SHOWN]
