"""Talking MCP from tests: our tools' structured results and error texts, a free loopback port,
the raw initialize request for tests that speak JSON-RPC themselves, and our server as the
tests set it up (a manifests folder, a database and scripted models in ``tmp_path``) with the
in-process ``client`` fixture on both handshakes."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import anyio
import httpx
import mcp.types as types
import pytest
from mcp import Client
from mcp.client.session import ClientRequestContext
from mcp.types import TextContent
from narrow import narrow

from mcp_agent.messages import content_text
from mcp_agent.providers.base import LlmContext
from mcp_agent.providers.scripted import (
    ScriptedProvider,
    ScriptedResponse,
    reply,
    scripted_model,
    tool_call,
)

if TYPE_CHECKING:
    from mcp.server import MCPServer

CALL_LIMIT_S = 60
# The bound on a child process's start (a server of ours, a test's MCP server): a hang guard.
# A start took over 30 s at a load of 20 on 2 cores (its imports alone), and a start of
# tests/servers/tool_server.py 19 to 24 s at a load of 15.
START_GUARD_S = 120.0
T = TypeVar("T")


async def call(client: Client, name: str, /, **arguments: Any) -> dict[str, Any]:
    """The structured result of a tool call that must succeed."""
    with anyio.fail_after(CALL_LIMIT_S):
        result = await client.call_tool(name, arguments)
    assert not result.is_error, narrow(result.content[0], TextContent).text
    assert result.structured_content is not None
    return result.structured_content


async def call_error(client: Client, name: str, /, **arguments: Any) -> str:
    """The text of a tool call that must fail with a tool error."""
    with anyio.fail_after(CALL_LIMIT_S):
        result = await client.call_tool(name, arguments)
    assert result.is_error, result.structured_content
    return narrow(result.content[0], TextContent).text


def another_programs_database(path: Path) -> bytes:
    """A SQLite file of another program (a table of its own, a row in it) at ``path``; its
    bytes, to show it was left as it was."""
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE bookmarks (url TEXT)")
    conn.execute("INSERT INTO bookmarks VALUES ('https://example.org')")
    conn.commit()
    conn.close()
    return path.read_bytes()


def alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie, ended but not reaped, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); look at its state.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except FileNotFoundError:
        return False


def poll(check: Callable[[], T | None], what: str, tries: int = 600, every: float = 0.1) -> T:
    """Call ``check`` until it gives something true, and return that; after ``tries`` calls
    fail saying ``what`` never happened (a hang guard counted in tries, not read off a clock)."""
    for _ in range(tries):
        found = check()
        if found:
            return found
        time.sleep(every)
    raise AssertionError(what)


def search_index_marks(db: Path) -> tuple[int, int]:
    """(how far a SQLite file's full-text index goes, its newest entry), read as another
    process would."""
    with sqlite3.connect(db) as conn:
        row = conn.execute(
            "SELECT (SELECT value FROM meta WHERE key = 'fts_indexed_upto'),"
            " (SELECT max(n) FROM entries)"
        ).fetchone()
    conn.close()
    return row[0], row[1]


def wait_for_port(port: int, process: subprocess.Popen[bytes], log: Path) -> None:
    """Wait until a server child process listens on ``port``; fail with its log if it exits
    first or never listens."""

    def listening() -> bool:
        assert process.poll() is None, f"server exited: {log.read_text()[-2000:]}"
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return True
        except OSError:
            return False

    try:
        wait_to_listen(listening, port)
    except AssertionError:
        if process.poll() is None:
            process.kill()
            process.wait()
        raise


def wait_to_listen(listening: Callable[[], bool], port: int) -> None:
    """Wait until ``listening()`` says a child process started listens on ``port``, for as
    long as a start may take (``START_GUARD_S``)."""
    every = 0.05
    tries = int(START_GUARD_S / every)
    poll(listening, f"the server never listened on port {port}", tries=tries, every=every)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def serve_piped(db: Path, requests: list[dict[str, Any]]) -> tuple[dict[Any, Any], str]:
    """``requests`` written at once to a fresh ``serve --db db`` over stdio, which then sees
    stdin closed: its answers by id (it must exit 0) and what it wrote to stderr."""
    done = subprocess.run(
        [sys.executable, "-m", "mcp_agent", "serve", "--db", str(db)],
        input="".join(json.dumps(request) + "\n" for request in requests),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    found = [m for m in map(json.loads, done.stdout.splitlines()) if "id" in m]
    answers = {m["id"]: m for m in found}
    assert len(answers) == len(found), "an id answered twice"
    return answers, done.stderr


def posted_answer(response: httpx.Response) -> dict[str, Any]:
    """The JSON-RPC answer to a request POSTed in a 2025 session: its JSON body (a call that
    sends nothing first: ``streamable_http.QUIET_TOOLS``), or its event stream's last event."""
    if response.headers.get("content-type", "").startswith("application/json"):
        answer: dict[str, Any] = response.json()
        return answer
    data = [line[5:] for line in response.text.splitlines() if line.startswith("data:")]
    assert data, response.text
    found: dict[str, Any] = json.loads(data[-1])
    return found


def initialize_request(request_id: int = 1) -> dict[str, Any]:
    """A raw JSON-RPC initialize request on the 2025 handshake."""
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "raw", "version": "1"},
        },
    }


