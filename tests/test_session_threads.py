"""Sessions shared by the server's worker threads: requests on one session run at once on
different threads, through one storage (the repo keeps it open), against a real SQLite file
(or a real JSONL file). Each test forces the interleaving that went wrong, so that it fails every time on the code
that had the race."""

from __future__ import annotations

import functools
import gc
import os
import threading
import time
import weakref
from pathlib import Path
from typing import Any

import pytest
from narrow import narrow, present

import mcp_agent.sessions.session as session_module
from mcp_agent.messages import UserMessage
from mcp_agent.sessions import JsonlSessionRepo, SessionError, SqliteSessionRepo
from mcp_agent.sessions.entries import SessionEntry, iso_now
from mcp_agent.sessions.sql.cache import EntryCache
from mcp_agent.sessions.sql.storage import SqlSessionStorage
from mcp_agent.sessions.sqlite.database import _Write


def parents(repo: SqliteSessionRepo, session_id: str) -> dict[str, str | None]:
    rows = repo.database.read(
        "SELECT id, parent_id FROM entries WHERE session_id = ?", (session_id,)
    )
    return {entry_id: parent for entry_id, parent in rows}


def test_a_read_racing_an_append_does_not_fork_the_next_append(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = SqliteSessionRepo(tmp_path / "s.db", durability="normal")
    session_id = repo.create().id
    first = repo.open(session_id).append_custom("step", 1)
    stale = repo._read("SELECT leaf, incarnation FROM sessions WHERE id = :id", {"id": session_id})
    second = repo.open(session_id).append_custom("step", 2)

    # A read whose SELECT ran before the second append committed, finishing only now.
    fresh_read = repo._read
    monkeypatch.setattr(repo, "_read", lambda sql, params: stale if "leaf" in sql else None)
    repo.open_read(session_id)
    monkeypatch.setattr(repo, "_read", fresh_read)

    # Another read, fresh, lands while the third append is being built.
    now = iso_now  # what session_module calls its clock by

    def read_meanwhile() -> str:
        monkeypatch.setattr(session_module, "iso_now", now)
        repo.open_read(session_id)
        return now()

    monkeypatch.setattr(session_module, "iso_now", read_meanwhile)
    third = repo.open(session_id).append_custom("step", 3)

    assert parents(repo, session_id)[third] == second
    session = repo.open_read(session_id)
    storage = narrow(session.storage, SqlSessionStorage)
    assert storage.branch_ids(session.leaf_id)[-3:] == [first, second, third]
    assert session.stats().leaf_count == 1  # one branch: nothing forked


def test_a_branch_summary_stays_below_its_target_while_another_request_appends(
    tmp_path: Path,
) -> None:
    repo = SqliteSessionRepo(tmp_path / "s.db", durability="normal")
    session_id = repo.create().id
    target = repo.open(session_id).append_custom("step", "A")
    repo.open(session_id).append_custom("step", "B")
    appended: dict[str, str] = {}
    done = threading.Event()

    def other_request() -> None:
        appended["id"] = repo.open(session_id).append_custom("step", "C")
        done.set()

    def on_change(_: str, entry: SessionEntry) -> None:
        # Right after the summary (written alone, as pi does: no leaf move before it), another
        # request appends to the same session.
        if entry.type == "branch_summary" and not appended and not done.is_set():
            appended["started"] = "yes"
            threading.Thread(target=other_request).start()
            done.wait(0.5)  # it gets in now, or waits for the move and its summary

    repo.listeners.append(on_change)
    summary = repo.open(session_id).move_to(target, {"summary": "left branch B"})
    assert done.wait(10)
    found = parents(repo, session_id)
    assert found[present(summary)] == target
    assert found[appended["id"]] == summary  # the other request came after, on the leaf


def test_a_write_refused_in_a_group_leaves_nothing_for_the_cyclic_collector() -> None:
    class Held:
        pass

    held = Held()
    kept = weakref.ref(held)
    job = _Write(functools.partial(lambda _conn, kept_here: kept_here, held))  # holds it
    job.settle(None, SessionError("conflict", "entry id taken"))
    gc.disable()
    try:
        refused = False
        try:
            job.outcome()
        except SessionError:
            refused = True
        assert refused
        del job, held
        assert kept() is None  # freed by reference counting alone
    finally:
        gc.enable()


def test_a_storage_collected_while_its_cache_is_in_use_does_not_hang_the_thread(
    tmp_path: Path,
) -> None:
    cache = EntryCache(10_000_000)
    going, staying = cache.share(), cache.share()
    entry: Any = object()
    going.put("a", entry, 100)
    finished = threading.Event()

    def collected_inside_a_put() -> None:
        # The cyclic collector runs a storage's finalizer on whatever thread allocates:
        # here, one that holds the cache's lock in the middle of a put.
        with cache.lock:
            going.release()
        finished.set()

    worker = threading.Thread(target=collected_inside_a_put, daemon=True)
    worker.start()
    assert finished.wait(10), "the thread waits for a lock it holds itself"
    staying.put("b", entry, 100)  # the next use of the cache lets the gone share go
    assert going not in cache.shares and staying in cache.shares
    assert cache.bytes == staying.bytes > 0


def test_an_open_during_a_jsonl_append_neither_breaks_it_nor_loses_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = JsonlSessionRepo(tmp_path)
    session_id = repo.create().id
    opened: dict[str, Any] = {}
    fsync = os.fsync

    def another_request_meanwhile(fd: int) -> None:
        # The line is written, its fsync not yet done: the file's stamp has changed, by us.
        if not opened:
            opened["started"] = True
            worker = threading.Thread(target=lambda: opened.update(session=repo.open(session_id)))
            worker.start()
            worker.join(0.5)  # it opens now (reloading the file), or waits for the append
        fsync(fd)

    monkeypatch.setattr(os, "fsync", another_request_meanwhile)
    entry_id = repo.open(session_id).append_message(UserMessage(content="kept"))
    monkeypatch.setattr(os, "fsync", fsync)
    assert [e.id for e in JsonlSessionRepo(tmp_path).open(session_id).get_entries()] == [entry_id]
    assert repo.open(session_id).get_entry(entry_id) is not None


def test_a_write_that_waited_for_its_turn_waits_only_the_rest_of_the_lock_wait(
    tmp_path: Path,
) -> None:
    """A server's write waits for its turn among the session's writes on the event loop first
    (runtime.write_turns), then for the storage's lock on its thread: the two waits together
    are bounded by the lock wait (its deadline handed on), so a write is told within two lock
    timeouts, the wait of the write ahead of it for the database included, not three."""
    repo = SqliteSessionRepo(tmp_path / "s.db", busy_timeout=30, durability="normal")
    session_id = repo.create().id
    lock = repo.open(session_id)._lock  # the storage's, shared by every Session over it
    held, refused = threading.Event(), threading.Event()

    def write_ahead() -> None:  # as one waiting for the database would
        with lock:
            held.set()
            refused.wait(10)  # bounded: then the lock goes

    ahead = threading.Thread(target=write_ahead)
    ahead.start()
    held.wait(10)
    token = session_module.TURN_DEADLINE.set(time.monotonic())  # its wait is over already
    try:
        with pytest.raises(SessionError, match="another write to it here has waited 30 s"):
            repo.open(session_id).append_custom("step", 1)
    finally:
        session_module.TURN_DEADLINE.reset(token)
        refused.set()
        ahead.join()
    assert repo.open(session_id).get_entries() == []
