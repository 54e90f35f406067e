"""The command line through its real entry point: subprocesses of ``python -m mcp_agent`` where
the process matters (import cost, serve, demo, run, chat, usage errors), typer's CliRunner
elsewhere. Runs talk to a real model API (fakellm) or to the scripted models."""

from __future__ import annotations

import contextlib
import functools
import itertools
import json
import os
import pty
import re
import select
import shlex
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from agent_support import pi_v3
from mcp_support import START_GUARD_S, another_programs_database, poll, search_index_marks
from narrow import narrow, present
from providers_support import (
    Reply,
    ScriptServer,
    oa_text_reply,
    script_server,
    wait_for_fakellm,
)
from sqlite_support import write_lock_held
from typer.testing import CliRunner

from mcp_agent.cli import app
from mcp_agent.messages import (
    AssistantMessage,
    ImageContent,
    TextContent,
    ToolCall,
    ToolResultMessage,
    Usage,
    content_text,
)
from mcp_agent.messages import UserMessage as User
from mcp_agent.runtime.leases import SessionLeases
from mcp_agent.sessions import CompactionEntry, ThinkingLevelChangeEntry
from mcp_agent.sessions.errors import SessionError
from mcp_agent.sessions.sqlite import SqliteSessionRepo, SqliteSessionStorage

MODEL_KEYS = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "MCP_AGENT_MODEL", "OPENAI_BASE_URL")
INTERRUPTED_LINE = "\nmcp-agent-sessions: interrupted\n"  # what Ctrl-C ends a command with
FAKELLM_RULES = """\
version: 1
rules:
  - name: after_helper
    when: {tool_result_contains: "sub-agent default: completed"}
    respond: {content: "The helper says hi."}
  - name: delegate
    when: {messages_contain: "delegate please"}
    respond:
      tool_calls:
        - name: subagent
          arguments: {agent: "default", task: "say hi from the helper"}
  - name: helper
    when: {messages_contain: "say hi from the helper"}
    respond: {content: "hi from the helper"}
  - name: long_story
    when: {messages_contain: "long story"}
    respond: {content: "Once upon a time LONG"}
  - name: hello
    when: {messages_contain: "hello"}
    respond: {content: "Hi there! This is a mock response."}
""".replace("LONG", " ".join(f"w{i}" for i in range(400)))


# --- helpers ----------------------------------------------------------------------------------


def users_said(db: Path) -> list[str]:
    """What the user said, in order, in the one session of ``db``."""
    with SqliteSessionRepo(db) as repo:
        (listed,) = repo.list().items
        messages = repo.open(listed.id).build_context().messages
    return [narrow(m, User).text for m in messages if isinstance(m, User)]


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in MODEL_KEYS and k != "MCP_AGENT_DB"}
    env.update(COLUMNS="100", PYTHONUNBUFFERED="1", **extra)
    return env


def sub(
    *args: str,
    input: str | None = None,
    env: dict[str, str] | None = None,
    timeout: float = START_GUARD_S,
) -> subprocess.CompletedProcess[str]:
    """``python -m mcp_agent ARGS`` in a fresh interpreter; ``timeout`` is a hang guard that
    covers its start (a piped chat of a few lines went over 30 s at a load of 15)."""
    return subprocess.run(
        [sys.executable, "-m", "mcp_agent", *args],
        input=input,
        capture_output=True,
        text=True,
        env=env or clean_env(),
        timeout=timeout,
    )


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "sessions.db"


@pytest.fixture
def cli(db: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """Run a command in-process against ``db`` (through $MCP_AGENT_DB)."""
    for key in MODEL_KEYS:
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("MCP_AGENT_DB", str(db))
    monkeypatch.setenv("COLUMNS", "100")
    runner = CliRunner()

    def invoke(*args: str, input: str | None = None) -> Any:
        return runner.invoke(app, list(args), input=input)

    return invoke


def seed(db: Path) -> dict[str, str]:
    """A named session with a tool call, a label and two branches; returns the ids."""
    with SqliteSessionRepo(db) as repo:
        session = repo.create(name="weather chat")
        ids = {"session": session.id}
        ids["ask"] = session.append_message(User(content="What is the weather in [Paris]?"))
        call = ToolCall(id="c1", name="weather", arguments={"city": "Paris"})
        ids["call"] = session.append_message(
            AssistantMessage(content=[TextContent(text="Let me check."), call])
        )
        ids["result"] = session.append_message(
            ToolResultMessage(
                tool_call_id="c1", tool_name="weather", content=[TextContent(text="18 C, sunny")]
            )
        )
        ids["answer"] = session.append_message(
            AssistantMessage(content=[TextContent(text="It is 18 C and sunny.")])
        )
        session.append_label(ids["ask"], "first-try")
        session.move_to(ids["ask"])
        ids["other"] = session.append_message(
            AssistantMessage(content=[TextContent(text="No idea.")])
        )
        ids["leaf"] = ids["other"]
        return ids


PI_V1 = (
    '{"type":"session","id":"01a00000-0000-7000-8000-0000000000a1","timestamp":"2025-06-01T10:00:00.000Z","cwd":"/w"}\n'
    '{"type":"message","timestamp":"2025-06-01T10:00:01.000Z","message":{"role":"user","content":"old hello","timestamp":1748772001000}}\n'
    '{"type":"message","timestamp":"2025-06-01T10:00:02.000Z","message":{"role":"assistant","content":[{"type":"text","text":"old hi"}],"api":"x","provider":"openai","model":"gpt-4o","usage":{"input":1,"output":1,"cacheRead":0,"cacheWrite":0,"totalTokens":2,"cost":{"input":0,"output":0,"cacheRead":0,"cacheWrite":0,"total":0}},"stopReason":"stop","timestamp":1748772002000}}\n'
)
PI_V2 = (
    '{"type":"session","version":2,"id":"01a00000-0000-7000-8000-0000000000a2","timestamp":"2025-09-01T10:00:00.000Z","cwd":"/w"}\n'
    '{"type":"message","id":"aaaa0001","parentId":null,"timestamp":"2025-09-01T10:00:01.000Z","message":{"role":"user","content":"v2 hello","timestamp":1756720801000}}\n'
    '{"type":"message","id":"aaaa0002","parentId":"aaaa0001","timestamp":"2025-09-01T10:00:02.000Z","message":{"role":"hookMessage","customType":"note","content":"from a hook","display":true,"timestamp":1756720802000}}\n'
)


# --- import cost, database path, usage errors -------------------------------------------------


def test_sessions_list_loads_neither_mcp_nor_providers_nor_server(db: Path) -> None:
    seed(db)
    done = subprocess.run(
        [
            sys.executable,
            "-X",
            "importtime",
            "-m",
            "mcp_agent",
            "sessions",
            "list",
            "--db",
            str(db),
        ],
        capture_output=True,
        text=True,
        env=clean_env(),
        timeout=START_GUARD_S,  # a start's imports, on a loaded machine
    )
    assert done.returncode == 0, done.stderr
    assert "weather chat" in done.stdout
    modules = {line.split("|")[-1].strip() for line in done.stderr.splitlines() if "|" in line}
    assert "mcp_agent.sessions.sqlite" in modules  # the measurement works
    heavy = sorted(
        m
        for m in modules
        if m == "mcp" or m.startswith(("mcp.", "mcp_agent.providers", "mcp_agent.server", "httpx"))
    )
    assert heavy == []


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["sessions", "show"], "Missing argument 'ID'"),
        (["sessions", "list", "--limit", "0"], "--limit"),
        (["sessions", "frobnicate"], "No such command"),
        (["run"], "Missing argument"),
    ],
)
def test_bad_usage_is_one_line_and_exit_2(args: list[str], says: str) -> None:
    done = sub(*args)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0] and "--help" in lines[0], done.stderr
    assert lines[0].startswith("mcp-agent-sessions: ")


@pytest.mark.parametrize(
    "args", [["sessions", "list"], ["run", "hi", "--model", "scripted:echo"]], ids=["list", "run"]
)
def test_a_bad_lease_time_in_the_environment_is_one_line(db: Path, args: list[str]) -> None:
    # Read as the leases module is imported, where no command's own checks reach: it was a
    # traceback from every command that stores (sessions list, run, chat, serve, demo's server).
    seed(db)
    done = sub(*args, "--db", str(db), env=clean_env(MCP_AGENT_LEASE_SECONDS="soon"))
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [
        "mcp-agent-sessions: MCP_AGENT_LEASE_SECONDS must be a number of seconds from 6 to 3600,"
        " not 'soon'"
    ]


def test_a_lease_too_short_to_renew_is_refused_saying_why(db: Path) -> None:
    """A 3 s lease left each renewal 0.5 s (a sixth), 1 s a sixth of that: too little for a
    pooled connection of a busy server or a distant database, and live runs' leases lapsed
    (another replica then took their sessions). Such a lease is refused, saying why."""
    seed(db)
    done = sub("sessions", "list", "--db", str(db), env=clean_env(MCP_AGENT_LEASE_SECONDS="3"))
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.splitlines()
    assert "MCP_AGENT_LEASE_SECONDS must be a number of seconds from 6 to 3600, not '3'" in line
    assert "renewal is given up after a sixth" in line
    assert (
        sub(
            "sessions", "list", "--db", str(db), env=clean_env(MCP_AGENT_LEASE_SECONDS="6")
        ).returncode
        == 0
    )


