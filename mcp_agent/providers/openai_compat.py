"""OpenAI Chat Completions, and every server that speaks it (Ollama, vLLM, llama.cpp, LM Studio,
OpenRouter, …): streamed text, reasoning, tool calls and usage, over httpx with SSE.

Servers differ in small ways; :class:`OpenAICompat` holds the switches, detected from the base
URL unless a provider's configuration sets them.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field, replace
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
    THINKING_SIGNATURE,
    StringSlot,
    append_str,
    give_calls_ids,
    new_output,
    parse_json_lenient,
    readable,
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
    scan_json,
    stream_sse,
)
from mcp_agent.wire import one_line

OPENAI_BASE_URL = "https://api.openai.com/v1"


@dataclass(frozen=True)
class OpenAICompat:
    """What a Chat Completions server accepts beyond the common core."""

    supports_usage_in_streaming: bool = True  # stream_options.include_usage
    max_tokens_field: str = "max_completion_tokens"  # or "max_tokens"
    supports_developer_role: bool = True  # system prompt as role "developer" for reasoning models
    supports_reasoning_effort: bool = True
    supports_store: bool = True  # send store: false
    supports_strict_mode: bool = True  # send strict: false in tool definitions
    requires_tool_result_name: bool = False  # tool messages carry the tool's name
    # Tool call ids of exactly 9 letters and digits (Mistral's API, vLLM serving a Mistral
    # model in its tokenizer mode): every other id is mapped to one, call and result alike.
    requires_mistral_tool_ids: bool = False

    @classmethod
    def from_mapping(
        cls, data: Mapping[str, Any], base: OpenAICompat | None = None
    ) -> OpenAICompat:
        known = {f for f in cls.__dataclass_fields__}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(
                f"unknown compat setting(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}"
            )
        return replace(base or cls(), **dict(data))


# Mistral's model families, which want Mistral's tool call ids wherever they are served.
_MISTRAL_MODEL = re.compile(r"mistral|magistral|devstral|codestral|ministral|[mp]ixtral", re.I)


def detect_compat(model: Model) -> OpenAICompat:
    """OpenAI itself gets every feature; other servers the conservative common subset."""
    base_url = model.base_url or OPENAI_BASE_URL
    if "api.openai.com" in base_url:
        return OpenAICompat()
    return OpenAICompat(
        max_tokens_field="max_tokens",
        supports_developer_role=False,
        supports_store=False,
        supports_strict_mode=False,
        requires_mistral_tool_ids="mistral.ai" in base_url
        or _MISTRAL_MODEL.search(model.id) is not None,
    )


@dataclass(frozen=True)
class OpenAIConfig:
    """One provider speaking Chat Completions: how to name it, find its key, talk to it."""

    label: str = "OpenAI API"
    api_key_env: str | None = "OPENAI_API_KEY"
    base_url_env: str | None = "OPENAI_BASE_URL"
    api_key: str | None = None  # a literal key from configuration (env is preferred)
    requires_api_key: bool = True
    headers: Mapping[str, str] = field(default_factory=dict)
    compat: OpenAICompat | None = None  # None: detect from the base URL


def make_stream_fn(config: OpenAIConfig | None = None) -> StreamFn:
    """A StreamFn bound to one provider's configuration."""
    bound = config or OpenAIConfig()

    def stream(
        model: Model, context: LlmContext, options: StreamOptions | None = None
    ) -> AsyncIterator[AssistantMessageEvent]:
        return stream_openai_compat(model, context, options, config=bound)

    return stream


# --- the request ------------------------------------------------------------------------------

_EFFORT = {
    ThinkingLevel.MINIMAL: "minimal",
    ThinkingLevel.LOW: "low",
    ThinkingLevel.MEDIUM: "medium",
    ThinkingLevel.HIGH: "high",
    ThinkingLevel.XHIGH: "high",
    ThinkingLevel.MAX: "high",
}


def reasoning_effort(model: Model, level: ThinkingLevel | str) -> str | None:
    level = ThinkingLevel(level)
    if level == ThinkingLevel.OFF:
        return None
    effort = _EFFORT[level]
    if effort == "minimal" and not model.id.startswith("gpt-5"):
        effort = "low"  # only the gpt-5 family knows "minimal"
    return effort


