"""session_compact and session_move_to(summarize=true) over MCP, on both protocol eras."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.server import MCPServer
from mcp_support import (
    ClientsModel,
    agent_server,
    call,
    call_error,
    client_fixture,  # noqa: F401  (the client fixture)
    write_manifests,
)

from mcp_agent.compaction.prompts import SUMMARIZATION_SYSTEM_PROMPT
from mcp_agent.messages import StopReason, content_text
from mcp_agent.providers.base import LlmContext
from mcp_agent.providers.scripted import ScriptedResponse, provider_error, reply
from mcp_agent.server.schemas import CompactResult
from mcp_agent.server.strict import schema_nodes

pytestmark = pytest.mark.anyio


class Model:
    """The server's scripted model: summarises (failing when told to), or answers slowly."""

    def __init__(self) -> None:
        self.prompts: list[str] = []
        self.summary_delay = 0.0  # seconds between the summary's chunks

    def respond(self, context: LlmContext) -> ScriptedResponse:
        text = content_text(context.messages[-1].content)
        if context.system_prompt == SUMMARIZATION_SYSTEM_PROMPT:
            self.prompts.append(text)
            if "Additional focus: FAIL" in text:
                return provider_error("the summariser is down")
            if "Additional focus: CUT" in text or "cut this summary" in text:
                return reply("SERVER SUMMARY, cut", stop_reason=StopReason.LENGTH)
            return reply("SERVER SUMMARY", delay=self.summary_delay, chunk_size=2)
        if text.startswith("slow"):
            return reply("word " * 100, delay=0.01, chunk_size=5)
        return reply(f"echo: {text}")


@pytest.fixture
def model() -> Model:
    return Model()


@pytest.fixture
async def server(tmp_path: Path, model: Model) -> MCPServer:
    agents = {"default": 'description = "test"\ntools = []\n'}
    return agent_server(tmp_path, {"scripted": model.respond}, agents=agents)


def message(role: str, text: str) -> dict[str, Any]:
    """A message entry for session_append, in the pi form (the entry as JSON text)."""
    if role == "user":
        entry = {"type": "message", "message": {"role": "user", "content": text}}
    else:
        entry = {
            "type": "message",
            "message": {
                "role": "assistant",
                "content": [{"type": "text", "text": text}],
                "provider": "scripted",
                "model": "scripted",
                "stopReason": "stop",
            },
        }
    return {"type": "pi", "json": json.dumps(entry)}


async def long_session(client: Client, turns: int = 6) -> tuple[str, list[str]]:
    """A session of ``turns`` turns of about 5,000 tokens each."""
    sid = (await call(client, "session_create"))["id"]
    ids = []
    for n in range(turns):
        for role, text in (("user", f"question {n} " + "q" * 20_000), ("assistant", f"answer {n}")):
            appended = await call(
                client, "session_append", session_id=sid, entry=message(role, text)
            )
            ids.append(appended["entryId"])
    return sid, ids


async def test_session_compact(client: Client, model: Model) -> None:
    sid, ids = await long_session(client)
    result = await call(client, "session_compact", session_id=sid, instructions="the plan")
    assert result["sessionId"] == sid and result["compactionId"]
    assert result["summary"] == "SERVER SUMMARY"
    assert result["tokensBefore"] > 30_000 > result["tokensAfter"] > 20_000
    (prompt,) = model.prompts
    assert prompt.endswith("Additional focus: the plan")
    assert "question 0" in prompt and "question 5" not in prompt

    context = await call(client, "session_context", session_id=sid, limit=0)
    assert context["messages"][0]["role"] == "compactionSummary"
    assert context["messages"][0]["summary"] == "SERVER SUMMARY"
    assert context["messages"][-1]["content"][0]["text"] == "answer 5"
    # Nothing is deleted: every entry is still in the session, the compaction after them.
    entries = (await call(client, "session_get", session_id=sid, view="entries", limit=0))[
        "entries"
    ]
    assert [e["id"] for e in entries if e["type"] == "message"] == ids
    (compaction,) = [e for e in entries if e["type"] == "compaction"]
    assert compaction["id"] == result["compactionId"]
    assert compaction["firstKeptEntryId"] in ids[2:]
    assert compaction["details"] == {"readFiles": [], "modifiedFiles": []}

    text = await call_error(client, "session_compact", session_id=sid)
    assert "already compacted" in text


