"""A session database damaged on disk (a page of zeros, a file that is no database): the
command line and the server say which file and what to do, in one line, never a traceback
(the command line's) or a bare "Error executing tool" (the server's)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from test_unreadable import StdioServer, request

from mcp_agent.messages import UserMessage
from mcp_agent.sessions.sqlite import SqliteSessionRepo

PAGE = 4096


def damaged_database(path: Path) -> str:
    """A database of a few sessions whose second page is zeros (as a disk or a copy may leave
    it); the id of one of its sessions."""
    with SqliteSessionRepo(path) as repo:
        for number in range(5):
            session = repo.create(name=f"session {number}")
            for turn in range(20):
                session.append_message(UserMessage(content=f"hello {turn} " + "x" * 500))
    with open(path, "r+b") as handle:
        handle.seek(PAGE)
        handle.write(bytes(PAGE))
    return session.id


def test_a_damaged_database_is_said_with_its_file_and_what_to_do(tmp_path: Path) -> None:
    db = tmp_path / "damaged.db"
    session_id = damaged_database(db)
    before = db.read_bytes()
    for args in (["list"], ["show", session_id], ["rename", session_id, "new name"]):
        done = subprocess.run(
            [sys.executable, "-m", "mcp_agent", "sessions", *args, "--db", str(db)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr
        said = done.stderr.strip()
        assert len(said.splitlines()) == 1, said
        assert f"the session database {db} is damaged" in said and "from a backup" in said

    assert db.read_bytes() == before  # (a server's start writes its leases' table)

    server = StdioServer("--db", str(db))
    server.initialize()
    for number, (tool, arguments) in enumerate(
        [
            ("session_list", {}),
            ("session_get", {"session_id": session_id}),
            (
                "session_append",
                {
                    "session_id": session_id,
                    "entry": {"type": "message", "role": "user", "content": "x"},
                },
            ),
        ],
        1,
    ):
        server.send(request(number, "tools/call", {"name": tool, "arguments": arguments}))
        result = server.answer()["result"]  # answered: the server lives on
        assert result["isError"], result
        text = result["content"][0]["text"]
        assert f"the session database {db} is damaged" in text, text
    assert "Traceback" not in server.stop()


def test_a_server_on_a_damaged_database_writes_nothing_to_it(tmp_path: Path) -> None:
    """A server started on a damaged database made its leases' table there (and would have
    written on, every write another chance to spread the damage: a page the damaged free
    list hands out twice). It now checks a database it has never served before writing to
    it, and writes nothing to one it found damaged: what still reads is served, every write
    is refused saying the file is damaged, and the file is as it was."""
    db = tmp_path / "damaged.db"
    session_id = damaged_database(db)
    before = db.read_bytes()
    server = StdioServer("--db", str(db))
    server.initialize()
    entry = {"type": "message", "role": "user", "content": "x"}
    for number, (tool, arguments) in enumerate(
        [
            ("session_append", {"session_id": session_id, "entry": entry}),
            ("session_create", {"name": "new"}),
            ("agent_run", {"prompt": "hello", "session_id": session_id, "model": "scripted:echo"}),
        ],
        1,
    ):
        server.send(request(number, "tools/call", {"name": tool, "arguments": arguments}))
        result = server.answer()["result"]
        assert result["isError"], result
        text = result["content"][0]["text"]
        assert f"the session database {db} is damaged" in text, text
    assert "Traceback" not in server.stop()
    assert db.read_bytes() == before
    wal = db.with_name(db.name + "-wal")
    assert not wal.exists() or wal.stat().st_size == 0
