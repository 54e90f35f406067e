"""A SQLite session database this process cannot write: the commands that read it read it
whole, the writes are refused in one line, and nothing beside it is created or changed.

The folder (or the file) is bound read-only over itself in a mount namespace of its own
(root and util-linux's unshare): root would write through mere file permissions. One test
runs as an unprivileged user in a folder it may not write (setpriv)."""

from __future__ import annotations

import itertools
import json
import os
import shlex
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from agent_support import pi_v3

from mcp_agent.messages import AssistantMessage, TextContent, UserMessage
from mcp_agent.sessions.sqlite import SqliteSessionRepo

PROG = [sys.executable, "-m", "mcp_agent"]
MOUNTED = 'mount --bind "$0" "$0" && mount -o remount,ro,bind "$0" || exit 99\n'


def env_for(tmp: Path) -> dict[str, str]:
    """The commands' environment; their private copies go under ``tmp`` (to see them gone)."""
    tmp.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MCP_AGENT_DB", "OPENAI"))}
    return {**env, "TMPDIR": str(tmp), "COLUMNS": "100", "MCP_AGENT_MODEL": "scripted:echo"}


def run_read_only(mounted: Path, script: str, env: dict[str, str]) -> str:
    """Run the shell ``script`` with ``mounted`` (a folder or a file) read-only; each command
    in it ends with ``echo "exit $?"``. Its stdout and stderr, together."""
    try:
        done = subprocess.run(
            ["unshare", "-m", "sh", "-c", MOUNTED + script, str(mounted)],
            capture_output=True,
            text=True,
            env=env,
            timeout=180,
        )
    except FileNotFoundError:
        pytest.skip("no unshare here")
    if done.returncode == 99 or "unshare:" in done.stderr:
        pytest.skip(f"no mount namespace here: {done.stderr.strip()}")
    return done.stdout + done.stderr


def command(*args: str) -> str:
    """One command of a script: its output, then its exit status, on lines of their own."""
    return f"{shlex.join([*PROG, *args])} 2>&1 </dev/null; printf '\\nexit %s\\n' $?\n"


def outputs(said: str) -> list[tuple[str, int]]:
    """Each command's output and exit status, in order."""
    parts = said.split("\nexit ")
    found = [(parts[0], int(parts[1].split("\n", 1)[0]))]
    for before, after in itertools.pairwise(parts[1:]):
        found.append((before.split("\n", 1)[1], int(after.split("\n", 1)[0])))
    return found


def talk(repo: SqliteSessionRepo, said: str) -> str:
    session = repo.create()
    session.append_message(UserMessage(content=said))
    session.append_message(AssistantMessage(content=[TextContent(text=f"about {said}")]))
    return session.id


def files(folder: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(folder.iterdir())}


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    made = tmp_path / "archive"
    made.mkdir()
    return made


def sessions_db(folder: Path) -> dict[str, str]:
    """A session database, closed as a program closes it (no -wal, no -shm), whose newest
    session was appended after the last search (its text is not in the full-text index)."""
    with SqliteSessionRepo(folder / "s.db") as repo:
        ids = {"giraffe": talk(repo, "giraffe")}
        repo.list("giraffe")  # a search: indexes what is there
        ids["zebra"] = talk(repo, "zebra")
    assert sorted(path.name for path in folder.iterdir()) == ["s.db"]
    return ids


def left_by_a_stopped_writer(folder: Path, said: str) -> str:
    """Append a session to ``folder``'s database from a process that stops without closing
    it: the session is in the -wal only (next to the -shm). Its id."""
    code = (
        "import os, sys; from tests.test_read_only import talk;"
        " from mcp_agent.sessions.sqlite import SqliteSessionRepo;"
        f" print(talk(SqliteSessionRepo(sys.argv[1]), {said!r}), flush=True); os._exit(0)"
    )
    root = Path(__file__).parent
    env = {**os.environ, "PYTHONPATH": f"{root.parent}{os.pathsep}{root}"}
    done = subprocess.run(
        [sys.executable, "-c", code, str(folder / "s.db")],
        capture_output=True,
        text=True,
        env=env,
        check=True,
        timeout=120,
    )
    assert (folder / "s.db-wal").stat().st_size > 0
    return done.stdout.strip()


def listed(said: str) -> set[str]:
    return {item["id"] for item in json.loads(said)["sessions"]}


