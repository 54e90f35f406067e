"""``demo``: a scripted walk-through that needs no API key, and the scripted model behind it.

The model is the only make-believe part: ``scripted:demo`` answers from the conversation by
rule. The server is the real one, started as a child process and spoken to over stdio; the
tool call goes through MCP to the built-in ``subagent`` tool, which runs a second agent in a
child session; the sessions are stored in a real (temporary) SQLite file.
"""

from __future__ import annotations

import re
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from mcp_agent.cli.common import FAILED, PROG, OutputClosed, err, fail, out, single

if TYPE_CHECKING:
    from mcp import Client

    from mcp_agent.providers.base import LlmContext
    from mcp_agent.providers.scripted import ScriptedResponse
    from mcp_agent.runtime.models import ModelChoice, ModelOverrides

DEMO_MODEL = "scripted:demo"
DEMO_AGENTS = {
    "assistant": (
        'description = "Answers by delegating to the helper (scripted demo)."\n'
        'tools = ["subagent"]\n'
    ),
    "helper": 'description = "Counts words (scripted demo)."\ntools = []\n',
}
QUESTIONS = (
    "How many words are in: the quick brown fox jumps over the lazy dog",
    "How many words are in: to be or not to be",
)


# --- the scripted model -----------------------------------------------------------------------


def demo_responder(context: LlmContext) -> ScriptedResponse:
    """An agent with the ``subagent`` tool hands the question to the helper, then reports its
    answer; an agent without tools (the helper) counts the words after the colon."""
    from mcp_agent.messages import ToolResultMessage, UserMessage
    from mcp_agent.providers.scripted import reply, tool_call

    last = context.messages[-1] if context.messages else None
    if isinstance(last, ToolResultMessage):
        return reply(f"The helper agent says: {_answer_of(last.text)}")
    question = last.text if isinstance(last, UserMessage) else ""
    if any(tool.name == "subagent" for tool in context.tools or ()):
        return reply(
            "Let me ask the helper agent.",
            tool_call("subagent", {"agent": "helper", "task": question}),
        )
    words = re.findall(r"[\w']+", question.partition(":")[2] or question)
    return reply(f"{len(words)} words ({sum(map(len, words))} letters).")


def _answer_of(text: str) -> str:
    """The answer of a subagent result: its text before the line of facts after it."""
    answer, facts, _ = text.rpartition("\n\n[sub-agent ")
    return answer if facts else text


def demo_model_choice() -> ModelChoice:
    from mcp_agent.providers.scripted import ScriptedProvider, scripted_model

    return scripted_model("demo"), ScriptedProvider(demo_responder, chunk_size=8)


def cli_models() -> ModelOverrides:
    """Models the command line serves besides the registry's: ``scripted:demo``."""
    return {DEMO_MODEL: demo_model_choice}


# --- the walk-through -------------------------------------------------------------------------


def demo(
    keep: Annotated[
        bool, typer.Option("--keep", help="keep the demo database and print its path")
    ] = False,
) -> None:
    """A scripted walk-through, no API key needed: server, tool call over MCP, branch, tree.

    The server starts as a child process over stdio; an agent calls the built-in subagent
    tool; the session branches; the tree is printed. Only the model is scripted."""
    import anyio

    folder = Path(tempfile.mkdtemp(prefix="mcp-agent-demo-"))
    started = time.monotonic()
    try:
        code = anyio.run(_walk_through, folder)
    except Exception as error:
        if isinstance(single(error), OutputClosed):  # `| head` has what it wanted: no failure
            raise single(error) from None
        log = folder / "server.log"
        server_said = log.read_text(encoding="utf-8").strip() if log.exists() else ""
        last = f" (the server said: {server_said.splitlines()[-1]})" if server_said else ""
        raise fail(f"the demo failed: {single(error)}{last}", FAILED) from None
    finally:
        if not keep:
            import shutil

            shutil.rmtree(folder, ignore_errors=True)
    if code:
        raise typer.Exit(code)
    err().print(f"\ndone in {time.monotonic() - started:.1f} s", style="dim")
    if keep:
        db = folder / "demo.db"
        out().print(f"\nThe demo database is kept: {PROG} sessions list --db {db}", soft_wrap=True)


def _step(number: int, title: str) -> None:
    out().print(f"\n{number}. {title}", style="bold", soft_wrap=True)


def _say(text: str, style: str = "") -> None:
    """``text`` indented, wrapped at the terminal's width with its indent kept."""
    from rich.text import Text

    console = out()
    for line in Text(text, style=style).wrap(console, max(20, console.width - 3)):
        line.rstrip()
        console.print(Text("   ").append_text(line), soft_wrap=True)


def _say_cut(text: str, style: str = "") -> None:
    """``text`` indented, on one line cut at the terminal's width with an ellipsis (a tool
    call's arguments: the tree at the end shows them)."""
    from rich.text import Text

    out().print(Text(f"   {text}", style=style), no_wrap=True, overflow="ellipsis")


