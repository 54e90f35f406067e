"""Where a search matched, through a real MCP client over stdio: session_list with a query
gives each session's best hits, session_search pages one session's, and session_get reads up
to a hit. The stores agree on the hits themselves (test_sessions_contract)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters
from mcp.types import TextContent
from mcp_support import call, call_error
from narrow import narrow

from mcp_agent.messages import TextContent as Text
from mcp_agent.messages import ToolResultMessage, UserMessage
from mcp_agent.server.paging import ANSWER_BYTES
from mcp_agent.sessions import JsonlSessionRepo
from mcp_agent.sessions.hits import SNIPPET_CHARS, snippet
from mcp_agent.sessions.repo import BaseSessionRepo
from mcp_agent.sessions.sqlite import SqliteSessionRepo
from mcp_agent.sessions.words import MAX_SEARCH_CHARS, query_words

pytestmark = pytest.mark.anyio


def user(text: str) -> UserMessage:
    return UserMessage(content=text, timestamp=1)


def over_stdio(db: Path) -> Client:
    """Our server over stdio, on the database ``db`` or the JSONL folder ``db``."""
    store = ["--sessions-dir", str(db), "--sessions-layout", "flat"] if db.is_dir() else []
    return Client(
        StdioServerParameters(
            command=sys.executable,
            args=["-m", "mcp_agent", "serve", *(store or ["--db", str(db)])],
        )
    )


@pytest.fixture(params=["sqlite", "jsonl"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    """A SQLite database or a folder of JSONL files, to serve."""
    if request.param == "jsonl":
        (tmp_path / "sessions").mkdir()
        return tmp_path / "sessions"
    return tmp_path / "s.db"


def open_store(db: Path) -> BaseSessionRepo:
    return JsonlSessionRepo(db, layout="flat") if db.is_dir() else SqliteSessionRepo(db)


def garden(db: Path) -> tuple[str, list[str], str]:
    """A session of 40 messages, every fourth about watering the apple tree, one more about
    apples alone and a tool's long output with the words deep inside; another session that
    mentions apples only."""
    repo = open_store(db)
    session = repo.create(name="garden")
    ids = []
    for i in range(40):
        words = "water the apple tree" if i % 4 == 0 else "weed the beds"
        ids.append(session.append_message(user(f"day {i}: {words}, then rest")))
    ids.append(session.append_message(user("an apple a day")))
    long = "log line\n" * 2000 + "the Apple 🍎 tree got its water 💧 at last\n" + "done\n" * 2000
    ids.append(
        session.append_message(
            ToolResultMessage(
                tool_call_id="t1", tool_name="bash", content=[Text(text=long)], timestamp=2
            )
        )
    )
    other = repo.create(name="orchard")
    other.append_message(user("apples only, nothing else"))
    repo.close()
    return session.id, ids, other.id


async def test_a_listing_with_a_query_says_where_each_session_matched(store: Path) -> None:
    db = store
    session_id, ids, other_id = garden(db)
    async with over_stdio(db) as client:
        listed = await call(client, "session_list", query="apple water")
        [found] = listed["sessions"]
        assert found["id"] == session_id and found["hitCount"] == 12
        # Best first: both words, the newest first; each hit small, its words marked.
        hits = found["hits"]
        assert [hit["entryId"] for hit in hits] == [ids[41], ids[36], ids[32]]
        assert hits[0]["role"] == "toolResult" and hits[0]["words"] == 2
        assert "the «Apple» 🍎 tree got its «water» 💧 at last" in hits[0]["snippet"]
        assert hits[0]["snippet"].startswith("…") and hits[0]["snippet"].endswith("…")
        assert hits[1] == {
            "entryId": ids[36],
            "type": "message",
            "role": "user",
            "timestamp": hits[1]["timestamp"],
            "words": 2,
            "onBranch": True,
            "snippet": "day 36: «water» the «apple» tree, then rest",
        }
        both = await call(client, "session_list", query="apple")
        assert {s["id"]: s["hitCount"] for s in both["sessions"]} == {
            session_id: 12,
            other_id: 1,
        }
        # Without a query, a listing is as it was: no hits.
        plain = await call(client, "session_list")
        assert all("hits" not in s and "hitCount" not in s for s in plain["sessions"])


async def test_a_search_in_one_session_pages_its_hits_and_leads_to_session_get(
    store: Path,
) -> None:
    db = store
    session_id, ids, _ = garden(db)
    async with over_stdio(db) as client:
        seen: list[dict[str, Any]] = []
        cursor = None
        while True:
            page = await call(
                client,
                "session_search",
                session_id=session_id,
                query="apple water",
                limit=4,
                cursor=cursor,
            )
            assert page["total"] == 12 and len(page["hits"]) <= 4
            seen.extend(page["hits"])
            cursor = page["nextCursor"]
            assert page["truncated"] == (cursor is not None)
            if cursor is None:
                break
        expected = [ids[41], *(ids[i] for i in range(36, -1, -4)), ids[40]]
        assert [hit["entryId"] for hit in seen] == expected
        assert [hit["words"] for hit in seen] == [2] * 11 + [1]
        # The path up to a hit ends at it.
        branch = await call(
            client, "session_get", session_id=session_id, entry_id=seen[1]["entryId"], limit=2
        )
        assert branch["entries"][-1]["id"] == ids[36]
        assert all(hit["onBranch"] for hit in seen)
        # Moved back to a hit, what came after it is on a branch left behind.
        await call(client, "session_move_to", session_id=session_id, entry_id=ids[36])
        page = await call(client, "session_search", session_id=session_id, query="apple water")
        after = {ids[40], ids[41]}
        assert [hit["onBranch"] for hit in page["hits"]] == [
            hit["entryId"] not in after for hit in page["hits"]
        ]
        [listed] = (await call(client, "session_list", query="water apple"))["sessions"]
        assert [hit["onBranch"] for hit in listed["hits"]] == [False, True, True]


async def test_a_hit_is_read_with_what_followed_it_page_by_page(store: Path) -> None:
    """session_get with from_entry_id reads a hit and the entries after it on its branch, in
    full, page after page forward; a hit on a branch left behind is read on the path to that
    branch's end. What it cannot read it refuses, saying why and what to do."""
    session_id, ids, _ = garden(store)
    async with over_stdio(store) as client:
        [hit, *_] = (await call(client, "session_search", session_id=session_id, query="water"))[
            "hits"
        ]
        assert hit["entryId"] == ids[41] and hit["onBranch"]
        hit = (await call(client, "session_search", session_id=session_id, query="day 8"))["hits"][
            0
        ]
        assert hit["entryId"] == ids[8]
        read: list[str] = []
        page = await call(
            client, "session_get", session_id=session_id, from_entry_id=ids[8], limit=10
        )
        assert page["total"] == len(ids) + 1  # the name's entry first
        while True:
            read.extend(entry["id"] for entry in page["entries"])
            assert page["truncated"]  # entries before the hit, at least
            if page["nextCursor"] is None:
                break
            page = await call(
                client,
                "session_get",
                session_id=session_id,
                from_entry_id=ids[8],
                cursor=page["nextCursor"],
                limit=10,
            )
        assert read == ids[8:]
        # Whole, the tool's long output too; limit 0: all of it from the hit on.
        whole = await call(
            client, "session_get", session_id=session_id, from_entry_id=ids[40], limit=0
        )
        assert [e["id"] for e in whole["entries"]] == ids[40:]
        assert "at last" in whole["entries"][-1]["message"]["content"][0]["text"]
        # A branch left behind: read on the path to its end.
        await call(client, "session_move_to", session_id=session_id, entry_id=ids[10])
        text = await call_error(client, "session_get", session_id=session_id, from_entry_id=ids[12])
        assert "not on the current branch" in text and f"entry_id={ids[12]}" in text, text
        on_path = await call(
            client,
            "session_get",
            session_id=session_id,
            entry_id=ids[14],
            from_entry_id=ids[12],
        )
        assert [e["id"] for e in on_path["entries"]] == ids[12:15]
        assert on_path["nextCursor"] is None
        for wrong, said in (
            ({"from_entry_id": "nope"}, "not found"),
            ({"from_entry_id": ids[3], "view": "tree"}, "applies to the view branch only"),
            ({"from_entry_id": ids[3], "view": "outline"}, "applies to the view branch only"),
            ({"from_entry_id": ids[3], "cursor": "before:3"}, "not one this tool handed out"),
            ({"from_entry_id": ids[3], "cursor": "after:99999"}, "not one this tool handed out"),
        ):
            text = await call_error(client, "session_get", session_id=session_id, **wrong)
            assert said in text, (wrong, text)


