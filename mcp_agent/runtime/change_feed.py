"""The change feed of the servers on one PostgreSQL database: the channel on which each tells
the others what it changed (server/pg_bus listens on it and publishes to it), what one change
says, and ``Announcer``, through which a process that serves nothing (the command line's
``run``, ``chat`` and ``sessions`` commands) tells them what it wrote. Their subscribers hear
it as they hear another replica's changes; without it, they heard nothing of the command
line's writes until they read again.

Fire-and-forget, as the feed is: a change that cannot be announced (the database gone right
after the write) is said once in the log, and the write stands.
"""

from __future__ import annotations

import json
import logging
import uuid
from typing import TYPE_CHECKING, Any

from mcp_agent.sessions.errors import SessionError
from mcp_agent.wire import one_line

if TYPE_CHECKING:
    from mcp_agent.sessions.postgres.database import PostgresDatabase

log = logging.getLogger(__name__)

CHANNEL = "mcp_agent_events"
# The resources of a session whose subscribers hear of each change to it.
SESSION_URI_TAILS = ("", "/tree", "/context", "/export.jsonl")


def session_uris(session_id: str) -> list[str]:
    """The resources whose subscribers hear of each change to the session."""
    base = f"session://{session_id}"
    return [base + tail for tail in SESSION_URI_TAILS]


def change(origin: str, kind: str, uri: str | None = None) -> str:
    """One change as the feed carries it: ``kind`` is resource_updated (of ``uri``),
    resources_list_changed, tools_list_changed or prompts_list_changed."""
    data: dict[str, Any] = {"origin": origin, "kind": kind}
    if uri is not None:
        data["uri"] = uri
    return json.dumps(data, separators=(",", ":"))


class Announcer:
    """Tells the servers on ``database`` of this process's changes: a session's entries
    (``in_write``, in the transaction that stores them, as the database's ``announce``),
    sessions made or gone (``list_changed``, ``session_deleted``: one transaction each, sent
    after the command's write)."""

    def __init__(self, database: PostgresDatabase) -> None:
        self.database = database
        self.origin = f"cli-{uuid.uuid4().hex}"  # never a server's: every server hears it
        self._failed = False

    def in_write(self, conn: Any, session_id: str) -> None:
        """Announce a change of ``session_id``'s entries in the transaction making it: heard
        when it commits, never when it is rolled back, and no transaction of its own (each
        append of a run made two)."""
        conn.execute(
            "SELECT pg_notify(%s, payload) FROM unnest(%s::text[]) AS payload",
            (
                CHANNEL,
                [change(self.origin, "resource_updated", uri) for uri in session_uris(session_id)],
            ),
        )

    def session_changed(self, session_id: str, *_: object) -> None:
        self._send(
            [change(self.origin, "resource_updated", uri) for uri in session_uris(session_id)]
        )

    def list_changed(self, *_: object) -> None:
        self._send([change(self.origin, "resources_list_changed")])

    def session_deleted(self, session_id: str) -> None:
        """Gone: the list changed, and whoever reads the session hears it changed (reading it
        says it is gone), as a server says of a session it deletes."""
        updated = [change(self.origin, "resource_updated", uri) for uri in session_uris(session_id)]
        self._send([change(self.origin, "resources_list_changed"), *updated])

    def _send(self, payloads: list[str]) -> None:
        def work(conn: Any) -> None:
            for payload in payloads:
                conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, payload))

        try:
            self.database.write(work)
        except SessionError as error:
            if not self._failed:
                log.warning(
                    "the servers on the session database %s were not told of a change made"
                    " here (their subscribers see it when they read again): %s",
                    self.database.where,
                    one_line(error.message),
                )
            self._failed = True