async def test_session_compacts_answer_is_said_in_words_and_is_of_its_model(client: Client) -> None:
    """Field by field its output schema was 9 subschemas, each checked by every client against
    the metaschema at its first call; now its description names every field with its type,
    the ids keep a schema of their own, and the answer is of CompactResult and valid."""
    import jsonschema

    (tool,) = [t for t in (await client.list_tools()).tools if t.name == "session_compact"]
    shape = tool.output_schema
    assert shape is not None and set(shape["properties"]) == {"sessionId", "compactionId"}
    for name in CompactResult.model_json_schema(by_alias=True)["properties"]:
        assert f"{name}: " in shape["description"], name
    assert sum(1 for _ in schema_nodes(shape)) <= 4
    sid, _ = await long_session(client)
    result = await call(client, "session_compact", session_id=sid, instructions="CUT")
    assert CompactResult.model_validate(result).model_dump(mode="json") == result
    assert jsonschema.Draft202012Validator(shape).is_valid(result) and result["warnings"]


async def test_session_compact_says_a_summary_cut_at_the_output_limit(client: Client) -> None:
    sid, _ = await long_session(client)
    result = await call(client, "session_compact", session_id=sid, instructions="CUT")
    assert result["summary"] == "SERVER SUMMARY, cut" and result["compactionId"]
    (warning,) = result["warnings"]
    assert warning.startswith("Summarization stopped at its output limit of"), warning


async def test_session_compact_with_the_clients_model(tmp_path: Path) -> None:
    """A server whose model is the client's asks it for the summary (sampling), on the
    compacting request's own stream."""
    clients_model = ClientsModel("CLIENT SUMMARY")
    server = agent_server(tmp_path, {}, default_model="client")
    async with Client(server, mode="legacy", sampling_callback=clients_model) as client:
        sid, _ = await long_session(client)
        result = await call(client, "session_compact", session_id=sid)
    assert result["summary"] == "CLIENT SUMMARY"
    (params,) = clients_model.asked
    assert params.system_prompt == SUMMARIZATION_SYSTEM_PROMPT


async def test_session_compact_bad_input_writes_nothing(client: Client, model: Model) -> None:
    assert "not_found" in await call_error(client, "session_compact", session_id="nope")

    empty = (await call(client, "session_create"))["id"]
    assert "the branch is empty" in await call_error(client, "session_compact", session_id=empty)

    sid, _ = await long_session(client)
    before = await call(client, "session_export", session_id=sid, limit=0)
    text = await call_error(client, "session_compact", session_id=sid, instructions="FAIL")
    assert "the summariser is down" in text
    assert (await call(client, "session_export", session_id=sid, limit=0)) == before
    assert len(model.prompts) == 1


async def test_session_compact_compacts_a_short_session_as_pi_does(
    client: Client, model: Model
) -> None:
    """A session shorter than what compaction keeps is compacted when asked, as pi's /compact
    does: nothing is summarised (no model is asked), the whole branch is kept."""
    small = (await call(client, "session_create"))["id"]
    first = await call(client, "session_append", session_id=small, entry=message("user", "hi"))
    result = await call(client, "session_compact", session_id=small)
    assert result["summary"] == "No prior history." and model.prompts == []
    # The context grew by the summary (its tokensAfter above its tokensBefore): the answer
    # says why, and when compacting frees room (it said 3 → 8 tokens, nothing more, and a
    # model reading it took compaction for broken).
    assert result["tokensAfter"] > result["tokensBefore"], result
    [warning] = result["warnings"]
    assert "nothing was summarised" in warning and "20,000 tokens" in warning, warning
    assert f"about {result['tokensBefore']:,} tokens" in warning, warning
    entries = (await call(client, "session_get", session_id=small, view="entries", limit=0))[
        "entries"
    ]
    assert entries[-1]["firstKeptEntryId"] == first["entryId"]
    assert "already compacted" in await call_error(client, "session_compact", session_id=small)


async def test_session_compact_refuses_while_a_run_is_active(client: Client) -> None:
    run = await call(client, "agent_run", prompt="slow please", wait=False)
    text = await call_error(client, "session_compact", session_id=run["sessionId"])
    assert "busy" in text and run["runId"] in text
    await call(client, "agent_status", run_id=run["runId"], wait_seconds=30)


