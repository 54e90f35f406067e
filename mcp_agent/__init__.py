"""mcp-agent-sessions: an MCP server that runs agents and keeps conversations as session trees."""

__version__ = "0.1.0"
