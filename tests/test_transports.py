"""The server as users run it: a real child process over stdio, a real HTTP server on a loopback
port, and clients nobody here wrote (the MCP conformance suite, the Inspector CLI, the
TypeScript SDK) when the Node peers are installed (.ci/peers)."""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp import Client, StdioServerParameters
from mcp.types import TextContent
from mcp_support import (
    Served,
    free_port,
    initialize_request,
    poll,
    posted_answer,
    wait_to_listen,
)
from narrow import narrow, present
from slow_support import slow_server
from viewer_support import delete_every_session

from mcp_agent.server.event_store import ASKED_KEPT

ROOT = Path(__file__).resolve().parent.parent
PEERS = Path(os.environ.get("MCP_AGENT_PEERS", ROOT / ".ci" / "node"))
NODE = PEERS / "node_modules" / "node" / "bin" / "node"
TOKEN = "s3cret-token"

needs_node = pytest.mark.skipif(not NODE.exists(), reason="Node peers not installed (.ci/peers)")


def serve_command(db: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "mcp_agent", "serve", "--db", str(db), *extra]


class HttpServer:
    """``serve --transport http`` on a free loopback port; the token comes from a file (a
    command line would show it to every user), ``token=None`` serves with ``--no-auth``."""

    def __init__(self, tmp: Path, *extra: str, token: str | None = TOKEN) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.db = tmp / "http.db"
        args = ["--transport", "http", "--port", str(self.port), *extra]
        if token:
            token_file = tmp / "http.token"
            token_file.write_text(token + "\n")
            token_file.chmod(0o600)
            args += ["--token-file", str(token_file)]
        else:
            args.append("--no-auth")
        self.process = subprocess.Popen(
            serve_command(self.db, *args),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        # A server that never listens is stopped: left running (its fixture never got to
        # stop it), each one a loaded machine was slow to start stayed for good.
        try:
            wait_to_listen(self._listening, self.port)
        except BaseException:
            self.stop()
            raise

    def _listening(self) -> bool:
        if self.process.poll() is not None:
            raise RuntimeError(f"server exited: {present(self.process.stderr).read()}")
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                return True
        except OSError:
            return False

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()


@pytest.fixture(name="shared_http", scope="module")
def shared_http_fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpServer]:
    """One server for the module's tests that leave it running (a start is a second or more
    of a loaded machine); ``http_server`` empties its database before each of them."""
    server = HttpServer(tmp_path_factory.mktemp("shared-http"))
    yield server
    server.stop()


@pytest.fixture(name="open_http", scope="module")
def open_http_fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpServer]:
    """One server without a token (--no-auth, allowed on loopback) for the module's peers that
    send none: the conformance suite and the Inspector's command line. Each works in sessions
    of its own, and neither looks at another's."""
    server = HttpServer(tmp_path_factory.mktemp("open-http"), token=None)
    yield server
    server.stop()


@pytest.fixture
def http_server(shared_http: HttpServer) -> HttpServer:
    """The module's server (with TOKEN), its database empty (as if new)."""
    assert shared_http.process.poll() is None, "a test stopped the shared server"
    delete_every_session(shared_http.url, shared_http.db, TOKEN)
    return shared_http


HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


# --- stdio ------------------------------------------------------------------------------------


def test_serve_prints_a_banner_naming_the_database(tmp_path: Path) -> None:
    db = tmp_path / "banner.db"
    # A hang guard: the server (stdin closed at once) took past 30 s to start and stop on a
    # loaded machine.
    done = subprocess.run(
        serve_command(db), input="", capture_output=True, text=True, timeout=120, check=False
    )
    first = done.stderr.splitlines()[0]
    assert str(db) in first and "sessions stored in" in first
    assert done.stdout == ""


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_stdio_child_process(tmp_path: Path, mode: str) -> None:
    db = tmp_path / "stdio.db"
    params = StdioServerParameters(command=sys.executable, args=serve_command(db)[1:])
    async with Client(params, mode=mode) as client:
        created = await client.call_tool("session_create", {"name": "over stdio"})
        sid = created.structured_content["id"]
        appended = await client.call_tool(
            "session_append",
            {"session_id": sid, "entry": {"type": "message", "role": "user", "content": "hi"}},
        )
        assert not appended.is_error, narrow(appended.content[0], TextContent).text
        bad = await client.call_tool("session_get", {"session_id": "nope"})
        assert bad.is_error and "not_found" in narrow(bad.content[0], TextContent).text
    # The data outlives the process: a second server reads what the first stored.
    async with Client(params, mode=mode) as client:
        listing = await client.call_tool("session_list", {})
        assert [s["name"] for s in listing.structured_content["sessions"]] == ["over stdio"]


# --- HTTP -------------------------------------------------------------------------------------


def test_http_requires_the_token(http_server: HttpServer) -> None:
    missing = httpx.post(http_server.url, json=initialize_request(), headers=HEADERS)
    assert missing.status_code == 401
    wrong = httpx.post(
        http_server.url,
        json=initialize_request(),
        headers={**HEADERS, "Authorization": "Bearer no"},
    )
    assert wrong.status_code == 401
    good = httpx.post(
        http_server.url,
        json=initialize_request(),
        headers={**HEADERS, "Authorization": f"Bearer {TOKEN}"},
    )
    assert good.status_code == 200


def test_http_dns_rebinding_and_size_limits(http_server: HttpServer) -> None:
    """Each refusal is a JSON-RPC error that says what was wrong and what to do: MCP clients
    show its message (the Python SDK's showed "Server returned an error response" for the
    SDK's plain-text refusals and for our 401's old body). A refusal of a request whose body
    was read carries its id back; one refused before (its token, its path) has none to carry."""

    def said(response: httpx.Response, request_id: int | None = None) -> str:
        error = response.json()["error"]
        assert error["code"] == -32600 and response.json()["id"] == request_id
        return str(error["message"])

    auth = {**HEADERS, "Authorization": f"Bearer {TOKEN}"}
    rebound = httpx.post(
        http_server.url, json=initialize_request(), headers={**auth, "Host": "evil.example"}
    )
    assert rebound.status_code == 421
    assert said(rebound, 1) == (
        "Misdirected Request: this server answers for 127.0.0.1, localhost, [::1], not for the"
        " Host 'evil.example' (serve --allowed-host NAME adds a name, for a proxy or a DNS name"
        " of this machine)"
    )
    page = httpx.post(
        http_server.url,
        json=initialize_request(),
        headers={**auth, "Origin": "http://evil.example"},
    )
    assert page.status_code == 403 and said(page, 1).startswith(
        "Forbidden: a web page from 'http://evil.example' may not call this server"
    )
    elsewhere = httpx.post(
        http_server.url.replace("/mcp", "/sse"), json=initialize_request(), headers=auth
    )
    assert elsewhere.status_code == 404
    assert said(elsewhere) == "Not Found: '/sse' is not this server's MCP endpoint, which is /mcp"
    for token in (None, "not-the-token"):
        headers = {**HEADERS, **({"Authorization": f"Bearer {token}"} if token else {})}
        refused = httpx.post(http_server.url, json=initialize_request(), headers=headers)
        assert refused.status_code == 401 and refused.headers["WWW-Authenticate"].startswith(
            "Bearer"
        )
        assert said(refused).startswith("Unauthorized: send Authorization: Bearer <token>")
    huge = json.dumps({**initialize_request(), "padding": "x" * (5 * 1024 * 1024)}).encode()
    # A body of declared size, then one sent in chunks: each refused saying the limit (the SDK
    # said "Request body too large" as plain text, which its Python client does not show).
    for body in (huge, iter([huge[: 1 << 20], huge[1 << 20 :]])):
        refused = httpx.post(
            http_server.url, content=body, headers={**auth, "Content-Type": "application/json"}
        )
        assert refused.status_code == 413
        error = refused.json()["error"]
        assert error["code"] == -32600 and "over 4,194,304 bytes" in error["message"]
        assert "mcp-agent-sessions sessions import" in error["message"]


