"""Bad input, fuzzed: parsing, pi import and every MCP tool's arguments. The answer is always a
parsed object or a clear error; never another exception, never a partial write.

Example counts are reduced in CI; ``MCP_AGENT_FULL=1`` runs more.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.from_thread
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp.types import TextContent
from mcp_support import make_server
from narrow import narrow
from reliability_support import check_tree, size

from mcp_agent.messages import BaseMessage, MessageParseError, parse_message
from mcp_agent.server.strict import schema_nodes
from mcp_agent.sessions import (
    InMemorySessionRepo,
    JsonlSessionRepo,
    MessageEntry,
    SessionError,
    SqliteSessionRepo,
    parse_entry,
)
from mcp_agent.sessions.entries import entry_from_json, entry_to_json
from mcp_agent.sessions.repo import BaseSessionRepo

PI_SAMPLES = Path(__file__).parent / "data" / "pi"
SAMPLES = {p.stem: p.read_text() for p in sorted(PI_SAMPLES.glob("v*.jsonl"))}

FAST = settings(
    max_examples=size(150, 2000),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

# --- strategies -------------------------------------------------------------------------------

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=20),
)
json_values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
entry_ids = st.one_of(st.text(alphabet="0123456789abcdef", min_size=8, max_size=8), json_values)
timestamps = st.one_of(
    st.integers(min_value=0, max_value=2**64),
    st.sampled_from(["2026-01-15T08:30:00.000Z", "2026-01-15", "not a time", ""]),
    json_values,
)


def maybe(valid: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Mostly a well-typed value, sometimes any JSON at all."""
    return st.one_of(valid, valid, valid, json_values)


usages = st.fixed_dictionaries(
    {},
    optional={
        key: maybe(st.integers(min_value=0, max_value=2**66))
        for key in ("input", "output", "cacheRead", "cacheWrite", "totalTokens")
    }
    | {"cost": maybe(st.fixed_dictionaries({"total": st.floats(0, 10)}))},
)
blocks = st.one_of(
    st.fixed_dictionaries({"type": st.just("text"), "text": maybe(st.text(max_size=30))}),
    st.fixed_dictionaries(
        {"type": st.just("image"), "data": maybe(st.text()), "mimeType": maybe(st.text())}
    ),
    st.fixed_dictionaries({"type": st.just("thinking"), "thinking": maybe(st.text())}),
    st.fixed_dictionaries(
        {
            "type": st.just("toolCall"),
            "id": maybe(st.text(max_size=10)),
            "name": maybe(st.text(max_size=10)),
            "arguments": maybe(st.dictionaries(st.text(max_size=5), json_values, max_size=3)),
        }
    ),
    st.fixed_dictionaries({"type": maybe(st.sampled_from(["text", "video", ""]))}),
    json_values,
)
contents = st.one_of(st.text(max_size=30), st.lists(blocks, max_size=4), json_values)
ROLES = [
    "user",
    "assistant",
    "toolResult",
    "bashExecution",
    "custom",
    "branchSummary",
    "compactionSummary",
    "hookMessage",
]
messages = st.fixed_dictionaries(
    {"role": st.one_of(st.sampled_from(ROLES), st.sampled_from(ROLES), json_values)},
    optional={
        "content": contents,
        "timestamp": timestamps,
        "usage": maybe(usages),
        "stopReason": maybe(st.sampled_from(["stop", "length", "toolUse", "error", "aborted"])),
        "errorMessage": maybe(st.text(max_size=10)),
        "api": maybe(st.text(max_size=5)),
        "provider": maybe(st.text(max_size=5)),
        "model": maybe(st.text(max_size=5)),
        "toolCallId": maybe(st.text(max_size=5)),
        "toolName": maybe(st.text(max_size=5)),
        "isError": maybe(st.booleans()),
        "details": json_values,
        "command": maybe(st.text(max_size=10)),
        "output": maybe(st.text(max_size=10)),
        "exitCode": maybe(st.integers()),
        "customType": maybe(st.text(max_size=10)),
        "display": maybe(st.booleans()),
        "summary": maybe(st.text(max_size=10)),
        "fromId": entry_ids,
        "tokensBefore": maybe(st.integers()),
        "responseId": st.text(max_size=5),  # a newer pi's field: kept
    },
)
ENTRY_TYPES = [
    "message",
    "thinking_level_change",
    "model_change",
    "active_tools_change",
    "compaction",
    "branch_summary",
    "custom",
    "custom_message",
    "label",
    "session_info",
    "leaf",
    "someday_new_type",
]
entries = st.fixed_dictionaries(
    {"type": st.one_of(st.sampled_from(ENTRY_TYPES), json_values)},
    optional={
        "id": entry_ids,
        "parentId": st.one_of(st.none(), entry_ids),
        "timestamp": timestamps,
        "message": st.one_of(messages, json_values),
        "thinkingLevel": maybe(st.sampled_from(["off", "low", "high", "bogus"])),
        "provider": maybe(st.text(max_size=5)),
        "modelId": maybe(st.text(max_size=5)),
        "activeToolNames": maybe(st.lists(st.text(max_size=5), max_size=3)),
        "summary": maybe(st.text(max_size=10)),
        "firstKeptEntryId": st.one_of(st.none(), entry_ids),
        "tokensBefore": maybe(st.integers()),
        "retainedTail": maybe(st.lists(messages, max_size=2)),
        "fromId": entry_ids,
        "customType": maybe(st.text(max_size=5)),
        "data": json_values,
        "content": contents,
        "display": maybe(st.booleans()),
        "targetId": st.one_of(st.none(), entry_ids),
        "label": maybe(st.one_of(st.none(), st.text(max_size=5))),
        "name": maybe(st.one_of(st.none(), st.text(max_size=5))),
        "usage": maybe(usages),
    },
)

