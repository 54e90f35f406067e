"""Change notifications for both protocol eras.

2026-07-28 connections listen through the SDK's subscription bus; legacy connections get
``notifications/resources/*`` on the sessions they subscribed with (``resources/subscribe``,
which we answer ourselves) or, for list changes, on every legacy connection we have seen.

How a change travels:

- ``session_changed`` / ``list_changed`` are plain functions, callable from the event loop's
  thread or any other (database work runs on worker threads). They only mark the change in a
  coalesced pending set under a ``threading.Lock`` (one entry per session, a flag for list
  changes, at most ``max_pending`` sessions: past that the oldest is dropped) and wake the
  dispatcher: directly on the loop's thread, else by a callback handed to the loop without
  waiting for it (no anyio primitive is touched from a foreign thread).
- ``run()``'s dispatcher drains that set, publishes to the bus (in-process, never blocked by a
  client) and puts each change in the outbox of every legacy connection that wants it.
- Each legacy connection has its own outbox (a small coalesced set, ``subscriber_pending``
  URIs at most) and its own delivery task. A send that does not finish within
  ``send_timeout`` seconds drops that connection (forgotten for list changes and every URI,
  logged once), so a client that stopped reading delays nobody else.

Changes reported before ``run()`` starts (or after it stops) stay pending, bounded as above,
and go out when ``run()`` next starts.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import threading
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any, Protocol

import anyio
import anyio.from_thread
import anyio.lowlevel
import anyio.to_thread
from anyio.abc import TaskGroup
from mcp.server.context import ServerRequestContext
from mcp.server.subscriptions import (
    InMemorySubscriptionBus,
    ListenHandler,
    ResourcesListChanged,
    ResourceUpdated,
    ServerEvent,
    SubscriptionBus,
)
from mcp.shared.exceptions import MCPError
from mcp_types import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    SubscriptionsListenRequestParams,
    SubscriptionsListenResult,
)
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

from mcp_agent.outages import Outage
from mcp_agent.runtime.change_feed import SESSION_URI_TAILS, session_uris
from mcp_agent.runtime.settings import MAX_SUBSCRIPTIONS_ENV
from mcp_agent.server.strict import URI_CHARS, long_uri
from mcp_agent.sessions.sqlite.watch import MAX_WATCHED

log = logging.getLogger(__name__)

LIST_CHANGED = "list_changed"
SESSION_CHANGED = "session_changed"

SEND_TIMEOUT = 5.0
MAX_PENDING = 10_000
SUBSCRIBER_PENDING = 1024  # URIs: 256 sessions' worth
MAX_SUBSCRIPTIONS = 1000  # resources one legacy connection may subscribe to; 0: no limit


def subscribed_session(uri: str) -> str | None:
    """The session whose changes ``uri`` is notified of (one of ``session_uris``), or None."""
    rest = uri.removeprefix("session://")
    if rest == uri:
        return None
    for tail in SESSION_URI_TAILS[1:]:
        if rest.endswith(tail):
            rest = rest.removesuffix(tail)
            break
    return rest if rest and "/" not in rest else None


class WatchedBus(InMemorySubscriptionBus):
    """The SDK's in-process bus, counting its listeners: with none, an append publishes
    nothing (most appends happen with no client listening, and each publish costs a turn of
    the event loop)."""

    def __init__(self) -> None:
        super().__init__()
        self.listeners = 0
        # Resource URIs the open listen streams ask for, with how many ask (ListenStreams).
        self.watched: Counter[str] = Counter()
        # Called (on the loop's thread) when a listener comes: the Notifier's follower waits
        # for one before it looks at the database.
        self.on_listen: Callable[[], None] | None = None

    def listening(self) -> bool:
        """Whether publishing reaches anyone."""
        return self.listeners > 0

    def subscribe(self, listener: Callable[[ServerEvent], None]) -> Callable[[], None]:
        unsubscribe = super().subscribe(listener)
        self.listeners += 1
        if self.on_listen is not None:
            self.on_listen()
        subscribed = True

        def stop() -> None:
            nonlocal subscribed
            if subscribed:
                subscribed = False
                self.listeners -= 1
            unsubscribe()

        return stop


# subscriptions/listen streams (2026-07-28) open at once, for every client together: the SDK's.
MAX_LISTEN_STREAMS = 1024


class ListenStreams(ListenHandler):
    """The SDK's ``subscriptions/listen`` handler, whose refusal at its limit says which limit
    was met and what to do (the SDK's said "Subscription limit reached", no more). A stream
    follows at most ``max_uris`` resources (a legacy client's bound on its subscriptions; 0:
    no limit), each URI as long as one read may be: the SDK kept any list a client sent for
    as long as the stream lasted (twenty listens of 200,000 URIs each, 900 MB), and sent it
    back whole in the stream's acknowledgement."""

    def __init__(
        self,
        bus: SubscriptionBus,
        max_streams: int | None = None,
        max_uris: int = MAX_SUBSCRIPTIONS,
    ) -> None:
        limit = MAX_LISTEN_STREAMS if max_streams is None else max_streams
        super().__init__(bus, max_subscriptions=limit)
        self._max_uris = max_uris

    async def __call__(
        self, ctx: ServerRequestContext[Any, Any], params: SubscriptionsListenRequestParams
    ) -> SubscriptionsListenResult:
        uris = params.notifications.resource_subscriptions or []
        where = "subscriptions/listen: notifications.resourceSubscriptions"
        if self._max_uris and len(uris) > self._max_uris:
            raise MCPError(
                INVALID_PARAMS,
                f"{where} holds {len(uris):,} URIs, more than the {self._max_uris:,} one stream"
                " follows: subscribe to fewer resources; the server's operator can raise the"
                f" bound (--max-subscriptions, {MAX_SUBSCRIPTIONS_ENV})",
            )
        for index, uri in enumerate(uris):
            if len(uri) > URI_CHARS:
                raise MCPError(INVALID_PARAMS, f"{where}[{index}]: {long_uri(uri)}")
        if len(self._streams) >= self._max_subscriptions:
            raise MCPError(
                INTERNAL_ERROR,
                f"Too many listen streams: this server holds at most {self._max_subscriptions:,}"
                " subscriptions/listen streams at once, for all its clients together, and every"
                " one is open. Retry once one ends; a client that is done listening should"
                " close its stream.",
            )
        watched = self._bus.watched if isinstance(self._bus, WatchedBus) else None
        if watched is not None:
            watched.update(uris)
        try:
            return await super().__call__(ctx, params)
        finally:
            if watched is not None:
                watched.subtract(uris)
                for uri in uris:
                    if watched[uri] <= 0:
                        del watched[uri]


# How often a follower of the database (``Notifier.follow``) looks for other processes' writes
# while anyone listens: a look that finds no commit costs one pragma.
FOLLOW_INTERVAL = 0.5


class ForeignChangesSeen(Protocol):
    """What ``Watch.look`` finds (sqlite.watch.ForeignChanges)."""

    sessions: list[str]
    list_changed: bool


class Watch(Protocol):
    """Looks at the store for other processes' writes (sqlite.watch.DatabaseWatch); called
    on a worker thread, one call at a time."""

    def rebase(self) -> None: ...

    def committed(self) -> bool: ...

    def look(self, watched: Iterable[str]) -> ForeignChangesSeen | None: ...

    def close(self) -> None: ...


class SubscriptionLimit(Exception):
    """A client asked for more subscriptions than the server allows; the message says how
    many it holds and how to raise the limit."""


class Notifier:
    def __init__(
        self,
        bus: SubscriptionBus | None,
        *,
        send_timeout: float = SEND_TIMEOUT,
        max_pending: int = MAX_PENDING,
        subscriber_pending: int = SUBSCRIBER_PENDING,
        max_subscriptions: int = MAX_SUBSCRIPTIONS,
    ) -> None:
        self.bus = bus
        self.max_subscriptions = max_subscriptions
        self.send_timeout = send_timeout
        self.max_pending = max(1, max_pending)
        self.subscriber_pending = max(1, subscriber_pending)
        # uri -> {connection key: legacy server session}
        self._subscribers: dict[str, dict[int, Any]] = {}
        # connection key -> the URIs it subscribes to: a connection's count, and its end, are
        # found without looking through every client's subscriptions (each subscribe counted
        # them all: 2 ms at 30,000, growing with every client's, on the event loop).
        self._held: dict[int, set[str]] = {}
        self._legacy: dict[int, Any] = {}
        self._outboxes: dict[int, _Outbox] = {}
        self._hooked: set[int] = set()  # connections whose exit_stack will call _closed
        # Pending changes, shared with producer threads: guarded by _lock.
        self._lock = threading.Lock()
        self._pending_sessions: dict[str, None] = {}  # insertion-ordered: oldest first
        self._pending_list = False
        self._wake_requested = False
        # Set while run() runs; read by producers on any thread.
        self._loop_thread: int | None = None
        self._call_soon: Callable[[Callable[[], None]], object] | None = None
        self._wakeup: anyio.Event | None = None
        self._task_group: TaskGroup | None = None
        # Set (on the loop's thread) when a listener or a legacy connection comes: ``follow``
        # waits for it while nobody listens.
        self._listener_came: anyio.Event | None = None
        if isinstance(bus, WatchedBus):
            bus.on_listen = self._someone_listens

    # --- what changed (callable from sync code, on any thread) ------------------------------

    def session_changed(self, session_id: str, *_: Any) -> None:
        if not (
            self._bus_listening()
            or any(self._subscribers.get(uri) for uri in session_uris(session_id))
        ):
            return
        dropped: str | None = None
        with self._lock:
            pending = self._pending_sessions
            if session_id in pending:  # coalesced; a wake-up is already requested
                del pending[session_id]  # (it moves to the newest, the last to be dropped)
                pending[session_id] = None
                return
            pending[session_id] = None
            if len(pending) > self.max_pending:
                dropped = next(iter(pending))
                del pending[dropped]
            wake = not self._wake_requested
            self._wake_requested = True
        if dropped is not None:
            log.debug(
                "over %d pending sessions: dropped the change of %s", self.max_pending, dropped
            )
        if wake:
            self._wake()

    def list_changed(self, *_: Any) -> None:
        with self._lock:
            self._pending_list = True
            wake = not self._wake_requested
            self._wake_requested = True
        if wake:
            self._wake()

    def remote_event(self, event: ServerEvent) -> None:
        """A change another replica made (pg_bus), for this replica's legacy connections (on
        the loop's thread; its 2026-07-28 listeners have it from the bus)."""
        if self._task_group is None:
            return
        if isinstance(event, ResourcesListChanged):
            for key, session in list(self._legacy.items()):
                self._outbox(key, session).add_list_changed()
        elif isinstance(event, ResourceUpdated):
            for key, session in list(self._subscribers.get(event.uri, {}).items()):
                self._outbox(key, session).add_updated(event.uri)

    def pending_changes(self) -> int:
        """Changes not yet handed to the bus and the connections' outboxes (sessions, plus one
        for a list change)."""
        with self._lock:
            return len(self._pending_sessions) + self._pending_list

    def pending_for(self, ctx_session: Any) -> int:
        """Notifications waiting in one legacy connection's outbox (0 for an unknown one)."""
        connection = getattr(ctx_session, "_connection", None)
        outbox = None if connection is None else self._outboxes.get(id(connection))
        return 0 if outbox is None else outbox.pending()

    def _bus_listening(self) -> bool:
        if self.bus is None:
            return False
        return not isinstance(self.bus, WatchedBus) or self.bus.listening()

    def _wake(self) -> None:
        if threading.get_ident() == self._loop_thread:
            self._set_wakeup()
            return
        call_soon = self._call_soon
        if call_soon is None:
            return  # not running: run() delivers what is pending when it starts
        try:
            call_soon(self._set_wakeup)
        except RuntimeError:  # the loop closed under us: nothing left to deliver to
            log.debug("change notification after the event loop closed", exc_info=True)

    def _set_wakeup(self) -> None:  # on the loop's thread
        if self._wakeup is not None:
            self._wakeup.set()

    # --- other processes' writes --------------------------------------------------------------

    def listening(self) -> bool:
        """Whether any change would reach anyone: a listener on the bus, a legacy connection."""
        return self._bus_listening() or bool(self._legacy) or bool(self._subscribers)

    def watched_sessions(self) -> set[str]:
        """The sessions some client subscribed to or listens for (on the loop's thread), as
        many as one look checks at most: their URIs are counted by the thousand."""
        uris: Iterable[str] = self._subscribers
        if isinstance(self.bus, WatchedBus):
            uris = itertools.chain(uris, self.bus.watched)
        found = (subscribed_session(uri) for uri in uris)
        limit = len(SESSION_URI_TAILS) * MAX_WATCHED
        return {session_id for session_id in itertools.islice(found, limit) if session_id}

    def _someone_listens(self) -> None:
        if self._listener_came is not None:
            self._listener_came.set()

    async def follow(self, watch: Watch, interval: float = FOLLOW_INTERVAL) -> None:
        """Notify what other processes write to the store, as this server's own writes are,
        until cancelled; run it in the server's task group. It looks every ``interval``
        seconds while anyone listens, and not at all while nobody does."""
        one_at_a_time = anyio.CapacityLimiter(1)
        # Said once while the file stays out of reach, not twice a second.
        outage = Outage(
            log, "looking for other processes' changes failed (their changes are not heard)"
        )
        try:
            try:  # the store as it is now, whose later changes are news
                await anyio.to_thread.run_sync(watch.rebase, limiter=one_at_a_time)
            except Exception as error:  # the first look tries again
                outage.failed(error)
            while True:
                if not self.listening():
                    self._listener_came = anyio.Event()
                    await self._listener_came.wait()
                    self._listener_came = None
                await anyio.sleep(interval)
                try:
                    # The first look after a while with nobody listening also tells what
                    # changed meanwhile (a page at most): better than losing what was written
                    # as the listener came.
                    found = None
                    # The watched sessions are gathered on this thread, from this loop's
                    # state: only once something was committed.
                    if await anyio.to_thread.run_sync(watch.committed, limiter=one_at_a_time):
                        found = await anyio.to_thread.run_sync(
                            watch.look, self.watched_sessions(), limiter=one_at_a_time
                        )
                except Exception as error:  # a database out of reach for a while
                    outage.failed(error)
                    continue
                outage.recovered()
                if found is None:
                    continue
                for session_id in found.sessions:
                    self.session_changed(session_id)
                if found.list_changed:
                    self.list_changed()
        finally:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(watch.close, limiter=one_at_a_time)

    # --- legacy connections (called on the loop's thread) -----------------------------------

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
            self._someone_listens()
        if key not in self._hooked:
            self._hooked.add(key)
            connection.exit_stack.callback(self._closed, key)

    def subscribe(self, uri: str, ctx_session: Any, protocol_version: str | None) -> None:
        self.remember(ctx_session, protocol_version)
        connection = getattr(ctx_session, "_connection", None)
        if connection is None:
            return
        key = id(connection)
        held_uris = self._held.get(key, set())
        if uri not in held_uris and self.max_subscriptions:
            held = len(held_uris)
            if held >= self.max_subscriptions:
                raise SubscriptionLimit(
                    f"too many subscriptions: this client holds {held}, the limit is "
                    f"{self.max_subscriptions}; unsubscribe from some; the server's operator can "
                    "raise it (MCP_AGENT_MAX_SUBSCRIPTIONS)"
                )
        self._subscribers.setdefault(uri, {})[key] = ctx_session
        self._held.setdefault(key, set()).add(uri)

    def subscriptions_of(self, ctx_session: Any) -> int:
        """How many resources one legacy connection is subscribed to."""
        return len(self._held.get(id(getattr(ctx_session, "_connection", None)), ()))

    def subscribed_sessions_of(self, ctx_session: Any) -> set[str]:
        """The sessions whose resources one legacy connection is subscribed to."""
        key = id(getattr(ctx_session, "_connection", None))
        found = (subscribed_session(uri) for uri in self._held.get(key, ()))
        return {session_id for session_id in found if session_id is not None}

    def unsubscribe_sessions(self, ctx_session: Any, session_ids: set[str]) -> None:
        """Let go of one connection's subscriptions to the resources of ``session_ids``."""
        for session_id in session_ids:
            for uri in session_uris(session_id):
                self.unsubscribe(uri, ctx_session)

    def unsubscribe(self, uri: str, ctx_session: Any) -> None:
        connection = getattr(ctx_session, "_connection", None)
        if connection is None:
            return
        key = id(connection)
        subscribers = self._subscribers.get(uri)
        if subscribers is not None:
            subscribers.pop(key, None)
            if not subscribers:
                del self._subscribers[uri]
        held = self._held.get(key)
        if held is not None:
            held.discard(uri)
            if not held:
                del self._held[key]

    def _closed(self, key: int) -> None:
        self._hooked.discard(key)
        self._forget(key)

    def _forget(self, key: int) -> None:
        self._legacy.pop(key, None)
        for uri in self._held.pop(key, ()):
            subscribers = self._subscribers.get(uri)
            if subscribers is not None:
                subscribers.pop(key, None)
                if not subscribers:
                    del self._subscribers[uri]
        outbox = self._outboxes.pop(key, None)
        if outbox is not None:
            outbox.close()

    def _drop(self, outbox: _Outbox, what: str) -> None:
        if self._outboxes.get(outbox.key) is not outbox:
            return
        log.warning(
            "legacy connection dropped from notifications: sending %s took over %s s",
            what,
            self.send_timeout,
        )
        self._forget(outbox.key)

    # --- delivery ---------------------------------------------------------------------------

    async def run(self) -> None:
        """Deliver changes until cancelled; run it in the server's task group."""
        if self._wakeup is not None:
            raise RuntimeError("Notifier.run() is already running")
        call_soon = _call_soon()
        async with anyio.create_task_group() as task_group:
            self._task_group = task_group
            self._wakeup = anyio.Event()
            self._wakeup.set()  # deliver whatever was reported before we started
            self._loop_thread = threading.get_ident()
            self._call_soon = call_soon
            try:
                while True:
                    await self._wakeup.wait()
                    self._wakeup = anyio.Event()
                    await self._dispatch()
            finally:
                self._call_soon = None
                self._loop_thread = None
                self._wakeup = None
                self._task_group = None
                for outbox in self._outboxes.values():
                    outbox.close()
                self._outboxes.clear()
                task_group.cancel_scope.cancel()

    async def _dispatch(self) -> None:
        with self._lock:
            sessions = list(self._pending_sessions)
            self._pending_sessions.clear()
            list_changed = self._pending_list
            self._pending_list = False
            self._wake_requested = False
        if list_changed:
            await self._publish(ResourcesListChanged())
            for key, session in list(self._legacy.items()):
                self._outbox(key, session).add_list_changed()
        for session_id in sessions:
            for uri in session_uris(session_id):
                await self._publish(ResourceUpdated(uri=uri))
                # no await from here to the end of the loop: the subscribers stay as read
                for key, session in list(self._subscribers.get(uri, {}).items()):
                    self._outbox(key, session).add_updated(uri)
            # let the outboxes send as we go (a burst must not overflow a healthy one's)
            await anyio.lowlevel.checkpoint()

    async def _publish(self, event: ServerEvent) -> None:
        if self.bus is None or not self._bus_listening():
            return
        try:
            await self.bus.publish(event)
        except Exception:  # a broken bus must not stop the legacy connections' notifications
            log.debug("publishing %r failed", event, exc_info=True)

    def _outbox(self, key: int, session: Any) -> _Outbox:
        outbox = self._outboxes.get(key)
        if outbox is None:
            outbox = self._outboxes[key] = _Outbox(self, key, session)
            assert self._task_group is not None
            self._task_group.start_soon(outbox.run)
        return outbox


class _Outbox:
    """One legacy connection's pending notifications and the task that sends them."""

    def __init__(self, notifier: Notifier, key: int, session: Any) -> None:
        self.notifier = notifier
        self.key = key
        self.session = session
        self.uris: dict[str, None] = {}  # insertion-ordered: oldest first
        self.list_changed = False
        self.closed = False
        self.wakeup = anyio.Event()
        self.scope = anyio.CancelScope()

    def pending(self) -> int:
        return len(self.uris) + self.list_changed

    def add_list_changed(self) -> None:
        self.list_changed = True
        self.wakeup.set()

    def add_updated(self, uri: str) -> None:
        if uri in self.uris:
            return
        self.uris[uri] = None
        if len(self.uris) > self.notifier.subscriber_pending:
            dropped = next(iter(self.uris))
            del self.uris[dropped]
            log.debug("legacy connection's outbox full: dropped the update of %s", dropped)
        self.wakeup.set()

    def close(self) -> None:
        self.closed = True
        self.scope.cancel()

    async def run(self) -> None:
        with self.scope:
            while not self.closed:
                await self.wakeup.wait()
                self.wakeup = anyio.Event()
                while not self.closed and (self.list_changed or self.uris):
                    if self.list_changed:
                        self.list_changed = False
                        what, uri = "resources/list_changed", None
                    else:
                        uri = next(iter(self.uris))
                        del self.uris[uri]
                        what = f"resources/updated {uri}"
                    with anyio.move_on_after(self.notifier.send_timeout) as timer:
                        try:
                            if uri is None:
                                await self.session.send_resource_list_changed()
                            else:
                                await self.session.send_resource_updated(uri)
                        except Exception:  # a closed connection: its exit_stack forgets it
                            log.debug("legacy notification %s failed", what, exc_info=True)
                    if timer.cancelled_caught:
                        self.notifier._drop(self, what)
                        return


def _call_soon() -> Callable[[Callable[[], None]], object]:
    """A way to run a callback on this event loop from another thread without waiting for it:
    the thread may hold a lock the loop's thread is waiting for (a database connection's)."""
    try:
        return asyncio.get_running_loop().call_soon_threadsafe
    except RuntimeError:  # not asyncio
        pass
    token = anyio.lowlevel.current_token()  # anyio >= 4.11
    run_sync_soon = getattr(token.native_token, "run_sync_soon", None)  # trio's token
    if callable(run_sync_soon):
        return run_sync_soon

    def blocking(callback: Callable[[], None]) -> object:
        return anyio.from_thread.run_sync(callback, token=token)

    return blocking
