"""``serve`` checks every flag before it starts: a bad one is one line on stderr and exit 2,
with nothing created; good ones still start; ``--help`` speaks in words, not Python types; an
unknown scripted model is an error naming the known ones, at start-up and at run time."""

from __future__ import annotations

import gc
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp import Client
from mcp_support import OUR_HTTP_ENV, Served, agent_server, call_error, initialize_request

from mcp_agent.providers.registry import ModelRegistry, ModelRegistryError
from mcp_agent.providers.scripted import reply, scripted_model

# What the environment of the test run must not decide for these servers.
OUR_ENV = (*OUR_HTTP_ENV, "MCP_AGENT_MODEL", "MCP_AGENT_DB", "OPENAI_API_KEY", "ANTHROPIC_API_KEY")


@pytest.fixture
def serve(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """``serve`` in-process, against ``tmp/s.db`` unless told otherwise; the server functions
    are patched to return at once, so a case that gets through ends with exit 0."""
    from typer.testing import CliRunner

    import mcp_agent.server.stdio as stdio
    import mcp_agent.server.streamable_http as streamable_http
    from mcp_agent.cli import app

    async def no_server(*_: object, **__: object) -> None:
        return None

    monkeypatch.setattr(streamable_http, "serve_http", no_server)
    monkeypatch.setattr(stdio, "run_stdio", no_server)
    for key in OUR_ENV:
        monkeypatch.delenv(key, raising=False)
    for name in ("XDG_RUNTIME_DIR", "XDG_CONFIG_HOME"):
        (tmp_path / name).mkdir(mode=0o700)
        monkeypatch.setenv(name, str(tmp_path / name))
    (tmp_path / "file").write_text("not a folder\n")
    bad = tmp_path / "bad-agents"
    (bad / "agents").mkdir(parents=True)
    (bad / "agents" / "broken.toml").write_text("name = \n")
    bad_servers = tmp_path / "bad-servers"
    (bad_servers / "agents").mkdir(parents=True)
    (bad_servers / "servers.json").write_text(json.dumps({"mcpServers": {"x": {"args": []}}}))
    good = tmp_path / "good"
    (good / "agents").mkdir(parents=True)
    (good / "agents" / "helper.toml").write_text('description = "helps"\n')

    def invoke(*args: str, env: dict[str, str] | None = None, db: bool = True) -> Any:
        for key, value in (env or {}).items():
            monkeypatch.setenv(key, value.format(tmp=tmp_path))
        command = ["serve", *(["--db", str(tmp_path / "s.db")] if db else [])]
        return CliRunner().invoke(app, [*command, *(arg.format(tmp=tmp_path) for arg in args)])

    collector = gc.get_threshold()
    yield invoke
    gc.set_threshold(*collector)  # what serve set for its process, not for the tests'
    gc.unfreeze()


@pytest.mark.parametrize(
    ("args", "env", "says"),
    [
        (["--manifests", "{tmp}/nope"], {}, ["--manifests", "does not exist", "agents/*.toml"]),
        (["--manifests", "{tmp}/file"], {}, ["--manifests", "is not a folder", "is a file"]),
        (["--manifests", "{tmp}/bad-agents"], {}, ["--manifests", "broken.toml", "TOML"]),
        (["--manifests", "{tmp}/bad-servers"], {}, ["--manifests", "servers.json", "command"]),
        (["--model", "nope:x"], {}, ["--model nope:x", "unknown provider 'nope'", "scripted"]),
        (
            ["--model", "scripted:nope"],
            {},
            ["--model scripted:nope", "scripted:echo", "scripted:demo"],
        ),
        (["--model", "openai:"], {}, ["--model openai:", "no model id", "openai:<model-id>"]),
        (["--model", "nosuchmodel"], {}, ["--model nosuchmodel", "provider:model-id"]),
        ([], {"MCP_AGENT_MODEL": "nope:x"}, ["$MCP_AGENT_MODEL", "unknown provider 'nope'"]),
        ([], {"MCP_AGENT_MODEL": "scripted:nope"}, ["$MCP_AGENT_MODEL", "scripted:echo"]),
        (["--max-depth", "-3"], {}, ["--max-depth must be 0", "-3"]),
        (["--transport", "http", "--port", "70000"], {}, ["--port must be 0 to 65535", "70000"]),
        (["--transport", "http", "--port", "-1"], {}, ["--port must be 0 to 65535", "-1"]),
        (["--sessions-dir", "{tmp}/nope"], {}, ["--sessions-dir", "does not exist"]),
        (["--sessions-dir", "{tmp}/file"], {}, ["--sessions-dir", "not a folder"]),
        (["--sessions-layout", "pi"], {}, ["--sessions-layout needs --sessions-dir"]),
        # HTTP's flags without --transport http served stdio: `serve --port 8080` left the
        # terminal (or a launcher expecting a port) waiting on standard input.
        (["--port", "8080"], {}, ["--port is for --transport http: add that"]),
        (["--port", "70000"], {}, ["--port is for --transport http"]),
        (
            ["--transport", "stdio", "--host", "0.0.0.0", "--token-file", "{tmp}/t"],
            {},
            ["--host, --token-file are for --transport http"],
        ),
        (["--no-auth"], {}, ["--no-auth is for --transport http"]),
    ],
)
def test_a_bad_flag_is_one_line_and_creates_nothing(
    serve: Any, tmp_path: Path, args: list[str], env: dict[str, str], says: list[str]
) -> None:
    result = serve(*args, env=env)
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    for words in says:
        assert words in lines[0], lines[0]
    assert "Traceback" not in result.output
    assert "sessions stored in" not in result.output  # no banner
    assert not (tmp_path / "s.db").exists()
    assert not (tmp_path / "nope").exists()
    assert list((tmp_path / "XDG_RUNTIME_DIR").iterdir()) == []  # no token file


@pytest.mark.parametrize(
    ("args", "env", "says"),
    [
        (["--db", "{tmp}/missing/s.db"], {}, ["--db", "{tmp}/missing", "create it first"]),
        (["--db", "{tmp}/a/b/s.db"], {}, ["--db", "{tmp}/a/b does not exist", "create it first"]),
        (["--db", "{tmp}/file/s.db"], {}, ["--db", "is not a folder"]),
        ([], {"MCP_AGENT_DB": "{tmp}/missing/s.db"}, ["$MCP_AGENT_DB", "create it first"]),
    ],
)
def test_a_database_in_a_missing_folder_is_an_error(
    serve: Any, tmp_path: Path, args: list[str], env: dict[str, str], says: list[str]
) -> None:
    result = serve(*args, env=env, db=False)
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    for words in says:
        assert words.format(tmp=tmp_path) in lines[0], lines[0]
    assert "Traceback" not in result.output
    assert not (tmp_path / "missing").exists()
    assert not (tmp_path / "a").exists()


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["--model", "scripted:echo"],
        ["--model", "scripted"],
        ["--model", "scripted:demo"],  # the command line's own scripted model
        ["--model", "openai:gpt-4o-mini"],  # no key yet: runs fail until one is set
        ["--model", "openai:some-new-model"],  # an id not in the table: default limits
        ["--model", "client"],
        ["--model", "sampling:client"],  # how a session records the client's model
        ["--manifests", "{tmp}/good", "--max-depth", "0"],
        ["--transport", "http", "--no-auth", "--port", "0"],
        ["--transport", "http", "--no-auth", "--port", "65535"],
        ["--sessions-dir", "{tmp}/good", "--sessions-layout", "pi"],
        ["--max-subscriptions", "5"],  # for stdio too
    ],
)
def test_good_flags_still_start(serve: Any, tmp_path: Path, args: list[str]) -> None:
    result = serve(*args)
    assert result.exit_code == 0, result.output
    assert "sessions stored in" in result.stderr
    assert (tmp_path / "s.db").exists()


