"""A session with the shapes a viewer must show: a model change, a tool call and its result,
a label, a compaction, a long chain (to fold) and two branches; for the outline tests and the
browser tests alike."""

from __future__ import annotations

import functools
import itertools
import json
from pathlib import Path
from typing import Any

import httpx
from mcp_support import HTTP_HEADERS, LOOPBACK_HTTP, poll

from mcp_agent import SqliteSessionRepo
from mcp_agent.messages import (
    AssistantMessage,
    TextContent,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)
from mcp_agent.sessions import Session

# The chain of small talk on the current branch: long enough to fold.
CHAIN = 12


# The model the session records: scripted:echo, so that continuing it needs no API key.
PROVIDER, MODEL = "scripted", "echo"


def answer(text: str) -> AssistantMessage:
    return AssistantMessage(content=[TextContent(text=text)], provider=PROVIDER, model=MODEL)


def build_picnic(session: Session) -> dict[str, str]:
    """Fill ``session``; returns the ids that tests look for by name."""
    ids: dict[str, str] = {}
    session.append_model_change(PROVIDER, MODEL)
    ids["ask"] = session.append_message(UserMessage(content="Plan a picnic for Saturday"))
    call = ToolCall(id="c1", name="weather", arguments={"city": "Paris", "day": "Saturday"})
    ids["call"] = session.append_message(
        AssistantMessage(
            content=[TextContent(text="Let me check the weather first."), call],
            provider=PROVIDER,
            model=MODEL,
        )
    )
    ids["result"] = session.append_message(
        ToolResultMessage(
            tool_call_id="c1", tool_name="weather", content=[TextContent(text="22 °C, sunny")]
        )
    )
    ids["plan"] = session.append_message(
        answer("Saturday looks sunny: 22 °C. A park by the river would be lovely.")
    )
    ids["sandwiches"] = session.append_message(UserMessage(content="Add sandwiches"))
    ids["sandwiches_answer"] = session.append_message(answer("Cucumber and egg sandwiches."))
    ids["summary"] = (
        session.move_to(
            ids["plan"], {"summary": "Tried sandwiches; the user would rather bring fruit."}
        )
        or ""
    )
    ids["fruit"] = session.append_message(UserMessage(content="Add fruit instead"))
    ids["fruit_answer"] = session.append_message(answer("Strawberries, grapes and melon."))
    ids["label"] = session.append_label(ids["plan"], "weather-ok")
    for turn in range(CHAIN // 2):
        session.append_message(UserMessage(content=f"And item {turn + 1}?"))
        session.append_message(answer(f"Item {turn + 1} added to the basket."))
    ids["compaction"] = session.append_compaction(
        "The user plans a picnic on Saturday (sunny, 22 °C) with fruit.", ids["fruit"], 5200
    )
    ids["last_ask"] = session.append_message(UserMessage(content="What time should we meet?"))
    ids["leaf"] = session.append_message(answer("Meet at noon by the old bridge."))
    return ids


def picnic_db(path: Path) -> tuple[str, dict[str, str]]:
    """A SQLite database at ``path`` holding the picnic session; returns its id and ids."""
    with SqliteSessionRepo(path) as repo:
        session = repo.create(name="Picnic plans", cwd="~/picnic")
        return session.id, build_picnic(session)


# --- a raw MCP client over HTTP (2026-07-28: each request stands alone) -------------------

PROTOCOL = "2026-07-28"
UI_EXTENSION = {"io.modelcontextprotocol/ui": {"mimeTypes": ["text/html;profile=mcp-app"]}}


def mcp_request(
    url: str, method: str, params: dict[str, Any], token: str | None = None, **headers: str
) -> httpx.Response:
    """One JSON-RPC request to ``url`` as the page sends it; the response as it came."""
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": method,
        "params": {
            **params,
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": PROTOCOL,
                "io.modelcontextprotocol/clientInfo": {"name": "test", "version": "1"},
                "io.modelcontextprotocol/clientCapabilities": {"extensions": UI_EXTENSION},
            },
        },
    }
    sent = {
        **HTTP_HEADERS,
        "MCP-Protocol-Version": PROTOCOL,
        "Mcp-Method": method,
        **({"Mcp-Name": params["name"]} if method == "tools/call" else {}),
        **({"Authorization": f"Bearer {token}"} if token else {}),
        **headers,
    }
    return LOOPBACK_HTTP.post(url, json=body, headers=sent)


def mcp_tool(url: str, token: str, name: str, /, **arguments: Any) -> dict[str, Any]:
    """A tool call over HTTP that must succeed: the whole result (structured and text)."""
    response = mcp_request(url, "tools/call", {"name": name, "arguments": arguments}, token)
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()["result"]
    assert not result.get("isError"), result
    return result


def delete_every_session(url: str, db: Path, token: str) -> None:
    """Every session of ``db`` deleted through the server at ``url`` (as a client does: the
    server forgets what it kept of each), once the run a test left finishing is done: a
    server shared by a module's tests, made as if new for the next (``token``: its token, or
    "" for a server without auth)."""
    with SqliteSessionRepo(db) as repo:
        page = repo.list(limit=1000)
        listed = [summary.id for summary in page.items]
        assert page.next_cursor is None, "more sessions than one page"

    def deleted(session_id: str) -> bool:
        arguments = {"session_id": session_id}
        response = mcp_request(
            url, "tools/call", {"name": "session_delete", "arguments": arguments}, token
        )
        assert response.status_code == 200, response.text
        result = response.json()["result"]
        if result.get("isError"):
            assert "busy" in json.dumps(result).lower(), result
            return False
        return True

    for session_id in listed:
        poll(functools.partial(deleted, session_id), f"{session_id} stays busy")


# Session ids never used before: the tests of a module share a server and its database.
SESSION_NUMBERS = itertools.count(0xAA)


def chain_session(path: Path, length: int) -> str:
    """A session of one chain of ``length`` user messages (a run the outline folds whole),
    a session never seen before (the tests share a server); its id."""
    header = {"type": "session", "version": 3, "cwd": "/w"}
    header |= {"id": f"01a00000-0000-7000-8000-{next(SESSION_NUMBERS):012d}"}
    lines: list[dict[str, Any]] = [header | {"timestamp": "2026-01-01T00:00:00.000Z"}]
    for index in range(length):
        lines.append(
            {
                "type": "message",
                "id": f"e{index:07d}",
                "parentId": f"e{index - 1:07d}" if index else None,
                "timestamp": "2026-01-01T00:00:01.000Z",
                "message": {"role": "user", "content": f"step {index}", "timestamp": 1},
            }
        )
    file = path.with_suffix(".jsonl")
    file.write_text("".join(json.dumps(line) + "\n" for line in lines))
    with SqliteSessionRepo(path) as repo:
        return repo.import_jsonl(file).id


def entry_read_limits(page: Any) -> list[int]:
    """The limit of each read of whole entries (``session_get`` by entry id, no view) the
    Playwright ``page`` sends from now on, filled as it sends them."""
    limits: list[int] = []

    def sent(request: Any) -> None:
        if request.headers.get("mcp-name") == "session_get":
            arguments = (request.post_data_json or {})["params"]["arguments"]
            if "entry_id" in arguments and arguments.get("view") is None:
                limits.append(arguments["limit"])

    page.on("request", sent)
    return limits
