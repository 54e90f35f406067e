"""Requests the SDK cannot read (mcp_agent/server/unreadable.py): over stdio each gets its
JSON-RPC answer instead of being dropped, and text that is not valid Unicode (a lone surrogate)
is refused on every transport, for every method, before anything is stored."""

from __future__ import annotations

import json
import select
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp_support import (
    HTTP_HEADERS,
    TEST_AGENTS,
    Served,
    agent_server,
    call,
    call_error,
    initialize_request,
    make_server,
    prompt_responder,
    serve_piped,
)
from mcp_types.methods import validate_client_request
from pydantic import BaseModel, ValidationError
from viewer_support import delete_every_session

from mcp_agent.server.unreadable import DescribedParams, message_problem
from mcp_agent.sessions.sqlite import SqliteSessionRepo

pytestmark = pytest.mark.anyio

HANG_GUARD_S = 60
SURROGATE_TEXT = "a lone \\ud800 here"  # as it stands in the JSON text: an escape


def request(request_id: int, method: str, params: dict[str, Any]) -> str:
    """A JSON-RPC request line, with each ``@S@`` in it replaced by a lone surrogate escape
    (which ``json.dumps`` of a Python string never writes)."""
    line = json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
    return line.replace("@S@", "\\ud800")


@pytest.fixture(name="shared", scope="module")
def shared_fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Served, Path]]:
    """One ``serve --transport http --no-auth`` for the module's HTTP tests (a start is a
    second or more of a loaded machine); ``http_server`` empties its database before each."""
    tmp = tmp_path_factory.mktemp("unreadable-http")
    with Served(tmp, "--no-auth") as server:
        yield server, tmp / "http.db"


@pytest.fixture(name="http_server")
def http_server_fixture(shared: tuple[Served, Path]) -> tuple[Served, Path]:
    """The module's server and its database, empty (as if new)."""
    server, db = shared
    assert server.process.poll() is None, "a test stopped the shared server"
    delete_every_session(server.url, db, token="")
    return server, db


def stored_names(db: Path) -> list[str | None]:
    """The names of the sessions ``db`` holds, as another process reads them."""
    with SqliteSessionRepo(db) as repo:
        return [summary.name for summary in repo.list().items]


