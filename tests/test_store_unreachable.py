"""A session store whose folder stops being readable while a real server serves it (as an
unprivileged user: root reads through permissions): each call is refused naming the file
and the reason, the server lives on, and serves again once the folder is back."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from test_unreadable import StdioServer

NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
HERE = Path(__file__).parent


class NobodyServer(StdioServer):
    def __init__(self, home: Path, *args: str) -> None:
        env = {**os.environ, "HOME": str(home), "TMPDIR": str(home)}
        env["PYTHONPATH"] = str(HERE.parent)
        self.process = subprocess.Popen(
            [*NOBODY, sys.executable, "-m", "mcp_agent", "serve", *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            bufsize=0,
            env=env,
            cwd=home,
        )
        self.ids = iter(range(1, 1 << 30))
        hello = {"protocolVersion": "2025-06-18", "capabilities": {}}
        hello["clientInfo"] = {"name": "nobody", "version": "1"}
        self.send(json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": hello}))
        self.answer()
        self.send(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}))

    def call(self, tool: str, **arguments: Any) -> dict[str, Any]:
        params = {"name": tool, "arguments": arguments}
        message = {"jsonrpc": "2.0", "id": next(self.ids), "method": "tools/call"}
        self.send(json.dumps({**message, "params": params}))
        result: dict[str, Any] = self.answer()["result"]
        return result


@pytest.mark.parametrize("store", ["sqlite", "jsonl"])
def test_a_folder_made_unreadable_while_served_is_said_naming_the_file(store: str) -> None:
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to become another user")
    top = Path(tempfile.mkdtemp(prefix="unreachable-"))  # where user nobody may look
    try:
        top.chmod(0o755)
        home, folder = top / "home", top / "store"
        for made in (home, folder):
            made.mkdir()
            os.chown(made, 65534, 65534)
        args = ["--db", str(folder / "s.db")]
        if store == "jsonl":
            args = ["--sessions-dir", str(folder), "--db", str(home / "leases.db")]
        server = NobodyServer(home, *args)
        try:
            created = server.call("session_create", name="kept")
            if created.get("isError"):
                pytest.skip(f"user nobody may not run this here: {created}")
            session_id = created["structuredContent"]["id"]
            entry = {"type": "message", "role": "user", "content": "hello"}
            assert not server.call("session_append", session_id=session_id, entry=entry)["isError"]
            folder.chmod(0)
            for tool, arguments in (
                ("session_append", {"session_id": session_id, "entry": entry}),
                ("session_create", {"name": "new"}),
                ("session_delete", {"session_id": session_id}),
            ):
                result = server.call(tool, **arguments)
                text = result["content"][0]["text"]
                assert result["isError"] and "Permission denied" in text, (tool, text)
                assert str(folder) in text, text
            folder.chmod(0o755)
            again = server.call("session_append", session_id=session_id, entry=entry)
            assert not again["isError"], again
        finally:
            folder.chmod(0o755)
            said = server.stop()
        assert "Traceback" not in said, said
    finally:
        shutil.rmtree(top, ignore_errors=True)