# Messages that are well-formed in every field, with numbers and text of any size.
big_ints = st.integers(min_value=0, max_value=2**70)
any_text = st.text(max_size=50)
valid_usage = st.builds(
    lambda i, o, r, w, t, c: {
        "input": i,
        "output": o,
        "cacheRead": r,
        "cacheWrite": w,
        "totalTokens": t,
        "cost": {"total": c},
    },
    big_ints,
    big_ints,
    big_ints,
    big_ints,
    big_ints,
    st.floats(min_value=0, max_value=1e300),
)
text_block = st.fixed_dictionaries({"type": st.just("text"), "text": any_text})
valid_messages = st.one_of(
    st.fixed_dictionaries(
        {"role": st.just("user"), "content": st.one_of(any_text, st.lists(text_block, max_size=3))},
        optional={"timestamp": big_ints},
    ),
    st.fixed_dictionaries(
        {
            "role": st.just("assistant"),
            "content": st.lists(
                st.one_of(
                    text_block,
                    st.fixed_dictionaries({"type": st.just("thinking"), "thinking": any_text}),
                    st.fixed_dictionaries(
                        {
                            "type": st.just("toolCall"),
                            "id": any_text,
                            "name": any_text,
                            "arguments": st.dictionaries(any_text, json_values, max_size=3),
                        }
                    ),
                ),
                max_size=3,
            ),
            "usage": valid_usage,
            "stopReason": st.sampled_from(["stop", "length", "toolUse", "error", "aborted"]),
        },
        optional={"timestamp": big_ints, "errorMessage": any_text},
    ),
    st.fixed_dictionaries(
        {
            "role": st.just("toolResult"),
            "toolCallId": any_text,
            "toolName": any_text,
            "content": st.lists(text_block, max_size=2),
            "isError": st.booleans(),
        },
        optional={"details": json_values, "usage": valid_usage},
    ),
)


# --- message and entry parsing ----------------------------------------------------------------


