from mcp_agent.cli import main

main()
