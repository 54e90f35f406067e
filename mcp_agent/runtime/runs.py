"""Agent runs: a SessionAgent, living in the server's task group so that it can
outlast the request that started it. One run per session at a time."""

from __future__ import annotations

import functools
import inspect
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Literal, TypeVar

import anyio
import anyio.to_thread

from mcp_agent.abort import abort_message
from mcp_agent.blocking import Offload, inline
from mcp_agent.events import (
    AgentEndEvent,
    AgentEndReason,
    AgentEvent,
    AutoCompactionEndEvent,
    describe_event,
)
from mcp_agent.manifests import AgentManifest
from mcp_agent.messages import AssistantMessage, StopReason, ThinkingContent, UserMessage
from mcp_agent.outages import Outage
from mcp_agent.runtime.errors import Refused, RunEnded, SessionBusy, TooManyRuns, UnknownRun
from mcp_agent.runtime.leases import RENEW_EVERY, Lease, LeaseBook, lease_lost_message
from mcp_agent.runtime.run_board import (
    POLL_EVERY,
    PUBLISH_EVERY,
    Command,
    CommandKind,
    RunBoard,
    RunRecord,
    kept_answer,
    quote,
    undelivered_note,
)
from mcp_agent.runtime.write_turns import WriteTurns
from mcp_agent.sessions import Session, SessionError, Unreachable
from mcp_agent.sessions.row_waits import RowWaits
from mcp_agent.wire import one_line

if TYPE_CHECKING:
    from mcp_agent.providers.sampling import ClientChannel
    from mcp_agent.runtime.session_agent import SessionAgent

log = logging.getLogger(__name__)
T = TypeVar("T")


def _no_run(run_id: str) -> UnknownRun:
    return UnknownRun(
        f"no run {run_id!r} here: agent_runs lists this server's runs (those under way and the"
        " latest that ended); agent_run starts one and returns its run_id"
    )


def _busy_elsewhere(lease: Lease) -> SessionBusy:
    return SessionBusy(lease.busy_message())


def _ended(run_id: str, status: str) -> RunEnded:
    return RunEnded(f"run {run_id} has ended ({status}); start a new one with agent_run")


KEEP_FINISHED_RUNS = 200
# Warnings of its own events one run keeps (auto-compactions'); a status shows 20.
MAX_WARNINGS = 20
# What a run is doing before its agent's first event.
STARTING = "starting: listing the agent's tools (an MCP server of its may still be starting)"
# How long agent_cancel waits for a run on another replica to end.
CANCEL_WAIT_SECONDS = 30.0
# How long a run (or a holder, such as session_compact) waits for the writes of tools already
# under way in its session (another client's append: a few milliseconds, unless the database
# holds its row): past it, the start is refused saying so.
WRITES_WAIT_SECONDS = 30.0
RunStatus = Literal["running", "completed", "error", "aborted"]
EventListener = Callable[[AgentEvent], Awaitable[None] | None]


