"""The MCP server in process, on both protocol eras (2026-07-28 and the legacy handshake)."""

from __future__ import annotations

import gc
import json
import logging
import re
import threading
import weakref
from pathlib import Path
from typing import Any, cast

import anyio
import mcp.types as types
import pytest
from mcp import Client
from mcp.client.session import MessageHandlerFnT
from mcp.server import MCPServer
from mcp.shared.exceptions import MCPError
from mcp_support import (
    CALL_LIMIT_S,
    TEST_AGENTS,
    ClientsModel,
    agent_server,
    call,
    call_error,
    client_fixture,  # noqa: F401  (the client fixture)
    make_server,
    prompt_responder,
    subagent_said,
)
from narrow import narrow, present

from mcp_agent.manifests import AgentManifest
from mcp_agent.messages import (
    AssistantMessage,
    StopReason,
    TextContent,
    Usage,
    UserMessage,
    content_text,
)
from mcp_agent.providers.base import LlmContext
from mcp_agent.providers.scripted import (
    ScriptedProvider,
    ScriptedResponse,
    reply,
    scripted_model,
    tool_call,
)
from mcp_agent.proxy.hub import RUN_META_KEY
from mcp_agent.runtime import runs
from mcp_agent.runtime.builtin import SUBAGENT_TASK_CHARS
from mcp_agent.runtime.run_board import ANSWER_CHARS
from mcp_agent.runtime.runs import RunLimits, RunManager
from mcp_agent.runtime.session_agent import SessionAgent
from mcp_agent.server import notify
from mcp_agent.server.notify import Notifier, WatchedBus
from mcp_agent.sessions import MessageEntry, Session, SqliteSessionRepo
from mcp_agent.sessions.errors import SessionError

pytestmark = pytest.mark.anyio

PI_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")

PUBLIC_TOOLS = {
    "session_create",
    "session_list",
    "session_get",
    "session_delete",
    "session_append",
    "session_move_to",
    "session_fork",
    "session_context",
    "session_stats",
    "session_compact",
    "session_export",
    "session_import",
    "agent_run",
    "agent_status",
    "agent_cancel",
    "agent_steer",
    "agent_follow_up",
    "agent_list",
}


@pytest.fixture
def server(tmp_path: Path) -> MCPServer:
    return make_server(tmp_path)


