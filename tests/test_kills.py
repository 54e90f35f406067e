"""A real ``serve`` process killed (SIGKILL) in the middle of a write, then started again."""

from __future__ import annotations

import fcntl
import json
import os
import time
from pathlib import Path

from mcp_support import poll
from test_unreadable import StdioServer

from mcp_agent.sessions.file_lock import TEMP_GRACE_SECONDS


def start(folder: Path, leases: Path) -> StdioServer:
    server = StdioServer("--sessions-dir", str(folder), "--db", str(leases))
    server.initialize()
    return server


def tool_call(request_id: int, tool: str, **arguments: object) -> str:
    params = {"name": tool, "arguments": arguments}
    return json.dumps(
        {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}
    )


def big_pi_file(entries: int) -> str:
    """A pi v3 session file of ``entries`` user messages, a few MB: long to write."""
    lines = [
        {
            "type": "session",
            "version": 3,
            "id": "0b6c0c4e-8a4e-4a0e-9d4e-3c0e6a7b9f10",
            "timestamp": "2026-01-01T00:00:00.000Z",
            "cwd": "/tmp",
        }
    ]
    parent = None
    for number in range(entries):
        entry_id = f"{number:08x}"
        message = {"role": "user", "content": f"message {number} " + "lorem " * 40}
        lines.append(
            {
                "type": "message",
                "id": entry_id,
                "parentId": parent,
                "timestamp": "2026-01-01T00:00:00.000Z",
                "message": {**message, "timestamp": 1767225600000 + number},
            }
        )
        parent = entry_id
    return "".join(json.dumps(line) + "\n" for line in lines)


def killed_mid_import(folder: Path, leases: Path, text: str) -> list[Path]:
    """Start a server, have it import ``text`` and kill it as soon as the temporary file of
    the import appears: that file (none if the import was over by then)."""
    server = start(folder, leases)
    server.send(tool_call(1, "session_import", jsonl=text))

    def writing() -> list[Path] | bool | None:
        return list(folder.glob("*.tmp")) or server.process.poll() is not None or None

    poll(writing, "an import that never wrote", tries=20_000, every=0.005)
    server.process.kill()
    server.process.wait()
    return [path for path in folder.glob("*.tmp") if path.exists()]


def test_a_temporary_file_left_by_an_import_killed_mid_write_is_removed_at_the_next_start(
    tmp_path: Path,
) -> None:
    """An import writes its file under a temporary name, renamed once whole. Killed before,
    that file stayed for good, one as large as the session for each killed import; the next
    server removes it (one whose writer lives, locked, it leaves)."""
    folder, leases = tmp_path / "sessions", tmp_path / "leases.db"
    folder.mkdir()
    text = big_pi_file(20_000)
    temps: list[Path] = []
    for _ in range(5):  # killed once the file is being written (not before, not after)
        temps = killed_mid_import(folder, leases, text)
        if temps:
            break
        for done in folder.glob("*.jsonl"):  # the import was done before it was killed
            done.unlink()
    else:
        raise AssertionError("the import was never caught writing")
    (left,) = temps
    assert not list(folder.glob("*.jsonl")), "a session was imported half"
    # Another writer's, alive (it holds its temporary file locked): kept, however old.
    alive = folder / "0b6c0c4e.jsonl12345678.tmp"
    alive.write_text("{}\n")
    # The next start may come at once (a client restarting its server), or later.
    old = time.time() - TEMP_GRACE_SECONDS - 1
    for path in (left, alive):
        os.utime(path, (old, old))
    with open(alive, "rb") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)
        server = start(folder, leases)
        try:
            assert not left.exists(), "the killed import's file is still there"
            assert alive.exists()
            server.send(tool_call(2, "session_import", jsonl=text))
            answer = server.answer()
            assert not answer["result"].get("isError"), answer
        finally:
            said = server.stop()
    assert "removed 1 temporary file(s) left by a process stopped while it wrote" in said
    assert sorted(path.suffix for path in folder.iterdir()) == [".jsonl", ".tmp"]
