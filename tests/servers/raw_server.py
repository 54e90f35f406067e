"""A downstream server that answers JSON-RPC by hand, for answers no SDK server would send:
results that are not valid MCP. Run as a real child process over stdio.

``tools/list`` lists ``good``, ``bad_result`` (a text block without its text),
``wrong_structure`` (structured content its output schema refuses), ``garbage`` (answered
with a line that is not JSON, and never otherwise), ``noisy`` (50 lines that are not JSON, then
its answer), ``long`` (a text of ``size`` characters, on one line of at least that many bytes),
``long_noise`` (a line of ``size`` bytes that is not JSON-RPC, then its answer),
``too_deep`` (an answer, its id whole, nested deeper than the SDK reads JSON), ``not_an_object``
(an answer whose result is a number), ``stall`` (never answered: the server writes ``path``
and then sleeps, reading nothing, as a server busy with a call) and ``pid``; with ``--bad-tool`` it also lists a tool without an input schema, with
``--tools-not-a-list`` its listing is an object instead of a list. With
``--stubborn FILE`` it neither ends at the end of its input nor at SIGTERM, and starts a
child of its own that does neither (only SIGKILL stops them), and writes both their process
ids to FILE. With ``--leaves-child FILE`` it starts a child of its own that it leaves running
when it ends (as a server that starts helpers and forgets them), and writes both process ids.
"""

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

TOOLS = [
    {"name": "good", "inputSchema": {"type": "object"}},
    {"name": "bad_result", "inputSchema": {"type": "object"}},
    {
        "name": "wrong_structure",
        "inputSchema": {"type": "object"},
        "outputSchema": {
            "type": "object",
            "properties": {"n": {"type": "integer"}},
            "required": ["n"],
        },
    },
    {"name": "pid", "inputSchema": {"type": "object"}},
    {"name": "garbage", "inputSchema": {"type": "object"}},
    {"name": "noisy", "inputSchema": {"type": "object"}},
    {"name": "long", "inputSchema": {"type": "object"}},
    {"name": "long_noise", "inputSchema": {"type": "object"}},
    {"name": "too_deep", "inputSchema": {"type": "object"}},
    {"name": "not_an_object", "inputSchema": {"type": "object"}},
    {"name": "stall", "inputSchema": {"type": "object"}},
]
RESULTS: dict[str, dict[str, Any]] = {
    "good": {"content": [{"type": "text", "text": "fine"}]},
    "noisy": {"content": [{"type": "text", "text": "heard"}]},
    "bad_result": {"content": [{"type": "text", "text": "kept"}, {"type": "text"}]},
    "wrong_structure": {
        "content": [{"type": "text", "text": "{}"}],
        "structuredContent": {"n": "not a number"},
    },
}


def answer(message: dict[str, Any]) -> dict[str, Any] | None:
    result: dict[str, Any]
    method = message.get("method")
    if "id" not in message:
        return None  # a notification
    if method == "initialize":
        result = {
            "protocolVersion": message["params"]["protocolVersion"],
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "raw", "version": "1"},
        }
    elif method == "tools/list":
        tools = ([{"name": "no_schema"}] if "--bad-tool" in sys.argv else []) + TOOLS
        if "--bad-schemas" in sys.argv:  # valid MCP, but no model API takes them
            huge = {f"p{n}": {"type": "string", "description": "x" * 100} for n in range(1000)}
            tools = [
                {
                    "name": "typed_12",
                    "inputSchema": {"type": "object", "properties": {"x": {"type": 12}}},
                },
                {"name": "huge", "inputSchema": {"type": "object", "properties": huge}},
                *tools,
            ]
        result = {"tools": {"good": TOOLS[0]} if "--tools-not-a-list" in sys.argv else tools}
    elif method == "tools/call":
        name = message["params"]["name"]
        if name == "noisy":
            sys.stdout.write("debug output, not JSON-RPC\n" * 50)
        if name == "garbage":
            return {"not json": ...}
        if name == "long_noise":
            sys.stdout.write("x" * message["params"]["arguments"]["size"] + "\n")
            result = {"content": [{"type": "text", "text": "heard"}]}
        elif name == "long":
            text = "x" * message["params"]["arguments"]["size"]
            result = {"content": [{"type": "text", "text": text}]}
        elif name == "too_deep":
            result = {"content": [{"type": "text", "text": "deep"}], "_meta": {"x": [[]]}}
        elif name == "not_an_object":
            result = 5  # type: ignore[assignment]
        elif name == "stall":
            Path(message["params"]["arguments"]["path"]).write_text("stalled")
            time.sleep(600)
            raise SystemExit(1)
        elif name == "pid":
            result = {"content": [{"type": "text", "text": str(os.getpid())}]}
        else:
            result = RESULTS[name]
    else:
        error = {"code": -32601, "message": f"no method {method}"}
        return {"jsonrpc": "2.0", "id": message["id"], "error": error}
    return {"jsonrpc": "2.0", "id": message["id"], "result": result}


if "--stubborn" in sys.argv:
    import signal
    import subprocess

    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    ignoring = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"
    child = subprocess.Popen([sys.executable, "-c", ignoring], stdin=subprocess.DEVNULL)
    pids = sys.argv[sys.argv.index("--stubborn") + 1]
    Path(pids).write_text(f"{os.getpid()} {child.pid}")

if "--leaves-child" in sys.argv:
    import subprocess

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    pids = sys.argv[sys.argv.index("--leaves-child") + 1]
    Path(pids).write_text(f"{os.getpid()} {child.pid}")

for line in sys.stdin:
    reply = answer(json.loads(line))
    if reply is not None:
        text = "{this is not json" if "not json" in reply else json.dumps(reply)
        sys.stdout.write(text.replace("[[]]", "[" * 300 + "]" * 300) + "\n")
        sys.stdout.flush()

if "--stubborn" in sys.argv:
    time.sleep(600)
