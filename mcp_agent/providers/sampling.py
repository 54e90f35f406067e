"""The MCP client's own model, reached through sampling (``sampling/createMessage``).

Sampling works only on connections that use the older handshake protocol (up to 2025-11-25),
whose client declared the sampling capability (and ``sampling.tools`` to let the model call
tools). It is deprecated in the 2026-07-28 protocol. Everywhere else the stream ends with an
error that says how to configure another model: this is one optional provider, never the only
way to get a model.

    stream_fn = sampling_stream_fn(ClientChannel(ctx.session))   # inside an MCP tool handler

A run that a request of the client waits on asks on that request's own stream
(``ClientChannel(ctx.session, ctx.request_id)``) while it is open: over HTTP that is the POST's
answer stream. A detached run, or one whose client dropped that stream (a disconnect is no
cancel), asks on the connection's own stream (a GET the client may or may not have open).
"""

from __future__ import annotations

import json
import warnings
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import anyio
from pydantic import ValidationError

from mcp_agent.abort import abort_message
from mcp_agent.events import (
    AssistantMessageEvent,
    DoneEvent,
    ErrorEvent,
    StartEvent,
    TextDeltaEvent,
    TextEndEvent,
    TextStartEvent,
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
    ToolCall,
    ToolResultMessage,
    UserMessage,
)
from mcp_agent.providers.base import LlmContext, StreamFn, StreamOptions
from mcp_agent.providers.common import (
    ERROR_CHARS,
    Aborted,
    AbortRace,
    fail,
    give_calls_ids,
    new_output,
    transform_messages,
)
from mcp_agent.wire import describe_validation_error, one_line, utf8_only

SAMPLING_API = "mcp-sampling"
SAMPLING_PROVIDER = "sampling"

# Said to MCP clients and people alike: no command-line flags, which only one of them has.
CONFIGURE_ANOTHER_MODEL = (
    "Choose another model for the run: openai:gpt-4o-mini (with OPENAI_API_KEY set where the "
    "server runs), anthropic:claude-sonnet-4-5 (with ANTHROPIC_API_KEY), or a provider "
    "configured in models.toml (the file named by MCP_AGENT_MODELS, or models.toml in the "
    "user config directory)."
)

_STOP = {
    "endTurn": StopReason.STOP,
    "stopSequence": StopReason.STOP,
    "maxTokens": StopReason.LENGTH,
    "toolUse": StopReason.TOOL_USE,
}


class SamplingUnavailable(Exception):
    """Sampling cannot be used on this connection; the text says why."""


class SamplingFailed(Exception):
    """The client answered the sampling request with an error (or not at all)."""


def unavailable_message(reason: str) -> str:
    return f"The MCP client's model cannot be used: {reason}. {CONFIGURE_ANOTHER_MODEL}"


@dataclass(frozen=True)
class ClientChannel:
    """Where the client's model is asked: the server-side MCP session (``ctx.session``) and,
    when a request of the client waits for the answer, that request's id, to ask on its
    stream while ``stream_open`` says it is open (None: while the request is under way)."""

    session: Any
    request_id: str | int | None = None
    stream_open: Callable[[], bool] | None = None
    # Over 2025 HTTP, whether the connection has its GET stream open (None: a connection that
    # reaches its client at any time, stdio), and how long a request waits for one to open
    # when it cannot go on a request's stream: the SDK drops what it sends to a GET stream
    # that is not there, and the request would wait for good.
    listening: Callable[[], bool] | None = None
    listen_wait: float = 30.0

    def on_request_stream(self) -> bool:
        return self.request_id is not None and (self.stream_open is None or self.stream_open())

    async def reachable(self) -> None:
        """Return once a request sent now reaches the client (on the request's stream, or on
        the connection's); ClientNotListening if it opens neither within ``listen_wait``
        seconds."""
        if self.listening is None or self.on_request_stream():
            return
        with anyio.move_on_after(self.listen_wait):
            # Looked at again and again: the SDK tells no one when a stream opens (a GET
            # stream, or the request's resumed with Last-Event-ID).
            while not self.listening() and not self.on_request_stream():  # noqa: ASYNC110
                await anyio.sleep(LISTEN_POLL_SECONDS)
            return
        where = (
            "the call waiting for this run has closed its stream"
            if self.request_id is not None
            else "this run was started with wait: false"
        )
        raise ClientNotListening(
            f"the MCP client could not be asked for its model: {where}, so it is asked on the"
            f" connection's GET stream, and the client had none open for {self.listen_wait:g}"
            " s; open it (an HTTP GET on the MCP endpoint with the Mcp-Session-Id header), or"
            " start the run with wait: true and keep its call open"
        )


# How often a request for the client's model looks again for a GET stream to go on.
LISTEN_POLL_SECONDS = 0.1


class ClientNotListening(Exception):
    """The client opened no stream on which to ask it for its model; the text says so."""


