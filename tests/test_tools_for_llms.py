"""The tools as the model in an IDE meets them: schemas that OpenAI's strict mode takes as they
are, one casing (camelCase) in every result and resource, answers bounded by default, a tree
that works at any depth, and errors a model can act on."""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from agent_support import pi_v3
from agents.strict_schema import ensure_strict_json_schema
from mcp import Client
from mcp.server import MCPServer
from mcp.types import TextContent
from mcp_support import call, call_error, make_server
from narrow import narrow
from pydantic import BaseModel
from pydantic_ai.profiles.openai import OpenAIJsonSchemaTransformer
from reliability_support import size

from mcp_agent.server import paging, session_reads
from mcp_agent.server.schemas import (
    AgentInfo,
    ContextResult,
    ExportResult,
    ListedSession,
    RunInfo,
    SearchHit,
    SessionInfo,
    SessionView,
)
from mcp_agent.server.strict import lean_output_schema, schema_nodes
from mcp_agent.sessions import SqliteSessionRepo

pytestmark = pytest.mark.anyio

# Keys whose values are the user's own data (or pi's message form, kept as pi writes it).
USER_DATA = {"metadata", "data", "details", "arguments", "messagesByRole"}
CAMEL = re.compile(r"[a-z][a-zA-Z0-9]*")
ANSWER_LIMIT = 64 * 1024
# The huge session: reduced in CI (reading one costs seconds per answer); MCP_AGENT_FULL=1 runs
# the 100,000 entries of the issue.
HUGE = size(10_000, 100_000)


@pytest.fixture
def server(tmp_path: Path) -> MCPServer:
    return make_server(tmp_path)


async def tools_of(server: MCPServer) -> list[Any]:
    async with Client(server) as client:
        return list((await client.list_tools()).tools)


# --- schemas ----------------------------------------------------------------------------------


async def test_every_tool_converts_to_openai_strict_mode_unchanged(server: MCPServer) -> None:
    tools = await tools_of(server)
    assert len(tools) == 20
    for tool in tools:
        schema = tool.input_schema
        # As openai-agents converts an MCP tool's schema (it falls back to non-strict on error).
        converted = ensure_strict_json_schema(copy.deepcopy(schema), _reject_open_objects=True)
        assert converted == schema, tool.name
        # pydantic-ai sends a tool as strict only if its transformer finds nothing to change.
        auto = OpenAIJsonSchemaTransformer(copy.deepcopy(schema), strict=None)
        auto.walk()
        assert auto.is_strict_compatible, tool.name
        OpenAIJsonSchemaTransformer(copy.deepcopy(schema), strict=True).walk()


async def test_a_second_server_reuses_the_first_ones_tool_schemas_yet_keeps_tools_of_its_own(
    tmp_path: Path,
) -> None:
    """What the SDK works out from a tool function (its argument model and schemas, 77% of
    building a server) is worked out once for each place a tool is defined (server.made_tools);
    each server still has its own functions, over its own store, and schemas of its own that
    make_tools_strict rewrote for it."""
    first, second = make_server(tmp_path / "first"), make_server(tmp_path / "second")
    firsts = {tool.name: tool for tool in first._tool_manager.list_tools()}
    seconds = {tool.name: tool for tool in second._tool_manager.list_tools()}
    assert firsts.keys() == seconds.keys() and len(firsts) == 20
    for name, mine in firsts.items():
        theirs = seconds[name]
        assert mine.fn_metadata.arg_model is theirs.fn_metadata.arg_model, name
        assert mine.fn is not theirs.fn and mine.fn_metadata is not theirs.fn_metadata, name
        assert mine.parameters is not theirs.parameters, name
        assert mine.parameters == theirs.parameters, name
        assert mine.output_schema == theirs.output_schema, name
    async with Client(second) as client:
        await call(client, "session_create", name="the second's")
        assert len((await call(client, "session_list"))["sessions"]) == 1
    async with Client(first) as client:
        assert (await call(client, "session_list"))["sessions"] == []


async def test_schemas_carry_no_titles_and_say_nullable_in_one_type(server: MCPServer) -> None:
    def keywords(node: Any) -> Iterator[tuple[str, Any]]:
        # Schema keywords only: a property named "title" is a name, not a keyword.
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "properties":
                    for inner in value.values():
                        yield from keywords(inner)
                else:
                    yield key, value
                    yield from keywords(value)
        elif isinstance(node, list):
            for inner in node:
                yield from keywords(inner)

    outputs = 0
    for tool in await tools_of(server):
        for schema in (tool.input_schema, tool.output_schema):
            assert not [v for k, v in keywords(schema) if k == "title" and isinstance(v, str)]
        if tool.output_schema is None:
            continue
        outputs += 1
        for key, value in keywords(tool.output_schema):
            if key == "anyOf":  # what is left is not a simple type or null
                simple = [v for v in value if set(v) <= {"type", "items", "description"}]
                assert not (len(value) == 2 and {"type": "null"} in value and len(simple) == 2)
    assert outputs >= 15
    shape = next(t for t in await tools_of(server) if t.name == "session_context").output_schema
    assert shape is not None and shape["properties"]["nextCursor"]["type"] == ["string", "null"]


async def test_output_schemas_hold_no_references_and_say_a_nullable_object_in_one_type(
    server: MCPServer,
) -> None:
    """A client checks each answer against its tool's output schema: a reference looked up, or
    an ``anyOf`` whose first branch fails for every null (an error made and thrown away), cost
    it each time it meets one, item after item. Inlined and folded, a schema says the same."""
    import jsonschema

    for tool in await tools_of(server):
        text = json.dumps(tool.output_schema)
        assert "$ref" not in text and "$defs" not in text, tool.name
        assert '"anyOf"' not in text, tool.name
    # A session field by field, as an output schema nesting one would say it (the tools say
    # theirs in words now, at less cost to a client: see the tests below).
    create = lean_output_schema(SessionInfo.model_json_schema(by_alias=True))
    assert "$ref" not in json.dumps(create) and '"anyOf"' not in json.dumps(create)
    started_by = create["properties"]["startedBy"]
    assert started_by["type"] == ["object", "null"]
    assert started_by["required"] == ["sessionId"] and "sub-agent" in started_by["description"]
    check = jsonschema.Draft202012Validator(create)
    made = {"id": "s", "startedBy": None}
    assert check.is_valid(made)
    assert check.is_valid({**made, "startedBy": {"sessionId": "p", "runId": None}})
    assert not check.is_valid({**made, "startedBy": {"runId": "r"}})  # no sessionId
    assert not check.is_valid({**made, "startedBy": "p"})