def build_request(
    model: Model, context: LlmContext, options: StreamOptions, compat: OpenAICompat
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": model.id,
        "messages": convert_messages(model, context, compat),
        "stream": True,
    }
    if compat.supports_usage_in_streaming:
        body["stream_options"] = {"include_usage": True}
    if compat.supports_store:
        body["store"] = False
    if options.max_tokens:
        body[compat.max_tokens_field] = options.max_tokens
    if options.temperature is not None:
        body["temperature"] = options.temperature
    if context.tools:
        body["tools"] = [convert_tool(tool.spec(), compat) for tool in context.tools]
    if model.reasoning and compat.supports_reasoning_effort:
        effort = options.extra.get("reasoning_effort") or reasoning_effort(
            model, options.thinking_level
        )
        if effort:
            body["reasoning_effort"] = effort
    if options.session_id and "api.openai.com" in (model.base_url or OPENAI_BASE_URL):
        body["prompt_cache_key"] = options.session_id
    extra_body = options.extra.get("body")
    if isinstance(extra_body, Mapping):
        body.update(extra_body)
    return body


def convert_tool(spec: dict[str, Any], compat: OpenAICompat) -> dict[str, Any]:
    function: dict[str, Any] = {
        "name": spec["name"],
        "description": spec.get("description", ""),
        "parameters": spec.get("parameters") or {"type": "object", "properties": {}},
    }
    if compat.supports_strict_mode:
        function["strict"] = False
    return {"type": "function", "function": function}


def _image_part(block: ImageContent) -> dict[str, Any]:
    return {
        "type": "image_url",
        "image_url": {"url": f"data:{block.mime_type};base64,{block.data}"},
    }


def convert_messages(
    model: Model, context: LlmContext, compat: OpenAICompat
) -> list[dict[str, Any]]:
    """Our messages as Chat Completions messages."""
    params: list[dict[str, Any]] = []
    if context.system_prompt:
        role = "developer" if model.reasoning and compat.supports_developer_role else "system"
        params.append({"role": role, "content": context.system_prompt})
    messages = transform_messages(context.messages, model)
    ids = MistralToolIds() if compat.requires_mistral_tool_ids else None
    index = 0
    while index < len(messages):
        message = messages[index]
        index += 1
        if isinstance(message, UserMessage):
            if isinstance(message.content, str):
                if message.content:
                    params.append({"role": "user", "content": message.content})
                continue
            parts: list[dict[str, Any]] = []
            for block in message.content:
                if isinstance(block, TextContent):
                    if block.text:
                        parts.append({"type": "text", "text": block.text})
                elif isinstance(block, ImageContent):
                    parts.append(_image_part(block))
            if parts:
                params.append({"role": "user", "content": parts})
        elif isinstance(message, AssistantMessage):
            converted = _convert_assistant(message, ids)
            if converted is not None:
                params.append(converted)
        elif isinstance(message, ToolResultMessage):
            # A run of tool results; images ride in one user message after them.
            images: list[dict[str, Any]] = []
            run = [message]
            while index < len(messages) and isinstance(messages[index], ToolResultMessage):
                run.append(messages[index])  # type: ignore[arg-type]
                index += 1
            for result in run:
                text = "\n".join(b.text for b in result.content if isinstance(b, TextContent))
                has_images = any(isinstance(b, ImageContent) for b in result.content)
                tool_message: dict[str, Any] = {
                    "role": "tool",
                    "tool_call_id": ids(result.tool_call_id) if ids else result.tool_call_id,
                    "content": text or ("(see attached image)" if has_images else ""),
                }
                if compat.requires_tool_result_name and result.tool_name:
                    tool_message["name"] = result.tool_name
                params.append(tool_message)
                images.extend(_image_part(b) for b in result.content if isinstance(b, ImageContent))
            if images and "image" in model.input:
                params.append(
                    {
                        "role": "user",
                        "content": [
                            {"type": "text", "text": "Attached image(s) from tool result:"},
                            *images,
                        ],
                    }
                )
    return params


class MistralToolIds:
    """Tool call ids as Mistral takes them, 9 letters and digits: an id that is one already
    stays, any other becomes one derived from it (a hash), the same for its call and its
    result, and never one another id of the conversation has."""

    SIZE = 9

    def __init__(self) -> None:
        self._given: dict[str, str] = {}
        self._owners: dict[str, str] = {}

    def __call__(self, call_id: str) -> str:
        given = self._given.get(call_id)
        if given is not None:
            return given
        kept = re.sub(r"[^a-zA-Z0-9]", "", call_id)
        attempt = 0
        while True:
            candidate = (
                kept if attempt == 0 and len(kept) == self.SIZE else _hashed(call_id, attempt)
            )
            if self._owners.setdefault(candidate, call_id) == call_id:
                self._given[call_id] = candidate
                return candidate
            attempt += 1