def sampling_support(session: Any) -> tuple[bool, bool, str]:
    """``(usable, with_tools, reason)`` for a server-side session (``ctx.session``)."""
    if session is None:
        return False, False, "there is no MCP client connection to ask (sampling needs one)"
    version = getattr(session, "protocol_version", None)
    if version is not None:
        from mcp_types.version import MODERN_PROTOCOL_VERSIONS

        if version in MODERN_PROTOCOL_VERSIONS:
            return (
                False,
                False,
                f"this connection speaks MCP {version}, where sampling is no longer available "
                "(it works only with clients using the 2025 handshake)",
            )
    caps = getattr(session, "client_capabilities", None)
    sampling = getattr(caps, "sampling", None) if caps is not None else None
    if sampling is None:
        return False, False, "the MCP client did not declare the sampling capability"
    return True, getattr(sampling, "tools", None) is not None, ""


def sampling_model(model_id: str = "client", **fields: Any) -> Model:
    """A model record for the client's model; ``model_id`` is sent as a model hint unless it is
    ``client`` (let the client choose)."""
    fields.setdefault("name", "MCP client model (sampling)")
    fields.setdefault("input", ["text", "image"])
    return Model(id=model_id, api=SAMPLING_API, provider=SAMPLING_PROVIDER, **fields)


def sampling_stream_fn(channel: ClientChannel) -> StreamFn:
    """A StreamFn that asks the MCP client behind ``channel``."""

    def stream(
        model: Model, context: LlmContext, options: StreamOptions | None = None
    ) -> AsyncIterator[AssistantMessageEvent]:
        return stream_sampling(channel, model, context, options)

    return stream


def unavailable_stream_fn(reason: str) -> StreamFn:
    """A StreamFn that always ends with the 'configure another model' error."""

    async def stream(
        model: Model, context: LlmContext, options: StreamOptions | None = None
    ) -> AsyncIterator[AssistantMessageEvent]:
        yield ErrorEvent(fail(new_output(model), unavailable_message(reason)))

    return stream


async def stream_sampling(
    channel: ClientChannel,
    model: Model,
    context: LlmContext,
    options: StreamOptions | None = None,
) -> AsyncIterator[AssistantMessageEvent]:
    options = options or StreamOptions()
    output = new_output(model)
    race = AbortRace(options.signal)
    try:
        race.check()
        usable, with_tools, reason = sampling_support(channel.session)
        if not usable:
            raise SamplingUnavailable(reason)
        import mcp.types as types
        from mcp.shared.exceptions import MCPDeprecationWarning, MCPError, NoBackChannelError

        kwargs: dict[str, Any] = {
            "messages": convert_messages(context.messages, model, with_tools),
            "max_tokens": options.max_tokens or min(model.max_tokens, 32_000),
        }
        if context.system_prompt:
            kwargs["system_prompt"] = context.system_prompt
        if options.temperature is not None:
            kwargs["temperature"] = options.temperature
        if model.id and model.id != "client":
            kwargs["model_preferences"] = types.ModelPreferences(
                hints=[types.ModelHint(name=model.id)]
            )
        await race.run(channel.reachable())
        if channel.on_request_stream():
            kwargs["related_request_id"] = channel.request_id
        if context.tools and with_tools:
            kwargs["tools"] = [
                types.Tool(
                    name=spec["name"],
                    description=spec.get("description") or None,
                    input_schema=_object_schema(spec.get("parameters")),
                )
                for spec in (tool.spec() for tool in context.tools)
            ]
            kwargs["tool_choice"] = types.ToolChoice(mode="auto")
        try:
            # Sampling is deprecated in 2026-07-28; we use it only where the connection allows.
            # The SDK warns when the method is called (synchronously), not while it runs.
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", MCPDeprecationWarning)
                request = channel.session.create_message(**kwargs)
            result = await race.run(request)
        except NoBackChannelError as error:
            raise SamplingUnavailable(
                "the connection has no channel for requests from server to client "
                f"({error.error.message})"
            ) from error
        except MCPError as error:
            raise SamplingFailed(error.error.message) from error
        except (Aborted, SamplingUnavailable):
            raise
        except ValidationError as error:  # the SDK's check of the answer
            raise SamplingFailed(
                f"its answer is no sampling result MCP allows ({describe_validation_error(error)})"
            ) from error
        except Exception as error:  # a malformed answer, a broken link
            raise SamplingFailed(str(error) or type(error).__name__) from error

        yield StartEvent(output)
        blocks = result.content if isinstance(result.content, list) else [result.content]
        events = [event for block in blocks for event in _emit(output, block)]
        # The client's model may give calls no id or one id twice: each gets its own before
        # any event names it.
        give_calls_ids(output)
        for event in events:
            yield event
        response_model = getattr(result, "model", None)
        if response_model:
            output.responseModel = response_model  # type: ignore[attr-defined]
        stop = _STOP.get(result.stop_reason or "endTurn", StopReason.STOP)
        if stop == StopReason.STOP and output.tool_calls:
            stop = StopReason.TOOL_USE
        output.stop_reason = stop
        yield DoneEvent(output)
    except Aborted:
        yield ErrorEvent(fail(output, abort_message(options.signal), aborted=True))
    except SamplingUnavailable as error:
        yield ErrorEvent(fail(output, unavailable_message(str(error))))
    except ClientNotListening as error:
        yield ErrorEvent(fail(output, str(error)))
    except Exception as error:
        if race.aborted:
            yield ErrorEvent(fail(output, abort_message(options.signal), aborted=True))
        elif isinstance(error, SamplingFailed):
            # What the client said is quoted as a server's words are: on one line, its
            # control characters escaped (it is stored, printed and shown), cut short.
            said = one_line(error, ERROR_CHARS)
            yield ErrorEvent(fail(output, f"the MCP client's model (sampling) failed: {said}"))
        else:  # a bug of ours must still end the stream properly
            yield ErrorEvent(fail(output, f"the MCP client's model (sampling): {error!r}"))
    finally:
        race.close()


