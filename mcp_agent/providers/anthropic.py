"""Anthropic Messages over httpx with SSE: text, tool_use with streamed partial JSON, thinking
with budgets from the thinking level (signatures kept so thinking goes back to the API), prompt
caching with cache read/write tokens.

Endpoint conventions follow the official SDK: ``ANTHROPIC_API_KEY`` (or a bearer token in
``ANTHROPIC_AUTH_TOKEN``), ``ANTHROPIC_BASE_URL`` without ``/v1``.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from mcp_agent.events import (
    AssistantMessageEvent,
    TextDeltaEvent,
    TextEndEvent,
    TextStartEvent,
    ThinkingDeltaEvent,
    ThinkingEndEvent,
    ThinkingStartEvent,
    ToolCallDeltaEvent,
    ToolCallEndEvent,
    ToolCallStartEvent,
)
from mcp_agent.messages import (
    AssistantMessage,
    ImageContent,
    Model,
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
    PARTIAL_KEPT,
    LlmContext,
    StreamFn,
    StreamOptions,
)
from mcp_agent.providers.common import (
    ERROR_CHARS,
    THINKING_REDACTED,
    THINKING_SIGNATURE,
    append_str,
    give_calls_ids,
    new_output,
    parse_json_lenient,
    transform_messages,
    update_usage,
)
from mcp_agent.providers.http import (
    CONFIGURED_KEY,
    Endpoint,
    ProviderError,
    bad_json,
    check_call_count,
    clean_api_key,
    error_detail,
    is_overflow_text,
    loads,
    passing_fault,
    stream_sse,
)
from mcp_agent.wire import one_line

ANTHROPIC_BASE_URL = "https://api.anthropic.com"
ANTHROPIC_VERSION = "2023-06-01"

# Thinking budgets in tokens per level (pi's, extended for the upper levels).
THINKING_BUDGETS = {
    ThinkingLevel.MINIMAL: 1024,
    ThinkingLevel.LOW: 2048,
    ThinkingLevel.MEDIUM: 8192,
    ThinkingLevel.HIGH: 16384,
    ThinkingLevel.XHIGH: 32768,
    ThinkingLevel.MAX: 63999,
}
MIN_OUTPUT_TOKENS = 1024


@dataclass(frozen=True)
class AnthropicConfig:
    label: str = "Anthropic API"
    api_key_env: str | None = "ANTHROPIC_API_KEY"
    auth_token_env: str | None = "ANTHROPIC_AUTH_TOKEN"
    base_url_env: str | None = "ANTHROPIC_BASE_URL"
    api_key: str | None = None
    requires_api_key: bool = True
    headers: Mapping[str, str] = field(default_factory=dict)
    prompt_caching: bool = True


def make_stream_fn(config: AnthropicConfig | None = None) -> StreamFn:
    bound = config or AnthropicConfig()

    def stream(
        model: Model, context: LlmContext, options: StreamOptions | None = None
    ) -> AsyncIterator[AssistantMessageEvent]:
        return stream_anthropic(model, context, options, config=bound)

    return stream


# --- the request ------------------------------------------------------------------------------


def thinking_budget(
    level: ThinkingLevel | str, max_tokens: int, model_max_tokens: int
) -> tuple[int, int]:
    """``(max_tokens, budget)`` for a thinking level: the budget comes on top of the answer's
    tokens, within the model's limit, leaving at least MIN_OUTPUT_TOKENS for the answer."""
    budget = THINKING_BUDGETS[ThinkingLevel(level)]
    total = min(max_tokens + budget, model_max_tokens)
    if total <= budget:
        budget = max(1024, total - MIN_OUTPUT_TOKENS)
    return total, budget


def _adaptive_thinking(model_id: str) -> bool:
    # Models that decide their own thinking budget ("adaptive" thinking with an effort level).
    return any(tag in model_id for tag in ("opus-4-6", "opus-4.6", "opus-4-7", "sonnet-4-6"))


_EFFORT = {
    ThinkingLevel.MINIMAL: "low",
    ThinkingLevel.LOW: "low",
    ThinkingLevel.MEDIUM: "medium",
    ThinkingLevel.HIGH: "high",
    ThinkingLevel.XHIGH: "high",
    ThinkingLevel.MAX: "max",
}


