"""Model servers that misbehave, against both HTTP providers over real loopback sockets: each
fault ends the answer with one clear line (never a raise), keeps what came before it, and is
retried only when a second try may meet something else."""

from __future__ import annotations

import contextlib
import json
import socket
import ssl
import tracemalloc
import zlib
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import pytest
from anyio.abc import SocketStream
from hypothesis import given
from hypothesis import strategies as st
from narrow import narrow, present
from providers_support import (
    OA_DONE,
    Gate,
    Reply,
    ScriptServer,
    an_end,
    an_event,
    an_message_start,
    an_text_block,
    collect,
    fast_retries,
    model_at,
    oa_chunk,
    oa_text_reply,
    options,
    peak_memory,
    script_server,
    sse,
    user_context,
)

from mcp_agent.messages import StopReason, TextContent, ThinkingContent
from mcp_agent.providers import http
from mcp_agent.providers.anthropic import AnthropicConfig, stream_anthropic
from mcp_agent.providers.base import is_context_overflow, is_transient_error
from mcp_agent.providers.openai_compat import OpenAIConfig, stream_openai_compat
from mcp_agent.wire import escape_controls, one_line

pytestmark = pytest.mark.anyio

Body = list[bytes | float | Gate]


def openai(base: str, **extra: Any) -> Any:
    return stream_openai_compat(
        model_at(base + "/v1"), user_context(), options(api_key="sk-test", extra=extra)
    )


def anthropic(base: str, **extra: Any) -> Any:
    model = model_at(base, "claude-sonnet-4-5", api="anthropic-messages", provider="anthropic")
    return stream_anthropic(model, user_context(), options(api_key="sk-ant-test", extra=extra))


def call_chunk(index: int, arguments: Any, call_id: str | None = None) -> bytes:
    call: dict[str, Any] = {"index": index, "function": {"arguments": arguments}}
    if call_id is not None:
        call["id"] = call_id
        call["function"]["name"] = "read"
    return oa_chunk({"tool_calls": [call]})


@pytest.mark.parametrize(
    ("bad", "kind"),
    [
        pytest.param(oa_chunk({"content": 5}), "TypeError", id="content-a-number"),
        pytest.param(oa_chunk({"content": ["a"]}), "TypeError", id="content-a-list"),
        pytest.param(call_chunk(0, 7, "c1"), "TypeError", id="arguments-a-number"),
    ],
)
async def test_data_of_a_type_no_api_sends_ends_the_answer_saying_so(bad: bytes, kind: str) -> None:
    async with script_server() as server:
        server.add(Reply(body=[oa_chunk({"content": "kept"}), bad, oa_chunk({}, "stop"), OA_DONE]))
        _, final = await collect(openai(server.base))
    assert final.stop_reason == StopReason.ERROR
    assert final.text == "kept"  # the text before it is whole, and storable
    final.model_dump_json()
    error = present(final.error_message)
    assert f"unexpected data in the event stream ({kind}: " in error, error
    assert "\n" not in error and len(error) < 400
    assert not is_transient_error(final)  # the same data would come again
    assert len(server.requests) == 1


async def test_tool_arguments_sent_as_an_object_are_taken() -> None:
    async with script_server() as server:
        body: Body = [call_chunk(0, {"path": "a.txt"}, "c1"), oa_chunk({}, "tool_calls"), OA_DONE]
        server.add(Reply(body=body))
        _, final = await collect(openai(server.base))
    assert final.stop_reason == StopReason.TOOL_USE, final.error_message
    assert final.tool_calls[0].arguments == {"path": "a.txt"}


async def test_tool_arguments_nested_past_the_parser_are_no_arguments() -> None:
    async with script_server() as server:
        body: Body = [call_chunk(0, "[" * 100_000, "c1"), oa_chunk({}, "tool_calls"), OA_DONE]
        server.add(Reply(body=body))
        _, final = await collect(openai(server.base))
    assert final.stop_reason == StopReason.TOOL_USE, final.error_message
    assert final.tool_calls[0].arguments == {}


async def test_an_answer_holds_at_most_max_tool_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(http, "MAX_TOOL_CALLS", 50)
    calls = [call_chunk(n, "{}", f"c{n}") for n in range(60)]
    async with script_server() as server:
        server.add(Reply(body=[*calls, oa_chunk({}, "tool_calls"), OA_DONE]))
        _, final = await collect(openai(server.base))
    assert final.stop_reason == StopReason.ERROR
    assert "the answer asks for over 50 tool calls" in present(final.error_message)
    assert len(final.tool_calls) == 50
    async with script_server() as server:  # up to the bound, every call is taken
        server.add(Reply(body=[*calls[:50], oa_chunk({}, "tool_calls"), OA_DONE]))
        _, final = await collect(openai(server.base))
    assert final.stop_reason == StopReason.TOOL_USE
    assert [call.id for call in final.tool_calls] == [f"c{n}" for n in range(50)]


async def test_an_answer_is_bounded_and_what_came_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    """A stream that will not stop giving text is given up past MAX_ANSWER_CHARS (measured
    every ANSWER_CHECK_EVERY characters of the stream), not held until memory runs out."""
    monkeypatch.setattr(http, "MAX_ANSWER_CHARS", 50_000)
    monkeypatch.setattr(http, "ANSWER_CHECK_EVERY", 10_000)
    chunks = [oa_chunk({"content": "x" * 1000}) for _ in range(200)]  # 200,000 characters
    async with script_server() as server:
        server.add(Reply(body=[*chunks, oa_chunk({}, "stop"), OA_DONE]))
        _, final = await collect(openai(server.base))
    assert final.stop_reason == StopReason.ERROR
    assert "the answer passed 50,000 characters; gave up on it" in present(final.error_message)
    kept = len(final.text)
    assert 50_000 < kept < 100_000, kept  # what came before the check is kept
    async with script_server() as server:  # under the bound, the whole answer
        server.add(Reply(body=[*chunks[:40], oa_chunk({}, "stop"), OA_DONE]))
        _, final = await collect(openai(server.base))
    assert final.stop_reason == StopReason.STOP and len(final.text) == 40_000


