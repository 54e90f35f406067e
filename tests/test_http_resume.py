"""Resumability over 2025 streamable HTTP: a client whose event stream drops reconnects with
Last-Event-ID and gets what it missed (``server/event_store.py``), from a real server process,
by hand and through real clients whose connections a proxy cuts."""

from __future__ import annotations

import functools
import json
import re
import shutil
import socket
import subprocess
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import httpx
import pytest
from anyio.abc import SocketStream
from anyio.streams.text import TextReceiveStream
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.message import ServerMessageMetadata, SessionMessage
from mcp_support import call, poll, posted_answer
from mcp_types import JSONRPCError, JSONRPCNotification, JSONRPCRequest, JSONRPCResponse
from slow_support import (  # noqa: F401  (the slow_server fixtures)
    NODE,
    PEERS,
    ROOT,
    needs_node,
    shared_slow_server_fixture,
    slow_server,
    slow_server_fixture,
    ts_agent_run,
)

from mcp_agent.server.event_store import (
    ANSWERED_KEEP_S,
    GET_STREAM_KEY,
    STREAM_CHARS,
    STREAM_EVENTS,
    EventBudget,
    SessionEvents,
    event_id_parts,
    not_kept_message,
)
from mcp_agent.server.resumable import ResumableTransport, _Streams

HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
# A run of 30 events, a fifth of a second apart, asked for with progress (request id 2).
SLOW_RUN = {
    "jsonrpc": "2.0",
    "id": 2,
    "method": "tools/call",
    "params": {
        "name": "agent_run",
        "arguments": {"prompt": "slow 30"},
        "_meta": {"progressToken": "p"},
    },
}


def note(text: str) -> JSONRPCNotification:
    return JSONRPCNotification(jsonrpc="2.0", method="notifications/message", params={"t": text})


def answer(request_id: int) -> JSONRPCResponse:
    return JSONRPCResponse(jsonrpc="2.0", id=request_id, result={})


# --- the store --------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_a_replay_gives_the_events_of_its_stream_after_the_id() -> None:
    store = SessionEvents(EventBudget())
    first = await store.store_event("1", None)  # the priming event
    ids = [await store.store_event("1", note(f"a{i}")) for i in range(3)]
    other = await store.store_event("2", note("other stream"))
    done = await store.store_event("1", answer(1))
    sent: list[tuple[str | None, Any]] = []

    async def collect(event: Any) -> None:
        sent.append((event.event_id, event.message))

    assert await store.replay_events_after(ids[0], collect) == "1"
    assert [event_id for event_id, _ in sent] == [ids[1], ids[2], done]
    assert isinstance(sent[-1][1], JSONRPCResponse)
    sent.clear()
    # From the priming event: every event of the stream, and nothing of another.
    assert await store.replay_events_after(first, collect) == "1"
    assert other not in [event_id for event_id, _ in sent] and len(sent) == 4
    # An id of no stream of this session's, or no id of ours at all, finds nothing.
    for unknown in ("77.1", "x", "1", "1.x", ""):
        assert store.after(unknown) is None
    # The session's GET stream is known before anything is sent on it.
    found = store.after("0.5")
    assert found is not None and found[0].key == GET_STREAM_KEY and found[1] == []


def test_an_event_id_is_ours_only_in_ascii_digits_of_a_bounded_length() -> None:
    assert event_id_parts("3.41") == (3, 41)
    # A header's Latin-1 text: '²' is a digit to str.isdigit and not to int(), and a number
    # of 5,000 digits is past int()'s; each was a 500 and a traceback, now no id of ours.
    for other in ("\u00b2.1", "1.\u00b2", "1." + "9" * 5000, "1.2.3", "-1.2", " 1.2", "1.", ".1"):
        assert event_id_parts(other) is None