class StdioServer:
    def __init__(self, *args: str) -> None:
        # Unbuffered: a line already read into a buffer of ours would be invisible to the
        # select below (the server may write several answers before this reads one).
        self.process = subprocess.Popen(
            [sys.executable, "-m", "mcp_agent", "serve", *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            bufsize=0,
        )

    def send(self, line: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write((line + "\n").encode())
        self.process.stdin.flush()

    def answer(self) -> dict[str, Any]:
        """The next answer from the server, past its notifications (failing, not hanging, if
        none comes)."""
        assert self.process.stdout is not None
        while True:
            ready, _, _ = select.select([self.process.stdout], [], [], HANG_GUARD_S)
            assert ready, "the server sent nothing"
            found: dict[str, Any] = json.loads(self.process.stdout.readline())
            if "id" in found:
                return found

    def initialize(self) -> dict[str, Any]:
        """The 2025 handshake: ``initialize``, its answer, then ``initialized``."""
        self.send(json.dumps(initialize_request(1)))
        answer = self.answer()
        self.send('{"jsonrpc":"2.0","method":"notifications/initialized"}')
        return answer

    def stop(self) -> str:
        assert self.process.stdin is not None and self.process.stderr is not None
        self.process.stdin.close()
        self.process.wait(timeout=HANG_GUARD_S)
        return self.process.stderr.read().decode()


@pytest.mark.parametrize("store", ["sqlite", "jsonl"])
def test_every_stdio_request_gets_an_answer_and_nothing_unreadable_is_stored(
    tmp_path: Path, store: str
) -> None:
    folder = tmp_path / "sessions"
    args = ["--db", str(tmp_path / "s.db")]
    if store == "jsonl":
        folder.mkdir()
        args += ["--sessions-dir", str(folder)]
    server = StdioServer(*args)
    try:
        assert server.initialize()["id"] == 1
        server.send(request(2, "tools/call", {"name": "session_create", "arguments": {}}))
        sid = server.answer()["result"]["structuredContent"]["id"]
        entry = {"type": "message", "role": "user", "content": "a lone @S@ here"}
        lines = [
            request(
                3,
                "tools/call",
                {"name": "session_append", "arguments": {"session_id": sid, "entry": entry}},
            ),
            request(4, "tools/call", {"name": "session_get", "arguments": {"session_id": "@S@"}}),
            request(
                5, "prompts/get", {"name": "continue_session", "arguments": {"session_id": "@S@"}}
            ),
            request(6, "resources/read", {"uri": "session://@S@"}),
            request(7, "resources/subscribe", {"uri": f"session://{sid}@S@"}),
            '{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"@S@"}}'.replace(
                "@S@", "\\ud800"
            ),
            "",  # a blank line: nothing to answer
            '{"jsonrpc":"2.0","id":8,"method":"tools/call","params":',  # not JSON
            '{"jsonrpc":"2.0","id":9,"methd":"ping"}',  # JSON, but no JSON-RPC message
            '{"jsonrpc":"2.0","id":"\\ud800","method":"ping"}',  # an id that cannot go back
            request(10, "ping", {}),
        ]
        for line in lines:
            server.send(line)
        answers = [server.answer() for _ in range(8)]
        assert [(a["id"], a.get("error", {}).get("code")) for a in answers] == [
            (3, -32602),
            (4, -32602),
            (5, -32602),
            (6, -32602),
            (7, -32602),
            (None, -32700),
            (9, -32600),
            (None, -32600),
        ]
        append_error = answers[0]["error"]["message"]
        assert (
            "params.arguments.entry.content holds an unpaired surrogate (\\ud800)" in append_error
        )
        assert "not valid Unicode" in append_error
        assert server.answer() == {"jsonrpc": "2.0", "id": 10, "result": {}}
        server.send(
            request(11, "tools/call", {"name": "session_get", "arguments": {"session_id": sid}})
        )
        assert server.answer()["result"]["structuredContent"]["entries"] == []
    finally:
        stderr = server.stop()
    assert "Traceback" not in stderr
    assert "notification the server cannot read was dropped" in stderr
    if store == "sqlite":
        assert SqliteSessionRepo(tmp_path / "s.db").open(sid).get_entries() == []
    else:
        (file,) = folder.rglob("*.jsonl")
        assert len(file.read_text().splitlines()) == 1  # the header alone


def test_a_method_or_a_key_of_megabytes_is_not_repeated_whole(tmp_path: Path) -> None:
    """The SDK's "Method not found" repeated the method whole (its data), and the refusal of
    a lone surrogate the method, or the key that held it: a client that sent a megabyte of
    text as a method (64 MiB fit on a stdio line) read a megabyte back, as the server's log
    did. Each is cut to its start and how long it was, as any value an error repeats."""
    huge = "m" * 1_000_000
    server = StdioServer("--db", str(tmp_path / "s.db"))
    try:
        assert server.initialize()["id"] == 1
        server.send(json.dumps({"jsonrpc": "2.0", "id": 2, "method": huge}))
        server.send(request(3, huge, {"x": "@S@"}))
        arguments = {"name": "session_create", "arguments": {huge: "@S@"}}
        server.send(request(4, "tools/call", arguments))
        server.send(json.dumps({"jsonrpc": "2.0", "method": huge}))  # dropped, unanswered
        errors = {found["id"]: found["error"] for found in (server.answer() for _ in range(3))}
    finally:
        stderr = server.stop()
    assert [(key, errors[key]["code"]) for key in sorted(errors)] == [
        (2, -32601),
        (3, -32602),
        (4, -32602),
    ]
    assert errors[2]["data"] == "m" * 100 + "… [cut: 1,000,000 characters in all]"
    assert errors[3]["message"].startswith("m" * 100 + "… [cut: 1,000,000 characters in all]: ")
    assert "unpaired surrogate" in errors[3]["message"]
    assert "params.arguments.mmm" in errors[4]["message"]
    assert "unpaired surrogate" in errors[4]["message"]
    for error in errors.values():
        assert len(json.dumps(error)) < 1_000, json.dumps(error)[:300]
    assert len(stderr) < 100_000


def test_json_nested_deeper_than_the_parser_reads_is_a_parse_error_saying_why(
    tmp_path: Path,
) -> None:
    """pydantic's parser reads JSON up to some depth, the standard library's deeper: a
    request nested 300 levels deep got a bare "Parse error" over stdio, and an array so
    nested "Invalid Request: not JSON" (the HTTP transport said why: its recursion limit).
    Both say why, as JSON nested 100,000 levels deep did."""
    deep = "[" * 300 + "]" * 300
    server = StdioServer("--db", str(tmp_path / "s.db"))
    try:
        assert server.initialize()["id"] == 1
        server.send('{"jsonrpc":"2.0","id":2,"method":"ping","params":{"a":' + deep + "}}")
        server.send(deep)
        errors = [server.answer()["error"] for _ in range(2)]
        server.send(json.dumps({"jsonrpc": "2.0", "id": 3, "method": "ping"}))
        assert server.answer() == {"jsonrpc": "2.0", "id": 3, "result": {}}
    finally:
        server.stop()
    for error in errors:
        assert error["code"] == -32700
        assert error["message"].startswith("Parse error: recursion limit exceeded at line 1"), error


def test_a_request_before_initialize_is_told_to_initialize_first(tmp_path: Path) -> None:
    """The SDK refuses a request sent before ``initialize`` as "Invalid request parameters",
    with nothing more, though its params may be right: the client is told what to send."""

    def tool_call(request_id: int, name: str, meta: Any = None) -> dict[str, Any]:
        params: dict[str, Any] = {"name": name, "arguments": {}}
        if meta is not None:
            params["_meta"] = meta
        return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}

    modern = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    answers, stderr = serve_piped(
        tmp_path / "s.db",
        [
            tool_call(1, "session_create"),
            {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
            {"jsonrpc": "2.0", "id": 3, "method": "ping"},
            initialize_request(5),
            {"jsonrpc": "2.0", "method": "notifications/initialized"},
            tool_call(6, "session_list"),
        ],
    )
    for request_id, method in ((1, "tools/call"), (2, "tools/list")):
        error = answers[request_id]["error"]
        assert error["code"] == -32602
        assert error["message"] == (
            f"{method}: the connection is not initialized: send initialize first (then "
            "notifications/initialized); only ping may come before it"
        )
    assert answers[3]["result"] == {}
    assert answers[6]["result"]["structuredContent"]["sessions"] == []  # none was created
    assert "Traceback" not in stderr
    # 2026-07-28 has no handshake: its requests are served at once.
    served, _ = serve_piped(tmp_path / "s.db", [tool_call(1, "session_list", modern)])
    assert served[1]["result"]["structuredContent"]["sessions"] == []


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_a_lone_surrogate_is_refused_before_any_handler(tmp_path: Path, mode: str) -> None:
    """An in-process client (and the 2026 HTTP transport, whose parser reads lone surrogate
    escapes) hands the server such a string: every method refuses it, nothing is stored."""
    folder = tmp_path / "sessions"
    server = agent_server(
        tmp_path, {"scripted": prompt_responder}, agents=TEST_AGENTS, sessions_dir=folder
    )
    async with Client(server, mode=mode) as client:
        sid = (await call(client, "session_create"))["id"]
        entry = {"type": "message", "role": "user", "content": "a lone \ud800 here"}
        attempts = [
            client.call_tool("session_append", {"session_id": sid, "entry": entry}),
            client.call_tool("session_create", {"name": "\udfff"}),
            client.get_prompt("continue_session", {"session_id": "\ud800"}),
        ]
        for attempt in attempts:
            with pytest.raises(MCPError) as refused:
                await attempt
            assert refused.value.error.code == -32602
            assert "unpaired surrogate" in refused.value.error.message
        assert (await call(client, "session_get", session_id=sid))["entries"] == []
        assert len((await call(client, "session_list"))["sessions"]) == 1
    (file,) = folder.rglob("*.jsonl")
    assert len(file.read_text().splitlines()) == 1


async def test_a_lone_surrogate_escaped_in_json_text_is_refused_clearly(tmp_path: Path) -> None:
    """JSON text inside an argument (metadata, custom data) may escape a lone surrogate the
    transport cannot see: refused, saying so, with nothing stored. In an imported pi file
    (pi's JavaScript holds one) it becomes U+FFFD, and the answer says so."""
    lone = '{"a": "\\ud800"}'
    async with Client(make_server(tmp_path)) as client:
        sid = (await call(client, "session_create"))["id"]
        exported = (await call(client, "session_export", session_id=sid, limit=0))["jsonl"]
        answers = [
            await call_error(client, "session_create", metadata=lone),
            await call_error(
                client,
                "session_append",
                session_id=sid,
                entry={"type": "custom", "custom_type": "note", "data": lone},
            ),
        ]
        for text in answers:
            assert "unpaired surrogate escape" in text and "UnicodeEncodeError" not in text
        assert "\\ud800" in answers[0] and "\\ud800" in answers[1]
        assert (await call(client, "session_get", session_id=sid))["entries"] == []
        assert len((await call(client, "session_list"))["sessions"]) == 1
        imported = await call(
            client,
            "session_import",
            jsonl=exported.replace(sid, "0" * 8 + sid[8:])
            + '{"type":"custom","id":"ab12cd34","parentId":null,'
            '"timestamp":"2026-01-01T00:00:00.000Z","customType":"n","data":"\\udfff"}\n',
        )
        assert "unpaired surrogate escape \\udfff" in imported["note"]
        assert "U+FFFD" in imported["note"]
        new_id = imported["session"]["id"]
        got = await call(client, "session_get", session_id=new_id, view="entries")
        assert [e.get("data") for e in got["entries"]] == ["\ufffd"]


def test_a_2025_http_session_gets_the_same_refusal_of_a_lone_surrogate(
    http_server: tuple[Served, Path],
) -> None:
    """The legacy HTTP transport parses a body with pydantic, which said only "Parse error"
    about a bad hex escape, with no id: the request gets the refusal every other transport
    gives, and nothing is stored."""
    server, db = http_server
    opened = server.initialize()
    session = {
        **HTTP_HEADERS,
        "mcp-session-id": opened.headers["mcp-session-id"],
        "mcp-protocol-version": "2025-06-18",
    }
    initialized = '{"jsonrpc":"2.0","method":"notifications/initialized"}'

    def create(request_id: int, name: str) -> str:
        return request(
            request_id, "tools/call", {"name": "session_create", "arguments": {"name": name}}
        )

    with httpx.Client(timeout=HANG_GUARD_S) as http:
        assert http.post(server.url, headers=session, content=initialized).status_code == 202
        answer = http.post(server.url, headers=session, content=create(7, "@S@"))
        assert answer.status_code == 200
        refused = answer.json()
        assert refused["id"] == 7 and refused["error"]["code"] == -32602
        said = refused["error"]["message"]
        assert said.startswith("tools/call: params.arguments.name holds an unpaired surrogate")
        # a notification holding one is dropped, as a notification is never answered
        note = (
            '{"jsonrpc":"2.0","method":"notifications/roots/list_changed","params":{"x":"\\ud800"}}'
        )
        assert http.post(server.url, headers=session, content=note).status_code == 202
        # a pair of surrogate escapes is one character: read and stored as usual
        paired = create(8, "x").replace('"x"', '"\\ud83d\\ude00"')
        created = http.post(server.url, headers=session, content=paired)
        assert created.status_code == 200 and '"isError":false' in created.text
        # an unknown session is the SDK's to answer, whatever its body
        other = {**session, "mcp-session-id": "not-a-session"}
        assert http.post(server.url, headers=other, content=create(9, "@S@")).status_code == 404
    assert stored_names(db) == ["\U0001f600"]


def test_params_the_sdk_refuses_get_an_answer_that_says_what_is_wrong(tmp_path: Path) -> None:
    server = StdioServer("--db", str(tmp_path / "s.db"))
    try:
        assert server.initialize()["id"] == 1
        refused: list[tuple[dict[str, Any], str]] = [
            ({"name": 5}, "params.name: Input should be a valid string"),
            ({"name": "session_list", "arguments": [1]}, "params.arguments: Input should be"),
            ({"arguments": {}}, "params.name: Field required"),
        ]
        for request_id, (params, said) in enumerate(refused, start=2):
            server.send(request(request_id, "tools/call", params))
            answer = server.answer()
            assert answer["id"] == request_id
            assert answer["error"]["code"] == -32602
            assert answer["error"]["message"].startswith("Invalid request parameters: tools/call")
            assert said in answer["error"]["message"], answer
        # A union's member is named by the JSON's own path, not by the model's name for it.
        ref = {"ref": {"type": "ref/prompt", "name": 5}, "argument": {"name": "a", "value": "b"}}
        server.send(request(8, "completion/complete", ref))
        message = server.answer()["error"]["message"]
        assert "params.ref.name: Input should be a valid string" in message, message
        assert "PromptReference" not in message
        server.send(request(9, "resources/read", {"uri": 7}))
        answer = server.answer()
        assert answer["error"]["code"] == -32602
        assert "params.uri" in answer["error"]["message"], answer
        server.send(request(10, "tools/call", {"name": "session_list", "arguments": {}}))
        assert server.answer()["result"]["structuredContent"]["sessions"] == []
    finally:
        stderr = server.stop()
    assert "Traceback" not in stderr


def test_a_notification_with_params_mcp_does_not_allow_is_dropped_saying_what_is_wrong(
    tmp_path: Path,
) -> None:
    """A malformed notifications/cancelled (its requestId a list or a fraction, a reason
    that is no text, no params at all) is dropped with one line on stderr naming the method
    and the field; the SDK's said only "dropped 'notifications/cancelled': malformed params".
    (A requestId left out or null is allowed since 2025-11-25, for tasks: nothing is said.)"""
    server = StdioServer("--db", str(tmp_path / "s.db"))
    malformed = [{"requestId": [1]}, {"requestId": 1.5}, {"requestId": 7, "reason": 5}, None]
    try:
        assert server.initialize()["id"] == 1
        for params in malformed:
            cancel: dict[str, Any] = {"jsonrpc": "2.0", "method": "notifications/cancelled"}
            server.send(json.dumps(cancel if params is None else {**cancel, "params": params}))
        server.send(request(2, "tools/call", {"name": "session_list", "arguments": {}}))
        assert server.answer()["result"]["structuredContent"]["sessions"] == []
    finally:
        stderr = server.stop()
    lines = [line for line in stderr.splitlines() if "notifications/cancelled" in line]
    assert len(lines) == len(malformed), stderr
    assert all("params.requestId" in line for line in lines[:2]), lines
    assert "params.reason" in lines[2] and "params: Field required" in lines[3], lines
    assert "malformed params" not in stderr and "Traceback" not in stderr


async def _through_described_params(method: str, params: Any, raised: Exception) -> Exception:
    """What ``DescribedParams`` lets out when the step after it raises ``raised``."""

    async def call_next(ctx: Any) -> Any:
        raise raised

    ctx = SimpleNamespace(method=method, params=params, protocol_version="2025-11-25")
    with pytest.raises(Exception) as out:
        await DescribedParams()(ctx, call_next)  # type: ignore[arg-type]
    return out.value


async def test_only_params_the_sdk_refuses_are_described_and_briefly() -> None:
    class Inner(BaseModel):
        uri: int

    try:
        Inner.model_validate({"uri": "x"})
    except ValidationError as error:
        handler_error = error
    # A ValidationError of the server's own (a handler's), with params that pass the SDK's
    # check: it goes on unchanged, for the SDK's own answer.
    passed = await _through_described_params("resources/list", None, handler_error)
    assert passed is handler_error
    passed = await _through_described_params("custom/method", {"a": 1}, handler_error)
    assert passed is handler_error

    # Params the SDK refuses, with thousands of problems under long keys: a short answer.
    arguments = {f"key-{n:04d}-" + "k" * 300: n for n in range(2000)}
    params = {"name": "continue_session", "arguments": arguments}
    try:
        validate_client_request("prompts/get", "2025-11-25", params)
    except ValidationError as error:
        refused = await _through_described_params("prompts/get", params, error)
    assert isinstance(refused, MCPError) and refused.error.code == -32602
    message = refused.error.message
    assert message.startswith("Invalid request parameters: prompts/get: params.arguments.key-0000")
    assert "(and 1997 more)" in message
    assert len(message) < 1000


# JSON that is no JSON-RPC message as MCP has them: the id each refusal (-32600) carries back
# (only an id MCP allows), and what it says is wrong.
CREATE = '"method":"tools/call","params":{"name":"session_create","arguments":{"name":"bad"}}'


def create_with_id(raw_id: str) -> str:
    """A session_create request whose id is ``raw_id`` as it stands in the JSON text."""
    return '{"jsonrpc":"2.0","id":' + raw_id + "," + CREATE + "}"


NOT_MESSAGES: list[tuple[str, int | str | None, str]] = [
    # Requests the SDK's model takes for notifications (it drops their id): never answered.
    (create_with_id("1.5"), None, '"id" must be a string or an integer, not 1.5'),
    (create_with_id("true"), None, "not true"),
    (create_with_id("null"), None, "not null (a notification has no"),
    (create_with_id("{}"), None, "not an object"),
    (create_with_id("1e400"), None, "not a number beyond a 64-bit float"),
    # Answered with only "Invalid Request" and id null, or pydantic's whole report.
    ('{"jsonrpc":"1.0","id":77,"method":"ping"}', 77, '"jsonrpc" must be "2.0", not "1.0"'),
    ('{"id":"seventy-eight","method":"ping"}', "seventy-eight", '"jsonrpc": "2.0" is missing'),
    ('{"jsonrpc":"2.0","id":79,"method":"ping","params":[1]}', 79, '"params" must be an object'),
    ('{"jsonrpc":"2.0","id":80,"method":5}', 80, '"method" must be a string, not 5'),
    ('[{"jsonrpc":"2.0","id":81,"method":"ping"}]', None, "a batch (a JSON array of messages)"),
    ('"ping"', None, "a JSON-RPC message is an object, not a string"),
]
# A notification whose params hold an "id": a notification still, never answered.
ID_IN_PARAMS = '{"jsonrpc":"2.0","method":"notifications/roots/list_changed","params":{"id":1}}'


def test_json_that_is_no_request_mcp_allows_gets_a_refusal_saying_why_over_stdio(
    tmp_path: Path,
) -> None:
    server = StdioServer("--db", str(tmp_path / "s.db"))
    try:
        assert server.initialize()["id"] == 1
        for line, request_id, said in NOT_MESSAGES:
            server.send(line)
            answer = server.answer()
            assert (answer["id"], answer["error"]["code"]) == (request_id, -32600), line
            assert answer["error"]["message"].startswith("Invalid Request: "), answer
            assert said in answer["error"]["message"], answer
        server.send(ID_IN_PARAMS)
        server.send(request(90, "tools/call", {"name": "session_list", "arguments": {}}))
        listed = server.answer()  # the next answer: nothing was said to the notification
        assert listed["id"] == 90
        assert listed["result"]["structuredContent"]["sessions"] == []
    finally:
        stderr = server.stop()
    assert "Traceback" not in stderr


@pytest.mark.parametrize("protocol", ["2025-06-18", "2026-07-28"])
def test_json_that_is_no_request_mcp_allows_gets_a_refusal_saying_why_over_http(
    http_server: tuple[Served, Path], protocol: str
) -> None:
    server, db = http_server
    headers = {**HTTP_HEADERS, "mcp-protocol-version": protocol}
    if protocol == "2025-06-18":
        headers["mcp-session-id"] = server.initialize().headers["mcp-session-id"]
    else:
        headers["mcp-method"] = "tools/call"
    with httpx.Client(timeout=HANG_GUARD_S) as http:
        for body, request_id, said in NOT_MESSAGES:
            answer = http.post(server.url, headers=headers, content=body)
            assert answer.status_code == 400, (body, answer.text)
            refused = answer.json()
            assert (refused["id"], refused["error"]["code"]) == (request_id, -32600), body
            assert refused["error"]["message"].startswith("Invalid Request: "), refused
            assert said in refused["error"]["message"], refused
        if protocol == "2025-06-18":
            initialized = '{"jsonrpc":"2.0","method":"notifications/initialized"}'
            for note in (initialized, ID_IN_PARAMS):
                assert http.post(server.url, headers=headers, content=note).status_code == 202
    assert stored_names(db) == []


@pytest.mark.parametrize(
    ("message", "problem"),
    [
        ({"jsonrpc": "2.0", "id": 1, "result": {}}, None),
        ({"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "x"}}, None),
        ({"jsonrpc": "2.0", "method": "notifications/initialized"}, None),
        ({"jsonrpc": "2.0", "id": "a", "method": "ping", "params": None}, None),
        ({"jsonrpc": "2.0", "id": 1, "result": [1]}, '"result" must be an object, not an array'),
        ({"jsonrpc": "2.0", "id": 1.5, "result": {}}, '"id" must be a string or an integer'),
        ({"jsonrpc": "2.0", "id": 1, "error": {"code": "x", "message": "m"}}, 'integer "code"'),
        ({"jsonrpc": "2.0", "id": 1, "error": "boom"}, '"error" must be an object'),
        ({"jsonrpc": "2.0", "id": 1}, 'either a "method"'),
        ({"jsonrpc": 2, "id": 1, "method": "ping"}, '"jsonrpc" must be "2.0", not 2'),
        ({"jsonrpc": "2.0", "id": "x" * 500, "method": 7}, '"method" must be a string, not 7'),
        ({"jsonrpc": "2.0", "id": 1, "method": "m" * 500 + '"'}, None),
        ({"jsonrpc": "j" * 5000, "id": 1}, '"jsonrpc" must be "2.0", not "jjj'),  # cut short
        (None, "a JSON-RPC message is an object, not null"),
    ],
)
def test_what_keeps_json_from_being_a_message_is_said_briefly(
    message: Any, problem: str | None
) -> None:
    said = message_problem(message)
    if problem is None:
        assert said is None
    else:
        assert said is not None and problem in said and len(said) < 300


def test_a_2025_session_asking_for_an_unknown_protocol_version_is_told_which_there_are(
    http_server: tuple[Served, Path],
) -> None:
    """The SDK takes a version header it does not know for a 2026 request, and asked for the
    2026 envelope's keys instead."""
    server, _ = http_server
    session = {**HTTP_HEADERS, "mcp-session-id": server.initialize().headers["mcp-session-id"]}
    ping = '{"jsonrpc":"2.0","id":"p","method":"ping"}'
    with httpx.Client(timeout=HANG_GUARD_S) as http:
        for version in ("1999-01-01", "", "x" * 5000):
            headers = {**session, "mcp-protocol-version": version}
            answer = http.post(server.url, headers=headers, content=ping)
            assert answer.status_code == 400, answer.text
            refused = answer.json()
            assert (refused["id"], refused["error"]["code"]) == ("p", -32600)
            said = refused["error"]["message"]
            assert f"unsupported MCP-Protocol-Version header '{version[:100]}" in said
            assert "2025-06-18" in said and "2026-07-28" in said and "_meta" not in said
            assert len(said) < 400
        known = {**session, "mcp-protocol-version": "2025-06-18"}
        served = http.post(server.url, headers=known, content=ping)  # an event stream
        assert served.status_code == 200 and '"id":"p","result":{}' in served.text


@pytest.mark.parametrize(
    ("head", "tail", "found"),
    [
        # The Python SDK writes the id before the params, the TypeScript SDK after them.
        ('{"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"a": "xxx', "", 7),
        (
            '{"method": "tools/call", "params": {"a": "',
            'xxx"}}, "jsonrpc": "2.0", "id": "r-1"}\n',
            "r-1",
        ),
        ('{"method":"x","params":{"a":"', 'xxx"},"id":-3,"jsonrpc":"2.0"}', -3),
        # An "id" of the params, a notification, an answer, an id MCP does not allow: none.
        ('{"method": "x", "params": {"id": 5, "a": "xxx', 'xxx", "id": 5}}', None),
        ('{"jsonrpc": "2.0", "method": "notifications/x", "params": {"a": "', 'xx"}}', None),
        ('{"jsonrpc": "2.0", "id": 4, "result": {"content": [{"text": "xx', 'xx"}]}}', None),
        ('{"jsonrpc": "2.0", "id": 1.5, "method": "x", "params": {"a": "', "", None),
        ('{"jsonrpc": "2.0", "id": true, "method": "x", "params": {"a": "', "", None),
        ('{"method": "x", "params": {"a": "', 'xxx"}, "note": "\\"id\\": 5"}', None),
        ("not json at all", "nor here", None),
    ],
)
def test_the_id_of_a_request_too_long_to_read_is_found_at_its_edges(
    head: str, tail: str, found: int | str | None
) -> None:
    from mcp_agent.pipes import DroppedLine
    from mcp_agent.server.unreadable import dropped_request_id

    assert dropped_request_id(DroppedLine(100, head.encode(), tail.encode())) == found


def test_a_request_too_long_to_read_is_refused_saying_why_and_the_next_one_answered(
    tmp_path: Path,
) -> None:
    """Past 64 MB a line is dropped as it comes: the client waited for ever for its answer."""
    from mcp_agent.pipes import MAX_LINE, READ_CHUNK

    big = "x" * (MAX_LINE + READ_CHUNK + 1000)  # a line is taken once its newline is read
    arguments = {"jsonl": big}
    requests = [
        initialize_request(),
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "session_import", "arguments": arguments},
        },
        # The TypeScript SDK's order: the id last.
        {
            "method": "tools/call",
            "params": {"name": "session_import", "arguments": arguments},
            "jsonrpc": "2.0",
            "id": "ts",
        },
        # An answer to no request of the server's: read as an error answer, and dropped.
        {"jsonrpc": "2.0", "id": 99, "result": arguments},
        {
            "jsonrpc": "2.0",
            "id": 3,
            "method": "tools/call",
            "params": {"name": "session_create", "arguments": {}},
        },
    ]
    del big, arguments
    answers, stderr = serve_piped(tmp_path / "s.db", requests)
    for request_id in (2, "ts"):
        error = answers[request_id]["error"]
        assert error["code"] == -32600 and f"over {MAX_LINE:,} bytes" in error["message"]
        assert "mcp-agent-sessions sessions import" in error["message"]
    assert "error" not in answers[3] and not answers[3]["result"]["isError"]
    assert 99 not in answers and stderr.count("was dropped") == 3
    assert len(SqliteSessionRepo(tmp_path / "s.db").list().items) == 1  # the create alone


MODERN_META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"},
    "io.modelcontextprotocol/clientCapabilities": {},
}


def test_every_http_path_refuses_a_lone_surrogate_as_stdio_does(
    tmp_path: Path, http_server: tuple[Served, Path]
) -> None:
    """A lone surrogate in a request's id (which no middleware sees) or in an initialize (which
    opens no session yet) gets stdio's refusal over HTTP too, on both eras: before, the 2026
    path ran the call and answered another one's result (the id could not be parsed back), and
    the 2025 path said "Parse error" with no id, naming a session it then dropped."""
    bad_id = '{"jsonrpc":"2.0","id":"\\ud800","method":"tools/list","params":{}}'
    bad_name = json.dumps(initialize_request(1)).replace('"raw"', '"\\ud800"')
    stdio = StdioServer("--db", str(tmp_path / "s.db"))
    try:
        stdio.send(bad_name)
        stdio_init = stdio.answer()
        stdio.send(json.dumps(initialize_request(1)))
        assert stdio.answer()["id"] == 1
        stdio.send(bad_id)
        stdio_id = stdio.answer()
    finally:
        stdio.stop()
    assert stdio_init["id"] == 1 and stdio_init["error"]["code"] == -32602
    assert "params.clientInfo.name" in stdio_init["error"]["message"]
    assert stdio_id["id"] is None and stdio_id["error"]["code"] == -32600

    server, db = http_server
    modern = {**HTTP_HEADERS, "mcp-protocol-version": "2026-07-28"}

    def modern_call(tool: str, arguments: dict[str, Any]) -> str:
        params = {"name": tool, "arguments": arguments, "_meta": MODERN_META}
        text = json.dumps({"jsonrpc": "2.0", "id": "@S@", "method": "tools/call", "params": params})
        return text.replace('"@S@"', '"\\ud800"')

    with httpx.Client(timeout=HANG_GUARD_S) as http:
        opened = http.post(server.url, headers=HTTP_HEADERS, content=bad_name)
        assert opened.status_code == 400 and "mcp-session-id" not in opened.headers
        assert opened.json() == stdio_init
        listed = bad_id.replace('"params":{}', '"params":{"_meta":' + json.dumps(MODERN_META) + "}")
        calls = [
            ({"mcp-method": "tools/list"}, listed),
            (  # a plain call, answered as JSON
                {"mcp-method": "tools/call", "mcp-name": "session_list"},
                modern_call("session_list", {"limit": 1}),
            ),
            (  # a search, answered on the event-stream path
                {"mcp-method": "tools/call", "mcp-name": "session_list"},
                modern_call("session_list", {"query": "x"}),
            ),
            (
                {"mcp-method": "tools/call", "mcp-name": "session_create"},
                modern_call("session_create", {}),
            ),
        ]
        for headers, body in calls:
            answer = http.post(server.url, headers={**modern, **headers}, content=body)
            assert answer.status_code == 400, answer.text
            assert answer.json() == stdio_id, body
    assert "not spliced" not in server.banner()
    assert stored_names(db) == []
