"""The OpenAI-compatible provider against real loopback servers (fakellm and a scripted one)."""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import AsyncGenerator
from typing import Any

import anyio
import pytest
from httpx_sse._decoders import SSEDecoder, SSELineDecoder
from hypothesis import given, settings
from hypothesis import strategies as st
from narrow import narrow, present
from providers_support import (
    OA_DONE,
    AbortController,
    FakeLlm,
    Gate,
    Reply,
    abort_when_stalled,
    collect,
    conversation_headers,
    event_types,
    fakellm_fixture,  # noqa: F401  (the fakellm fixture)
    model_at,
    oa_chunk,
    oa_text_reply,
    oa_usage,
    options,
    peak_memory,
    record_waits,
    script_server,
    sse,
    unknown_blocks_history,
    user_context,
)

from mcp_agent.events import ErrorEvent, TextDeltaEvent, ToolCallDeltaEvent
from mcp_agent.messages import (
    AssistantMessage,
    ImageContent,
    Message,
    ModelCost,
    StopReason,
    TextContent,
    ThinkingContent,
    ThinkingLevel,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)
from mcp_agent.providers.base import (
    CONTEXT_OVERFLOW_MARK,
    LlmContext,
    is_context_overflow,
    is_transient_error,
)
from mcp_agent.providers.http import Endpoint, MalformedStream, SseParser
from mcp_agent.providers.openai_compat import (
    OpenAICompat,
    OpenAIConfig,
    make_stream_fn,
    stream_openai_compat,
)
from mcp_agent.tools import AgentTool, AgentToolResult

pytestmark = pytest.mark.anyio


async def _noop(*args, **kwargs) -> AgentToolResult:  # pragma: no cover - never executed
    return AgentToolResult.text("")


def tool(name: str) -> AgentTool:
    return AgentTool(
        name=name,
        description=f"the {name} tool",
        parameters={"type": "object", "properties": {"path": {"type": "string"}}},
        execute=_noop,
    )


def key(**kwargs):
    return options(api_key="sk-test", **kwargs)


async def sent_back(model: Any, final: AssistantMessage, server: Any) -> dict[str, Any]:
    """The assistant message as the next request (the server's second) carries ``final``."""
    context = LlmContext(
        system_prompt="",
        messages=[UserMessage(content="q"), final, UserMessage(content="more")],
    )
    await collect(stream_openai_compat(model, context, key()))
    assistant: dict[str, Any] = server.requests[1].json()["messages"][1]
    return assistant


# --- against fakellm --------------------------------------------------------------------------


async def test_text_streams_from_fakellm(fakellm: FakeLlm) -> None:
    model = model_at(fakellm.openai_base_url)
    events, final = await collect(
        stream_openai_compat(model, user_context("hello"), key(headers=conversation_headers()))
    )
    assert final.text == "Hi there! This is a mock response."
    assert final.stop_reason == StopReason.STOP
    assert final.to_json_dict()["responseId"].startswith("chatcmpl-")
    assert final.error_message is None
    assert (final.api, final.provider, final.model) == (
        "openai-completions",
        "openai",
        "gpt-4o-mini",
    )
    types = event_types(events)
    assert types[:2] == ["start", "text_start"]
    assert types[-2:] == ["text_end", "done"]
    deltas = [e.delta for e in events if isinstance(e, TextDeltaEvent)]
    assert len(deltas) == 7 and "".join(deltas) == final.text
    assert all(e.partial is final for e in events)


async def test_tool_calls_split_across_chunks_from_fakellm(fakellm: FakeLlm) -> None:
    model = model_at(fakellm.openai_base_url)
    context = user_context("please list files", tools=[tool("ls"), tool("read")])
    events, final = await collect(
        stream_openai_compat(model, context, key(headers=conversation_headers()))
    )
    assert final.stop_reason == StopReason.TOOL_USE
    calls = final.tool_calls
    assert [c.name for c in calls] == ["ls", "read"]
    assert calls[0].arguments == {"path": ".", "all": True}
    assert calls[1].arguments == {
        "path": "README.md",
        "range": {"start": 1, "end": 20},
        "note": 'quote " and unicode é',
    }
    assert all(c.id.startswith("call_") and c.partial_json is None for c in calls)
    for index in (0, 1):
        pieces = [
            e.delta
            for e in events
            if isinstance(e, ToolCallDeltaEvent) and e.content_index == index and e.delta
        ]
        assert len(pieces) > 1, "arguments should arrive in several chunks"
        assert json.loads("".join(pieces)) == calls[index].arguments
    assert event_types(events).count("toolcall_end") == 2


async def test_abort_mid_stream_keeps_partial_text(fakellm: FakeLlm) -> None:
    model = model_at(fakellm.openai_base_url)
    controller = AbortController()
    stream = stream_openai_compat(
        model,
        user_context("tell a long story"),
        key(signal=controller.signal, headers=conversation_headers()),
    )
    events = []
    aborted_after = None  # how many events had come when the abort fired
    with anyio.fail_after(10):  # a hang guard
        async for event in stream:
            events.append(event)
            if aborted_after is None and sum(isinstance(e, TextDeltaEvent) for e in events) == 5:
                controller.abort()
                aborted_after = len(events)
    # The abort is seen before anything else streams: the one event after it is the end.
    assert aborted_after is not None
    final = events[-1]
    assert event_types(events[aborted_after:]) == ["error"]
    assert isinstance(final, ErrorEvent)
    message = final.partial
    assert message.stop_reason == StopReason.ABORTED
    assert message.error_message == "aborted"
    deltas = [e.delta for e in events if isinstance(e, TextDeltaEvent)]
    assert len(deltas) == 5 and message.text == "".join(deltas)
    assert message.text.startswith("Once upon a time word0") and "the end." not in message.text


# --- request shape ----------------------------------------------------------------------------


def calls_from(provider: str, model: str, *ids: str) -> AssistantMessage:
    return AssistantMessage(
        content=[ToolCall(id=i, name="read", arguments={"path": i}) for i in ids],
        api="anthropic-messages" if provider == "anthropic" else "openai-completions",
        provider=provider,
        model=model,
        stop_reason=StopReason.TOOL_USE,
    )


def results(*ids: str) -> list[Message]:
    return [
        ToolResultMessage(tool_call_id=i, tool_name="read", content=[TextContent(text=i)])
        for i in ids
    ]


@pytest.mark.parametrize("model_id", ["mistral-large-latest", "gpt-4o"])
async def test_tool_call_ids_replayed_to_mistral_are_mistral_s(model_id: str) -> None:
    """Mistral refuses a tool call id that is not 9 letters and digits ("Tool call id was
    toolu_01… but must be a-z, A-Z, 0-9, with a length of 9"): a session that had used
    another provider's tools could not go on with Mistral."""
    history: list[Message] = [
        UserMessage(content="read"),
        calls_from("anthropic", "claude-sonnet-4-5", "toolu_01AbCdEfGhIjKlMnOpQrStUv"),
        *results("toolu_01AbCdEfGhIjKlMnOpQrStUv"),
        calls_from("openai", "gpt-4o", "call_abcde", "call-abcde"),  # alike once cleaned
        *results("call-abcde", "call_abcde"),
        calls_from("mistral", "mistral-large-latest", "Ab3dE6gH9", "NoResult1"),
        *results("Ab3dE6gH9"),  # the other gets one made for it
        UserMessage(content="go on"),
    ]
    async with script_server() as server:
        server.add(oa_text_reply("ok"))
        model = model_at(server.base + "/v1", model_id)
        context = LlmContext(system_prompt="", messages=history, tools=[tool("read")])
        _, final = await collect(stream_openai_compat(model, context, key()))
    assert final.text == "ok", final.error_message
    sent = server.requests[0].json()["messages"]
    calls = [c for m in sent if m["role"] == "assistant" for c in m["tool_calls"]]
    answered = [m["tool_call_id"] for m in sent if m["role"] == "tool"]
    by_path = {json.loads(c["function"]["arguments"])["path"]: c["id"] for c in calls}
    assert answered == [
        by_path[p]
        for p in [
            "toolu_01AbCdEfGhIjKlMnOpQrStUv",
            "call-abcde",
            "call_abcde",
            "Ab3dE6gH9",
            "NoResult1",
        ]
    ]
    if model_id.startswith("mistral"):
        assert all(re.fullmatch(r"[a-zA-Z0-9]{9}", i) for i in by_path.values()), by_path
        assert len(set(by_path.values())) == len(by_path)
        assert by_path["Ab3dE6gH9"] == "Ab3dE6gH9"  # its own ids as they were
    else:
        assert by_path == {p: p for p in by_path}