@FAST
@given(st.one_of(messages, json_values))
def test_message_parsing_answers_or_says_why(data: Any) -> None:
    try:
        message = parse_message(data)
    except MessageParseError as error:
        assert str(error)
        return
    assert isinstance(message, BaseMessage)
    # What parsed round-trips through its JSON form unchanged.
    again = parse_message(json.loads(json.dumps(message.to_json_dict())))
    assert again == message


@FAST
@given(st.one_of(entries, json_values))
def test_entry_parsing_answers_or_says_why(data: Any) -> None:
    try:
        entry = parse_entry(data)
    except SessionError as error:
        assert error.code == "invalid_entry" and error.message
        return
    assert entry_from_json(entry_to_json(entry)) == entry


@FAST
@given(st.text(max_size=200))
def test_entry_text_that_is_not_json_is_an_error(text: str) -> None:
    try:
        entry_from_json(text)
    except SessionError:
        pass


@pytest.mark.parametrize("kind", ["sqlite", "jsonl", "memory"])
def test_every_well_formed_message_is_stored_or_refused_clearly(tmp_path: Path, kind: str) -> None:
    """Whatever parses can be appended (and reads back the same after reopening), or is
    refused with a SessionError; a refusal leaves the session as it was."""
    repo = open_repo(kind, tmp_path)
    session = repo.create()

    @settings(FAST, max_examples=size(100, 1000))
    @given(valid_messages)
    def check(data: dict[str, Any]) -> None:
        message = parse_message(data)
        before = repo.export_jsonl(session.id)
        try:
            entry_id = session.append_message(message)
        except SessionError as error:
            assert error.message
            assert repo.export_jsonl(session.id) == before
            return
        stored = session.get_entry(entry_id)
        assert isinstance(stored, MessageEntry) and stored.message == message

    check()
    reopened = open_repo(kind, tmp_path) if kind != "memory" else repo
    entries = reopened.open(session.id).get_entries()
    assert entries == session.get_entries()
    check_tree(entries, reopened.open(session.id).leaf_id, kind)


# --- pi import --------------------------------------------------------------------------------

FIELDS = [
    "type",
    "id",
    "parentId",
    "version",
    "timestamp",
    "message",
    "firstKeptEntryIndex",
    "firstKeptEntryId",
    "targetId",
    "fromId",
    "cwd",
]


@st.composite
def mutated_pi_files(draw: st.DrawFn) -> str:
    """A sample pi file (v1, v2 or v3) with one to three things done to it."""
    lines = SAMPLES[draw(st.sampled_from(sorted(SAMPLES)))].splitlines()
    for _ in range(draw(st.integers(1, 3))):
        if not lines:
            break
        i = draw(st.integers(0, len(lines) - 1))
        j = draw(st.integers(0, len(lines) - 1))
        kind = draw(
            st.sampled_from(
                ["drop", "duplicate", "swap", "truncate", "replace", "field", "garbage", "flip"]
            )
        )
        if kind == "drop":
            del lines[i]
        elif kind == "duplicate":
            lines.insert(j, lines[i])
        elif kind == "swap":
            lines[i], lines[j] = lines[j], lines[i]
        elif kind == "truncate":
            text = "\n".join(lines)
            lines = text[: draw(st.integers(0, len(text)))].split("\n")
        elif kind == "replace":
            lines[i] = json.dumps(draw(json_values))
        elif kind == "field":
            try:
                row = json.loads(lines[i])
            except ValueError:
                continue
            if isinstance(row, dict):
                field = draw(st.sampled_from(FIELDS))
                if draw(st.booleans()):
                    row.pop(field, None)
                else:
                    row[field] = draw(st.one_of(entry_ids, json_values))
                lines[i] = json.dumps(row)
        elif kind == "garbage":
            lines.insert(j, draw(st.text(max_size=30)))
        else:
            line = lines[i]
            if line:
                k = draw(st.integers(0, len(line) - 1))
                lines[i] = line[:k] + draw(st.characters()) + line[k + 1 :]
    return "\n".join(lines) + draw(st.sampled_from(["\n", ""]))