def _emit(output: AssistantMessage, block: Any) -> list[AssistantMessageEvent]:
    kind = getattr(block, "type", None)
    position = len(output.content)
    # The client sent JSON, which may hold half a surrogate pair: see wire.utf8_only.
    if kind == "text":
        text = utf8_only(block.text)
        output.content.append(TextContent(text=text))
        return [
            TextStartEvent(output, position),
            TextDeltaEvent(output, position, text),
            TextEndEvent(output, position, text),
        ]
    if kind == "tool_use":
        arguments = utf8_only(block.input) if isinstance(block.input, dict) else {}
        output.content.append(ToolCall(id=block.id, name=block.name, arguments=arguments))
        return [
            ToolCallStartEvent(output, position),
            ToolCallDeltaEvent(output, position, json.dumps(arguments)),
            ToolCallEndEvent(output, position),
        ]
    return []  # images or audio from the client's model: nothing the loop can use


def _object_schema(schema: Any) -> dict[str, Any]:
    result = dict(schema) if isinstance(schema, dict) else {}
    result.setdefault("type", "object")
    return result


def convert_messages(messages: list[Any], model: Model, with_tools: bool) -> list[Any]:
    """Our messages as sampling messages. Without the tools capability, tool calls and results
    are told in words (older clients take one content block per message)."""
    import mcp.types as types

    result: list[types.SamplingMessage] = []

    def add(role: str, blocks: list[Any]) -> None:
        if not blocks:
            return
        if with_tools:
            result.append(types.SamplingMessage(role=role, content=blocks))  # type: ignore[arg-type]
            return
        texts = [b.text for b in blocks if isinstance(b, types.TextContent)]
        if texts:
            text = types.TextContent(type="text", text="\n\n".join(texts))
            result.append(types.SamplingMessage(role=role, content=text))  # type: ignore[arg-type]
        for image in (b for b in blocks if isinstance(b, types.ImageContent)):
            result.append(types.SamplingMessage(role=role, content=image))  # type: ignore[arg-type]

    def content_blocks(content: Any) -> list[Any]:
        blocks: list[Any] = []
        for block in [TextContent(text=content)] if isinstance(content, str) else content:
            if isinstance(block, TextContent) and block.text:
                blocks.append(types.TextContent(type="text", text=block.text))
            elif isinstance(block, ImageContent):
                blocks.append(
                    types.ImageContent(type="image", data=block.data, mime_type=block.mime_type)
                )
        return blocks

    transformed = transform_messages(messages, model)
    index = 0
    while index < len(transformed):
        message = transformed[index]
        index += 1
        if isinstance(message, UserMessage):
            add("user", content_blocks(message.content))
        elif isinstance(message, AssistantMessage):
            blocks: list[Any] = []
            for block in message.content:
                if isinstance(block, TextContent) and block.text.strip():
                    blocks.append(types.TextContent(type="text", text=block.text))
                elif isinstance(block, ToolCall):
                    if with_tools:
                        blocks.append(
                            types.ToolUseContent(
                                type="tool_use", id=block.id, name=block.name, input=block.arguments
                            )
                        )
                    else:
                        call = f"[called tool {block.name} with {json.dumps(block.arguments)}]"
                        blocks.append(types.TextContent(type="text", text=call))
            add("assistant", blocks)
        elif isinstance(message, ToolResultMessage):
            results = [message]
            while index < len(transformed) and isinstance(transformed[index], ToolResultMessage):
                results.append(transformed[index])  # type: ignore[arg-type]
                index += 1
            if with_tools:
                add(
                    "user",
                    [
                        types.ToolResultContent(
                            type="tool_result",
                            tool_use_id=r.tool_call_id,
                            content=content_blocks(r.content),
                            is_error=r.is_error or None,
                        )
                        for r in results
                    ],
                )
            else:
                blocks = []
                for r in results:
                    status = "failed" if r.is_error else "returned"
                    text = "\n".join(b.text for b in r.content if isinstance(b, TextContent))
                    blocks.append(
                        types.TextContent(
                            type="text", text=f"[tool {r.tool_name} {status}]\n{text}"
                        )
                    )
                    blocks.extend(
                        b for b in content_blocks(r.content) if not isinstance(b, types.TextContent)
                    )
                add("user", blocks)
    return result