async def test_request_body_messages_and_switches() -> None:
    async with script_server() as server:
        server.add(oa_text_reply("ok"))
        model = model_at(server.base + "/v1", "o4-mini", reasoning=True, input=["text", "image"])
        config = OpenAIConfig(
            compat=OpenAICompat(max_tokens_field="max_tokens", supports_developer_role=True),
            headers={"X-Provider": "p"},
        )
        history: list[Message] = [
            UserMessage(
                content=[TextContent(text="look"), ImageContent(data="aGk=", mime_type="image/png")]
            ),
            AssistantMessage(
                content=[
                    TextContent(text="Reading."),
                    ToolCall(id="c1", name="read", arguments={"path": "a"}),
                ],
                api="openai-completions",
                provider="openai",
                model="o4-mini",
                stop_reason=StopReason.TOOL_USE,
            ),
            ToolResultMessage(
                tool_call_id="c1",
                tool_name="read",
                content=[
                    TextContent(text="file a"),
                    ImageContent(data="aW1n", mime_type="image/png"),
                ],
            ),
            # an errored turn is not replayed
            AssistantMessage(
                content=[TextContent(text="broken")],
                stop_reason=StopReason.ERROR,
                error_message="x",
            ),
            UserMessage(content="go on"),
        ]
        context = LlmContext(system_prompt="Be brief.", messages=history, tools=[tool("read")])
        opts = key(
            max_tokens=321,
            temperature=0.2,
            thinking_level=ThinkingLevel.HIGH,
            headers={"X-Call": "c"},
        )
        _, final = await collect(stream_openai_compat(model, context, opts, config=config))
        assert final.text == "ok"
        request = server.requests[0]
        assert request.path == "/v1/chat/completions"
        assert request.headers["authorization"] == "Bearer sk-test"
        assert request.headers["x-provider"] == "p" and request.headers["x-call"] == "c"
        assert request.headers["accept"] == "text/event-stream"
        body = request.json()
        assert body["model"] == "o4-mini" and body["stream"] is True
        assert body["stream_options"] == {"include_usage": True}
        assert body["max_tokens"] == 321 and "max_completion_tokens" not in body
        assert body["temperature"] == 0.2
        assert body["reasoning_effort"] == "high"
        assert body["store"] is False
        assert body["tools"] == [
            {
                "type": "function",
                "function": {
                    "name": "read",
                    "description": "the read tool",
                    "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
                    "strict": False,
                },
            }
        ]
        assert body["messages"] == [
            {"role": "developer", "content": "Be brief."},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "look"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,aGk="}},
                ],
            },
            {
                "role": "assistant",
                "content": "Reading.",
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "read", "arguments": '{"path": "a"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "file a"},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Attached image(s) from tool result:"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,aW1n"}},
                ],
            },
            {"role": "user", "content": "go on"},
        ]


async def test_compat_defaults_for_other_servers_and_orphan_tool_calls() -> None:
    async with script_server() as server:
        server.add(oa_text_reply("ok"))
        # A non-OpenAI base URL: system role, max_tokens, no store, no strict, no key needed.
        model = model_at(server.base + "/v1", "llama3", reasoning=False)
        history: list[Message] = [
            UserMessage(
                content=[TextContent(text="see"), ImageContent(data="aGk=", mime_type="image/png")]
            ),
            AssistantMessage(
                content=[ToolCall(id="c9", name="ls", arguments={})],
                stop_reason=StopReason.TOOL_USE,
                provider="openai",
                api="openai-completions",
                model="llama3",
            ),
            UserMessage(content="never mind"),
        ]
        context = LlmContext(system_prompt="sys", messages=history)
        config = OpenAIConfig(label="Local API", api_key_env=None, requires_api_key=False)
        _, final = await collect(
            stream_openai_compat(model, context, options(max_tokens=50), config=config)
        )
        assert final.stop_reason == StopReason.STOP
        request = server.requests[0]
        assert "authorization" not in request.headers
        body = request.json()
        assert body["max_tokens"] == 50
        assert "store" not in body and "reasoning_effort" not in body
        assert body["messages"][0] == {"role": "system", "content": "sys"}
        # no image input: a placeholder; the unanswered call gets an error result
        assert body["messages"][1]["content"] == [
            {"type": "text", "text": "see"},
            {"type": "text", "text": "(image omitted: model does not support images)"},
        ]
        assert body["messages"][3] == {
            "role": "tool",
            "tool_call_id": "c9",
            "content": "No result provided",
        }
        assert body["messages"][4] == {"role": "user", "content": "never mind"}


# --- stream contents --------------------------------------------------------------------------


async def test_usage_with_cached_tokens_and_cost() -> None:
    async with script_server() as server:
        server.add(oa_text_reply("a", "b", usage=(1000, 200, 400)))
        model = model_at(server.base + "/v1", cost=ModelCost(input=1.0, output=4.0, cache_read=0.5))
        _, final = await collect(stream_openai_compat(model, user_context(), key()))
        usage = final.usage
        assert (usage.input, usage.output, usage.cache_read, usage.cache_write) == (
            600,
            200,
            400,
            0,
        )
        assert usage.total_tokens == 1200
        assert usage.cost.input == pytest.approx(600 / 1e6)
        assert usage.cost.output == pytest.approx(800 / 1e6)
        assert usage.cost.cache_read == pytest.approx(200 / 1e6)
        assert usage.cost.total == pytest.approx(1600 / 1e6)


async def test_groq_usage_in_x_groq_is_counted() -> None:
    # Groq's last chunk carries the usage in x_groq, not in usage: it was 0 tokens.
    groq_usage = {"id": "req_1", "usage": {"prompt_tokens": 120, "completion_tokens": 7}}
    async with script_server() as server:
        server.add(
            Reply(
                body=[
                    oa_chunk({"content": "hi"}),
                    oa_chunk({}, "stop", x_groq=groq_usage),
                    OA_DONE,
                ]
            )
        )
        _, final = await collect(
            stream_openai_compat(model_at(server.base + "/v1"), user_context(), key())
        )
    assert final.text == "hi" and (final.usage.input, final.usage.output) == (120, 7)


async def test_reasoning_content_becomes_thinking_and_goes_back() -> None:
    async with script_server() as server:
        server.add(
            Reply(
                body=[
                    oa_chunk({"role": "assistant", "reasoning_content": "Let me "}),
                    oa_chunk({"reasoning_content": "think."}),
                    oa_chunk({"content": "Answer."}),
                    oa_chunk({}, "stop"),
                    OA_DONE,
                ]
            ),
            oa_text_reply("again"),
        )
        model = model_at(server.base + "/v1", "qwen3", reasoning=True)
        events, final = await collect(stream_openai_compat(model, user_context(), key()))
        assert event_types(events) == [
            "start",
            "thinking_start",
            "thinking_delta",
            "thinking_delta",
            "text_start",
            "text_delta",
            "thinking_end",
            "text_end",
            "done",
        ]
        thinking, text = final.content
        assert isinstance(thinking, ThinkingContent) and thinking.thinking == "Let me think."
        assert thinking.model_extra == {"thinkingSignature": "reasoning_content"}
        assert narrow(text, TextContent).text == "Answer."
        # the same model gets its reasoning back in the field it came in
        assistant = await sent_back(model, final, server)
        assert assistant == {
            "role": "assistant",
            "content": "Answer.",
            "reasoning_content": "Let me think.",
        }


async def test_mistral_content_as_typed_chunks_is_thinking_and_text() -> None:
    # Magistral streams its content as typed chunks (thinking, then text), not a string: the
    # answer failed with "unexpected data in the event stream (TypeError …)".
    def thinking(*texts: str) -> dict[str, Any]:
        return {"type": "thinking", "thinking": [{"type": "text", "text": t} for t in texts]}

    async with script_server() as server:
        server.add(
            Reply(
                body=[
                    oa_chunk({"role": "assistant", "content": [thinking("Let me ")]}),
                    oa_chunk({"content": [thinking("think", ".")]}),
                    oa_chunk({"content": [{"type": "text", "text": "Answer"}]}),
                    oa_chunk({"content": "!"}),  # a plain string may follow
                    oa_chunk({}, "stop"),
                    OA_DONE,
                ]
            ),
            oa_text_reply("again"),
        )
        model = model_at(server.base + "/v1", "magistral-medium-latest", reasoning=True)
        events, final = await collect(stream_openai_compat(model, user_context(), key()))
        assert final.stop_reason == StopReason.STOP, final.error_message
        assert event_types(events) == [
            "start",
            "thinking_start",
            "thinking_delta",
            "thinking_delta",
            "thinking_delta",
            "text_start",
            "text_delta",
            "text_delta",
            "thinking_end",
            "text_end",
            "done",
        ]
        thinking_block, text = final.content
        assert narrow(thinking_block, ThinkingContent).thinking == "Let me think."
        assert narrow(text, TextContent).text == "Answer!"
        # The next request carries the answer, and no field Mistral would refuse.
        assistant = await sent_back(model, final, server)
        assert assistant == {"role": "assistant", "content": "Answer!"}


THINK_ANSWER = "<think>\nI ponder < and </ too.\n</think>\n\nThe answer."


@pytest.mark.parametrize("size", [1, 2, 3, 5, 8, len(THINK_ANSWER)])
async def test_thinking_in_think_tags_at_the_start_is_thinking(size: int) -> None:
    # vLLM without a reasoning parser, Groq's raw format, R1 at many hosts: the thinking
    # came as the answer's text, shown and sent back as what the model said.
    pieces = [THINK_ANSWER[i : i + size] for i in range(0, len(THINK_ANSWER), size)]
    async with script_server() as server:
        server.add(oa_text_reply(*pieces), oa_text_reply("again"))
        model = model_at(server.base + "/v1", "deepseek-r1")
        events, final = await collect(stream_openai_compat(model, user_context(), key()))
        assert final.stop_reason == StopReason.STOP, final.error_message
        thinking, text = final.content
        assert narrow(thinking, ThinkingContent).thinking == "\nI ponder < and </ too.\n"
        assert narrow(text, TextContent).text == "The answer."
        assert event_types(events)[:2] == ["start", "thinking_start"]
        # The thinking is not sent back as what the model said.
        assistant = await sent_back(model, final, server)
        assert assistant == {"role": "assistant", "content": "The answer."}


