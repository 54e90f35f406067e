"""Agent: the stateful wrapper around the loop (pi's Agent), optionally writing into a Session.

    agent = Agent(model=model, stream_fn=provider, tools=[...], session=session)
    unsubscribe = agent.subscribe(print)
    await agent.prompt("Hello, what's in the current directory?")

``prompt`` runs until the agent is done and returns the run's new messages. To steer, queue a
follow-up or abort while it runs, start it in a task group (``tg.start_soon(agent.prompt, …)``)
and call ``steer`` / ``follow_up`` / ``abort`` from elsewhere; ``wait_for_idle`` waits for the run.
``continue_`` resumes from the transcript as it is (after an error, an abort or a restart).

Bound to a session, the agent appends every message to it when the message ends, so a crash
loses nothing that finished; model, thinking level and active tool changes are recorded as
entries when they differ from what the session already says. ``Agent.from_session`` resumes.

With ``compaction=CompactionSettings()`` a session-bound agent compacts its session (pi's
auto-compaction): before a prompt and after a run when the context is over the model's window
minus the reserve, and when the model refuses a request as too long, in which case the failed
answer is dropped from the transcript, the session is compacted and the request is retried once.
After a compaction the transcript is rebuilt from the session.

With ``retry=RetrySettings()`` a run that ends on a passing model error (overloaded, rate
limited, a broken or stalled stream) is run again after a growing pause (pi's auto-retry),
announced by ``auto_retry_start`` / ``auto_retry_end`` events.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any, Protocol, cast

import anyio

from mcp_agent.abort import AbortController, AbortSignal
from mcp_agent.events import (
    AgentEndEvent,
    AgentEndReason,
    AgentEvent,
    AutoRetryEndEvent,
    AutoRetryStartEvent,
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
    convert_to_llm,
)
from mcp_agent.providers.base import (
    StreamFn,
    StreamOptions,
    is_context_overflow,
    is_transient_error,
)
from mcp_agent.sessions.compaction import (
    CompactableSession,
    CompactionError,
    CompactionSettings,
    compact,
    context_tokens,
    should_compact,
)
from mcp_agent.state import AgentContext, AgentState
from mcp_agent.tools import AgentTool

log = logging.getLogger(__name__)

Listener = Callable[[AgentEvent], Awaitable[None] | None]
PromptInput = str | BaseMessage | Sequence[BaseMessage]


class SessionLike(Protocol):
    """What the agent needs of a session (``mcp_agent.sessions.Session`` has it)."""

    @property
    def id(self) -> str: ...
    def append_message(self, message: BaseMessage) -> str: ...
    def append_thinking_level_change(self, level: str) -> str: ...
    def append_model_change(self, provider: str, model_id: str) -> str: ...
    def append_active_tools_change(self, names: list[str]) -> str: ...
    def build_context(self) -> Any: ...


@dataclass
class RetrySettings:
    """pi's auto-retry: a run that ends on a passing model error (overloaded, rate limited, a
    stream that broke off or stalled) runs again after ``base_delay`` seconds, doubled each
    time up to ``max_delay``, at most ``max_retries`` times. The failed answer stays in the
    session; the transcript drops it, as the model never sees failed answers anyway."""

    enabled: bool = True
    max_retries: int = 3
    base_delay: float = 2.0
    max_delay: float = 60.0

    def delay(self, attempt: int) -> float:
        return min(self.base_delay * 2 ** (attempt - 1), self.max_delay)


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
    ``set_active_tools`` or by a tool result's ``added_tool_names``). The other options are
    the loop's (see ``AgentLoopConfig``).
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
        session: SessionLike | None = None,
        compaction: CompactionSettings | None = None,
        retry: RetrySettings | None = None,
    ) -> None:
        self.state = AgentState(
            system_prompt=system_prompt,
            model=model,
            thinking_level=ThinkingLevel(thinking_level),
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
        self._steering = _Queue(steering_mode)
        self._follow_ups = _Queue(follow_up_mode)
        self._listeners: list[Listener] = []
        self._abort: AbortController | None = None
        self._compaction_abort: AbortController | None = None
        self._busy = False  # a prompt or continue_ is under way (its run or a compaction)
        self._pending_abort: str | None = None  # abort() while busy between runs
        self._idle = anyio.Event()
        self._idle.set()
        self.compaction = compaction
        self.retry = retry
        self._retry_abort: AbortController | None = None  # set while waiting to retry
        self.session: SessionLike | None = None
        self._session_id: str | None = None
        # What the session says now, so that only real changes become entries.
        self._recorded_model: tuple[str, str] | None = None
        self._recorded_thinking: str = ThinkingLevel.OFF.value
        self._recorded_tools: list[str] | None = None
        if session is not None:
            self._bind(session, session.build_context())

    def _bind(self, session: SessionLike, context: Any) -> None:
        """Write into ``session`` from now on; ``context`` is what it says now."""
        self.session = session
        self._session_id = session.id
        self._recorded_model = _model_ref(context.model)
        self._recorded_thinking = str(context.thinking_level)
        names = context.active_tool_names
        self._recorded_tools = list(names) if names is not None else None
        if not self.stream_options.session_id:
            self.stream_options = replace(self.stream_options, session_id=self._session_id)

    @classmethod
    def from_session(
        cls,
        session: SessionLike,
        *,
        stream_fn: StreamFn,
        model: Model | None = None,
        resolve_model: Callable[[str, str], Model | None] | None = None,
        tools: Sequence[AgentTool] = (),
        **options: Any,
    ) -> Agent:
        """An agent that carries on where ``session`` left off: its built context gives the
        messages, thinking level, active tools (chosen from ``tools``; all of them when the
        session names none) and model. The session's model is looked up with
        ``resolve_model(provider, model_id)``; failing that ``model`` is used when it is the
        same one, else a bare ``Model`` with the session's provider and id. ``model`` is
        required only when the session names no model."""
        context = session.build_context()
        ref = _model_ref(context.model)
        chosen: Model | None = None
        if ref is not None:
            if resolve_model is not None:
                chosen = resolve_model(*ref)
            if chosen is None and model is not None and (model.provider, model.id) == ref:
                chosen = model
            if chosen is None:
                chosen = Model(id=ref[1], provider=ref[0])
        elif model is not None:
            chosen = model
        if chosen is None:
            raise ValueError("the session names no model: pass model=")
        names = context.active_tool_names
        if names is None:
            active, inactive = list(tools), []
        else:
            by_name = {t.name: t for t in tools}
            active = [by_name[n] for n in names if n in by_name]
            inactive = [t for t in tools if t.name not in names]
        agent = cls(
            model=chosen,
            stream_fn=stream_fn,
            tools=active,
            available_tools=[*inactive, *options.pop("available_tools", ())],
            messages=context.messages,
            thinking_level=options.pop("thinking_level", context.thinking_level),
            **options,
        )
        agent._bind(session, context)  # the context just built: a long one is not read twice
        return agent

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
        """Use ``model`` from the next run on."""
        self.state.model = model
        self._sync_session()

    def set_thinking_level(self, level: ThinkingLevel | str) -> None:
        self.state.thinking_level = ThinkingLevel(level)
        self._sync_session()

    def set_system_prompt(self, prompt: str) -> None:
        self.state.system_prompt = prompt

    def set_tools(self, tools: Sequence[AgentTool]) -> None:
        """Make exactly ``tools`` active (they join the known tools)."""
        self._pool.update((t.name, t) for t in tools)
        self.state.tools = list(tools)
        self._sync_session()

    def set_active_tools(self, names: Sequence[str]) -> None:
        """Make the known tools named in ``names`` active, in that order."""
        unknown = [n for n in names if n not in self._pool]
        if unknown:
            raise KeyError(f"unknown tool(s): {', '.join(unknown)}")
        self.state.tools = [self._pool[n] for n in names]
        self._sync_session()

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

    # --- running ------------------------------------------------------------------------------

    @property
    def session_id(self) -> str | None:
        return self._session_id

    @property
    def is_running(self) -> bool:
        return self._abort is not None

    @property
    def is_compacting(self) -> bool:
        return self._compaction_abort is not None

    @property
    def signal(self) -> AbortSignal | None:
        """The current run's abort signal, if a run is active."""
        return self._abort.signal if self._abort is not None else None

    def abort(self, reason: str = "aborted") -> None:
        """Abort the current run, if any; it ends with an aborted assistant message. An
        automatic compaction under way is abandoned (nothing is written)."""
        if self._abort is not None:
            self._abort.abort(reason)
        if self._compaction_abort is not None:
            self._compaction_abort.abort(reason)
        if self._retry_abort is not None:
            self._retry_abort.abort(reason)
        if self._busy:
            # Whatever this prompt does next (a retry, a compaction, a run) starts aborted:
            # the abort may land after the run's last event, before the run is over.
            self._pending_abort = reason

    async def wait_for_idle(self) -> None:
        """Return once no run is active (at once when idle)."""
        await self._idle.wait()

    def reset(self) -> None:
        """Forget the transcript and the queues (the session, if any, is left as it is)."""
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
            await self._compact_over_threshold()
            new = await self._retry_passing_errors(await self._run_prompts(prompts))
            return await self._recover(new)

    async def continue_(self) -> list[BaseMessage]:
        """Carry on from the transcript as it is (``continue`` is a keyword). After an
        assistant message this runs queued steering, else queued follow-up messages; with
        none queued it raises ValueError, as there is nothing for the model to answer."""
        if self._busy:
            raise AgentBusyError("the agent is already running; wait_for_idle() first")
        if not self.state.messages:
            raise ValueError("no messages to continue from")
        with self._busy_scope():
            if self.state.messages[-1].role == "assistant":
                steering = self._steering.drain()
                if steering:
                    new = await self._run_prompts(steering, skip_initial_steering=True)
                else:
                    follow_ups = self._follow_ups.drain()
                    if not follow_ups:
                        raise ValueError("cannot continue from an assistant message")
                    new = await self._run_prompts(follow_ups)
            else:
                new = await self._run_continue()
            return await self._recover(await self._retry_passing_errors(new))

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

    async def _run_continue(self) -> list[BaseMessage]:
        return await self._run(
            lambda config: agent_loop_continue(self._context(), config, self._on_event)
        )

    # --- retry ----------------------------------------------------------------------------------

    async def _retry_passing_errors(self, new: list[BaseMessage]) -> list[BaseMessage]:
        """After a run that ended on a passing model error: wait, drop the failed answer from
        the transcript (the session keeps it) and continue, up to ``retry.max_retries`` times
        in a row (an answer that works starts the count again, as in pi)."""
        settings = self.retry
        if settings is None or not settings.enabled:
            return new
        attempt = 0
        while True:
            last = _last_answer(new)
            if last is None or not is_transient_error(last) or self._pending_abort is not None:
                if attempt:
                    why = "aborted" if self._pending_abort is not None else None
                    await self._emit(AutoRetryEndEvent(False, attempt, why or _error_of(last)))
                return new
            if attempt >= settings.max_retries:
                await self._emit(AutoRetryEndEvent(False, attempt, last.error_message))
                return new
            attempt += 1
            delay = settings.delay(attempt)
            error = last.error_message or ""
            await self._emit(AutoRetryStartEvent(attempt, settings.max_retries, delay, error))
            controller = self._retry_abort = AbortController()
            if self._pending_abort is not None:
                controller.abort(self._pending_abort)
            try:
                with anyio.move_on_after(delay):
                    await controller.signal.wait()
            finally:
                self._retry_abort = None
            if controller.signal.aborted:
                await self._emit(AutoRetryEndEvent(False, attempt, "aborted while waiting"))
                return new
            self._drop_failed_answer()
            if not self.state.messages or self.state.messages[-1].role == "assistant":
                await self._emit(AutoRetryEndEvent(False, attempt, "nothing to answer"))
                return new
            part = await self._run_continue()
            new = [*new, *part]
            if any(isinstance(m, AssistantMessage) and m.stop_reason not in _FAILED for m in part):
                await self._emit(AutoRetryEndEvent(True, attempt, None))
                attempt = 0

    # --- compaction ---------------------------------------------------------------------------

    def _compacts(self) -> bool:
        settings = self.compaction
        return self.session is not None and settings is not None and settings.enabled

    def _over_threshold(self) -> bool:
        assert self.compaction is not None
        tokens = context_tokens(self.state.messages)
        window = self.state.model.context_window
        return should_compact(tokens, window, self.compaction.reserve_tokens)

    async def _compact_over_threshold(self) -> None:
        if self._compacts() and self._over_threshold():
            await self._compact("threshold")

    async def _recover(self, new: list[BaseMessage]) -> list[BaseMessage]:
        """After a run: on a context overflow, drop the failed answer from the transcript (it
        stays in the session), compact and retry once; else compact when over the threshold."""
        if not self._compacts():
            return new
        retried = False
        while True:
            last = _last_answer(new)
            if last is None:
                return new
            if is_context_overflow(last) and self._same_model(last):
                if retried:
                    return new
                retried = True
                self._drop_failed_answer()
                if not await self._compact("overflow"):
                    return new
                self._drop_failed_answer()  # the rebuilt context has it too: it is stored
                if not self.state.messages or self.state.messages[-1].role == "assistant":
                    return new
                new = [*new, *await self._retry_passing_errors(await self._run_continue())]
                continue
            if (
                last.stop_reason != StopReason.ABORTED
                and self._pending_abort is None
                and self._over_threshold()
            ):
                await self._compact("threshold")
            return new

    def _same_model(self, message: AssistantMessage) -> bool:
        model = self.state.model
        return not message.model or (message.provider, message.model) == (model.provider, model.id)

    def _drop_failed_answer(self) -> None:
        messages = self.state.messages
        if (
            messages
            and isinstance(messages[-1], AssistantMessage)
            and messages[-1].stop_reason == StopReason.ERROR
        ):
            messages.pop()

    async def _compact(self, reason: str) -> bool:
        """Compact the session and rebuild the transcript from it; False if that failed (the
        reason is kept in ``state.error_message``; nothing was written)."""
        settings = self.compaction
        assert settings is not None and self.session is not None
        session = cast(CompactableSession, self.session)
        model = settings.model or self.state.model
        controller = self._compaction_abort = AbortController()
        try:
            await compact(
                session,
                model,
                settings.stream_fn or self.stream_fn,
                keep_recent_tokens=settings.keep_recent_tokens,
                reserve_tokens=settings.reserve_tokens,
                signal=controller.signal,
                options=await self._summary_options(model),
                thinking_level=self.state.thinking_level,
            )
        except Exception as error:
            what = "context overflow recovery" if reason == "overflow" else "auto-compaction"
            if isinstance(error, CompactionError):
                log.warning("%s of session %s failed: %s", what, self.session_id, error)
            else:
                log.exception("%s of session %s failed", what, self.session_id)
            self.state.error_message = f"{what} failed: {error}"
            return False
        finally:
            self._compaction_abort = None
        self.state.messages = list(session.build_context().messages)
        return True

    async def _summary_options(self, model: Model) -> StreamOptions:
        options = self.stream_options
        if self.get_api_key is not None:
            key = self.get_api_key(model.provider)
            if inspect.isawaitable(key):
                key = await key
            if key:
                return replace(options, api_key=key)
        if model.provider != self.state.model.provider:
            return replace(options, api_key=None)
        return options

    async def _run_prompts(
        self, messages: list[BaseMessage], skip_initial_steering: bool = False
    ) -> list[BaseMessage]:
        return await self._run(
            lambda config: agent_loop(messages, self._context(), config, self._on_event),
            skip_initial_steering,
        )

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
        finished = False
        try:
            self._sync_session(settings=True)
            messages = await executor(self._config(controller.signal, skip_initial_steering))
            finished = True
            return messages
        except Exception as error:
            message = await self._fail_run(error, controller.signal.aborted)
            finished = True
            return [message]
        finally:
            if not finished:  # cancelled from outside: no awaiting, but keep the transcript whole
                self._close_open_tool_calls("the run was cancelled")
            state.is_streaming = False
            state.streaming_message = None
            state.pending_tool_calls = set()
            self._abort = None
            try:
                self._sync_session()  # settings changed during the run
            except Exception:
                log.exception("recording settings in session %s failed", self.session_id)

    async def _fail_run(self, error: Exception, aborted: bool) -> AssistantMessage:
        """A run that raised (a listener or the session failed): record why, end the run."""
        text = str(error) or type(error).__name__
        closed = self._close_open_tool_calls(f"the run failed: {text}")
        model = self.state.model
        message = AssistantMessage(
            api=model.api,
            provider=model.provider,
            model=model.id,
            stop_reason=StopReason.ABORTED if aborted else StopReason.ERROR,
            error_message=text,
        )
        self._keep(message)
        self.state.error_message = text
        reason = AgentEndReason.ABORTED if aborted else AgentEndReason.ERROR
        await self._emit(AgentEndEvent(messages=[*closed, message], reason=reason))
        return message

    def _close_open_tool_calls(self, why: str) -> list[ToolResultMessage]:
        """Error results for the last assistant message's tool calls that have none, so that
        every tool call in the transcript (and the session) keeps its result."""
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
                content=[TextContent(text=f"Tool call not executed ({why})")],
                is_error=True,
            )
            for call in messages[index].tool_calls  # type: ignore[attr-defined]
            if call.id not in answered
        ]
        for result in closed:
            self._keep(result)
        return closed

    def _keep(self, message: BaseMessage) -> None:
        """Append a message the loop did not emit (after a failure) to the transcript and,
        as far as it still works, the session."""
        self.state.messages.append(message)
        if self.session is not None:
            try:
                self.session.append_message(message)
            except Exception:  # the session may be what failed; memory keeps the message
                log.exception("appending to session %s failed", self.session_id)

    async def _on_event(self, event: AgentEvent) -> None:
        state = self.state
        match event:
            case MessageStartEvent(message=message) | MessageUpdateEvent(message=message):
                state.streaming_message = message
            case MessageEndEvent(message=message):
                state.streaming_message = None
                state.messages.append(message)
                if self.session is not None:
                    self.session.append_message(message)
                if isinstance(message, ToolResultMessage) and message.added_tool_names:
                    pool = list(self._pool.values())
                    state.tools = activate_tools(state.tools, pool, message.added_tool_names)
                    self._sync_session()
            case ToolExecutionStartEvent(tool_call_id=call_id):
                state.pending_tool_calls = state.pending_tool_calls | {call_id}
            case ToolExecutionEndEvent(tool_call_id=call_id):
                state.pending_tool_calls = state.pending_tool_calls - {call_id}
            case TurnEndEvent(message=message):
                if isinstance(message, AssistantMessage) and message.error_message:
                    state.error_message = message.error_message
            case AgentEndEvent():
                state.streaming_message = None
        await self._emit(event)

    async def _emit(self, event: AgentEvent) -> None:
        for listener in list(self._listeners):
            result = listener(event)
            if inspect.isawaitable(result):
                await result

    def _sync_session(self, settings: bool | None = None) -> None:
        """Record model, thinking level and active tools where they differ from the session.
        During a run only the tools are recorded (they change with tool results); a model or
        thinking level set meanwhile is recorded when the run ends, when it takes effect."""
        session = self.session
        if session is None:
            return
        state = self.state
        if settings if settings is not None else not self.is_running:
            model = (state.model.provider, state.model.id)
            if model != self._recorded_model:
                session.append_model_change(*model)
                self._recorded_model = model
            level = str(ThinkingLevel(state.thinking_level).value)
            if level != self._recorded_thinking:
                session.append_thinking_level_change(level)
                self._recorded_thinking = level
        names = [t.name for t in state.tools]
        recorded = self._recorded_tools
        if (recorded is None and names) or (recorded is not None and set(recorded) != set(names)):
            session.append_active_tools_change(names)
            self._recorded_tools = names


