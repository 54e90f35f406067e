"""The change notifier: a stuck legacy subscriber delays nobody and is dropped, repeated
changes coalesce into a bounded pending set, and producers may call from any thread.

The subscribers here are fakes with what ``Notifier`` reads of an SDK server session: the
two ``send_resource_*`` coroutines and a ``_connection`` with an ``exit_stack``."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import AsyncIterator, Callable, Iterable
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pytest
from mcp.server.subscriptions import ResourcesListChanged, ResourceUpdated, ServerEvent

from mcp_agent.server.notify import Notifier, WatchedBus, session_uris
from mcp_agent.sessions import SqliteSessionRepo
from mcp_agent.sessions.sqlite.database import SqliteDatabase
from mcp_agent.sessions.sqlite.watch import DatabaseWatch, ForeignChanges

pytestmark = pytest.mark.anyio

LEGACY = "2025-06-18"
LIMIT_S = 20  # every wait here ends by itself well before this


class CountingExitStack(contextlib.AsyncExitStack):
    def __init__(self) -> None:
        super().__init__()
        self.callbacks = 0

    def callback(self, callback: Any, /, *args: Any, **kwargs: Any) -> Any:
        self.callbacks += 1
        return super().callback(callback, *args, **kwargs)


class FakeConnection:
    def __init__(self) -> None:
        self.exit_stack = CountingExitStack()


class FakeSession:
    """A legacy connection's session. ``gate``: while not set, each send waits for it;
    ``stuck``: each send waits forever (until cancelled)."""

    def __init__(self, *, gate: anyio.Event | None = None, stuck: bool = False) -> None:
        self._connection = FakeConnection()
        self.gate = gate
        self.stuck = stuck
        self.updated: list[str] = []
        self.list_changes = 0
        self.started = 0  # sends begun
        self.cancelled = 0  # sends that never completed

    async def _send(self) -> None:
        self.started += 1
        try:
            if self.stuck:
                await anyio.sleep_forever()
            if self.gate is not None:
                await self.gate.wait()
        except BaseException:
            self.cancelled += 1
            raise

    async def send_resource_updated(self, uri: str) -> None:
        await self._send()
        self.updated.append(uri)

    async def send_resource_list_changed(self) -> None:
        await self._send()
        self.list_changes += 1


async def wait_until(condition: Callable[[], bool]) -> None:
    with anyio.fail_after(LIMIT_S):
        while not condition():
            await anyio.sleep(0.005)


@contextlib.asynccontextmanager
async def running(notifier: Notifier) -> AsyncIterator[Notifier]:
    async with anyio.create_task_group() as task_group:
        task_group.start_soon(notifier.run)
        await wait_until(lambda: notifier._loop_thread is not None)
        yield notifier
        task_group.cancel_scope.cancel()


def subscribe_all(notifier: Notifier, session: FakeSession, *session_ids: str) -> None:
    for session_id in session_ids:
        notifier.subscribe(f"session://{session_id}", session, LEGACY)


def remembered(notifier: Notifier, session: FakeSession) -> bool:
    key = id(session._connection)
    return key in notifier._legacy or any(key in s for s in notifier._subscribers.values())


# --- (a) a stuck subscriber ------------------------------------------------------------------


async def test_a_stuck_subscriber_does_not_delay_a_healthy_one() -> None:
    # A long send timeout: the stuck one stays stuck (and subscribed) for the whole test.
    notifier = Notifier(None, send_timeout=600)
    gate = anyio.Event()
    stuck, healthy = FakeSession(gate=gate), FakeSession()
    ids = [f"s{i}" for i in range(50)]
    subscribe_all(notifier, stuck, *ids)
    subscribe_all(notifier, healthy, *ids)
    async with running(notifier):
        for session_id in ids:
            notifier.session_changed(session_id)
        await wait_until(lambda: len(healthy.updated) == 50)
        assert healthy.updated == [f"session://{i}" for i in ids]
        # ... while the stuck one is still in its first send, the rest waiting in its outbox
        assert stuck.started == 1 and stuck.updated == []
        assert remembered(notifier, stuck)
        assert notifier.pending_for(stuck) == 49 and notifier.pending_for(healthy) == 0
        notifier.list_changed()
        await wait_until(lambda: healthy.list_changes == 1)
        # Released, the once-stuck one gets everything it was owed, in its own time.
        gate.set()
        await wait_until(lambda: len(stuck.updated) == 50 and stuck.list_changes == 1)
        assert sorted(stuck.updated) == sorted(healthy.updated)


async def test_a_subscriber_whose_send_never_completes_is_dropped(
    caplog: pytest.LogCaptureFixture,
) -> None:
    notifier = Notifier(None, send_timeout=0.05)
    stuck, healthy = FakeSession(stuck=True), FakeSession()
    for session in (stuck, healthy):
        notifier.remember(session, LEGACY)
        subscribe_all(notifier, session, "a", "b")
    caplog.set_level(logging.DEBUG, logger="mcp_agent.server.notify")
    async with running(notifier):
        notifier.session_changed("a")
        notifier.session_changed("b")
        await wait_until(lambda: not remembered(notifier, stuck))
        assert stuck.started == 1 and stuck.cancelled == 1  # its send was abandoned
        assert notifier.pending_for(stuck) == 0 and id(stuck._connection) not in notifier._outboxes
        await wait_until(lambda: len(healthy.updated) == 2)
        # Forgotten for list changes and every URI: nothing more is tried on it.
        notifier.list_changed()
        notifier.session_changed("a")
        await wait_until(lambda: healthy.list_changes == 1 and len(healthy.updated) == 3)
        assert stuck.started == 1
    dropped = [r for r in caplog.records if "dropped from notifications" in r.getMessage()]
    assert len(dropped) == 1 and dropped[0].levelno == logging.WARNING


async def test_a_dropped_connection_that_comes_back_is_served_again() -> None:
    notifier = Notifier(None, send_timeout=0.05)
    session = FakeSession(stuck=True)
    notifier.remember(session, LEGACY)
    async with running(notifier):
        notifier.list_changed()
        await wait_until(lambda: not remembered(notifier, session))
        session.stuck = False
        notifier.remember(session, LEGACY)  # its next request
        notifier.list_changed()
        await wait_until(lambda: session.list_changes == 1)
    # The exit_stack callback was registered once, and closing the connection forgets it.
    assert session._connection.exit_stack.callbacks == 1
    await session._connection.exit_stack.aclose()
    assert not remembered(notifier, session) and not notifier._hooked


# --- (b) coalescing and bounds ---------------------------------------------------------------


async def test_repeated_updates_to_one_session_coalesce() -> None:
    notifier = Notifier(None, send_timeout=600)
    gate = anyio.Event()
    session = FakeSession(gate=gate)
    uris = session_uris("s1")
    for uri in uris:
        notifier.subscribe(uri, session, LEGACY)
    most_pending = most_queued = 0
    async with running(notifier):
        notifier.session_changed("s1")
        await wait_until(lambda: session.started == 1)  # delivery blocked from here on
        for i in range(1000):
            notifier.session_changed("s1")
            if i % 10 == 0:
                await anyio.lowlevel.checkpoint()  # the dispatcher hands changes on meanwhile
            most_queued = max(most_queued, notifier.pending_changes())
            most_pending = max(most_pending, notifier.pending_for(session))
        await wait_until(lambda: notifier.pending_changes() == 0)
        assert most_queued <= 1 and most_pending <= len(uris)
        assert notifier.pending_for(session) == len(uris)
        assert session.started == 1
        gate.set()
        await wait_until(lambda: notifier.pending_for(session) == 0 and not session.cancelled)
        await wait_until(lambda: len(session.updated) == 1 + len(uris))
    # 1,001 changes of 4 URIs each: one send in flight, then each URI once more.
    assert session.updated[0] == uris[0] and sorted(session.updated[1:]) == sorted(uris)


async def test_pending_sessions_are_bounded_and_the_newest_kept() -> None:
    bus = WatchedBus()
    events: list[ServerEvent] = []
    bus.subscribe(events.append)
    notifier = Notifier(bus, max_pending=100)
    # Before run(): changes wait (bounded), nothing crashes.
    notifier.session_changed("hot")
    for i in range(1000):
        notifier.session_changed(f"s{i}")
        if i % 50 == 0:
            notifier.session_changed("hot")  # a change again: the newest once more
    notifier.list_changed()
    notifier.list_changed()
    assert notifier.pending_changes() == 100 + 1
    async with running(notifier):
        await wait_until(lambda: len(events) == 1 + 100 * 4)
        assert notifier.pending_changes() == 0
    assert sum(isinstance(e, ResourcesListChanged) for e in events) == 1
    updated = {e.uri for e in events if isinstance(e, ResourceUpdated)}
    kept = ["hot", *(f"s{i}" for i in range(901, 1000))]
    assert updated == {uri for session_id in kept for uri in session_uris(session_id)}


async def test_a_stuck_subscribers_outbox_is_bounded() -> None:
    notifier = Notifier(None, send_timeout=600, subscriber_pending=8)
    gate = anyio.Event()
    stuck, healthy = FakeSession(gate=gate), FakeSession()
    ids = [f"s{i}" for i in range(100)]
    subscribe_all(notifier, stuck, *ids)
    subscribe_all(notifier, healthy, *ids)
    async with running(notifier):
        for n, session_id in enumerate(ids, 1):
            notifier.session_changed(session_id)
            await wait_until(lambda: len(healthy.updated) == n)  # noqa: B023
            assert notifier.pending_for(stuck) <= 8
        assert notifier.pending_for(stuck) == 8
        gate.set()
        await wait_until(lambda: notifier.pending_for(stuck) == 0 and len(stuck.updated) == 9)
    # The one in flight when it stuck, then the newest 8.
    assert stuck.updated == ["session://s0"] + [f"session://s{i}" for i in range(92, 100)]


async def test_appends_with_nobody_listening_queue_nothing() -> None:
    notifier = Notifier(WatchedBus())
    notifier.session_changed("s1")
    assert notifier.pending_changes() == 0
    notifier.subscribe("session://s1/tree", FakeSession(), LEGACY)
    notifier.session_changed("s1")
    assert notifier.pending_changes() == 1


# --- (c) producers on other threads ----------------------------------------------------------


async def test_changes_from_plain_threads_are_all_delivered() -> None:
    bus = WatchedBus()
    events: list[ServerEvent] = []
    bus.subscribe(events.append)
    notifier = Notifier(bus)
    healthy = FakeSession()
    ids = [[f"t{t}-{i}" for i in range(100)] for t in range(4)]
    for thread_ids in ids:
        subscribe_all(notifier, healthy, *thread_ids)
    notifier.remember(healthy, LEGACY)
    errors: list[BaseException] = []
    start = threading.Barrier(4)

    def produce(session_ids: list[str]) -> None:
        try:
            start.wait(timeout=LIMIT_S)
            for session_id in session_ids:
                notifier.session_changed(session_id)
                notifier.list_changed()
        except BaseException as error:  # reported to the test below
            errors.append(error)

    async with running(notifier):
        threads = [threading.Thread(target=produce, args=(i,), daemon=True) for i in ids]
        for thread in threads:
            thread.start()
        # Joined while the loop's thread blocks: a producer never waits for the event loop
        # (it may hold a lock the loop's thread wants).
        for thread in threads:
            thread.join(timeout=LIMIT_S)
        assert not any(thread.is_alive() for thread in threads) and errors == []
        everything = {f"session://{i}" for thread_ids in ids for i in thread_ids}
        every_uri = {uri for t in ids for i in t for uri in session_uris(i)}

        def published() -> set[str]:
            return {e.uri for e in events if isinstance(e, ResourceUpdated)}

        # Both, waited for together: a session's other resources are published after its
        # subscriber may already have had its own update. (Should they never match, the
        # asserts below show what differs.)
        with contextlib.suppress(TimeoutError):
            await wait_until(
                lambda: set(healthy.updated) == everything and published() == every_uri
            )
        assert set(healthy.updated) == everything
        assert published() == every_uri
        assert len(healthy.updated) == len(everything)  # distinct sessions: none coalesced
        assert healthy.list_changes >= 1


async def test_changes_from_worker_threads_are_all_delivered() -> None:
    notifier = Notifier(None)
    healthy = FakeSession()
    ids = [[f"w{t}-{i}" for i in range(50)] for t in range(4)]
    for thread_ids in ids:
        subscribe_all(notifier, healthy, *thread_ids)

    def produce(session_ids: list[str]) -> None:
        for session_id in session_ids:
            notifier.session_changed(session_id)

    async with running(notifier):
        async with anyio.create_task_group() as workers:
            for thread_ids in ids:
                workers.start_soon(anyio.to_thread.run_sync, produce, thread_ids)
        # the workers all returned without raising
        everything = {f"session://{i}" for thread_ids in ids for i in thread_ids}
        await wait_until(lambda: set(healthy.updated) == everything)
        assert len(healthy.updated) == len(everything)


async def test_a_thread_reporting_after_run_stopped_does_not_crash() -> None:
    notifier = Notifier(None)
    session = FakeSession()
    subscribe_all(notifier, session, "late")
    async with running(notifier):
        pass
    thread = threading.Thread(target=notifier.session_changed, args=("late",))
    thread.start()
    await anyio.to_thread.run_sync(thread.join)
    assert notifier.pending_changes() == 1  # kept for the next run()
    async with running(notifier):
        await wait_until(lambda: session.updated == ["session://late"])


class CountedWatch(DatabaseWatch):
    """The SQLite file's watch, counting its looks."""

    def __init__(self, database: SqliteDatabase) -> None:
        super().__init__(database)
        self.looks = 0

    def look(self, watched: Iterable[str] = ()) -> ForeignChanges | None:
        self.looks += 1
        return super().look(watched)