UNOPENED_THINK = "Let me see.\nI ponder < and </ too.\n</think>\n\nThe answer."


@pytest.mark.parametrize("model_id", ["deepseek-ai/DeepSeek-R1-0528", "my-served-name"])
@pytest.mark.parametrize("size", [1, 3, 8, len(UNOPENED_THINK)])
async def test_thinking_ended_by_a_lone_think_tag_is_thinking(model_id: str, size: int) -> None:
    """DeepSeek-R1's template opens <think> itself: vLLM without a reasoning parser streams
    the thinking, then a </think> that nothing opened, then the answer. All of it was the
    answer's text: shown, stored and sent back as what the model said."""
    pieces = [UNOPENED_THINK[i : i + size] for i in range(0, len(UNOPENED_THINK), size)]
    async with script_server() as server:
        server.add(oa_text_reply(*pieces), oa_text_reply("again"))
        model = model_at(server.base + "/v1", model_id)
        events, final = await collect(stream_openai_compat(model, user_context(), key()))
        assert final.stop_reason == StopReason.STOP, final.error_message
        thinking, text = final.content
        assert narrow(thinking, ThinkingContent).thinking == "Let me see.\nI ponder < and </ too.\n"
        assert narrow(text, TextContent).text == "The answer."
        if "R1" in model_id:  # named so, it is shown as thinking as it comes
            assert event_types(events)[:2] == ["start", "thinking_start"]
            said = [e.delta for e in events if isinstance(e, TextDeltaEvent)]
            assert "".join(said) == "The answer."
        assistant = await sent_back(model, final, server)
        assert assistant == {"role": "assistant", "content": "The answer."}


@pytest.mark.parametrize(
    ("model_id", "pieces"),
    [
        pytest.param("deepseek-r1", ["Hello", " there."], id="r1-that-did-not-think"),
        pytest.param("gpt-4o", ["Close it with ", "</think>", " then answer."], id="inline"),
        pytest.param("gpt-4o", ["A <think> tag,\n", "</think>\nand its end."], id="opened-later"),
    ],
)
async def test_text_without_a_lone_leading_think_end_stays_the_answer(
    model_id: str, pieces: list[str]
) -> None:
    async with script_server() as server:
        server.add(oa_text_reply(*pieces))
        model = model_at(server.base + "/v1", model_id)
        events, final = await collect(stream_openai_compat(model, user_context(), key()))
    assert final.stop_reason == StopReason.STOP, final.error_message
    assert [type(b) for b in final.content] == [TextContent]
    assert final.text == "".join(pieces)
    assert event_types(events)[-2:] == ["text_end", "done"]


@pytest.mark.parametrize(
    ("pieces", "thinking", "text"),
    [
        pytest.param(["<think>I ponder a <"], "I ponder a <", "", id="inside-thinking"),
        pytest.param(["<thi"], None, "<thi", id="before-it-is-known"),
    ],
)
async def test_what_may_be_a_tag_is_kept_when_the_stream_breaks_off(
    pieces: list[str], thinking: str | None, text: str
) -> None:
    async with script_server() as server:
        body: list[bytes | float | Gate] = [oa_chunk({"content": p}) for p in pieces]
        server.add(Reply(body=body, drop=True))
        _, final = await collect(
            stream_openai_compat(model_at(server.base + "/v1"), user_context(), key())
        )
    assert final.stop_reason == StopReason.ERROR
    assert "broke off mid-stream" in present(final.error_message)
    assert final.text == text
    thoughts = [b.thinking for b in final.content if isinstance(b, ThinkingContent)]
    assert thoughts == ([thinking] if thinking is not None else [])


@pytest.mark.parametrize(
    ("pieces", "thinking", "text"),
    [
        pytest.param(["<thi", "nk> still thinking"], " still thinking", "", id="cut-off"),
        pytest.param(["<thi", "s is text"], None, "<this is text", id="no-tag"),
        pytest.param(["  ", "Hello <think>"], None, "  Hello <think>", id="tag-later"),
        pytest.param(["<"], None, "<", id="only-a-bracket"),
    ],
)
async def test_text_that_only_looks_like_a_think_tag_is_text(
    pieces: list[str], thinking: str | None, text: str
) -> None:
    async with script_server() as server:
        server.add(oa_text_reply(*pieces))
        _, final = await collect(
            stream_openai_compat(model_at(server.base + "/v1"), user_context(), key())
        )
    assert final.text == text
    thoughts = [b.thinking for b in final.content if isinstance(b, ThinkingContent)]
    assert thoughts == ([thinking] if thinking is not None else [])


async def test_several_tool_calls_interleaved_by_index() -> None:
    def call(index: int, **function) -> bytes:
        entry = {"index": index, "function": function}
        if "name" in function:
            entry.update(id=f"call_{index}", type="function")
        return oa_chunk({"tool_calls": [entry]})

    async with script_server() as server:
        server.add(
            Reply(
                body=[
                    oa_chunk({"role": "assistant", "content": None}),
                    call(0, name="ls", arguments=""),
                    call(1, name="read", arguments='{"pa'),
                    call(0, arguments='{"path":'),
                    call(1, arguments='th": "x.md"}'),
                    call(0, arguments=' "/tmp"}'),
                    oa_chunk({}, "tool_calls"),
                    oa_usage(10, 5),
                    OA_DONE,
                ]
            )
        )
        _, final = await collect(
            stream_openai_compat(model_at(server.base + "/v1"), user_context(), key())
        )
        assert final.stop_reason == StopReason.TOOL_USE
        assert [(c.id, c.name, c.arguments) for c in final.tool_calls] == [
            ("call_0", "ls", {"path": "/tmp"}),
            ("call_1", "read", {"path": "x.md"}),
        ]
        assert final.usage.total_tokens == 15


@pytest.mark.parametrize(
    ("finish", "stop"),
    [("length", StopReason.LENGTH), ("stop", StopReason.STOP), ("tool_calls", StopReason.TOOL_USE)],
)
async def test_finish_reasons(finish: str, stop: StopReason) -> None:
    async with script_server() as server:
        server.add(oa_text_reply("x", finish=finish))
        _, final = await collect(
            stream_openai_compat(model_at(server.base + "/v1"), user_context(), key())
        )
        assert final.stop_reason == stop


@pytest.mark.parametrize(
    ("finish", "stop", "transient"),
    [
        ("model_length", StopReason.LENGTH, False),  # Mistral's context window ran out
        # Gemini's own reasons, passed on by relays in front of it, in its upper case
        ("STOP", StopReason.STOP, False),
        ("MAX_TOKENS", StopReason.LENGTH, False),
        ("SAFETY", StopReason.ERROR, False),
        ("end_turn", StopReason.STOP, False),  # Anthropic's, passed on the same way
        ("insufficient_system_resource", StopReason.ERROR, True),  # DeepSeek under load
        ("abort", StopReason.ERROR, True),  # vLLM: the engine dropped the request
        ("error", StopReason.ERROR, True),  # OpenRouter: its upstream failed mid-answer
        ("something_new", StopReason.ERROR, False),
    ],
)
async def test_finish_reasons_other_servers_send(
    finish: str, stop: StopReason, transient: bool
) -> None:
    async with script_server() as server:
        server.add(oa_text_reply("x", finish=finish))
        _, final = await collect(
            stream_openai_compat(model_at(server.base + "/v1"), user_context(), key())
        )
    assert final.stop_reason == stop and final.text == "x"
    assert is_transient_error(final) == transient, final.error_message
    if stop == StopReason.ERROR:
        assert f"(finish_reason {finish})" in present(final.error_message)
    if finish == "SAFETY":
        assert "the model filtered the response" in present(final.error_message)


async def test_content_filter_is_an_error() -> None:
    async with script_server() as server:
        server.add(oa_text_reply("par", finish="content_filter"))
        _, final = await collect(
            stream_openai_compat(model_at(server.base + "/v1"), user_context(), key())
        )
        assert final.stop_reason == StopReason.ERROR
        assert "content_filter" in present(final.error_message) and final.text == "par"


async def test_only_the_first_choice_makes_the_answer() -> None:
    """A server asked for several choices (``n`` in the body) streams each by its index, in
    any order, several in one chunk or one alone: the answer is choice 0's, not a mix."""

    def choices(*items: tuple[int, str | None, str | None]) -> bytes:
        return sse(
            {
                "id": "c",
                "choices": [
                    {"index": i, "delta": {"content": text} if text else {}, "finish_reason": end}
                    for i, text, end in items
                ],
            }
        )

    body: list[Any] = [
        choices((1, "B", None), (0, "A", None)),
        choices((1, "B2", "length")),
        choices((0, "A2", None)),
        sse({"id": "c", "choices": [{"index": None, "delta": {"content": "A3"}}]}),
        choices((0, None, "stop")),
        OA_DONE,
    ]
    async with script_server() as server:
        server.add(Reply(body=body))
        _, final = await collect(
            stream_openai_compat(model_at(server.base + "/v1"), user_context(), key())
        )
    assert final.stop_reason == StopReason.STOP, final.error_message
    assert final.text == "AA2A3"


