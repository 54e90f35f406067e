"""The command line (placeholder until the CLI lands)."""

from __future__ import annotations


def main() -> None:
    raise SystemExit("mcp-agent-sessions: not ready")