def build_request(
    model: Model, context: LlmContext, options: StreamOptions, config: AnthropicConfig
) -> dict[str, Any]:
    cache = {"type": "ephemeral"} if config.prompt_caching else None
    max_tokens = options.max_tokens or min(model.max_tokens, 32_000)
    body: dict[str, Any] = {
        "model": model.id,
        "messages": convert_messages(context.messages, model, cache),
        "max_tokens": max_tokens,
        "stream": True,
    }
    if context.system_prompt:
        system: dict[str, Any] = {"type": "text", "text": context.system_prompt}
        if cache:
            system["cache_control"] = cache
        body["system"] = [system]
    level = ThinkingLevel(options.thinking_level)
    thinking = model.reasoning and level != ThinkingLevel.OFF
    if thinking:
        if _adaptive_thinking(model.id):
            body["thinking"] = {"type": "adaptive"}
            body["output_config"] = {"effort": _EFFORT[level]}
        else:
            total, budget = thinking_budget(level, max_tokens, model.max_tokens)
            body["max_tokens"] = total
            body["thinking"] = {"type": "enabled", "budget_tokens": budget}
    if options.temperature is not None and not thinking:
        body["temperature"] = options.temperature
    if context.tools:
        tools = [convert_tool(tool.spec()) for tool in context.tools]
        if cache:
            tools[-1]["cache_control"] = cache
        body["tools"] = tools
    extra_body = options.extra.get("body")
    if isinstance(extra_body, Mapping):
        body.update(extra_body)
    return body


def convert_tool(spec: dict[str, Any]) -> dict[str, Any]:
    schema = dict(spec.get("parameters") or {})
    schema.setdefault("type", "object")
    return {
        "name": spec["name"],
        "description": spec.get("description", ""),
        "input_schema": schema,
    }


_ID_CHARS = re.compile(r"[^a-zA-Z0-9_-]")


def normalize_tool_call_id(call_id: str) -> str:
    """Anthropic requires ids matching ``^[a-zA-Z0-9_-]+$``, at most 64 characters."""
    return _ID_CHARS.sub("_", call_id)[:64] or "call"


def _content_blocks(content: list[Any]) -> str | list[dict[str, Any]]:
    if not any(isinstance(b, ImageContent) for b in content):
        return "\n".join(b.text for b in content if isinstance(b, TextContent))
    blocks: list[dict[str, Any]] = []
    for block in content:
        if isinstance(block, TextContent):
            blocks.append({"type": "text", "text": block.text})
        elif isinstance(block, ImageContent):
            blocks.append(_image(block))
    if not any(b["type"] == "text" for b in blocks):
        blocks.insert(0, {"type": "text", "text": "(see attached image)"})
    return blocks


def _image(block: ImageContent) -> dict[str, Any]:
    return {
        "type": "image",
        "source": {"type": "base64", "media_type": block.mime_type, "data": block.data},
    }


def convert_messages(
    messages: list[Any], model: Model, cache: dict[str, Any] | None = None
) -> list[dict[str, Any]]:
    params: list[dict[str, Any]] = []
    transformed = transform_messages(messages, model, normalize_tool_call_id)
    index = 0
    while index < len(transformed):
        message = transformed[index]
        index += 1
        if isinstance(message, UserMessage):
            if isinstance(message.content, str):
                if message.content.strip():
                    params.append({"role": "user", "content": message.content})
                continue
            blocks: list[dict[str, Any]] = []
            for part in message.content:
                if isinstance(part, TextContent):
                    if part.text.strip():
                        blocks.append({"type": "text", "text": part.text})
                elif isinstance(part, ImageContent):
                    blocks.append(_image(part))
            if blocks:
                params.append({"role": "user", "content": blocks})
        elif isinstance(message, AssistantMessage):
            blocks = []
            for block in message.content:
                if isinstance(block, TextContent):
                    if block.text.strip():
                        blocks.append({"type": "text", "text": block.text})
                elif isinstance(block, ThinkingContent):
                    extra = block.model_extra or {}
                    signature = extra.get(THINKING_SIGNATURE)
                    if extra.get(THINKING_REDACTED):
                        blocks.append({"type": "redacted_thinking", "data": signature or ""})
                    elif signature:  # even with no text: thinking the API omitted (Opus
                        # 4.7's default) is carried by its signature, and wanted back
                        blocks.append(
                            {"type": "thinking", "thinking": block.thinking, "signature": signature}
                        )
                    elif not block.thinking.strip():
                        continue
                    else:  # unsigned thinking (an aborted stream): the API only takes it as text
                        blocks.append({"type": "text", "text": block.thinking})
                elif isinstance(block, ToolCall):
                    blocks.append(
                        {
                            "type": "tool_use",
                            "id": block.id,
                            "name": block.name,
                            "input": block.arguments or {},
                        }
                    )
            if blocks:
                params.append({"role": "assistant", "content": blocks})
        elif isinstance(message, ToolResultMessage):
            results = [message]
            while index < len(transformed) and isinstance(transformed[index], ToolResultMessage):
                results.append(transformed[index])  # type: ignore[arg-type]
                index += 1
            params.append(
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": result.tool_call_id,
                            "content": _content_blocks(result.content),
                            "is_error": result.is_error,
                        }
                        for result in results
                    ],
                }
            )
    if cache and params and params[-1]["role"] == "user":
        # Cache the conversation up to its newest user turn.
        last = params[-1]
        if isinstance(last["content"], str):
            last["content"] = [{"type": "text", "text": last["content"], "cache_control": cache}]
        elif last["content"]:
            last["content"][-1]["cache_control"] = cache
    return params


