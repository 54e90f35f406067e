"""Leases in a SQLite session database (runtime.leases.SessionLeases), used from many worker
threads at once, as the server's run manager uses them."""

from __future__ import annotations

import os
import shutil
import socket
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from mcp_support import another_programs_database

from mcp_agent.runtime.leases import SessionLeases, process_space
from mcp_agent.sessions import SessionError, SqliteSessionRepo


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


def test_leases_close_without_error_when_the_database_cannot_be_written(tmp_path: Path) -> None:
    SqliteSessionRepo(tmp_path / "s.db").close()
    leases = SessionLeases(tmp_path / "s.db")
    leases._conn.execute("PRAGMA query_only = 1")  # every write now fails, as on a read-only file
    leases.close()  # no lease was taken: nothing to let go, and nothing to raise
    try:
        leases._conn.execute("SELECT 1")
        raise AssertionError("the connection is still open")
    except sqlite3.ProgrammingError:
        pass


def test_another_programs_database_gets_no_leases_table(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    before = another_programs_database(path)
    try:
        SessionLeases(path)
        raise AssertionError("another program's database was taken for leases")
    except SessionError as refused:
        assert "another program" in refused.message
    assert path.read_bytes() == before


def test_a_lease_lost_while_held_fences_the_holders_writes(tmp_path: Path) -> None:
    """A lease that lapsed and that another process took: its old holder's writes to the
    session are refused, and its renewal says the lease is gone. One that lapsed and that
    nobody took is still its holder's."""
    from mcp_agent.messages import UserMessage

    db = tmp_path / "s.db"
    leases = SessionLeases(db)
    with SqliteSessionRepo(db, session_guard=leases.guard) as repo:
        session = repo.create()
        assert leases.acquire(session.id, "run 1") is None
        lapse = "UPDATE session_leases SET expires = 0"
        with sqlite3.connect(db) as conn:
            conn.execute(lapse)
        session.append_message(UserMessage(content="still mine"))  # nobody took it
        assert leases.renew() == {session.id}
        with sqlite3.connect(db) as conn:
            conn.execute(lapse)
        other = SessionLeases(db)  # another server process
        assert other.acquire(session.id, "run 2") is None
        before = len(session.get_entries())
        with pytest.raises(SessionError, match="this server's lease on it lapsed") as raised:
            session.append_message(UserMessage(content="not any more"))
        assert "run 2" in str(raised.value)
        assert len(repo.open(session.id).get_entries()) == before
        assert leases.renew() == set()
        leases.release(session.id)  # lets go of its own only: the other's lease stands
        assert leases.held_elsewhere(session.id) is not None
        other.close()
    leases.close()


def test_a_lease_whose_release_failed_is_not_renewed_and_lapses(tmp_path: Path) -> None:
    """A run ended while the database was out of reach: its lease stayed in the table. The
    renewals of its (living) process must not keep it: once it lapses, another process takes
    the session."""
    db = tmp_path / "s.db"
    SqliteSessionRepo(db).close()
    leases, other = SessionLeases(db), SessionLeases(db)
    assert leases.acquire("s1", "run 1") is None
    assert leases.acquire("s2", "run 2") is None
    # The release's write fails (a read-only connection), as with the database away.
    real = leases._conn
    leases._conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, check_same_thread=False)
    with pytest.raises(SessionError, match="readonly"):  # said, not a bare sqlite3 error
        leases.release("s1")
    leases._conn.close()
    leases._conn = real
    assert leases.renew() == {"s2"}
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE session_leases SET expires = 0 WHERE session_id = 's1'")
    assert leases.renew() == {"s2"}  # the lapsed one stays lapsed
    assert other.acquire("s1", "run 3") is None
    assert other.acquire("s2", "run 4") is not None  # the one still held is not free
    other.close()
    leases.close()


@pytest.mark.skipif(not os.path.exists("/proc/self/ns/pid"), reason="no pid namespaces here")
def test_a_live_lease_of_another_container_with_this_host_name_is_never_taken(
    tmp_path: Path,
) -> None:
    """Two containers with one host name, each in its own pid namespace, over one database: a
    pid of the other's is no process here, and judged by host name and pid its live lease
    was let go as its process's were gone. Now a lease's process is looked for only from the
    same pid namespace and boot; any other lease binds until it expires."""
    db = tmp_path / "s.db"
    SqliteSessionRepo(db).close()
    leases = SessionLeases(db)
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    dead_here = int(gone.stdout)
    spaces = [socket.gethostname()]  # as a version before this one wrote it
    if shutil.which("unshare"):
        other = subprocess.run(
            [
                "unshare",
                "--pid",
                "--fork",
                sys.executable,
                "-c",
                "from mcp_agent.runtime.leases import process_space; print(process_space())",
            ],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        )
        if other.returncode == 0:  # (unshare needs privileges)
            spaces.append(other.stdout.strip())
    try:
        for n, space in enumerate(spaces):
            with sqlite3.connect(db) as conn:
                conn.execute(
                    "INSERT INTO session_leases VALUES (?, 'run theirs', 'another', ?, ?,"
                    " strftime('%s', 'now') + 60)",
                    (f"s{n}", space, dead_here),
                )
            with sqlite3.connect(db) as conn, pytest.raises(SessionError, match="busy"):
                leases.guard(conn, f"s{n}")
            other_lease = leases.acquire(f"s{n}", "run mine")
            assert other_lease is not None and other_lease.owner == "another", space
        # From this very namespace, a lease of a process gone is let go at once.
        with sqlite3.connect(db) as conn:
            conn.execute(
                "INSERT INTO session_leases VALUES ('here', 'run dead', 'someone', ?, ?,"
                " strftime('%s', 'now') + 60)",
                (process_space(), dead_here),
            )
        assert leases.acquire("here", "run mine") is None
    finally:
        leases.close()