@dataclass
class Run(RunRecord):
    """A run of this process: its state as the board knows it (``RunRecord``), and what it
    runs with, its session and agent."""

    status: RunStatus = "running"
    started: float = field(default_factory=time.time)
    # What it runs with, let go once it has ended (``release``).
    session: Session | None = field(kw_only=True)
    agent: SessionAgent | None = field(kw_only=True)
    done: anyio.Event = field(default_factory=anyio.Event)
    listeners: list[EventListener] = field(default_factory=list)
    abort_reason: str | None = None
    client: object | None = None  # the MCP connection that started it, for per-client limits
    # Where that connection's model is asked (sampling), for the run's sub-agents.
    client_channel: ClientChannel | None = None
    end_reason: AgentEndReason | None = None  # why the agent stopped, once it has
    # Steering and follow-up messages sent through another replica that never reached the
    # agent, quoted (the first MAX_QUEUED), how many in all, and their warning's place.
    undelivered: list[str] = field(default_factory=list)
    undelivered_count: int = 0
    undelivered_at: int = -1

    def record(self) -> RunRecord:
        """A copy of its state, for the board (written from a worker thread)."""
        record = RunRecord(**{f.name: getattr(self, f.name) for f in fields(RunRecord)})
        record.warnings = list(self.warnings)  # the run's own list grows on the event loop
        return record

    def release(self) -> None:
        """Let go of what an ended run no longer needs: its agent (the whole transcript), its
        session (a JSONL one whole, in memory) and its client's connection. The manager keeps
        the newest ended runs for agent_status; holding these, 200 runs in 2 MB sessions held
        over a gigabyte, beyond every bound the sessions kept open are held to."""
        self.agent = None
        self.session = None
        self.client = None
        self.client_channel = None

    def abort(self, reason: str) -> None:
        """Abort the run; one whose task has not begun yet ends before it calls the model."""
        if self.abort_reason is None:
            self.abort_reason = reason
        if self.agent is not None:
            self.agent.abort(reason)

    def _note_compaction(self, event: AutoCompactionEndEvent) -> None:
        """An automatic compaction's warnings (a summary cut at its output limit) and its
        failure are the run's: a client that did not watch its events learns them from
        agent_status (the line of the event is soon another's)."""
        if event.result is not None:
            notes = [f"auto-compaction: {w}" for w in getattr(event.result, "warnings", ())]
        elif event.error_message and not event.aborted:
            what = "context overflow recovery" if event.reason == "overflow" else "auto-compaction"
            notes = [f"{what} failed: {one_line(event.error_message, 1_000)}"]
        else:
            notes = []
        self.warnings.extend(notes[: max(0, MAX_WARNINGS - len(self.warnings))])

    async def _on_event(self, event: AgentEvent) -> None:
        self.event_count += 1
        self.last_event = describe_event(event)
        if isinstance(event, AgentEndEvent):
            self.new_messages += len(event.messages)
            self.end_reason = event.reason
        elif isinstance(event, AutoCompactionEndEvent):
            self._note_compaction(event)
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


# Steering and follow-up messages one run holds, not yet taken; past it, one more is refused.
MAX_QUEUED = 50
# The characters of text those messages hold together: a client could queue fifty of 64 MiB
# each (a stdio line's bound) on every run of its own, all held in memory until taken.
MAX_QUEUED_CHARS = 4_000_000


def cut_before_an_answer(final: AssistantMessage) -> str | None:
    """Why a completed answer is empty when the model's output limit cut it: still thinking
    (a reasoning model's thinking, or an R1-named model's text never closed by ``</think>``,
    all kept as thinking), or before it wrote anything. None for any other answer."""
    if final.stop_reason != StopReason.LENGTH or final.text.strip() or final.tool_calls:
        return None
    tokens = f" ({final.usage.output:,} output tokens)" if final.usage.output else ""
    thought = sum(len(b.thinking) for b in final.content if isinstance(b, ThinkingContent))
    if not thought:
        return f"the model reached its output limit{tokens} before writing an answer: there is none"
    return (
        f"the model reached its output limit{tokens} while still thinking, so there is no "
        f"answer: the {thought:,} characters it wrote are kept as its thinking (for a model "
        "that writes <think>…</think>, no </think> came); raise its max_tokens (models.toml) "
        "or ask for less"
    )


def _not_taken(agent: SessionAgent) -> str | None:
    """The steering and follow-up messages a run ended before taking (an abort, an error),
    said in a warning, as pi gives them back to its user; they were acknowledged as queued
    and are in no session."""
    steering, follow_ups = agent.take_queued()
    if not steering and not follow_ups:
        return None
    quoted = [
        quote(kind, message.text)
        if isinstance(message, UserMessage)
        else f"{kind}: a {message.role} message"
        for kind, messages in (("steering", steering), ("follow-up", follow_ups))
        for message in messages
    ]
    return (
        "the run ended before taking these queued messages, which are in no session: "
        + "; ".join(quoted)
        + " (send them again with agent_run in this session)"
    )


def _warn(what: str, error: Exception) -> None:
    """A database failure in one line (a traceback says nothing more), anything else (a bug)
    with its traceback."""
    if isinstance(error, SessionError):
        log.warning("%s: %s", what, one_line(error))
    else:
        log.warning("%s", what, exc_info=error)


