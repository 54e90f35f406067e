"""Concurrency: several processes write to one SQLite file at once, each to a session of its
own and all to shared sessions, while this process reads. Nothing is lost, no "database is
locked" reaches anyone, and every session stays one linear chain (an append goes onto the leaf
as it is at that moment, whoever moved it).

tests/test_sessions_sqlite.py has the small case (3 processes, one session); these add more
writers, private and shared sessions at once, concurrent readers and a brand-new file.
"""

from __future__ import annotations

import itertools
import random
import threading
import time
from pathlib import Path

import pytest
from narrow import narrow
from reliability_support import WriterProcess, check_sqlite_store, size

from mcp_agent.messages import UserMessage
from mcp_agent.sessions import MessageEntry, SqliteSessionRepo

WRITERS = size(4, 8)
OPS = size(300, 1000)
SHARED = 2


def start_together(db: Path, count: int, extra: list[list[str]], seed: int) -> list[WriterProcess]:
    start_at = time.time() + 1.5  # after every child has imported what it needs
    return [
        WriterProcess("sqlite", db, seed + n, f"--start-at={start_at}", *extra[n])
        for n in range(count)
    ]


@pytest.mark.slow
def test_writers_on_private_and_shared_sessions_lose_nothing(tmp_path: Path) -> None:
    db = tmp_path / "shared.db"
    with SqliteSessionRepo(db) as repo:
        shared = [repo.create(name=f"shared {i}").id for i in range(SHARED)]
        private = [repo.create(name=f"private {i}").id for i in range(WRITERS)]
    seed = random.randrange(2**20)
    extra = [
        [
            "--no-create",
            f"--ops={OPS}",
            "--pause=0.002",  # writers that think a little between writes interleave more
            f"--session={private[n]}",
            *(f"--session={s}" for s in shared),
        ]
        for n in range(WRITERS)
    ]

    # Readers in this process, all the while: listing, searching, whole branches.
    stop = threading.Event()
    reader_errors: list[BaseException] = []
    reads = 0

    def read() -> None:
        nonlocal reads
        reader = SqliteSessionRepo(db)
        lengths = dict.fromkeys(shared, 0)
        try:
            while not stop.is_set():
                reader.list(limit=10)
                reader.list(query="private", limit=10)
                for sid in shared:
                    branch = reader.open(sid).get_branch()
                    # A reader sees a consistent snapshot: one chain that only grows.
                    assert branch[0].parent_id is None
                    assert all(b.parent_id == a.id for a, b in itertools.pairwise(branch))
                    assert len(branch) >= lengths[sid]
                    lengths[sid] = len(branch)
                reads += 1
        except BaseException as error:  # reported by the test below
            reader_errors.append(error)
        finally:
            reader.close()

    reader_thread = threading.Thread(target=read)
    writers = start_together(db, WRITERS, extra, seed)
    reader_thread.start()
    try:
        codes = [writer.finish(timeout=300) for writer in writers]
    finally:
        stop.set()
        reader_thread.join(60)
    for writer, code in zip(writers, codes, strict=True):
        assert code == 0 and writer.acks.done, writer.describe()  # "database is locked" = exit 1
    assert not reader_errors, reader_errors[0]
    assert reads > 0

    store = check_sqlite_store(db)
    with SqliteSessionRepo(db) as repo:
        for sid in [*shared, *private]:
            acknowledged = {e for w in writers for e in w.acks.entries.get(sid, [])}
            entries = store[sid]
            # Nothing lost, nothing extra (the session's name entry came before the writers).
            assert {e.id for e in entries[1:]} == acknowledged, sid
            stats = repo.open(sid).stats()
            assert stats.leaf_count == 1 and stats.branch_point_count == 0, sid
            branch = repo.open(sid).get_branch()
            assert [e.id for e in branch] == [e.id for e in entries], sid
            # Each writer's messages appear in the order it wrote them.
            texts = [narrow(narrow(e, MessageEntry).message, UserMessage).text for e in entries[1:]]
            for n in range(WRITERS):
                mine = [int(t.split(":")[1]) for t in texts if t.split(":")[0] == str(seed + n)]
                assert mine == sorted(mine), (sid, n)
            if sid in shared:
                # The writers really did overlap: their appends interleave.
                owners = [t.split(":")[0] for t in texts]
                switches = sum(a != b for a, b in itertools.pairwise(owners))
                print(f"{sid}: {switches} switches between writers, {reads} reads")
                assert switches > WRITERS, "the writers ran one after another"
        total = sum(w.acks.count for w in writers)
        assert total == WRITERS * OPS


@pytest.mark.slow
def test_writers_racing_on_a_new_file(tmp_path: Path) -> None:
    """Every writer opens the same not-yet-existing file at once (schema creation races),
    then creates sessions and writes to them (branch switches, labels, searches)."""
    db = tmp_path / "new.db"
    ops = size(60, 300)
    writers = start_together(db, WRITERS, [[f"--ops={ops}"]] * WRITERS, random.randrange(2**20))
    codes = [writer.finish(timeout=300) for writer in writers]
    for writer, code in zip(writers, codes, strict=True):
        assert code == 0 and writer.acks.done, writer.describe()
    store = check_sqlite_store(db)
    for writer in writers:
        for sid, ids in writer.acks.entries.items():
            assert set(ids) <= {e.id for e in store[sid]}, sid
    assert set(store) == {sid for w in writers for sid in w.acks.sessions}


def test_threads_sharing_one_repo_keep_one_chain(tmp_path: Path) -> None:
    """The server's shape: one connection, many callers (worker threads here)."""
    threads_count, per_thread = 8, size(50, 250)
    with SqliteSessionRepo(tmp_path / "threads.db") as repo:
        session = repo.create()
        errors: list[BaseException] = []

        def work(n: int) -> None:
            try:
                mine = repo.open(session.id)
                for i in range(per_thread):
                    mine.append_message(UserMessage(content=f"{n}:{i}"))
                    if i % 10 == 0:
                        repo.list(query=str(n))
            except Exception as error:  # reported below
                errors.append(error)

        threads = [threading.Thread(target=work, args=(n,)) for n in range(threads_count)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        assert not errors, errors[0]
        stats = session.stats()
        assert stats.message_count == threads_count * per_thread
        assert stats.leaf_count == 1 and stats.branch_point_count == 0
    check_sqlite_store(tmp_path / "threads.db")