@pytest.mark.parametrize(
    "args",
    [
        ["--manifests=~/good"],
        ["--transport", "http", "--port", "0", "--token-file=~/token"],
        ["--sessions-dir=~/good"],
    ],
)
def test_a_path_after_an_equals_sign_may_start_at_home(
    serve: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str]
) -> None:
    """`--manifests=~/agents`: the shell leaves a ~ after an = as it is (it expands an
    assignment's alone), and --manifests and --token-file took it for a folder named ~ ("is
    not a folder", "does not exist"), where --db and --sessions-dir read it as home."""
    monkeypatch.setenv("HOME", str(tmp_path))
    token = tmp_path / "token"
    token.write_text("a-token-of-the-user-0123456789abcdef\n")
    token.chmod(0o600)
    result = serve(*args)
    assert result.exit_code == 0, result.output
    assert "sessions stored in" in result.stderr


@pytest.mark.parametrize(
    ("args", "env", "source"),
    [
        (["--model", "openai:gpt-4o-mini"], {}, "--model openai:gpt-4o-mini"),
        ([], {"MCP_AGENT_MODEL": "anthropic:x"}, "$MCP_AGENT_MODEL (anthropic:x)"),
    ],
)
def test_a_default_model_whose_key_is_unset_is_warned_of_at_start(
    serve: Any, monkeypatch: pytest.MonkeyPatch, args: list[str], env: dict[str, str], source: str
) -> None:
    """The server reads its environment once: a default model without its key could only
    be refused, run after run, and the user who just set up a client should hear it at once
    (it still starts: agents may name other models, and a key may be in a models file)."""
    result = serve(*args, env=env)  # the fixture unsets both keys
    assert result.exit_code == 0, result.output
    provider_env = "OPENAI_API_KEY" if "openai" in source else "ANTHROPIC_API_KEY"
    assert f"warning: {source} needs an API key and {provider_env} is not set" in result.stderr
    monkeypatch.setenv(provider_env, "sk-test")
    quiet = serve(*args, env=env)
    assert quiet.exit_code == 0 and "warning" not in quiet.stderr
    assert "warning" not in serve("--model", "scripted:echo").stderr


