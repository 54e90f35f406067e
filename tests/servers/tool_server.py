"""A small downstream MCP server for tests, run as a real child process over stdio."""

import os
import sys

import anyio
from mcp.server import MCPServer
from mcp.server.mcpserver import Context, Image

server = MCPServer("test-tools", log_level="WARNING")


@server.tool()
async def echo(text: str) -> str:
    """Echo the text back."""
    return text


@server.tool()
async def pid() -> int:
    """The server's process id."""
    return os.getpid()


@server.tool(name="_pid")
async def underscore_pid() -> int:
    """The server's process id, under a name that with the server's name makes another's:
    server ``t`` with ``_pid`` and server ``t_`` with ``pid`` are both ``t___pid``."""
    return os.getpid()


@server.tool()
async def slow(seconds: float, ctx: Context) -> str:
    """Sleep, reporting progress every 50 ms."""
    steps = max(1, int(seconds / 0.05))
    for step in range(steps):
        await ctx.report_progress(step + 1, steps, f"step {step + 1} of {steps}")
        await anyio.sleep(0.05)
    return "slept"


@server.tool()
async def hang(seconds: float) -> str:
    """Sleep, saying nothing meanwhile."""
    await anyio.sleep(seconds)
    return "woke"


@server.tool()
async def wait_for(path: str) -> str:
    """Answer once a file exists at ``path``."""
    while not await anyio.Path(path).exists():
        await anyio.sleep(0.02)
    return "there"


@server.tool()
async def add_tool(name: str, ctx: Context) -> str:
    """Add a tool of that name (it echoes its text) and tell the client the tools changed."""

    async def added(text: str) -> str:
        return f"{name}: {text}"

    server.add_tool(added, name=name, description=f"Added at run time as {name}.")
    await ctx.notify_tools_changed()  # to listeners, on the 2026 protocol
    await ctx.session.send_tool_list_changed()  # the notification, before it
    return f"added {name}"


@server.tool()
async def crash() -> str:
    """Exit the process at once."""
    os._exit(3)


@server.tool()
async def fail(reason: str) -> str:
    """Raise an error the caller sees."""
    from mcp.server.mcpserver.exceptions import ToolError

    raise ToolError(reason)


@server.tool()
async def reject(reason: str, code: int = -32602) -> str:
    """Answer with a JSON-RPC error (the server stays up), invalid params unless ``code``
    says another."""
    from mcp.shared.exceptions import MCPError

    raise MCPError(code, reason)


@server.tool()
async def big(chars: int) -> str:
    """A result of ``chars`` characters."""
    return "x" * chars


@server.tool()
async def big_after_progress(chars: int, ctx: Context) -> str:
    """Report progress, then answer with ``chars`` characters (over HTTP an event stream
    carries the answer once progress went before it)."""
    await ctx.report_progress(1, 2, "half way")
    return "x" * chars


@server.tool()
async def big_data(items: int) -> dict[str, list[int]]:
    """Structured content of ``items`` numbers (and its JSON as text)."""
    return {"numbers": list(range(items))}


@server.tool()
async def picture(data_bytes: int) -> Image:
    """A PNG of ``data_bytes`` bytes (not a real picture)."""
    return Image(data=b"\x89PNG" + b"\0" * (data_bytes - 4), format="png")


@server.tool(name="weather.today")
async def weather_today(city: str) -> str:
    """A name MCP allows and model APIs do not (a dot)."""
    return f"sunny in {city}"


@server.tool(name="weather_today")
async def weather_underscore(city: str) -> str:
    """The name the one above would take, were it only cleaned."""
    return f"rainy in {city}"


@server.tool(description="A description longer than a tool's may be. " + "d" * 20_000)
async def wordy() -> str:
    return "said"


@server.tool(name="w" * 100)
async def long_name() -> str:
    """A name longer than model APIs take (64 characters)."""
    return "long"


if __name__ == "__main__":
    if "--garbage" in sys.argv:
        sys.stdout.write("this is not json-rpc\n")
        sys.stdout.flush()
    if "--json-http" in sys.argv:  # answers as JSON bodies, never as event streams
        port = int(sys.argv[sys.argv.index("--json-http") + 1])
        server.run("streamable-http", host="127.0.0.1", port=port, json_response=True)
        raise SystemExit(0)
    for transport in ("streamable-http", "sse"):
        if f"--{transport}" in sys.argv:
            port = int(sys.argv[sys.argv.index(f"--{transport}") + 1])
            server.run(transport, host="127.0.0.1", port=port)
            raise SystemExit(0)
    server.run("stdio")