@pytest.mark.anyio
async def test_a_request_id_used_again_starts_a_stream_of_its_own() -> None:
    store = SessionEvents(EventBudget())
    await store.store_event("1", note("old"))
    old_end = await store.store_event("1", answer(1))
    new = await store.store_event("1", note("new"))
    found = store.after(new)
    assert found is not None and found[1] == []
    old = store.after(old_end)
    assert old is None or old[0] is not found[0]


@pytest.mark.anyio
async def test_a_requests_events_go_a_while_after_its_answer() -> None:
    now = [0.0]
    budget = EventBudget(clock=lambda: now[0])
    store = SessionEvents(budget)
    answered = await store.store_event("1", note("progress"))
    await store.store_event("1", answer(1))
    waiting = await store.store_event("2", note("still running"))
    now[0] += ANSWERED_KEEP_S - 1
    assert store.after(answered) is not None and store.after(waiting) is not None
    now[0] += 2
    assert store.after(answered) is None  # gone: a late client is told so
    found = store.after(waiting)  # a request still under way keeps its events
    assert found is not None and found[0].key == "2"
    assert budget.events == 1
    # The refusal a late client gets says how long they are kept, as they are.
    said = not_kept_message(answered)
    assert f"{ANSWERED_KEEP_S:g} s after its answer" in said and "session ends" not in said


@pytest.mark.anyio
async def test_answered_requests_events_go_on_time_without_their_session_being_used() -> None:
    """They went only when their session next stored or replayed an event: a client that got
    its answers and went quiet held them (within the bounds) until its session ended."""
    budget = EventBudget(keep_s=0.05)
    store = SessionEvents(budget)
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(budget.expire_answered)
        await store.store_event("1", note("progress"))
        await store.store_event("1", answer(1))
        await store.store_event("2", note("still running"))
        with anyio.fail_after(5):
            while budget.events > 1:  # the session is not touched meanwhile
                await anyio.sleep(0.01)
        # One answered later goes too (the task, with none to wait for, waits for one).
        await store.store_event("2", answer(2))
        with anyio.fail_after(5):
            while budget.events:
                await anyio.sleep(0.01)
        tasks.cancel_scope.cancel()
    assert budget.chars == 0


@pytest.mark.anyio
async def test_a_stream_whose_answer_is_too_large_to_keep_is_let_go_of_at_once() -> None:
    """An answer over a stream's bound is not kept; its stream's record stayed (empty, for a
    client that opened no priming event) until the session ended, or kept the rest of its
    events, whose replay ends without the answer and only sends its client round again."""
    budget = EventBudget()
    store = SessionEvents(budget)
    huge = {"t": "x" * STREAM_CHARS}
    alone = await store.store_event("1", JSONRPCResponse(jsonrpc="2.0", id=1, result=huge))
    assert store.after(alone) is None
    primed = await store.store_event("2", None)
    await store.store_event("2", note("progress"))
    await store.store_event("2", JSONRPCResponse(jsonrpc="2.0", id=2, result=huge))
    assert store.after(primed) is None
    assert budget.events == 0 and budget.chars == 0


@pytest.mark.anyio
async def test_a_call_is_under_way_until_its_answer_is_stored_or_its_session_ends() -> None:
    store = SessionEvents(EventBudget())
    answered: list[str] = []
    for key in ("2", "3", "4"):
        store.when_answered(key, functools.partial(answered.append, key))
    store.when_answered("4", None)  # (refused before it was passed on: no answer comes)
    await store.store_event("2", note("on its way"))
    assert answered == []
    await store.store_event("2", answer(2))
    assert answered == ["2"]
    store.close()
    assert answered == ["2", "3"]


