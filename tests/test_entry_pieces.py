"""An entry larger than an answer read in pieces (session_get with offset), through a real
MCP client over stdio, by its text blocks alone (what most hosts show a model): the stubs name
the call, each answer the next one, and the pieces joined are the entry."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters
from mcp.types import TextContent, TextResourceContents
from mcp_support import call, call_error
from narrow import narrow

from mcp_agent.messages import TextContent as Text
from mcp_agent.messages import ToolResultMessage, UserMessage
from mcp_agent.server.paging import TEXT_BYTES, WHOLE_MAX
from mcp_agent.sessions import JsonlSessionRepo
from mcp_agent.sessions.sqlite import SqliteSessionRepo

pytestmark = pytest.mark.anyio

# Quotes, backslashes, line breaks, a control character, accents, Japanese and an emoji: each
# takes more than a byte in a JSON string, some more than a character in Python.
MIXED = 'say "hi"\\ now\n\tünï 日本語テキスト 🙂 \x01 end. '


def over_stdio(store: Path) -> Client:
    args = ["--sessions-dir", str(store)] if store.is_dir() else ["--db", str(store)]
    return Client(
        StdioServerParameters(command=sys.executable, args=["-m", "mcp_agent", "serve", *args])
    )


def written(store: Path, contents: list[str]) -> tuple[str, list[str]]:
    """A session in ``store`` (a database, or a folder of files) whose tool results hold
    ``contents``, a user message after each: its id and the results' entry ids."""
    repo = JsonlSessionRepo(store) if store.is_dir() else SqliteSessionRepo(store)
    session = repo.create(name="pieces")
    ids = []
    for content in contents:
        result = ToolResultMessage(
            tool_call_id="t1", tool_name="bash", content=[Text(text=content)], timestamp=2
        )
        ids.append(session.append_message(result))
        session.append_message(UserMessage(content="after", timestamp=3))
    repo.close()
    return session.id, ids


async def text_of(client: Client, **arguments: Any) -> dict[str, Any]:
    """A session_get answer as its text block has it (it must fit the text's bound)."""
    result = await client.call_tool("session_get", arguments)
    text = narrow(result.content[0], TextContent).text
    assert not result.is_error, text
    assert len(text.encode()) <= TEXT_BYTES
    answer: dict[str, Any] = json.loads(text)
    assert "textNote" not in answer  # nothing of it left out of the text
    return answer


def call_named(said: str, session_id: str, entry_id: str) -> dict[str, Any]:
    """The arguments of the piece call ``said`` names (its words, as a model reads them)."""
    found = re.search(
        r"session_get with session_id '([^']*)', entry_id '([^']*)' and offset (\d+)", said
    )
    assert found, said
    assert found.group(1, 2) == (session_id, entry_id), said
    return {"session_id": session_id, "entry_id": entry_id, "offset": int(found.group(3))}


