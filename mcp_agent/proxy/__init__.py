"""MCP clients that turn tools of MCP servers (downstream and built-in) into AgentTools."""
