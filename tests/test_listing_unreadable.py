"""session_list over a folder of session files (pi's layout) that holds files it cannot read,
through a real ``serve --sessions-dir`` over stdio: it lists the others and says how many it
left out, and why."""

from __future__ import annotations

import os
import sys
import uuid
from pathlib import Path

import pytest
from mcp import Client, StdioServerParameters
from mcp_support import call

from mcp_agent.messages import UserMessage
from mcp_agent.sessions import JsonlSessionRepo

pytestmark = pytest.mark.anyio


def over_stdio(folder: Path) -> Client:
    args = ["-m", "mcp_agent", "serve", "--sessions-dir", str(folder)]
    return Client(StdioServerParameters(command=sys.executable, args=args))


def good_sessions(folder: Path, count: int) -> list[str]:
    repo = JsonlSessionRepo(folder, layout="pi")
    ids = []
    for n in range(count):
        session = repo.create(name=f"good {n}", cwd="/work/project")
        session.append_message(UserMessage(content=f"hello {n}", timestamp=1))
        ids.append(session.id)
    repo.close()
    return ids


async def test_files_a_listing_cannot_read_are_counted_and_said_not_hidden(tmp_path: Path) -> None:
    """A file whose first line is damaged, or that cannot be read at all (no permission; a
    folder named like a session file, as root may read any file), was silently left out of
    session_list: a client saw fewer sessions than the folder holds and no reason."""
    folder = tmp_path / "sessions"
    good = good_sessions(folder, 2)
    (project,) = [path for path in folder.iterdir() if path.is_dir()]
    damaged = project / f"2026-01-01T00-00-00-000Z_{uuid.uuid4()}.jsonl"
    damaged.write_text('{"type":"session","id":\n{"type":"message"}\n')
    unreadable = project / f"2026-01-01T00-00-01-000Z_{uuid.uuid4()}.jsonl"
    if os.geteuid() == 0:
        unreadable.mkdir()
    else:
        unreadable.write_text("{}\n")
        unreadable.chmod(0)
    async with over_stdio(folder) as client:
        listed = await call(client, "session_list")
        # One at a time: each page says what it had to leave out, the next ones too.
        pages, cursor = [], None
        while True:
            page = await call(client, "session_list", limit=1, cursor=cursor)
            pages.append(page)
            if page["nextCursor"] is None:
                break
            cursor = page["nextCursor"]
    assert sorted(s["id"] for s in listed["sessions"]) == sorted(good)
    said = listed["unreadable"]
    assert said.startswith("2 session files of the folder could not be read and are not listed")
    assert f"{damaged}:1:" in said and f"cannot read {unreadable}" in said, said
    assert [s["id"] for p in pages for s in p["sessions"]] == [s["id"] for s in listed["sessions"]]
    told = " ".join(p.get("unreadable") or "" for p in pages)
    assert told.count(str(damaged)) == 1 and told.count(str(unreadable)) == 1, told

    # A folder whose files all read says nothing of the kind.
    damaged.unlink()
    unreadable.rmdir() if unreadable.is_dir() else unreadable.unlink()
    async with over_stdio(folder) as client:
        listed = await call(client, "session_list")
    assert listed.get("unreadable") is None and len(listed["sessions"]) == 2