async def test_listed_sessions_and_hits_are_said_in_words_and_each_is_of_its_model(
    server: MCPServer,
) -> None:
    """session_list's sessions and session_search's hits are checked by a client as one array,
    not field by field (2 to 3 ms for a page of 20 sessions, with the Python SDK's check): the
    words name every field of the item's model, with its type, and the items answered are
    exactly of that model."""
    schemas = {tool.name: tool.output_schema for tool in await tools_of(server)}
    for tool, key, model in (
        ("session_list", "sessions", ListedSession),
        ("session_list", "sessions", SearchHit),  # a listed session's hits
        ("session_search", "hits", SearchHit),
    ):
        shape = schemas[tool]["properties"][key]
        assert shape["type"] == "array" and "items" not in shape, tool
        for name in model.model_json_schema(by_alias=True)["properties"]:
            assert f"{name}: " in shape["description"], (tool, name)
    said = schemas["session_list"]["properties"]["sessions"]["description"]
    for typed in (
        "entryCount: integer,",
        "firstUserMessage: string | null (",
        "startedBy: {sessionId: string, runId: string | null} | null (",
        "hits: [{entryId: string (",
        "onBranch: boolean (",
    ):
        assert typed in said, typed
    async with Client(server) as client:
        sid = (await call(client, "session_create", name="asked"))["id"]
        entry = {"type": "message", "role": "user", "content": "a question here"}
        await call(client, "session_append", session_id=sid, entry=entry)
        answers: list[tuple[list[dict[str, Any]], type[BaseModel]]] = [
            ((await call(client, "session_list", query="question"))["sessions"], ListedSession),
            ((await call(client, "session_list"))["sessions"], ListedSession),
            (
                (await call(client, "session_search", session_id=sid, query="quest"))["hits"],
                SearchHit,
            ),
        ]
    for items, of in answers:
        assert len(items) == 1
        for item in items:
            assert of.model_validate(item).model_dump(mode="json", exclude_unset=True) == item
    assert answers[0][0][0]["hits"][0]["snippet"] == "a «question» here"


async def test_a_session_nested_in_an_answer_is_said_in_words_and_is_of_its_model(
    server: MCPServer,
) -> None:
    """Each subschema of an output schema costs a client a check against the metaschema at its
    first call of the tool (about 0.4 ms each with the Python SDK's jsonschema); under load the
    clients' first calls are the slowest of all. session_import's session is one object said
    in words, naming every field of SessionInfo with its type (session_get's, in its answer's
    words), and the session answered is exactly of that model."""
    schemas = {tool.name: tool.output_schema for tool in await tools_of(server)}
    shape = schemas["session_import"]["properties"]["session"]
    assert shape["type"] == "object" and "properties" not in shape
    assert "session" in schemas["session_import"]["required"]
    # session_get's answer is said in words as a whole, its session with it.
    assert "session" not in schemas["session_get"]["properties"]
    for said in (shape["description"], schemas["session_get"]["description"]):
        for name in SessionInfo.model_json_schema(by_alias=True)["properties"]:
            assert f"{name}: " in said, name
        assert "startedBy: {sessionId: string, runId: string | null} | null (" in said
    assert sum(1 for _ in schema_nodes(schemas["session_import"])) <= 12
    async with Client(server) as client:
        sid = (await call(client, "session_create", name="said"))["id"]
        got = (await call(client, "session_get", session_id=sid))["session"]
        imported = (await call(client, "session_import", jsonl=pi_v3(2)))["session"]
    for session in (got, imported):
        assert SessionInfo.model_validate(session).model_dump(mode="json") == session


