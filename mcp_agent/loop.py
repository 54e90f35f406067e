"""The agent loop: prompt → transform_context → convert_to_llm → the model's stream → tool calls →
tool results → the next turn, with pi's agent-loop semantics. Events are the seam: everything the
loop does is told to ``emit``, and the loop keeps no state beyond one run.

Events of one run, in order::

    agent_start
    turn_start
      message_start / message_end            for each prompt (and each injected message later)
      message_start, message_update…, message_end      the assistant's streamed answer
      tool_execution_start, tool_execution_update…, tool_execution_end   per tool call
      message_start / message_end            per tool result, in the order the model issued the calls
    turn_end
    turn_start …                             while there are tool results or queued messages
    agent_end(new messages, reason)

Rules (pi's): tools run concurrently unless the loop or any called tool asks for sequential; an
unknown tool, invalid arguments, a blocking before-hook, an exception (a tool's or a hook's) or
an answer of the wrong shape (a hook's verdict that is not its result type, a result whose content
is no list of blocks) become an error tool result the model sees, and the loop goes on. The provider never raises into the loop: a failure
is an assistant message with stop reason ``error`` or ``aborted``, after which the run ends.
Steering messages are polled at the start and after every turn and go in before the next model
call; follow-up messages are polled only when the agent would stop. When every result of a batch
asks to ``terminate``, the loop does not go back to the model (queued messages still run).

Abort reaches the provider (``StreamOptions.signal``), the hooks and the tools (their ``signal``);
whatever does not stop by itself within ``abort_grace`` seconds is cancelled. An aborted run
still leaves a consistent transcript: tool calls that did not finish get error results, and the
run ends with an assistant message whose stop reason is ``aborted``.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any, TypeAlias, TypeVar

import anyio
from anyio.streams.memory import MemoryObjectSendStream

from mcp_agent.abort import AbortSignal, abort_message
from mcp_agent.events import (
    AgentEndEvent,
    AgentEndReason,
    AgentEvent,
    AgentStartEvent,
    DoneEvent,
    ErrorEvent,
    MessageEndEvent,
    MessageStartEvent,
    MessageUpdateEvent,
    StartEvent,
    ToolExecutionEndEvent,
    ToolExecutionStartEvent,
    ToolExecutionUpdateEvent,
    TurnEndEvent,
    TurnStartEvent,
)
from mcp_agent.messages import (
    AssistantMessage,
    BaseMessage,
    ImageContent,
    Message,
    Model,
    StopReason,
    TextContent,
    ThinkingLevel,
    ToolCall,
    ToolExecutionMode,
    ToolResultMessage,
    convert_to_llm,
)
from mcp_agent.providers.base import LlmContext, StreamFn, StreamOptions
from mcp_agent.state import AgentContext
from mcp_agent.tools import AgentTool, AgentToolResult, validate_tool_arguments
from mcp_agent.wire import one_line

T = TypeVar("T")
MaybeAwaitable: TypeAlias = T | Awaitable[T]

EmitFn = Callable[[AgentEvent], MaybeAwaitable[None]]
MessageSource = Callable[[], MaybeAwaitable[Sequence[BaseMessage]]]
ConvertToLlm = Callable[[list[BaseMessage]], MaybeAwaitable[list[Message]]]
TransformContext = Callable[[list[BaseMessage], AbortSignal], MaybeAwaitable[list[BaseMessage]]]

# The result of each tool call of an answer that stopped at the output limit.
CUT_OFF_CALL = (
    "Tool call not executed: the answer was cut off at the output token limit, so its "
    "arguments may be incomplete. Issue the call again (shorter, if its arguments are long)."
)


# --- hooks ------------------------------------------------------------------------------------


@dataclass
class BeforeToolCallContext:
    assistant_message: AssistantMessage
    tool_call: ToolCall  # as the model issued it
    args: dict[str, Any]  # prepared and validated
    context: AgentContext


@dataclass
class BeforeToolCallResult:
    block: bool = False
    reason: str | None = None  # what the model is told; "Tool execution was blocked" if unset


@dataclass
class AfterToolCallContext:
    assistant_message: AssistantMessage
    tool_call: ToolCall
    args: dict[str, Any]
    result: AgentToolResult  # before any override
    is_error: bool
    context: AgentContext


@dataclass
class AfterToolCallResult:
    """Overrides for a finished tool call; a field left None keeps the tool's value."""

    content: list[TextContent | ImageContent] | None = None
    details: Any = None
    is_error: bool | None = None
    terminate: bool | None = None