_ALNUM = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def _hashed(call_id: str, attempt: int) -> str:
    number = int.from_bytes(hashlib.sha256(f"{call_id}:{attempt}".encode()).digest()[:8])
    letters = []
    for _ in range(MistralToolIds.SIZE):
        number, digit = divmod(number, len(_ALNUM))
        letters.append(_ALNUM[digit])
    return "".join(letters)


def _convert_assistant(
    message: AssistantMessage, ids: MistralToolIds | None = None
) -> dict[str, Any] | None:
    text = "".join(b.text for b in message.content if isinstance(b, TextContent) and b.text.strip())
    converted: dict[str, Any] = {"role": "assistant", "content": text or None}
    thinking = [b for b in message.content if isinstance(b, ThinkingContent) and b.thinking.strip()]
    if thinking:
        # Compat servers that stream reasoning in a field (reasoning_content, …) take it back
        # in the same field; the field's name is kept as the block's signature.
        field_name = (thinking[0].model_extra or {}).get(THINKING_SIGNATURE)
        if field_name in _REASONING_FIELDS:
            converted[field_name] = "\n".join(b.thinking for b in thinking)
    calls = message.tool_calls
    if calls:
        converted["tool_calls"] = [
            {
                "id": ids(call.id) if ids else call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": json.dumps(call.arguments)},
            }
            for call in calls
        ]
    if not text and not calls:
        return None
    return converted


# --- the stream -------------------------------------------------------------------------------

_REASONING_FIELDS = ("reasoning_content", "reasoning", "reasoning_text")

_FINISH = {
    "stop": StopReason.STOP,
    "end": StopReason.STOP,
    "eos": StopReason.STOP,
    "length": StopReason.LENGTH,
    "model_length": StopReason.LENGTH,  # Mistral: the context window, not max_tokens, ran out
    "tool_calls": StopReason.TOOL_USE,
    "function_call": StopReason.TOOL_USE,
    # Gemini's own reasons, which relays in front of it pass on (as "STOP", "MAX_TOKENS": the
    # reasons are looked up in lower case), and Anthropic's, passed on the same way.
    "max_tokens": StopReason.LENGTH,
    "end_turn": StopReason.STOP,
    "stop_sequence": StopReason.STOP,
    "tool_use": StopReason.TOOL_USE,
}
# Finish reasons that say the answer was held back by a filter: OpenAI's, and Gemini's.
_FILTERED = frozenset(
    {"content_filter", "safety", "recitation", "blocklist", "prohibited_content", "spii"}
)


_THINK_START = "<think>"
_THINK_END = "</think>"
# Models whose chat template opens the thinking itself (DeepSeek-R1 since 0528 and its
# distills, QwQ): served raw (vLLM without a reasoning parser), their content is thinking
# from its first word, ended by a lone </think>.
_OPENED_BY_TEMPLATE = re.compile(r"(?<![a-z0-9])(r1|qwq)(?![a-z0-9])", re.IGNORECASE)


def _tail_that_starts(text: str, tag: str) -> int:
    """How many characters at the end of ``text`` could begin ``tag`` (held for the next
    delta, which may finish it)."""
    for size in range(min(len(tag) - 1, len(text)), 0, -1):
        if tag.startswith(text[-size:]):
            return size
    return 0


# Finish reasons that say the server, not the answer, gave out (DeepSeek's, under load).
_OVERLOADED = frozenset({"insufficient_system_resource"})
# Finish reasons that say the answer was broken off by the server, not ended by the model:
# vLLM's "abort" (the engine dropped the request), OpenRouter's "error" (its upstream failed
# mid-answer, with no error object).
_BROKEN_OFF = frozenset({"abort", "error"})


_CONTENT_PATH = ("choices", 0, "delta", "content")


def _idle_delta(delta: dict[str, Any]) -> bool:
    """Whether ``delta`` holds nothing beside its content that the stream takes (a role)."""
    return len(delta) == 1 or not (
        delta.get("tool_calls")
        or any(type(delta.get(name)) is str and delta[name] for name in _OTHER_TEXTS)
    )


_OTHER_TEXTS = ("refusal", *_REASONING_FIELDS)


