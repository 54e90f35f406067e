"""The Agent: state, queues, abort, listeners, and writing every message into a session."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pytest
from agent_support import check_tool_results
from narrow import narrow

from mcp_agent.agent import Agent, AgentBusyError
from mcp_agent.events import (
    AgentEndEvent,
    AgentEndReason,
    AgentEvent,
    AutoRetryEndEvent,
    AutoRetryStartEvent,
    MessageEndEvent,
)
from mcp_agent.messages import (
    AssistantMessage,
    BaseMessage,
    ImageContent,
    QueueMode,
    StopReason,
    ThinkingLevel,
    ToolResultMessage,
    Usage,
    UserMessage,
)
from mcp_agent.providers.base import is_transient_error
from mcp_agent.providers.scripted import ScriptedProvider, reply, scripted_model, tool_call
from mcp_agent.runtime import session_agent
from mcp_agent.runtime.session_agent import RetrySettings, SessionAgent
from mcp_agent.sessions import (
    ActiveToolsChangeEntry,
    InMemorySessionStorage,
    MessageEntry,
    ModelChangeEntry,
    Session,
    SessionEntry,
    SqliteSessionRepo,
    ThinkingLevelChangeEntry,
    Unreachable,
)
from mcp_agent.tools import AgentTool, AgentToolResult

pytestmark = pytest.mark.anyio


def make_tool(name: str, execute: Any = None, **kw: Any) -> AgentTool:
    async def default(tool_call_id, params, signal, on_update, context):
        return AgentToolResult.text(f"{name} ok")

    return AgentTool(
        name=name,
        description=f"the {name} tool",
        parameters={"type": "object"},
        execute=execute or default,
        **kw,
    )


def make_agent(script: list[Any], **kw: Any) -> tuple[Agent, ScriptedProvider]:
    """An Agent; with ``session`` or ``retry``, a SessionAgent (pi's AgentSession does both),
    in a session of its own unless one is given."""
    provider = ScriptedProvider(script)
    kw.setdefault("tools", [make_tool("bash")])
    if "session" in kw or "retry" in kw:
        kw.setdefault("session", Session())
        return SessionAgent(model=scripted_model(), stream_fn=provider, **kw), provider
    return Agent(model=scripted_model(), stream_fn=provider, **kw), provider


def entries_of(session: Session, kind: type) -> list[Any]:
    return [e for e in session.get_entries() if isinstance(e, kind)]


def roles(messages: Sequence[BaseMessage]) -> list[str]:
    return [m.role for m in messages]


def text_of(message: BaseMessage) -> str:
    """The text of a user, assistant or tool result message (checked to be one of them)."""
    assert isinstance(message, UserMessage | AssistantMessage | ToolResultMessage), message
    return message.text


# --- prompting, state, listeners ----------------------------------------------------------------


async def test_prompt_runs_to_the_end_and_keeps_the_transcript():
    agent, _provider = make_agent([reply("Checking.", tool_call("bash", id="c")), reply("Done.")])
    events: list[AgentEvent] = []
    states: list[tuple[bool, int]] = []

    def listener(event: AgentEvent) -> None:
        events.append(event)
        if event.type == "tool_execution_start":
            states.append((agent.state.is_streaming, len(agent.state.pending_tool_calls)))

    unsubscribe = agent.subscribe(listener)
    new = await agent.prompt("hello")
    assert roles(new) == ["user", "assistant", "toolResult", "assistant"]
    assert agent.state.messages == new
    assert states == [(True, 1)]
    assert not agent.state.is_streaming and not agent.state.pending_tool_calls
    assert agent.state.streaming_message is None and not agent.is_running
    assert events[0].type == "agent_start" and events[-1].type == "agent_end"

    unsubscribe()
    unsubscribe()  # twice is harmless
    agent.stream_fn = ScriptedProvider(["again"])
    await agent.prompt(UserMessage(content="second"))
    assert events[-1].type == "agent_end" and len([e for e in events if e.type == "agent_end"]) == 1
    assert roles(agent.state.messages)[-2:] == ["user", "assistant"]
    assert agent.stream_fn.calls[0].messages[0].text == "hello"  # history goes to the model


async def test_prompt_with_images_and_message_lists():
    agent, _provider = make_agent(["one", "two"])
    image = ImageContent(data="aGk=", mime_type="image/png")
    await agent.prompt("look", images=[image])
    first = narrow(agent.state.messages[0], UserMessage)
    assert isinstance(first.content, list)
    assert [b.type for b in first.content] == ["text", "image"]
    await agent.prompt([UserMessage(content="a"), UserMessage(content="b")])
    assert [narrow(m, UserMessage).text for m in agent.state.messages[2:4]] == ["a", "b"]


async def test_async_listeners_are_awaited_in_order():
    agent, _ = make_agent(["hi"])
    order: list[str] = []

    async def slow(event: AgentEvent) -> None:
        await anyio.lowlevel.checkpoint()
        order.append(f"slow:{event.type}")

    agent.subscribe(slow)
    agent.subscribe(lambda event: order.append(f"fast:{event.type}"))
    await agent.prompt("x")
    assert order[:4] == [
        "slow:agent_start",
        "fast:agent_start",
        "slow:turn_start",
        "fast:turn_start",
    ]


async def test_prompting_while_running_raises_and_wait_for_idle():
    release = anyio.Event()

    async def blocking(tool_call_id, params, signal, on_update, context):
        await release.wait()
        return AgentToolResult.text("released")

    agent, _ = make_agent(
        [reply(tool_call("block")), reply("finished")], tools=[make_tool("block", blocking)]
    )
    await agent.wait_for_idle()  # idle: returns at once
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(agent.prompt, "start")
            await anyio.sleep(0.01)
            assert agent.is_running and agent.signal is not None
            with pytest.raises(AgentBusyError, match="already running"):
                await agent.prompt("again")
            with pytest.raises(AgentBusyError):
                await agent.continue_()
            release.set()
            await agent.wait_for_idle()
            assert not agent.is_running
    assert narrow(agent.state.messages[-1], AssistantMessage).text == "finished"


async def test_a_failing_listener_ends_the_run_with_an_error_message():
    session = Session(InMemorySessionStorage())
    agent, _ = make_agent([reply(tool_call("bash", id="c")), reply("never")], session=session)
    ends: list[AgentEndEvent] = []

    def listener(event: AgentEvent) -> None:
        if isinstance(event, AgentEndEvent):
            ends.append(event)
        if event.type == "tool_execution_end":
            raise RuntimeError("ui crashed")

    agent.subscribe(listener)
    new = await agent.prompt("go")
    last = narrow(new[-1], AssistantMessage)
    assert last.stop_reason == StopReason.ERROR and last.error_message == "ui crashed"
    assert agent.state.error_message == "ui crashed"
    assert not agent.is_running
    assert ends[-1].reason == AgentEndReason.ERROR
    # The tool call whose batch broke off still gets a result, in memory and in the session.
    assert roles(agent.state.messages) == ["user", "assistant", "toolResult", "assistant"]
    assert "ui crashed" in narrow(agent.state.messages[2], ToolResultMessage).text
    stored = session.build_context().messages
    assert roles(stored) == roles(agent.state.messages)
    check_tool_results(stored)


async def test_a_run_cancelled_from_outside_leaves_a_consistent_session():
    session = Session(InMemorySessionStorage())
    started = anyio.Event()

    async def stuck(tool_call_id, params, signal, on_update, context):
        started.set()
        await anyio.sleep(60)
        return AgentToolResult.text("never")

    agent, _ = make_agent(
        [reply(tool_call("stuck", id="s"))], tools=[make_tool("stuck", stuck)], session=session
    )
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(agent.prompt, "go")
            await started.wait()
            tg.cancel_scope.cancel()
    assert not agent.is_running
    await agent.wait_for_idle()
    stored = session.build_context().messages
    assert roles(stored) == ["user", "assistant", "toolResult"]
    assert (
        narrow(stored[-1], ToolResultMessage).text
        == "Tool call not executed (the run was cancelled)"
    )
    check_tool_results(stored)


# --- steering and follow-ups --------------------------------------------------------------------


async def test_steer_goes_in_after_the_running_tool_batch():
    release = anyio.Event()

    async def blocking(tool_call_id, params, signal, on_update, context):
        await release.wait()
        return AgentToolResult.text("done")

    agent, provider = make_agent(
        [reply(tool_call("block")), reply("ok, summarising")], tools=[make_tool("block", blocking)]
    )
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(agent.prompt, "start")
            await anyio.sleep(0.01)
            agent.steer("stop and summarise")
            assert agent.has_queued_messages()
            release.set()
    assert roles(agent.state.messages) == ["user", "assistant", "toolResult", "user", "assistant"]
    assert narrow(agent.state.messages[3], UserMessage).text == "stop and summarise"
    assert provider.calls[1].messages[-1].text == "stop and summarise"
    assert not agent.has_queued_messages()


@pytest.mark.parametrize("mode", [QueueMode.ALL, QueueMode.ONE_AT_A_TIME])
async def test_follow_ups_in_both_queue_modes(mode: QueueMode):
    agent, provider = make_agent(["first", "second", "third"], follow_up_mode=mode)
    agent.follow_up("and a")
    agent.follow_up("and b")
    await agent.prompt("start")
    contexts = [[m.text for m in call.messages if m.role == "user"] for call in provider.calls]
    if mode == QueueMode.ALL:
        # Both follow-ups go in together, answered by one model call.
        assert roles(agent.state.messages) == ["user", "assistant", "user", "user", "assistant"]
        assert contexts[-1] == ["start", "and a", "and b"]
        assert len(provider.calls) == 2
    else:
        assert roles(agent.state.messages) == [
            "user",
            "assistant",
            "user",
            "assistant",
            "user",
            "assistant",
        ]
        assert contexts[1] == ["start", "and a"] and contexts[2] == ["start", "and a", "and b"]
    assert agent.follow_up_mode == mode


async def test_a_message_queued_as_the_run_ends_is_taken_but_not_after_an_abort():
    """A follow-up queued once the loop had taken its last (as its agent_end is told to the
    listeners: over MCP a client that reacts to that progress) stayed queued, and a server's
    run gave it back as never taken; the run now goes on with it. After an abort it is left
    queued, for whoever picks up."""
    agent, provider = make_agent(["first", "second", "third"])
    late = ["one more", "and another"]

    def listener(event: AgentEvent) -> None:
        if event.type == "agent_end" and late:
            agent.follow_up(late.pop(0))

    agent.subscribe(listener)
    new = await agent.prompt("start")
    assert [text_of(m) for m in new] == [
        "start",
        "first",
        "one more",
        "second",
        "and another",
        "third",
    ]
    assert not agent.has_queued_messages() and len(provider.calls) == 3

    aborted, _ = make_agent([reply("never", delay=5)])

    def abort_then_queue(event: AgentEvent) -> None:
        if event.type == "message_start" and event.message.role == "assistant":  # type: ignore[attr-defined]
            aborted.abort("stop")
        if event.type == "agent_end":
            aborted.follow_up("too late")

    aborted.subscribe(abort_then_queue)
    with anyio.fail_after(5):
        await aborted.prompt("start")
    assert roles(aborted.state.messages) == ["user", "assistant"]
    assert aborted.has_queued_messages()


async def test_steering_mode_all_and_clearing_queues():
    agent, provider = make_agent(["a", "b"], steering_mode=QueueMode.ALL)
    assert agent.steering_mode == QueueMode.ALL
    agent.steer("s1")
    agent.steer("s2")
    await agent.prompt("p")  # steering polled at the start goes in before the first call
    assert [m.text for m in provider.calls[0].messages] == ["p", "s1", "s2"]
    agent.follow_up("f")
    agent.steer("s")
    agent.clear_all_queues()
    assert not agent.has_queued_messages()


async def test_continue_from_an_assistant_message_runs_queued_messages():
    agent, _provider = make_agent(["a", "b", "c"])
    await agent.prompt("p")
    with pytest.raises(ValueError, match="assistant"):
        await agent.continue_()
    agent.follow_up("later")
    await agent.continue_()
    assert [text_of(m) for m in agent.state.messages] == ["p", "a", "later", "b"]
    agent.steer("now")
    await agent.continue_()
    assert [text_of(m) for m in agent.state.messages][-2:] == ["now", "c"]
    agent.reset()
    with pytest.raises(ValueError, match="no messages"):
        await agent.continue_()


# --- thinking level -----------------------------------------------------------------------------


async def test_the_thinking_level_is_clamped_to_the_model_and_recorded_as_in_effect():
    plain = scripted_model("plain", reasoning=False)
    thinker = scripted_model("thinker")
    session = Session(InMemorySessionStorage())
    session.append_thinking_level_change("high")
    provider = ScriptedProvider([reply("one"), reply("two")])
    sent: list[str] = []

    def stream_fn(model: Any, context: Any, options: Any) -> Any:
        sent.append(str(options.thinking_level))
        return provider(model, context, options)

    agent = SessionAgent(model=plain, stream_fn=stream_fn, session=session, thinking_level="high")
    assert agent.state.thinking_level == "off"  # a model without reasoning thinks off
    await agent.prompt("hi")
    assert session.build_context().thinking_level == "off"  # what was in effect
    agent.set_model(thinker)  # the level asked for comes back with a model that can
    assert agent.state.thinking_level == "high"
    await agent.prompt("again")
    assert session.build_context().thinking_level == "high"
    assert sent == ["off", "high"]  # what the model was asked for
    agent.set_thinking_level("low")
    agent.set_model(plain)
    assert agent.state.thinking_level == "off"


async def test_a_thinking_level_no_one_knows_is_thought_off_and_the_session_still_runs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A session keeps the level it was given (a pi file from a newer pi, or written by
    hand); an agent made from it thinks off, says so, and records what was in effect."""
    session = Session(InMemorySessionStorage())
    session.append_model_change("scripted", "scripted")
    session.append_thinking_level_change("ultra")
    agent = SessionAgent.from_session(
        session, stream_fn=ScriptedProvider(["hi"]), model=scripted_model()
    )
    assert agent.state.thinking_level == "off"
    assert "thinking level 'ultra' is none of off, minimal" in caplog.text
    await agent.prompt("hello")
    assert session.build_context().thinking_level == "off"


# --- abort --------------------------------------------------------------------------------------


async def test_abort_during_streaming_is_recorded_in_the_session():
    session = Session(InMemorySessionStorage())
    provider = ScriptedProvider([reply("word " * 50)], chunk_size=5, delay=0.01)
    agent = SessionAgent(model=scripted_model(), stream_fn=provider, session=session)

    def listener(event: AgentEvent) -> None:
        if event.type == "message_update":
            agent.abort()

    agent.subscribe(listener)
    with anyio.fail_after(5):
        new = await agent.prompt("talk")
    assert narrow(new[-1], AssistantMessage).stop_reason == StopReason.ABORTED
    stored = session.build_context().messages
    assert roles(stored) == ["user", "assistant"]
    assert narrow(stored[-1], AssistantMessage).stop_reason == StopReason.ABORTED
    assert agent.state.error_message


async def test_abort_during_a_tool_keeps_the_session_consistent():
    session = Session(InMemorySessionStorage())
    started = anyio.Event()

    async def stuck(tool_call_id, params, signal, on_update, context):
        started.set()
        await anyio.sleep(60)  # ignores the signal; the loop cancels it
        return AgentToolResult.text("never")

    agent, provider = make_agent(
        [reply(tool_call("bash", id="b"), tool_call("stuck", id="s")), reply("never said")],
        tools=[make_tool("bash"), make_tool("stuck", stuck)],
        session=session,
        abort_grace=0.05,
    )
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(agent.prompt, "go")
            await started.wait()
            agent.abort("user cancelled")
            await agent.wait_for_idle()
    stored = session.build_context().messages
    assert roles(stored) == ["user", "assistant", "toolResult", "toolResult", "assistant"]
    assert narrow(stored[2], ToolResultMessage).text == "bash ok"
    cancelled = narrow(stored[3], ToolResultMessage)
    assert cancelled.is_error and "user cancelled" in cancelled.text
    last = narrow(stored[-1], AssistantMessage)
    assert last.stop_reason == StopReason.ABORTED
    assert last.error_message == "aborted: user cancelled"  # as the providers say it
    check_tool_results(stored)
    assert len(provider.calls) == 1
    # The next prompt carries on from the consistent transcript.
    agent.stream_fn = ScriptedProvider(["back"])
    await agent.prompt("again")
    assert narrow(session.build_context().messages[-1], AssistantMessage).text == "back"


async def test_an_abort_while_the_tools_load_keeps_the_sessions_tools():
    """A run cancelled while its tools are being listed (a downstream server starting) must
    not record the none it knows yet as the session's active tools: every later run would
    have no tools. The next prompt loads them again."""
    session = Session(InMemorySessionStorage())
    session.append_active_tools_change(["a", "b"])
    loading = anyio.Event()
    loads = 0

    async def load_tools() -> list[AgentTool]:
        nonlocal loads
        loads += 1
        if loads == 1:
            loading.set()
            await anyio.sleep_forever()
        return [make_tool("a"), make_tool("b")]

    agent, provider = make_agent(["back"], session=session, tools=[], load_tools=load_tools)
    with anyio.fail_after(5):
        async with anyio.create_task_group() as group:
            group.start_soon(agent.prompt, "first")
            await loading.wait()
            agent.abort("cancelled while starting")
    stored = session.build_context()
    assert narrow(stored.messages[-1], AssistantMessage).stop_reason == StopReason.ABORTED
    assert stored.active_tool_names == ["a", "b"]
    await agent.prompt("second")
    assert [t.name for t in provider.calls[-1].tools or []] == ["a", "b"]
    assert session.build_context().active_tool_names == ["a", "b"]


async def test_abort_when_idle_does_nothing():
    agent, _ = make_agent(["x"])
    agent.abort()
    await agent.prompt("fine")
    assert narrow(agent.state.messages[-1], AssistantMessage).text == "x"


# --- sessions -----------------------------------------------------------------------------------


async def test_each_message_is_in_the_session_when_its_message_end_fires():
    session = Session(InMemorySessionStorage())
    agent, _ = make_agent([reply(tool_call("bash")), reply("done")], session=session)
    counts: list[tuple[str, int]] = []

    def listener(event: AgentEvent) -> None:
        if event.type == "message_end":
            stored = session.build_context().messages
            message = narrow(event, MessageEndEvent).message
            counts.append((message.role, len(stored)))
            assert stored[-1] is message or stored[-1].to_json() == message.to_json()

    agent.subscribe(listener)
    await agent.prompt("go")
    assert counts == [("user", 1), ("assistant", 2), ("toolResult", 3), ("assistant", 4)]


async def test_settings_are_recorded_only_when_they_change():
    session = Session(InMemorySessionStorage())
    agent, _ = make_agent(["a", "b", "c"], session=session, tools=[make_tool("x"), make_tool("y")])
    await agent.prompt("one")
    await agent.prompt("two")  # nothing changed: no new entries but the messages
    assert [(e.provider, e.model_id) for e in entries_of(session, ModelChangeEntry)] == [
        ("scripted", "scripted")
    ]
    # The level is recorded too, "off" as well: pi takes a session that names none for one
    # nobody chose, and resumes it at its own default.
    assert [e.thinking_level for e in entries_of(session, ThinkingLevelChangeEntry)] == ["off"]
    assert [e.active_tool_names for e in entries_of(session, ActiveToolsChangeEntry)] == [
        ["x", "y"]
    ]
    # The first entries come before the first message.
    types = [e.type for e in session.get_entries()]
    assert types[:4] == ["model_change", "thinking_level_change", "active_tools_change", "message"]

    agent.set_thinking_level(ThinkingLevel.HIGH)
    agent.set_thinking_level("high")  # same again: one entry
    agent.set_model(scripted_model("bigger"))
    agent.set_active_tools(["y"])
    agent.set_active_tools(["y"])
    with pytest.raises(KeyError):
        agent.set_active_tools(["nope"])
    assert [e.thinking_level for e in entries_of(session, ThinkingLevelChangeEntry)] == [
        "off",
        "high",
    ]
    assert [e.model_id for e in entries_of(session, ModelChangeEntry)] == ["scripted", "bigger"]
    assert [e.active_tool_names for e in entries_of(session, ActiveToolsChangeEntry)][-1] == ["y"]
    context = session.build_context()
    assert context.thinking_level == "high"
    assert context.model == {"provider": "scripted", "modelId": "bigger"}
    assert context.active_tool_names == ["y"]
    await agent.prompt("three")
    assert len(entries_of(session, ModelChangeEntry)) == 2


async def test_a_model_set_during_a_run_is_recorded_when_the_run_ends():
    session = Session(InMemorySessionStorage())
    agent, _ = make_agent([reply(tool_call("bash")), reply("done")], session=session)

    def listener(event: AgentEvent) -> None:
        if event.type == "tool_execution_start":
            agent.set_model(scripted_model("next"))

    agent.subscribe(listener)
    await agent.prompt("go")
    types = [e.type for e in session.get_entries()]
    assert types[-1] == "model_change"  # after the run's messages, when it takes effect
    assert session.build_context().model == {"provider": "scripted", "modelId": "next"}


async def test_added_tool_names_activate_tools_and_are_recorded():
    session = Session(InMemorySessionStorage())

    async def load(tool_call_id, params, signal, on_update, context):
        return AgentToolResult.text(
            "loaded", added_tool_names=["extra"], usage=Usage(input=7, output=3, total_tokens=10)
        )

    agent, _provider = make_agent(
        [reply(tool_call("load")), reply(tool_call("extra")), reply("done")],
        tools=[make_tool("load", load)],
        available_tools=[make_tool("extra")],
        session=session,
    )
    assert [t.name for t in agent.available_tools] == ["extra", "load"]
    await agent.prompt("go")
    assert [t.name for t in agent.state.tools] == ["load", "extra"]
    assert [
        narrow(m, ToolResultMessage).text for m in agent.state.messages if m.role == "toolResult"
    ] == [
        "loaded",
        "extra ok",
    ]
    changes = [e.active_tool_names for e in entries_of(session, ActiveToolsChangeEntry)]
    assert changes == [["load"], ["load", "extra"]]
    # Recorded right after the tool result that activated them.
    entries = session.get_entries()
    index = next(
        i
        for i, e in enumerate(entries)
        if getattr(e, "active_tool_names", None) == ["load", "extra"]
    )
    before = entries[index - 1]
    assert isinstance(before, MessageEntry) and before.message.role == "toolResult"
    # The tool result's own usage (a sub-agent's tokens, say) counts in the session's stats.
    assistant_tokens = sum(
        narrow(m, AssistantMessage).usage.total_tokens
        for m in agent.state.messages
        if m.role == "assistant"
    )
    assert session.stats().total_tokens == assistant_tokens + 10


async def test_resume_from_a_session(tmp_path: Path):
    repo = SqliteSessionRepo(tmp_path / "sessions.db")
    try:
        session = repo.create()
        tools = [make_tool("a"), make_tool("b")]
        first = SessionAgent(
            model=scripted_model("m1"),
            stream_fn=ScriptedProvider([reply(tool_call("a")), reply("first answer")]),
            tools=[tools[0]],
            available_tools=[tools[1]],
            thinking_level=ThinkingLevel.LOW,
            session=session,
        )
        await first.prompt("remember 42")
        session_id = session.id
        session.close()

        # A new process: open the session again and carry on.
        reopened = repo.open(session_id)
        provider = ScriptedProvider(["you said 42"])
        resumed = SessionAgent.from_session(reopened, stream_fn=provider, tools=tools)
        assert resumed.state.model.id == "m1" and resumed.state.model.provider == "scripted"
        assert resumed.state.thinking_level == ThinkingLevel.LOW
        assert [t.name for t in resumed.state.tools] == ["a"]
        assert [t.name for t in resumed.available_tools] == ["b", "a"]
        assert [m.to_json() for m in resumed.state.messages] == [
            m.to_json() for m in first.state.messages
        ]
        assert resumed.stream_options.session_id == session_id
        before = len(reopened.get_entries())
        await resumed.prompt("what did I say?")
        assert next(m.text for m in provider.calls[0].messages) == "remember 42"
        # Nothing changed, so only the two new messages were appended.
        assert len(reopened.get_entries()) == before + 2
        last = narrow(reopened.build_context().messages[-1], AssistantMessage)
        assert last.text == "you said 42"

        # resolve_model supplies the full record; an explicit thinking level wins.
        full = scripted_model("m1", context_window=1000)
        again = SessionAgent.from_session(
            reopened,
            stream_fn=provider,
            tools=tools,
            resolve_model=lambda provider, model_id: full if model_id == "m1" else None,
            thinking_level="high",
        )
        assert again.state.model is full and again.state.thinking_level == ThinkingLevel.HIGH
        reopened.close()
    finally:
        repo.close()


async def test_resume_after_max_turns_with_continue():
    session = Session(InMemorySessionStorage())
    agent, _ = make_agent([reply(tool_call("bash"))], session=session, max_turns=1)
    ends: list[AgentEndEvent] = []
    agent.subscribe(lambda e: ends.append(e) if isinstance(e, AgentEndEvent) else None)
    await agent.prompt("go")
    assert ends[-1].reason == AgentEndReason.MAX_TURNS
    assert agent.state.messages[-1].role == "toolResult"

    resumed = SessionAgent.from_session(
        session, stream_fn=ScriptedProvider(["wrapped up"]), tools=[make_tool("bash")]
    )
    new = await resumed.continue_()
    assert roles(new) == ["assistant"] and narrow(new[0], AssistantMessage).text == "wrapped up"
    assert roles(session.build_context().messages) == [
        "user",
        "assistant",
        "toolResult",
        "assistant",
    ]


async def test_from_session_needs_a_model_when_the_session_names_none():
    session = Session(InMemorySessionStorage())
    with pytest.raises(ValueError, match="model"):
        SessionAgent.from_session(session, stream_fn=ScriptedProvider([]))
    agent = SessionAgent.from_session(
        session, stream_fn=ScriptedProvider(["hi"]), model=scripted_model()
    )
    assert agent.state.messages == [] and agent.state.tools == []
    await agent.prompt("hello")
    assert session.build_context().model == {"provider": "scripted", "modelId": "scripted"}


# --- auto-retry ---------------------------------------------------------------------------------

OVERLOADED = "api.example: the server overloaded mid-stream: {'type': 'overloaded_error'}"


def retry_events(events: list[AgentEvent]) -> list[tuple[Any, ...]]:
    found: list[tuple[Any, ...]] = []
    for event in events:
        if isinstance(event, AutoRetryStartEvent):
            found.append(("start", event.attempt, event.max_attempts, event.delay))
        elif isinstance(event, AutoRetryEndEvent):
            found.append(("end", event.success, event.attempt, event.final_error))
    return found


async def test_a_passing_model_error_is_run_again_and_the_failure_kept_in_the_session():
    session = Session(InMemorySessionStorage())
    agent, provider = make_agent(
        [reply("Half an", error=OVERLOADED), reply("", error=OVERLOADED), reply("Done.")],
        session=session,
        retry=RetrySettings(base_delay=0.01),
    )
    events: list[AgentEvent] = []
    agent.subscribe(events.append)
    with anyio.fail_after(5):
        new = await agent.prompt("go")
    assert retry_events(events) == [
        ("start", 1, 3, 0.01),
        ("start", 2, 3, 0.02),
        ("end", True, 2, None),
    ]
    last = narrow(new[-1], AssistantMessage)
    assert last.text == "Done." and last.stop_reason == StopReason.STOP
    # The transcript holds no failed answer; the session keeps both for the record.
    assert roles(agent.state.messages) == ["user", "assistant"]
    stored = session.build_context().messages
    assert [narrow(m, AssistantMessage).stop_reason for m in stored[1:]] == [
        StopReason.ERROR
    ] * 2 + [StopReason.STOP]
    # Each retry asked the model with the transcript as it was before the failure.
    assert [roles(c.messages) for c in provider.calls] == [["user"]] * 3


async def test_retrying_gives_up_after_max_retries():
    agent, provider = make_agent(
        [reply("", error=OVERLOADED)] * 3, retry=RetrySettings(max_retries=2, base_delay=0.01)
    )
    events: list[AgentEvent] = []
    agent.subscribe(events.append)
    with anyio.fail_after(5):
        new = await agent.prompt("go")
    assert narrow(new[-1], AssistantMessage).stop_reason == StopReason.ERROR
    assert retry_events(events)[-1] == ("end", False, 2, OVERLOADED)
    assert len(provider.calls) == 3


@pytest.mark.parametrize(
    "error",
    [
        "api.example: 401 Unauthorized — check OPENAI_API_KEY",
        "api.example: 503 Service Unavailable — the server is failing or overloaded; "
        "gave up after 4 attempts",
        "context_overflow: api.example: 400 Bad Request: prompt is too long",
        "api.example: the server reported an error mid-stream: "
        '{"type": "error", "error": {"type": "invalid_request_error"}}',
        "api.example: 400 Bad Request: rate limit field is invalid",
        "the MCP client did not answer: Request 'sampling/createMessage' timed out",
    ],
)
async def test_errors_that_would_fail_again_are_not_retried(error: str):
    agent, provider = make_agent([reply("", error=error)], retry=RetrySettings(base_delay=0.01))
    events: list[AgentEvent] = []
    agent.subscribe(events.append)
    with anyio.fail_after(5):
        new = await agent.prompt("go")
    assert narrow(new[-1], AssistantMessage).error_message == error
    assert retry_events(events) == []
    assert len(provider.calls) == 1


async def test_abort_while_waiting_to_retry_ends_the_run_at_once():
    agent, provider = make_agent(
        [reply("", error=OVERLOADED), reply("never")], retry=RetrySettings(base_delay=30)
    )

    def listener(event: AgentEvent) -> None:
        if isinstance(event, AutoRetryStartEvent):
            agent.abort()

    agent.subscribe(listener)
    events: list[AgentEvent] = []
    agent.subscribe(events.append)
    with anyio.fail_after(5):
        new = await agent.prompt("go")
    assert narrow(new[-1], AssistantMessage).stop_reason == StopReason.ERROR
    assert retry_events(events)[-1] == ("end", False, 1, "aborted while waiting")
    assert len(provider.calls) == 1
    assert not agent.is_running


async def test_a_run_aborted_while_waiting_to_retry_says_so_as_any_aborted_run() -> None:
    """A run's error said an abort as "aborted: REASON" (its answer's), but a run cancelled
    while it waited to retry said "REASON (the model's error)", and one cancelled before its
    task began the bare reason: now each begins "aborted: REASON"."""
    from mcp_agent.manifests import AgentManifest
    from mcp_agent.runtime.runs import RunManager

    session = Session()
    agent, _ = make_agent(
        [reply("", error=OVERLOADED), reply("never")],
        session=session,
        retry=RetrySettings(base_delay=30),
    )
    assert isinstance(agent, SessionAgent)

    waiting = anyio.Event()

    async def build(run_id: str) -> tuple[SessionAgent, str]:
        return agent, "scripted"

    agent.subscribe(lambda event: waiting.set() if isinstance(event, AutoRetryStartEvent) else None)
    async with anyio.create_task_group() as group:
        runs = RunManager(group)
        run = await runs.start(
            session=session, manifest=AgentManifest(name="default"), prompt="go", build_agent=build
        )
        with anyio.fail_after(10):
            await waiting.wait()
            run.abort("cancelled with agent_cancel")
            await run.done.wait()
    assert run.status == "aborted", run.error
    assert (run.error or "").startswith("aborted: cancelled with agent_cancel ("), run.error
    assert OVERLOADED in (run.error or "")


async def test_an_abort_just_after_the_failed_answer_stops_the_retry():
    agent, provider = make_agent(
        [reply("", error=OVERLOADED), reply("never")], retry=RetrySettings(base_delay=0.01)
    )

    async def listener(event: AgentEvent) -> None:
        if isinstance(event, AgentEndEvent):
            await anyio.lowlevel.checkpoint()  # as a listener that sends a notification does
            agent.abort("stop")

    agent.subscribe(listener)
    with anyio.fail_after(5):
        new = await agent.prompt("go")
    assert len(provider.calls) == 1
    assert narrow(new[-1], AssistantMessage).stop_reason == StopReason.ERROR


async def test_the_retry_count_starts_again_after_an_answer_that_worked():
    agent, provider = make_agent(
        [
            reply(tool_call("bash")),
            reply("", error=OVERLOADED),
            reply(tool_call("bash")),  # the retry works, and the run goes on
            reply("", error=OVERLOADED),
            reply("Done."),
        ],
        retry=RetrySettings(max_retries=1, base_delay=0.01),
    )
    events: list[AgentEvent] = []
    agent.subscribe(events.append)
    with anyio.fail_after(5):
        new = await agent.prompt("go")
    assert narrow(new[-1], AssistantMessage).text == "Done."
    assert retry_events(events) == [
        ("start", 1, 1, 0.01),
        ("end", True, 1, None),
        ("start", 1, 1, 0.01),
        ("end", True, 1, None),
    ]
    check_tool_results(agent.state.messages)
    assert len(provider.calls) == 5


@pytest.mark.parametrize(
    "error",
    [
        "api.example: the server overloaded mid-stream: {'type': 'overloaded_error'}",
        "api.example: the server failed mid-stream: try again (server_error)",
        "api.example: the server rate limited the request mid-stream: slow down (429)",
        "api.example: the connection broke off mid-stream (peer closed); the partial response "
        "is kept",
        "api.example: the stream ended before message_stop; the answer is incomplete",
        "api.example: timed out waiting for the response (ReadTimeout)",
    ],
)
def test_passing_errors_in_our_providers_words(error: str):
    assert is_transient_error(AssistantMessage(stop_reason=StopReason.ERROR, error_message=error))


@pytest.mark.parametrize(
    "error",
    [
        "api.example: the server reported an error mid-stream: bad tool call at line 429",
        "api.example: the server reported an error mid-stream: 500 tools is over the limit",
        "api.example: the server reported an error mid-stream: the rate limit field is unknown",
        "api.example: the server failed mid-stream: insufficient_quota",
    ],
)
def test_an_error_s_own_text_says_no_passing_fault(error: str) -> None:
    assert not is_transient_error(
        AssistantMessage(stop_reason=StopReason.ERROR, error_message=error)
    )


async def test_a_session_out_of_reach_is_logged_in_one_line_per_failed_save(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Saving the failed run's last message fails too when the session's storage is what
    failed: each failure was logged with a full traceback, one per run while the database
    stayed down. It is one line saying why; the transcript keeps the message."""

    class Unsaved(Agent):
        async def _save(self, message: BaseMessage) -> None:
            raise RuntimeError("cannot reach the session database")

    agent = Unsaved(model=scripted_model(), stream_fn=ScriptedProvider([reply("hi")]))
    with caplog.at_level(logging.INFO, logger="mcp_agent.agent"):
        new = await agent.prompt("go")
    assert narrow(new[-1], AssistantMessage).error_message == "cannot reach the session database"
    said = [r for r in caplog.records if r.name == "mcp_agent.agent"]
    assert said, "the failed save was not said"
    for record in said:
        assert record.exc_info is None, record.getMessage()
        assert "cannot reach the session database" in record.getMessage()
        assert "\n" not in record.getMessage()
    assert roles(agent.state.messages)[-1] == "assistant"


class DownFor(InMemorySessionStorage):
    """A session whose database refuses the next ``refusals`` writes as out of reach, with
    nothing written (a PostgreSQL restart or failover)."""

    def __init__(self, refusals: int) -> None:
        super().__init__()
        self.refusals = refusals

    def append_entry(self, entry: SessionEntry) -> SessionEntry:
        if self.refusals:
            self.refusals -= 1
            raise Unreachable("cannot reach the session database db: restarting", "restarting")
        return super().append_entry(entry)


async def test_a_run_waits_out_a_short_database_outage_and_keeps_its_answer() -> None:
    """A run whose save met the database restarting ended there, its answer in no session."""
    storage = DownFor(0)
    session = Session(storage)
    agent, _ = make_agent([reply("the answer")], session=session)
    storage.refusals = 3  # the run's first writes meet the outage
    new = await agent.prompt("go")
    assert narrow(new[-1], AssistantMessage).error_message is None
    assert [text_of(m) for m in session.build_context().messages] == ["go", "the answer"]
    assert storage.refusals == 0
    # Each setting once: what a try wrote before the outage was not written again.
    kinds = [type(e).__name__ for e in session.get_entries() if not isinstance(e, MessageEntry)]
    assert len(kinds) == len(set(kinds)), kinds


async def test_settings_written_in_part_before_an_outage_are_not_written_twice() -> None:
    storage = DownFor(0)
    session = Session(storage)
    agent, _ = make_agent([reply("the answer")], session=session)
    real = storage.append_entry
    writes: list[str] = []

    def second_refused(entry: SessionEntry) -> SessionEntry:
        writes.append(type(entry).__name__)
        if len(writes) == 2:  # the model change written, the next setting refused
            raise Unreachable("cannot reach the session database db: restarting", "restarting")
        return real(entry)

    storage.append_entry = second_refused  # type: ignore[method-assign]
    await agent.prompt("go")
    kinds = [type(e).__name__ for e in session.get_entries() if not isinstance(e, MessageEntry)]
    assert kinds.count("ModelChangeEntry") == 1, kinds
    assert len(writes) > len(session.get_entries())  # the refused one was tried again


async def test_a_run_ends_on_a_database_outage_longer_than_its_wait(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(session_agent, "OUTAGE_WAIT_S", 0.3)
    storage = DownFor(0)
    session = Session(storage)
    agent, _ = make_agent([reply("the answer")], session=session)
    storage.refusals = 1_000
    new = await agent.prompt("go")
    assert "cannot reach the session database" in (
        narrow(new[-1], AssistantMessage).error_message or ""
    )
    assert session.build_context().messages == []
