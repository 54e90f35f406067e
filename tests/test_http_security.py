"""HTTP access and HTTP session limits, against a real ``serve --transport http`` process on a
loopback port: a token generated when none is given (printed once, saved to a file only the
user can read), a fixed token from a file or the environment, ``--no-auth`` on loopback only,
and a session limit that abandoned sessions cannot fill (the longest idle is closed to make
room; only when every session is busy is a new one refused, with a message naming the limit)."""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path

import anyio
import httpx
import pytest
from mcp import Client
from mcp_support import (
    HTTP_HEADERS as HEADERS,
)
from mcp_support import (
    OUR_HTTP_ENV as OUR_ENV,
)
from mcp_support import (
    Served,
    initialize_request,
    poll,
    server_env,
    started_fixture,  # noqa: F401  (the started fixture)
)
from reliability_support import FULL
from viewer_support import delete_every_session

from mcp_agent.runtime.settings import ServerSettings

HANG_GUARD_S = 60

posix_only = pytest.mark.skipif(os.name != "posix", reason="file modes are POSIX")


def refused(
    tmp: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], env: dict[str, str]
) -> str:
    """Run a ``serve --transport http`` that must stop at once with a usage error, with
    ``args`` and ``env`` (in each, ``{tmp}`` stands for ``tmp``); return its one-line stderr.
    In-process for speed; should a case get through, the patched server returns at once (and
    the exit code tells) rather than serving."""
    from typer.testing import CliRunner

    import mcp_agent.server.streamable_http as streamable_http
    from mcp_agent.cli import app

    async def no_server(*_: object) -> None:
        return None

    monkeypatch.setattr(streamable_http, "serve_http", no_server)
    for key, value in server_env(tmp, **env).items():
        if key in OUR_ENV or key.startswith("XDG_"):
            monkeypatch.setenv(key, value.format(tmp=tmp))
    for key in OUR_ENV:
        if key not in env:
            monkeypatch.delenv(key, raising=False)
    command = ["serve", "--transport", "http", "--db", str(tmp / "s.db")]
    result = CliRunner().invoke(app, [*command, *(arg.format(tmp=tmp) for arg in args)])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def runtime_files(tmp: Path) -> list[Path]:
    return sorted(p for p in (tmp / "runtime").rglob("*") if p.is_file())


# --- a generated token ------------------------------------------------------------------------


@posix_only
def test_without_a_token_one_is_generated_printed_once_and_saved_for_the_user_alone(
    tmp_path: Path, started: list[Served]
) -> None:
    server = Served(tmp_path)
    started.append(server)
    banner = server.banner()
    headers = re.findall(r"Authorization: Bearer (\S+)", banner)
    assert len(headers) == 1, banner  # the header to paste, printed once
    token = headers[0]
    assert banner.count(server.url) == 1
    assert token not in " ".join(server.command)

    # The banner names the file; it is in the per-user runtime dir, readable by the user alone.
    [path] = runtime_files(tmp_path)
    assert str(path) in banner and path.name == f"http-{server.port}.token"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert path.read_text().strip() == token

    assert server.initialize().status_code == 401
    assert server.initialize("not-the-token").status_code == 401
    assert server.initialize(token[:-1]).status_code == 401
    assert server.initialize(token).status_code == 200

    # A clean stop (SIGTERM) removes the file: the token it holds is dead.
    server.stop()
    assert runtime_files(tmp_path) == []

    # The next start has a token of its own.
    again = Served(tmp_path)
    started.append(again)
    [second] = re.findall(r"Authorization: Bearer (\S+)", again.banner())
    assert second != token
    assert again.initialize(token).status_code == 401
    assert again.initialize(second).status_code == 200


