"""pi's own session folders (``~/.pi/agent/sessions/<cwd folder>/<time>_<id>.jsonl``): served
over MCP as resources, continued with agent_run, forked and deleted there, and read back by
pi's SessionManager and parse functions. The folder is made by pi itself when Node and pi are
installed (.ci/peers), and as files in pi's exact naming otherwise."""

from __future__ import annotations

import json
import os
import sys
import uuid
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.types import TextResourceContents
from mcp_support import TEST_AGENTS, agent_server, call, prompt_responder
from narrow import narrow
from pi_support import pi_script
from test_sessions_pi import PI, PI_ENTRY_TYPES, depth_first_tree, run_pi_many
from typer.testing import CliRunner

from mcp_agent.cli import app
from mcp_agent.messages import UserMessage
from mcp_agent.sessions import (
    InMemorySessionRepo,
    JsonlSessionRepo,
    SessionError,
    SqliteSessionRepo,
    build_session_context,
)
from mcp_agent.sessions.entries import file_json
from mcp_agent.sessions.folders import cwd_folder, pi_file_name
from mcp_agent.sessions.pi import parse_session_text

DATA = Path(__file__).parent / "data" / "pi"

# The sessions a test folder holds: (id, file, cwd), the first with a name and a label.
Made = list[dict[str, str]]


def run_folders(command: str, agent_dir: Path, seed: int | None = None) -> Any:
    """tests/data/pi/folders.mjs: pi's SessionManager making or reading ``agent_dir``."""
    job = {"command": command, "dir": str(agent_dir), "seed": None if seed is None else str(seed)}
    return pi_script(DATA / "folders.mjs").ask(job)["result"]


def line(data: dict[str, Any]) -> str:
    return json.dumps(data) + "\n"


def pi_assistant(text: str) -> dict[str, Any]:
    """An assistant message as pi records it."""
    cost = {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0}
    usage = {"input": 12, "output": 5, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 17}
    return {
        "role": "assistant",
        "content": [{"type": "text", "text": text}],
        "api": "openai-completions",
        "provider": "openai",
        "model": "gpt-4o-mini",
        "usage": {**usage, "cost": cost},
        "stopReason": "stop",
        "timestamp": 1768465800000,
    }


def hand_made(agent_dir: Path) -> Made:
    """What folders.mjs makes, written as pi writes it (names spelled out here, not computed
    by the code under test)."""

    def entry(kind: str, entry_id: str, parent: str | None, **fields: Any) -> dict[str, Any]:
        base = {"type": kind, "id": entry_id, "parentId": parent}
        return {**base, "timestamp": "2026-01-15T08:30:01.000Z", **fields}

    user = {"role": "user", "content": "hello pi", "timestamp": 1768465800000}
    later_time = {"timestamp": 1768554000500}  # the second session's, a day on
    later, answer = {**user, **later_time}, pi_assistant("other answer")
    first, second = str(uuid.uuid4()), str(uuid.uuid4())
    files = {
        (first, "/home/ada/app", "--home-ada-app--", "2026-01-15T08:30:00.000Z"): [
            entry("message", "a0000001", None, message=user),
            entry("message", "a0000002", "a0000001", message=pi_assistant("hi from pi")),
            entry("session_info", "a0000003", "a0000002", name="pi's first"),
            entry("label", "a0000004", "a0000003", targetId="a0000001", label="start"),
            entry("message", "a0000005", "a0000004", message={**user, "content": "second"}),
            entry("message", "a0000006", "a0000005", message=pi_assistant("second answer")),
        ],
        (second, "/home/ada/other:thing", "--home-ada-other-thing--", "2026-01-16T09:00:00.500Z"): [
            entry("message", "b0000001", None, message={**later, "content": "other question"}),
            entry("message", "b0000002", "b0000001", message={**answer, **later_time}),
        ],
    }
    made = []
    for (session_id, cwd, folder, moment), entries in files.items():
        header = {"type": "session", "version": 3, "id": session_id, "timestamp": moment}
        name = f"{moment.replace(':', '-').replace('.', '-')}_{session_id}.jsonl"
        path = agent_dir / "sessions" / folder / name
        path.parent.mkdir(parents=True)
        path.write_text(line({**header, "cwd": cwd}) + "".join(map(line, entries)))
        made.append({"id": session_id, "file": str(path), "cwd": cwd})
    return made


