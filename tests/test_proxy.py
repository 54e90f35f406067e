"""Tools through MCP clients: a real downstream server in a child process, over stdio."""

from __future__ import annotations

import os
import re
import signal
import sys
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp.types as types
import pytest
from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp_support import START_GUARD_S, alive
from narrow import narrow

from mcp_agent.abort import AbortController
from mcp_agent.manifests import AgentManifest, ServerConfig
from mcp_agent.messages import ImageContent, TextContent
from mcp_agent.proxy.hub import RUN_META_KEY, ToolHub
from mcp_agent.tools import AgentTool, AgentToolResult

pytestmark = pytest.mark.anyio

SERVER = Path(__file__).parent / "servers" / "tool_server.py"


def stdio_config(**overrides: Any) -> ServerConfig:
    """The test server's entry. Its start gets a minute, a hang guard: an interpreter importing
    the SDK took past the 10 s a start gets by default on a loaded machine (every later call
    then failed with 'could not be started'), and these tests are about its calls."""
    return ServerConfig(
        command=sys.executable, args=[str(SERVER)], **{"start_timeout": 60.0, **overrides}
    )


@pytest.fixture
async def hub() -> AsyncIterator[ToolHub]:
    async with ToolHub({"t": stdio_config(timeout=5)}) as hub:
        yield hub


async def call(
    tool: AgentTool, updates: list[AgentToolResult] | None = None, signal=None, **args: Any
) -> AgentToolResult:
    controller = AbortController()
    return await tool.execute(
        "call-1",
        args,
        signal or controller.signal,
        (updates.append if updates is not None else lambda _: None),
        None,
    )


def text_of(result: AgentToolResult) -> str:
    """The text of ``result``'s first block, checked to be text."""
    return narrow(result.content[0], TextContent).text


def by_name(tools: list[AgentTool]) -> dict[str, AgentTool]:
    return {tool.name: tool for tool in tools}


async def test_tool_names_model_apis_refuse_are_given_names_they_take(hub: ToolHub) -> None:
    """MCP allows dots and 128 characters in a tool's name; model APIs take
    ``^[a-zA-Z0-9_-]{1,64}$``, and one name outside it failed every run of the agent."""
    tools = await hub.tools()
    names = [tool.name for tool in tools]
    assert len(names) == len(set(names))
    assert all(re.fullmatch(r"[A-Za-z0-9_-]{1,64}", name) for name in names), names
    by = by_name(tools)
    assert by["t__weather_today"].description.startswith("The name the one above")
    origin = "(MCP tool weather.today of server t)"
    dotted = [tool for tool in tools if tool.description.endswith(origin)]
    assert len(dotted) == 1 and dotted[0].name.startswith("t__weather_today_")
    assert text_of(await call(dotted[0], city="Oslo")) == "sunny in Oslo"
    assert text_of(await call(by["t__weather_today"], city="Oslo")) == "rainy in Oslo"
    (long,) = [tool for tool in tools if tool.name.startswith("t__www")]
    assert len(long.name) == 64 and text_of(await call(long)) == "long"
    # A manifest's patterns match the names the server gave.
    only = AgentManifest(name="a", tools=["t__weather.*"])
    assert [tool.name for tool in await hub.tools(only)] == [dotted[0].name]


async def test_tools_of_two_servers_with_one_qualified_name_are_both_kept() -> None:
    """Server ``t``'s ``_pid`` and server ``t_``'s ``pid`` are both ``t___pid``: the first
    listed keeps the name, the other gets one of its own (it was left out)."""
    async with ToolHub({"t": stdio_config(), "t_": stdio_config()}) as hub:
        tools = by_name(await hub.tools())
        same = [tool for name, tool in tools.items() if name.startswith("t___pid")]
        assert len(same) == 2 and same[0].name == "t___pid"
        assert same[1].description.endswith("(MCP tool pid of server t_)")
        pid_of_t = text_of(await call(tools["t__pid"]))
        pid_of_t_ = text_of(await call(tools["t____pid"]))  # t_'s _pid
        assert pid_of_t != pid_of_t_
        assert [text_of(await call(tool)) for tool in same] == [pid_of_t, pid_of_t_]


async def listed_by(server: Any) -> list[types.Tool]:
    """The tools a connection takes from ``server`` (in process)."""
    from mcp import Client

    from mcp_agent.proxy.downstream import McpServerConnection

    connection = McpServerConnection(
        server.name, lambda handler: Client(server, message_handler=handler), start_timeout=30
    )
    async with anyio.create_task_group() as group:
        tools = await connection.tools(group)
        await connection.stop()
    return tools