@pytest.fixture(params=["sqlite", "jsonl"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    if request.param == "jsonl":
        (tmp_path / "sessions").mkdir()
        return tmp_path / "sessions"
    return tmp_path / "s.db"


async def test_an_entry_past_the_answer_bound_is_read_whole_in_pieces_of_text(
    store: Path,
) -> None:
    """The stub of an entry past what a text holds said only that session_get answered with
    it in its structured content: a model shown the text block could never read it. It names
    the call that reads it in pieces now; each piece's answer names the next, and the pieces
    joined in order are the entry's JSON, as its resource gives it."""
    big = MIXED * 6_000  # about 250,000 characters
    session_id, (entry_id,) = written(store, [big])
    async with over_stdio(store) as client:
        page = await text_of(client, session_id=session_id)
        (stub,) = [e for e in page["entries"] if e["id"] == entry_id]
        arguments = call_named(stub["omitted"], session_id, entry_id)
        assert arguments["offset"] == 0
        pieces: list[str] = []
        calls = 0
        while True:
            calls += 1
            answer = await text_of(client, **arguments)
            piece = answer["piece"]
            assert piece["offset"] == sum(map(len, pieces)) == arguments["offset"]
            assert piece["chars"] == len(piece["text"]) > 0
            pieces.append(piece["text"])
            assert piece["left"] == piece["totalChars"] - sum(map(len, pieces))
            assert answer["truncated"] == (piece["left"] > 0)
            if piece["next"] is None:
                assert piece["left"] == 0 and piece["nextOffset"] is None
                break
            arguments = call_named(piece["next"], session_id, entry_id)
            assert arguments["offset"] == piece["nextOffset"]
        resource = await client.read_resource(f"session://{session_id}/entries/{entry_id}")
        whole = narrow(resource.contents[0], TextResourceContents).text
        assert "".join(pieces) == whole
        assert json.loads(whole)["message"]["content"][0]["text"] == big
        assert 5 < calls < 40, calls  # pieces of tens of KB, not of a few characters

        # A length asks for smaller pieces (a host that shows less); the last may be short.
        small = await text_of(client, session_id=session_id, entry_id=entry_id, offset=7, length=5)
        assert small["piece"]["text"] == whole[7:12] and small["piece"]["nextOffset"] == 12
        end = len(whole) - 3
        last = await text_of(client, session_id=session_id, entry_id=entry_id, offset=end)
        assert last["piece"]["text"] == whole[end:] and last["piece"]["next"] is None


async def test_an_entry_past_what_one_answer_holds_names_its_pieces(tmp_path: Path) -> None:
    """Past the 8 MiB of one answer, the stub said only that the command line's export had
    the entry: no tool read it. It names the call of its first piece, which reads on."""
    db = tmp_path / "s.db"
    huge = "q" * (WHOLE_MAX + 1000)
    session_id, (entry_id,) = written(db, [huge])
    async with over_stdio(db) as client:
        page = await text_of(client, session_id=session_id)
        (stub,) = [e for e in page["entries"] if e["id"] == entry_id]
        assert "more than one answer holds" in stub["omitted"], stub
        first = await text_of(client, **call_named(stub["omitted"], session_id, entry_id))
        piece = first["piece"]
        assert piece["text"].startswith('{"type":"message"')
        assert piece["chars"] + piece["left"] == piece["totalChars"] > WHOLE_MAX
        tail = piece["totalChars"] - 20
        last = await text_of(client, session_id=session_id, entry_id=entry_id, offset=tail)
        assert last["piece"]["text"].endswith("}") and last["piece"]["left"] == 0


async def test_bad_reads_in_pieces_are_refused_saying_what_to_give(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    session_id, (entry_id,) = written(db, ["x" * 100])
    async with over_stdio(db) as client:
        whole = await call(client, "session_get", session_id=session_id, entry_id=entry_id, limit=1)
        size = len(json.dumps(whole["entries"][-1], ensure_ascii=False, separators=(",", ":")))
        said = await call_error(
            client, "session_get", session_id=session_id, entry_id=entry_id, offset=size
        )
        assert f"offset {size:,} is past the end of entry {entry_id!r}" in said, said
        assert f"{size:,} characters: give 0 to {size - 1:,}" in said, said
        said = await call_error(client, "session_get", session_id=session_id, offset=0)
        assert "offset needs entry_id" in said, said
        said = await call_error(
            client, "session_get", session_id=session_id, entry_id=entry_id, length=10
        )
        assert "length applies with offset only" in said, said
        said = await call_error(
            client,
            "session_get",
            session_id=session_id,
            entry_id=entry_id,
            offset=0,
            limit=1,
            view="tree",
        )
        assert "leave out view and limit" in said, said
        said = await call_error(
            client, "session_get", session_id=session_id, entry_id="nope", offset=0
        )
        assert "not_found: entry 'nope' not found" in said, said
        assert "(list entries with session_get)" in said, said
        said = await call_error(
            client, "session_get", session_id=session_id, entry_id=entry_id, offset=-1
        )
        assert "offset" in said, said