def test_http_refusals_of_content_type_and_accept_are_json_rpc_errors(
    http_server: HttpServer,
) -> None:
    """A body that is not said to be JSON, and a client that does not accept event streams
    (which a 2026 answer may be), are refused with a JSON-RPC error saying so, on both eras
    (before: a bare "Invalid Content-Type header" with no content type, and an empty 406)."""
    auth = {**HEADERS, "Authorization": f"Bearer {TOKEN}"}
    opened = httpx.post(http_server.url, json=initialize_request(), headers=auth)
    legacy = {
        **auth,
        "mcp-session-id": opened.headers["mcp-session-id"],
        "mcp-protocol-version": "2025-06-18",
    }
    modern = {**auth, "mcp-protocol-version": "2026-07-28", "mcp-method": "ping"}
    ping = b'{"jsonrpc":"2.0","id":3,"method":"ping"}'

    def said(response: httpx.Response, status: int) -> str:
        assert response.status_code == status, response.text
        assert response.headers["content-type"] == "application/json"
        error = response.json()["error"]
        assert error["code"] == -32600, error
        return str(error["message"])

    for era in (legacy, modern):
        for content_type in ({"Content-Type": "text/plain"}, {"Content-Type": ""}):
            refused = httpx.post(http_server.url, content=ping, headers={**era, **content_type})
            message = said(refused, 400)
            assert message.startswith("Unsupported Media Type: ") and "application/json" in message
        json_only = httpx.post(
            http_server.url, content=ping, headers={**era, "Accept": "application/json"}
        )
        assert "text/event-stream" in said(json_only, 406)
    listen = httpx.get(http_server.url, headers=modern)
    assert "POST" in said(listen, 405)


def test_http_refusals_of_a_method_and_of_no_session_say_what_to_send(
    http_server: HttpServer,
) -> None:
    """A 2025 client's PUT got the SDK's bare "Method Not Allowed", and a request without a
    session (a GET, a DELETE, a call before initialize) its bare "Missing session ID": neither
    said what the endpoint takes."""
    auth = {**HEADERS, "Authorization": f"Bearer {TOKEN}"}
    refused = httpx.put(http_server.url, headers=auth)
    assert refused.status_code == 405 and refused.headers["allow"] == "GET, POST, DELETE"
    said = str(refused.json()["error"]["message"])
    assert said.startswith("Method Not Allowed: /mcp takes POST") and said.endswith("not a PUT")
    ping = {"jsonrpc": "2.0", "id": 3, "method": "ping"}
    for refused in (
        httpx.post(http_server.url, json=ping, headers=auth),
        httpx.get(http_server.url, headers={**auth, "Accept": "text/event-stream"}),
        httpx.delete(http_server.url, headers=auth),
    ):
        assert refused.status_code == 400, refused.text
        error = refused.json()["error"]
        assert error["code"] == -32600
        assert "initialize" in error["message"] and "Mcp-Session-Id" in error["message"]
        assert "MCP-Protocol-Version" in error["message"]


def test_a_session_the_server_does_not_have_is_told_to_initialize_again(
    http_server: HttpServer,
) -> None:
    """A legacy client whose session is gone (ended, idle too long, the server restarted)
    showed its user the SDK's bare "Session not found"; the refusal now says why a session
    goes and what to do."""
    auth = {**HEADERS, "Authorization": f"Bearer {TOKEN}"}
    opened = httpx.post(http_server.url, json=initialize_request(), headers=auth)
    session_id = opened.headers["mcp-session-id"]
    legacy = {**auth, "mcp-session-id": session_id, "mcp-protocol-version": "2025-06-18"}
    assert httpx.delete(http_server.url, headers=legacy).status_code == 200
    ping = {"jsonrpc": "2.0", "id": 3, "method": "ping"}
    for gone in (session_id, "never-was"):
        headers = {**legacy, "mcp-session-id": gone}
        for refused in (
            httpx.post(http_server.url, json=ping, headers=headers),
            httpx.get(http_server.url, headers={**headers, "Accept": "text/event-stream"}),
        ):
            assert refused.status_code == 404
            error = refused.json()["error"]
            assert error["code"] == -32600
            said = str(error["message"])
            assert said.startswith(f"Session not found: this server has no HTTP session '{gone}'")
            assert "after 300 s without a request" in said and "restarts" in said
            assert "initialize again" in said


def sampling_session(http: httpx.Client, url: str) -> dict[str, str]:
    """A 2025 session of a raw client that declares sampling and opens no GET stream: the
    headers its requests carry."""
    auth = {**HEADERS, "Authorization": f"Bearer {TOKEN}"}
    initialize = initialize_request()
    initialize["params"]["capabilities"] = {"sampling": {}}
    opened = http.post(url, json=initialize, headers=auth)
    legacy = {
        **auth,
        "mcp-session-id": opened.headers["mcp-session-id"],
        "mcp-protocol-version": "2025-06-18",
    }
    initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    assert http.post(url, json=initialized, headers=legacy).status_code == 202
    return legacy


def test_a_second_initialize_in_a_session_is_refused_and_changes_nothing(
    http_server: HttpServer,
) -> None:
    """An initialize sent again in a session that has one (with its Mcp-Session-Id) was
    answered as a new handshake: the session's client capabilities and version became the
    new ones (a client that had declared sampling lost it, and its runs on its model failed).
    MCP's initialization is the first interaction of a session, and a new session is opened
    without the header; the TypeScript SDK's server refuses it, and so does this one now."""
    with httpx.Client(timeout=30) as http:
        legacy = sampling_session(http, http_server.url)
        again = initialize_request(5)
        again["params"]["protocolVersion"] = "2024-11-05"
        refused = http.post(http_server.url, json=again, headers=legacy)
        assert refused.status_code == 400
        assert refused.json()["id"] == 5
        error = refused.json()["error"]
        assert error["code"] == -32600
        said = str(error["message"])
        assert "already initialized" in said and "without the Mcp-Session-Id header" in said
        # The session goes on as it was: its client's model is still asked.
        run = {"name": "agent_run", "arguments": {"prompt": "hi", "model": "client"}}
        call = {"jsonrpc": "2.0", "id": 6, "method": "tools/call", "params": run}
        with http.stream("POST", http_server.url, json=call, headers=legacy) as stream:
            sampling_request(stream, "the session lost its client's sampling")
        http.delete(http_server.url, headers=legacy)


