"""Agent and downstream-server manifests.

``DIR/servers.json`` lists downstream MCP servers in the ``mcpServers`` format IDEs use;
``DIR/agents/*.toml`` defines agents. Without ``--manifests`` the shipped ``manifests/`` is used.
"""

from __future__ import annotations

import fnmatch
import json
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic.alias_generators import to_camel

from mcp_agent.messages import ThinkingLevel
from mcp_agent.wire import describe_validation_error


class ManifestError(ValueError):
    """A manifest that cannot be used; the text names the file and the field."""


class ServerConfig(BaseModel):
    """One downstream MCP server: a command to start over stdio, or a URL (streamable HTTP,
    or HTTP+SSE with ``"type": "sse"``). Keys other clients use (``autoApprove``, ...) are
    ignored, so that an IDE's configuration can be pasted as it is."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    name: str = ""
    command: str | None = None
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    cwd: str | None = None
    url: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    type: Literal["stdio", "http", "streamable-http", "streamableHttp", "sse"] | None = None
    timeout: float = Field(default=60.0, gt=0, description="seconds a tool call may take")
    start_timeout: float | None = Field(
        default=None,
        gt=0,
        description="seconds the server may take to start and list its tools; None: its"
        " timeout, at least 10 (an interpreter, a package download)",
    )
    disabled: bool = False

    @model_validator(mode="after")
    def _one_transport(self) -> ServerConfig:
        if bool(self.command) == bool(self.url):
            raise ValueError("give either 'command' (stdio) or 'url' (HTTP), not both or neither")
        if self.url and not _is_http_url(self.url):
            # Else taken, and each run's start of the server failed saying only that a
            # request URL "is missing an 'http://' or 'https://' protocol".
            raise ValueError(f"'url' must be an http:// or https:// URL, not {self.url!r}")
        return self


def _is_http_url(url: str) -> bool:
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        return parts.scheme in ("http", "https") and bool(parts.hostname) and (parts.port or 1) > 0
    except ValueError:  # a port that is no number, or out of range
        return False


class AgentManifest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    description: str = ""
    model: str | None = Field(
        default=None, description="provider:model-id; None means the server's default model"
    )
    thinking_level: ThinkingLevel = ThinkingLevel.OFF
    system_prompt: str = ""
    tools: list[str] = Field(
        default_factory=lambda: ["*"], description="glob patterns over tool names"
    )
    servers: list[str] | None = Field(
        default=None, description="downstream servers this agent may use; None means all"
    )
    max_turns: int = Field(default=50, ge=1)

    def allows_tool(self, tool_name: str) -> bool:
        return any(fnmatch.fnmatchcase(tool_name, pattern) for pattern in self.tools)

    def allows_server(self, server_name: str) -> bool:
        return self.servers is None or server_name in self.servers

    def to_json_dict(self) -> dict[str, Any]:
        """camelCase, as all JSON this project answers with (the TOML keeps snake_case)."""
        return {to_camel(key): value for key, value in self.model_dump(mode="json").items()}


def shipped_manifests_dir() -> Path:
    """The manifests/ that ships with the package (installed copy first, then the checkout)."""
    package = Path(__file__).resolve().parent
    for candidate in (package / "_manifests", package.parent / "manifests"):
        if candidate.is_dir():
            return candidate
    return package / "_manifests"


def load_servers(directory: Path) -> dict[str, ServerConfig]:
    path = directory / "servers.json"
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise ManifestError(f"{path}: not valid JSON ({error})") from None
    except UnicodeDecodeError as error:
        raise ManifestError(f"{path}: not UTF-8 text ({error})") from None
    except OSError as error:
        raise ManifestError(f"cannot read {path}: {error}") from None
    servers = data.get("mcpServers", data.get("servers")) if isinstance(data, dict) else None
    if not isinstance(servers, dict):
        raise ManifestError(f"{path}: expected an object with an 'mcpServers' object")
    result: dict[str, ServerConfig] = {}
    for name, entry in servers.items():
        if not isinstance(entry, dict):
            raise ManifestError(
                f"{path}: mcpServers.{name} must be an object with 'command' or 'url', "
                f"not {type(entry).__name__}"
            )
        if not name:  # its tools would be named as they are: "subagent", beside the built-in
            raise ManifestError(f"{path}: a server name must not be empty (it names its tools)")
        if "__" in name:
            raise ManifestError(f"{path}: server name {name!r} must not contain '__'")
        try:
            config = ServerConfig.model_validate({**entry, "name": name})
        except ValidationError as error:
            detail = describe_validation_error(error, f"mcpServers.{name}", entry)
            raise ManifestError(f"{path}: {detail}") from None
        if not config.disabled:
            result[name] = config
    return result


def load_agents(directory: Path) -> dict[str, AgentManifest]:
    agents: dict[str, AgentManifest] = {}
    for path in sorted((directory / "agents").glob("*.toml")):
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except tomllib.TOMLDecodeError as error:
            raise ManifestError(f"{path}: not valid TOML ({error})") from None
        except UnicodeDecodeError as error:
            raise ManifestError(f"{path}: not UTF-8 text ({error})") from None
        except OSError as error:
            raise ManifestError(f"cannot read {path}: {error}") from None
        data.setdefault("name", path.stem)
        try:
            agent = AgentManifest.model_validate(data)
        except ValidationError as error:
            raise ManifestError(f"{path}: {describe_validation_error(error, '', data)}") from None
        if agent.name in agents:
            raise ManifestError(f"{path}: agent {agent.name!r} is defined twice")
        agents[agent.name] = agent
    agents.setdefault("default", AgentManifest(name="default", description="General agent"))
    return agents