@pytest.mark.anyio
async def test_requests_to_the_client_are_unanswered_until_answered_or_given_up() -> None:
    store = SessionEvents(EventBudget())

    def ask(request_id: int) -> JSONRPCRequest:
        return JSONRPCRequest(jsonrpc="2.0", id=request_id, method="sampling/createMessage")

    for request_id, stream in ((1, GET_STREAM_KEY), (2, GET_STREAM_KEY), (3, "7")):
        await store.store_event(stream, ask(request_id))
    assert [asked.id for asked, _ in store.unanswered(GET_STREAM_KEY)] == [1, 2]
    # The client's answer (a POST) ends the wait; so does the server's giving up, which
    # the SDK tells the client: given up, it is not sent again.
    store.answered_in(json.dumps({"jsonrpc": "2.0", "id": 1, "result": {}}).encode())
    given_up = {"requestId": 2, "reason": "caller cancelled"}
    cancel = JSONRPCNotification(jsonrpc="2.0", method="notifications/cancelled", params=given_up)
    await store.store_event(GET_STREAM_KEY, cancel)
    assert store.unanswered(GET_STREAM_KEY) == []
    assert [asked.id for asked in store.take_unanswered("7")] == [3]
    assert store.unanswered("7") == []


@pytest.mark.anyio
async def test_a_stream_keeps_its_newest_events_within_its_bounds() -> None:
    budget = EventBudget()
    store = SessionEvents(budget)
    first = await store.store_event("1", note("0"))
    for i in range(STREAM_EVENTS + 10):
        await store.store_event("1", note(str(i)))
    found = store.after(first)
    assert found is not None
    kept = found[1]
    assert len(kept) == STREAM_EVENTS == budget.events
    assert json.loads(kept[-1][1])["params"]["t"] == str(STREAM_EVENTS + 9)
    # Characters: a few large events push the older ones out.
    big = "x" * (STREAM_CHARS // 3)
    for _ in range(4):
        await store.store_event("1", note(big))
    found = store.after(first)
    assert found is not None and 0 < sum(len(text) for _, text in found[1]) <= STREAM_CHARS
    assert budget.chars <= STREAM_CHARS
    # One event larger than a stream may hold is not kept (nor does it push the rest out).
    before = budget.events
    await store.store_event("1", note("y" * STREAM_CHARS))
    assert budget.events == before


@pytest.mark.anyio
async def test_all_sessions_together_keep_within_the_total_and_the_oldest_goes_first() -> None:
    budget = EventBudget(max_events=10, max_chars=10_000)
    first, second = SessionEvents(budget), SessionEvents(budget)
    start = await first.store_event("1", note("first"))
    for i in range(6):
        await first.store_event("1", note(f"f{i}"))
    other = await second.store_event("1", None)
    for i in range(6):
        await second.store_event("1", note(f"s{i}"))
    assert budget.events == 10
    found = first.after(start)
    assert found is not None and len(found[1]) == 3  # the first session's oldest went
    found = second.after(other)
    assert found is not None and len(found[1]) == 6
    # Characters in all too.
    await second.store_event("2", note("z" * 9_000))
    assert budget.chars <= 10_000
    # A session that ends lets go of all it kept.
    first.close()
    second.close()
    assert budget.events == 0 and budget.chars == 0


# --- a real server ----------------------------------------------------------------------------


def sse_events(lines: Iterator[str]) -> Iterator[dict[str, str]]:
    event: dict[str, str] = {}
    for line in lines:
        if not line:
            if event:
                yield event
            event = {}
            continue
        name, _, value = line.partition(":")
        event[name] = value.removeprefix(" ")
    if event:
        yield event


def test_a_dropped_stream_resumes_with_every_event_once_and_ends_with_the_answer(
    slow_server: str,
) -> None:
    with httpx.Client(timeout=30) as http:
        session = open_session(http, slow_server)
        call = SLOW_RUN
        seen: list[dict[str, Any]] = []
        with http.stream("POST", slow_server, json=call, headers=session) as stream:
            events = sse_events(stream.iter_lines())
            priming = next(events)
            assert priming["data"] == "" and priming["retry"] == "1000"
            last = priming["id"]
            for event in events:
                seen.append(json.loads(event["data"]))
                last = event["id"]
                if len(seen) == 3:
                    break  # the connection drops mid-run
        resume = {**session, "Accept": "text/event-stream", "last-event-id": last}
        with http.stream("GET", slow_server, headers=resume) as stream:
            assert stream.status_code == 200
            # The stream ends once it has sent the answer.
            seen += [json.loads(e["data"]) for e in sse_events(stream.iter_lines())]
        assert seen[-1]["id"] == 2 and not seen[-1]["result"]["isError"]
        # Each event's number, once each and in order (a beat while nothing happens, a
        # fraction, is not an event).
        progress = [m["params"]["progress"] for m in seen if m.get("method")]
        progress = [p for p in progress if p == int(p)]
        assert progress == list(range(1, len(progress) + 1))
        assert seen[-1]["result"]["structuredContent"]["events"] == len(progress)
        # Asked again, once the run has ended: the same events, and the stream ends.
        with http.stream("GET", slow_server, headers=resume) as stream:
            assert stream.status_code == 200
            again = [json.loads(e["data"]) for e in sse_events(stream.iter_lines())]
        assert again == seen[3:]
        # An id of no stream of this session's is refused, saying so.
        unknown = http.get(slow_server, headers={**resume, "last-event-id": "99.1"})
        assert unknown.status_code == 400
        said = unknown.json()["error"]["message"]
        # It says how long a request's events are kept (it said "until the session ends").
        assert "names no event stream" in said and "60 s after its answer" in said, said


def test_a_client_back_before_the_server_saw_its_stream_drop_gets_the_rest_of_it(
    slow_server: str,
) -> None:
    """A client whose connection dropped unseen (no word of it reached the server: a network
    that lost it, a proxy's cut) comes back with Last-Event-ID while the server still sends
    on the old stream. Its resumed stream ended after what was kept so far, without the
    answer, and the client came back each second until the server saw the drop; now the
    resumed stream takes the old one's place at once."""
    with httpx.Client(timeout=30) as http:
        session = open_session(http, slow_server)
        call = SLOW_RUN
        seen: list[dict[str, Any]] = []
        with http.stream("POST", slow_server, json=call, headers=session) as old:
            lines = old.iter_lines()
            events = sse_events(lines)
            last = next(events)["id"]
            for event in events:
                seen.append(json.loads(event["data"]))
                last = event["id"]
                if len(seen) == 3:
                    break
            # The old connection stays open, unread: to the server nothing is wrong with it.
            resume = {**session, "Accept": "text/event-stream", "last-event-id": last}
            with http.stream("GET", slow_server, headers=resume) as stream:
                # (Pings keep a stream that never gets its answer open: a bound on them.)
                for pings, event in enumerate(e for e in sse_events(stream.iter_lines())):
                    assert pings < 100, "the resumed stream never got its answer"
                    if "data" in event:  # (not a ping)
                        seen.append(json.loads(event["data"]))
            # The old stream was ended by the server, not left to be sent on.
            for _ in lines:
                pass
    assert seen[-1].get("id") == 2 and not seen[-1]["result"]["isError"], seen[-1]
    progress = [m["params"]["progress"] for m in seen if m.get("method")]
    progress = [p for p in progress if p == int(p)]
    assert progress == list(range(1, len(progress) + 1))
    assert seen[-1]["result"]["structuredContent"]["events"] == len(progress)


class CuttingProxy:
    """A TCP proxy in front of a server whose connections ``cut`` drops at once, as a flaky
    network does."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.scopes: set[anyio.CancelScope] = set()
        self.cuts = 0

    async def handle(self, client: SocketStream) -> None:
        with anyio.CancelScope() as scope:
            self.scopes.add(scope)
            try:
                upstream = await anyio.connect_tcp("127.0.0.1", self.target_port)
                async with client, upstream, anyio.create_task_group() as pumps:
                    pumps.start_soon(self._pump, client, upstream)
                    pumps.start_soon(self._pump, upstream, client)
            finally:
                self.scopes.discard(scope)

    @staticmethod
    async def _pump(source: SocketStream, sink: SocketStream) -> None:
        try:
            async for data in source:
                await sink.send(data)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            pass
        await sink.send_eof()

    def cut(self) -> None:
        self.cuts += 1
        for scope in list(self.scopes):
            scope.cancel()


@asynccontextmanager
async def cutting_proxy(url: str) -> AsyncIterator[tuple[CuttingProxy, str]]:
    port = int(url.rsplit(":", 1)[1].split("/", 1)[0])
    proxy = CuttingProxy(port)
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    async with listener, anyio.create_task_group() as tasks:
        tasks.start_soon(listener.serve, proxy.handle)
        proxy_port = listener.extra(anyio.abc.SocketAttribute.local_port)
        yield proxy, f"http://127.0.0.1:{proxy_port}/mcp"
        tasks.cancel_scope.cancel()


@pytest.mark.anyio
async def test_the_python_sdk_client_gets_its_answer_across_a_dropped_connection(
    slow_server: str,
) -> None:
    values: list[float] = []
    async with cutting_proxy(slow_server) as (proxy, url):

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            values.append(progress)
            if len(values) == 3:
                proxy.cut()

        async with Client(streamable_http_client(url), mode="legacy") as client:
            result = await client.call_tool(
                "agent_run", {"prompt": "slow 30"}, progress_callback=on_progress
            )
    assert proxy.cuts == 1
    assert not result.is_error, result
    assert result.structured_content is not None
    assert result.structured_content["answer"] == "w" * 30
    # Every event came once, in order, the missed ones from the replay.
    events = [p for p in values if p == int(p)]
    assert events == list(range(1, result.structured_content["events"] + 1))


@needs_node
@pytest.mark.anyio
async def test_the_typescript_sdk_client_gets_its_answer_across_a_dropped_connection(
    slow_server: str,
) -> None:
    async with cutting_proxy(slow_server) as (proxy, url):

        def on_progress(count: int) -> None:
            if count == 3:
                proxy.cut()

        seen = await ts_agent_run(url, "slow 30", 30_000, False, on_progress)
    assert proxy.cuts == 1
    assert "error" not in seen and not seen["isError"], seen
    assert seen["answer"] == "w" * 30
    events = [p for p in seen["progress"] if p == int(p)]
    assert events == list(range(1, seen["events"] + 1))


def open_session(http: httpx.Client, url: str, version: str = "2025-11-25") -> dict[str, str]:
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": version,
            "capabilities": {},
            "clientInfo": {"name": "by-hand", "version": "1"},
        },
    }
    opened = http.post(url, json=init, headers=HEADERS)
    session = {
        **HEADERS,
        "mcp-session-id": opened.headers["mcp-session-id"],
        "mcp-protocol-version": version,
    }
    http.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=session)
    return session


def test_a_get_stream_that_drops_before_any_notification_resumes_from_its_priming(
    slow_server: str,
) -> None:
    with httpx.Client(timeout=5) as http:
        session = open_session(http, slow_server)
        listen = {**session, "Accept": "text/event-stream"}
        with http.stream("GET", slow_server, headers=listen) as stream:
            lines = stream.iter_lines()
            priming = next(sse_events(lines))
            # A second GET stream takes the first's place (it was refused with 409 while the
            # server had not seen the first's connection drop): the first ends.
            with http.stream("GET", slow_server, headers=listen) as second:
                assert second.status_code == 200
                assert all(not line or line.startswith(":") for line in lines)
        assert priming["data"] == "" and priming["retry"] == "1000"
        # While the client is away, a session is created: the resources list changes.
        create = {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "session_create", "arguments": {}},
        }
        assert http.post(slow_server, json=create, headers=session).status_code == 200
        resume = {**listen, "last-event-id": priming["id"]}
        with http.stream("GET", slow_server, headers=resume) as stream:
            missed = json.loads(next(sse_events(stream.iter_lines()))["data"])
        assert missed["method"] == "notifications/resources/list_changed"


def tool_result(
    http: httpx.Client, url: str, session: dict[str, str], name: str, **args: Any
) -> Any:
    """A tools/call's structured content, from its answer (a JSON body or its stream)."""
    params = {"name": name, "arguments": args}
    call = {"jsonrpc": "2.0", "id": name, "method": "tools/call", "params": params}
    return posted_answer(http.post(url, json=call, headers=session))["result"]["structuredContent"]


def test_a_client_that_stops_reading_its_calls_stream_freezes_no_other_answer(
    tmp_path: Path,
) -> None:
    """A client that stopped reading the stream of a call with progress (a run) froze its
    whole session: the SDK's router, which passes on each of the session's messages in turn,
    waited for room on that stream, and no other request of the session was answered. The
    stream is now closed once its client has read nothing of it for --notification-timeout
    seconds with messages waiting behind it, and what it missed is kept for a resume."""
    with (
        slow_server(tmp_path, MCP_AGENT_NOTIFICATION_TIMEOUT="0.5") as url,
        httpx.Client(timeout=30) as http,
    ):
        session, other = open_session(http, url), open_session(http, url)
        flood: dict[str, Any] = {**SLOW_RUN, "id": "flood"}
        flood["params"] = {**flood["params"], "arguments": {"prompt": "flood 2500"}}
        body = json.dumps(flood).encode()
        head = "".join(f"{k}: {v}\r\n" for k, v in session.items())
        with socket.socket() as stuck:
            stuck.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            stuck.connect(("127.0.0.1", int(url.split(":")[2].split("/")[0])))
            stuck.sendall(
                f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n{head}Content-Length: {len(body)}"
                f"\r\n\r\n".encode()
                + body
            )
            stuck.settimeout(30)
            seen = b""
            while b"retry: 1000\r\n\r\n" not in seen:
                seen += stuck.recv(1)  # the answer's head and its priming event, no more
            priming = re.search(rb"id: (\S+)\r\ndata: \r\nretry", seen)
            assert priming is not None, seen
            first = priming[1].decode()
            runs = poll(lambda: tool_result(http, url, other, "agent_runs")["runs"], "no run")
            waited = {"run_id": runs[0]["runId"], "wait_seconds": 60}
            assert tool_result(http, url, other, "agent_status", **waited)["status"] == "completed"
            ping = {"jsonrpc": "2.0", "id": "after", "method": "ping"}
            answered = http.post(url, json=ping, headers=session, timeout=10)
            assert answered.status_code == 200 and '"id":"after"' in answered.text
            resume = {**session, "Accept": "text/event-stream", "last-event-id": first}
            with http.stream("GET", url, headers=resume) as resumed:
                missed = [json.loads(e["data"]) for e in sse_events(resumed.iter_lines())]
    assert missed[-1]["id"] == "flood", missed[-1]
    assert missed[-1]["result"]["structuredContent"]["status"] == "completed"


def test_an_older_clients_get_stream_opens_without_a_priming_event(slow_server: str) -> None:
    with httpx.Client(timeout=30) as http:
        session = open_session(http, slow_server, "2025-06-18")
        listen = {**session, "Accept": "text/event-stream"}
        with http.stream("GET", slow_server, headers=listen) as stream:
            create = {
                "jsonrpc": "2.0",
                "id": 2,
                "method": "tools/call",
                "params": {"name": "session_create", "arguments": {}},
            }
            http.post(slow_server, json=create, headers=session)
            first = next(sse_events(stream.iter_lines()))
        assert json.loads(first["data"])["method"] == "notifications/resources/list_changed"


@pytest.mark.anyio
async def test_a_stream_taken_over_stays_registered_through_the_routers_failed_send() -> None:
    """The SDK's message router, sending to a request's stream at the moment a resume takes
    that stream over (it had looked the stream up and was at its send's checkpoint), fails as
    the old stream closes and pops the request's key: that unregistered the resumed stream,
    which then waited for good for an answer sent nowhere (seen under load)."""
    streams = _Streams()
    old = anyio.create_memory_object_stream[str](16)
    streams["2"] = old
    failed = anyio.Event()

    async def router() -> None:  # as the SDK's message_router sends
        try:
            await streams["2"][0].send("event")
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            streams.pop("2", None)
            failed.set()

    async with anyio.create_task_group() as group:
        group.start_soon(router)
        await anyio.lowlevel.checkpoint()  # the router is at its send's checkpoint
        old[0].close()  # the takeover: the old stream closes, the new one is registered
        old[1].close()
        new = anyio.create_memory_object_stream[str](16)
        streams["2"] = new
        streams.taken_over.add("2")
        await failed.wait()
    assert streams.get("2") is new
    # Once the new stream is done with, it goes as any other.
    new[0].close()
    new[1].close()
    streams.pop("2", None)
    assert "2" not in streams


@pytest.mark.anyio
@pytest.mark.parametrize("call", [None, "7"])
async def test_a_request_to_the_client_sent_as_its_stream_closed_fails_after_the_wait(
    call: str | None,
) -> None:
    """A request for the client's model sent on the GET stream (or a call's) just as that
    stream closed (the run saw it open, the router found it gone): the SDK keeps it for a
    resume and sends it nowhere. Its wait for the client to come back never began, so if none
    did it waited for good, its run and session busy; it now fails after the wait, as one the
    stream closed on does."""
    transport = ResumableTransport(mcp_session_id="s")
    transport.make_resumable(SessionEvents(EventBudget()))
    transport.client_stream_wait = 0.05
    asked = JSONRPCRequest(jsonrpc="2.0", id=5, method="sampling/createMessage", params={})
    related = None if call is None else ServerMessageMetadata(related_request_id=call)
    async with transport.connect() as (read_stream, write_stream):
        assert GET_STREAM_KEY not in transport._request_streams  # no stream open
        await write_stream.send(SessionMessage(asked, metadata=related))
        # (A bound on the wait, for the test: before, nothing ever came.)
        with anyio.fail_after(10):
            came = await read_stream.receive()
    assert isinstance(came, SessionMessage) and isinstance(came.message, JSONRPCError)
    assert came.message.id == 5
    said = came.message.error.message
    where = "the session's GET stream" if call is None else "its call's stream"
    assert f"({where}) closed before the client answered" in said, said


@needs_node
@pytest.mark.anyio
async def test_the_typescript_sdk_subscriber_hears_what_came_while_its_stream_was_cut(
    slow_server: str,
) -> None:
    """The TypeScript SDK's client subscribed to a session (tests/peers/ts_subscribe.mjs)
    through a proxy that cuts its connections: an update sent while it was away comes once it
    is back (its GET stream resumed with Last-Event-ID), as the spec has it for a server that
    gives event ids."""
    script = PEERS / "ts_subscribe.mjs"
    shutil.copy(ROOT / "tests" / "peers" / "ts_subscribe.mjs", script)
    lines: list[str] = []
    async with (
        cutting_proxy(slow_server) as (proxy, url),
        Client(streamable_http_client(slow_server)) as writer,
    ):
        sid = (await call(writer, "session_create"))["id"]

        async def append(text: str) -> None:
            entry = {"type": "message", "role": "user", "content": text}
            await call(writer, "session_append", session_id=sid, entry=entry)

        command = [str(NODE), str(script), url, sid, "2", "0"]
        async with await anyio.open_process(command, stdin=subprocess.DEVNULL) as process:
            assert process.stdout is not None
            try:
                with anyio.fail_after(60):  # a hang guard
                    async for chunk in TextReceiveStream(process.stdout):
                        for line in chunk.splitlines():
                            lines.append(line)
                            if line == "subscribed":
                                await append("first")  # heard on the GET stream: it is open
                            elif line == "updated 1":
                                proxy.cut()
                                await append("while away")  # to the server, not the proxy
                    await process.wait()
            finally:
                if process.returncode is None:
                    process.kill()
    assert process.returncode == 0, lines[-20:]
    assert proxy.cuts == 1
    heard = json.loads(lines[-1])
    assert heard["updated"] == [f"session://{sid}"] * 2, heard
    assert heard["messages"] == 2, heard