async def test_a_session_or_run_answered_whole_is_said_in_words_and_is_of_its_model(
    server: MCPServer,
) -> None:
    """session_create's and session_fork's answer is a session, the agent tools' a run,
    session_context's a context (the call a client resuming a session waits on): their
    output schemas say every field in words (a subschema each cost every client a check
    against the metaschema at its first call of the tool: 17 for a session, 21 for a run),
    and give a schema of their own only to the ids a program passes on, a run's status and a
    context's messages and paging; the
    lists of runs and agents are said in words as session_list's sessions are. The answers are
    exactly of their models, and valid against the schemas."""
    import jsonschema

    schemas = {tool.name: tool.output_schema for tool in await tools_of(server)}
    whole: list[tuple[tuple[str, ...], type[BaseModel], set[str]]] = [
        (("session_create", "session_fork"), SessionInfo, {"id"}),
        (("agent_run", "agent_status", "agent_cancel"), RunInfo, {"runId", "sessionId", "status"}),
        (("session_context",), ContextResult, {"sessionId", "messages", "truncated", "nextCursor"}),
        (("session_get",), SessionView, {"entries", "nodes", "outline", "truncated", "nextCursor"}),
        (("session_export",), ExportResult, {"sessionId", "jsonl", "truncated", "nextCursor"}),
    ]
    for tools, model, kept in whole:
        for tool in tools:
            shape = schemas[tool]
            assert shape["type"] == "object" and set(shape["properties"]) == kept, tool
            required = set(model.model_json_schema(by_alias=True)["required"])
            assert set(shape["required"]) == kept & required, tool
            for name in model.model_json_schema(by_alias=True)["properties"]:
                assert f"{name}: " in shape["description"], (tool, name)
            assert sum(1 for _ in schema_nodes(shape)) <= 2 + len(kept), tool
    said = schemas["session_create"]["description"]
    assert "startedBy: {sessionId: string, runId: string | null} | null (" in said
    said = schemas["session_context"]["description"]
    assert "model: {string: string} | null, activeToolNames: [string] | null," in said
    # A kept field is said in the words by its type, its description in its own schema once.
    assert "status: string, answer: string | null (" in schemas["agent_status"]["description"]
    status_shape = schemas["agent_status"]["properties"]["status"]
    assert status_shape["description"] == "running, completed, error or aborted"
    said = schemas["session_get"]["description"]
    assert 'view: "branch" | "tree" | "entries" | "outline", leafId: string | null,' in said
    assert "piece: object | null (with offset only: a piece of entry_id's JSON text" in said
    for tool, shape in schemas.items():
        for name, kept in (shape or {}).get("properties", {}).items():
            if shape.get("description") and kept.get("description"):
                assert kept["description"] not in shape["description"], (tool, name)
    listed: list[tuple[str, str, type[BaseModel]]] = [
        ("agent_runs", "runs", RunInfo),
        ("agent_list", "agents", AgentInfo),
    ]
    for tool, key, model in listed:
        shape = schemas[tool]["properties"][key]
        assert shape["type"] == "array" and "items" not in shape, tool
        for name in model.model_json_schema(by_alias=True)["properties"]:
            assert f"{name}: " in shape["description"], (tool, name)
    async with Client(server) as client:
        made = await call(client, "session_create", name="said")
        entry = {"type": "message", "role": "user", "content": "hello"}
        await call(client, "session_append", session_id=made["id"], entry=entry)
        forked = await call(client, "session_fork", session_id=made["id"])
        context = await call(client, "session_context", session_id=made["id"])
        whole_context = await call(client, "session_context", session_id=made["id"], limit=0)
        ran = await call(client, "agent_run", prompt="hi", session_id=made["id"], agent="default")
        status = await call(client, "agent_status", run_id=ran["runId"], wait_seconds=30)
        cancelled = await call(client, "agent_cancel", run_id=ran["runId"])
        runs = (await call(client, "agent_runs"))["runs"]
        agents = (await call(client, "agent_list"))["agents"]
        pages = [
            await call(client, "session_get", session_id=made["id"], view=view)
            for view in ("branch", "tree", "entries", "outline")
        ]
        first = pages[0]["entries"][0]["id"]
        pages.append(
            await call(client, "session_get", session_id=made["id"], entry_id=first, offset=0)
        )
        exported = [
            await call(client, "session_export", session_id=made["id"], limit=1),
            await call(client, "session_export", session_id=made["id"]),
        ]
    answers: list[tuple[str, dict[str, Any], type[BaseModel]]] = [
        ("session_create", made, SessionInfo),
        ("session_fork", forked, SessionInfo),
        ("session_context", context, ContextResult),
        ("session_context", whole_context, ContextResult),
        ("agent_run", ran, RunInfo),
        ("agent_status", status, RunInfo),
        ("agent_cancel", cancelled, RunInfo),
    ]
    answers += [("agent_runs", run, RunInfo) for run in runs]
    answers += [("session_get", page, SessionView) for page in pages]
    answers += [("session_export", page, ExportResult) for page in exported]
    assert pages[-1]["piece"]["text"] and exported[0]["truncated"] and not exported[1]["truncated"]
    answers += [("agent_list", agent, AgentInfo) for agent in agents]
    assert runs and agents and status["status"] == "completed"
    for tool, answer, model in answers:
        omitted: frozenset[str] = getattr(model, "omit_when_null", frozenset())
        left_out = set(omitted - set(answer))  # absent: null
        assert model.model_validate(answer).model_dump(mode="json", exclude=left_out) == answer
        if tool in ("agent_runs", "agent_list"):
            continue
        assert jsonschema.Draft202012Validator(schemas[tool]).is_valid(answer), tool


async def test_every_parameter_is_described_and_every_tool_says_what_it_returns(
    server: MCPServer,
) -> None:
    for tool in await tools_of(server):
        assert "Returns" in (tool.description or ""), tool.name
        pending = [(tool.name, tool.input_schema)]
        while pending:
            where, node = pending.pop()
            for name, prop in node.get("properties", {}).items():
                assert prop.get("description"), f"{where}.{name} has no description"
                pending.append((f"{where}.{name}", prop))
            pending.extend((where, variant) for variant in node.get("anyOf", []))


async def test_every_description_is_one_paragraph_without_the_sources_indentation(
    server: MCPServer,
) -> None:
    """A tool's description was its docstring as written, each line break followed by the
    eight spaces that indent it in the source: what every host shows in its tool list and
    sends a model with every request (some 500 characters of whitespace in all)."""
    async with Client(server) as client:
        prompts = (await client.list_prompts()).prompts
    tools = await tools_of(server)
    said = [(t.name, t.description or "") for t in tools] + [
        (p.name, p.description or "") for p in prompts
    ]
    for tool in tools:
        for node in schema_nodes(tool.input_schema):
            if isinstance(node.get("description"), str):
                said.append((tool.name, node["description"]))
    assert len(said) > 60
    for name, text in said:
        assert text == " ".join(text.split()), (name, text)


async def test_agent_runs_wait_says_that_a_call_given_up_on_aborts_the_run(
    server: MCPServer,
) -> None:
    """A host that times a call out (the TypeScript SDK's client does after 60 s, unless it
    resets its clock on progress) cancels it, and a waited run with it: wait's description
    said neither that nor that a long task is what wait=false is for."""
    tool = next(t for t in await tools_of(server) if t.name == "agent_run")
    said = tool.input_schema["properties"]["wait"]["description"]
    assert "aborts the run" in said and "60 s" in said and "long task" in said, said


async def test_every_number_argument_says_its_range_in_the_schema(server: MCPServer) -> None:
    """A model sees the schema, not the error it would get: session_get's, session_context's
    and session_export's limit said neither its most (1,000) nor its least."""
    for tool in await tools_of(server):
        for name, prop in tool.input_schema["properties"].items():
            for variant in prop.get("anyOf", [prop]):
                if variant.get("type") in ("integer", "number"):
                    assert "minimum" in variant and "maximum" in variant, (tool.name, name)
                    most = f"{variant['maximum']:,}".replace(",", "")
                    assert most in prop["description"].replace(",", ""), (tool.name, name)


async def test_every_optional_argument_says_what_leaving_it_out_means(
    server: MCPServer,
) -> None:
    """Strict mode makes every argument required, so a model sends null for one it means to
    leave out: the description must say what null does (session_create's name and cwd,
    agent_run's model and session_compact's instructions did not)."""
    for tool in await tools_of(server):
        for name, prop in tool.input_schema["properties"].items():
            if {"type": "null"} in prop.get("anyOf", []):
                said = prop["description"]
                assert "null" in said or "omitted" in said, (tool.name, name, said)


# --- one casing -------------------------------------------------------------------------------