async def test_a_server_that_lists_tools_without_end_is_cut_short() -> None:
    """Pages of tools with a next cursor each time: the first MAX_TOOLS are taken."""
    from mcp.server.lowlevel import Server

    from mcp_agent.proxy.downstream import MAX_TOOLS

    pages: list[str | None] = []

    async def list_tools(_: Any, params: types.PaginatedRequestParams | None) -> Any:
        cursor = params.cursor if params else None
        pages.append(cursor)
        start = int(cursor or 0)
        tools = [
            types.Tool(name=f"tool{n}", input_schema={"type": "object"})
            for n in range(start, start + 300)
        ]
        return types.ListToolsResult(tools=tools, next_cursor=str(start + 300))

    tools = await listed_by(Server("endless", on_list_tools=list_tools))
    assert [tool.name for tool in tools] == [f"tool{n}" for n in range(MAX_TOOLS)]
    assert len(pages) == -(-MAX_TOOLS // 300)  # the pages that hold them, and no more


@pytest.mark.parametrize("cursor", ["same", "new"])
async def test_a_server_that_pages_in_a_circle_or_without_tools_is_cut_short(
    cursor: str,
) -> None:
    """The same cursor again, or empty pages with new cursors: the tools read are taken,
    instead of paging until the start's time limit gives up on the server."""
    from mcp.server.lowlevel import Server

    from mcp_agent.proxy.downstream import MAX_TOOL_PAGES

    pages: list[str | None] = []

    async def list_tools(_: Any, params: types.PaginatedRequestParams | None) -> Any:
        pages.append(params.cursor if params else None)
        tools = [types.Tool(name="only", input_schema={"type": "object"})] if not pages[1:] else []
        next_cursor = "again" if cursor == "same" else f"page{len(pages)}"
        return types.ListToolsResult(tools=tools, next_cursor=next_cursor)

    tools = await listed_by(Server("circle", on_list_tools=list_tools))
    assert [tool.name for tool in tools] == ["only"]
    assert len(pages) == (2 if cursor == "same" else MAX_TOOL_PAGES + 1)


async def test_a_result_too_large_for_a_model_is_cut_saying_so(hub: ToolHub) -> None:
    from mcp_agent.proxy.convert import MAX_RESULT_CHARS

    tools = by_name(await hub.tools())
    whole = await call(tools["t__big"], chars=MAX_RESULT_CHARS)
    assert [len(text_of(whole))] == [MAX_RESULT_CHARS] and len(whole.content) == 1
    cut = await call(tools["t__big"], chars=3 * MAX_RESULT_CHARS)
    assert len(text_of(cut)) == MAX_RESULT_CHARS
    note = narrow(cut.content[-1], TextContent).text
    assert note == (
        f"[cut: the tool's result held {3 * MAX_RESULT_CHARS:,} characters of text; the first"
        f" {MAX_RESULT_CHARS:,} are kept]"
    )
    data = await call(tools["t__big_data"], items=50_000)  # over 300,000 characters of JSON
    assert data.details is None  # not kept whole beside the text cut short
    texts = [narrow(block, TextContent).text for block in data.content]
    assert sum(len(text) for text in texts[:-1]) == MAX_RESULT_CHARS
    assert texts[-1].startswith("[cut: the tool's result held ")
    small = await call(tools["t__big_data"], items=3)
    assert small.details == {"numbers": [0, 1, 2]}
    for size in (6 << 20, (6 << 20) + 1, (6 << 20) + 2):  # no padding, "==", "="
        picture = await call(tools["t__picture"], data_bytes=size)
        assert text_of(picture) == f"[an image of {size:,} bytes left out: over 5 MB]"
    fits = await call(tools["t__picture"], data_bytes=1 << 20)
    assert isinstance(fits.content[0], ImageContent)


async def test_a_description_too_long_for_every_request_is_cut_saying_so(hub: ToolHub) -> None:
    """A tool's description goes with every request to the model: a server's 5 MB one made
    every request of every run 5 MB."""
    from mcp_agent.proxy.hub import MAX_DESCRIPTION_CHARS

    wordy = by_name(await hub.tools())["t__wordy"]
    assert wordy.description.startswith("A description longer than a tool's may be. ddd")
    assert wordy.description.endswith("d\n[cut: the description held 20,043 characters]")
    assert len(wordy.description) < MAX_DESCRIPTION_CHARS + 100
    assert text_of(await call(wordy)) == "said"


async def test_downstream_tools_are_named_and_called(hub: ToolHub) -> None:
    tools = by_name(await hub.tools())
    assert {"t__echo", "t__pid", "t__slow", "t__crash", "t__fail"} <= set(tools)
    echo = tools["t__echo"]
    assert echo.parameters["properties"]["text"]["type"] == "string"
    assert echo.description == "Echo the text back."
    result = await call(echo, text="hello")
    assert not result.is_error
    assert text_of(result) == "hello"


async def test_tool_error_text_reaches_the_agent(hub: ToolHub) -> None:
    tools = by_name(await hub.tools())
    result = await call(tools["t__fail"], reason="disk full")
    assert result.is_error
    assert "disk full" in text_of(result)


async def test_progress_becomes_updates(hub: ToolHub) -> None:
    tools = by_name(await hub.tools())
    updates: list[AgentToolResult] = []
    result = await call(tools["t__slow"], updates, seconds=0.2)
    assert text_of(result) == "slept"
    assert len(updates) >= 2
    assert text_of(updates[0]).startswith("step 1 of")


async def test_killed_mid_call_gives_error_then_restarts(hub: ToolHub) -> None:
    tools = by_name(await hub.tools())
    first_pid = int(text_of(await call(tools["t__pid"])))

    async def kill_soon() -> None:
        await anyio.sleep(0.2)
        os.kill(first_pid, signal.SIGKILL)

    async with anyio.create_task_group() as group:
        group.start_soon(kill_soon)
        result = await call(tools["t__slow"], seconds=3)
    assert result.is_error
    assert "'t'" in text_of(result)
    again = await call(tools["t__pid"])
    assert not again.is_error
    assert int(text_of(again)) != first_pid
    assert hub.connection("t").starts == 2


async def test_crash_tool_gives_error_naming_server(hub: ToolHub) -> None:
    tools = by_name(await hub.tools())
    result = await call(tools["t__crash"])
    assert result.is_error and "MCP server 't'" in text_of(result)
    assert text_of(await call(tools["t__echo"], text="back")) == "back"


@pytest.mark.parametrize("code", [types.INVALID_PARAMS, types.CONNECTION_CLOSED, -32001])
async def test_an_error_answer_is_reported_without_a_restart(hub: ToolHub, code: int) -> None:
    """Also with the codes the SDK gives a connection it lost (-32000) or its own timeout
    (-32001): a server may answer with them (JSON-RPC leaves -32000 to -32099 to servers),
    and it was stopped, failing the other calls it had under way."""
    tools = by_name(await hub.tools())
    pid = text_of(await call(tools["t__pid"]))
    result = await call(tools["t__reject"], reason="x must be positive", code=code)
    assert result.is_error
    assert text_of(result) == "MCP server 't' refused reject: x must be positive"
    assert text_of(await call(tools["t__pid"])) == pid
    assert hub.connection("t").starts == 1


async def test_a_server_that_never_answers_at_start_times_out(tmp_path: Path) -> None:
    """Within its ``start_timeout`` when its entry sets one, however short (before, never in
    less than 10 s: a user who set 1 s waited 10 for a dead server)."""
    pid_file = tmp_path / "pid"
    script = (
        f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(60)"
    )
    silent = ServerConfig(command=sys.executable, args=["-c", script], timeout=1, start_timeout=1)
    async with ToolHub({"silent": silent, "t": stdio_config()}) as hub:
        errors: list[str] = []
        with anyio.fail_after(60):  # a hang guard: the message below says which wait was used
            names = {tool.name for tool in await hub.tools(on_error=errors.append)}
        assert "t__echo" in names
        assert errors == [
            "MCP server 'silent' could not be started: it did not answer within 1 s"
            " (the entry's start_timeout in servers.json sets this)"
        ]
        with anyio.fail_after(10):
            while alive(int(pid_file.read_text())):
                await anyio.sleep(0.05)


async def test_hang_times_out_and_next_call_restarts() -> None:
    async with ToolHub({"t": stdio_config(timeout=0.5)}) as hub:
        tools = by_name(await hub.tools())
        pid = int(text_of(await call(tools["t__pid"])))
        with anyio.fail_after(15):
            result = await call(tools["t__hang"], seconds=30)
        assert result.is_error and "within 0.5 s" in text_of(result)
        assert not alive(pid)
        assert text_of(await call(tools["t__echo"], text="ok")) == "ok"


async def test_a_call_past_its_limit_that_reports_progress_stops_only_itself() -> None:
    """Progress says the server is up: only the call is cancelled, and the server's other
    calls (other runs') go on (before: the server was stopped as if hung)."""
    async with ToolHub({"t": stdio_config(timeout=0.5)}) as hub:
        tools = by_name(await hub.tools())
        pid = int(text_of(await call(tools["t__pid"])))
        updates: list[AgentToolResult] = []
        with anyio.fail_after(15):
            result = await call(tools["t__slow"], updates, seconds=30)
        assert text_of(result).endswith("within 0.5 s; the call was cancelled"), text_of(result)
        assert updates and alive(pid)
        assert text_of(await call(tools["t__echo"], text="ok")) == "ok"
        assert hub.connection("t").starts == 1


async def test_a_slow_call_on_a_server_that_answers_others_stops_only_itself(
    tmp_path: Path,
) -> None:
    """Runs share a server: one call's time limit must not fail the calls of others."""
    async with ToolHub({"t": stdio_config(timeout=3)}) as hub:
        tools = by_name(await hub.tools())
        pid = int(text_of(await call(tools["t__pid"])))
        updates: list[AgentToolResult] = []
        results: dict[str, AgentToolResult] = {}
        there = tmp_path / "there"

        async def slow() -> None:
            results["slow"] = await call(tools["t__slow"], updates, seconds=30)

        async def waiting() -> None:
            results["waiting"] = await call(tools["t__wait_for"], path=str(there))

        async with anyio.create_task_group() as group:
            group.start_soon(slow)
            with anyio.fail_after(10):
                while not updates:  # its progress came back: the slow call is in flight
                    await anyio.sleep(0.02)
            # The waiting call must outlast the slow one's limit and answer within its own.
            await anyio.sleep(1)
            assert text_of(await call(tools["t__echo"], text="up")) == "up"
            group.start_soon(waiting)
            with anyio.fail_after(15):
                while "slow" not in results:
                    await anyio.sleep(0.02)
            there.touch()
        assert text_of(results["slow"]).endswith("within 3 s; the call was cancelled")
        assert text_of(results["waiting"]) == "there", text_of(results["waiting"])
        assert alive(pid) and hub.connection("t").starts == 1


async def test_abort_cancels_call_and_close_leaves_no_child() -> None:
    async with ToolHub({"t": stdio_config()}) as hub:
        tools = by_name(await hub.tools())
        pid = int(text_of(await call(tools["t__pid"])))
        controller = AbortController()

        async def abort_soon() -> None:
            await anyio.sleep(0.2)
            controller.abort("cancelled with agent_cancel")

        with anyio.fail_after(5):
            async with anyio.create_task_group() as group:
                group.start_soon(abort_soon)
                result = await call(tools["t__slow"], signal=controller.signal, seconds=10)
        # Why, as the loop says it of a tool it cut short (it said "was aborted", no more).
        said = "slow on MCP server 't': aborted: cancelled with agent_cancel"
        assert result.is_error and text_of(result) == said, text_of(result)
        assert alive(pid)
    with anyio.fail_after(10):
        while alive(pid):
            await anyio.sleep(0.05)


async def test_server_that_cannot_start_is_reported_and_left_out() -> None:
    broken = ServerConfig(command=sys.executable, args=["-c", "import sys; sys.exit(7)"])
    async with ToolHub({"t": stdio_config(), "broken": broken}) as hub:
        errors: list[str] = []
        names = {tool.name for tool in await hub.tools(on_error=errors.append)}
        assert "t__echo" in names
        assert not any(name.startswith("broken__") for name in names)
        # Not the bare "Connection closed" the client hears: that it exited, and how.
        assert errors and "'broken'" in errors[0] and "exited with status 7" in errors[0]


async def test_agent_manifest_filters_tools_and_servers() -> None:
    builtin = MCPServer("builtin", log_level="WARNING")

    @builtin.tool()
    async def note(text: str) -> str:
        return text

    async with ToolHub({"t": stdio_config()}, builtin=lambda: builtin) as hub:
        no_servers = AgentManifest(name="b", servers=[])
        assert {t.name for t in await hub.tools(no_servers)} == {"note"}
        assert not hub.connection("t").running  # started on first use only
        only_echo = AgentManifest(name="a", tools=["t__echo", "note"])
        assert {t.name for t in await hub.tools(only_echo)} == {"t__echo", "note"}
        assert hub.connection("t").running


async def test_builtin_tools_receive_run_meta() -> None:
    builtin = MCPServer("builtin", log_level="WARNING")

    @builtin.tool()
    async def whoami(ctx: Context) -> str:
        meta: Mapping[str, Any] = ctx.request_context.meta or {}
        return str(meta.get(RUN_META_KEY, {}).get("session_id"))

    async with ToolHub({}, builtin=lambda: builtin) as hub:
        [tool] = await hub.tools(run_meta={"session_id": "s-42", "depth": 1})
        assert text_of(await call(tool)) == "s-42"


@asynccontextmanager
async def tool_server_over_http(flag: str) -> AsyncIterator[int]:
    """tests/servers/tool_server.py serving over HTTP (``flag``: ``streamable-http``, ``sse``
    or ``json-http``) on a free loopback port, which it yields once it listens."""
    import socket
    import subprocess

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    child = await anyio.open_process(
        [sys.executable, str(SERVER), f"--{flag}", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        with anyio.fail_after(START_GUARD_S):
            while True:
                try:
                    with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                        break
                except OSError:
                    await anyio.sleep(0.05)
        yield port
    finally:
        child.terminate()
        with anyio.fail_after(10):
            await child.wait()


@pytest.mark.parametrize(("transport", "path"), [("streamable-http", "/mcp"), ("sse", "/sse")])
async def test_downstream_server_over_http(
    transport: str, path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mcp_agent.proxy import tool_listing

    # Each listing passes the check of its tools one by one, over HTTP as over stdio.
    listings: list[dict[str, Any]] = []
    check = tool_listing.valid_tools

    def noted(result: dict[str, Any], *rest: Any) -> dict[str, Any]:
        listings.append(result)
        return check(result, *rest)

    monkeypatch.setattr(tool_listing, "valid_tools", noted)

    async with tool_server_over_http(transport) as port:
        config = ServerConfig.model_validate(
            {
                "url": f"http://127.0.0.1:{port}{path}",
                "type": "sse" if transport == "sse" else "http",
                "headers": {"X-Test": "1"},
                "autoApprove": ["echo"],  # another client's key: ignored, not an error
            }
        )
        async with ToolHub({"web": config}) as hub:
            tools = by_name(await hub.tools())
            assert text_of(await call(tools["web__echo"], text="over http")) == "over http"
        listed = [tool["name"] for tool in listings[0]["tools"]]
        assert "echo" in listed and len(listed) == len(tools)


async def test_an_answer_of_megabytes_after_progress_arrives_over_http_as_over_stdio() -> None:
    # With progress the answer comes as an event on a stream, which the SDK's client takes
    # up to 1 MiB by default: a picture of 2 MB failed and the server was restarted.
    async with tool_server_over_http("streamable-http") as port:
        async with ToolHub({"web": ServerConfig(url=f"http://127.0.0.1:{port}/mcp")}) as hub:
            tools = by_name(await hub.tools())
            updates: list[AgentToolResult] = []
            result = await call(tools["web__big_after_progress"], updates, chars=3_000_000)
            assert not result.is_error, text_of(result)
            assert "3,000,000 characters" in narrow(result.content[-1], TextContent).text
            assert [u.details["progress"] for u in updates] == [1]
            assert hub.connection("web").starts == 1


async def test_an_answer_over_the_bound_over_http_fails_its_call_saying_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from mcp_agent.proxy import downstream

    # A JSON body was read whole, however large (200 MB: 1 GB of memory); an event too.
    monkeypatch.setattr(downstream, "MAX_HTTP_MESSAGE", 1_000_000, raising=False)
    for flag, tool in (("json-http", "big"), ("streamable-http", "big_after_progress")):
        async with tool_server_over_http(flag) as port:
            async with ToolHub({"web": ServerConfig(url=f"http://127.0.0.1:{port}/mcp")}) as hub:
                tools = by_name(await hub.tools())
                result = await call(tools[f"web__{tool}"], chars=2_000_000)
                said = text_of(result)
                assert result.is_error and "1000000 byte" in said.replace(",", ""), said[:300]
                assert text_of(await call(tools["web__echo"], text="still")) == "still"


async def test_a_server_url_nothing_listens_on_is_named_in_the_refusal() -> None:
    # Said only "All connection attempts failed"; the URL is shown without its query, which
    # may hold a key (the message reaches the model, in the run's warnings).
    from mcp_support import free_port

    url = f"http://127.0.0.1:{free_port()}/mcp"
    async with ToolHub({"web": ServerConfig(url=url + "?key=secret")}) as hub:
        errors: list[str] = []
        await hub.tools(on_error=errors.append)
    assert errors == [
        f"MCP server 'web' could not be started: cannot connect to {url}:"
        " All connection attempts failed"
    ]


async def test_a_failed_start_is_remembered_for_a_while(tmp_path: Path) -> None:
    starts = tmp_path / "starts"  # the broken server adds a line each time it is started
    script = f"import sys; open({str(starts)!r}, 'a').write('started\\n'); sys.exit(1)"
    broken = ServerConfig(command=sys.executable, args=["-c", script])
    async with ToolHub({"broken": broken}) as hub:
        first: list[str] = []
        await hub.tools(on_error=first.append)
        again: list[str] = []
        await hub.tools(on_error=again.append)
        assert "could not be started" in first[0]
        assert "trying again after" in again[0]
    assert starts.read_text().splitlines() == ["started"]  # no second start


def test_a_result_with_text_no_utf8_holds_becomes_storable() -> None:
    # A server writing JSON (JSON.stringify, say) may send half a surrogate pair as "\ud800".
    import mcp.types as types

    from mcp_agent.messages import ToolResultMessage
    from mcp_agent.proxy.convert import to_agent_result

    result = types.CallToolResult(
        content=[types.TextContent(type="text", text="bad \ud800 end")],
        structured_content={"k\udc00": ["v \ud800"]},
    )
    converted = to_agent_result(result)
    assert text_of(converted) == "bad \ufffd end"
    assert converted.details == {"k\ufffd": ["v \ufffd"]}
    message = ToolResultMessage(
        tool_call_id="c", tool_name="t", content=list(converted.content), details=converted.details
    )
    assert "\ufffd" in message.model_dump_json()  # no error: it can be stored and sent


RAW_SERVER = Path(__file__).parent / "servers" / "raw_server.py"


async def test_a_result_that_is_not_valid_mcp_is_one_line_and_the_server_stays() -> None:
    """A server that is up but answers wrongly is not restarted (its other tools keep working),
    and the model reads one line saying what was wrong, not pydantic's page of union members."""
    config = ServerConfig(command=sys.executable, args=[str(RAW_SERVER)], timeout=5)
    async with ToolHub({"r": config}) as hub:
        tools = by_name(await hub.tools())
        pid = text_of(await call(tools["r__pid"]))
        bad = text_of(await call(tools["r__bad_result"]))
        assert bad == (
            "MCP server 'r' answered bad_result with a result that could not be used: "
            "not a valid CallToolResult: content.1.text: Field required"
        )
        wrong = text_of(await call(tools["r__wrong_structure"]))
        assert "\n" not in wrong and wrong.endswith("'not a number' is not of type 'integer'")
        assert text_of(await call(tools["r__good"])) == "fine"
        assert text_of(await call(tools["r__pid"])) == pid
        assert hub.connection("r").starts == 1


async def test_a_listed_tool_that_is_not_valid_mcp_is_left_out_and_the_others_kept(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The SDK refuses a tool listing whole for one bad tool: the server could not be used at
    all. Now that tool alone is left out, said in one line, and the others work."""
    import logging

    caplog.set_level(logging.WARNING)
    config = ServerConfig(command=sys.executable, args=[str(RAW_SERVER), "--bad-tool"])
    async with ToolHub({"r": config}) as hub:
        errors: list[str] = []
        tools = by_name(await hub.tools(on_error=errors.append))
        assert errors == [] and "r__no_schema" not in tools
        assert "r__good" in tools and "r__noisy" in tools
        assert text_of(await call(tools["r__good"])) == "fine"
    said = [r.getMessage() for r in caplog.records if "not valid MCP" in r.getMessage()]
    assert said == [
        "MCP server 'r' lists tool 'no_schema', which is not valid MCP, and it is left out: "
        "inputSchema: Field required"
    ]


async def test_a_tool_no_model_api_takes_is_left_out_and_the_others_kept(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A tool whose input schema is no JSON Schema was offered to the model, and OpenAI and
    Anthropic refuse a request with one: every run offered the server failed. A schema of
    100 KB went with every request."""
    import logging

    caplog.set_level(logging.WARNING)
    config = ServerConfig(command=sys.executable, args=[str(RAW_SERVER), "--bad-schemas"])
    async with ToolHub({"r": config}) as hub:
        tools = by_name(await hub.tools())
        assert "r__typed_12" not in tools and "r__huge" not in tools
        assert text_of(await call(tools["r__good"])) == "fine"
    said = [r.getMessage() for r in caplog.records if "left out" in r.getMessage()]
    assert len(said) == 2
    assert said[0].startswith("MCP server 'r' lists tool 'typed_12', whose input schema")
    assert "properties/x/type: 12 is not valid" in said[0]
    assert "'huge'" in said[1] and "past the 65,536 sent with every request" in said[1]


async def test_a_tool_listing_wrong_as_a_whole_still_says_so_in_one_line() -> None:
    config = ServerConfig(command=sys.executable, args=[str(RAW_SERVER), "--tools-not-a-list"])
    async with ToolHub({"r": config}) as hub:
        errors: list[str] = []
        assert await hub.tools(on_error=errors.append) == []
        assert errors == [
            "MCP server 'r' could not be started: not a valid ListToolsResult: "
            "tools: Input should be a valid list"
        ]


def test_the_images_and_blocks_of_one_result_are_bounded() -> None:
    """2,000 small images once made a 22 MB entry, sent again to the model every turn."""
    from mcp_agent.proxy.convert import (
        MAX_RESULT_BLOCKS,
        MAX_RESULT_IMAGE_CHARS,
        MAX_RESULT_IMAGES,
        to_agent_result,
    )

    small = types.ImageContent(data="A" * 8000, mime_type="image/png")
    many = to_agent_result(types.CallToolResult(content=[small] * 500))
    images = [block for block in many.content if isinstance(block, ImageContent)]
    assert len(images) == MAX_RESULT_IMAGES
    note = narrow(many.content[-1], TextContent).text
    assert note.startswith(f"[{500 - MAX_RESULT_IMAGES} more images (") and "left out" in note

    large = types.ImageContent(data="A" * (MAX_RESULT_IMAGE_CHARS // 3), mime_type="image/png")
    heavy = to_agent_result(types.CallToolResult(content=[large] * 5))
    kept = [block for block in heavy.content if isinstance(block, ImageContent)]
    assert sum(len(block.data) for block in kept) <= MAX_RESULT_IMAGE_CHARS and len(kept) == 3
    assert narrow(heavy.content[-1], TextContent).text.startswith("[2 more images (")

    empty = types.TextContent(text="")
    blocks = to_agent_result(types.CallToolResult(content=[empty] * 5000))
    assert len(blocks.content) == MAX_RESULT_BLOCKS + 1
    assert narrow(blocks.content[-1], TextContent).text == (
        f"[cut: the tool's result held 5,000 blocks; the first {MAX_RESULT_BLOCKS:,} are kept]"
    )


async def test_a_call_unanswered_after_a_line_that_could_not_be_read_says_so() -> None:
    """The SDK cannot tell which call a line it cannot read answered: the call waits its time
    limit, and its error then says what came meanwhile."""
    config = ServerConfig(command=sys.executable, args=[str(RAW_SERVER)], timeout=1)
    async with ToolHub({"r": config}) as hub:
        tools = by_name(await hub.tools())
        said = text_of(await call(tools["r__garbage"]))
        assert said.startswith(
            "MCP server 'r' did not answer garbage within 1 s (it sent what could not be read"
            " meanwhile: not a valid JSON-RPC message: (top level): Invalid JSON: "
        )
        assert "\n" not in said and said.endswith("will be restarted on the next call")
        assert text_of(await call(tools["r__good"])) == "fine"


async def test_an_answer_that_cannot_be_read_whose_id_can_fails_its_call_at_once() -> None:
    """JSON nested deeper than the SDK reads, or a result that is not an object: the call
    waited out its time limit, and the server, up all along, was then stopped."""
    config = ServerConfig(command=sys.executable, args=[str(RAW_SERVER)], timeout=30)
    async with ToolHub({"r": config}) as hub:
        tools = by_name(await hub.tools())
        pid = text_of(await call(tools["r__pid"]))
        with anyio.fail_after(5):
            deep = text_of(await call(tools["r__too_deep"]))
            not_an_object = text_of(await call(tools["r__not_an_object"]))
        assert deep.startswith(
            "MCP server 'r' answered too_deep, but its answer could not be read: Invalid JSON: "
            "recursion limit exceeded at line 1 column "
        )
        assert not_an_object == (
            "MCP server 'r' answered not_an_object, but its answer could not be read: it is not"
            " a valid JSON-RPC answer"
        )
        assert text_of(await call(tools["r__pid"])) == pid


async def test_tools_a_server_says_changed_are_listed_again(hub: ToolHub) -> None:
    """notifications/tools/list_changed: the next listing (a run's start) has the new tools,
    on the same server process."""
    tools = by_name(await hub.tools())
    pid = text_of(await call(tools["t__pid"]))
    assert "t__late" not in tools
    assert text_of(await call(tools["t__add_tool"], name="late")) == "added late"
    with anyio.fail_after(10):
        while "t__late" not in (tools := by_name(await hub.tools())):
            await anyio.sleep(0.02)  # the notification may come after the answer
    assert text_of(await call(tools["t__late"], text="hi")) == "late: hi"
    assert text_of(await call(tools["t__pid"])) == pid and hub.connection("t").starts == 1


async def test_tools_changed_are_heard_on_the_protocol_before_2026_too() -> None:
    """Before 2026-07-28 the server sends notifications/tools/list_changed unasked."""
    from mcp import Client, StdioServerParameters

    from mcp_agent.proxy.downstream import McpServerConnection

    params = StdioServerParameters(command=sys.executable, args=[str(SERVER)])
    connection = McpServerConnection(
        "t", lambda handler: Client(params, message_handler=handler, mode="legacy")
    )
    async with anyio.create_task_group() as group:
        before = {tool.name for tool in await connection.tools(group)}
        added = await connection.call(group, "add_tool", {"name": "late"}, time_limit=10)
        assert text_of(added) == "added late" and "late" not in before
        with anyio.fail_after(10):
            while "late" not in {tool.name for tool in await connection.tools(group)}:
                await anyio.sleep(0.02)
        assert connection.starts == 1
        await connection.stop()


async def test_a_server_printing_to_stdout_is_said_in_a_few_lines(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A server that prints debug lines to stdout: each one cost a logged traceback (the
    SDK's); now a line each for the first ten, and the answer after them still arrives."""
    import logging

    caplog.set_level(logging.WARNING)
    config = ServerConfig(command=sys.executable, args=[str(RAW_SERVER)], timeout=10)
    async with ToolHub({"r": config}) as hub:
        tools = by_name(await hub.tools())
        assert text_of(await call(tools["r__noisy"])) == "heard"
    said = [record for record in caplog.records if "could not be read" in record.getMessage()]
    assert len(said) == 10 and "(10 times)" in said[-1].getMessage()
    assert not [record for record in caplog.records if "Failed to parse" in record.getMessage()]


def raw_client(*args: str, max_line: int | None = None, handler: Any = None) -> Any:
    """An MCP client to the raw server over our stdio transport (not entered)."""
    from mcp import Client, StdioServerParameters

    from mcp_agent.proxy.child_stdio import child_stdio

    params = StdioServerParameters(command=sys.executable, args=[str(RAW_SERVER), *args])
    transport = child_stdio(params) if max_line is None else child_stdio(params, max_line)
    return Client(transport, message_handler=handler)


async def test_a_long_answer_arrives_whole_over_many_reads() -> None:
    """8 MB on one line: eight times the pipe, read as it comes (the SDK's transport joined its
    buffer to every 64 KB read, in time growing with the square of the line)."""
    async with raw_client() as client:
        result = await client.call_tool("long", {"size": 8_000_000})
        assert narrow(result.content[0], types.TextContent).text == "x" * 8_000_000
        assert (await client.call_tool("good", {})).content[0] == types.TextContent(text="fine")


async def test_a_line_over_the_bound_is_left_out_and_said_and_the_server_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A server writing a line without end must not fill our memory: past the bound the line
    is dropped as it comes. An answer fails its call at once, saying why (not at the end of its
    time limit); any other line is said as one that could not be read. The server goes on."""
    import logging

    from mcp_agent.proxy.downstream import McpServerConnection

    caplog.set_level(logging.WARNING)
    connection = McpServerConnection(
        "r", lambda handler: raw_client(max_line=100_000, handler=handler)
    )
    async with anyio.create_task_group() as group:
        fits = await connection.call(group, "long", {"size": 90_000}, time_limit=10)
        assert text_of(fits) == "x" * 90_000
        with anyio.fail_after(20):  # the call's own limit is ten times that
            said = text_of(await connection.call(group, "long", {"size": 300_000}, time_limit=200))
        assert said == (
            "MCP server 'r' answered long, but its answer is over 100,000 bytes on one line, the"
            " most that is read, and was left out unread"
        )
        noise = await connection.call(group, "long_noise", {"size": 300_000}, time_limit=10)
        assert text_of(noise) == "heard"
        assert text_of(await connection.call(group, "good", {}, time_limit=10)) == "fine"
        assert connection.starts == 1
        await connection.stop()
    said_lines = [r.getMessage() for r in caplog.records if "could not be read" in r.getMessage()]
    assert said_lines == [
        "MCP server 'r' sent what could not be read (once): a line of over 100,000 bytes was"
        " left out unread"
    ]


async def test_what_a_server_started_and_left_running_is_stopped_with_it(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    with anyio.fail_after(20):
        async with raw_client("--leaves-child", str(pids)) as client:
            assert (await client.call_tool("good", {})).content[0] == types.TextContent(text="fine")
            server, child = (int(pid) for pid in pids.read_text().split())
            assert alive(server) and alive(child)
        assert not alive(server)  # it ended by itself at the end of its input
        while alive(child):  # its group was sent SIGTERM (not ours to reap)
            await anyio.sleep(0.05)


async def test_a_server_deaf_to_its_input_ending_and_to_sigterm_is_killed_with_its_children(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mcp_agent.proxy import child_stdio

    monkeypatch.setattr(child_stdio, "CLOSE_GRACE", 0.5)
    monkeypatch.setattr(child_stdio, "FORCE_KILL", 0.5)
    pids = tmp_path / "pids"
    with anyio.fail_after(20):
        async with raw_client("--stubborn", str(pids)) as client:
            assert (await client.call_tool("good", {})).content[0] == types.TextContent(text="fine")
            server, child = (int(pid) for pid in pids.read_text().split())
            assert alive(server) and alive(child)
        assert not alive(server)  # reaped: the transport waited for it
        while alive(child):  # its own child, not ours to reap: killed with the group
            await anyio.sleep(0.05)


@pytest.mark.parametrize("when", ["before", "during"])
async def test_a_hurried_stop_cuts_every_grace_short(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, when: str
) -> None:
    """The server told to stop (SIGTERM) hurries its downstream servers' stops, those to come
    and those under way: a deaf one is killed within HURRIED_KILL seconds of it, however long
    its graces, so that it does not outlive a client that kills the server soon after."""
    from mcp_agent.proxy import child_stdio

    monkeypatch.setattr(child_stdio, "CLOSE_GRACE", 600.0)
    monkeypatch.setattr(child_stdio, "FORCE_KILL", 600.0)
    monkeypatch.setattr(child_stdio._Hurry, "since", None)
    pids = tmp_path / "pids"
    with anyio.fail_after(60):  # unhurried, the graces would take 20 minutes
        async with anyio.create_task_group() as group:
            async with raw_client("--stubborn", str(pids)) as client:
                assert (await client.call_tool("good", {})).is_error is False
                server, child = (int(pid) for pid in pids.read_text().split())
                if when == "before":
                    child_stdio.hurry_stops()
                else:

                    async def hurry_soon() -> None:
                        await anyio.sleep(0.5)  # the stop is waiting out its first grace
                        assert alive(server)
                        child_stdio.hurry_stops()

                    group.start_soon(hurry_soon)
        assert not alive(server)
        while alive(child):
            await anyio.sleep(0.05)