async def test_the_file_is_looked_at_only_while_someone_listens(tmp_path: Path) -> None:
    """Another process's write (a second repo on the file) reaches a listener of the bus; with
    nobody listening, the follower waits for one and looks at nothing. What was written while
    nobody listened is told at the first look (a listener that came as it was written must
    not miss it)."""
    bus = WatchedBus()
    notifier = Notifier(bus)
    with (
        SqliteSessionRepo(tmp_path / "s.db") as mine,
        SqliteSessionRepo(tmp_path / "s.db") as other,
    ):
        made = mine.create()
        updated = ResourceUpdated(uri=f"session://{made.id}")
        watch = CountedWatch(mine.database)
        heard: list[ServerEvent] = []
        async with anyio.create_task_group() as group:
            group.start_soon(notifier.run)
            group.start_soon(notifier.follow, watch, 0.01)
            await wait_until(lambda: notifier._listener_came is not None)
            await anyio.to_thread.run_sync(lambda: other.open(made.id).set_name("elsewhere"))
            assert watch.looks == 0
            stop = bus.subscribe(heard.append)
            await wait_until(lambda: heard.count(updated) == 1)
            await anyio.to_thread.run_sync(lambda: other.open(made.id).set_name("again"))
            await wait_until(lambda: heard.count(updated) == 2)
            stop()
            await wait_until(lambda: notifier._listener_came is not None)
            looks = watch.looks
            await anyio.to_thread.run_sync(lambda: other.open(made.id).set_name("unheard"))
            await anyio.sleep(0.1)  # ten intervals of a follower that would look
            assert watch.looks == looks
            group.cancel_scope.cancel()
    assert heard.count(updated) == 2