@pytest.fixture
def private_tmp(tmp_path: Path) -> Iterator[Path]:
    tmp = tmp_path / "tmp #1?%"  # what a file: URI must quote
    yield tmp
    assert not tmp.exists() or not list(tmp.iterdir()), "a private copy was left behind"


def test_every_read_command_reads_a_database_in_a_read_only_folder(
    folder: Path, tmp_path: Path, private_tmp: Path
) -> None:
    ids = sessions_db(folder)
    before = files(folder)
    db = str(folder / "s.db")
    said = run_read_only(
        folder,
        command("sessions", "list", "--json", "--db", db)
        + command("sessions", "list", "--search", "zebra", "--json", "--db", db)
        + command("sessions", "show", ids["zebra"], "--db", db)
        + command("sessions", "tree", ids["zebra"], "--db", db)
        + command("sessions", "export", ids["zebra"], "--db", db)
        + command("sessions", "copy", "--from", db, "--to", str(tmp_path / "copy.db")),
        env_for(private_tmp),
    )
    assert "Traceback" not in said, said
    (listing, _), (search, _), (show, _), (tree, _), (export, _), (copy, _) = done = outputs(said)
    assert [code for _, code in done] == [0] * 6, said
    assert listed(listing) == set(ids.values())
    # The newest session's text was never indexed in the file: found all the same.
    assert listed(search) == {ids["zebra"]}, search
    assert "about zebra" in show and "about zebra" in tree, said
    assert [json.loads(line)["type"] for line in export.splitlines() if line] == [
        "session",
        "message",
        "message",
    ]
    assert "2" in copy, copy
    with SqliteSessionRepo(tmp_path / "copy.db") as copied:
        assert {item.id for item in copied.list().items} == set(ids.values())
    assert files(folder) == before


def test_a_wal_left_without_its_shm_is_read_whole(folder: Path, private_tmp: Path) -> None:
    """A copy of a database and its -wal (a backup taken while a server ran, a crash): its
    newest writes are in the -wal alone, which SQLite reads only through a -shm it cannot
    create in the folder; ``immutable=1`` would read the file without them, and say nothing."""
    ids = sessions_db(folder)
    ids["okapi"] = left_by_a_stopped_writer(folder, "okapi")
    (folder / "s.db-shm").unlink()
    before = files(folder)
    db = str(folder / "s.db")
    said = run_read_only(
        folder,
        command("sessions", "list", "--json", "--db", db)
        + command("sessions", "list", "--search", "okapi", "--json", "--db", db)
        + command("sessions", "export", ids["okapi"], "--db", db),
        env_for(private_tmp),
    )
    assert "Traceback" not in said, said
    (listing, code), (search, _), (export, _) = outputs(said)
    assert code == 0, said
    assert listed(listing) == set(ids.values())
    assert listed(search) == {ids["okapi"]}, search
    assert "about okapi" in export
    assert files(folder) == before


def test_a_wal_with_its_shm_is_read_in_place(folder: Path, private_tmp: Path) -> None:
    ids = sessions_db(folder)
    ids["okapi"] = left_by_a_stopped_writer(folder, "okapi")
    before = files(folder)
    db = str(folder / "s.db")
    said = run_read_only(
        folder,
        command("sessions", "list", "--json", "--db", db)
        + command("sessions", "show", ids["okapi"], "--db", db),
        env_for(private_tmp),
    )
    (listing, code), (show, _) = outputs(said)
    assert code == 0, said
    assert listed(listing) == set(ids.values())
    assert "about okapi" in show
    assert files(folder) == before


def test_every_write_to_a_read_only_database_is_refused_in_one_line(
    folder: Path, tmp_path: Path, private_tmp: Path
) -> None:
    ids = sessions_db(folder)
    before = files(folder)
    db = str(folder / "s.db")
    pi_files = tmp_path / "pi"
    pi_files.mkdir()
    source = pi_files / "01a00000-0000-7000-8000-0000000000aa.jsonl"
    source.write_text(pi_v3(2, session_id="01a00000-0000-7000-8000-0000000000aa"))
    said = run_read_only(
        folder,
        command("sessions", "rename", ids["zebra"], "striped", "--db", db)
        + command("sessions", "delete", ids["zebra"], "--yes", "--db", db)
        + command("sessions", "fork", ids["zebra"], "--db", db)
        + command("sessions", "import", str(source), "--db", db)
        + command("sessions", "copy", "--from", str(pi_files), "--to", db),
        env_for(private_tmp),
    )
    assert "Traceback" not in said, said
    done = outputs(said)
    assert all(code != 0 for _, code in done), said
    for out, _ in done:
        # One line, saying the database is read-only, and why.
        assert out.strip().count("\n") == 0, out
        assert f"the session database {db} is read-only" in out, out
        assert f"the file system holding {folder} is mounted read-only" in out, out
        assert "nothing was written" in out, out
    assert files(folder) == before


