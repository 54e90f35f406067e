"""A disk that fills up under the work beyond an append (test_disk_full.py has those): a fork,
a compaction and an agent run with tool calls in a real ``serve`` process, and the command
line's export and copy. Each is refused in words that say the disk is full, the server goes
on serving reads, nothing half-made is left (no session, no temporary file), every entry
acknowledged before is there, and the work succeeds once there is room again.

The store is on a tmpfs in a mount namespace of the process's own (root and util-linux's
``unshare``; skipped elsewhere), as in test_disk_full.py; the model is fakellm."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from providers_support import FakeLlm, fakellm_fixture  # noqa: F401  (the fakellm fixture)
from reliability_support import check_jsonl_store, check_sqlite_store
from test_disk_full import MOUNT_THEN, FullDiskServer, message

from mcp_agent.messages import UserMessage
from mcp_agent.sessions.sqlite import SqliteSessionRepo

FULL_WORDS = ("no room left", "is full")
# A run whose agent calls a tool (the built-in subagent) and answers with what it returned
# (the rules of tests/providers_fakellm.yaml, as the README's example).
DELEGATE = "Please ask a helper to greet the team"


def fill(path: Path) -> None:
    """Write ``path`` until the file system holding it has no room left."""
    with open(path, "wb", buffering=0) as handle:
        chunk = b"f" * 65536
        while True:
            try:
                handle.write(chunk)
            except OSError as error:
                assert error.errno == errno.ENOSPC, error
                if len(chunk) == 1:
                    return
                chunk = chunk[: len(chunk) // 2]


def says_full(text: str) -> bool:
    return any(words in text for words in FULL_WORDS) and "Error executing tool" not in text


@pytest.fixture(name="served")
def served_fixture(
    tmp_path: Path, request: pytest.FixtureRequest, fakellm: FakeLlm, monkeypatch: Any
) -> Iterator[tuple[FullDiskServer, Path, str]]:
    """A server whose store (a SQLite file or a JSONL folder, by the test's ``store``) is on a
    4 MiB tmpfs, its default model fakellm's OpenAI API."""
    store = request.param
    monkeypatch.setenv("OPENAI_BASE_URL", fakellm.openai_base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("MCP_AGENT_MODEL", "openai:gpt-4o-mini")
    for name in ("XDG_RUNTIME_DIR", "XDG_CONFIG_HOME"):
        folder = tmp_path / name.lower()
        folder.mkdir(mode=0o700)
        monkeypatch.setenv(name, str(folder))
    mount = tmp_path / "small"
    if store == "sqlite":
        args = ["--db", str(mount / "s.db")]
    else:
        args = ["--sessions-dir", str(mount), "--db", str(tmp_path / "leases.db")]
    server = FullDiskServer(mount, "4m", *args)
    try:
        yield server, mount, store
    finally:
        if server.process.poll() is None:
            server.stop()


def entry_ids(server: FullDiskServer, session_id: str) -> list[str]:
    ok, page = server.call("session_get", session_id=session_id, limit=0, view="entries")
    assert ok, page
    return [entry["id"] for entry in page["entries"]]


def session_count(server: FullDiskServer) -> int:
    ok, listing = server.call("session_list", limit=100)
    assert ok, listing
    return len(listing["sessions"])


def temporary_files(folder: Path) -> list[Path]:
    return [path for path in folder.iterdir() if path.suffix == ".tmp"]


@pytest.mark.parametrize("served", ["sqlite", "jsonl"], indirect=True)
def test_fork_compaction_and_run_on_a_full_disk_are_refused_and_work_again_with_room(
    served: tuple[FullDiskServer, Path, str], tmp_path: Path
) -> None:
    server, mount, store = served
    ok, created = server.call("session_create", name="kept")
    assert ok, created
    session_id = created["id"]
    for number in range(10):  # a session of some size: its fork needs room
        text = f"hello {number} " + "x" * 4000
        ok, said = server.call("session_append", session_id=session_id, entry=message(text))
        assert ok, said
    ok, ran = server.call("agent_run", prompt="hello there", session_id=session_id)
    assert ok and ran["status"] == "completed", ran
    acknowledged = entry_ids(server, session_id)
    sessions = session_count(server)

    filler = server.seen(mount / "filler")
    fill(filler)
    refusals: dict[str, str] = {}
    for size in (500, 0):  # until the session's own file has no room left either
        for number in range(50):
            text = f"filling {number} " + "y" * size
            ok, said = server.call("session_append", session_id=session_id, entry=message(text))
            if not ok:
                refusals["session_append"] = said
                break
            acknowledged.append(said["entryId"])
        else:
            raise AssertionError("the disk never filled")
    ok, said = server.call("session_fork", session_id=session_id)
    assert not ok, said
    refusals["session_fork"] = said
    ok, said = server.call("session_compact", session_id=session_id)
    assert not ok, said
    refusals["session_compact"] = said
    ok, said = server.call("agent_run", prompt=DELEGATE, session_id=session_id)
    assert not ok, said  # the run's first write is its prompt: nowhere to put it
    refusals["agent_run"] = said
    for tool, text in refusals.items():
        assert says_full(text), (tool, text)

    # Served still; nothing half-made visible, no temporary file left.
    assert session_count(server) == sessions
    assert entry_ids(server, session_id)[: len(acknowledged)] == acknowledged
    ok, exported = server.call("session_export", session_id=session_id)
    assert ok, exported
    assert not temporary_files(server.seen(mount))

    filler.unlink()
    ok, forked = server.call("session_fork", session_id=session_id)
    assert ok, forked
    ok, compacted = server.call("session_compact", session_id=session_id)
    assert ok, compacted
    ok, ran = server.call("agent_run", prompt=DELEGATE, session_id=session_id)
    assert ok and ran["status"] == "completed", ran
    now = entry_ids(server, session_id)
    assert set(acknowledged) <= set(now)
    assert not temporary_files(server.seen(mount))
    if store == "sqlite":  # a copy: a path through /proc/PID/root resolves outside
        copied = tmp_path / "copy"
        copied.mkdir()
        for name in ("s.db", "s.db-wal"):
            shutil.copyfile(server.seen(mount / name), copied / name)
        stored = check_sqlite_store(copied / "s.db")
    else:
        stored = check_jsonl_store(server.seen(mount))
    assert len(stored) == session_count(server)
    assert {entry.id for entry in stored[session_id]} >= set(acknowledged)
    assert "Traceback" not in server.stop()


def in_small_folder(mount: Path, size: str, *command: str) -> tuple[int, str, list[str]]:
    """Run ``command`` with ``mount`` a tmpfs of ``size`` (filled to the last byte first, by a
    file ``filler``) that only it sees: its exit code, its stderr, and the names in ``mount``
    after it (``filler`` left out)."""
    mount.mkdir()
    script = (
        'mount -t tmpfs -o "size=$1" tmpfs "$0" || exit 99; shift\n'
        'head -c 100M /dev/zero > "$0/filler" 2>/dev/null\n'
        '"$@"; code=$?; echo "--listing--" >&2; ls -A "$0" >&2; exit $code\n'
    )
    assert MOUNT_THEN  # the same mount, written out here to list the folder before it goes
    done = subprocess.run(
        ["unshare", "-m", "sh", "-c", script, str(mount), size, *command],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if done.returncode == 99 or "unshare:" in done.stderr:
        pytest.skip(f"no mount namespace here: {done.stderr.strip()}")
    said, _, listing = done.stderr.rpartition("--listing--\n")
    return done.returncode, said, [name for name in listing.split() if name != "filler"]


def big_session(db: Path) -> str:
    with SqliteSessionRepo(db) as repo:
        session = repo.create(name="big")
        for number in range(50):
            session.append_message(UserMessage(content=f"hello {number} " + "x" * 4000))
        return session.id


@pytest.mark.parametrize("target", ["file", "sqlite", "jsonl"])
def test_the_command_line_export_and_copy_to_a_full_disk_leave_nothing_behind(
    tmp_path: Path, target: str
) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root for a file system of its own")
    db = tmp_path / "s.db"
    session_id = big_session(db)
    before = db.read_bytes()
    mount = tmp_path / "small"
    cli = [sys.executable, "-m", "mcp_agent", "sessions"]
    if target == "file":
        command = [*cli, "export", session_id, "-o", str(mount / "out.jsonl"), "--db", str(db)]
    elif target == "sqlite":
        command = [*cli, "copy", "--from", str(db), "--to", str(mount / "copy.db")]
    else:
        command = [*cli, "copy", "--from", str(db), "--to", str(mount)]
    code, said, left = in_small_folder(mount, "1m", *command)
    assert code == 1, (code, said)  # a failure at run time, not bad input (2)
    assert "Traceback" not in said, said
    lines = said.strip().splitlines()
    assert any(says_full(line) or "No space left" in line for line in lines), said
    if target == "sqlite":  # a database made there may stay, holding no half session
        assert not [name for name in left if name.endswith(".tmp")], left
    else:
        assert left == [], left
    assert db.read_bytes() == before
