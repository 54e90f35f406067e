"""Default answers stay bounded when one value is absurdly large: a message of megabytes is a
stub on its page (naming where it is whole), a name, label, cwd or metadata of a megabyte is
refused when written and cut with a marker when read (a pi file may hold one), and the whole
value stays one explicit request away."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import mcp.types as types
import pytest
from mcp import Client
from mcp.server import MCPServer
from mcp.shared.exceptions import MCPError
from mcp_support import call, call_error, make_server

from mcp_agent.server import paging
from mcp_agent.sessions import SessionError, SqliteSessionRepo
from mcp_agent.sessions.entries import METADATA_CHARS

pytestmark = pytest.mark.anyio

ANSWER_LIMIT = 64 * 1024
HUGE_TEXT = 3_000_000
MEGA = 1_048_576
CUT = f"[cut: {MEGA:,} characters in all]"
SID = "01a00000-0000-7000-8000-0000000000bb"


@pytest.fixture
def server(tmp_path: Path) -> MCPServer:
    return make_server(tmp_path)


def size(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False).encode())


async def bounded(client: Client, name: str, **arguments: Any) -> dict[str, Any]:
    """The structured result of a call, checked to fit the bound in text and structure."""
    result = await client.call_tool(name, arguments)
    assert not result.is_error, result.content[0].text  # type: ignore[union-attr]
    text = result.content[0].text  # type: ignore[union-attr]
    assert len(text.encode()) < ANSWER_LIMIT, (name, arguments, len(text))
    assert size(result.structured_content) < ANSWER_LIMIT, (name, arguments)
    assert result.structured_content is not None
    return result.structured_content


async def test_a_message_of_megabytes_is_a_stub_in_every_default_answer(
    server: MCPServer,
) -> None:
    async with Client(server) as client:
        sid = (await call(client, "session_create"))["id"]
        await call(client, "session_append", session_id=sid, entry=_user("before"))
        big = "z" * HUGE_TEXT
        entry_id = (await call(client, "session_append", session_id=sid, entry=_user(big)))[
            "entryId"
        ]
        await call(client, "session_append", session_id=sid, entry=_user("after"))
        where = f"session://{sid}/entries/{entry_id}"

        context = await bounded(client, "session_context", session_id=sid)
        assert [m.get("content") for m in context["messages"]][::2] == ["before", "after"]
        stub = context["messages"][1]
        assert stub["role"] == "user" and "timestamp" in stub and "content" not in stub
        assert where in stub["omitted"] and "too large for a page" in stub["omitted"]
        # Asked for whole, the context has it.
        whole = await call(client, "session_context", session_id=sid, limit=0)
        assert whole["messages"][1]["content"] == big
        for view in ("branch", "entries"):
            every = await call(client, "session_get", session_id=sid, view=view, limit=0)
            assert every["entries"][1]["message"]["content"] == big, view

        # The export, page by page from the top: the line is alone on its page, left out and
        # named; every other line comes as it is.
        lines: list[str] = []
        omitted: list[str] = []
        cursor = None
        while True:
            page = await bounded(client, "session_export", session_id=sid, cursor=cursor)
            if page.get("omitted") is not None:
                assert page["jsonl"] == "" and page["firstLine"] == 3
                omitted.append(page["omitted"])
            lines += page["jsonl"].splitlines()
            cursor = page["nextCursor"]
            if cursor is None:
                break
        assert len(lines) == 3 and len(omitted) == 1
        assert "line 3 " in omitted[0] and where in omitted[0]
        assert f"session://{sid}/export.jsonl" in omitted[0]
        everything = await call(client, "session_export", session_id=sid, limit=0)
        assert big in everything["jsonl"] and "omitted" not in everything

        # The context resource is its newest page, the prompt is bounded, and both say what
        # they leave out; the entry resource has it whole.
        read = (await client.read_resource(f"session://{sid}/context")).contents[0].text  # type: ignore[union-attr]
        assert len(read.encode()) < ANSWER_LIMIT
        shown = json.loads(read)
        assert where in shown["messages"][1]["omitted"] and shown["total"] == 3
        assert shown["truncated"] is False and shown["more"] is None
        prompt = await client.get_prompt("continue_session", {"session_id": sid})
        texts = [m.content.text for m in prompt.messages]  # type: ignore[union-attr]
        assert sum(len(text) for text in texts) < ANSWER_LIMIT
        assert texts[0] == "before" and texts[-1] == "after"
        assert "more characters of this message are left out" in texts[1]
        entry = (await client.read_resource(where)).contents[0].text  # type: ignore[union-attr]
        assert big in entry


async def thirty_messages(client: Client) -> str:
    """A new session of 30 user messages of about 160 characters; its id."""
    sid: str = (await call(client, "session_create"))["id"]
    for n in range(30):
        await call(client, "session_append", session_id=sid, entry=_user(f"line {n} " * 20))
    return sid


async def test_the_export_resource_is_the_file_up_to_its_bound_then_says_where_to_page(
    server: MCPServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with Client(server) as client:
        sid = await thirty_messages(client)
        uri = f"session://{sid}/export.jsonl"
        whole = (await client.read_resource(uri)).contents[0].text  # type: ignore[union-attr]
        assert whole == (await call(client, "session_export", session_id=sid, limit=0))["jsonl"]
        assert len(whole.splitlines()) == 31
        monkeypatch.setattr(paging, "WHOLE_MAX", len(whole.encode()) // 3)
        with pytest.raises(MCPError) as refused:
            await client.read_resource(uri)
        assert refused.value.error.code == types.INVALID_PARAMS
        said = refused.value.error.message
        assert "session_export" in said and f"sessions export {sid}" in said and uri in said
        monkeypatch.setattr(paging, "WHOLE_MAX", paging.json_size(whole))
        assert (await client.read_resource(uri)).contents[0].text == whole  # type: ignore[union-attr]
        with pytest.raises(MCPError) as missing:
            await client.read_resource(
                f"session://{'0' * 8}-0000-7000-8000-{'0' * 12}/export.jsonl"
            )
        assert "no session" in missing.value.error.message


async def test_an_entry_past_the_bound_is_named_with_the_one_way_to_read_it(
    server: MCPServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One entry was given whole at any size (an imported file's, or one sent over stdio): a
    TypeScript stdio client closes its connection on a message over 10 MiB. Past the bound
    the resource refuses it, and every stub of it names the command line's export, the one
    way to it whole (the stubs named the resource, whose refusal named session_get's stub: a
    circle), and session_get with limit 1, which shows it cut (said nowhere: the one way an
    MCP client has to see it)."""
    async with Client(server) as client:
        sid = (await call(client, "session_create"))["id"]
        big = _user("x" * 100_000)
        entry_id = (await call(client, "session_append", session_id=sid, entry=big))["entryId"]
        uri = f"session://{sid}/entries/{entry_id}"
        export = f"sessions export {sid} -o FILE"
        whole = (await client.read_resource(uri)).contents[0].text  # type: ignore[union-attr]
        assert json.loads(whole)["id"] == entry_id
        monkeypatch.setattr(paging, "WHOLE_MAX", paging.json_size(whole) - 1)
        with pytest.raises(MCPError) as refused:
            await client.read_resource(uri)
        assert refused.value.error.code == types.INVALID_PARAMS
        said = refused.value.error.message
        cut = f"session_get with entry_id {entry_id!r} and limit 1"
        assert export in said and cut in said, said
        stubs = [
            (await call(client, "session_get", session_id=sid))["entries"][-1]["omitted"],
            (await call(client, "session_context", session_id=sid))["messages"][-1]["omitted"],
            (await call(client, "session_export", session_id=sid, cursor="from:1"))["omitted"],
        ]
        # And the call that reads it in pieces, each answer naming the next.
        pieces = f"session_get with session_id {sid!r}, entry_id {entry_id!r} and offset 0"
        for stub in stubs:
            assert export in stub and cut in stub and pieces in stub and uri not in stub, stub
        (alone,) = (await call(client, "session_get", session_id=sid, entry_id=entry_id, limit=1))[
            "entries"
        ]
        assert "[cut: 100,000 characters in all]" in alone["message"]["content"], alone
        assert export in alone["omitted"] and pieces in alone["omitted"], alone
        assert cut not in alone["omitted"], alone  # (this is it)
        monkeypatch.setattr(paging, "WHOLE_MAX", paging.json_size(whole))
        assert (await client.read_resource(uri)).contents[0].text == whole  # type: ignore[union-attr]