def open_repo(kind: str, tmp: Path) -> BaseSessionRepo:
    if kind == "sqlite":
        return SqliteSessionRepo(tmp / "import.db")
    if kind == "jsonl":
        return JsonlSessionRepo(tmp / "jsonl")
    return InMemorySessionRepo()


@pytest.mark.parametrize("kind", ["sqlite", "jsonl", "memory"])
def test_pi_import_is_all_or_nothing(tmp_path: Path, kind: str) -> None:
    repo = open_repo(kind, tmp_path)
    keep = repo.create(name="already here")
    keep.append_message(parse_message({"role": "user", "content": "stay"}))
    kept = repo.export_jsonl(keep.id)

    @settings(FAST, max_examples=size(100, 1000))
    @given(st.one_of(mutated_pi_files(), st.text(max_size=300)))
    @example("a\x00b")  # a one-line string is read as a path: a NUL byte in it
    @example("")
    @example(SAMPLES["v3"])
    # A typed number too large for a float: inf, written as null, which a file cannot hold.
    @example(SAMPLES["v2"].replace('"total":0.014025', '"total":0.008E04999999999999'))
    def check(text: str) -> None:
        before = sorted(s.id for s in repo.list(limit=500).items)
        try:
            session = repo.import_jsonl(text)
        except SessionError as error:
            # invalid_entry: parsed, but refused by the store (a count too large for SQLite)
            assert error.code in ("invalid_import", "invalid_entry", "conflict"), error
            assert sorted(s.id for s in repo.list(limit=500).items) == before
        else:
            # What was imported holds together, and exports as a file we import again.
            entries = session.get_entries()
            check_tree(entries, session.leaf_id, f"import of {text[:80]!r}")
            exported = repo.export_jsonl(session.id)
            repo.delete(session.id)
            again = repo.import_jsonl(exported)
            assert repo.export_jsonl(again.id) == exported
            repo.delete(again.id)
        assert repo.export_jsonl(keep.id) == kept

    check()
    repo.close()


# --- every MCP tool's arguments ---------------------------------------------------------------


@contextmanager
def portal_client(
    server: Any,
) -> Iterator[tuple[anyio.from_thread.BlockingPortal, Client]]:
    """An in-process MCP client driven from this (synchronous) test through a portal."""
    with anyio.from_thread.start_blocking_portal() as portal:
        with portal.wrap_async_context_manager(Client(server)) as client:
            yield portal, client


def may_leave_out(schema: dict[str, Any]) -> bool:
    """Whether a property looks optional in a strict schema, where every property is listed as
    required: an optional one is nullable (null meaning its default) or states its default in
    its description. (Leaving out one that is not must be a clear error, which is checked
    too.)"""
    nullable = any(option.get("type") == "null" for option in schema.get("anyOf", []))
    return nullable or "Default:" in schema.get("description", "")


def schema_values(
    schema: dict[str, Any],
    hint: st.SearchStrategy[Any] | None,
    hints: dict[str, Any] | None = None,
) -> Any:
    """Values for one property that its schema allows (or its hint gives). ``hints`` are for
    the properties of objects inside it, by name."""
    if hint is not None:
        return hint
    hints = hints or {}
    if "const" in schema:
        return st.just(schema["const"])
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    if "anyOf" in schema:
        return st.one_of([schema_values(s, None, hints) for s in schema["anyOf"]])
    kind = schema.get("type")
    if kind == "string":
        return st.text(max_size=40)
    if kind == "integer":
        return st.integers(schema.get("minimum", -(2**40)), schema.get("maximum", 2**40))
    if kind == "number":
        return st.floats(schema.get("minimum", -1e9), min(schema.get("maximum", 1e9), 0.5))
    if kind == "boolean":
        return st.booleans()
    if kind == "null":
        return st.none()
    if kind == "array":
        return st.lists(schema_values(schema.get("items", {}), None, hints), max_size=3)
    if kind == "object" and schema.get("properties"):
        # A closed object (strict form): its own properties, sometimes one left out.
        properties = schema["properties"]
        return st.fixed_dictionaries(
            {
                key: schema_values(prop, hints.get(key), hints)
                for key, prop in properties.items()
                if not may_leave_out(prop)
            },
            optional={
                key: schema_values(prop, hints.get(key), hints)
                for key, prop in properties.items()
                if may_leave_out(prop)
            },
        )
    if kind == "object":
        return st.dictionaries(st.text(max_size=8), json_values, max_size=4)
    return json_values