@dataclass
class TurnSummary:
    """What ``should_stop_after_turn`` sees once a turn has ended."""

    message: AssistantMessage
    tool_results: list[ToolResultMessage]
    context: AgentContext
    new_messages: list[BaseMessage]


BeforeToolCall = Callable[
    [BeforeToolCallContext, AbortSignal], MaybeAwaitable[BeforeToolCallResult | None]
]
AfterToolCall = Callable[
    [AfterToolCallContext, AbortSignal], MaybeAwaitable[AfterToolCallResult | None]
]
ShouldStopAfterTurn = Callable[[TurnSummary], MaybeAwaitable[bool]]


# --- configuration ----------------------------------------------------------------------------


@dataclass
class AgentLoopConfig:
    """Everything one run needs besides the context. Callables may be sync or async.

    ``system_prompt`` and ``tools``, when given, take the place of the context's. ``tools`` are
    the active tools (the model sees them); ``available_tools`` is the pool that a tool result's
    ``added_tool_names`` activates from for the following turns. ``unavailable_tools`` says,
    by name, why a tool the model is not offered is missing: a call of one is told that
    instead of pi's "Tool NAME not found".
    """

    model: Model
    stream_fn: StreamFn
    system_prompt: str | None = None
    tools: list[AgentTool] | None = None
    available_tools: list[AgentTool] = field(default_factory=list)
    unavailable_tools: Mapping[str, str] = field(default_factory=dict)
    convert_to_llm: ConvertToLlm = convert_to_llm
    transform_context: TransformContext | None = None
    tool_execution_mode: ToolExecutionMode = ToolExecutionMode.PARALLEL
    before_tool_call: BeforeToolCall | None = None
    after_tool_call: AfterToolCall | None = None
    should_stop_after_turn: ShouldStopAfterTurn | None = None
    get_steering_messages: MessageSource | None = None
    get_follow_up_messages: MessageSource | None = None
    signal: AbortSignal | None = None
    # Model calls allowed in one run; at the limit the run ends with reason max_turns.
    max_turns: int | None = None
    thinking_level: ThinkingLevel = ThinkingLevel.OFF
    # A template: the loop fills in signal, thinking_level and (from get_api_key) api_key.
    stream_options: StreamOptions = field(default_factory=StreamOptions)
    get_api_key: Callable[[str], MaybeAwaitable[str | None]] | None = None
    # Handed to every tool's execute() as its ``context`` argument.
    tool_context: Any = None
    # Seconds the provider, hooks and tools get to stop by themselves after an abort.
    abort_grace: float = 0.25

    def __post_init__(self) -> None:
        if self.max_turns is not None and self.max_turns < 1:
            raise ValueError("max_turns must be at least 1")


# --- entry points -----------------------------------------------------------------------------


async def agent_loop(
    prompts: Sequence[BaseMessage], context: AgentContext, config: AgentLoopConfig, emit: EmitFn
) -> list[BaseMessage]:
    """Run the agent on new prompt messages; returns the run's new messages (prompts included).

    ``context`` is not modified. Exceptions from ``emit`` (the listeners) propagate; nothing
    else the model, the hooks or the tools do raises out of the loop.
    """
    prompts = list(prompts)
    run = _Run(context, config, emit)
    await run.emit(AgentStartEvent())
    await run.emit(TurnStartEvent())
    await run.record(prompts)
    await run.run()
    return run.new_messages


