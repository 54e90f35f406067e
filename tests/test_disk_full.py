"""A disk that fills up under a real ``serve`` process: each write it cannot make is refused
in one line, what was acknowledged before stays readable, the server goes on serving reads,
and writes work again once there is room.

The store is on a small tmpfs mounted in a mount namespace of the server's own (root and
util-linux's ``unshare``; skipped elsewhere). The test reaches that file system through
``/proc/<pid>/root``, the server's view of the files."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_unreadable import StdioServer

from mcp_agent.sessions.jsonl import JsonlSessionRepo

# Mount a tmpfs of $1 on $0, then become the command that follows (99: no mount here).
MOUNT_THEN = 'mount -t tmpfs -o "size=$1" tmpfs "$0" || exit 99; shift; exec "$@"\n'
INITIALIZE = {
    "protocolVersion": "2025-06-18",
    "capabilities": {},
    "clientInfo": {"name": "disk-full", "version": "1"},
}


class FullDiskServer(StdioServer):
    """``serve`` over stdio with ``mount`` (a folder) a tmpfs of ``size`` that only it sees."""

    def __init__(self, mount: Path, size: str, *args: str) -> None:
        if os.geteuid() != 0 or shutil.which("unshare") is None:
            pytest.skip("needs root and util-linux's unshare for a file system of its own")
        mount.mkdir()
        command = [sys.executable, "-m", "mcp_agent", "serve", *args]
        self.process = subprocess.Popen(
            ["unshare", "-m", "sh", "-c", MOUNT_THEN, str(mount), size, *command],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            bufsize=0,
        )
        self.ids = iter(range(1, 1 << 30))
        self.send(
            json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": INITIALIZE})
        )
        try:
            self.answer()
        except (AssertionError, json.JSONDecodeError):
            self.process.kill()
            said = self.process.communicate()[1].decode()
            if self.process.returncode == 99 or "unshare:" in said:
                pytest.skip(f"no mount namespace here: {said.strip()}")
            raise
        self.send(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        self.root = Path(f"/proc/{self.process.pid}/root")

    def seen(self, path: Path) -> Path:
        """``path`` as the server sees it (on its tmpfs)."""
        return self.root / path.relative_to("/")

    def call(self, tool: str, **arguments: Any) -> tuple[bool, Any]:
        """(True, the structured result) or (False, the tool error's text)."""
        request_id = next(self.ids)
        params = {"name": tool, "arguments": arguments}
        self.send(
            json.dumps(
                {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}
            )
        )
        result = self.answer()["result"]
        if result.get("isError"):
            return False, result["content"][0]["text"]
        return True, result["structuredContent"]


@pytest.fixture
def jsonl_server(tmp_path: Path) -> Iterator[tuple[FullDiskServer, Path]]:
    """A server of a JSONL folder on a 1 MiB tmpfs (its leases' database elsewhere)."""
    mount = tmp_path / "small"
    server = FullDiskServer(
        mount, "1m", "--sessions-dir", str(mount), "--db", str(tmp_path / "leases.db")
    )
    try:
        yield server, mount
    finally:
        if server.process.poll() is None:
            server.stop()


def message(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": text}


def test_a_jsonl_session_that_fills_the_disk_stays_whole_and_takes_appends_again(
    jsonl_server: tuple[FullDiskServer, Path],
) -> None:
    """Appends of every length, until the disk is full: a write cut short there (the room
    left ends inside the line) must not leave the rest of the line to be written after the
    failed append was cut off, which made the file unreadable from that line on."""
    server, mount = jsonl_server
    filler = server.seen(mount / "filler")
    filler.write_bytes(b"f" * 200_000)  # freed below, to make room again
    ok, created = server.call("session_create", name="filling up")
    assert ok, created
    session_id = created["id"]
    acknowledged: list[str] = []
    refusals: list[str] = []
    for number in range(1, 2000):
        # Lengths that end the room left anywhere in a line, across page boundaries.
        text = f"message {number} " + "y" * (1000 + number * 977 % 7000)
        ok, said = server.call("session_append", session_id=session_id, entry=message(text))
        if ok:
            acknowledged.append(said["entryId"])
        else:
            refusals.append(said)
            if len(refusals) == 5:
                break
    assert acknowledged and len(refusals) == 5, "the disk never filled"
    for refusal in refusals:
        assert "no room left to write" in refusal and "nothing was written" in refusal, refusal

    # Still served, whole: the file reads as every acknowledged entry and nothing more.
    ok, page = server.call("session_get", session_id=session_id, limit=0, view="entries")
    assert ok, page
    assert [e["id"] for e in page["entries"] if e["type"] == "message"] == acknowledged
    files = sorted(server.seen(mount).glob("*.jsonl"))
    assert len(files) == 1
    for number, line in enumerate(files[0].read_bytes().split(b"\n")[:-1], 1):
        assert isinstance(json.loads(line), dict), f"line {number} is not whole"

    filler.unlink()
    ok, said = server.call("session_append", session_id=session_id, entry=message("room again"))
    assert ok, said
    acknowledged.append(said["entryId"])
    with JsonlSessionRepo(server.seen(mount)) as repo:  # as another process reads it
        entries = repo.open(session_id).get_entries()
    assert [entry.id for entry in entries if entry.type == "message"] == acknowledged
    assert "Traceback" not in server.stop()