async def test_a_search_in_one_session_refuses_what_it_cannot_search(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    session_id, _, _ = garden(db)
    async with over_stdio(db) as client:
        for query in ("", "🎉", " ".join(f"w{i}" for i in range(33))):
            text = await call_error(client, "session_search", session_id=session_id, query=query)
            assert text.startswith("session_search: invalid_argument:"), text
        text = await call_error(
            client, "session_search", session_id=session_id, query="apple", cursor="before:3"
        )
        assert "invalid cursor" in text
        text = await call_error(
            client, "session_search", session_id="0" * 8, query="apple", limit=1
        )
        assert "not found" in text
        text = await call_error(
            client, "session_search", session_id=session_id, query="apple", limit=500
        )
        assert "limit" in text


async def test_a_search_of_megabytes_is_refused_before_it_is_split_into_words(
    store: Path,
) -> None:
    """A query of megabytes was split into words whole before its words were counted: two
    million accented words held the server's interpreter for about ten seconds, every other
    client's answer waiting, and a run of Chinese of any length is one phrase, searched as
    such. A search is refused past its characters' bound, as past its words', saying so."""
    session_id, _, _ = garden(store)
    async with over_stdio(store) as client:
        many_words, one_phrase = "é " * 1_000_000, "天" * 100_000
        for tool, arguments in [
            ("session_list", {"query": many_words}),
            ("session_list", {"query": one_phrase}),
            ("session_search", {"session_id": session_id, "query": one_phrase}),
        ]:
            text = await call_error(client, tool, **arguments)
            assert f"and {MAX_SEARCH_CHARS:,} characters, not " in text, text[:300]
        at_the_bound = "apple " + "天" * (MAX_SEARCH_CHARS - 6)
        assert (await call(client, "session_list", query=at_the_bound))["sessions"] == []


async def test_a_page_of_hits_stays_within_the_answer_size(tmp_path: Path) -> None:
    """Snippets of Japanese text are three bytes a character: a page of 100 of them stops
    at about ANSWER_BYTES, its text the whole answer, with a cursor for the rest."""
    db = tmp_path / "s.db"
    repo = SqliteSessionRepo(db)
    session = repo.create()
    for i in range(150):
        session.append_message(user("東京の天気は晴れ。" * 40 + f" {i}"))
    repo.close()
    async with over_stdio(db) as client:
        result = await client.call_tool(
            "session_search", {"session_id": session.id, "query": "天気", "limit": 100}
        )
        text = narrow(result.content[0], TextContent).text
        answer = result.structured_content
        assert answer is not None and json.loads(text) == answer
        assert 10 < len(answer["hits"]) < 100 and answer["total"] == 150
        assert len(text.encode()) < ANSWER_BYTES + 1024 and answer["nextCursor"] is not None
        for hit in answer["hits"]:
            assert len(hit["snippet"].replace("«", "").replace("»", "")) <= SNIPPET_CHARS + 2
            assert "«天気»" in hit["snippet"]


def test_a_snippet_cuts_between_words_and_never_inside_a_character() -> None:
    words = query_words("needle")
    text = "alpha beta gamma " * 20 + "the needle here " + "delta epsilon " * 20
    shown = snippet(text, words, 60)
    assert "«needle»" in shown and shown.startswith("… ") is False
    inner = shown.strip("…")
    assert all(part in text for part in inner.replace("«", "").replace("»", "").split())
    for word in inner.replace("«", "").replace("»", "").split():
        assert word in {"alpha", "beta", "gamma", "the", "needle", "here", "delta", "epsilon"}
    family, flag = "👩\u200d👩\u200d👧", "🇯🇵"
    for emoji in (family, flag, "👍🏽", "é", "q\u0301"):  # é as NFC writes e\u0301
        for size in range(20, 40):
            shown = snippet(emoji * 50 + " needle " + emoji * 50, words, size)
            body = shown.strip("…").replace("«needle»", " ").strip()
            assert body.replace(" ", "").replace(emoji, "") == "", (emoji, size, shown)
    # A matched word longer than a snippet: cut inside it, the snippet no longer.
    shown = snippet("see " + "needle" + "x" * 500 + " after", words, 40)
    assert shown.startswith("see «needlexxx") and shown.endswith("»…")
    assert len(shown) <= 40 + 3
    shown = snippet("東京の天気は晴れ" * 40, query_words("晴れ"), 30)
    assert len(shown.replace("«", "").replace("»", "").strip("…")) <= 30


async def test_a_hit_read_whole_keeps_the_hit_in_the_text(tmp_path: Path) -> None:
    """Read from a hit with limit 0 (all that followed), an answer past the text's 64 KB kept
    the newest entries in its text, leaving out the hit read from; it keeps the first."""
    db = tmp_path / "s.db"
    repo = SqliteSessionRepo(db)
    session = repo.create()
    session.append_message(user("before"))
    hit = session.append_message(user("the needle"))
    for i in range(40):
        session.append_message(user(f"after {i} " + "words " * 700))
    repo.close()
    async with over_stdio(db) as client:
        result = await client.call_tool(
            "session_get", {"session_id": session.id, "from_entry_id": hit, "limit": 0}
        )
        answer = result.structured_content
        assert answer is not None and len(answer["entries"]) == 41
        shown = json.loads(narrow(result.content[0], TextContent).text)
        assert shown["entries"][0]["id"] == hit and len(shown["entries"]) < 41
        assert f"the {41 - len(shown['entries'])} newest of the 41 entries" in shown["textNote"]
