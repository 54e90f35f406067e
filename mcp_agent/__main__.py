"""``python -m mcp_agent`` and the ``mcp-agent-sessions`` command: the command line, started
with the cyclic collector off (see ``run``)."""

from __future__ import annotations

import gc


def run() -> None:
    """The command line, from its first import with the collector off: what a command imports
    (typer, pydantic; for ``serve`` the SDK, our modules and the tools' schemas) lives as long
    as the process, and the collector ran through it some 260 times before a server's first
    answer, freeing almost nothing. Every command but ``serve`` turns it on as it starts
    (``mcp_agent.cli._root``); ``serve`` once the server is built (``tune_collector``).

    And frozen as the command ends, whatever ends it: the interpreter's teardown runs full
    collections over every object still alive (typer's, pydantic's, the SDK's), which were a
    quarter of the CPU of ``sessions list`` and a fifth of a process that imported the SDK,
    and find nothing to free that the end of the process would not."""
    gc.disable()
    from mcp_agent.cli import main

    try:
        main()
    finally:
        gc.freeze()


if __name__ == "__main__":
    run()
