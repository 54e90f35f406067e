"""The agent loop with the scripted provider: event order, tools, hooks, queues, abort, errors."""

from __future__ import annotations

from typing import Any, cast

import anyio
import anyio.lowlevel
import pytest
from agent_support import check_tool_results
from narrow import narrow, present

from mcp_agent.abort import AbortController, AbortSignal
from mcp_agent.events import (
    AgentEndEvent,
    AgentEndReason,
    AgentEvent,
    AutoRetryStartEvent,
    MessageEndEvent,
    MessageStartEvent,
    MessageUpdateEvent,
    TextDeltaEvent,
    ThinkingDeltaEvent,
    ToolExecutionEndEvent,
    ToolExecutionStartEvent,
    ToolExecutionUpdateEvent,
    TurnEndEvent,
    describe_event,
)
from mcp_agent.loop import (
    AfterToolCallContext,
    AfterToolCallResult,
    AgentLoopConfig,
    BeforeToolCallContext,
    BeforeToolCallResult,
    agent_loop,
    agent_loop_continue,
)
from mcp_agent.messages import (
    AssistantMessage,
    BaseMessage,
    CustomMessage,
    StopReason,
    TextContent,
    ToolExecutionMode,
    ToolResultMessage,
    Usage,
    UserMessage,
)
from mcp_agent.providers.base import LlmContext, StreamFn, StreamOptions
from mcp_agent.providers.scripted import (
    ScriptedProvider,
    ScriptedResponse,
    provider_error,
    reply,
    scripted_model,
    thinking,
    tool_call,
)
from mcp_agent.state import AgentContext
from mcp_agent.tools import AgentTool, AgentToolResult

pytestmark = pytest.mark.anyio

COMMAND_SCHEMA = {
    "type": "object",
    "properties": {"command": {"type": "string"}},
    "required": ["command"],
    "additionalProperties": False,
}
ANY_SCHEMA: dict[str, Any] = {"type": "object"}


def make_tool(
    name: str, execute: Any, schema: dict[str, Any] | None = None, **kw: Any
) -> AgentTool:
    return AgentTool(
        name=name,
        description=f"the {name} tool",
        parameters=schema or ANY_SCHEMA,
        execute=execute,
        **kw,
    )


async def ls_execute(tool_call_id, params, signal, on_update, context):
    return AgentToolResult.text("file1.md\nfile2.md\n")


BASH = make_tool("bash", ls_execute, COMMAND_SCHEMA)


def user(text: str) -> UserMessage:
    return UserMessage(content=[TextContent(text=text)])


class Recorder:
    def __init__(self) -> None:
        self.events: list[AgentEvent] = []

    def __call__(self, event: AgentEvent) -> None:
        self.events.append(event)

    @property
    def types(self) -> list[str]:
        return [e.type for e in self.events]

    def compact(self) -> list[str]:
        """Event types, message_update with the provider event and message events with the
        role: 'message_update:text_delta', 'message_end:toolResult'."""
        out = []
        for event in self.events:
            if event.type == "message_update":
                update = narrow(event, MessageUpdateEvent)
                out.append(f"message_update:{update.assistant_message_event.type}")
            elif event.type in ("message_start", "message_end"):
                assert isinstance(event, MessageStartEvent | MessageEndEvent)
                out.append(f"{event.type}:{event.message.role}")
            elif event.type.startswith("tool_execution"):
                assert isinstance(
                    event,
                    ToolExecutionStartEvent | ToolExecutionUpdateEvent | ToolExecutionEndEvent,
                )
                out.append(f"{event.type}:{event.tool_call_id}")
            else:
                out.append(event.type)
        return out

    @property
    def end(self) -> AgentEndEvent:
        last = self.events[-1]
        assert isinstance(last, AgentEndEvent)
        return last


def config_for(provider: ScriptedProvider, **kw: Any) -> AgentLoopConfig:
    kw.setdefault("tools", [BASH])
    return AgentLoopConfig(model=scripted_model(), stream_fn=provider, **kw)


async def run(
    provider: ScriptedProvider, prompt: str = "go", **kw: Any
) -> tuple[list[BaseMessage], Recorder]:
    recorder = Recorder()
    context = AgentContext(system_prompt="You are terse.", messages=[])
    messages = await agent_loop([user(prompt)], context, config_for(provider, **kw), recorder)
    return messages, recorder


# --- the seed's Example 1 ---------------------------------------------------------------------


async def test_example_1_event_order_and_transcript():
    provider = ScriptedProvider(
        [
            reply(
                "I'll check the directory for you.",
                tool_call("bash", {"command": "ls -la"}, id="tc_123"),
            ),
            reply("There are two files: file1.md and file2.md."),
        ],
        chunk_size=1000,  # one delta per block
    )
    seen_by_transform: list[list[str]] = []

    async def transform_context(messages, signal):
        seen_by_transform.append([m.role for m in messages])
        return messages

    messages, recorder = await run(
        provider, "Hello, what's in the current directory?", transform_context=transform_context
    )

    assert recorder.compact() == [
        "agent_start",
        "turn_start",
        "message_start:user",
        "message_end:user",
        "message_start:assistant",
        "message_update:text_start",
        "message_update:text_delta",
        "message_update:text_end",
        "message_update:toolcall_start",
        "message_update:toolcall_delta",
        "message_update:toolcall_end",
        "message_end:assistant",
        "tool_execution_start:tc_123",
        "tool_execution_end:tc_123",
        "message_start:toolResult",
        "message_end:toolResult",
        "turn_end",
        "turn_start",
        "message_start:assistant",
        "message_update:text_start",
        "message_update:text_delta",
        "message_update:text_end",
        "message_end:assistant",
        "turn_end",
        "agent_end",
    ]
    # The seed's final conversation history, plus the model's answer to the tool result.
    user_message, assistant, result, answer = messages
    assert user_message.to_json_dict()["content"] == [
        {"type": "text", "text": "Hello, what's in the current directory?"}
    ]
    assert assistant.to_json_dict()["content"] == [
        {"type": "text", "text": "I'll check the directory for you."},
        {"type": "toolCall", "id": "tc_123", "name": "bash", "arguments": {"command": "ls -la"}},
    ]
    assert isinstance(assistant, AssistantMessage)
    assert assistant.stop_reason == StopReason.TOOL_USE
    assert assistant.usage.input > 0 and assistant.usage.output > 0
    assert isinstance(result, ToolResultMessage)
    assert (result.tool_call_id, result.tool_name, result.text, result.is_error) == (
        "tc_123",
        "bash",
        "file1.md\nfile2.md\n",
        False,
    )
    assert isinstance(answer, AssistantMessage)
    assert answer.stop_reason == StopReason.STOP
    assert recorder.end.messages == messages
    assert recorder.end.reason == AgentEndReason.COMPLETED
    # transform_context ran before each model call; the provider saw the converted context.
    assert seen_by_transform == [["user"], ["user", "assistant", "toolResult"]]
    first, second = provider.calls
    assert first.system_prompt == "You are terse."
    assert [t.name for t in present(first.tools)] == ["bash"]
    assert [m.role for m in second.messages] == ["user", "assistant", "toolResult"]
    turn_ends = [narrow(e, TurnEndEvent) for e in recorder.events if e.type == "turn_end"]
    assert turn_ends[0].message is assistant and turn_ends[0].tool_results == [result]
    assert all(describe_event(e) for e in recorder.events)


