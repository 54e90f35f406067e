"""The Anthropic Messages provider against real loopback servers (fakellm and a scripted one)."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest
from narrow import narrow, present
from providers_support import (
    AbortController,
    FakeLlm,
    Gate,
    Reply,
    abort_when_stalled,
    an_end,
    an_event,
    an_message_start,
    an_text_block,
    collect,
    conversation_headers,
    event_types,
    fakellm_fixture,  # noqa: F401  (the fakellm fixture)
    model_at,
    options,
    script_server,
    unknown_blocks_history,
    user_context,
)

from mcp_agent.events import ErrorEvent, TextDeltaEvent, ToolCallDeltaEvent
from mcp_agent.messages import (
    AssistantMessage,
    ImageContent,
    Message,
    Model,
    ModelCost,
    StopReason,
    TextContent,
    ThinkingContent,
    ThinkingLevel,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)
from mcp_agent.providers.anthropic import (
    AnthropicConfig,
    stream_anthropic,
    thinking_budget,
)
from mcp_agent.providers.base import CONTEXT_OVERFLOW_MARK, LlmContext, is_context_overflow
from mcp_agent.tools import AgentTool, AgentToolResult

pytestmark = pytest.mark.anyio


async def _noop(*args, **kwargs) -> AgentToolResult:  # pragma: no cover
    return AgentToolResult.text("")


def tool(name: str) -> AgentTool:
    return AgentTool(
        name=name,
        description=f"the {name} tool",
        parameters={
            "type": "object",
            "properties": {"path": {"type": "string"}},
            "required": ["path"],
        },
        execute=_noop,
    )


def claude(base_url: str, model_id: str = "claude-sonnet-4-5", **fields) -> Model:
    fields.setdefault("reasoning", True)
    fields.setdefault("max_tokens", 64_000)
    fields.setdefault("input", ["text", "image"])
    return model_at(base_url, model_id, api="anthropic-messages", provider="anthropic", **fields)


def key(**kwargs):
    return options(api_key="sk-ant-test", **kwargs)


# --- against fakellm --------------------------------------------------------------------------


async def test_text_from_fakellm(fakellm: FakeLlm) -> None:
    model = claude(fakellm.anthropic_base_url)
    events, final = await collect(
        stream_anthropic(model, user_context("hello"), key(headers=conversation_headers()))
    )
    assert final.text == "Hi there! This is a mock response."
    assert final.stop_reason == StopReason.STOP and final.error_message is None
    assert (final.api, final.provider, final.model) == (
        "anthropic-messages",
        "anthropic",
        "claude-sonnet-4-5",
    )
    assert final.to_json_dict()["responseId"].startswith("msg_")
    assert final.usage.input == 1 and final.usage.output > 0
    assert final.usage.total_tokens == final.usage.input + final.usage.output
    assert event_types(events)[:2] == ["start", "text_start"] and event_types(events)[-2:] == [
        "text_end",
        "done",
    ]


async def test_text_and_tool_use_with_partial_json_from_fakellm(fakellm: FakeLlm) -> None:
    model = claude(fakellm.anthropic_base_url)
    context = user_context("please list files", tools=[tool("ls"), tool("read")])
    events, final = await collect(
        stream_anthropic(model, context, key(headers=conversation_headers()))
    )
    assert final.stop_reason == StopReason.TOOL_USE
    assert final.text == "Let me look."
    calls = final.tool_calls
    assert [c.name for c in calls] == ["ls", "read"]
    assert calls[0].arguments == {"path": ".", "all": True}
    assert calls[1].arguments["range"] == {"start": 1, "end": 20}
    assert calls[1].arguments["note"] == 'quote " and unicode é'
    assert all(c.id.startswith("toolu_") for c in calls)
    for call_index, content_index in ((0, 1), (1, 2)):
        pieces = [
            e.delta
            for e in events
            if isinstance(e, ToolCallDeltaEvent) and e.content_index == content_index
        ]
        assert len(pieces) > 1
        assert json.loads("".join(pieces)) == calls[call_index].arguments


async def test_abort_mid_stream_from_fakellm(fakellm: FakeLlm) -> None:
    controller = AbortController()
    stream = stream_anthropic(
        claude(fakellm.anthropic_base_url),
        user_context("tell a long story"),
        key(signal=controller.signal, headers=conversation_headers()),
    )
    events = []
    aborted_after = None  # how many events had come when the abort fired
    with anyio.fail_after(10):  # a hang guard
        async for event in stream:
            events.append(event)
            if aborted_after is None and sum(isinstance(e, TextDeltaEvent) for e in events) == 3:
                controller.abort()
                aborted_after = len(events)
    # The abort is seen before anything else streams: the one event after it is the end.
    assert aborted_after is not None
    assert event_types(events[aborted_after:]) == ["error"]
    assert isinstance(events[-1], ErrorEvent)
    final = events[-1].partial
    assert final.stop_reason == StopReason.ABORTED and final.error_message == "aborted"
    deltas = [e.delta for e in events if isinstance(e, TextDeltaEvent)]
    assert len(deltas) == 3 and final.text == "".join(deltas)
    assert final.text.startswith("Once upon a") and "the end." not in final.text


# --- request shape ----------------------------------------------------------------------------


async def test_request_headers_body_and_message_conversion() -> None:
    async with script_server() as server:
        server.add(Reply(body=[an_message_start(), *an_text_block(0, "ok"), *an_end()]))
        model = claude(server.base)
        signed: dict[str, Any] = {"thinkingSignature": "sig-1"}
        history: list[Message] = [
            UserMessage(
                content=[TextContent(text="see"), ImageContent(data="aGk=", mime_type="image/png")]
            ),
            AssistantMessage(
                content=[
                    ThinkingContent(thinking="hmm", **signed),
                    TextContent(text="Reading."),
                    ToolCall(id="call|with/odd:chars", name="read", arguments={"path": "a"}),
                ],
                api="openai-completions",
                provider="openai",
                model="gpt-4o",
                stop_reason=StopReason.TOOL_USE,
            ),
            ToolResultMessage(
                tool_call_id="call|with/odd:chars",
                tool_name="read",
                content=[TextContent(text="file a")],
                is_error=False,
            ),
        ]
        context = LlmContext(system_prompt="Be brief.", messages=history, tools=[tool("read")])
        opts = key(max_tokens=2000, thinking_level=ThinkingLevel.MEDIUM, temperature=0.5)
        _, final = await collect(stream_anthropic(model, context, opts))
        assert final.text == "ok"
        request = server.requests[0]
        assert request.path == "/v1/messages"
        assert request.headers["x-api-key"] == "sk-ant-test"
        assert request.headers["anthropic-version"] == "2023-06-01"
        body = request.json()
        assert body["model"] == "claude-sonnet-4-5" and body["stream"] is True
        assert body["thinking"] == {"type": "enabled", "budget_tokens": 8192}
        assert body["max_tokens"] == 2000 + 8192
        assert "temperature" not in body  # not allowed with thinking
        assert body["system"] == [
            {"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}
        ]
        assert body["tools"] == [
            {
                "name": "read",
                "description": "the read tool",
                "input_schema": {
                    "type": "object",
                    "properties": {"path": {"type": "string"}},
                    "required": ["path"],
                },
                "cache_control": {"type": "ephemeral"},
            }
        ]
        messages = body["messages"]
        assert messages[0] == {
            "role": "user",
            "content": [
                {"type": "text", "text": "see"},
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": "image/png", "data": "aGk="},
                },
            ],
        }
        # another model's thinking becomes text; odd ids are normalised in calls and results
        assert messages[1] == {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "hmm"},
                {"type": "text", "text": "Reading."},
                {
                    "type": "tool_use",
                    "id": "call_with_odd_chars",
                    "name": "read",
                    "input": {"path": "a"},
                },
            ],
        }
        assert messages[2] == {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "call_with_odd_chars",
                    "content": "file a",
                    "is_error": False,
                    "cache_control": {"type": "ephemeral"},
                }
            ],
        }


async def test_base_url_with_v1_and_bearer_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.setenv("ANTHROPIC_AUTH_TOKEN", "tok")
    async with script_server() as server:
        server.add(Reply(body=[an_message_start(), *an_text_block(0, "ok"), *an_end()]))
        _, final = await collect(
            stream_anthropic(claude(server.base + "/v1"), user_context(), options())
        )
        assert final.text == "ok"
        assert server.requests[0].path == "/v1/messages"
        assert server.requests[0].headers["authorization"] == "Bearer tok"
        assert "x-api-key" not in server.requests[0].headers


def test_thinking_budgets() -> None:
    assert thinking_budget(ThinkingLevel.LOW, 4000, 64_000) == (6048, 2048)
    assert thinking_budget(ThinkingLevel.HIGH, 32_000, 64_000) == (48_384, 16384)
    # the model's limit leaves room for the answer
    assert thinking_budget(ThinkingLevel.HIGH, 8000, 16_000) == (16_000, 14_976)
    assert thinking_budget(ThinkingLevel.XHIGH, 8000, 20_000) == (20_000, 18_976)


# --- stream contents --------------------------------------------------------------------------


async def test_thinking_with_signature_round_trips() -> None:
    async with script_server() as server:
        server.add(
            Reply(
                body=[
                    an_message_start(
                        12, cache_read_input_tokens=100, cache_creation_input_tokens=50
                    ),
                    an_event(
                        "content_block_start",
                        index=0,
                        content_block={"type": "thinking", "thinking": ""},
                    ),
                    an_event(
                        "content_block_delta",
                        index=0,
                        delta={"type": "thinking_delta", "thinking": "Let me "},
                    ),
                    an_event(
                        "content_block_delta",
                        index=0,
                        delta={"type": "thinking_delta", "thinking": "think."},
                    ),
                    an_event(
                        "content_block_delta",
                        index=0,
                        delta={"type": "signature_delta", "signature": "EqQB"},
                    ),
                    an_event(
                        "content_block_delta",
                        index=0,
                        delta={"type": "signature_delta", "signature": "xyz"},
                    ),
                    an_event("content_block_stop", index=0),
                    an_event(
                        "content_block_start",
                        index=1,
                        content_block={"type": "redacted_thinking", "data": "opaque"},
                    ),
                    an_event("content_block_stop", index=1),
                    an_event("ping"),
                    *an_text_block(2, "The ", "answer."),
                    *an_end("end_turn", 40),
                ]
            ),
            Reply(body=[an_message_start(), *an_text_block(0, "next"), *an_end()]),
        )
        model = claude(
            server.base, cost=ModelCost(input=3, output=15, cache_read=0.3, cache_write=3.75)
        )
        events, final = await collect(
            stream_anthropic(model, user_context(), key(thinking_level=ThinkingLevel.LOW))
        )
        assert event_types(events) == [
            "start",
            "thinking_start",
            "thinking_delta",
            "thinking_delta",
            "thinking_end",
            "thinking_start",
            "thinking_end",
            "text_start",
            "text_delta",
            "text_delta",
            "text_end",
            "done",
        ]
        thinking, redacted, text = final.content
        thinking = narrow(thinking, ThinkingContent)
        assert thinking.thinking == "Let me think."
        assert thinking.to_json_dict() == {
            "type": "thinking",
            "thinking": "Let me think.",
            "thinkingSignature": "EqQBxyz",
        }
        assert redacted.model_extra == {"thinkingSignature": "opaque", "redacted": True}
        assert narrow(text, TextContent).text == "The answer."
        usage = final.usage
        assert (
            usage.input,
            usage.output,
            usage.cache_read,
            usage.cache_write,
            usage.total_tokens,
        ) == (12, 40, 100, 50, 202)
        assert usage.cost.total == pytest.approx((12 * 3 + 40 * 15 + 100 * 0.3 + 50 * 3.75) / 1e6)

        # the signed thinking goes back to the same model unchanged
        context = LlmContext(
            system_prompt="",
            messages=[UserMessage(content="q"), final, UserMessage(content="more")],
        )
        await collect(stream_anthropic(model, context, key(thinking_level=ThinkingLevel.LOW)))
        assistant = server.requests[1].json()["messages"][1]
        assert assistant == {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "Let me think.", "signature": "EqQBxyz"},
                {"type": "redacted_thinking", "data": "opaque"},
                {"type": "text", "text": "The answer."},
            ],
        }


async def test_omitted_thinking_goes_back_signed_before_its_tool_call() -> None:
    """Claude Opus 4.7 omits its thinking by default: the block comes with no text, only its
    signature (which carries the thinking). In a tool loop the API wants that block back
    before the tool_use; dropped, the next request is refused ("Expected `thinking` or
    `redacted_thinking`, but found `tool_use`")."""
    omitted = an_event(
        "content_block_start", index=0, content_block={"type": "thinking", "thinking": ""}
    )
    signed = an_event(
        "content_block_delta", index=0, delta={"type": "signature_delta", "signature": "Eo8D"}
    )
    call = an_event(
        "content_block_start",
        index=1,
        content_block={"type": "tool_use", "id": "toolu_1", "name": "ls", "input": {}},
    )
    async with script_server() as server:
        server.add(
            Reply(
                body=[
                    an_message_start(),
                    omitted,
                    signed,
                    an_event("content_block_stop", index=0),
                    call,
                    an_event("content_block_stop", index=1),
                    *an_end("tool_use"),
                ]
            ),
            Reply(body=[an_message_start(), *an_text_block(0, "listed"), *an_end()]),
        )
        model = claude(server.base, "claude-opus-4-7")
        thinking = key(thinking_level=ThinkingLevel.HIGH)
        _, first = await collect(stream_anthropic(model, user_context(), thinking))
        assert first.stop_reason == StopReason.TOOL_USE
        result = ToolResultMessage(
            tool_call_id="toolu_1",
            tool_name="ls",
            content=[TextContent(text="a.txt")],
            is_error=False,
        )
        context = LlmContext(system_prompt="", messages=[UserMessage(content="q"), first, result])
        _, second = await collect(stream_anthropic(model, context, thinking))
    assert second.text == "listed"
    assistant = server.requests[1].json()["messages"][1]
    assert assistant["content"] == [
        {"type": "thinking", "thinking": "", "signature": "Eo8D"},
        {"type": "tool_use", "id": "toolu_1", "name": "ls", "input": {}},
    ]


@pytest.mark.parametrize(
    ("reason", "stop"),
    [
        ("end_turn", StopReason.STOP),
        ("max_tokens", StopReason.LENGTH),
        ("tool_use", StopReason.TOOL_USE),
        ("stop_sequence", StopReason.STOP),
    ],
)
async def test_stop_reasons(reason: str, stop: StopReason) -> None:
    async with script_server() as server:
        server.add(Reply(body=[an_message_start(), *an_text_block(0, "x"), *an_end(reason)]))
        _, final = await collect(stream_anthropic(claude(server.base), user_context(), key()))
        assert final.stop_reason == stop


async def test_refusal_is_an_error() -> None:
    async with script_server() as server:
        server.add(Reply(body=[an_message_start(), *an_text_block(0, "I can"), *an_end("refusal")]))
        _, final = await collect(stream_anthropic(claude(server.base), user_context(), key()))
        assert final.stop_reason == StopReason.ERROR and final.text == "I can"
        # The model's words are said, as OpenAI's refusal field's are.
        assert present(final.error_message).endswith(
            "the model refused to answer (stop_reason refusal): I can"
        )


# --- faults -----------------------------------------------------------------------------------


def error_reply(status: int, kind: str, message: str, **headers: str) -> Reply:
    body = json.dumps({"type": "error", "error": {"type": kind, "message": message}}).encode()
    return Reply(status=status, body=[body], headers=headers, content_type="application/json")


async def test_401() -> None:
    async with script_server() as server:
        server.add(error_reply(401, "authentication_error", "invalid x-api-key"))
        _, final = await collect(stream_anthropic(claude(server.base), user_context(), key()))
        assert final.error_message == (
            f"Anthropic API at {server.base}: 401 Unauthorized: invalid x-api-key "
            "(authentication_error) — check ANTHROPIC_API_KEY"
        )


async def test_missing_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_AUTH_TOKEN", raising=False)
    async with script_server() as server:
        _, final = await collect(stream_anthropic(claude(server.base), user_context(), options()))
        assert present(final.error_message).endswith("no API key — set ANTHROPIC_API_KEY")
        assert server.requests == []


async def test_overloaded_529_retried_then_success() -> None:
    async with script_server() as server:
        server.add(
            error_reply(529, "overloaded_error", "Overloaded"),
            error_reply(529, "overloaded_error", "Overloaded"),
            Reply(body=[an_message_start(), *an_text_block(0, "ok"), *an_end()]),
        )
        _, final = await collect(stream_anthropic(claude(server.base), user_context(), key()))
        assert final.text == "ok" and len(server.requests) == 3


async def test_overloaded_gives_up() -> None:
    async with script_server() as server:
        server.add(*[error_reply(529, "overloaded_error", "Overloaded") for _ in range(4)])
        _, final = await collect(stream_anthropic(claude(server.base), user_context(), key()))
        assert final.stop_reason == StopReason.ERROR
        error = present(final.error_message)
        assert error.startswith(f"Anthropic API at {server.base}: 529 Overloaded: Overloaded")
        assert "gave up after 4 attempts" in error


async def test_prompt_too_long_is_context_overflow() -> None:
    async with script_server() as server:
        server.add(
            error_reply(
                400, "invalid_request_error", "prompt is too long: 213462 tokens > 200000 maximum"
            )
        )
        _, final = await collect(stream_anthropic(claude(server.base), user_context(), key()))
        error = present(final.error_message)
        assert error.startswith(f"{CONTEXT_OVERFLOW_MARK}: Anthropic API at ")
        assert "prompt is too long" in error
        assert is_context_overflow(final)


async def test_error_event_mid_stream_keeps_partial_text() -> None:
    async with script_server() as server:
        server.add(
            Reply(
                body=[
                    an_message_start(),
                    an_event(
                        "content_block_start", index=0, content_block={"type": "text", "text": ""}
                    ),
                    an_event(
                        "content_block_delta", index=0, delta={"type": "text_delta", "text": "Half"}
                    ),
                    an_event("error", error={"type": "overloaded_error", "message": "Overloaded"}),
                ]
            )
        )
        _, final = await collect(stream_anthropic(claude(server.base), user_context(), key()))
        assert final.stop_reason == StopReason.ERROR and final.text == "Half"
        assert "overloaded mid-stream: Overloaded" in present(final.error_message)


async def test_dropped_connection_keeps_partial_tool_call() -> None:
    async with script_server() as server:
        server.add(
            Reply(
                body=[
                    an_message_start(),
                    *an_text_block(0, "Writing."),
                    an_event(
                        "content_block_start",
                        index=1,
                        content_block={
                            "type": "tool_use",
                            "id": "toolu_1",
                            "name": "write",
                            "input": {},
                        },
                    ),
                    an_event(
                        "content_block_delta",
                        index=1,
                        delta={
                            "type": "input_json_delta",
                            "partial_json": '{"path": "a.txt", "content": "hel',
                        },
                    ),
                ],
                drop=True,
            )
        )
        _, final = await collect(stream_anthropic(claude(server.base), user_context(), key()))
        assert final.stop_reason == StopReason.ERROR
        assert "connection broke off mid-stream" in present(final.error_message)
        assert final.text == "Writing."
        call = final.tool_calls[0]
        assert call.arguments == {"path": "a.txt", "content": "hel"} and call.partial_json is None


async def test_missing_message_stop_is_an_error() -> None:
    async with script_server() as server:
        server.add(Reply(body=[an_message_start(), *an_text_block(0, "cut")]))
        _, final = await collect(stream_anthropic(claude(server.base), user_context(), key()))
        assert final.stop_reason == StopReason.ERROR and final.text == "cut"
        assert "ended before message_stop" in present(final.error_message)


async def test_malformed_line() -> None:
    async with script_server() as server:
        server.add(Reply(body=[an_message_start(), b"<html>502 Bad Gateway</html>\n\n"]))
        _, final = await collect(stream_anthropic(claude(server.base), user_context(), key()))
        assert final.stop_reason == StopReason.ERROR
        assert "malformed event stream line '<html>502 Bad Gateway</html>'" in present(
            final.error_message
        )


async def test_abort_while_stalled() -> None:
    """A stalled stream: the abort must not wait for the next event."""
    async with script_server() as server:
        gate = Gate()
        server.add(
            Reply(
                body=[
                    an_message_start(),
                    an_event(
                        "content_block_start", index=0, content_block={"type": "text", "text": ""}
                    ),
                    an_event(
                        "content_block_delta", index=0, delta={"type": "text_delta", "text": "Part"}
                    ),
                    gate,
                    *an_end(),
                ]
            )
        )
        controller = AbortController()
        stream = stream_anthropic(
            claude(server.base), user_context(), key(signal=controller.signal)
        )
        # The server holds the rest back until the stream has ended.
        _, final = await abort_when_stalled(stream, controller, gate, text="Part")
        assert final.stop_reason == StopReason.ABORTED and final.text == "Part"
        assert final.error_message == "aborted"


async def test_custom_config_label_and_headers() -> None:
    async with script_server() as server:
        server.add(error_reply(403, "permission_error", "no access"))
        config = AnthropicConfig(
            label="Proxy API",
            api_key_env="PROXY_KEY",
            headers={"anthropic-beta": "x"},
            prompt_caching=False,
        )
        _, final = await collect(
            stream_anthropic(claude(server.base), user_context(), key(), config=config)
        )
        error = present(final.error_message)
        assert error.startswith(f"Proxy API at {server.base}: 403 Forbidden: no access")
        assert "PROXY_KEY" in error
        body = server.requests[0].json()
        assert server.requests[0].headers["anthropic-beta"] == "x"
        assert body["system"] == [{"type": "text", "text": "You are terse."}]


def test_a_block_of_a_type_pi_does_not_have_yet_is_not_sent() -> None:
    from mcp_agent.providers.anthropic import convert_messages

    sent = convert_messages(unknown_blocks_history(), claude("http://127.0.0.1:9"))
    assert "redacted_thinking" not in json.dumps(sent) and "video" not in json.dumps(sent)
    assert [m["role"] for m in sent] == ["user", "assistant"]
