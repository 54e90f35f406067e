"""Change notifications for both protocol eras.

2026-07-28 connections listen through the SDK's subscription bus; legacy connections get
``notifications/resources/*`` on the sessions they subscribed with (``resources/subscribe``,
which we answer ourselves) or, for list changes, on every legacy connection we have seen.
Session appends happen in plain (sync) code, so they are queued and sent by a task of ours.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.server.subscriptions import (
    InMemorySubscriptionBus,
    ResourcesListChanged,
    ResourceUpdated,
    ServerEvent,
    SubscriptionBus,
)
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

log = logging.getLogger(__name__)

LIST_CHANGED = "list_changed"
SESSION_CHANGED = "session_changed"


def session_uris(session_id: str) -> list[str]:
    base = f"session://{session_id}"
    return [base, f"{base}/tree", f"{base}/context", f"{base}/export.jsonl"]


class WatchedBus(InMemorySubscriptionBus):
    """The SDK's in-process bus, counting its listeners: with none, an append publishes
    nothing (most appends happen with no client listening, and each publish costs a turn of
    the event loop)."""

    def __init__(self) -> None:
        super().__init__()
        self.listeners = 0

    def subscribe(self, listener: Callable[[ServerEvent], None]) -> Callable[[], None]:
        unsubscribe = super().subscribe(listener)
        self.listeners += 1
        subscribed = True

        def stop() -> None:
            nonlocal subscribed
            if subscribed:
                subscribed = False
                self.listeners -= 1
            unsubscribe()

        return stop


class Notifier:
    def __init__(self, bus: SubscriptionBus | None) -> None:
        self.bus = bus
        # uri -> {connection key: legacy server session}
        self._subscribers: dict[str, dict[int, Any]] = {}
        self._legacy: dict[int, Any] = {}
        send, receive = anyio.create_memory_object_stream[tuple[str, str]](math.inf)
        self._send: MemoryObjectSendStream[tuple[str, str]] = send
        self._receive: MemoryObjectReceiveStream[tuple[str, str]] = receive

    # --- what changed (callable from sync code) ---------------------------------------------

    def session_changed(self, session_id: str, *_: Any) -> None:
        if self._bus_listening() or any(
            self._subscribers.get(uri) for uri in session_uris(session_id)
        ):
            self._send.send_nowait((SESSION_CHANGED, session_id))

    def list_changed(self, *_: Any) -> None:
        self._send.send_nowait((LIST_CHANGED, ""))

    def _bus_listening(self) -> bool:
        if self.bus is None:
            return False
        return not isinstance(self.bus, WatchedBus) or self.bus.listeners > 0

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
        async for kind, session_id in self._receive:
            try:
                if kind == LIST_CHANGED:
                    await self._deliver_list_changed()
                else:
                    for uri in session_uris(session_id):
                        await self._deliver_updated(uri)
            except Exception:  # a closed connection must not stop notifications for others
                log.debug("notification %s %s not delivered", kind, session_id, exc_info=True)

    async def _deliver_list_changed(self) -> None:
        if self.bus is not None:
            await self.bus.publish(ResourcesListChanged())
        for session in list(self._legacy.values()):
            with anyio.move_on_after(5):
                await _quietly(session.send_resource_list_changed())

    async def _deliver_updated(self, uri: str) -> None:
        if self.bus is not None:
            await self.bus.publish(ResourceUpdated(uri=uri))
        for session in list(self._subscribers.get(uri, {}).values()):
            with anyio.move_on_after(5):
                await _quietly(session.send_resource_updated(uri))


async def _quietly(awaitable: Any) -> None:
    try:
        await awaitable
    except Exception:
        log.debug("legacy notification failed", exc_info=True)