def snake_keys(value: Any, path: str = "") -> Iterator[str]:
    if isinstance(value, dict):
        for key, inner in value.items():
            if not CAMEL.fullmatch(str(key)):
                yield f"{path}.{key}"
            if key not in USER_DATA:
                yield from snake_keys(inner, f"{path}.{key}")
    elif isinstance(value, list):
        for index, inner in enumerate(value):
            yield from snake_keys(inner, f"{path}[{index}]")


def text_json(result: Any) -> Any:
    return json.loads(result.content[0].text)


async def test_results_and_resources_are_camel_case_outside_user_data(
    server: MCPServer,
) -> None:
    async with Client(server) as client:
        seen: dict[str, Any] = {}

        async def tool(tool_name: str, /, **arguments: Any) -> dict[str, Any]:
            result = await client.call_tool(tool_name, arguments)
            assert not result.is_error, (tool_name, result.content)
            seen[tool_name] = result.structured_content
            seen[f"{tool_name} (text)"] = text_json(result)
            return result.structured_content or {}

        created = await tool("session_create", name="n", metadata='{"snake_key": 1}')
        sid = created["id"]
        await tool(
            "session_append",
            session_id=sid,
            entry={"type": "message", "role": "user", "content": "hi"},
        )
        custom = {"type": "custom", "customType": "note", "data": '{"my_key": 2}'}
        await tool("session_append", session_id=sid, entry=custom)
        ran = await tool("agent_run", prompt="hello", session_id=sid)
        assert ran["status"] == "completed"
        for view in ("branch", "tree", "entries"):
            seen[f"session_get {view}"] = await tool("session_get", session_id=sid, view=view)
        for name in ("session_context", "session_stats", "session_export"):
            await tool(name, session_id=sid)
        await tool("session_list")
        await tool("agent_runs")
        await tool("agent_list")
        await tool("agent_status", run_id=ran["runId"])
        forked = await tool("session_fork", session_id=sid)
        await tool("session_move_to", session_id=forked["id"], entry_id="root")
        await tool(
            "session_import", jsonl=(await tool("session_export", session_id=sid, limit=0))["jsonl"]
        )
        for uri in (
            f"session://{sid}",
            f"session://{sid}/tree",
            f"session://{sid}/context",
            "agent://helper",
        ):
            read = await client.read_resource(uri)
            seen[uri] = json.loads(read.contents[0].text)  # type: ignore[union-attr]
        problems = [f"{name}: {key}" for name, value in seen.items() for key in snake_keys(value)]
        assert problems == [], problems
        # Times are ISO 8601 strings outside pi's message form.
        run = seen["agent_status"]
        for moment in (run["started"], run["finished"], created["created"]):
            assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z", moment), moment
        # The user's own data keeps its keys.
        header = seen[f"session://{sid}"]["header"]
        assert header["metadata"] == {"snake_key": 1}


# --- bounded answers and the tree at any depth ------------------------------------------------


def pi_file(path: Path, entries: int, pad: int = 120) -> Path:
    """A pi v3 file of ``entries`` messages in one chain."""
    path.write_text(pi_v3(entries, pad=pad))
    return path