def test_event_lines_keep_a_model_s_control_characters_inert():
    """What a model or a server wrote reaches a terminal or a progress line as one line that
    does nothing there: a screen clear is shown as an escape, a line break as a space."""
    said = "done\x1b[2J\r\nrm -rf \u202e/"
    shown = "done\\x1b[2J rm -rf \\u202e/"
    ended = MessageEndEvent(message=AssistantMessage(content=[TextContent(text=said)]))
    retry = AutoRetryStartEvent(attempt=1, max_attempts=3, delay=2, error_message=said)
    assert describe_event(ended) == f"assistant: {shown}"
    assert describe_event(retry) == f"model error, retry 1/3 in 2 s: {shown}"
    call = ToolExecutionStartEvent(tool_call_id="c", tool_name="bash", args={"cmd": said})
    line = describe_event(call)
    assert "\x1b" not in line and "\n" not in line and "\u202e" not in line, line
    # A streamed chunk too, and one chunk may be a whole answer: the line stays short.
    answer = AssistantMessage(content=[TextContent(text=said)])
    chunk = TextDeltaEvent(partial=answer, delta=said + " word" * 100_000)
    line = describe_event(MessageUpdateEvent(message=answer, assistant_message_event=chunk))
    assert line.startswith(f"text_delta: {shown} word") and len(line) <= 220, line[:300]


async def test_message_updates_carry_each_delta():
    provider = ScriptedProvider([reply(thinking("hmm, let me see"), "abcdefghij")], chunk_size=4)
    _, recorder = await run(provider)
    updates = [narrow(e, MessageUpdateEvent) for e in recorder.events if e.type == "message_update"]
    deltas = [
        narrow(e.assistant_message_event, TextDeltaEvent).delta
        for e in updates
        if e.assistant_message_event.type == "text_delta"
    ]
    assert deltas == ["abcd", "efgh", "ij"]
    thoughts = [e for e in updates if e.assistant_message_event.type == "thinking_delta"]
    assert (
        "".join(narrow(e.assistant_message_event, ThinkingDeltaEvent).delta for e in thoughts)
        == "hmm, let me see"
    )
    assert all(isinstance(e.message, AssistantMessage) for e in updates)


# --- tool execution -----------------------------------------------------------------------------


async def test_parallel_tools_run_concurrently():
    """Each tool waits for the other to start: only truly concurrent execution finishes."""
    started = {"a": anyio.Event(), "b": anyio.Event()}
    finished: list[str] = []

    def waiter(me: str, other: str):
        async def execute(tool_call_id, params, signal, on_update, context):
            started[me].set()
            await started[other].wait()
            if me == "a":
                await anyio.sleep(0.01)  # finish last, yet be recorded first
            finished.append(me)
            return AgentToolResult.text(f"{me} done")

        return execute

    provider = ScriptedProvider(
        [reply(tool_call("a", id="1"), tool_call("b", id="2")), reply("both done")]
    )
    with anyio.fail_after(5):
        messages, recorder = await run(
            provider, tools=[make_tool("a", waiter("a", "b")), make_tool("b", waiter("b", "a"))]
        )
    assert finished == ["b", "a"]
    results = [m for m in messages if isinstance(m, ToolResultMessage)]
    assert [r.text for r in results] == ["a done", "b done"]  # in the order of the calls
    tool_events = [
        e for e in recorder.compact() if e.startswith(("tool_", "message_end:toolResult"))
    ]
    assert tool_events == [
        "tool_execution_start:1",
        "tool_execution_start:2",
        "tool_execution_end:2",
        "tool_execution_end:1",
        "message_end:toolResult",
        "message_end:toolResult",
    ]


def _concurrency_probe():
    state = {"running": 0, "max": 0}

    async def execute(tool_call_id, params, signal, on_update, context):
        state["running"] += 1
        state["max"] = max(state["max"], state["running"])
        await anyio.sleep(0.01)
        state["running"] -= 1
        return AgentToolResult.text(tool_call_id)

    return state, execute


async def test_sequential_mode_runs_one_at_a_time_in_order():
    state, execute = _concurrency_probe()
    provider = ScriptedProvider(
        [reply(tool_call("t", id="1"), tool_call("t", id="2"), tool_call("t", id="3")), reply("ok")]
    )
    messages, recorder = await run(
        provider, tools=[make_tool("t", execute)], tool_execution_mode=ToolExecutionMode.SEQUENTIAL
    )
    assert state["max"] == 1
    tool_events = [e for e in recorder.compact() if e.startswith(("tool_", "message_end:toolR"))]
    assert tool_events == [
        "tool_execution_start:1",
        "tool_execution_end:1",
        "message_end:toolResult",
        "tool_execution_start:2",
        "tool_execution_end:2",
        "message_end:toolResult",
        "tool_execution_start:3",
        "tool_execution_end:3",
        "message_end:toolResult",
    ]
    assert [m.text for m in messages if isinstance(m, ToolResultMessage)] == ["1", "2", "3"]


async def test_a_sequential_tool_makes_the_whole_batch_sequential():
    state, execute = _concurrency_probe()
    tools = [
        make_tool("fast", execute),
        make_tool("careful", execute, execution_mode=ToolExecutionMode.SEQUENTIAL),
    ]
    both = reply(tool_call("fast", id="1"), tool_call("fast", id="2"), tool_call("careful", id="3"))
    await run(ScriptedProvider([both, reply("ok")]), tools=tools)
    assert state["max"] == 1

    state, execute = _concurrency_probe()
    tools = [make_tool("fast", execute)]
    parallel = reply(tool_call("fast", id="1"), tool_call("fast", id="2"))
    await run(ScriptedProvider([parallel, reply("ok")]), tools=tools)
    assert state["max"] == 2


