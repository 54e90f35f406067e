"""Helpers every provider shares: the output message, abort races, message preparation,
lenient JSON for streamed tool arguments. No HTTP here (the sampling provider uses it too)."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import anyio

from mcp_agent.abort import AbortSignal
from mcp_agent.messages import (
    AssistantMessage,
    ImageContent,
    Message,
    Model,
    StopReason,
    TextContent,
    ThinkingContent,
    ToolCall,
    ToolResultMessage,
    UserMessage,
    calculate_cost,
)
from mcp_agent.wire import SURROGATE_ESCAPE, utf8_only

T = TypeVar("T")

# pi's names for the extra fields a thinking block carries (kept in ThinkingContent's extras so
# that they round-trip through the session file unchanged).
THINKING_SIGNATURE = "thinkingSignature"
THINKING_REDACTED = "redacted"

# What an error message quotes of what a server or an MCP client said.
ERROR_CHARS = 500


class Aborted(Exception):
    """The run was aborted while the provider waited; ends the stream with stop reason aborted."""


def new_output(model: Model) -> AssistantMessage:
    return AssistantMessage(api=model.api, provider=model.provider, model=model.id)


def update_usage(model: Model, output: AssistantMessage) -> None:
    """Recompute the total and the cost after the token counts changed."""
    usage = output.usage
    usage.total_tokens = usage.input + usage.output + usage.cache_read + usage.cache_write
    calculate_cost(model, usage)


def give_calls_ids(output: AssistantMessage) -> None:
    """An id of its own for each tool call: one the server sent without an id (some compatible
    servers do) gets a new one, and one whose id an earlier call has gets that id with a
    suffix (``x_2``). Each result names its call by id, in the session, in the agent loop and
    back to the API (which refuses two calls with one id), so no two calls may share one."""
    calls = [block for block in output.content if isinstance(block, ToolCall)]
    sent = {call.id for call in calls}
    taken: set[str] = set()
    for call in calls:
        if not call.id:
            call.id = f"call_{uuid.uuid4().hex[:24]}"
        elif call.id in taken:
            suffix = 2
            while f"{call.id}_{suffix}" in taken or f"{call.id}_{suffix}" in sent:
                suffix += 1
            call.id = f"{call.id}_{suffix}"
        taken.add(call.id)


def fail(output: AssistantMessage, message: str, *, aborted: bool = False) -> AssistantMessage:
    """Turn the partial output into the final message of a failed or aborted stream."""
    for block in output.content:
        if isinstance(block, ToolCall) and block.partial_json is not None:
            block.arguments = parse_json_lenient(block.partial_json)
            block.partial_json = None
    give_calls_ids(output)
    output.stop_reason = StopReason.ABORTED if aborted else StopReason.ERROR
    output.error_message = message
    return output


def append_str(block: Any, field: str, delta: str) -> None:
    """``block.<field> += delta`` without the quadratic copy.

    Taking the string out of the model's ``__dict__`` first leaves one reference to it, so that
    CPython grows it in place; a long streamed answer costs linear time, not quadratic.
    """
    fields = block.__dict__
    text = fields.pop(field)
    try:
        text += delta
    finally:  # a delta that is no string leaves the field as it was
        fields[field] = text


class AbortRace:
    """Runs awaits so that an abort cancels the one in flight at once.

    One ``on_abort`` callback for the whole stream; each awaited step gets its own cancel scope,
    never held across a ``yield`` of the surrounding async generator.
    """

    __slots__ = ("_remove", "_scope", "fired", "signal")

    def __init__(self, signal: AbortSignal | None) -> None:
        self.signal = signal
        self.fired = False  # a plain flag, cheap to test after every event
        self._scope: anyio.CancelScope | None = None
        self._remove = signal.on_abort(self._on_abort) if signal is not None else None

    def _on_abort(self) -> None:
        self.fired = True
        if self._scope is not None:
            self._scope.cancel()

    @property
    def aborted(self) -> bool:
        return self.fired

    def check(self) -> None:
        if self.fired:
            raise Aborted

    async def run(self, awaitable: Awaitable[T]) -> T:
        if self.signal is None:
            return await awaitable
        if self.fired:
            _discard(awaitable)
            raise Aborted
        with anyio.CancelScope() as scope:
            self._scope = scope
            try:
                return await awaitable
            finally:
                self._scope = None
        raise Aborted  # reached only when our own cancel was caught by the scope

    async def sleep(self, seconds: float) -> None:
        await self.run(anyio.sleep(seconds))

    def close(self) -> None:
        if self._remove is not None:
            self._remove()
            self._remove = None


def _discard(awaitable: Awaitable[Any]) -> None:
    close = getattr(awaitable, "close", None)
    if close is not None:
        close()


# --- preparing the conversation for a model ------------------------------------------------

NON_VISION_USER_IMAGE = "(image omitted: model does not support images)"
NON_VISION_TOOL_IMAGE = "(tool image omitted: model does not support images)"
NO_TOOL_RESULT = "No result provided"


def _without_images(content: list[Any], placeholder: str) -> list[Any]:
    result: list[Any] = []
    previous_placeholder = False
    for block in content:
        if isinstance(block, ImageContent):
            if not previous_placeholder:
                result.append(TextContent(text=placeholder))
            previous_placeholder = True
            continue
        result.append(block)
        previous_placeholder = isinstance(block, TextContent) and block.text == placeholder
    return result


def transform_messages(
    messages: list[Message],
    model: Model,
    normalize_tool_call_id: Callable[[str], str] | None = None,
) -> list[Message]:
    """The conversation as ``model`` can take it (pi's transformMessages).

    - images become a placeholder for models without image input;
    - thinking from another model becomes text (signed or redacted thinking only goes back to
      the model that wrote it);
    - errored and aborted assistant turns are left out (incomplete, possibly invalid);
    - tool call ids another API wrote are normalised where this API is strict about them;
    - a tool call without a result gets an error result, so that the API accepts the history;
    - a message between a tool call and its result (pi's normalisation) goes after the results.
    """
    vision = "image" in model.input
    id_map: dict[str, str] = {}
    transformed: list[Message] = []
    for message in messages:
        if isinstance(message, UserMessage):
            if not vision and not isinstance(message.content, str):
                if any(isinstance(b, ImageContent) for b in message.content):
                    message = message.model_copy(
                        update={"content": _without_images(message.content, NON_VISION_USER_IMAGE)}
                    )
            transformed.append(message)
        elif isinstance(message, ToolResultMessage):
            update: dict[str, Any] = {}
            if message.tool_call_id in id_map:
                update["tool_call_id"] = id_map[message.tool_call_id]
            if not vision and any(isinstance(b, ImageContent) for b in message.content):
                update["content"] = _without_images(message.content, NON_VISION_TOOL_IMAGE)
            transformed.append(message.model_copy(update=update) if update else message)
        elif isinstance(message, AssistantMessage):
            same_model = (
                message.provider == model.provider
                and message.api == model.api
                and message.model == model.id
            )
            if same_model:
                transformed.append(message)
                continue
            content: list[Any] = []
            for block in message.content:
                if isinstance(block, ThinkingContent):
                    extra = block.model_extra or {}
                    if extra.get(THINKING_REDACTED) or not block.thinking.strip():
                        continue
                    content.append(TextContent(text=block.thinking))
                elif isinstance(block, ToolCall) and normalize_tool_call_id:
                    new_id = normalize_tool_call_id(block.id)
                    if new_id != block.id:
                        id_map[block.id] = new_id
                        block = block.model_copy(update={"id": new_id})
                    content.append(block)
                else:
                    content.append(block)
            transformed.append(message.model_copy(update={"content": content}))
        else:
            transformed.append(message)

    result: list[Message] = []
    pending: list[ToolCall] = []
    answered: set[str] = set()
    # Messages that came between a tool call and its result (a custom message, a steering
    # message): they go after the results, which the APIs want right after their calls.
    held: list[Message] = []

    def close_pending() -> None:
        nonlocal pending, answered
        for call in pending:
            if call.id not in answered:
                result.append(
                    ToolResultMessage(
                        tool_call_id=call.id,
                        tool_name=call.name,
                        content=[TextContent(text=NO_TOOL_RESULT)],
                        is_error=True,
                    )
                )
        pending, answered = [], set()
        result.extend(held)
        held.clear()

    for message in transformed:
        if isinstance(message, AssistantMessage):
            close_pending()
            if message.stop_reason in (StopReason.ERROR, StopReason.ABORTED):
                continue
            pending = list(message.tool_calls)
            result.append(message)
        elif isinstance(message, ToolResultMessage):
            answered.add(message.tool_call_id)
            result.append(message)
            if pending and all(call.id in answered for call in pending):
                close_pending()
        elif pending:
            held.append(message)
        else:
            close_pending()
            result.append(message)
    close_pending()
    return result


# --- streamed JSON -----------------------------------------------------------------------------

_CONTROL = re.compile(r"[\x00-\x1f]")


def parse_json_lenient(text: str | None) -> dict[str, Any]:
    """The object in ``text``, which may be cut off mid-way (a stream that stopped early).

    Complete JSON parses as is; raw control characters inside strings are escaped; an
    incomplete object is closed at the last complete value. Anything else gives ``{}``.
    """
    if not text or not text.strip():
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        try:
            value = _parse_partial(_escape_controls_in_strings(text))
        except RecursionError:
            return {}
    except RecursionError:  # nested deeper than the parser goes: no arguments a tool takes
        return {}
    return readable(value, text) if isinstance(value, dict) else {}


# JSON allows a lone surrogate ("\ud800"), but it is no character. The gate is any surrogate
# escape, paired or not: which are lone is for utf8_only to find (a pattern that tries to tell
# them apart is slow, and misreads escaped backslashes).


def readable(value: Any, data: str) -> Any:
    """``value``, parsed from the JSON text ``data``, with each lone surrogate replaced (see
    :func:`wire.utf8_only`). Costs a scan of ``data`` only when it holds a ``\\u`` escape."""
    if "\\u" not in data or not SURROGATE_ESCAPE.search(data):
        return value
    return utf8_only(value)


# The C scanner of a JSON string's rest: ``scanstring(text, after_quote) -> (value, end)``.
_scanstring: Callable[[str, int], tuple[str, int]] = json.decoder.scanstring  # type: ignore[attr-defined]
_KEY_END = re.compile(r'[ \t\n\r]*:[ \t\n\r]*"')
_PROBE = "mcp-agent: the string's place"


class StringSlot:
    """The text of one shape of event around the one string that differs from event to event,
    learnt from an event parsed whole, so that the next of that shape gives its string
    without parsing the rest again.

    A streamed answer is thousands of events that differ only in a few words of text (Chat
    Completions: ``{"id": …, "choices": [{"index": 0, "delta": {"content": " word"}, …}]}``),
    and parsing each whole was most of the work per event. :meth:`match` takes an event whose
    text is the learnt text before the string, one JSON string, and the learnt text after it:
    that parses to the learnt value with only this string in the place of its string, so it
    is folded as that one was. Learning costs a parse; a shape that changes at every event
    (a random field in each) is tried a few times and then given up.
    """

    __slots__ = ("_hits", "_learnt", "prefix", "suffix")

    def __init__(self) -> None:
        self.prefix: str | None = None  # up to the string's opening quote
        self.suffix = ""  # from after its closing quote
        self._hits = 0
        self._learnt = 0

    def match(self, data: str) -> str | None:
        """The string of ``data`` if it has the learnt shape, else None."""
        prefix = self.prefix
        if prefix is None or not data.startswith(prefix) or not data.endswith(self.suffix):
            return None
        try:
            value, end = _scanstring(data, len(prefix))
        except ValueError:
            return None
        if end != len(data) - len(self.suffix):
            return None
        self._hits += 1
        return readable(value, data) if "\\u" in data else value

    def learn(self, data: str, value: Any, path: tuple[str | int, ...]) -> None:
        """Learn the shape of ``data`` (whose parsed value is ``value``) around the string at
        ``path`` (whose last step is a key). The key's text may appear elsewhere (in another
        string, a later object): a probe, the text with another string in that place, must
        parse to ``value`` with only that string changed."""
        if self._learnt > 2 + self._hits // 16:
            return  # each try after the first few must be paid for by matches
        self._learnt += 1
        self.prefix = None
        expected = value
        for step in path:
            expected = expected[step]
        needle = json.dumps(path[-1])
        at = len(data)
        for _ in range(4):  # the last few places the key could be
            at = data.rfind(needle, 0, at)
            if at < 0:
                return
            found = _KEY_END.match(data, at + len(needle))
            if found is None:
                continue
            start = found.end()
            try:
                string, end = _scanstring(data, start)
                if string != expected:
                    continue
                probe = json.loads(f'{data[:start]}{_PROBE}"{data[end:]}')
            except ValueError:
                continue
            if probe == _replaced(value, path, _PROBE):
                self.prefix, self.suffix = data[:start], data[end:]
                return


def _replaced(value: Any, path: tuple[str | int, ...], new: Any) -> Any:
    """A copy of ``value`` with ``new`` at ``path`` (only what is on the path is copied)."""
    if not path:
        return new
    copy = list(value) if isinstance(value, list) else dict(value)
    copy[path[0]] = _replaced(value[path[0]], path[1:], new)  # type: ignore[index]
    return copy


def _escape_controls_in_strings(text: str) -> str:
    out: list[str] = []
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
            elif _CONTROL.match(char):
                out.append(json.dumps(char)[1:-1])
                continue
        elif char == '"':
            in_string = True
        out.append(char)
    return "".join(out)


def _parse_partial(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        pass
    # Walk the text once, noting where each value could be cut and what closes it there.
    stack: list[str] = []
    in_string = escaped = False
    cuts: list[tuple[int, str]] = []  # (end index, closers) after a complete value
    for index, char in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
                cuts.append((index + 1, "".join(reversed(stack))))
            continue
        if char == '"':
            in_string = True
        elif char in "{[":
            stack.append("}" if char == "{" else "]")
            cuts.append((index + 1, "".join(reversed(stack))))
        elif char in "}]":
            if stack:
                stack.pop()
            cuts.append((index + 1, "".join(reversed(stack))))
        elif char not in " \t\r\n,:":
            cuts.append((index + 1, "".join(reversed(stack))))
    if in_string:
        body = text[:-1] if escaped else text
        candidate = body + '"' + "".join(reversed(stack))
        try:
            return json.loads(candidate)
        except ValueError:
            pass
    for end, closers in reversed(cuts[-64:]):
        prefix = text[:end].rstrip()
        for candidate in (prefix + closers, prefix.rstrip(",") + closers):
            try:
                return json.loads(candidate)
            except ValueError:
                continue
        # "key": cut after the key: drop the dangling key
        stripped = re.sub(r',?\s*"(?:[^"\\]|\\.)*"\s*:?\s*$', "", prefix)
        if stripped != prefix:
            try:
                return json.loads(stripped + closers)
            except ValueError:
                continue
    return None
