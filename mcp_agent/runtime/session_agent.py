"""SessionAgent: an Agent bound to a Session (pi's AgentSession).

    agent = SessionAgent(model=model, stream_fn=provider, session=session)
    await agent.prompt("Hello")          # every message is in the session when it ends

Bound to a session, the agent appends every message to it when the message ends, so a crash
loses nothing that finished; model, thinking level and active tool changes are recorded as
entries when they differ from what the session already says. ``SessionAgent.from_session``
resumes a session.

With ``compaction=CompactionSettings()`` the agent compacts its session (pi's auto-compaction):
before a prompt and after a run when the context is over the model's window minus the reserve,
and when the model refuses a request as too long, in which case the failed answer is dropped
from the transcript, the session is compacted and the request is retried once. After a
compaction the transcript is rebuilt from the session.

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
from typing import Any, Literal

import anyio

from mcp_agent.abort import AbortController
from mcp_agent.agent import Agent
from mcp_agent.blocking import Offload, inline
from mcp_agent.compaction.compact import CompactionSettings, compact
from mcp_agent.compaction.errors import CompactionError
from mcp_agent.compaction.tokens import (
    context_tokens,
    estimate_context_tokens,
    fit_to_window,
    should_compact,
)
from mcp_agent.events import (
    AutoCompactionEndEvent,
    AutoCompactionStartEvent,
    AutoRetryEndEvent,
    AutoRetryStartEvent,
)
from mcp_agent.messages import AssistantMessage, BaseMessage, Model, StopReason, ThinkingLevel
from mcp_agent.providers.base import (
    StreamFn,
    StreamOptions,
    is_context_overflow,
    is_transient_error,
)
from mcp_agent.sessions.context import SessionContext
from mcp_agent.sessions.errors import Unreachable
from mcp_agent.sessions.session import Session
from mcp_agent.tools import AgentTool
from mcp_agent.wire import one_line

log = logging.getLogger(__name__)


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


# How long a run waits for its session's database to come back before it ends on the outage
# (a PostgreSQL restart or failover takes seconds), and the waits between tries.
OUTAGE_WAIT_S = 30.0
OUTAGE_FIRST_WAIT_S = 0.25
OUTAGE_LAST_WAIT_S = 4.0

_SettingChanges = tuple[tuple[str, str] | None, str | None, list[str] | None]


class SessionAgent(Agent):
    """An Agent that writes into ``session``; ``compaction`` and ``retry`` as pi's
    AgentSession does them. ``offload`` runs each session read and write during a run (the
    server: worker threads, so a slow database never holds the event loop; default: inline).
    ``load_tools`` gives more tools before the first prompt runs, as ``add_tools`` takes them
    (servers that may take a while to start: an abort meanwhile stops the wait, and the
    prompt is stored and ends aborted). ``withheld_tools`` names tools this agent is not
    offered, though the session keeps them as they stand (the sub-agent tool at the depth
    limit: a later run of the session, less deep, has it again), each with what a call of it
    is told. The other options are the
    Agent's."""

    def __init__(
        self,
        *,
        session: Session,
        compaction: CompactionSettings | None = None,
        retry: RetrySettings | None = None,
        context: SessionContext | None = None,
        offload: Offload = inline,
        load_tools: Callable[[], Awaitable[Sequence[AgentTool]]] | None = None,
        withheld_tools: Mapping[str, str] | None = None,
        **options: Any,
    ) -> None:
        super().__init__(**options)
        self._withheld = dict(withheld_tools or {})
        self._withheld_found: list[str] = []  # those of them that the tools held
        self.session = session
        self.offload = offload
        self._load_tools = load_tools
        self._loading_tools: anyio.CancelScope | None = None
        self.compaction = compaction
        self.retry = retry
        self._compaction_abort: AbortController | None = None
        # A threshold compaction failed in this prompt (or continue_): not tried again in it,
        # where it would fail again and be said twice; the next one tries.
        self._threshold_failed = False
        self._retry_abort: AbortController | None = None  # set while waiting to retry
        # What the session says now (``context``, when the caller built it already), so
        # that only real changes become entries.
        context = context if context is not None else session.build_context()
        self._recorded_model = _model_ref(context.model)
        # None when the branch names no level: the one run with is recorded, as pi records
        # its own, so that pi resumes at it (and not at its default).
        self._recorded_thinking = (
            str(context.thinking_level) if context.thinking_level_recorded else None
        )
        names = context.active_tool_names
        self._recorded_tools: list[str] | None = list(names) if names is not None else None
        if not self.stream_options.session_id:
            self.stream_options = replace(self.stream_options, session_id=session.id)

    @classmethod
    def from_session(
        cls,
        session: Session,
        *,
        stream_fn: StreamFn,
        model: Model | None = None,
        resolve_model: Callable[[str, str], Model | None] | None = None,
        tools: Sequence[AgentTool] = (),
        default_thinking_level: ThinkingLevel | None = None,
        **options: Any,
    ) -> SessionAgent:
        """An agent that carries on where ``session`` left off: its built context gives the
        messages, thinking level, active tools (chosen from ``tools``; all of them when the
        session names none) and model. The session's model is looked up with
        ``resolve_model(provider, model_id)``; failing that ``model`` is used when it is the
        same one, else a bare ``Model`` with the session's provider and id (reasoning when the
        session's thinking level is not off). ``model`` is
        required only when the session names no model. A branch that sets no thinking level
        runs at ``default_thinking_level`` when given (pi's AgentSession: its default level),
        which is then recorded."""
        context = session.build_context()
        level = _thinking_level(context.thinking_level, session.id)
        if default_thinking_level is not None and not context.thinking_level_recorded:
            level = default_thinking_level
        ref = _model_ref(context.model)
        chosen: Model | None = None
        if ref is not None:
            if resolve_model is not None:
                chosen = resolve_model(*ref)
            if chosen is None and model is not None and (model.provider, model.id) == ref:
                chosen = model
            if chosen is None:
                # Nothing known of it but what the session says: the level it recorded was
                # in effect, so the model reasons if that level is not off.
                thinks = level != ThinkingLevel.OFF
                chosen = Model(id=ref[1], provider=ref[0], reasoning=thinks)
        elif model is not None:
            chosen = model
        if chosen is None:
            raise ValueError("the session names no model: pass model=")
        active, inactive = _split_tools(tools, context.active_tool_names)
        return cls(
            session=session,
            context=context,  # the context just built: a long one is not read twice
            model=chosen,
            stream_fn=stream_fn,
            tools=active,
            available_tools=[*inactive, *options.pop("available_tools", ())],
            messages=context.messages,
            thinking_level=options.pop("thinking_level", level),
            **options,
        )

    def add_tools(self, tools: Sequence[AgentTool]) -> None:
        """Know ``tools`` too, as ``from_session`` would have: active where the session says
        so (all of them when it names none). Nothing is recorded: the session says it.
        Withheld tools are left out."""
        if self._withheld:
            found = [t.name for t in tools if t.name in self._withheld]
            self._withheld_found += found
            self.unavailable_tools.update((name, self._withheld[name]) for name in found)
            tools = [t for t in tools if t.name not in self._withheld]
        active, inactive = _split_tools(tools, self._recorded_tools)
        self._pool.update((t.name, t) for t in (*inactive, *active))
        self.state.tools = [*self.state.tools, *active]

    @property
    def session_id(self) -> str:
        return self.session.id

    @property
    def is_compacting(self) -> bool:
        return self._compaction_abort is not None

    def abort(self, reason: str = "aborted") -> None:
        """Abort the current run, if any; an automatic compaction under way is abandoned
        (nothing is written), and so is a wait to retry."""
        super().abort(reason)
        if self._compaction_abort is not None:
            self._compaction_abort.abort(reason)
        if self._retry_abort is not None:
            self._retry_abort.abort(reason)
        if self._loading_tools is not None:
            self._loading_tools.cancel()

    # --- the Agent's hooks ------------------------------------------------------------------

    async def _save(self, message: BaseMessage) -> None:
        await self._write(lambda: self.session.append_message(message))

    async def _write(self, work: Callable[[], object]) -> None:
        """``work``, a write to the session, offloaded. The database out of reach (a restart,
        a failover) refuses a write with nothing written: the run waits for it a while, and
        does not end there, its answer (paid for) kept from its session."""
        delay = OUTAGE_FIRST_WAIT_S
        deadline = anyio.current_time() + OUTAGE_WAIT_S
        while True:
            try:
                await self.offload(work)
                return
            except Unreachable as error:
                if anyio.current_time() + delay > deadline:
                    raise
                log.info("%s; the run waits %.1f s and writes again", one_line(error), delay)
                await anyio.sleep(delay)
                delay = min(delay * 2, OUTAGE_LAST_WAIT_S)

    async def _record_settings(self, settings: bool | None = None) -> None:
        """Record model, thinking level and active tools where they differ from the session.
        During a run only the tools are recorded (they change with tool results); a model or
        thinking level set meanwhile is recorded when the run ends, when it takes effect."""
        if self._unrecorded_settings(settings) != (None, None, None):
            # Asked again at each try: what a try wrote before the outage is not written twice.
            await self._write(lambda: self._write_settings(self._unrecorded_settings(settings)))

    def _settings_changed(self) -> None:
        # Outside a run a setter's change is written at once, on the caller's thread.
        if not self.is_running:
            changes = self._unrecorded_settings(None)
            if changes != (None, None, None):
                self._write_settings(changes)

    def _unrecorded_settings(self, settings: bool | None) -> _SettingChanges:
        """What differs from the session: (model, thinking level, active tools), None where
        nothing does."""
        state = self.state
        model: tuple[str, str] | None = None
        level: str | None = None
        if settings if settings is not None else not self.is_running:
            model = (state.model.provider, state.model.id)
            model = model if model != self._recorded_model else None
            level = str(ThinkingLevel(state.thinking_level).value)
            level = level if level != self._recorded_thinking else None
        names: list[str] | None = [t.name for t in state.tools]
        recorded = self._recorded_tools
        # A withheld tool counts as the session has it: left out here, it is not switched off.
        names = [
            *(names or []),
            *(n for n in self._withheld_found if recorded is None or n in recorded),
        ]
        if self._load_tools is not None or not (
            # (Tools still to be loaded are not known yet: the session's list stands.)
            (recorded is None and names)
            or (recorded is not None and set(recorded) != set(names or []))
        ):
            names = None
        return model, level, names

    def _write_settings(self, changes: _SettingChanges) -> None:
        model, level, names = changes
        if model is not None:
            self.session.append_model_change(*model)
            self._recorded_model = model
        if level is not None:
            self.session.append_thinking_level_change(level)
            self._recorded_thinking = level
        if names is not None:
            self.session.append_active_tools_change(names)
            self._recorded_tools = names

    async def _before_prompt(self) -> None:
        if self._load_tools is not None:
            with anyio.CancelScope() as self._loading_tools:
                self.add_tools(await self._load_tools())
                # Only once they are in: a load cut short by an abort leaves the tools still
                # to load, so the session's list stands (recording the few known so far
                # would switch the others off for every later run), and the next prompt
                # loads them again.
                self._load_tools = None
            self._loading_tools = None
        if self._compacts() and self._over_threshold():
            await self._compact("threshold")

    @contextmanager
    def _busy_scope(self) -> Iterator[None]:
        self._threshold_failed = False
        with super()._busy_scope():
            yield

    async def _finish(self, new: list[BaseMessage]) -> list[BaseMessage]:
        return await self._recover(await self._retry_passing_errors(new))

    # --- retry --------------------------------------------------------------------------------

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
        return settings is not None and settings.enabled

    def _over_threshold(self) -> bool:
        """Whether the context is over the compaction threshold (and no threshold compaction
        failed in this prompt)."""
        assert self.compaction is not None
        if self._threshold_failed:
            return False
        tokens = context_tokens(self.state.messages)
        window = self.state.model.context_window
        settings = self.compaction
        _, reserve = fit_to_window(window, settings.keep_recent_tokens, settings.reserve_tokens)
        return should_compact(tokens, window, reserve)

    async def _recover(self, new: list[BaseMessage]) -> list[BaseMessage]:
        """After a run: on a context overflow, drop the failed answer from the transcript (it
        stays in the session), compact and retry once (again after an answer that works);
        else compact when over the threshold."""
        if not self._compacts():
            return new
        retried = False
        while True:
            last = _last_answer(new)
            if last is None:
                return new
            window = self.state.model.context_window
            if is_context_overflow(last, window) and self._same_model(last):
                if retried:
                    return new
                retried = True
                self._drop_overflowed_answer()
                if not await self._compact("overflow"):
                    return new
                self._drop_overflowed_answer()  # the rebuilt context has it too: it is stored
                if not self.state.messages or self.state.messages[-1].role == "assistant":
                    return new
                part = await self._retry_passing_errors(await self._run_continue())
                new = [*new, *part]
                # As pi: once an answer works, a later overflow may be recovered from again
                # (a long run that fills the window twice); two in a row end the run.
                if any(
                    isinstance(m, AssistantMessage)
                    and m.stop_reason not in _FAILED
                    and not is_context_overflow(m, window)
                    for m in part
                ):
                    retried = False
                continue
            # As pi: never after an aborted answer (the user wants to stop). After a failed
            # one, from the context as the last good answer measured it (the failed one counts
            # for nothing: it is never sent), and only if one did: a session whose API keeps
            # failing can still compact.
            if last.stop_reason == StopReason.ABORTED or self._pending_abort is not None:
                return new
            measured = estimate_context_tokens(self.state.messages).last_usage_index is not None
            if (last.stop_reason != StopReason.ERROR or measured) and self._over_threshold():
                # (Messages queued meanwhile go in after it: Agent._run_late_messages.)
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

    def _drop_overflowed_answer(self) -> None:
        """The last answer out of the transcript when it failed or overflowed (one that read
        more than fits is no answer to keep in the context: the session keeps it)."""
        messages = self.state.messages
        if messages and isinstance(messages[-1], AssistantMessage):
            last = messages[-1]
            if last.stop_reason == StopReason.ERROR or is_context_overflow(
                last, self.state.model.context_window
            ):
                messages.pop()

    async def _compact(self, reason: Literal["threshold", "overflow"]) -> bool:
        """Compact the session and rebuild the transcript from it; False if that failed (the
        reason is kept in ``state.error_message``; nothing was written). Announced by
        ``auto_compaction_start`` / ``auto_compaction_end`` events, as pi does."""
        settings = self.compaction
        assert settings is not None
        model = settings.model or self.state.model
        # Fitted to the window of the model that reads the result (the summariser's may differ).
        keep, reserve = fit_to_window(
            self.state.model.context_window, settings.keep_recent_tokens, settings.reserve_tokens
        )
        controller = self._compaction_abort = AbortController()
        await self._emit(AutoCompactionStartEvent(reason))
        try:
            result = await compact(
                self.session,
                model,
                settings.stream_fn or self.stream_fn,
                keep_recent_tokens=keep,
                reserve_tokens=reserve,
                signal=controller.signal,
                options=await self._summary_options(model),
                thinking_level=self.state.thinking_level,
                offload=self.offload,
            )
        except Exception as error:
            what = "context overflow recovery" if reason == "overflow" else "auto-compaction"
            if isinstance(error, CompactionError):
                # Said once, by the auto_compaction_end event (a CLI shows it as a line).
                log.info("%s of session %s failed: %s", what, self.session_id, error)
            else:
                log.exception("%s of session %s failed", what, self.session_id)
            self.state.error_message = f"{what} failed: {error}"
            if reason == "threshold":
                self._threshold_failed = True
            aborted = controller.signal.aborted
            await self._emit(AutoCompactionEndEvent(reason, None, aborted, False, str(error)))
            return False
        finally:
            self._compaction_abort = None
        context = await self.offload(self.session.build_context)
        self.state.messages = list(context.messages)
        await self._emit(AutoCompactionEndEvent(reason, result, will_retry=reason == "overflow"))
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