async def test_unknown_tool_invalid_arguments_and_exceptions_become_error_results():
    async def broken(tool_call_id, params, signal, on_update, context):
        raise RuntimeError("disk on fire")

    provider = ScriptedProvider(
        [
            reply(
                tool_call("nope", id="1"),
                tool_call("bash", {"command": ["ls"]}, id="2"),
                tool_call("bash", {}, id="3"),
                tool_call("broken", id="4"),
                tool_call("bash", {"command": "ls"}, id="5"),
            ),
            reply("sorry"),
        ]
    )
    messages, recorder = await run(provider, tools=[BASH, make_tool("broken", broken)])
    results = {m.tool_call_id: m for m in messages if isinstance(m, ToolResultMessage)}
    assert results["1"].is_error and results["1"].text == "Tool nope not found"
    assert results["2"].is_error and "command: ['ls'] is not of type 'string'" in results["2"].text
    assert results["3"].is_error and "'command' is a required property" in results["3"].text
    assert results["4"].is_error and results["4"].text == "disk on fire"
    assert not results["5"].is_error
    # The loop went on: the model saw the errors and answered.
    assert narrow(messages[-1], AssistantMessage).text == "sorry"
    seen = [m for m in provider.calls[1].messages if isinstance(m, ToolResultMessage)]
    assert [m.is_error for m in seen] == [True, True, True, True, False]
    ends = [
        narrow(e, ToolExecutionEndEvent) for e in recorder.events if e.type == "tool_execution_end"
    ]
    assert [e.is_error for e in ends] == [True, True, True, True, False]


async def test_arguments_are_converted_to_the_schema_s_types_as_pi_does():
    """A model that sends "5" for an integer or "true" for a boolean gets its call run (pi-ai
    converts primitives before it validates); a nullable property's null stays null."""
    got = []

    async def execute(tool_call_id, params, signal, on_update, context):
        got.append(params)
        return AgentToolResult.text("ran")

    schema = {
        "type": "object",
        "properties": {
            "n": {"type": "integer"},
            "f": {"type": "number"},
            "b": {"type": "boolean"},
            "s": {"type": "string"},
            "items": {"type": "array", "items": {"type": "integer"}},
            "maybe": {"anyOf": [{"type": "string"}, {"type": "null"}]},
            "left_out": {"type": ["string", "null"]},
        },
        "required": ["n", "left_out"],
        "additionalProperties": False,
    }
    arguments = {"n": "5", "f": "2.5", "b": "false", "s": 3, "items": ["1", 2], "maybe": None}
    provider = ScriptedProvider([reply(tool_call("typed", arguments)), reply("ok")])
    messages, _ = await run(provider, tools=[make_tool("typed", execute, schema)])
    assert not narrow(messages[2], ToolResultMessage).is_error
    expected = {"n": 5, "f": 2.5, "b": False, "s": "3", "items": [1, 2], "maybe": None}
    assert got == [{**expected, "left_out": None}]
    assert arguments["n"] == "5"  # the model's call, as the transcript keeps it


def test_a_tool_whose_schema_is_not_json_schema_says_so_to_the_model():
    """A downstream server's schema jsonschema cannot use failed every call with words such as
    "'int' object is not iterable" or "maximum recursion depth exceeded"."""
    from mcp_agent.tools import ToolArgumentsError, validate_tool_arguments

    async def execute(tool_call_id, params, signal, on_update, context):
        return AgentToolResult.text("ran")

    bad_type = {"type": "object", "properties": {"x": {"type": 12}}}
    circle = {
        "type": "object",
        "properties": {"x": {"$ref": "#/$defs/a"}},
        "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}},
    }
    said = []
    for schema in (bad_type, circle):
        with pytest.raises(ToolArgumentsError) as raised:
            validate_tool_arguments(make_tool("odd", execute, schema), {"x": 1})
        said.append(str(raised.value))
    prefix = "odd cannot be called: its input schema is not valid JSON Schema: "
    assert said == [
        prefix + "properties/x/type: 12 is not valid under any of the given schemas",
        prefix + "its $refs refer to each other without end, or it nests too deep",
    ]


def test_a_pattern_that_backtracks_without_end_is_refused_not_matched_for_ever():
    """A downstream schema's catastrophic pattern against a model's string: Python's `re` took
    minutes, holding the event loop (and the GIL) all along. The match now has a time limit,
    and the call is refused saying why; patterns that match in time behave as before."""
    from mcp_agent.tools import ToolArgumentsError, validate_tool_arguments

    async def execute(tool_call_id, params, signal, on_update, context):
        return AgentToolResult.text("ran")

    schema = {
        "type": "object",
        "properties": {"word": {"type": "string", "pattern": "^(a|aa)+$"}},
        "patternProperties": {"^(b|bb)+$": {"type": "integer"}},
    }
    tool = make_tool("catastrophic", execute, schema)
    assert validate_tool_arguments(tool, {"word": "aaaa", "bbb": 3}) == {"word": "aaaa", "bbb": 3}
    with pytest.raises(ToolArgumentsError, match="does not match '\\^\\(a\\|aa\\)\\+\\$'"):
        validate_tool_arguments(tool, {"word": "ab"})
    with pytest.raises(ToolArgumentsError, match="bbb: 'x' is not of type 'integer'"):
        validate_tool_arguments(tool, {"bbb": "x"})
    for arguments, what in (
        ({"word": "a" * 60 + "b"}, "word: the value"),
        ({"b" * 60 + "c": 1}, f"(arguments): the property name '{'b' * 60}c'"),
    ):
        with pytest.raises(ToolArgumentsError) as raised:
            validate_tool_arguments(tool, arguments)
        assert f"{what} could not be checked against the pattern" in str(raised.value)
        assert "backtracks without end" in str(raised.value)


def test_the_pattern_matches_of_one_call_have_one_time_limit_in_all(monkeypatch):
    """The limit was per match: an array of strings the catastrophic pattern meets was matched
    item by item (by is_valid and again by iter_errors), each up to the limit, and held the
    event loop 9 s for 20 items. All of a call's matches now share one limit: past it the
    rest are refused without being tried."""
    import regex

    from mcp_agent.tools import ToolArgumentsError, validate_tool_arguments

    async def execute(tool_call_id, params, signal, on_update, context):
        return AgentToolResult.text("ran")

    tried: list[str] = []
    search = regex.search

    def counted(pattern, text, **kwargs):
        tried.append(text)
        return search(pattern, text, **kwargs)

    monkeypatch.setattr(regex, "search", counted)
    item = {"type": "string", "pattern": "^(a|aa)+$"}
    schema = {"type": "object", "properties": {"words": {"type": "array", "items": item}}}
    tool = make_tool("catastrophic", execute, schema)
    with pytest.raises(ToolArgumentsError) as raised:
        validate_tool_arguments(tool, {"words": ["a" * 60 + "b"] * 40})
    assert "words.0: the value could not be checked against the pattern" in str(raised.value)
    # Each match tried runs out its 0.25 s: four fit in the call's second, not eighty.
    assert 1 <= len(tried) <= 6
    # The next call has its own second, and strings that match take no time of it.
    tried.clear()
    words = ["a" * 30] * 40
    assert validate_tool_arguments(tool, {"words": words}) == {"words": words}
    assert len(tried) == 40