async def test_a_refusal_is_an_error_that_says_the_models_words() -> None:
    """OpenAI streams a refusal in its own field, not as content: an answer of it alone was an
    empty answer that stopped normally, the words lost."""
    body: list[Any] = [
        oa_chunk({"role": "assistant", "content": None, "refusal": None}),
        oa_chunk({"content": None, "refusal": "I can't help "}),
        oa_chunk({"refusal": "with that."}),
        oa_chunk({}, "stop"),
        OA_DONE,
    ]
    async with script_server() as server:
        server.add(Reply(body=body))
        _, final = await collect(
            stream_openai_compat(model_at(server.base + "/v1"), user_context(), key())
        )
    assert final.stop_reason == StopReason.ERROR
    assert "refused to answer: I can't help with that." in present(final.error_message)
    assert not is_transient_error(final)
    # One that will not end is held no further than it is said (it counts toward no bound).
    endless = [oa_chunk({"refusal": "no " * 10_000}) for _ in range(100)]  # 3 MB
    async with script_server() as server:
        server.add(Reply(body=[*endless, oa_chunk({}, "stop"), OA_DONE]))
        stream = stream_openai_compat(model_at(server.base + "/v1"), user_context(), key())
        last: Any = None
        with peak_memory() as peak, anyio.fail_after(30):  # a hang guard
            async for event in stream:  # keep no events
                last = event
    assert "refused to answer: no no" in present(last.partial.error_message)
    assert peak.bytes < 1_000_000, f"peak {peak.bytes} bytes for a refusal of 3 MB"


# --- faults -----------------------------------------------------------------------------------


def error_reply(status: int, message: str, code: str | None = None, **headers: str) -> Reply:
    body = json.dumps(
        {"error": {"message": message, "type": "invalid_request_error", "code": code}}
    ).encode()
    return Reply(status=status, body=[body], headers=headers, content_type="application/json")


async def test_401_says_which_key_to_check() -> None:
    async with script_server() as server:
        server.add(error_reply(401, "Incorrect API key provided: sk-test.", "invalid_api_key"))
        events, final = await collect(
            stream_openai_compat(model_at(server.base + "/v1"), user_context(), key())
        )
        assert event_types(events) == ["error"]
        assert final.stop_reason == StopReason.ERROR
        assert final.error_message == (
            f"OpenAI API at {server.base}/v1: 401 Unauthorized: Incorrect API key provided: sk-test. "
            "(invalid_api_key) — check OPENAI_API_KEY"
        )
        assert len(server.requests) == 1  # not retried


@pytest.mark.parametrize(
    ("location", "said"),
    [
        (
            "https://user:secret@api.example.com/v1/chat/completions",
            "redirects to https://user:***@api.example.com/v1/chat/completions, which is not"
            " followed: set OPENAI_BASE_URL to https://user:***@api.example.com/v1",
        ),
        (
            "/login",
            "redirects to {base}/login, which is not followed: set OPENAI_BASE_URL to where",
        ),
    ],
)
async def test_a_redirect_says_where_to_and_is_not_followed(location: str, said: str) -> None:
    """A base URL the server moved (http to https, another path) is a setting to change: the
    answer says where it points, and the request, with its key, goes nowhere else."""
    async with script_server() as server:
        server.add(Reply(status=301, headers={"location": location}, content_type="text/html"))
        _, final = await collect(
            stream_openai_compat(model_at(server.base + "/v1"), user_context(), key())
        )
        assert final.stop_reason == StopReason.ERROR
        assert said.format(base=server.base) in present(final.error_message)
        assert len(server.requests) == 1


@pytest.mark.parametrize(
    ("refused", "said", "compat"),
    [  # what relays (one-api, new-api) and older Azure API versions answer
        (
            "Unrecognized request argument supplied: stream_options",
            "set compat = { supports_usage_in_streaming = false }",
            OpenAICompat(supports_usage_in_streaming=False),
        ),
        (
            "Unknown parameter: 'reasoning_effort'.",
            "set compat = { supports_reasoning_effort = false }",
            OpenAICompat(supports_reasoning_effort=False),
        ),
        (
            "Unsupported parameter: 'max_completion_tokens'",
            'set compat = { max_tokens_field = "max_tokens" }',
            OpenAICompat(max_tokens_field="max_tokens"),
        ),
    ],
)
async def test_a_request_field_the_server_refuses_names_the_setting_that_drops_it(
    refused: str, said: str, compat: OpenAICompat
) -> None:
    field = refused.split(":")[-1].strip(" '.")
    model = model_at("", "o4-mini", reasoning=True)
    async with script_server() as server:
        model.base_url = server.base + "/v1"
        server.add(error_reply(400, refused, "unknown_parameter"))
        server.add(oa_text_reply("fine"))
        everything = OpenAIConfig(compat=OpenAICompat())  # every optional field sent
        _, final = await collect(
            stream_openai_compat(
                model,
                user_context(),
                key(max_tokens=100, thinking_level="medium"),
                config=everything,
            )
        )
        assert field in server.requests[0].json()
        error = present(final.error_message)
        assert f"— the server does not take {field}: {said} in the provider's table" in error
        # With that setting, the field is not sent and the answer comes.
        stream = make_stream_fn(OpenAIConfig(compat=compat))
        _, final = await collect(
            stream(model, user_context(), key(max_tokens=100, thinking_level="medium"))
        )
        assert final.text == "fine"
        assert field not in server.requests[-1].json()


async def test_a_refusal_naming_both_token_fields_names_the_one_sent() -> None:
    # Azure's words for a reasoning model sent max_tokens name max_completion_tokens too: the
    # setting said is the one that sends the other.
    refused = (
        "Unsupported parameter: 'max_tokens' is not supported with this model."
        " Use 'max_completion_tokens' instead."
    )
    async with script_server() as server:
        server.add(error_reply(400, refused, "unsupported_parameter"))
        config = OpenAIConfig(compat=OpenAICompat(max_tokens_field="max_tokens"))
        _, final = await collect(
            stream_openai_compat(
                model_at(server.base + "/v1"), user_context(), key(max_tokens=50), config=config
            )
        )
        assert "max_tokens" in server.requests[0].json()
    assert present(final.error_message).endswith(
        "— the server does not take max_tokens: set compat = { max_tokens_field ="
        ' "max_completion_tokens" } in the provider\'s table in models.toml'
    )