_FAILED = (StopReason.ERROR, StopReason.ABORTED)


def _error_of(message: AssistantMessage | None) -> str | None:
    return message.error_message if message is not None and message.stop_reason in _FAILED else None


def _last_answer(messages: Sequence[BaseMessage]) -> AssistantMessage | None:
    return next((m for m in reversed(messages) if isinstance(m, AssistantMessage)), None)


def _thinking_level(name: str, session_id: str) -> ThinkingLevel:
    """The session's thinking level. One that no ``ThinkingLevel`` names (a file from a newer
    pi, or written by hand: sessions keep what they are given) is taken as off, and said, so
    that the session still runs; the level in effect is recorded as the run starts."""
    try:
        return ThinkingLevel(name)
    except ValueError:
        known = ", ".join(level.value for level in ThinkingLevel)
        log.warning(
            "session %s: thinking level %s is none of %s; thinking off",
            session_id,
            one_line(repr(name), 100),
            known,
        )
        return ThinkingLevel.OFF


def _model_ref(model: Any) -> tuple[str, str] | None:
    """(provider, model id) from a session context's model ({"provider", "modelId"})."""
    if model is None:
        return None
    if isinstance(model, Mapping):
        return str(model["provider"]), str(model.get("modelId") or model.get("model_id"))
    return str(model.provider), str(getattr(model, "model_id", None) or model.id)


def _split_tools(
    tools: Sequence[AgentTool], active_names: Sequence[str] | None
) -> tuple[list[AgentTool], list[AgentTool]]:
    """``tools`` as (active, inactive) by the names a session records (None: all active)."""
    if active_names is None:
        return list(tools), []
    by_name = {t.name: t for t in tools}
    return [by_name[n] for n in active_names if n in by_name], [
        t for t in tools if t.name not in active_names
    ]
