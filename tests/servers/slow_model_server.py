"""Our HTTP server (``serve --transport http --no-auth``) on a SQLite database in FOLDER, with a
scripted model that takes its time: ``silent S`` says nothing for S seconds and then answers,
``slow N`` streams N characters one at a time, 50 ms apart, ``flood N`` N pieces of 200
characters, each after a pause a thousand times shorter, anything else is echoed. Usage:
``python tests/servers/slow_model_server.py PORT FOLDER [PROGRESS_INTERVAL]``."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mcp_support import TEST_AGENTS, write_manifests

from mcp_agent.messages import content_text
from mcp_agent.providers.base import LlmContext
from mcp_agent.providers.scripted import (
    ScriptedProvider,
    ScriptedResponse,
    reply,
    scripted_model,
)
from mcp_agent.runtime.models import ModelOverrides
from mcp_agent.runtime.settings import ServerSettings
from mcp_agent.server import streamable_http
from mcp_agent.server.app import build_server
from mcp_agent.server.streamable_http import serve_http


async def responder(context: LlmContext) -> ScriptedResponse:
    text = content_text(context.messages[-1].content)
    word, _, number = text.partition(" ")
    if word == "silent":
        await anyio.sleep(float(number))
        return reply(f"done after {number} s of silence")
    if word == "slow":
        return reply("w" * int(number), delay=0.05, chunk_size=1)
    if word == "flood":
        return reply("f" * 200 * int(number), delay=0.00005, chunk_size=200)
    return reply(f"echo: {text}")


def main() -> None:
    port, folder = int(sys.argv[1]), Path(sys.argv[2])
    if "SLOW_SERVER_MAX_IN_FLIGHT" in os.environ:  # a bound a test can reach
        streamable_http.MAX_IN_FLIGHT = int(os.environ["SLOW_SERVER_MAX_IN_FLIGHT"])
    extra: dict[str, Any] = {}
    if len(sys.argv) > 3:
        extra["progress_interval"] = float(sys.argv[3])
    settings = ServerSettings(
        db_path=folder / "sessions.db",
        port=port,
        no_auth=True,
        manifests_dir=write_manifests(folder / "manifests", TEST_AGENTS, None),
        default_model="scripted",
        **extra,
    )
    models: ModelOverrides = {
        "scripted": lambda: (scripted_model("scripted"), ScriptedProvider(responder))
    }
    anyio.run(serve_http, build_server(settings, models=models), settings)


if __name__ == "__main__":
    main()
