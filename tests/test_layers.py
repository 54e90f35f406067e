"""The layers of the package: each imports only those below it (ARCHITECTURE.md).

messages < sessions < compaction < agent < runtime < {server, cli}; providers < loop. The agent
(pi's packages/agent: messages, tools, events, state, loop, agent) knows no sessions; the
runtime knows no MCP server; the command line uses the runtime, and the server only to serve.
Every import counts, also those inside functions and under TYPE_CHECKING."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "mcp_agent"

# A module's layer: the first name below mcp_agent, with the small shared modules grouped.
GROUPS = {
    "abort": "base",
    "outages": "base",
    "blocking": "base",
    "paths": "base",
    "wire": "base",
    "pipes": "base",
    "streams": "base",
    "tools": "agent_types",
    "events": "agent_types",
    "state": "agent_types",
}
BASE = {"base"}
AGENT_TYPES = {*BASE, "messages", "agent_types"}
ALLOWED: dict[str, set[str]] = {
    "base": set(),
    "messages": BASE,
    "agent_types": {*BASE, "messages"},
    "manifests": {*BASE, "messages"},
    "providers": AGENT_TYPES,
    "sessions": {*BASE, "messages"},
    "loop": {*AGENT_TYPES, "providers"},
    "agent": {*AGENT_TYPES, "providers", "loop"},
    "compaction": {*AGENT_TYPES, "providers", "sessions"},
    "proxy": {*AGENT_TYPES, "manifests"},
    "runtime": {
        *AGENT_TYPES,
        "providers",
        "loop",
        "agent",
        "sessions",
        "compaction",
        "manifests",
        "proxy",
    },
    "server": {
        *AGENT_TYPES,
        "providers",
        "sessions",
        "compaction",
        "manifests",
        "proxy",
        "runtime",
        "root",
    },
    "cli": {
        *AGENT_TYPES,
        "providers",
        "loop",
        "agent",
        "sessions",
        "compaction",
        "manifests",
        "runtime",
        "root",
    },
    "__main__": {"cli"},
    "root": set(),  # the facade: it names everything, lazily (see below)
}
# The one place the command line reaches into the server: to serve it.
EXCEPTIONS = {("cli/serve.py", "server")}


def layer_of(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "mcp_agent":
        return None
    if len(parts) == 1:
        return "root"
    return GROUPS.get(parts[1], parts[1])


def imports(path: Path) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
        elif isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
    return found


def modules() -> list[Path]:
    return sorted(
        p for p in PACKAGE.rglob("*.py") if p.name != "__init__.py" or p.parent != PACKAGE
    )


@pytest.mark.parametrize("path", modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_imports_only_from_the_layers_below(path: Path) -> None:
    relative = path.relative_to(PACKAGE)
    module = ".".join(("mcp_agent", *relative.with_suffix("").parts))
    own = layer_of(module.removesuffix(".__init__"))
    assert own in ALLOWED, f"{relative}: no layer is known for it; add it to ALLOWED"
    wrong = [
        f"{relative}:{line} imports {target}"
        for line, target in imports(path)
        if (other := layer_of(target)) is not None
        and other != own
        and other not in ALLOWED[own]
        and (relative.as_posix(), other) not in EXCEPTIONS
    ]
    assert not wrong, "imports that break the layers:\n" + "\n".join(wrong)


def test_the_facade_imports_nothing_eagerly() -> None:
    """``import mcp_agent`` (and so every command of the CLI) loads none of the package: the
    public names are looked up when first used."""
    tree = ast.parse((PACKAGE / "__init__.py").read_text(encoding="utf-8"))
    eager = [
        node.module
        for node in tree.body
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("mcp_agent")
    ]
    assert not eager


def test_the_layer_table_finds_a_broken_import(tmp_path: Path) -> None:
    """The check itself can fail: a sessions module that imports the agent is caught."""
    bad = tmp_path / "bad.py"
    bad.write_text("from mcp_agent.agent import Agent\n", encoding="utf-8")
    [(_line, target)] = imports(bad)
    assert layer_of(target) not in ALLOWED["sessions"]


def test_every_public_name_resolves() -> None:
    import mcp_agent

    assert set(mcp_agent.__all__) == {"__version__", *mcp_agent._EXPORTS}
    for name in mcp_agent.__all__:
        assert getattr(mcp_agent, name) is not None, name