class _StreamState:
    """Folds Chat Completions chunks into the output message, collecting the events to emit."""

    def __init__(self, model: Model, output: AssistantMessage, endpoint: Endpoint) -> None:
        self.model = model
        self.output = output
        self.endpoint = endpoint
        self.events: list[AssistantMessageEvent] = []
        self._emit = self.events.append
        self.text_index = -1
        self._text_fields: dict[str, Any] | None = None  # the text block's __dict__
        self.thinking_index = -1
        self.calls_by_index: dict[int, int] = {}  # stream index -> content index
        self.calls_by_id: dict[str, int] = {}  # id as sent -> content index of its latest call
        self.sent_ids: dict[int, str] = {}  # content index -> the id the server sent for it
        self.latest_call = -1  # content index of the call begun last
        self.finish_reason: str | None = None
        self.response_id: str | None = None
        self.done = False
        self.ids_taken: set[str] = set()  # the ids the calls of this answer have
        self.refusal: list[str] = []  # what the model said in refusing (OpenAI's refusal field)
        self._held = ""  # content that may be part of a <think> or </think> tag
        self._in_think = False  # inside <think> tags that opened the content
        self._after_think = False  # those tags closed, and no text has come since
        # The content is thinking until a </think> (see _OPENED_BY_TEMPLATE); False once
        # anything else is known of it.
        self._presumed_think = _OPENED_BY_TEMPLATE.search(model.id) is not None
        self._unsure_text = True  # the first text may yet end at a lone </think>
        self._slot = StringSlot()  # the shape of the last text delta, around its text

    @property
    def complete(self) -> bool:
        return self.finish_reason is not None

    def on_event(self, data: str, event_type: str) -> None:
        # The hot path: one call per streamed chunk. The common case, a chunk like the last
        # text delta but for its text, is cut out of the text without a parse (StringSlot).
        if event_type != "error":
            text = self._slot.match(data)
            if text is not None:
                if text:
                    self._content_text(text)
                return
        if data == "[DONE]":
            self.done = True
            return
        if not data:
            return
        if event_type == "error":  # an event named error, whatever its data holds
            self._named_error(data)
        try:  # loads(data) inlined: the C scanner, then a check that nothing follows the value
            chunk, end = scan_json(data, 0)
        except (StopIteration, ValueError):
            end = -1
        if end != len(data):  # anything unusual: json.loads, for its value or its message
            chunk = self._loads(data)
        elif "\\u" in data:  # a lone surrogate is replaced, as loads does
            chunk = readable(chunk, data)
        if type(chunk) is not dict:
            return
        if self.response_id is None and "id" in chunk:
            self.response_id = chunk["id"]
            self.output.responseId = chunk["id"]  # type: ignore[attr-defined]  # pi's field
        if chunk.get("error"):
            self._error(chunk)
        usage = chunk.get("usage")
        if not usage and "x_groq" in chunk:  # Groq's last chunk carries it here
            extra = chunk["x_groq"]
            usage = extra.get("usage") if type(extra) is dict else None
        if usage:
            self._usage(usage)
        choices = chunk.get("choices")
        if not choices:
            return
        choice = choices[0]
        if choice.get("index"):  # the answer is choice 0; others (n > 1) are not mixed in
            choice = next((c for c in choices if type(c) is dict and not c.get("index")), None)
            if choice is None:
                return
        if not usage and choice.get("usage"):
            self._usage(choice["usage"])
        delta = choice.get("delta")
        if delta:
            content = delta.get("content")
            if content and type(content) is not str:
                self._content_parts(content)
                if len(delta) > 1:
                    self._other_delta(delta)
            elif content:
                self._content_text(content)
                if len(delta) > 1:
                    self._other_delta(delta)
            else:
                self._other_delta(delta)
        finish = choice.get("finish_reason")
        if finish:
            self.finish_reason = finish
        elif (
            delta
            and type(delta.get("content")) is str
            and delta["content"]
            and not usage
            and choice is choices[0]
            and not choice.get("usage")
            and _idle_delta(delta)
        ):  # a text delta and nothing else: the next like it is matched (see on_event)
            self._slot.learn(data, chunk, _CONTENT_PATH)

    def _content_text(self, content: str) -> None:
        """The next piece of the content's text."""
        fields = self._text_fields
        if fields is None:  # no text yet: it may open with <think>
            self._before_text(content)
        elif (
            self._unsure_text
            and ">" in content  # a </think> ends here or nowhere in this delta
            and self._closes_think(fields["text"], content)
        ):
            pass
        else:
            # block.text += content, growing the string in place (see append_str)
            text = fields.pop("text")
            try:
                text += content
            finally:  # content that is no string leaves the text as it was
                fields["text"] = text
            self._emit(TextDeltaEvent(self.output, self.text_index, content))

    def _loads(self, data: str) -> Any:
        try:
            return loads(data)
        except ValueError as error:
            raise bad_json(self.endpoint, data, error) from None

    def _named_error(self, data: str) -> None:
        try:
            value = loads(data)
        except ValueError:
            value = data
        self._error(value if isinstance(value, dict) else {"error": value})

    def _error(self, chunk: dict[str, Any]) -> None:
        detail = error_detail(json.dumps(chunk))
        fault = passing_fault(chunk)
        what = f"{fault} mid-stream" if fault else "reported an error mid-stream"
        message = f"{self.endpoint.where}: the server {what}: {detail}"
        if is_overflow_text(detail):
            message = f"{CONTEXT_OVERFLOW_MARK}: {message}"
        raise ProviderError(message)

    def _other_delta(self, delta: dict[str, Any]) -> None:
        refusal = delta.get("refusal")
        if refusal and isinstance(refusal, str):
            self.refusal.append(refusal)
            if len(self.refusal) > 1:  # only the start is said: hold no more of it
                self.refusal = ["".join(self.refusal)[: ERROR_CHARS + 1]]
        for name in _REASONING_FIELDS:
            reasoning = delta.get(name)
            if reasoning and isinstance(reasoning, str):
                self._thinking(reasoning, name)
                break
        calls = delta.get("tool_calls")
        if calls:
            for call in calls:
                self._tool_call(call)

    def _before_text(self, content: str) -> None:
        """Content while no text block is open. A model's thinking that opens the content in
        ``<think>`` tags (vLLM without a reasoning parser, Groq's raw format, DeepSeek R1 at
        many hosts) is thinking, not the answer; text that may still become the opening tag is
        held until it is known."""
        if type(content) is not str:
            raise TypeError(f"content of type {type(content).__name__}")
        held = self._held + content
        self._held = ""
        if self._in_think:
            end = held.find(_THINK_END)
            if end < 0:
                keep = _tail_that_starts(held, _THINK_END)
                self._held = held[len(held) - keep :]
                if len(held) > keep:
                    self._thinking(held[: len(held) - keep], "content")
                return
            self._in_think = False
            self._after_think = True
            if end:
                self._thinking(held[:end], "content")
            held = held[end + len(_THINK_END) :]
        elif self.thinking_index < 0:  # the content's very start
            start = held.lstrip()
            if _THINK_START.startswith(start):
                self._held = held  # "", "\n", "<thi": not known yet
                return
            if start.startswith(_THINK_START):
                self._presumed_think = False
                self._in_think = True
                self._before_text(start[len(_THINK_START) :])
                return
            if self._presumed_think:  # the template said <think>: this is inside it
                self._in_think = True
                self._before_text(held)
                return
        if self._after_think:
            held = held.lstrip()  # the line end after </think>
        if held and not (self._unsure_text and self._closes_think("", held)):
            self._text(held)

    def keep_held(self) -> None:
        """What waited to be known as a tag or not: the answer ended, so it was none."""
        held, self._held = self._held, ""
        if held and self._in_think:
            self._thinking(held, "content")
        elif held:
            self._text(held)

    def _closes_think(self, text: str, content: str) -> bool:
        """Whether ``content``, the next of the first text, brings a </think> that begins a
        line with no <think> before it: the thinking of a model whose template opened it
        (DeepSeek-R1 served raw, under a name that does not say so). What came before turns
        into thinking; after the tag, the text begins anew. The first text only, while it is
        the answer's first block."""
        output = self.output
        if self.thinking_index >= 0 or len(output.content) > (self.text_index == 0):
            self._unsure_text = False  # not the answer's first block
            return False
        if _THINK_END not in text[-len(_THINK_END) :] + content:
            return False
        whole = text + content
        end = whole.find(_THINK_END)
        if (end and whole[end - 1] != "\n") or _THINK_START in whole[:end]:
            self._unsure_text = False  # the model writing about the tag
            return False
        self._unsure_text = False
        signed: dict[str, Any] = {THINKING_SIGNATURE: "content"}
        thinking = ThinkingContent(thinking=whole[:end], **signed)
        output.content[:1] = [thinking]  # in the place of the text, or as the first block
        self.thinking_index, self.text_index, self._text_fields = 0, -1, None
        self._emit(ThinkingStartEvent(output, 0))
        self._emit(ThinkingDeltaEvent(output, 0, thinking.thinking))
        self._after_think = True
        self._before_text(whole[end + len(_THINK_END) :])
        return True

    def _thinking_was_the_answer(self) -> None:
        """A presumed thinking never closed by </think> in an answer that ended as it should:
        the model did not think (its template opened nothing), and this is its answer."""
        if not (self._presumed_think and self._in_think) or self.thinking_index < 0:
            return
        output = self.output
        index = self.thinking_index
        block = output.content[index]
        assert isinstance(block, ThinkingContent)
        output.content[index] = TextContent(text=block.thinking)
        self.thinking_index, self.text_index = -1, index
        self._text_fields = output.content[index].__dict__
        self._emit(TextStartEvent(output, index))
        self._emit(TextDeltaEvent(output, index, block.thinking))

    def _content_parts(self, parts: Any) -> None:
        """Content as typed chunks, as Mistral's reasoning models (Magistral) stream it: text,
        and thinking whose own content is chunks of text. Anything else is no content."""
        if type(parts) is not list:
            raise TypeError(f"content of type {type(parts).__name__}")
        for part in parts:
            if type(part) is not dict:
                raise TypeError(f"a content part of type {type(part).__name__}")
            kind = part.get("type")
            if kind == "text":
                text = part.get("text")
                if text:
                    self._text(text)
            elif kind == "thinking":
                inner = part.get("thinking")
                pieces = inner if type(inner) is list else [{"type": "text", "text": inner}]
                for piece in pieces:
                    thought = piece.get("text") if type(piece) is dict else None
                    if thought and isinstance(thought, str):
                        self._thinking(thought, "content")  # goes back as no field

    def _text(self, text: str) -> None:
        if type(text) is not str:
            raise TypeError(f"text of type {type(text).__name__}")
        if self._text_fields is None:
            self._open_text()
        append_str(self.output.content[self.text_index], "text", text)
        self._emit(TextDeltaEvent(self.output, self.text_index, text))

    def _open_text(self) -> dict[str, Any]:
        output = self.output
        self.text_index = len(output.content)
        block = TextContent(text="")
        output.content.append(block)
        self.events.append(TextStartEvent(output, self.text_index))
        self._text_fields = block.__dict__
        return self._text_fields

    def _thinking(self, delta: str, field_name: str) -> None:
        output = self.output
        if self.thinking_index < 0:
            self.thinking_index = len(output.content)
            signed: dict[str, Any] = {THINKING_SIGNATURE: field_name}
            output.content.append(ThinkingContent(thinking="", **signed))
            self.events.append(ThinkingStartEvent(output, self.thinking_index))
        append_str(output.content[self.thinking_index], "thinking", delta)
        self.events.append(ThinkingDeltaEvent(output, self.thinking_index, delta))

    def _tool_call(self, call: dict[str, Any]) -> None:
        output = self.output
        stream_index = call.get("index")
        call_id = call.get("id") or ""
        function = call.get("function") or {}
        name = function.get("name") or ""
        # A name with arguments may begin another call (see _call_position).
        begins = bool(name and function.get("arguments"))
        position = self._call_position(stream_index, call_id, name, begins)
        if position is None:
            check_call_count(self.endpoint.where, len(self.sent_ids))
            position = len(output.content)
            output.content.append(ToolCall(id=self._free_id(call_id), name=name, partial_json=""))
            self.sent_ids[position] = call_id
            self.latest_call = position
            if call_id:
                self.calls_by_id[call_id] = position
            self.events.append(ToolCallStartEvent(output, position))
        if stream_index is not None:
            self.calls_by_index[stream_index] = position
        block = output.content[position]
        assert isinstance(block, ToolCall)
        if call_id and not block.id:
            block.id = self._free_id(call_id)
            self.sent_ids[position] = call_id
            self.calls_by_id[call_id] = position
        if name and not block.name:
            block.name = name
        arguments = function.get("arguments") or ""
        if isinstance(arguments, dict):  # some servers send the object itself
            arguments = json.dumps(arguments, ensure_ascii=False)
        if arguments:  # a delta with nothing in it is no event (see the stall timeout)
            append_str(block, "partial_json", arguments)
            self.events.append(ToolCallDeltaEvent(output, position, arguments))

    def _call_position(
        self, stream_index: int | None, call_id: str, name: str, begins: bool
    ) -> int | None:
        """Which call a tool-call delta continues, or None for a new one.

        Servers disagree: most number each call by its index, some give every call index 0
        and tell them apart by id, some shift indexes within one call, and some repeat one id
        on several calls. A known index continues its call unless the delta brings another
        id, or a name with no id after the call's arguments are whole (calls that all come
        as index 0 without ids, each whole in a delta: relays in front of Gemini); a known id
        continues its call unless it comes with a new index and a name (a second call with the
        same id); a delta with neither continues the latest call."""
        if stream_index is not None:
            position = self.calls_by_index.get(stream_index)
            if position is not None:
                sent = self.sent_ids.get(position, "")
                if call_id and sent and call_id != sent:
                    pass  # another call
                elif not call_id and begins and self._whole_call(position):
                    return None
                else:
                    return position
        if call_id:
            position = self.calls_by_id.get(call_id)
            if position is None or (stream_index is not None and name):
                return None
            return position
        if stream_index is None and self.sent_ids:
            if begins and self._whole_call(self.latest_call):
                return None
            return self.latest_call
        return None

    def _whole_call(self, position: int) -> bool:
        """Whether the call at ``position`` has its name and arguments that are a whole JSON
        object (a delta that names a tool after that begins another call)."""
        block = self.output.content[position]
        if not isinstance(block, ToolCall) or not block.name or not block.partial_json:
            return False
        try:
            return isinstance(json.loads(block.partial_json), dict)
        except (ValueError, RecursionError):
            return False

    def _free_id(self, call_id: str) -> str:
        """``call_id``, or when another call of this answer has it already, that id with a
        suffix: each result must name its own call."""
        taken = self.ids_taken
        if call_id and call_id in taken:
            suffix = 2
            while f"{call_id}_{suffix}" in taken or f"{call_id}_{suffix}" in self.calls_by_id:
                suffix += 1
            call_id = f"{call_id}_{suffix}"
        taken.add(call_id)
        return call_id

    def _usage(self, raw: dict[str, Any]) -> None:
        prompt = raw.get("prompt_tokens") or 0
        details = raw.get("prompt_tokens_details") or {}
        cached = details.get("cached_tokens") or raw.get("prompt_cache_hit_tokens") or 0
        written = details.get("cache_write_tokens") or 0
        cache_read = max(0, cached - written) if written else cached
        usage = self.output.usage
        usage.input = max(0, prompt - cache_read - written)
        usage.output = raw.get("completion_tokens") or 0
        usage.cache_read = cache_read
        usage.cache_write = written
        update_usage(self.model, self.output)

    def finish(self) -> None:
        """Close every block (in order), parse tool arguments, settle the stop reason."""
        output = self.output
        if not self.done and self.finish_reason is None:
            raise ProviderError(
                f"{self.endpoint.where}: the stream ended before the response was complete "
                f"(no finish_reason and no [DONE]){PARTIAL_KEPT}"
            )
        reason = self.finish_reason
        key = reason.lower() if type(reason) is str else reason  # "STOP" from Gemini's relays
        self.keep_held()
        if _FINISH.get(key or "stop") in (StopReason.STOP, StopReason.TOOL_USE):
            self._thinking_was_the_answer()
        give_calls_ids(output)
        for index, block in enumerate(output.content):
            if isinstance(block, TextContent):
                self.events.append(TextEndEvent(output, index, block.text))
            elif isinstance(block, ThinkingContent):
                self.events.append(ThinkingEndEvent(output, index, block.thinking))
            elif isinstance(block, ToolCall):
                block.arguments = parse_json_lenient(block.partial_json)
                block.partial_json = None
                self.events.append(ToolCallEndEvent(output, index))
        if self.refusal:  # in its own field, not the text: an answer that is none
            said = one_line("".join(self.refusal), ERROR_CHARS)
            raise ProviderError(f"{self.endpoint.where}: the model refused to answer: {said}")
        if key is None:
            output.stop_reason = StopReason.TOOL_USE if output.tool_calls else StopReason.STOP
            return
        stop = _FINISH.get(key)
        if stop is None:
            if key in _OVERLOADED:  # said as a passing fault, so that the turn runs again
                what = "the server overloaded mid-stream"
            elif key in _BROKEN_OFF:  # also passing
                what = "the server broke off mid-stream"
            elif key in _FILTERED:
                what = "the model filtered the response"
            else:
                what = "the model stopped"
            raise ProviderError(f"{self.endpoint.where}: {what} (finish_reason {reason})")
        if stop == StopReason.STOP and output.tool_calls:
            stop = StopReason.TOOL_USE  # some servers say "stop" after tool calls
        output.stop_reason = stop