def test_a_request_id_under_way_in_a_session_is_refused_not_left_unanswered(
    http_server: HttpServer,
) -> None:
    """Before, of two requests of one session with one id under way, the SDK answered one
    and the other's client waited for good (the SDK routes answers by the id)."""
    with httpx.Client(timeout=10) as http:
        legacy = sampling_session(http, http_server.url)
        run = {"name": "agent_run", "arguments": {"prompt": "hi", "model": "client"}}
        call = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": run}
        with http.stream("POST", http_server.url, json=call, headers=legacy) as under_way:
            # Under way (its answer's head came) until this client answers the model's
            # request, which it never does.
            assert under_way.status_code == 200
            for same in (7, "7"):
                ping = {"jsonrpc": "2.0", "id": same, "method": "ping"}
                refused = http.post(http_server.url, json=ping, headers=legacy)
                assert refused.status_code == 409
                assert refused.json()["id"] == same
                assert "still under way" in refused.json()["error"]["message"]
            ping = {"jsonrpc": "2.0", "id": 8, "method": "ping"}
            assert http.post(http_server.url, json=ping, headers=legacy).status_code == 200
            http.delete(http_server.url, headers=legacy)  # ends the run: a quick stop


def test_a_waited_run_asks_the_clients_model_on_its_own_request_stream(
    http_server: HttpServer,
) -> None:
    """A client that opened no GET stream (the 2025 protocol lets it) still gets the model's
    request of a run it waits on: before, it went to the GET stream, the SDK dropped it, and
    the call waited for good."""
    with httpx.Client(timeout=30) as http:
        legacy = sampling_session(http, http_server.url)
        run = {"name": "agent_run", "arguments": {"prompt": "hi", "model": "client"}}
        call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": run}
        asked: list[str] = []
        pings = 0
        with http.stream("POST", http_server.url, json=call, headers=legacy) as stream:
            for line in stream.iter_lines():
                # The stream's keep-alive comments: before the fix, all that ever came.
                pings += line.startswith(":")
                assert pings < 2, "the model's request never came on the call's stream"
                if not line.startswith("data:"):
                    continue
                message = json.loads(line.removeprefix("data:"))
                if message.get("method") == "sampling/createMessage":
                    asked.append(message["params"]["messages"][0]["content"]["text"])
                    answer = {
                        "role": "assistant",
                        "content": {"type": "text", "text": "hello from the client"},
                        "model": "client-model",
                        "stopReason": "endTurn",
                    }
                    reply = {"jsonrpc": "2.0", "id": message["id"], "result": answer}
                    posted = http.post(http_server.url, json=reply, headers=legacy)
                    assert posted.status_code == 202
                elif message.get("id") == 1:
                    result = message["result"]
                    break
        http.delete(http_server.url, headers=legacy)
    assert asked == ["hi"]
    assert not result.get("isError"), result
    assert result["structuredContent"]["status"] == "completed"
    assert "hello from the client" in json.dumps(result["structuredContent"])


def test_a_waited_run_whose_stream_was_dropped_asks_on_the_connections_stream(
    tmp_path: Path,
) -> None:
    """A client that drops the call's stream (a disconnect, which is no cancel) and listens on
    its GET stream gets the run's next request for the model there: sent on the dropped
    stream, the SDK dropped it, and the run waited for good with its session busy."""
    call_a_tool = {
        "role": "assistant",
        "content": {"type": "text", "text": "one moment"},
        "model": "client-model",
        "stopReason": "endTurn",
    }
    http_server = HttpServer(tmp_path)  # of its own: its run is the one agent_runs lists
    try:
        with httpx.Client(timeout=30) as http:
            legacy = sampling_session(http, http_server.url)
            run = {"name": "agent_run", "arguments": {"prompt": "hi", "model": "client"}}
            call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": run}
            with http.stream("POST", http_server.url, json=call, headers=legacy) as stream:
                first = next(
                    json.loads(line.removeprefix("data:"))
                    for line in stream.iter_lines()
                    if line.startswith("data:")
                )
            assert first["method"] == "sampling/createMessage"
            # The call's stream is gone; the client follows up on the run with agent_steer (so
            # that the model is asked again) and listens on its GET stream.
            listen = {**legacy, "Accept": "text/event-stream"}
            with http.stream("GET", http_server.url, headers=listen) as heard:
                runs = {"jsonrpc": "2.0", "id": 2, "method": "tools/call"}
                runs["params"] = {"name": "agent_runs", "arguments": {}}
                listed = posted_answer(http.post(http_server.url, json=runs, headers=legacy))
                (run_info,) = listed["result"]["structuredContent"]["runs"]
                steer = {"jsonrpc": "2.0", "id": 3, "method": "tools/call"}
                steer["params"] = {
                    "name": "agent_steer",
                    "arguments": {"run_id": run_info["runId"], "message": "and again"},
                }
                assert http.post(http_server.url, json=steer, headers=legacy).status_code == 200
                reply = {"jsonrpc": "2.0", "id": first["id"], "result": call_a_tool}
                assert http.post(http_server.url, json=reply, headers=legacy).status_code == 202
                again = sampling_request(
                    heard, "the model's next request never came on the GET stream"
                )
            texts = [m["content"]["text"] for m in again["params"]["messages"]]
            assert texts[-1] == "and again"
            http.delete(http_server.url, headers=legacy)
    finally:
        http_server.stop()


def sampling_request(stream: httpx.Response, never: str) -> dict[str, Any]:
    """The next request for the client's model on an event stream; ``never``: what failed if
    the stream's keep-alive comes twice before it."""
    pings = 0
    for line in stream.iter_lines():
        pings += line.startswith(":")
        assert pings < 2, never
        if line.startswith("data:"):
            message: dict[str, Any] = json.loads(line.removeprefix("data:"))
            if message.get("method") == "sampling/createMessage":
                return message
    raise AssertionError(f"the stream ended: {never}")


def call_tool(
    http: httpx.Client, url: str, headers: dict[str, str], name: str, arguments: dict[str, Any]
) -> dict[str, Any]:
    """A tools/call of a 2025 session, answered on its own stream: its structured content."""
    params = {"name": name, "arguments": arguments}
    call = {"jsonrpc": "2.0", "id": uuid.uuid4().hex, "method": "tools/call", "params": params}
    result = posted_answer(http.post(url, json=call, headers=headers))["result"]
    assert not result.get("isError"), result
    return dict(result["structuredContent"])