async def agent_loop_continue(
    context: AgentContext, config: AgentLoopConfig, emit: EmitFn
) -> list[BaseMessage]:
    """Run the agent from the context as it is (a retry, or after a restart). The last message
    must reach the model as a user or tool result message."""
    if not context.messages:
        raise ValueError("Cannot continue: no messages in context")
    if context.messages[-1].role == "assistant":
        raise ValueError("Cannot continue from message role: assistant")
    run = _Run(context, config, emit)
    await run.emit(AgentStartEvent())
    await run.emit(TurnStartEvent())
    await run.run()
    return run.new_messages


def activate_tools(
    active: Sequence[AgentTool], pool: Sequence[AgentTool], names: Sequence[str]
) -> list[AgentTool]:
    """``active`` plus the tools of ``pool`` named in ``names`` (unknown names are ignored)."""
    result = list(active)
    have = {tool.name for tool in result}
    by_name = {tool.name: tool for tool in pool}
    for name in names:
        if name not in have and name in by_name:
            result.append(by_name[name])
            have.add(name)
    return result


# --- one run ----------------------------------------------------------------------------------


@dataclass
class _Prepared:
    call: ToolCall
    tool: AgentTool
    args: dict[str, Any]


@dataclass
class _Outcome:
    call: ToolCall
    result: AgentToolResult
    is_error: bool
    message: ToolResultMessage

    @classmethod
    def of(cls, call: ToolCall, result: AgentToolResult, is_error: bool) -> _Outcome:
        """A call's outcome and its result message; an error in its place when the result
        makes no message (content that is no list of text and image blocks: a tool's or an
        ``after_tool_call`` hook's mistake), which ended the whole run, said as a task
        group's "unhandled errors"."""
        try:
            return cls(call, result, is_error, _tool_result_message(call, result, is_error))
        except (ValueError, TypeError) as error:  # pydantic's ValidationError is a ValueError
            text = f"Tool {call.name} gave a result that is no tool result: {one_line(error, 500)}"
            result = AgentToolResult.error(text)
            return cls(call, result, True, _tool_result_message(call, result, True))