def test_the_validators_kept_for_tools_called_are_bounded():
    """Each run's tools are new objects (a downstream tool's schema is copied for every run):
    one validator was kept for each tool called in each run, for as long as the server ran."""
    from mcp_agent import tools

    async def execute(tool_call_id, params, signal, on_update, context):
        return AgentToolResult.text("ran")

    for _ in range(2000):
        schema = {"type": "object", "properties": {"n": {"type": "integer"}}}
        tool = make_tool("run_s_copy", execute, schema)
        assert tools.validate_tool_arguments(tool, {"n": 1}) == {"n": 1}
    assert len(tools._validators) <= 1000


async def test_prepare_arguments_runs_before_validation():
    got = {}

    async def execute(tool_call_id, params, signal, on_update, context):
        got.update(params)
        return AgentToolResult.text("ok")

    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    tool = make_tool("count", execute, schema, prepare_arguments=lambda a: {"n": int(a["n"])})
    provider = ScriptedProvider([reply(tool_call("count", {"n": "3"})), reply("ok")])
    messages, _ = await run(provider, tools=[tool])
    assert got == {"n": 3}
    assert not narrow(messages[2], ToolResultMessage).is_error


async def test_tool_calls_of_an_answer_cut_off_at_the_output_limit_do_not_run():
    ran = []

    async def execute(tool_call_id, params, signal, on_update, context):
        ran.append(params)
        return AgentToolResult.text("ran")

    cut = reply(
        tool_call("bash", {"command": "rm -rf /tmp/x"}, id="1"), stop_reason=StopReason.LENGTH
    )
    again = reply(tool_call("bash", {"command": "ls"}, id="2"))
    provider = ScriptedProvider([cut, again, reply("done")])
    messages, _ = await run(provider, tools=[make_tool("bash", execute, BASH.parameters)])
    results = {m.tool_call_id: m for m in messages if isinstance(m, ToolResultMessage)}
    assert results["1"].is_error and "cut off at the output token limit" in results["1"].text
    assert "Issue the call again" in results["1"].text
    assert ran == [{"command": "ls"}]  # only the call of the complete answer ran
    assert narrow(messages[-1], AssistantMessage).text == "done"


async def test_a_strict_schemas_nullable_arguments_may_be_left_out():
    """Strict form lists every property as required, the optional ones nullable: a model not
    in strict mode leaves those out, and they arrive as null; a required non-null one is still
    required."""
    got = []

    async def execute(tool_call_id, params, signal, on_update, context):
        got.append(params)
        return AgentToolResult.text("ok")

    schema = {
        "type": "object",
        "properties": {
            "prompt": {"type": "string"},
            "session": {"anyOf": [{"type": "string"}, {"type": "null"}]},
            "wait": {"type": ["boolean", "null"]},
        },
        "required": ["prompt", "session", "wait"],
        "additionalProperties": False,
    }
    tool = make_tool("ask", execute, schema)
    calls = reply(
        tool_call("ask", {"prompt": "hi"}, id="1"), tool_call("ask", {"wait": True}, id="2")
    )
    messages, _ = await run(ScriptedProvider([calls, reply("ok")]), tools=[tool])
    results = {m.tool_call_id: m for m in messages if isinstance(m, ToolResultMessage)}
    assert got == [{"prompt": "hi", "session": None, "wait": None}]
    assert not results["1"].is_error
    assert results["2"].is_error and "'prompt' is a required property" in results["2"].text


async def test_tool_updates_are_emitted_between_start_and_end():
    async def execute(tool_call_id, params, signal, on_update, context):
        for i in range(3):
            on_update(AgentToolResult.text(f"step {i}"))
            await anyio.lowlevel.checkpoint()
        return AgentToolResult.text("done", details={"steps": 3})

    provider = ScriptedProvider([reply(tool_call("work", id="w")), reply("ok")])
    messages, recorder = await run(provider, tools=[make_tool("work", execute)])
    tool_events = [e for e in recorder.events if e.type.startswith("tool_execution")]
    assert [e.type for e in tool_events] == [
        "tool_execution_start",
        "tool_execution_update",
        "tool_execution_update",
        "tool_execution_update",
        "tool_execution_end",
    ]
    assert [
        narrow(e, ToolExecutionUpdateEvent).partial_result.content[0].text for e in tool_events[1:4]
    ] == [
        "step 0",
        "step 1",
        "step 2",
    ]
    assert narrow(messages[2], ToolResultMessage).details == {"steps": 3}
    assert narrow(tool_events[-1], ToolExecutionEndEvent).result.details == {"steps": 3}


async def test_tool_gets_the_tool_context_and_usage_is_kept():
    seen = []

    async def execute(tool_call_id, params, signal, on_update, context):
        seen.append((tool_call_id, context, isinstance(signal, AbortSignal)))
        return AgentToolResult.text(
            "sub-agent answer", usage=Usage(input=10, output=5, total_tokens=15)
        )

    provider = ScriptedProvider([reply(tool_call("sub", id="s1")), reply("ok")])
    messages, _ = await run(provider, tools=[make_tool("sub", execute)], tool_context={"cwd": "/"})
    assert seen == [("s1", {"cwd": "/"}, True)]
    assert present(narrow(messages[2], ToolResultMessage).usage).total_tokens == 15
    assert messages[2].to_json_dict()["usage"]["totalTokens"] == 15


# --- hooks --------------------------------------------------------------------------------------