# --- the stream -------------------------------------------------------------------------------

_STOP = {
    "end_turn": StopReason.STOP,
    "stop_sequence": StopReason.STOP,
    "pause_turn": StopReason.STOP,
    "max_tokens": StopReason.LENGTH,
    "model_context_window_exceeded": StopReason.LENGTH,
    "tool_use": StopReason.TOOL_USE,
}


class _StreamState:
    def __init__(self, model: Model, output: AssistantMessage, endpoint: Endpoint) -> None:
        self.model = model
        self.output = output
        self.endpoint = endpoint
        self.events: list[AssistantMessageEvent] = []
        self.blocks: dict[int, int] = {}  # API block index -> content index
        self.started = False
        self.done = False
        self.stop_reason: str | None = None
        self.calls = 0

    @property
    def complete(self) -> bool:
        return self.stop_reason is not None

    def on_event(self, data: str, event_type: str) -> None:
        if not data:
            return
        try:
            event = loads(data)
        except ValueError as error:
            if event_type != "error":
                raise bad_json(self.endpoint, data, error) from None
            event = data
        if not isinstance(event, dict):
            if event_type != "error":
                return
            # An event named error is one whatever it holds (a proxy's plain text).
            event = {"type": "error", "error": {"message": str(event)}}
        # An event named error is one whatever its data's type says (llama.cpp's names the
        # kind of error: "exceed_context_size_error").
        kind = "error" if event_type == "error" else event.get("type") or event_type
        if kind == "content_block_delta":
            self._delta(event)
        elif kind == "content_block_start":
            self._start(event)
        elif kind == "content_block_stop":
            self._stop(event)
        elif kind == "message_start":
            self.started = True
            message = event.get("message") or {}
            if message.get("id"):
                self.output.responseId = message["id"]  # type: ignore[attr-defined]  # pi's field
            self._usage(message.get("usage") or {})
        elif kind == "message_delta":
            reason = (event.get("delta") or {}).get("stop_reason")
            if reason:
                self.stop_reason = reason
            self._usage(event.get("usage") or {})
        elif kind == "message_stop":
            self.done = True
        elif kind == "error":
            detail = error_detail(json.dumps(event))
            what = passing_fault(event) or "reported an error"
            message = f"{self.endpoint.where}: the server {what} mid-stream: {detail}"
            if is_overflow_text(detail):
                message = f"{CONTEXT_OVERFLOW_MARK}: {message}"
            raise ProviderError(message)

    def _start(self, event: dict[str, Any]) -> None:
        output = self.output
        block = event.get("content_block") or {}
        kind = block.get("type")
        position = len(output.content)
        if kind == "text":
            output.content.append(TextContent(text=block.get("text") or ""))
            self.events.append(TextStartEvent(output, position))
        elif kind == "thinking":
            signed: dict[str, Any] = {THINKING_SIGNATURE: block.get("signature") or ""}
            output.content.append(ThinkingContent(thinking=block.get("thinking") or "", **signed))
            self.events.append(ThinkingStartEvent(output, position))
        elif kind == "redacted_thinking":
            redacted: dict[str, Any] = {
                THINKING_SIGNATURE: block.get("data") or "",
                THINKING_REDACTED: True,
            }
            output.content.append(ThinkingContent(thinking="[Reasoning redacted]", **redacted))
            self.events.append(ThinkingStartEvent(output, position))
        elif kind == "tool_use":
            check_call_count(self.endpoint.where, self.calls)
            self.calls += 1
            initial = block.get("input")
            output.content.append(
                ToolCall(
                    id=block.get("id") or "",
                    name=block.get("name") or "",
                    arguments=initial if isinstance(initial, dict) else {},
                    partial_json="",
                )
            )
            self.events.append(ToolCallStartEvent(output, position))
        else:
            return  # server tools, citations…: not ours to show
        self.blocks[event.get("index", position)] = position

    def _delta(self, event: dict[str, Any]) -> None:
        position = self.blocks.get(event.get("index"))  # type: ignore[arg-type]
        if position is None:
            return
        output = self.output
        block = output.content[position]
        delta = event.get("delta") or {}
        kind = delta.get("type")
        # A delta with nothing in it is no event: it is no progress (see the stall timeout).
        if kind == "text_delta" and isinstance(block, TextContent):
            text = delta.get("text") or ""
            if text:
                append_str(block, "text", text)
                self.events.append(TextDeltaEvent(output, position, text))
        elif kind == "input_json_delta" and isinstance(block, ToolCall):
            part = delta.get("partial_json") or ""
            if part:
                append_str(block, "partial_json", part)
                self.events.append(ToolCallDeltaEvent(output, position, part))
        elif kind == "thinking_delta" and isinstance(block, ThinkingContent):
            text = delta.get("thinking") or ""
            if text:
                append_str(block, "thinking", text)
                self.events.append(ThinkingDeltaEvent(output, position, text))
        elif kind == "signature_delta" and isinstance(block, ThinkingContent):
            part = delta.get("signature") or ""
            extra = block.model_extra
            assert extra is not None
            # Grown in place, as append_str grows a field: many deltas cost linear time.
            signature = extra.pop(THINKING_SIGNATURE, None) or ""
            try:
                signature += part
            finally:  # a part that is no string leaves the signature as it was
                extra[THINKING_SIGNATURE] = signature

    def _stop(self, event: dict[str, Any]) -> None:
        position = self.blocks.pop(event.get("index"), None)  # type: ignore[arg-type]
        if position is None:
            return
        output = self.output
        block = output.content[position]
        if isinstance(block, TextContent):
            self.events.append(TextEndEvent(output, position, block.text))
        elif isinstance(block, ThinkingContent):
            self.events.append(ThinkingEndEvent(output, position, block.thinking))
        elif isinstance(block, ToolCall):
            if block.partial_json:
                block.arguments = parse_json_lenient(block.partial_json)
            block.partial_json = None
            self.events.append(ToolCallEndEvent(output, position))

    def _usage(self, raw: dict[str, Any]) -> None:
        usage = self.output.usage
        if raw.get("input_tokens") is not None:
            usage.input = raw["input_tokens"]
        if raw.get("output_tokens") is not None:
            usage.output = raw["output_tokens"]
        if raw.get("cache_read_input_tokens") is not None:
            usage.cache_read = raw["cache_read_input_tokens"]
        if raw.get("cache_creation_input_tokens") is not None:
            usage.cache_write = raw["cache_creation_input_tokens"]
        update_usage(self.model, self.output)

    def keep_held(self) -> None:
        pass  # nothing is held back

    def finish(self) -> None:
        if not self.done and self.stop_reason is None:  # message_delta says the end is here
            raise ProviderError(
                f"{self.endpoint.where}: the stream ended before message_stop{PARTIAL_KEPT}"
            )
        for index in list(self.blocks):  # blocks the server never closed
            self._stop({"index": index})
        give_calls_ids(self.output)
        reason = self.stop_reason
        stop = _STOP.get(reason or "end_turn")
        if stop is None:
            what = "refused to answer" if reason == "refusal" else "stopped"
            said = f"{self.endpoint.where}: the model {what} (stop_reason {reason})"
            text = self.output.text if reason == "refusal" else ""
            words = one_line(text, ERROR_CHARS) if text.strip() else ""  # the model's, quoted
            raise ProviderError(f"{said}: {words}" if words else said)
        self.output.stop_reason = stop