class _Run:
    def __init__(
        self,
        context: AgentContext,
        config: AgentLoopConfig,
        emit: EmitFn,
    ) -> None:
        self.config = config
        self._emit = emit
        self.signal = config.signal or AbortSignal()
        tools = config.tools if config.tools is not None else (context.tools or [])
        self.context = AgentContext(
            system_prompt=(
                config.system_prompt if config.system_prompt is not None else context.system_prompt
            ),
            messages=list(context.messages),
            tools=list(tools),
        )
        self.new_messages: list[BaseMessage] = []
        self.turns = 0

    async def emit(self, event: AgentEvent) -> None:
        result = self._emit(event)
        if inspect.isawaitable(result):
            await result

    async def record(self, messages: Sequence[BaseMessage]) -> None:
        """Put messages into the transcript (prompts, steering and follow-up messages)."""
        for message in messages:
            await self.emit(MessageStartEvent(message=message))
            await self.emit(MessageEndEvent(message=message))
            self.context.messages.append(message)
            self.new_messages.append(message)

    async def end(self, reason: AgentEndReason) -> None:
        await self.emit(AgentEndEvent(messages=list(self.new_messages), reason=reason))

    async def poll(self, source: MessageSource | None) -> list[BaseMessage]:
        return list(await _call(source)) if source is not None else []

    async def run(self) -> None:
        config = self.config
        first_turn = True
        terminated = False
        pending = await self.poll(config.get_steering_messages)
        while True:  # outer: follow-ups arrive when the agent would stop
            has_more_tool_calls = True
            while has_more_tool_calls or pending:  # inner: tool results and steering
                limit = config.max_turns
                if limit is not None and self.turns >= limit and not self.signal.aborted:
                    await self.record(pending)  # kept in the transcript; continue answers them
                    await self.end(AgentEndReason.MAX_TURNS)
                    return
                if first_turn:
                    first_turn = False
                else:
                    await self.emit(TurnStartEvent())
                await self.record(pending)
                pending = []

                message = await self.stream_assistant_response()
                self.turns += 1
                if message.stop_reason in (StopReason.ERROR, StopReason.ABORTED):
                    results = await self.close_unrun_calls(message)
                    await self.emit(TurnEndEvent(message=message, tool_results=results))
                    aborted = message.stop_reason == StopReason.ABORTED
                    await self.end(AgentEndReason.ABORTED if aborted else AgentEndReason.ERROR)
                    return

                results = []
                terminated = False
                if message.tool_calls:
                    results, terminated = await self.execute_tool_calls(message)
                has_more_tool_calls = bool(message.tool_calls) and not terminated
                await self.emit(TurnEndEvent(message=message, tool_results=results))

                if config.should_stop_after_turn is not None and await _call(
                    config.should_stop_after_turn,
                    TurnSummary(message, results, self.context, self.new_messages),
                ):
                    await self.end(AgentEndReason.STOPPED)
                    return
                if self.signal.aborted:
                    # Go round once more: the next model call ends the run as aborted, and the
                    # queues stay untouched for whoever picks up.
                    has_more_tool_calls = True
                    continue
                pending = await self.poll(config.get_steering_messages)

            pending = await self.poll(config.get_follow_up_messages)
            if not pending:
                break
        await self.end(AgentEndReason.TERMINATED if terminated else AgentEndReason.COMPLETED)

    # --- the model call ---

    async def stream_assistant_response(self) -> AssistantMessage:
        config = self.config
        if self.signal.aborted:
            return await self.finish_message(self.failed(None, StopReason.ABORTED), started=False)
        try:
            messages = self.context.messages
            if config.transform_context is not None:
                messages = await _call(config.transform_context, messages, self.signal)
            llm_messages = await _call(config.convert_to_llm, list(messages))
            api_key = config.stream_options.api_key
            if config.get_api_key is not None:
                api_key = await _call(config.get_api_key, config.model.provider) or api_key
        except Exception as error:
            text = f"preparing the model request failed: {_describe(error)}"
            return await self.finish_message(
                self.failed(None, StopReason.ERROR, text), started=False
            )
        llm_context = LlmContext(
            system_prompt=self.context.system_prompt,
            messages=llm_messages,
            tools=list(self.context.tools or []),
        )
        options = replace(
            config.stream_options,
            signal=self.signal,
            thinking_level=config.thinking_level,
            api_key=api_key,
        )

        partial: AssistantMessage | None = None
        final: AssistantMessage | None = None
        failure: str | None = None
        stream: Any = None
        try:
            with self.abort_scope():
                try:
                    stream = config.stream_fn(config.model, llm_context, options)
                    if inspect.isawaitable(stream):
                        stream = await stream
                    events = aiter(stream)
                except Exception as error:
                    failure = _describe(error)
                while failure is None:
                    try:
                        event = await anext(events)
                    except StopAsyncIteration:
                        break
                    except Exception as error:
                        failure = _describe(error)
                        break
                    if isinstance(event, DoneEvent | ErrorEvent):
                        final = event.partial
                        break
                    if partial is None:
                        partial = event.partial
                        self.context.messages.append(partial)
                        await self.emit(MessageStartEvent(message=partial))
                        if isinstance(event, StartEvent):
                            continue
                    elif isinstance(event, StartEvent):
                        continue
                    partial = event.partial
                    self.context.messages[-1] = partial
                    await self.emit(
                        MessageUpdateEvent(message=partial, assistant_message_event=event)
                    )
        finally:
            await _aclose(stream)

        if final is None:
            if self.signal.aborted:
                final = self.failed(partial, StopReason.ABORTED)
            else:
                text = failure or "the provider stream ended without a final message"
                final = self.failed(partial, StopReason.ERROR, f"provider failed: {text}")
        return await self.finish_message(final, started=partial is not None)

    async def finish_message(self, message: AssistantMessage, started: bool) -> AssistantMessage:
        if started:
            self.context.messages[-1] = message
        else:
            self.context.messages.append(message)
            await self.emit(MessageStartEvent(message=message))
        await self.emit(MessageEndEvent(message=message))
        self.new_messages.append(message)
        return message

    def failed(
        self, partial: AssistantMessage | None, stop_reason: StopReason, text: str | None = None
    ) -> AssistantMessage:
        """An assistant message for a model call that did not complete, keeping what streamed."""
        model = self.config.model
        if text is None:
            text = abort_message(self.signal)
        if partial is None:
            return AssistantMessage(
                api=model.api,
                provider=model.provider,
                model=model.id,
                stop_reason=stop_reason,
                error_message=text,
            )
        return partial.model_copy(
            update={
                "content": list(partial.content),
                "stop_reason": stop_reason,
                "error_message": text,
            }
        )

    async def close_unrun_calls(self, message: AssistantMessage) -> list[ToolResultMessage]:
        """Error results for the tool calls of a failed or aborted answer (never run), so that
        every tool call in the transcript has its result."""
        why = (
            abort_message(self.signal)
            if message.stop_reason == StopReason.ABORTED
            else "model error"
        )
        results = [
            _tool_result_message(
                call, AgentToolResult.error(f"Tool call not executed ({why})"), is_error=True
            )
            for call in message.tool_calls
        ]
        await self.record(results)
        return results

    # --- tools ---

    async def execute_tool_calls(
        self, assistant: AssistantMessage
    ) -> tuple[list[ToolResultMessage], bool]:
        """Run one batch; returns the results (in call order) and whether to terminate."""
        calls = assistant.tool_calls
        tools = {tool.name: tool for tool in self.context.tools or ()}
        sequential = self.config.tool_execution_mode == ToolExecutionMode.SEQUENTIAL or any(
            (tool := tools.get(call.name)) is not None
            and tool.execution_mode == ToolExecutionMode.SEQUENTIAL
            for call in calls
        )
        outcomes: list[_Outcome | None] = [None] * len(calls)
        messages: list[ToolResultMessage] = []
        # Tools report progress through a sync callback from any task, so every event of the
        # batch goes through one queue and is emitted here, in order.
        send, receive = anyio.create_memory_object_stream[AgentEvent](math.inf)

        def finish(index: int, outcome: _Outcome) -> None:
            outcomes[index] = outcome
            call = outcome.call
            send.send_nowait(
                ToolExecutionEndEvent(
                    tool_call_id=call.id,
                    tool_name=call.name,
                    result=outcome.result,
                    is_error=outcome.is_error,
                )
            )

        def publish(outcome: _Outcome) -> None:
            message = outcome.message
            messages.append(message)
            send.send_nowait(MessageStartEvent(message=message))
            send.send_nowait(MessageEndEvent(message=message))

        async def run_one(index: int, prepared: _Prepared) -> None:
            result, is_error = await self.execute_prepared(prepared, send)
            finish(index, await self.finalize(assistant, prepared, result, is_error))

        async def run_batch() -> None:
            with send:
                if sequential:
                    for index, call in enumerate(calls):
                        send.send_nowait(_start_event(call))
                        prepared = await self.prepare(assistant, call, tools)
                        if isinstance(prepared, _Prepared):
                            await run_one(index, prepared)
                        else:
                            finish(index, _Outcome.of(call, prepared, is_error=True))
                        publish(outcomes[index])  # type: ignore[arg-type]
                    return
                async with anyio.create_task_group() as group:
                    for index, call in enumerate(calls):
                        send.send_nowait(_start_event(call))
                        prepared = await self.prepare(assistant, call, tools)
                        if isinstance(prepared, _Prepared):
                            group.start_soon(run_one, index, prepared)
                        else:
                            finish(index, _Outcome.of(call, prepared, is_error=True))
                for outcome in outcomes:
                    publish(outcome)  # type: ignore[arg-type]

        with _single_errors():
            async with anyio.create_task_group() as group, receive:
                group.start_soon(run_batch)
                async for event in receive:
                    await self.emit(event)

        for message in messages:
            self.context.messages.append(message)
            self.new_messages.append(message)
            if message.added_tool_names:
                self.context.tools = activate_tools(
                    self.context.tools or [], self.config.available_tools, message.added_tool_names
                )
        finished = [outcome for outcome in outcomes if outcome is not None]
        terminate = bool(finished) and all(o.result.terminate is True for o in finished)
        return messages, terminate

    async def prepare(
        self, assistant: AssistantMessage, call: ToolCall, tools: dict[str, AgentTool]
    ) -> _Prepared | AgentToolResult:
        """Find the tool, prepare and validate the arguments, ask the before-hook; an
        ``AgentToolResult`` (an error) when the call must not run."""
        if self.signal.aborted:
            return AgentToolResult.error(f"Tool call not executed ({abort_message(self.signal)})")
        if assistant.stop_reason == StopReason.LENGTH:
            # Unlike pi, which runs them: arguments cut off at the output limit may be
            # incomplete.
            return AgentToolResult.error(CUT_OFF_CALL)
        tool = tools.get(call.name)
        if tool is None:
            why = self.config.unavailable_tools.get(call.name)
            return AgentToolResult.error(why or f"Tool {call.name} not found")
        try:
            args = call.arguments
            if tool.prepare_arguments is not None:
                args = tool.prepare_arguments(args)
            args = validate_tool_arguments(tool, args)
            hook = self.config.before_tool_call
            if hook is not None:
                verdict = None
                with self.abort_scope():
                    verdict = await _call(
                        hook,
                        BeforeToolCallContext(assistant, call, args, self.context),
                        self.signal,
                    )
                if self.signal.aborted:
                    return AgentToolResult.error(
                        f"Tool call not executed ({abort_message(self.signal)})"
                    )
                if verdict is not None and not isinstance(verdict, BeforeToolCallResult):
                    raise TypeError(_not_a("before_tool_call", verdict, "BeforeToolCallResult"))
                if verdict is not None and verdict.block:
                    return AgentToolResult.error(verdict.reason or "Tool execution was blocked")
        except Exception as error:
            return AgentToolResult.error(_describe(error))
        return _Prepared(call, tool, args)

    async def execute_prepared(
        self, prepared: _Prepared, send: MemoryObjectSendStream[AgentEvent]
    ) -> tuple[AgentToolResult, bool]:
        call = prepared.call

        def on_update(partial_result: AgentToolResult) -> None:
            event = ToolExecutionUpdateEvent(
                tool_call_id=call.id,
                tool_name=call.name,
                args=call.arguments,
                partial_result=partial_result,
            )
            try:
                send.send_nowait(event)
            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                pass  # an update after the batch ended has nowhere to go

        result: Any = None
        try:
            with self.abort_scope():
                result = await prepared.tool.execute(
                    call.id, prepared.args, self.signal, on_update, self.config.tool_context
                )
        except Exception as error:
            return AgentToolResult.error(_describe(error)), True
        if result is None:
            if self.signal.aborted:
                return AgentToolResult.error(f"Tool execution {abort_message(self.signal)}"), True
            return AgentToolResult.error(f"Tool {call.name} returned no result"), True
        if not isinstance(result, AgentToolResult):
            text = f"Tool {call.name} returned {type(result).__name__}, not an AgentToolResult"
            return AgentToolResult.error(text), True
        return result, result.is_error

    async def finalize(
        self,
        assistant: AssistantMessage,
        prepared: _Prepared,
        result: AgentToolResult,
        is_error: bool,
    ) -> _Outcome:
        hook = self.config.after_tool_call
        if hook is not None and not self.signal.aborted:
            try:
                verdict = None
                with self.abort_scope():
                    verdict = await _call(
                        hook,
                        AfterToolCallContext(
                            assistant, prepared.call, prepared.args, result, is_error, self.context
                        ),
                        self.signal,
                    )
                if verdict is not None and not isinstance(verdict, AfterToolCallResult):
                    # (A broken filter: the tool's result is not passed on unfiltered.)
                    raise TypeError(_not_a("after_tool_call", verdict, "AfterToolCallResult"))
            except Exception as error:
                result, is_error = AgentToolResult.error(_describe(error)), True
            else:
                if verdict is not None:
                    is_error = verdict.is_error if verdict.is_error is not None else is_error
                    result = replace(
                        result,
                        content=verdict.content if verdict.content is not None else result.content,
                        details=verdict.details if verdict.details is not None else result.details,
                        terminate=(
                            verdict.terminate if verdict.terminate is not None else result.terminate
                        ),
                    )
        if result.is_error != is_error:
            result = replace(result, is_error=is_error)
        return _Outcome.of(prepared.call, result, is_error)

    @contextmanager
    def abort_scope(self) -> Iterator[anyio.CancelScope]:
        """A cancel scope that the abort signal cancels after ``abort_grace`` seconds."""
        scope = anyio.CancelScope()
        grace = self.config.abort_grace

        def on_abort() -> None:
            if grace <= 0:
                scope.cancel()
            else:
                scope.deadline = min(scope.deadline, anyio.current_time() + grace)

        remove = self.signal.on_abort(on_abort)
        try:
            with scope:
                yield scope
        finally:
            remove()