@pytest.mark.parametrize("left", ["nothing", "a wal without its shm", "a shm alone"])
def test_a_read_only_file_in_a_writable_folder_gets_nothing_beside_it(
    folder: Path, private_tmp: Path, left: str
) -> None:
    """SQLite would create the -wal and -shm missing beside a read-only file it reads (in a
    folder it may write), and leave them there."""
    ids = sessions_db(folder)
    if left != "nothing":
        ids["okapi"] = left_by_a_stopped_writer(folder, "okapi")
    if left == "a shm alone":  # as a process that stopped while checkpointing may leave it
        checkpoint = (
            "import os, sqlite3, sys; sqlite3.connect(sys.argv[1])"
            ".execute('PRAGMA wal_checkpoint(TRUNCATE)'); os._exit(0)"
        )
        subprocess.run([sys.executable, "-c", checkpoint, folder / "s.db"], check=True, timeout=60)
        (folder / "s.db-wal").unlink()
        assert sorted(path.name for path in folder.iterdir()) == ["s.db", "s.db-shm"]
    if left == "a wal without its shm":
        (folder / "s.db-shm").unlink()
    before = files(folder)
    db = str(folder / "s.db")
    said = run_read_only(
        folder / "s.db",
        command("sessions", "list", "--search", "about", "--json", "--db", db)
        + command("sessions", "show", ids["giraffe"], "--db", db),
        env_for(private_tmp),
    )
    (search, code), (show, _) = outputs(said)
    assert code == 0, said
    assert listed(search) == set(ids.values())
    assert "about giraffe" in show
    assert files(folder) == before


SERVER_READS = """
import json, sys
from mcp_agent.sessions.errors import SessionError
from mcp_agent.sessions.sqlite import SqliteSessionRepo
repo = SqliteSessionRepo(sys.argv[1])
found = {}
found["search"] = [item.id for item in repo.list("zebra").items]
zebra = found["search"][0]
found["in_session"] = repo.search_session(zebra, "about").total
found["hits"] = list(repo.search_sessions([zebra], "zebra"))
found["texts"] = [e.message.content if isinstance(e.message.content, str) else
                  e.message.content[0].text for e in repo.open_read(zebra).get_branch()]
found["summary"] = repo.summary(zebra).message_count
try:
    repo.append_entry(zebra, {"type": "custom", "customType": "x", "data": {}})
except SessionError as error:
    found["append"] = [error.code, error.message]
repo.close()
print(json.dumps(found))
"""


def test_the_servers_reads_of_a_read_only_database(folder: Path, private_tmp: Path) -> None:
    """What the server's read tools call (search, a session's branch, its summary), and an
    append refused with the storage error the tools report."""
    ids = sessions_db(folder)
    db = str(folder / "s.db")
    script = private_tmp.parent / "reads.py"
    script.write_text(SERVER_READS)
    env = {**env_for(private_tmp), "PYTHONPATH": str(Path(__file__).parent.parent)}
    said = run_read_only(folder, f"{shlex.join([sys.executable, str(script), db])}\n", env)
    found = json.loads(said.strip().splitlines()[-1])
    assert found["search"] == [ids["zebra"]]
    assert found["in_session"] == 1
    assert found["hits"] == [ids["zebra"]]
    assert found["texts"] == ["zebra", "about zebra"]
    assert found["summary"] == 2
    code, message = found["append"]
    assert code == "storage" and f"{db} is read-only" in message, message
    assert "nothing was written" in message


