"""The search index caught up in the background (runtime.search_index): after an import and
at the server's start, with no search asked for, over a real SQLite file."""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

import anyio
import pytest
from mcp import Client
from mcp_support import call, make_server, search_index_marks

import mcp_agent.sessions.sqlite.database as sqlite_database
from mcp_agent.blocking import inline
from mcp_agent.messages import UserMessage
from mcp_agent.runtime.search_index import SearchIndexer
from mcp_agent.sessions import SessionError, SqliteSessionRepo

pytestmark = pytest.mark.anyio


async def caught_up(db: Path) -> int:
    """Wait until the index covers every entry (no search is made meanwhile); the newest."""
    for _ in range(600):
        upto, newest = search_index_marks(db)
        if newest is not None and upto == newest:
            return newest
        await anyio.sleep(0.05)
    raise AssertionError(f"the index stayed at {upto} of {newest} entries")


def consistent(db: Path) -> None:
    with sqlite3.connect(db) as conn:
        conn.execute("INSERT INTO entries_fts (entries_fts) VALUES ('integrity-check')")
        indexed = conn.execute("SELECT n, session_id FROM fts_docs ORDER BY n").fetchall()
        expected = conn.execute(
            "SELECT n, session_id FROM entries WHERE text IS NOT NULL ORDER BY n"
        ).fetchall()
    conn.close()
    assert indexed == expected


def pi_file(tmp_path: Path, words: list[str]) -> str:
    """A pi session file of one message per word, made by another repo."""
    repo = SqliteSessionRepo(tmp_path / "elsewhere.db")
    try:
        session = repo.create()
        for word in words:
            session.append_message(UserMessage(content=f"about {word}", timestamp=1))
        return repo.export_jsonl(session.id)
    finally:
        repo.close()


@pytest.fixture
def counted_batches(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Small batches, each one's answer (more to do?) recorded."""
    monkeypatch.setattr(sqlite_database, "FTS_BATCH_ROWS", 10)
    answers: list[bool] = []
    real = sqlite_database.SqliteDatabase.index_text_batch

    def index_text_batch(self: sqlite_database.SqliteDatabase, *args: object) -> bool:
        more = real(self, *args)  # type: ignore[arg-type]
        answers.append(more)
        return more

    monkeypatch.setattr(sqlite_database.SqliteDatabase, "index_text_batch", index_text_batch)
    return answers


async def test_an_import_is_indexed_in_the_background_without_a_search(
    tmp_path: Path, counted_batches: list[bool]
) -> None:
    jsonl = pi_file(tmp_path, [f"okapi{n}" for n in range(45)])
    db = tmp_path / "sessions.db"
    async with Client(make_server(tmp_path)) as client:
        imported = await call(client, "session_import", jsonl=jsonl)
        newest = await caught_up(db)
        assert newest >= 45
        for _ in range(200):  # the round's last answer comes just after its commit
            if counted_batches and counted_batches[-1] is False:
                break
            await anyio.sleep(0.01)
        # In batches of 10 positions, each its own transaction, the last saying "done".
        assert counted_batches.count(True) >= 4 and counted_batches[-1] is False
        consistent(db)
        found = await call(client, "session_list", query="okapi44")
        assert [s["id"] for s in found["sessions"]] == [imported["session"]["id"]]
        assert search_index_marks(db) == (newest, newest)
        # A fork copies the branch: its text too is indexed before anyone searches.
        fork = await call(client, "session_fork", session_id=imported["session"]["id"])
        assert await caught_up(db) >= newest + 45
        consistent(db)
        found = await call(client, "session_list", query="okapi44")
        assert {s["id"] for s in found["sessions"]} == {imported["session"]["id"], fork["id"]}


async def test_text_stored_before_the_server_started_is_indexed_at_its_start(
    tmp_path: Path, counted_batches: list[bool]
) -> None:
    db = tmp_path / "sessions.db"
    repo = SqliteSessionRepo(db)
    try:
        session = repo.create()
        for n in range(25):
            session.append_message(UserMessage(content=f"tapir {n}", timestamp=1))
    finally:
        repo.close()
    upto, newest = search_index_marks(db)
    assert upto < newest  # appends alone index nothing
    async with Client(make_server(tmp_path)):
        assert await caught_up(db) == newest
    assert counted_batches.count(True) >= 2
    consistent(db)


class Flaky:
    """A repo whose indexing fails as told, then has one batch left, then none."""

    def __init__(self, failures: list[Exception]) -> None:
        self.failures = failures
        self.left = 0

    def index_search_text(self) -> bool:
        if self.failures:
            raise self.failures.pop(0)
        if self.left:
            self.left -= 1
            return True
        return False


@pytest.mark.parametrize(
    "failure", [SessionError("storage", "the disk is full"), RuntimeError("unexpected")]
)
async def test_a_failed_round_is_logged_and_the_next_nudge_indexes_again(
    failure: Exception, caplog: pytest.LogCaptureFixture
) -> None:
    repo = Flaky([failure])
    indexer = SearchIndexer(repo, inline)  # type: ignore[arg-type]  # only index_search_text
    with caplog.at_level(logging.WARNING, "mcp_agent.runtime.search_index"):
        async with anyio.create_task_group() as group:
            group.start_soon(indexer.run)
            indexer.nudge()
            for _ in range(200):
                if caplog.records:
                    break
                await anyio.sleep(0.01)
            assert caplog.records, "the failed round was not logged"
            assert "indexing session text for search" in caplog.records[0].getMessage()
            assert indexer.calls == 0
            repo.left = 2
            indexer.nudge()
            for _ in range(200):
                if indexer.calls == 3:
                    break
                await anyio.sleep(0.01)
            assert indexer.calls == 3 and repo.left == 0  # two with more to do, one done
            group.cancel_scope.cancel()