def test_a_bad_statement_timeout_stops_nothing_on_sqlite(
    cli: Any, db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # MCP_AGENT_DB_STATEMENT_TIMEOUT bounds PostgreSQL statements only: a bad value stopped
    # every run, chat and serve over a SQLite file, where it does not apply.
    monkeypatch.setenv("MCP_AGENT_DB_STATEMENT_TIMEOUT", "abc")
    done = cli("run", "hi", "--model", "scripted:echo", "--db", str(db))
    assert done.exit_code == 0, done.stderr
    assert done.stdout.strip() == "hi"


@pytest.mark.parametrize(
    "args", [["sessions", "list"], ["run", "hi", "--model", "scripted:echo"]], ids=["list", "run"]
)
def test_a_bad_statement_timeout_is_one_line_on_postgres(
    postgres_url: str, args: list[str]
) -> None:
    done = sub(*args, "--db", postgres_url, env=clean_env(MCP_AGENT_DB_STATEMENT_TIMEOUT="abc"))
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [
        "mcp-agent-sessions: MCP_AGENT_DB_STATEMENT_TIMEOUT must be a number of seconds from 1"
        " to 3600, not 'abc'"
    ]


def test_no_arguments_shows_help() -> None:
    done = sub()
    assert done.returncode == 2
    assert "sessions" in done.stdout + done.stderr


@pytest.mark.parametrize("command", [["serve"], ["sessions", "list"], ["sessions"]])
def test_help_in_a_narrow_terminal_keeps_every_word_whole(command: list[str]) -> None:
    """At 40 columns rich's panels cut the options' names, types and defaults ("--transp…",
    "127.0.0.…", "$MCP_AGE…"); below 60, the help is click's, each option's words under its
    name, every line within the width and nothing cut."""
    done = sub(*command, "--help", env={**clean_env(), "COLUMNS": "40"})
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert max(len(line.rstrip()) for line in lines) <= 40, done.stdout
    assert "…" not in done.stdout.replace("postgresql://…", ""), done.stdout
    if command == ["serve"]:
        assert "  --transport stdio|http" in lines and "127.0.0.1]" in done.stdout
    if command == ["sessions", "list"]:
        assert "$MCP_AGENT_DB" in done.stdout and "  --limit N" in lines
    wide = sub(*command, "--help", env=clean_env())
    assert "╭─ Options" in wide.stdout  # rich's panels where they fit


def test_unreadable_database_is_bad_input(cli: Any, tmp_path: Path) -> None:
    not_a_db = tmp_path / "notes.txt"
    not_a_db.write_text("hello, not SQLite\n" * 100)
    result = cli("sessions", "list", "--db", str(not_a_db))
    assert result.exit_code == 2
    assert f"{not_a_db} is not a SQLite database" in result.stderr
    assert "pass --db" not in result.stderr  # it was given


def test_the_default_database_unopened_names_the_flag_and_variable(
    cli: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    not_a_db = tmp_path / "notes.txt"
    not_a_db.write_text("hello, not SQLite\n" * 100)
    monkeypatch.setenv("MCP_AGENT_DB", str(not_a_db))
    result = cli("sessions", "list")
    assert result.exit_code == 2
    assert "is not a SQLite database" in result.stderr
    assert "; pass --db FILE|URL or set MCP_AGENT_DB" in result.stderr


@pytest.mark.parametrize("command", [["run", "hi"], ["chat"], ["serve"]])
def test_a_database_that_cannot_be_opened_stops_run_chat_and_serve(
    cli: Any, tmp_path: Path, command: list[str]
) -> None:
    result = cli(*command, "--model", "scripted:echo", "--db", str(tmp_path), input="")
    assert result.exit_code == 2, result.output
    assert f"--db {tmp_path} is a folder; name a database file" in result.stderr
    assert "serve --sessions-dir FOLDER" in result.stderr
    assert "Traceback" not in result.output


@pytest.mark.parametrize(
    "command", [["run", "hi"], ["chat"], ["serve"], ["sessions", "list"], ["sessions", "import"]]
)
def test_another_programs_database_is_refused_and_left_as_it_was(
    cli: Any, tmp_path: Path, command: list[str]
) -> None:
    path = tmp_path / "bookmarks.db"
    before = another_programs_database(path)
    if command[-1] == "import":
        command = [*command, str(tmp_path / "none.jsonl")]
        (tmp_path / "none.jsonl").write_text("")
    if command[0] != "sessions":
        command = [*command, "--model", "scripted:echo"]
    result = cli(*command, "--db", str(path), input="")
    assert result.exit_code == 2, result.output
    assert "is a SQLite database of another program" in result.stderr
    assert "Traceback" not in result.output
    assert path.read_bytes() == before
    assert not (tmp_path / "bookmarks.db-wal").exists()


def test_a_read_only_database_stops_run_chat_and_serve_but_is_listed(tmp_path: Path) -> None:
    """The file is bound read-only over itself in a mount namespace of its own (root and
    util-linux's unshare); its folder stays writable, as when a file is on a read-only mount."""
    path = tmp_path / "f.db"
    SqliteSessionRepo(path).create()
    script = tmp_path / "ro.sh"
    script.write_text(
        f'mount --bind "{path}" "{path}" && mount -o remount,ro,bind "{path}" || exit 99\n'
        f'for c in "run hi --model scripted:echo" "chat --model scripted:echo" serve \\\n'
        f'    "sessions list"; do\n'
        f'  {sys.executable} -m mcp_agent $c --db "{path}" </dev/null\n'
        f'  echo "exit $?"\n'
        f"done\n"
    )
    try:
        done = subprocess.run(
            ["unshare", "-m", "sh", str(script)],
            capture_output=True,
            text=True,
            env=clean_env(),
            timeout=120,
        )
    except FileNotFoundError:
        pytest.skip("no unshare here")
    if done.returncode == 99 or "unshare:" in done.stderr:
        pytest.skip(f"no mount namespace here: {done.stderr.strip()}")
    assert "Traceback" not in done.stderr, done.stderr
    exits = [line for line in done.stdout.splitlines() if line.startswith("exit")]
    assert exits == ["exit 2", "exit 2", "exit 2", "exit 0"], done.stdout + done.stderr
    assert done.stderr.count(f"the session database {path} is read-only") == 3, done.stderr


@pytest.mark.parametrize("command", [["run", "hi"], ["chat"], ["serve"]])
def test_an_unknown_durability_is_refused_in_one_line(
    cli: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: list[str]
) -> None:
    monkeypatch.setenv("MCP_AGENT_DURABILITY", "fast")
    result = cli(*command, "--model", "scripted:echo", "--db", str(tmp_path / "s.db"), input="")
    assert result.exit_code == 2, result.output
    assert "durability must be full or normal, not 'fast'" in result.stderr
    assert "Traceback" not in result.output
    assert not (tmp_path / "s.db").exists()


@pytest.mark.parametrize(
    ("env", "args", "says"),
    [
        ({"MCP_AGENT_MODEL_RETRIES": "many"}, [], "MCP_AGENT_MODEL_RETRIES must be a whole number"),
        ({}, ["--model-retries", "-1"], "--model-retries must be 0 (never) or more, not -1"),
        ({"MCP_AGENT_MODEL_RETRIES": "-1"}, [], "(from the flag or MCP_AGENT_MODEL_RETRIES)"),
    ],
)
def test_bad_model_retries_are_refused_in_one_line(
    cli: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    env: dict[str, str],
    args: list[str],
    says: str,
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    result = cli("serve", *args, "--db", str(tmp_path / "s.db"), input="")
    assert result.exit_code == 2, result.output
    assert says in result.stderr and "Traceback" not in result.output


@pytest.mark.parametrize(
    "variable",
    ["MCP_AGENT_MAX_RUNS", "MCP_AGENT_MAX_RUNS_PER_CLIENT", "MCP_AGENT_MAX_SUBSCRIPTIONS"],
)
def test_a_negative_limit_from_the_environment_names_the_variable(
    cli: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, variable: str
) -> None:
    # It named only the flag, which the person who set the variable never gave.
    monkeypatch.setenv(variable, "-1")
    result = cli("serve", "--db", str(tmp_path / "s.db"), input="")
    assert result.exit_code == 2, result.output
    assert f"or more, not -1 (from the flag or {variable})" in result.stderr


def test_serve_durability_flag_is_a_choice(cli: Any, tmp_path: Path) -> None:
    result = cli("serve", "--durability", "fast", "--db", str(tmp_path / "s.db"), input="")
    assert result.exit_code == 2
    assert "full" in result.stderr and "normal" in result.stderr


# --- sessions ---------------------------------------------------------------------------------


def test_sessions_list_at_80_columns_puts_each_name_under_its_session(db: Path) -> None:
    """At 80 columns the whole ids left the names 15 cells ('Plan a picnic f…', and the
    header 'Name / first m…'): each name goes on the line under its session, with the width
    to itself; at 120 the table stays one line a session."""
    ids = seed(db)
    asked = "Plan a picnic for twelve people in the park on Sunday, with games and music " * 2
    with SqliteSessionRepo(db) as repo:
        other = repo.create()
        other.append_message(User(content=asked))
    env = clean_env(MCP_AGENT_DB=str(db))
    env["COLUMNS"] = "80"
    done = sub("sessions", "list", env=env)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80, done.stdout
    assert lines[0].split() == ["ID", "Modified", "Msgs", "Tokens"]
    assert lines[1] == "  Name / first message"
    assert lines[2].split()[0] == other.id and lines[4].split()[0] == ids["session"]
    assert lines[3].startswith("  Plan a picnic for twelve people in the park on Sunday, with")
    assert lines[3].endswith("…") and len(lines[3]) == 80
    assert lines[5] == "  weather chat"
    env["COLUMNS"] = "120"
    wide = sub("sessions", "list", env=env).stdout.splitlines()
    assert wide[1].split()[0] == other.id and "  Plan a picnic for twelve people" in wide[1]


def test_tables_at_40_columns_are_a_record_a_row(db: Path) -> None:
    """Narrower than their columns (at 40: a listing's rows 66 cells wide, the models' 79),
    the rows were printed whole for the terminal to break anywhere; each row is now its first
    cell whole on a line, then its other cells as "Header value" on lines within the width,
    its name under them."""
    ids = seed(db)
    env = clean_env(MCP_AGENT_DB=str(db))
    env["COLUMNS"] = "40"
    done = sub("sessions", "list", env=env)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert max(len(line) for line in lines) <= 40, done.stdout
    assert lines[0] == ids["session"] and lines[-1] == "  weather chat"
    assert lines[1].startswith("  Modified ") and "Msgs 5" in done.stdout
    models = sub("models", env=env)
    assert models.returncode == 0, models.stderr
    listed = models.stdout.split("\n\n")[0].splitlines()
    assert max(len(line) for line in listed) <= 40, models.stdout
    assert "anthropic:claude-3-5-haiku-latest" in listed
    assert any(line.startswith("  Context 200,000 · Max out 8,192") for line in listed)


def test_list_table_json_search_and_paging(cli: Any, db: Path) -> None:
    ids = seed(db)
    with SqliteSessionRepo(db) as repo:
        repo.create().append_message(User(content="about penguins"))
    result = cli("sessions", "list")
    assert result.exit_code == 0
    assert ids["session"] in result.stdout and "weather chat" in result.stdout
    assert "about penguins" in result.stdout
    found = json.loads(cli("sessions", "list", "--search", "sunny", "--json").stdout)
    assert [s["id"] for s in found["sessions"]] == [ids["session"]]
    first = json.loads(cli("sessions", "list", "--limit", "1", "--json").stdout)
    assert len(first["sessions"]) == 1 and first["nextCursor"]
    rest = json.loads(cli("sessions", "list", "--cursor", first["nextCursor"], "--json").stdout)
    assert [s["id"] for s in rest["sessions"]] == [ids["session"]]
    empty = cli("sessions", "list", "--search", "nothing-like-this")
    assert empty.exit_code == 0 and "no sessions match" in empty.stderr


def test_a_search_says_where_each_session_matched(cli: Any, db: Path) -> None:
    """Under each session a search lists, its best hit: the entry, its role and a snippet
    with the words marked; --json gives the first three and their count, as session_list."""
    ids = seed(db)
    table = cli("sessions", "list", "--search", "sunny weather").stdout.splitlines()
    row = next(i for i, line in enumerate(table) if line.startswith(ids["session"]))
    # No entry holds both words: the newest that holds one.
    assert table[row + 1] == f"  ↳ {ids['answer']} assistant: It is 18 C and «sunny»."
    found = json.loads(cli("sessions", "list", "--search", "Paris", "--json").stdout)
    [listed] = found["sessions"]
    assert listed["hitCount"] == 1
    assert [(h["entryId"], h["role"], h["words"], h["snippet"]) for h in listed["hits"]] == [
        (ids["ask"], "user", 1, "What is the weather in [«Paris»]?")
    ]
    assert "hits" not in json.loads(cli("sessions", "list", "--json").stdout)["sessions"][0]


def test_list_and_show_json_give_times_in_one_unit_pis_milliseconds(cli: Any, db: Path) -> None:
    ids = seed(db)
    (listed,) = json.loads(cli("sessions", "list", "--json").stdout)["sessions"]
    shown = json.loads(cli("sessions", "show", ids["session"], "--json").stdout)["session"]
    pi_time = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")
    for moment in (listed["created"], listed["modified"], shown["created"]):
        assert pi_time.fullmatch(moment), moment
    assert listed["created"] == shown["created"]


def test_db_option_and_environment_select_the_database(cli: Any, db: Path, tmp_path: Path) -> None:
    seed(db)
    other = tmp_path / "other.db"
    SqliteSessionRepo(other).close()
    assert json.loads(cli("sessions", "list", "--json").stdout)["sessions"]
    assert json.loads(cli("sessions", "list", "--db", str(other), "--json").stdout) == {
        "sessions": [],
        "nextCursor": None,
    }


def test_a_store_named_by_mistake_is_refused_and_nothing_is_created(
    cli: Any, db: Path, tmp_path: Path
) -> None:
    seed(db)
    before = sorted(tmp_path.rglob("*"))
    missing = str(tmp_path / "nodir" / "typo.db")
    refused = [
        (("sessions", "list", "--db", missing), "no such database (nothing was created)"),
        (("sessions", "show", "x", "--db", str(tmp_path / "typo.db")), "no such database"),
        (("sessions", "copy", "--from", missing, "--to", str(db)), "--from"),
        (("sessions", "list", "--db", "http://example.com/x"), "only postgresql:// URLs"),
        (("sessions", "copy", "--from", str(db), "--to", "https://h/db"), "--to https://h/db"),
        (("sessions", "list", "--db", ""), "--db is empty"),
        (("sessions", "copy", "--from", str(db), "--to", f"{tmp_path}/new/"), "no such folder"),
        (("sessions", "import", str(db), "--db", missing), "does not exist; create it first"),
        (("run", "hi", "--db", missing), "does not exist; create it first"),
        (("run", "hi", "--db", f"{tmp_path}/new/"), "no such folder"),
        (("run", "hi", "--db", "http://example.com/x"), "only postgresql:// URLs"),
        (("chat", "--db", ""), "--db is empty"),
        (("chat", "--db", missing), "does not exist; create it first"),
        (("sessions", "list", "--db", "n" * 5_000), "cannot be reached (File name too long)"),
    ]
    for args, says in refused:
        result = cli(*args)
        assert result.exit_code == 2, (args, result.output)
        assert says in result.stderr and "Traceback" not in result.output, (args, result.stderr)
    assert sorted(tmp_path.rglob("*")) == before  # no file, folder or database was made
    made = tmp_path / "new.db"  # a command that writes makes a new file in a folder that exists
    pi = tmp_path / "pi.jsonl"
    pi.write_text(pi_v3(2))
    result = cli("sessions", "import", str(pi), "--db", str(made))
    assert result.exit_code == 0, result.stderr
    assert (
        len(json.loads(cli("sessions", "list", "--db", str(made), "--json").stdout)["sessions"])
        == 1
    )


def test_show_renders_the_branch(cli: Any, db: Path) -> None:
    ids = seed(db)
    result = cli("sessions", "show", ids["session"])
    assert result.exit_code == 0, result.stderr
    text = result.stdout
    assert "weather chat" in text
    assert "What is the weather in [Paris]?" in text  # brackets are text, not markup
    assert ids["ask"] in text and ids["other"] in text and "◀ leaf" in text
    assert "#first-try" in text
    assert ids["call"] not in text  # another branch
    main = cli("sessions", "show", ids["session"], "--json")
    data = json.loads(main.stdout)
    assert data["session"]["leafId"] == ids["leaf"]
    assert [e["id"] for e in data["entries"] if e["type"] == "message"] == [
        ids["ask"],
        ids["other"],
    ]
    with SqliteSessionRepo(db) as repo:
        repo.open(ids["session"]).move_to(ids["answer"])
    text = cli("sessions", "show", ids["session"]).stdout
    assert '→ weather({"city": "Paris"})' in text
    assert "← weather" in text and "18 C, sunny" in text


def test_show_leaves_no_blanks_at_the_ends_of_its_lines(cli: Any, db: Path) -> None:
    # Piped to a file, show's entry bodies came padded with spaces to the terminal's width
    # (a tool result's JSON to its widest line, a wrapped call to 80 columns).
    with SqliteSessionRepo(db) as repo:
        session = repo.create()
        session.append_message(User(content="word " * 40))
        session.append_custom("subagent", {"sessionId": "child-0001", "task": "greet " * 30})
        session_id = session.id
    shown = cli("sessions", "show", session_id).stdout
    body = [line for line in shown.splitlines() if line.startswith(" " * 9)]
    assert len(body) > 3, shown
    assert [line for line in shown.splitlines() if line != line.rstrip()] == [], shown


@pytest.mark.parametrize("command", ["show", "tree"])
def test_headings_piped_at_80_columns_break_between_phrases(db: Path, command: str) -> None:
    # Piped at 80 columns, the heading wrapped where rich found a space: "· 1 branch" on one
    # line and "point" on the next, a name cut after "the whole", "◀" apart from "leaf".
    ids = seed(db)
    name = "Plans for the whole family and friends over the long weekend"
    with SqliteSessionRepo(db) as repo:
        session = repo.open(ids["session"])
        session.append_message(User(content="and " * 14 + "a long question"))
        session.set_name(name)
    env = clean_env(MCP_AGENT_DB=str(db))
    env["COLUMNS"] = "80"
    done = sub("sessions", command, ids["session"], env=env)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[:2] == [f"Session {ids['session']}", f"“{name}”"]
    figures = " · ".join(lines[2:4]).split(" · ")
    assert figures[1:] == ["6 messages", "9 entries", "0 tokens", "$0.0000", "1 branch point"]
    assert all(len(line) <= 80 and line == line.rstrip() for line in lines)
    # The leaf, a name too long for the line with its mark: cut in the tree; in show, whole
    # and the mark on a line of its own.
    assert lines[-1].endswith("… ◀ leaf") if command == "tree" else lines[-1] == "◀ leaf"


def test_show_gives_a_custom_entrys_data_once_and_tree_its_preview(cli: Any, db: Path) -> None:
    # A sub-agent's link: show's heading repeated the data its body prints, wrapping at 100
    # columns; the tree, which has no body, shows the fields in its one line.
    with SqliteSessionRepo(db) as repo:
        session = repo.create()
        session.append_message(User(content="greet the team"))
        link = session.append_custom("subagent", {"sessionId": "child-0001", "agent": "default"})
        session_id = session.id
    shown = cli("sessions", "show", session_id).stdout
    assert shown.count("child-0001") == 1, shown
    heading = next(line for line in shown.splitlines() if line.startswith(link))
    assert heading.rstrip() == f"{link} custom subagent ◀ leaf"
    tree = cli("sessions", "tree", session_id).stdout
    assert f"{link} custom subagent: sessionId=child-0001, agent=default" in tree


def test_show_and_tree_say_a_failed_answer_once(cli: Any, db: Path) -> None:
    # Another program's session may say "Aborted: …" where ours say "aborted: …": once, both.
    with SqliteSessionRepo(db) as repo:
        session = repo.create()
        session.append_message(User(content="go on"))
        session.append_message(
            AssistantMessage(stop_reason="aborted", error_message="Aborted: user cancelled")
        )
        sid = session.id
    for command in ("show", "tree"):
        text = " ".join(cli("sessions", command, sid).stdout.split())
        assert "aborted: user cancelled" in text, (command, text)
        assert "Aborted" not in text and "aborted: aborted" not in text, (command, text)


def test_an_error_shows_the_users_own_words_with_their_controls_escaped(cli: Any, db: Path) -> None:
    """An argument pasted with escape codes or a bell in it is named in the error as escapes:
    they would change the terminal (or ring it) rather than show what was wrong."""
    SqliteSessionRepo(db).close()
    result = cli("sessions", "show", "ab\x1b[31mred\x07\u202e")
    assert result.exit_code == 2
    assert "session ab\\x1b[31mred\\x07\\u202e not found" in result.stderr
    assert not any(ch in result.stderr for ch in "\x1b\x07\u202e")


def test_version_names_the_installed_version() -> None:
    """`mcp-agent-sessions --version`, what a person types first to say what they run, was
    "No such option: --version" (exit 2); the version was only in serve's banner."""
    import mcp_agent

    done = sub("--version")
    assert (done.returncode, done.stdout, done.stderr) == (
        0,
        f"mcp-agent-sessions {mcp_agent.__version__}\n",
        "",
    )


def test_show_unknown_session_says_what_to_do(cli: Any, db: Path) -> None:
    SqliteSessionRepo(db).close()
    result = cli("sessions", "show", "no-such-session")
    assert result.exit_code == 2
    assert "session no-such-session not found" in result.stderr
    assert "sessions list" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_a_mistyped_or_cut_session_id_names_the_session_meant(db: Path, tmp_path: Path) -> None:
    """A session id with a typo, cut short, or in capitals was only "not found"; now the
    one session meant is named, and a beginning shared by several ids says so (UUIDv7 ids
    begin with their time: sessions of one minute share their first eight characters)."""
    ids = [f"01a00000-0000-7000-8000-0000000000{n}" for n in ("a1", "b2")] + [
        "01b11111-2222-7333-8444-555555555555"
    ]
    for n, sid in enumerate(ids):
        (tmp_path / f"{n}.jsonl").write_text(pi_v3(2, sid))
    imported = sub(
        "sessions", "import", *(str(tmp_path / f"{n}.jsonl") for n in range(3)), "--db", str(db)
    )
    assert imported.returncode == 0, imported.stderr
    meant = "01b11111-2222-7333-8444-555555555555"
    cases = {
        ("sessions", "show", "01b11111-2222-7333-8444-555555555556"): f"did you mean {meant}?",
        ("sessions", "tree", "01b11111-2222-7333-8444-55555555"): f"did you mean {meant}?",
        ("sessions", "delete", "--yes", meant.upper()): f"did you mean {meant}?",
        ("sessions", "export", "01a00000-0000"): "the ids of 2 sessions begin with it"
        f" ({ids[0]}, {ids[1]}): give the whole id",
        (
            "run",
            "hi",
            "--model",
            "scripted:echo",
            "--session",
            "01b11111-2222-7333-8444-55555555555",
        ): f"did you mean {meant}?",
        (
            "sessions",
            "show",
            "01c22222-3333-7444-8555-666666666666",
        ): "shows the sessions in this database",
    }
    for args, says in cases.items():
        done = sub(*args, "--db", str(db), input="")
        assert done.returncode == 2, (args, done.stderr)
        assert done.stderr.strip().endswith(says), (args, done.stderr)
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    listed = sub("sessions", "list", "--json", "--db", str(db))
    assert len(json.loads(listed.stdout)["sessions"]) == 3  # nothing deleted, nothing made


def test_show_and_tree_cut_what_a_file_holds_of_absurd_size(
    cli: Any, db: Path, tmp_path: Path
) -> None:
    sid, mega = "01a00000-0000-7000-8000-0000000000cc", 1_000_000
    stamp = {"timestamp": "2026-01-01T00:00:00.000Z"}
    lines = [
        {"type": "session", "version": 3, "id": sid, **stamp, "cwd": "/w"},
        {"type": "session_info", "id": "n1", "parentId": None, **stamp, "name": "N" * mega},
        {
            "type": "message",
            "id": "m1",
            "parentId": "n1",
            **stamp,
            "message": {"role": "user", "content": "one line " + "w" * mega, "timestamp": 1},
        },
        {
            "type": "label",
            "id": "l1",
            "parentId": "m1",
            **stamp,
            "targetId": "m1",
            "label": "L" * mega,
        },
    ]
    path = tmp_path / "absurd.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert cli("sessions", "import", str(path)).exit_code == 0
    shown = cli("sessions", "show", sid)
    assert shown.exit_code == 0, shown.stderr
    assert len(shown.stdout) < 20_000
    assert f"[cut: {mega:,} characters in all]" in shown.stdout
    assert "992,009 more characters" in " ".join(shown.stdout.split())
    drawn = cli("sessions", "tree", sid)
    assert drawn.exit_code == 0 and len(drawn.stdout) < 5_000 and "#LLL" in drawn.stdout
    whole = cli("sessions", "show", sid, "--full")
    assert "w" * mega in "".join(whole.stdout.split())


@pytest.mark.parametrize("end", ["\n", "\r", "\r\n", "\u2028"])
def test_a_long_text_says_how_many_lines_were_left_out(end: str) -> None:
    from rich.text import Text

    from mcp_agent.cli.render import limited

    said = limited(end.join(f"line {n}" for n in range(20)) + end, full=False, max_lines=12)
    shown = narrow(said, Text)
    assert shown.plain.startswith("line 0\nline 1\n") and "line 11" in shown.plain
    assert "line 12" not in shown.plain
    assert shown.plain.endswith("… 8 more lines (--full shows all)")


def test_a_text_of_many_lines_is_drawn_whole_in_linear_time() -> None:
    """rich lays out one Text in time that grows with the square of its lines (80,000 lines of
    a tool's output: 22 s), so a long text is given a Text a line; what it draws is the same."""
    import io

    from rich.console import Console, Group

    from mcp_agent.cli.render import LINES_AT_ONCE, limited

    text = "\n".join(f"line {n} \x1b[31m" for n in range(LINES_AT_ONCE + 1))
    said = limited(text, full=True, max_lines=12)
    assert isinstance(said, Group) and len(said.renderables) == LINES_AT_ONCE + 1
    drawn = []
    for renderable in (said, limited(text[: text.rindex("\n")], full=True, max_lines=12)):
        console = Console(file=io.StringIO(), width=60, record=True)
        console.print(renderable)
        drawn.append(console.export_text())
    assert drawn[0] == drawn[1] + f"line {LINES_AT_ONCE} \\x1b[31m\n"


def test_a_text_of_megabytes_is_drawn_whole_without_rich_wrapping_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`show --full` of a 10 MB message spent 39 s of CPU in rich's wrapping, which grows
    faster than the text; a text past PLAIN_CHARS is broken into lines here, a line at a time:
    every word drawn in order, no line wider than the terminal, none of it wrapped by rich."""
    import io

    from rich.cells import cell_len
    from rich.console import Console
    from rich.text import Text

    from mcp_agent.cli.render import PLAIN_CHARS, Indented, limited

    wrapped: list[int] = []
    wrap = Text.wrap

    def counted(self: Text, *args: Any, **kwargs: Any) -> Any:
        wrapped.append(len(self))
        return wrap(self, *args, **kwargs)

    monkeypatch.setattr(Text, "wrap", counted)
    text = " ".join(f"w{n}" for n in range(PLAIN_CHARS // 3)) + "\n\tend 東京" * 3 + "x" * 130
    console = Console(file=io.StringIO(), width=60, record=True)
    console.print(Indented(limited(text, full=True, max_lines=12), 9))
    drawn = console.export_text()
    assert "".join(drawn.split()) == "".join(text.split())
    assert drawn.startswith(" " * 9 + "w0 w1 w2 ") and "\n" + " " * 17 + "end 東京\n" in drawn
    assert max(cell_len(line) for line in drawn.splitlines()) <= 60
    assert sum(wrapped) < 1000, sum(wrapped)


def test_tree_draws_branches_labels_and_leaf(cli: Any, db: Path) -> None:
    ids = seed(db)
    result = cli("sessions", "tree", ids["session"])
    assert result.exit_code == 0, result.stderr
    text = result.stdout
    assert "┬ 2 branches" in text
    assert "#first-try" in text and "weather chat" in text
    leaf_line = next(line for line in text.splitlines() if "◀ leaf" in line)
    assert ids["other"] in leaf_line
    assert ids["call"] in text and "→ weather" in text
    nodes = {
        n["id"]: n
        for n in json.loads(cli("sessions", "tree", ids["session"], "--json").stdout)["nodes"]
    }
    assert nodes[ids["ask"]]["children"] == [ids["call"], ids["other"]]
    assert nodes[ids["ask"]]["label"] == "first-try"


def test_tree_and_show_dim_only_what_is_off_the_branch(db: Path) -> None:
    """The dim id at the start of a line was the Text's own style, which dims whatever is
    appended: every entry looked off the branch, and show's roles were dimmed too."""
    import io

    from rich.console import Console

    from mcp_agent.cli.render import branch_view, session_tree

    ids = seed(db)
    with SqliteSessionRepo(db) as repo:
        session = repo.open(ids["session"])
        tree, shown = (
            Console(file=io.StringIO(), force_terminal=True, color_system="standard", width=200)
            for _ in range(2)
        )
        tree.print(session_tree(session, width=200))
        shown.print(branch_view(session, full=False))
    drawn, listed = tree.file.getvalue(), shown.file.getvalue()  # type: ignore[attr-defined]
    dim = "\x1b[2m"
    assert f"{dim} It is 18 C and sunny." in drawn  # off the branch
    assert "No idea." in drawn and f"{dim} No idea." not in drawn  # on it
    assert "\x1b[1;36muser\x1b[0m" in listed  # show: the role as it is styled, not dimmed


def test_tree_copes_with_deep_chains_and_many_branch_points(
    cli: Any, db: Path, tmp_path: Path
) -> None:
    deep = tmp_path / "deep.jsonl"
    deep.write_text(pi_v3(3000))
    assert cli("sessions", "import", str(deep)).exit_code == 0
    session_id = "01a00000-0000-7000-8000-000000000001"
    short = cli("sessions", "tree", session_id)
    assert short.exit_code == 0, short.stderr
    assert "more entries (--full shows all)" in short.stdout
    assert len(short.stdout.splitlines()) < 40 and "◀ leaf" in short.stdout
    full = cli("sessions", "tree", session_id, "--full")
    assert full.exit_code == 0 and "step 1500" in full.stdout
    nodes = json.loads(cli("sessions", "tree", session_id, "--json").stdout)["nodes"]
    assert len(nodes) == 3000
    # A comb: a branch point at every step nests deeper than a terminal is wide.
    with SqliteSessionRepo(db) as repo:
        comb = repo.create(name="comb")
        for i in range(30):
            main = comb.append_message(User(content=f"main {i}"))
            comb.append_message(AssistantMessage(content=[TextContent(text=f"side {i}")]))
            comb.move_to(main)
    drawn = cli("sessions", "tree", comb.id)
    assert drawn.exit_code == 0
    assert "side 29" in drawn.stdout and "↳ branch of" in drawn.stdout


def test_tree_draws_a_bounded_number_of_branches_the_leaf_s_first(cli: Any, db: Path) -> None:
    """A tree of thousands of branches took rich seconds to draw (a 100,000-branch comb: 28 s)
    and fills no terminal usefully: TREE_RUNS runs are drawn, toward the leaf first."""
    from mcp_agent.cli.render import TREE_RUNS

    with SqliteSessionRepo(db) as repo:
        wide = repo.create(name="wide")
        root = wide.append_message(User(content="the root"))
        for i in range(TREE_RUNS + 100):  # as many branches off the root
            wide.move_to(root)
            wide.append_message(User(content=f"branch {i}"))
        wide.move_to(root)
        leaf = wide.append_message(User(content="in the middle"))
        for i in range(TREE_RUNS, TREE_RUNS + 50):  # and more after the leaf's branch
            wide.move_to(root)
            wide.append_message(User(content=f"branch {i}"))
        wide.move_to(leaf)
    drawn = cli("sessions", "tree", wide.id)
    assert drawn.exit_code == 0, drawn.stderr
    assert "in the middle ◀ leaf" in drawn.stdout
    # Drawn: the run from the name to the root, the leaf's branch, and the others up to the
    # bound; 651 branches off the root in all.
    assert drawn.stdout.count("user: branch ") == TREE_RUNS - 2
    left = 651 - (TREE_RUNS - 1)
    assert f"⋮ {left} more entries in branches not drawn (--full shows all)" in drawn.stdout
    full = cli("sessions", "tree", wide.id, "--full")
    assert "not drawn" not in full.stdout and full.stdout.count("user: branch ") == TREE_RUNS + 150


def test_tree_reads_only_the_entries_it_draws(db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """From SQLite the tree is made from the entries in outline: the drawing is the one every
    parsed entry gives, yet only the entries drawn are parsed (a 300,000-entry session took
    28 s and 1.8 GB to draw, now 3.8 s and 0.2 GB)."""
    from mcp_agent.cli.render import session_heading, session_tree, tree_view

    with SqliteSessionRepo(db) as repo:
        session = repo.create(name="long")
        root = session.append_message(User(content="the root"))
        for i in range(40):
            session.move_to(root)
            for step in range(50):
                last = session.append_message(User(content=f"branch {i} step {step}"))
            if i == 7:
                session.append_label(last, "seventh")
        session.move_to(root)
        session.append_message(User(content="the leaf's branch"))

        every = rendered(tree_view(session.tree(), session.leaf_id, session_heading(session)))
        parsed = count_parses(monkeypatch)
        lazy = rendered(session_tree(repo.open(session.id)))
        entries = session.stats().entry_count
    assert lazy == every and "#seventh" in lazy and "◀ leaf" in lazy
    assert 0 < len(parsed) <= len(lazy.splitlines()) < entries // 3


def test_a_whole_tree_reads_its_entries_a_batch_at_a_time(
    db: Path, tmp_path: Path, sqlite_statements: list[str]
) -> None:
    """`tree --full` of a 10,000-entry session read each entry it drew in a query of its own
    (6 s of CPU); now the entries of the runs drawn are read ``TREE_BATCH`` at a time, and
    the drawing is the one every parsed entry gives."""
    from mcp_agent.cli.render import session_heading, session_tree, tree_view
    from mcp_agent.sessions.outline import TREE_BATCH

    sid = "01a00000-0000-7000-8000-0000000000d6"
    (tmp_path / "long.jsonl").write_text(pi_v3(3 * TREE_BATCH, sid))
    with SqliteSessionRepo(db) as repo:
        repo.import_jsonl(tmp_path / "long.jsonl")
        session = repo.open(sid)
        session.move_to(f"{TREE_BATCH:08x}")
        session.append_message(User(content="a branch off the middle"))
        every = rendered(tree_view(session.tree(), session.leaf_id, session_heading(session), True))
    sqlite_statements.clear()
    with SqliteSessionRepo(db) as repo:
        whole = rendered(session_tree(repo.open(sid), full=True))
    reads = [sql for sql in sqlite_statements if "FROM entries" in sql and " IN (" in sql]
    assert whole == every and "a branch off the middle" in whole and "step 2998" in whole
    assert 0 < len(reads) <= 8, len(reads)


def rendered(view: Any) -> str:
    """What rich prints of ``view`` 100 columns wide, as text."""
    import io

    from rich.console import Console

    console = Console(file=io.StringIO(), width=100, record=True)
    console.print(view)
    return console.export_text()


def count_parses(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The ids of the entries SQLite storage parses from now on, as it parses them."""
    parsed: list[str] = []
    parse = SqliteSessionStorage.parse_stored

    def counted(self: Any, entry_id: str, kind: str, text: str) -> Any:
        parsed.append(entry_id)
        return parse(self, entry_id, kind, text)

    monkeypatch.setattr(SqliteSessionStorage, "parse_stored", counted)
    return parsed


def test_show_reads_only_the_newest_entries_it_prints(
    db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`show` prints a long branch's newest 200 entries, yet parsed every entry of the branch
    to find them (a 45,000-entry branch: 3.6 s of CPU and 290 MB, now 0.7 s and 61 MB). From
    SQLite it finds them in outline and parses only those; the page is the one every parsed
    entry gives: leaf moves left out, labels and the leaf marked."""
    from mcp_agent.cli.render import BRANCH_LIMIT, branch_view

    with SqliteSessionRepo(db) as repo:
        session = repo.create(name="long")
        first = session.append_message(User(content="the first"))
        session.append_message(User(content="left behind"))
        session.move_to(first)  # a leaf move on the branch, which `show` leaves out
        for step in range(3 * BRANCH_LIMIT):
            last = session.append_message(User(content=f"step {step}"))
            if step == 3 * BRANCH_LIMIT - 7:
                session.append_label(last, "near the end")

        every = rendered(branch_view(session))
        parsed = count_parses(monkeypatch)
    with SqliteSessionRepo(db) as repo:  # a parse cache of its own, empty
        lazy = rendered(branch_view(repo.open(session.id)))
        parsed_for_page = len(parsed)
        full = rendered(branch_view(repo.open(session.id), full=True))
    assert lazy == every, lazy
    assert "#near the end" in lazy and "◀ leaf" in lazy and "left behind" not in lazy
    earlier = 3 + 3 * BRANCH_LIMIT - BRANCH_LIMIT  # the name, the first, a label, the steps
    assert f"⋮ {earlier:,} earlier entries" in lazy and "step 0\n" not in lazy
    assert "step 0\n" in full and "the first" in full
    assert 0 < parsed_for_page <= BRANCH_LIMIT < len(parsed)


def test_show_json_writes_the_branch_as_it_reads_it(
    db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`show --json` parsed the whole branch and held it, entries and their JSON, before it
    wrote a byte (a 45,000-entry branch: 555 MB); now it writes each entry as it is read, a
    thousand at a time from SQLite (182 MB, the parse cache's bound among it), the same
    JSON."""
    import io

    from mcp_agent.cli.sessions import show

    sid = "01a00000-0000-7000-8000-0000000000d5"
    (tmp_path / "long.jsonl").write_text(pi_v3(3_000, sid))
    with SqliteSessionRepo(db) as repo:
        repo.import_jsonl(tmp_path / "long.jsonl")
        every = [entry.to_json_dict() for entry in repo.open(sid).get_branch()]
    parsed: list[str] = []
    parse = SqliteSessionStorage.parse_stored

    def counted(self: Any, entry_id: str, kind: str, text: str) -> Any:
        parsed.append(entry_id)
        return parse(self, entry_id, kind, text)

    class Written(io.StringIO):
        """What was parsed when the first entry was written."""

        parsed_then: int | None = None

        def write(self, text: str) -> int:
            if self.parsed_then is None and '"entries": [' in self.getvalue():
                self.parsed_then = len(parsed)
            return super().write(text)

    written = Written()
    monkeypatch.setattr(SqliteSessionStorage, "parse_stored", counted)
    monkeypatch.setattr(sys, "stdout", written)
    show(sid, db=str(db), as_json=True)
    monkeypatch.undo()
    assert json.loads(written.getvalue())["entries"] == every
    assert written.parsed_then is not None and written.parsed_then <= 1_000 < len(every)


def test_export_import_round_trip(cli: Any, db: Path, tmp_path: Path) -> None:
    ids = seed(db)
    exported = cli("sessions", "export", ids["session"])
    assert exported.exit_code == 0
    lines = [json.loads(line) for line in exported.stdout.splitlines()]
    assert lines[0]["type"] == "session" and lines[0]["version"] == 3
    target = tmp_path / "out.jsonl"
    written = cli("sessions", "export", ids["session"], "-o", str(target))
    assert written.exit_code == 0 and target.read_text() == exported.stdout
    other = tmp_path / "other.db"
    imported = cli("sessions", "import", str(target), "--db", str(other), "--json")
    assert imported.exit_code == 0, imported.stderr
    assert json.loads(imported.stdout)["imported"][0]["sessionId"] == ids["session"]
    again = cli("sessions", "export", ids["session"], "--db", str(other))
    assert again.stdout == exported.stdout
    missing = cli("sessions", "export", "nope")
    assert missing.exit_code == 2 and "not found" in missing.stderr
    # A wrong id fails before the output file is opened: what it held stays.
    refused = cli("sessions", "export", "nope", "-o", str(target))
    assert refused.exit_code == 2 and target.read_text() == exported.stdout


def test_an_export_to_a_file_names_it_as_the_user_wrote_it(
    cli: Any, db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``-o out.jsonl`` said ``wrote /the/whole/path/out.jsonl``, and through a link the
    file the link points to: the user is told of the name they gave."""
    ids = seed(db)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "elsewhere").mkdir()
    Path("link.jsonl").symlink_to(tmp_path / "elsewhere" / "real.jsonl")
    for name in ("out.jsonl", "link.jsonl", "sub/../again.jsonl"):
        (tmp_path / "sub").mkdir(exist_ok=True)
        done = cli("sessions", "export", ids["session"], "-o", name)
        assert done.exit_code == 0, done.stderr
        assert done.stderr.strip() == f"wrote {name} (9 lines)"
    assert (tmp_path / "elsewhere" / "real.jsonl").read_text() == Path("out.jsonl").read_text()


def test_export_to_dash_writes_stdout(
    cli: Any, db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = seed(db)
    monkeypatch.chdir(tmp_path)
    dashed = cli("sessions", "export", ids["session"], "-o", "-")
    assert dashed.exit_code == 0, dashed.stderr
    assert dashed.stdout == cli("sessions", "export", ids["session"]).stdout
    assert not (tmp_path / "-").exists()


def test_an_export_that_fails_part_way_leaves_the_output_file_as_it_was(
    cli: Any, db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = seed(db)
    target = tmp_path / "out.jsonl"
    target.write_text("what was there\n")

    def failing(self: SqliteSessionStorage, end: int, batch: int) -> Iterator[list[str]]:
        yield self.stored_range(0, 1)
        raise SessionError("storage", "disk I/O error")

    monkeypatch.setattr(SqliteSessionStorage, "stored_log", failing)
    failed = cli("sessions", "export", ids["session"], "-o", str(target))
    assert failed.exit_code != 0 and "disk I/O error" in failed.stderr
    assert target.read_text() == "what was there\n"
    assert sorted(p.name for p in tmp_path.iterdir() if "out.jsonl" in p.name) == ["out.jsonl"]


def test_an_export_never_overwrites_the_session_store(cli: Any, db: Path, tmp_path: Path) -> None:
    ids = seed(db)
    stored = db.read_bytes()
    for target in (db, db.with_name(db.name + "-wal"), tmp_path / "." / db.name):
        refused = cli("sessions", "export", ids["session"], "-o", str(target))
        assert refused.exit_code == 2, refused.stdout
        assert "is a file of the session store" in refused.stderr
    link = tmp_path / "link.jsonl"
    link.symlink_to(db)
    assert cli("sessions", "export", ids["session"], "-o", str(link)).exit_code == 2
    assert db.read_bytes() == stored and link.is_symlink()
    # A folder of pi files: none of its files, whichever session it holds.
    folder = tmp_path / "pi"
    folder.mkdir()
    assert cli("sessions", "copy", "--from", str(db), "--to", str(folder)).exit_code == 0
    (held,) = folder.rglob("*.jsonl")
    before = held.read_text()
    into = cli("sessions", "export", ids["session"], "--db", str(folder), "-o", str(held))
    assert into.exit_code == 2 and held.read_text() == before
    # A folder that does not exist is not made (a typo in the path).
    missing = cli("sessions", "export", ids["session"], "-o", str(tmp_path / "typo" / "x.jsonl"))
    assert missing.exit_code == 2 and "does not exist" in missing.stderr
    assert not (tmp_path / "typo").exists()


def test_an_export_keeps_the_mode_of_the_file_it_replaces_and_writes_through_a_link(
    cli: Any, db: Path, tmp_path: Path
) -> None:
    ids = seed(db)
    target = tmp_path / "shared.jsonl"
    target.write_text("old\n")
    target.chmod(0o644)
    assert cli("sessions", "export", ids["session"], "-o", str(target)).exit_code == 0
    assert target.stat().st_mode & 0o777 == 0o644
    assert target.read_text().startswith('{"type":"session"')
    link = tmp_path / "link.jsonl"
    link.symlink_to(target)
    target.write_text("old\n")
    assert cli("sessions", "export", ids["session"], "-o", str(link)).exit_code == 0
    assert link.is_symlink() and target.read_text().startswith('{"type":"session"')


def test_a_copy_from_a_folder_names_each_file_it_could_not_read(
    cli: Any, db: Path, tmp_path: Path
) -> None:
    seed(db)
    folder = tmp_path / "pi"
    folder.mkdir()
    assert cli("sessions", "copy", "--from", str(db), "--to", str(folder)).exit_code == 0
    (folder / "01a00000-0000-7000-8000-00000000dead.jsonl").write_text("{not json\n")
    (folder / "a-folder.jsonl").mkdir()  # named like a session file
    listed = cli("sessions", "list", "--db", str(folder), "--json")
    assert listed.exit_code == 0 and len(json.loads(listed.stdout)["sessions"]) == 1
    copied = cli("sessions", "copy", "--from", str(folder), "--to", str(tmp_path / "b.db"))
    assert copied.exit_code == 1, copied.stdout
    assert "copied 1 sessions; 0 were there already; 2 failed" in copied.stderr
    assert "session 01a00000-0000-7000-8000-00000000dead: " in copied.stderr
    assert "a-folder.jsonl: Is a directory" in copied.stderr


def test_import_every_pi_version_and_reject_bad_files(cli: Any, db: Path, tmp_path: Path) -> None:
    v1, v2, v3 = tmp_path / "v1.jsonl", tmp_path / "v2.jsonl", tmp_path / "v3.jsonl"
    v1.write_text(PI_V1)
    v2.write_text(PI_V2)
    v3.write_text(pi_v3(4))
    result = cli("sessions", "import", str(v1), str(v2), str(v3))
    assert result.exit_code == 0, result.stderr
    assert "pi v1" in result.stdout and "pi v2" in result.stdout and "pi v3" in result.stdout
    upto, newest = search_index_marks(db)  # indexed for search by the import, before any search
    assert upto == newest > 0
    listed = json.loads(cli("sessions", "list", "--json").stdout)["sessions"]
    assert {s["firstUserMessage"] for s in listed} == {"old hello", "v2 hello", "step 0"}
    again = cli("sessions", "import", str(v3))
    assert again.exit_code == 2 and "imported before" in again.stderr
    broken = tmp_path / "broken.jsonl"
    broken.write_text(pi_v3(3).replace('"id": "00000001"', '"id": "00000000"'))  # twice
    torn = tmp_path / "middle.jsonl"
    torn.write_text('{"type":"session","version":3,"id":"x","timestamp":"t","cwd":""}\n{oops\n{}\n')
    good = tmp_path / "good.jsonl"
    good.write_text(pi_v3(2, "01a00000-0000-7000-8000-0000000000ff"))
    mixed = cli(
        "sessions", "import", str(broken), str(torn), str(tmp_path / "absent.jsonl"), str(good)
    )
    assert mixed.exit_code == 2
    errors = mixed.stderr.strip().splitlines()
    assert len(errors) == 3
    assert "broken.jsonl:3" in errors[0] and "middle.jsonl:2" in errors[1]
    assert "cannot read" in errors[2]
    assert all("nothing was imported" in line for line in errors)
    assert "01a00000-0000-7000-8000-0000000000ff" in mixed.stdout


def test_an_import_of_no_file_it_can_read_creates_no_database(
    cli: Any, db: Path, tmp_path: Path
) -> None:
    """A path mistyped (or a folder) made an empty database at --db, or at the default."""
    missing = tmp_path / "sesion.jsonl"
    result = cli("sessions", "import", str(missing), str(tmp_path))
    assert result.exit_code == 2 and not db.exists()
    assert f"cannot read {missing}: No such file or directory; nothing was" in result.stderr
    assert "[Errno" not in result.stderr
    assert f"cannot read {tmp_path}: a folder (`mcp-agent-sessions sessions copy" in result.stderr
    # With one file it can read, the rest are imported and the unreadable ones said.
    good = tmp_path / "v1.jsonl"
    good.write_text(PI_V1)
    result = cli("sessions", "import", str(missing), str(good), "--json")
    assert result.exit_code == 2 and db.exists()
    said = json.loads(result.stdout)
    assert [f["file"] for f in said["failed"]] == [str(missing)]
    assert [i["file"] for i in said["imported"]] == [str(good)]


def test_import_refuses_a_complete_garbage_last_line_and_notes_a_torn_one(
    cli: Any, tmp_path: Path
) -> None:
    garbage = tmp_path / "garbage.jsonl"
    garbage.write_text(pi_v3(2, "01a00000-0000-7000-8000-0000000000e1") + "garbage garbage\n")
    refused = cli("sessions", "import", str(garbage))
    assert refused.exit_code == 2 and refused.stdout == ""
    assert (
        refused.stderr.count("\n") == 1
        and "garbage.jsonl:4: line is not valid JSON" in refused.stderr
    )
    assert "Warning" not in refused.stderr and ".py" not in refused.stderr
    torn = tmp_path / "torn.jsonl"
    torn.write_text(pi_v3(2, "01a00000-0000-7000-8000-0000000000e2") + '{"type":"mess')
    kept = cli("sessions", "import", "--json", str(torn))
    assert kept.exit_code == 0
    notes = json.loads(kept.stdout)["imported"][0]["notes"]
    assert len(notes) == 1 and "torn.jsonl:4: skipped the last line" in notes[0]
    assert kept.stderr.count("skipped the last line") == 1 and "Warning" not in kept.stderr
    listed = json.loads(cli("sessions", "list", "--json").stdout)["sessions"]
    assert [s["id"] for s in listed] == ["01a00000-0000-7000-8000-0000000000e2"]


def test_a_file_whose_only_line_is_torn_is_not_said_to_be_empty(cli: Any, tmp_path: Path) -> None:
    """A file of one header line cut off by a crash (no line break, no end) was refused as
    an "empty file, no session header", where it holds bytes: its reader looked for another
    file. It is now said as what it is, the line torn, the file holding nothing else."""
    torn = tmp_path / "torn.jsonl"
    torn.write_text(pi_v3(0, "01a00000-0000-7000-8000-0000000000e3").splitlines()[0][:40])
    refused = cli("sessions", "import", str(torn))
    assert refused.exit_code == 2 and "empty file" not in refused.stderr, refused.stderr
    said = " ".join(refused.stderr.split())
    assert "torn.jsonl:1: skipped the last line, cut off without its line break" in said
    assert "no session header" in said
    folder = tmp_path / "folder"  # the same file in a folder of pi files, listed
    folder.mkdir()
    (folder / "torn.jsonl").write_bytes(torn.read_bytes())
    listed = json.loads(cli("sessions", "list", "--json", "--db", str(folder)).stdout)
    assert "skipped the last line" in listed["unreadable"], listed
    assert "empty file" not in listed["unreadable"]
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    assert (
        "empty.jsonl: empty file, no session header" in cli("sessions", "import", str(empty)).stderr
    )


def test_import_reads_a_file_named_from_the_home_folder_as_export_writes_it(
    cli: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``export -o "~/a b.jsonl"`` (a ``~`` the shell left, quoted, or from a config) wrote
    into the home folder, as ``--db`` and ``--manifests`` read from it, but ``import`` of the
    same name said "cannot read ~/a b.jsonl": it now reads it from the home folder too."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "a b.jsonl").write_text(pi_v3(2, "01a00000-0000-7000-8000-0000000000e4"))
    done = cli("sessions", "import", "~/a b.jsonl")
    assert done.exit_code == 0, done.stderr
    assert "01a00000-0000-7000-8000-0000000000e4" in done.stdout
    listed = json.loads(cli("sessions", "list", "--json").stdout)["sessions"]
    assert [s["id"] for s in listed] == ["01a00000-0000-7000-8000-0000000000e4"]


def test_import_shows_progress_on_a_terminal(
    cli: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import io

    from rich.console import Console

    from mcp_agent.cli import sessions

    screen = io.StringIO()
    monkeypatch.setattr(
        sessions, "err", lambda: Console(file=screen, force_terminal=True, width=80)
    )
    files = []
    for i in range(sessions.PROGRESS_FILES):
        path = tmp_path / f"{i}.jsonl"
        path.write_text(pi_v3(2, f"01a00000-0000-7000-8000-00000000010{i}"))
        files.append(str(path))
    assert cli("sessions", "import", *files).exit_code == 0
    assert "importing" in screen.getvalue()


def test_delete_asks_or_needs_yes(cli: Any, db: Path) -> None:
    ids = seed(db)
    refused = cli("sessions", "delete", ids["session"])
    assert refused.exit_code == 2 and "--yes" in refused.stderr
    assert cli("sessions", "delete", ids["session"], "--yes").exit_code == 0
    assert json.loads(cli("sessions", "list", "--json").stdout)["sessions"] == []
    gone = cli("sessions", "delete", ids["session"], "--yes")
    assert gone.exit_code == 2 and "not found" in gone.stderr


@contextlib.contextmanager
def asked_to_delete(
    db: Path, session_id: str
) -> Iterator[tuple[subprocess.Popen[bytes], int, bytearray]]:
    """``sessions delete`` in a terminal of its own (a pty), once it has asked "[y/N]": the
    process, the terminal's end to type at and what it has shown; killed if still running,
    and the terminal closed, at the end."""
    controller, terminal = pty.openpty()
    delete = subprocess.Popen(
        [sys.executable, "-m", "mcp_agent", "sessions", "delete", session_id],
        stdin=terminal,
        stdout=terminal,
        stderr=terminal,
        env=clean_env(MCP_AGENT_DB=str(db), TERM="xterm"),
        start_new_session=True,
    )
    shown = bytearray()
    try:
        while not shown.endswith(b"[y/N]: "):
            assert select.select([controller], [], [], 30)[0], bytes(shown)
            shown.extend(os.read(controller, 1 << 16))
        yield delete, controller, shown
    finally:
        if delete.poll() is None:
            delete.kill()
        delete.wait()
        os.close(controller)
        os.close(terminal)


def ended_with(delete: subprocess.Popen[bytes], controller: int, shown: bytearray) -> int:
    """The exit code of ``delete``, once it has exited, with the rest of what it showed read."""
    code = delete.wait(timeout=30)
    while select.select([controller], [], [], 0.2)[0]:
        shown.extend(os.read(controller, 1 << 16))
    return code


@pytest.mark.skipif(sys.platform == "win32", reason="a pseudo-terminal")
@pytest.mark.parametrize("answer", [b"n\r", b"\r", b"\x04", b"maybe\rno\r"])
def test_delete_declined_at_the_terminal_deletes_nothing_and_is_no_error(
    db: Path, answer: bytes
) -> None:
    """Answering no (or Enter, the default) to "Delete …? [y/N]" exited 1 with an error line,
    as if the delete had failed: a script or `&&` chain took the user's choice for a fault;
    Ctrl-D, the input's end, said "interrupted" (exit 130)."""
    ids = seed(db)
    with asked_to_delete(db, ids["session"]) as (delete, controller, shown):
        os.write(controller, answer)
        assert ended_with(delete, controller, shown) == 0
    assert b"nothing deleted" in shown and b"mcp-agent-sessions:" not in shown, bytes(shown)
    with SqliteSessionRepo(db) as repo:
        assert [item.id for item in repo.list().items] == [ids["session"]]


def test_ctrl_c_at_the_delete_question_ends_its_line_and_deletes_nothing(db: Path) -> None:
    """Ctrl-C at "Delete …? [y/N]" left the line open: the shell's next prompt followed the
    question on the same line, with no word of what became of the session."""
    ids = seed(db)
    with asked_to_delete(db, ids["session"]) as (delete, controller, shown):
        delete.send_signal(signal.SIGINT)  # what Ctrl-C sends the terminal's foreground
        assert ended_with(delete, controller, shown) == 130
    after = bytes(shown).split(b"[y/N]: ", 1)[1]
    assert after.startswith(b"\r\n") and b"nothing deleted" in after, bytes(shown)
    with SqliteSessionRepo(db) as repo:
        assert [item.id for item in repo.list().items] == [ids["session"]]


def test_ids_with_spaces_around_are_found_and_an_empty_one_is_said(cli: Any, db: Path) -> None:
    """An id pasted with a space, or from `$(…)` with its line end, was "not found" in a
    message that looked just like the id; an unset variable's "" gave "session  not found"."""
    ids = seed(db)
    pasted = f" {ids['session']}\n"
    assert cli("sessions", "show", pasted).exit_code == 0
    forked = cli("sessions", "fork", pasted, "--entry", f"{ids['call']} ", "--position", "at")
    assert forked.exit_code == 0, forked.stderr
    ran = cli("run", "hi", "--session", pasted, "--model", "scripted:echo")
    assert ran.exit_code == 0, ran.stderr
    for args in (
        ("sessions", "show", ""),
        ("sessions", "delete", " ", "--yes"),
        ("sessions", "fork", ids["session"], "--entry", ""),
        ("run", "hi", "--session", "", "--model", "scripted:echo"),
    ):
        refused = cli(*args)
        assert refused.exit_code == 2 and "is empty (an unset shell variable?)" in refused.stderr
    assert len(json.loads(cli("sessions", "list", "--json").stdout)["sessions"]) == 2


def test_fork_whole_at_and_before(cli: Any, db: Path) -> None:
    ids = seed(db)
    whole = cli("sessions", "fork", ids["session"])
    assert whole.exit_code == 0, whole.stderr
    new_id = whole.stdout.strip()
    info = json.loads(cli("sessions", "show", new_id, "--json").stdout)
    assert info["session"]["parentSession"] == ids["session"]
    at = json.loads(
        cli(
            "sessions", "fork", ids["session"], "--entry", ids["call"], "--position", "at", "--json"
        ).stdout
    )
    branch = json.loads(cli("sessions", "show", at["id"], "--json").stdout)["entries"]
    assert [e["id"] for e in branch if e["type"] == "message"] == [ids["ask"], ids["call"]]
    before = cli("sessions", "fork", ids["session"], "--entry", ids["ask"], "--json")
    assert json.loads(before.stdout)["stats"]["messageCount"] == 0
    not_user = cli("sessions", "fork", ids["session"], "--entry", ids["call"])
    assert not_user.exit_code == 2 and "not a user message" in not_user.stderr
    lonely = cli("sessions", "fork", ids["session"], "--position", "at")
    assert lonely.exit_code == 2 and "--entry" in lonely.stderr
    unknown = cli("sessions", "fork", ids["session"], "--entry", "zzzz0000", "--position", "at")
    assert unknown.exit_code == 2 and "zzzz0000" in unknown.stderr


def test_rename_and_clear(cli: Any, db: Path) -> None:
    ids = seed(db)
    assert cli("sessions", "rename", ids["session"], "Paris weather").exit_code == 0
    listed = json.loads(cli("sessions", "list", "--json").stdout)["sessions"]
    assert listed[0]["name"] == "Paris weather"
    assert cli("sessions", "rename", ids["session"], "").exit_code == 0
    assert json.loads(cli("sessions", "list", "--json").stdout)["sessions"][0]["name"] is None
    assert cli("sessions", "rename", "nope", "x").exit_code == 2
    shown = cli("sessions", "rename", ids["session"], "a\x1b[31mred")
    assert shown.exit_code == 0 and "\x1b" not in shown.stderr  # nothing for the terminal to do
    assert "a\\x1b[31mred" in shown.stderr


def test_tree_quotes_names_and_labels_as_they_read(cli: Any, db: Path) -> None:
    ids = seed(db)
    with SqliteSessionRepo(db) as repo:
        repo.open(ids["session"]).append_label(ids["answer"], "C:\\tmp's")
    assert cli("sessions", "rename", ids["session"], "C:\\proj\\it's \x1b").exit_code == 0
    tree = cli("sessions", "tree", ids["session"], "--full")
    assert tree.exit_code == 0, tree.output
    assert "name → “C:\\proj\\it's \\x1b”" in tree.stdout  # one backslash each, as written
    assert f"label {ids['answer']} = “C:\\tmp's”" in tree.stdout


def test_a_session_a_server_runs_an_agent_in_is_not_renamed_or_deleted(cli: Any, db: Path) -> None:
    ids = seed(db)
    leases = SessionLeases(db)  # as a server does for a run: another process, to this command
    try:
        assert leases.acquire(ids["session"], "run r1") is None
        renamed = cli("sessions", "rename", ids["session"], "during the run")
        assert renamed.exit_code == 2, renamed.output
        assert f"session {ids['session']} is busy: run r1" in renamed.stderr
        assert "`sessions fork ID`" in renamed.stderr  # what to do, in the command line's words
        deleted = cli("sessions", "delete", ids["session"], "--yes")
        assert deleted.exit_code == 2, deleted.output
        assert "is busy: run r1" in deleted.stderr
        listed = json.loads(cli("sessions", "list", "--json").stdout)["sessions"]
        assert [(s["id"], s["name"]) for s in listed] == [(ids["session"], "weather chat")]
        forked = cli("sessions", "fork", ids["session"])  # reading it is fine
        assert forked.exit_code == 0, forked.output
        leases.release(ids["session"])
        assert cli("sessions", "rename", ids["session"], "after").exit_code == 0
        assert cli("sessions", "delete", ids["session"], "--yes").exit_code == 0
    finally:
        leases.close()


# --- models -----------------------------------------------------------------------------------


def test_models_table_and_json(cli: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    table = cli("models")
    assert table.exit_code == 0, table.stderr
    assert "openai:gpt-4o-mini" in table.stdout and "128,000" in table.stdout
    assert "scripted:demo" in table.stdout
    data = json.loads(cli("models", "--json").stdout)
    mini = next(m for m in data["models"] if m["ref"] == "openai:gpt-4o-mini")
    assert mini["contextWindow"] == 128_000 and mini["cost"]["input"] > 0
    assert {p["name"] for p in data["providers"]} >= {"openai", "anthropic", "scripted"}
    from mcp_agent.providers import registry

    # A proxy's password in a base URL is not shown.
    monkeypatch.setenv("OLLAMA_HOST", "http://alice:hunter2-secret@127.0.0.1:11434")
    monkeypatch.setattr(registry, "_default", None)
    for shown in (cli("models").stdout, cli("models", "--json").stdout):
        assert "alice:***@127.0.0.1:11434" in shown and "hunter2" not in shown

    monkeypatch.setenv("MCP_AGENT_MODELS", str(tmp_path / "missing.toml"))
    monkeypatch.setattr(registry, "_default", None)
    bad = cli("models")
    assert bad.exit_code == 2 and "missing.toml" in bad.stderr
    (tmp_path / "latin1.toml").write_bytes(b"\xff\xfe[providers]")
    monkeypatch.setenv("MCP_AGENT_MODELS", str(tmp_path / "latin1.toml"))
    monkeypatch.setattr(registry, "_default", None)
    bad = cli("models")
    assert bad.exit_code == 2 and "latin1.toml: not UTF-8 text" in bad.stderr
    assert bad.exception is None or isinstance(bad.exception, SystemExit)
    monkeypatch.setattr(registry, "_default", None)


def test_models_on_80_columns_or_in_a_pipe_keeps_every_model_id_whole() -> None:
    """The ids are what --model takes: cut to fit 80 columns (a pipe's width too), Claude's
    read 'anthropic:claude-op…' twice. Uncut, the table was 93 columns wide, and its notes up
    to 116: it fits 80, one line per model (a pipe greps a model's figures with its id)."""
    env = clean_env()
    env["COLUMNS"] = "80"
    done = sub("models", env=env)
    assert done.returncode == 0, done.stderr
    listed = [line.split()[0] for line in done.stdout.split("\n\n")[0].splitlines()[1:]]
    known = [m["ref"] for m in json.loads(sub("models", "--json").stdout)["models"]]
    assert listed == known and "anthropic:claude-3-5-haiku-latest" in listed
    assert max(len(line) for line in done.stdout.splitlines()) <= 80, done.stdout
    (haiku,) = [line for line in done.stdout.splitlines() if "claude-3-5-haiku-latest" in line]
    assert haiku.split()[1:] == ["200,000", "8,192", "0.8", "4", "0.08"]


# --- run and chat -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def fakellm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The fake OpenAI API (a real HTTP server in a child process); yields its /v1 URL."""
    config = tmp_path_factory.mktemp("fakellm") / "rules.yaml"
    config.write_text(FAKELLM_RULES)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    exe = Path(sys.executable).with_name("fakellm")
    command = [str(exe)] if exe.exists() else [sys.executable, "-m", "fakellm.cli"]
    process = subprocess.Popen(
        [*command, "serve", "--host", "127.0.0.1", "--port", str(port), "--config", str(config)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for_fakellm(process, base)
        yield f"{base}/v1"
    finally:
        process.terminate()
        process.wait(timeout=5)


def piped(args: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    """The command line run with ``args`` in a child process, its three streams piped (text)."""
    return subprocess.Popen(
        [sys.executable, "-m", "mcp_agent", *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def openai_env(fakellm: str, db: Path) -> dict[str, str]:
    return clean_env(OPENAI_BASE_URL=fakellm, OPENAI_API_KEY="x", MCP_AGENT_DB=str(db))


@pytest.fixture(name="openai_cli")
def openai_cli_fixture(fakellm: str, cli: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """``cli`` with the fake OpenAI API as the openai provider (in process: a child process
    is seconds of imports, and these tests are about what a command says and stores)."""
    monkeypatch.setenv("OPENAI_BASE_URL", fakellm)
    monkeypatch.setenv("OPENAI_API_KEY", "x")
    return cli


def test_run_streams_the_answer_and_stores_the_session(openai_cli: Any) -> None:
    cli = openai_cli
    done = cli("run", "hello there", "--model", "openai:gpt-4o-mini")
    assert done.exit_code == 0, done.stderr
    assert done.stdout == "Hi there! This is a mock response.\n"
    assert "openai:gpt-4o-mini" in done.stderr
    session_id = done.stderr.split("session ")[1].split()[0]
    shown = json.loads(cli("sessions", "show", session_id, "--json").stdout)
    roles = [e["message"]["role"] for e in shown["entries"] if e["type"] == "message"]
    assert roles == ["user", "assistant"]
    # --session continues it
    more = cli("run", "hello again", "--session", session_id, "--model", "openai:gpt-4o-mini")
    assert more.exit_code == 0, more.stderr
    assert (
        json.loads(cli("sessions", "show", session_id, "--json").stdout)["session"]["stats"][
            "messageCount"
        ]
        == 4
    )


def test_continuing_a_session_without_a_model_goes_on_with_its_own(cli: Any, db: Path) -> None:
    """run --session and chat --session with no model and no key set: the session's own model
    (here one that needs no key) is taken, as agent_run does; both refused with "no model
    configured" before."""
    first = cli("run", "hello", "--model", "scripted:echo")
    assert first.exit_code == 0, first.stderr
    session_id = first.stderr.split("session ")[1].split()[0]
    again = cli("run", "again", "--session", session_id)
    assert again.exit_code == 0, again.stderr
    assert again.stdout == "again\n" and "scripted:echo" in again.stderr
    chat = cli("chat", "--session", session_id, input="once more\n")
    assert chat.exit_code == 0, chat.stderr
    assert "scripted:echo" in chat.stdout + chat.stderr
    assert users_said(db) == ["hello", "again", "once more"]
    # A new session still needs a model named somewhere.
    assert "no model configured" in cli("run", "hi").stderr


def test_continuing_with_another_model_keeps_the_sessions_tools(openai_cli: Any) -> None:
    """A model change is recorded before the agent's tools are loaded; the tools it had stay
    active (before: the change recorded an empty tool list, and every tool was off for good)."""
    cli = openai_cli
    first = cli("run", "hi", "--model", "scripted:echo")
    assert first.exit_code == 0, first.stderr
    session_id = first.stderr.split("session ")[1].split()[0]
    more = cli("run", "again", "--session", session_id, "--model", "openai:gpt-4o-mini")
    assert more.exit_code == 0, more.stderr
    entries = json.loads(cli("sessions", "show", session_id, "--json").stdout)["entries"]
    kinds = [e["type"] for e in entries]
    assert kinds.count("model_change") == 2  # the change is recorded
    tools = [e["activeToolNames"] for e in entries if e["type"] == "active_tools_change"]
    assert tools and all(names == tools[0] for names in tools) and "subagent" in tools[0], tools


def test_run_shows_tool_calls_as_they_happen(openai_cli: Any) -> None:
    cli = openai_cli
    done = cli("run", "delegate please", "--model", "openai:gpt-4o-mini")
    assert done.exit_code == 0, done.stderr
    assert done.stdout == "The helper says hi.\n"
    assert '→ subagent({"agent": "default", "task": "say hi from the helper"})' in done.stderr
    assert "← subagent:" in done.stderr and "hi from the helper" in done.stderr
    # The sub-agent's session says who started it; it read "forked from" its parent.
    listed = json.loads(cli("sessions", "list", "--json").stdout)["sessions"]
    (child,) = [s for s in listed if s["parentSession"]]
    parent = child["parentSession"]
    shown = " ".join(cli("sessions", "show", child["id"]).stdout.split())  # as one line
    assert "forked from" not in shown, shown
    said = re.search(r"a sub-agent's session, started by session (\S+) \(run (\w+)\)", shown)
    assert said is not None and said[1] == parent, shown
    data = json.loads(cli("sessions", "show", child["id"], "--json").stdout)["session"]
    assert data["startedBy"] == {"sessionId": parent, "runId": said[2]}
    # A fork of it is a fork.
    fork = cli("sessions", "fork", child["id"]).stdout.strip()
    assert f"forked from {child['id']}" in " ".join(cli("sessions", "show", fork).stdout.split())
    assert (
        json.loads(cli("sessions", "show", fork, "--json").stdout)["session"]["startedBy"] is None
    )


@pytest.mark.parametrize(
    ("sent", "code", "why"),
    [
        (signal.SIGINT, 130, "interrupted with Ctrl-C"),
        (signal.SIGTERM, 143, "terminated"),  # a supervisor, `timeout`: the answer is kept
    ],
)
def test_ctrl_c_aborts_the_run_not_the_program(
    fakellm: str, db: Path, cli: Any, sent: signal.Signals, code: int, why: str
) -> None:
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mcp_agent",
            "run",
            "tell a long story",
            "--model",
            "openai:gpt-4o-mini",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=openai_env(fakellm, db),
    )
    assert process.stdout is not None
    # The answer arrives while the run is still going: it streams.
    assert process.stdout.read(16) == "Once upon a time"
    assert process.poll() is None
    process.send_signal(sent)
    _, err = process.communicate(timeout=15)
    assert process.returncode == code, err
    assert f"aborted: {why}" in err
    assert "Traceback" not in err
    listed = json.loads(cli("sessions", "list", "--json").stdout)["sessions"]
    entries = json.loads(cli("sessions", "show", listed[0]["id"], "--json").stdout)["entries"]
    assert entries[-1]["message"]["stopReason"] == "aborted"
    shown = cli("sessions", "show", listed[0]["id"]).stdout
    assert f"aborted: {why}" in shown and "aborted: aborted" not in shown


def test_ctrl_c_as_a_run_starts_leaves_no_empty_session(db: Path, cli: Any) -> None:
    """Ctrl-C once the run's session exists, before its prompt is stored: the start stops and
    takes its new session with it, or the run is under way and keeps the prompt with its
    aborted answer; never a session with nothing in it."""

    def sessions_made() -> int | None:
        try:
            with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
                return conn.execute("SELECT count(*) FROM sessions").fetchone()[0] or None
        except sqlite3.Error:
            return None  # not made yet

    def more_sessions_than(count: int) -> bool:
        return (sessions_made() or 0) > count

    for attempt in range(3):
        process = subprocess.Popen(
            [sys.executable, "-m", "mcp_agent", "run", "hi", "--model", "scripted:echo"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=clean_env(MCP_AGENT_DB=str(db)),
        )
        poll(
            functools.partial(more_sessions_than, sessions_made() or 0),
            "the run's session",
            tries=3000,
            every=0.002,
        )
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=30)
        assert process.returncode in (0, 130), err
        assert "Traceback" not in err, err
        listed = json.loads(cli("sessions", "list", "--json").stdout)["sessions"]
        assert all(s["entryCount"] for s in listed), (attempt, listed, err)


@pytest.mark.parametrize(("sent", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_stops_a_run_whose_start_waits_for_another_process_lock(
    db: Path, cli: Any, sent: signal.Signals, code: int
) -> None:
    """Another process holds the database's write lock (a long transaction, a frozen
    program) while `run` waits for it to store its new session: SIGTERM or Ctrl-C stops it
    at once, saying so, nothing stored. Before, the start (in a thread the signal's cancel
    cannot reach) waited out the busy timeout (a minute), then the search indexer's."""
    cli("run", "hi", "--model", "scripted:echo")  # the database, made, with one session
    with write_lock_held(db):  # until the run has stopped
        process = subprocess.Popen(
            [sys.executable, "-m", "mcp_agent", "run", "hi", "--model", "scripted:echo"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=clean_env(MCP_AGENT_DB=str(db)),
        )

        def opened_the_database() -> bool:
            with contextlib.suppress(OSError):
                fds = Path(f"/proc/{process.pid}/fd")
                return any(os.readlink(fd) == os.path.realpath(db) for fd in fds.iterdir())
            return False

        poll(opened_the_database, "the run's database opened", tries=1200)
        time.sleep(2)  # (the start waits for the lock by now; sooner, this passes anyway)
        process.send_signal(sent)
        try:
            # Well before the busy timeout (60 s), with the lock still held.
            _, err = process.communicate(timeout=30)
        finally:
            if process.poll() is None:
                process.kill()
                process.communicate()
    assert process.returncode in (code, -sent), err
    assert "Traceback" not in err, err
    listed = json.loads(cli("sessions", "list", "--json").stdout)["sessions"]
    assert len(listed) == 1, listed  # the first run's, nothing of the stopped one's


def test_sigterm_stops_serve_keeping_what_its_runs_said(fakellm: str, db: Path) -> None:
    """serve over stdio, stopped by SIGTERM while a run streams: the run is aborted and its
    partial answer recorded as such, as at the end of stdin (before: the signal cancelled the
    server whole, and the session kept only the user's message)."""
    from mcp_support import initialize_request

    process = piped(["serve", "--model", "openai:gpt-4o-mini"], openai_env(fakellm, db))
    assert process.stdin is not None and process.stdout is not None

    def ask(request_id: int, method: str, params: dict[str, Any]) -> dict[str, Any]:
        assert process.stdin is not None and process.stdout is not None
        request = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
        process.stdin.write(json.dumps(request) + "\n")
        process.stdin.flush()
        while True:  # notifications may come first
            message = json.loads(process.stdout.readline())
            if message.get("id") == request_id:
                return dict(message["result"])

    try:
        process.stdin.write(json.dumps(initialize_request(0)) + "\n")
        process.stdin.flush()
        process.stdout.readline()
        process.stdin.write('{"jsonrpc": "2.0", "method": "notifications/initialized"}\n')
        run = {"prompt": "tell a long story", "wait": False}
        started = ask(1, "tools/call", {"name": "agent_run", "arguments": run})["structuredContent"]
        for n in itertools.count(2):  # until the answer is streaming
            status = {"name": "agent_status", "arguments": {"run_id": started["runId"]}}
            if ask(n, "tools/call", status)["structuredContent"]["events"] > 20:
                break
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 143, err
    with SqliteSessionRepo(db) as repo:
        messages = repo.open(started["sessionId"]).build_context().messages
    last = narrow(messages[-1], AssistantMessage)
    assert last.stop_reason == "aborted", last
    assert "shutting down" in (last.error_message or ""), last
    assert last.text.startswith("Once upon a time") and not last.text.endswith("the end.")


@pytest.mark.parametrize("how", ["client gone", "sigterm after the end of input"])
def test_a_client_gone_mid_run_leaves_the_run_recorded_as_aborted(
    fakellm: str, db: Path, how: str
) -> None:
    """A client that closes its end of the server's stdout (it quit, or crashed) while a run
    streams: the server stops as at SIGTERM, the run's partial answer recorded as aborted.
    Before, the failed write cancelled the server whole, and the session ended at the
    user's message, as if the model had never answered; and once stdin had closed too, the
    server waited for the run's end (up to 30 s) to answer no one. SIGTERM once stdin has
    closed waited so too."""
    from mcp_support import initialize_request

    process = piped(["serve", "--model", "openai:gpt-4o-mini"], openai_env(fakellm, db))
    assert process.stdin is not None and process.stdout is not None

    def send(request: dict[str, Any]) -> None:
        assert process.stdin is not None
        process.stdin.write(json.dumps({"jsonrpc": "2.0", **request}) + "\n")
        process.stdin.flush()

    try:
        send(initialize_request(0))
        process.stdout.readline()
        send({"method": "notifications/initialized"})
        run = {"name": "agent_run", "arguments": {"prompt": "tell a long story"}}
        send({"id": 1, "method": "tools/call", "params": {**run, "_meta": {"progressToken": 1}}})
        while " w5" not in process.stdout.readline():
            pass  # until the answer is streaming (a word every 10 ms, 400 words)
        if how == "client gone":
            process.stdout.close()  # the client goes without a word
            with contextlib.suppress(BrokenPipeError):
                send({"id": 2, "method": "ping"})  # a write for the server to fail on
        else:
            process.stdin.close()  # the server waits for the run's answer...
            process.send_signal(signal.SIGTERM)  # ...until told to stop
        process.wait(timeout=30)
        assert process.stderr is not None
        err = process.stderr.read()
    finally:
        if process.poll() is None:
            process.kill()
        with contextlib.suppress(BrokenPipeError):
            process.stdin.close()
    assert process.returncode == (0 if how == "client gone" else 143), err
    assert "Traceback" not in err
    with SqliteSessionRepo(db) as repo:
        (listed,) = repo.list().items
        messages = repo.open(listed.id).build_context().messages
    last = narrow(messages[-1], AssistantMessage)
    assert last.stop_reason == "aborted", last
    assert last.text.startswith("Once upon a time") and not last.text.endswith("w399")


def test_sigterm_stops_chat_keeping_the_aborted_answer(fakellm: str, db: Path, cli: Any) -> None:
    args = ["chat", "--model", "openai:gpt-4o-mini"]
    process = piped(args, openai_env(fakellm, db))
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write("tell a long story\n")
    process.stdin.flush()  # and stdin stays open: the chat would go on
    seen = ""
    while "Once upon a time" not in seen:  # the answer streams while the run goes on
        read = process.stdout.read(1)
        assert read, f"the chat ended first: {seen!r}"
        seen += read
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=15)
    assert process.returncode == 143, err  # it ignored SIGTERM's abort, and died of it
    assert "aborted: terminated" in err and "Traceback" not in err
    listed = json.loads(cli("sessions", "list", "--json").stdout)["sessions"]
    entries = json.loads(cli("sessions", "show", listed[0]["id"], "--json").stdout)["entries"]
    assert entries[-1]["message"]["stopReason"] == "aborted"
    assert entries[-1]["message"]["errorMessage"] == "aborted: terminated"
    # At the prompt, SIGTERM leaves at once, with the same code.
    idle = piped(args, openai_env(fakellm, db))
    assert idle.stderr is not None
    assert "/help for commands" in idle.stderr.readline()
    idle.send_signal(signal.SIGTERM)
    idle.wait(timeout=15)  # stdin stays open: its end would be a way out too
    err = idle.stderr.read()
    assert idle.returncode == 143 and "Traceback" not in err, err
    present(idle.stdin).close()


def test_run_with_a_prompt_that_is_not_utf8(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    command: list[str | bytes] = [
        sys.executable,
        "-m",
        "mcp_agent",
        "run",
        b"caf\xe9 ok",
        "--model",
    ]
    done = subprocess.run(
        [*command, "scripted:echo", "--db", str(db)], capture_output=True, env=clean_env()
    )
    assert done.returncode == 0, done.stderr
    assert "caf\ufffd ok" in done.stdout.decode()  # the byte that was not UTF-8, replaced
    with SqliteSessionRepo(db) as repo:
        [info] = repo.list().items
        first = narrow(repo.open(info.id).build_context().messages[0], User)
    assert content_text(first.content) == "caf\ufffd ok"


def with_closed(streams: str, *args: str, db: Path) -> subprocess.CompletedProcess[str]:
    """``python -m mcp_agent ARGS`` started with ``streams`` closed (``<&-``, ``>&-``)."""
    command = " ".join(shlex.quote(a) for a in [sys.executable, "-m", "mcp_agent", *args])
    return subprocess.run(
        ["sh", "-c", f"exec {command} {streams}"],
        capture_output=True,
        text=True,
        env=clean_env(MCP_AGENT_DB=str(db)),
        timeout=60,
    )


def test_closed_standard_streams_are_one_line_not_a_hang_or_a_traceback(db: Path) -> None:
    chat = with_closed("<&-", "chat", "--model", "scripted:echo", db=db)
    assert chat.returncode == 0 and "Traceback" not in chat.stderr, chat.stderr  # no input
    run = with_closed("<&-", "run", "-", "--model", "scripted:echo", db=db)
    assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr
    assert "prompt read from standard input is empty" in run.stderr
    listed = with_closed(">&-", "sessions", "list", "--json", db=db)
    assert listed.returncode == 1
    assert listed.stderr.splitlines() == [
        "mcp-agent-sessions: standard output is closed; nothing was done"
    ]
    refused = with_closed("2>&-", "sessions", "show", "nope", db=db)
    assert refused.returncode == 2  # its one line has nowhere to go; the exit code still tells


def test_run_dash_reads_the_prompt_from_stdin(cli: Any, db: Path) -> None:
    done = cli("run", "-", "--model", "scripted:echo", input="two\nlines\n")
    assert done.exit_code == 0, done.stderr
    assert "two\nlines" in done.stdout
    with SqliteSessionRepo(db) as repo:
        (listed,) = repo.list().items
        (said,) = repo.open(listed.id).build_context().messages[:1]
    assert narrow(said, User).text == "two\nlines\n"
    empty = cli("run", "-", "--model", "scripted:echo", input="")
    assert empty.exit_code == 2
    assert empty.stderr.strip().splitlines() == [
        "mcp-agent-sessions: the prompt read from standard input is empty; say what the agent"
        " should do"
    ]


def test_run_bad_input(cli: Any, tmp_path: Path) -> None:
    no_model = cli("run", "hi")
    assert no_model.exit_code == 2 and "no model configured" in no_model.stderr
    checks = [
        (["run", "hi", "--model", "nope:x"], "unknown provider 'nope'"),
        (["run", "hi", "--model", "scripted:echo", "--agent", "nobody"], "unknown agent 'nobody'"),
        (
            ["run", "hi", "--model", "scripted:echo", "--session", "s-404"],
            "session s-404 not found",
        ),
        (["run", "  ", "--model", "scripted:echo"], "prompt is empty"),
        (["run", "hi", "--model", "openai:gpt-4o-mini"], "needs an API key: set OPENAI_API_KEY"),
        (["run", "hi", "--manifests", str(tmp_path / "none")], "is not a folder"),
        # The MCP client's model, asked for by name: "no model configured" (it was), or a run
        # that could only fail, with advice for a server.
        (["run", "hi", "--model", "client"], "the model client is the MCP client's own"),
        (["run", "hi", "--model", "sampling:x"], "the model sampling:x is the MCP client's own"),
        (["chat", "--model", "client:x"], "the model client:x is the MCP client's own"),
    ]
    for args, says in checks:
        result = cli(*args)
        assert result.exit_code == 2, (args, result.stderr)
        assert says in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_run_in_process_with_the_scripted_model(cli: Any) -> None:
    first = cli("run", "echo me", "--model", "scripted:echo")
    assert first.exit_code == 0, first.stderr
    assert first.stdout == "echo me\n"


def test_a_failing_model_is_a_run_time_failure(cli: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from mcp_agent.cli import demo
    from mcp_agent.providers.scripted import ScriptedProvider, provider_error, scripted_model

    def broken() -> Any:
        return scripted_model("broken"), ScriptedProvider([provider_error("the model fell over")])

    monkeypatch.setattr(demo, "cli_models", lambda: {"scripted:broken": broken})
    result = cli("run", "hi", "--model", "scripted:broken")
    assert result.exit_code == 1
    assert "error: the model fell over" in result.stderr
    assert "· error" in result.stderr


def test_chat_from_piped_stdin(db: Path) -> None:
    script = "\n".join(
        [
            "/thinking high",
            "first question",
            "/model scripted:nope-but-fine",
            "/model nope:x",
            "second question",
            "/tree",
            "/tree full",
            "/tree wide",
            "/move root",
            "from the top",
            "/bogus",
            "/thinking loud",
            "/compact",
            "/help",
            "/fork",
            "/session",
            "/quit",
            "never sent",
        ]
    )
    done = sub(
        "chat", "--model", "scripted:echo", input=script, env=clean_env(MCP_AGENT_DB=str(db))
    )
    assert done.returncode == 2, done.stderr  # every line ran; some were refused
    out, err = done.stdout, done.stderr
    assert "first question\nfirst question\n" in out  # the echo of the line, then the answer
    assert "┬ 2 branches" not in out.split("/move root")[0]
    assert "second question ◀ leaf" in out
    assert "unknown command /bogus" in err
    assert "unknown provider 'nope'" in err
    assert "unknown thinking level 'loud'" in err
    assert "compacted: about" in err  # a short session too, as pi's /compact does
    assert "/fork [ENTRY [at]]" in err
    assert "/tree [full]" in err and "high xhigh max\n" in err  # every thinking level
    # /help at 80 columns, a terminal's usual width: its lines were up to 98 wide
    listed = err[err.index("Commands:") : err.index('send "/text" as a message')]
    assert max(len(line) for line in listed.splitlines()) <= 80, listed
    assert "usage: /tree or /tree full" in err
    assert "now in session" in err
    assert "never sent" not in out
    with SqliteSessionRepo(db) as repo:
        sessions = repo.list().items
        assert len(sessions) == 2  # the chat's session and its fork
        original = next(s for s in sessions if s.parent_session is None)
        session = repo.open(original.id)
        roots = session.tree()
        assert len(roots) == 2  # /move root started a second tree
        assert session.build_context().thinking_level == "off"  # the new branch has no change
        first_branch = session.get_branch(roots[0].children[0].entry.id)
        assert first_branch[0].type == "thinking_level_change"
        assert narrow(first_branch[0], ThinkingLevelChangeEntry).thinking_level == "high"


def test_chat_reads_piped_lines_as_written(db: Path) -> None:
    """Windows line ends, bytes that are not UTF-8, a long line and a last line without its
    end, read from the pipe itself."""
    long = "x" * 200_000  # over one read of the pipe
    piped = b"caf\xe9 ok\r\n" + long.encode() + b"\n\n  \nlast"
    done = subprocess.run(
        [sys.executable, "-m", "mcp_agent", "chat", "--model", "scripted:echo"],
        input=piped,
        capture_output=True,
        env=clean_env(MCP_AGENT_DB=str(db)),
        timeout=START_GUARD_S,  # a start's imports, on a loaded machine
    )
    assert done.returncode == 0, done.stderr
    assert users_said(db) == ["caf\ufffd ok", long, "last"]


def test_chat_records_the_thinking_level_the_model_can_do(
    cli: Any, db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mcp_agent.cli import demo
    from mcp_agent.providers.scripted import ScriptedProvider, reply, scripted_model

    known = demo.cli_models()

    def plain() -> Any:
        model = scripted_model("plain", reasoning=False)
        return model, ScriptedProvider([reply("fine")])

    monkeypatch.setattr(demo, "cli_models", lambda: {**known, "scripted:plain": plain})
    result = cli("chat", "--model", "scripted:plain", input="/thinking high\nhello\n/quit\n")
    assert result.exit_code == 0, result.stderr
    assert "thinking level: off: scripted:plain does not reason" in result.stderr
    with SqliteSessionRepo(db) as repo:
        (listed,) = repo.list().items
        session = repo.open(listed.id)
        (change,) = session.find_entries("thinking_level_change")
        assert narrow(change, ThinkingLevelChangeEntry).thinking_level == "off"
        assert session.build_context().thinking_level == "off"


def test_a_chat_whose_answer_failed_ends_with_exit_code_1(
    cli: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A script piping lines in learns that not every one went through: a failed answer
    outweighs a refused line, and the lines after a failure still run."""
    from mcp_agent.cli import demo
    from mcp_agent.providers.scripted import (
        ScriptedProvider,
        provider_error,
        reply,
        scripted_model,
    )

    provider = ScriptedProvider([provider_error("the model fell over"), reply("fine")])

    def flaky() -> Any:
        return scripted_model("flaky"), provider

    monkeypatch.setattr(demo, "cli_models", lambda: {"scripted:flaky": flaky})
    result = cli("chat", "--model", "scripted:flaky", input="first\n/bogus\nsecond\n")
    assert result.exit_code == 1, result.stderr
    assert "the model fell over" in result.stderr and "unknown command /bogus" in result.stderr
    assert "fine" in result.stdout  # the line after the failure was answered


def test_chat_unknown_session_is_bad_input(cli: Any) -> None:
    result = cli("chat", "--session", "nope", "--model", "scripted:echo")
    assert result.exit_code == 2 and "session nope not found" in result.stderr


# --- serve and demo ---------------------------------------------------------------------------


def test_serve_prints_its_banner_and_serves_stdio(db: Path) -> None:
    process = piped(["serve", "--db", str(db)], clean_env())
    assert process.stderr is not None
    banner = process.stderr.readline()
    assert banner.startswith("mcp-agent-sessions ") and str(db) in banner
    _, err = process.communicate("", timeout=15)  # end of input ends the server
    assert process.returncode == 0, err


def test_serve_rejects_a_missing_manifests_folder(cli: Any, tmp_path: Path) -> None:
    done = cli("serve", "--manifests", str(tmp_path / "none"))
    assert done.exit_code == 2 and "is not a folder" in done.stderr


def test_demo_walks_through_without_an_api_key(cli: Any) -> None:
    done = cli("demo")
    assert done.exit_code == 0, done.stderr
    out = done.stdout
    assert "scripted, no API key needed" in out
    assert "running tool subagent" in out and "The helper agent says: 9 words" in out
    assert "session_move_to" in out and "6 words" in out
    assert "┬ 2 branches" in out and "◀ leaf" in out
    # Nothing went wrong on the way (no retry, warning or error): stderr has only the last line.
    assert done.stderr.strip().startswith("done in ") and "\n" not in done.stderr.strip()


def test_demo_fits_an_80_column_terminal(cli: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each line within the width (a tool call's arguments ran to 125 columns): a long line
    wraps with its indent, a tool call is cut with an ellipsis, and nothing trails."""
    from rich.cells import cell_len

    from mcp_agent.cli.common import err, out

    monkeypatch.setenv("COLUMNS", "80")
    out.cache_clear()
    err.cache_clear()
    try:
        done = cli("demo")
    finally:
        out.cache_clear()
        err.cache_clear()
    assert done.exit_code == 0, done.stderr
    lines = done.stdout.splitlines()
    assert [line for line in lines if cell_len(line) > 80 or line != line.rstrip()] == []
    calls = [line for line in lines if "running tool subagent(" in line]
    assert len(calls) == 2 and all(line.endswith("…") for line in calls)
    assert "   lazy dog')" in lines  # the first prompt, wrapped with its indent


def test_a_retried_attempts_partial_text_stays_out_of_an_answer_file(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from mcp_agent.cli.run import StreamPrinter
    from mcp_agent.events import (
        AutoRetryEndEvent,
        AutoRetryStartEvent,
        MessageEndEvent,
        MessageUpdateEvent,
        TextDeltaEvent,
    )

    def answer(printer: StreamPrinter, text: str, error: str | None = None) -> None:
        message = AssistantMessage(
            content=[TextContent(text=text)],
            stop_reason="error" if error else "stop",
            error_message=error,
        )
        for word in text.split(" "):
            delta = TextDeltaEvent(partial=message, delta=word + " ")
            printer(MessageUpdateEvent(message=message, assistant_message_event=delta))
        printer(MessageEndEvent(message=message))

    printer = StreamPrinter(buffered=True)  # stdout is a file
    answer(printer, "Half an", error="the server overloaded mid-stream")
    printer(AutoRetryStartEvent(1, 3, 2.0, "the server overloaded mid-stream"))
    answer(printer, "The whole answer.")
    printer(AutoRetryEndEvent(True, 1))
    printer.end_line()
    out, err = capsys.readouterr()
    assert out == "The whole answer. \n"
    assert "overloaded" in err and "retry 1/3" in err
    # A failed answer that is not retried is still written out, after the error.
    printer = StreamPrinter(buffered=True)
    answer(printer, "Half an", error="401 Unauthorized")
    printer.end_line()
    assert capsys.readouterr().out == "Half an \n"
    # An abort is said once, however its reason is spelt.
    for stop, said, shown in [
        ("aborted", "aborted: terminated", "aborted: terminated"),
        ("aborted", "Aborted: terminated", "aborted: terminated"),
        ("aborted", "Aborted", "aborted: no reason given"),
        ("error", "errors in the request body", "error: errors in the request body"),
    ]:
        failed = AssistantMessage(stop_reason=stop, error_message=said)
        printer(MessageEndEvent(message=failed))
        assert capsys.readouterr().err.splitlines()[-1] == shown
    # Nor is one whose retry was stopped while it waited (Ctrl-C): said once, and written.
    printer = StreamPrinter(buffered=True)
    answer(printer, "Half an", error="the server overloaded mid-stream")
    printer(AutoRetryStartEvent(1, 3, 2.0, "the server overloaded mid-stream"))
    printer(AutoRetryEndEvent(False, 1, "aborted while waiting"))
    printer.end_line()
    assert printer.shown_error
    assert capsys.readouterr().out == "Half an \n"


def test_an_automatic_compactions_warning_is_said_once(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A compaction's warning (its summary cut at the output limit) is in its line and, for
    agent_status, in the run's warnings, which run and chat say as they come: not twice."""
    from mcp_agent.cli.run import StreamPrinter
    from mcp_agent.compaction.compact import CompactionResult
    from mcp_agent.events import AutoCompactionEndEvent, AutoCompactionStartEvent

    cut = "Summarization stopped at its output limit of 100 tokens: the summary may lack its end"
    result = CompactionResult("e1", "S", "k1", 900, 300, {}, Usage(), False, [cut])
    printer = StreamPrinter(buffered=True)
    warnings = ["the MCP server git could not start"]
    printer.follow(warnings)
    printer(AutoCompactionStartEvent("threshold"))
    warnings.append(f"auto-compaction: {cut}")  # as the run adds it, before its listeners
    printer(AutoCompactionEndEvent("threshold", result))
    err = capsys.readouterr().err
    assert err.count("git could not start") == 1 and err.count("stopped at its output") == 1, err
    assert "compacted: about 900 → 300 tokens (entry e1); warning: Summarization stopped" in err


def test_a_streamed_answer_cannot_act_on_the_terminal(capsys: pytest.CaptureFixture[str]) -> None:
    """Escape sequences from the model (or a hostile server) are shown escaped on a terminal,
    in the answer, the thinking and a tool's name; a pipe or a file gets the answer exact."""
    from mcp_agent.cli.run import StreamPrinter
    from mcp_agent.events import (
        MessageUpdateEvent,
        TextDeltaEvent,
        ThinkingDeltaEvent,
        ToolExecutionStartEvent,
    )

    hostile = "Hi \x1b]0;owned\x07\x1b[2J there"
    message = AssistantMessage(content=[TextContent(text=hostile)])

    def stream(printer: StreamPrinter) -> None:
        thinking = ThinkingDeltaEvent(partial=message, delta=f"hmm {hostile}")
        printer(MessageUpdateEvent(message=message, assistant_message_event=thinking))
        printer(ToolExecutionStartEvent(tool_call_id="c", tool_name="x\x1b[1m", args={}))
        delta = TextDeltaEvent(partial=message, delta=hostile)
        printer(MessageUpdateEvent(message=message, assistant_message_event=delta))
        printer.end_line()

    stream(StreamPrinter(buffered=False, terminal=True))
    out, err = capsys.readouterr()
    assert out == "Hi \\x1b]0;owned\\x07\\x1b[2J there\n"
    assert "\x1b" not in err and "\x07" not in err and "\\x1b]0;owned" in err, err
    assert "→ x\\x1b[1m(" in err
    stream(StreamPrinter(buffered=False, terminal=False))  # a pipe
    assert capsys.readouterr().out == hostile + "\n"


HELP_COMMANDS = [
    [],
    ["serve"],
    ["run"],
    ["chat"],
    ["models"],
    ["demo"],
    ["install"],
    ["sessions"],
    *[
        ["sessions", name]
        for name in ("list", "show", "tree", "export", "import", "fork", "rename", "delete")
    ],
]


@pytest.mark.parametrize("command", HELP_COMMANDS, ids=lambda c: " ".join(c) or "top")
def test_help_names_values_in_words_not_python_types(command: list[str]) -> None:
    result = CliRunner().invoke(app, [*command, "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    for python_type in ("<str>", "<int", "<bool>", "<path>", "<float>", "list[", "<Path"):
        assert python_type not in result.output, (command, python_type)


@pytest.mark.parametrize("group", [[], ["sessions"]], ids=["top", "sessions"])
def test_command_summaries_in_a_groups_help_are_whole_lines(group: list[str]) -> None:
    # typer lists a command by the first paragraph of its help, line breaks and all: a
    # summary written over two lines of source showed broken in two mid-sentence.
    result = CliRunner().invoke(app, [*group, "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    listed = result.output.split("Commands")[1].split("╰")[0].splitlines()[1:]
    assert listed and all(re.match(r"│ \w+ ", line) for line in listed), listed


def test_help_paragraphs_flow_instead_of_keeping_the_sources_line_breaks() -> None:
    import inspect

    import typer.main

    def commands(group: Any, path: list[str]) -> Iterator[tuple[list[str], Any]]:
        for name, command in getattr(group, "commands", {}).items():
            yield [*path, name], command
            yield from commands(command, [*path, name])

    checked = 0
    for path, command in commands(typer.main.get_command(app), []):
        later = inspect.cleandoc(command.help or "").split("\n\n")[1:]
        result = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "1000"})
        shown = [" ".join(line.strip(" │").split()) for line in result.output.splitlines()]
        for paragraph in later:
            if "\n" in paragraph:
                checked += 1
                assert " ".join(paragraph.split()) in shown, (path, paragraph)
    assert checked  # the docstrings hold such paragraphs


def test_a_command_ends_without_the_collector_walking_what_it_loaded(db: Path) -> None:
    # The interpreter's teardown runs full collections over every object still alive (typer's,
    # pydantic's, ours): a quarter of the CPU of `sessions list`, to free nothing the end of
    # the process would not. The entry point freezes them as the command ends, so the
    # collections at exit (after the atexit handlers, which see what they see) walk only
    # what the handlers leave.
    seed(db)
    code = (
        "import atexit, gc, sys\n"
        "atexit.register(lambda: print('walked', len(gc.get_objects()),"
        " 'frozen', gc.get_freeze_count()))\n"
        "from mcp_agent.__main__ import run\n"
        "run()\n"
    )
    listing = [sys.executable, "-c", code, "sessions", "list", "--db", str(db)]
    done = subprocess.run(listing, capture_output=True, text=True, env=clean_env(), timeout=60)
    assert done.returncode == 0, done.stderr
    assert "weather chat" in done.stdout
    walked, frozen = map(int, re.findall(r"walked (\d+) frozen (\d+)", done.stdout)[0])
    assert frozen > 20_000  # what typer, pydantic and the sessions' models made
    assert walked < 1_000, (walked, frozen)


def test_a_command_loads_the_help_renderer_only_for_help(tmp_path: Path) -> None:
    # typer's rich_utils brings rich's markdown, pretty-printing and tracebacks: a share of
    # every start, `serve`'s included, that only --help needs.
    code = (
        "import sys; from mcp_agent.cli import main; sys.argv[1:] = sys.argv[1:]\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in ('typer.rich_utils', 'rich.markdown') if m in sys.modules))"
    )
    listing = [sys.executable, "-c", code, "sessions", "list", "--db", str(tmp_path / "x.db")]
    done = subprocess.run(listing, capture_output=True, text=True, env=clean_env(), timeout=60)
    assert done.stdout.splitlines()[-1] == "[]", done.stdout + done.stderr
    helped = [sys.executable, "-c", code, "sessions", "--help"]
    done = subprocess.run(helped, capture_output=True, text=True, env=clean_env(), timeout=60)
    assert "typer.rich_utils" in done.stdout.splitlines()[-1], done.stdout + done.stderr


def test_arguments_that_are_not_utf8_are_refused_in_one_line(db: Path) -> None:
    ids = seed(db)
    stored = db.read_bytes()
    bad = b"bad\xff"
    commands: list[list[bytes]] = [
        [b"sessions", b"rename", ids["session"].encode(), bad],
        [b"sessions", b"show", bad],
        [b"sessions", b"fork", ids["session"].encode(), b"--entry", bad],
        [b"run", b"hi", b"--session", bad, b"--model", b"scripted:echo"],
    ]
    for command in commands:
        done = subprocess.run(
            [sys.executable.encode(), b"-m", b"mcp_agent", *command, b"--db", str(db).encode()],
            capture_output=True,
            env=clean_env(),
            timeout=60,
        )
        said = done.stderr.decode(errors="replace")
        assert done.returncode == 2, said
        assert "is not valid UTF-8 text" in said and "Traceback" not in said
        assert len(said.strip().splitlines()) == 1, said
    assert db.read_bytes() == stored


def test_ctrl_c_inside_a_pydantic_serializer_ends_quietly(
    db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each entry an import stores goes through a serializer of ours, run by pydantic, which
    turns a Ctrl-C landing there into an error of its own: it ends the program as Ctrl-C does
    anywhere else (exit 130, no traceback), and the import, all or nothing, stored nothing."""
    import pydantic

    from mcp_agent.cli import main

    class Interrupted(pydantic.BaseModel):
        value: int = 0

        @pydantic.field_serializer("value")
        def _ctrl_c(self, value: int) -> int:
            raise KeyboardInterrupt

    def import_session(*_: Any, **__: Any) -> Any:
        Interrupted().model_dump_json()

    monkeypatch.setattr(SqliteSessionRepo, "import_session", import_session)
    monkeypatch.setattr(sys, "argv", ["mcp-agent-sessions", "sessions", "import", "x.jsonl"])
    monkeypatch.setenv("MCP_AGENT_DB", str(db))
    (tmp_path / "x.jsonl").write_text("")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as ended:
        main()
    assert ended.value.code == 130
    assert capsys.readouterr().err == INTERRUPTED_LINE


def test_ctrl_c_in_a_command_says_it_was_interrupted(
    db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Ctrl-C during an import (or any command of no run) ends with exit 130 and the line
    saying so; typer turns a KeyboardInterrupt into a silent exit 130, and the program ended
    without a word, the user left to guess whether the import was done."""
    from mcp_agent.cli import main

    def import_session(*_: Any, **__: Any) -> Any:
        raise KeyboardInterrupt

    monkeypatch.setattr(SqliteSessionRepo, "import_session", import_session)
    monkeypatch.setattr(sys, "argv", ["mcp-agent-sessions", "sessions", "import", "x.jsonl"])
    monkeypatch.setenv("MCP_AGENT_DB", str(db))
    (tmp_path / "x.jsonl").write_text("")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as ended:
        main()
    assert ended.value.code == 130
    assert capsys.readouterr().err == INTERRUPTED_LINE


@pytest.mark.parametrize("loading", ["typing", "contextlib", "pydantic", "typer"])
def test_ctrl_c_while_the_command_line_loads_ends_quietly(loading: str) -> None:
    """Ctrl-C in the first fifth of a second, while the package and typer are imported,
    printed the traceback of the import it stopped; it ends as Ctrl-C later does (130, one
    line). typing and contextlib: the package's own first imports, before any handler was set
    (the interpreter's start, before any of our code, is out of our reach)."""
    script = f"""
import os, signal, sys

class CtrlC:  # as a person presses Ctrl-C while the module is found
    def find_spec(self, name, path=None, target=None):
        if name == {loading!r}:
            os.kill(os.getpid(), signal.SIGINT)
        return None

sys.meta_path.insert(0, CtrlC())
sys.argv = ["mcp-agent-sessions", "--help"]
from mcp_agent.cli import main
main()
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=clean_env(), timeout=60
    )
    assert (done.returncode, done.stderr, done.stdout) == (130, INTERRUPTED_LINE, "")


@pytest.mark.parametrize(
    "command",
    [
        ["sessions", "export", "{session}"],
        ["sessions", "tree", "{session}", "--json"],
        ["sessions", "tree", "{session}"],
        ["sessions", "show", "{session}"],
        ["models"],
        ["--help"],
        # its walk-through runs in a task group, whose failure it reported: "the demo failed: "
        ["demo"],
    ],
    ids=" ".join,
)
def test_a_closed_pipe_ends_every_command_alike_quietly_with_0(
    db: Path, command: list[str]
) -> None:
    """`| head` that has what it wanted: export and tree --json (written with sys.stdout) ended
    with 1, tree and show (written by rich) with 1 or 0 as their last write fell. Each ends
    as ripgrep does: no word, exit code 0 (1, or git's 141, fails a `set -o pipefail` script
    for what it asked for)."""
    ids = seed(db)
    done = run_with_reader_gone(db, *(a.format(**ids) for a in command))
    assert (done.returncode, done.stderr) == (0, "")


def test_every_usage_line_names_its_arguments_alike() -> None:
    """Typer 0.29 writes a required argument in braces and adds "..." to one that repeats:
    the usage lines read `run [OPTIONS] {prompt}`, `rename [OPTIONS] {ID} {name}` and `import
    [OPTIONS] {FILE…}...`. Each argument is named in capitals, its repeats said once."""
    import typer

    from mcp_agent.cli import app

    usages = []
    commands = [("mcp-agent-sessions", typer.main.get_command(app))]
    while commands:
        path, command = commands.pop()
        subcommands = getattr(command, "commands", {})
        commands.extend((f"{path} {name}", sub) for name, sub in subcommands.items())
        with typer.Context(command, info_name=path) as context:
            usages.append(" ".join(command.collect_usage_pieces(context)))
    named = [word for usage in usages for word in re.findall(r"[{[]([^}\]]+)[}\]]", usage)]
    assert "ID" in named and "OPTIONS" in named
    assert [word for word in named if word != word.upper() or "…" in word] == []


def test_install_s_clients_are_said_once_in_words_at_80_columns() -> None:
    """Typer showed the client's choices as a metavar in capitals beside the help's own list
    of them, and at 80 columns broke it mid-word (`CLAUDE-DESKTOP|CLAUDE-CODE|C URSOR|VSCODE`)."""
    from mcp_agent.cli import app

    result = CliRunner().invoke(app, ["install", "--help"], env={"COLUMNS": "80"})
    assert result.exit_code == 0
    text = " ".join(result.output.split())
    assert "claude-desktop, claude-code, cursor or vscode" in text
    assert "CLAUDE-DESKTOP" not in result.output and "URSOR" not in result.output


def run_with_reader_gone(db: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The command line with its stdout a pipe whose reader is gone before the first write
    (the same for every command): what `| head` does once it has what it wanted."""
    read, write = os.pipe()
    os.close(read)
    try:
        return subprocess.run(
            [sys.executable, "-m", "mcp_agent", *args],
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            env=clean_env(MCP_AGENT_DB=str(db)),
            timeout=60,
        )
    finally:
        os.close(write)


@pytest.mark.parametrize("output", ["/dev/stdout", "-"])
def test_an_export_to_stdout_named_as_a_file_ends_quietly_when_its_reader_goes(
    db: Path, output: str
) -> None:
    """`sessions export ID -o /dev/stdout | head` said "cannot write /dev/stdout: Broken pipe;
    choose another --output" and ended with 2, where `| head` ends every other command
    quietly with 0."""
    ids = seed(db)
    done = run_with_reader_gone(db, "sessions", "export", ids["session"], "-o", output)
    assert (done.returncode, done.stderr) == (0, "")


def test_output_that_cannot_be_written_is_one_line(db: Path) -> None:
    seed(db)
    with open("/dev/full", "w") as full:
        done = subprocess.run(
            [sys.executable, "-m", "mcp_agent", "sessions", "list", "--db", str(db)],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            env=clean_env(),
            timeout=60,
        )
    assert done.returncode == 1
    assert done.stderr.strip() == "mcp-agent-sessions: No space left on device", done.stderr
    # A terminal that cannot show a character gets an escape for it, not a crash.
    ascii_only = sub("sessions", "list", "--db", str(db), env=clean_env(PYTHONIOENCODING="ascii"))
    assert ascii_only.returncode == 0, ascii_only.stderr
    assert "weather chat" in ascii_only.stdout


def test_text_from_a_session_cannot_act_on_the_terminal(cli: Any, db: Path, tmp_path: Path) -> None:
    hostile = "hi \x1b[2J\x1b[31mRED\x1b]0;title\x07"
    with SqliteSessionRepo(db) as repo:
        session = repo.create(name="two\nlines\x1b[31m")
        session.append_message(User(content=hostile))
        session.append_label(present(session.leaf_id), "\u202eko-enod")  # reads "done-ok" reversed
        session.append_message(
            AssistantMessage(
                content=[
                    TextContent(text="ok \x1b[0m"),
                    ToolCall(id="c1", name="x\x1b[1m", arguments={"a": "\x1b"}),
                ]
            )
        )
        # An image's mime type is a file's text too.
        session.append_message(User(content=[ImageContent(data="AAAA", mime_type="a\x1b[2J")]))
        sid = session.id
    for command in (["show", sid], ["show", sid, "--full"], ["tree", sid], ["list"]):
        shown = cli("sessions", *command)
        assert shown.exit_code == 0, shown.stderr
        assert "\x1b" not in shown.stdout and "\x07" not in shown.stdout, command
        assert "\u202e" not in shown.stdout, command
    assert "#\\u202eko-enod" in cli("sessions", "tree", sid).stdout
    listed = cli("sessions", "list").stdout.splitlines()
    assert len(listed) == 2  # the header and one row: a name's line break does not split it
    assert "two lines\\x1b[31m" in listed[1]
    assert "hi \\x1b[2J\\x1b[31mRED\\x1b]0;title\\x07" in cli("sessions", "show", sid).stdout
    heading = cli("sessions", "show", sid).stdout.splitlines()[1]
    assert "3 messages" in heading and "5 entries" in heading  # and the name's and the label
    newer = seed(db)["session"]  # a second session, then the first is gone from page two
    past = cli("sessions", "list", "--limit", "1")
    more = past.stderr.split("--cursor ")[1].split()[0]
    assert cli("sessions", "delete", sid, "--yes").exit_code == 0
    nothing = cli("sessions", "list", "--cursor", more)
    assert newer in past.stdout
    assert nothing.exit_code == 0 and "no more sessions" in nothing.stderr


def test_an_import_from_a_pipe_says_the_files_version(db: Path, tmp_path: Path) -> None:
    """The version is the one the import read, not the file read again (a pipe is gone)."""
    piped = sub("sessions", "import", "/dev/stdin", "--db", str(db), input=pi_v3(2))
    assert piped.returncode == 0, piped.stderr
    assert "pi v3" in piped.stdout and "pi v1" not in piped.stdout
    other = tmp_path / "other.jsonl"  # another file, with the same session id
    other.write_text(pi_v3(3))
    again = sub("sessions", "import", str(other), "--db", str(db))
    assert again.returncode == 2
    assert "a session with the file's id" in again.stderr and "exists already" in again.stderr


@pytest.mark.parametrize(
    ("line", "said"),
    [
        ('"message": null', "message: expected a JSON object, not null; nothing was imported"),
        ('"message": {"content": "x"}', "message: role: field required"),
        ('"n": 1' + "0" * 5000, "line is not valid JSON (an integer of 5001 digits is too long)"),
    ],
)
def test_an_import_says_what_is_wrong_in_the_files_own_terms(
    cli: Any, tmp_path: Path, line: str, said: str
) -> None:
    header = '{"type":"session","version":3,"id":"01a00000-0000-7000-8000-0000000000ab",'
    header += '"timestamp":"2025-01-01T00:00:00.000Z","cwd":""}\n'
    entry = '{"type":"message","id":"aaaa0001","parentId":null,'
    entry += f'"timestamp":"2025-01-01T00:00:00.000Z",{line}}}\n'
    path = tmp_path / "bad.jsonl"
    path.write_text(header + entry)
    refused = cli("sessions", "import", str(path))
    assert refused.exit_code == 2
    assert "bad.jsonl:2: " in refused.stderr and said in refused.stderr, refused.stderr
    assert ": :" not in refused.stderr and "set_int_max_str_digits" not in refused.stderr


def test_a_damaged_session_file_can_be_deleted(cli: Any, db: Path, tmp_path: Path) -> None:
    seed(db)
    folder = tmp_path / "pi"
    folder.mkdir()
    assert cli("sessions", "copy", "--from", str(db), "--to", str(folder)).exit_code == 0
    (damaged,) = folder.rglob("*.jsonl")
    sid = json.loads(damaged.read_text().splitlines()[0])["id"]
    damaged.write_text(damaged.read_text().replace('"parentId"', '"parentId": 5, "x"', 1))
    shown = cli("sessions", "show", sid, "--db", str(folder))
    assert shown.exit_code == 1 and "sessions delete ID` removes a damaged session" in shown.stderr
    deleted = cli("sessions", "delete", sid, "--yes", "--db", str(folder))
    assert deleted.exit_code == 0, deleted.stderr
    assert "which is damaged" in deleted.stderr and not damaged.exists()


def test_show_draws_the_newest_entries_of_a_long_branch(cli: Any, db: Path) -> None:
    from mcp_agent.cli.render import BRANCH_LIMIT

    with SqliteSessionRepo(db) as repo:
        session = repo.create()
        ids = [session.append_message(User(content=f"question {n}")) for n in range(250)]
        sid = session.id
    shown = cli("sessions", "show", sid)
    assert shown.exit_code == 0
    assert f"⋮ {250 - BRANCH_LIMIT} earlier entries (--full shows all)" in shown.stdout
    assert ids[-1] in shown.stdout and ids[250 - BRANCH_LIMIT] in shown.stdout
    assert ids[250 - BRANCH_LIMIT - 1] not in shown.stdout and "question 0\n" not in shown.stdout
    whole = cli("sessions", "show", sid, "--full").stdout
    assert all(entry_id in whole for entry_id in ids) and "earlier entries" not in whole


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("limit", "taken"),
    [(100_000, ["before", "y" * 5_000, "after", "last"]), (1_000, ["before", "after", "last"])],
)
async def test_a_piped_line_too_long_is_left_out_saying_so(
    limit: int, taken: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A piped line is held whole in memory until its end: past the bound it is read to its
    end and left out, and the lines around it are taken."""
    from mcp_agent.cli.chat import LineReader

    piped = tmp_path / "piped"
    piped.write_bytes(b"before\n" + b"x" * 300_000 + b"\n" + b"y" * 5_000 + b"\nafter\nlast")
    fd = os.open(piped, os.O_RDONLY)
    reader = LineReader(fd, max_line=limit)
    try:
        lines = [await reader.read("> ") for _ in range(len(taken) + 1)]
    finally:
        os.close(fd)
    assert lines == [*taken, None]
    said = capsys.readouterr().err
    assert said.count(f"a line of more than {limit:,} bytes was left out") == 5 - len(taken)


def test_tree_json_is_written_as_made(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """From SQLite the flat tree's nodes are made a batch of entries at a time and written as
    they come (a 300,000-entry session took 2.2 GB, now 0.27 GB): the same nodes as from every
    parsed entry, and the same text as the object written whole."""
    from mcp_agent.cli.common import emit_json, emit_json_stream
    from mcp_agent.sessions.outline import TREE_BATCH, flat_tree, iter_flat_tree

    with SqliteSessionRepo(db) as repo:
        session = repo.create(name="branchy")
        root = session.append_message(User(content="the root"))
        for i in range(3):
            session.move_to(root)
            for step in range(TREE_BATCH // 2):
                last = session.append_message(User(content=f"branch {i} step {step}"))
            session.append_label(last, f"end of {i}")
        assert list(iter_flat_tree(session)) == flat_tree(session)
        nodes = flat_tree(session)
    assert len(nodes) > TREE_BATCH  # more than one batch
    fields = {"session": {"id": "x", "name": "a\nb"}, "leafId": None}
    for items in (nodes[:5], []):
        emit_json({**fields, "nodes": items})
        whole = capsys.readouterr().out
        emit_json_stream(fields, "nodes", iter(items))
        assert capsys.readouterr().out == whole


async def against(
    server: Any, db: Path, *args: str, input: bytes | None = None, model: str = "gpt-4o-mini"
) -> subprocess.CompletedProcess[bytes]:
    """The command line run with ``args`` in a child process, its model openai:``model``
    served by the script ``server``."""
    env = clean_env(OPENAI_BASE_URL=f"{server.base}/v1", OPENAI_API_KEY="x", MCP_AGENT_DB=str(db))
    command = [sys.executable, "-m", "mcp_agent", *args, "--model", f"openai:{model}"]
    return await anyio.run_process(command, input=input, env=env, check=False)


@pytest.mark.anyio
@pytest.mark.parametrize("command", ["run", "chat"])
async def test_a_rate_limited_runs_retry_warnings_are_one_plain_line_each(
    command: str, db: Path
) -> None:
    """The wait a rate limit causes is said on stderr as one line, not as rich's log record
    (a time, the source file's line, the text wrapped over several lines)."""
    limited = b'{"error": {"message": "Rate limit reached for requests"}}'
    async with script_server() as server:
        server.add(
            Reply(status=429, headers={"retry-after": "0"}, body=[limited]),
            oa_text_reply("Fine now."),
        )
        args = ["run", "hi"] if command == "run" else ["chat"]
        done = await against(server, db, *args, input=b"hi\n" if command == "chat" else None)
    stderr = done.stderr.decode()
    assert done.returncode == 0, stderr
    assert "Fine now." in done.stdout.decode()
    said = [line for line in stderr.splitlines() if "Rate limit reached" in line]
    assert len(said) == 1, stderr
    assert "429 Too Many Requests" in said[0] and "trying again in 0.0 s (retry 1 of 3)" in said[0]
    assert "http.py:" not in stderr, stderr


@pytest.fixture(name="scripted_api")
def scripted_api_fixture() -> Iterator[ScriptServer]:
    """A scripted OpenAI API (tests/providers_support.py) on an event loop of its own thread,
    for a command run in process (its signal handlers need the main thread)."""
    with (
        anyio.from_thread.start_blocking_portal() as portal,
        portal.wrap_async_context_manager(script_server()) as server,
    ):
        yield server


def in_process(
    server: ScriptServer,
    db: Path,
    *args: str,
    input: bytes | None = None,
    model: str = "gpt-4o-mini",
) -> subprocess.CompletedProcess[bytes]:
    """The command line run in process with ``args`` (as ``against`` runs it in a child: a
    child process is seconds of imports, and these tests are about what a command says), its
    model openai:``model`` served by ``server``."""
    env: dict[str, str | None] = {key: None for key in MODEL_KEYS}
    env |= {"OPENAI_BASE_URL": f"{server.base}/v1", "OPENAI_API_KEY": "x", "MCP_AGENT_DB": str(db)}
    command = [*args, "--model", f"openai:{model}"]
    done = CliRunner().invoke(app, command, input=input, env={**env, "COLUMNS": "100"})
    return subprocess.CompletedProcess(
        command, done.exit_code, done.stdout_bytes, done.stderr_bytes
    )


def test_an_answer_cut_off_at_the_output_limit_says_so(
    db: Path, scripted_api: ScriptServer
) -> None:
    scripted_api.add(oa_text_reply("The first half", finish="length"))
    done = in_process(scripted_api, db, "run", "hi")
    stderr = done.stderr.decode()
    assert done.returncode == 0, stderr
    assert done.stdout.decode() == "The first half\n"
    assert "cut off at the model's output limit" in stderr.splitlines()[-1], stderr


@pytest.mark.parametrize("command", ["run", "chat"])
def test_an_answer_cut_off_while_thinking_says_there_is_none(
    command: str, db: Path, scripted_api: ScriptServer
) -> None:
    """An R1-named model served raw thinks in its content until </think>: cut at its output
    limit before that, all it wrote is thinking, and stdout stayed empty with no word that
    the limit came before any answer."""
    scripted_api.add(oa_text_reply("Let me think. The user wants", finish="length"))
    args = ["run", "hi"] if command == "run" else ["chat"]
    done = in_process(
        scripted_api, db, *args, input=b"hi\n" if command == "chat" else None, model="deepseek-r1"
    )
    stderr = done.stderr.decode()
    assert done.returncode == 0, stderr
    assert "The user wants" not in done.stdout.decode()
    (said,) = [line for line in stderr.splitlines() if line.startswith("warning:")]
    assert "output limit while still thinking, so there is no answer" in said, stderr
    assert "28 characters it wrote are kept as its thinking" in said, stderr


def test_an_empty_answer_says_so(db: Path, scripted_api: ScriptServer) -> None:
    """A server that answered with nothing (content filtered upstream, a model that stopped at
    once) left stdout empty and the exit code 0: no word that the answer was empty."""
    scripted_api.add(oa_text_reply(""))
    done = in_process(scripted_api, db, "run", "hi")
    stderr = done.stderr.decode()
    assert done.returncode == 0 and done.stdout == b"", stderr
    assert stderr.splitlines()[-1].endswith("the model's answer was empty"), stderr


@pytest.mark.skipif(sys.platform == "win32", reason="a pseudo-terminal")
def test_chat_on_a_terminal_edits_lines_and_gives_the_terminal_back(db: Path) -> None:
    import pty
    import select
    import signal
    import termios

    controller, terminal = pty.openpty()
    before = termios.tcgetattr(terminal)
    env = clean_env(MCP_AGENT_DB=str(db), TERM="xterm")
    chat = subprocess.Popen(
        [sys.executable, "-m", "mcp_agent", "chat", "--model", "scripted:echo"],
        stdin=terminal,
        stdout=terminal,
        stderr=terminal,
        env=env,
        start_new_session=True,
    )

    shown = bytearray()
    looked = 0  # where the next text is looked for: one read may bring several

    def shown_until(text: bytes) -> None:
        nonlocal looked
        while (found := shown.find(text, looked)) < 0:
            assert chat.poll() is None, bytes(shown)
            if select.select([controller], [], [], 30)[0]:
                shown.extend(os.read(controller, 1 << 16))
            else:
                raise AssertionError(f"waited for {text!r}; the terminal showed {shown!r}")
        looked = found + len(text)

    try:
        shown_until(b"> ")
        os.write(controller, b"helo\x1b[Dl\r")  # the left arrow, to put the missing l in
        shown_until(b"tokens")
        shown_until(b"> ")
        os.killpg(chat.pid, signal.SIGINT)  # Ctrl-C at the prompt leaves
        assert chat.wait(timeout=30) == 0
        # readline's raw mode, entered for the line that never came, is undone.
        assert termios.tcgetattr(terminal) == before
    finally:
        if chat.poll() is None:
            chat.kill()
        os.close(controller)
        os.close(terminal)
    assert users_said(db) == ["hello"]


@pytest.mark.parametrize("leave", ["ctrl-d", "ctrl-c"])
def test_leaving_chat_at_the_prompt_ends_the_prompt_s_line(db: Path, leave: str) -> None:
    """Ctrl-D or Ctrl-C at the prompt left the terminal's last line at "> ", where the
    shell's prompt then followed."""
    import pty
    import select

    controller, terminal = pty.openpty()
    chat = subprocess.Popen(
        [sys.executable, "-m", "mcp_agent", "chat", "--model", "scripted:echo"],
        stdin=terminal,
        stdout=terminal,
        stderr=terminal,
        env=clean_env(MCP_AGENT_DB=str(db), TERM="xterm"),
        start_new_session=True,
    )
    shown = bytearray()

    def read_until(done: Any) -> None:
        while not done():
            if not select.select([controller], [], [], 30)[0]:
                raise AssertionError(f"the terminal showed {shown!r}")
            try:
                shown.extend(os.read(controller, 1 << 16))
            except OSError:  # the chat has ended and the terminal closed
                return

    try:
        read_until(lambda: shown.endswith(b"> "))
        if leave == "ctrl-d":
            os.write(controller, b"\x04")
        else:
            os.killpg(chat.pid, signal.SIGINT)
        assert chat.wait(timeout=30) == 0
        read_until(lambda: not select.select([controller], [], [], 0.2)[0])
    finally:
        if chat.poll() is None:
            chat.kill()
        os.close(controller)
        os.close(terminal)
    assert shown.rsplit(b"> ", 1)[1] == b"\r\n", bytes(shown)


def test_chat_sends_a_message_beginning_with_a_slash_when_doubled(cli: Any, db: Path) -> None:
    script = "//etc/hosts is empty, why?\n/etc/hosts\n"
    done = cli("chat", "--model", "scripted:echo", input=script)
    assert done.exit_code == 2, done.stderr  # the second line, an unknown command
    assert "unknown command /etc/hosts" in done.stderr and "start it with //" in done.stderr
    assert users_said(db) == ["/etc/hosts is empty, why?"]


def test_chat_move_before_any_session_says_there_is_none(cli: Any) -> None:
    # "/move ENTRY" before the first message was told its usage, as if it were misspelt.
    done = cli("chat", "--model", "scripted:echo", input="/move 1f3e8cea\n/move\n")
    assert done.exit_code == 2
    assert done.stderr.splitlines()[-2:] == [
        "no session yet: the first message starts one",
        "usage: /move ENTRY (an id from /tree) or /move root",
    ]


@pytest.mark.parametrize("columns", ["20", "40"])
def test_sessions_list_on_a_narrow_terminal_keeps_ids_and_columns_whole(
    db: Path, columns: str
) -> None:
    ids = seed(db)
    env = clean_env(MCP_AGENT_DB=str(db))
    env["COLUMNS"] = columns
    done = sub("sessions", "list", env=env)
    assert done.returncode == 0, done.stderr
    # narrower than the columns: a record a row (test_tables_at_40_columns_are_a_record_a_row)
    lines = done.stdout.splitlines()
    assert lines[0] == ids["session"]  # whole, to copy into the next command
    assert "  Msgs 5" in done.stdout or " · Msgs 5" in done.stdout  # each column whole
    assert lines[-1] == "  weather chat"


def test_listings_piped_leave_no_blanks_at_the_ends_of_their_lines(cli: Any, db: Path) -> None:
    # Piped to a file, each row of `sessions list` and `models` came padded with spaces to its
    # table's width ("Plan a picnic   ", "1.25           ").
    seed(db)
    with SqliteSessionRepo(db) as repo:
        repo.create().append_message(User(content="a first message far longer than its column"))
    for command in (["sessions", "list"], ["models"]):
        shown = cli(*command).stdout
        rows = [line for line in shown.splitlines() if line]
        assert len(rows) > 2 and [line for line in rows if line != line.rstrip()] == [], shown


def test_ctrl_c_stops_a_chat_s_compaction_as_it_stops_an_answer(
    cli: Any, db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C during /compact was said as an error ("Summarization was aborted") and counted
    as a refused line, so the chat ended with exit code 2."""
    from mcp_agent.cli import demo
    from mcp_agent.compaction.prompts import SUMMARIZATION_SYSTEM_PROMPT
    from mcp_agent.providers.base import LlmContext
    from mcp_agent.providers.scripted import ScriptedProvider, reply, scripted_model

    def respond(context: LlmContext) -> Any:
        if context.system_prompt == SUMMARIZATION_SYSTEM_PROMPT:
            os.kill(os.getpid(), signal.SIGINT)  # as the summary is being written
            return reply("a summary never finished", delay=10)
        return reply("y" * 40_000)

    def model() -> Any:
        return scripted_model("slow"), ScriptedProvider(respond)

    monkeypatch.setattr(demo, "cli_models", lambda: {"scripted:slow": model})
    lines = "".join(f"question {n} {'x' * 20_000}\n" for n in range(3))
    result = cli("chat", "--model", "scripted:slow", input=lines + "/compact\n")
    assert result.exit_code == 0, result.stderr
    assert "compaction stopped; nothing was written" in result.stderr
    with SqliteSessionRepo(db) as repo:
        (listed,) = repo.list().items
        assert repo.open(listed.id).find_entries("compaction") == []


def test_chat_compacts_with_the_model_the_session_runs_with(
    cli: Any, db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """/compact in a resumed chat asks the model its next run would use (the session's), not
    the default: as session_compact does, and pi's /compact."""
    from mcp_agent.cli import demo
    from mcp_agent.compaction.prompts import SUMMARIZATION_SYSTEM_PROMPT
    from mcp_agent.providers.base import LlmContext
    from mcp_agent.providers.scripted import ScriptedProvider, reply, scripted_model

    def answering(name: str) -> Any:
        def respond(context: LlmContext) -> Any:
            if context.system_prompt == SUMMARIZATION_SYSTEM_PROMPT:
                return reply(f"summary by {name}")
            return reply("y" * 40_000)

        return lambda: (scripted_model(name), ScriptedProvider(respond))

    models = {f"scripted:{n}": answering(n) for n in ("session-model", "default-model")}
    monkeypatch.setattr(demo, "cli_models", lambda: models)
    lines = "".join(f"question {n} {'x' * 20_000}\n" for n in range(3))
    assert cli("chat", "--model", "scripted:session-model", input=lines).exit_code == 0
    with SqliteSessionRepo(db) as repo:
        (listed,) = repo.list().items
    monkeypatch.setenv("MCP_AGENT_MODEL", "scripted:default-model")
    result = cli("chat", "--session", listed.id, input="/compact\n")
    assert result.exit_code == 0, result.stderr
    with SqliteSessionRepo(db) as repo:
        (compaction,) = repo.open(listed.id).find_entries("compaction")
    assert narrow(compaction, CompactionEntry).summary.startswith("summary by session-model")


def test_a_continued_session_keeps_its_model_in_run_and_chat(
    cli: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``run --session`` and ``chat --session`` go on with the session's own model, as the run
    does: before, with no default configured they refused ("no model configured"), and with
    another default chat's banner and /model named that one while the session's answered."""
    first = cli("run", "hello", "--model", "scripted:echo")
    assert first.exit_code == 0, first.output
    session_id = first.stderr.split("session ")[1].split()[0]
    again = cli("run", "again", "--session", session_id)  # no model anywhere but the session's
    assert again.exit_code == 0, again.output
    assert again.stdout == "again\n" and "scripted:echo" in again.stderr
    monkeypatch.setenv("MCP_AGENT_MODEL", "scripted:demo")
    chat = cli("chat", "--session", session_id, input="more\n/model\n")
    assert chat.exit_code == 0, chat.output
    assert "· scripted:echo ·" in chat.stderr.splitlines()[0]
    assert "model: scripted:echo" in chat.output and "scripted:demo" not in chat.output
    fresh = cli("run", "new")  # a new session has no model of its own: the default serves
    assert fresh.exit_code == 0 and "scripted:demo" in fresh.stderr, fresh.output


def test_thinking_shows_the_agents_level_where_the_session_sets_none(
    cli: Any, db: Path, tmp_path: Path
) -> None:
    """/thinking in a session that records no level (an older one, or one not started yet)
    said "off", where its next run goes at the agent's level (and records it): it says that."""
    from mcp_support import write_manifests

    agent = 'description = "thinks"\nthinking_level = "high"\n'
    manifests = str(write_manifests(tmp_path / "manifests", {"default": agent}))
    with SqliteSessionRepo(db) as repo:
        session = repo.create()
        session.append_model_change("scripted", "echo")
        session.append_message(User(content="from before"))
    steps = "/thinking\nhello\n/thinking\n"
    done = cli("chat", "--session", session.id, "--manifests", manifests, input=steps)
    assert done.exit_code == 0, done.output
    shown = [line for line in done.stderr.splitlines() if line.startswith("thinking level")]
    assert shown == [
        "thinking level: high (the agent's: the session sets none yet)",
        "thinking level: high",
    ]
    new = cli("chat", "--model", "scripted:echo", "--manifests", manifests, input="/thinking\n")
    assert "thinking level: high (the agent's: the session sets none yet)" in new.stderr


@pytest.mark.parametrize("store", ["database", "folder"])
def test_sessions_list_marks_a_sub_agents_session(
    cli: Any, db: Path, tmp_path: Path, store: str
) -> None:
    """A sub-agent's session was listed as any other (a fork's, by its parentSession alone):
    the table marks it, and --json says which session and run started it."""
    from mcp_agent.sessions import JsonlSessionRepo

    where = db if store == "database" else tmp_path / "folder"
    repo = SqliteSessionRepo(db) if store == "database" else JsonlSessionRepo(where)
    with repo:
        parent = repo.create()
        parent.append_message(User(content="delegate the greeting"))
        origin = {"sessionId": parent.id, "runId": "r1"}
        child = repo.create(metadata={"startedBy": origin}, parent_session=parent.id)
        child.append_message(User(content="write a greeting"))
        repo.fork(parent.id).append_message(User(content="a fork of it"))
    table = cli("sessions", "list", "--db", str(where))
    assert table.exit_code == 0, table.output
    marked = [line for line in table.stdout.splitlines() if "sub-agent" in line]
    assert len(marked) == 1 and "↳ sub-agent: write a greeting" in marked[0]
    listed = json.loads(cli("sessions", "list", "--db", str(where), "--json").stdout)
    started = {s["id"]: s["startedBy"] for s in listed["sessions"]}
    assert started.pop(child.id) == origin and set(started.values()) == {None}


def old_subagent_sessions(db: Path) -> dict[str, str]:
    """A parent and the sub-agent's session it linked, made before headers said whose
    sub-agent a session is (its header names only its parent), and a fork of each."""
    with SqliteSessionRepo(db) as repo:
        parent = repo.create()
        parent.append_message(User(content="delegate it"))
        child = repo.create(metadata={"agent": "helper"}, parent_session=parent.id)
        child.append_message(User(content="the task"))
        link = {"sessionId": child.id, "runId": "r0", "agent": "helper", "task": "the task"}
        parent.append_custom("subagent", link)
        forks = {"parent_fork": repo.fork(parent.id).id, "child_fork": repo.fork(child.id).id}
        return {"parent": parent.id, "child": child.id, **forks}


def test_an_older_sub_agents_session_is_known_by_its_parents_link(cli: Any, db: Path) -> None:
    """A sub-agent's session from before headers said so read "forked from": its parent's
    link entry names it, and show and tree say whose sub-agent it is; forks stay forks."""
    ids = old_subagent_sessions(db)
    shown = cli("sessions", "show", ids["child"])
    assert shown.exit_code == 0, shown.output
    said = " ".join(shown.stdout.split())
    assert f"a sub-agent's session, started by session {ids['parent']} (run r0)" in said
    assert "forked from" not in said
    origin = {"sessionId": ids["parent"], "runId": "r0"}
    for command in ("show", "tree"):
        data = json.loads(cli("sessions", command, ids["child"], "--json").stdout)
        assert data["session"]["startedBy"] == origin, command
    for fork in ("parent_fork", "child_fork"):
        assert "forked from" in " ".join(cli("sessions", "show", ids[fork]).stdout.split())
        data = json.loads(cli("sessions", "show", ids[fork], "--json").stdout)
        assert data["session"]["startedBy"] is None
    # Listings mark it too, and only it; and chat's /tree of it says whose it is.
    listed = json.loads(cli("sessions", "list", "--json").stdout)["sessions"]
    assert {s["id"]: s["startedBy"] for s in listed if s["startedBy"]} == {ids["child"]: origin}
    marked = [row for row in cli("sessions", "list").stdout.splitlines() if "sub-agent" in row]
    assert len(marked) == 1 and "↳ sub-agent: the task" in marked[0]
    tree = cli("chat", "--session", ids["child"], "--model", "scripted:echo", input="/tree\n")
    assert tree.exit_code == 0, tree.output
    assert f"a sub-agent's session, started by session {ids['parent']}" in " ".join(
        tree.stdout.split()
    )


@pytest.mark.parametrize(
    ("created", "shown"),
    [
        ("0001-01-01T00:00:00", "created 0001-01-01T00:00:00"),  # not in New York's range
        ("0001-01-01T01:00:00Z", "created 0001-01-01T01:00:00Z"),
        ("2026-01-15", "created 2026-01-14 19:00"),  # a date alone is UTC, as pi reads it
        ("2026-01-15T05:30:00", "created 2026-01-15 05:30"),  # no offset: the local time
    ],
)
def test_show_and_tree_give_a_created_time_the_zone_cannot_hold_as_written(
    cli: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, created: str, shown: str
) -> None:
    """A pi file's header time in year 1 (a time pi reads) made ``sessions show`` and
    ``sessions tree`` die with a traceback ('year 0 is out of range') putting it in the
    machine's zone; it is now shown as written. A date alone was shown as local midnight,
    where the stores (and pi) read it in UTC."""
    session_id = "0199aaaa-0000-7000-8000-0000000000c1"
    folder = tmp_path / "folder"
    folder.mkdir()
    header = {"type": "session", "version": 3, "id": session_id, "cwd": "/p", "timestamp": created}
    message = {"role": "user", "content": "hi", "timestamp": 1}
    first = {"type": "message", "id": "u1", "parentId": None, "message": message}
    first["timestamp"] = "2026-01-15T08:30:01.000Z"
    text = "".join(json.dumps(row) + "\n" for row in (header, first))
    (folder / f"{session_id}.jsonl").write_text(text)
    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    try:
        for command in ("show", "tree"):
            result = cli("sessions", command, session_id, "--db", str(folder))
            assert result.exit_code == 0, result.output
            assert shown + " ·" in result.stdout, result.stdout
    finally:
        monkeypatch.undo()
        time.tzset()


def test_show_and_tree_say_a_session_has_no_creation_time(cli: Any, tmp_path: Path) -> None:
    """pi reads a session file whose header gives no time: ``sessions show`` and ``tree``
    said 'created  · 1 message', the word with nothing after it; they now say there is
    none."""
    session_id = "0199aaaa-0000-7000-8000-0000000000c2"
    folder = tmp_path / "folder"
    folder.mkdir()
    header = {"type": "session", "version": 3, "id": session_id, "cwd": "/p"}
    (folder / f"{session_id}.jsonl").write_text(json.dumps(header) + "\n")
    for command in ("show", "tree"):
        result = cli("sessions", command, session_id, "--db", str(folder))
        assert result.exit_code == 0, result.output
        assert "no creation time · 0 messages" in result.stdout, result.stdout
        assert "created" not in result.stdout, result.stdout