async def while_summarising(
    model: Model, work: Callable[[], Awaitable[Any]], check: Callable[[], Awaitable[None]]
) -> Any:
    """Run ``work`` (which has the model write a summary, slowly) and ``check`` during it."""
    model.summary_delay = 0.05
    done: dict[str, Any] = {}

    async def run_work() -> None:
        done["result"] = await work()

    async with anyio.create_task_group() as group:
        group.start_soon(run_work)
        with anyio.fail_after(5):
            while not model.prompts:
                await anyio.sleep(0.01)
        await check()
    return done["result"]


async def test_nothing_else_writes_while_the_model_summarises(client: Client, model: Model) -> None:
    sid, ids = await long_session(client)

    async def refused(holder: str) -> None:
        for name, arguments in (
            ("agent_run", {"prompt": "hi", "session_id": sid}),
            ("session_append", {"session_id": sid, "entry": message("user", "x")}),
            ("session_compact", {"session_id": sid}),
            ("session_move_to", {"session_id": sid, "entry_id": ids[1], "summarize": True}),
        ):
            text = await call_error(client, name, **arguments)
            assert "busy" in text and holder in text, (name, text)

    compacted = await while_summarising(
        model,
        lambda: call(client, "session_compact", session_id=sid),
        lambda: refused("session_compact"),
    )
    assert compacted["summary"] == "SERVER SUMMARY"
    model.prompts.clear()
    moved = await while_summarising(
        model,
        lambda: call(client, "session_move_to", session_id=sid, entry_id=ids[1], summarize=True),
        lambda: refused("session_move_to"),
    )
    assert moved["branchSummaryId"]
    # Once done, the session takes runs again.
    assert (await call(client, "agent_run", prompt="after", session_id=sid))[
        "status"
    ] == "completed"


async def test_move_to_says_a_branch_summary_cut_at_the_output_limit(client: Client) -> None:
    sid = (await call(client, "session_create"))["id"]
    first = await call(client, "session_append", session_id=sid, entry=message("user", "hi"))
    await call(client, "session_append", session_id=sid, entry=message("user", "cut this summary"))
    moved = await call(
        client, "session_move_to", session_id=sid, entry_id=first["entryId"], summarize=True
    )
    assert moved["branchSummaryId"]
    (warning,) = moved["warnings"]
    assert warning.startswith("Branch summarization stopped at its output limit"), warning
    plain = await call(client, "session_move_to", session_id=sid, entry_id=first["entryId"])
    assert plain["warnings"] == []


async def test_move_to_with_a_model_written_branch_summary(client: Client, model: Model) -> None:
    sid = (await call(client, "session_create"))["id"]
    ids = []
    for role, text in (
        ("user", "common"),
        ("assistant", "sure"),
        ("user", "abandoned idea"),
        ("assistant", "tried it"),
    ):
        ids.append(
            (await call(client, "session_append", session_id=sid, entry=message(role, text)))[
                "entryId"
            ]
        )
    moved = await call(client, "session_move_to", session_id=sid, entry_id=ids[1], summarize=True)
    assert moved["branchSummaryId"] and moved["leafId"] == moved["branchSummaryId"]
    (prompt,) = model.prompts
    conversation = prompt.split("</conversation>")[0]
    assert "abandoned idea" in conversation and "tried it" in conversation
    assert "common" not in conversation
    context = await call(client, "session_context", session_id=sid, limit=0)
    last = context["messages"][-1]
    assert last["role"] == "branchSummary" and "SERVER SUMMARY" in last["summary"]

    before = await call(client, "session_export", session_id=sid, limit=0)
    text = await call_error(
        client, "session_move_to", session_id=sid, entry_id="ffffffff", summarize=True
    )
    assert "not_found" in text
    text = await call_error(
        client, "session_move_to", session_id=sid, entry_id=moved["leafId"], summarize=True
    )
    assert "nothing to summarise" in text
    assert (await call(client, "session_export", session_id=sid, limit=0)) == before