async def _walk_through(folder: Path) -> int:
    import os

    from mcp import Client, StdioServerParameters
    from mcp.client.stdio import stdio_client

    out().print("mcp-agent-sessions demo — scripted, no API key needed", style="bold magenta")
    _say(
        f"The model is a script ({DEMO_MODEL}); the server, MCP, tools and SQLite are real.",
        "dim",
    )
    manifests = folder / "manifests"
    (manifests / "agents").mkdir(parents=True)
    (manifests / "servers.json").write_text('{"mcpServers": {}}\n', encoding="utf-8")
    for name, text in DEMO_AGENTS.items():
        (manifests / "agents" / f"{name}.toml").write_text(text, encoding="utf-8")
    db = folder / "demo.db"
    args = ["-m", "mcp_agent", "serve", "--db", str(db), "--manifests", str(manifests)]
    args += ["--model", DEMO_MODEL]
    _step(1, "Start the server as a child process, over stdio")
    _say(f"$ python -m mcp_agent serve --db {db.name} --manifests … --model {DEMO_MODEL}", "dim")
    # The whole environment (the SDK passes only a few variables by default), so that the
    # child finds this interpreter's packages however it was set up.
    params = StdioServerParameters(command=sys.executable, args=args, env=dict(os.environ))
    log_path = folder / "server.log"
    with log_path.open("w", encoding="utf-8") as log:
        async with Client(stdio_client(params, errlog=log)) as client:
            return await _conversation(client, log_path)


async def _conversation(client: Client, log_path: Path) -> int:
    from rich.text import Text

    from mcp_agent.cli.render import tree_view
    from mcp_agent.sessions.entries import parse_entry
    from mcp_agent.sessions.session import TreeNode

    listed = await client.list_tools()
    names = sorted(tool.name for tool in listed.tools)
    import anyio

    banner = (await anyio.Path(log_path).read_text(encoding="utf-8")).strip().splitlines()
    if banner:
        _say(f"server: {banner[0]}", "dim")
    _say(f"{len(names)} tools: {', '.join(names[:6])}, …")

    _step(2, "agent_run: the agent calls a tool (the built-in subagent tool, through MCP)")
    first = await _run(client, QUESTIONS[0])
    if first is None:
        return 1
    session_id = first["sessionId"]
    branch = await _call(client, "session_get", session_id=session_id, view="branch")
    for entry in branch["entries"]:
        if entry.get("type") == "custom" and entry.get("customType") == "subagent":
            child = entry.get("data", {}).get("sessionId")
            _say(f"the helper worked in a child session of its own: {child}", "dim")

    _step(3, "Branch: move the leaf back before the question, then ask another")
    question = next(e for e in branch["entries"] if e.get("message", {}).get("role") == "user")
    target = question["parentId"]
    _say(f"session_move_to(entry_id={target!r})  (the entry before the first question)")
    await _call(client, "session_move_to", session_id=session_id, entry_id=target)
    if await _run(client, QUESTIONS[1], session_id) is None:
        return 1

    _step(4, "The session tree (session_get view=tree): two branches from one point")
    view = await _call(client, "session_get", session_id=session_id, view="tree", limit=0)
    every = await _call(client, "session_get", session_id=session_id, view="entries", limit=0)
    entries = {item["id"]: parse_entry(item) for item in every["entries"]}
    roots = _tree_nodes(view["nodes"], entries, TreeNode)
    heading = Text(f"Session {session_id}", "bold")
    out().print(tree_view(roots, view.get("leafId"), heading, width=out().width))
    return 0


async def _run(client: Client, prompt: str, session_id: str | None = None) -> dict[str, Any] | None:
    """agent_run, showing tool calls as their progress notifications arrive."""
    _say(f"agent_run(prompt={prompt!r}{', session_id=…' if session_id else ''})")

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        kind, _, text = (message or "").partition(": ")
        if kind in ("tool_execution_start", "tool_execution_end"):
            _say_cut(f"  {text}", "yellow")

    arguments: dict[str, Any] = {"prompt": prompt, "agent": "assistant"}
    if session_id:
        arguments["session_id"] = session_id
    result = await client.call_tool("agent_run", arguments, progress_callback=on_progress)
    if result.is_error or not result.structured_content:
        message = getattr(result.content[0], "text", "") if result.content else "no result"
        err().print(f"{PROG}: demo: agent_run failed: {message}")
        return None
    info = dict(result.structured_content)
    _say(f"assistant: {info['answer']}", "green")
    _say(f"session {info['sessionId']} · {info['newMessages']} new messages", "dim")
    return info


async def _call(client: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    result = await client.call_tool(tool, arguments)
    if result.is_error or result.structured_content is None:
        text = getattr(result.content[0], "text", "") if result.content else "no result"
        raise RuntimeError(f"{tool} failed: {text}")
    return dict(result.structured_content)


def _tree_nodes(nodes: list[dict[str, Any]], entries: dict[str, Any], node_class: Any) -> list[Any]:
    """TreeNodes from session_get's flat tree nodes (parent by id; a node names only its first
    children, so each is put under its parent) and the entries they stand for."""
    built = {n["id"]: node_class(entries[n["id"]], n.get("label")) for n in nodes}
    for n in nodes:
        parent = built.get(n["parentId"]) if n["parentId"] is not None else None
        if parent is not None:
            parent.children.append(built[n["id"]])
    return [built[n["id"]] for n in nodes if n["parentId"] is None]