@st.composite
def tool_arguments(
    draw: st.DrawFn, schema: dict[str, Any], hints: dict[str, Any]
) -> dict[str, Any]:
    """Arguments for one tool by its (strict) input schema, with hints for ids and names; the
    optional ones sometimes left out, as the server allows. Half of them spoilt: one argument
    of the wrong kind, one missing, an unknown key, or a dict that is nothing like the
    schema."""
    properties: dict[str, Any] = schema.get("properties", {})
    required = set(schema.get("required", []))
    arguments = {
        key: draw(schema_values(prop, hints.get(key), hints))
        for key, prop in properties.items()
        if not may_leave_out(prop) or draw(st.booleans())
    }
    spoil = draw(st.sampled_from(["none"] * 5 + ["wrong", "wrong", "missing", "unknown", "junk"]))
    if spoil == "wrong" and properties:
        arguments[draw(st.sampled_from(sorted(properties)))] = draw(json_values)
    elif spoil == "missing" and required & set(arguments):
        del arguments[draw(st.sampled_from(sorted(required & set(arguments))))]
    elif spoil == "unknown":
        arguments[draw(st.text(min_size=1, max_size=8))] = draw(json_values)
    elif spoil == "junk":
        arguments = draw(st.dictionaries(st.text(max_size=8), json_values, max_size=5))
    return arguments


def fuzz_hints(
    session_ids: list[str], entry_ids: list[str], entry_schema: dict[str, Any]
) -> dict[str, Any]:
    # Entries in pi's v3 form, as session_append took them before its closed forms: now the
    # text of a {"type": "pi"} entry, and (given as they are) refused.
    pi_entries = st.one_of(
        entries.map(lambda e: {k: v for k, v in e.items() if k not in ("id", "parentId")}),
        st.fixed_dictionaries({"type": st.just("message"), "message": messages}),
        st.fixed_dictionaries(
            {"type": st.just("label"), "targetId": st.sampled_from(entry_ids), "label": st.text()}
        ),
    )
    json_text = st.one_of(json_values.map(json.dumps), st.text(max_size=20))
    # For the properties inside an entry, by name.
    inner = {
        "targetId": st.one_of(st.sampled_from(entry_ids), st.text(max_size=10)),
        "json": st.one_of(pi_entries.map(json.dumps), json_text),
        "data": st.one_of(st.none(), json_text),
        "details": st.one_of(st.none(), json_text),
    }
    entry_json = st.one_of(
        schema_values(entry_schema, None, inner),  # the closed forms the schema lists
        schema_values(entry_schema, None, inner),
        pi_entries,
    )
    ids = st.one_of(st.sampled_from(session_ids), st.text(max_size=40))
    return {
        "session_id": ids,
        "entry_id": st.one_of(
            st.none(), st.just("root"), st.sampled_from(entry_ids), st.text(max_size=10)
        ),
        "entry": entry_json,
        "metadata": st.one_of(
            st.just(""),
            st.dictionaries(st.text(max_size=8), json_values, max_size=3).map(json.dumps),
            json_text,
        ),
        "limit": st.one_of(st.none(), st.integers(0, 60), st.integers()),
        "jsonl": st.one_of(mutated_pi_files(), st.text(max_size=100)),
        "run_id": st.text(max_size=14),
        "model": st.one_of(
            st.none(),
            st.sampled_from(["scripted", "nope:x", "client", "openai:gpt-4o-mini", ""]),
            st.text(max_size=12),
        ),
        "agent": st.one_of(st.none(), st.sampled_from(["default", "helper", "loner", "ghost"])),
        "wait_seconds": st.floats(0, 0.2),
        "cursor": st.one_of(
            st.none(),
            st.integers(-2, 60).map(lambda n: f"before:{n}"),
            st.integers(-2, 60).map(lambda n: f"from:{n}"),
            st.text(max_size=30),
        ),
    }


