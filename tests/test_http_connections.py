"""HTTP connections that never finish a request's head or body, or never read their answers,
are closed (``http_connections``), and those that sent theirs in time are not, on a real
``serve --transport http`` process whose deadline (and keep-alive) is shortened to a second."""

from __future__ import annotations

import contextlib
import json
import select
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp_support import (
    HTTP_HEADERS,
    free_port,
    initialize_request,
    poll,
    posted_answer,
    server_env,
    wait_for_port,
)

from mcp_agent.server.http_connections import MAX_HEAD_BYTES

DEADLINE_S = 1.0
# Far longer than the deadline: what a connection that is never closed runs into.
HANG_GUARD_S = 30.0

SHORT_DEADLINE_SERVE = textwrap.dedent(
    f"""
    import sys
    from mcp_agent.server import http_connections
    from mcp_agent.cli import main

    http_connections.REQUEST_HEAD_SECONDS = {DEADLINE_S}
    http_connections.KEEP_ALIVE_SECONDS = {DEADLINE_S}
    sys.argv = ["mcp-agent-sessions", *sys.argv[1:]]
    main()
    """
)


@pytest.fixture(name="port")
def port_fixture(server: tuple[int, subprocess.Popen[bytes]]) -> int:
    return server[0]


@pytest.fixture(name="server")
def server_fixture(
    tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    """The server process and its port; a test may give it more environment (``param``)."""
    script = tmp_path / "serve.py"
    script.write_text(SHORT_DEADLINE_SERVE)
    port = free_port()
    db = str(tmp_path / "s.db")
    command = [sys.executable, str(script), "serve", "--db", db, "--transport", "http"]
    log = tmp_path / "server.log"
    with log.open("wb") as stderr:
        server = subprocess.Popen(
            [*command, "--port", str(port), "--no-auth"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            env=server_env(tmp_path, **getattr(request, "param", {})),
        )
    try:
        wait_for_port(port, server, log)
        yield port, server
    finally:
        server.terminate()
        try:
            server.wait(15)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(15)


def closed_by_server(sock: socket.socket, trickle: bytes = b"") -> bool:
    """Whether the server closes ``sock`` within the guard, while one byte of ``trickle`` at
    a time is sent every tenth of the deadline."""
    rounds = int(HANG_GUARD_S / (DEADLINE_S / 10))
    for n in range(rounds):
        readable, _, _ = select.select([sock], [], [], DEADLINE_S / 10)
        if readable:
            try:
                return sock.recv(4096) == b""
            except ConnectionResetError:
                return True
        if trickle:
            try:
                sock.sendall(trickle[n % len(trickle) : n % len(trickle) + 1])
            except (BrokenPipeError, ConnectionResetError):
                return True
    return False


def server_closed(sock: socket.socket, port: int) -> bool:
    """Whether the server (listening on ``port``) has closed its end of ``sock``'s connection:
    past ESTABLISHED (01) in /proc/net/tcp, what it had sent still to be taken, or gone."""
    mine = sock.getsockname()[1]
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, remote, state = line.split()[1:4]
        if int(local.split(":")[1], 16) == port and int(remote.split(":")[1], 16) == mine:
            return state != "01"
    return True


def test_an_idle_connection_is_kept_well_past_what_clients_keep_theirs_for() -> None:
    """A client reuses an idle connection for as long as it keeps it (httpx's keepalive expiry,
    Node's fetch 4 s): a server closing it at about that time closes it under a request sent
    at the same moment, which fails ("other side closed"; a POST is not sent again)."""
    from mcp_agent.server import http_connections

    node_fetch_keeps = 4.0
    kept_by_clients = max(httpx.Limits().keepalive_expiry or 0.0, node_fetch_keeps)
    assert http_connections.KEEP_ALIVE_SECONDS >= 2 * kept_by_clients + 5
    assert http_connections.KEEP_ALIVE_SECONDS <= http_connections.REQUEST_HEAD_SECONDS


def test_a_connection_that_sends_nothing_is_closed(port: int) -> None:
    """Before, it held one of the connections the server serves at once for ever: enough of
    them (from one client) and every other client was answered 503."""
    with socket.create_connection(("127.0.0.1", port)) as sock:
        assert closed_by_server(sock)


def test_a_request_head_sent_a_byte_at_a_time_is_closed(port: int) -> None:
    """Each byte put off uvicorn's keep-alive timer: a head that never ends held on for ever."""
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        assert closed_by_server(sock, trickle=b"X-Slow: aaaaaaaaaaaaaaaa\r\n")


def test_a_request_body_sent_a_byte_at_a_time_is_closed(port: int) -> None:
    """The head came in time, and the body trickled: the request was never timed, and such
    connections held the server's connections as a trickled head had."""
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(
            b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Accept: application/json, text/event-stream\r\nContent-Length: 100000\r\n\r\n"
        )
        assert closed_by_server(sock, trickle=b" ")


def sent_until_answered(sock: socket.socket, start: bytes, filler: bytes) -> bytes:
    """What the server answers while ``start`` and then ``filler`` again and again (up to
    sixteen times the head's bound) are sent on ``sock`` as fast as it takes them: all of it,
    once the server ends the connection (b"" if it answered nothing)."""
    sock.sendall(start)
    for _ in range(16 * MAX_HEAD_BYTES // len(filler)):
        readable, _, _ = select.select([sock], [], [], 0)
        if readable:
            break
        try:
            sock.sendall(filler)
        except (BrokenPipeError, ConnectionResetError):
            break
    sock.settimeout(HANG_GUARD_S)
    answer = b""
    with contextlib.suppress(ConnectionResetError):
        while chunk := sock.recv(65536):
            answer += chunk
    return answer


CHUNKED_POST = (
    b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    b"Accept: application/json, text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
)


@pytest.mark.parametrize(
    ("start", "filler"),
    [
        (b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Long: ", b"a" * 4096),
        (b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n", b"X-Many: b\r\n" * 400),
        (b"GET /mcp?", b"q" * 4096),
        (CHUNKED_POST + b"1\r\n{\r\n0\r\n", b"X-Trailer: t\r\n" * 300),
    ],
    ids=["one-long-header", "many-headers", "long-url", "chunked-trailers"],
)
def test_a_request_head_without_end_is_refused_at_its_bound(
    port: int, start: bytes, filler: bytes
) -> None:
    """uvicorn's httptools parser kept a head however long it grew (and a chunked body's
    trailers, as headers), joining each piece of a long one to what came before: one client
    sending a head without end as fast as loopback carries it grew the server to 4 GB in 50 s
    and held another client's call for 30 s. Past the bound the client is told so (431, its
    error naming the bound) before the deadline, and other clients are served as before."""
    with socket.create_connection(("127.0.0.1", port)) as sock:
        answer = sent_until_answered(sock, start, filler)
    assert answer.startswith(b"HTTP/1.1 431 "), answer[:200]
    error = json.loads(answer.partition(b"\r\n\r\n")[2])["error"]
    assert f"at most {MAX_HEAD_BYTES:,} bytes" in error["message"]
    url = f"http://127.0.0.1:{port}/mcp"
    long_enough = {"X-Long": "a" * (MAX_HEAD_BYTES // 2)}  # a long token still fits
    with httpx.Client(timeout=HANG_GUARD_S) as http:
        opened = http.post(url, json=initialize_request(), headers={**HTTP_HEADERS, **long_enough})
    assert opened.status_code == 200


def test_requests_and_answers_longer_than_the_deadline_are_not_cut(port: int) -> None:
    """Only the head is timed: an event stream open for longer still carries notifications."""
    url = f"http://127.0.0.1:{port}/mcp"
    with httpx.Client(timeout=HANG_GUARD_S) as http:
        opened = http.post(url, json=initialize_request(), headers=HTTP_HEADERS)
        assert opened.status_code == 200
        headers = {
            **HTTP_HEADERS,
            "Mcp-Session-Id": opened.headers["mcp-session-id"],
            "Mcp-Protocol-Version": "2025-06-18",
        }
        initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        assert http.post(url, json=initialized, headers=headers).status_code == 202
        with http.stream("GET", url, headers=headers) as events:
            assert events.status_code == 200
            time.sleep(3 * DEADLINE_S)  # the stream stays open past the deadline
            create = {
                "jsonrpc": "2.0",
                "id": 2,
                "method": "tools/call",
                "params": {"name": "session_create", "arguments": {}},
            }
            with httpx.Client(timeout=HANG_GUARD_S) as other:
                assert other.post(url, json=create, headers=headers).status_code == 200
            lines = events.iter_lines()
            data = next(line for line in lines if line.startswith("data:"))
            assert json.loads(data[5:])["method"] == "notifications/resources/list_changed"


def test_a_client_that_never_reads_its_answer_is_dropped(port: int) -> None:
    """Before, its answer (megabytes of a session's export) stayed in the server's memory for
    as long as the client kept the connection open: fifty such clients, 1.4 GB."""
    url = f"http://127.0.0.1:{port}/mcp"
    with httpx.Client(timeout=HANG_GUARD_S) as http:
        opened = http.post(url, json=initialize_request(), headers=HTTP_HEADERS)
        session = opened.headers["mcp-session-id"]
        headers = {**HTTP_HEADERS, "Mcp-Session-Id": session, "Mcp-Protocol-Version": "2025-06-18"}
        initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        assert http.post(url, json=initialized, headers=headers).status_code == 202

        def call(name: str, **arguments: Any) -> dict[str, Any]:
            request = {"jsonrpc": "2.0", "id": 2, "method": "tools/call"}
            request["params"] = {"name": name, "arguments": arguments}
            answer = posted_answer(http.post(url, json=request, headers=headers))
            result: dict[str, Any] = answer["result"]["structuredContent"]
            return result

        session_id = call("session_create")["id"]
        entry = {"type": "message", "role": "user", "content": "x" * 3_000_000}
        call("session_append", session_id=session_id, entry=entry)
    read = {"jsonrpc": "2.0", "id": 3, "method": "resources/read"}
    read["params"] = {"uri": f"session://{session_id}/export.jsonl"}
    body = json.dumps(read).encode()
    head = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
    request = f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n{head}Content-Length: {len(body)}\r\n\r\n"
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connecting
        sock.connect(("127.0.0.1", port))
        sock.sendall(request.encode() + body)
        # reads nothing (a sleep of 4 deadlines was not always enough for the answer to be
        # made, under load, and the client then read all of it)
        poll(lambda: server_closed(sock, port), "the server kept a client that reads nothing")
        received = b""
        sock.settimeout(HANG_GUARD_S / 3)
        with contextlib.suppress(ConnectionResetError):
            while chunk := sock.recv(1 << 20):
                received += chunk
                assert not whole(received), "the whole answer was kept for it"
    assert received.startswith(b"HTTP/1.1 200")


def whole(response: bytes) -> bool:
    """Whether ``response`` (an HTTP/1.1 response as received so far) has all of its body:
    as long as its Content-Length says (a JSON answer), or ended as chunks end (a stream)."""
    head, _, body = response.partition(b"\r\n\r\n")
    for line in head.lower().split(b"\r\n"):
        if line.startswith(b"content-length:"):
            return len(body) >= int(line.split(b":", 1)[1])
    return response.endswith(b"0\r\n\r\n")


@pytest.mark.parametrize(
    "server", [{}, {"MCP_AGENT_UVLOOP": "0"}], indirect=True, ids=["uvloop", "asyncio"]
)
def test_a_request_sent_while_the_server_was_stopped_is_answered(
    server: tuple[int, subprocess.Popen[bytes]],
) -> None:
    """A replica stopped (SIGSTOP, its machine paused) past the keep-alive time dropped the
    connections of clients that had sent their next request meanwhile: the request waited
    unread, and asyncio's event loop (without uvloop) ran the keep-alive timer, due, before
    reading, which closed the connection with it. The client had no answer (an MCP client's transport, and the
    client with it, failed with ReadError); nothing acknowledged was lost, as the request
    was never read. A connection with a request waiting is read first."""
    import signal
    import threading

    port, process = server
    url = f"http://127.0.0.1:{port}/mcp"
    answers: list[int | BaseException] = []
    with httpx.Client(timeout=HANG_GUARD_S) as http:
        assert http.post(url, json=initialize_request(), headers=HTTP_HEADERS).status_code == 200

        def again() -> None:  # on the kept-alive connection
            try:
                answers.append(
                    http.post(url, json=initialize_request(), headers=HTTP_HEADERS).status_code
                )
            except httpx.HTTPError as error:
                answers.append(error)

        process.send_signal(signal.SIGSTOP)
        try:
            sender = threading.Thread(target=again)
            sender.start()
            time.sleep(3 * DEADLINE_S)  # past the keep-alive and head deadlines, stopped
        finally:
            process.send_signal(signal.SIGCONT)
        sender.join(HANG_GUARD_S)
    assert answers == [200]