def whole_answer(data: Any) -> list[tuple[str, str]] | None:
    """A ``chat.completion`` sent whole where a stream was asked for (see WholeAnswer), as
    the chunks that stream it, in a stream's order: the thinking, the text, then the tool
    calls (each with its place as its index), the finish reason and the usage. Only the first
    choice makes the answer; None for anything that is no completion."""
    choices = data.get("choices") if type(data) is dict else None
    if type(choices) is not list or not choices:
        return None
    choice = choices[0]
    if type(choice) is not dict or type(choice.get("message")) is not dict:
        return None
    message = dict(choice["message"])
    content = message.pop("content", None)
    calls = message.pop("tool_calls", None)
    if type(calls) is list:
        calls = [{"index": i, **c} if type(c) is dict else c for i, c in enumerate(calls)]
    head = {key: value for key, value in data.items() if key not in ("choices", "usage")}
    deltas = [message, {"content": content}, {"tool_calls": calls}]
    chunks = [
        {**head, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}
        for delta in deltas
        if any(value is not None for value in delta.values())
    ]
    last: dict[str, Any] = {"index": 0, "delta": {}, "finish_reason": choice.get("finish_reason")}
    chunks.append({**head, "choices": [last], "usage": data.get("usage")})
    return [("", json.dumps(chunk)) for chunk in chunks] + [("", "[DONE]")]