# --- our server, as the tests set it up -------------------------------------------------------

# A scripted model: one provider that every run shares (to look at its calls afterwards), or a
# responder, which gets a provider of its own each time the server resolves the model.
ScriptedModel = ScriptedProvider | Callable[[LlmContext], ScriptedResponse]

TEST_AGENTS = {
    "default": 'description = "test default"\nsystem_prompt = "be brief"\n',
    "helper": 'description = "a helper"\ntools = ["subagent"]\n',
    "loner": 'description = "no tools"\ntools = []\n',
    "thinker": 'description = "thinks"\nthinking_level = "high"\n',
}

TOOL_SERVER = Path(__file__).parent / "servers" / "tool_server.py"


# --- a real ``serve --transport http`` process -----------------------------------------------

HTTP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
# The client of requests to the tests' loopback servers in plain HTTP, made in a loop or by a
# helper: httpx.post and httpx.get made a client for each request, and with it a TLS context
# (the system's certificates read, some 30 ms of CPU) never used here. No connection is kept:
# each request has its own, as with those.
LOOPBACK_HTTP = httpx.Client(timeout=60, limits=httpx.Limits(max_keepalive_connections=0))
# What the environment of the test run must not decide for these servers.
OUR_HTTP_ENV = (
    "MCP_AGENT_TOKEN",
    "MCP_AGENT_TOKEN_FILE",
    "MCP_AGENT_MAX_HTTP_SESSIONS",
    "MCP_AGENT_HTTP_SESSION_IDLE_TIMEOUT",
    "MCP_AGENT_MAX_SUBSCRIPTIONS",
    "MCP_AGENT_NOTIFICATION_TIMEOUT",
    "MCP_AGENT_HTTP_SEND_BUFFER",
    "MCP_AGENT_CLIENT_STREAM_WAIT",
    "MCP_AGENT_DB_THREADS",
)


def server_env(tmp: Path, **extra: str) -> dict[str, str]:
    """The environment with a private runtime and config dir in ``tmp`` (so a generated token
    never lands in the real user's folders)."""
    env = {key: value for key, value in os.environ.items() if key not in OUR_HTTP_ENV}
    runtime, config = tmp / "runtime", tmp / "config"
    for folder in (runtime, config):
        folder.mkdir(mode=0o700, exist_ok=True)
    return {**env, "XDG_RUNTIME_DIR": str(runtime), "XDG_CONFIG_HOME": str(config), **extra}