async def test_an_automatic_compaction_is_announced_as_progress(
    tmp_path: Path, model: Model
) -> None:
    from mcp_support import write_manifests

    from mcp_agent.providers.scripted import ScriptedProvider, scripted_model
    from mcp_agent.runtime.settings import ServerSettings
    from mcp_agent.server.app import build_server

    # A window of 40,000 tokens: the six turns of about 5,000 tokens pass its threshold.
    def small() -> tuple[Any, ScriptedProvider]:
        return scripted_model("small", context_window=40_000), ScriptedProvider(model.respond)

    settings = ServerSettings(
        db_path=tmp_path / "sessions.db",
        manifests_dir=write_manifests(tmp_path / "manifests"),
        default_model="small",
    )
    server = build_server(settings, models={"small": small})
    announced: list[str] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        announced.append(message or "")

    async with Client(server) as client:
        sid, _ = await long_session(client)
        result = await client.call_tool(
            "agent_run", {"prompt": "go on", "session_id": sid}, progress_callback=on_progress
        )
        assert not result.is_error
        entries = await call(client, "session_get", session_id=sid, view="entries", limit=0)
    (compaction,) = [e for e in entries["entries"] if e["type"] == "compaction"]
    starts = [p for p in announced if p.startswith("auto_compaction_start")]
    ends = [p for p in announced if p.startswith("auto_compaction_end")]
    assert starts == [
        "auto_compaction_start: the context passed the compaction threshold: compacting the session"
    ]
    assert len(ends) == 1 and ends[0].startswith("auto_compaction_end: compacted: about ")
    assert f"(entry {compaction['id']})" in ends[0]
    assert announced.index(starts[0]) < announced.index(ends[0])


async def test_summaries_are_written_by_the_sessions_model(tmp_path: Path, model: Model) -> None:
    """As pi's /compact, and as a run continuing the session: the model the session last ran
    with summarises it, not the server's default."""
    by_default = Model()
    agents = {"default": 'description = "test"\ntools = []\n'}
    server = agent_server(
        tmp_path, {"default": by_default.respond, "scripted": model.respond}, agents=agents
    )
    async with Client(server) as client:
        sid, ids = await long_session(client)  # answers by scripted:scripted
        compacted = await call(client, "session_compact", session_id=sid)
        assert compacted["summary"] == "SERVER SUMMARY"
        await call(client, "session_move_to", session_id=sid, entry_id=ids[1], summarize=True)
    assert len(model.prompts) == 2 and by_default.prompts == []


async def test_session_compact_keeps_what_a_small_window_holds(
    tmp_path: Path, model: Model
) -> None:
    """A session of about 15,000 tokens on a model of 32,768 (a local model's): compaction
    keeps a quarter of the window verbatim, not pi's 20,000, so asking for one compacts, as
    the agent's own compaction would, instead of refusing with "nothing to compact"."""
    from mcp_agent.providers.scripted import ScriptedProvider, scripted_model
    from mcp_agent.runtime.settings import ServerSettings
    from mcp_agent.server.app import build_server

    small = scripted_model("scripted", context_window=32_768)
    agents = {"default": 'description = "test"\ntools = []\n'}
    settings = ServerSettings(
        db_path=tmp_path / "sessions.db",
        manifests_dir=write_manifests(tmp_path / "manifests", agents, None),
        default_model="scripted",
    )
    server = build_server(
        settings, models={"scripted": lambda: (small, ScriptedProvider(model.respond))}
    )
    async with Client(server) as client:
        sid, _ = await long_session(client, turns=3)
        compacted = await call(client, "session_compact", session_id=sid)
    assert compacted["summary"] == "SERVER SUMMARY"
    assert compacted["tokensAfter"] < 32_768 // 4 + 5_100  # a quarter, rounded up to a turn


async def test_a_summary_without_a_usable_model_says_how_to_choose_one(
    tmp_path: Path, model: Model
) -> None:
    """session_compact and session_move_to(summarize) take no model argument: the refusal
    said "choose another model for the run", which neither can. It names the way to choose
    one here: a model_change entry (the session's model writes its summaries)."""
    server = agent_server(tmp_path, {"scripted": model.respond}, default_model="client")
    async with Client(server) as client:  # 2026-07-28: the client's model cannot be asked
        sid = (await call(client, "session_create"))["id"]
        ids = []
        for n in range(6):
            for role, text in (("user", f"question {n} " + "q" * 20_000), ("assistant", "ok")):
                entry = {"type": "message", "role": role, "content": text}
                added = await call(client, "session_append", session_id=sid, entry=entry)
                ids.append(added["entryId"])
        for name, arguments in [
            ("session_compact", {}),
            ("session_move_to", {"entry_id": ids[1], "summarize": True}),
        ]:
            said = await call_error(client, name, session_id=sid, **arguments)
            assert "model_change" in said and "session_append" in said, said
        change = {"type": "model_change", "provider": "scripted", "modelId": "scripted"}
        await call(client, "session_append", session_id=sid, entry=change)
        compacted = await call(client, "session_compact", session_id=sid)
    assert compacted["summary"] == "SERVER SUMMARY"