class RunManager:
    """The runs of this process. With ``leases``, sessions are also claimed in the database,
    so that other server processes on the same database keep out of them too. With ``board``
    (replicas over PostgreSQL), runs are also on the shared board, where every replica reads
    them and leaves commands for them. ``offload`` runs the database reads and writes (worker
    threads in the server)."""

    def __init__(
        self,
        task_group: anyio.abc.TaskGroup,
        leases: LeaseBook | None = None,
        *,
        offload: Offload = inline,
        limits: RunLimits | None = None,
        board: RunBoard | None = None,
        write_wait: float | None = None,
        row_waits: RowWaits | None = None,
    ) -> None:
        self._task_group = task_group
        self.leases = leases
        self.board = board
        # What the board last heard of each running run (its event count).
        self._published: dict[str, int] = {}
        # Runs that ended while the board could not be written (the database out of reach):
        # written again by keep_board. Left unsaid, their end would never reach the board, and
        # once their renewals stopped every other replica would call them ended in error,
        # "the server running it stopped", whatever their end was.
        self._unpublished: dict[str, Run] = {}
        self.offload = offload
        # The renewals' own thread (see _upkeep), made when first used, on the event loop.
        self._upkeep_thread: anyio.CapacityLimiter | None = None
        self.limits = limits or RunLimits()
        self.runs: dict[str, Run] = {}
        self._by_session: dict[str, Run] = {}
        # Sessions that something other than a run is writing (a compaction, a summary).
        self._held: dict[str, str] = {}
        # Tools writing to a session right now (an append on a worker thread): no run starts
        # there meanwhile.
        self._writing: dict[str, int] = {}
        # Set when a session's writes under way are all done, for a run waiting to start there.
        self._writes_done: dict[str, anyio.Event] = {}
        # Their turns at each session, waited for on the event loop up to ``write_wait``.
        self._write_turns = WriteTurns(write_wait, offload, row_waits)
        self._running_by_client: dict[object, int] = {}
        # Said once when they start failing and once when they work again (the database's
        # own outage is said by the database), not at each round.
        self._lease_failures = Outage(log, "renewing the session leases fails")
        self._board_failures = Outage(log, "the run board cannot be read or written")

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
        """Wait for the tools' writes under way in the session here (up to
        ``WRITES_WAIT_SECONDS``, else refuse); then take its lease in the database. The caller
        has marked the session taken in memory before this first await."""
        if self._writing.get(session_id):
            # Marked taken, the session lets no new write start (``writing`` refuses it): the
            # ones under way end within their own bounds. Refused at once, a run met by another
            # client's append of a few milliseconds failed ("try again in a moment").
            with anyio.move_on_after(WRITES_WAIT_SECONDS):
                while self._writing.get(session_id):
                    await self._writes_done.setdefault(session_id, anyio.Event()).wait()
            if self._writing.get(session_id):
                raise SessionBusy(
                    f"session {session_id} is busy: a tool has been writing to it for over"
                    f" {WRITES_WAIT_SECONDS:.0f} s (the database may hold its row); try again"
                    " later"
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
                try:
                    await self.offload(lambda: leases.release(session_id))
                except SessionError as error:
                    # The work is done (a compaction written, a run ended): a lease not let
                    # go (a full disk, the database out of reach) is no longer renewed and
                    # lapses by itself; failing here called done work failed.
                    log.warning("the lease on session %s was not let go: %s", session_id, error)

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

    async def write(self, session_id: str, work: Callable[[], T]) -> T:
        """A tool's write to ``session_id``, ``work``, on a worker thread: refuse if a run or a
        holder works on it here, keep new runs out until the write is done, and wait for the
        turn of the session's other writes here first (``write_turns``: without a thread)."""
        self.ensure_idle_here(session_id)
        self._writing[session_id] = self._writing.get(session_id, 0) + 1
        try:
            return await self._write_turns.write(session_id, work)
        finally:
            left = self._writing[session_id] - 1
            if left:
                self._writing[session_id] = left
            else:
                del self._writing[session_id]
                done = self._writes_done.pop(session_id, None)
                if done is not None:
                    done.set()

    def session_offload(self, session_id: str) -> Offload:
        """Where a run, a compaction or a branch summary, which has ``session_id`` to itself
        here, reads and writes it: in the turns of its writes (``write_turns``), so that its
        writes to a held session wait as a tool's do, and take no more worker threads."""
        return functools.partial(self._write_turns.write, session_id)

    async def keep_leases(self) -> None:
        """Renew this process's leases until cancelled (a task of the server's)."""
        if self.leases is None:
            return
        leases = self.leases
        while True:
            await anyio.sleep(RENEW_EVERY)
            try:
                held = set(leases.held)
                kept = await self._upkeep(leases.renew)
                # A lease that lapsed while the database was out of reach, and that another
                # process may have taken: the run there stops now (its writes are refused
                # anyway), instead of calling its model for nothing.
                for session_id in (held - kept) & leases.held:
                    run = self._by_session.get(session_id)
                    if run is not None:
                        log.warning("run %s lost its lease on session %s", run.id, session_id)
                        run.abort(lease_lost_message(session_id, None))
                if self.board is not None:
                    await self._upkeep(
                        functools.partial(
                            self.board.renew, [r.id for r in self._by_session.values()]
                        )
                    )
            except Unreachable:
                pass  # the database says its outage, once
            except SessionError as error:  # a busy or failing database; the lease lasts longer
                self._lease_failures.failed(error)
            except Exception:
                log.warning("renewing the session leases failed", exc_info=True)
            else:
                self._lease_failures.recovered()

    async def _upkeep(self, work: Callable[[], T]) -> T:
        """``work`` (a renewal: bounded, see RENEW_WITHIN) on a thread of its own, not in line
        behind the requests' work for a worker thread: with every worker thread waiting for a
        lock (clients appending to a session a long transaction holds), a renewal in that line
        waited as long, up to the lock timeout (twice the lease), and the leases and runs of a
        live replica lapsed."""
        if self._upkeep_thread is None:
            self._upkeep_thread = anyio.CapacityLimiter(1)
        return await anyio.to_thread.run_sync(work, limiter=self._upkeep_thread)

    async def keep_board(self) -> None:
        """While runs are under way here: take the commands other replicas left for them, and
        publish how they are going (a task of the server's, with a board)."""
        board = self.board
        if board is None:
            return
        last_publish = 0.0
        while True:
            await anyio.sleep(POLL_EVERY)
            if not self._by_session and not self._unpublished:
                continue
            try:
                if self._unpublished:
                    ended = list(self._unpublished.values())
                    await self._publish(ended)
                    for run in ended:
                        self._unpublished.pop(run.id, None)
                if not self._by_session:
                    continue
                for command in await self.offload(board.take_commands):
                    self._apply(command.run_id, command.kind, command.message)
                if time.monotonic() - last_publish >= PUBLISH_EVERY:
                    last_publish = time.monotonic()
                    await self._publish(
                        [
                            run
                            for run in self._by_session.values()
                            if run.agent is not None
                            and self._published.get(run.id) != run.event_count
                        ]
                    )
            except Unreachable:
                pass  # the database says its outage, once
            except SessionError as error:  # the database; the next round tries again
                self._board_failures.failed(error)
            except Exception:
                log.warning("the run board could not be read or written", exc_info=True)
            else:
                self._board_failures.recovered()

    async def _publish(self, runs: list[Run]) -> None:
        if self.board is None or not runs:
            return
        board = self.board
        records = [run.record() for run in runs]
        with anyio.CancelScope(shield=True):
            never_taken = await self.offload(lambda: board.publish(records))
        for run, record in zip(runs, records, strict=True):
            # The database's clock, as every replica shows them. A record written as the run
            # went on (keep_board's round) may be back after the run ended: it has no end
            # time, and taking its none undid the end's, which a late write of the end (the
            # database was out of reach as it ended) then said to every replica.
            run.started = record.started
            if run.finished is not None and record.finished is not None:
                run.finished = record.finished
            if run.status == "running" and record.status == "running":
                self._published[record.id] = record.event_count
            else:  # (an ended run is written once more only by its end, or keep_board)
                self._published.pop(record.id, None)
        for command in never_taken:
            self._apply(command.run_id, command.kind, command.message)

    def _apply(self, run_id: str, kind: CommandKind, message: str | None) -> None:
        run = self.runs.get(run_id)
        if run is None or (kind == "cancel" and run.status != "running"):
            return  # ended meanwhile: the sender sees that on the board
        agent = run.agent
        if kind == "cancel":
            run.abort("cancelled with agent_cancel")
        elif message is None:
            return
        elif (
            run.status != "running"
            or agent is None
            or agent.queued_count() >= MAX_QUEUED
            or agent.queued_chars() + len(message) > MAX_QUEUED_CHARS
        ):
            # (An ended run has let go of its agent.)
            self._undelivered(run, kind, message)
        elif kind == "steer":
            agent.steer(message)
        elif kind == "follow_up":
            agent.follow_up(message)

    def _undelivered(self, run: Run, kind: CommandKind, message: str) -> None:
        """A message sent through another replica that the run never took: it had ended, or
        held MAX_QUEUED not taken (a sender on its own replica is refused then). The sender
        was told it was queued, so a warning of the run's says it is in no session, and the
        board is written again to carry it."""
        run.undelivered_count += 1
        if len(run.undelivered) < MAX_QUEUED:
            run.undelivered.append(Command(run.id, kind, message).quoted())
        note = undelivered_note(run.undelivered, run.undelivered_count - len(run.undelivered))
        if run.undelivered_at < 0:
            run.undelivered_at = len(run.warnings)
            run.warnings.append(note)
        else:
            run.warnings[run.undelivered_at] = note
        if run.status == "running":
            self._published.pop(run.id, None)  # written at the next round
        else:
            self._unpublished[run.id] = run

    # --- runs as every replica sees them --------------------------------------------------

    async def find(self, run_id: str) -> Run | RunRecord:
        """The run, of this replica or (with a board) of any."""
        run = self.runs.get(run_id)
        if run is not None:
            return run
        if self.board is not None:
            board = self.board
            record = await self.offload(lambda: board.get(run_id))
            if record is not None:
                return record
        raise await self._unknown(run_id)

    async def wait_for_end(self, run_id: str, seconds: float) -> Run | RunRecord:
        """The run once it has ended, or as it is after ``seconds``."""
        run = await self.find(run_id)
        if isinstance(run, Run):
            if run.status == "running":
                with anyio.move_on_after(seconds):
                    await run.done.wait()
            return run
        with anyio.move_on_after(seconds):
            while run.status == "running":
                await anyio.sleep(POLL_EVERY)
                run = await self.find(run_id)
        return run

    async def cancel(self, run_id: str) -> Run | RunRecord:
        """Abort a run wherever it runs; returns it once it has ended (or as it had)."""
        run = self.runs.get(run_id)
        if run is not None:
            if run.status == "running":
                run.abort("cancelled with agent_cancel")
                await run.done.wait()
            return run
        record = await self._send(run_id, "cancel", None)
        if record.status != "running":
            return record
        # The replica takes it within POLL_EVERY; its run ends at the next await.
        return await self.wait_for_end(run_id, CANCEL_WAIT_SECONDS)

    async def queue(self, run_id: str, kind: CommandKind, message: str) -> Run | RunRecord:
        """Steer a running run or queue a follow-up for it, wherever it runs."""
        if len(message) > MAX_QUEUED_CHARS:
            raise Refused(
                f"the message has {len(message):,} characters, more than the"
                f" {MAX_QUEUED_CHARS:,} a run holds not taken yet: send a shorter one"
            )
        run = self.runs.get(run_id)
        if run is None:
            record = await self._send(run_id, kind, message)
            if record.status != "running":
                raise _ended(run_id, record.status)
            return record
        if run.status != "running":
            raise _ended(run_id, run.status)
        if run.agent is not None and run.agent.queued_count() >= MAX_QUEUED:
            raise Refused(
                f"run {run_id} holds {MAX_QUEUED} messages not taken yet, the most it queues:"
                " wait for it to take them (agent_status), then send this one again"
            )
        held = run.agent.queued_chars() if run.agent is not None else 0
        if held + len(message) > MAX_QUEUED_CHARS:
            raise Refused(
                f"run {run_id} holds {held:,} characters of messages not taken yet, and this"
                f" one's {len(message):,} would pass the {MAX_QUEUED_CHARS:,} it queues: wait"
                " for it to take them (agent_status), then send this one again"
            )
        self._apply(run_id, kind, message)
        return run

    async def _send(self, run_id: str, kind: CommandKind, message: str | None) -> RunRecord:
        if self.board is None:
            raise await self._unknown(run_id)
        board = self.board
        record = await self.offload(lambda: board.send(run_id, kind, message))
        if record is None:
            raise _no_run(run_id)
        return record

    async def newest(self) -> list[Run | RunRecord]:
        """The runs under way and the latest that ended, oldest first: of every replica with a
        board (this replica's own as they are this moment), else of this one."""
        local = sorted(self.runs.values(), key=lambda r: r.started)
        if self.board is None:
            return list(local)
        board = self.board
        records = await self.offload(lambda: board.newest(KEEP_FINISHED_RUNS * 5))
        merged: list[Run | RunRecord] = [self.runs.get(r.id) or r for r in records]
        listed = {r.id for r in merged}
        merged.extend(run for run in local if run.id not in listed)
        merged.sort(key=lambda r: r.started)
        return merged

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

    async def _unknown(self, run_id: str) -> Refused:
        """No run ``run_id`` here, said as such; or, where no board says every replica's runs
        (SQLite), that another server process on this database runs it (its lease names it):
        the "no run" that every tool said of it, though a start in its session named it."""
        lease = stopped = None
        if self.leases is not None:
            held_for = functools.partial(self.leases.held_for, f"run {run_id}")
            lease = await self.offload(held_for)
            if lease is None:
                stopped_for = functools.partial(self.leases.stopped_for, f"run {run_id}")
                stopped = await self.offload(stopped_for)
        if stopped is not None:
            # Its server was killed mid-run (its lease is still there, its process gone):
            # "no run here" read as an id never given, and the run as lost without a word.
            return Refused(
                f"run {run_id} was interrupted: {stopped.where()}, which ran it on this"
                f" database, stopped before it ended. Session {stopped.session_id} keeps"
                " what the run wrote (a tool call left without its result is said so at the"
                " next run); agent_run with that session_id carries on"
            )
        if lease is None:
            return _no_run(run_id)
        return Refused(
            f"run {run_id} is not this server's: it runs in {lease.where()}, on this database,"
            f" in session {lease.session_id}; only that server can say how"
            " it goes, steer or cancel it (through the client connected to it); the session"
            " is busy until it ends"
        )

    def get(self, run_id: str) -> Run:
        run = self.runs.get(run_id)
        if run is None:
            raise _no_run(run_id)
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
        parent_run_id: str | None = None,
        warnings: list[str] | None = None,
    ) -> Run:
        """Start ``prompt`` in ``session``; ``build_agent(run_id)`` makes the agent (its tools
        carry the run id) and names its model. ``listener`` hears every event from the first.
        ``client`` (its MCP connection) counts the run against the per-client limit;
        ``parent_run_id`` is the run whose tool call started it; ``warnings`` becomes the
        run's list of them (its starter may add to it as the run goes on)."""
        run_id = uuid.uuid4().hex[:12]
        # Claim the session in memory before the first await, so a second start fails cleanly.
        self.ensure_idle_here(session.id)
        self.check_limits(client)
        placeholder = Run(
            run_id,
            session.id,
            manifest.name,
            "",
            depth,
            session=session,
            agent=None,
        )
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
        run = Run(
            run_id,
            session.id,
            manifest.name,
            model_ref,
            depth,
            session=session,
            agent=agent,
            client=client,
            parent_run_id=parent_run_id,
        )
        if warnings is not None:
            run.warnings = warnings  # before its first event, which may add to them
        # Until the agent's first event: its tools are listed first, and a downstream server
        # may take up to its time limit to start.
        run.last_event = STARTING
        self.runs[run_id] = run
        self._by_session[session.id] = run
        if listener is not None:
            run.listeners.append(listener)
        stop_listening = agent.subscribe(run._on_event)
        try:
            await self._publish([run])
        except Exception as error:  # the board this once; the run itself goes on
            _warn("the run board could not be written", error)
        started = anyio.Event()
        self._task_group.start_soon(self._execute, run, prompt, started, stop_listening)
        try:
            await started.wait()
        except anyio.get_cancelled_exc_class():
            # The caller is gone before it got the run: the run must not go on without it.
            # It records its end first (the caller's cleanup reads what it stored).
            run.listeners.clear()
            run.abort("the request that started the run was cancelled")
            with anyio.CancelScope(shield=True), anyio.move_on_after(10):
                await run.done.wait()
            raise
        return run

    async def _execute(
        self, run: Run, prompt: str, started: anyio.Event, stop_listening: Callable[[], None]
    ) -> None:
        agent = run.agent
        assert agent is not None  # built before the run was started, released at its end
        try:
            started.set()
            if run.abort_reason is not None:
                run.status, run.error = "aborted", abort_message(run.abort_reason)
                return
            messages = await agent.prompt(prompt)
            final = next((m for m in reversed(messages) if isinstance(m, AssistantMessage)), None)
            for message in messages:
                if isinstance(message, AssistantMessage):
                    run.usage = run.usage + message.usage
            if final is not None:
                # Kept for agent_status with the newest ended runs: what a status shows
                # (an answer may be 16 Mi characters; the session holds it whole).
                run.answer = kept_answer(final.text)
                run.stop_reason = str(final.stop_reason)
                run.error = final.error_message
                statuses: dict[str, RunStatus] = {
                    StopReason.ERROR: "error",
                    StopReason.ABORTED: "aborted",
                }
                run.status = statuses.get(final.stop_reason, "completed")
                why_empty = cut_before_an_answer(final)
                if why_empty is not None and len(run.warnings) < MAX_WARNINGS:
                    run.warnings.append(why_empty)  # else an empty answer says nothing
                if (
                    run.status == "completed"
                    and run.end_reason == AgentEndReason.MAX_TURNS
                    and final.tool_calls
                ):
                    # Cut off with tool results the model never saw: an empty answer is no
                    # answer. (A text answer with steering left unread still is one.)
                    turns = agent.max_turns
                    calls = "model call" if turns == 1 else "model calls"
                    run.status, run.error = (
                        "error",
                        (
                            f"stopped at the limit of {turns} {calls} (the agent's max_turns)"
                            " with the model still calling tools; agent_run in this session"
                            " goes on from here, or raise max_turns in its manifest"
                        ),
                    )
                if run.status == "error" and run.abort_reason is not None:
                    # Cancelled between attempts (waiting to retry a failed answer).
                    aborted = abort_message(run.abort_reason)
                    run.status, run.error = "aborted", f"{aborted} ({run.error})"
            else:
                run.status = "completed"
        except Exception as error:
            log.exception("run %s failed", run.id)
            run.status, run.error = "error", str(error) or type(error).__name__
        finally:
            if run.status == "running":  # cancelled (the server is going away)
                run.error = run.error or abort_message("the run's task was cancelled")
                run.status = "aborted"
            not_taken = _not_taken(agent)
            if not_taken:
                run.warnings.append(not_taken)
            run.finished = time.time()
            try:
                await self._publish([run])
            except Exception as error:  # keep_board writes it once the database is back
                _warn(f"the end of run {run.id} could not be written to the run board", error)
                if self.board is not None:
                    self._unpublished[run.id] = run
                    while len(self._unpublished) > KEEP_FINISHED_RUNS:  # the oldest go
                        del self._unpublished[next(iter(self._unpublished))]
            if self._by_session.get(run.session_id) is run:
                del self._by_session[run.session_id]
                self._count_client(run.client, -1)
                try:
                    await self._release(run.session_id)
                except Exception as error:  # the lease lapses by itself; the run has ended
                    _warn(f"releasing the lease of session {run.session_id} failed", error)
            # The agent's listener is the run itself: a cycle that would keep every forgotten
            # run (agent, session, transcript) for a full collection, rare in serve.
            stop_listening()
            run.release()
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

    async def wait(
        self, run: Run, why: str = "the request that started the run was cancelled"
    ) -> None:
        """Wait for ``run``; if the waiter is cancelled (the MCP request was), abort the run
        (``why``: the reason it records) and let it record its end before giving up."""
        try:
            await run.done.wait()
        except anyio.get_cancelled_exc_class():
            # The waiter (and its request) is gone: send it no more events.
            run.listeners.clear()
            run.abort(why)
            with anyio.CancelScope(shield=True), anyio.move_on_after(10):
                await run.done.wait()
            raise

    async def close(self) -> None:
        for run in list(self._by_session.values()):
            run.abort("the server is shutting down")
        with anyio.move_on_after(10, shield=True):
            for run in list(self.runs.values()):
                await run.done.wait()