async def test_a_thinking_signature_counts_against_the_bound_and_grows_in_place(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A signature is no text, yet held and stored: one that will not end is given up at the
    answer's bound. Its deltas grow it in place: joined by copying, 32 MB of them held the
    event loop (every run, every client of the server) for 80 s."""
    monkeypatch.setattr(http, "MAX_ANSWER_CHARS", 50_000)
    monkeypatch.setattr(http, "ANSWER_CHECK_EVERY", 10_000)
    start = an_event("content_block_start", index=0, content_block={"type": "thinking"})
    signed = an_event(
        "content_block_delta", index=0, delta={"type": "signature_delta", "signature": "s" * 1000}
    )
    async with script_server() as server:
        server.add(Reply(body=[an_message_start(), start, *[signed] * 200, *an_end()]))
        _, final = await collect(anthropic(server.base))
    assert final.stop_reason == StopReason.ERROR
    assert "the answer passed 50,000 characters" in present(final.error_message)
    thinking = narrow(final.content[0], ThinkingContent)
    assert 50_000 < len((thinking.model_extra or {})["thinkingSignature"]) < 100_000
    # In place: while it streams, the memory held stays near one copy of the signature;
    # joining by copying holds the old and the new one at once.
    monkeypatch.undo()
    signed = an_event(
        "content_block_delta", index=0, delta={"type": "signature_delta", "signature": "s" * 16_384}
    )
    async with script_server() as server:
        server.add(Reply(body=[an_message_start(), *an_text_block(0, "warm"), *an_end()]))
        server.add(Reply(body=[an_message_start(), start, *[signed] * 128, *an_end()]))
        await collect(anthropic(server.base))  # what is made once per process is not counted
        last: Any = None
        with peak_memory() as peak, anyio.fail_after(30):  # a hang guard
            async for event in anthropic(server.base):  # keep no events
                last = event.partial if event.type in ("done", "error") else last
    assert last is not None and last.stop_reason == StopReason.STOP, last
    size = len((narrow(last.content[0], ThinkingContent).model_extra or {})["thinkingSignature"])
    assert size == 128 * 16_384
    assert peak.bytes < 1.5 * size, (
        f"peak {peak.bytes} bytes while streaming a {size}-byte signature"
    )


@pytest.mark.parametrize("api", ["openai", "anthropic"])
async def test_tool_call_arguments_still_streaming_count_against_the_bound(
    monkeypatch: pytest.MonkeyPatch, api: str
) -> None:
    """Arguments streamed in many deltas are held as text until the call ends: that text is
    measured too, or one endless call would grow without a bound."""
    monkeypatch.setattr(http, "MAX_ANSWER_CHARS", 50_000)
    monkeypatch.setattr(http, "ANSWER_CHECK_EVERY", 10_000)
    part = '"' + "x" * 998 + '",'
    if api == "openai":
        start = call_chunk(0, '{"a":[', "c1")
        deltas = [call_chunk(0, part) for _ in range(200)]  # 200,000 characters
        end: Body = [call_chunk(0, '""]}'), oa_chunk({}, "tool_calls"), OA_DONE]
    else:
        tool = {"type": "tool_use", "id": "toolu_1", "name": "read", "input": {}}

        def delta(text: str) -> bytes:
            json_delta = {"type": "input_json_delta", "partial_json": text}
            return an_event("content_block_delta", index=0, delta=json_delta)

        opened = an_event("content_block_start", index=0, content_block=tool)
        start = an_message_start() + opened + delta('{"a":[')

        deltas = [delta(part) for _ in range(200)]
        end = [delta('""]}'), an_event("content_block_stop", index=0), *an_end("tool_use")]
    async with script_server() as server:
        server.add(Reply(body=[start, *deltas, *end]))
        provider = openai(server.base) if api == "openai" else anthropic(server.base)
        _, final = await collect(provider)
    assert final.stop_reason == StopReason.ERROR
    assert "the answer passed 50,000 characters; gave up on it" in present(final.error_message)
    async with script_server() as server:  # under the bound, the call is whole
        server.add(Reply(body=[start, *deltas[:40], *end]))
        provider = openai(server.base) if api == "openai" else anthropic(server.base)
        _, final = await collect(provider)
    assert final.stop_reason == StopReason.TOOL_USE, final.error_message
    assert len(final.tool_calls[0].arguments["a"]) == 41


async def test_calls_repeating_one_id_still_get_ids_of_their_own() -> None:
    calls = [call_chunk(n, "{}", "same") for n in range(4)]
    async with script_server() as server:
        server.add(Reply(body=[*calls, oa_chunk({}, "tool_calls"), OA_DONE]))
        _, final = await collect(openai(server.base))
    assert [call.id for call in final.tool_calls] == ["same", "same_2", "same_3", "same_4"]


async def test_a_stream_cut_inside_its_last_event_is_incomplete_not_malformed() -> None:
    cut = b'data: {"id":"chatcmpl-1","choices":[{"index":0,"delta":{"content":"cu'
    async with script_server() as server:
        server.add(Reply(body=[oa_chunk({"content": "so far"}), cut]))
        _, final = await collect(openai(server.base))
    assert final.text == "so far"
    assert "ended before the response was complete" in present(final.error_message)
    assert is_transient_error(final)  # retried, as a dropped connection is


async def test_a_whole_last_event_without_its_blank_line_still_counts() -> None:
    async with script_server() as server:
        server.add(
            Reply(body=[oa_chunk({"content": "all"}), oa_chunk({}, "stop"), b"data: [DONE]"])
        )
        _, final = await collect(openai(server.base))
    assert final.stop_reason == StopReason.STOP and final.text == "all"


async def test_an_answer_whose_stream_never_ends_is_taken_once_it_is_whole(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(http, "END_GRACE", 0.2)
    never = Gate()
    async with script_server() as server:
        server.add(Reply(body=[oa_chunk({"content": "whole"}), oa_chunk({}, "stop"), never]))
        _, final = await collect(openai(server.base, read_timeout=60))
        never.open()
    assert final.stop_reason == StopReason.STOP, final.error_message
    assert final.text == "whole"
    an_open = Gate()
    async with script_server() as server:
        body = [an_message_start(), *an_text_block(0, "whole"), an_end()[0], an_open]
        server.add(Reply(body=body))
        _, final = await collect(anthropic(server.base, read_timeout=60))
        an_open.open()
    assert final.stop_reason == StopReason.STOP, final.error_message
    assert final.text == "whole"


@pytest.mark.parametrize(
    "beat",
    [
        pytest.param(an_event("ping"), id="pings"),
        pytest.param(  # a server stuck on a delta with nothing in it: no end, no bound, before
            an_event("content_block_delta", index=1, delta={"type": "text_delta", "text": ""}),
            id="empty-deltas",
        ),
    ],
)
async def test_anthropic_pings_alone_are_a_stall(beat: bytes) -> None:
    pings: list[bytes | float | Gate] = [beat, 0.05] * 100
    start = an_event("content_block_start", index=1, content_block={"type": "text", "text": ""})
    async with script_server() as server:
        server.add(Reply(body=[an_message_start(), *an_text_block(0, "so far"), start, *pings]))
        _, final = await collect(anthropic(server.base, stall_timeout=0.5))
    assert final.content[0] == TextContent(text="so far")
    error = present(final.error_message)
    assert "only keep-alives for 0.5 s; a provider's stall_timeout in models.toml" in error
    assert len(server.sent) < 60


async def test_anthropic_data_of_the_wrong_type_is_said_and_not_retried() -> None:
    bad = an_event("content_block_start", index=1, content_block={"type": "text", "text": 5})
    async with script_server() as server:
        server.add(Reply(body=[an_message_start(), *an_text_block(0, "kept"), bad, *an_end()]))
        _, final = await collect(anthropic(server.base))
    assert final.text == "kept" and final.stop_reason == StopReason.ERROR
    error = present(final.error_message)
    assert "unexpected data in the event stream (ValidationError: " in error
    assert "\n" not in error and not is_transient_error(final)


async def test_an_error_body_cannot_write_to_a_terminal() -> None:
    said = {"error": {"message": "bad\u001b[31m key\nline2\r\n\u0000", "type": "auth"}}
    async with script_server() as server:
        server.add(
            Reply(status=401, body=[json.dumps(said).encode()], content_type="application/json")
        )
        _, final = await collect(openai(server.base))
    error = present(final.error_message)
    assert "bad\\x1b[31m key line2 \\x00 (auth)" in error, error
    assert not any(ord(char) < 32 for char in error)


async def test_a_connection_reset_before_the_answer_is_retried() -> None:
    async with script_server() as server:
        server.add(Reply(reset=True), oa_text_reply("second time"))
        _, final = await collect(openai(server.base))
    assert final.text == "second time" and final.stop_reason == StopReason.STOP
    assert len(server.requests) == 2
    async with script_server() as server:
        server.add(*[Reply(reset=True)] * 4)
        _, final = await collect(openai(server.base))
    assert "the connection closed before the server answered" in present(final.error_message)
    assert len(server.requests) == 4  # the first try and three retries


async def test_a_json_answer_in_place_of_a_stream_says_what_the_server_said() -> None:
    body = b'{"error":{"message":"stream not supported on this deployment"}}'
    async with script_server() as server:
        server.add(Reply(body=[body], content_type="application/json"))
        _, final = await collect(openai(server.base))
    error = present(final.error_message)
    assert "expected a server-sent event stream but got application/json" in error
    assert error.endswith("; it said: stream not supported on this deployment")


async def test_a_web_page_in_place_of_a_stream_asks_whether_the_base_url_is_the_apis() -> None:
    # A base URL at a web UI (Open WebUI's port, not its API) or a login page in front of it.
    page = b"<!doctype html><html><head><title>Open WebUI</title></head><body></body></html>"
    async with script_server() as server:
        server.add(Reply(body=[page], content_type="text/html; charset=utf-8"))
        _, final = await collect(openai(server.base))
    error = present(final.error_message)
    assert "got text/html; charset=utf-8; it said: Open WebUI (an HTML page) — a web page" in error
    assert "does the base URL (OPENAI_BASE_URL) point at the API, not at a web UI" in error
    assert "stream=true" not in error  # streaming is not what is wrong


def openrouter_error(code: int, provider: str, raw: str) -> dict[str, Any]:
    return {
        "error": {
            "code": code,
            "message": "Provider returned error",
            "metadata": {"raw": raw, "provider_name": provider},
        }
    }


async def test_a_relays_provider_returned_error_says_what_the_provider_said() -> None:
    """OpenRouter's errors say "Provider returned error"; what went wrong is in its metadata
    (the model's provider and its raw answer), mid-stream or as the request's status."""
    limited = openrouter_error(429, "Venice", "qwen3-coder:free is rate-limited upstream.")
    raw = json.dumps({"error": {"message": "This model's maximum context length is 8192"}})
    too_long = openrouter_error(400, "OpenAI", raw)
    async with script_server() as server:
        server.add(
            Reply(body=[oa_chunk({"content": "so"}), sse(limited)]),
            Reply(
                status=400, body=[json.dumps(too_long).encode()], content_type="application/json"
            ),
        )
        _, mid_stream = await collect(openai(server.base, max_retries=0))
        _, refused = await collect(openai(server.base, max_retries=0))
    error = present(mid_stream.error_message)
    assert (
        "rate limited the request mid-stream: Provider returned error (429); Venice said:"
        " qwen3-coder:free is rate-limited upstream."
    ) in error
    assert is_transient_error(mid_stream)
    error = present(refused.error_message)
    assert "Provider returned error (400); OpenAI said: This model's maximum context" in error
    assert is_context_overflow(refused)  # compacted, as the provider's own words say


async def test_a_whole_chat_completion_in_place_of_a_stream_is_the_answer() -> None:
    """A server or gateway that answers stream=true with the whole completion as JSON: the
    answer it holds, as if streamed (text as a delta, the calls, the usage)."""
    answer = {
        "id": "chatcmpl-9",
        "object": "chat.completion",
        "model": "gpt-4o-mini",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": "Let me look.",
                    "reasoning_content": "The user wants files.",
                    "tool_calls": [
                        {
                            "id": "call_1",
                            "type": "function",
                            "function": {"name": "ls", "arguments": '{"path": "."}'},
                        },
                        {"id": "call_2", "type": "function", "function": {"name": "pwd"}},
                    ],
                    "refusal": None,
                },
                "finish_reason": "tool_calls",
            }
        ],
        "usage": {
            "prompt_tokens": 50,
            "completion_tokens": 7,
            "total_tokens": 57,
            "prompt_tokens_details": {"cached_tokens": 40},
        },
    }
    async with script_server() as server:
        body = json.dumps(answer).encode()
        server.add(Reply(body=[body], content_type="application/json; charset=utf-8"))
        events, final = await collect(openai(server.base))
    assert final.stop_reason == StopReason.TOOL_USE, final.error_message
    assert [e.delta for e in events if e.type == "text_delta"] == ["Let me look."]
    assert narrow(final.content[0], ThinkingContent).thinking == "The user wants files."
    assert [(c.id, c.name, c.arguments) for c in final.tool_calls] == [
        ("call_1", "ls", {"path": "."}),
        ("call_2", "pwd", {}),
    ]
    usage = final.usage
    assert (usage.input, usage.output, usage.cache_read) == (10, 7, 40)


async def test_a_whole_json_answer_past_its_bound_is_given_up_not_held(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A JSON body in place of a stream is read whole, so it has a bound: past twice the
    longest answer, the run ends saying so instead of holding all the server sends."""
    monkeypatch.setattr(http, "MAX_ANSWER_CHARS", 50_000)
    bound = 100_000
    step = 10_000
    head = b'{"object": "chat.completion", "choices": [{"message": {"content": "'
    async with script_server() as server:
        filler = [b"a" * step] * (bound // step + 2)
        server.add(Reply(body=[head, *filler], content_type="application/json"))
        _, final = await collect(openai(server.base, max_retries=0))
    assert final.stop_reason == StopReason.ERROR
    assert f"the answer passed {bound:,} bytes of JSON; gave up on it" in present(
        final.error_message
    )


async def test_a_whole_anthropic_message_in_place_of_a_stream_is_the_answer() -> None:
    answer = {
        "id": "msg_9",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5",
        "content": [
            {"type": "thinking", "thinking": "Files, then.", "signature": "EqQB"},
            {"type": "text", "text": "Let me look."},
            {"type": "tool_use", "id": "toolu_1", "name": "ls", "input": {"path": "."}},
            {"type": "tool_use", "id": "toolu_2", "name": "pwd", "input": {}},
        ],
        "stop_reason": "tool_use",
        "stop_sequence": None,
        "usage": {"input_tokens": 12, "output_tokens": 9, "cache_read_input_tokens": 100},
    }
    async with script_server() as server:
        server.add(Reply(body=[json.dumps(answer).encode()], content_type="application/json"))
        events, final = await collect(anthropic(server.base))
    assert final.stop_reason == StopReason.TOOL_USE, final.error_message
    assert [e.delta for e in events if e.type == "text_delta"] == ["Let me look."]
    thinking = narrow(final.content[0], ThinkingContent)
    assert thinking.to_json_dict()["thinkingSignature"] == "EqQB"  # goes back as it came
    assert [(c.id, c.name, c.arguments) for c in final.tool_calls] == [
        ("toolu_1", "ls", {"path": "."}),
        ("toolu_2", "pwd", {}),
    ]
    assert (final.usage.input, final.usage.output, final.usage.cache_read) == (12, 9, 100)


@pytest.mark.parametrize(
    ("data", "said"),
    [
        pytest.param('{"message": "quota gone"}', "quota gone", id="object-without-error-key"),
        pytest.param("upstream fell over", "upstream fell over", id="plain-text"),
    ],
)
@pytest.mark.parametrize("api", ["openai", "anthropic"])
async def test_an_event_named_error_is_an_error_whatever_it_holds(
    api: str, data: str, said: str
) -> None:
    async with script_server() as server:
        if api == "openai":
            body: Body = [oa_chunk({"content": "so"}), sse(data, event="error")]
            server.add(Reply(body=[*body, oa_chunk({}, "stop"), OA_DONE]))
            _, final = await collect(openai(server.base))
        else:
            body = [an_message_start(), *an_text_block(0, "so"), sse(data, event="error")]
            server.add(Reply(body=[*body, *an_end()]))
            _, final = await collect(anthropic(server.base))
    assert final.stop_reason == StopReason.ERROR and final.text == "so"
    assert f"the server reported an error mid-stream: {said}" in present(final.error_message)


@pytest.mark.parametrize(
    "error",
    [
        {"error": {"code": 429, "message": "Provider returned error"}},  # OpenRouter's
        {"error": {"message": "Too Many Requests", "type": "too_many_requests"}},
    ],
)
async def test_a_rate_limit_said_mid_stream_is_a_passing_error(error: dict[str, Any]) -> None:
    """A 429 before the stream is retried; said inside it (a relay's upstream limited it
    half-way), it ended the run for good."""
    async with script_server() as server:
        server.add(Reply(body=[oa_chunk({"content": "so"}), sse(json.dumps(error))]))
        _, final = await collect(openai(server.base))
        assert "the server rate limited the request mid-stream" in present(final.error_message)
        assert is_transient_error(final)
        # An account out of credit is no passing limit, said anywhere.
        quota = {"message": "You exceeded your current quota", "code": "insufficient_quota"}
        said = json.dumps({"error": {**quota, "type": "insufficient_quota"}})
        server.add(Reply(body=[oa_chunk({"content": "so"}), sse(said)]))
        _, final = await collect(openai(server.base))
    assert not is_transient_error(final)


async def ended_by_error_object(api: str, body: dict[str, Any]) -> Any:
    """The last event of a stream that the error object ``body`` ends mid-answer."""
    async with script_server() as server:
        if api == "openai":
            server.add(Reply(body=[oa_chunk({"content": "so"}), sse(json.dumps(body))]))
            _, final = await collect(openai(server.base))
        else:
            server.add(Reply(body=[an_message_start(), an_event("error", **body)]))
            _, final = await collect(anthropic(server.base))
    return final


@pytest.mark.parametrize(
    ("api", "body", "said"),
    [
        ("openai", {"error": {"message": "Rate limit exceeded"}}, "rate limited the request"),
        ("openai", {"error": {"message": "rate limit exceeded", "code": None}}, "rate limited"),
        (
            "openai",
            {"error": {"message": "Rate limit reached for gpt-4o in organization org-1 (TPM)"}},
            "rate limited the request",
        ),
        ("openai", {"error": "The server is overloaded, try again later."}, "overloaded"),
        ("anthropic", {"type": "error", "error": {"message": "Overloaded"}}, "overloaded"),
    ],
)
async def test_an_error_with_no_type_code_or_status_that_says_a_rate_limit_is_passing(
    api: str, body: dict[str, Any], said: str
) -> None:
    """A relay's mid-stream ``{"error": {"message": "Rate limit exceeded"}}`` has nothing but
    its text to say what it is: since only type, code and status were read, it ended the run
    for good. Its first clause, when it is a whole rate-limit or overload phrase, now says a
    passing fault (the other side: the test below)."""
    final = await ended_by_error_object(api, body)
    assert f"the server {said}" in present(final.error_message)
    assert is_transient_error(final)


@pytest.mark.parametrize(
    ("api", "body"),
    [
        ("openai", {"error": {"message": "bad tool arguments at line 429", "type": "invalid"}}),
        ("openai", {"error": {"message": "too many requests: 500 tools over the limit"}}),
        ("openai", {"error": {"message": "rate limit of your prompt's 429 words", "code": 400}}),
        # With no type, code or status, words about a rate limit or an overload that are not
        # the whole of the first clause.
        ("openai", {"error": {"message": "the rate limit field is unknown"}}),
        ("openai", {"error": {"message": "Overloaded model config: see the docs"}}),
        ("openai", {"error": "rate limit: must be a number"}),
        ("anthropic", {"type": "error", "error": {"message": "tools overloaded with arguments"}}),
        (
            "anthropic",
            {"type": "error", "error": {"type": "invalid_request_error", "message": "line 429"}},
        ),
    ],
)
async def test_a_number_or_word_in_an_error_s_text_is_no_passing_fault(
    api: str, body: dict[str, Any]
) -> None:
    """Only the error object's type, code or status says a rate limit or a server failing: a
    "429" or "500" in its text (a line number, a count) ran the turn again, to fail again."""
    final = await ended_by_error_object(api, body)
    assert "the server reported an error mid-stream" in present(final.error_message)
    assert not is_transient_error(final)


async def test_https_to_a_plain_http_port_says_so_and_is_not_retried() -> None:
    handshakes = 0

    async def plain_http(stream: SocketStream) -> None:
        nonlocal handshakes
        async with stream:
            await stream.receive()  # the TLS client hello, which no HTTP server reads
            handshakes += 1
            await stream.send(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n")

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, plain_http)
        _, final = await collect(openai(f"https://127.0.0.1:{port}"))
        tg.cancel_scope.cancel()
    error = present(final.error_message)
    assert "the TLS handshake failed" in error and "https for TLS, http for plain" in error, error
    assert handshakes == 1  # not retried


def gzip_bomb(prefix: bytes, size: int) -> bytes:
    """``prefix`` and then ``size`` bytes of one letter, gzipped: about a thousandth its size."""
    packer = zlib.compressobj(wbits=31)
    body = [packer.compress(prefix)]
    letters = b"a" * (1 << 20)
    for _ in range(size >> 20):
        body.append(packer.compress(letters))
    body.append(packer.flush())
    return b"".join(body)


@pytest.mark.parametrize("status", [200, 500])
async def test_a_compressed_answer_is_inflated_a_little_at_a_time(status: int) -> None:
    """A small gzip body that inflates to 200 MB (a line without end in an event, or an error
    body) is refused, or cut, holding a fraction of that: each read is inflated in steps."""
    bomb = gzip_bomb(b'data: {"choices":[{"delta":{"content":"', 200 << 20)
    assert len(bomb) < 1 << 20
    async with script_server() as server:
        server.add(Reply(status=status, body=[bomb], headers={"content-encoding": "gzip"}))
        tracemalloc.start()
        try:
            _, final = await collect(openai(server.base, max_retries=0))
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert final.stop_reason == StopReason.ERROR
    error = present(final.error_message)
    if status == 200:
        assert f"an event of over {http.MAX_EVENT_CHARS:,} characters" in error, error
    else:
        assert "500" in error and len(error) < 1000, error
    # httpx inflated each 64 KB read whole, 64 MB at a time, and held 450 MB at the peak.
    assert peak < 3 * http.MAX_EVENT_CHARS, f"{peak:,} bytes at the peak"


@pytest.mark.parametrize("form", ["zlib", "raw"])
async def test_a_deflated_answer_reads_in_either_form(form: str) -> None:
    """``deflate`` is zlib's format, and raw deflate from servers that misread the standard."""
    packer = zlib.compressobj(wbits=zlib.MAX_WBITS if form == "zlib" else -zlib.MAX_WBITS)
    reply = oa_text_reply("deflated ☕")
    body = packer.compress(b"".join(narrow(part, bytes) for part in reply.body)) + packer.flush()
    async with script_server() as server:
        server.add(Reply(body=[body[:7], 0.01, body[7:]], headers={"content-encoding": "deflate"}))
        _, final = await collect(openai(server.base))
    assert final.stop_reason == StopReason.STOP and final.text == "deflated ☕", final


async def test_a_body_that_does_not_inflate_is_said_to_be_damaged() -> None:
    async with script_server() as server:
        server.add(Reply(body=[b"not gzip at all"], headers={"content-encoding": "gzip"}))
        _, final = await collect(openai(server.base, max_retries=0))
    assert final.stop_reason == StopReason.ERROR
    error = present(final.error_message)
    assert "the answer's body is damaged: its gzip does not inflate (" in error, error
    assert not is_transient_error(final)  # the server's fault: a second try meets it again


NGINX_502 = (
    b"<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n"
    b"<center><h1>502 Bad Gateway</h1></center>\r\n<hr><center>nginx</center>\r\n</body>\r\n"
    b"</html>\r\n"
)
CLOUD_PAGE = (
    b"<!DOCTYPE html><html lang=en><head><style>body{color:red}</style>"
    b"<script>var x = '<b>';</script></head><body><div><p>The model service is "
    b"<em>down</em> for upkeep &amp; back soon.</p></div></body></html>"
)


@pytest.mark.parametrize(
    ("page", "said"),
    [
        (NGINX_502, "502 Bad Gateway (an HTML page)"),
        (CLOUD_PAGE, "The model service is down for upkeep & back soon. (an HTML page)"),
        (  # a proxy's page without a title: its heading and its line, each its own words
            b"<html><body><h1>502 Bad Gateway</h1><p>Cannot reach 127.0.0.1:11434</p></body>",
            "502 Bad Gateway Cannot reach 127.0.0.1:11434 (an HTML page)",
        ),
    ],
)
async def test_an_html_error_page_is_said_in_its_own_words(page: bytes, said: str) -> None:
    """A proxy's error page: its title, else its text, not its markup cut at 500 characters."""
    async with script_server() as server:
        server.add(Reply(status=403, body=[page], content_type="text/html"))
        _, final = await collect(openai(server.base, max_retries=0))
    error = present(final.error_message)
    assert said in error and "<" not in error, error


async def test_an_api_key_the_server_quotes_back_is_never_said(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A proxy that names the key it refused: the error (printed, stored in the session, sent
    to MCP clients) and the retry warnings say what went wrong without the key."""
    openai_key = "sk-quoted-key-1234567890"
    echo = json.dumps({"error": {"message": f"Invalid API key: {openai_key}"}}).encode()
    async with script_server() as server:
        server.add(
            Reply(status=429, body=[echo], content_type="application/json"),
            Reply(status=401, body=[echo], content_type="application/json"),
        )
        stream = stream_openai_compat(
            model_at(server.base + "/v1"), user_context(), options(api_key=openai_key)
        )
        _, final = await collect(stream)
        assert server.requests[0].headers["authorization"] == f"Bearer {openai_key}"
    error = present(final.error_message)
    assert "401" in error and "check OPENAI_API_KEY" in error and "Invalid API key" in error
    warnings = [r.getMessage() for r in caplog.records if r.name == "mcp_agent.providers.http"]
    assert warnings and "429" in warnings[0]
    for said in (error, *warnings):
        assert openai_key not in said and http.REDACTED in said, said
    # Anthropic's x-api-key, quoted in an error event mid-stream.
    anthropic_key = "sk-ant-test"
    body: Body = [
        an_message_start(),
        an_event("error", error={"type": "api_error", "message": f"bad key {anthropic_key}"}),
    ]
    async with script_server() as server:
        server.add(Reply(body=body))
        _, final = await collect(anthropic(server.base, max_retries=0))
    error = present(final.error_message)
    assert "bad key" in error and anthropic_key not in error, error
    assert http.credentials({"authorization": "Bearer x"}) == ()  # too short to cut out


async def test_a_password_in_the_base_url_is_never_said() -> None:
    """A proxy behind basic auth, its password in the base URL: errors name the server
    without it (they are printed, stored in the session and sent to MCP clients)."""
    async with script_server() as server:
        server.add(Reply(status=404, body=[b"no such route"], content_type="text/plain"))
        base = server.base.replace("http://", "http://alice:hunter2-secret@")
        _, final = await collect(openai(base, max_retries=0))
        assert server.requests  # it was asked, with the password
    error = present(final.error_message)
    assert "404" in error and "alice:***@127.0.0.1" in error, error
    assert "hunter2-secret" not in error


def _one_line_whole(text: str, limit: int) -> str:
    """``one_line`` as it was: the whole text flattened, then cut."""
    flat = escape_controls(" ".join(text.split()))
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


@given(
    st.text(st.sampled_from("ab \t\n\r\x1b\x1c\x1f\x85\xa0\u2003\u202e"), max_size=300),
    st.integers(min_value=1, max_value=60),
)
def test_one_line_quotes_a_text_as_before_at_any_length(text: str, limit: int) -> None:
    assert one_line(text, limit) == _one_line_whole(text, limit)


def test_one_line_costs_what_it_shows() -> None:
    """A server's malformed event (up to 64 MB) is quoted in an error in 200 characters:
    flattening all of it first took 4.5 s of the event loop and 630 MB for 30 MB."""
    text = "ab " * 10_000_000
    with peak_memory() as peak:
        quoted = one_line(text, 200)
    assert quoted == "ab " * 66 + "a…"
    assert peak.bytes < 100_000, peak


async def test_a_providers_timeouts_in_the_models_file_bound_its_requests(
    tmp_path: Path,
) -> None:
    """A local model on a CPU may take longer than the default 300 s before its first token:
    the models file sets a provider's read and stall timeouts, which its requests then keep
    to (a caller's own options still win)."""
    from mcp_agent.providers.registry import ModelRegistry, ModelRegistryError

    never = Gate()
    async with script_server() as server:
        models = tmp_path / "models.toml"
        models.write_text(
            f'[providers.local]\nbase_url = "{server.base}/v1"\nread_timeout = 0.3\n'
            "stall_timeout = 600\n"
        )
        registry = ModelRegistry.load(models)
        model = registry.resolve("local:slow-model")
        server.add(Reply(body=[oa_chunk({"content": "thinking"}), never]))
        stream = registry.stream_fn_for(model)(model, user_context(), options())
        _, final = await collect(stream, limit=30)
        never.open()
    assert final.stop_reason == StopReason.ERROR and final.text == "thinking"
    # How long nothing came, what to set for longer, and that what came is kept.
    said = present(final.error_message)
    assert "nothing came for 0.3 s" in said and "read_timeout in models.toml" in said, said
    assert said.endswith("the partial response is kept"), said
    for bad, said in (("0", "greater than 0"), ('"long"', "read_timeout"), ("inf", "finite")):
        models.write_text(f'[providers.local]\nbase_url = "http://x/v1"\nread_timeout = {bad}\n')
        with pytest.raises(ModelRegistryError, match=said) as raised:
            ModelRegistry.load(models)
        assert "providers.local" in str(raised.value)


LLAMA_CPP_OVERFLOW = (
    b'error: {"code":400,"message":"the request exceeds the available context size, try'
    b' increasing it","type":"exceed_context_size_error","n_prompt_tokens":9000,"n_ctx":4096}\n\n'
)


@pytest.mark.parametrize("api", ["openai", "anthropic"])
async def test_llama_cpp_error_line_is_the_servers_error_and_an_overflow_is_marked(
    api: str,
) -> None:
    # llama.cpp's server writes an error in a stream as "error: {...}", a field of its own:
    # what it says is said (and an overflow compacts), not "malformed event stream line".
    async with script_server() as server:
        if api == "openai":
            server.add(Reply(body=[oa_chunk({"content": "so"}), LLAMA_CPP_OVERFLOW]))
            _, final = await collect(openai(server.base))
        else:
            body: Body = [an_message_start(), *an_text_block(0, "so"), LLAMA_CPP_OVERFLOW]
            server.add(Reply(body=body))
            _, final = await collect(anthropic(server.base))
    assert final.stop_reason == StopReason.ERROR and final.text == "so"
    error = present(final.error_message)
    assert "malformed" not in error
    assert "the server reported an error mid-stream: the request exceeds the available" in error
    assert is_context_overflow(final) and not is_transient_error(final)


def resolver(monkeypatch: pytest.MonkeyPatch, answers: list[int | None]) -> list[str]:
    """The system resolver, but for the name ``model-box.test``: each lookup of it takes the
    next of ``answers`` (a getaddrinfo error code, or None: 127.0.0.1), as a resolver that
    does not know the name, or could not be asked, says (a test asks no DNS server). Returns
    the names looked up."""
    looked_up: list[str] = []
    real = socket.getaddrinfo

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        name = host.decode() if isinstance(host, bytes) else str(host)  # anyio sends bytes
        looked_up.append(name)
        if name != "model-box.test":
            return real(host, *args, **kwargs)
        code = answers.pop(0)
        if code is not None:
            raise socket.gaierror(code, "the resolver's words")
        return real("127.0.0.1", *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return looked_up


async def test_a_host_name_that_is_not_known_is_said_so_and_not_retried(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    looked_up = resolver(monkeypatch, [socket.EAI_NONAME] * 5)
    _, final = await collect(openai("http://model-box.test:9"))
    error = present(final.error_message)
    assert "the host name 'model-box.test' is not known" in error
    assert "is the base URL (OPENAI_BASE_URL) spelt right?" in error
    assert looked_up == ["model-box.test"]  # a typo is no passing fault
    assert not is_transient_error(final)


async def test_a_resolver_that_could_not_be_asked_is_tried_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with script_server() as server:
        server.add(oa_text_reply("answered"))
        port = server.base.rsplit(":", 1)[1]
        looked_up = resolver(monkeypatch, [socket.EAI_AGAIN, None])
        _, final = await collect(openai(f"http://model-box.test:{port}"))
    assert final.stop_reason == StopReason.STOP and final.text == "answered"
    assert looked_up.count("model-box.test") == 2


async def test_a_refused_connection_says_nothing_listens_there() -> None:
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    await listener.aclose()  # the port is free: nothing listens there
    _, final = await collect(openai(f"http://127.0.0.1:{port}"))
    error = present(final.error_message)
    assert f"could not connect (connection refused: nothing listens at 127.0.0.1:{port})" in error
    assert "All connection attempts failed" not in error


@contextlib.contextmanager
def a_host_that_does_not_answer() -> Any:
    """A port whose listener never accepts, its queue full: the kernel drops the next
    connection's SYN, as a host that is down or a firewall that drops does (no refusal)."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        port = listener.getsockname()[1]
        queued = [socket.socket() for _ in range(8)]
        try:
            for sock in queued:
                sock.setblocking(False)
                with contextlib.suppress(BlockingIOError):
                    sock.connect(("127.0.0.1", port))
            yield port
        finally:
            for sock in queued:
                sock.close()


async def test_a_host_that_does_not_answer_says_how_long_it_was_waited_for() -> None:
    with a_host_that_does_not_answer() as port:
        _, final = await collect(openai(f"http://127.0.0.1:{port}", timeout=0.3))
    error = present(final.error_message)
    assert f"could not connect (no answer from 127.0.0.1:{port} within 0.3 s)" in error, error
    assert "(ConnectTimeout)" not in error


@pytest.mark.parametrize(
    "given",
    [
        # A key read from a .env written with CRLF, or copied with a space: the request
        # failed with "Illegal header value".
        pytest.param(" sk-a1b2c3d4\r\n", id="line-end"),
        # A .env line KEY="sk-…" read by what keeps its quotes (docker's --env-file, an MCP
        # client's env written with them): the server refused the key, quotes and all.
        pytest.param('"sk-a1b2c3d4"', id="double-quoted"),
        pytest.param("'sk-a1b2c3d4'\n", id="single-quoted"),
    ],
)
@pytest.mark.parametrize("api", ["openai", "anthropic"])
async def test_an_api_key_with_a_line_end_or_quotes_is_sent_without_them(
    api: str, given: str
) -> None:
    async with script_server() as server:
        if api == "openai":
            server.add(oa_text_reply("fine"))
            model = model_at(server.base + "/v1")
            stream = stream_openai_compat(model, user_context(), options(api_key=given))
        else:
            server.add(Reply(body=[an_message_start(), *an_text_block(0, "fine"), *an_end()]))
            model = model_at(server.base, "claude-sonnet-4-5", api="anthropic-messages")
            stream = stream_anthropic(model, user_context(), options(api_key=given))
        _, final = await collect(stream)
    assert final.text == "fine", final.error_message
    headers = server.requests[0].headers
    assert headers.get("authorization", headers.get("x-api-key")) in (
        "Bearer sk-a1b2c3d4",
        "sk-a1b2c3d4",
    )


@pytest.mark.parametrize(
    "key", ["sk-t\u00e9st-a1b2c3d4", "\u201csk-a1b2c3d4\u201d", "sk-a1 b2c3d4"]
)
@pytest.mark.parametrize("api", ["openai", "anthropic"])
async def test_an_api_key_no_header_can_carry_is_said_before_any_request(
    api: str, key: str
) -> None:
    async with script_server() as server:
        if api == "openai":
            model = model_at(server.base + "/v1")
            stream = stream_openai_compat(model, user_context(), options(api_key=key))
        else:
            model = model_at(server.base, "claude-sonnet-4-5", api="anthropic-messages")
            stream = stream_anthropic(model, user_context(), options(api_key=key))
        _, final = await collect(stream)
        assert server.requests == []
    error = present(final.error_message)
    assert "the API key" in error and "which no API key has: check it" in error, error
    assert "unexpected error" not in error and "a1b2c3d4" not in error


@pytest.mark.parametrize("api", ["openai", "anthropic"])
async def test_an_unusable_key_of_models_toml_is_said_as_its_own(
    api: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The provider's api_key in models.toml, its variable unset: the error named the
    # variable (OPENAI_API_KEY), which the user would look at in vain.
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_AUTH_TOKEN", raising=False)
    key = "\u201csk-a1b2c3d4\u201d"
    async with script_server() as server:
        if api == "openai":
            model = model_at(server.base + "/v1")
            config = OpenAIConfig(api_key=key)
            stream = stream_openai_compat(model, user_context(), options(), config=config)
        else:
            model = model_at(server.base, "claude-sonnet-4-5", api="anthropic-messages")
            stream = stream_anthropic(
                model, user_context(), options(), config=AnthropicConfig(api_key=key)
            )
        _, final = await collect(stream)
        assert server.requests == []
    error = present(final.error_message)
    assert "api_key in models.toml" in error and "_API_KEY" not in error, error


async def test_a_proxys_413_page_is_a_context_overflow() -> None:
    # nginx in front of a model server refuses a body over its client_max_body_size: the
    # conversation has outgrown it, and compaction, not a fault for ever, is what helps.
    page = (
        b"<html><head><title>413 Request Entity Too Large</title></head><body><center>"
        b"<h1>413 Request Entity Too Large</h1></center><hr><center>nginx</center></body></html>"
    )
    async with script_server() as server:
        server.add(Reply(status=413, body=[page], content_type="text/html"))
        _, final = await collect(openai(server.base))
        assert len(server.requests) == 1
    assert "413 Request Entity Too Large (an HTML page)" in present(final.error_message)
    assert is_context_overflow(final) and not is_transient_error(final)


def self_signed(directory: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and its key, as PEM files in ``directory``."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "model server")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = directory / "cert.pem", directory / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_file, key_file


async def test_a_certificate_of_a_private_ca_says_how_to_trust_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A company's TLS proxy or a self-signed model server: what to do was not said.
    from anyio.streams.tls import TLSListener

    cert_file, key_file = self_signed(tmp_path)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert_file, key_file)
    server = ScriptServer()
    server.add(Reply(status=500, body=[b"never"]), oa_text_reply("trusted"))
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    tls = TLSListener(listener, context, standard_compatible=False)
    async with tls, anyio.create_task_group() as tg:
        tg.start_soon(tls.serve, server._handle)
        _, final = await collect(openai(f"https://127.0.0.1:{port}"))
        error = present(final.error_message)
        assert "the server's certificate is not trusted" in error, error
        assert "CA's bundle in SSL_CERT_FILE" in error
        assert server.requests == []  # not retried, nothing sent
        # Doing as it says works.
        monkeypatch.setenv("SSL_CERT_FILE", str(cert_file))
        monkeypatch.setattr(http, "_ssl_context", None)
        server.replies.popleft()
        _, final = await collect(openai(f"https://127.0.0.1:{port}"))
        tg.cancel_scope.cancel()
    assert final.text == "trusted", final.error_message


async def test_http_to_a_tls_port_that_hangs_up_asks_for_https_and_is_not_retried(
    tmp_path: Path,
) -> None:
    """A TLS server read a plain request and hung up: said as "the connection closed before
    the server answered", tried again and again, as a server restarting would be."""
    from anyio.streams.tls import TLSStream

    cert_file, key_file = self_signed(tmp_path)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert_file, key_file)
    connections = 0

    async def tls_only(stream: SocketStream) -> None:
        nonlocal connections
        connections += 1
        with contextlib.suppress(OSError, anyio.BrokenResourceError, anyio.EndOfStream):
            wrapped = await TLSStream.wrap(
                stream, server_side=True, ssl_context=context, standard_compatible=False
            )
            await wrapped.aclose()
        await stream.aclose()

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, tls_only)
        _, final = await collect(openai(f"http://127.0.0.1:{port}", **fast_retries()))
        tg.cancel_scope.cancel()
    error = present(final.error_message)
    assert "did you mean https://?" in error, error
    assert error.endswith(f"Set OPENAI_BASE_URL to https://127.0.0.1:{port}/v1"), error
    assert connections == 2  # the request and the look at the port: no retry


@pytest.mark.parametrize(
    "said",
    [
        "Client sent an HTTP request to an HTTPS server.",
        "The plain HTTP request was sent to HTTPS port",
    ],
)
async def test_a_tls_server_that_answers_a_plain_request_asks_for_https(said: str) -> None:
    async with script_server() as server:
        server.add(Reply(status=400, body=[said.encode()], content_type="text/plain"))
        _, final = await collect(openai(server.base))
    error = present(final.error_message)
    assert error.endswith(
        f"did you mean https://? Set OPENAI_BASE_URL to https://{server.base[7:]}/v1"
    )


@pytest.mark.parametrize("api", ["openai", "anthropic"])
async def test_a_base_url_that_ends_in_the_endpoint_says_what_to_set(api: str) -> None:
    # The endpoint's whole URL pasted as the base URL: "404 … check the model id".
    async with script_server() as server:
        server.add(Reply(status=404, body=[b"404 page not found"], content_type="text/plain"))
        if api == "openai":
            base, added = f"{server.base}/v1", "/chat/completions"
            stream = stream_openai_compat(
                model_at(base + added), user_context(), options(api_key="sk-test")
            )
            setting = "OPENAI_BASE_URL"
        else:
            base, added = server.base, "/v1/messages"
            model = model_at(base + added, "claude-sonnet-4-5", api="anthropic-messages")
            stream = stream_anthropic(model, user_context(), options(api_key="sk-ant-test"))
            setting = "ANTHROPIC_BASE_URL"
        _, final = await collect(stream)
    error = present(final.error_message)
    assert error.endswith(
        f"— the base URL ends in {added}, which is added to it: set {setting} to {base}"
    ), error