def whole_answer(data: Any) -> list[tuple[str, str]] | None:
    """A ``message`` sent whole where a stream was asked for (see WholeAnswer), as the
    events that stream it: each block started empty, its content as one delta; None for
    anything else."""
    if type(data) is not dict or data.get("type") != "message":
        return None
    content = data.get("content")
    if type(content) is not list:
        return None
    events: list[tuple[str, dict[str, Any]]] = [
        ("message_start", {"message": {**data, "content": [], "stop_reason": None}})
    ]
    for index, block in enumerate(content):
        if type(block) is not dict:
            return None
        kind = block.get("type")
        deltas: list[dict[str, Any]] = []
        start: dict[str, Any]
        if kind == "text":
            start = {"type": "text", "text": ""}
            deltas.append({"type": "text_delta", "text": block.get("text") or ""})
        elif kind == "thinking":
            start = {"type": "thinking", "thinking": ""}
            deltas.append({"type": "thinking_delta", "thinking": block.get("thinking") or ""})
            deltas.append({"type": "signature_delta", "signature": block.get("signature") or ""})
        elif kind == "tool_use":
            start = {**block, "input": {}}
            arguments = json.dumps(block.get("input") or {}, ensure_ascii=False)
            deltas.append({"type": "input_json_delta", "partial_json": arguments})
        else:  # redacted thinking, and what is not ours to show, come whole
            start = block
        events.append(("content_block_start", {"index": index, "content_block": start}))
        events += [("content_block_delta", {"index": index, "delta": d}) for d in deltas]
        events.append(("content_block_stop", {"index": index}))
    end = {"stop_reason": data.get("stop_reason"), "stop_sequence": data.get("stop_sequence")}
    events.append(("message_delta", {"delta": end, "usage": data.get("usage") or {}}))
    events.append(("message_stop", {}))
    return [(name, json.dumps({"type": name, **event})) for name, event in events]