# --- helpers ----------------------------------------------------------------------------------


def _start_event(call: ToolCall) -> ToolExecutionStartEvent:
    return ToolExecutionStartEvent(tool_call_id=call.id, tool_name=call.name, args=call.arguments)


def _tool_result_message(
    call: ToolCall, result: AgentToolResult, is_error: bool
) -> ToolResultMessage:
    optional: dict[str, Any] = {}
    if result.details is not None:
        optional["details"] = result.details
    if result.usage is not None:
        optional["usage"] = result.usage
    if result.added_tool_names:
        optional["added_tool_names"] = list(result.added_tool_names)
    return ToolResultMessage(
        tool_call_id=call.id,
        tool_name=call.name,
        content=list(result.content),
        is_error=is_error,
        **optional,
    )


async def _call(function: Callable[..., MaybeAwaitable[T]], *args: Any) -> T:
    """Call a sync or async callable."""
    result = function(*args)
    if inspect.isawaitable(result):
        return await result
    return result


async def _aclose(stream: Any) -> None:
    aclose = getattr(stream, "aclose", None)
    if aclose is None:
        return
    with anyio.CancelScope(shield=True) as scope:
        scope.deadline = anyio.current_time() + 1.0
        try:
            await aclose()
        except Exception:
            pass  # the stream already failed; its message says so


def _not_a(hook: str, verdict: object, kind: str) -> str:
    return (
        f"the {hook} hook returned {type(verdict).__name__}, not a {kind} or None: "
        "the call's result is this error"
    )


def _describe(error: BaseException) -> str:
    text = str(error)
    return text if text else type(error).__name__


@contextmanager
def _single_errors() -> Iterator[None]:
    """Re-raise a task group's lone exception as itself, not wrapped in an ExceptionGroup."""
    try:
        yield
    except BaseExceptionGroup as group:
        error: BaseException = group
        while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
            error = error.exceptions[0]
        if error is group:
            raise
        raise error from None