async def test_before_hook_can_block_with_a_reason():
    ran = []

    async def execute(tool_call_id, params, signal, on_update, context):
        ran.append(params["command"])
        return AgentToolResult.text("ran")

    seen: list[BeforeToolCallContext] = []
    roles_seen: list[list[str]] = []

    async def before(ctx: BeforeToolCallContext, signal: AbortSignal):
        seen.append(ctx)
        roles_seen.append([m.role for m in ctx.context.messages])
        if "rm" in ctx.args["command"]:
            return BeforeToolCallResult(block=True, reason="rm is not allowed here")
        return None

    provider = ScriptedProvider(
        [
            reply(
                tool_call("bash", {"command": "rm -rf /"}, id="1"),
                tool_call("bash", {"command": "ls"}, id="2"),
            ),
            reply("ok"),
        ]
    )
    messages, _ = await run(
        provider, tools=[make_tool("bash", execute, COMMAND_SCHEMA)], before_tool_call=before
    )
    assert ran == ["ls"]
    blocked, allowed = (m for m in messages if isinstance(m, ToolResultMessage))
    assert blocked.is_error and blocked.text == "rm is not allowed here"
    assert not allowed.is_error
    assert seen[0].tool_call.id == "1" and seen[0].assistant_message is messages[1]
    assert roles_seen[0] == ["user", "assistant"]


async def test_before_hook_block_without_reason_and_failing_hooks():
    def before(ctx, signal):  # sync hooks work too
        if ctx.tool_call.id == "1":
            return BeforeToolCallResult(block=True)
        raise ValueError("hook crashed")

    provider = ScriptedProvider(
        [
            reply(
                tool_call("bash", {"command": "a"}, id="1"),
                tool_call("bash", {"command": "b"}, id="2"),
            ),
            reply("ok"),
        ]
    )
    messages, _ = await run(provider, before_tool_call=before)
    first, second = (m for m in messages if isinstance(m, ToolResultMessage))
    assert first.text == "Tool execution was blocked" and first.is_error
    assert second.text == "hook crashed" and second.is_error


async def test_after_hook_overrides_content_details_error_and_terminate():
    seen: list[AfterToolCallContext] = []

    async def after(ctx: AfterToolCallContext, signal: AbortSignal):
        seen.append(ctx)
        return AfterToolCallResult(
            content=[TextContent(text="[redacted]")],
            details={"redacted": True},
            is_error=True,
            terminate=True,
        )

    provider = ScriptedProvider([reply(tool_call("bash", {"command": "cat secrets"}, id="1"))])
    messages, recorder = await run(provider, after_tool_call=after)
    result = messages[-1]
    assert isinstance(result, ToolResultMessage)
    assert (result.text, result.details, result.is_error) == (
        "[redacted]",
        {"redacted": True},
        True,
    )
    assert narrow(seen[0].result.content[0], TextContent).text == "file1.md\nfile2.md\n"
    assert not seen[0].is_error
    assert seen[0].args == {"command": "cat secrets"}
    end = narrow(
        next(e for e in recorder.events if e.type == "tool_execution_end"), ToolExecutionEndEvent
    )
    assert end.is_error and end.result.content[0].text == "[redacted]"
    assert recorder.end.reason == AgentEndReason.TERMINATED
    assert len(provider.calls) == 1  # terminate: no second model call


async def test_after_hook_returning_none_keeps_the_result():
    provider = ScriptedProvider([reply(tool_call("bash", {"command": "ls"})), reply("ok")])
    messages, _ = await run(provider, after_tool_call=lambda ctx, signal: None)
    result = narrow(messages[2], ToolResultMessage)
    assert result.text == "file1.md\nfile2.md\n" and not result.is_error


async def test_hooks_and_tools_that_answer_in_the_wrong_shape_give_error_results() -> None:
    """A hook's verdict that is not its result type (a dict, as pi's TypeScript hooks return
    objects), or a result whose content is no list of blocks, gave an error result only by
    luck (an AttributeError's words) or ended the whole run, said as a task group's
    "unhandled errors". Each is now its call's error result, naming what was wrong (an after
    hook's broken verdict never passes the tool's result on unfiltered), and the run goes on."""

    async def wrong(tool_call_id, params, signal, on_update, context):
        return AgentToolResult(content=cast(Any, "plain text"))

    def before(ctx: BeforeToolCallContext, signal: AbortSignal) -> Any:
        return {"block": True} if ctx.tool_call.id == "1" else None

    def after(ctx: AfterToolCallContext, signal: AbortSignal) -> Any:
        if ctx.tool_call.id == "2":
            return {"content": "[redacted]"}
        if ctx.tool_call.id == "3":
            return AfterToolCallResult(content=cast(Any, "[redacted]"))
        return None

    provider = ScriptedProvider(
        [
            reply(*(tool_call("bash", {"command": "cat secrets"}, id=str(i)) for i in (1, 2, 3))),
            reply(tool_call("wrong", id="4")),
            reply("ok"),
        ]
    )
    tools = [BASH, make_tool("wrong", wrong)]
    messages, recorder = await run(
        provider, tools=tools, before_tool_call=before, after_tool_call=after
    )
    results = [m for m in messages if isinstance(m, ToolResultMessage)]
    assert [r.is_error for r in results] == [True] * 4
    assert "before_tool_call hook returned dict" in results[0].text
    assert "after_tool_call hook returned dict" in results[1].text
    assert "Tool bash gave a result that is no tool result" in results[2].text
    assert "Tool wrong gave a result that is no tool result" in results[3].text
    assert not any("file1.md" in r.text for r in results)
    assert recorder.end.reason == AgentEndReason.COMPLETED
    assert narrow(messages[-1], AssistantMessage).text == "ok"
    check_tool_results(messages)


# --- terminate ----------------------------------------------------------------------------------


async def test_terminate_only_when_every_result_asks():
    async def final(tool_call_id, params, signal, on_update, context):
        return AgentToolResult.text("final", terminate=True)

    tools = [make_tool("final", final), BASH]
    provider = ScriptedProvider([reply(tool_call("final"), tool_call("final")), reply("unused")])
    messages, recorder = await run(provider, tools=tools)
    assert recorder.end.reason == AgentEndReason.TERMINATED
    assert [m.role for m in messages] == ["user", "assistant", "toolResult", "toolResult"]
    assert provider.remaining == 1

    provider = ScriptedProvider(
        [reply(tool_call("final"), tool_call("bash", {"command": "ls"})), reply("went on")]
    )
    messages, recorder = await run(provider, tools=tools)
    assert recorder.end.reason == AgentEndReason.COMPLETED
    assert narrow(messages[-1], AssistantMessage).text == "went on"


# --- steering and follow-ups --------------------------------------------------------------------


