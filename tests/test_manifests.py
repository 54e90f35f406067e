"""Agent and server manifests: what loads, and the errors for what does not."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mcp_agent.manifests import (
    ManifestError,
    load_agents,
    load_servers,
    shipped_manifests_dir,
)


def write_servers(root: Path, servers: object) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "servers.json").write_text(json.dumps({"mcpServers": servers}))
    return root


def test_shipped_manifests_load() -> None:
    agents = load_agents(shipped_manifests_dir())
    assert "default" in agents and agents["default"].tools == ["*"]
    assert load_servers(shipped_manifests_dir()) == {}


def test_ide_configs_paste_as_they_are(tmp_path: Path) -> None:
    root = write_servers(
        tmp_path,
        {
            "files": {"command": "npx", "args": ["-y", "fs"], "autoApprove": ["read"]},
            "remote": {"url": "https://example.invalid/mcp", "headers": {"Authorization": "x"}},
            "old": {"type": "sse", "url": "http://127.0.0.1:1/sse"},
            "off": {"command": "x", "disabled": True},
        },
    )
    servers = load_servers(root)
    assert set(servers) == {"files", "remote", "old"}
    assert servers["files"].args == ["-y", "fs"]
    assert servers["old"].type == "sse"


@pytest.mark.parametrize(
    ("servers", "fragment"),
    [
        ({"x": "npx foo"}, "mcpServers.x must be an object"),
        ({"x": {"command": "a", "url": "http://b"}}, "either 'command'"),
        ({"x": {}}, "either 'command'"),
        ({"a__b": {"command": "a"}}, "must not contain '__'"),
        # Its tools would go unqualified ("echo"), beside the built-ins ("subagent").
        ({"": {"command": "a"}}, "server name must not be empty"),
        ({"x": {"command": "a", "timeout": -1}}, "mcpServers.x.timeout"),
        ({"x": {"url": "http://a", "type": "carrier-pigeon"}}, "mcpServers.x.type"),
        # Refused as the manifests are read, not at each run's start of the server.
        ({"x": {"url": "not a url"}}, "'url' must be an http:// or https:// URL"),
        ({"x": {"url": "localhost:8000/mcp"}}, "not 'localhost:8000/mcp'"),
        ({"x": {"url": "ftp://host/mcp"}}, "'url' must be an http://"),
        ({"x": {"url": "http://host:99999/mcp"}}, "'url' must be an http://"),
    ],
)
def test_bad_server_entries_name_the_problem(
    tmp_path: Path, servers: object, fragment: str
) -> None:
    with pytest.raises(ManifestError, match=r"servers\.json") as caught:
        load_servers(write_servers(tmp_path, servers))
    assert fragment in str(caught.value)


def test_servers_json_must_be_json(tmp_path: Path) -> None:
    (tmp_path / "servers.json").write_text("{nope")
    with pytest.raises(ManifestError, match="not valid JSON"):
        load_servers(tmp_path)
    (tmp_path / "servers.json").write_bytes(b'{"mcpServers": {"\xff": {}}}')
    with pytest.raises(ManifestError, match=r"servers\.json: not UTF-8 text"):
        load_servers(tmp_path)


def test_agents_and_their_errors(tmp_path: Path) -> None:
    agents = tmp_path / "agents"
    agents.mkdir()
    (agents / "coder.toml").write_text('model = "openai:gpt-4o"\ntools = ["git__*"]\n')
    loaded = load_agents(tmp_path)
    assert loaded["coder"].allows_tool("git__diff") and not loaded["coder"].allows_tool("web")
    assert "default" in loaded  # always there

    (agents / "bad.toml").write_text("max_turns = 0\n")
    with pytest.raises(ManifestError, match=r"bad\.toml: max_turns"):
        load_agents(tmp_path)
    (agents / "bad.toml").write_text("colour = 'red'\n")
    with pytest.raises(ManifestError, match="colour"):
        load_agents(tmp_path)
    (agents / "bad.toml").write_text("= broken")
    with pytest.raises(ManifestError, match="not valid TOML"):
        load_agents(tmp_path)
    (agents / "bad.toml").write_bytes(b"model = '\xff'")
    with pytest.raises(ManifestError, match=r"bad\.toml: not UTF-8 text"):
        load_agents(tmp_path)