def test_a_detached_run_asks_the_clients_model_once_it_opens_its_get_stream(
    http_server: HttpServer,
) -> None:
    """A run started with wait: false asks the client's model on the GET stream. Before, a
    client that opened it a moment after the call never got the request (the SDK dropped it,
    there being no stream), and the run waited for good with its session busy."""
    with httpx.Client(timeout=30) as http:
        legacy = sampling_session(http, http_server.url)
        arguments = {"prompt": "hi", "model": "client", "wait": False}
        started = call_tool(http, http_server.url, legacy, "agent_run", arguments)
        time.sleep(1)  # the run has asked by now, and there was no stream to ask on
        listen = {**legacy, "Accept": "text/event-stream"}
        with http.stream("GET", http_server.url, headers=listen) as heard:
            asked = sampling_request(heard, "the model's request never came on the GET stream")
        answer = {
            "role": "assistant",
            "content": {"type": "text", "text": "hello from the client"},
            "model": "client-model",
            "stopReason": "endTurn",
        }
        reply = {"jsonrpc": "2.0", "id": asked["id"], "result": answer}
        assert http.post(http_server.url, json=reply, headers=legacy).status_code == 202
        waited = {"run_id": started["runId"], "wait_seconds": 30}
        status = call_tool(http, http_server.url, legacy, "agent_status", waited)
        http.delete(http_server.url, headers=legacy)
    assert status["status"] == "completed", status
    assert status["answer"] == "hello from the client"


def test_a_detached_run_whose_client_never_listens_fails_saying_so(tmp_path: Path) -> None:
    """With no stream to ask its client's model on, a run waited for good (its session busy);
    it now fails once the client has opened none for --client-stream-wait seconds."""
    server = HttpServer(tmp_path, "--client-stream-wait", "0.5")
    try:
        with httpx.Client(timeout=30) as http:
            legacy = sampling_session(http, server.url)
            arguments = {"prompt": "hi", "model": "client", "wait": False}
            started = call_tool(http, server.url, legacy, "agent_run", arguments)
            waited = {"run_id": started["runId"], "wait_seconds": 30}
            status = call_tool(http, server.url, legacy, "agent_status", waited)
            again = {"session_id": started["sessionId"], "prompt": "again", "wait": False}
            # Its session is free again.
            call_tool(http, server.url, legacy, "agent_run", {**arguments, **again})
            http.delete(server.url, headers=legacy)
    finally:
        server.stop()
    assert status["status"] == "error", status
    said = str(status["error"])
    assert "started with wait: false" in said and "GET stream" in said
    assert "had none open for 0.5 s" in said


def test_past_the_requests_for_the_clients_model_a_session_keeps_the_oldest_fails_saying_so(
    tmp_path: Path,
) -> None:
    """A session keeps 64 unanswered requests for its client's model (to send again on a new
    GET stream, or fail once their stream closed). Past that the oldest was forgotten without
    a word: its client's answer still came through, but were its stream to close, it was
    neither sent again nor failed, and its run waited for good. The oldest is now failed,
    saying why, and the others go on."""
    server = HttpServer(tmp_path, "--max-runs", "0", "--max-runs-per-client", "0")
    try:
        with httpx.Client(timeout=30) as http:
            legacy = sampling_session(http, server.url)
            listen = {**legacy, "Accept": "text/event-stream"}
            with http.stream("GET", server.url, headers=listen) as heard:
                runs = [
                    call_tool(http, server.url, legacy, "agent_run", run_arguments(number))["runId"]
                    for number in range(ASKED_KEPT + 1)
                ]
                lines = heard.iter_lines()
                asked = [next_sampling_request(lines, "no request")[0] for _ in runs]
                # The runs start side by side, and a loaded machine may have a later one ask
                # first: the oldest request on the stream is the one given up, whichever run's.
                waited = {"run_id": runs[run_asking(asked[0])], "wait_seconds": 30}
                oldest = call_tool(http, server.url, legacy, "agent_status", waited)
                reply = {"jsonrpc": "2.0", "id": asked[-1]["id"], "result": CLIENT_ANSWER}
                assert http.post(server.url, json=reply, headers=legacy).status_code == 202
                waited = {"run_id": runs[run_asking(asked[-1])], "wait_seconds": 30}
                newest = call_tool(http, server.url, legacy, "agent_status", waited)
            http.delete(server.url, headers=legacy)
    finally:
        server.stop()
    assert oldest["status"] == "error", oldest
    said = str(oldest["error"])
    assert f"{ASKED_KEPT} requests to its client unanswered" in said, said
    assert newest["status"] == "completed", newest


def run_arguments(number: int) -> dict[str, Any]:
    """The arguments of an ``agent_run`` on the client's model whose prompt names ``number``."""
    return {"prompt": f"run number {number}.", "model": "client", "wait": False}


def run_asking(request: dict[str, Any]) -> int:
    """The number of the run (by ``run_arguments``) whose request for the model is ``request``."""
    text = json.dumps(request["params"]["messages"])
    numbers = [n for n in range(ASKED_KEPT + 1) if f"run number {n}." in text]
    assert len(numbers) == 1, text
    return numbers[0]


CLIENT_ANSWER = {
    "role": "assistant",
    "content": {"type": "text", "text": "hello from the client"},
    "model": "client-model",
    "stopReason": "endTurn",
}


def test_a_request_for_the_clients_model_whose_get_stream_closed_unanswered_comes_again(
    http_server: HttpServer,
) -> None:
    """A detached run asks the client's model on the GET stream; that stream closed before
    the client answered (a client that lost it with its connection), and the run waited for
    good: the next GET stream the client opens gets the request again, and only until it is
    answered."""
    with httpx.Client(timeout=30) as http:
        legacy = sampling_session(http, http_server.url)
        listen = {**legacy, "Accept": "text/event-stream"}
        arguments = {"prompt": "hi", "model": "client", "wait": False}
        with http.stream("GET", http_server.url, headers=listen) as first:
            started = call_tool(http, http_server.url, legacy, "agent_run", arguments)
            asked = sampling_request(first, "the model's request never came on the GET stream")
        with http.stream("GET", http_server.url, headers=listen) as second:
            again = sampling_request(second, "the request was not sent again")
        assert again == asked
        reply = {"jsonrpc": "2.0", "id": asked["id"], "result": CLIENT_ANSWER}
        assert http.post(http_server.url, json=reply, headers=legacy).status_code == 202
        waited = {"run_id": started["runId"], "wait_seconds": 30}
        status = call_tool(http, http_server.url, legacy, "agent_status", waited)
        # Answered, it is not sent again: the next GET stream hears only what comes next.
        with http.stream("GET", http_server.url, headers=listen) as third:
            call_tool(http, http_server.url, legacy, "session_create", {})
            data = next(line for line in third.iter_lines() if line.startswith("data:"))
        assert json.loads(data.removeprefix("data:"))["method"] != "sampling/createMessage"
        http.delete(http_server.url, headers=legacy)
    assert status["status"] == "completed", status
    assert status["answer"] == "hello from the client"


