"""pi resumes sessions our server wrote (tests/data/pi/resume.mjs: pi's SessionManager.open and
createAgentSession, as ``pi --session FILE`` does, then one question to a fake model on
loopback): the model and thinking level pi restores are the ones the session ran with, and
what pi sends the model is the session's context. Skipped when Node or pi is not installed
(.ci/peers)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp_support import TEST_AGENTS, agent_server, call, prompt_responder
from test_sessions_pi import PI, depth_first_tree, run_pi_many

from mcp_agent.sessions import JsonlSessionRepo, SqliteSessionRepo, build_session_context

DATA = Path(__file__).parent / "data" / "pi"

pytestmark = [
    pytest.mark.node,
    pytest.mark.skipif(PI is None, reason="Node or pi is not installed (.ci/peers)"),
]

# pi's models.json knows our scripted model by the same provider and id (one that reasons).
PI_MODELS = {"scripted": [{"id": "scripted", "reasoning": True}]}


def pi_resumes(
    agent_dir: Path, file: Path, models: dict[str, Any], settings: dict[str, Any] | None = None
) -> dict[str, Any]:
    """What pi restores from ``file`` (with ``settings`` as its settings.json), the entries it
    appends for one question, and the messages it sent the model."""
    assert PI is not None
    node, peers = PI
    args = [node, str(DATA / "resume.mjs"), str(peers), str(agent_dir), str(file)]
    args += [json.dumps(models), json.dumps(settings or {})]
    done = subprocess.run(args, capture_output=True, text=True, timeout=60, check=True)
    return json.loads(done.stdout)


def run_in_folder(
    tmp_path: Path, sessions: Path, agent: str, prompt: str, session_id: str | None = None
) -> str:
    """One agent_run of ``agent`` in a session kept in ``sessions`` (a new one by default);
    its id."""

    async def run() -> str:
        server = agent_server(
            tmp_path, {"scripted": prompt_responder}, agents=TEST_AGENTS, sessions_dir=sessions
        )
        async with Client(server) as client:
            given = {"session_id": session_id} if session_id else {}
            done = await call(client, "agent_run", prompt=prompt, agent=agent, **given)
            assert done["status"] == "completed"
            return str(done["sessionId"])

    return anyio.run(run)


@pytest.mark.parametrize(("agent", "level"), [("default", "off"), ("thinker", "high")])
def test_pi_resumes_our_session_at_the_model_and_thinking_level_it_ran_with(
    agent: str, level: str, tmp_path: Path
) -> None:
    """A session started at thinking level off says so, as pi's own do: pi takes a session
    that names no level for one nobody chose and runs it at its default (medium)."""
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    session_id = run_in_folder(tmp_path, sessions, agent, "hello")
    repo = JsonlSessionRepo(sessions)
    assert repo.open(session_id).build_context().thinking_level == level
    seen = pi_resumes(tmp_path / "pi", repo.path_for(session_id), PI_MODELS)
    assert seen["restored"] == {
        "model": {"provider": "scripted", "modelId": "scripted"},
        "thinkingLevel": level,
        "fallback": None,
    }
    # pi had nothing to record before the question: no level of its own choosing.
    assert [entry["type"] for entry in seen["appended"]] == ["message", "message"]
    asked = [m for m in seen["sent"][0] if m["role"] not in ("system", "developer")]
    assert [m["content"] for m in asked] == [
        [{"type": "text", "text": "hello"}],
        "echo: hello",
        [{"type": "text", "text": "asked in pi"}],
    ]
    resumed = JsonlSessionRepo(sessions).open(session_id).build_context()
    assert resumed.thinking_level == level
    assert resumed.model == {"provider": "scripted", "modelId": "scripted"}


def test_a_session_that_names_no_thinking_level_runs_at_the_agents_as_pi_runs_it_at_its_default(
    tmp_path: Path,
) -> None:
    """A file that sets no level (an older pi's, or messages appended through the tools) was
    run by nobody's choice: pi resumes it at its default level and ours at the agent's,
    each recording it, where ours ran it at off, the level a context has by default."""
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    session_id = "0199aaaa-0000-7000-8000-0000000000a1"
    header = {"type": "session", "version": 3, "id": session_id}
    header.update(timestamp="2026-01-15T08:30:00.000Z", cwd=str(tmp_path))
    stamp = "2026-01-15T08:30:01.000Z"
    rows: list[dict[str, Any]] = [
        header,
        {"type": "model_change", "id": "a0000001", "parentId": None, "timestamp": stamp},
        {"type": "message", "id": "a0000002", "parentId": "a0000001", "timestamp": stamp},
    ]
    rows[1].update(provider="scripted", modelId="scripted")
    rows[2]["message"] = {"role": "user", "content": "from an older pi", "timestamp": 1}
    file = sessions / f"{session_id}.jsonl"
    file.write_text("".join(json.dumps(row) + "\n" for row in rows))
    original = file.read_text()
    theirs = pi_resumes(tmp_path / "pi", file, PI_MODELS, {"defaultThinkingLevel": "high"})
    assert theirs["restored"]["thinkingLevel"] == "high"
    assert theirs["appended"][0] == {**theirs["appended"][0], "thinkingLevel": "high"}

    file.write_text(original)
    run_in_folder(tmp_path, sessions, "thinker", "and now", session_id)  # its level: high
    session = JsonlSessionRepo(sessions).open(session_id)
    assert session.build_context().thinking_level == "high"
    types = [entry.type for entry in session.get_entries()]
    assert types[2:5] == ["thinking_level_change", "active_tools_change", "message"]


def context_at(session: Any, leaf: str) -> dict[str, Any]:
    data = build_session_context(session.get_branch(leaf)).to_json_dict()
    data.pop("activeToolNames", None)  # ours only; pi has no active tools
    return data


def test_sessions_pis_agent_made_read_show_and_export_as_pi_reads_them(tmp_path: Path) -> None:
    """pi's AgentSession makes a session as a user of pi would (tests/data/pi/agent_session.mjs:
    tool calls, thinking and model changes, an image, a label, /tree with a branch summary,
    two compactions, a name) and a /fork of it. Our readers (pi's folder, SQLite, the MCP
    tools) agree with pi's on its entries, tree, name and the context at every entry, and pi
    reads our export as it read its own file."""
    assert PI is not None
    node, peers = PI
    agent_dir = tmp_path / "agent"
    script = [node, str(DATA / "agent_session.mjs"), str(peers), str(agent_dir)]
    done = subprocess.run(
        [*script, str(tmp_path / "project")], capture_output=True, text=True, timeout=60, check=True
    )
    made = json.loads(done.stdout)
    folder = JsonlSessionRepo(agent_dir / "sessions")
    database = SqliteSessionRepo(tmp_path / "s.db")
    at_pis_leaf: dict[str, dict[str, Any]] = {}
    files = [Path(made["file"]), Path(made["forkFile"])]
    entries_of = [[json.loads(line) for line in f.read_text().splitlines()[1:]] for f in files]
    leaves_of = [[entry["id"] for entry in entries] for entries in entries_of]
    imports = [database.import_session(file).session for file in files]
    exports = [tmp_path / f"exported-{n}.jsonl" for n in range(len(files))]
    for imported, exported in zip(imports, exports, strict=True):
        exported.write_text(database.export_jsonl(imported.id))
    # pi reads each file at every entry, and each export (one start of pi for them all)
    asked: list[tuple[Path, list[str] | None]] = list(zip(files, leaves_of, strict=True))
    pi_read = run_pi_many(asked + [(exported, None) for exported in exports])
    pis, backs = pi_read[: len(files)], pi_read[len(files) :]
    for file, entries, leaves, imported, theirs, back in zip(
        files, entries_of, leaves_of, imports, pis, backs, strict=True
    ):
        assert theirs["entries"] == entries
        types = {entry["type"] for entry in entries}
        assert {"compaction", "branch_summary", "label", "session_info"} <= types
        opened = folder.open(json.loads(file.read_text().splitlines()[0])["id"])
        for session in (opened, imported):
            assert [e.to_json_dict() for e in session.get_entries()] == entries
            assert session.leaf_id == theirs["manager"]["leafId"] == leaves[-1]
            assert session.name == theirs["manager"]["name"] == "made by pi"
            assert depth_first_tree(session.tree()) == theirs["manager"]["tree"]
            for leaf, result in zip(leaves, theirs["results"], strict=True):
                assert context_at(session, leaf) == result["context"], leaf
        at_pis_leaf[imported.id] = theirs["results"][-1]["context"]
        assert back["entries"] == entries  # pi reads our export as it read its own file

    async def over_mcp() -> None:
        server = agent_server(tmp_path, {"scripted": prompt_responder}, db_path=database.path)
        async with Client(server) as client:
            for session_id, expected in at_pis_leaf.items():
                served = await call(client, "session_context", session_id=session_id, limit=0)
                context = {key: served[key] for key in ("messages", "thinkingLevel", "model")}
                assert context == expected

    anyio.run(over_mcp)
    database.close()
