"""Agent runs: a SessionAgent, living in the server's task group so that it can
outlast the request that started it. One run per session at a time."""

from __future__ import annotations

import inspect
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from typing import Literal

import anyio

from mcp_agent.blocking import Offload, inline
from mcp_agent.events import AgentEndEvent, AgentEvent, describe_event
from mcp_agent.manifests import AgentManifest
from mcp_agent.messages import AssistantMessage, StopReason, Usage
from mcp_agent.runtime.errors import SessionBusy, TooManyRuns, UnknownRun
from mcp_agent.runtime.leases import RENEW_EVERY, Lease, LeaseBook
from mcp_agent.runtime.session_agent import SessionAgent
from mcp_agent.sessions import Session

log = logging.getLogger(__name__)


def _busy_elsewhere(lease: Lease) -> SessionBusy:
    return SessionBusy(lease.busy_message())


KEEP_FINISHED_RUNS = 200
RunStatus = Literal["running", "completed", "error", "aborted"]
EventListener = Callable[[AgentEvent], Awaitable[None] | None]


@dataclass
class Run:
    id: str
    session: Session
    agent_name: str
    model_ref: str
    agent: SessionAgent
    depth: int = 0
    status: RunStatus = "running"
    started: float = field(default_factory=time.time)
    finished: float | None = None
    event_count: int = 0
    last_event: str = ""
    answer: str | None = None
    error: str | None = None
    stop_reason: str | None = None
    usage: Usage = field(default_factory=Usage)
    new_messages: int = 0
    done: anyio.Event = field(default_factory=anyio.Event)
    listeners: list[EventListener] = field(default_factory=list)
    abort_reason: str | None = None
    client: object | None = None  # the MCP connection that started it, for per-client limits

    @property
    def session_id(self) -> str:
        return self.session.id

    def abort(self, reason: str) -> None:
        """Abort the run; one whose task has not begun yet ends before it calls the model."""
        if self.abort_reason is None:
            self.abort_reason = reason
        if self.agent is not None:
            self.agent.abort(reason)

    async def _on_event(self, event: AgentEvent) -> None:
        self.event_count += 1
        self.last_event = describe_event(event)
        if isinstance(event, AgentEndEvent):
            self.new_messages += len(event.messages)
        for listener in list(self.listeners):
            try:
                result = listener(event)
                if inspect.isawaitable(result):
                    await result
            except Exception:  # a watcher that went away must not break the run
                log.debug("run listener failed", exc_info=True)


@dataclass(frozen=True)
class RunLimits:
    """How many runs may be under way at once: in this process, and for one client (an MCP
    connection); 0 means no limit. A start beyond either is refused, saying which limit."""

    max_runs: int = 0
    max_runs_per_client: int = 0
    # The runs that fit in this process's file descriptors (runtime.descriptors); 0: unknown.
    descriptor_runs: int = 0