@posix_only
@pytest.mark.skipif(
    os.name == "posix" and Path(f"/run/user/{os.geteuid()}").is_dir(),
    reason="this machine has a runtime directory; platformdirs falls back only without one",
)
def test_a_runtime_folder_someone_else_made_first_is_passed_over_saying_why(
    tmp_path: Path, started: list[Served]
) -> None:
    """Without $XDG_RUNTIME_DIR and /run/user/UID, platformdirs' runtime directory is
    TMP/runtime-UID, a name another user can take first (here: a link to a folder of theirs).
    platformdirs refuses it, and ``serve`` did not start at all, naming neither the config
    folder nor --token-file; the token now goes to the config folder, saying why."""
    temporary = tmp_path / "tmp"
    theirs = tmp_path / "theirs"
    for folder in (temporary, theirs):
        folder.mkdir(mode=0o700)
    (temporary / f"runtime-{os.geteuid()}").symlink_to(theirs)
    env = server_env(tmp_path, TMPDIR=str(temporary))
    del env["XDG_RUNTIME_DIR"]
    server = Served(tmp_path, env=env)
    started.append(server)
    banner = server.banner()
    [token] = re.findall(r"Authorization: Bearer (\S+)", banner)
    [path] = (tmp_path / "config").rglob("http-*.token")
    assert str(path) in banner and path.read_text().strip() == token
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert list(theirs.iterdir()) == []  # nothing of ours in their folder
    assert "warning: the token is not kept in the per-user runtime directory" in banner
    assert "is a symlink" in banner
    assert server.initialize(token).status_code == 200


# --- a fixed token ----------------------------------------------------------------------------


def test_token_file_is_required_and_never_printed(tmp_path: Path, started: list[Served]) -> None:
    token_file = tmp_path / "my.token"
    token_file.write_text("fixed-token-from-a-file\n")  # the trailing newline is not the token
    token_file.chmod(0o600)
    server = Served(tmp_path, "--token-file", str(token_file))
    started.append(server)
    banner = server.banner()
    assert "fixed-token-from-a-file" not in banner and str(token_file) in banner
    assert "warning" not in banner
    assert runtime_files(tmp_path) == []  # nothing generated
    assert server.initialize().status_code == 401
    assert server.initialize("fixed-token-from-a-file").status_code == 200


@pytest.mark.parametrize("how", ["MCP_AGENT_TOKEN_FILE", "MCP_AGENT_TOKEN", "--token"])
def test_token_from_the_environment_or_the_old_flag(
    tmp_path: Path, started: list[Served], how: str
) -> None:
    token = "another-fixed-token"
    token_file = tmp_path / "env.token"
    token_file.write_text(token)
    token_file.chmod(0o600)
    args: list[str] = []
    extra_env: dict[str, str] = {}
    if how == "--token":
        args = ["--token", token]
    else:
        extra_env[how] = str(token_file) if how.endswith("_FILE") else token
    server = Served(tmp_path, *args, env=server_env(tmp_path, **extra_env))
    started.append(server)
    banner = server.banner()
    assert token not in banner
    # The flag still works, with a word on why a command line is the wrong place for a secret.
    assert ("warning: --token puts the secret on the command line" in banner) == (how == "--token")
    assert server.initialize().status_code == 401
    assert server.initialize(token).status_code == 200


# --- no token ---------------------------------------------------------------------------------


def test_no_auth_serves_loopback_and_says_so(tmp_path: Path, started: list[Served]) -> None:
    server = Served(tmp_path, "--no-auth")
    started.append(server)
    banner = server.banner()
    assert "any user of this machine can read your sessions" in banner
    assert "Bearer" not in banner and banner.count(server.url) == 1
    assert runtime_files(tmp_path) == []
    assert server.initialize().status_code == 200
    # DNS rebinding protection stays on without a token too.
    assert server.initialize(Host="evil.example").status_code == 421