@pytest.fixture(params=[pytest.param("pi", marks=pytest.mark.node), "hand"])
def pi_folder(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[Path, Made]:
    """pi's agent folder holding two sessions in two working directories."""
    agent_dir = tmp_path / "agent"
    if request.param == "pi":
        if PI is None:
            pytest.skip("Node or pi is not installed (.ci/peers): pi cannot make the folder")
        return agent_dir, run_folders("make", agent_dir)
    return agent_dir, hand_made(agent_dir)


def context_of(repo: JsonlSessionRepo, session_id: str) -> dict[str, Any]:
    data = repo.open(session_id).build_context().to_json_dict()
    data.pop("activeToolNames", None)  # ours only; pi has no active tools
    return data


async def session_uris(client: Client) -> list[str]:
    uris: list[str] = []
    cursor = None
    while True:
        listed = await client.list_resources(cursor=cursor)
        uris += [r.uri for r in listed.resources if r.uri.startswith("session://")]
        if (cursor := listed.next_cursor) is None:
            return uris


async def serve_and_change(tmp_path: Path, sessions: Path, made: Made) -> tuple[str, str]:
    """Over MCP: the sessions listed and read, the first continued, a new one started, the
    first forked and the second deleted. The new session's id and the fork's."""
    first, second = made
    server = agent_server(
        tmp_path, {"scripted": prompt_responder}, agents=TEST_AGENTS, sessions_dir=sessions
    )
    async with Client(server) as client:
        assert sorted(await session_uris(client)) == sorted(f"session://{m['id']}" for m in made)
        resource = await client.read_resource(f"session://{first['id']}")
        shown = json.loads(narrow(resource.contents[0], TextResourceContents).text)
        assert shown["header"]["cwd"] == "/home/ada/app"
        assert shown["session"]["name"] == "pi's first"
        assert shown["branch"][0]["message"]["content"] == "hello pi"

        # The session's own model is pi's (openai, no key here): continue with ours.
        run = await call(
            client, "agent_run", prompt="third question", session_id=first["id"], model="scripted"
        )
        assert (run["status"], run["answer"]) == ("completed", "echo: third question")
        assert (await session_uris(client))[0] == f"session://{first['id']}"  # newest first
        fresh = await call(client, "agent_run", prompt="a new session")
        fork = await call(client, "session_fork", session_id=first["id"])
        assert await call(client, "session_delete", session_id=second["id"])
        assert sorted(await session_uris(client)) == sorted(
            f"session://{i}" for i in (first["id"], fresh["sessionId"], fork["id"])
        )
        return fresh["sessionId"], fork["id"]


def test_pis_folder_served_continued_forked_and_read_back_by_pi(
    pi_folder: tuple[Path, Made], tmp_path: Path
) -> None:
    agent_dir, made = pi_folder
    sessions = agent_dir / "sessions"
    first, second = made
    fresh_id, fork_id = anyio.run(serve_and_change, tmp_path, sessions, made)

    # The continued session grew in its own file; new ones are where pi puts them.
    files = sorted(p.relative_to(sessions) for p in sessions.rglob("*.jsonl"))
    first_file = Path(first["file"]).relative_to(sessions)
    assert first_file in files
    assert not Path(second["file"]).exists()
    assert "third question" in Path(first["file"]).read_text()
    repo = JsonlSessionRepo(sessions)
    assert repo.layout == "pi"
    fresh_session = repo.open(fresh_id)
    fresh_file = Path(cwd_folder(os.getcwd())) / pi_file_name(fresh_session.header)
    fork_session = repo.open(fork_id)
    fork_file = Path("--home-ada-app--") / pi_file_name(fork_session.header)
    assert files == sorted([first_file, fresh_file, fork_file])
    assert fork_session.header.parent_session == first["file"]  # as pi names a parent
    assert repo.summary(fork_id).parent_session == first["id"]

    if PI is None:
        pytest.skip("Node or pi is not installed (.ci/peers): pi cannot read the folder back")
    read = {r["id"]: r for r in run_folders("read", agent_dir)}
    assert set(read) == {first["id"], fresh_id, fork_id}
    assert read[fork_id]["parentSessionPath"] == first["file"]
    assert read[first["id"]]["name"] == "pi's first"
    for session_id, seen in read.items():
        ours = repo.open(session_id)
        assert seen["path"] == str(repo.path_for(session_id))
        assert seen["header"] == ours.header.to_json_dict()
        # As the file holds them: ours pi has no type for as its custom entries.
        assert seen["entries"] == [json.loads(file_json(e)) for e in ours.get_entries()]
        assert {e["type"] for e in seen["entries"]} <= PI_ENTRY_TYPES
        assert seen["leafId"] == ours.leaf_id
        assert seen["context"] == seen["parsedContext"] == context_of(repo, session_id)
    asked = [m["content"] for m in read[first["id"]]["context"]["messages"] if m["role"] == "user"]
    assert asked[-1] == [{"type": "text", "text": "third question"}]


def test_pi_named_files_open_by_id_in_either_layout(tmp_path: Path) -> None:
    """pi's SessionManager.create(cwd, dir) puts its names straight into ``dir``: a flat
    folder reads them too, and a new session there is still written flat."""
    made = hand_made(tmp_path / "agent")
    flat = tmp_path / "flat"
    flat.mkdir()
    moved = flat / Path(made[0]["file"]).name
    Path(made[0]["file"]).rename(moved)
    repo = JsonlSessionRepo(flat)
    assert repo.layout == "flat"
    session = repo.open(made[0]["id"])
    assert session.name == "pi's first"
    assert repo.path_for(session.id) == moved
    ours = repo.create(cwd="/home/ada/app")
    assert (flat / f"{ours.id}.jsonl").exists()
    assert [s.id for s in repo.list().items] == [ours.id, session.id]
    assert JsonlSessionRepo(tmp_path / "agent" / "sessions").layout == "pi"


def test_a_pi_fork_copied_to_another_store_lists_its_parent_by_id(tmp_path: Path) -> None:
    """pi's layout names a fork's parent by its file, and the header keeps that wherever the
    session is copied; every store's listing gives the parent's id, to open it by."""
    made = hand_made(tmp_path / "agent")
    folder = JsonlSessionRepo(tmp_path / "agent" / "sessions")
    fork = folder.fork(made[0]["id"])
    assert fork.header.parent_session == made[0]["file"]
    for repo in (InMemorySessionRepo(), SqliteSessionRepo(tmp_path / "s.db")):
        repo.import_session(folder.path_for(fork.id))
        assert repo.open(fork.id).header.parent_session == made[0]["file"]
        assert repo.summary(fork.id).parent_session == made[0]["id"]
        assert [s.parent_session for s in repo.list().items] == [made[0]["id"]]
        repo.close()


@pytest.mark.node
@pytest.mark.skipif(PI is None, reason="Node or pi is not installed (.ci/peers)")
def test_a_fork_made_through_a_relative_folder_names_its_parent_as_pi_lists_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``sessions fork --db agent/sessions`` (a folder given relative to where the command
    runs) named the parent file relative to that place, which pi, run in its project, cannot
    find: its /resume tree showed the fork apart from its parent. The parent is named by the
    path pi lists it under, as pi's own forks name it."""
    agent_dir = tmp_path / "agent"
    made = run_folders("make", agent_dir)
    monkeypatch.chdir(tmp_path)
    fork = JsonlSessionRepo(Path("agent") / "sessions").fork(made[0]["id"])
    listed = {seen["id"]: seen for seen in run_folders("read", agent_dir)}
    assert listed[fork.id]["parentSessionPath"] == listed[made[0]["id"]]["path"]


def test_listing_pis_folders_is_paged_newest_first(tmp_path: Path) -> None:
    repo = JsonlSessionRepo(tmp_path / "sessions", layout="pi")
    made = [repo.create(cwd=f"/work/p{i % 3}").id for i in range(7)]
    assert len(list((tmp_path / "sessions").iterdir())) == 3  # a folder per directory
    seen: list[str] = []
    page = repo.list(limit=3)
    while True:
        assert len(page.items) <= 3
        seen += [s.id for s in page.items]
        if page.next_cursor is None:
            break
        page = repo.list(limit=3, cursor=page.next_cursor)
    assert seen == made[::-1]
    again = JsonlSessionRepo(tmp_path / "sessions")  # another process: file times order it
    assert {s.id for s in again.list(limit=10).items} == set(made)
    assert [s.id for s in again.list(query="nothing matches").items] == []


@pytest.mark.skipif(PI is None, reason="Node or pi is not installed (.ci/peers)")
@pytest.mark.node
def test_a_folder_lists_in_pis_order_by_each_sessions_newest_message(tmp_path: Path) -> None:
    """pi lists sessions by the time of their newest message (else their header's), not by
    the files' times of change, which ordered ours: a label, a name or a copy of the file
    moves its time of change, not its place in pi's list; nor does a message of an earlier
    time written last (here on a branch), which placed ours by its time."""
    agent_dir = tmp_path / "agent"
    repo = JsonlSessionRepo(agent_dir / "sessions", layout="pi")
    made = {}
    asked = {}
    for name, cwd, at in (("old", "/w/a", 1000), ("new", "/w/b", 3000), ("mid", "/w/a", 2000)):
        session = repo.create(cwd=cwd)
        asked[name] = session.append_message(UserMessage(content=f"{name} q", timestamp=at))
        made[name] = session
    back = repo.create(cwd="/w/b")
    back.move_to(back.append_message(UserMessage(content="newest", timestamp=4000)))
    back.append_message(UserMessage(content="earlier time, written last", timestamp=500))
    empty = repo.create(cwd="/w/c")  # no message: its header's time, which is now
    made["old"].append_label(asked["old"], "touched last")
    made["mid"].set_name("renamed")
    os.utime(repo.path_for(made["new"].id), (1, 1))  # an old time of change
    theirs = [row["id"] for row in run_folders("read", agent_dir)]
    expected = [empty.id, back.id, made["new"].id, made["mid"].id, made["old"].id]
    assert theirs == expected
    for fresh in (False, True):  # this process's repo, and another's
        listing = JsonlSessionRepo(agent_dir / "sessions") if fresh else repo
        assert [s.id for s in listing.list().items] == expected
        page, paged = listing.list(limit=2), []
        while page.next_cursor is not None:
            paged += page.items
            page = listing.list(limit=2, cursor=page.next_cursor)
        assert [s.id for s in paged + page.items] == expected
        assert listing.summary(made["new"].id).modified.startswith("1970-01-01T00:00:03.000")


def test_a_file_named_for_another_session_is_refused_not_mixed_up(tmp_path: Path) -> None:
    made = hand_made(tmp_path / "agent")
    sessions = tmp_path / "agent" / "sessions"
    source = Path(made[1]["file"])
    wrong = source.with_name(source.name.replace(made[1]["id"], made[0]["id"].replace("-", "")))
    wrong_id = made[0]["id"].replace("-", "")
    source.rename(wrong)
    repo = JsonlSessionRepo(sessions)
    with pytest.raises(SessionError) as error:
        repo.open(wrong_id)
    assert error.value.code == "corrupt" and "holds another" in error.value.message
    assert [s.id for s in repo.list().items] == [made[0]["id"]]
    assert parse_session_text(wrong.read_text()).header.id == made[1]["id"]  # left as it was


def test_pis_folder_names() -> None:
    assert cwd_folder("/home/ada/other:thing") == "--home-ada-other-thing--"
    assert cwd_folder("C:\\Users\\ada") == "--C--Users-ada--"
    assert cwd_folder("/") == "----"


def test_a_session_pi_continued_before_any_answer_reads_as_pi_reads_it(tmp_path: Path) -> None:
    """pi continuing a file without an assistant message writes it all again before its own
    lines; the repeats are read once, as pi reads them."""
    repo = JsonlSessionRepo(tmp_path / "sessions", layout="pi")
    session = repo.create(name="named here", cwd="/home/ada/app")
    session.append_message(UserMessage(content="asked here", timestamp=1))
    path = repo.path_for(session.id)
    before = path.read_text()
    if PI is not None:
        seen = run_folders("continue", path)
    else:  # what pi 0.73.1 writes, by hand
        entries = [json.loads(row) for row in before.splitlines()[1:]]
        asked = {"role": "user", "content": "asked in pi", "timestamp": 2}
        answer = pi_assistant("answered in pi")
        added = [
            {"type": "message", "id": "c0000001", "parentId": entries[-1]["id"], "message": asked},
            {"type": "message", "id": "c0000002", "parentId": "c0000001", "message": answer},
        ]
        for row in added:
            row["timestamp"] = "2026-01-15T08:30:01.000Z"
        path.write_text(before + before + "".join(map(line, added)))
        seen = {"entries": entries + added, "leafId": "c0000002"}
    assert path.read_text().startswith(before + before)  # pi wrote it all again
    again = JsonlSessionRepo(tmp_path / "sessions").open(session.id)
    assert [e.to_json_dict() for e in again.get_entries()] == seen["entries"]
    assert again.leaf_id == seen["leafId"]
    assert again.name == "named here"
    user_texts = [
        narrow(m, UserMessage).text for m in again.build_context().messages if m.role == "user"
    ]
    assert user_texts == [
        "asked here",
        "asked in pi",
    ]
    # Imported into a database, from the file and from its text, it reads the same.
    for source in (path, path.read_text()):
        database = SqliteSessionRepo(tmp_path / f"imported-{type(source).__name__}.db")
        imported = database.import_session(source).session
        assert [e.to_json_dict() for e in imported.get_entries()] == seen["entries"]
        assert imported.leaf_id == seen["leafId"]
        database.close()


# A NUL is refused for every layout, before pi's folder name is made.
@pytest.mark.parametrize(
    ("cwd", "says"), [("/a" * 200, "pi's layout"), ("/bad\0cwd", "holds a NUL character")]
)
def test_a_cwd_that_makes_no_folder_name_is_refused_and_nothing_written(
    tmp_path: Path, cwd: str, says: str
) -> None:
    repo = JsonlSessionRepo(tmp_path / "sessions", layout="pi")
    with pytest.raises(SessionError) as error:
        repo.create(cwd=cwd)
    assert error.value.code == "invalid_argument" and says in error.value.message
    assert list((tmp_path / "sessions").iterdir()) == []


async def read_over_stdio(tmp_path: Path, sessions: Path, session_id: str) -> dict[str, Any]:
    """``serve --sessions-dir`` as a real child process: the session resource it lists."""
    command = ["-m", "mcp_agent", "serve", "--db", str(tmp_path / "leases.db")]
    command += ["--sessions-dir", str(sessions), "--model", "scripted:echo"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("MCP_AGENT_")}
    params = StdioServerParameters(command=sys.executable, args=command, env=env)
    with (tmp_path / "stderr.txt").open("w") as stderr:
        async with Client(stdio_client(params, errlog=stderr)) as client:
            uris = await session_uris(client)
            assert uris == [f"session://{session_id}"]
            resource = await client.read_resource(uris[0])
            return json.loads(narrow(resource.contents[0], TextResourceContents).text)


def test_serve_sessions_dir_shows_pis_sessions(tmp_path: Path) -> None:
    made = hand_made(tmp_path / "agent")
    sessions = tmp_path / "agent" / "sessions"
    Path(made[1]["file"]).unlink()
    before = Path(made[0]["file"]).read_bytes()
    shown = anyio.run(read_over_stdio, tmp_path, sessions, made[0]["id"])
    assert shown["session"]["name"] == "pi's first"
    assert "sessions stored in" in (tmp_path / "stderr.txt").read_text()
    files = [p for p in sessions.rglob("*") if p.is_file()]
    assert files == [Path(made[0]["file"])]  # reading wrote nothing
    assert Path(made[0]["file"]).read_bytes() == before


def test_only_pis_repeat_in_order_is_read_once_other_repeats_are_refused(tmp_path: Path) -> None:
    made = hand_made(tmp_path / "agent")
    path = Path(made[1]["file"])
    header, first, second = path.read_text().splitlines(keepends=True)
    repo = JsonlSessionRepo(tmp_path / "agent" / "sessions")
    # pi's repeat: the file had only the question when pi continued it, then pi answered.
    path.write_text(header + first + header + first + second)
    assert [e.id for e in repo.open(made[1]["id"]).get_entries()] == ["b0000001", "b0000002"]
    assert [e.id for e in parse_session_text(path.read_text()).entries] == ["b0000001", "b0000002"]
    path.write_text(header + first + header + second + first)  # not in the file's order
    with pytest.raises(SessionError) as error:
        repo.open(made[1]["id"])
    assert error.value.code == "corrupt" and "duplicate entry id b0000001" in error.value.message
    with pytest.raises(SessionError) as error:
        parse_session_text(path.read_text())
    assert error.value.code == "invalid_import"
    assert "duplicate entry id b0000001" in error.value.message


def test_after_an_answer_a_repeat_is_no_longer_pis(tmp_path: Path) -> None:
    """pi repeats a file only while it has no assistant message: after one, the same lines
    again are duplicates, refused as such."""
    header = line({"type": "session", "version": 3, "id": str(uuid.uuid4()), "cwd": "/a"})
    header = header.replace("}", ', "timestamp": "2026-01-15T08:30:00.000Z"}')
    rows: list[dict[str, Any]] = [
        {
            "type": "message",
            "id": "q0000001",
            "parentId": None,
            "message": {"role": "user", "content": "hi", "timestamp": 1},
        },
        {
            "type": "message",
            "id": "a0000001",
            "parentId": "q0000001",
            "message": pi_assistant("hey"),
        },
    ]
    for row in rows:
        row["timestamp"] = "2026-01-15T08:30:01.000Z"
    body = "".join(map(line, rows))
    with pytest.raises(SessionError) as error:
        parse_session_text(header + body + header + body)
    assert "<session>:4: a session header after the first line" in error.value.message


def test_sessions_list_of_a_folder_it_cannot_read_says_so(tmp_path: Path) -> None:
    """A folder whose only session has a damaged line (which we refuse, naming it) listed
    as 'no sessions yet (start one …)': it says that file could not be read, and why."""
    made = hand_made(tmp_path / "agent")
    for file in (Path(session["file"]) for session in made):
        lines = file.read_text().splitlines(keepends=True)
        file.write_text("".join([*lines[:2], '{"type":"message","id":"torn\n', *lines[2:]]))
    done = CliRunner().invoke(
        app, ["sessions", "list", "--db", str(tmp_path / "agent" / "sessions")]
    )
    assert done.exit_code == 0, done.output
    said = " ".join(done.stderr.split())
    assert "no sessions yet" not in said
    assert "no session could be read: 2 session files left out, unreadable:" in said
    assert all(f"{session['file']}:3: line is not valid JSON" in said for session in made)


def test_sessions_list_json_says_what_it_left_out_as_session_list_does(tmp_path: Path) -> None:
    """`sessions list --json` (for scripts, "like the MCP tools") gave a page with no word of
    the folder's files it could not read, where `session_list` says them in `unreadable`: a
    script saw a folder of damaged files as one without sessions. It now says them so too,
    and a folder read whole has no such key."""
    made = hand_made(tmp_path / "agent")
    folder = tmp_path / "agent" / "sessions"
    whole = CliRunner().invoke(app, ["sessions", "list", "--db", str(folder), "--json"])
    assert whole.exit_code == 0, whole.output
    assert "unreadable" not in json.loads(whole.stdout)
    damaged = Path(made[0]["file"])
    lines = damaged.read_text().splitlines(keepends=True)
    damaged.write_text("".join([*lines[:2], '{"type":"message","id":"torn\n', *lines[2:]]))
    done = CliRunner().invoke(app, ["sessions", "list", "--db", str(folder), "--json"])
    assert done.exit_code == 0, done.output
    listed = json.loads(done.stdout)
    assert len(listed["sessions"]) == len(made) - 1
    said = listed["unreadable"]
    assert said.startswith("1 session file of the folder could not be read"), said
    assert f"{damaged}:3: line is not valid JSON" in said


def test_sessions_list_of_an_empty_folder_names_what_fills_it(tmp_path: Path) -> None:
    """An empty folder of pi files listed as 'no sessions yet (start one with `run "…"` or
    `chat`)', which refuse a folder for --db: it names what keeps sessions there."""
    folder = tmp_path / ".pi" / "agent" / "sessions"
    folder.mkdir(parents=True)
    done = CliRunner().invoke(app, ["sessions", "list", "--db", str(folder)])
    assert done.exit_code == 0, done.output
    said = " ".join(done.stderr.split())
    assert "run" not in said and "chat" not in said, said
    assert "no sessions in this folder yet" in said and "serve --sessions-dir" in said
    refused = CliRunner().invoke(
        app, ["run", "hi", "--model", "scripted:echo", "--db", str(folder)]
    )
    assert refused.exit_code == 2 and "serve --sessions-dir" in refused.stderr


def test_the_sessions_commands_work_on_pis_folder(
    pi_folder: tuple[Path, Made], tmp_path: Path
) -> None:
    agent_dir, made = pi_folder
    first, second = made
    sessions = agent_dir / "sessions"
    runner = CliRunner()

    def cli(*args: str) -> str:
        done = runner.invoke(app, [*args, "--db", str(sessions)])
        assert done.exit_code == 0, (args, done.output)
        return done.output

    listed = json.loads(cli("sessions", "list", "--json"))["sessions"]
    assert [s["id"] for s in listed] == [second["id"], first["id"]]  # newest first
    assert "hello pi" in cli("sessions", "show", first["id"])
    exported = cli("sessions", "export", first["id"])
    assert parse_session_text(exported).header.id == first["id"]
    # A fork's header names its parent's file, as pi's do: shown by the parent's id, as listed.
    fork_id = json.loads(cli("sessions", "fork", first["id"], "--json"))["id"]
    assert JsonlSessionRepo(sessions).open(fork_id).header.parent_session == first["file"]
    for command in ("show", "tree"):
        shown = " ".join(cli("sessions", command, fork_id).split())
        assert f"forked from {first['id']}" in shown and first["file"] not in shown
    cli("sessions", "delete", fork_id, "--yes")
    cli("sessions", "rename", first["id"], "renamed here")
    cli("sessions", "delete", second["id"], "--yes")
    assert not Path(second["file"]).exists()
    again = JsonlSessionRepo(sessions)
    assert [(s.id, s.name) for s in again.list().items] == [(first["id"], "renamed here")]
    assert Path(first["file"]).exists()  # renamed in its own file, where pi finds it


@pytest.mark.node
@pytest.mark.parametrize("seed", range(2))
def test_sessions_pi_made_at_random_read_and_export_as_pi_reads_them(
    seed: int, tmp_path: Path
) -> None:
    """pi's SessionManager makes a session of every entry kind, branches, labels, names and
    compactions kept from anywhere; every store reads it as pi does (at every entry as the
    leaf), and pi reads the export back entry for entry."""
    if PI is None:
        pytest.skip("Node or pi is not installed (.ci/peers): pi cannot make the session")
    made = Path(run_folders("random", tmp_path / "made", seed)["file"])
    ids = [entry.id for entry in parse_session_text(made.read_text()).entries]
    repos = (
        InMemorySessionRepo(),
        SqliteSessionRepo(tmp_path / "s.db"),
        JsonlSessionRepo(tmp_path / "j"),
    )
    imports = [repo.import_session(made) for repo in repos]
    exports = [repo.export_jsonl(i.session.id) for repo, i in zip(repos, imports, strict=True)]
    exported = tmp_path / "exported.jsonl"
    exported.write_text(exports[0])
    # pi reads the file at every entry, and our export (one start of pi for both)
    theirs, back = run_pi_many([(made, ids), (exported, None)])
    manager = theirs["manager"]
    for repo, imported in zip(repos, imports, strict=True):
        kind = type(repo).__name__
        session = imported.session
        assert imported.notes == []
        assert [e.to_json_dict() for e in session.get_entries()] == theirs["entries"], kind
        assert (session.leaf_id, session.name) == (manager["leafId"], manager["name"]), kind
        assert depth_first_tree(session.tree()) == manager["tree"], kind
        for leaf, result in zip(ids, theirs["results"], strict=True):
            context = build_session_context(session.storage.get_context_path(leaf))
            ours = context.to_json_dict()
            ours.pop("activeToolNames", None)
            assert ours == result["context"], (kind, leaf)
        repo.close()
    assert exports.count(exports[0]) == len(exports)  # one file from every store
    assert back["entries"] == theirs["entries"]