async def test_missing_key_fails_without_a_request(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    async with script_server() as server:
        _, final = await collect(
            stream_openai_compat(model_at(server.base + "/v1"), user_context(), options())
        )
        assert (
            final.error_message
            == f"OpenAI API at {server.base}/v1: no API key — set OPENAI_API_KEY"
        )
        assert server.requests == []


async def test_key_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
    async with script_server() as server:
        server.add(oa_text_reply("ok"))
        await collect(
            stream_openai_compat(model_at(server.base + "/v1"), user_context(), options())
        )
        assert server.requests[0].headers["authorization"] == "Bearer sk-env"


@pytest.mark.parametrize(
    ("status", "message", "code"),
    [  # OpenAI's answer to an account out of credit; OpenRouter's
        (
            429,
            "You exceeded your current quota, please check your plan and billing details.",
            "insufficient_quota",
        ),
        (402, "Insufficient credits. Add more using https://openrouter.ai/settings/credits", None),
    ],
)
async def test_an_account_out_of_credit_is_said_and_not_retried(
    status: int, message: str, code: str | None
) -> None:
    # It was retried with backoff, then said to be "rate limited".
    async with script_server() as server:
        server.add(*[error_reply(status, message, code) for _ in range(4)])
        _, final = await collect(
            stream_openai_compat(model_at(server.base + "/v1"), user_context(), key())
        )
        assert len(server.requests) == 1
    error = present(final.error_message)
    assert message in error and "rate limited" not in error
    assert error.endswith("— the account's quota or credit is used up: check its plan and billing")
    assert not is_transient_error(final)


@pytest.mark.parametrize(("status", "words"), [(429, "rate limited"), (500, "server is failing")])
async def test_429_and_500_retried_then_reported(status: int, words: str) -> None:
    async with script_server() as server:
        server.add(
            *[error_reply(status, "slow down" if status == 429 else "boom") for _ in range(4)]
        )
        _, final = await collect(
            stream_openai_compat(model_at(server.base + "/v1"), user_context(), key())
        )
        assert len(server.requests) == 4
        assert final.stop_reason == StopReason.ERROR
        error = present(final.error_message)
        assert error.startswith(f"OpenAI API at {server.base}/v1: {status} ")
        assert words in error and "gave up after 4 attempts" in error


async def test_retry_after_is_honoured_then_success(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    async with script_server() as server:
        server.add(
            error_reply(429, "wait", **{"retry-after-ms": "300"}),
            error_reply(503, "wait", **{"Retry-After": "0"}),
            oa_text_reply("finally"),
        )
        waits = record_waits(monkeypatch, server)
        opts = key(extra={"max_retry_delay": 5.0})
        _, final = await collect(
            stream_openai_compat(model_at(server.base + "/v1"), user_context(), opts)
        )
        assert final.text == "finally" and final.stop_reason == StopReason.STOP
        # After each refusal, one wait of what the server asked for (milliseconds, then
        # seconds; not the backoff), waited out before the next request.
        assert waits.asked == [(1, 0.3), (2, 0.0)]
        assert waits.ended == ["slept", "slept"]
        assert len(server.requests) == 3
    # Each wait is said in the log, so that a rate-limited run does not look hung.
    said = [r.getMessage() for r in caplog.records if r.name == "mcp_agent.providers.http"]
    assert len(said) == 2
    assert said[0].startswith(f"OpenAI API at {server.base}/v1: 429 ")
    assert ": wait " in said[0] and said[0].endswith("; trying again in 0.3 s (retry 1 of 3)")
    assert " 503 " in said[1] and said[1].endswith("trying again in 0.0 s (retry 2 of 3)")


@pytest.mark.parametrize(
    ("asked", "said"),
    [
        ({"Retry-After": "3600"}, " (it asked to wait 3,600 s, over max_retry_delay 0.5 s)"),
        ({"retry-after-ms": "1e12"}, " (it asked to wait 1,000,000,000 s, over max_retry_delay"),
        ({"Retry-After": "nan"}, ""),  # no wait at all: not one to hurry back on
        ({"Retry-After": "-5"}, ""),
        ({"Retry-After": "Fri, 31 Dec 9999 23:59:59 GMT"}, " (it asked to wait "),
    ],
)
async def test_a_retry_after_over_the_cap_or_unusable_gets_the_backoff_and_is_said(
    monkeypatch: pytest.MonkeyPatch, asked: dict[str, str], said: str
) -> None:
    """As the vendors' SDKs do: a wait asked for beyond ``max_retry_delay`` (a quota's hour)
    is not waited out in silence, nor retried at once; the error says what was asked."""
    opts = key(extra={"max_retry_delay": 0.5, "retry_base_delay": 0.2, "max_retries": 2})
    async with script_server() as server:
        server.add(*[error_reply(429, "wait", **asked)] * 3)
        waits = record_waits(monkeypatch, server, sleep=False)
        _, final = await collect(
            stream_openai_compat(model_at(server.base + "/v1"), user_context(), opts)
        )
    # Our own backoff: 0.2 s, then 0.4 s, each within 20 % (jitter), never past the cap.
    assert [request for request, _ in waits.asked] == [1, 2]
    assert 0.16 <= waits.asked[0][1] <= 0.24 and 0.32 <= waits.asked[1][1] <= 0.5
    error = present(final.error_message)
    assert "gave up after 3 attempts" in error
    if said:
        assert said in error, error
    else:
        assert "asked to wait" not in error


async def test_abort_during_backoff_is_prompt(monkeypatch: pytest.MonkeyPatch) -> None:
    async with script_server() as server:
        server.add(error_reply(429, "wait", **{"Retry-After": "3600"}))
        waits = record_waits(monkeypatch, server)
        controller = AbortController()
        opts = key(signal=controller.signal, extra={"max_retry_delay": 3600})

        async def abort_when_waiting() -> None:
            await waits.started.wait()
            controller.abort()

        async with anyio.create_task_group() as tg:
            tg.start_soon(abort_when_waiting)
            # An abort that waited for the backoff to end would outlast collect's hang guard.
            _, final = await collect(
                stream_openai_compat(model_at(server.base + "/v1"), user_context(), opts)
            )
        assert final.stop_reason == StopReason.ABORTED and final.error_message == "aborted"
        assert waits.asked == [(1, 3600.0)] and waits.ended == ["aborted"]  # cut short
        assert len(server.requests) == 1  # and no retry after it


# The HTTP server runs on uvloop, whose transports hand out a socket that refuses shutdown().
@pytest.mark.parametrize("anyio_backend", ["asyncio", ("asyncio", {"use_uvloop": True})])
async def test_abort_while_waiting_for_the_next_chunk() -> None:
    """A stalled stream: the abort must not wait for the next chunk, on either event loop."""
    async with script_server() as server:
        gate = Gate()
        server.add(
            Reply(
                body=[
                    oa_chunk({"content": "Partial"}),
                    oa_chunk({"content": " text"}),
                    gate,
                    OA_DONE,
                ]
            )
        )
        controller = AbortController()
        stream = stream_openai_compat(
            model_at(server.base + "/v1"), user_context(), key(signal=controller.signal)
        )
        # The server holds the rest back until the stream has ended.
        _, final = await abort_when_stalled(
            stream, controller, gate, text="Partial text", reason="user pressed stop"
        )
        assert final.stop_reason == StopReason.ABORTED
        assert final.error_message == "aborted: user pressed stop"
        assert final.text == "Partial text"


async def test_already_aborted_sends_nothing() -> None:
    async with script_server() as server:
        controller = AbortController()
        controller.abort()
        events, final = await collect(
            stream_openai_compat(
                model_at(server.base + "/v1"), user_context(), key(signal=controller.signal)
            )
        )
        assert event_types(events) == ["error"] and final.stop_reason == StopReason.ABORTED
        assert server.requests == []


async def test_connection_dropped_mid_stream_keeps_partial_text() -> None:
    async with script_server() as server:
        server.add(
            Reply(
                body=[oa_chunk({"content": "Half an "}), oa_chunk({"content": "answer"})], drop=True
            )
        )
        _, final = await collect(
            stream_openai_compat(model_at(server.base + "/v1"), user_context(), key())
        )
        assert final.stop_reason == StopReason.ERROR
        assert final.text == "Half an answer"
        error = present(final.error_message)
        assert error.startswith(
            f"OpenAI API at {server.base}/v1: the connection broke off mid-stream"
        )
        assert "partial response is kept" in error


async def test_a_summary_whose_stream_broke_off_says_nothing_was_written() -> None:
    """The stream's error says its partial response is kept, as the agent keeps it; a
    compaction keeps nothing of it, and its error said the same words all the same."""
    from mcp_agent.compaction import CompactionError, compact
    from mcp_agent.sessions import InMemorySessionStorage, Session

    session = Session(InMemorySessionStorage())
    for n in range(6):
        session.append_message(UserMessage(content=f"question {n} " + "q " * 2_000))
        session.append_message(
            AssistantMessage(content=[TextContent(text=f"answer {n}")], stop_reason=StopReason.STOP)
        )
    before = session.get_entries()
    async with script_server() as server:
        server.add(Reply(body=[oa_chunk({"content": "Half a summ"})], drop=True))
        model = model_at(server.base + "/v1", context_window=100_000)
        with pytest.raises(CompactionError) as failed:
            await compact(
                session, model, stream_openai_compat, options=key(), keep_recent_tokens=2_000
            )
    said = str(failed.value)
    assert "the connection broke off mid-stream" in said, said
    assert "partial response is kept" not in said and said.endswith("; nothing was written")
    assert session.get_entries() == before


async def test_stream_closed_cleanly_before_the_end_is_an_error() -> None:
    async with script_server() as server:
        server.add(Reply(body=[oa_chunk({"content": "cut"})]))
        _, final = await collect(
            stream_openai_compat(model_at(server.base + "/v1"), user_context(), key())
        )
        assert final.stop_reason == StopReason.ERROR and final.text == "cut"
        assert "ended before the response was complete" in present(final.error_message)


async def test_malformed_sse_line() -> None:
    async with script_server() as server:
        server.add(
            Reply(
                body=[
                    oa_chunk({"content": "Before"}),
                    b'{"error": "raw json, not SSE"}\n\n',
                    OA_DONE,
                ]
            )
        )
        _, final = await collect(
            stream_openai_compat(model_at(server.base + "/v1"), user_context(), key())
        )
        assert final.stop_reason == StopReason.ERROR and final.text == "Before"
        assert final.error_message == (
            f'OpenAI API at {server.base}/v1: malformed event stream line \'{{"error": "raw json, not SSE"}}\''
        )


async def test_text_read_with_a_malformed_line_is_streamed_before_the_error() -> None:
    for broken in (b'{"error": "raw json, not SSE"}\n\n', b'data: {"choices": [\n\n'):
        async with script_server() as server:
            server.add(Reply(body=[oa_chunk({"content": "Before"}) + broken, OA_DONE]))
            events, final = await collect(
                stream_openai_compat(model_at(server.base + "/v1"), user_context(), key())
            )
        deltas = [e.delta for e in events if isinstance(e, TextDeltaEvent)]
        assert deltas == ["Before"] and final.text == "Before", broken
        assert isinstance(events[-1], ErrorEvent) and final.stop_reason == StopReason.ERROR


async def test_bad_json_in_a_data_line() -> None:
    async with script_server() as server:
        server.add(
            Reply(body=[oa_chunk({"content": "Before"}), b'data: {"choices": [\n\n', OA_DONE])
        )
        _, final = await collect(
            stream_openai_compat(model_at(server.base + "/v1"), user_context(), key())
        )
        assert final.stop_reason == StopReason.ERROR and final.text == "Before"
        error = present(final.error_message)
        assert "malformed JSON in the event stream" in error
        assert '{"choices": [' in error


async def test_error_object_mid_stream() -> None:
    async with script_server() as server:
        server.add(
            Reply(
                body=[
                    oa_chunk({"content": "So"}),
                    sse({"error": {"message": "upstream died", "code": 502}}),
                ]
            )
        )
        _, final = await collect(
            stream_openai_compat(model_at(server.base + "/v1"), user_context(), key())
        )
        assert final.stop_reason == StopReason.ERROR and final.text == "So"
        assert "the server failed mid-stream: upstream died (502)" in present(final.error_message)
        # OpenRouter's words for an upstream that failed mid-answer: a passing fault.
        assert is_transient_error(final)


async def test_context_overflow_is_marked() -> None:
    async with script_server() as server:
        server.add(
            error_reply(
                400,
                "This model's maximum context length is 128000 tokens. However, your messages resulted in 200000 tokens.",
                "context_length_exceeded",
            )
        )
        _, final = await collect(
            stream_openai_compat(model_at(server.base + "/v1"), user_context(), key())
        )
        assert present(final.error_message).startswith(CONTEXT_OVERFLOW_MARK + ": OpenAI API at ")
        assert is_context_overflow(final)
        assert len(server.requests) == 1


@pytest.mark.parametrize(
    "message",
    [  # the wordings of other OpenAI-compatible APIs that pi takes for an overflow
        "The input token count (1196265) exceeds the maximum number of tokens allowed (1048575).",
        "prompt token count of 140000 exceeds the limit of 128000",
        "model_context_window_exceeded",
    ],
)
async def test_other_apis_context_overflow_is_marked(message: str) -> None:
    async with script_server() as server:
        server.add(error_reply(400, message))
        _, final = await collect(
            stream_openai_compat(model_at(server.base + "/v1"), user_context(), key())
        )
        assert is_context_overflow(final), final.error_message


async def test_not_an_event_stream() -> None:
    async with script_server() as server:
        server.add(Reply(body=[b'{"choices": []}'], content_type="application/json"))
        _, final = await collect(
            stream_openai_compat(model_at(server.base + "/v1"), user_context(), key())
        )
        assert final.stop_reason == StopReason.ERROR
        assert "expected a server-sent event stream but got application/json" in present(
            final.error_message
        )


@pytest.mark.parametrize(
    "reply",
    [
        pytest.param(  # LM Studio answers a path it does not know with 200 and JSON
            Reply(
                body=[b'{"error":"Unexpected endpoint or method. (POST /chat/completions)"}'],
                content_type="application/json; charset=utf-8",
            ),
            id="lm-studio",
        ),
        pytest.param(  # Ollama's, llama.cpp's: 404
            Reply(status=404, body=[b"404 page not found"], content_type="text/plain"),
            id="ollama",
        ),
    ],
)
async def test_a_base_url_without_v1_says_to_add_it(reply: Reply) -> None:
    async with script_server() as server:
        server.add(reply)
        _, final = await collect(stream_openai_compat(model_at(server.base), user_context(), key()))
        assert server.requests[0].path == "/chat/completions"
    error = present(final.error_message)
    assert error.endswith(
        "— the base URL has no path, and these servers answer under /v1: set OPENAI_BASE_URL"
        f" to {server.base}/v1"
    ), error
    assert "does this server support stream=true" not in error


async def test_connection_refused_is_reported() -> None:
    from mcp_support import free_port

    base = f"http://127.0.0.1:{free_port()}/v1"
    with anyio.fail_after(5):
        _, final = await collect(stream_openai_compat(model_at(base), user_context(), key()))
    assert final.stop_reason == StopReason.ERROR
    error = present(final.error_message)
    assert error.startswith(f"OpenAI API at {base}: could not connect")
    assert "OPENAI_BASE_URL" in error


async def test_make_stream_fn_binds_the_config() -> None:
    async with script_server() as server:
        server.add(oa_text_reply("ok"))
        fn = make_stream_fn(OpenAIConfig(label="Local", api_key_env=None, requires_api_key=False))
        _, final = await collect(fn(model_at(server.base + "/v1"), user_context(), options()))
        assert final.text == "ok"


async def test_twenty_thousand_deltas_make_the_whole_text() -> None:
    """A long answer in many small deltas arrives whole (that it grows in place, not copied
    for each delta, is the next test)."""
    pieces = [f"w{i} " for i in range(20_000)]
    async with script_server() as server:
        server.add(oa_text_reply(*pieces))
        _, final = await collect(
            stream_openai_compat(model_at(server.base + "/v1"), user_context(), key()), limit=60
        )
        assert final.text == "".join(pieces)


async def test_the_growing_text_is_not_copied_for_each_delta() -> None:
    """The text grows in place: while it streams, the memory held at any moment stays near one
    copy of the text. Copying it for each delta (``text = text + delta``) holds the old and the
    new text at once: a peak of twice the text. (How fast is benchmarks/bench_providers.py.)"""
    pieces = ["x" * 16_384] * 128  # 2 MiB of text in 128 deltas
    async with script_server() as server:
        # First a short answer: what is made once per process (the TLS context, lazy imports)
        # is not counted below.
        server.add(oa_text_reply("warm"), oa_text_reply(*pieces))
        _, warm = await collect(
            stream_openai_compat(model_at(server.base + "/v1"), user_context(), key())
        )
        assert warm.text == "warm"
        stream = stream_openai_compat(model_at(server.base + "/v1"), user_context(), key())
        last = None
        with peak_memory() as peak, anyio.fail_after(30):  # a hang guard
            async for event in stream:  # keep no events: each holds its delta
                last = event
        assert last is not None and last.type == "done"
        size = len(last.partial.text)
        assert size == 128 * 16_384
        assert peak.bytes < 1.5 * size, (
            f"peak {peak.bytes} bytes while streaming {size} bytes of text"
        )


async def test_abort_without_a_socket_races_each_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the socket is not at hand (HTTP/2, custom transports) each read is raced instead."""
    from mcp_agent.providers import http

    monkeypatch.setattr(http, "_http11_socket", lambda response: None)
    async with script_server() as server:
        gate = Gate()
        server.add(Reply(body=[oa_chunk({"content": "Partial"}), gate, OA_DONE]))
        controller = AbortController()
        stream = stream_openai_compat(
            model_at(server.base + "/v1"), user_context(), key(signal=controller.signal)
        )
        # The server holds the rest back until the stream has ended.
        _, final = await abort_when_stalled(stream, controller, gate, text="Partial")
        assert final.stop_reason == StopReason.ABORTED and final.text == "Partial"
        assert final.error_message == "aborted"


async def test_gzip_encoded_stream_and_split_utf8() -> None:
    import zlib

    compressor = zlib.compressobj(wbits=31)  # gzip framing
    raw = [
        oa_chunk({"content": "caf"}),
        oa_chunk({"content": "é ☕"}),
        oa_chunk({}, "stop"),
        OA_DONE,
    ]
    joined = b"".join(raw)
    cut = joined.index("é".encode()) + 1  # split inside a multi-byte character
    pieces = [joined[:cut], joined[cut:]]
    body: list[bytes | float | Gate] = [
        compressor.compress(p) + compressor.flush(zlib.Z_SYNC_FLUSH) for p in pieces
    ]
    body.append(compressor.flush())
    async with script_server() as server:
        server.add(Reply(body=body, headers={"content-encoding": "gzip"}))
        _, final = await collect(
            stream_openai_compat(model_at(server.base + "/v1"), user_context(), key())
        )
        assert final.text == "café ☕" and final.stop_reason == StopReason.STOP


async def test_utf8_split_across_chunks_uncompressed() -> None:
    data = oa_chunk({"content": "naïve ☕ text"})
    cut = data.index("☕".encode()) + 2
    async with script_server() as server:
        server.add(Reply(body=[data[:cut], 0.01, data[cut:], oa_chunk({}, "stop"), OA_DONE]))
        _, final = await collect(
            stream_openai_compat(model_at(server.base + "/v1"), user_context(), key())
        )
        assert final.text == "naïve ☕ text"


async def test_consumer_may_stop_early() -> None:
    async with script_server() as server:
        gate = Gate()
        server.add(Reply(body=[oa_chunk({"content": "a"}), gate, OA_DONE]))
        stream = stream_openai_compat(model_at(server.base + "/v1"), user_context(), key())
        assert isinstance(stream, AsyncGenerator)  # closed early below
        try:
            # The server holds the rest back until the stream is closed: a close that waited
            # for the stalled server would never return (the hang guard fails the test).
            with anyio.fail_after(10):
                async for event in stream:
                    if isinstance(event, TextDeltaEvent):
                        break
                await stream.aclose()
            sent_by_then = list(server.sent)
        finally:
            gate.open()
        assert sent_by_then == [oa_chunk({"content": "a"})]  # closed while the server held on


# --- the event stream's wire format -------------------------------------------------------------
# SseParser cuts the usual one-line ``data:`` events out of the text itself and hands everything
# else to httpx-sse's decoders; whatever the text and however it is split into reads, it must
# give what those decoders give for the whole text.

SSE_ENDPOINT = Endpoint(label="Test API", base_url="http://test", url="http://test/x")

UNUSUAL_STREAMS: dict[str, tuple[str, list[str | tuple[str, str]]]] = {
    "comments": (": keep-alive\n\ndata: a\n\n:ping\ndata: b\n\n", ["a", "b"]),
    "multi-line data": ('data: x\n\ndata: {"a":\ndata: 1}\n\n', ["x", '{"a":\n1}']),
    "event, id and retry fields": (
        "event: delta\nid: 7\nretry: 10\ndata: x\n\ndata: y\n\n",
        [("x", "delta"), "y"],
    ),
    "CRLF line ends": ("data: a\r\n\r\ndata: b\r\n\r\n", ["a", "b"]),
    "CR line ends": ("data: a\r\rdata: b\r\r", ["a", "b"]),
    "mixed line ends": (
        "data: a\n\ndata: b\r\n\ndata: c\n\r\ndata: d\r\n\r\ndata: e\n\n",
        list("abcde"),
    ),
    "the space after the colon": (
        "data: x\n\ndata:a\n\ndata:  b\n\ndata:\n\ndata\n\n",
        ["x", "a", " b"],
    ),
    "blank lines between events": ("\n\ndata: a\n\n\n\n\ndata: b\n\n\n", ["a", "b"]),
    "a byte order mark": ("\ufeffdata: a\n\ndata: b\n\n", ["a", "b"]),
    "unicode line separators inside data": ("data: a\u2028b\x85c\x0cd\n\n", ["a\u2028b\x85c\x0cd"]),
    "the last event without its blank line": ("data: a\n\ndata: b\n", ["a", "b"]),
}


def parse_sse(pieces: list[str]) -> list[tuple[str, str]]:
    seen: list[tuple[str, str]] = []
    parser = SseParser(SSE_ENDPOINT, lambda data, event: seen.append((data, event)))
    for piece in pieces:
        if piece:
            parser.feed(piece)
    parser.close()
    return seen


def reference_sse(text: str) -> list[tuple[str, str]]:
    """httpx-sse's decoders over the whole text at once (what its EventSource gives)."""
    lines, decoder = SSELineDecoder(), SSEDecoder()
    seen = []
    for line in [*lines.decode(text.removeprefix("\ufeff")), *lines.flush(), ""]:
        sse = decoder.decode(line)
        if sse is not None:
            seen.append((sse.data, sse.event))
    return seen


@pytest.mark.parametrize("name", UNUSUAL_STREAMS)
def test_sse_unusual_streams_however_split(name: str) -> None:
    text, expected = UNUSUAL_STREAMS[name]
    wanted = [item if isinstance(item, tuple) else (item, "message") for item in expected]
    reference = reference_sse(text)
    # events without data (blank data lines, a remembered id) are of no use and skipped
    assert [event for event in reference if event[0]] == wanted
    assert parse_sse([text]) == reference
    assert parse_sse(list(text)) == reference  # one character per read
    for cut in range(1, len(text)):
        assert parse_sse([text[:cut], text[cut:]]) == reference, cut


def test_sse_read_ending_just_after_a_line() -> None:
    text = "data: x\n\ndata: a\ndata: b\n\ndata: c\n\n"
    expected = [("x", "message"), ("a\nb", "message"), ("c", "message")]
    assert reference_sse(text) == expected
    assert parse_sse(["data: x\n\n", "data: a\nd", "ata: b\n\n", "data: c\n\n"]) == expected
    assert parse_sse(["data: x\n\n", "data: a\n", "data: b\n\ndata: c\n", "\n"]) == expected


@given(
    data=st.data(),
    blocks=st.lists(
        st.sampled_from(
            [
                'data: {"i": 1}\n\n',
                "data:x\n\n",
                "data: a\ndata: b\n\n",
                ": comment\n\n",
                "event: e\ndata: y\n\n",
                "id: 3\n\n",
                "retry: 5\ndata: r\n\n",
                "data: crlf\r\n\r\n",
                "data: cr\r\r",
                "data: mixed\r\n\n",
                "\n",
                "data: \u2028\n\n",
            ]
        ),
        min_size=1,
        max_size=12,
    ),
)
@settings(max_examples=300, deadline=None)
def test_sse_parser_agrees_with_httpx_sse(data: st.DataObject, blocks: list[str]) -> None:
    text = "".join(blocks)
    cuts = data.draw(st.lists(st.integers(min_value=1, max_value=len(text)), max_size=8))
    points = sorted({0, len(text), *cuts})
    pieces = [text[a:b] for a, b in itertools.pairwise(points)]
    assert parse_sse(pieces) == reference_sse(text)


@pytest.mark.parametrize(
    "pieces",
    [
        ["data: a\n\n", '{"error": "raw"}\n\n'],  # after a one-line event
        ['data: a\n\n{"error": "raw"}\n\n'],  # in the same read
        ["data: a\r\n\r\noops\r\n\r\n"],  # on the decoders' path
        ["data: a\n\nnot sse\n"],  # at the end, without a blank line
        ["data: a\n\n", "\ufeffdata: b\n\n"],  # a byte order mark is one only at the start
    ],
)
def test_sse_lines_that_are_not_sse_are_refused(pieces: list[str]) -> None:
    with pytest.raises(MalformedStream, match="malformed event stream line"):
        parse_sse(pieces)


async def test_unusual_event_stream_end_to_end() -> None:
    """Comments, CRLF, multi-line data, event/id/retry fields, a byte order mark, an event split
    across reads and several in one read: all through a real HTTP stream."""
    first = oa_chunk({"role": "assistant", "content": "one "})
    body: list[bytes | float | Gate] = [
        "\ufeff: hello\n\n".encode(),
        first[:20],
        0.01,
        first[20:],
        b"event: message\nid: 1\nretry: 100\n" + oa_chunk({"content": "two "}),
        oa_chunk({"content": "three "}).replace(b"\n", b"\r\n"),
        b'data: {"id": "chatcmpl-1", "choices":\ndata: [{"index": 0, "delta": {"content": "four "}}]}\n\n',
        oa_chunk({"content": "five "}) + b": ping\n\n" + oa_chunk({"content": "six"}),
        oa_chunk({}, "stop"),
        OA_DONE,
    ]
    async with script_server() as server:
        server.add(Reply(body=body))
        _, final = await collect(
            stream_openai_compat(model_at(server.base + "/v1"), user_context(), key())
        )
        assert final.stop_reason == StopReason.STOP, final.error_message
        assert final.text == "one two three four five six"


def test_a_block_of_a_type_pi_does_not_have_yet_is_not_sent() -> None:
    from mcp_agent.providers.openai_compat import convert_messages, detect_compat

    model = model_at("http://127.0.0.1:9/v1")
    context = LlmContext(system_prompt="", messages=unknown_blocks_history())
    sent = convert_messages(model, context, detect_compat(model))
    assert "redacted_thinking" not in json.dumps(sent) and "video" not in json.dumps(sent)
    assert [m["role"] for m in sent] == ["user", "assistant"]


async def test_two_calls_with_one_id_are_two_calls_with_ids_of_their_own() -> None:
    def call(index: int, arguments: str) -> bytes:
        entry = {"index": index, "id": "same", "type": "function"}
        return oa_chunk(
            {"tool_calls": [{**entry, "function": {"name": "echo", "arguments": arguments}}]}
        )

    async with script_server() as server:
        server.add(
            Reply(
                body=[
                    call(0, '{"text": "a"}'),
                    call(1, '{"text": "b"}'),
                    call(2, '{"text": "c"}'),
                    oa_chunk({}, "tool_calls"),
                    OA_DONE,
                ]
            )
        )
        _, final = await collect(
            stream_openai_compat(model_at(server.base + "/v1"), user_context(), key())
        )
    assert [(c.id, c.arguments) for c in final.tool_calls] == [
        ("same", {"text": "a"}),
        ("same_2", {"text": "b"}),
        ("same_3", {"text": "c"}),
    ]


def _delta(index: int | None = None, id: str = "", **function: str) -> bytes:
    entry: dict[str, Any] = {"function": function}
    if index is not None:
        entry["index"] = index
    if id:
        entry.update(id=id, type="function")
    return oa_chunk({"tool_calls": [entry]})


@pytest.mark.parametrize(
    ("deltas", "expected"),
    [
        pytest.param(  # Ollama and others: every call is index 0, told apart by id
            [
                _delta(0, "a", name="ls", arguments='{"path": "/"}'),
                _delta(0, "b", name="read", arguments='{"path": '),
                _delta(0, arguments='"x"}'),
            ],
            [("a", "ls", {"path": "/"}), ("b", "read", {"path": "x"})],
            id="every-call-index-0",
        ),
        pytest.param(  # indexes that shift within one call, its id repeated
            [
                _delta(0, "a", name="ls", arguments='{"pa'),
                _delta(1, "a", arguments='th": "/"}'),
                _delta(2, "b", name="read", arguments='{"path": "x"}'),
            ],
            [("a", "ls", {"path": "/"}), ("b", "read", {"path": "x"})],
            id="shifting-index-same-id",
        ),
        pytest.param(  # no index at all: id starts a call, the deltas after it continue
            [
                _delta(None, "a", name="ls", arguments='{"pa'),
                _delta(None, arguments='th": "/"}'),
                _delta(None, "b", name="read", arguments='{"path": "x"}'),
                _delta(None, "b", name="read"),  # id and name repeated on a later delta
            ],
            [("a", "ls", {"path": "/"}), ("b", "read", {"path": "x"})],
            id="no-index",
        ),
        pytest.param(  # a suffix made for a repeated id is not handed to a later call
            [
                _delta(0, "a", name="ls", arguments="{}"),
                _delta(1, "a", name="ls", arguments="{}"),
                _delta(2, "a_2", name="ls", arguments="{}"),
            ],
            [("a", "ls", {}), ("a_2", "ls", {}), ("a_2_2", "ls", {})],
            id="suffix-then-real-id",
        ),
    ],
)
async def test_tool_call_deltas_as_servers_send_them(
    deltas: list[bytes], expected: list[tuple[str, str, dict[str, Any]]]
) -> None:
    async with script_server() as server:
        server.add(Reply(body=[*deltas, oa_chunk({}, "tool_calls"), OA_DONE]))
        _, final = await collect(
            stream_openai_compat(model_at(server.base + "/v1"), user_context(), key())
        )
    assert final.stop_reason == StopReason.TOOL_USE, final.error_message
    assert [(c.id, c.name, c.arguments) for c in final.tool_calls] == expected


@pytest.mark.parametrize(
    ("deltas", "expected"),
    [
        pytest.param(  # relays in front of Gemini: each call whole, all index 0, no ids
            [
                _delta(0, name="get_weather", arguments='{"city": "A"}'),
                _delta(0, name="get_weather", arguments='{"city": "B"}'),
                _delta(0, name="ls", arguments="{}"),
            ],
            [("get_weather", {"city": "A"}), ("get_weather", {"city": "B"}), ("ls", {})],
            id="each-whole-index-0",
        ),
        pytest.param(  # the same without any index
            [
                _delta(None, name="get_weather", arguments='{"city": "A"}'),
                _delta(None, name="ls", arguments="{}"),
            ],
            [("get_weather", {"city": "A"}), ("ls", {})],
            id="each-whole-no-index",
        ),
        pytest.param(  # a name repeated on every delta of one call: still one call
            [
                _delta(0, name="read", arguments='{"path": '),
                _delta(0, name="read", arguments='"x"}'),
            ],
            [("read", {"path": "x"})],
            id="name-on-every-delta",
        ),
        pytest.param(  # the name said again on a last delta with no arguments: no new call
            [
                _delta(0, name="read", arguments='{"path": "x"}'),
                _delta(0, name="read"),
                _delta(None, name="read", arguments=""),
            ],
            [("read", {"path": "x"})],
            id="name-again-without-arguments",
        ),
    ],
)
async def test_calls_without_ids_on_one_index_are_told_apart_by_a_name_after_whole_arguments(
    deltas: list[bytes], expected: list[tuple[str, dict[str, Any]]]
) -> None:
    # The second and third calls were lost: their arguments ran on after the first's.
    async with script_server() as server:
        server.add(Reply(body=[*deltas, oa_chunk({}, "tool_calls"), OA_DONE]))
        _, final = await collect(
            stream_openai_compat(model_at(server.base + "/v1"), user_context(), key())
        )
    assert final.stop_reason == StopReason.TOOL_USE, final.error_message
    assert [(c.name, c.arguments) for c in final.tool_calls] == expected
    assert len({c.id for c in final.tool_calls}) == len(expected)


@pytest.mark.parametrize("ending", ["whole", "dropped"])
async def test_calls_sent_without_ids_get_ids_of_their_own(ending: str) -> None:
    """Some compatible servers send no id: two calls sharing the empty id could not each have
    their result (the session, the loop and the API pair them by id)."""
    deltas: list[Any] = [
        _delta(0, name="ls", arguments='{"path": "/"}'),
        _delta(1, name="read", arguments='{"path": "x"}'),
    ]
    body: list[Any] = [*deltas, oa_chunk({}, "tool_calls"), OA_DONE]
    async with script_server() as server:
        server.add(Reply(body=deltas, drop=True) if ending == "dropped" else Reply(body=body))
        _, final = await collect(
            stream_openai_compat(model_at(server.base + "/v1"), user_context(), key())
        )
    calls = final.tool_calls
    assert [(c.name, c.arguments) for c in calls] == [
        ("ls", {"path": "/"}),
        ("read", {"path": "x"}),
    ]
    assert all(c.id for c in calls) and len({c.id for c in calls}) == 2, calls
    if ending == "whole":
        assert final.stop_reason == StopReason.TOOL_USE, final.error_message
    else:
        assert final.stop_reason == StopReason.ERROR


async def test_a_lone_surrogate_from_the_model_is_replaced_and_the_answer_kept() -> None:
    # JSON allows the escape of half a surrogate pair; no UTF-8 can hold it.
    text = '{"choices":[{"index":0,"delta":{"content":"lone \\ud800 pair \\ud83d\\ude00 ok"}}]}'
    arguments = '{"text": "\\udc00"}'  # the escape inside the arguments' own JSON
    tool = {"index": 0, "id": "c1", "function": {"name": "echo", "arguments": arguments}}
    async with script_server() as server:
        server.add(
            Reply(
                body=[
                    f"data: {text}\n\n".encode(),
                    sse({"choices": [{"index": 0, "delta": {"tool_calls": [tool]}}]}),
                    oa_chunk({}, "tool_calls"),
                    OA_DONE,
                ]
            )
        )
        _, final = await collect(
            stream_openai_compat(model_at(server.base + "/v1"), user_context(), key())
        )
    assert final.stop_reason == StopReason.TOOL_USE
    assert final.text == "lone \ufffd pair \U0001f600 ok"
    assert final.tool_calls[0].arguments == {"text": "\ufffd"}
    final.model_dump_json()  # storable: no character without UTF-8 left


@pytest.mark.parametrize(
    "beat",
    [
        pytest.param(b": keepalive\n\n", id="comments"),
        pytest.param(sse({"id": "chatcmpl-1", "choices": []}), id="chunks-without-content"),
        pytest.param(sse({"choices": [{"index": 0, "delta": {}}]}), id="empty-deltas"),
        pytest.param(b"event: ping\ndata: {}\n\n", id="named-pings"),
        pytest.param(  # a server stuck repeating a call's start: no end, no bound, before
            _delta(0, "c1", name="ls", arguments=""), id="tool-call-deltas-without-arguments"
        ),
    ],
)
async def test_a_stream_of_keep_alives_alone_times_out_and_keeps_the_text(beat: bytes) -> None:
    """Whatever carries nothing (comments, or events with nothing in them) is no progress: a
    server that sends only that for the stall timeout has stalled."""
    keepalive: list[bytes | float | Gate] = [beat, 0.05] * 100  # 5 s of them
    async with script_server() as server:
        server.add(Reply(body=[oa_chunk({"content": "first words"}), *keepalive, OA_DONE]))
        events, final = await collect(
            stream_openai_compat(
                model_at(server.base + "/v1"), user_context(), key(extra={"stall_timeout": 0.5})
            )
        )
    assert isinstance(events[-1], ErrorEvent)
    assert final.text == "first words"
    assert (  # which timeout, and the setting that waits longer
        "timed out waiting for the response (only keep-alives for 0.5 s; a provider's"
        " stall_timeout in models.toml waits longer)"
    ) in (final.error_message or "")
    assert is_transient_error(final)  # retried as a read that timed out is
    assert len(server.sent) < 60  # it gave up, long before the stream's end


async def test_a_long_event_arriving_slowly_between_keep_alives_is_not_a_stall() -> None:
    # A big event in small pieces, keep-alive comments among the events (as OpenRouter and
    # Anthropic send them): nothing but comments never lasts the stall timeout.
    text = "y" * 400
    event = sse({"choices": [{"index": 0, "delta": {"content": text}}]})
    pieces: list[bytes | float | Gate] = []
    for start in range(0, len(event), 20):
        pieces += [event[start : start + 20], 0.02]
    keepalive: list[bytes | float | Gate] = [b": PROCESSING\n\n", 0.1] * 2
    body = [*keepalive, *pieces, *keepalive, oa_chunk({"content": "!"}), *keepalive]
    async with script_server() as server:
        server.add(Reply(body=[*body, oa_chunk({}, "stop"), OA_DONE]))
        _, final = await collect(
            stream_openai_compat(
                model_at(server.base + "/v1"),
                user_context(),
                key(extra={"stall_timeout": 0.3, "read_timeout": 5}),
            )
        )
    assert final.stop_reason == StopReason.STOP, final.error_message
    assert final.text == text + "!"


@pytest.mark.parametrize(
    "piece",
    [
        pytest.param(b"data: {" + b"x" * 20_000, id="a-line-without-end"),
        pytest.param(b"data: " + b"x" * 20_000 + b"\n", id="data-lines-without-a-blank-line"),
    ],
)
async def test_an_event_without_end_is_given_up_at_its_bound(
    monkeypatch: pytest.MonkeyPatch, piece: bytes
) -> None:
    from mcp_agent.providers import http

    monkeypatch.setattr(http, "MAX_EVENT_CHARS", 100_000)
    endless: list[bytes | float | Gate] = [piece] * 1_000  # 20 MB
    async with script_server() as server:
        server.add(Reply(body=[oa_chunk({"content": "so far"}), *endless, OA_DONE]))
        _, final = await collect(
            stream_openai_compat(model_at(server.base + "/v1"), user_context(), key())
        )
    assert final.stop_reason == StopReason.ERROR and final.text == "so far"
    assert "an event of over 100,000 characters in the event stream" in (final.error_message or "")
    assert len(server.sent) < 100  # it stopped reading, long before the end


def test_a_lone_surrogate_after_an_escaped_backslash_is_replaced() -> None:
    from mcp_agent.providers.common import parse_json_lenient

    # A backslash, the letters "ud800", then half a pair: only the half is no character.
    assert parse_json_lenient('{"text": "\\\\ud800\\udc00 \\ud83d\\ude00"}') == {
        "text": "\\ud800\ufffd \U0001f600"
    }