async def call_tool(client: Client, name: str, arguments: dict[str, Any]) -> Any:
    with anyio.fail_after(30):
        return await client.call_tool(name, arguments)


async def all_runs(client: Client) -> list[dict[str, Any]]:
    """Every run of the server, page by page."""
    runs: list[dict[str, Any]] = []
    cursor = None
    while True:
        page = await client.call_tool("agent_runs", {"limit": 100, "cursor": cursor})
        assert not page.is_error, narrow(page.content[0], TextContent).text
        runs += page.structured_content["runs"]
        cursor = page.structured_content["nextCursor"]
        if cursor is None:
            return runs


async def settle(client: Client) -> None:
    """Wait until no run is going (a detached run may still be writing)."""
    with anyio.fail_after(30):
        while True:
            if all(run["status"] != "running" for run in await all_runs(client)):
                return
            await anyio.sleep(0.02)


def check_strict(name: str, schema: dict[str, Any]) -> None:
    """The input schema is in OpenAI's strict form, which the arguments are drawn from: every
    object closed with all its properties required, no defaults, no oneOf, no references."""
    for node in schema_nodes(schema):
        assert not {"default", "oneOf", "$ref", "$defs"} & set(node), (name, node)
        if node.get("type") == "object":
            assert node.get("additionalProperties") is False, (name, node)
            assert node.get("required", []) == list(node.get("properties", {})), (name, node)


def stored_data(db: Path) -> tuple[Any, ...]:
    """What the server has stored, in brief: every session with its leaf and last change, and
    how many entries there are (any write changes one of these). Read beside the server."""
    with closing(sqlite3.connect(db)) as conn:
        return conn.execute(
            "SELECT (SELECT group_concat(id || ':' || modified || ':' || coalesce(leaf, ''))"
            " FROM (SELECT * FROM sessions ORDER BY id)), count(*), max(n) FROM entries"
        ).fetchone()


def has_session(db: Path, session_id: str) -> bool:
    with closing(sqlite3.connect(db)) as conn:
        found = conn.execute("SELECT 1 FROM sessions WHERE id = ?", (session_id,)).fetchone()
        return found is not None