def test_a_request_for_the_clients_model_whose_get_stream_closed_fails_if_none_opens(
    tmp_path: Path,
) -> None:
    """Its GET stream closed before the client answered, and the client opened no other: the
    run waited for good, its session busy; it now fails after --client-stream-wait seconds,
    saying why."""
    server = HttpServer(tmp_path, "--client-stream-wait", "0.5")
    try:
        with httpx.Client(timeout=30) as http:
            legacy = sampling_session(http, server.url)
            listen = {**legacy, "Accept": "text/event-stream"}
            arguments = {"prompt": "hi", "model": "client", "wait": False}
            with http.stream("GET", server.url, headers=listen) as heard:
                started = call_tool(http, server.url, legacy, "agent_run", arguments)
                sampling_request(heard, "the model's request never came on the GET stream")
            waited = {"run_id": started["runId"], "wait_seconds": 10}
            status = call_tool(http, server.url, legacy, "agent_status", waited)
            http.delete(server.url, headers=legacy)
    finally:
        server.stop()
    assert status["status"] == "error", status
    said = str(status["error"])
    assert "GET stream) closed before the client answered" in said, said
    assert "did not come back for it in 0.5 s" in said, said


def test_a_waited_run_whose_client_vanished_before_answering_fails_and_frees_its_session(
    tmp_path: Path,
) -> None:
    """The client of a waited run went for good (its connection dropped) after the request for
    its model came on the call's stream: the run waited for good, its session busy, and so
    did the HTTP session (a call under way never idles). Unless the client comes back for the
    stream (a resume replays the request), the run now fails after --client-stream-wait
    seconds, saying why."""
    server = HttpServer(tmp_path, "--client-stream-wait", "0.5")
    try:
        with httpx.Client(timeout=30) as http:
            legacy = sampling_session(http, server.url)
            sid = call_tool(http, server.url, legacy, "session_create", {})["id"]
            run = {"prompt": "hi", "model": "client", "session_id": sid}
            call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call"}
            call["params"] = {"name": "agent_run", "arguments": run}
            with http.stream("POST", server.url, json=call, headers=legacy) as stream:
                sampling_request(stream, "the model's request never came on the call's stream")
            other = sampling_session(http, server.url)
            (under_way,) = call_tool(http, server.url, other, "agent_runs", {})["runs"]
            waited = {"run_id": under_way["runId"], "wait_seconds": 10}
            status = call_tool(http, server.url, other, "agent_status", waited)
            again = {"prompt": "again", "model": "scripted:echo", "session_id": sid}
            assert call_tool(http, server.url, other, "agent_run", again)["status"] == "completed"
    finally:
        server.stop()
    assert status["status"] == "error", status
    said = str(status["error"])
    assert "(its call's stream) closed before the client answered" in said, said


def next_sampling_request(lines: Iterator[str], never: str) -> tuple[dict[str, Any], str]:
    """The next request for the client's model among an event stream's ``lines``, with its
    event id; ``never``: what failed if the stream's keep-alive comes twice before it."""
    pings = 0
    event_id = ""
    for line in lines:
        pings += line.startswith(":")
        assert pings < 2, never
        if line.startswith("id:"):
            event_id = line.removeprefix("id:").strip()
        elif line.startswith("data:"):
            message: dict[str, Any] = json.loads(line.removeprefix("data:"))
            assert "method" in message, f"the call was answered: {never}: {message}"
            if message.get("method") == "sampling/createMessage":
                return message, event_id
    raise AssertionError(f"the stream ended: {never}")


@pytest.mark.parametrize("old", ["dropped", "left open"])
def test_a_waited_runs_next_request_for_the_model_comes_on_the_calls_resumed_stream(
    tmp_path: Path, old: str
) -> None:
    """A client whose call's stream dropped (or that came back before the server saw it drop)
    resumes it with Last-Event-ID: the run's next request for its model belongs on that
    stream (MCP: a request of the server's that relates to a call goes on the call's stream,
    and the GET stream carries those unrelated to any call). It went to the GET stream, as
    though the call had been answered, and a client with none open saw its run fail."""
    server = HttpServer(tmp_path, "--client-stream-wait", "1")
    try:
        with httpx.Client(timeout=30) as http:
            legacy = sampling_session(http, server.url)
            run = {"name": "agent_run", "arguments": {"prompt": "hi", "model": "client"}}
            call = {"jsonrpc": "2.0", "id": "call", "method": "tools/call", "params": run}
            with contextlib.ExitStack() as exits:
                first_stream = exits.enter_context(
                    http.stream("POST", server.url, json=call, headers=legacy)
                )
                first, seen = next_sampling_request(first_stream.iter_lines(), "no first request")
                if old == "dropped":
                    exits.close()
                    # The call goes on (a disconnect is no cancel): its id is still taken.
                    ping = {"jsonrpc": "2.0", "id": "call", "method": "ping"}
                    assert http.post(server.url, json=ping, headers=legacy).status_code == 409
                resume = {**legacy, "Accept": "text/event-stream", "last-event-id": seen}
                with http.stream("GET", server.url, headers=resume) as resumed:
                    lines = resumed.iter_lines()
                    (under_way,) = call_tool(http, server.url, legacy, "agent_runs", {})["runs"]
                    steer = {"run_id": under_way["runId"], "message": "and again"}
                    call_tool(http, server.url, legacy, "agent_steer", steer)
                    reply = {"jsonrpc": "2.0", "id": first["id"], "result": CLIENT_ANSWER}
                    assert http.post(server.url, json=reply, headers=legacy).status_code == 202
                    again, _ = next_sampling_request(lines, "the next request was not sent here")
                    texts = [m["content"]["text"] for m in again["params"]["messages"]]
                    assert texts[-1] == "and again"
                    reply = {"jsonrpc": "2.0", "id": again["id"], "result": CLIENT_ANSWER}
                    assert http.post(server.url, json=reply, headers=legacy).status_code == 202
                    answered = [
                        json.loads(line.removeprefix("data:"))
                        for line in lines
                        if line.startswith("data:")
                    ]
            http.delete(server.url, headers=legacy)
    finally:
        server.stop()
    assert answered[-1]["id"] == "call", answered
    assert answered[-1]["result"]["structuredContent"]["status"] == "completed", answered