async def test_steering_goes_in_after_the_tool_batch_before_the_next_model_call():
    queue: list[BaseMessage] = []

    async def execute(tool_call_id, params, signal, on_update, context):
        queue.append(user("actually, stop and summarise"))  # typed while the tool ran
        return AgentToolResult.text("ran")

    async def steering():
        drained = list(queue)
        queue.clear()
        return drained

    provider = ScriptedProvider([reply(tool_call("work", id="1")), reply("summary")])
    messages, recorder = await run(
        provider, tools=[make_tool("work", execute)], get_steering_messages=steering
    )
    assert [m.role for m in messages] == ["user", "assistant", "toolResult", "user", "assistant"]
    assert [m.role for m in provider.calls[1].messages][-2:] == ["toolResult", "user"]
    compact = recorder.compact()
    second_turn = compact.index("turn_start", 2)
    assert compact[second_turn : second_turn + 4] == [
        "turn_start",
        "message_start:user",
        "message_end:user",
        "message_start:assistant",
    ]


async def test_steering_after_a_turn_without_tools_keeps_the_agent_going():
    queue = [[], [user("one more thing")]]  # first poll (start) empty, then one message

    provider = ScriptedProvider([reply("first"), reply("second")])
    messages, recorder = await run(
        provider, get_steering_messages=lambda: queue.pop(0) if queue else []
    )
    assert [narrow(m, AssistantMessage).text for m in messages if m.role == "assistant"] == [
        "first",
        "second",
    ]
    assert recorder.end.reason == AgentEndReason.COMPLETED


async def test_follow_ups_only_when_the_agent_would_stop():
    follow_ups = [user("and then?")]
    polled_at: list[int] = []

    def get_follow_ups():
        polled_at.append(len(provider.calls))
        drained = list(follow_ups)
        follow_ups.clear()
        return drained

    provider = ScriptedProvider(
        [reply(tool_call("bash", {"command": "ls"})), reply("done"), reply("then this")]
    )
    messages, _ = await run(provider, get_follow_up_messages=get_follow_ups)
    # Not polled after the tool turn, only once the model stopped (after call 2), and again
    # after the follow-up was answered.
    assert polled_at == [2, 3]
    assert [m.role for m in messages] == [
        "user",
        "assistant",
        "toolResult",
        "assistant",
        "user",
        "assistant",
    ]
    assert narrow(messages[-1], AssistantMessage).text == "then this"


# --- abort --------------------------------------------------------------------------------------


async def test_abort_while_streaming_records_an_aborted_message():
    controller = AbortController()
    provider = ScriptedProvider(
        [reply("a long answer " * 20, tool_call("bash", {"command": "ls"}))],
        chunk_size=5,
        delay=0.01,
    )

    def listener(event: AgentEvent) -> None:
        recorder(event)
        if (
            event.type == "message_update"
            and narrow(event, MessageUpdateEvent).assistant_message_event.type == "text_delta"
        ):
            controller.abort()

    recorder = Recorder()
    with anyio.fail_after(5):
        messages = await agent_loop(
            [user("go")],
            AgentContext("", []),
            config_for(provider, signal=controller.signal),
            listener,
        )
    last = messages[-1]
    assert isinstance(last, AssistantMessage)
    assert last.stop_reason == StopReason.ABORTED and last.error_message == "aborted"
    assert last.text == "a lon"  # what streamed before the abort
    assert recorder.end.reason == AgentEndReason.ABORTED
    assert recorder.types[-2:] == ["turn_end", "agent_end"]
    assert provider.calls and len(provider.calls) == 1


async def test_abort_reaches_a_provider_that_ignores_it():
    controller = AbortController()
    provider = ScriptedProvider([reply("x" * 100, ignore_abort=True)], chunk_size=1, delay=0.05)

    async def abort_soon():
        await anyio.sleep(0.1)
        controller.abort("user pressed escape")

    recorder = Recorder()
    with anyio.fail_after(30):  # a hang guard: the provider alone would stream for 5 s
        async with anyio.create_task_group() as tg:
            tg.start_soon(abort_soon)
            messages = await agent_loop(
                [user("go")],
                AgentContext("", []),
                config_for(provider, signal=controller.signal, abort_grace=0.05),
                recorder,
            )
    last = narrow(messages[-1], AssistantMessage)
    assert last.stop_reason == StopReason.ABORTED
    assert last.error_message == "aborted: user pressed escape"  # as the providers say it
    assert 0 < len(last.text) < 100


async def test_abort_mid_tool_call_stream_leaves_results_for_the_calls():
    controller = AbortController()
    provider = ScriptedProvider(
        [reply(tool_call("bash", {"command": "ls -la " + "x" * 50}, id="c1"))], chunk_size=4
    )

    def listener(event: AgentEvent) -> None:
        recorder(event)
        if (
            event.type == "message_update"
            and narrow(event, MessageUpdateEvent).assistant_message_event.type == "toolcall_delta"
        ):
            controller.abort()

    recorder = Recorder()
    provider.delay = 0.01
    messages = await agent_loop(
        [user("go")], AgentContext("", []), config_for(provider, signal=controller.signal), listener
    )
    assert [m.role for m in messages] == ["user", "assistant", "toolResult"]
    assert narrow(messages[1], AssistantMessage).stop_reason == StopReason.ABORTED
    result = narrow(messages[2], ToolResultMessage)
    assert result.is_error and result.tool_call_id == "c1"
    check_tool_results(messages)


@pytest.mark.parametrize("honours_signal", [True, False])
async def test_abort_during_a_tool(honours_signal: bool):
    controller = AbortController()
    started = anyio.Event()

    async def slow(tool_call_id, params, signal, on_update, context):
        started.set()
        if honours_signal:
            await signal.wait()
            return AgentToolResult.error("stopped early", details={"partial": True})
        await anyio.sleep(30)  # ignores the signal: the loop cancels it
        return AgentToolResult.text("never")

    async def quick(tool_call_id, params, signal, on_update, context):
        return AgentToolResult.text("quick")

    provider = ScriptedProvider(
        [reply(tool_call("quick", id="q"), tool_call("slow", id="s")), reply("never said")]
    )
    recorder = Recorder()

    async def abort_when_started():
        await started.wait()
        controller.abort()

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(abort_when_started)
            messages = await agent_loop(
                [user("go")],
                AgentContext("", []),
                config_for(
                    provider,
                    signal=controller.signal,
                    tools=[make_tool("quick", quick), make_tool("slow", slow)],
                    abort_grace=0.05,
                ),
                recorder,
            )
    assert [m.role for m in messages] == [
        "user",
        "assistant",
        "toolResult",
        "toolResult",
        "assistant",
    ]
    quick_result, slow_result, last = messages[2:]
    assert isinstance(quick_result, ToolResultMessage)
    assert isinstance(slow_result, ToolResultMessage)
    assert isinstance(last, AssistantMessage)
    assert quick_result.text == "quick" and not quick_result.is_error
    assert slow_result.is_error
    if honours_signal:
        assert slow_result.text == "stopped early" and slow_result.details == {"partial": True}
    else:
        assert slow_result.text == "Tool execution aborted"
    assert last.stop_reason == StopReason.ABORTED
    assert recorder.end.reason == AgentEndReason.ABORTED
    assert len(provider.calls) == 1  # the aborted message was not asked of the model
    check_tool_results(messages)