class RunManager:
    """The runs of this process. With ``leases``, sessions are also claimed in the database,
    so that other server processes on the same database keep out of them too. ``offload``
    runs the lease reads and writes (worker threads in the server)."""

    def __init__(
        self,
        task_group: anyio.abc.TaskGroup,
        leases: LeaseBook | None = None,
        *,
        offload: Offload = inline,
        limits: RunLimits | None = None,
    ) -> None:
        self._task_group = task_group
        self.leases = leases
        self.offload = offload
        self.limits = limits or RunLimits()
        self.runs: dict[str, Run] = {}
        self._by_session: dict[str, Run] = {}
        # Sessions that something other than a run is writing (a compaction, a summary).
        self._held: dict[str, str] = {}
        # Tools writing to a session right now (an append on a worker thread): no run starts
        # there meanwhile.
        self._writing: dict[str, int] = {}
        self._running_by_client: dict[object, int] = {}

    @property
    def running(self) -> int:
        """Runs under way (started and not yet ended)."""
        return len(self._by_session)

    def ensure_idle(self, session_id: str, *, elsewhere: bool = True) -> None:
        """Refuse when a run or a tool of this process works on the session, or (with
        ``elsewhere``) another process. An append needs no ``elsewhere``: the session
        database's guard checks that inside the append's own transaction. With ``elsewhere``
        this reads the database: call it through ``offload``."""
        self.ensure_idle_here(session_id)
        other = self.leases.held_elsewhere(session_id) if self.leases and elsewhere else None
        if other is not None:
            raise _busy_elsewhere(other)

    def ensure_idle_here(self, session_id: str) -> None:
        """Refuse when a run or a tool of this process works on the session (no I/O)."""
        run = self._by_session.get(session_id)
        if run is not None:
            raise SessionBusy(
                f"session {session_id} is busy: run {run.id} is still running in it. "
                f"Wait for it (agent_status), steer it (agent_steer), or stop it (agent_cancel)."
            )
        holder = self._held.get(session_id)
        if holder is not None:
            raise SessionBusy(
                f"session {session_id} is busy: {holder} is working on it; try again when it "
                "has finished"
            )

    async def _claim(self, session_id: str, holder: str) -> None:
        """Refuse unless the session is idle here; then take its lease in the database. The
        caller has marked the session taken in memory before this first await."""
        if self._writing.get(session_id):
            raise SessionBusy(
                f"session {session_id} is busy: a tool is writing to it; try again in a moment"
            )
        if self.leases is not None:
            leases = self.leases
            other = await self.offload(lambda: leases.acquire(session_id, holder))
            if other is not None:
                raise _busy_elsewhere(other)

    async def _release(self, session_id: str) -> None:
        if self.leases is not None:
            leases = self.leases
            with anyio.CancelScope(shield=True):
                await self.offload(lambda: leases.release(session_id))

    @asynccontextmanager
    async def hold(self, session_id: str, holder: str) -> AsyncIterator[None]:
        """Keep runs and other writers out of ``session_id`` while ``holder`` (a tool that
        awaits a model before it writes, e.g. session_compact) works on it."""
        self.ensure_idle_here(session_id)
        self._held[session_id] = holder
        try:
            await self._claim(session_id, holder)
        except BaseException:
            del self._held[session_id]
            raise
        try:
            yield
        finally:
            del self._held[session_id]
            await self._release(session_id)

    @contextmanager
    def writing(self, session_id: str) -> Iterator[None]:
        """A tool writes to ``session_id`` (on a worker thread): refuse if a run or a holder
        works on it here, and keep new runs out until the write is done."""
        self.ensure_idle_here(session_id)
        self._writing[session_id] = self._writing.get(session_id, 0) + 1
        try:
            yield
        finally:
            left = self._writing[session_id] - 1
            if left:
                self._writing[session_id] = left
            else:
                del self._writing[session_id]

    async def keep_leases(self) -> None:
        """Renew this process's leases until cancelled (a task of the server's)."""
        if self.leases is None:
            return
        leases = self.leases
        while True:
            await anyio.sleep(RENEW_EVERY)
            try:
                await self.offload(leases.renew)
            except Exception:  # a busy or failing database this once; the lease lasts longer
                log.warning("renewing the session leases failed", exc_info=True)

    def check_limits(self, client: object | None) -> None:
        """Refuse a new run when a run limit is reached (the message names the limit)."""
        limits = self.limits
        if limits.max_runs and self.running >= limits.max_runs:
            raise TooManyRuns(
                f"too many runs: {self.running} are under way in this server, the limit is "
                f"{limits.max_runs}; wait for one to end (agent_runs); the server's operator can "
                "raise it (MCP_AGENT_MAX_RUNS)"
            )
        if limits.descriptor_runs and self.running >= limits.descriptor_runs:
            raise TooManyRuns(
                f"too many runs: {self.running} are under way, as many as this server's file "
                f"descriptor limit allows; wait for one to end (agent_runs); the server's "
                "operator can raise it (ulimit -n)"
            )
        count = self._running_by_client.get(client, 0) if client is not None else 0
        if limits.max_runs_per_client and count >= limits.max_runs_per_client:
            raise TooManyRuns(
                f"too many runs for this client: {count} are under way, the limit is "
                f"{limits.max_runs_per_client}; wait for one to end (agent_runs); the server's "
                "operator can raise it (MCP_AGENT_MAX_RUNS_PER_CLIENT)"
            )

    def get(self, run_id: str) -> Run:
        run = self.runs.get(run_id)
        if run is None:
            raise UnknownRun(f"no run {run_id!r}; agent_run returns a run_id")
        return run

    async def start(
        self,
        *,
        session: Session,
        manifest: AgentManifest,
        prompt: str,
        build_agent: Callable[[str], Awaitable[tuple[SessionAgent, str]]],
        depth: int = 0,
        listener: EventListener | None = None,
        client: object | None = None,
    ) -> Run:
        """Start ``prompt`` in ``session``; ``build_agent(run_id)`` makes the agent (its tools
        carry the run id) and names its model. ``listener`` hears every event from the first.
        ``client`` (its MCP connection) counts the run against the per-client limit."""
        run_id = uuid.uuid4().hex[:12]
        # Claim the session in memory before the first await, so a second start fails cleanly.
        self.ensure_idle_here(session.id)
        self.check_limits(client)
        placeholder = Run(run_id, session, manifest.name, "", None, depth)  # type: ignore[arg-type]
        self._by_session[session.id] = placeholder
        self._count_client(client, +1)
        claimed = False
        try:
            await self._claim(session.id, f"run {run_id}")
            claimed = True
            agent, model_ref = await build_agent(run_id)
        except BaseException:
            self._by_session.pop(session.id, None)
            self._count_client(client, -1)
            if claimed:
                await self._release(session.id)
            raise
        run = Run(run_id, session, manifest.name, model_ref, agent, depth, client=client)
        self.runs[run_id] = run
        self._by_session[session.id] = run
        if listener is not None:
            run.listeners.append(listener)
        agent.subscribe(run._on_event)
        started = anyio.Event()
        self._task_group.start_soon(self._execute, run, prompt, started)
        try:
            await started.wait()
        except anyio.get_cancelled_exc_class():
            # The caller is gone before it got the run: the run must not go on without it.
            run.abort("the request that started the run was cancelled")
            raise
        return run

    async def _execute(self, run: Run, prompt: str, started: anyio.Event) -> None:
        try:
            started.set()
            if run.abort_reason is not None:
                run.status, run.error = "aborted", run.abort_reason
                return
            messages = await run.agent.prompt(prompt)
            final = next((m for m in reversed(messages) if isinstance(m, AssistantMessage)), None)
            for message in messages:
                if isinstance(message, AssistantMessage):
                    run.usage = run.usage + message.usage
            if final is not None:
                run.answer = final.text
                run.stop_reason = str(final.stop_reason)
                run.error = final.error_message
                statuses: dict[StopReason, RunStatus] = {
                    StopReason.ERROR: "error",
                    StopReason.ABORTED: "aborted",
                }
                run.status = statuses.get(StopReason(final.stop_reason), "completed")
                if run.status == "error" and run.abort_reason is not None:
                    # Cancelled between attempts (waiting to retry a failed answer).
                    run.status, run.error = "aborted", f"{run.abort_reason} ({run.error})"
            else:
                run.status = "completed"
        except Exception as error:
            log.exception("run %s failed", run.id)
            run.status, run.error = "error", str(error) or type(error).__name__
        finally:
            if run.status == "running":  # cancelled (the server is going away)
                run.status, run.error = "aborted", run.error or "the run's task was cancelled"
            run.finished = time.time()
            if self._by_session.get(run.session_id) is run:
                del self._by_session[run.session_id]
                self._count_client(run.client, -1)
                try:
                    await self._release(run.session_id)
                except Exception:  # the lease lapses by itself; the run has ended all the same
                    log.warning("releasing the lease of session %s failed", run.session_id)
            run.done.set()
            self._forget_old_runs()

    def _count_client(self, client: object | None, change: int) -> None:
        if client is None:
            return
        count = self._running_by_client.get(client, 0) + change
        if count > 0:
            self._running_by_client[client] = count
        else:
            self._running_by_client.pop(client, None)

    def _forget_old_runs(self) -> None:
        """Keep the newest finished runs only: each holds its agent's whole transcript, and a
        server may live for weeks. Their sessions keep everything."""
        finished = [r for r in self.runs.values() if r.done.is_set()]
        for run in finished[: max(0, len(finished) - KEEP_FINISHED_RUNS)]:
            del self.runs[run.id]

    async def wait(self, run: Run) -> None:
        """Wait for ``run``; if the waiter is cancelled (the MCP request was), abort the run and
        let it record its end before giving up."""
        try:
            await run.done.wait()
        except anyio.get_cancelled_exc_class():
            # The waiter (and its request) is gone: send it no more events.
            run.listeners.clear()
            run.abort("the request that started the run was cancelled")
            with anyio.CancelScope(shield=True), anyio.move_on_after(10):
                await run.done.wait()
            raise

    async def close(self) -> None:
        for run in list(self._by_session.values()):
            run.abort("the server is shutting down")
        with anyio.move_on_after(10, shield=True):
            for run in list(self.runs.values()):
                await run.done.wait()