def test_serving_sets_the_collector_for_a_long_run(serve: Any) -> None:
    from mcp_agent.cli.serve import COLLECTOR_THRESHOLDS

    gc.set_threshold(700, 10, 10)  # Python's defaults (the fixture puts back what was set)
    result = serve()
    assert result.exit_code == 0, result.output
    assert gc.get_threshold() == COLLECTOR_THRESHOLDS
    assert gc.get_freeze_count() > 0  # what start-up built is out of the full passes


def test_the_collector_is_off_while_the_server_is_built_and_on_once_it_serves(
    serve: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Start-up builds what lives as long as the server: the collector ran through it some 200
    # times in a real start (about 15% of its CPU), freeing almost nothing.
    import mcp_agent.server.app as server_app

    collections: list[int] = []
    while_built: list[tuple[bool, int]] = []
    build = server_app.build_server

    def observed_build(*args: Any, **kwargs: Any) -> Any:
        before = len(collections)
        server = build(*args, **kwargs)
        while_built.append((gc.isenabled(), len(collections) - before))
        return server

    def seen(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            collections.append(info["generation"])

    monkeypatch.setattr(server_app, "build_server", observed_build)
    gc.set_threshold(700, 10, 10)  # Python's defaults: building the tools passes 700 often
    gc.callbacks.append(seen)
    try:
        result = serve()
    finally:
        gc.callbacks.remove(seen)
    assert result.exit_code == 0, result.output
    assert while_built == [(False, 0)]
    assert gc.isenabled()


@pytest.mark.parametrize("args", [["--port", "8080"], ["--model", "nope:x"]])
def test_a_start_refused_leaves_the_collector_on(serve: Any, args: list[str]) -> None:
    result = serve(*args)
    assert result.exit_code == 2, result.output
    assert gc.isenabled()


# Counts the collections before the collector is frozen (tune_collector: the server is built).
_COUNTED_START = """
import gc, sys
early = []
def seen(phase, info):
    if phase == "start" and not gc.get_freeze_count():
        early.append(info["generation"])
import atexit
atexit.register(lambda: print("collections before serving:", len(early), file=sys.stderr))
sys.argv = ["mcp-agent-sessions", "serve", "--db", sys.argv[1]]
from mcp_agent.__main__ import run
gc.callbacks.append(seen)
run()
"""


def test_the_command_line_starts_a_server_with_no_collection(tmp_path: Path) -> None:
    # As `mcp-agent-sessions serve` and `python -m mcp_agent serve` start: the collector is
    # off from the first import (typer's, before any command is known) until the server is
    # built (it ran some 60 times through typer's import and ours before serve started).
    env = {k: v for k, v in os.environ.items() if k not in OUR_ENV}
    command = [sys.executable, "-c", _COUNTED_START, str(tmp_path / "s.db")]
    done = subprocess.run(
        command, stdin=subprocess.DEVNULL, capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "collections before serving: 0" in done.stderr.splitlines(), done.stderr


def test_every_command_but_serve_runs_with_the_collector_on() -> None:
    from typer.testing import CliRunner

    from mcp_agent.cli import app

    gc.disable()  # as mcp_agent.__main__.run starts the command line
    try:
        result = CliRunner().invoke(app, ["models"])
        assert result.exit_code == 0, result.output
        assert gc.isenabled()
    finally:
        gc.enable()


def test_a_port_in_use_is_refused_before_its_token_file_is_touched(
    serve: Any, tmp_path: Path
) -> None:
    import socket

    from mcp_agent.runtime.settings import token_dirs

    with socket.socket() as other:  # another server, listening on the port
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1]
        # the token file the other server's clients read
        token_file = token_dirs()[0][0] / f"http-{port}.token"
        token_file.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        token_file.write_text("the-other-servers-token\n")
        result = serve("--transport", "http", "--port", str(port))
        assert result.exit_code == 2, result.output
        assert f"port {port} on 127.0.0.1 is in use" in result.stderr
        assert token_file.read_text() == "the-other-servers-token\n"
        assert "Traceback" not in result.output


def test_the_default_database_folder_is_still_created(serve: Any, tmp_path: Path) -> None:
    # The per-user data dir is ours to create; XDG_DATA_HOME puts it in tmp_path.
    result = serve(db=False, env={"XDG_DATA_HOME": "{tmp}/data"})
    assert result.exit_code == 0, result.output
    assert (tmp_path / "data" / "mcp-agent-sessions" / "sessions.db").exists()


def test_a_real_stdio_server_with_good_flags_answers(tmp_path: Path) -> None:
    (tmp_path / "m" / "agents").mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if k not in OUR_ENV}
    command = [sys.executable, "-m", "mcp_agent", "serve", "--db", str(tmp_path / "s.db")]
    command += ["--manifests", str(tmp_path / "m"), "--model", "scripted:echo", "--max-depth", "0"]
    server = subprocess.Popen(
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    )
    try:
        out, err = server.communicate((json.dumps(initialize_request(1)) + "\n").encode(), 60)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    assert server.returncode == 0, err
    answer = json.loads(out.splitlines()[0])
    assert answer["id"] == 1 and "serverInfo" in answer["result"]
    assert b"sessions stored in" in err


# --- scripted models --------------------------------------------------------------------------


def test_an_unknown_scripted_model_names_the_known_ones() -> None:
    registry = ModelRegistry()
    with pytest.raises(ModelRegistryError) as error:
        registry.resolve("scripted:nope")
    assert "unknown scripted model scripted:nope" in str(error.value)
    assert "scripted:echo" in str(error.value)
    assert registry.resolve("scripted").id == "echo"
    assert registry.resolve("scripted:echo").id == "echo"
    with pytest.raises(ModelRegistryError, match="scripted:echo"):
        registry.stream_fn_for(scripted_model("nope"))


def test_a_models_file_may_name_scripted_models(tmp_path: Path) -> None:
    path = tmp_path / "models.toml"
    path.write_text('[[providers.scripted.models]]\nid = "mine"\n')
    registry = ModelRegistry.load(path)
    assert registry.resolve("scripted:mine").id == "mine"
    registry.stream_fn_for(registry.resolve("scripted:mine"))
    with pytest.raises(ModelRegistryError, match="scripted:echo, scripted:mine"):
        registry.resolve("scripted:nope")


@pytest.mark.anyio
async def test_an_unknown_scripted_model_at_run_time_is_an_error(tmp_path: Path) -> None:
    from mcp_agent.sessions.sqlite import SqliteSessionRepo

    server = agent_server(tmp_path, {"scripted": lambda _: reply("hi")})
    async with Client(server) as client:
        text = await call_error(client, "agent_run", prompt="hi", model="scripted:nope")
    assert "unknown scripted model scripted:nope" in text and "scripted:echo" in text
    with SqliteSessionRepo(tmp_path / "sessions.db") as repo:
        assert repo.list().items == []  # refused before a session was created


def test_a_host_that_does_not_resolve_is_one_line_before_the_banner(
    serve: Any, tmp_path: Path
) -> None:
    token = tmp_path / "token"
    token.write_text("a-token-of-ours\n")
    token.chmod(0o600)
    result = serve(
        "--transport", "http", "--host", "no-such-host.invalid", "--token-file", str(token)
    )
    assert result.exit_code == 2, result.output
    assert "--host no-such-host.invalid: cannot be resolved" in result.stderr
    assert "sessions stored in" not in result.output and "Traceback" not in result.output


def test_port_0_serves_on_a_free_port_and_says_which(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in OUR_ENV}
    command = [sys.executable, "-m", "mcp_agent", "serve", "--transport", "http", "--port", "0"]
    command += ["--db", str(tmp_path / "s.db"), "--no-auth"]
    process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert process.stderr is not None
        banner = process.stderr.readline()
        url = banner.split(" on ")[1].split()[0]
        port = int(url.split(":")[2].split("/")[0])
        assert port != 0, banner
        viewer = next(line for line in process.stderr if "session viewer" in line)
        assert f":{port}/" in viewer, viewer
        answer = None
        for _ in range(100):  # the banner comes before the bind: a hang guard, not a timing
            try:
                answer = httpx.post(
                    url,
                    json=initialize_request(),
                    headers={"accept": "application/json, text/event-stream"},
                    timeout=10,
                )
                break
            except httpx.ConnectError:
                time.sleep(0.1)
        assert answer is not None and answer.status_code == 200, answer
    finally:
        process.terminate()
        process.wait(timeout=15)


def test_a_stdio_server_answers_its_first_request_without_what_it_does_not_need(
    tmp_path: Path,
) -> None:
    # What a start loads before its first answer is most of the time a client waits for it:
    # HTTP's transport (uvicorn's protocols), the agent's loop and compaction (loaded with a
    # first run or compaction), rich, which the SDK imported only to make a log handler
    # that the command line's plain one had made unused, sqlite-utils (with pluggy and
    # dateutil), which made a new database's tables, and the PostgreSQL driver and the
    # providers' HTTP client, which a SQLite store and no run need.
    env = {k: v for k, v in os.environ.items() if k not in OUR_ENV}
    requests = [
        initialize_request(),
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
    ]
    command = [sys.executable, "-X", "importtime", "-m", "mcp_agent", "serve"]
    done = subprocess.run(
        [*command, "--db", str(tmp_path / "s.db")],
        input="".join(json.dumps(r) + "\n" for r in requests),
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    answers = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(answers[-1]["result"]["tools"]) > 10
    modules = {line.split("|")[-1].strip() for line in done.stderr.splitlines() if "|" in line}
    assert "mcp_agent.server.app" in modules  # the measurement works
    unneeded = (
        "mcp_agent.server.streamable_http",
        "uvicorn.protocols",
        "mcp_agent.loop",
        "mcp_agent.compaction",
        "rich",
        "sqlite_utils",
        "psycopg",
        "httpx",  # ours; the SDK's client is httpx2
    )
    loaded = sorted(m for m in modules if any(m == u or m.startswith(u + ".") for u in unneeded))
    assert loaded == []


def test_ctrl_c_stops_an_http_server_with_exit_130(tmp_path: Path) -> None:
    """Ctrl-C ended `serve --transport http` with exit 0, as if it had ended by itself (over
    stdio, and for every other command, it is 130)."""
    with Served(tmp_path, "--no-auth") as server:
        assert server.initialize().status_code == 200  # serving
        server.process.send_signal(signal.SIGINT)
        assert server.process.wait(timeout=30) == 130
    assert "Traceback" not in server.banner()


def test_a_server_built_has_built_none_of_the_stored_shapes() -> None:
    # Entries and messages (their validators and serializers) are built at their first use:
    # a server's start and its tools/list use none of them, and building them all at import
    # was some 2% of the work before a stdio server's first answer.
    script = (
        "import json\n"
        "import mcp_agent.cli, mcp_agent.server.app, mcp_agent.sessions.entries\n"
        "import mcp_agent.messages\n"
        "from mcp_agent.messages import parse_content\n"
        "from mcp_agent.wire import WireModel\n"
        "def below(c):\n"
        "    for s in c.__subclasses__():\n"
        "        yield s\n"
        "        yield from below(s)\n"
        "shapes = {c.__name__: c.__pydantic_complete__ for c in below(WireModel)}\n"
        "parse_content({'type': 'text', 'text': 'hi'})\n"
        "print(json.dumps(shapes))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    shapes = json.loads(done.stdout)
    assert {"SessionEntry", "MessageEntry", "UserMessage", "TextContent"} <= set(shapes)
    assert [name for name, built in shapes.items() if built] == []


@pytest.mark.parametrize(
    "args",
    [
        ["serve", "--help"],
        ["serve", "--bogus"],
        ["serve", "--port", "x"],
        ["serve", "extra"],
        ["serve", "--db"],
    ],
)
def test_serve_given_first_builds_its_command_alone_and_says_what_the_whole_line_says(
    args: list[str],
) -> None:
    # `mcp-agent-sessions serve ...` runs on a line of serve alone (mcp_agent.cli.main): typer
    # makes click's form of every command it holds, each option of each, at every start.
    import typer
    from typer.testing import CliRunner

    from mcp_agent.cli import app, serve_app

    assert sorted(typer.main.get_group(serve_app).commands) == ["serve"]
    whole, alone = CliRunner().invoke(app, args), CliRunner().invoke(serve_app, args)
    assert (alone.exit_code, alone.output) == (whole.exit_code, whole.output)
    assert alone.output.strip()
