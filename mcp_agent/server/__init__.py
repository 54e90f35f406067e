"""The MCP server (imports the mcp SDK; the CLI loads it only for ``serve``)."""