def test_a_folder_this_user_may_not_write(tmp_path: Path) -> None:
    """As an unprivileged user, in a folder it may read and not write, by permissions alone."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to become another user")
    shared = Path(tempfile.mkdtemp(prefix="ro-test-"))  # where user nobody may look
    try:
        shared.chmod(0o755)
        ids = sessions_db(shared)
        (shared / "s.db").chmod(0o666)  # the file may be written; the folder may not
        before = files(shared)
        tmp = shared.parent / f"{shared.name}-tmp"
        env = env_for(tmp)
        tmp.chmod(0o777)
        env["PYTHONPATH"] = str(Path(__file__).parent.parent)
        env["HOME"] = str(tmp)
        nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
        db = str(shared / "s.db")
        results = [
            subprocess.run(
                [*nobody, *PROG, "sessions", *args, "--db", db],
                capture_output=True,
                text=True,
                env=env,
                timeout=120,
            )
            for args in (["list", "--search", "zebra", "--json"], ["rename", ids["zebra"], "x"])
        ]
        if "Permission denied" in results[0].stderr and "python" in results[0].stderr:
            pytest.skip(f"user nobody may not run this Python: {results[0].stderr}")
        search, rename = results
        assert search.returncode == 0, search.stderr
        assert listed(search.stdout) == {ids["zebra"]}
        assert rename.returncode != 0 and "Traceback" not in rename.stderr
        assert f"{db} is read-only (this user may not write in the folder {shared}" in rename.stderr
        assert files(shared) == before
        assert not list(tmp.iterdir())
    finally:
        shutil.rmtree(shared, ignore_errors=True)
        shutil.rmtree(shared.parent / f"{shared.name}-tmp", ignore_errors=True)


def test_run_chat_and_serve_refuse_a_read_only_database_saying_why(
    folder: Path, private_tmp: Path
) -> None:
    sessions_db(folder)
    before = files(folder)
    db = str(folder / "s.db")
    said = run_read_only(
        folder,
        command("run", "hi", "--db", db)
        + command("chat", "--db", db)
        + command("serve", "--db", db),
        env_for(private_tmp),
    )
    assert "Traceback" not in said, said
    for out, code in outputs(said):
        assert code == 2, said
        assert out.strip() == (
            f"mcp-agent-sessions: the session database {db} is read-only (the file system"
            f" holding {folder} is mounted read-only): runs, chats and the server write to it;"
            " `sessions list` (and its --search), `show`, `tree` and `export` read it as it is"
        )
    assert files(folder) == before


def test_serve_refuses_a_folder_this_user_may_not_write(tmp_path: Path) -> None:
    """The file may be written, its folder may not: SQLite could not make its -wal and -shm
    there, and every run would fail once the server had started."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to become another user")
    shared = Path(tempfile.mkdtemp(prefix="ro-test-"))  # where user nobody may look
    tmp = shared.parent / f"{shared.name}-tmp"
    try:
        shared.chmod(0o755)
        sessions_db(shared)
        (shared / "s.db").chmod(0o666)
        env = {**env_for(tmp), "PYTHONPATH": str(Path(__file__).parent.parent), "HOME": str(tmp)}
        tmp.chmod(0o777)
        nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
        db = str(shared / "s.db")
        done = [
            subprocess.run(
                [*nobody, *PROG, *args, "--db", db],
                capture_output=True,
                text=True,
                env=env,
                stdin=subprocess.DEVNULL,
                timeout=120,
            )
            for args in (["serve"], ["run", "hi"])
        ]
        for each in done:
            assert each.returncode == 2, each.stdout + each.stderr
            assert (
                f"{db} is read-only (this user may not write in the folder {shared}, where"
                " SQLite keeps the -wal and -shm files of a database it writes): runs, chats"
            ) in each.stderr, each.stderr
    finally:
        shutil.rmtree(shared, ignore_errors=True)
        shutil.rmtree(tmp, ignore_errors=True)


def test_a_read_only_database_of_an_older_schema_is_refused_saying_why(
    folder: Path, private_tmp: Path
) -> None:
    """Bringing it up to date writes to it; read as it is, its sessions would read wrong."""
    sessions_db(folder)
    conn = sqlite3.connect(folder / "s.db")
    conn.execute("PRAGMA user_version = 4")
    conn.close()
    before = files(folder)
    db = str(folder / "s.db")
    said = run_read_only(folder, command("sessions", "list", "--db", db), env_for(private_tmp))
    ((out, code),) = outputs(said)
    assert code == 2, said
    assert out.strip() == (
        f"mcp-agent-sessions: the session database {db} has schema version 4, older than this"
        f" version's 5, and is read-only (the file system holding {folder} is mounted"
        " read-only): it is brought up to date when first opened where it can be written; open"
        " it so once (or a copy of it), then read it here"
    )
    assert files(folder) == before