def _field_settings(
    model: Model, options: StreamOptions, compat: OpenAICompat
) -> tuple[tuple[str, str], ...]:
    """The optional fields this request sends, each with the compat setting that stops
    sending it (said when a server refuses the field)."""
    fields: list[tuple[str, str]] = []
    if compat.supports_usage_in_streaming:
        fields.append(("stream_options", "supports_usage_in_streaming = false"))
    if model.reasoning and compat.supports_reasoning_effort:
        fields.append(("reasoning_effort", "supports_reasoning_effort = false"))
    if options.max_tokens:  # the one sent; the other is what to send instead
        other = "max_tokens" if compat.max_tokens_field != "max_tokens" else "max_completion_tokens"
        fields.append((compat.max_tokens_field, f'max_tokens_field = "{other}"'))
    where = "in the provider's table in models.toml"
    return tuple((name, f"set compat = {{ {setting} }} {where}") for name, setting in fields)


def _endpoint(model: Model, config: OpenAIConfig, options: StreamOptions) -> Endpoint:
    base_url = (model.base_url or OPENAI_BASE_URL).rstrip("/")
    compat = config.compat or detect_compat(model)
    return Endpoint(
        label=config.label,
        base_url=base_url,
        url=f"{base_url}/chat/completions",
        key_env=config.api_key_env,
        base_url_env=config.base_url_env,
        field_settings=_field_settings(model, options, compat),
        usual_path="/v1",
    )