def test_no_auth_is_refused_off_loopback(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    line = refused(tmp_path, monkeypatch, ["--no-auth", "--host", "0.0.0.0"], {})
    assert "--no-auth is allowed only on a loopback address" in line and "0.0.0.0" in line
    assert runtime_files(tmp_path) == []


@pytest.mark.parametrize(
    ("args", "env", "says"),
    [
        (["--host", "0.0.0.0"], {}, "refusing to listen on 0.0.0.0 without a token"),
        (["--token-file", "{tmp}/missing"], {}, "does not exist"),
        (["--token-file", "{tmp}/empty"], {}, "is empty"),
        (["--token-file", "{tmp}/spaced"], {}, "printable ASCII without spaces"),
        (["--token", "a", "--token-file", "{tmp}/empty"], {}, "not both"),
        (["--no-auth", "--token-file", "{tmp}/empty"], {}, "--no-auth or a token"),
        ([], {"MCP_AGENT_TOKEN": "a", "MCP_AGENT_TOKEN_FILE": "{tmp}/empty"}, "keep one"),
        (["--max-http-sessions", "-1"], {}, "--max-http-sessions must be 0 (no limit) or more"),
        ([], {"MCP_AGENT_MAX_HTTP_SESSIONS": "many"}, "MCP_AGENT_MAX_HTTP_SESSIONS must be"),
        (["--http-session-idle-timeout", "-1"], {}, "--http-session-idle-timeout must be 0"),
        ([], {"MCP_AGENT_HTTP_SESSION_IDLE_TIMEOUT": "soon"}, "must be a number of seconds"),
        ([], {"MCP_AGENT_HTTP_SESSION_IDLE_TIMEOUT": "inf"}, "--http-session-idle-timeout"),
        (["--http-send-buffer", "1024"], {}, "--http-send-buffer must be 4096 to 4194304 bytes"),
        ([], {"MCP_AGENT_HTTP_SEND_BUFFER": "8388608"}, "not 8388608 (from the flag or MCP_AGENT"),
        ([], {"MCP_AGENT_HTTP_SEND_BUFFER": "64k"}, "MCP_AGENT_HTTP_SEND_BUFFER must be a whole"),
        (["--notification-timeout", "0"], {}, "--notification-timeout must be a number"),
        ([], {"MCP_AGENT_NOTIFICATION_TIMEOUT": "nan"}, "MCP_AGENT_NOTIFICATION_TIMEOUT"),
        (["--client-stream-wait", "-1"], {}, "--client-stream-wait must be a number"),
        ([], {"MCP_AGENT_CLIENT_STREAM_WAIT": "inf"}, "MCP_AGENT_CLIENT_STREAM_WAIT"),
        ([], {"MCP_AGENT_DB_THREADS": "many"}, "MCP_AGENT_DB_THREADS must be a whole number"),
        ([], {"MCP_AGENT_DB_THREADS": "0"}, "at least 1, not 0 (from MCP_AGENT_DB_THREADS)"),
        ([], {"MCP_AGENT_DB_THREADS": "100000"}, "at most 256, not 100000"),
    ],
)
def test_bad_auth_and_limit_settings_are_one_clear_line(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    args: list[str],
    env: dict[str, str],
    says: str,
) -> None:
    (tmp_path / "empty").write_text("\n")
    (tmp_path / "spaced").write_text("two words\n")
    assert says in refused(tmp_path, monkeypatch, args, env)
    assert runtime_files(tmp_path) == []


def test_serve_help_names_the_http_flags() -> None:
    from typer.testing import CliRunner

    from mcp_agent.cli import app

    done = CliRunner().invoke(app, ["serve", "--help"], env={"COLUMNS": "200"})
    assert done.exit_code == 0, done.output
    for flag in (
        "--token-file",
        "--no-auth",
        "--max-http-sessions",
        "--http-session-idle-timeout",
        "--notification-timeout",
        "--client-stream-wait",
        "MCP_AGENT_TOKEN_FILE",
        "MCP_AGENT_MAX_HTTP_SESSIONS",
        "MCP_AGENT_HTTP_SESSION_IDLE_TIMEOUT",
        "MCP_AGENT_NOTIFICATION_TIMEOUT",
    ):
        assert flag in done.stdout, flag
    # Values named in words (no Python types: test_cli checks every command for those).
    for metavar in ("HOST", "PORT", "FILE", "FOLDER", "PROVIDER:MODEL", "SECONDS", " N "):
        assert metavar in done.stdout, metavar


# --- session limits ---------------------------------------------------------------------------


PING = {"jsonrpc": "2.0", "id": 2, "method": "ping"}


def ping(http: httpx.Client, url: str, session_id: str, **extra: str) -> int:
    headers = {**HEADERS, "mcp-session-id": session_id, "mcp-protocol-version": "2025-06-18"}
    return http.post(url, json=PING, headers={**headers, **extra}, timeout=30).status_code


@asynccontextmanager
async def legacy_client(url: str) -> AsyncIterator[Client]:
    """A 2025-era client: it holds an HTTP session, with its event stream open."""
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    async with (
        httpx2.AsyncClient() as http,
        Client(streamable_http_client(url, http_client=http), mode="legacy") as client,
    ):
        yield client


def test_abandoned_sessions_never_lock_out_new_clients(
    tmp_path: Path, started: list[Served]
) -> None:
    limit = 20
    # Idle sessions do not expire during the test: only closing the longest idle makes room.
    server = Served(tmp_path, "--no-auth", "--max-http-sessions", str(limit))
    started.append(server)
    opened: list[str] = []
    with httpx.Client() as http:
        # Five times the limit: the longest idle closed to make room 80 times over (300, as
        # it was, only did the same thing more often); MCP_AGENT_FULL=1 opens 10,000.
        for n in range(10_000 if FULL else 5 * limit):
            response = http.post(server.url, json=initialize_request(), headers=HEADERS, timeout=30)
            assert response.status_code == 200, (n, response.text)
            opened.append(response.headers["mcp-session-id"])
        # The oldest were closed to make room, the newest kept: nothing closed needlessly.
        assert ping(http, server.url, opened[0]) == 404
        assert all(ping(http, server.url, each) == 200 for each in opened[-limit // 2 :])

    async def new_client() -> None:
        with anyio.fail_after(HANG_GUARD_S):
            async with legacy_client(server.url) as client:
                assert not (await client.call_tool("session_list", {})).is_error

    anyio.run(new_client)


def test_a_refused_request_never_closes_an_idle_session(
    tmp_path: Path, started: list[Served]
) -> None:
    # At the limit, only a request that opens a session (an initialize the server takes) may
    # close the idle one to make room: a stray request, or an initialize refused for its
    # headers or its text, costs the session's client nothing and is given no session id.
    server = Served(tmp_path, "--no-auth", "--max-http-sessions", "1")
    started.append(server)
    bad_name = json.dumps(initialize_request()).replace('"raw"', '"\\ud800"')
    strays: list[tuple[str, dict[str, str], str | None]] = [
        ("POST", HEADERS, json.dumps(PING)),
        ("POST", HEADERS, json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"})),
        ("GET", {"Accept": "text/event-stream"}, None),
        ("DELETE", {}, None),
        ("POST", {**HEADERS, "Accept": "application/json"}, json.dumps(initialize_request())),
        ("POST", {**HEADERS, "Content-Type": "text/plain"}, json.dumps(initialize_request())),
        ("POST", HEADERS, json.dumps(initialize_request())[:-1]),
        ("POST", HEADERS, bad_name),
    ]
    with httpx.Client(timeout=30) as http:
        opened = http.post(server.url, json=initialize_request(), headers=HEADERS)
        session_id = opened.headers["mcp-session-id"]
        for method, headers, body in strays:
            answer = http.request(method, server.url, headers=headers, content=body)
            assert 400 <= answer.status_code < 500, (method, body, answer.text)
            assert "mcp-session-id" not in answer.headers, (method, body)
            assert ping(http, server.url, session_id) == 200, (method, headers, body)

        # An initialize that opens a session still makes room (once the ping just answered
        # has ended on the server's side too: until then the session is busy, and refused).
        def admitted() -> bool:
            status = http.post(server.url, json=initialize_request(), headers=HEADERS).status_code
            assert status in (200, 503)
            return status == 200

        poll(admitted, "a new session never made room")
        assert ping(http, server.url, session_id) == 404


def test_when_every_session_is_busy_new_ones_are_refused_naming_the_limit(
    tmp_path: Path, started: list[Served]
) -> None:
    limit = 2
    server = Served(tmp_path, "--no-auth", "--max-http-sessions", str(limit))
    started.append(server)

    async def scenario() -> None:
        with anyio.fail_after(HANG_GUARD_S):
            async with httpx.AsyncClient(timeout=30) as http, AsyncExitStack() as streams:
                busy = []
                for _ in range(limit):
                    opened = await http.post(server.url, json=initialize_request(), headers=HEADERS)
                    session = {
                        **HEADERS,
                        "mcp-session-id": opened.headers["mcp-session-id"],
                        "mcp-protocol-version": "2025-06-18",
                    }
                    # Its event stream open (the server has answered its headers): it is busy.
                    stream = await streams.enter_async_context(
                        http.stream("GET", server.url, headers=session)
                    )
                    assert stream.status_code == 200
                    busy.append(session)
                refusals = [
                    await http.post(server.url, json=initialize_request(n), headers=HEADERS)
                    for n in range(20)
                ]
                assert {r.status_code for r in refusals} == {503}
                # Each refusal carries its request's id back (JSON-RPC: known, so echoed).
                assert [r.json()["id"] for r in refusals] == list(range(20))
                message = refusals[0].json()["error"]["message"]
                assert f"at most {limit} HTTP sessions" in message
                assert "--max-http-sessions" in message and "MCP_AGENT_MAX_HTTP_SESSIONS" in message
                assert "event stream open" in message
                assert refusals[0].headers["retry-after"] == "1"
                for session in busy:
                    answer = await http.post(server.url, json=PING, headers=session)
                    assert answer.status_code == 200
                # A 2026-07-28 client holds no session: it is served even now.
                async with Client(server.url) as modern:
                    assert not (await modern.call_tool("session_list", {})).is_error

    anyio.run(scenario)


IDLE_TIMEOUT_S = 0.5


@pytest.fixture(name="idle_shared", scope="module")
def idle_shared_fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Served, Path]]:
    """One server whose HTTP sessions idle out after IDLE_TIMEOUT_S, with the token "tok",
    for the module's tests of idle sessions (a start is a second or more of a loaded
    machine); ``idle_server`` empties its database before each."""
    tmp = tmp_path_factory.mktemp("idle")
    token_file = tmp / "t"
    token_file.write_text("tok")
    token_file.chmod(0o600)
    idle = ("--http-session-idle-timeout", str(IDLE_TIMEOUT_S))
    with Served(tmp, "--token-file", str(token_file), *idle) as server:
        yield server, tmp / "http.db"


@pytest.fixture(name="idle_server")
def idle_server_fixture(idle_shared: tuple[Served, Path]) -> Served:
    """The module's server of idle sessions, its database empty (as if new)."""
    server, db = idle_shared
    assert server.process.poll() is None, "a test stopped the shared server"
    delete_every_session(server.url, db, "tok")
    return server


def test_abandoned_sessions_idle_out(idle_server: Served) -> None:
    server = idle_server
    auth = {"Authorization": "Bearer tok"}
    with httpx.Client() as http:
        response = http.post(
            server.url, json=initialize_request(), headers={**HEADERS, **auth}, timeout=30
        )
        assert response.status_code == 200
        session_id = response.headers["mcp-session-id"]

        def expired() -> bool:
            status = ping(http, server.url, session_id, **auth)
            assert status in (200, 404)
            return status == 404

        # Each ping is a request that restarts the idle countdown: wait longer than it between.
        every = IDLE_TIMEOUT_S * 2
        poll(expired, "an idle session never expired", tries=int(HANG_GUARD_S / every), every=every)


def test_a_connected_client_outlives_the_idle_timeout(idle_server: Served) -> None:
    server = idle_server

    async def session_client() -> None:
        import httpx2
        from mcp.client.streamable_http import streamable_http_client

        http = httpx2.AsyncClient(headers={"Authorization": "Bearer tok"})
        with anyio.fail_after(HANG_GUARD_S):
            async with (
                http,
                Client(streamable_http_client(server.url, http_client=http), mode="legacy") as c,
            ):
                first = await c.call_tool("session_create", {"name": "kept"})
                assert not first.is_error
                # Quiet for longer than the idle timeout: its open event stream keeps it.
                await anyio.sleep(IDLE_TIMEOUT_S * 2.5)
                listing = await c.call_tool("session_list", {})
                assert not listing.is_error, listing.content
                names = [s["name"] for s in listing.structured_content["sessions"]]
                assert names == ["kept"]

    anyio.run(session_client)


def test_settings_take_paths_given_as_text(tmp_path: Path) -> None:
    # A library user may pass a path as text: it is a path, not a crash deep in the server.
    as_text: dict[str, object] = {"db_path": str(tmp_path / "s.db"), "sessions_dir": str(tmp_path)}
    settings = ServerSettings(**as_text)  # type: ignore[arg-type]
    assert settings.db_path == tmp_path / "s.db" and settings.sessions_dir == tmp_path
    with pytest.raises(ValueError, match="as db_url"):
        ServerSettings(db_path="postgresql://u:secret@h/db")  # type: ignore[arg-type]


def test_the_banner_writes_an_ipv6_address_as_a_url_does(tmp_path: Path) -> None:
    """``serve --transport http --host ::1`` printed "on http://::1:8765/mcp", a URL no client
    takes, while the viewer's link beside it had the brackets."""
    from mcp_agent.server.app import banner

    for host, shown in (("::1", "[::1]"), ("127.0.0.1", "127.0.0.1"), ("localhost", "localhost")):
        settings = ServerSettings(db_path=tmp_path / "s.db", host=host, port=8765)
        assert banner(settings, "http").endswith(f" on http://{shown}:8765/mcp")
    assert " on http" not in banner(settings, "stdio")