def serve_args(tmp: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "mcp_agent", "serve", "--db", str(tmp / "http.db"), *extra]


class Served:
    """A server process on a free loopback port; its stderr goes to a file (the banner)."""

    def __init__(
        self, tmp: Path, *extra: str, env: dict[str, str] | None = None, port: int | None = None
    ) -> None:
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.log = tmp / f"server-{self.port}.log"
        self.command = serve_args(tmp, "--transport", "http", "--port", str(self.port), *extra)
        with open(self.log, "wb") as log:
            self.process = subprocess.Popen(
                self.command,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=log,
                env=env if env is not None else server_env(tmp),
            )
        wait_for_port(self.port, self.process, self.log)

    def banner(self) -> str:
        return self.log.read_text()

    def initialize(self, token: str | None = None, **headers: str) -> httpx.Response:
        auth = {"Authorization": f"Bearer {token}"} if token is not None else {}
        return LOOPBACK_HTTP.post(
            self.url,
            json=initialize_request(),
            headers={**HTTP_HEADERS, **auth, **headers},
            timeout=30,
        )

    def stop(self) -> int | None:
        self.process.terminate()
        try:
            return self.process.wait(15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait(15)

    def __enter__(self) -> Served:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop()


@pytest.fixture(name="started")
def started_fixture() -> Iterator[list[Served]]:
    """Servers a test starts; each is stopped at the end, whatever happened."""
    servers: list[Served] = []
    yield servers
    for server in servers:
        if server.process.poll() is None:
            server.stop()


def tool_server(**extra: Any) -> dict[str, Any]:
    """The servers.json entry of tests/servers/tool_server.py, a real child process."""
    return {"command": sys.executable, "args": [str(TOOL_SERVER)], **extra}


def write_manifests(
    root: Path, agents: Mapping[str, str] | None = None, servers: Mapping[str, Any] | None = None
) -> Path:
    """A manifests folder: ``agents/NAME.toml`` for each agent and servers.json with
    ``servers`` (none by default)."""
    (root / "agents").mkdir(parents=True, exist_ok=True)
    for name, text in (agents or {}).items():
        (root / "agents" / f"{name}.toml").write_text(text)
    (root / "servers.json").write_text(json.dumps({"mcpServers": dict(servers or {})}))
    return root


def agent_server(
    tmp_path: Path,
    models: Mapping[str, ScriptedModel],
    *,
    agents: Mapping[str, str] | None = None,
    servers: Mapping[str, Any] | None = None,
    **settings: Any,
) -> MCPServer:
    """Our MCP server on ``tmp_path/sessions.db`` with the manifests in ``tmp_path/manifests``
    and the scripted ``models`` by name (model id = name); the first is the default model.
    ``settings`` go to ServerSettings (``default_model`` among them)."""
    from mcp_agent.runtime.settings import ServerSettings
    from mcp_agent.server.app import build_server

    def choice(name: str, model: ScriptedModel) -> Callable[[], tuple[Any, ScriptedProvider]]:
        if isinstance(model, ScriptedProvider):
            return lambda: (scripted_model(name), model)
        return lambda: (scripted_model(name), ScriptedProvider(model))

    options: dict[str, Any] = {
        "db_path": tmp_path / "sessions.db",
        "manifests_dir": write_manifests(tmp_path / "manifests", agents, servers),
        **({"default_model": next(iter(models))} if models else {}),
        **settings,
    }
    return build_server(
        ServerSettings(**options),
        models={name: choice(name, model) for name, model in models.items()},
    )


# The line that ends what a delegating model reads of a sub-agent's result (its answer first).
SUBAGENT_FACTS = re.compile(
    r"\n\n\[sub-agent (?P<agent>\S+): (?P<status>\w+)(?:, stop reason (?P<stop_reason>\w+))?;"
    r" session (?P<session_id>\S+), run (?P<run_id>\S+)\]\Z"
)


def subagent_said(text: str) -> dict[str, str]:
    """A sub-agent's result as its caller's model reads it: its answer and the facts after
    (a stop reason not said: empty)."""
    facts = SUBAGENT_FACTS.search(text)
    assert facts, text[-300:]
    return {"answer": text[: facts.start()], **facts.groupdict("")}


def prompt_responder(context: LlmContext) -> ScriptedResponse:
    """A test model that does as the prompt says: ``delegate:AGENT:TASK`` calls the subagent
    tool, ``slow…`` streams slowly, ``summarize…`` summarises, ``overloaded…`` fails as an
    overloaded API does; anything else is echoed. A tool result is reported."""
    last = context.messages[-1]
    if last.role == "toolResult":
        return reply(f"tool said: {content_text(last.content)}")
    text = content_text(last.content)
    if text.startswith("delegate:"):
        agent, _, task = text.removeprefix("delegate:").partition(":")
        return reply(tool_call("subagent", {"agent": agent, "task": task}))
    if text.startswith("slow"):
        return reply("word " * 100, delay=0.01, chunk_size=5)
    if text.startswith("summarize"):
        return reply("SUMMARY: the branch tried things")
    if text.startswith("overloaded"):
        return reply("", error="api.test: the server overloaded mid-stream: overloaded_error")
    return reply(f"echo: {text}")


def tool_responder(context: LlmContext) -> ScriptedResponse:
    """A test model that calls the tool the prompt names (``call TOOL {json args}``) and then
    reports the result (``ok: …`` or ``error: …``); any other prompt is echoed."""
    last = context.messages[-1]
    if last.role == "toolResult":
        status = "error" if last.is_error else "ok"
        return reply(f"{status}: {content_text(last.content)}")
    text = content_text(last.content)
    if not text.startswith("call "):
        return reply(f"echo: {text}")
    name, _, args = text.removeprefix("call ").partition(" ")
    return reply(tool_call(name, json.loads(args or "{}")))


def make_server(tmp_path: Path, **settings: Any) -> MCPServer:
    """The server most MCP tests talk to: the TEST_AGENTS and ``prompt_responder`` as the
    model "scripted"."""
    return agent_server(tmp_path, {"scripted": prompt_responder}, agents=TEST_AGENTS, **settings)


@pytest.fixture(params=["auto", "legacy"], name="client")
async def client_fixture(
    request: pytest.FixtureRequest, server: MCPServer
) -> AsyncIterator[Client]:
    """An in-process client of the module's ``server`` fixture, in each of the client's
    modes (``auto`` and ``legacy``)."""
    async with Client(server, mode=request.param) as client:
        yield client


def find_pi() -> tuple[str, Path] | None:
    """(node binary, folder holding node_modules/@mariozechner/pi-coding-agent) or None:
    where ``MCP_AGENT_PEERS`` points, or ``.ci/node`` (installed by ``.ci/peers``)."""
    root = Path(__file__).resolve().parent.parent
    for candidate in filter(None, [os.environ.get("MCP_AGENT_PEERS"), str(root / ".ci" / "node")]):
        peers = Path(candidate)
        if not (peers / "node_modules" / "@mariozechner" / "pi-coding-agent").is_dir():
            continue
        bundled = peers / "node_modules" / "node" / "bin" / "node"
        node = str(bundled) if bundled.exists() else shutil.which("node")
        if node:
            return node, peers
    return None


class ClientsModel:
    """The MCP client's own model (a sampling callback): answers ``text`` to every request,
    kept in ``asked``."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.asked: list[types.CreateMessageRequestParams] = []

    async def __call__(
        self, context: ClientRequestContext, params: types.CreateMessageRequestParams
    ) -> types.CreateMessageResult:
        self.asked.append(params)
        said = types.TextContent(type="text", text=self.text)
        return types.CreateMessageResult(
            role="assistant", model="client-llm", stop_reason="endTurn", content=said
        )
