"""``models``: the model registry, with context windows and prices."""

from __future__ import annotations

import os
import textwrap
from typing import Any

from mcp_agent.cli.common import PROG, JsonOption, die, emit_json, out, print_table
from mcp_agent.paths import shown_url


def models(as_json: JsonOption = False) -> None:
    """The known models: context window, output limit and price per million tokens."""
    from mcp_agent.cli.demo import DEMO_MODEL
    from mcp_agent.providers.registry import ModelRegistryError, default_registry, list_models

    try:
        listed = list_models()
        providers = default_registry().providers
    except ModelRegistryError as error:
        die(f"{error} (fix the models file, or point MCP_AGENT_MODELS elsewhere)")
    provider_rows = [
        {
            "name": p.name,
            "api": p.api,
            "label": p.label,
            "baseUrl": shown_url(p.resolved_base_url() or "") or None,
            "apiKeyEnv": p.api_key_env,
            "apiKeySet": bool(p.api_key or (p.api_key_env and os.environ.get(p.api_key_env))),
            "listedModels": len(p.models),
        }
        for p in providers.values()
    ]
    if as_json:
        model_rows = [{"ref": m.ref, **m.to_json_dict()} for m in listed]
        emit_json({"models": model_rows, "providers": provider_rows, "cliModels": [DEMO_MODEL]})
        return
    ready = {row["name"]: row["apiKeySet"] or not row["apiKeyEnv"] for row in provider_rows}
    rows = [
        (
            [
                model.ref,
                f"{model.context_window:,}",
                f"{model.max_tokens:,}",
                _price(model.cost.input),
                _price(model.cost.output),
                _price(model.cost.cache_read),
                "yes" if model.reasoning else "",
            ],
            None if ready.get(model.provider, True) else "dim",
        )
        for model in listed
    ]
    # Headers no wider than their figures (the prices' unit is said below), so that the
    # built-in models fit 80 columns, one line each; no column is cut: the model ids are what
    # --model takes (cut, anthropic:claude-opus-4-5 and -4-1 both read anthropic:claude-op…).
    headers = ["Model", "Context", "Max out", "In", "Out", "Cached", "Think"]
    print_table(headers, rows, flexible=None, right=frozenset(headers[1:6]))
    notes = ["In, Out, Cached: dollars per million tokens; Think: a reasoning model"]
    notes += [_provider_note(row) for row in provider_rows]
    notes.append(f"{DEMO_MODEL}: the scripted model of `{PROG} demo` (no key)")
    console = out()
    width = max(console.width, 40)
    wrapped = [
        textwrap.fill(n, width, subsequent_indent="  ", break_on_hyphens=False) for n in notes
    ]
    console.print("\n" + "\n".join(w for w in wrapped if w), style="dim", soft_wrap=True)


def _price(value: float) -> str:
    return f"{value:g}" if value else "—"


def _provider_note(row: dict[str, Any]) -> str:
    name, env = row["name"], row["apiKeyEnv"]
    if env:
        state = "set" if row["apiKeySet"] else "not set (its models are dimmed)"
        return f"{name}: key {env} {state}; any {name}:<model-id> works with default limits"
    if row["api"] == "mcp-sampling":
        return "client / sampling: the MCP client's own model (only through an MCP client)"
    if row["api"] == "scripted":
        return "scripted:echo: repeats your message (for trying things without a key)"
    return f"{name}:<model-id>: {row['label']} at {row['baseUrl']}"