def test_a_client_that_stops_reading_its_get_stream_still_gets_its_answers(
    tmp_path: Path,
) -> None:
    """A client that stopped reading its GET stream while the server had much to send there
    (updates of the resources it watches) got no answer to any request of its session once
    that stream's buffer was full: the SDK's router passes on the session's messages in turn
    and waited for room there. The stream is now closed once the client has read nothing of
    it for --notification-timeout seconds with messages waiting behind it (what it did not
    read is kept for a resume). The server's send buffers are the smallest --http-send-buffer
    takes: the stream stalls after some 100 appends rather than 700."""
    server = Served(
        tmp_path,
        "--token-file",
        str(token_file(tmp_path)),
        *STALL_TIMEOUT,
        "--http-send-buffer",
        "4096",
    )
    try:
        with httpx.Client(timeout=30) as http:
            legacy = sampling_session(http, server.url)
            other = sampling_session(http, server.url)
            watched = [
                call_tool(http, server.url, other, "session_create", {})["id"] for _ in range(25)
            ]
            for uri in (f"session://{w}{end}" for w in watched for end in RESOURCE_ENDS):
                subscribe: dict[str, Any] = {"jsonrpc": "2.0", "id": uri}
                subscribe |= {"method": "resources/subscribe", "params": {"uri": uri}}
                assert http.post(server.url, json=subscribe, headers=legacy).status_code == 200
            with socket.socket() as stuck:
                stuck.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                stuck.connect(("127.0.0.1", server.port))
                head = "".join(f"{k}: {v}\r\n" for k, v in legacy.items() if k != "Accept")
                stuck.sendall(
                    f"GET /mcp HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n{head}"
                    "Accept: text/event-stream\r\n\r\n".encode()
                )
                stuck.recv(1)  # its answer began: the stream is open, and read no more
                # Another client writes to the sessions it watches until their updates fill
                # the sockets and the stream's buffer, and the notifier finds the session's
                # messages waiting (or the stream closed).
                entry = {"type": "message", "role": "user", "content": "hi"}
                for _ in range(40):  # (a bound, for the test)
                    if any(said in server.banner() for said in STALLED):
                        break
                    for session_id in watched:
                        append = {"session_id": session_id, "entry": entry}
                        call_tool(http, server.url, other, "session_append", append)
                ping = {"jsonrpc": "2.0", "id": "after", "method": "ping"}
                answered = http.post(server.url, json=ping, headers=legacy, timeout=10)
            http.delete(server.url, headers=legacy)
    finally:
        server.stop()
    assert answered.status_code == 200 and '"id":"after"' in answered.text, answered.text
    assert "closed event stream _GET_stream" in server.banner()


RESOURCE_ENDS = ("", "/tree", "/context", "/export.jsonl")
# The server's words once a client's stream stalls the session: the notifier drops it (the
# router waits for room on its GET stream), or the stream is closed.
STALLED = ("legacy connection dropped from notifications", "closed event stream")
STALL_TIMEOUT = ("--notification-timeout", "0.5")


def token_file(tmp: Path) -> Path:
    token = tmp / "http.token"
    token.write_text(TOKEN + "\n")
    token.chmod(0o600)
    return token


def test_a_client_that_goes_before_its_body_ends_leaves_no_error_in_the_log(
    tmp_path: Path,
) -> None:
    """A POST whose client went before its body ended (a client that vanished mid-upload)
    had the SDK log an error with a traceback, and tell the HTTP session of it; there is no
    one to answer, and nothing went wrong on the server."""
    server = HttpServer(tmp_path)
    try:
        with httpx.Client(timeout=30) as http:
            legacy = sampling_session(http, server.url)
            for extra in ("", f"Mcp-Session-Id: {legacy['mcp-session-id']}\r\n"):
                with socket.create_connection(("127.0.0.1", server.port)) as sock:
                    head = (
                        f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n"
                        f"Authorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\n"
                        f"Accept: application/json, text/event-stream\r\n{extra}"
                        "Content-Length: 1000\r\n\r\n"
                    )
                    sock.sendall(head.encode() + b'{"jsonrpc": "2.0", "id": 1, "meth')
            # The session goes on.
            assert call_tool(http, server.url, legacy, "session_list", {})["sessions"] == []
    finally:
        server.stop()
    said = present(server.process.stderr).read()
    assert "Traceback" not in said and "ERROR" not in said, said


