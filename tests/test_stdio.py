"""The event-loop stdio transport (mcp_agent/server/stdio.py): framing over real pipes, a full
pipe, the wire kept from stray output, and a clean exit when the client goes."""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import os
import pty
import queue
import re
import select
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.shared.message import SessionMessage
from mcp_support import START_GUARD_S, alive, initialize_request, serve_piped
from mcp_types import JSONRPCNotification, JSONRPCRequest, JSONRPCResponse, TextContent
from narrow import narrow

from mcp_agent.pipes import EDGE, DroppedLine, LineReader, Writer
from mcp_agent.server import stdio
from mcp_agent.server.notify import MAX_SUBSCRIPTIONS
from mcp_agent.server.stdio import Unanswered
from mcp_agent.server.strict import URI_CHARS
from mcp_agent.sessions.sqlite import SqliteSessionRepo

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(sys.platform == "win32", reason="POSIX transport"),
]


def nonblocking_pipe() -> tuple[int, int]:
    read_fd, write_fd = os.pipe()
    os.set_blocking(read_fd, False)
    os.set_blocking(write_fd, False)
    return read_fd, write_fd


async def test_lines_arrive_whole_however_the_bytes_are_cut() -> None:
    read_fd, write_fd = os.pipe()
    os.set_blocking(read_fd, False)
    text = '{"a": "ünï"}\n' + "x" * 100_000 + "\n" + "last line without a newline"
    data = text.encode()
    assert data[7:9] == "ü".encode()
    # Cut inside a multi-byte character, and into pieces smaller and larger than a line;
    # each piece fits the pipe and is read on its own before the next is written.
    cuts = [0, 3, 8, 9, 40_000, len(data)]
    pieces = [data[a:b] for a, b in itertools.pairwise(cuts)]
    assert all(len(piece) < 65_536 for piece in pieces)

    async def feed() -> None:
        for piece in pieces:
            os.write(write_fd, piece)
            await anyio.sleep(0.05)
        os.close(write_fd)

    try:
        async with anyio.create_task_group() as group:
            group.start_soon(feed)
            lines = [line async for line in LineReader(read_fd)]
    finally:
        os.close(read_fd)
    assert lines == ['{"a": "ünï"}\n', "x" * 100_000 + "\n", "last line without a newline"]


async def test_a_line_over_the_limit_is_dropped_and_the_next_one_read() -> None:
    read_fd, write_fd = os.pipe()
    os.set_blocking(read_fd, False)
    limit = 100_000
    pieces = [b"a" * 60_000, b"b" * 60_000, b"c" * 60_000 + b"\n", b'{"next": 1}\n', b"d" * 300_000]

    async def feed() -> None:
        for piece in pieces:
            for start in range(0, len(piece), 60_000):
                os.write(write_fd, piece[start : start + 60_000])
                await anyio.sleep(0.01)
        os.close(write_fd)

    dropped: list[DroppedLine] = []

    async def said(line: DroppedLine) -> None:
        dropped.append(line)

    reader = LineReader(read_fd, max_line=limit, dropped=said)
    try:
        async with anyio.create_task_group() as group:
            group.start_soon(feed)
            lines = [line async for line in reader]
    finally:
        os.close(read_fd)
    # The long line and the long unterminated tail are gone; the buffer never grew past
    # the limit and a chunk.
    assert lines == ['{"next": 1}\n']
    assert len(reader._buffer) <= limit + 65_536
    # Each said once it ended (its newline, the end of the input), with its edges.
    assert dropped == [
        DroppedLine(limit, b"a" * EDGE, b"c" * EDGE),
        DroppedLine(limit, b"d" * EDGE, b"d" * EDGE),
    ]


def test_a_terminal_or_a_file_is_left_to_the_sdk_transport(tmp_path: Path) -> None:
    # A terminal shares O_NONBLOCK with stderr and the shell: it must never be touched.
    probe = (
        "import os; from mcp_agent.server.stdio import claim_wire; "
        "print(claim_wire() is None, os.get_blocking(0), os.get_blocking(1))"
    )
    leader, follower = pty.openpty()
    try:
        done = subprocess.run(
            [sys.executable, "-c", probe],
            stdin=follower,
            stdout=follower,
            stderr=subprocess.PIPE,
            timeout=START_GUARD_S,  # a start's imports, on a loaded machine
            check=False,
        )
        assert done.returncode == 0, done.stderr
        assert os.read(leader, 1000).decode().strip() == "True True True"
    finally:
        os.close(leader)
        os.close(follower)
    regular = tmp_path / "requests.jsonl"
    regular.write_text("")
    with regular.open() as stdin:
        from_file = subprocess.run(
            [sys.executable, "-c", probe],
            stdin=stdin,
            capture_output=True,
            text=True,
            timeout=START_GUARD_S,  # a start's imports, on a loaded machine
            check=False,
        )
    assert from_file.stdout.strip() == "True True True", from_file.stderr