@pytest.fixture(scope="module")
def big_session(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A database holding one HUGE-entry session (imported before any server starts)."""
    root = tmp_path_factory.mktemp("big")
    with SqliteSessionRepo(root / "sessions.db") as repo:
        session = repo.import_jsonl(pi_file(root / "big.jsonl", HUGE))
        return root, session.id


async def test_every_default_answer_on_a_huge_session_fits_the_budget(
    big_session: tuple[Path, str],
) -> None:
    root, sid = big_session
    async with Client(make_server(root)) as client:
        calls: list[tuple[str, dict[str, Any]]] = [
            ("session_get", {"session_id": sid}),
            ("session_get", {"session_id": sid, "view": "tree"}),
            ("session_get", {"session_id": sid, "view": "entries"}),
            ("session_context", {"session_id": sid}),
            ("session_export", {"session_id": sid}),
            ("session_stats", {"session_id": sid}),
            ("session_list", {}),
        ]
        for name, arguments in calls:
            result = await client.call_tool(name, arguments)
            assert not result.is_error, result.content
            text = result.content[0].text  # type: ignore[union-attr]
            structured = json.dumps(result.structured_content)
            assert len(text.encode()) < ANSWER_LIMIT, (name, arguments, len(text))
            assert len(structured.encode()) < ANSWER_LIMIT, (name, arguments)
            page = result.structured_content or {}
            if "total" in page:
                assert page["truncated"] is True and page["nextCursor"], name
                assert page["total"] in (HUGE, HUGE + 1)
        for suffix in ("", "/tree", "/context"):
            read = await client.read_resource(f"session://{sid}{suffix}")
            text = read.contents[0].text  # type: ignore[union-attr]
            assert len(text.encode()) < ANSWER_LIMIT, (suffix, len(text.encode()))

        # Following the cursor goes back through the branch, newest last on each page.
        first = await call(client, "session_get", session_id=sid, limit=10)
        second = await call(
            client, "session_get", session_id=sid, limit=10, cursor=first["nextCursor"]
        )
        assert [e["id"] for e in second["entries"]] == [
            f"{n:08x}" for n in range(HUGE - 20, HUGE - 10)
        ]
        assert second["entries"][-1]["id"] < first["entries"][0]["id"]
        # Everything, when asked.
        lines = await call(client, "session_export", session_id=sid, limit=0)
        assert lines["lines"] == HUGE + 1 and not lines["truncated"]


async def test_everything_asked_for_is_whole_in_structured_content_and_bounded_in_text(
    big_session: tuple[Path, str],
) -> None:
    root, sid = big_session
    async with Client(make_server(root)) as client:
        for name, arguments, items in [
            ("session_get", {"session_id": sid, "view": "entries", "limit": 0}, "entries"),
            ("session_get", {"session_id": sid, "view": "tree", "limit": 0}, "nodes"),
            ("session_export", {"session_id": sid, "limit": 0}, None),
        ]:
            result = await client.call_tool(name, arguments)
            assert not result.is_error, result.content
            whole = result.structured_content or {}
            text = result.content[0].text  # type: ignore[union-attr]
            assert len(text.encode()) < ANSWER_LIMIT, (name, len(text))
            shown = json.loads(text)
            note = shown.pop("textNote")
            assert "The structured content holds the whole answer" in note, note
            if items is None:  # the exported file is a field too long for a text
                assert whole["jsonl"].count("\n") == HUGE + 1
                assert "jsonl" not in shown and "the field jsonl" in note, note
                assert shown == {k: v for k, v in whole.items() if k != "jsonl"}
                continue
            assert len(whole[items]) in (HUGE, HUGE + 1)
            kept = shown.pop(items)
            assert 0 < len(kept) < len(whole[items])
            assert kept == whole[items][-len(kept) :]  # the newest, as the list ends
            assert f"the {len(whole[items]) - len(kept):,} oldest of the" in note, note
            assert shown == {k: v for k, v in whole.items() if k != items}
        # A default page is the same JSON in text and structured content.
        page = await client.call_tool("session_get", {"session_id": sid})
        assert json.loads(page.content[0].text) == page.structured_content  # type: ignore[union-attr]


async def test_an_entry_too_large_for_a_page_comes_as_a_stub_naming_its_resource(
    server: MCPServer,
) -> None:
    async with Client(server) as client:
        sid = (await call(client, "session_create"))["id"]
        big = {"type": "message", "role": "user", "content": "y" * 200_000}
        entry_id = (await call(client, "session_append", session_id=sid, entry=big))["entryId"]
        page = await call(client, "session_get", session_id=sid)
        stub = page["entries"][-1]
        assert stub["id"] == entry_id and stub["role"] == "user"
        assert f"session://{sid}/entries/{entry_id}" in stub["omitted"]
        whole = await client.read_resource(f"session://{sid}/entries/{entry_id}")
        assert "y" * 200_000 in whole.contents[0].text  # type: ignore[union-attr]
        # Asked for alone (what the resource past its bound points to, and all a client that
        # reads no resources has), it comes with its long texts cut, each saying so.
        alone = await call(client, "session_get", session_id=sid, entry_id=entry_id, limit=1)
        [cut] = alone["entries"]
        text = cut["message"]["content"]
        assert text.startswith("y" * 10_000) and text.endswith("… [cut: 200,000 characters in all]")
        assert "are cut here" in cut["omitted"] and stub["omitted"].split(": ")[1] in cut["omitted"]
        assert len(json.dumps(cut).encode()) <= 20 * 1024


async def test_a_2000_deep_branch_reads_as_a_tree(tmp_path: Path) -> None:
    with SqliteSessionRepo(tmp_path / "sessions.db") as repo:
        sid = repo.import_jsonl(pi_file(tmp_path / "deep.jsonl", 2000, pad=10)).id
    async with Client(make_server(tmp_path)) as client:
        tree = await call(client, "session_get", session_id=sid, view="tree", limit=0)
        nodes = tree["nodes"]
        assert len(nodes) == tree["total"] == 2000
        by_id = {node["id"]: node for node in nodes}
        # Walk from the leaf to the root by parentId: one chain, 2000 deep.
        depth, node = 1, by_id[tree["leafId"]]
        while node["parentId"] is not None:
            assert node["id"] in by_id[node["parentId"]]["children"]
            node, depth = by_id[node["parentId"]], depth + 1
        assert depth == 2000 and all(n["onBranch"] for n in nodes)
        assert nodes[0]["preview"].startswith("user: step 0")
        # The resource is the tree view's default page (the newest nodes, bounded in bytes),
        # and says where the rest are: the pages before it, from the cursor it names on.
        read = await client.read_resource(f"session://{sid}/tree")
        newest = json.loads(read.contents[0].text)  # type: ignore[union-attr]
        page = await call(client, "session_get", session_id=sid, view="tree")
        assert newest["nodes"] == page["nodes"] == nodes[-len(page["nodes"]) :]
        assert newest["total"] == 2000 and newest["truncated"]
        kept = len(newest["nodes"])
        cursor = f"before:{2000 - kept}"
        assert newest["more"] == (
            f"the {2000 - kept:,} older nodes: session_get with view 'tree' and cursor"
            f" {cursor!r}, then each answer's nextCursor"
        )
        older = await call(client, "session_get", session_id=sid, view="tree", cursor=cursor)
        assert older["nodes"] == nodes[2000 - kept - len(older["nodes"]) : 2000 - kept]


def nodes_made(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The count of tree nodes made by each call that makes them, from now on."""
    made: list[int] = []
    real = session_reads.stored_tree_nodes

    def counted(storage: Any, index: Any, rows: Any, *rest: Any) -> Any:
        made.append(len(rows))
        return real(storage, index, rows, *rest)

    monkeypatch.setattr(session_reads, "stored_tree_nodes", counted)
    return made


async def test_a_whole_tree_too_large_for_an_answer_is_refused_before_every_node_is_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """view tree with limit=0 made every node (each entry parsed for its preview) and then
    refused the answer as too large: 7 s on a 33,000-entry session, more the longer the
    session. Now it stops at the block that passes the bound."""
    with SqliteSessionRepo(tmp_path / "sessions.db") as repo:
        sid = repo.import_jsonl(pi_file(tmp_path / "deep.jsonl", 2000, pad=10)).id
    made = nodes_made(monkeypatch)
    monkeypatch.setattr(session_reads, "TREE_BLOCK", 100)
    monkeypatch.setattr(paging, "WHOLE_MAX", 100_000)  # about 400 of the 2,000 nodes
    async with Client(make_server(tmp_path)) as client:
        text = await call_error(client, "session_get", session_id=sid, view="tree", limit=0)
        assert text.startswith(
            "session_get: the tree of 2,000 nodes asked for whole (limit=0) is over 1"
        ), text
        assert "more than the 0 MiB one answer holds: ask for pages" in text, text
        assert 400 <= sum(made) <= 600, made
        made.clear()
        page = await call(client, "session_get", session_id=sid, view="tree", limit=150)
        assert len(page["nodes"]) == 150 and sum(made) == 150  # a page: what it shows


async def test_a_page_makes_about_what_it_shows_not_its_whole_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tree page with limit=1000 made 1,000 node previews (each entry parsed) to show the
    about 90 that fit one answer. Now it makes blocks from the newest until the page is full,
    and shows the same page, and the entries view the same."""
    with SqliteSessionRepo(tmp_path / "sessions.db") as repo:
        sid = repo.import_jsonl(pi_file(tmp_path / "deep.jsonl", 2000, pad=400)).id
    made = nodes_made(monkeypatch)
    async with Client(make_server(tmp_path)) as client:
        pages = {}
        for first_block in (100, 5000):  # block by block, and all at once
            monkeypatch.setattr(session_reads, "FIRST_BLOCK", first_block)
            made.clear()
            tree = await call(client, "session_get", session_id=sid, view="tree", limit=1000)
            entries = await call(client, "session_get", session_id=sid, view="entries", limit=1000)
            pages[first_block] = (tree, entries, sum(made))
        (tree, entries, spent), (whole_tree, whole_entries, _) = pages[100], pages[5000]
        assert tree == whole_tree and entries == whole_entries
        assert 20 < len(tree["nodes"]) < 300 and tree["truncated"], len(tree["nodes"])
        assert spent <= 300 + len(tree["nodes"]), spent  # at most one block past the page
        assert 20 < len(entries["entries"]) < 1000


# --- errors a model can act on ----------------------------------------------------------------

MACHINE_TALK = ("validation error", "pydantic", "http://", "https://", "Arguments", "--")
DEEP = '{"v": ' + "[" * 300 + "]" * 300 + "}"
ROBOT = {"type": "pi", "json": '{"type": "message", "message": {"role": "robot", "content": "x"}}'}


def custom(data: str) -> dict[str, Any]:
    return {"type": "custom", "custom_type": "note", "data": data}


@pytest.mark.parametrize(
    ("tool", "arguments", "says"),
    [
        (
            "session_move_to",
            {"session_id": "s", "entry_id": 5},
            "entry_id should be a valid string",
        ),
        ("session_get", {"session_id": "s", "view": "nope"}, "view should be 'branch'"),
        (
            "session_get",
            {"session_id": "s", "limit": -1},
            "limit should be greater than or equal to 0",
        ),
        ("session_get", {"session_id": "s", "cursor": "x"}, "cursor 'x' is not one"),
        ("session_get", {"session_id": "s", "colour": 1}, "unknown argument 'colour'"),
        ("session_list", {"limit": "many"}, "limit should be a valid integer"),
        # Not converted, as pydantic's lax mode would: the schema says integer, or boolean
        # (text that is the JSON of one is read: test_scalars_given_as_their_json_text_are_read).
        ("session_get", {"session_id": "s", "limit": "5.0"}, 'integer, not a string (got "5.0")'),
        ("session_get", {"session_id": "s", "limit": " 5"}, 'integer, not a string (got " 5")'),
        ("session_get", {"session_id": "s", "limit": 5.5}, "integer, not a number (got 5.5)"),
        ("session_move_to", {"session_id": "s", "entry_id": "e", "summarize": "yes"}, "boolean"),
        ("session_move_to", {"session_id": "s", "entry_id": "e", "summarize": 1}, "boolean"),
        ("session_get", {"session_id": 5, "limit": 1}, "session_id should be a valid string"),
        ("session_append", {"session_id": "s", "entry": {"type": "message"}}, "is required"),
        (
            "session_move_to",
            {"session_id": "s", "entry_id": "root", "summary": " "},
            "summary is empty",
        ),
        ("session_append", {"session_id": "s", "entry": {"type": "nope"}}, "'message'"),
        ("session_create", {"metadata": "[1]"}, "metadata must be a JSON object"),
        ("session_create", {"cwd": "/home/a\x00b"}, "cwd holds a NUL character"),
        ("session_create", {"metadata": '{"v": NaN}'}, "NaN is not a JSON value"),
        ("session_create", {"metadata": '{"v": 1e999}'}, "1e999 is too large"),
        ("session_create", {"metadata": DEEP}, "nested more than 200 levels deep"),
        ("session_append", {"session_id": "s", "entry": custom("[Infinity]")}, "Infinity is not"),
        ("session_append", {"session_id": "s", "entry": custom(DEEP)}, "nested more than 200"),
        ("session_append", {"session_id": "s", "entry": ROBOT}, "'robot' is not a role of pi's"),
        (
            "session_append",
            {
                "session_id": "s",
                "entry": {
                    "type": "custom_message",
                    "custom_type": "note",
                    "content": "x",
                    "display": "yes",
                },
            },
            "entry.display (for type 'custom_message') should be a valid boolean (got \"yes\")",
        ),
        (
            "session_append",
            {"session_id": "s", "entry": {"type": "pi", "json": '{"message": {}}'}},
            "entry.type is missing: it is one of: message,",
        ),
        ("session_append", {"session_id": "s", "entry": custom("[" * 2000)}, "nested more than"),
        ("session_import", {"jsonl": "not json"}, "the text of a pi session file"),
        ("agent_status", {}, "run_id is required"),
    ],
)
async def test_bad_arguments_get_one_line_naming_the_argument(
    server: MCPServer, tool: str, arguments: dict[str, Any], says: str
) -> None:
    async with Client(server) as client:
        sid = (await call(client, "session_create"))["id"]
        given = {k: sid if v == "s" else v for k, v in arguments.items()}
        text = await call_error(client, tool, **given)
        listed = (await call(client, "session_list"))["sessions"]
    assert says in text
    assert "\n" not in text and text.startswith(f"{tool}: ")
    assert not any(word in text for word in MACHINE_TALK), text
    assert [(s["id"], s["entryCount"]) for s in listed] == [(sid, 0)]  # nothing stored


@pytest.mark.parametrize(
    ("entry", "says"),
    [
        # An object where JSON text goes: said to be a string, and now what the text holds.
        (
            {"type": "custom", "customType": "note", "data": {"k": 1}},
            "entry.data (for type 'custom') should be a valid string; entry.data: the data as"
            " JSON text",
        ),
        (
            {"type": "pi", "json": {"type": "message"}},
            "entry.json (for type 'pi') should be a valid string; entry.json: the entry",
        ),
        # Content blocks where the text goes: the kind that takes them is named.
        (
            {"type": "message", "role": "user", "content": [{"type": "text", "text": "hi"}]},
            "; entry.content: the message's text (content blocks, such as images: type pi)",
        ),
        (
            {"type": "active_tools_change", "activeToolNames": "read"},
            "; entry.activeToolNames: the tools' names",
        ),
        # No kind at all: which field is missing, not pydantic's "discriminator".
        ({"role": "user", "content": "hi"}, "entry.type is required; entry: what to append"),
    ],
)
async def test_a_wrong_field_inside_an_entry_is_said_with_what_it_holds(
    server: MCPServer, entry: dict[str, Any], says: str
) -> None:
    """An argument error inside an entry named the field and the type wanted ("entry.data
    should be a valid string") but not what the field holds, which its schema says and a
    model needs to send it right the next time; a top-level argument's error said it."""
    async with Client(server) as client:
        sid = (await call(client, "session_create"))["id"]
        text = await call_error(client, "session_append", session_id=sid, entry=entry)
        listed = (await call(client, "session_list"))["sessions"]
    assert says in text
    assert not any(word in text for word in (*MACHINE_TALK, "discriminator", "tag")), text
    assert [(s["id"], s["entryCount"]) for s in listed] == [(sid, 0)]  # nothing stored


async def test_scalars_given_as_their_json_text_are_read(server: MCPServer) -> None:
    """The Inspector's command line sends every argument whose schema is no single type (each
    nullable one) as text: `--tool-arg limit=1` could not be given at all."""
    async with Client(server) as client:
        sid = (await call(client, "session_create"))["id"]
        for text in ('"one"', '"two"'):
            await call(client, "session_append", session_id=sid, entry=custom(text))
        page = await call(client, "session_get", session_id=sid, view="entries", limit="1")
        assert len(page["entries"]) == 1 and page["nextCursor"]
        first = page["entries"][0]["id"]
        moved = await call(
            client, "session_move_to", session_id=sid, entry_id=first, summarize="false"
        )
        assert moved["leafId"] == first
        # "null" typed for a nullable integer or boolean is null (the default), as the JSON
        # it is: it was refused as "not a string (got "null")".
        whole = await call(client, "session_get", session_id=sid, view="entries", limit="null")
        assert len(whole["entries"]) == 2 and whole["nextCursor"] is None
        run = await call(client, "agent_run", prompt="hi", session_id=sid, wait="null")
        assert run["status"] == "completed"  # waited, as without wait


async def test_text_that_reads_as_json_stays_the_text_it_was_sent_as(server: MCPServer) -> None:
    """A text argument holding a JSON object or array (a branch summary a model wrote as
    JSON, a name in brackets) is that text: the SDK read it as the object it spells, and the
    call was refused with "summary should be a valid string", though a string was sent."""
    async with Client(server) as client:
        name = '["draft", "v2"]'
        created = await call(client, "session_create", name=name)
        assert created["name"] == name
        sid = created["id"]
        first = (await call(client, "session_append", session_id=sid, entry=custom('"a"')))[
            "entryId"
        ]
        summary = '{"goal": "ship it", "done": ["tests"]}'
        await call(client, "session_move_to", session_id=sid, entry_id=first, summary=summary)
        entries = (await call(client, "session_get", session_id=sid, view="entries"))["entries"]
        assert entries[-1]["type"] == "branch_summary" and entries[-1]["summary"] == summary
        found = await call(client, "session_list", query='["draft"]')
        assert [listed["id"] for listed in found["sessions"]] == [sid]


async def test_every_answers_text_is_its_structured_content_as_compact_json(
    tmp_path: Path,
) -> None:
    """The text is what a host gives the model. The reading tools' text was compact JSON,
    but every other tool's was indented (two spaces a level, a line each): 15 to 60% more
    characters, a page of agent_runs a third larger, for the same answer."""
    async with Client(make_server(tmp_path, model_retries=0)) as client:
        answers = []

        async def answer(tool: str, **arguments: Any) -> dict[str, Any]:
            with anyio.fail_after(60):
                result = await client.call_tool(tool, arguments)
            answers.append((tool, result))
            return result.structured_content or {}

        sid = (await answer("session_create", name="ünïcode", metadata='{"k": [1, 2]}'))["id"]
        first = (await answer("session_append", session_id=sid, entry=custom('"a"')))["entryId"]
        await answer("session_move_to", session_id=sid, entry_id=first)
        await answer("session_fork", session_id=sid)
        await answer("session_stats", session_id=sid)
        run = await answer("agent_run", prompt="hello", session_id=sid)
        await answer("agent_status", run_id=run["runId"])
        await answer("agent_runs")
        await answer("agent_list")
        await answer("agent_run", prompt="overloaded please")  # a tool error with its run
    assert answers[-1][1].is_error
    for tool, result in answers:
        text = narrow(result.content[0], TextContent).text
        if result.is_error:
            line, _, text = text.partition("\n")
            assert line.startswith("the run ended error"), line
        assert text == json.dumps(
            result.structured_content, ensure_ascii=False, separators=(",", ":")
        ), tool


async def test_a_run_that_ends_in_error_is_a_tool_error_with_its_result(tmp_path: Path) -> None:
    async with Client(make_server(tmp_path, model_retries=0)) as client:
        with anyio.fail_after(60):
            result = await client.call_tool("agent_run", {"prompt": "overloaded please"})
        assert result.is_error
        run = result.structured_content or {}
        assert run["status"] == "error" and run["sessionId"] and run["error"]
        assert result.content[0].text.startswith("the run ended error")  # type: ignore[union-attr]
        ok = await call(client, "agent_run", prompt="hello")
        assert ok["status"] == "completed" and ok["answer"] == "echo: hello"


async def test_an_aborted_run_says_aborted_once(tmp_path: Path) -> None:
    """A run's error says an abort as "aborted: REASON"; the tool error's first line put its
    status before it: "the run ended aborted: aborted: cancelled with agent_cancel"."""
    ended: list[Any] = []
    async with Client(make_server(tmp_path)) as client:

        async def run() -> None:
            ended.append(await client.call_tool("agent_run", {"prompt": "slow, then stop"}))

        async with anyio.create_task_group() as group:
            group.start_soon(run)
            with anyio.fail_after(60):
                while not (running := (await call(client, "agent_runs"))["runs"]):
                    await anyio.sleep(0.01)
            await call(client, "agent_cancel", run_id=running[0]["runId"])
    first = ended[0].content[0].text.splitlines()[0]
    assert ended[0].is_error and (ended[0].structured_content or {})["status"] == "aborted"
    assert first == "the run ended aborted: cancelled with agent_cancel", first


async def test_the_last_page_of_runs_says_nothing_is_left(server: MCPServer) -> None:
    """agent_runs pages newest first, as session_list does: ``truncated`` says older runs are
    left for ``nextCursor``. Its last page said truncated with no cursor, and a client paging
    while truncated started again from the newest."""
    async with Client(server) as client:
        for n in range(3):
            await call(client, "agent_run", prompt=f"hello {n}")
        first = await call(client, "agent_runs", limit=2)
        assert first["truncated"] is True and first["nextCursor"]
        last = await call(client, "agent_runs", limit=2, cursor=first["nextCursor"])
        assert len(last["runs"]) == 1 and last["nextCursor"] is None
        assert last["truncated"] is False, last
        every = await call(client, "agent_runs", limit=3)
        assert every["truncated"] is False and every["nextCursor"] is None


async def test_a_page_of_runs_stops_at_about_40_kb_in_bytes(server: MCPServer) -> None:
    """A run keeps up to 16,000 characters of its answer: counted in characters, a page of
    runs answered in Japanese was 98 KB, past what a host takes of a tool's output."""
    async with Client(server) as client:
        for n in range(4):
            await call(client, "agent_run", prompt=f"{n} " + "漢" * 16_000)
        seen: list[str] = []
        cursor = None
        while True:
            result = await client.call_tool("agent_runs", {"cursor": cursor})
            assert len(result.content[0].text.encode()) < ANSWER_LIMIT  # type: ignore[union-attr]
            page = result.structured_content or {}
            seen += [run["runId"] for run in page["runs"]]
            cursor = page["nextCursor"]
            if cursor is None:
                break
        assert len(seen) == len(set(seen)) == 4


async def test_export_pages_say_truncated_only_while_the_file_goes_on(server: MCPServer) -> None:
    """session_export pages from the top; ``truncated`` is "the file goes on after this page",
    as its schema says. Every page after the first said true, the last one too, with no
    cursor."""
    async with Client(server) as client:
        sid = (await call(client, "session_create"))["id"]
        for n in range(4):
            await call(client, "session_append", session_id=sid, entry=custom(f"{n}"))
        pages = [await call(client, "session_export", session_id=sid, limit=2)]
        while pages[-1]["nextCursor"]:
            cursor = pages[-1]["nextCursor"]
            pages.append(
                await call(client, "session_export", session_id=sid, limit=2, cursor=cursor)
            )
        assert [page["truncated"] for page in pages] == [True, True, False], pages
        assert "".join(page["jsonl"] for page in pages).count("\n") == pages[0]["lines"] == 5


async def test_export_limit_says_it_counts_lines_and_what_a_whole_files_text_holds(
    server: MCPServer,
) -> None:
    """session_export's limit was described as every list's: "at most this many", its text
    "keeping the newest that fit". The export pages lines from the top, and the text of a
    whole file over 64 KB holds none of it (the structured content has it all)."""
    tool = next(t for t in await tools_of(server) if t.name == "session_export")
    said = tool.input_schema["properties"]["limit"]["description"]
    assert "lines" in said and "newest" not in said, said
    assert "leaves the file out" in said, said
    async with Client(server) as client:
        sid = (await call(client, "session_create"))["id"]
        for _ in range(3):
            await call(client, "session_append", session_id=sid, entry=custom(f'"{"x" * 30_000}"'))
        result = await client.call_tool("session_export", {"session_id": sid, "limit": 0})
    assert not result.is_error
    assert "jsonl" not in text_json(result) and "textNote" in text_json(result)
    assert (result.structured_content or {})["jsonl"].count("\n") == 4


async def test_a_run_id_not_known_here_says_where_the_runs_are_listed(server: MCPServer) -> None:
    """A run id that no run here has (mistyped, or a run that ended and was forgotten) said
    "no run": it now names agent_runs, where a model finds the ids it may ask about."""
    async with Client(server) as client:
        for tool, extra in (
            ("agent_status", {}),
            ("agent_cancel", {}),
            ("agent_steer", {"message": "m"}),
        ):
            said = await call_error(client, tool, run_id="0" * 12, **extra)
            assert "no run '000000000000' here" in said and "agent_runs lists" in said, said


# --- import ids -------------------------------------------------------------------------------


async def test_import_keeps_a_free_id_copies_a_taken_one_and_replaces_a_bad_one(
    server: MCPServer, tmp_path: Path
) -> None:
    text = pi_file(tmp_path / "s.jsonl", 3).read_text()
    file_id = json.loads(text.splitlines()[0])["id"]
    async with Client(server) as client:
        first = await call(client, "session_import", jsonl=text)
        assert first["session"]["id"] == file_id and not first["newId"]
        again = await call(client, "session_import", jsonl=text)
        assert again["newId"] and again["session"]["id"] != file_id
        assert "exists already" in again["note"] and again["fileId"] == file_id
        assert again["session"]["entryCount"] == 3
        for bad in ("", "../x", "z" * 100_000):
            header, _, rest = text.partition("\n")
            odd = json.dumps({**json.loads(header), "id": bad}) + "\n" + rest
            imported = await call(client, "session_import", jsonl=odd)
            assert imported["newId"] and "not a UUID" in imported["note"]
            uri = imported["session"]["uri"]
            assert (await client.read_resource(uri)).contents


async def test_import_over_mcp_refuses_garbage_and_notes_a_torn_last_line(
    server: MCPServer,
) -> None:
    text = pi_v3(2, "01a00000-0000-7000-8000-0000000000e3")
    async with Client(server) as client:
        refused = await call_error(client, "session_import", jsonl=text + "garbage garbage\n")
        assert "line 4" in refused or ":4:" in refused
        assert (await call(client, "session_list"))["sessions"] == []
        kept = await call(client, "session_import", jsonl=text + '{"type":"mess')
        assert "skipped the last line" in kept["note"]
        assert kept["session"]["entryCount"] == 2


async def test_session_gets_next_cursor_says_it_goes_forward_from_an_entry(
    server: MCPServer,
) -> None:
    """session_get with from_entry_id hands out a cursor for the page after, but its output
    schema said nextCursor was only ever "for the next (older) page"."""
    schemas = {tool.name: tool.output_schema for tool in await tools_of(server)}
    said = schemas["session_get"]["properties"]["nextCursor"]["description"]
    assert "older" in said and "from_entry_id" in said and "after" in said, said
    assert "(older)" in schemas["session_context"]["properties"]["nextCursor"]["description"]
