"""Shared by the reliability tests: the writer child process, and checks that a session store
is whole (every row parses, the tree holds together, derived columns equal what the entries
say)."""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import threading
import warnings
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import IO

import reliability_writer

from mcp_agent.sessions import (
    InMemorySessionStorage,
    JsonlSessionRepo,
    LabelEntry,
    MessageEntry,
    SessionEntry,
    SqliteSessionRepo,
    parse_entry,
    parse_header,
)
from mcp_agent.sessions.repo import first_user_text
from mcp_agent.sessions.storage import leaf_after, validate_tree

# Writers are forked from one process per test process (multiprocessing's forkserver) that
# imported the writer and the package once: a writer started as ``python reliability_writer.py``
# spent 0.5 s of CPU importing (and a kill in its first 0.25 s landed in those imports, not in
# the store's opening); forked, it is a process of its own all the same, opening the store
# itself, and SIGKILL ends it as abruptly.
_FORKS = multiprocessing.get_context("forkserver")
_FORKS.set_forkserver_preload(["reliability_writer"])

# Reduced sizes in CI; MCP_AGENT_FULL=1 runs the full-size versions.
FULL = os.environ.get("MCP_AGENT_FULL") == "1"


def size(reduced: int, full: int) -> int:
    return full if FULL else reduced


# --- the writer child -------------------------------------------------------------------------


@dataclass
class Acks:
    """What a writer child acknowledged: sessions created and entries stored, per session."""

    sessions: list[str] = field(default_factory=list)
    entries: dict[str, list[str]] = field(default_factory=dict)
    ready: bool = False
    done: bool = False
    errors: list[str] = field(default_factory=list)

    def add(self, line: str) -> None:
        kind, _, rest = line.partition(" ")
        if kind == "READY":
            self.ready = True
        elif kind == "DONE":
            self.done = True
        elif kind == "S":
            self.sessions.append(rest)
            self.entries.setdefault(rest, [])
        elif kind == "E":
            session_id, entry_id = rest.split(" ")
            self.entries.setdefault(session_id, []).append(entry_id)
        elif kind == "ERROR":
            self.errors.append(rest)

    @property
    def count(self) -> int:
        return sum(len(ids) for ids in self.entries.values())


def from_connection(connection: Connection) -> IO[bytes]:
    """The read end of a one-way pipe as a file (``connection`` closed)."""
    file = os.fdopen(os.dup(connection.fileno()), "rb")
    connection.close()
    return file


class WriterProcess:
    """``reliability_writer.py`` as a child process (forked, see ``_FORKS``), its
    acknowledgements read by a thread (so a full pipe never slows the child down). Only
    complete lines count: a line cut off by a kill acknowledges nothing."""

    def __init__(self, backend: str, path: Path, seed: int, *args: str) -> None:
        out_read, out_write = _FORKS.Pipe(duplex=False)
        err_read, err_write = _FORKS.Pipe(duplex=False)
        self.process = _FORKS.Process(
            target=reliability_writer.forked,
            args=([backend, str(path), str(seed), *args], out_write, err_write),
        )
        self.process.start()
        out_write.close()
        err_write.close()
        self.stdout: IO[bytes] = from_connection(out_read)
        self.stderr: IO[bytes] = from_connection(err_read)
        self.acks = Acks()
        self._ready = threading.Event()
        self._heard = threading.Condition()  # each line read, and the end of the output
        self._ended = False
        self._stderr = b""
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self._err_reader = threading.Thread(target=self._read_stderr, daemon=True)
        self._err_reader.start()

    def _read(self) -> None:
        with self.stdout:
            for raw in self.stdout:
                if not raw.endswith(b"\n"):
                    break  # torn by the kill: not an acknowledgement
                with self._heard:
                    self.acks.add(raw.decode().rstrip("\n"))
                    self._heard.notify_all()
                if self.acks.ready or self.acks.errors:
                    self._ready.set()
        with self._heard:
            self._ended = True
            self._heard.notify_all()
        self._ready.set()

    def _read_stderr(self) -> None:
        with self.stderr:
            self._stderr = self.stderr.read()

    def wait_ready(self, timeout: float = 30) -> None:
        if not self._ready.wait(timeout):
            self.kill()
            raise AssertionError("writer did not start")
        assert not self.acks.errors, self.describe()

    def wait_acknowledged(self, count: int, timeout: float = 30) -> None:
        """Until the writer has acknowledged ``count`` entries in all: however loaded the
        machine, a kill after this lands after real work, not only in the start."""
        with self._heard:
            heard = self._heard.wait_for(
                lambda: self._ended or bool(self.acks.errors) or self.acks.count >= count, timeout
            )
            assert heard, (
                f"the writer acknowledged {self.acks.count} of {count} entries in {timeout} s"
            )
            assert self.acks.count >= count, f"the writer ended early: {self.describe()}"

    def kill(self) -> None:
        if self.process.exitcode is None:
            self.process.kill()
        self.finish()

    def finish(self, timeout: float = 60) -> int:
        self.process.join(timeout)
        code = self.process.exitcode
        if code is None:
            self.process.kill()
            self.process.join(10)
            raise AssertionError(f"writer did not finish within {timeout} s")
        self._reader.join(10)
        self._err_reader.join(10)
        return code

    def describe(self) -> str:
        return f"errors={self.acks.errors} stderr={self._stderr.decode(errors='replace')[-3000:]}"


# --- checks -----------------------------------------------------------------------------------


