"""The OpenAI-compatible stream's text deltas cut out of each chunk's text when the chunk has the
shape of the one before (StringSlot): fewer parses, and the same answer and events as parsing
every chunk whole."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from providers_support import (
    OA_DONE,
    Gate,
    Reply,
    collect,
    model_at,
    oa_chunk,
    options,
    script_server,
    user_context,
)

from mcp_agent.messages import Model
from mcp_agent.providers import openai_compat
from mcp_agent.providers.common import StringSlot, new_output
from mcp_agent.providers.http import Endpoint, SseParser
from mcp_agent.providers.openai_compat import _StreamState, stream_openai_compat


class Parses:
    """Counts the JSON parses of event data: the stream's own scanner and json.loads."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        scan, loads = openai_compat.scan_json, json.loads

        def counted_scan(text: str, index: int) -> Any:
            self.count += 1
            return scan(text, index)

        def counted_loads(text: Any, **kwargs: Any) -> Any:
            self.count += 1
            return loads(text, **kwargs)

        monkeypatch.setattr(openai_compat, "scan_json", counted_scan)
        monkeypatch.setattr(json, "loads", counted_loads)


@pytest.mark.anyio
async def test_text_deltas_of_one_shape_are_not_parsed_whole(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pieces = [f" w{i}" for i in range(300)] + ['"quoted\\"', " é ü", "\u2028"]
    body: list[bytes | float | Gate] = [oa_chunk({"role": "assistant", "content": ""})]
    body += [oa_chunk({"content": piece}, logprobs=None) for piece in pieces]
    body += [oa_chunk({}, "stop"), OA_DONE]
    parses = Parses(monkeypatch)
    async with script_server() as server:
        server.add(Reply(body=body))
        events, message = await collect(
            stream_openai_compat(
                model_at(server.base + "/v1"), user_context(), options(api_key="sk-test")
            )
        )
    assert message.error_message is None
    assert message.text == "".join(pieces)
    deltas = [e.delta for e in events if e.type == "text_delta"]
    assert deltas == pieces
    # The role chunk, the first text delta (and its probe), the finish and [DONE]'s check:
    # a handful, not one per chunk.
    assert parses.count <= 8, parses.count


ENDPOINT = Endpoint(label="t", base_url="http://t/v1", url="http://t/v1/chat/completions")


class NeverMatches(StringSlot):
    def match(self, data: str) -> str | None:
        return None


def fold(texts: list[str], model_id: str, slot: bool) -> tuple[Any, list[Any]]:
    model = Model(id=model_id, base_url="http://t/v1")
    state = _StreamState(model, new_output(model), ENDPOINT)
    if not slot:
        state._slot = NeverMatches()
    parser = SseParser(ENDPOINT, state.on_event)
    seen: list[Any] = []
    outcome = "ok"
    try:
        for text in texts:
            parser.feed(text)
            seen += [
                (e.type, getattr(e, "delta", None), getattr(e, "content_index", None))
                for e in state.events
            ]
            state.events.clear()
        state.finish()
    except Exception as error:  # the same failure either way
        outcome = f"{type(error).__name__}: {error}"
    dump = state.output.model_dump()
    dump.pop("timestamp")
    return (dump, outcome), seen


PIECES = ["a", " ", '"', "\\", "é", "\n", "<", ">", "/", "think", "</think>", "<think>", "content"]
PIECES += ['"content"', "\u2028", "\ud800", "\U0001f600"]


def _chunk(draw: st.DrawFn) -> str:
    text = st.lists(st.sampled_from(PIECES), max_size=6).map("".join)
    kind = draw(
        st.sampled_from(
            ["text"] * 6
            + [
                "role",
                "reasoning",
                "tool",
                "usage",
                "extra",
                "logprobs",
                "other_id",
                "empty",
                "finish",
                "choice1",
                "refusal",
            ]
        )
    )
    content = draw(text)
    delta: dict[str, Any] = {"content": content}
    chunk: dict[str, Any] = {"id": "c1", "object": "chat.completion.chunk", "model": "m"}
    choice: dict[str, Any] = {"index": 0, "delta": delta, "finish_reason": None}
    if kind == "role":
        delta["role"] = "assistant"
    elif kind == "reasoning":
        delta["reasoning_content"] = draw(text)
    elif kind == "tool":
        delta["tool_calls"] = [
            {"index": 0, "id": "t1", "function": {"name": "f", "arguments": "{}"}}
        ]
    elif kind == "usage":
        chunk["usage"] = {"prompt_tokens": 3, "completion_tokens": 2}
    elif kind == "extra":
        chunk["obfuscation"] = draw(text)
    elif kind == "logprobs":
        choice["logprobs"] = {"content": draw(st.sampled_from([content, "x"]))}
    elif kind == "other_id":
        chunk["id"] = "c2"
    elif kind == "empty":
        delta["content"] = ""
    elif kind == "finish":
        choice["finish_reason"] = "stop"
    elif kind == "choice1":
        choice["index"] = 1
    elif kind == "refusal":
        delta["refusal"] = draw(st.sampled_from([None, "no"]))
    chunk["choices"] = [choice]
    encoded = json.dumps(
        chunk,
        ensure_ascii=draw(st.booleans()),
        separators=draw(st.sampled_from([(",", ":"), (", ", ": "), (" ,", " : ")])),
    )
    return f"data: {encoded}\n\n"


@given(
    chunks=st.lists(st.composite(_chunk)(), min_size=1, max_size=14),
    model_id=st.sampled_from(["gpt-4o-mini", "deepseek-r1"]),
)
@settings(max_examples=400, deadline=None)
def test_cut_text_folds_as_parsed_text(chunks: list[str], model_id: str) -> None:
    texts = [*chunks, "data: [DONE]\n\n"]
    assert fold(texts, model_id, slot=True) == fold(texts, model_id, slot=False)