async def test_abort_skips_tools_not_started_in_sequential_mode():
    controller = AbortController()

    async def aborting(tool_call_id, params, signal, on_update, context):
        controller.abort()
        return AgentToolResult.text("first")

    provider = ScriptedProvider([reply(*(tool_call("t", id=str(i)) for i in range(3)))])
    messages, recorder = await run(
        provider,
        tools=[make_tool("t", aborting)],
        tool_execution_mode=ToolExecutionMode.SEQUENTIAL,
        signal=controller.signal,
    )
    texts = [m.text for m in messages if isinstance(m, ToolResultMessage)]
    assert texts == [
        "first",
        "Tool call not executed (aborted)",
        "Tool call not executed (aborted)",
    ]
    assert (
        recorder.types.count("tool_execution_start")
        == recorder.types.count("tool_execution_end")
        == 3
    )
    assert narrow(messages[-1], AssistantMessage).stop_reason == StopReason.ABORTED
    check_tool_results(messages)


def test_an_abort_reaches_every_listener_when_one_fails(caplog: pytest.LogCaptureFixture):
    controller = AbortController()
    heard: list[str] = []

    def failing() -> None:
        heard.append("failing")
        raise TypeError("transport sockets do not support shutdown() method")

    controller.signal.on_abort(failing)
    controller.signal.on_abort(lambda: heard.append("next"))
    controller.abort("stop")  # does not raise
    assert heard == ["failing", "next"]
    assert controller.signal.aborted and controller.signal.reason == "stop"
    assert "an abort listener failed" in caplog.text and "shutdown() method" in caplog.text


async def test_the_before_hook_sees_the_abort():
    controller = AbortController()

    async def before(ctx, signal):
        controller.abort()
        await signal.wait()  # a hook that listens returns at once
        return None

    provider = ScriptedProvider([reply(tool_call("bash", {"command": "ls"}, id="1"))])
    messages, _ = await run(provider, before_tool_call=before, signal=controller.signal)
    assert narrow(messages[2], ToolResultMessage).text == "Tool call not executed (aborted)"
    assert narrow(messages[-1], AssistantMessage).stop_reason == StopReason.ABORTED


# --- provider failures --------------------------------------------------------------------------


async def test_provider_error_is_an_assistant_message_and_ends_the_run():
    provider = ScriptedProvider([provider_error("rate limited (429)", "partial ans")])
    messages, recorder = await run(provider)
    last = narrow(messages[-1], AssistantMessage)
    assert last.stop_reason == StopReason.ERROR and last.error_message == "rate limited (429)"
    assert last.text == "partial ans"
    assert recorder.end.reason == AgentEndReason.ERROR
    assert recorder.types[-3:] == ["message_end", "turn_end", "agent_end"]


async def test_a_stream_fn_that_raises_is_contained():
    def raising(model, context, options):
        raise ConnectionError("no route to host")

    recorder = Recorder()
    messages = await agent_loop(
        [user("go")],
        AgentContext("", []),
        AgentLoopConfig(model=scripted_model(), stream_fn=raising),
        recorder,
    )
    failed = narrow(messages[-1], AssistantMessage)
    assert failed.stop_reason == StopReason.ERROR
    assert failed.error_message == "provider failed: no route to host"
    assert recorder.compact()[-4:] == [
        "message_start:assistant",
        "message_end:assistant",
        "turn_end",
        "agent_end",
    ]

    provider = ScriptedProvider(
        [reply("half", tool_call("bash", {"command": "ls"}, id="c"), raise_error="stream reset")]
    )
    messages, recorder = await run(provider)
    answer = narrow(messages[1], AssistantMessage)
    assert answer.stop_reason == StopReason.ERROR
    assert answer.error_message == "provider failed: stream reset"
    assert answer.text == "half"
    result = narrow(messages[2], ToolResultMessage)
    assert result.tool_call_id == "c" and result.is_error  # never ran
    check_tool_results(messages)


async def test_a_stream_without_a_final_event_and_async_stream_fns():
    async def no_final(model, context, options):
        yield_from = ScriptedProvider([reply("cut short")])(model, context, options)
        async for event in yield_from:
            if event.type == "done":
                return
            yield event

    messages, _ = await run(ScriptedProvider([]), tools=[])  # exhausted script → error message
    exhausted = narrow(messages[-1], AssistantMessage)
    assert exhausted.stop_reason == StopReason.ERROR
    assert "script exhausted" in present(exhausted.error_message)

    recorder = Recorder()
    messages = await agent_loop(
        [user("go")],
        AgentContext("", []),
        AgentLoopConfig(model=scripted_model(), stream_fn=no_final),
        recorder,
    )
    cut = narrow(messages[-1], AssistantMessage)
    assert cut.text == "cut short"
    assert cut.error_message == "provider failed: the provider stream ended without a final message"

    async def awaitable_stream_fn(model, context, options):  # returns the iterator
        return ScriptedProvider(["fine"])(model, context, options)

    messages = await agent_loop(
        [user("go")],
        AgentContext("", []),
        # The loop also takes a stream_fn whose coroutine returns the iterator; StreamFn does
        # not declare that form.
        AgentLoopConfig(model=scripted_model(), stream_fn=cast(StreamFn, awaitable_stream_fn)),
        recorder,
    )
    assert narrow(messages[-1], AssistantMessage).text == "fine"


async def test_a_failing_transform_context_is_an_error_message():
    async def transform(messages, signal):
        raise KeyError("missing")

    messages, _ = await run(ScriptedProvider(["unused"]), transform_context=transform)
    failed = narrow(messages[-1], AssistantMessage)
    assert failed.stop_reason == StopReason.ERROR
    assert "preparing the model request failed" in present(failed.error_message)


async def test_listener_errors_propagate():
    def listener(event):
        if event.type == "message_end" and event.message.role == "toolResult":
            raise RuntimeError("listener broke")

    provider = ScriptedProvider([reply(tool_call("bash", {"command": "ls"})), reply("ok")])
    with pytest.raises(RuntimeError, match="listener broke"):
        await agent_loop([user("go")], AgentContext("", []), config_for(provider), listener)


# --- tool activation, turn limit, continue, conversion ------------------------------------------


