"""A server replica for the replica tests: ``serve --transport http --no-auth`` on a PostgreSQL
database, with the test models (``slow…`` streams for about ten seconds). Usage:
``python tests/replica_server.py URL PORT``."""

from __future__ import annotations

import sys
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent))

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
from mcp_agent.server.app import build_server
from mcp_agent.server.streamable_http import serve_http


def responder(context: LlmContext) -> ScriptedResponse:
    text = content_text(context.messages[-1].content)
    if text.startswith("slow"):
        return reply("word " * 200, delay=0.05, chunk_size=5)
    return reply(f"echo: {text}")


def main() -> None:
    url, port, folder = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3])
    settings = ServerSettings(
        db_url=url,
        port=port,
        no_auth=True,
        manifests_dir=write_manifests(folder / "manifests", TEST_AGENTS, None),
        default_model="scripted",
    )
    models: ModelOverrides = {
        "scripted": lambda: (scripted_model("scripted"), ScriptedProvider(responder))
    }
    anyio.run(serve_http, build_server(settings, models=models), settings)


if __name__ == "__main__":
    main()
