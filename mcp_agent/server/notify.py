"""Change notifications for both protocol eras.

2026-07-28 connections listen through the SDK's subscription bus; legacy connections get
``notifications/resources/*`` on the sessions they subscribed with (``resources/subscribe``,
which we answer ourselves) or, for list changes, on every legacy connection we have seen.
Session appends happen in plain (sync) code, so they are queued and sent by a task of ours.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.server.subscriptions import ResourcesListChanged, ResourceUpdated, SubscriptionBus
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

log = logging.getLogger(__name__)

LIST_CHANGED = "list_changed"


def session_uris(session_id: str) -> list[str]:
    base = f"session://{session_id}"
    return [base, f"{base}/tree", f"{base}/context", f"{base}/export.jsonl"]


class Notifier:
    def __init__(self, bus: SubscriptionBus | None) -> None:
        self.bus = bus
        # uri -> {connection key: legacy server session}
        self._subscribers: dict[str, dict[int, Any]] = {}
        self._legacy: dict[int, Any] = {}
        send, receive = anyio.create_memory_object_stream[str](math.inf)
        self._send: MemoryObjectSendStream[str] = send
        self._receive: MemoryObjectReceiveStream[str] = receive

    # --- what changed (callable from sync code) ---------------------------------------------

    def session_changed(self, session_id: str, *_: Any) -> None:
        for uri in session_uris(session_id):
            self._send.send_nowait(uri)

    def list_changed(self, *_: Any) -> None:
        self._send.send_nowait(LIST_CHANGED)

    # --- legacy connections -----------------------------------------------------------------

    def remember(self, ctx_session: Any, protocol_version: str | None) -> None:
        """Keep a legacy connection's session so list changes reach it outside requests."""
        if protocol_version not in HANDSHAKE_PROTOCOL_VERSIONS:
            return
        connection = getattr(ctx_session, "_connection", None)
        if connection is None:
            return
        key = id(connection)
        if key not in self._legacy:
            self._legacy[key] = ctx_session
            connection.exit_stack.callback(self._forget, key)

    def subscribe(self, uri: str, ctx_session: Any, protocol_version: str | None) -> None:
        self.remember(ctx_session, protocol_version)
        connection = getattr(ctx_session, "_connection", None)
        if connection is not None:
            self._subscribers.setdefault(uri, {})[id(connection)] = ctx_session

    def unsubscribe(self, uri: str, ctx_session: Any) -> None:
        connection = getattr(ctx_session, "_connection", None)
        if connection is not None:
            self._subscribers.get(uri, {}).pop(id(connection), None)

    def _forget(self, key: int) -> None:
        self._legacy.pop(key, None)
        for subscribers in self._subscribers.values():
            subscribers.pop(key, None)

    # --- delivery ---------------------------------------------------------------------------

    async def run(self) -> None:
        """Deliver queued changes until cancelled; run it in the server's task group."""
        async for item in self._receive:
            try:
                await self._deliver(item)
            except Exception:  # a closed connection must not stop notifications for others
                log.debug("notification %s not delivered", item, exc_info=True)

    async def _deliver(self, item: str) -> None:
        if item == LIST_CHANGED:
            if self.bus is not None:
                await self.bus.publish(ResourcesListChanged())
            for session in list(self._legacy.values()):
                with anyio.move_on_after(5):
                    await _quietly(session.send_resource_list_changed())
            return
        if self.bus is not None:
            await self.bus.publish(ResourceUpdated(uri=item))
        for session in list(self._subscribers.get(item, {}).values()):
            with anyio.move_on_after(5):
                await _quietly(session.send_resource_updated(item))


async def _quietly(awaitable: Any) -> None:
    try:
        await awaitable
    except Exception:
        log.debug("legacy notification failed", exc_info=True)
