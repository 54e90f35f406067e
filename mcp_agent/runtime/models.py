"""Which model a run uses: the caller's choice, the agent's, the server's default, or the first
provider with a key; ``client`` means the MCP client's own model (sampling, legacy only)."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from mcp_agent.messages import Model
from mcp_agent.providers.base import StreamFn
from mcp_agent.runtime.errors import ModelUnavailable

if TYPE_CHECKING:
    from mcp_agent.providers.sampling import ClientChannel

ModelChoice = tuple[Model, StreamFn]
# Tests and embedders can serve names of their own (e.g. a scripted model).
ModelOverrides = Mapping[str, Callable[[], ModelChoice]]

CLIENT_MODEL = "client"
# The provider the client's model is recorded under in a session (providers/sampling.py's
# SAMPLING_PROVIDER; that module is imported only when a run asks the client's model).
SAMPLING_PROVIDER = "sampling"


def is_client_model(name: str) -> bool:
    """Whether ``name`` is the MCP client's own model (sampling): ``client``, ``client:ID``, or
    ``sampling:ID``, the name a session records for it, which a run continuing the session
    resumes. Only the client that asked for a run can answer it."""
    return name.partition(":")[0] in (CLIENT_MODEL, SAMPLING_PROVIDER)


def default_model_name(configured: str | None) -> str:
    if configured:
        return configured
    if os.environ.get("OPENAI_API_KEY"):
        return "openai:gpt-4o-mini"
    if os.environ.get("ANTHROPIC_API_KEY"):
        return "anthropic:claude-sonnet-4-5"
    return CLIENT_MODEL


def resolve_run_model(
    name: str | None,
    configured_default: str | None,
    client: ClientChannel | None,
    overrides: ModelOverrides | None = None,
) -> tuple[str, Model, StreamFn]:
    """(name, model, stream function) for a run, or ModelUnavailable saying how to fix the name.
    ``client`` is the MCP client connection that asked for the run, for its model (sampling)."""
    chosen = name or default_model_name(configured_default)
    if overrides and chosen in overrides:
        model, stream_fn = overrides[chosen]()
        return chosen, model, stream_fn
    if is_client_model(chosen):
        from mcp_agent.providers.sampling import (
            sampling_model,
            sampling_stream_fn,
            sampling_support,
            unavailable_message,
        )

        usable, _, reason = sampling_support(client.session if client else None)
        if client is None or not usable:
            raise ModelUnavailable(unavailable_message(reason))
        model_id = chosen.partition(":")[2] or CLIENT_MODEL
        return chosen, sampling_model(model_id), sampling_stream_fn(client)
    from mcp_agent.providers.registry import resolve_model, stream_fn_for

    try:
        model = resolve_model(chosen)
    except (KeyError, ValueError) as error:
        message = str(error).strip("'\"")
        provider = chosen.partition(":")[0] + ":"
        also = sorted(name for name in overrides or {} if name.startswith(provider))
        if also and "the known ones:" in message:  # the caller's own models of that provider
            message += f"; also {', '.join(also)}"
        raise ModelUnavailable(message) from None
    return chosen, model, stream_fn_for(model)


def missing_key(provider: str) -> str | None:
    """The environment variable a provider's key should be in, when it is needed and unset."""
    from mcp_agent.providers.registry import default_registry

    config = default_registry().providers.get(provider)
    if config is None or not config.requires_api_key or config.api_key:
        return None
    env = config.api_key_env
    return env if env and not os.environ.get(env) else None
