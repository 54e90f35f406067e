"""The runs of every replica, on a board in the shared PostgreSQL database: any replica answers
agent_status, agent_runs, agent_cancel, agent_steer and agent_follow_up for a run that another
one runs.

Each replica writes its runs' state to ``runs`` (when a run starts and ends, and every
``PUBLISH_EVERY`` seconds while it changes) and renews their ``expires`` with its leases. A
command for a run elsewhere is a row in ``run_commands`` for the replica that owns it, which
takes its commands every ``POLL_EVERY`` seconds while it has runs under way. A replica that
dies stops renewing: once its runs have expired (the lease time), any replica that looks marks
them ended in error, "the server running it stopped".

Blocking (database calls): call it through the application's ``offload``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from typing import Any, Literal

from mcp_agent.messages import Usage
from mcp_agent.runtime.errors import TooManyRuns
from mcp_agent.runtime.leases import LEASE_SECONDS, RENEW_WITHIN, PostgresLeases
from mcp_agent.sessions.entries import clip_long

PUBLISH_EVERY = 0.5
POLL_EVERY = 0.25
# Commands waiting for one run at most; one more is refused.
MAX_PENDING_COMMANDS = 100
# Messages a stopped run never took that its warning quotes (the rest are counted).
QUOTED_AT_MOST = 50
# Ended runs stay on the board this long (their sessions keep everything).
KEEP_ENDED_SECONDS = 7 * 24 * 3600
STOPPED = "the server running it stopped"

CommandKind = Literal["cancel", "steer", "follow_up"]
# How much of each message a run never took its warning quotes.
NOT_TAKEN_CHARS = 500
# What a run's status shows of its answer (the session holds all of it). The board keeps one
# character more, which says that it was cut: an answer may be megabytes long, and
# agent_runs reads the board's newest thousand runs on every call.
ANSWER_CHARS = 16_000


def kept_answer(answer: str) -> str:
    """What a run keeps of its answer, in memory and on the board: what a status shows, and
    one character more, which says that it was cut (the session holds all of it)."""
    return answer[: ANSWER_CHARS + 1]


def shown_answer(answer: str, session_id: str) -> tuple[str, bool]:
    """A kept answer as a status shows it, and whether it was cut: a cut one ends saying
    where the rest is."""
    if len(answer) <= ANSWER_CHARS:
        return answer, False
    return (
        f"{answer[:ANSWER_CHARS]}… [cut at {ANSWER_CHARS:,} characters: the whole answer is the"
        f" run's last assistant message in session {session_id}: session_get with session_id"
        f" {session_id!r} and limit 1 shows the newest entry, or, too large for a page, names"
        " the call that reads it whole]",
        True,
    )


_NOW = "extract(epoch FROM clock_timestamp())"
_STARTED, _FINISHED = 6, 7  # the places of ``started`` and ``finished`` in _COLUMNS
_COLUMNS = (
    "id, session_id, agent, model, depth, status, started, finished, event_count, last_event,"
    " answer, error, stop_reason, usage, new_messages, warnings, parent_run_id"
)


@dataclass
class RunRecord:
    """A run as the board (and run_info) knows it: the attributes of ``runs.Run`` that
    describe it, without its agent."""

    id: str
    session_id: str
    agent_name: str
    model_ref: str
    depth: int = 0
    status: str = "running"
    started: float = 0.0
    finished: float | None = None
    event_count: int = 0
    last_event: str = ""
    answer: str | None = None
    error: str | None = None
    stop_reason: str | None = None
    usage: Usage = field(default_factory=Usage)
    new_messages: int = 0
    # What went wrong without stopping it (an MCP server of its agent that could not start)
    # and the steering and follow-up messages it ended before taking: on the board too, so
    # that a client that steered it through another replica hears its message was dropped.
    warnings: list[str] = field(default_factory=list)
    # The run whose tool call started this one (a sub-agent's, or a nested agent_run's).
    parent_run_id: str | None = None

    @classmethod
    def from_row(cls, row: tuple[Any, ...]) -> RunRecord:
        record = cls(*row[:13])
        record.usage = Usage.model_validate(json.loads(row[13]))
        record.new_messages = row[14]
        record.warnings = [str(warning) for warning in json.loads(row[15])]
        record.parent_run_id = row[16]
        return record

    def row(self) -> tuple[Any, ...]:
        """The values of ``_COLUMNS``, in order."""
        values = [getattr(self, f.name) for f in fields(self)]
        if self.answer is not None:
            values[10] = kept_answer(self.answer)
        values[13] = self.usage.model_dump_json(by_alias=True)
        values[15] = json.dumps(self.warnings, ensure_ascii=False)
        return tuple(values)


@dataclass(frozen=True)
class Command:
    run_id: str
    kind: CommandKind
    message: str | None

    def quoted(self) -> str:
        return quote("steering" if self.kind == "steer" else "follow-up", self.message or "")


def quote(kind: str, text: str) -> str:
    """A message a run never took, as its warnings quote it."""
    return f"{kind} {json.dumps(clip_long(text, NOT_TAKEN_CHARS), ensure_ascii=False)}"


def undelivered_note(quoted: list[str], more: int = 0) -> str:
    """The warning of a run about messages sent through another replica that it never took
    (it had ended, or held as many as it queues): their senders were told they were queued."""
    return (
        "these messages sent through another replica never reached the run (it had ended, or"
        " held as many not taken as it queues) and are in no session: "
        + "; ".join(quoted)
        + (f"; and {more} more" if more else "")
        + " (send them again with agent_run in this session)"
    )


class RunBoard:
    def __init__(self, database: Any, owner: str, leases: PostgresLeases | None = None) -> None:
        self.database = database  # a PostgresDatabase
        self.owner = owner
        # Whose owners are known gone (their presence lock: runtime.presence).
        self.leases = leases

    def publish(self, records: list[RunRecord]) -> list[Command]:
        """Write the state of runs of this replica; returns the messages still waiting for
        those of them that ended, which they never took: taken off the board here, and said
        in the warnings written with the end, so that the end is never read without them.

        A run's start and end are the database's times when the board first heard of each
        (each record's ``started`` and ``finished`` are set to them here): the runs of every
        replica are listed in the order they started, whatever each replica's clock says,
        and every replica shows the same times."""
        if not records:
            return []
        values_sql = ["%s"] * len(fields(RunRecord))
        values_sql[_STARTED] = _NOW
        values_sql[_FINISHED] = f"CASE WHEN %s::float8 IS NULL THEN NULL ELSE {_NOW} END"
        sql = (
            f"INSERT INTO runs ({_COLUMNS}, owner, expires) VALUES"
            f" ({', '.join(values_sql)}, %s, {_NOW} + %s)"
            " ON CONFLICT (id) DO UPDATE SET status = excluded.status,"
            " finished = coalesce(runs.finished, excluded.finished),"
            " event_count = excluded.event_count,"
            " last_event = excluded.last_event, answer = excluded.answer,"
            " error = excluded.error, stop_reason = excluded.stop_reason,"
            " usage = excluded.usage, new_messages = excluded.new_messages,"
            " warnings = excluded.warnings,"
            " model = excluded.model, expires = excluded.expires"
            # An end on the board is final: another replica that found the run's renewals
            # stopped may have ended it, and a late word from this one must not revive it.
            # Its own end, written late (the database was out of reach when it ended), does
            # replace the one another replica presumed, as its later word on its end does.
            " WHERE runs.finished IS NULL OR (excluded.finished IS NOT NULL"
            " AND runs.owner = excluded.owner)"
        )
        ended = [r.id for r in records if r.finished is not None]

        def work(conn: Any) -> list[Command]:
            rows = []
            if ended:
                # The rows first: a command sent meanwhile (send locks the row too) is either
                # in the table and taken here, or finds the run ended and is refused.
                conn.execute("SELECT 1 FROM runs WHERE id = ANY(%s) FOR UPDATE", (ended,))
                # All of them: a cancel left for an ended run has nothing left to do.
                rows = conn.execute(
                    "DELETE FROM run_commands WHERE run_id = ANY(%s)"
                    " RETURNING id, run_id, kind, message",
                    (ended,),
                ).fetchall()
            taken = [
                Command(run_id, kind, message)
                for _, run_id, kind, message in sorted(rows)
                if message is not None
            ]
            values = []
            for record in records:
                quoted = [c.quoted() for c in taken if c.run_id == record.id]
                if quoted:
                    record.warnings.append(undelivered_note(quoted))
                row = record.row()
                values.append((*row[:_STARTED], *row[_STARTED + 1 :], self.owner, LEASE_SECONDS))
            with conn.cursor() as cursor:
                cursor.executemany(sql, values)
            times = {
                run_id: (started, finished)
                for run_id, started, finished in conn.execute(
                    "SELECT id, started, finished FROM runs WHERE id = ANY(%s)",
                    ([r.id for r in records],),
                )
            }
            for record in records:
                started, finished = times.get(record.id, (record.started, record.finished))
                record.started = started
                if record.finished is not None and finished is not None:
                    record.finished = finished
            return taken

        taken: list[Command] = self.database.write(work)
        return taken

    def renew(self, running: list[str]) -> None:
        """Keep the runs under way here (``running``) alive; end those of replicas that
        stopped; forget runs that ended long ago. Called with the lease renewal."""

        def work(conn: Any) -> None:
            conn.execute(
                f"UPDATE runs SET expires = {_NOW} + %s WHERE owner = %s AND id = ANY(%s)",
                (LEASE_SECONDS, self.owner, running),
            )
            self._end_stopped(conn)
            conn.execute(
                f"DELETE FROM runs WHERE finished IS NOT NULL AND finished < {_NOW} - %s",
                (KEEP_ENDED_SECONDS,),
            )
            # Commands no run under way will take (left by a version that kept them).
            conn.execute(
                "DELETE FROM run_commands c WHERE NOT EXISTS (SELECT 1 FROM runs r"
                " WHERE r.id = c.run_id AND r.status = 'running')"
            )

        self.database.write(work, within=RENEW_WITHIN)

    def _end_stopped(self, conn: Any, run_id: str | None = None) -> None:
        """End the runs whose replica stopped renewing them, or is known gone (its presence
        lock no longer held: killed, its machine lost); the commands left for them go
        (no one will take them), and the messages among them are quoted in the run's
        warnings, as those a run ended before taking are: their senders were told they were
        queued."""
        only = " AND id = %s" if run_id is not None else ""
        gone = self.leases.gone_sql("owner") if self.leases is not None else "false"
        judged = self.leases is None or self.leases.judges_expiry()  # after an outage: not yet
        expired = f"expires < {_NOW}" if judged else "false"
        ended = conn.execute(
            f"UPDATE runs SET status = 'error', error = %s, finished = {_NOW}"
            f" WHERE status = 'running' AND ({expired} OR {gone}){only} RETURNING id",
            (STOPPED, *((run_id,) if run_id is not None else ())),
        ).fetchall()
        if not ended:
            return
        rows = conn.execute(
            "DELETE FROM run_commands WHERE run_id = ANY(%s) RETURNING id, run_id, kind, message",
            ([stopped for (stopped,) in ended],),
        ).fetchall()
        quoted: dict[str, list[str]] = {}
        for _, stopped, kind, message in sorted(rows):
            if message is not None:
                quoted.setdefault(stopped, []).append(Command(stopped, kind, message).quoted())
        for stopped, quotes in quoted.items():
            said = undelivered_note(quotes[:QUOTED_AT_MOST], len(quotes[QUOTED_AT_MOST:]))
            note = json.dumps([said], ensure_ascii=False)
            conn.execute(
                "UPDATE runs SET warnings = (warnings::jsonb || %s::jsonb)::text WHERE id = %s",
                (note, stopped),
            )

    def get(self, run_id: str) -> RunRecord | None:
        def work(conn: Any) -> RunRecord | None:
            self._end_stopped(conn, run_id)
            row = conn.execute(f"SELECT {_COLUMNS} FROM runs WHERE id = %s", (run_id,)).fetchone()
            return RunRecord.from_row(row) if row else None

        found: RunRecord | None = self.database.write(work)
        return found

    def newest(self, limit: int) -> list[RunRecord]:
        """The newest ``limit`` runs of every replica, oldest first."""

        def work(conn: Any) -> list[RunRecord]:
            self._end_stopped(conn)
            rows = conn.execute(
                f"SELECT {_COLUMNS} FROM runs ORDER BY started DESC, id DESC LIMIT %s", (limit,)
            ).fetchall()
            return [RunRecord.from_row(row) for row in reversed(rows)]

        records: list[RunRecord] = self.database.write(work)
        return records

    def send(self, run_id: str, kind: CommandKind, message: str | None = None) -> RunRecord | None:
        """Leave a command for the replica that runs ``run_id``; the run as it is (None when
        unknown). Nothing is sent to a run that has ended."""

        def work(conn: Any) -> RunRecord | None:
            self._end_stopped(conn, run_id)
            row = conn.execute(
                f"SELECT {_COLUMNS}, owner FROM runs WHERE id = %s FOR UPDATE", (run_id,)
            ).fetchone()
            if row is None:
                return None
            record = RunRecord.from_row(row[:-1])
            if record.status != "running":
                return record
            pending = conn.execute(
                "SELECT count(*) FROM run_commands WHERE run_id = %s", (run_id,)
            ).fetchone()[0]
            if pending >= MAX_PENDING_COMMANDS:
                raise TooManyRuns(
                    f"run {run_id} has {pending} commands waiting already, the limit is"
                    f" {MAX_PENDING_COMMANDS}; wait for it to take them"
                )
            conn.execute(
                "INSERT INTO run_commands (run_id, owner, kind, message) VALUES (%s, %s, %s, %s)",
                (run_id, row[-1], kind, message),
            )
            return record

        sent: RunRecord | None = self.database.write(work)
        return sent

    def take_commands(self) -> list[Command]:
        """The commands left for this replica's runs, in the order they were sent (each is
        taken once)."""
        rows = self.database.write(
            lambda conn: conn.execute(
                "DELETE FROM run_commands WHERE owner = %s RETURNING id, run_id, kind, message",
                (self.owner,),
            ).fetchall()
        )
        return [Command(run_id, kind, message) for _, run_id, kind, message in sorted(rows)]
