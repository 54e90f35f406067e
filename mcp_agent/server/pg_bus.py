"""Change notifications across replicas: the SDK's ``SubscriptionBus`` over PostgreSQL's
LISTEN/NOTIFY.

Each replica publishes the events of its own changes (a session updated, the list changed) on
one channel (runtime.change_feed, where the command line announces its writes too) and hears
the others': an event from another replica goes to this replica's
2026-07-28 listen streams (the bus's local listeners) and to its legacy
``resources/subscribe`` connections (``on_remote``: the Notifier's outboxes), so a client
sees every change whichever replica made it. Delivery is as the SDK's own bus promises:
fire-and-forget, no replay. While the database is unreachable the bus goes on delivering this
replica's own events and reconnects (every ``RETRY_SECONDS``); the others' events of that
time are lost, as a dropped listen stream loses them. Publishing never waits for the database:
an event for the other replicas goes into a bounded queue that a task of the connection sends
from, so a connection that hangs (a database that stopped answering without closing it) holds
up no listener here; it is dropped after ``SEND_TIMEOUT`` and made afresh.

The connections are psycopg's async ones, on the server's event loop (asyncio): nothing here
blocks it.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable
from typing import Any

import anyio
import psycopg
from mcp.server.subscriptions import (
    PromptsListChanged,
    ResourcesListChanged,
    ResourceUpdated,
    ServerEvent,
    ToolsListChanged,
)

from mcp_agent.outages import Outage
from mcp_agent.runtime.change_feed import CHANNEL, change
from mcp_agent.server.notify import WatchedBus
from mcp_agent.sessions.postgres.connect import KEEP_WHEN_IDLE, tcp_options
from mcp_agent.wire import one_line

log = logging.getLogger(__name__)

RETRY_SECONDS = 1.0
# NOTIFY payloads must stay under 8000 bytes; an event that does not fit stays local.
MAX_PAYLOAD = 7900
# Events waiting to be sent to the other replicas; past it, new ones are dropped.
MAX_OUTGOING = 1000
# How long one NOTIFY may take before its connection is taken for hung.
SEND_TIMEOUT = 10.0

_KINDS: dict[str, Callable[[dict[str, Any]], ServerEvent]] = {
    "resource_updated": lambda data: ResourceUpdated(uri=str(data["uri"])),
    "resources_list_changed": lambda _data: ResourcesListChanged(),
    "tools_list_changed": lambda _data: ToolsListChanged(),
    "prompts_list_changed": lambda _data: PromptsListChanged(),
}


def _encode(origin: str, event: ServerEvent) -> str | None:
    if isinstance(event, ResourceUpdated):
        return change(origin, "resource_updated", event.uri)
    if isinstance(event, ResourcesListChanged):
        return change(origin, "resources_list_changed")
    if isinstance(event, ToolsListChanged):
        return change(origin, "tools_list_changed")
    if isinstance(event, PromptsListChanged):
        return change(origin, "prompts_list_changed")
    return None


def _decode(payload: str) -> tuple[str, ServerEvent] | None:
    try:
        data = json.loads(payload)
        return str(data["origin"]), _KINDS[data["kind"]](data)
    except (ValueError, KeyError, TypeError):
        return None


class PostgresBus(WatchedBus):
    """A ``SubscriptionBus`` shared by every replica on one PostgreSQL database."""

    def __init__(self, url: str) -> None:
        super().__init__()
        self.url = url
        self.origin = uuid.uuid4().hex
        self._outgoing, self._to_send = anyio.create_memory_object_stream[str](MAX_OUTGOING)
        self._dropped = 0  # events left out since the queue was last full
        # Called with each event from another replica (on the event loop).
        self.remote_listeners: list[Callable[[ServerEvent], None]] = []
        self.listening_since: anyio.Event = anyio.Event()  # set once LISTEN is in place
        # Said once when the feed breaks (the others' changes of the gap are not heard here)
        # and once when it is back, not each second that the database stays out of reach.
        self.outage = Outage(
            log,
            "the change feed from other replicas is cut (their changes meanwhile are not"
            " heard here; reconnecting each second)",
        )

    def listening(self) -> bool:
        return True  # other replicas' clients may listen: every change is published

    async def publish(self, event: ServerEvent) -> None:
        await super().publish(event)  # this replica's listeners
        payload = _encode(self.origin, event)
        if payload is None or len(payload) > MAX_PAYLOAD:
            return
        try:
            self._outgoing.send_nowait(payload)
            self._dropped = 0
        except anyio.WouldBlock:
            if not self._dropped:
                log.warning(
                    "changes for the other replicas are left out: %d wait to be sent already",
                    MAX_OUTGOING,
                )
            self._dropped += 1

    async def run(self) -> None:
        """Hear the other replicas until cancelled (a task of the server's)."""
        while True:
            try:
                await self._serve()
            except (psycopg.Error, OSError) as error:
                self.outage.failed(error)
            await anyio.sleep(RETRY_SECONDS)

    async def _serve(self) -> None:
        async with (
            await psycopg.AsyncConnection.connect(
                self.url, autocommit=True, **tcp_options(self.url)
            ) as listener,
            await psycopg.AsyncConnection.connect(
                self.url, autocommit=True, **tcp_options(self.url)
            ) as publisher,
        ):
            for conn in (listener, publisher):  # idle by nature: a DBA's timeout spares them
                await conn.execute(f"SELECT {KEEP_WHEN_IDLE}")
            await listener.execute(f"LISTEN {CHANNEL}")
            self.listening_since.set()
            self.outage.recovered()
            async with anyio.create_task_group() as group:
                group.start_soon(self._send, publisher, group.cancel_scope)
                try:
                    async for notice in listener.notifies():
                        decoded = _decode(notice.payload)
                        if decoded is None or decoded[0] == self.origin:
                            continue
                        await self._deliver_remote(decoded[1])
                except psycopg.Error as error:
                    self.outage.failed(error)
                group.cancel_scope.cancel()

    async def _send(
        self, publisher: psycopg.AsyncConnection[Any], serving: anyio.CancelScope
    ) -> None:
        """Send this replica's events on ``publisher`` until it fails or hangs; then the
        connections are made afresh (the listening one may be well: without a new start,
        nothing this replica changes would reach the others again)."""
        async for payload in self._to_send:
            try:
                with anyio.fail_after(SEND_TIMEOUT):
                    await publisher.execute("SELECT pg_notify(%s, %s)", (CHANNEL, payload))
            except (psycopg.Error, TimeoutError) as error:
                self.outage.failed(
                    f"publishing a change failed: {one_line(error) or 'no answer in time'}"
                )
                serving.cancel()
                return

    async def _deliver_remote(self, event: ServerEvent) -> None:
        await super().publish(event)
        for listener in list(self.remote_listeners):
            try:
                listener(event)
            except Exception:  # one broken listener must not stop the feed
                log.exception("a remote change listener failed")