def test_every_tool_answers_bad_arguments_with_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Loopback only: a registry model name must not reach a real API.
    for key in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:9")
    server = make_server(tmp_path)
    with portal_client(server) as (portal, client):
        tools = {t.name: t.input_schema for t in portal.call(client.list_tools).tools}
        for name, schema in tools.items():
            check_strict(name, schema)
        created = portal.call(call_tool, client, "session_create", {"name": "anchor"})
        anchor = created.structured_content["id"]
        entry_ids = []
        for text in ("first", "second"):
            appended = portal.call(
                call_tool,
                client,
                "session_append",
                {
                    "session_id": anchor,
                    "entry": {"type": "message", "role": "user", "content": text},
                },
            )
            assert not appended.is_error, appended.content[0].text
            entry_ids.append(appended.structured_content["entryId"])
        exported = portal.call(
            call_tool, client, "session_export", {"session_id": anchor, "limit": 0}
        )
        assert not exported.structured_content["truncated"]
        saved = exported.structured_content["jsonl"]
        hints = fuzz_hints([anchor], entry_ids, tools["session_append"]["properties"]["entry"])
        db = tmp_path / "sessions.db"

        # Only the agent tools start runs (agent_cancel ends one, which writes as it ends):
        # settle, which lists every run, only after one of theirs (settling before every
        # example was half this test's time, all of it after the agent tools were done).
        run_may_go = True

        def check(name: str, arguments: dict[str, Any]) -> None:
            nonlocal run_may_go
            if run_may_go:
                portal.call(settle, client)
            run_may_go = name.startswith("agent_")
            if not has_session(db, anchor):  # deleted by an earlier example: bring it back
                portal.call(call_tool, client, "session_import", {"jsonl": saved})
            before = stored_data(db)
            try:
                result = portal.call(call_tool, client, name, arguments)
            except MCPError as error:  # a protocol-level error is still an answer, not a crash
                pytest.fail(f"{name}({arguments!r}) raised a protocol error: {error}")
            text = " ".join(getattr(block, "text", "") for block in result.content)
            run = result.structured_content if name == "agent_run" else None
            if result.is_error and run is not None and text.startswith("the run ended "):
                # A run that began and ended in error or aborted: a tool error that still
                # holds the run (which wrote to its session).
                assert run["status"] in ("error", "aborted"), (name, arguments, run)
                assert text.startswith(f"the run ended {run['status']}: "), text
            elif result.is_error:
                # A clear error: one line that names the tool and says what was wrong. Not the
                # SDK's bare "Error executing tool X", which is what an unexpected exception
                # (a crash inside the tool) turns into, nor that with its prefix ("X: Error
                # executing tool Y" from a crash further in).
                assert text.strip() and text.strip() != f"Error executing tool {name}", (
                    f"{name}({arguments!r}) crashed: {text!r}"
                )
                assert "Error executing tool" not in text, f"{name}({arguments!r}): {text!r}"
                message = text.strip().removeprefix(f"{name}: ")
                assert message != text.strip() and message.strip(), (
                    f"{name}({arguments!r}): the error does not start '{name}: ': {text!r}"
                )
                # One line, but for what the call gave, echoed (a session id with a newline).
                for value in arguments.values():
                    if isinstance(value, str) and value:
                        message = message.replace(value, "…")
                assert "\n" not in message, f"{name}({arguments!r}): not one line: {text!r}"
                if run_may_go:
                    portal.call(settle, client)
                assert stored_data(db) == before, (
                    f"{name}({arguments!r}) failed ({text}) but changed stored data"
                )
            else:
                assert result.structured_content is not None, (name, arguments)

        def fuzz(name: str, schema: dict[str, Any]) -> None:
            # More examples for tools with more arguments to combine.
            examples = 10 + 10 * len(schema.get("properties", {}))

            @settings(FAST, max_examples=size(examples, 10 * examples))
            @given(tool_arguments(schema, hints))
            def calls(arguments: dict[str, Any]) -> None:
                check(name, arguments)

            calls()

        # A failure is raised after the client has closed, so that it reads plainly.
        failure = None
        try:
            for name, schema in sorted(tools.items()):
                fuzz(name, schema)
        except Exception as error:
            failure = error
    if failure is not None:
        raise failure


def test_resources_with_bad_uris_are_protocol_errors(tmp_path: Path) -> None:
    server = make_server(tmp_path)
    uri_text = st.one_of(
        st.text(max_size=40).map(lambda s: "session://" + s),
        st.sampled_from(["session://", "session:///tree", "agent://", "agent://ghost"]),
        st.text(max_size=40).map(lambda s: "agent://" + s),
    )
    with portal_client(server) as (portal, client):

        async def read(uri: str) -> None:
            with anyio.fail_after(10):
                try:
                    await client.read_resource(uri)
                except MCPError as error:
                    assert error.error.message

        @settings(FAST, max_examples=size(60, 500))
        @given(uri_text)
        def check(uri: str) -> None:
            portal.call(read, uri)

        check()
        # The server still answers after all that.
        assert portal.call(client.list_tools).tools