def _endpoint(model: Model, config: AnthropicConfig) -> Endpoint:
    base_url = (model.base_url or ANTHROPIC_BASE_URL).rstrip("/")
    root = base_url[: -len("/v1")] if base_url.endswith("/v1") else base_url
    return Endpoint(
        label=config.label,
        base_url=base_url,
        url=f"{root}/v1/messages",
        key_env=config.api_key_env,
        base_url_env=config.base_url_env,
    )


def _auth_headers(options: StreamOptions, config: AnthropicConfig, where: str) -> dict[str, str]:
    source = config.api_key_env
    if options.api_key:
        key = options.api_key
    elif config.api_key_env and os.environ.get(config.api_key_env, "").strip():
        key = os.environ[config.api_key_env]
    elif config.api_key:
        key, source = config.api_key, CONFIGURED_KEY
    elif config.auth_token_env and os.environ.get(config.auth_token_env, "").strip():
        token = clean_api_key(os.environ[config.auth_token_env], where, config.auth_token_env)
        return {"authorization": f"Bearer {token}"}
    else:
        return {}
    cleaned = clean_api_key(key, where, source)
    return {"x-api-key": cleaned} if cleaned else {}


def stream_anthropic(
    model: Model,
    context: LlmContext,
    options: StreamOptions | None = None,
    *,
    config: AnthropicConfig | None = None,
) -> AsyncIterator[AssistantMessageEvent]:
    """Stream one answer from the Anthropic Messages API. Never raises: failures and aborts
    end with an ErrorEvent whose message says what happened; partial content is kept."""
    options = options or StreamOptions()
    config = config or AnthropicConfig()
    endpoint = _endpoint(model, config)

    def prepare() -> tuple[dict[str, str], dict[str, Any]]:
        auth = _auth_headers(options, config, endpoint.where)
        if not auth and config.requires_api_key:
            hint = f"set {config.api_key_env}" if config.api_key_env else "configure an API key"
            raise ProviderError(f"{endpoint.where}: no API key — {hint}")
        headers = {
            "anthropic-version": ANTHROPIC_VERSION,
            **auth,
            **config.headers,
            **options.headers,
        }
        return headers, build_request(model, context, options, config)

    state = _StreamState(model, new_output(model), endpoint)
    return stream_sse(endpoint, options, prepare, state, whole_answer)