def test_serve_in_a_terminal_answers_and_stops_at_sigterm_without_waiting_for_enter(
    tmp_path: Path,
) -> None:
    """``serve`` run by hand in a terminal reads requests typed there; SIGTERM stops it at
    once. Before, the SDK's reader waited for a line in a worker thread that nothing could
    stop, and the server ran on until the user pressed Enter."""
    leader, follower = pty.openpty()
    command = [sys.executable, "-m", "mcp_agent", "serve", "--db", str(tmp_path / "s.db")]
    server = subprocess.Popen(
        command, stdin=follower, stdout=follower, stderr=follower, start_new_session=True
    )
    shown = bytearray()

    def shown_until(text: bytes) -> None:
        while text not in shown:
            assert server.poll() is None, bytes(shown)
            if not select.select([leader], [], [], 30)[0]:
                raise AssertionError(f"waited for {text!r}; the terminal showed {shown!r}")
            shown.extend(os.read(leader, 1 << 16))

    try:
        shown_until(b"sessions stored")
        os.write(leader, json.dumps(initialize_request(7)).encode() + b"\r")
        shown_until(b'"id":7,"result"')
        os.write(leader, b'{"jsonrpc": "2.0", "method": "notifications/initialized"}\r')
        os.write(leader, b'{"jsonrpc": "2.0", "id": 8, "method": "ping"}\r')
        shown_until(b'"id":8,"result"')  # the server now waits for the next line
        server.send_signal(signal.SIGTERM)
        try:
            returncode = server.wait(timeout=20)  # no Enter is ever typed
        except subprocess.TimeoutExpired:
            pytest.fail("serve in a terminal ran on after SIGTERM, waiting for a line")
        # The terminal was read without O_NONBLOCK, which it shares with the shell.
        assert os.get_blocking(follower)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
        os.close(leader)
        os.close(follower)
    assert returncode == 143, bytes(shown)
    assert b"Traceback" not in shown


async def test_a_write_larger_than_the_pipe_waits_for_the_reader() -> None:
    read_fd, write_fd = nonblocking_pipe()
    message = "y" * 5_000_000 + "\n"
    received = bytearray()

    def drain() -> None:
        os.set_blocking(read_fd, True)
        while chunk := os.read(read_fd, 1 << 16):
            received.extend(chunk)

    reader = threading.Thread(target=drain)
    reader.start()
    try:
        await Writer(write_fd).write(message)
    finally:
        os.close(write_fd)
        reader.join()
        os.close(read_fd)
    assert received == message.encode()


NOISY_SERVER = textwrap.dedent(
    """
    import os, subprocess, sys
    import anyio
    from mcp.server import MCPServer
    from mcp_agent.server.stdio import run_stdio

    server = MCPServer("noisy", log_level="WARNING")

    @server.tool()
    async def noisy() -> str:
        print("stray print", flush=True)
        print("unflushed print")  # still in sys.stdout's buffer when serving ends
        os.write(1, b"stray write to fd 1\\n")
        subprocess.run([sys.executable, "-c", "print('a child prints')"], check=True)
        return "still fine"

    anyio.run(run_stdio, server)
    # Once the client has gone, the process's own stdout is back and blocking again.
    print("after", os.get_blocking(0), os.get_blocking(1), file=sys.stderr)
    """
)


async def test_stray_output_goes_to_stderr_and_the_wire_stays_clean(tmp_path: Path) -> None:
    script = tmp_path / "noisy.py"
    script.write_text(NOISY_SERVER)
    errors = tmp_path / "stderr.txt"
    # Block-buffered stdout, as a client's launch usually leaves it.
    params = StdioServerParameters(
        command=sys.executable, args=[str(script)], env={"PYTHONUNBUFFERED": ""}
    )
    with errors.open("w") as stderr:
        async with Client(stdio_client(params, errlog=stderr)) as client:
            for _ in range(3):
                result = await client.call_tool("noisy", {})
                assert not result.is_error
                assert narrow(result.content[0], TextContent).text == "still fine"
        # Leaving the client closes the server's stdin: it must exit by itself.
    text = errors.read_text()
    assert text.count("stray print") == 3
    assert text.count("stray write to fd 1") == 3
    assert text.count("a child prints") == 3
    assert text.count("unflushed print") == 3
    assert "after True True" in text


def test_the_server_exits_when_stdin_closes(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "mcp_agent", "serve", "--db", str(tmp_path / "s.db")],
        input="",
        capture_output=True,
        text=True,
        timeout=START_GUARD_S,  # a start's imports, on a loaded machine
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""


def test_requests_read_before_stdin_closes_are_answered_before_the_server_stops(
    tmp_path: Path,
) -> None:
    """A client that writes its requests and closes stdin at once (``printf … | serve``) gets
    every answer: the SDK alone cancels what is in flight at the end of input, so a session
    was created that no answer told of."""
    db = tmp_path / "s.db"

    def call(request_id: int | str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        params = {"name": name, "arguments": arguments}
        return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}

    requests = [
        initialize_request(0),
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        call(1, "session_create", {"name": "piped"}),
        call("two", "session_list", {}),
        {"jsonrpc": "2.0", "id": 3, "method": "tools/list"},
    ]
    answers, stderr = serve_piped(db, requests)
    assert sorted(answers, key=str) == [0, 1, 3, "two"]
    assert all("result" in answer for answer in answers.values()), answers
    created = answers[1]["result"]["structuredContent"]
    with SqliteSessionRepo(db) as repo:
        assert [summary.id for summary in repo.list().items] == [created["id"]]
    assert "unanswered" not in stderr