def _api_key(options: StreamOptions, config: OpenAIConfig) -> tuple[str | None, str | None]:
    """The key to send and where it came from (named when it is unusable)."""
    if options.api_key:
        return options.api_key, config.api_key_env
    if config.api_key_env and os.environ.get(config.api_key_env, "").strip():
        return os.environ[config.api_key_env], config.api_key_env
    return config.api_key, CONFIGURED_KEY


def stream_openai_compat(
    model: Model,
    context: LlmContext,
    options: StreamOptions | None = None,
    *,
    config: OpenAIConfig | None = None,
) -> AsyncIterator[AssistantMessageEvent]:
    """Stream one answer from a Chat Completions server. Never raises: failures and aborts
    end with an ErrorEvent whose message says what happened; partial content is kept."""
    options = options or StreamOptions()
    config = config or OpenAIConfig()
    endpoint = _endpoint(model, config, options)

    def prepare() -> tuple[dict[str, str], dict[str, Any]]:
        compat = config.compat or detect_compat(model)
        key, source = _api_key(options, config)
        api_key = clean_api_key(key, endpoint.where, source)
        if not api_key and config.requires_api_key:
            hint = f"set {config.api_key_env}" if config.api_key_env else "configure an API key"
            raise ProviderError(f"{endpoint.where}: no API key — {hint}")
        headers = {**config.headers, **options.headers}
        if api_key:
            headers.setdefault("authorization", f"Bearer {api_key}")
        return headers, build_request(model, context, options, compat)

    state = _StreamState(model, new_output(model), endpoint)
    return stream_sse(endpoint, options, prepare, state, whole_answer)
