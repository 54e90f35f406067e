"""``install CLIENT``: merging this installation into an MCP client's config file, in-process
through typer's CliRunner, always against a ``--config`` file under tmp_path."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from mcp_agent.cli import app
from mcp_agent.cli.install import Client, default_config_path

# Per client: the key holding the servers, whether entries carry "type": "stdio", and a
# sample config with other servers and other top-level settings.
CLIENTS: dict[str, tuple[str, bool, dict[str, Any]]] = {
    "claude-desktop": (
        "mcpServers",
        False,
        {
            "globalShortcut": "Ctrl+Space",
            "mcpServers": {
                "filesystem": {"command": "npx", "args": ["-y", "@mcp/fs", "/home/me"]},
                "weather": {"command": "/opt/weather", "env": {"KEY": "k"}},
            },
            "preferences": {"theme": "dark"},
        },
    ),
    "claude-code": (
        "mcpServers",
        True,
        {
            "numStartups": 12,
            "projects": {"/w": {"mcpServers": {"local": {"type": "stdio", "command": "x"}}}},
            "mcpServers": {"github": {"type": "http", "url": "https://example.com/mcp"}},
            "theme": "light",
        },
    ),
    "cursor": (
        "mcpServers",
        False,
        {"mcpServers": {"browser": {"command": "node", "args": ["b.js"]}}, "extra": [1, 2]},
    ),
    "vscode": (
        "servers",
        True,
        {
            "inputs": [{"type": "promptString", "id": "key", "password": True}],
            "servers": {
                "memory": {"type": "stdio", "command": "npx", "args": ["-y", "mem"]},
                "remote": {"type": "http", "url": "https://example.com/mcp"},
            },
        },
    ),
}


def invoke(*args: str) -> Result:
    return CliRunner().invoke(app, ["install", *args])


def write_sample(path: Path, data: dict[str, Any]) -> bytes:
    path.write_text(json.dumps(data, indent=4) + "\n", encoding="utf-8")
    return path.read_bytes()


def assert_runs_this_installation(entry: dict[str, Any], typed: bool) -> None:
    command = Path(entry["command"])
    assert command.is_absolute() and command.is_file(), entry
    if command.name.startswith("mcp-agent-sessions"):
        assert command.parent == Path(os.path.abspath(sys.executable)).parent
        assert entry["args"] == ["serve"]
    else:
        assert str(command) == os.path.abspath(sys.executable)
        assert entry["args"] == ["-m", "mcp_agent", "serve"]
    assert ("type" in entry) is typed
    if typed:
        assert entry["type"] == "stdio"


@pytest.mark.parametrize("client", sorted(CLIENTS))
def test_dry_run_prints_the_merge_and_writes_nothing(client: str, tmp_path: Path) -> None:
    key, typed, sample = CLIENTS[client]
    config = tmp_path / "config.json"
    before = write_sample(config, sample)

    result = invoke(client, "--dry-run", "--config", str(config))

    assert result.exit_code == 0, result.output
    assert config.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json"]  # no .bak, no temp
    assert str(config) in result.stderr and "nothing written" in result.stderr
    merged = json.loads(result.stdout)
    assert list(merged) == list(sample)  # the other top-level keys, in order
    for other in sample:
        if other != key:
            assert merged[other] == sample[other]
    servers = merged[key]
    assert list(servers) == [*sample[key], "agent-sessions"]
    for name, entry in sample[key].items():
        assert servers[name] == entry
    assert_runs_this_installation(servers["agent-sessions"], typed)


@pytest.mark.parametrize("client", sorted(CLIENTS))
def test_install_writes_the_merge_and_keeps_a_backup(client: str, tmp_path: Path) -> None:
    key, typed, sample = CLIENTS[client]
    config = tmp_path / "config.json"
    before = write_sample(config, sample)

    result = invoke(client, "--config", str(config))

    assert result.exit_code == 0, result.output
    assert "added entry 'agent-sessions'" in result.stdout and str(config) in result.stdout
    assert (tmp_path / "config.json.bak").read_bytes() == before
    written = json.loads(config.read_text(encoding="utf-8"))
    assert {k: v for k, v in written.items() if k != key} == {
        k: v for k, v in sample.items() if k != key
    }
    assert {k: v for k, v in written[key].items() if k != "agent-sessions"} == sample[key]
    assert_runs_this_installation(written[key]["agent-sessions"], typed)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json", "config.json.bak"]


def test_second_install_replaces_only_our_entry(tmp_path: Path) -> None:
    config = tmp_path / "claude_desktop_config.json"
    sample = CLIENTS["claude-desktop"][2]
    write_sample(config, sample)
    assert invoke("claude-desktop", "--config", str(config)).exit_code == 0
    # The user adds a key to our entry and changes another server in between.
    first = json.loads(config.read_text())
    first["mcpServers"]["agent-sessions"]["env"] = {"OPENAI_API_KEY": "sk-test"}
    first["mcpServers"]["weather"]["args"] = ["--fast"]
    config.write_text(json.dumps(first))
    between = config.read_bytes()

    db = tmp_path / "data" / "sessions.db"
    db.parent.mkdir()
    result = invoke("claude-desktop", "--config", str(config), "--db", str(db))

    assert result.exit_code == 0, result.output
    assert "replaced entry 'agent-sessions'" in result.stdout
    assert (tmp_path / "claude_desktop_config.json.bak").read_bytes() == between
    second = json.loads(config.read_text())
    assert list(second["mcpServers"]) == ["filesystem", "weather", "agent-sessions"]
    assert second["mcpServers"]["weather"] == first["mcpServers"]["weather"]
    assert second["mcpServers"]["filesystem"] == sample["mcpServers"]["filesystem"]
    ours = second["mcpServers"]["agent-sessions"]
    assert ours["args"][-2:] == ["--db", str(db)]
    assert ours["env"] == {"OPENAI_API_KEY": "sk-test"}  # the user's keys survive
    assert {k: v for k, v in second.items() if k != "mcpServers"} == {
        k: v for k, v in sample.items() if k != "mcpServers"
    }


def test_other_name_adds_a_second_entry(tmp_path: Path) -> None:
    config = tmp_path / "mcp.json"
    assert invoke("cursor", "--config", str(config)).exit_code == 0
    assert invoke("cursor", "--config", str(config), "--name", "sessions-2").exit_code == 0
    servers = json.loads(config.read_text())["mcpServers"]
    assert list(servers) == ["agent-sessions", "sessions-2"]
    assert servers["agent-sessions"] == servers["sessions-2"]


@pytest.mark.parametrize(
    ("client", "content", "says"),
    [
        ("cursor", "[1, 2]\n", "does not hold a JSON object (found an array)"),
        ("claude-code", '"text"\n', "does not hold a JSON object (found a string)"),
        ("claude-desktop", '{"mcpServers": {"a": 1},\n', "is not valid JSON (line 2"),
        ("vscode", '{\n  // mine\n  "servers": {}\n}\n', "// comments"),
        ("cursor", '{"mcpServers": ["x"]}', '"mcpServers" is not a JSON object'),
        ("vscode", '{"servers": null}', '"servers" is not a JSON object'),
        # Written back, these would fail half-way (the .bak made), crash, or lose a server.
        ("cursor", '{"mcpServers": {"x": "\\ud800"}}', "\\ud800 is an unpaired surrogate"),
        ("cursor", '{"a": ' + "[" * 6000 + "]" * 6000 + "}", "nested more than 200 levels"),
        ("cursor", '{"mcpServers": {"x": 1}, "mcpServers": {"y": 2}}', 'key "mcpServers"'),
        ("vscode", '{"servers": {"a": {"env": {"K": 1, "K": 2}}}}', 'key "K" appears twice'),
        ("claude-code", '{"n": NaN}', "NaN is not a JSON value"),
    ],
)
def test_bad_config_is_refused_and_untouched(
    client: str, content: str, says: str, tmp_path: Path
) -> None:
    config = tmp_path / "config.json"
    config.write_text(content, encoding="utf-8")
    before = config.read_bytes()

    for extra in ([], ["--dry-run"]):
        result = invoke(client, "--config", str(config), *extra)
        assert result.exit_code == 2, result.output
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and says in lines[0] and str(config) in lines[0], result.stderr
        assert result.stdout == ""
    assert config.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json"]


@pytest.mark.parametrize("url", ["postgresql://u@h/db", "postgres://u:p@h:5432/db?sslmode=require"])
def test_postgresql_url_is_passed_unchanged(url: str, tmp_path: Path) -> None:
    result = invoke("vscode", "--dry-run", "--config", str(tmp_path / "mcp.json"), "--db", url)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["servers"]["agent-sessions"]["args"][-2:] == ["--db", url]


def test_db_file_is_made_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = invoke("cursor", "--dry-run", "--config", "mcp.json", "--db", "s.db")
    assert result.exit_code == 0, result.output
    args = json.loads(result.stdout)["mcpServers"]["agent-sessions"]["args"]
    assert args[-2:] == ["--db", str(tmp_path / "s.db")]


@pytest.mark.parametrize(
    ("db", "says"),
    [
        ("no/such/dir/s.db", "does not exist"),
        (".", "is a folder"),
        ("mysql://h/db", "only postgresql:// URLs"),
        (" ", "--db is empty"),
    ],
)
def test_db_the_server_cannot_open_is_refused(
    db: str, says: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    for extra in ([], ["--dry-run"]):
        result = invoke("cursor", "--config", "mcp.json", "--db", db, *extra)
        assert result.exit_code == 2, result.output
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and says in lines[0], result.stderr
        assert result.stdout == ""
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("option", ["--name", "--db"])
def test_argument_that_is_not_utf8_is_refused(option: str, tmp_path: Path) -> None:
    config = tmp_path / "mcp.json"
    before = write_sample(config, CLIENTS["cursor"][2])
    # The real console script: argv's byte 0xff reaches Python as a lone surrogate.
    command = [sys.executable, "-m", "mcp_agent", "install", "cursor", "--config", str(config)]
    result = subprocess.run(
        [*command, option, "a\udcffb"],
        capture_output=True,
        text=True,
        errors="backslashreplace",
        timeout=60,
    )
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and option in lines[0] and "UTF-8" in lines[0], result.stderr
    assert config.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mcp.json"]


def test_missing_config_is_created_with_its_folders(tmp_path: Path) -> None:
    config = tmp_path / "no" / "such" / "dir" / "mcp.json"

    result = invoke("vscode", "--config", str(config))

    assert result.exit_code == 0, result.output
    assert "new file" in result.stdout
    written = json.loads(config.read_text(encoding="utf-8"))
    assert list(written) == ["servers"] and list(written["servers"]) == ["agent-sessions"]
    assert_runs_this_installation(written["servers"]["agent-sessions"], typed=True)
    assert sorted(p.name for p in config.parent.iterdir()) == ["mcp.json"]  # no .bak


def test_missing_config_dry_run_creates_nothing(tmp_path: Path) -> None:
    config = tmp_path / "sub" / ".claude.json"
    result = invoke("claude-code", "--dry-run", "--config", str(config))
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["mcpServers"]["agent-sessions"]["type"] == "stdio"
    assert not (tmp_path / "sub").exists()


def test_symlinked_config_stays_a_link(tmp_path: Path) -> None:
    real = tmp_path / "dotfiles" / "mcp.json"
    real.parent.mkdir()
    real.write_text('{"mcpServers": {}}')
    link = tmp_path / "mcp.json"
    link.symlink_to(real)
    assert invoke("cursor", "--config", str(link)).exit_code == 0
    assert link.is_symlink()
    assert "agent-sessions" in json.loads(real.read_text())["mcpServers"]
    assert (real.parent / "mcp.json.bak").read_text() == '{"mcpServers": {}}'


def test_unknown_client_is_a_usage_error(tmp_path: Path) -> None:
    result = invoke("emacs", "--config", str(tmp_path / "x.json"))
    assert result.exit_code == 2
    assert "claude-desktop" in result.output and "vscode" in result.output
    assert not (tmp_path / "x.json").exists()


def test_default_config_paths(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / ".config"))
    paths = {client: default_config_path(client) for client in Client}
    assert paths[Client.claude_code] == tmp_path / ".claude.json"
    assert paths[Client.cursor] == tmp_path / ".cursor" / "mcp.json"
    assert paths[Client.claude_desktop].name == "claude_desktop_config.json"
    assert paths[Client.claude_desktop].parent.name == "Claude"
    assert paths[Client.vscode].parts[-3:] == ("Code", "User", "mcp.json")
    if sys.platform.startswith("linux"):
        assert paths[Client.claude_desktop].parent == tmp_path / ".config" / "Claude"
        assert paths[Client.vscode] == tmp_path / ".config" / "Code" / "User" / "mcp.json"


@pytest.mark.parametrize(
    ("bom", "newline", "indent", "end"),
    [
        ("", "\n", 2, "\n"),  # Claude Code's JSON.stringify(config, null, 2)
        ("\ufeff", "\r\n", "\t", "\r\n"),  # a Windows editor's, tab-indented
        ("", "\n", 4, ""),  # no line break at the end
    ],
)
@pytest.mark.parametrize("client", sorted(CLIENTS))
def test_the_files_layout_is_kept(
    client: str, bom: str, newline: str, indent: str | int, end: str, tmp_path: Path
) -> None:
    key, _, sample = CLIENTS[client]

    def laid_out(data: dict[str, Any]) -> bytes:
        text = json.dumps(data, indent=indent, ensure_ascii=False).replace("\n", newline)
        return (bom + text + end).encode("utf-8")

    config = tmp_path / "config.json"
    config.write_bytes(laid_out(sample))

    result = invoke(client, "--config", str(config))

    assert result.exit_code == 0, result.output
    written = json.loads(config.read_bytes().decode("utf-8-sig"))
    assert {k: v for k, v in written[key].items() if k != "agent-sessions"} == sample[key]
    # Every line but ours as it was: the layout of the whole file is the original's.
    assert config.read_bytes() == laid_out(written)


def test_installing_again_changes_nothing_and_keeps_the_first_backup(tmp_path: Path) -> None:
    config = tmp_path / "mcp.json"
    original = write_sample(config, CLIENTS["cursor"][2])
    assert invoke("cursor", "--config", str(config)).exit_code == 0
    installed = config.read_bytes()

    for extra in ([], ["--dry-run"]):
        result = invoke("cursor", "--config", str(config), *extra)
        assert result.exit_code == 0, result.output
        assert "nothing written" in result.output
    assert "up to date" in result.stdout or "needs no change" in result.stderr
    assert json.loads(result.stdout) == json.loads(installed)  # the dry run shows the file
    assert config.read_bytes() == installed
    assert (tmp_path / "mcp.json.bak").read_bytes() == original  # the user's file, not ours
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mcp.json", "mcp.json.bak"]


def blocked_on_flock(pid: int, inode: int) -> bool:
    """Whether process ``pid`` waits for a flock on ``inode`` (Linux's /proc/locks marks a
    waiter with "->": ``1: -> FLOCK ADVISORY WRITE PID MAJ:MIN:INODE 0 EOF``)."""
    for line in Path("/proc/locks").read_text().splitlines():
        fields = line.split()
        if fields[1:3] == ["->", "FLOCK"] and int(fields[5]) == pid:
            if int(fields[6].rsplit(":", 1)[1]) == inode:
                return True
    return False


@pytest.mark.skipif(not Path("/proc/locks").exists(), reason="reads Linux's /proc/locks")
def test_install_waits_while_another_install_holds_the_folder(tmp_path: Path) -> None:
    import fcntl
    import time

    config = tmp_path / "mcp.json"
    config.write_text('{"mcpServers": {}}\n')
    folder = os.open(tmp_path, os.O_RDONLY)
    fcntl.flock(folder, fcntl.LOCK_EX)  # as an install that has read the file holds it
    command = [sys.executable, "-m", "mcp_agent", "install", "cursor", "--config", str(config)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        while not blocked_on_flock(process.pid, os.stat(tmp_path).st_ino):
            assert process.poll() is None, "install went on while the folder was locked"
            time.sleep(0.01)
        # The other install writes its entry; then this one must read it, and keep it.
        config.write_text('{"mcpServers": {"theirs": {"command": "x"}}}\n')
    finally:
        os.close(folder)
        _, stderr = process.communicate(timeout=60)
    assert process.returncode == 0, stderr
    assert list(json.loads(config.read_text())["mcpServers"]) == ["theirs", "agent-sessions"]


def test_config_that_is_a_device_is_refused_and_kept(tmp_path: Path) -> None:
    import stat

    # A copy of /dev/null: replaced by a file, the device would be gone for the whole machine.
    device = tmp_path / "null"
    try:
        os.mknod(device, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except (AttributeError, PermissionError):
        pytest.skip("making a device takes root on Linux")
    for extra in ([], ["--dry-run"]):
        result = invoke("cursor", "--config", str(device), *extra)
        assert result.exit_code == 2, result.output
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and "not a regular file" in lines[0] and str(device) in lines[0]
    assert device.is_char_device()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["null"]


def test_a_folder_that_cannot_be_read_is_written_unlocked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A folder this user may write but not read (mode -wx) cannot be opened to lock: the
    install goes on unserialised instead of failing with a traceback. Root reads any folder,
    so the refusal is stood in for (the suite runs as root here)."""
    from mcp_agent.cli import install as install_module

    real_open = os.open

    def refusing(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if Path(path) == tmp_path:
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(install_module.os, "open", refusing)
    with install_module.locked(tmp_path):
        written = True
    assert written