async def test_an_answer_asked_for_whole_past_its_bound_is_refused_naming_the_pages(
    server: MCPServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with Client(server) as client:
        sid = await thirty_messages(client)
        asks: list[tuple[str, dict[str, Any]]] = [
            ("session_get", {}),
            ("session_get", {"view": "entries"}),
            ("session_get", {"view": "tree"}),
            ("session_context", {}),
            ("session_export", {}),
        ]
        exported = (await call(client, "session_export", session_id=sid, limit=0))["jsonl"]
        bound = paging.WHOLE_MAX
        # Smaller than each of those answers whole, larger than any page of them.
        monkeypatch.setattr(paging, "WHOLE_MAX", 5_000)
        for name, arguments in asks:
            said = await call_error(client, name, session_id=sid, limit=0, **arguments)
            assert "asked for whole (limit=0)" in said and "nextCursor" in said, said
            if name == "session_export":
                assert f"sessions export {sid} -o FILE" in said, said
            page = await call(client, name, session_id=sid, limit=5, **arguments)
            assert page["truncated"] is True, page
        monkeypatch.setattr(paging, "WHOLE_MAX", bound)
        for name, arguments in asks:
            again = await call(client, name, session_id=sid, limit=0, **arguments)
            assert again["truncated"] is False, again
        assert (await call(client, "session_export", session_id=sid, limit=0))["jsonl"] == exported


async def test_the_bound_on_a_whole_answer_counts_the_bytes_a_client_reads_not_characters(
    server: MCPServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The TypeScript SDK's stdio reader closes the connection on a line over 10 MiB, counted
    # in bytes: 4 M characters of Japanese (12 MB) asked for whole took the server away from
    # its host. An answer is held to the bound as sent: UTF-8, a text in a string escaped.
    async with Client(server) as client:

        async def japanese() -> tuple[str, str]:
            """A new session of ten messages of 1,800 kanji; its id and its last entry's."""
            sid = (await call(client, "session_create"))["id"]
            for _ in range(10):
                added = await call(
                    client, "session_append", session_id=sid, entry=_user("漢字" * 900)
                )
            return sid, added["entryId"]

        asks = [
            ("session_get", {}),
            ("session_get", {"view": "entries"}),
            ("session_context", {}),
            ("session_export", {}),
        ]
        # Measured on one session, asked of another just like it (a whole answer, once made,
        # is kept for the next ask).
        measured, _ = await japanese()
        sid, entry_id = await japanese()
        bound = paging.WHOLE_MAX
        for name, more in asks:
            monkeypatch.setattr(paging, "WHOLE_MAX", bound)
            answer = await call(client, name, session_id=measured, limit=0, **more)
            characters = len(json.dumps(answer, ensure_ascii=False))
            # Between the answer's characters and its bytes (three a character here).
            monkeypatch.setattr(paging, "WHOLE_MAX", characters * 3 // 2)
            said = await call_error(client, name, session_id=sid, limit=0, **more)
            assert "asked for whole (limit=0)" in said and "bytes" in said, (name, said)
        entry_uri = f"session://{sid}/entries/{entry_id}"
        export_uri = f"session://{sid}/export.jsonl"
        monkeypatch.setattr(paging, "WHOLE_MAX", bound)
        reads = [
            (await client.read_resource(uri)).contents[0].text  # type: ignore[union-attr]
            for uri in (entry_uri, export_uri)
        ]
        for uri, text in zip((entry_uri, export_uri), reads, strict=True):
            monkeypatch.setattr(paging, "WHOLE_MAX", len(text) * 3 // 2)
            with pytest.raises(MCPError) as refused:
                await client.read_resource(uri)
            assert refused.value.error.code == types.INVALID_PARAMS, uri
            # At the bound of its bytes as sent, the resource is read whole.
            monkeypatch.setattr(paging, "WHOLE_MAX", paging.json_size(text))
            assert (await client.read_resource(uri)).contents[0].text == text  # type: ignore[union-attr]


async def test_a_prompt_of_a_long_session_keeps_the_newest_messages_and_says_so(
    server: MCPServer,
) -> None:
    async with Client(server) as client:
        sid = (await call(client, "session_create"))["id"]
        for n in range(40):
            text = f"question {n} " + "q" * 5_000
            await call(client, "session_append", session_id=sid, entry=_user(text))
        prompt = await client.get_prompt("continue_session", {"session_id": sid})
        texts = [m.content.text for m in prompt.messages]  # type: ignore[union-attr]
        assert sum(len(text) for text in texts) < ANSWER_LIMIT + 1024
        kept = len(texts) - 1
        assert 0 < kept < 40 and texts[-1].startswith("question 39 ")
        assert f"The {40 - kept:,} oldest of the 40 messages of session {sid}" in texts[0]
        assert "session_context" in texts[0]
        context = json.loads(
            (await client.read_resource(f"session://{sid}/context")).contents[0].text  # type: ignore[union-attr]
        )
        assert context["truncated"] is True and context["total"] == 40
        assert "session_context with cursor" in context["more"]


async def test_names_labels_and_cwds_of_absurd_size_are_refused_and_nothing_is_written(
    server: MCPServer,
) -> None:
    async with Client(server) as client:
        huge = "n" * MEGA
        says = f"has {MEGA:,} characters; at most 1,000 are allowed"
        assert says in await call_error(client, "session_create", name=huge)
        cwd_says = f"cwd has {MEGA:,} characters; at most 4,096 are allowed"
        assert cwd_says in await call_error(client, "session_create", cwd="/" + "d" * (MEGA - 1))
        assert (await call(client, "session_list"))["sessions"] == []

        sid = (await call(client, "session_create", name="n" * 1000, cwd="/" + "d" * 4095))["id"]
        first = await call(client, "session_append", session_id=sid, entry=_user("hi"))
        label = {"type": "label", "targetId": first["entryId"], "label": huge}
        assert f"entry.label {says}" in await call_error(
            client, "session_append", session_id=sid, entry=label
        )
        name = {"type": "session_info", "name": huge}
        assert f"entry.name {says}" in await call_error(
            client, "session_append", session_id=sid, entry=name
        )
        raw = {
            "type": "pi",
            "json": json.dumps({"type": "label", "targetId": first["entryId"], "label": huge}),
        }
        assert says in await call_error(client, "session_append", session_id=sid, entry=raw)
        view = await call(client, "session_get", session_id=sid, view="entries")
        assert view["total"] == 2  # the name and the message: nothing else was written
        assert view["session"]["name"] == "n" * 1000  # at the bound: whole
        assert view["session"]["cwd"] == "/" + "d" * 4095


async def test_metadata_past_its_bound_is_refused_and_at_it_kept_whole(
    server: MCPServer,
) -> None:
    async with Client(server) as client:
        over = json.dumps({"blob": "m" * METADATA_CHARS})
        text = await call_error(client, "session_create", metadata=over)
        assert f"metadata has {METADATA_CHARS + 11:,} characters as JSON; at most 65,536" in text
        assert (await call(client, "session_list"))["sessions"] == []
        at = {"blob": "m" * (METADATA_CHARS - 11)}
        sid = (await call(client, "session_create", metadata=json.dumps(at)))["id"]
        shown = (await client.read_resource(f"session://{sid}")).contents[0].text  # type: ignore[union-attr]
        assert json.loads(shown)["header"]["metadata"] == at
    with pytest.raises(SessionError, match="metadata has"):
        SqliteSessionRepo(":memory:").create(metadata={"blob": "m" * METADATA_CHARS})


async def test_a_pi_file_with_a_name_label_and_cwd_of_a_megabyte_reads_cut_and_bounded(
    tmp_path: Path,
) -> None:
    lines = [
        {
            "type": "session",
            "version": 3,
            "id": SID,
            "timestamp": "2026-01-01T00:00:00.000Z",
            "cwd": "/" + "c" * (MEGA - 1),
            "metadata": {"blob": "m" * MEGA},
        },
        _pi(
            "00000001",
            None,
            {"type": "message", "message": {"role": "user", "content": "hi", "timestamp": 1}},
        ),
        _pi("00000002", "00000001", {"type": "label", "targetId": "00000001", "label": "l" * MEGA}),
        _pi("00000003", "00000002", {"type": "session_info", "name": "n" * MEGA}),
    ]
    path = tmp_path / "big.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    async with Client(make_server(tmp_path)) as client:
        imported = await bounded(client, "session_import", jsonl=path.read_text())
        assert imported["session"]["name"] == "n" * 1000 + "… " + CUT
        assert imported["session"]["cwd"].endswith(CUT)

        listed = await bounded(client, "session_list")
        assert listed["sessions"][0]["name"].endswith(CUT)
        for view in ("branch", "entries", "tree", "outline"):
            page = await bounded(client, "session_get", session_id=SID, view=view)
            assert page["session"]["name"].endswith(CUT), view
            nodes = page.get("nodes") or page.get("outline")
            if nodes:
                by_id = {node["id"]: node for node in nodes}
                assert by_id["00000001"]["label"] == "l" * 1000 + "… " + CUT, view
                assert len(by_id["00000002"]["preview"]) < 300, view
                assert len(by_id["00000003"]["preview"]) < 300, view
        resources = (await client.list_resources()).resources
        named = [r for r in resources if str(r.uri) == f"session://{SID}"]
        assert len(named[0].name) < 300 and len(named[0].title or "") < 300
        text = (await client.read_resource(f"session://{SID}")).contents[0].text  # type: ignore[union-attr]
        assert len(text.encode()) < ANSWER_LIMIT
        header = json.loads(text)["header"]
        assert header["cwd"].endswith(CUT) and header["id"] == SID
        assert header["metadata"] == {
            "cut": f"{MEGA + 11:,} characters of JSON, more than the 65,536 shown here;"
            f" line 1 of session://{SID}/export.jsonl has them"
        }

        # The whole values: the entries that set them, and the file.
        label = json.loads(
            (await client.read_resource(f"session://{SID}/entries/00000002")).contents[0].text  # type: ignore[union-attr]
        )
        assert label["label"] == "l" * MEGA
        whole = await call(client, "session_export", session_id=SID, limit=0)
        assert "n" * MEGA in whole["jsonl"] and "c" * (MEGA - 1) in whole["jsonl"]
        assert json.loads(whole["jsonl"].partition("\n")[0])["metadata"] == {"blob": "m" * MEGA}


@pytest.mark.parametrize("letter", ["n", "🚀"])
async def test_a_listing_of_long_names_and_paths_is_cut_by_size_and_the_cursor_goes_on(
    server: MCPServer, letter: str
) -> None:
    """A page of sessions stops at about 40 KB in bytes: counted in characters, names and
    paths of emoji (four bytes each) made pages of 140 KB."""
    async with Client(server) as client:
        made = set()
        for n in range(20):
            info = await call(
                client,
                "session_create",
                name=f"{n:02d}" + letter * 998,
                cwd="/" + letter * 4095,
            )
            made.add(info["id"])
        seen: list[str] = []
        cursor = None
        while True:
            page = await bounded(client, "session_list", cursor=cursor)
            assert page["sessions"]
            seen += [info["id"] for info in page["sessions"]]
            cursor = page["nextCursor"]
            if cursor is None:
                break
            assert page["truncated"] is True and len(page["sessions"]) < 20
        assert len(seen) == len(set(seen)) == 20 and set(seen) == made


def _user(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": text}


def _pi(entry_id: str, parent: str | None, fields: dict[str, Any]) -> dict[str, Any]:
    return {"id": entry_id, "parentId": parent, "timestamp": "2026-01-01T00:00:01.000Z", **fields}


async def test_the_stub_of_an_entry_whose_id_is_not_uri_safe_names_that_entry(
    server: MCPServer,
) -> None:
    ids = ["a/b", "a%2Fb", "?q=1", "#f", "x y"]
    lines = [
        {"type": "session", "version": 3, "id": SID, "timestamp": "2026-01-01T00:00:00.000Z"},
        *(
            _pi(
                entry_id,
                ids[n - 1] if n else None,
                {
                    "type": "message",
                    "message": {"role": "user", "content": f"{entry_id} " + "w" * 30_000},
                },
            )
            for n, entry_id in enumerate(ids)
        ),
    ]
    async with Client(server) as client:
        await call(client, "session_import", jsonl="".join(json.dumps(x) + "\n" for x in lines))
        page = await bounded(client, "session_get", session_id=SID)
        stubs = {entry["id"]: entry["omitted"] for entry in page["entries"]}
        assert sorted(stubs) == sorted(ids)
        for entry_id, omitted in stubs.items():
            uri = omitted.split("read ", 1)[1]
            read = await client.read_resource(uri)
            assert json.loads(read.contents[0].text)["id"] == entry_id, uri  # type: ignore[union-attr]


def test_a_cut_text_keeps_the_newest_items_whichever_end_they_are_at() -> None:
    import json

    from mcp_agent.server.paging import TEXT_BYTES
    from mcp_agent.server.schemas import shortened

    items = [json.dumps({"n": n, "pad": "x" * (TEXT_BYTES // 8)}) for n in range(20)]
    size = sum(map(len, items))
    newest_last = json.loads(shortened("{}", {"entries": items}, size))
    kept = [item["n"] for item in newest_last["entries"]]
    assert kept and kept[-1] == 19 and kept == list(range(20 - len(kept), 20))
    # session_list runs newest first: the cut keeps its head, and says the oldest went
    newest_first = json.loads(shortened("{}", {"sessions": items}, size, newest_first=True))
    kept = [item["n"] for item in newest_first["sessions"]]
    assert kept == list(range(len(kept))) and 0 < len(kept) < 20
    assert f"the {20 - len(kept)} oldest of the 20 sessions" in newest_first["textNote"]
    # The outline view's list is named for its rows (it said "of the 20 outline").
    outline = json.loads(shortened("{}", {"outline": items}, size))
    left = 20 - len(outline["outline"])
    assert f"the {left} oldest of the 20 outline rows" in outline["textNote"]


async def test_a_text_asked_for_whole_is_bounded_in_bytes_in_any_script(
    server: MCPServer,
) -> None:
    """The text block is what a model reads, about 64 KB: it was 64 Ki characters, so one of
    Japanese was 192 KB (and a token or more a character), three times past what hosts take."""
    async with Client(server) as client:
        sid = (await call(client, "session_create"))["id"]
        for _ in range(40):
            await call(client, "session_append", session_id=sid, entry=_user("漢字" * 1_000))
        result = await client.call_tool("session_context", {"session_id": sid, "limit": 0})
        text = result.content[0].text  # type: ignore[union-attr]
        assert len(result.structured_content["messages"]) == 40
        assert len(text.encode()) <= ANSWER_LIMIT, len(text.encode())
        shown = json.loads(text)
        assert 0 < len(shown["messages"]) < 40
        assert f"the {40 - len(shown['messages'])} oldest of the 40 messages" in shown["textNote"]


async def test_a_prompt_is_bounded_in_bytes_in_any_script(server: MCPServer) -> None:
    """The continue_session prompt, as a tool's text, holds about 64 KB (and one message
    about 20 KB): counted in characters, a session in Japanese made a prompt of 192 KB."""
    async with Client(server) as client:
        sid = (await call(client, "session_create"))["id"]
        for n in range(40):
            await call(
                client, "session_append", session_id=sid, entry=_user(f"{n} " + "漢字" * 1_000)
            )
        await call(client, "session_append", session_id=sid, entry=_user("語" * 30_000))
        prompt = await client.get_prompt("continue_session", {"session_id": sid})
        texts = [m.content.text for m in prompt.messages]  # type: ignore[union-attr]
        assert sum(len(text.encode()) for text in texts) < ANSWER_LIMIT + 1024
        assert len(texts[-1].encode()) < paging.ANSWER_BYTES // 2 + 1024
        assert "more characters of this message are left out" in texts[-1]
        assert "oldest of the 41 messages" in texts[0] and texts[-2].startswith("39 ")


async def test_an_import_whose_entry_ids_are_absurdly_long_is_refused(
    server: MCPServer,
) -> None:
    """An entry id is in every answer that names the entry (its stub, a tree node's parent
    and children, the session's leafId in every listing): ids of 200,000 characters from a
    pi file made a default page of one entry a megabyte. pi's ids are 8 characters; an
    import refuses one past ENTRY_ID_CHARS, saying where, and stores nothing."""
    from mcp_agent.sessions.entries import ENTRY_ID_CHARS

    header = {"type": "session", "version": 3, "id": SID, "timestamp": "2026-01-01T00:00:00Z"}
    for long in ("id", "parentId"):
        entry = _pi("e" * ENTRY_ID_CHARS, None, {"type": "custom", "customType": "x"})
        entry[long] = "i" * (ENTRY_ID_CHARS + 1)
        text = "".join(json.dumps(row) + "\n" for row in (header, entry))
        async with Client(server) as client:
            said = await call_error(client, "session_import", jsonl=text)
            assert f"<jsonl>:2: {long} of {ENTRY_ID_CHARS + 1:,} characters" in said, said
            assert (await call(client, "session_list"))["sessions"] == []
    fits = _pi("e" * ENTRY_ID_CHARS, None, {"type": "custom", "customType": "x"})
    async with Client(server) as client:
        text = "".join(json.dumps(row) + "\n" for row in (header, fits))
        await call(client, "session_import", jsonl=text)


async def test_an_exported_line_past_every_answer_names_the_read_that_shows_it_cut(
    server: MCPServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """session_get's and session_context's stubs of an entry past what one answer holds name
    session_get with its entry_id and limit 1 (it cut to fit, the one way an MCP client has to
    see it), but session_export's stub of its line named only the command line's export."""
    async with Client(server) as client:
        sid = (await call(client, "session_create"))["id"]
        big = _user("x" * 100_000)
        entry_id = (await call(client, "session_append", session_id=sid, entry=big))["entryId"]
        monkeypatch.setattr(paging, "WHOLE_MAX", 50_000)
        page = await bounded(client, "session_export", session_id=sid, cursor="from:1")
        assert page["jsonl"] == "" and page["nextCursor"] is None
        omitted = page["omitted"]
        assert f"line 2 (entry {entry_id}, " in omitted, omitted
        assert f"session_get with entry_id {entry_id!r} and limit 1" in omitted, omitted
        assert f"`mcp-agent-sessions sessions export {sid} -o FILE`" in omitted, omitted
        stub = (await call(client, "session_get", session_id=sid))["entries"][-1]["omitted"]
        assert stub.split("holds, so ", 1)[1] in omitted, (stub, omitted)


async def test_a_resource_of_deeply_nested_entries_is_bounded_as_its_tool_page(
    server: MCPServer,
) -> None:
    """A resource's page is chosen by the bytes of its entries as stored (compact JSON), and
    was sent indented (two spaces a level, a line each): three assistant messages of 150 small
    tool calls each made session://{id} 204 KB and …/context 184 KB, five times the 38 KB of
    session_get's text for the same page, past what a host gives a model."""
    calls = [
        {
            "type": "toolCall",
            "id": f"c{n}",
            "name": "f",
            "arguments": {"a": [1, [2, [3, {"b": 4}]]]},
        }
        for n in range(150)
    ]
    entry = {"type": "message", "message": {"role": "assistant", "content": calls}}
    async with Client(server) as client:
        sid = (await call(client, "session_create"))["id"]
        for _ in range(30):
            await call(
                client,
                "session_append",
                session_id=sid,
                entry={"type": "pi", "json": json.dumps(entry)},
            )
        for uri in (f"session://{sid}", f"session://{sid}/context", f"session://{sid}/tree"):
            text = (await client.read_resource(uri)).contents[0].text  # type: ignore[union-attr]
            assert len(text.encode()) < ANSWER_LIMIT, (uri, len(text.encode()))
            data = json.loads(text)
            assert data["truncated"] is (not uri.endswith("/tree")), uri
            assert text == json.dumps(data, ensure_ascii=False, separators=(",", ":")), uri
        entry_id = (await call(client, "session_get", session_id=sid, limit=1))["entries"][0]["id"]
        uri = f"session://{sid}/entries/{entry_id}"
        text = (await client.read_resource(uri)).contents[0].text  # type: ignore[union-attr]
        assert text == json.dumps(json.loads(text), ensure_ascii=False, separators=(",", ":"))


async def test_a_header_of_many_fields_of_its_own_reads_bounded_in_the_session_resource(
    server: MCPServer,
) -> None:
    """A pi file's header may hold fields of its own, which the session keeps; each was cut to
    4,096 characters in the session://{id} resource, but not their number: 500 of them made
    it 2 MB. Past a bound together they are left out, saying how many and where they are."""
    header: dict[str, Any] = {
        "type": "session",
        "version": 3,
        "id": SID,
        "timestamp": "2026-01-01T00:00:00.000Z",
        "cwd": "/x",
        "small": 1,
    }
    header |= {f"extra{n:03d}": "e" * 4000 for n in range(500)}
    entry = _pi("00000001", None, {"type": "message", "message": {"role": "user", "content": "hi"}})
    async with Client(server) as client:
        jsonl = "".join(json.dumps(line) + "\n" for line in (header, entry))
        await call(client, "session_import", jsonl=jsonl)
        text = (await client.read_resource(f"session://{SID}")).contents[0].text  # type: ignore[union-attr]
        assert len(text.encode()) < ANSWER_LIMIT, len(text.encode())
        shown = json.loads(text)["header"]
        assert shown["id"] == SID and shown["cwd"] == "/x" and shown["small"] == 1
        kept = [key for key in shown if key.startswith("extra")]
        assert kept == [f"extra{n:03d}" for n in range(len(kept))], kept
        assert f"{500 - len(kept):,} more fields of the file's header" in shown["leftOut"]
        assert f"line 1 of session://{SID}/export.jsonl has them" in shown["leftOut"]


async def test_a_context_whose_settings_are_absurdly_long_is_bounded_and_says_so(
    server: MCPServer,
) -> None:
    """The model, thinking level and active tools of a context came whole in every page of
    session_context and in session://{id}/context: a pi file's model id of a megabyte or
    100,000 active tool names made a default answer's structured content 3 MB (its text
    left the fields out). They are cut to a bound, and settingsCut says what is left out."""
    when = "2026-01-01T00:00:01.000Z"
    names = [f"tool{n}" for n in range(100_000)]
    lines = [
        {"type": "session", "version": 3, "id": SID, "timestamp": when, "cwd": "/x"},
        _pi("m1", None, {"type": "model_change", "provider": "p", "modelId": "m" * MEGA}),
        _pi("t1", "m1", {"type": "thinking_level_change", "thinkingLevel": "x" * MEGA}),
        _pi("a1", "t1", {"type": "active_tools_change", "activeToolNames": names}),
        _pi("u1", "a1", {"type": "message", "message": {"role": "user", "content": "hi"}}),
    ]
    async with Client(server) as client:
        jsonl = "".join(json.dumps(line) + "\n" for line in lines)
        await call(client, "session_import", jsonl=jsonl)
        page = await bounded(client, "session_context", session_id=SID)
        read = (await client.read_resource(f"session://{SID}/context")).contents[0].text  # type: ignore[union-attr]
        assert len(read.encode()) < ANSWER_LIMIT, len(read.encode())
        for shown in (page, json.loads(read)):
            assert shown["model"]["provider"] == "p"
            assert shown["model"]["modelId"].endswith(CUT), shown["model"]["modelId"][-80:]
            assert shown["thinkingLevel"].endswith(CUT)
            kept = shown["activeToolNames"]
            assert 0 < len(kept) < len(names) and kept == names[: len(kept)]
            cut = shown["settingsCut"]
            assert f"{len(names) - len(kept):,} more of the 100,000 active tool names" in cut
            assert "session_get" in cut, cut
        whole = await call(client, "session_context", session_id=SID, limit=0)
        assert whole["activeToolNames"] == names and "settingsCut" not in whole
        assert whole["model"]["modelId"] == "m" * MEGA


async def test_a_parent_session_of_a_megabyte_reads_cut_in_every_summary(
    server: MCPServer,
) -> None:
    """A pi file's header names its parent session by any text: one of a megabyte came whole
    in the summary of every answer (session_get, the session:// resource) and in
    session_list, whose page's text then held no session at all."""
    parent = "p" * MEGA
    lines = [
        {
            "type": "session",
            "version": 3,
            "id": SID,
            "timestamp": "2026-01-01T00:00:00.000Z",
            "cwd": "/x",
            "parentSession": parent,
            "metadata": {"startedBy": {"sessionId": parent, "runId": "r" * MEGA}},
        },
        _pi("u1", None, {"type": "message", "message": {"role": "user", "content": "hi"}}),
    ]
    async with Client(server) as client:
        await call(client, "session_create", name="another")
        jsonl = "".join(json.dumps(line) + "\n" for line in lines)
        await call(client, "session_import", jsonl=jsonl)
        page = await bounded(client, "session_get", session_id=SID)
        listed = await bounded(client, "session_list")
        text = (await client.read_resource(f"session://{SID}")).contents[0].text  # type: ignore[union-attr]
        assert len(text.encode()) < ANSWER_LIMIT, len(text.encode())
        assert len(listed["sessions"]) == 2
        for info in (page["session"], listed["sessions"][0], json.loads(text)["session"]):
            assert info["id"] == SID
            assert info["parentSession"] == "p" * 1000 + "… " + CUT, info["parentSession"][-60:]
            if info["startedBy"] is not None:  # said by session_get and the resource
                assert info["startedBy"]["sessionId"] == info["parentSession"]
                assert info["startedBy"]["runId"] == "r" * 1000 + "… " + CUT


async def test_an_import_whose_times_are_absurdly_long_is_refused(server: MCPServer) -> None:
    """A time is in every answer that names its entry or session (a tree node, a search hit,
    the session's created, session_stats's first and last): a pi file's timestamp of a
    megabyte made a default page's structured content a megabyte, and session_stats's text
    too. pi writes ISO times; an import refuses one past TIME_CHARS, saying where."""
    from mcp_agent.sessions.entries import TIME_CHARS

    when = "2026-01-01T00:00:00.000Z"
    long = "t" * (TIME_CHARS + 1)
    entry = _pi("e1", None, {"type": "custom", "customType": "x"})
    for header_time, entry_time, line in ((long, when, 1), (when, long, 2)):
        header = {"type": "session", "version": 3, "id": SID, "timestamp": header_time}
        text = "".join(
            json.dumps(row) + "\n" for row in (header, {**entry, "timestamp": entry_time})
        )
        async with Client(server) as client:
            said = await call_error(client, "session_import", jsonl=text)
            assert f"<jsonl>:{line}: timestamp of {TIME_CHARS + 1:,} characters" in said, said
            assert (await call(client, "session_list"))["sessions"] == []


async def test_every_stub_of_a_large_entry_names_the_tool_call_that_reads_it_whole(
    server: MCPServer,
) -> None:
    """A stub named only the entry's resource, and most hosts give their model no resource
    reads: session_get with limit 1 showed it cut, and nothing said that session_get with the
    entry as entry_id and from_entry_id and limit 0 answers with it alone, whole. Every stub
    and cut note says so now; past what an answer's text holds, that the call has it in its
    structured content only."""
    async with Client(server) as client:
        sid = (await call(client, "session_create"))["id"]
        ids = {}
        for n in (30_000, 80_000):
            entry = _user("x" * n)
            ids[n] = (await call(client, "session_append", session_id=sid, entry=entry))["entryId"]
            await call(client, "session_append", session_id=sid, entry=_user("after"))
        for n, entry_id in ids.items():
            named = (
                f"session_get with session_id {sid!r}, entry_id {entry_id!r}, from_entry_id"
                f" {entry_id!r} and limit 0"
            )
            stub = (await call(client, "session_get", session_id=sid, entry_id=entry_id))[
                "entries"
            ][-1]
            context = await call(client, "session_context", session_id=sid, limit=4)
            (alone,) = (
                await call(client, "session_get", session_id=sid, entry_id=entry_id, limit=1)
            )["entries"]
            stubs = [m["omitted"] for m in context["messages"] if "omitted" in m]
            assert any(named in note for note in stubs), (n, stubs)
            for note in (stub["omitted"], alone["omitted"]):
                assert named in note, (n, note)
            # The call named, made as a tool-only model makes it: the text is what it reads.
            result = await client.call_tool(
                "session_get",
                {"session_id": sid, "entry_id": entry_id, "from_entry_id": entry_id, "limit": 0},
            )
            assert result.structured_content is not None
            (entry,) = result.structured_content["entries"]
            assert entry["message"]["content"] == "x" * n
            text = json.loads(result.content[0].text)  # type: ignore[union-attr]
            if n < paging.TEXT_BYTES:
                assert "structured content only" not in stub["omitted"], stub
                assert text["entries"] == [entry]
            else:
                assert "structured content only" in stub["omitted"], stub
                assert text["entries"] == []
