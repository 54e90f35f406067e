"""Where the server keeps its data and how it is reached; read from flags and the environment."""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass, field
from pathlib import Path

from mcp_agent.paths import default_db_path

MODEL_ENV = "MCP_AGENT_MODEL"
TOKEN_ENV = "MCP_AGENT_TOKEN"
MANIFESTS_ENV = "MCP_AGENT_MANIFESTS"
DURABILITY_ENV = "MCP_AGENT_DURABILITY"
RETRIES_ENV = "MCP_AGENT_MODEL_RETRIES"


def _retries_from_env() -> int:
    text = os.environ.get(RETRIES_ENV) or "3"
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"{RETRIES_ENV} must be a whole number, not {text!r}") from None


@dataclass
class ServerSettings:
    db_path: Path = field(default_factory=default_db_path)
    manifests_dir: Path | None = None
    default_model: str | None = field(default_factory=lambda: os.environ.get(MODEL_ENV) or None)
    token: str | None = field(default_factory=lambda: os.environ.get(TOKEN_ENV) or None)
    host: str = "127.0.0.1"
    port: int = 8765
    max_subagent_depth: int = 3
    max_request_bytes: int = 4 * 1024 * 1024
    page_size: int = 50
    # Host names (besides the bound address and loopback) that HTTP clients may use: DNS
    # rebinding protection stays on whatever the address.
    allowed_hosts: list[str] = field(default_factory=list)
    # "full" survives power loss (an fsync per append); "normal" survives a killed process.
    durability: str = field(default_factory=lambda: os.environ.get(DURABILITY_ENV) or "full")
    # A run that ends on a passing model error (overloaded, a broken stream) runs again, this
    # many times, after this many seconds (doubled each time): agent.RetrySettings.
    model_retries: int = field(default_factory=_retries_from_env)
    model_retry_delay: float = 2.0

    def __post_init__(self) -> None:
        if self.model_retries < 0:
            raise ValueError(f"model retries must be 0 or more, not {self.model_retries}")
        if self.durability not in ("full", "normal"):
            raise ValueError(
                f"durability must be full or normal, not {self.durability!r} "
                f"(from --durability or {DURABILITY_ENV})"
            )


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