def user(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": text}


def pi(entry: dict[str, Any]) -> dict[str, Any]:
    """An entry in pi's v3 form, for session_append (the kinds it has no simple form for)."""
    return {"type": "pi", "json": json.dumps(entry)}


async def read_text(client: Client, uri: str) -> str:
    """The text of resource ``uri``'s first contents, checked to be text."""
    return narrow((await client.read_resource(uri)).contents[0], types.TextResourceContents).text


# --- the surface ------------------------------------------------------------------------------


async def test_public_tools_have_output_schemas(client: Client) -> None:
    tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    assert PUBLIC_TOOLS <= set(tools)
    for name in PUBLIC_TOOLS:
        assert tools[name].output_schema is not None, name
        assert tools[name].description, name


# --- sessions ---------------------------------------------------------------------------------


async def test_session_lifecycle(client: Client) -> None:
    created = await call(client, "session_create", name="first", metadata=json.dumps({"k": 1}))
    sid = created["id"]
    assert created["name"] == "first"
    a = await call(client, "session_append", session_id=sid, entry=user("hello"))
    b = await call(
        client,
        "session_append",
        session_id=sid,
        entry=pi(
            {
                "type": "message",
                "message": {
                    "role": "assistant",
                    "content": [{"type": "text", "text": "hi there"}],
                    "provider": "openai",
                    "model": "gpt-4o",
                    "usage": {"input": 10, "output": 5, "totalTokens": 15},
                    "stopReason": "stop",
                },
            }
        ),
    )
    await call(
        client,
        "session_append",
        session_id=sid,
        entry={"type": "label", "targetId": a["entryId"], "label": "start"},
    )
    await call(client, "session_append", session_id=sid, entry=user("second question"))

    branch = await call(client, "session_get", session_id=sid, limit=0)
    roles = [e["message"]["role"] for e in branch["entries"] if e["type"] == "message"]
    assert roles == ["user", "assistant", "user"]

    moved = await call(
        client, "session_move_to", session_id=sid, entry_id=b["entryId"], summary="left it"
    )
    assert moved["branchSummaryId"]
    await call(client, "session_append", session_id=sid, entry=user("another way"))
    tree = await call(client, "session_get", session_id=sid, view="tree", limit=0)
    text = json.dumps(tree["nodes"])
    assert "second question" in text and "another way" in text and '"label": "start"' in text
    nodes = {node["id"]: node for node in tree["nodes"]}
    assert nodes[a["entryId"]]["label"] == "start"
    # the old branch and the new one both go on from b: b has two children
    assert len(nodes[b["entryId"]]["children"]) == 2
    assert all(
        nodes[child]["parentId"] == b["entryId"] for child in nodes[b["entryId"]]["children"]
    )

    context = await call(client, "session_context", session_id=sid, limit=0)
    assert context["model"] == {"provider": "openai", "modelId": "gpt-4o"}
    texts = [json.dumps(m) for m in context["messages"]]
    assert "second question" not in "".join(texts)
    assert "left it" in "".join(texts) and "another way" in texts[-1]

    stats = (await call(client, "session_stats", session_id=sid))["stats"]
    assert stats["messageCount"] == 4
    assert stats["inputTokens"] == 10 and stats["outputTokens"] == 5

    forked = await call(
        client, "session_fork", session_id=sid, entry_id=a["entryId"], position="at"
    )
    assert forked["parentSession"] == sid
    fork_branch = await call(client, "session_get", session_id=forked["id"], limit=0)
    messages = [e["message"] for e in fork_branch["entries"] if e["type"] == "message"]
    assert [m["content"] for m in messages] == ["hello"]
    labels = [e for e in fork_branch["entries"] if e["type"] == "label"]
    assert [label["label"] for label in labels] == ["start"]
    # With no entry: the whole session, every branch (this one has a branch left behind).
    whole = await call(client, "session_fork", session_id=sid)
    source, copy = [
        await call(client, "session_get", session_id=s, view="entries", limit=0)
        for s in (sid, whole["id"])
    ]
    assert [(e["id"], e["type"]) for e in copy["entries"]] == [
        (e["id"], e["type"]) for e in source["entries"]
    ]
    assert "second question" in json.dumps(copy["entries"])  # off the current branch
    assert copy["leafId"] == source["leafId"]
    await call(client, "session_delete", session_id=whole["id"])

    exported = await call(client, "session_export", session_id=sid, limit=0)
    lines = exported["jsonl"].splitlines()
    assert json.loads(lines[0])["type"] == "session"
    assert exported["lines"] == len(lines) and not exported["truncated"]
    await call(client, "session_delete", session_id=sid)
    imported = await call(client, "session_import", jsonl=exported["jsonl"])
    assert imported["session"]["id"] == sid
    assert imported["fileId"] == sid and imported["newId"] is False
    again = await call(client, "session_export", session_id=sid, limit=0)
    assert [json.loads(x) for x in again["jsonl"].splitlines()] == [json.loads(x) for x in lines]

    listing = await call(client, "session_list", query="another")
    assert [s["id"] for s in listing["sessions"]] == [sid]


async def test_a_pi_files_text_with_a_byte_order_mark_imports(client: Client) -> None:
    """pi's reader trims a byte order mark before the header, and so does the import: the
    text of a file saved with one (a header alone is one line) is a file's text, not a path."""
    header = {"type": "session", "version": 3, "id": "0199aaaa-0000-7000-8000-0000000000b0"}
    header.update(timestamp="2026-01-15T08:30:00.000Z", cwd="/p")
    message = {"role": "user", "content": "hi", "timestamp": 1}
    entry = {"type": "message", "id": "a0000001", "parentId": None, "message": message}
    entry["timestamp"] = "2026-01-15T08:30:01.000Z"
    whole = "\ufeff" + json.dumps(header) + "\r\n" + json.dumps(entry) + "\r\n"
    for text, entries in ((whole, 1), ("\ufeff" + json.dumps(header), 0)):
        imported = await call(client, "session_import", jsonl=text)
        assert imported["fileId"] == header["id"]
        assert imported["session"]["entryCount"] == entries


async def test_token_totals_past_2_to_the_53_stay_exact_integers(client: Client) -> None:
    # A float holds integers exactly only up to 2**53; counts past it must not pass through one.
    created = await call(client, "session_create")
    sid = created["id"]
    huge = 2**53 + 1
    usage: dict[str, Any] = {"input": huge, "output": 1, "cacheRead": 0, "cacheWrite": 0}
    usage |= {"totalTokens": huge + 1, "cost": {"input": 0, "output": 0, "cacheRead": 0}}
    usage["cost"] |= {"cacheWrite": 0, "total": 0}
    message: dict[str, Any] = {"role": "assistant", "content": [{"type": "text", "text": "big"}]}
    message |= {"api": "x", "provider": "x", "model": "x", "usage": usage}
    message |= {"stopReason": "stop", "timestamp": 1}
    entry = {"type": "message", "message": message}
    for _ in range(2):
        pi_entry = {"type": "pi", "json": json.dumps(entry)}
        await call(client, "session_append", session_id=sid, entry=pi_entry)
    result = await client.call_tool("session_stats", {"session_id": sid})
    for stats in (
        result.structured_content["stats"],
        json.loads(narrow(result.content[0], types.TextContent).text)["stats"],
    ):
        assert stats["inputTokens"] == 2 * huge and isinstance(stats["inputTokens"], int)
        assert stats["totalTokens"] == 2 * (huge + 1)


async def test_bad_input_is_a_clear_error_and_writes_nothing(client: Client) -> None:
    sid = (await call(client, "session_create"))["id"]
    before = await call(client, "session_export", session_id=sid, limit=0)

    assert "not_found" in await call_error(client, "session_get", session_id="nope")
    text = await call_error(
        client,
        "session_append",
        session_id=sid,
        entry=pi({"type": "message", "message": {"role": "user"}}),
    )
    assert "content" in text
    text = await call_error(
        client, "session_append", session_id=sid, entry={"type": "message", "role": "user"}
    )
    assert "content" in text
    text = await call_error(
        client, "session_append", session_id=sid, entry=pi({"type": "compaction"})
    )
    assert "session_compact" in text
    text = await call_error(
        client,
        "session_append",
        session_id=sid,
        entry={"type": "thinking_level_change", "thinkingLevel": "bogus"},
    )
    assert text.startswith("session_append: entry.thinkingLevel")
    assert "should be 'off', 'minimal'" in text and '(got "bogus")' in text
    text = await call_error(
        client,
        "session_append",
        session_id=sid,
        entry=pi({"type": "thinking_level_change", "thinkingLevel": "bogus"}),
    )
    assert "'bogus' is not one of: off, minimal" in text
    text = await call_error(
        client,
        "session_append",
        session_id=sid,
        entry={"type": "label", "targetId": "ffffffff", "label": "x"},
    )
    assert "not_found" in text
    assert "not_found" in await call_error(
        client, "session_move_to", session_id=sid, entry_id="ffffffff"
    )
    assert "not_found" in await call_error(
        client, "session_fork", session_id=sid, entry_id="ffffffff"
    )
    said = await call_error(client, "session_fork", session_id=sid, position="at")
    assert "position 'at' needs an entry_id" in said, said
    assert "unknown agent 'ghost'" in await call_error(
        client, "agent_run", prompt="hi", agent="ghost"
    )
    assert (
        "unknown provider"
        in (await call_error(client, "agent_run", prompt="hi", model="nope:x")).lower()
    )
    assert "path" in await call_error(client, "session_import", jsonl="/etc/passwd")
    text = await call_error(client, "session_list", query="🎉")
    assert "the search '🎉' has no words to search for" in text
    count = len((await call(client, "session_list"))["sessions"])
    text = await call_error(
        client,
        "session_import",
        jsonl='{"type":"session","version":3,"id":"x","timestamp":"t"}\n'
        + '{"type":"message","id":"a1","parentId":null,"timestamp":"t","message":{"role":"user","content":"x"}}\n'
        * 2,
    )
    assert "duplicate entry id a1" in text
    assert len((await call(client, "session_list"))["sessions"]) == count
    assert (await call(client, "session_export", session_id=sid, limit=0))["jsonl"] == before[
        "jsonl"
    ]


async def test_a_refused_run_creates_no_session(client: Client) -> None:
    # Each of these is refused only once the model is chosen, after the agent was found.
    assert "unknown provider" in await call_error(client, "agent_run", prompt="hi", model="nope:x")
    assert "sampling" in await call_error(client, "agent_run", prompt="hi", model="client")
    assert (await call(client, "session_list"))["sessions"] == []


async def test_a_run_on_a_model_without_its_key_writes_nothing(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    # It could only fail: it was started, and wrote the prompt and the error into a new session
    # (or the caller's), where the command line refuses it up front.
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    refused = await call_error(client, "agent_run", prompt="hi", model="openai:gpt-4o-mini")
    assert "openai:gpt-4o-mini needs an API key: set OPENAI_API_KEY" in refused
    assert (await call(client, "session_list"))["sessions"] == []
    sid = (await call(client, "session_create"))["id"]
    await call_error(client, "agent_run", prompt="hi", session_id=sid, model="openai:gpt-4o")
    assert (await call(client, "session_get", session_id=sid))["total"] == 0


async def test_bad_run_meta_is_a_clear_error(client: Client) -> None:
    for depth in ("x", -5, None):
        result = await client.call_tool(
            "agent_run",
            {"prompt": "hi"},
            # RequestParamsMeta is an open TypedDict (PEP 728 extra_items) that mypy does not
            # support yet: our own key cannot be typed as one.
            meta=cast(types.RequestParamsMeta, {RUN_META_KEY: {"depth": depth}}),
        )
        assert result.is_error and "depth must be a whole number" in (
            narrow(result.content[0], types.TextContent).text
        )
    assert (await call(client, "session_list"))["sessions"] == []


async def test_a_bad_calling_session_in_run_meta_is_a_clear_error(client: Client) -> None:
    # The calling run's session becomes the new session's parentSession: a number was stored
    # as it came (its export refused by our own import), an object failed the run unexplained.
    for parent in (12345, {"a": 1}, "", "x" * 5_000):
        result = await client.call_tool(
            "agent_run",
            {"prompt": "hi"},
            meta=cast(types.RequestParamsMeta, {RUN_META_KEY: {"session_id": parent}}),
        )
        text = narrow(result.content[0], types.TextContent).text
        assert result.is_error and ".session_id must be the calling run's session id" in text
        assert len(text) < 500, text
    assert (await call(client, "session_list"))["sessions"] == []
    # A session id a parent server sends is taken, and named as the parent.
    meta = {RUN_META_KEY: {"session_id": "01a00000-0000-7000-8000-00000000000a", "depth": 0}}
    result = await client.call_tool(
        "agent_run", {"prompt": "hi"}, meta=cast(types.RequestParamsMeta, meta)
    )
    assert not result.is_error and result.structured_content is not None
    child = await call(client, "session_get", session_id=result.structured_content["sessionId"])
    assert child["session"]["parentSession"] == "01a00000-0000-7000-8000-00000000000a"
    # So is the calling run's id, said as the run's parentRunId; anything else is refused.
    for run_id in (7, "", "r" * 101):
        bad = {RUN_META_KEY: {"run_id": run_id}}
        result = await client.call_tool(
            "agent_run", {"prompt": "hi"}, meta=cast(types.RequestParamsMeta, bad)
        )
        text = narrow(result.content[0], types.TextContent).text
        assert result.is_error and ".run_id must be the calling run's id" in text
    good = {RUN_META_KEY: {"run_id": "abc123", "depth": 0}}
    result = await client.call_tool(
        "agent_run", {"prompt": "hi"}, meta=cast(types.RequestParamsMeta, good)
    )
    assert result.structured_content is not None
    assert result.structured_content["parentRunId"] == "abc123"


async def test_a_listed_session_shows_its_leaf_as_session_get_does(tmp_path: Path) -> None:
    async with Client(make_server(tmp_path)) as client:
        sid = (await call(client, "session_create"))["id"]
        entry = {"type": "message", "role": "user", "content": "hello"}
        appended = await call(client, "session_append", session_id=sid, entry=entry)
        listed = (await call(client, "session_list"))["sessions"][0]
        shown = (await call(client, "session_get", session_id=sid))["session"]
        assert listed["leafId"] == shown["leafId"] == appended["entryId"]
        # Times in pi's milliseconds in both, as every other time the tools give.
        for info in (listed, shown):
            for key in ("created", "modified"):
                assert PI_TIME.fullmatch(info[key]), (key, info[key])
        assert listed["modified"] == shown["modified"] and listed["created"] == shown["created"]


async def test_list_pages_newest_first(tmp_path: Path) -> None:
    server = make_server(tmp_path, page_size=3)
    async with Client(server) as client:
        made = [(await call(client, "session_create", name=f"s{i}"))["id"] for i in range(7)]
        page = await call(client, "session_list", limit=3)
        seen = [s["id"] for s in page["sessions"]]
        while page["nextCursor"]:
            page = await call(client, "session_list", limit=3, cursor=page["nextCursor"])
            seen += [s["id"] for s in page["sessions"]]
        assert seen == made[::-1]

        uris: list[str] = []
        cursor = None
        while True:
            listed = await client.list_resources(cursor=cursor)
            uris += [r.uri for r in listed.resources]
            if (cursor := listed.next_cursor) is None:
                break
        assert [u for u in uris if u.startswith("session://")] == [
            f"session://{i}" for i in made[::-1]
        ]
        assert "agent://default" in uris
        unnamed = [(await call(client, "session_create"))["id"] for _ in range(2)]
        listed = await client.list_resources()
        names = {r.uri: r.name for r in listed.resources}
        assert [names[f"session://{i}"] for i in unnamed] == [f"session {i}" for i in unnamed]


# --- resources and prompts --------------------------------------------------------------------


async def test_resources_and_templates(client: Client) -> None:
    sid = (await call(client, "session_create", name="res"))["id"]
    entry = await call(client, "session_append", session_id=sid, entry=user("resource me"))
    templates = {
        t.uri_template for t in (await client.list_resource_templates()).resource_templates
    }
    assert {
        "session://{session_id}",
        "session://{session_id}/tree",
        "session://{session_id}/context",
        "session://{session_id}/entries/{entry_id}",
        "session://{session_id}/export.jsonl",
        "agent://{name}",
    } <= templates
    main = json.loads(await read_text(client, f"session://{sid}"))
    assert main["session"]["name"] == "res"
    assert main["branch"][-1]["message"]["content"] == "resource me"
    tree = json.loads(await read_text(client, f"session://{sid}/tree"))
    assert tree["leafId"] == entry["entryId"]
    context = json.loads(await read_text(client, f"session://{sid}/context"))
    assert context["messages"][0]["content"] == "resource me"
    one = json.loads(await read_text(client, f"session://{sid}/entries/{entry['entryId']}"))
    assert one["id"] == entry["entryId"]
    export = narrow(
        (await client.read_resource(f"session://{sid}/export.jsonl")).contents[0],
        types.TextResourceContents,
    )
    assert export.mime_type == "application/x-ndjson" and "resource me" in export.text
    agent = json.loads(await read_text(client, "agent://helper"))
    assert agent["tools"] == ["subagent"]
    with pytest.raises(MCPError):
        await client.read_resource("session://nope/tree")


async def test_the_session_resource_names_the_cursor_of_the_entries_before_it(
    client: Client,
) -> None:
    """session://{id} is the newest page of the branch; its ``more`` said "session_get with a
    cursor" and named none, so a model had to ask for the same page again to get one."""
    sid = (await call(client, "session_create"))["id"]
    for n in range(60):
        await call(client, "session_append", session_id=sid, entry=user(f"message {n}"))
    shown = json.loads(await read_text(client, f"session://{sid}"))
    assert shown["truncated"] is True and len(shown["branch"]) == 50
    cursor = re.search(r"cursor '([^']+)'", shown["more"])
    assert cursor, shown["more"]
    older = await call(client, "session_get", session_id=sid, cursor=cursor.group(1))
    assert [e["message"]["content"] for e in older["entries"]] == [
        f"message {n}" for n in range(10)
    ]
    assert "the 10 older entries" in shown["more"]


async def test_each_resource_template_says_how_much_it_holds(client: Client) -> None:
    """A host reads a template's description before it reads the resource: the entry and
    export resources said nothing of their bound (8 MiB), nor where a larger one is."""
    said = {
        t.uri_template: t.description or ""
        for t in (await client.list_resource_templates()).resource_templates
    }
    for uri in ("session://{session_id}/entries/{entry_id}", "session://{session_id}/export.jsonl"):
        assert "8 MiB" in said[uri], (uri, said[uri])
    assert "session_export" in said["session://{session_id}/export.jsonl"]
    for uri in ("session://{session_id}", "session://{session_id}/context"):
        assert "newest" in said[uri], (uri, said[uri])


async def test_a_resource_that_is_not_there_is_refused_saying_where_to_look(
    client: Client,
) -> None:
    """Each refusal names where what exists is listed: the SDK said only 'Unknown resource'
    for a URI no template takes, and an unknown agent or entry was named and no more."""
    sid = (await call(client, "session_create"))["id"]
    asks = {
        f"session://{sid}/branch": "session://{session_id}/entries/{entry_id}",
        "agent://ghost": "agent_list",
        f"session://{sid}/entries/nope": "session_get",
    }
    for uri, says in asks.items():
        with pytest.raises(MCPError) as refused:
            await client.read_resource(uri)
        assert refused.value.error.code == types.INVALID_PARAMS, uri
        assert says in refused.value.error.message, (uri, refused.value.error.message)


@pytest.mark.parametrize(("blank", "said"), [("", "is empty"), (" \t", "is only whitespace")])
async def test_an_empty_or_blank_id_is_refused_as_such_everywhere(
    client: Client, blank: str, said: str
) -> None:
    """An empty id was looked up: "session  not found" (two spaces) from a tool, "no session
    ''" from a resource, "not_found: session  not found" from the prompt. Each says now that
    the argument is empty, naming it, in the same words; nothing is written."""
    sid = (await call(client, "session_create"))["id"]
    entry = (await call(client, "session_append", session_id=sid, entry=user("hi")))["entryId"]
    sent = json.dumps(blank)
    with_session: list[tuple[str, dict[str, Any]]] = [
        ("session_get", {}),
        ("session_delete", {}),
        ("session_append", {"entry": user("no")}),
        ("session_move_to", {"entry_id": "root"}),
        ("session_fork", {}),
        ("session_context", {}),
        ("session_stats", {}),
        ("session_export", {}),
        ("session_compact", {}),
        ("agent_run", {"prompt": "no"}),
    ]
    for name, more in with_session:
        text = await call_error(client, name, session_id=blank, **more)
        assert text.startswith(f"{name}: session_id {said} (got {sent}); session_id: "), text
    uris = [f"session://{blank}{suffix}" for suffix in ("", "/tree", "/context", "/export.jsonl")]
    uris.append(f"session://{blank}/entries/{entry}")
    says = f"session_id {said} (got {sent}); session_list or resources/list shows the sessions"
    for uri in uris:
        with pytest.raises(MCPError) as refused:
            await client.read_resource(uri)
        assert refused.value.error.code == types.INVALID_PARAMS, uri
        assert refused.value.error.message == says, (uri, refused.value.error.message)
    with pytest.raises(MCPError) as refused:
        await client.get_prompt("continue_session", {"session_id": blank})
    assert refused.value.error.message.startswith(f"session_id {said} (got {sent}); session_list")
    listed = (await call(client, "session_list"))["sessions"]
    assert [(s["id"], s["entryCount"]) for s in listed] == [(sid, 1)]


@pytest.mark.parametrize(("blank", "said"), [("", "is empty"), (" \t", "is only whitespace")])
async def test_an_empty_or_blank_run_id_is_refused_as_such(
    client: Client, blank: str, said: str
) -> None:
    """An empty run_id was looked up: "no run '' here", where an empty session_id is refused
    as empty. Each run tool says now that the argument is empty, naming it."""
    sent = json.dumps(blank)
    for name, more in [
        ("agent_status", {}),
        ("agent_cancel", {}),
        ("agent_steer", {"message": "no"}),
        ("agent_follow_up", {"message": "no"}),
    ]:
        text = await call_error(client, name, run_id=blank, **more)
        assert text.startswith(f"{name}: run_id {said} (got {sent}); run_id: "), text


@pytest.mark.parametrize("resource", ["", "/tree", "/context", "/export.jsonl"])
async def test_a_session_deleted_while_its_resource_is_read_is_said_to_be_gone(
    client: Client, monkeypatch: pytest.MonkeyPatch, resource: str
) -> None:
    from mcp_agent.sessions.sql.repo import SqlSessionRepo

    sid = (await call(client, "session_create"))["id"]
    await call(client, "session_append", session_id=sid, entry=user("hi"))
    # The session is opened, then deleted (by another client) before its entries are read.
    real = SqlSessionRepo._read_row
    deleted: list[str] = []

    def deleted_meanwhile(self: SqlSessionRepo[Any], session_id: str, *args: Any) -> Any:
        opened = real(self, session_id, *args)
        if not deleted:
            deleted.append(session_id)
            self.delete(session_id)
        return opened

    monkeypatch.setattr(SqlSessionRepo, "_read_row", deleted_meanwhile)
    # Before: "Error creating resource from template", the reason only in the server's log.
    with pytest.raises(MCPError, match=f"no session '{sid}'"):
        await client.read_resource(f"session://{sid}{resource}")


async def test_continue_session_prompt(client: Client) -> None:
    sid = (await call(client, "session_create"))["id"]
    await call(client, "agent_run", prompt="remember the number 7", session_id=sid)
    prompt = await client.get_prompt("continue_session", {"session_id": sid})
    assert [m.role for m in prompt.messages] == ["user", "assistant"]
    assert (
        narrow(prompt.messages[1].content, types.TextContent).text == "echo: remember the number 7"
    )


async def test_a_wrong_prompt_name_or_argument_is_invalid_params(client: Client) -> None:
    refusals = {
        ("nope", "x"): "there is no prompt 'nope'; the prompts are: continue_session",
        ("continue_session", "x"): "continue_session: unknown argument 'x'; argument "
        "'session_id' is required; it takes session_id",
    }
    for (name, argument), message in refusals.items():
        with pytest.raises(MCPError) as refused:
            await client.get_prompt(name, {argument: "1"})
        assert (refused.value.error.code, refused.value.error.message) == (-32602, message)


async def test_modern_notifications(server: MCPServer) -> None:
    async with Client(server) as client:
        sid = (await call(client, "session_create"))["id"]
        async with client.listen(
            resources_list_changed=True, resource_subscriptions=[f"session://{sid}"]
        ) as events:
            await call(client, "session_append", session_id=sid, entry=user("ping"))
            await call(client, "session_create")
            seen: list[Any] = []
            with anyio.fail_after(5):
                while len(seen) < 2:
                    seen.append(await events.__anext__())
        kinds = {type(e).__name__ for e in seen}
        assert kinds == {"ResourceUpdated", "ResourcesListChanged"}


async def test_listen_streams_past_the_limit_are_refused_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The SDK's refusal said "Subscription limit reached", not which limit nor what to do."""
    monkeypatch.setattr(notify, "MAX_LISTEN_STREAMS", 1)
    async with Client(make_server(tmp_path)) as client:
        async with client.listen(resources_list_changed=True):
            with pytest.raises(MCPError) as refused:
                async with client.listen(resources_list_changed=True):
                    pass
    message = refused.value.error.message
    assert message.startswith("Too many listen streams: this server holds at most 1 ")
    assert "Retry once one ends" in message


async def test_appends_queue_no_notifications_while_nobody_listens() -> None:
    bus = WatchedBus()
    notifier = Notifier(bus)
    notifier.session_changed("s1")
    assert notifier.pending_changes() == 0
    stop = bus.subscribe(lambda _event: None)
    notifier.session_changed("s1")
    assert notifier.pending_changes() == 1
    stop()
    stop()  # a second unsubscribe changes nothing
    assert bus.listeners == 0
    notifier.session_changed("s1")
    assert notifier.pending_changes() == 1


async def test_fork_import_and_delete_announce_list_changes(server: MCPServer) -> None:
    async with Client(server) as client:
        sid = (await call(client, "session_create"))["id"]
        await call(client, "session_append", session_id=sid, entry=user("hello"))
        exported = (await call(client, "session_export", session_id=sid, limit=0))["jsonl"]
        async with client.listen(resources_list_changed=True) as events:

            async def announced() -> None:
                # The client folds identical events not yet read into one: read each in turn.
                with anyio.fail_after(5):
                    assert type(await events.__anext__()).__name__ == "ResourcesListChanged"

            forked = await call(client, "session_fork", session_id=sid)
            await announced()
            await call(client, "session_delete", session_id=sid)
            await announced()
            await call(client, "session_import", jsonl=exported)
            await announced()
            await call(client, "session_delete", session_id=forked["id"])
            await announced()


def recorded() -> tuple[list[Any], MessageHandlerFnT]:
    """The messages a client receives, and the handler that keeps them."""
    received: list[Any] = []

    async def on_message(message: Any) -> None:
        if isinstance(message, Exception):
            raise message
        received.append(message)

    return received, on_message


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_both_eras_say_the_same_of_the_list_changes_sent(
    server: MCPServer, mode: str
) -> None:
    # The tools and prompts are fixed, so no change of them is ever sent; the session list
    # changes (before: 2026-07-28's server/discover said prompts change too, the 2025 handshake
    # not; both said the tools do).
    async with Client(server, mode=mode) as client:
        capabilities = client.server_capabilities
        assert present(capabilities.prompts).list_changed is False
        assert present(capabilities.tools).list_changed is False
        assert present(capabilities.resources).list_changed is True
        assert present(capabilities.resources).subscribe is True


async def test_legacy_subscriptions(server: MCPServer) -> None:
    received, on_message = recorded()
    async with Client(server, mode="legacy", message_handler=on_message) as client:
        assert present(client.server_capabilities.resources).subscribe
        sid = (await call(client, "session_create"))["id"]
        await client.session.subscribe_resource(f"session://{sid}")
        await call(client, "session_append", session_id=sid, entry=user("ping"))
        with anyio.fail_after(5):
            while not any(isinstance(m, types.ResourceUpdatedNotification) for m in received):
                await anyio.sleep(0.02)
        updated = [m for m in received if isinstance(m, types.ResourceUpdatedNotification)]
        assert str(updated[0].params.uri) == f"session://{sid}"
        assert any(isinstance(m, types.ResourceListChangedNotification) for m in received)
        await client.session.unsubscribe_resource(f"session://{sid}")
        received.clear()
        await call(client, "session_append", session_id=sid, entry=user("again"))
        await anyio.sleep(0.2)
        assert not any(isinstance(m, types.ResourceUpdatedNotification) for m in received)


async def test_a_deleted_session_s_readers_are_told_it_changed(server: MCPServer) -> None:
    """A list change alone does not tell whoever reads a session that it is gone."""
    received, on_message = recorded()
    async with Client(server, mode="legacy", message_handler=on_message) as client:
        sid = (await call(client, "session_create"))["id"]
        other = (await call(client, "session_create"))["id"]
        await client.session.subscribe_resource(f"session://{sid}")
        await call(client, "session_delete", session_id=other)
        await call(client, "session_delete", session_id=sid)
        with anyio.fail_after(5):
            while not any(isinstance(m, types.ResourceUpdatedNotification) for m in received):
                await anyio.sleep(0.02)
        updated = [m for m in received if isinstance(m, types.ResourceUpdatedNotification)]
        assert [str(m.params.uri) for m in updated] == [f"session://{sid}"]
        with pytest.raises(Exception, match=f"no session '{sid}'"):
            await client.read_resource(f"session://{sid}")


# --- agent runs -------------------------------------------------------------------------------


async def test_agent_run_waits_with_progress(client: Client) -> None:
    notes: list[str] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        notes.append(message or "")

    result = await client.call_tool("agent_run", {"prompt": "hello"}, progress_callback=on_progress)
    run = result.structured_content
    assert run["status"] == "completed" and run["answer"] == "echo: hello"
    assert notes[0].startswith("agent_start") and notes[-1].startswith("agent_end")
    assert any(p.startswith("message_update") for p in notes)
    branch = await call(client, "session_get", session_id=run["sessionId"], limit=0)
    roles = [e["message"]["role"] for e in branch["entries"] if e["type"] == "message"]
    assert roles == ["user", "assistant"]


async def test_detached_run_status_and_one_run_per_session(client: Client) -> None:
    run = await call(client, "agent_run", prompt="slow please", wait=False)
    assert run["status"] == "running"
    text = await call_error(client, "agent_run", prompt="again", session_id=run["sessionId"])
    assert run["runId"] in text and "busy" in text
    text = await call_error(client, "session_append", session_id=run["sessionId"], entry=user("x"))
    assert run["runId"] in text
    done = await call(client, "agent_status", run_id=run["runId"], wait_seconds=30)
    assert done["status"] == "completed" and done["answer"].startswith("word")
    follow = await call(client, "agent_run", prompt="next", session_id=run["sessionId"])
    assert follow["answer"] == "echo: next"


async def test_a_run_started_while_another_client_appends_waits_for_the_append(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two clients in one session: an agent_run that came while the other's append was being
    written was refused ("a tool is writing to it; try again in a moment"), met by the
    TypeScript SDK's clients sending both at once. The run now waits for the writes under
    way (new ones are refused, the session being the run's), then runs after them."""
    entered, release = threading.Event(), threading.Event()
    held = SqliteSessionRepo.append_entry

    def held_append(self: SqliteSessionRepo, session_id: str, partial: Any) -> str:
        if "held append" in json.dumps(partial):
            entered.set()
            release.wait(30)
        return held(self, session_id, partial)

    claiming = anyio.Event()
    claim = RunManager._claim

    async def noted_claim(self: RunManager, session_id: str, holder: str) -> None:
        claiming.set()
        await claim(self, session_id, holder)

    monkeypatch.setattr(SqliteSessionRepo, "append_entry", held_append)
    monkeypatch.setattr(RunManager, "_claim", noted_claim)
    answers: dict[str, types.CallToolResult] = {}
    async with Client(make_server(tmp_path)) as client:
        sid = (await call(client, "session_create"))["id"]

        async def send(name: str, arguments: dict[str, Any]) -> None:
            answers[name] = await client.call_tool(name, arguments)

        with anyio.fail_after(60):
            async with anyio.create_task_group() as group:
                group.start_soon(
                    send, "session_append", {"session_id": sid, "entry": user("held append")}
                )
                await anyio.to_thread.run_sync(entered.wait, 30)
                group.start_soon(send, "agent_run", {"prompt": "hello", "session_id": sid})
                await claiming.wait()  # the run meets the append under way
                release.set()
        run = answers["agent_run"]
        assert not run.is_error, narrow(run.content[0], types.TextContent).text
        assert not answers["session_append"].is_error
        branch = await call(client, "session_get", session_id=sid, limit=0)
    said = [e["message"]["content"] for e in branch["entries"] if e["type"] == "message"]
    assert said[0] == "held append" and said[-1][0]["text"] == "echo: hello", said


async def test_cancel_aborts_and_session_stays_consistent(client: Client) -> None:
    run = await call(client, "agent_run", prompt="slow please", wait=False)
    await anyio.sleep(0.2)
    cancelled = await call(client, "agent_cancel", run_id=run["runId"])
    assert cancelled["status"] == "aborted"
    branch = await call(client, "session_get", session_id=run["sessionId"])
    last = [e for e in branch["entries"] if e["type"] == "message"][-1]["message"]
    assert last["role"] == "assistant" and last["stopReason"] == "aborted"
    assert "run" in await call_error(client, "agent_steer", run_id=run["runId"], message="x")


async def test_a_cancelled_run_gives_back_the_messages_it_had_not_taken(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    # pi gives queued messages back to its user on an abort; they were acknowledged as
    # queued, and no session holds them.
    run = await call(client, "agent_run", prompt="slow please", wait=False)
    with anyio.fail_after(30):  # queued once the answer streams: after the run took its first
        while "text_delta" not in str(
            (await call(client, "agent_status", run_id=run["runId"])).get("lastEvent")
        ):
            await anyio.sleep(0.01)
    await call(client, "agent_steer", run_id=run["runId"], message="change course")
    await call(client, "agent_follow_up", run_id=run["runId"], message='and then "this"')
    monkeypatch.setattr(runs, "MAX_QUEUED", 2)  # a run's queue is bounded
    said = await call_error(client, "agent_steer", run_id=run["runId"], message="one more")
    assert "holds 2 messages not taken yet, the most it queues" in said, said
    cancelled = await call(client, "agent_cancel", run_id=run["runId"])
    assert cancelled["status"] == "aborted", cancelled
    [warning] = cancelled["warnings"]
    assert 'steering "change course"; follow-up "and then \\"this\\""' in warning, warning
    assert "send them again with agent_run" in warning
    later = await call(client, "agent_status", run_id=run["runId"])
    assert later["warnings"] == [warning]
    ended = await call(client, "agent_run", prompt="hi", session_id=run["sessionId"])
    assert ended["warnings"] == []  # a run that took all it was given


async def test_every_message_a_cancelled_run_gives_back_is_in_its_answer(client: Client) -> None:
    # The warning is the only copy of what was queued: it must not be cut to a few hundred
    # characters, which kept the first message of several.
    run = await call(client, "agent_run", prompt="slow please", wait=False)
    queued = [f"message {n}:" + " do the next thing" * 20 for n in range(4)]
    for message in queued:
        await call(client, "agent_follow_up", run_id=run["runId"], message=message)
    cancelled = await call(client, "agent_cancel", run_id=run["runId"])
    [warning] = cancelled["warnings"]
    for message in queued:
        assert f'follow-up "{message}"' in warning, warning


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_cancelling_the_request_aborts_the_run(server: MCPServer, mode: str) -> None:
    notes: list[str] = []
    streaming = anyio.Event()

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        notes.append(message or "")
        if (message or "").startswith("message_update: text_delta"):
            streaming.set()

    async with Client(server, mode=mode) as client:
        sid = (await call(client, "session_create"))["id"]

        async def ask() -> None:
            await client.call_tool(
                "agent_run",
                {"prompt": "slow please", "session_id": sid},
                progress_callback=on_progress,
            )

        # Cancelled once the answer streams, not after a fixed 0.3 s: a loaded machine may not
        # have begun the run by then (nothing to abort, and no run to list).
        async with anyio.create_task_group() as asking:
            asking.start_soon(ask)
            with anyio.fail_after(CALL_LIMIT_S):
                await streaming.wait()
            asking.cancel_scope.cancel()
        # A progress note the server sent before it read the cancellation may still be on its
        # way; an answer to a later request comes after the cancellation was read.
        listing = await call(client, "agent_runs")
        seen = len(notes)
        with anyio.fail_after(10):
            while listing["runs"][0]["status"] == "running":
                await anyio.sleep(0.05)
                listing = await call(client, "agent_runs")
        assert listing["runs"][0]["status"] == "aborted"
        assert len(notes) == seen  # nothing more to the request that went away
        branch = await call(client, "session_get", session_id=sid, limit=0)
        messages = [e["message"] for e in branch["entries"] if e["type"] == "message"]
        assert [(m["role"], m.get("stopReason")) for m in messages] == [
            ("user", None),
            ("assistant", "aborted"),
        ]
        follow = await call(client, "agent_run", prompt="after", session_id=sid)
        assert follow["status"] == "completed"


async def test_a_run_whose_start_is_cancelled_does_not_go_on() -> None:
    provider = ScriptedProvider(lambda context: reply("word " * 100, delay=0.01, chunk_size=5))
    session = Session()

    async def build(run_id: str) -> tuple[SessionAgent, str]:
        return SessionAgent(model=scripted_model(), stream_fn=provider, session=session), "scripted"

    async with anyio.create_task_group() as group:
        runs = RunManager(group)
        with anyio.CancelScope() as scope:
            scope.cancel()  # the caller is cancelled at start's first await
            await runs.start(
                session=session,
                manifest=AgentManifest(name="default"),
                prompt="hi",
                build_agent=build,
            )
        [run] = runs.runs.values()
        with anyio.fail_after(5):
            await run.done.wait()
    assert run.status == "aborted"
    messages = [
        narrow(e, MessageEntry).message for e in session.get_entries() if e.type == "message"
    ]
    assert [m.role for m in messages] in ([], ["user", "assistant"])
    if messages:
        assert narrow(messages[-1], AssistantMessage).stop_reason == "aborted"
    runs.ensure_idle(session.id)


async def test_a_forgotten_run_is_freed_without_the_cyclic_collector(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A finished run that the manager forgets must go by reference counting: before, the run
    and its agent held each other (the agent's listener), so every run's agent, session and
    transcript waited for a full collection, which serve's collector settings make rare (a
    soak of a few minutes grew the server by 100 MB)."""
    monkeypatch.setattr("mcp_agent.runtime.runs.KEEP_FINISHED_RUNS", 0)
    session = Session()
    built: list[weakref.ref[SessionAgent]] = []

    async def build(run_id: str) -> tuple[SessionAgent, str]:
        stream = ScriptedProvider(lambda context: reply("hi"))
        agent = SessionAgent(model=scripted_model(), stream_fn=stream, session=session)
        built.append(weakref.ref(agent))
        return agent, "scripted"

    gc.disable()  # from the agent's start: only reference counting frees it
    try:
        async with anyio.create_task_group() as group:
            runs = RunManager(group)
            run = await runs.start(
                session=session,
                manifest=AgentManifest(name="default"),
                prompt="hi",
                build_agent=build,
            )
            with anyio.fail_after(5):
                await run.done.wait()
            assert run.status == "completed" and not runs.runs  # forgotten at once
            gone, agent_gone = weakref.ref(run), built[0]
            del run
            assert gone() is None and agent_gone() is None
    finally:
        gc.enable()


async def test_a_kept_runs_answer_is_what_a_status_shows(tmp_path: Path) -> None:
    """The newest 200 ended runs are kept for agent_status, and each kept its answer whole:
    up to 16 Mi characters, 200 of them. A run keeps what a status shows (and that it was cut);
    the status says where the rest is, and a sub-agent's caller still gets its longer part."""
    long = "y" * 40_000 + "THE END"

    def model(context: LlmContext) -> ScriptedResponse:
        last = context.messages[-1]
        if last.role == "toolResult":
            return reply(f"child said {len(subagent_said(content_text(last.content))['answer']):,}")
        if content_text(last.content).startswith("delegate:"):
            return reply(tool_call("subagent", {"agent": "loner", "task": "go"}))
        return reply(long)

    async with anyio.create_task_group() as group:
        manager = RunManager(group)

        async def build(run_id: str) -> tuple[SessionAgent, str]:
            stream = ScriptedProvider(model)
            return SessionAgent(model=scripted_model(), stream_fn=stream, session=Session()), "s"

        run = await manager.start(
            session=Session(),
            manifest=AgentManifest(name="default"),
            prompt="hi",
            build_agent=build,
        )
        await run.done.wait()
    assert run.answer is not None and len(run.answer) == ANSWER_CHARS + 1

    server = agent_server(tmp_path, {"scripted": model}, agents=TEST_AGENTS)
    async with Client(server) as client:
        done = await call(client, "agent_run", prompt="hi")
        status = await call(client, "agent_status", run_id=done["runId"])
        for shown in (done, status):
            assert shown["answerTruncated"] and shown["answer"].startswith("y" * ANSWER_CHARS)
            # The note names the call a model with tools only makes (it said "(session_get)").
            sid = done["sessionId"]
            assert shown["answer"].endswith(
                f"… [cut at {ANSWER_CHARS:,} characters: the whole answer is the run's last"
                f" assistant message in session {sid}: session_get with session_id {sid!r} and"
                " limit 1 shows the newest entry, or, too large for a page, names the call that"
                " reads it whole]"
            ), shown["answer"][-300:]
        # Followed, the note leads to the whole answer.
        (newest,) = (await call(client, "session_get", session_id=sid, limit=1))["entries"]
        assert "from_entry_id" in newest["omitted"], newest["omitted"]
        read = await call(
            client,
            "session_get",
            session_id=sid,
            entry_id=newest["id"],
            from_entry_id=newest["id"],
            limit=0,
        )
        assert read["entries"][0]["message"]["content"][0]["text"] == long
        whole = await call(client, "session_context", session_id=done["sessionId"], limit=0)
        assert whole["messages"][-1]["content"][0]["text"] == long
        # The sub-agent's answer goes to its caller as long as a tool result holds.
        parent = await call(client, "agent_run", prompt="delegate:", agent="helper")
        assert parent["answer"] == f"child said {len(long):,}", parent["answer"]


async def test_a_runs_automatic_compaction_says_its_warnings_and_failure_in_the_run() -> None:
    """An automatic compaction under a run whose summary was cut at its output limit, or
    that failed, was said only by its event's line: a client that started the run detached
    and read agent_status later never learnt it."""
    from mcp_agent.compaction.compact import CompactionSettings
    from mcp_agent.compaction.prompts import SUMMARIZATION_SYSTEM_PROMPT

    async def run_with(summary: ScriptedResponse) -> list[str]:
        session = Session()
        for n in range(6):
            session.append_message(UserMessage(content=f"question {n} " + "q" * 1_200))
            session.append_message(
                AssistantMessage(content=[TextContent(text=f"answer {n}")], stop_reason="stop")
            )

        def model(context: LlmContext) -> ScriptedResponse:
            if context.system_prompt == SUMMARIZATION_SYSTEM_PROMPT:
                return summary
            return reply("ok", usage=Usage(input=3_100, output=10, total_tokens=3_110))

        async def build(run_id: str) -> tuple[SessionAgent, str]:
            agent = SessionAgent(
                model=scripted_model(context_window=4_000),
                stream_fn=ScriptedProvider(model),
                session=session,
                compaction=CompactionSettings(keep_recent_tokens=500, reserve_tokens=1_000),
            )
            return agent, "scripted"

        async with anyio.create_task_group() as group:
            run = await RunManager(group).start(
                session=session,
                manifest=AgentManifest(name="default"),
                prompt="next",
                build_agent=build,
                warnings=["a tool server could not start"],
            )
            await run.done.wait()
        assert run.status == "completed", run.error
        return run.warnings

    cut = await run_with(reply("SUMMARY", stop_reason=StopReason.LENGTH))
    assert cut[0] == "a tool server could not start" and len(cut) == 2, cut
    assert cut[1].startswith("auto-compaction: Summarization stopped at its output limit"), cut
    failed = await run_with(reply("", error="the summariser is down"))
    assert failed[1:] == [
        "auto-compaction failed: Summarization failed: the summariser is down; nothing was written"
    ], failed
    assert (await run_with(reply("SUMMARY")))[1:] == []


async def test_an_ended_run_kept_for_agent_status_lets_go_of_its_agent_and_session() -> None:
    """The manager keeps the newest ended runs (KEEP_FINISHED_RUNS) for agent_status; each
    held its agent (the whole transcript) and its session, so a server that had run in 60
    sessions of 2 MB grew by 700 MB past every bound of the sessions it keeps open."""
    session = Session()
    built: list[weakref.ref[SessionAgent]] = []

    async def build(run_id: str) -> tuple[SessionAgent, str]:
        stream = ScriptedProvider(lambda context: reply("hi"))
        agent = SessionAgent(model=scripted_model(), stream_fn=stream, session=session)
        built.append(weakref.ref(agent))
        return agent, "scripted"

    async with anyio.create_task_group() as group:
        runs = RunManager(group, limits=RunLimits(max_runs_per_client=1))
        run = await runs.start(
            session=session,
            manifest=AgentManifest(name="default"),
            prompt="hi",
            build_agent=build,
            client="a client",
        )
        with anyio.fail_after(5):
            await run.done.wait()
        gc.collect()
        assert run.status == "completed" and run.answer == "hi"
        assert runs.runs == {run.id: run}  # kept for agent_status
        assert built[0]() is None
        assert run.agent is None and run.session is None and run.client is None
        # What agent_status shows of it is all there, and its client may start again.
        assert run.new_messages == 2 and run.event_count > 0
        await runs.start(
            session=session,
            manifest=AgentManifest(name="default"),
            prompt="again",
            build_agent=build,
            client="a client",
        )


async def test_cancelling_a_run_waiting_to_retry_ends_it_as_aborted(tmp_path: Path) -> None:
    async with Client(make_server(tmp_path, model_retry_delay=3600)) as client:
        run = await call(client, "agent_run", prompt="overloaded", wait=False)
        with anyio.fail_after(10):
            while True:  # the first answer failed and is stored: the run waits to retry
                branch = await call(client, "session_get", session_id=run["sessionId"])
                if any(
                    e["type"] == "message" and e["message"]["role"] == "assistant"
                    for e in branch["entries"]
                ):
                    break
                await anyio.sleep(0.02)
        await call(client, "agent_cancel", run_id=run["runId"])
        # Still "running" after the wait unless the cancel cut the hour's wait short.
        done = await call(client, "agent_status", run_id=run["runId"], wait_seconds=30)
        assert done["status"] == "aborted", done
        assert "overloaded" in done["error"]


async def test_an_agents_thinking_level_applies_to_a_session_that_sets_none(
    client: Client,
) -> None:
    first = await call(client, "agent_run", prompt="hi", agent="thinker")
    context = await call(client, "session_context", session_id=first["sessionId"])
    assert context["thinkingLevel"] == "high"
    # A session whose branch sets a level keeps its own (the default agent's run set off).
    ran = (await call(client, "agent_run", prompt="hi"))["sessionId"]
    await call(client, "agent_run", prompt="again", agent="thinker", session_id=ran)
    assert (await call(client, "session_context", session_id=ran))["thinkingLevel"] == "off"
    # One whose conversation sets none runs at the agent's (pi: at its default level).
    sid = (await call(client, "session_create"))["id"]
    await call(client, "session_append", session_id=sid, entry=user("earlier"))
    await call(client, "agent_run", prompt="hi", agent="thinker", session_id=sid)
    assert (await call(client, "session_context", session_id=sid))["thinkingLevel"] == "high"


async def test_steer_a_running_run(client: Client) -> None:
    run = await call(client, "agent_run", prompt="slow please", wait=False)
    queued = await call(client, "agent_follow_up", run_id=run["runId"], message="and then?")
    assert queued["queued"] == "follow_up"
    done = await call(client, "agent_status", run_id=run["runId"], wait_seconds=30)
    assert done["answer"] == "echo: and then?"


async def test_read_only_tools_say_so(client: Client) -> None:
    tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    for name in ("agent_status", "agent_runs", "agent_list", "session_get", "session_list"):
        assert present(tools[name].annotations).read_only_hint is True, name
    for name in ("agent_run", "agent_cancel", "session_append"):
        assert present(tools[name].annotations).read_only_hint is False, name


async def test_agent_list(client: Client) -> None:
    agents = {a["name"]: a for a in (await call(client, "agent_list"))["agents"]}
    assert set(agents) == {"default", "helper", "loner", "thinker"}
    assert agents["helper"]["uri"] == "agent://helper"


async def test_session_get_knows_an_older_sub_agents_session_by_its_parents_link(
    tmp_path: Path,
) -> None:
    from test_cli import old_subagent_sessions

    ids = old_subagent_sessions(tmp_path / "old.db")
    server = agent_server(tmp_path, {}, db_path=tmp_path / "old.db")
    async with Client(server) as client:
        child = await call(client, "session_get", session_id=ids["child"], limit=1)
        assert child["session"]["startedBy"] == {"sessionId": ids["parent"], "runId": "r0"}
        resource = await client.read_resource(f"session://{ids['child']}")
        text = narrow(resource.contents[0], types.TextResourceContents).text
        assert json.loads(text)["session"]["startedBy"] == child["session"]["startedBy"]
        for other in ("parent", "parent_fork", "child_fork"):
            got = await call(client, "session_get", session_id=ids[other], limit=1)
            assert got["session"]["startedBy"] is None, other
        listed = (await call(client, "session_list"))["sessions"]
        marked = {s["id"]: s.get("startedBy") for s in listed if s.get("startedBy")}
        assert marked == {ids["child"]: child["session"]["startedBy"]}


async def test_a_subagents_link_holds_the_start_of_a_long_task_and_where_it_is_whole(
    client: Client,
) -> None:
    """The parent's link entry held the whole task, a second copy of the child's first
    message (a long task twice in the parent's session, in every read of it): it holds the
    start of it and names where it is whole."""
    task = "say " + "cheese " * 2_000
    run = await call(client, "agent_run", prompt=f"delegate:loner:{task}", agent="helper")
    assert run["status"] == "completed", run
    parent = await call(client, "session_get", session_id=run["sessionId"], view="entries", limit=0)
    (link,) = [e["data"] for e in parent["entries"] if e.get("customType") == "subagent"]
    child = link["sessionId"]
    assert link["task"].startswith(task[:SUBAGENT_TASK_CHARS] + "…")
    assert len(link["task"]) < SUBAGENT_TASK_CHARS + 200
    assert f"{len(task):,} characters" in link["task"] and child in link["task"]
    first = (await call(client, "session_get", session_id=child, view="entries", limit=0))[
        "entries"
    ]
    asked = [e for e in first if e["type"] == "message" and e["message"]["role"] == "user"]
    assert asked[0]["message"]["content"][0]["text"] == task
    short = await call(client, "agent_run", prompt="delegate:loner:say cheese", agent="helper")
    entries = await call(client, "session_get", session_id=short["sessionId"], view="entries")
    (small,) = [e["data"] for e in entries["entries"] if e.get("customType") == "subagent"]
    assert small["task"] == "say cheese"


async def test_subagent_in_process_links_both_sessions(client: Client) -> None:
    run = await call(client, "agent_run", prompt="delegate:loner:say cheese", agent="helper")
    assert run["status"] == "completed", run
    assert "echo: say cheese" in run["answer"]
    parent = await call(client, "session_get", session_id=run["sessionId"], view="entries", limit=0)
    links = [
        e for e in parent["entries"] if e["type"] == "custom" and e["customType"] == "subagent"
    ]
    assert len(links) == 1
    child_id = links[0]["data"]["sessionId"]
    child = await call(client, "session_get", session_id=child_id)
    assert child["session"]["parentSession"] == run["sessionId"]
    assert child["entries"][-1]["message"]["content"][0]["text"] == "echo: say cheese"
    # agent_runs says which run started which.
    runs = {r["runId"]: r for r in (await call(client, "agent_runs"))["runs"]}
    (child_run,) = [r for r in runs.values() if r["sessionId"] == child_id]
    assert child_run["parentRunId"] == run["runId"] and child_run["depth"] == 1
    assert runs[run["runId"]]["parentRunId"] is None
    # The child's session says it is a sub-agent's, started by that session and run (its
    # parentSession alone read as a fork's); a fork of it, a session of a client's run, and
    # the parent say no such thing.
    started = {"sessionId": run["sessionId"], "runId": run["runId"]}
    assert child["session"]["startedBy"] == started
    outline = await call(client, "session_get", session_id=child_id, view="outline")
    assert outline["session"]["startedBy"] == started
    resource = await client.read_resource(f"session://{child_id}")
    text = narrow(resource.contents[0], types.TextResourceContents).text
    assert json.loads(text)["session"]["startedBy"] == started
    listed = {s["id"]: s for s in (await call(client, "session_list", limit=100))["sessions"]}
    assert listed[child_id]["startedBy"] == started  # listings say it too
    assert listed[run["sessionId"]]["startedBy"] is None
    # The parent's link says which session, run and agent ("custom subagent" said nothing).
    # (From the link on: the chain before it is folded away.)
    at_link = {"session_id": run["sessionId"], "view": "outline", "entry_id": links[0]["id"]}
    rows = (await call(client, "session_get", **at_link))["outline"]
    (link,) = [row for row in rows if row["type"] == "custom"]
    assert link["preview"].startswith(
        f"custom subagent: sessionId={child_id}, runId={child_run['runId']}, agent=loner, task="
    ), link
    fork = await call(client, "session_fork", session_id=child_id)
    for other in (fork["id"], run["sessionId"]):
        got = await call(client, "session_get", session_id=other, limit=1)
        assert got["session"]["startedBy"] is None, got["session"]


async def test_a_subagents_session_works_where_its_parent_does(tmp_path: Path) -> None:
    # It took the server's working directory: in pi's layout its file went into another
    # folder than its parent's, where `pi --resume` in the project never shows it.
    folder = tmp_path / "pi"
    folder.mkdir()
    server = make_server(tmp_path, sessions_dir=folder, sessions_layout="pi")
    async with Client(server) as client:
        parent = (await call(client, "session_create", cwd="/home/u/proj"))["id"]
        run = await call(
            client, "agent_run", prompt="delegate:loner:hi", agent="helper", session_id=parent
        )
        child = subagent_said(run["answer"].removeprefix("tool said: "))["session_id"]
        shown = await call(client, "session_get", session_id=child, limit=1)
        assert shown["session"]["cwd"] == "/home/u/proj"
    files = {path.name.rsplit("_", 1)[-1]: path.parent for path in folder.rglob("*.jsonl")}
    assert files[f"{child}.jsonl"] == files[f"{parent}.jsonl"] == folder / "--home-u-proj--"


async def test_a_subagent_with_an_empty_task_is_refused_in_the_models_words(
    client: Client,
) -> None:
    run = await call(client, "agent_run", prompt="delegate:loner: ", agent="helper")
    assert run["answer"].endswith(": task is empty: say what the sub-agent should do"), run


async def test_a_subagents_progress_reaches_the_parents_client(client: Client) -> None:
    # What the sub-agent does travels up as its tool's progress; the parent's client reads it
    # (as agent_status's lastEvent does), not just that the tool reported something.
    notes: list[str] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        notes.append(message or "")

    await client.call_tool(
        "agent_run",
        {"prompt": "delegate:loner:say cheese", "agent": "helper"},
        progress_callback=on_progress,
    )
    updates = [n for n in notes if n.startswith("tool_execution_update")]
    assert updates and all(
        n.startswith("tool_execution_update: tool subagent: [loner] ") for n in updates
    )
    assert any("assistant: echo: say cheese" in n for n in updates), updates


async def test_a_subagent_whose_link_cannot_be_written_does_not_run_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The parent's session refuses the link entry (its disk full, its file replaced): the
    # sub-agent already started must not go on with nobody waiting for it or able to stop it,
    # and the parent's model reads why its tool failed.
    refuse = Session.append_custom

    def append_custom(self: Session, custom_type: str, data: Any = None) -> str:
        if custom_type == "subagent":
            raise SessionError("storage", "the disk is full")
        return refuse(self, custom_type, data)

    monkeypatch.setattr(Session, "append_custom", append_custom)
    async with Client(make_server(tmp_path)) as client:
        run = await call(client, "agent_run", prompt="delegate:loner:slow please", agent="helper")
        assert run["answer"].startswith("tool said: "), run
        assert "the disk is full" in run["answer"], run
        with anyio.fail_after(10):
            while any(r["status"] == "running" for r in (await call(client, "agent_runs"))["runs"]):
                await anyio.sleep(0.02)
        [child] = [r for r in (await call(client, "agent_runs"))["runs"] if r["depth"] == 1]
        assert child["status"] == "aborted", child


async def test_a_continued_session_keeps_its_agent(tmp_path: Path) -> None:
    # A sub-agent's session, continued with agent_run in the session its result names, went on
    # as the default agent: another system prompt and another set of tools.
    def model(context: LlmContext) -> ScriptedResponse:
        last = context.messages[-1]
        if last.role == "toolResult":
            return reply(content_text(last.content))
        text = content_text(last.content)
        if text.startswith("delegate:"):
            return reply(tool_call("subagent", {"agent": "loner", "task": text[9:]}))
        tools = [tool.name for tool in context.tools or []]
        return reply(f"{context.system_prompt}|{tools}")

    agents = {**TEST_AGENTS, "loner": 'tools = []\nsystem_prompt = "I am loner"\n'}
    async with Client(agent_server(tmp_path, {"scripted": model}, agents=agents)) as client:
        parent = await call(client, "agent_run", prompt="delegate:hi", agent="helper")
        child = subagent_said(parent["answer"])
        assert child["answer"] == "I am loner|[]", child
        again = await call(client, "agent_run", prompt="more", session_id=child["session_id"])
        assert (again["agent"], again["answer"]) == ("loner", "I am loner|[]"), again
        # The parent's session goes on as the helper it was started with ...
        more = await call(client, "agent_run", prompt="more", session_id=parent["sessionId"])
        assert (more["agent"], more["answer"]) == ("helper", "|['subagent']"), more
        # ... and an agent named is the one that runs.
        named = await call(
            client, "agent_run", prompt="x", session_id=child["session_id"], agent="default"
        )
        assert named["answer"] == "be brief|['subagent']", named


async def test_a_continued_session_whose_agent_is_gone_says_so(tmp_path: Path) -> None:
    # Its agent no longer in the manifests (renamed, removed), a continued session went on as
    # the default agent, another system prompt and tools, and nothing said so.
    def model(context: LlmContext) -> ScriptedResponse:
        return reply(f"{context.system_prompt}|{content_text(context.messages[-1].content)}")

    agents = {**TEST_AGENTS, "reviewer": 'system_prompt = "I review"\n'}
    async with Client(agent_server(tmp_path, {"scripted": model}, agents=agents)) as client:
        first = await call(client, "agent_run", prompt="hi", agent="reviewer")
        assert first["answer"] == "I review|hi" and first["warnings"] == []
        again = await call(client, "agent_run", prompt="more", session_id=first["sessionId"])
        assert again["agent"] == "reviewer" and again["warnings"] == []
    (tmp_path / "manifests" / "agents" / "reviewer.toml").unlink()
    async with Client(agent_server(tmp_path, {"scripted": model}, agents=TEST_AGENTS)) as client:
        run = await call(client, "agent_run", prompt="more", session_id=first["sessionId"])
    assert (run["agent"], run["answer"]) == ("default", "be brief|more"), run
    (warning,) = run["warnings"]
    assert warning.startswith("the session was started with the agent 'reviewer', which"), run
    assert "this run is the default agent" in warning


async def test_the_subagent_tool_is_not_offered_at_the_depth_limit(tmp_path: Path) -> None:
    # A run at the limit was offered the tool, and every call of it was refused: a wasted
    # turn each, and a model told to delegate when it could not.
    provider = ScriptedProvider(prompt_responder)
    server = agent_server(
        tmp_path, {"scripted": provider}, agents=TEST_AGENTS, max_subagent_depth=1
    )
    async with Client(server) as client:
        # helper delegates to helper (level 1, the limit): that one has no subagent tool.
        run = await call(client, "agent_run", prompt="delegate:helper:hello", agent="helper")
        offered = {
            content_text(c.messages[-1].content): [t.name for t in c.tools or []]
            for c in provider.calls
            if c.messages[-1].role == "user"
        }
        assert offered == {"delegate:helper:hello": ["subagent"], "hello": []}, offered
        said = subagent_said(run["answer"].removeprefix("tool said: "))
        assert said["answer"] == "echo: hello", run
        runs = (await call(client, "agent_runs"))["runs"]
        (child,) = [r["sessionId"] for r in runs if r["parentRunId"] == run["runId"]]
        # The child session keeps the tool on: continued by a client (level 0), it has it,
        # and a run at the limit there leaves the session's list of tools as it was.
        await call(client, "agent_run", prompt="again", session_id=child)
        assert [t.name for t in provider.calls[-1].tools or []] == ["subagent"]
        deep = await client.call_tool(
            "agent_run",
            {"prompt": "deep", "session_id": child},
            meta=cast(types.RequestParamsMeta, {RUN_META_KEY: {"depth": 0}}),
        )
        assert not deep.is_error and provider.calls[-1].tools == []
        await call(client, "agent_run", prompt="once more", session_id=child)
        assert [t.name for t in provider.calls[-1].tools or []] == ["subagent"]
    # With --max-depth 0 no run is offered it.
    provider.calls.clear()
    async with Client(
        agent_server(tmp_path, {"scripted": provider}, agents=TEST_AGENTS, max_subagent_depth=0)
    ) as client:
        await call(client, "agent_run", prompt="hi", agent="helper")
    assert [t.name for t in provider.calls[-1].tools or []] == []


async def test_disallowed_tool_is_invisible(tmp_path: Path) -> None:
    provider = ScriptedProvider(lambda context: reply("ok"))
    server = agent_server(tmp_path, {"scripted": provider}, agents=TEST_AGENTS)
    async with Client(server) as client:
        await call(client, "agent_run", prompt="hi", agent="loner")
        await call(client, "agent_run", prompt="hi", agent="helper")
    loner, helper = ([tool.name for tool in call.tools or []] for call in provider.calls)
    assert loner == []
    assert helper == ["subagent"]


async def test_the_subagent_tool_names_the_agents_it_delegates_to(tmp_path: Path) -> None:
    # The model has no agent_list: told only "the agent to delegate to (see its manifest)",
    # it guessed names, and each guess cost it a turn.
    provider = ScriptedProvider(lambda context: reply("ok"))
    agents = {**TEST_AGENTS, "wordy": f'description = "{"w" * 5_000}"\n'}
    server = agent_server(tmp_path, {"scripted": provider}, agents=agents)
    async with Client(server) as client:
        await call(client, "agent_run", prompt="hi", agent="helper")
    [tool] = provider.calls[0].tools or []
    assert tool.name == "subagent"
    for line in ("- default: test default", "- helper: a helper", "- loner: no tools"):
        assert line in tool.description, tool.description
    assert "- thinker: thinks" in tool.description
    # A description is cut: the listing goes with every request of every run.
    assert "- wordy: www" in tool.description and len(tool.description) < 1_000


async def test_continuing_a_session_keeps_its_model(tmp_path: Path) -> None:
    server = agent_server(
        tmp_path,
        {"scripted": prompt_responder, "shouty": lambda context: reply("LOUD")},
        agents=TEST_AGENTS,
    )
    async with Client(server) as client:
        first = await call(client, "agent_run", prompt="hi", model="shouty")
        again = await call(client, "agent_run", prompt="again", session_id=first["sessionId"])
        assert again["answer"] == "LOUD" and again["model"] == "shouty"
        fresh = await call(client, "agent_run", prompt="new")
        assert fresh["answer"] == "echo: new"
        switched = await call(
            client, "agent_run", prompt="x", session_id=first["sessionId"], model="scripted"
        )
        assert switched["answer"] == "echo: x"
        context = await call(client, "session_context", session_id=first["sessionId"])
        assert context["model"] == {"provider": "scripted", "modelId": "scripted"}


async def test_continuing_a_session_whose_model_cannot_be_used_here_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As pi's "Could not restore model": a session last run with a model this server cannot
    use (a provider it does not know, a key not set) goes on with the default, and the run
    says so. Before, the first was silent and the second refused the run."""
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    server = agent_server(tmp_path, {"scripted": prompt_responder}, agents=TEST_AGENTS)
    async with Client(server) as client:
        for provider, model_id, why in (
            ("google-vertex-x", "gemini-9", "unknown provider"),
            ("anthropic", "claude-sonnet-4-5", "its API key is not set (ANTHROPIC_API_KEY)"),
        ):
            sid = (await call(client, "session_create"))["id"]
            change = {"type": "model_change", "provider": provider, "modelId": model_id}
            entry = {"type": "pi", "json": json.dumps(change)}
            await call(client, "session_append", session_id=sid, entry=entry)
            run = await call(client, "agent_run", prompt="hi", session_id=sid)
            assert run["answer"] == "echo: hi" and run["model"] == "scripted"
            (warning,) = run["warnings"]
            assert warning.startswith(
                f"could not restore the model the session last used, {provider}:{model_id}: "
            )
            assert why in warning and warning.endswith("; this run uses scripted")


async def test_continuing_messages_appended_without_a_model_warns_of_none(tmp_path: Path) -> None:
    """An assistant message appended over MCP names no model (provider and model empty): a
    run in that session took ":" for the model it last used and warned "could not restore the
    model the session last used, :: unknown provider ''"."""
    server = agent_server(tmp_path, {"scripted": prompt_responder}, agents=TEST_AGENTS)
    async with Client(server) as client:
        sid = (await call(client, "session_create"))["id"]
        for role, text in (("user", "old question"), ("assistant", "old answer")):
            entry = {"type": "message", "role": role, "content": text}
            await call(client, "session_append", session_id=sid, entry=entry)
        run = await call(client, "agent_run", prompt="hi", session_id=sid)
        assert run["answer"] == "echo: hi" and run["model"] == "scripted"
        assert run["warnings"] == []


async def test_subagent_thinks_with_its_parents_model(tmp_path: Path) -> None:
    def other(context: LlmContext) -> ScriptedResponse:
        last = context.messages[-1]
        if last.role == "toolResult":
            return reply(f"tool said: {content_text(last.content)}")
        text = content_text(last.content)
        if text.startswith("delegate:"):
            agent, _, task = text.removeprefix("delegate:").partition(":")
            return reply(tool_call("subagent", {"agent": agent, "task": task}))
        return reply("OTHER MODEL")

    server = agent_server(
        tmp_path, {"scripted": prompt_responder, "other": other}, agents=TEST_AGENTS
    )
    async with Client(server) as client:
        run = await call(
            client, "agent_run", prompt="delegate:loner:hi", agent="helper", model="other"
        )
    assert "OTHER MODEL" in run["answer"]


async def test_a_subagent_whose_agent_names_the_clients_model_asks_the_client(
    tmp_path: Path,
) -> None:
    # A sub-agent's run was given no MCP client connection: an agent whose manifest says
    # model = "client" failed with "there is no MCP client connection", while the client that
    # started its parent was there to ask.
    def model(context: LlmContext) -> ScriptedResponse:
        last = context.messages[-1]
        if last.role == "toolResult":
            return reply(f"tool said: {content_text(last.content)}")
        return reply(tool_call("subagent", {"agent": "asker", "task": "hi"}))

    clients_model = ClientsModel("FROM THE CLIENT")
    agents = {**TEST_AGENTS, "asker": 'model = "client"\ntools = []\n'}
    server = agent_server(tmp_path, {"scripted": model}, agents=agents)
    async with Client(server, mode="legacy", sampling_callback=clients_model) as client:
        run = await call(client, "agent_run", prompt="go", agent="helper")
    assert "FROM THE CLIENT" in run["answer"], run["answer"]
    assert subagent_said(run["answer"].removeprefix("tool said: "))["answer"] == "FROM THE CLIENT"
    assert len(clients_model.asked) == 1


async def test_a_session_on_the_clients_model_goes_on_with_it_without_naming_it(
    tmp_path: Path,
) -> None:
    """A run without a model continues a session with the model it last used: for the
    client's own, recorded as sampling:client, the run failed ("this run has no MCP client
    connection to ask") though the client that asked was there to sample. A client that cannot
    sample gets the server's default, with a note, as for any model that cannot be restored."""
    from mcp_agent.providers import sampling
    from mcp_agent.runtime import models

    assert models.SAMPLING_PROVIDER == sampling.SAMPLING_PROVIDER  # one name, said twice
    clients_model = ClientsModel("FROM THE CLIENT")
    server = agent_server(tmp_path, {"scripted": prompt_responder}, agents=TEST_AGENTS)
    async with Client(server, mode="legacy", sampling_callback=clients_model) as client:
        first = await call(client, "agent_run", prompt="one", model="client")
        sid = first["sessionId"]
        again = await call(client, "agent_run", prompt="two", session_id=sid)
    assert again["status"] == "completed" and again["answer"] == "FROM THE CLIENT", again
    assert len(clients_model.asked) == 2
    async with Client(server) as plain:  # no sampling
        other = await call(plain, "agent_run", prompt="three", session_id=sid)
    assert other["status"] == "completed" and other["model"] == "scripted", other
    [note] = other["warnings"]
    assert "could not restore the model the session last used, sampling:client" in note, note


async def test_a_subagents_long_answer_is_cut_keeping_the_rest_of_its_result(
    tmp_path: Path,
) -> None:
    # Cut with the tool result's own bound, the answer took the fields after it along: the
    # calling model lost the sub-agent's session and status.
    def model(context: LlmContext) -> ScriptedResponse:
        last = context.messages[-1]
        if last.role == "toolResult":
            result = subagent_said(content_text(last.content))
            cut = "[cut: 150,000 characters in all" in result["answer"]
            return reply(f"status={result['status']} session={result['session_id']} cut={cut}")
        text = content_text(last.content)
        if text.startswith("delegate:"):
            agent, _, task = text.removeprefix("delegate:").partition(":")
            return reply(tool_call("subagent", {"agent": agent, "task": task}))
        return reply("x" * 150_000)

    server = agent_server(
        tmp_path, {"scripted": prompt_responder, "long": model}, agents=TEST_AGENTS
    )
    async with Client(server) as client:
        run = await call(
            client, "agent_run", prompt="delegate:loner:go", agent="helper", model="long"
        )
    assert run["answer"].startswith("status=completed session=") and run["answer"].endswith(
        "cut=True"
    ), run["answer"]


async def test_a_subagents_answer_cut_at_its_output_limit_says_it_is_unfinished(
    tmp_path: Path,
) -> None:
    """A child whose answer stopped at the output token limit completes, and its answer went
    to the calling model as if whole."""

    def model(context: LlmContext) -> ScriptedResponse:
        last = context.messages[-1]
        if last.role == "toolResult":
            return reply(subagent_said(content_text(last.content))["answer"])
        text = content_text(last.content)
        if text.startswith("delegate:"):
            agent, _, task = text.removeprefix("delegate:").partition(":")
            return reply(tool_call("subagent", {"agent": agent, "task": task}))
        return reply("the first half of", stop_reason=StopReason.LENGTH)

    server = agent_server(
        tmp_path, {"scripted": prompt_responder, "short": model}, agents=TEST_AGENTS
    )
    async with Client(server) as client:
        run = await call(
            client, "agent_run", prompt="delegate:loner:go", agent="helper", model="short"
        )
    answer, note = run["answer"].split("\n")
    assert answer == "the first half of"
    assert note.startswith("[unfinished: the sub-agent reached its output token limit")


async def test_steering_message_goes_in_before_the_next_model_call(client: Client) -> None:
    run = await call(client, "agent_run", prompt="slow please", wait=False)
    assert "empty" in await call_error(client, "agent_steer", run_id=run["runId"], message=" ")
    queued = await call(client, "agent_steer", run_id=run["runId"], message="change course")
    assert queued["queued"] == "steering"
    done = await call(client, "agent_status", run_id=run["runId"], wait_seconds=30)
    assert done["answer"] == "echo: change course"
    branch = await call(client, "session_get", session_id=run["sessionId"], limit=0)
    users = [
        e["message"]["content"]
        for e in branch["entries"]
        if e["type"] == "message" and e["message"]["role"] == "user"
    ]
    assert [u if isinstance(u, str) else u[0]["text"] for u in users] == [
        "slow please",
        "change course",
    ]


async def test_one_run_per_session_across_servers_on_one_database(tmp_path: Path) -> None:
    # Two servers on one database, as two IDE windows each start their own.
    await check_one_run_per_session(make_server(tmp_path), make_server(tmp_path))


async def check_one_run_per_session(first: MCPServer, second: MCPServer) -> None:
    """A run on ``first`` holds its session against ``second`` (sharing its store)."""
    async with Client(first) as a, Client(second) as b:
        run = await call(a, "agent_run", prompt="slow please", wait=False)
        sid = run["sessionId"]
        text = await call_error(b, "agent_run", prompt="me too", session_id=sid)
        assert "busy" in text and run["runId"] in text and "another server process" in text
        # The append is refused inside its own transaction: nothing is written (the run
        # itself goes on writing meanwhile, so look for the refused entry, not at counts).
        text = await call_error(b, "session_append", session_id=sid, entry=user("refused x"))
        assert f"session {sid} is busy: run {run['runId']}" in text
        await call(a, "agent_status", run_id=run["runId"], wait_seconds=30)
        entries = (await call(b, "session_get", session_id=sid, view="entries", limit=0))["entries"]
        assert "refused x" not in json.dumps(entries)
        assert any("slow please" in json.dumps(e) for e in entries)
        after = await call(b, "agent_run", prompt="now", session_id=sid)
        assert after["answer"] == "echo: now"


async def test_a_lease_of_a_dead_process_is_let_go(tmp_path: Path) -> None:
    import sqlite3
    import sys
    import time

    from mcp_agent.runtime.leases import process_space

    server = make_server(tmp_path)
    async with Client(server) as client:
        sid = (await call(client, "session_create"))["id"]
        gone = await anyio.run_process([sys.executable, "-c", "import os; print(os.getpid())"])
        with sqlite3.connect(tmp_path / "sessions.db") as db:
            db.execute(
                "INSERT INTO session_leases VALUES (?, 'run dead', 'someone', ?, ?, ?)",
                (sid, process_space(), int(gone.stdout), time.time() + 60),
            )
        done = await call(client, "agent_run", prompt="hello", session_id=sid)
        assert done["answer"] == "echo: hello"


async def test_completion_of_session_ids_entry_ids_and_agent_names(tmp_path: Path) -> None:
    from mcp.types import PromptReference, ResourceTemplateReference

    from mcp_agent.sessions.sqlite import SqliteSessionRepo

    repo = SqliteSessionRepo(tmp_path / "sessions.db")
    oldest = repo.create()
    first = oldest.append_message(UserMessage(content="hi"))
    for _ in range(150):  # the oldest is far beyond the newest hundred
        repo.create()
    repo.close()
    prompt = PromptReference(type="ref/prompt", name="continue_session")
    entries = ResourceTemplateReference(
        type="ref/resource", uri="session://{session_id}/entries/{entry_id}"
    )
    agents = ResourceTemplateReference(type="ref/resource", uri="agent://{name}")
    async with Client(make_server(tmp_path)) as client:
        found = await client.complete(prompt, {"name": "session_id", "value": oldest.id[:-2]})
        assert oldest.id in found.completion.values
        every = await client.complete(prompt, {"name": "session_id", "value": ""})
        assert len(every.completion.values) == 100 and every.completion.has_more
        entry = await client.complete(
            entries, {"name": "entry_id", "value": first[:3]}, {"session_id": oldest.id}
        )
        assert entry.completion.values == [first]
        named = await client.complete(agents, {"name": "name", "value": "he"})
        assert named.completion.values == ["helper"]
        nothing = await client.complete(
            entries, {"name": "entry_id", "value": ""}, {"session_id": "missing"}
        )
        assert nothing.completion.values == []
        # Only what the prompt or template takes, and only of one this server has.
        other = await client.complete(prompt, {"name": "entry_id", "value": ""})
        assert other.completion.values == []
        refs: list[PromptReference | ResourceTemplateReference] = [
            PromptReference(type="ref/prompt", name="ghost"),
            ResourceTemplateReference(type="ref/resource", uri="ghost://{session_id}"),
        ]
        for ref in refs:
            unknown = await client.complete(ref, {"name": "session_id", "value": ""})
            assert unknown.completion.values == []


@pytest.mark.filterwarnings("ignore:The logging capability is deprecated")
async def test_a_clients_log_level_leaves_the_servers_own_log_alone(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # One client's logging/setLevel once set the process's log level: "emergency" hid every
    # warning on stderr (a model's rate limit, a downstream server's trouble) from then on, for
    # every client's runs.
    ours = logging.getLogger("mcp_agent")
    before = ours.level
    try:
        async with Client(make_server(tmp_path), mode="legacy") as client:
            await client.session.set_logging_level("emergency")
        with caplog.at_level(logging.WARNING):
            logging.getLogger("mcp_agent.providers.http").warning("429: trying again in 2 s")
        assert "trying again" in caplog.text
    finally:
        ours.setLevel(before)


@pytest.mark.parametrize("backend", ["sqlite", "jsonl"])
async def test_completion_of_entry_ids_says_there_are_more_newest_first(
    tmp_path: Path, backend: str
) -> None:
    from mcp.types import ResourceTemplateReference

    from mcp_agent.sessions.jsonl import JsonlSessionRepo
    from mcp_agent.sessions.sqlite import SqliteSessionRepo

    folder = tmp_path / "pi"
    folder.mkdir()
    repo = SqliteSessionRepo(tmp_path / "sessions.db") if backend == "sqlite" else None
    with repo or JsonlSessionRepo(folder) as opened:
        session = opened.create()
        ids = [session.append_message(UserMessage(content=f"m{n}")) for n in range(130)]
    entries = ResourceTemplateReference(
        type="ref/resource", uri="session://{session_id}/entries/{entry_id}"
    )
    server = make_server(tmp_path, **({} if repo else {"sessions_dir": folder}))
    async with Client(server) as client:
        every = await client.complete(
            entries, {"name": "entry_id", "value": ""}, {"session_id": session.id}
        )
        assert every.completion.has_more and every.completion.total is None
        assert every.completion.values == ids[::-1][:100]
        few = await client.complete(
            entries, {"name": "entry_id", "value": ids[0]}, {"session_id": session.id}
        )
        assert few.completion.values == [ids[0]] and not few.completion.has_more


async def test_a_text_answer_at_max_turns_with_steering_left_is_an_answer(
    tmp_path: Path,
) -> None:
    brief = 'description = "one model call"\nmax_turns = 1\n'
    server = agent_server(
        tmp_path, {"scripted": prompt_responder}, agents={**TEST_AGENTS, "brief": brief}
    )
    async with Client(server) as client:
        run = await call(client, "agent_run", prompt="slow please", agent="brief", wait=False)
        with anyio.fail_after(30):  # steer once the answer streams: it cannot go in any more
            while "text_delta" not in str(
                (await call(client, "agent_status", run_id=run["runId"])).get("lastEvent")
            ):
                await anyio.sleep(0.01)
        await call(client, "agent_steer", run_id=run["runId"], message="one more thing")
        done = await call(client, "agent_status", run_id=run["runId"], wait_seconds=30)
        assert done["status"] == "completed" and done["answer"].startswith("word word"), done
        # The steering message is kept, unanswered: the next run in the session answers it.
        branch = await call(client, "session_get", session_id=run["sessionId"], limit=0)
        assert "one more thing" in json.dumps(branch["entries"][-1])


async def test_a_run_cut_off_at_max_turns_is_an_error_that_says_so(tmp_path: Path) -> None:
    brief = 'description = "one model call"\ntools = ["subagent"]\nmax_turns = 1\n'
    server = agent_server(
        tmp_path, {"scripted": prompt_responder}, agents={**TEST_AGENTS, "brief": brief}
    )
    async with Client(server) as client:
        result = await client.call_tool(
            "agent_run", {"prompt": "delegate:loner:hi", "agent": "brief"}
        )
        run = result.structured_content or {}
        assert result.is_error and run["status"] == "error"
        assert "stopped at the limit of 1 model call (the agent's max_turns)" in run["error"]
        assert "agent_run in this session goes on from here" in run["error"]
        on = await call(client, "agent_run", prompt="thanks", session_id=run["sessionId"])
        assert on["status"] == "completed" and on["answer"] == "echo: thanks"


async def test_the_prompt_says_which_images_it_leaves_out(client: Client) -> None:
    """A prompt message is text: a user message or a tool's result that held an image beside
    its text came as the text alone, the image dropped without a word ("(image)" when it held
    nothing else), so the model continuing the session never knew one was shown."""
    sid = (await call(client, "session_create"))["id"]
    png = {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"}
    look = {"role": "user", "content": [{"type": "text", "text": "what is this?"}, png]}
    await call(
        client, "session_append", session_id=sid, entry=pi({"type": "message", "message": look})
    )
    alone = {"role": "user", "content": [png, {**png, "mimeType": "image/jpeg"}]}
    await call(
        client, "session_append", session_id=sid, entry=pi({"type": "message", "message": alone})
    )
    shot = {
        "role": "toolResult",
        "toolCallId": "t1",
        "toolName": "screenshot",
        "content": [{"type": "text", "text": "taken"}, png],
        "isError": False,
    }
    await call(
        client, "session_append", session_id=sid, entry=pi({"type": "message", "message": shot})
    )
    prompt = await client.get_prompt("continue_session", {"session_id": sid})
    texts = [narrow(m.content, types.TextContent).text for m in prompt.messages]
    left_out = "left out of this prompt; session_context has it"
    assert texts[0] == f"what is this?\n[an image (image/png) {left_out}]", texts[0]
    assert texts[1] == (f"[an image (image/png) {left_out}]\n[an image (image/jpeg) {left_out}]"), (
        texts[1]
    )
    assert texts[2] == f"[tool screenshot returned]\ntaken\n[an image (image/png) {left_out}]"


async def test_a_missing_session_or_entry_is_answered_with_the_one_listing_that_helps(
    client: Client,
) -> None:
    """A missing session said "(list sessions with session_list, or entries with
    session_get)": the second half is no help when it is the session that is missing, and
    the first none when it is an entry. Each names now the listing of what is missing."""
    gone = "01a00000-0000-7000-8000-00000000dead"
    text = await call_error(client, "session_get", session_id=gone)
    assert text.endswith(f"session {gone} not found (list sessions with session_list)"), text
    sid = (await call(client, "session_create"))["id"]
    text = await call_error(client, "session_move_to", session_id=sid, entry_id="nothing")
    assert "entry nothing not found" in text and "session_list" not in text, text
    assert text.endswith("(list entries with session_get)"), text
    with pytest.raises(MCPError) as refused:
        await client.get_prompt("continue_session", {"session_id": gone})
    assert refused.value.error.message.endswith("(list sessions with session_list)")
