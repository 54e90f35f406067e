"""Leases in a SQLite session database (runtime.leases.SessionLeases), used from many worker
threads at once, as the server's run manager uses them."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

from mcp_agent.runtime.leases import SessionLeases
from mcp_agent.sessions import SqliteSessionRepo


def test_leases_taken_and_let_go_from_many_threads_at_once_stay_right(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    SqliteSessionRepo(db).close()  # the session database the leases live in
    leases = SessionLeases(db)
    errors: list[BaseException] = []
    start = threading.Barrier(8)

    def worker(n: int) -> None:
        start.wait()
        try:
            for round_ in range(40):
                session = f"s{n}-{round_ % 4}"
                assert leases.acquire(session, f"run {n}.{round_}") is None
                if round_ % 7 == 0:
                    leases.renew()
                leases.release(session)
        except BaseException as error:  # reported below, with the thread that met it
            errors.append(error)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM session_leases").fetchone()[0] == 0
        assert not conn.in_transaction
    # Nothing is left holding the database's write lock: another connection writes at once.
    other = sqlite3.connect(db, timeout=0)
    try:
        other.execute("BEGIN IMMEDIATE")
        other.execute("ROLLBACK")
    finally:
        other.close()
    leases.close()