def test_non_loopback_without_token_is_refused(tmp_path: Path) -> None:
    done = subprocess.run(
        serve_command(tmp_path / "x.db", "--transport", "http", "--host", "0.0.0.0"),
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 2
    assert "without a token" in done.stderr and "--token-file" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_http_client_with_token(http_server: HttpServer, mode: str) -> None:
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"})
    async with (
        http,
        Client(streamable_http_client(http_server.url, http_client=http), mode=mode) as client,
    ):
        created = await client.call_tool("session_create", {"name": f"http-{mode}"})
        assert not created.is_error
        listing = await client.list_resources()
        assert f"session://{created.structured_content['id']}" in [r.uri for r in listing.resources]


# --- peers nobody here wrote ------------------------------------------------------------------


CONFORMANCE = PEERS / "node_modules" / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"


def node_env() -> dict[str, str]:
    return {**os.environ, "PATH": f"{NODE.parent}{os.pathsep}{os.environ['PATH']}"}


@needs_node
def test_conformance_suite(tmp_path: Path, open_http: HttpServer) -> None:
    # The suite sends no token: a server without one.
    done = subprocess.run(
        [
            str(NODE),
            str(CONFORMANCE),
            "server",
            "--url",
            open_http.url,
            "--suite",
            "all",
            "--expected-failures",
            str(ROOT / "tests" / "peers" / "conformance-baseline.yml"),
            "-o",
            str(tmp_path / "checks"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=node_env(),
        check=False,
    )
    summary = done.stdout[done.stdout.find("=== SUMMARY ===") :]
    assert done.returncode == 0, summary + done.stderr[-2000:]
    assert "Baseline check passed" in done.stdout
    # Nor a warning (a SHOULD missed: the priming event and retry field of a resumable
    # stream, among others), in any scenario.
    checks = [
        check
        for path in (tmp_path / "checks").rglob("checks.json")
        for check in json.loads(path.read_text())
    ]
    assert checks
    warned = [f"{c['id']}: {c.get('errorMessage')}" for c in checks if c["status"] == "WARNING"]
    assert not warned


# The client scenarios that apply to our client of downstream servers. Left out: elicitation
# (our client does not offer it, and a server must not ask), sse-retry (it passes, but judges
# the reconnection's delay in wall-clock time), and the auth scenarios (no OAuth client here).
@needs_node
@pytest.mark.parametrize("scenario", ["initialize", "tools_call"])
def test_conformance_suite_against_our_client(tmp_path: Path, scenario: str) -> None:
    client = [sys.executable, str(ROOT / "tests" / "peers" / "conformance_client.py")]
    done = subprocess.run(
        [
            str(NODE),
            str(CONFORMANCE),
            "client",
            "--command",
            shlex.join(client),
            "--scenario",
            scenario,
            # The suite's own wait for the client (30 s by default) is a hang guard, as ours
            # below: a Python client took 32 s to start on a loaded machine.
            "--timeout",
            "100000",
            "-o",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=node_env(),
        check=False,
    )
    said = done.stdout + done.stderr  # the suite reports on stderr
    assert done.returncode == 0, said[-4000:]
    assert "OVERALL: PASSED" in said and " 0 failed" in said, said[-4000:]


def inspector_cli(command: list[str], *method: str) -> Any:
    inspector = PEERS / "node_modules" / "@modelcontextprotocol" / "inspector"
    done = subprocess.run(
        [str(NODE), str(inspector / "cli" / "build" / "cli.js"), "--cli", *command, *method],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        # A guard against a hang only: each call starts node and a server of its own, which
        # took over 60 s at a load of 15 on this 2-core machine (the suite's conformance run
        # has 120 s too).
        timeout=120,
        env=node_env(),
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


@needs_node
def test_inspector_cli_over_stdio(tmp_path: Path) -> None:
    command = serve_command(tmp_path / "inspector.db")
    names = {tool["name"] for tool in inspector_cli(command, "--method", "tools/list")["tools"]}
    assert {"session_create", "agent_run", "session_fork"} <= names
    created = inspector_cli(
        command,
        "--method",
        "tools/call",
        "--tool-name",
        "session_create",
        "--tool-arg",
        "name=from the inspector",
    )
    assert created["structuredContent"]["name"] == "from the inspector"
    sid = created["structuredContent"]["id"]
    run = inspector_cli(
        command,
        "--method",
        "tools/call",
        "--tool-name",
        "agent_run",
        "--tool-arg",
        "prompt=hello",
        "--tool-arg",
        f"session_id={sid}",
        "--tool-arg",
        "model=scripted:echo",
    )
    assert run["structuredContent"]["status"] == "completed", run
    read = inspector_cli(command, "--method", "resources/read", "--uri", f"session://{sid}/context")
    context = json.loads(read["contents"][0]["text"])
    assert [m["role"] for m in context["messages"]] == ["user", "assistant"]
    # (How the Inspector sends a nullable integer does not depend on the transport: checked
    # over HTTP below, where a call costs no server start.)


@needs_node
def test_inspector_cli_over_http(open_http: HttpServer) -> None:
    # The Inspector's command line sends no token: a server without one.
    command = [open_http.url, "--transport", "http"]
    names = {t["name"] for t in inspector_cli(command, "--method", "tools/list")["tools"]}
    assert {"session_create", "agent_run"} <= names
    created = inspector_cli(command, "--method", "tools/call", "--tool-name", "session_create")[
        "structuredContent"
    ]
    run = inspector_cli(
        command,
        "--method",
        "tools/call",
        "--tool-name",
        "agent_run",
        "--tool-arg",
        "prompt=hello",
        "--tool-arg",
        f"session_id={created['id']}",
        "--tool-arg",
        "model=scripted:echo",
        "--tool-arg",
        "wait=null",  # null typed: the default (the call waits for the run)
    )
    assert run["structuredContent"]["status"] == "completed", run
    uri = f"session://{created['id']}/context"
    read = inspector_cli(command, "--method", "resources/read", "--uri", uri)
    # The Inspector sends a nullable integer or boolean as text: read as the JSON it is.
    page = inspector_cli(
        command,
        "--method",
        "tools/call",
        "--tool-name",
        "session_get",
        "--tool-arg",
        f"session_id={created['id']}",
        "--tool-arg",
        "limit=1",
        "--tool-arg",
        "view=entries",
    )
    prompt = inspector_cli(
        command,
        "--method",
        "prompts/get",
        "--prompt-name",
        "continue_session",
        "--prompt-args",
        f"session_id={created['id']}",
    )
    context = json.loads(read["contents"][0]["text"])
    assert [m["role"] for m in context["messages"]] == ["user", "assistant"]
    assert not page.get("isError"), page
    assert len(page["structuredContent"]["entries"]) == 1
    assert prompt["messages"][0]["role"] == "user"


@needs_node
def test_inspector_cli_text_that_reads_as_json_is_kept_as_text(tmp_path: Path) -> None:
    """The Inspector's command line sends a nullable text argument as the text typed: a name
    or summary that reads as a JSON array or object was read by the server as that value and
    refused ("name should be a valid string")."""
    server = HttpServer(tmp_path, token=None)
    try:
        command = [server.url, "--transport", "http"]
        created = inspector_cli(
            command,
            "--method",
            "tools/call",
            "--tool-name",
            "session_create",
            "--tool-arg",
            'name=["draft", "v2"]',
        )
    finally:
        server.stop()
    assert not created.get("isError"), created
    assert created["structuredContent"]["name"] == '["draft", "v2"]'


def run_ts_client(*args: str) -> dict[str, Any]:
    script = PEERS / "ts_client.mjs"
    shutil.copy(ROOT / "tests" / "peers" / "ts_client.mjs", script)
    done = subprocess.run(
        [str(NODE), str(script), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=node_env(),
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert "agent_run" in seen["tools"]
    assert seen["badIsError"] and "not_found" in seen["badText"]
    assert f"session://{seen['id']}" in seen["resources"]
    assert seen["context"]["messages"][0]["content"] == "hello from ts"
    assert seen["bigStubbed"] and seen["bigRoundTrip"]
    # Read in pieces of tens of KB by the texts alone, the entry is whole.
    assert seen["piecesWhole"] and 10 < seen["pieceCalls"] < 200, seen["pieceCalls"]
    # Only nextCursor (null: no more) is null in a page; the other views' lists are left out.
    assert seen["views"] == {view: ["nextCursor"] for view in seen["views"]}, seen["views"]
    # Every line of the file, one page each, to the last (the header, the name, the first message;
    # the large one alone on its page, omitted from its jsonl).
    assert seen["exportLines"] == 3, seen["exportLines"]
    assert seen["promptRoles"] == ["user", "user"]
    return seen


@needs_node
def test_typescript_sdk_client_over_http(http_server: HttpServer) -> None:
    run_ts_client("http", http_server.url, TOKEN)


@needs_node
def test_typescript_sdk_client_over_stdio(tmp_path: Path) -> None:
    run_ts_client("stdio", *serve_command(tmp_path / "ts.db"))


@needs_node
@pytest.mark.anyio
async def test_a_typescript_sdk_server_downstream_of_ours() -> None:
    """A downstream server no one here wrote, through our stdio client transport: its tools
    listed and called, an answer of 5 MB on one line whole, and no process left at the end."""
    import anyio

    from mcp_agent.manifests import ServerConfig
    from mcp_agent.messages import TextContent as Text
    from mcp_agent.proxy.downstream import McpServerConnection, connect_to

    script = PEERS / "ts_server.mjs"
    shutil.copy(ROOT / "tests" / "peers" / "ts_server.mjs", script)
    config = ServerConfig(command=str(NODE), args=[str(script)])
    connection = McpServerConnection("ts", connect_to("ts", config), start_timeout=30)

    async with anyio.create_task_group() as group:

        async def call(tool: str, **arguments: Any) -> str:
            result = await connection.call(group, tool, arguments, time_limit=30)
            assert not result.is_error, result.content
            return "".join(narrow(block, Text).text for block in result.content)

        assert {tool.name for tool in await connection.tools(group)} == {"echo", "long", "pid"}
        assert await call("echo", text="ünïcödé 🙂") == "ünïcödé 🙂"
        # Read whole (a model is given its first 100,000 characters).
        assert await call("long", size=5_000_000) == "x" * 100_000 + (
            "[cut: the tool's result held 5,000,000 characters of text; the first 100,000 are kept]"
        )
        pid = int(await call("pid"))
        await connection.stop()
    with anyio.fail_after(10):
        while os.path.exists(f"/proc/{pid}"):  # noqa: ASYNC240 (a look at procfs)
            await anyio.sleep(0.05)


def test_rebinding_protection_stays_on_off_loopback(tmp_path: Path) -> None:
    server = HttpServer(tmp_path, "--host", "0.0.0.0", "--allowed-host", "agents.example")
    try:
        auth = {**HEADERS, "Authorization": f"bearer {TOKEN}"}  # the scheme is case-insensitive
        url = f"http://127.0.0.1:{server.port}/mcp"
        assert httpx.post(url, json=initialize_request(), headers=auth).status_code == 200
        named = {**auth, "Host": f"agents.example:{server.port}"}
        assert httpx.post(url, json=initialize_request(), headers=named).status_code == 200
        rebound = {**auth, "Host": f"evil.example:{server.port}"}
        assert httpx.post(url, json=initialize_request(), headers=rebound).status_code == 421
    finally:
        server.stop()


def test_junk_requests_with_stderr_never_read_do_not_freeze_the_http_server(
    tmp_path: Path,
) -> None:
    """uvicorn says each request that is not HTTP in a warning of its own handler, written to
    stderr by the event loop: with stderr on a pipe nobody reads (HttpServer's, a launcher's),
    some 1,600 of them filled it and the server answered nothing more. Its lines go through
    our queue to stderr (``cli.stderr_log``), as every other log line does."""
    server = HttpServer(tmp_path, token=None)
    try:
        for sent in range(3000):  # some 120 KB of warnings: twice what a pipe holds
            with socket.create_connection(("127.0.0.1", server.port), timeout=10) as junk:
                junk.sendall(b"\x00 not HTTP \xff\r\n\r\n")
                try:
                    answer = junk.recv(100)
                except TimeoutError:
                    pytest.fail(f"the server stopped answering after {sent} requests")
                assert answer.startswith(b"HTTP/1.1 400"), answer
        page = httpx.get(f"http://127.0.0.1:{server.port}/", timeout=10)
        assert page.status_code == 200
    finally:
        server.stop()
    stderr = present(server.process.stderr).read()
    assert "Invalid HTTP request received" in stderr


def test_calls_left_under_way_by_dropped_streams_are_bounded_per_session(
    tmp_path: Path,
) -> None:
    """Over HTTP a dropped stream is no cancel: its call goes on. A client that dropped each
    call's stream and sent another (2,000 of them waiting 600 s each) grew the server without
    bound; past MAX_IN_FLIGHT calls under way a session's next request is refused, saying
    why and what to do, and once some end it is served again."""
    with (
        slow_server(tmp_path, SLOW_SERVER_MAX_IN_FLIGHT="3") as url,
        httpx.Client(timeout=10) as http,
    ):
        legacy = sampling_session(http, url)

        def call(request_id: int, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
            params = {"name": name, "arguments": arguments}
            return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}

        started = http.post(
            url, json=call(1, "agent_run", {"prompt": "silent 60", "wait": False}), headers=legacy
        )
        run_id = json.loads(
            next(line[5:] for line in started.text.splitlines() if line.startswith("data:"))
        )
        run_id = run_id["result"]["structuredContent"]["runId"]
        waiting = {"run_id": run_id, "wait_seconds": 60}
        for request_id in (2, 3, 4):  # each stream dropped as soon as the call is under way
            with http.stream(
                "POST", url, json=call(request_id, "agent_status", waiting), headers=legacy
            ) as dropped:
                assert dropped.status_code == 200
        ping = {"jsonrpc": "2.0", "id": 5, "method": "ping"}
        refused = http.post(url, json=ping, headers=legacy)
        assert refused.status_code == 429, refused.text
        said = refused.json()["error"]["message"]
        assert "3 requests unanswered" in said and "notifications/cancelled" in said
        for request_id in (2, 3, 4):
            cancel = {
                "jsonrpc": "2.0",
                "method": "notifications/cancelled",
                "params": {"requestId": request_id},
            }
            assert http.post(url, json=cancel, headers=legacy).status_code == 202

        def once_room() -> httpx.Response | None:
            answer = http.post(url, json=ping, headers=legacy)
            return None if answer.status_code == 429 else answer

        served = poll(once_room, "the cancelled calls never ended")
        assert served.status_code == 200


def test_sigterm_stops_an_http_server_whose_write_waits_for_another_process_lock(
    tmp_path: Path,
) -> None:
    """As over stdio (test_stdio): another process holds the SQLite database's write lock
    while an append waits for it; SIGTERM stops the server at once (uvicorn waits for the
    requests under way), the append refused and nothing written. Before, after the append's
    busy timeout (a minute)."""
    import threading

    from sqlite_support import stored_texts, write_lock_held

    server = HttpServer(tmp_path)
    auth = {**HEADERS, "Authorization": f"Bearer {TOKEN}"}

    def answer(response: httpx.Response) -> Any:
        if response.headers["content-type"].startswith("application/json"):
            return response.json()
        data = [line[5:] for line in response.text.splitlines() if line.startswith("data:")]
        return json.loads(data[-1])

    try:
        opened = httpx.post(server.url, json=initialize_request(), headers=auth)
        legacy = {
            **auth,
            "mcp-session-id": opened.headers["mcp-session-id"],
            "mcp-protocol-version": "2025-06-18",
        }

        def call(request_id: int, name: str, **arguments: Any) -> Any:
            params = {"name": name, "arguments": arguments}
            body = {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}
            return answer(httpx.post(server.url, json=body, headers=legacy, timeout=120))

        sid = call(2, "session_create")["result"]["structuredContent"]["id"]
        entry = {"type": "message", "role": "user", "content": "acknowledged"}
        assert not call(3, "session_append", session_id=sid, entry=entry)["result"].get("isError")
        with write_lock_held(server.db):  # until the server has stopped

            def append_waits() -> None:
                with contextlib.suppress(Exception):  # its answer, if any: the server stops
                    call(4, "session_append", session_id=sid, entry={**entry, "content": "no"})

            threading.Thread(target=append_waits, daemon=True).start()
            assert "result" in call(5, "session_get", session_id=sid)  # reads answer meanwhile
            time.sleep(1)  # (the append waits for the lock by now; sooner, this passes anyway)
            server.process.terminate()
            server.process.wait(timeout=30)  # well before the busy timeout (60 s)
    finally:
        if server.process.poll() is None:
            server.process.kill()
            server.process.wait()
    texts = stored_texts(server.db)
    assert len(texts) == 1 and "acknowledged" in texts[0], texts