def check_tree(entries: list[SessionEntry], leaf_id: str | None, where: str) -> None:
    """Ids unique, every parent resolves, no cycles, and the leaf is where the log ends."""
    validate_tree(entries, lambda i: f"{where} entry {i + 1}")
    assert leaf_id == leaf_after(entries), f"{where}: leaf {leaf_id} != end of log"
    if leaf_id is not None:
        by_id = {e.id: e for e in entries}
        assert leaf_id in by_id, f"{where}: leaf {leaf_id} is not an entry"


def check_sqlite_store(path: Path) -> dict[str, list[SessionEntry]]:
    """Open the database as a new process would and check every session in it; returns each
    session's entries in append order."""
    repo = SqliteSessionRepo(path)
    try:
        conn = repo.database.conn
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        found: dict[str, list[SessionEntry]] = {}
        sessions = conn.execute(
            "SELECT id, header, leaf, name, first_user_message, next_seq, entry_count,"
            " message_count, tool_call_count, input_tokens, output_tokens, cache_read_tokens,"
            " cache_write_tokens, total_tokens, cost_total FROM sessions"
        ).fetchall()
        orphans = conn.execute(
            "SELECT count(*) FROM entries WHERE session_id NOT IN (SELECT id FROM sessions)"
        ).fetchone()[0]
        assert orphans == 0, f"{orphans} entries belong to no session"
        for row in sessions:
            (sid, header_json, leaf, name, first_user, next_seq, *counters) = row
            where = f"session {sid}"
            header = parse_header(json.loads(header_json), where)
            assert header.id == sid
            rows = conn.execute(
                "SELECT id, parent_id, type, role, seq, data FROM entries"
                " WHERE session_id = ? ORDER BY seq",
                (sid,),
            ).fetchall()
            # Each append takes the next sequence number in the same transaction.
            assert [r[4] for r in rows] == list(range(next_seq)), f"{where}: seq gaps"
            entries = []
            for entry_id, parent_id, kind, role, _seq, data in rows:
                entry = parse_entry(json.loads(data), f"{where} entry {entry_id}")  # no partials
                assert (entry.id, entry.parent_id, entry.type) == (entry_id, parent_id, kind)
                if isinstance(entry, MessageEntry):
                    assert role == entry.message.role
                entries.append(entry)
            check_tree(entries, leaf, where)
            oracle = InMemorySessionStorage(header, entries)
            stats = oracle.get_session_stats()
            expected = [
                stats.entry_count,
                stats.message_count,
                stats.tool_call_count,
                stats.input_tokens,
                stats.output_tokens,
                stats.cache_read_tokens,
                stats.cache_write_tokens,
                stats.total_tokens,
            ]
            assert counters[:-1] == expected, f"{where}: counters {counters} != {expected}"
            assert abs(counters[-1] - stats.cost_total) < 1e-9, f"{where}: cost"
            assert name == oracle.get_session_name(), f"{where}: name"
            assert first_user == first_user_text(entries), f"{where}: first user message"
            labels = dict(
                conn.execute(
                    "SELECT target_id, label FROM labels WHERE session_id = ?", (sid,)
                ).fetchall()
            )
            expected_labels = {
                e.target_id: oracle.get_label(e.target_id)
                for e in entries
                if isinstance(e, LabelEntry) and oracle.get_label(e.target_id)
            }
            assert labels == expected_labels, f"{where}: labels"
            # The branch read (one recursive query) reaches a root from the leaf.
            branch = repo.open(sid).get_branch()
            if leaf is not None:
                assert branch[-1].id == leaf and branch[0].parent_id is None, where
            found[sid] = entries
        # The full-text index covers exactly what it claims to (see its invariant).
        upto = conn.execute("SELECT value FROM meta WHERE key = 'fts_indexed_upto'").fetchone()[0]
        newest = conn.execute("SELECT coalesce(max(n), 0) FROM entries").fetchone()[0]
        assert upto <= newest or newest == 0, "index mark beyond the newest entry"
        repo.database.index_pending_text()
        conn.execute("INSERT INTO entries_fts (entries_fts) VALUES ('integrity-check')")
        indexed = conn.execute("SELECT n, session_id FROM fts_docs ORDER BY n").fetchall()
        expected_docs = conn.execute(
            "SELECT n, session_id FROM entries WHERE text IS NOT NULL ORDER BY n"
        ).fetchall()
        assert indexed == expected_docs, "full-text index out of step with the entries"
        return found
    finally:
        repo.close()


def check_jsonl_store(directory: Path) -> dict[str, list[SessionEntry]]:
    """Open every session file as a new process would (a torn last line is left unread, with
    a warning) and check it; returns each session's entries in file order."""
    found: dict[str, list[SessionEntry]] = {}
    for path in sorted(directory.glob("*.jsonl")):
        data = path.read_bytes()
        # Every line that was ended is whole; only an unended last line may be torn.
        for number, line in enumerate(data.split(b"\n")[:-1], 1):
            if line.strip():
                assert isinstance(json.loads(line), dict), f"{path}:{number}"
        repo = JsonlSessionRepo(directory)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # the torn-line warning is expected here
                session = repo.open(path.stem)
            entries = session.get_entries()
            check_tree(entries, session.leaf_id, str(path))
            if session.leaf_id is not None:
                branch = session.get_branch()
                assert branch[-1].id == session.leaf_id and branch[0].parent_id is None
            found[path.stem] = entries
        finally:
            repo.close()
        # A read changes nothing (pi, which takes no lock, may be writing a torn line): the
        # next append cuts it off.
        assert path.read_bytes() == data
    return found


def tear_last_line(path: Path, rng: random.Random, line: str) -> None:
    """Append the start of ``line`` without its end, as a write cut short by a power loss."""
    cut = rng.randint(1, max(1, len(line.encode()) - 2))
    with open(path, "ab") as handle:
        handle.write(line.encode()[:cut])
