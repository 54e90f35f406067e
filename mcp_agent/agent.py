"""Agent: the stateful wrapper around the loop (pi's Agent).

    agent = Agent(model=model, stream_fn=provider, tools=[...])
    unsubscribe = agent.subscribe(print)
    await agent.prompt("Hello, what's in the current directory?")

``prompt`` runs until the agent is done and returns the run's new messages. To steer, queue a
follow-up or abort while it runs, start it in a task group (``tg.start_soon(agent.prompt, …)``)
and call ``steer`` / ``follow_up`` / ``abort`` from elsewhere; ``wait_for_idle`` waits for the run.
``continue_`` resumes from the transcript as it is (after an error, an abort or a restart).

The agent knows nothing of sessions: ``mcp_agent.runtime.session_agent.SessionAgent`` (pi's
AgentSession) binds one to a session, saves every message, and adds auto-compaction and
auto-retry, through the hooks marked below.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import anyio

from mcp_agent.abort import AbortController, AbortSignal
from mcp_agent.events import (
    AgentEndEvent,
    AgentEndReason,
    AgentEvent,
    MessageEndEvent,
    MessageStartEvent,
    MessageUpdateEvent,
    ToolExecutionEndEvent,
    ToolExecutionStartEvent,
    TurnEndEvent,
)
from mcp_agent.loop import (
    AfterToolCall,
    AgentLoopConfig,
    BeforeToolCall,
    ConvertToLlm,
    MessageSource,
    ShouldStopAfterTurn,
    TransformContext,
    activate_tools,
    agent_loop,
    agent_loop_continue,
)
from mcp_agent.messages import (
    AssistantMessage,
    BaseMessage,
    ImageContent,
    Model,
    QueueMode,
    StopReason,
    TextContent,
    ThinkingLevel,
    ToolExecutionMode,
    ToolResultMessage,
    UserMessage,
    content_text,
    convert_to_llm,
)
from mcp_agent.providers.base import StreamFn, StreamOptions
from mcp_agent.state import AgentContext, AgentState
from mcp_agent.tools import AgentTool
from mcp_agent.wire import one_line

log = logging.getLogger(__name__)

Listener = Callable[[AgentEvent], Awaitable[None] | None]
PromptInput = str | BaseMessage | Sequence[BaseMessage]


def effective_thinking_level(level: ThinkingLevel, model: Model) -> ThinkingLevel:
    """``level`` as ``model`` can do it: ``off`` for a model without reasoning."""
    return level if model.reasoning else ThinkingLevel.OFF


# The result of a tool call that a prompt finds without one: its run was cut short, or the
# branch was moved to the call (session_move_to) and goes on from there.
INTERRUPTED_CALL = (
    "No result was recorded for this tool call: the run that made it stopped first (its "
    "server stopped or was killed mid-call), or the conversation went on from before its result"
)


class AgentBusyError(RuntimeError):
    """The agent is already running; steer, follow up, or wait for it to be idle."""


class _Queue:
    def __init__(self, mode: QueueMode) -> None:
        self.mode = QueueMode(mode)
        self.messages: list[BaseMessage] = []

    def drain(self) -> list[BaseMessage]:
        if self.mode == QueueMode.ALL:
            drained, self.messages = self.messages, []
            return drained
        return [self.messages.pop(0)] if self.messages else []


class Agent:
    """pi's Agent: owns the transcript and settings, runs the loop, fans out its events.

    ``tools`` are active from the start; ``available_tools`` can be activated later (by
    ``set_active_tools`` or by a tool result's ``added_tool_names``); ``unavailable_tools``
    (an attribute) says why a tool is missing to a call of it. The other options are the
    loop's (see ``AgentLoopConfig``).
    """

    def __init__(
        self,
        *,
        model: Model,
        stream_fn: StreamFn,
        system_prompt: str = "",
        tools: Sequence[AgentTool] = (),
        available_tools: Sequence[AgentTool] = (),
        messages: Sequence[BaseMessage] = (),
        thinking_level: ThinkingLevel | str = ThinkingLevel.OFF,
        convert_to_llm: ConvertToLlm = convert_to_llm,
        transform_context: TransformContext | None = None,
        before_tool_call: BeforeToolCall | None = None,
        after_tool_call: AfterToolCall | None = None,
        should_stop_after_turn: ShouldStopAfterTurn | None = None,
        tool_execution_mode: ToolExecutionMode = ToolExecutionMode.PARALLEL,
        steering_mode: QueueMode = QueueMode.ONE_AT_A_TIME,
        follow_up_mode: QueueMode = QueueMode.ONE_AT_A_TIME,
        max_turns: int | None = None,
        stream_options: StreamOptions | None = None,
        get_api_key: Callable[[str], Any] | None = None,
        tool_context: Any = None,
        abort_grace: float = 0.25,
    ) -> None:
        # The level asked for; the state holds the level in effect for the model (see
        # ``effective_thinking_level``), worked out again when the model changes.
        self._thinking_requested = ThinkingLevel(thinking_level)
        self.state = AgentState(
            system_prompt=system_prompt,
            model=model,
            thinking_level=effective_thinking_level(self._thinking_requested, model),
            tools=list(tools),
            messages=list(messages),
        )
        self._pool: dict[str, AgentTool] = {t.name: t for t in (*available_tools, *tools)}
        self.stream_fn = stream_fn
        self.convert_to_llm = convert_to_llm
        self.transform_context = transform_context
        self.before_tool_call = before_tool_call
        self.after_tool_call = after_tool_call
        self.should_stop_after_turn = should_stop_after_turn
        self.tool_execution_mode = tool_execution_mode
        self.max_turns = max_turns
        self.stream_options = stream_options or StreamOptions()
        self.get_api_key = get_api_key
        self.tool_context = tool_context
        self.abort_grace = abort_grace
        self.unavailable_tools: dict[str, str] = {}
        self._steering = _Queue(steering_mode)
        self._follow_ups = _Queue(follow_up_mode)
        self._listeners: list[Listener] = []
        self._abort: AbortController | None = None
        self._busy = False  # a prompt or continue_ is under way (its run or a compaction)
        self._pending_abort: str | None = None  # abort() while busy between runs
        self._last_end: AgentEndReason | None = None  # why the last run's loop ended
        self._idle = anyio.Event()
        self._idle.set()

    # --- settings -----------------------------------------------------------------------------

    @property
    def steering_mode(self) -> QueueMode:
        return self._steering.mode

    @steering_mode.setter
    def steering_mode(self, mode: QueueMode) -> None:
        self._steering.mode = QueueMode(mode)

    @property
    def follow_up_mode(self) -> QueueMode:
        return self._follow_ups.mode

    @follow_up_mode.setter
    def follow_up_mode(self, mode: QueueMode) -> None:
        self._follow_ups.mode = QueueMode(mode)

    @property
    def available_tools(self) -> list[AgentTool]:
        """Every tool the agent knows, active or not."""
        return list(self._pool.values())

    def set_model(self, model: Model) -> None:
        """Use ``model`` from the next run on (the thinking level asked for is clamped to what
        it supports)."""
        self.state.model = model
        self.state.thinking_level = effective_thinking_level(self._thinking_requested, model)
        self._settings_changed()

    def set_thinking_level(self, level: ThinkingLevel | str) -> None:
        """Think this much from the next run on, or as much as the model can: a model without
        reasoning thinks ``off`` (as pi clamps it); ``state.thinking_level`` is the level in
        effect, which is what a session records."""
        self._thinking_requested = ThinkingLevel(level)
        self.state.thinking_level = effective_thinking_level(
            self._thinking_requested, self.state.model
        )
        self._settings_changed()

    def set_system_prompt(self, prompt: str) -> None:
        self.state.system_prompt = prompt

    def set_tools(self, tools: Sequence[AgentTool]) -> None:
        """Make exactly ``tools`` active (they join the known tools)."""
        self._pool.update((t.name, t) for t in tools)
        self.state.tools = list(tools)
        self._settings_changed()

    def set_active_tools(self, names: Sequence[str]) -> None:
        """Make the known tools named in ``names`` active, in that order."""
        unknown = [n for n in names if n not in self._pool]
        if unknown:
            raise KeyError(f"unknown tool(s): {', '.join(unknown)}")
        self.state.tools = [self._pool[n] for n in names]
        self._settings_changed()

    # --- events -------------------------------------------------------------------------------

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """Call ``listener`` (sync or async; awaited in subscription order) with every event;
        returns a function that unsubscribes."""
        self._listeners.append(listener)

        def unsubscribe() -> None:
            if listener in self._listeners:
                self._listeners.remove(listener)

        return unsubscribe

    # --- queues -------------------------------------------------------------------------------

    def steer(self, message: str | BaseMessage) -> None:
        """Queue a message to go in after the current turn, before the next model call."""
        self._steering.messages.append(_as_message(message))

    def follow_up(self, message: str | BaseMessage) -> None:
        """Queue a message to run when the agent would otherwise stop."""
        self._follow_ups.messages.append(_as_message(message))

    def clear_steering_queue(self) -> None:
        self._steering.messages.clear()

    def clear_follow_up_queue(self) -> None:
        self._follow_ups.messages.clear()

    def clear_all_queues(self) -> None:
        self.clear_steering_queue()
        self.clear_follow_up_queue()

    def has_queued_messages(self) -> bool:
        return bool(self._steering.messages or self._follow_ups.messages)

    def queued_count(self) -> int:
        return len(self._steering.messages) + len(self._follow_ups.messages)

    def queued_chars(self) -> int:
        """The characters of text in the steering and follow-up messages still queued."""
        queued = (*self._steering.messages, *self._follow_ups.messages)
        return sum(len(content_text(getattr(message, "content", ""))) for message in queued)

    def take_queued(self) -> tuple[list[BaseMessage], list[BaseMessage]]:
        """The steering and follow-up messages still queued, taken out of the queues (pi's
        AgentSession.clearQueue): what a run that ended did not get to."""
        steering, self._steering.messages = self._steering.messages, []
        follow_ups, self._follow_ups.messages = self._follow_ups.messages, []
        return steering, follow_ups

    # --- running ------------------------------------------------------------------------------

    @property
    def is_running(self) -> bool:
        return self._abort is not None

    @property
    def signal(self) -> AbortSignal | None:
        """The current run's abort signal, if a run is active."""
        return self._abort.signal if self._abort is not None else None

    def abort(self, reason: str = "aborted") -> None:
        """Abort the current run, if any; it ends with an aborted assistant message."""
        if self._abort is not None:
            self._abort.abort(reason)
        if self._busy:
            # Whatever this prompt does next (a retry, a compaction, a run) starts aborted:
            # the abort may land after the run's last event, before the run is over.
            self._pending_abort = reason

    async def wait_for_idle(self) -> None:
        """Return once no run is active (at once when idle)."""
        await self._idle.wait()

    def reset(self) -> None:
        """Forget the transcript and the queues."""
        if self._busy:
            raise AgentBusyError("cannot reset while the agent is running")
        self.state.messages = []
        self.state.error_message = None
        self.clear_all_queues()

    async def prompt(
        self, input: PromptInput, images: Sequence[ImageContent] = ()
    ) -> list[BaseMessage]:
        """Run the agent on a text (with optional images), a message or a list of messages;
        returns the run's new messages. Raises AgentBusyError while a run is active."""
        if self._busy:
            raise AgentBusyError(
                "the agent is already running: use steer() or follow_up() to queue messages, "
                "or wait_for_idle() first"
            )
        prompts = _normalize(input, images)
        with self._busy_scope():
            await self._close_interrupted_calls()
            await self._before_prompt()
            new = await self._finish(await self._run_prompts(prompts))
            return await self._run_late_messages(new)

    async def continue_(self) -> list[BaseMessage]:
        """Carry on from the transcript as it is (``continue`` is a keyword). After an
        assistant message this runs queued steering, else queued follow-up messages; with
        none queued it raises ValueError, as there is nothing for the model to answer."""
        if self._busy:
            raise AgentBusyError("the agent is already running; wait_for_idle() first")
        if not self.state.messages:
            raise ValueError("no messages to continue from")
        with self._busy_scope():
            await self._close_interrupted_calls()
            if self.state.messages[-1].role == "assistant":
                new = await self._run_queued()
                if not new:
                    raise ValueError("cannot continue from an assistant message")
            else:
                new = await self._run_continue()
            return await self._run_late_messages(await self._finish(new))

    @contextmanager
    def _busy_scope(self) -> Iterator[None]:
        """One prompt or continue_: its runs and compactions; wait_for_idle waits for all."""
        self._busy = True
        self._pending_abort = None
        self._idle = anyio.Event()
        try:
            yield
        finally:
            self._busy = False
            self._pending_abort = None
            self._idle.set()

    # --- hooks (a session agent fills them in) ---------------------------------------------------

    async def _before_prompt(self) -> None:
        """Before a prompt's first run (a session agent compacts an over-full context here)."""

    async def _finish(self, new: list[BaseMessage]) -> list[BaseMessage]:
        """After a prompt's or continue_'s run; returns every message it added (a session
        agent retries passing errors and recovers from a context overflow here)."""
        return new

    async def _save(self, message: BaseMessage) -> None:
        """A message entered the transcript (a session agent appends it to its session)."""

    async def _record_settings(self, settings: bool | None = None) -> None:
        """Model, thinking level or active tools may have changed (a session agent records
        them). ``settings``: whether model and thinking level count now (default: when no run
        is active, as a change during a run takes effect when it ends)."""

    def _settings_changed(self) -> None:
        """A setter changed model, thinking level or tools (called from sync code; a session
        agent records the change at once when idle, else when the run ends)."""

    async def _run_continue(self) -> list[BaseMessage]:
        return await self._run(
            lambda config: agent_loop_continue(self._context(), config, self._on_event)
        )

    async def _run_prompts(
        self, messages: list[BaseMessage], skip_initial_steering: bool = False
    ) -> list[BaseMessage]:
        return await self._run(
            lambda config: agent_loop(messages, self._context(), config, self._on_event),
            skip_initial_steering,
        )

    async def _run_late_messages(self, new: list[BaseMessage]) -> list[BaseMessage]:
        """After a run that completed: messages queued once its loop had stopped taking
        them (while its end was told, or a session agent compacted at its end: a model call)
        go in now, and the run goes on with them, as pi does after a compaction; they were
        given back as never taken. Not after an abort, an error or the turn limit."""
        while (
            self._last_end in (AgentEndReason.COMPLETED, AgentEndReason.TERMINATED)
            and self._pending_abort is None
            and self.has_queued_messages()
        ):
            new = [*new, *await self._finish(await self._run_queued())]
        return new

    async def _run_queued(self) -> list[BaseMessage]:
        """Run on from an answer with the queued messages: steering first, else follow-ups
        (pi's continue); nothing when none are queued."""
        steering = self._steering.drain()
        if steering:
            return await self._run_prompts(steering, skip_initial_steering=True)
        follow_ups = self._follow_ups.drain()
        return await self._run_prompts(follow_ups) if follow_ups else []

    def _context(self) -> AgentContext:
        return AgentContext(
            system_prompt=self.state.system_prompt,
            messages=list(self.state.messages),
            tools=list(self.state.tools),
        )

    def _config(self, signal: AbortSignal, skip_initial_steering: bool) -> AgentLoopConfig:
        skip = skip_initial_steering

        def get_steering() -> list[BaseMessage]:
            nonlocal skip
            if skip:
                skip = False
                return []
            return self._steering.drain()

        state = self.state
        return AgentLoopConfig(
            model=state.model,
            stream_fn=self.stream_fn,
            system_prompt=state.system_prompt,
            tools=list(state.tools),
            available_tools=list(self._pool.values()),
            unavailable_tools=dict(self.unavailable_tools),
            convert_to_llm=self.convert_to_llm,
            transform_context=self.transform_context,
            tool_execution_mode=self.tool_execution_mode,
            before_tool_call=self.before_tool_call,
            after_tool_call=self.after_tool_call,
            should_stop_after_turn=self.should_stop_after_turn,
            get_steering_messages=get_steering,
            get_follow_up_messages=self._follow_ups.drain,
            signal=signal,
            max_turns=self.max_turns,
            thinking_level=state.thinking_level,
            stream_options=self.stream_options,
            get_api_key=self.get_api_key,
            tool_context=self.tool_context,
            abort_grace=self.abort_grace,
        )

    async def _run(
        self,
        executor: Callable[[AgentLoopConfig], Awaitable[list[BaseMessage]]],
        skip_initial_steering: bool = False,
    ) -> list[BaseMessage]:
        if self.is_running:
            raise AgentBusyError("the agent is already running")
        controller = self._abort = AbortController()
        if self._pending_abort is not None:
            controller.abort(self._pending_abort)
        state = self.state
        state.is_streaming = True
        state.streaming_message = None
        state.error_message = None
        self._last_end = None
        finished = False
        try:
            await self._record_settings(settings=True)
            messages = await executor(self._config(controller.signal, skip_initial_steering))
            finished = True
            return messages
        except Exception as error:
            message = await self._fail_run(error, controller.signal.aborted)
            finished = True
            return [message]
        finally:
            # Cancelled from outside or not: keep the transcript (and the session) whole. The
            # shield lets the saves finish; each is bounded by the storage's own timeout.
            with anyio.CancelScope(shield=True):
                if not finished:
                    await self._close_open_tool_calls("the run was cancelled")
                state.is_streaming = False
                state.streaming_message = None
                state.pending_tool_calls = set()
                self._abort = None
                try:
                    await self._record_settings()  # settings changed during the run
                except Exception as error:
                    _warn("recording the agent's settings failed", error)

    async def _fail_run(self, error: Exception, aborted: bool) -> AssistantMessage:
        """A run that raised (a listener or the session failed): record why, end the run."""
        text = str(error) or type(error).__name__
        closed = await self._close_open_tool_calls(f"the run failed: {text}")
        model = self.state.model
        message = AssistantMessage(
            api=model.api,
            provider=model.provider,
            model=model.id,
            stop_reason=StopReason.ABORTED if aborted else StopReason.ERROR,
            error_message=text,
        )
        await self._keep(message)
        self.state.error_message = text
        reason = AgentEndReason.ABORTED if aborted else AgentEndReason.ERROR
        self._last_end = reason
        await self._emit(AgentEndEvent(messages=[*closed, message], reason=reason))
        return message

    async def _close_interrupted_calls(self) -> None:
        """Before a prompt or continue_: error results for the tool calls of a transcript
        that ends in them, with no result or only some (nothing else after them): a run cut
        short leaves it so (its server killed or stopped while its tools ran: a batch's
        results are written when the batch ends), as does a branch moved to such a call. The
        session then says so and stays whole, instead of the model being sent a made-up "No
        result provided" each time."""
        for message in reversed(self.state.messages):
            if isinstance(message, AssistantMessage):
                break
            if not isinstance(message, ToolResultMessage):
                return
        await self._close_open_tool_calls("", text=INTERRUPTED_CALL)

    async def _close_open_tool_calls(
        self, why: str, *, text: str | None = None
    ) -> list[ToolResultMessage]:
        """Error results for the last assistant message's tool calls that have none, so that
        every tool call in the transcript (and the session) keeps its result: ``text``, else
        "Tool call not executed (``why``)"."""
        messages = self.state.messages
        for index in range(len(messages) - 1, -1, -1):
            if isinstance(messages[index], AssistantMessage):
                break
        else:
            return []
        answered = {m.tool_call_id for m in messages[index:] if isinstance(m, ToolResultMessage)}
        closed = [
            ToolResultMessage(
                tool_call_id=call.id,
                tool_name=call.name,
                content=[TextContent(text=text or f"Tool call not executed ({why})")],
                is_error=True,
            )
            for call in messages[index].tool_calls  # type: ignore[attr-defined]
            if call.id not in answered
        ]
        for result in closed:
            await self._keep(result)
        return closed

    async def _keep(self, message: BaseMessage) -> None:
        """Append a message the loop did not emit (after a failure) to the transcript and,
        as far as it still works, save it."""
        self.state.messages.append(message)
        try:
            await self._save(message)
        except Exception as error:  # saving may be what failed; the transcript keeps it
            _warn("saving a message failed (the transcript keeps it)", error)

    async def _on_event(self, event: AgentEvent) -> None:
        state = self.state
        match event:
            case MessageStartEvent(message=message) | MessageUpdateEvent(message=message):
                state.streaming_message = message
            case MessageEndEvent(message=message):
                state.streaming_message = None
                state.messages.append(message)
                await self._save(message)
                if isinstance(message, ToolResultMessage) and message.added_tool_names:
                    pool = list(self._pool.values())
                    state.tools = activate_tools(state.tools, pool, message.added_tool_names)
                    await self._record_settings()
            case ToolExecutionStartEvent(tool_call_id=call_id):
                state.pending_tool_calls = state.pending_tool_calls | {call_id}
            case ToolExecutionEndEvent(tool_call_id=call_id):
                state.pending_tool_calls = state.pending_tool_calls - {call_id}
            case TurnEndEvent(message=message):
                if isinstance(message, AssistantMessage) and message.error_message:
                    state.error_message = message.error_message
            case AgentEndEvent(reason=reason):
                state.streaming_message = None
                self._last_end = reason
        await self._emit(event)

    async def _emit(self, event: AgentEvent) -> None:
        for listener in list(self._listeners):
            result = listener(event)
            if inspect.isawaitable(result):
                await result


def _warn(what: str, error: Exception) -> None:
    """A failure after the run's own (the session's storage out of reach, most often, and
    said already by whoever ran the run) in one line; its traceback only when debugging, or a
    database that stays down writes one for every run that fails on it."""
    log.warning(
        "%s: %s: %s",
        what,
        type(error).__name__,
        one_line(error, 500),
        exc_info=error if log.isEnabledFor(logging.DEBUG) else None,
    )


def _as_message(message: str | BaseMessage) -> BaseMessage:
    return UserMessage(content=[TextContent(text=message)]) if isinstance(message, str) else message


def _normalize(input: PromptInput, images: Sequence[ImageContent]) -> list[BaseMessage]:
    if isinstance(input, str):
        return [UserMessage(content=[TextContent(text=input), *images])]
    if isinstance(input, BaseMessage):
        return [input]
    return list(input)


__all__ = ["Agent", "AgentBusyError", "Listener", "MessageSource", "PromptInput"]