def test_a_line_that_is_not_utf8_is_refused_and_nothing_altered_is_stored(
    tmp_path: Path,
) -> None:
    """Bytes that are not UTF-8 get a parse error, as over HTTP, and the next line is read
    (before: each was read as U+FFFD, and a session was stored with a name nobody sent)."""
    db = tmp_path / "s.db"
    create = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {"name": "session_create", "arguments": {"name": "bad@@bytes"}},
    }
    lines = [
        json.dumps(initialize_request(1)).encode(),
        b'{"jsonrpc":"2.0","method":"notifications/initialized"}',
        json.dumps(create).encode().replace(b"@@", b"\xff\xfe"),
        b'{"jsonrpc":"2.0","id":3,"method":"ping"}',
        b'{"jsonrpc":"2.0","id":4,"method":"ping","params":{"x":"\xc3"}}',  # cut in a character
    ]
    done = subprocess.run(
        [sys.executable, "-m", "mcp_agent", "serve", "--db", str(db)],
        input=b"\n".join(lines),  # the last without its newline
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    answers = [json.loads(line) for line in done.stdout.decode().splitlines()]
    # Refused as it is read, so perhaps before the answer to a line read earlier.
    assert sorted((str(a["id"]), "error" in a) for a in answers) == [
        ("1", False),
        ("3", False),
        ("None", True),
        ("None", True),
    ]
    refused = [a["error"] for a in answers if a["id"] is None]
    assert {error["code"] for error in refused} == {-32700}
    assert "not valid UTF-8 (byte 0xff" in refused[0]["message"]
    assert "(byte 0xc3" in refused[1]["message"]
    with SqliteSessionRepo(db) as repo:
        assert repo.list().items == []


async def test_a_reader_without_a_refusal_reads_bytes_that_are_not_utf8_replaced() -> None:
    # A downstream server's output (the proxy) is read on as before.
    read_fd, write_fd = os.pipe()
    os.set_blocking(read_fd, False)
    os.write(write_fd, b"a\xffb\nnext\n")
    os.close(write_fd)
    refused: list[UnicodeDecodeError] = []

    async def refuse(error: UnicodeDecodeError) -> None:
        refused.append(error)

    try:
        lines = [line async for line in LineReader(read_fd)]
    finally:
        os.close(read_fd)
    assert lines == ["a\ufffdb\n", "next\n"]
    read_fd, write_fd = os.pipe()
    os.set_blocking(read_fd, False)
    os.write(write_fd, b"a\xffb\nnext\n")
    os.close(write_fd)
    try:
        lines = [line async for line in LineReader(read_fd, undecodable=refuse)]
    finally:
        os.close(read_fd)
    assert lines == ["next\n"]
    assert [error.start for error in refused] == [1]


def test_an_open_listen_stream_does_not_hold_the_end_of_input(tmp_path: Path) -> None:
    """A 2026 listen stream lasts until the client goes: at the end of input it is closed at
    once, not waited for."""
    meta = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    listen = {
        "jsonrpc": "2.0",
        "id": "listen",
        "method": "subscriptions/listen",
        "params": {"_meta": meta, "notifications": {"toolsListChanged": True}},
    }
    answers, stderr = serve_piped(tmp_path / "s.db", [listen])
    assert list(answers) == ["listen"]
    assert "unanswered" not in stderr


def test_a_listen_stream_follows_a_bounded_list_of_resources(tmp_path: Path) -> None:
    """A 2026 listen stream's list of resources had no bound: the server kept whatever list
    a client sent for as long as the stream lasted (twenty listens of 200,000 URIs each held
    900 MB) and sent it back whole in the acknowledgement. Past a legacy client's bound on
    its subscriptions, or with a URI longer than any resource's, a listen is refused saying
    which; within them it is acknowledged as before."""
    meta = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
    }

    def listen(listen_id: str, uris: list[str]) -> dict[str, Any]:
        notifications = {"resourceSubscriptions": uris}
        params = {"_meta": meta, "notifications": notifications}
        return {
            "jsonrpc": "2.0",
            "id": listen_id,
            "method": "subscriptions/listen",
            "params": params,
        }

    uris = [f"session://s{n}" for n in range(MAX_SUBSCRIPTIONS)]
    requests = [
        listen("too-many", [*uris, "session://one-more"]),
        listen("too-long", ["session://" + "x" * URI_CHARS]),
        listen("within", uris),
    ]
    server = subprocess.Popen(
        [sys.executable, "-m", "mcp_agent", "serve", "--db", str(tmp_path / "s.db")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert server.stdin is not None and server.stdout is not None
    try:
        server.stdin.write("".join(json.dumps(one) + "\n" for one in requests).encode())
        server.stdin.flush()
        sent: list[dict[str, Any]] = []
        # The two refusals, and the third listen's acknowledgement (it stays open).
        while len([m for m in sent if "id" in m or "acknowledged" in m.get("method", "")]) < 3:
            readable, _, _ = select.select([server.stdout], [], [], 60)
            assert readable, f"the server sent only {sent}"
            sent.append(json.loads(server.stdout.readline()))
    finally:
        server.stdin.close()
        server.wait(60)
    answers = {found["id"]: found for found in sent if "id" in found}
    too_many = answers["too-many"]["error"]
    assert too_many["code"] == -32602
    assert (
        f"holds {MAX_SUBSCRIPTIONS + 1:,} URIs, more than the {MAX_SUBSCRIPTIONS:,}"
        in (too_many["message"])
    )
    assert "--max-subscriptions" in too_many["message"]
    too_long = answers["too-long"]["error"]
    assert too_long["code"] == -32602
    assert (
        f"resourceSubscriptions[0]: a resource URI may have at most {URI_CHARS:,}"
        in (too_long["message"])
    )
    # The one within the bounds was acknowledged, its list whole.
    (acknowledged,) = [m for m in sent if m.get("method", "").endswith("acknowledged")]
    assert acknowledged["params"]["notifications"]["resourceSubscriptions"] == uris
    assert server.stderr is not None and "Traceback" not in server.stderr.read().decode()


def request(request_id: int | str, method: str = "tools/list") -> SessionMessage:
    return SessionMessage(JSONRPCRequest(jsonrpc="2.0", id=request_id, method=method))


def answer(request_id: int | str) -> SessionMessage:
    return SessionMessage(JSONRPCResponse(jsonrpc="2.0", id=request_id, result={}))


def cancel(request_id: object) -> SessionMessage:
    params = {"requestId": request_id}
    return SessionMessage(
        JSONRPCNotification(jsonrpc="2.0", method="notifications/cancelled", params=params)
    )


async def test_the_wait_for_answers_ends_with_the_last_answer_or_a_cancel() -> None:
    unanswered = Unanswered()
    for request_id in (1, "b", 3, 7):
        unanswered.read(request(request_id))
    unanswered.read(request("l", "subscriptions/listen"))  # lasts until the client goes
    unanswered.read(ValueError("a line that could not be read"))
    assert len(unanswered) == 4
    unanswered.sent(answer(1))
    unanswered.read(cancel("b"))
    unanswered.read(cancel("7"))  # the SDK's ids: "7" is 7
    unanswered.read(cancel(True))  # and true is no id (not 1, nor 3)
    assert len(unanswered) == 1
    with anyio.fail_after(10):
        async with anyio.create_task_group() as group:
            group.start_soon(unanswered.drained, 60.0)
            await anyio.wait_all_tasks_blocked()
            unanswered.sent(answer(3))
    assert len(unanswered) == 0


async def test_a_request_of_ours_to_the_client_ends_the_wait(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """No reply can come once stdin is closed: a run waiting for the client's model would
    hold the server for nothing."""
    unanswered = Unanswered()
    unanswered.read(request(1, "tools/call"))
    unanswered.sent(request(0, "sampling/createMessage"))
    unanswered.read(answer(0))  # answered before stdin closed: nothing is waiting for it
    unanswered.sent(request("s1", "sampling/createMessage"))
    with anyio.fail_after(10):
        await unanswered.drained(60.0)
    assert len(unanswered) == 1
    assert "1 request(s) still unanswered waiting for the client" in caplog.text


async def test_requests_of_ours_a_client_never_answers_are_remembered_within_a_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(stdio, "MAX_ASKED", 3)
    unanswered = Unanswered()
    for request_id in range(10):
        unanswered.sent(request(f"s{request_id}", "ping"))
    assert list(unanswered._asked) == ["s7", "s8", "s9"]  # the oldest forgotten first
    for request_id in range(7, 10):
        unanswered.read(answer(f"s{request_id}"))
    assert not unanswered._asked


async def test_the_wait_for_answers_is_bounded(caplog: pytest.LogCaptureFixture) -> None:
    unanswered = Unanswered()
    unanswered.read(request(7))
    await unanswered.drained(0.01)  # a request that never ends does not hold the server
    assert len(unanswered) == 1
    assert "1 request(s) still unanswered after 0.01 s" in caplog.text


def test_a_client_that_stops_reading_ends_the_server_quietly(tmp_path: Path) -> None:
    server = subprocess.Popen(
        [sys.executable, "-m", "mcp_agent", "serve", "--db", str(tmp_path / "s.db")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert server.stdin is not None and server.stdout is not None and server.stderr is not None
    server.stdin.write((json.dumps(initialize_request()) + "\n").encode())
    server.stdin.flush()
    assert b'"id":1' in server.stdout.readline()
    server.stdout.close()  # the client goes away without a word
    try:
        for request_id in range(2, 6):
            request = {"jsonrpc": "2.0", "id": request_id, "method": "tools/list"}
            server.stdin.write((json.dumps(request) + "\n").encode())
            server.stdin.flush()
    except BrokenPipeError:
        pass  # the server has already stopped
    assert server.wait(timeout=20) == 0
    assert b"Traceback" not in server.stderr.read()
    with contextlib.suppress(BrokenPipeError):
        server.stdin.close()
    server.stderr.close()


def test_a_client_that_never_reads_stderr_does_not_freeze_the_server(tmp_path: Path) -> None:
    """Each line that is not UTF-8 gets an answer and a warning on stderr. A client that
    keeps stderr on a pipe it never reads filled it after some 700 warnings: the event loop
    blocked writing the next one, and the server answered nothing more."""
    command = [sys.executable, "-m", "mcp_agent", "serve", "--db", str(tmp_path / "s.db")]
    server = subprocess.Popen(
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert server.stdin is not None and server.stdout is not None and server.stderr is not None
    lines = 3000  # some 200 KB of warnings: three times what a pipe holds
    bad = b"".join(b"\xff not UTF-8 %d\n" % n for n in range(lines))
    writer = threading.Thread(target=server.stdin.write, args=(bad,), daemon=True)
    answers: queue.Queue[bytes] = queue.Queue()

    def read() -> None:
        assert server.stdout is not None
        for line in server.stdout:
            answers.put(line)

    reader = threading.Thread(target=read, daemon=True)

    def answer() -> Any:
        return json.loads(answers.get(timeout=30))

    try:
        writer.start()
        reader.start()
        for answered in range(lines):
            try:
                assert answer()["error"]["code"] == -32700
            except queue.Empty:
                pytest.fail(f"the server stopped answering after {answered} lines")
        writer.join()
        server.stdin.write(json.dumps({**initialize_request(7)}).encode() + b"\n")
        server.stdin.flush()
        assert answer()["id"] == 7
        server.stdin.close()
        stderr = server.stderr.read().decode()
        assert server.wait(timeout=30) == 0
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    # What could not wait is counted, not lost without a word; what waited is written.
    assert "log message(s) dropped: stderr was not being read" in stderr
    assert "a message that is not UTF-8 was refused" in stderr


def test_a_client_that_reads_stderr_only_after_the_exit_is_told_what_was_not_written(
    tmp_path: Path,
) -> None:
    """A client that keeps stderr for after the server ends (to show why it ended) found it
    full of the first warnings and no word of the thousands never written: the count waited
    for a next line that stderr never took. Now the pipe keeps room for it, said last."""
    command = [sys.executable, "-m", "mcp_agent", "serve", "--db", str(tmp_path / "s.db")]
    server = subprocess.Popen(
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert server.stdin is not None and server.stdout is not None and server.stderr is not None
    lines = 2000  # some 180 KB of warnings: more than a pipe holds
    writer = threading.Thread(
        target=server.stdin.write,
        args=(b"".join(b"\xff not UTF-8 %d\n" % n for n in range(lines)),),
        daemon=True,
    )
    try:
        writer.start()
        for _ in range(lines):  # every line answered, so every warning emitted
            assert b'"code":-32700' in server.stdout.readline()
        writer.join()
        server.stdin.close()
        assert server.wait(timeout=30) == 0
        stderr = server.stderr.read().decode()
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    said = stderr.count("a message that is not UTF-8 was refused")
    counts = re.findall(r"(\d+) log message\(s\) (?:dropped|never written)", stderr)
    assert counts and "never written" in stderr.splitlines()[-1], stderr[-500:]
    assert said + sum(map(int, counts)) == lines


def sleeping_in(thread: threading.Thread) -> str:
    """The kernel function ``thread`` sleeps in (its wchan), "" while it runs."""
    task = Path(f"/proc/self/task/{thread.native_id}")
    state = (task / "stat").read_text().rsplit(")", 1)[1].split()[0]
    return (task / "wchan").read_text() if state == "S" else ""


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc and grows a pipe as Linux does")
def test_the_stderr_writer_waits_for_the_reader_in_its_write_not_by_polling() -> None:
    """Once stderr's pipe was half full, the writer looked every 50 ms whether the reader had
    read (a pipe's writability says nothing of half full): woken 20 times a second for as long
    as a client did not read stderr. It now sleeps in its write until the reader reads; at
    the end the pipe grows to take the count of the lines never written."""
    from mcp_agent.cli.stderr_log import QueuedStderr

    read_end, write_end = os.pipe()
    lines = 200  # 200 KB: three pipes' worth
    with os.fdopen(read_end, "rb") as reader, os.fdopen(write_end, "wb") as writer:
        handler = QueuedStderr(writer.fileno())  # room for every line: none dropped as it comes
        handler.setFormatter(logging.Formatter("%(message)s"))
        for number in range(lines):
            handler.emit(logging.makeLogRecord({"msg": f"{number:04d} " + "x" * 1000}))
        # The pipe full: the writer sleeps in its write, not in a timed wait (futex_…) to
        # look again.
        waits: set[str] = set()
        for _ in range(50):
            waits.add(sleeping_in(handler.writer))
            if any("pipe_write" in wait for wait in waits):
                break
            time.sleep(0.1)
        assert any("pipe_write" in wait for wait in waits), waits
        handler.close()  # nobody read: the count is said last, in room the pipe grew
        writer.close()
        said = reader.read().decode().splitlines()
    written = [line for line in said if line.endswith("x" * 1000)]
    counts = [int(line.split()[2]) for line in said if "log message(s)" in line]
    assert said[-1].endswith("log message(s) never written: stderr was not being read")
    assert len(written) + sum(counts) == lines


def test_every_append_acknowledged_over_stdio_survives_a_sigkill(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    server = subprocess.Popen(
        [sys.executable, "-m", "mcp_agent", "serve", "--db", str(db)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert server.stdin is not None and server.stdout is not None

    def send(message: dict[str, object]) -> None:
        assert server.stdin is not None
        server.stdin.write((json.dumps(message) + "\n").encode())
        server.stdin.flush()

    def answer() -> dict[str, Any]:
        assert server.stdout is not None
        while True:
            found = json.loads(server.stdout.readline())
            if "id" in found:
                return found

    def call(request_id: int, name: str, arguments: dict[str, object]) -> None:
        send(
            {
                "jsonrpc": "2.0",
                "id": request_id,
                "method": "tools/call",
                "params": {"name": name, "arguments": arguments},
            }
        )

    try:
        send(initialize_request(0))
        answer()
        send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        call(1, "session_create", {})
        sid = answer()["result"]["structuredContent"]["id"]
        acknowledged = []
        for n in range(2, 60):
            entry = {"type": "message", "role": "user", "content": f"m{n}"}
            call(n, "session_append", {"session_id": sid, "entry": entry})
            acknowledged.append(answer()["result"]["structuredContent"]["entryId"])
        for n in range(60, 80):  # in flight when the server dies
            entry = {"type": "message", "role": "user", "content": f"m{n}"}
            call(n, "session_append", {"session_id": sid, "entry": entry})
    finally:
        server.kill()
        server.wait(timeout=20)
    stored = [e.id for e in SqliteSessionRepo(db).open(sid).get_entries()]
    assert stored[: len(acknowledged)] == acknowledged
    assert len(stored) <= 78


def test_an_answer_too_long_to_read_is_read_as_an_error_answer_to_its_request() -> None:
    """Its request fails at once, saying why, instead of waiting for ever (or its time limit)."""
    from mcp_agent.pipes import ANSWER_UNREAD

    python = DroppedLine(
        100, b'{"jsonrpc":"2.0","id":4,"result":{"content":[{"text":"xx', b'xx"}]}}'
    )
    typescript = DroppedLine(
        100, b'{"result":{"content":[{"text":"xx', b'xx"}]},"jsonrpc":"2.0","id":"a"}'
    )
    for line, answered in ((python, 4), (typescript, "a")):
        instead = line.error_in_place()
        assert instead is not None and instead.endswith("\n")
        assert json.loads(instead) == {
            "jsonrpc": "2.0",
            "id": answered,
            "error": {
                "code": ANSWER_UNREAD,
                "message": "its answer is over 100 bytes on one line, the most that is read,"
                " and was left out unread",
            },
        }
    request = DroppedLine(100, b'{"jsonrpc":"2.0","id":4,"method":"x","params":{"a":"', b'x"}}')
    notification = DroppedLine(100, b'{"jsonrpc":"2.0","method":"x","params":{"a":"', b'x"}}')
    garbage = DroppedLine(100, b"debug output " * 10, b"more of it")
    not_json = DroppedLine(100, b"{", b',"a":01,"id":4}')  # JSON has no leading zeros
    lines = (request, notification, garbage, not_json)
    assert [line.error_in_place() for line in lines] == [None] * 4


async def test_a_line_over_the_limit_that_comes_whole_in_one_read_is_dropped_too() -> None:
    """However the reads cut the input (uvloop reads more at once than asyncio), a line over
    the limit is dropped: before, one that came whole with its newline in one read was kept."""
    pieces = [b"x" * 150 + b"\nok\n" + b"y" * 120 + b"\n", b""]

    async def chunks() -> bytes:
        return pieces.pop(0)

    dropped: list[DroppedLine] = []

    async def said(line: DroppedLine) -> None:
        dropped.append(line)

    lines = [line async for line in LineReader(-1, max_line=100, dropped=said, chunks=chunks)]
    assert lines == ["ok\n"]
    assert dropped == [
        DroppedLine(100, b"x" * 150, b"x" * 150),
        DroppedLine(100, b"y" * 120, b"y" * 120),
    ]


def test_sigterm_stops_the_server_while_its_client_keeps_stdin_open(tmp_path: Path) -> None:
    """A client that stops its server with SIGTERM need not close the pipe first. Before, the
    server stopped serving but its transport's reader still waited for the next line: it ran
    until stdin closed, and then died of a traceback (exit 1), not of the signal."""
    command = [sys.executable, "-m", "mcp_agent", "serve", "--db", str(tmp_path / "s.db")]
    process = subprocess.Popen(
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert process.stdin is not None and process.stdout is not None
    try:
        process.stdin.write(json.dumps(initialize_request(0)) + "\n")
        process.stdin.flush()
        assert json.loads(process.stdout.readline())["id"] == 0
        process.stdin.write('{"jsonrpc": "2.0", "method": "notifications/initialized"}\n')
        process.stdin.flush()
        process.send_signal(signal.SIGTERM)
        try:
            returncode = process.wait(timeout=20)  # stdin stays open all along
        except subprocess.TimeoutExpired:
            pytest.fail("serve ran on after SIGTERM while its stdin stayed open")
        assert process.stderr is not None
        stderr = process.stderr.read()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        process.stdin.close()
    assert returncode == 143, stderr
    assert "Traceback" not in stderr


def test_ctrl_c_stops_the_server_as_sigterm_does_mid_request(tmp_path: Path) -> None:
    """Ctrl-C in the terminal of a host that started the server reaches the server too (its
    process group). Before, SIGINT cancelled the server mid-request: a request read but not
    yet taken failed the transport, and the server died of a traceback, exit 1."""
    command = [sys.executable, "-m", "mcp_agent", "serve", "--db", str(tmp_path / "s.db")]
    process = subprocess.Popen(
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert process.stdin is not None and process.stdout is not None
    try:
        process.stdin.write(json.dumps(initialize_request(0)) + "\n")
        process.stdin.flush()
        assert json.loads(process.stdout.readline())["id"] == 0
        process.stdin.write('{"jsonrpc": "2.0", "method": "notifications/initialized"}\n')
        create = {"name": "session_create", "arguments": {}}
        for n in range(1, 201):  # requests under way and waiting when the signal comes
            call = {"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": create}
            process.stdin.write(json.dumps(call) + "\n")
        process.stdin.flush()
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=30)  # stdin stays open until then
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 130, stderr
    assert "Traceback" not in stderr


def test_sigterm_stops_the_server_and_its_downstream_servers(tmp_path: Path) -> None:
    """A client (or supervisor) that stops the server with SIGTERM: the server stops as at
    the end of its input, its downstream servers and what they started with it (before: the
    signal ended it at once, and they ran on)."""
    pids = tmp_path / "pids"
    raw = Path(__file__).parent / "servers" / "raw_server.py"
    manifests = tmp_path / "manifests"
    (manifests / "agents").mkdir(parents=True)
    (manifests / "agents" / "default.toml").write_text('description = "d"\ntools = ["*"]\n')
    server = {"command": sys.executable, "args": [str(raw), "--leaves-child", str(pids)]}
    (manifests / "servers.json").write_text(json.dumps({"mcpServers": {"r": server}}))
    command = [sys.executable, "-m", "mcp_agent", "serve", "--db", str(tmp_path / "s.db")]
    command += ["--manifests", str(manifests), "--model", "scripted:echo"]
    process = subprocess.Popen(
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert process.stdin is not None and process.stdout is not None

    def send(message: dict[str, Any]) -> None:
        assert process.stdin is not None
        process.stdin.write(json.dumps(message) + "\n")
        process.stdin.flush()

    def answer_to(request_id: int) -> dict[str, Any]:
        assert process.stdout is not None
        while True:  # notifications may come first
            message = json.loads(process.stdout.readline())
            if message.get("id") == request_id:
                return dict(message)

    try:
        send(initialize_request(0))
        answer_to(0)
        send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        run = {"name": "agent_run", "arguments": {"prompt": "hi", "wait": True}}
        send({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": run})
        answer = answer_to(1)
        assert "result" in answer and not answer["result"].get("isError"), answer
        downstream, child = (int(pid) for pid in pids.read_text().split())
        assert alive(downstream) and alive(child)
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 143, stderr
    assert "Traceback" not in stderr
    for pid in (downstream, child):
        for _ in range(200):  # not our children to reap: they end, and init reaps them
            if not alive(pid):
                break
            time.sleep(0.05)
        assert not alive(pid), pid


HOLDING_SERVER = textwrap.dedent(
    """
    import anyio
    from mcp.server import MCPServer
    from mcp_agent.server import stdio

    stdio.MAX_IN_FLIGHT = 3
    server = MCPServer("holding", log_level="WARNING")

    @server.tool()
    async def hold() -> str:
        await anyio.sleep_forever()
        return "never"

    anyio.run(lambda: stdio.run_stdio(server, drain_seconds=0.1))
    """
)


def test_requests_past_the_bound_in_flight_are_refused_until_some_end(tmp_path: Path) -> None:
    """A client that writes requests without reading the answers held a task and an answer
    for each in the server (100,000 of them: 600 MB); past the bound each is refused, naming
    it, and once a request ends (here, cancelled) the next one is served."""
    script = tmp_path / "holding.py"
    script.write_text(HOLDING_SERVER)
    server = subprocess.Popen(
        [sys.executable, str(script)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert server.stdin is not None and server.stdout is not None

    def send(*messages: dict[str, Any]) -> None:
        assert server.stdin is not None
        server.stdin.write(b"".join((json.dumps(m) + "\n").encode() for m in messages))
        server.stdin.flush()

    def answer() -> dict[str, Any]:
        assert server.stdout is not None
        found: dict[str, Any] = json.loads(server.stdout.readline())
        return found

    def hold(request_id: int) -> dict[str, Any]:
        params = {"name": "hold", "arguments": {}}
        return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}

    def ping(request_id: int) -> dict[str, Any]:
        return {"jsonrpc": "2.0", "id": request_id, "method": "ping"}

    try:
        send(initialize_request(0))
        assert answer()["id"] == 0
        send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        send(hold(1), hold(2), hold(3), ping(4), hold(5))
        for request_id in (4, 5):
            refused = answer()
            assert refused["id"] == request_id
            message = refused["error"]["message"]
            assert "Too many requests under way" in message and " 3 requests" in message
        cancel = {"method": "notifications/cancelled", "params": {"requestId": 1}}
        send({"jsonrpc": "2.0", **cancel}, ping(6))
        assert answer() == {"jsonrpc": "2.0", "id": 6, "result": {}}
    finally:
        server.kill()
        server.wait(timeout=20)


def test_a_request_reusing_an_id_under_way_is_refused_so_cancels_cannot_lift_the_bound(
    tmp_path: Path,
) -> None:
    """The SDK keeps one request per id under way. Two requests with one id were both run and
    counted, and a cancel of the id reached only the newer: cancelled twice, the id counted
    none while the older ran on, so that a client could have any number of requests under
    way past the bound. A request whose id is under way is now refused, as over HTTP."""
    script = tmp_path / "holding.py"
    script.write_text(HOLDING_SERVER)  # at most 3 requests under way
    server = subprocess.Popen(
        [sys.executable, str(script)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        bufsize=0,  # unbuffered: select below sees every answer not yet read
    )
    assert server.stdin is not None and server.stdout is not None

    def send(*messages: dict[str, Any]) -> None:
        assert server.stdin is not None
        server.stdin.write(b"".join((json.dumps(m) + "\n").encode() for m in messages))
        server.stdin.flush()

    def answer() -> dict[str, Any]:
        assert server.stdout is not None
        assert select.select([server.stdout], [], [], 30)[0], "no answer came"
        found: dict[str, Any] = json.loads(server.stdout.readline())
        return found

    def hold(request_id: int | str) -> dict[str, Any]:
        params = {"name": "hold", "arguments": {}}
        return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}

    def cancel(request_id: int) -> dict[str, Any]:
        params = {"requestId": request_id}
        return {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": params}

    try:
        send(initialize_request(0))
        assert answer()["id"] == 0
        send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        send(hold(1), hold("1"))
        refused = answer()
        assert refused["id"] == "1" and refused["error"]["code"] == -32600
        assert "is that of a request still under way" in refused["error"]["message"]
        for request_id in range(2, 10):  # each held, then cancelled twice
            send(hold(request_id), hold(request_id), cancel(request_id), cancel(request_id))
            assert answer()["id"] == request_id  # the second, refused
        # Under way: hold(1) alone. Two more fit; the next is past the bound.
        send(hold(10), hold(11), hold(12))
        past = answer()
        assert past["id"] == 12 and "Too many requests under way" in past["error"]["message"]
    finally:
        server.kill()
        server.wait(timeout=20)


def test_an_initialize_sent_again_is_refused_and_changes_nothing(tmp_path: Path) -> None:
    """An initialize sent again on a stdio connection was answered as a new handshake: the
    client's capabilities and version became the new ones (a client that had declared sampling
    lost it, and its runs on its model failed). MCP's initialization is a connection's first
    interaction: it is now refused, and the first one holds. One answered with an error may
    be sent again."""
    server = subprocess.Popen(
        [sys.executable, "-m", "mcp_agent", "serve", "--db", str(tmp_path / "s.db")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        bufsize=0,
    )
    assert server.stdin is not None and server.stdout is not None

    def ask(message: dict[str, Any]) -> dict[str, Any]:
        assert server.stdin is not None and server.stdout is not None
        server.stdin.write((json.dumps(message) + "\n").encode())
        server.stdin.flush()
        if "id" not in message:
            return {}
        assert select.select([server.stdout], [], [], 30)[0], "no answer came"
        found: dict[str, Any] = json.loads(server.stdout.readline())
        return found

    first = initialize_request(1)
    first["params"]["protocolVersion"] = {"not": "a version"}
    fixed = initialize_request(2)
    fixed["params"]["capabilities"] = {"sampling": {}}
    again = initialize_request(3)
    again["params"]["protocolVersion"] = "2024-11-05"
    run = {"name": "agent_run", "arguments": {"prompt": "hi", "model": "client"}}
    try:
        assert "error" in ask(first)
        assert ask(fixed)["result"]["protocolVersion"] == "2025-06-18"
        ask({"jsonrpc": "2.0", "method": "notifications/initialized"})
        error = ask(again)["error"]
        assert error["code"] == -32600 and "already initialized" in error["message"], error
        # The first handshake holds: the run asks the client's model.
        asked = ask({"jsonrpc": "2.0", "id": "run", "method": "tools/call", "params": run})
        while asked.get("method", "").startswith("notifications/"):  # (resources changed)
            assert select.select([server.stdout], [], [], 30)[0], "no request came"
            asked = json.loads(server.stdout.readline())
        assert asked.get("method") == "sampling/createMessage", asked
    finally:
        server.kill()
        server.wait(timeout=20)


def test_sigterm_stops_a_server_whose_write_waits_for_another_process_lock(
    tmp_path: Path,
) -> None:
    """Another process holds the database's write lock (a long transaction, a frozen
    program) while an append waits for it: SIGTERM stops the server at once, the append
    refused and nothing written. Before, the stop waited for the append's wait, up to the
    busy timeout (a minute), then the search indexer's, then the leases' let-go's."""
    from sqlite_support import stored_texts, write_lock_held
    from test_unreadable import StdioServer, request

    db = tmp_path / "s.db"
    server = StdioServer("--db", str(db))
    try:
        server.initialize()
        server.send(request(2, "tools/call", {"name": "session_create", "arguments": {}}))
        sid = server.answer()["result"]["structuredContent"]["id"]
        entry = {"type": "message", "role": "user", "content": "acknowledged"}
        arguments = {"session_id": sid, "entry": entry}
        server.send(request(3, "tools/call", {"name": "session_append", "arguments": arguments}))
        assert not server.answer()["result"].get("isError")
        with write_lock_held(db):  # until the server has stopped
            arguments = {"session_id": sid, "entry": {**entry, "content": "never written"}}
            server.send(
                request(4, "tools/call", {"name": "session_append", "arguments": arguments})
            )
            get = {"name": "session_get", "arguments": {"session_id": sid}}
            server.send(request(5, "tools/call", get))
            assert server.answer()["id"] == 5  # a read answers while the append waits
            time.sleep(1)  # (the append waits for the lock by now; sooner, this passes anyway)
            server.process.send_signal(signal.SIGTERM)
            # Well before the busy timeout (60 s), with the lock still held.
            server.process.wait(timeout=30)
    finally:
        if server.process.poll() is None:
            server.process.kill()
            server.process.wait()
    texts = stored_texts(db)
    assert len(texts) == 1 and "acknowledged" in texts[0], texts