async def test_added_tool_names_activate_tools_for_the_next_turns():
    async def load(tool_call_id, params, signal, on_update, context):
        return AgentToolResult.text("loaded", added_tool_names=["extra", "not-in-pool"])

    async def extra(tool_call_id, params, signal, on_update, context):
        return AgentToolResult.text("extra ran")

    extra_tool = make_tool("extra", extra)
    provider = ScriptedProvider(
        [
            reply(tool_call("extra", id="early"), tool_call("load", id="l")),
            reply(tool_call("extra", id="late")),
            reply("done"),
        ]
    )
    messages, _ = await run(provider, tools=[make_tool("load", load)], available_tools=[extra_tool])
    results = {m.tool_call_id: m for m in messages if isinstance(m, ToolResultMessage)}
    assert results["early"].text == "Tool extra not found"  # not active yet in that batch
    assert results["l"].added_tool_names == ["extra", "not-in-pool"]
    assert results["late"].text == "extra ran"
    assert [t.name for t in present(provider.calls[0].tools)] == ["load"]
    assert [t.name for t in present(provider.calls[1].tools)] == ["load", "extra"]


async def test_turn_limit_stops_cleanly():
    provider = ScriptedProvider(
        [reply(tool_call("bash", {"command": "ls"}))], when_exhausted="repeat"
    )
    messages, recorder = await run(provider, max_turns=2)
    assert recorder.end.reason == AgentEndReason.MAX_TURNS
    assert describe_event(recorder.end) == "agent finished (5 new messages, max turns)"
    assert [m.role for m in messages] == [
        "user",
        "assistant",
        "toolResult",
        "assistant",
        "toolResult",
    ]
    assert len(provider.calls) == 2

    # The transcript ends in a tool result, so the run can be continued.
    context = AgentContext("", messages)
    more = await agent_loop_continue(context, config_for(ScriptedProvider(["finally"])), Recorder())
    assert [m.role for m in more] == ["assistant"]
    assert narrow(more[0], AssistantMessage).text == "finally"
    with pytest.raises(ValueError):
        AgentLoopConfig(model=scripted_model(), stream_fn=provider, max_turns=0)


async def test_turn_limit_keeps_queued_messages_in_the_transcript():
    queue = [[], [user("queued")]]
    provider = ScriptedProvider([reply(tool_call("bash", {"command": "ls"}))])
    messages, recorder = await run(
        provider, max_turns=1, get_steering_messages=lambda: queue.pop(0) if queue else []
    )
    assert [m.role for m in messages] == ["user", "assistant", "toolResult", "user"]
    assert recorder.end.reason == AgentEndReason.MAX_TURNS


async def test_continue_requires_a_non_assistant_last_message():
    config = config_for(ScriptedProvider(["hi"]))
    with pytest.raises(ValueError, match="no messages"):
        await agent_loop_continue(AgentContext("", []), config, Recorder())
    with pytest.raises(ValueError, match="assistant"):
        await agent_loop_continue(AgentContext("", [AssistantMessage()]), config, Recorder())
    recorder = Recorder()
    messages = await agent_loop_continue(AgentContext("", [user("hi")]), config, recorder)
    assert [m.role for m in messages] == ["assistant"]
    assert recorder.compact()[:3] == ["agent_start", "turn_start", "message_start:assistant"]


async def test_custom_messages_are_converted_and_options_reach_the_provider():
    seen: list[tuple[LlmContext, StreamOptions]] = []
    inner = ScriptedProvider(["ok"])

    def spy(model, context, options):
        seen.append((context, options))
        return inner(model, context, options)

    note = CustomMessage(custom_type="note", content="remember the milk")
    config = AgentLoopConfig(
        model=scripted_model(),
        stream_fn=spy,
        system_prompt="override",
        get_api_key=lambda provider: f"key-for-{provider}",
        stream_options=StreamOptions(max_tokens=100, session_id="s1"),
    )
    await agent_loop([note, user("hi")], AgentContext("original", []), config, Recorder())
    context, options = seen[0]
    assert context.system_prompt == "override"
    assert [(m.role, m.text) for m in context.messages] == [
        ("user", "remember the milk"),
        ("user", "hi"),
    ]
    assert options.api_key == "key-for-scripted"
    assert options.max_tokens == 100 and options.session_id == "s1"
    assert options.signal is not None


async def test_should_stop_after_turn():
    provider = ScriptedProvider([reply(tool_call("bash", {"command": "ls"})), reply("unused")])
    messages, recorder = await run(
        provider, should_stop_after_turn=lambda summary: bool(summary.tool_results)
    )
    assert recorder.end.reason == AgentEndReason.STOPPED
    assert [m.role for m in messages] == ["user", "assistant", "toolResult"]


async def test_scripted_provider_from_data_and_echo():
    provider = ScriptedProvider.from_data(
        [
            {
                "thinking": "plan",
                "text": "calling",
                "toolCalls": [{"name": "bash", "arguments": {"command": "ls"}, "id": "x"}],
            },
            "plain text",
        ]
    )
    messages, _ = await run(provider)
    assert [b.type for b in narrow(messages[1], AssistantMessage).content] == [
        "thinking",
        "text",
        "toolCall",
    ]
    assert narrow(messages[-1], AssistantMessage).text == "plain text"
    with pytest.raises(ValueError, match="unknown field"):
        ScriptedProvider.from_data([{"txt": "typo"}])

    messages, _ = await run(ScriptedProvider.echo(), "say this back")
    assert narrow(messages[-1], AssistantMessage).text == "say this back"

    provider = ScriptedProvider(
        [lambda ctx: f"you said {len(ctx.messages)} thing(s)", ScriptedResponse()]
    )
    messages, _ = await run(provider)
    assert narrow(messages[-1], AssistantMessage).text == "you said 1 thing(s)"


async def test_a_long_scripted_answer_without_delay_lets_the_event_loop_run():
    """A scripted answer without a delay (``scripted:echo`` of a pasted file) held the event
    loop until its last chunk, and grew its text by copying it whole at each chunk: a 1 MB
    echo took 20 s in which a server answered nobody. Other tasks now run while it streams."""
    said = "word " * 20_000  # 6,250 chunks of 16 characters
    turns = 0
    streamed = anyio.Event()

    async def other_task() -> None:
        nonlocal turns
        while not streamed.is_set():
            turns += 1
            await anyio.lowlevel.checkpoint()

    async with anyio.create_task_group() as group:
        group.start_soon(other_task)
        await anyio.lowlevel.checkpoint()
        started = turns
        messages, _ = await run(ScriptedProvider.echo(), said)
        during = turns - started
        streamed.set()
    assert narrow(messages[-1], AssistantMessage).text == said
    assert during >= 50, during