_FAILED = (StopReason.ERROR, StopReason.ABORTED)


def _error_of(message: AssistantMessage | None) -> str | None:
    return message.error_message if message is not None and message.stop_reason in _FAILED else None


def _last_answer(messages: Sequence[BaseMessage]) -> AssistantMessage | None:
    return next((m for m in reversed(messages) if isinstance(m, AssistantMessage)), None)


def _model_ref(model: Any) -> tuple[str, str] | None:
    """(provider, model id) from a session context's model ({"provider", "modelId"})."""
    if model is None:
        return None
    if isinstance(model, Mapping):
        return str(model["provider"]), str(model.get("modelId") or model.get("model_id"))
    return str(model.provider), str(getattr(model, "model_id", None) or model.id)


def _as_message(message: str | BaseMessage) -> BaseMessage:
    return UserMessage(content=[TextContent(text=message)]) if isinstance(message, str) else message


def _normalize(input: PromptInput, images: Sequence[ImageContent]) -> list[BaseMessage]:
    if isinstance(input, str):
        return [UserMessage(content=[TextContent(text=input), *images])]
    if isinstance(input, BaseMessage):
        return [input]
    return list(input)


__all__ = [
    "Agent",
    "AgentBusyError",
    "CompactionSettings",
    "Listener",
    "MessageSource",
    "PromptInput",
    "SessionLike",
]
