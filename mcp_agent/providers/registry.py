"""The models we know, named ``provider:model-id``, and the StreamFn that talks to each.

Built-in providers:

- ``openai``: OpenAI Chat Completions; ``OPENAI_API_KEY``, ``OPENAI_BASE_URL`` (with ``/v1``).
- ``anthropic``: Anthropic Messages; ``ANTHROPIC_API_KEY``, ``ANTHROPIC_BASE_URL`` (no ``/v1``).
- ``ollama``: a local Ollama through its OpenAI-compatible API (``OLLAMA_HOST``), no key.
- ``sampling``: the MCP client's own model (needs the server-side session, see
  :func:`stream_fn_for`).
- ``scripted``: deterministic playback for tests and demos (``mcp_agent.providers.scripted``,
  loaded on first use): ``scripted:echo`` (``scripted`` alone), and whatever the models file
  lists for it; any other id is an error naming the known ones.

A model id not in the table still works with default limits (except for ``scripted``). A user
file in TOML (the path in ``MCP_AGENT_MODELS``, else ``models.toml`` in the user config
directory) adds providers and models::

    [providers.ollama]                      # extend or override a provider
    base_url = "http://gpu-box:11434/v1"

    [providers.together]                    # any OpenAI-compatible server
    api = "openai-completions"              # or "anthropic-messages"
    base_url = "https://api.together.xyz/v1"
    api_key_env = "TOGETHER_API_KEY"
    headers = { "X-Title" = "mcp-agent" }
    compat = { max_tokens_field = "max_tokens", supports_developer_role = false }
    context_window = 32768                  # defaults for ids not listed below
    max_tokens = 4096
    read_timeout = 600                      # seconds without a byte (default 300)
    stall_timeout = 1800                    # seconds of keep-alives alone (default 1800)

    [[providers.together.models]]
    id = "meta-llama/Llama-3.3-70B-Instruct-Turbo"
    context_window = 131072
    max_tokens = 8192
    reasoning = false
    input = ["text"]
    cost = { input = 0.88, output = 0.88 }  # dollars per million tokens

Importing this module loads no HTTP client; the provider modules load on first use.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import os
import re
import tomllib
import typing
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from mcp_agent.messages import Model, ModelCost
from mcp_agent.paths import shown_url
from mcp_agent.providers.base import LlmContext, StreamFn, StreamOptions
from mcp_agent.wire import describe_validation_error

if TYPE_CHECKING:
    from mcp_agent.events import AssistantMessageEvent
    from mcp_agent.providers.sampling import ClientChannel

OPENAI_API = "openai-completions"
ANTHROPIC_API = "anthropic-messages"
SAMPLING_API = "mcp-sampling"
SCRIPTED_API = "scripted"
KNOWN_APIS = (OPENAI_API, ANTHROPIC_API, SAMPLING_API, SCRIPTED_API)

DEFAULT_CONTEXT_WINDOW = 128_000
DEFAULT_MAX_TOKENS = 16_384
MODELS_ENV = "MCP_AGENT_MODELS"


class ModelRegistryError(ValueError):
    """An unknown provider or model, or a bad models file; the text says which and why."""


@dataclass
class ProviderConfig:
    name: str
    api: str = OPENAI_API
    label: str = ""
    base_url: str = ""
    base_url_env: str | None = None
    api_key_env: str | None = None
    api_key: str | None = None
    requires_api_key: bool = False
    headers: dict[str, str] = field(default_factory=dict)
    compat: dict[str, Any] = field(default_factory=dict)
    context_window: int = DEFAULT_CONTEXT_WINDOW
    max_tokens: int = DEFAULT_MAX_TOKENS
    reasoning: bool = False
    input: list[str] = field(default_factory=lambda: ["text"])
    models: dict[str, Model] = field(default_factory=dict)
    builtin: bool = False
    # Seconds without a byte of the answer before a request fails (a local model reading a
    # long prompt on a CPU may take longer than the default 300 before its first token), and
    # of nothing but keep-alive comments before a stream counts as stalled (default 1,800).
    read_timeout: float | None = None
    stall_timeout: float | None = None

    def resolved_base_url(self) -> str:
        # Spaces around it (a quoted variable, a line end) are no part of a URL.
        if self.base_url_env and os.environ.get(self.base_url_env, "").strip():
            return os.environ[self.base_url_env].strip().rstrip("/")
        return self.base_url.strip().rstrip("/")

    def model(self, model_id: str) -> Model:
        known = self.models.get(model_id)
        if known is not None:
            model = known.model_copy(deep=True)
        else:
            model = Model(
                id=model_id,
                name=model_id,
                api=self.api,
                provider=self.name,
                reasoning=self.reasoning or _looks_like_reasoning(self, model_id),
                input=list(self.input),
                context_window=self.context_window,
                max_tokens=self.max_tokens,
            )
        model.base_url = self.resolved_base_url()
        return model


def _check_base_url(provider: ProviderConfig, url: str) -> None:
    """Refuse (ModelRegistryError) a base URL no request can go to, naming where it was set:
    before a run starts and stores a session with an answer that could only fail (a typo'd
    port or bracket came back as a provider's unexpected error)."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018  # raises for a port that is no number or out of range
        problem = (
            None
            if parts.scheme in ("http", "https") and parts.hostname
            else "not an http:// or https:// URL with a host"
        )
    except ValueError as error:
        problem = str(error)
    if problem is None:
        return
    from_env = provider.base_url_env and os.environ.get(provider.base_url_env)
    where = provider.base_url_env if from_env else f"base_url of provider {provider.name!r}"
    raise ModelRegistryError(f"{where} is {shown_url(url)!r}: {problem}")


def _looks_like_reasoning(provider: ProviderConfig, model_id: str) -> bool:
    """Unlisted ids of the official APIs that follow a reasoning family's naming."""
    if provider.name == "openai":
        return re.match(r"^(o\d|gpt-5)", model_id) is not None
    if provider.name == "anthropic":
        return re.match(r"^claude-(opus|sonnet|haiku)-4", model_id) is not None
    return False


# --- the built-in table -----------------------------------------------------------------------

# (id, name, reasoning, vision, input $/M, output $/M, cache read $/M, cache write $/M,
#  context window, max output)
_OPENAI_MODELS = [
    ("gpt-4o", "GPT-4o", False, True, 2.5, 10, 1.25, 0, 128_000, 16_384),
    ("gpt-4o-mini", "GPT-4o mini", False, True, 0.15, 0.6, 0.075, 0, 128_000, 16_384),
    ("gpt-4.1", "GPT-4.1", False, True, 2, 8, 0.5, 0, 1_047_576, 32_768),
    ("gpt-4.1-mini", "GPT-4.1 mini", False, True, 0.4, 1.6, 0.1, 0, 1_047_576, 32_768),
    ("gpt-4.1-nano", "GPT-4.1 nano", False, True, 0.1, 0.4, 0.025, 0, 1_047_576, 32_768),
    ("gpt-5", "GPT-5", True, True, 1.25, 10, 0.125, 0, 400_000, 128_000),
    ("gpt-5-mini", "GPT-5 mini", True, True, 0.25, 2, 0.025, 0, 400_000, 128_000),
    ("gpt-5-nano", "GPT-5 nano", True, True, 0.05, 0.4, 0.005, 0, 400_000, 128_000),
    ("o3", "o3", True, True, 2, 8, 0.5, 0, 200_000, 100_000),
    ("o4-mini", "o4-mini", True, True, 1.1, 4.4, 0.275, 0, 200_000, 100_000),
]
_ANTHROPIC_MODELS = [
    ("claude-opus-4-5", "Claude Opus 4.5", True, True, 5, 25, 0.5, 6.25, 200_000, 64_000),
    ("claude-opus-4-1", "Claude Opus 4.1", True, True, 15, 75, 1.5, 18.75, 200_000, 32_000),
    ("claude-sonnet-4-5", "Claude Sonnet 4.5", True, True, 3, 15, 0.3, 3.75, 200_000, 64_000),
    ("claude-sonnet-4-0", "Claude Sonnet 4", True, True, 3, 15, 0.3, 3.75, 200_000, 64_000),
    ("claude-haiku-4-5", "Claude Haiku 4.5", True, True, 1, 5, 0.1, 1.25, 200_000, 64_000),
    ("claude-3-5-haiku-latest", "Claude Haiku 3.5", False, True, 0.8, 4, 0.08, 1, 200_000, 8_192),
]


def _table(provider: str, api: str, rows: list[tuple[Any, ...]]) -> dict[str, Model]:
    models = {}
    for mid, name, reasoning, vision, cin, cout, cread, cwrite, window, max_out in rows:
        models[mid] = Model(
            id=mid,
            name=name,
            api=api,
            provider=provider,
            reasoning=reasoning,
            input=["text", "image"] if vision else ["text"],
            cost=ModelCost(input=cin, output=cout, cache_read=cread, cache_write=cwrite),
            context_window=window,
            max_tokens=max_out,
        )
    return models


OLLAMA_PORT = 11434


def _ollama_base_url() -> str:
    """Where ``OLLAMA_HOST`` points, read as Ollama reads it: quotes around it dropped; without
    a scheme, http and port 11434 (``0.0.0.0``, the value that makes the server listen on
    every interface, is that server on port 11434, not on port 80); no host, 127.0.0.1."""
    host = os.environ.get("OLLAMA_HOST", "").strip().strip("\"'").strip()
    if not host:
        return f"http://localhost:{OLLAMA_PORT}/v1"
    scheme, found, rest = host.partition("://")
    if not found:
        scheme, rest = "http", host
    authority, _, path = rest.partition("/")
    user, at, hostport = authority.rpartition("@")
    if hostport.count(":") > 1 and not hostport.startswith("["):
        hostport = f"[{hostport}]"  # an IPv6 address without its brackets
    if hostport.startswith(":") or not hostport:
        hostport = "127.0.0.1" + hostport
    if not found and not re.search(r":\d*$", hostport.rpartition("]")[2]):
        hostport += f":{OLLAMA_PORT}"
    return f"{scheme}://{user}{at}{hostport}/{path}".rstrip("/") + "/v1"


def builtin_providers() -> dict[str, ProviderConfig]:
    return {
        "openai": ProviderConfig(
            name="openai",
            api=OPENAI_API,
            label="OpenAI API",
            base_url="https://api.openai.com/v1",
            base_url_env="OPENAI_BASE_URL",
            api_key_env="OPENAI_API_KEY",
            requires_api_key=True,
            models=_table("openai", OPENAI_API, _OPENAI_MODELS),
            builtin=True,
        ),
        "anthropic": ProviderConfig(
            name="anthropic",
            api=ANTHROPIC_API,
            label="Anthropic API",
            base_url="https://api.anthropic.com",
            base_url_env="ANTHROPIC_BASE_URL",
            api_key_env="ANTHROPIC_API_KEY",
            requires_api_key=True,
            context_window=200_000,
            max_tokens=32_000,
            models=_table("anthropic", ANTHROPIC_API, _ANTHROPIC_MODELS),
            builtin=True,
        ),
        "ollama": ProviderConfig(
            name="ollama",
            api=OPENAI_API,
            label="Ollama (OpenAI-compatible API)",
            base_url=_ollama_base_url(),
            context_window=32_768,
            max_tokens=8_192,
            builtin=True,
        ),
        "sampling": ProviderConfig(
            name="sampling",
            api=SAMPLING_API,
            label="MCP client model (sampling)",
            input=["text", "image"],
            builtin=True,
        ),
        "scripted": ProviderConfig(
            name="scripted", api=SCRIPTED_API, label="Scripted", builtin=True
        ),
    }


# --- the user file ----------------------------------------------------------------------------


def user_models_path() -> Path:
    """Where the user's models file is: ``$MCP_AGENT_MODELS``, else the user config dir."""
    env = os.environ.get(MODELS_ENV)
    if env:
        return Path(env).expanduser()
    import platformdirs

    return Path(platformdirs.user_config_dir("mcp-agent-sessions")) / "models.toml"


# What a provider's table may set: the fields of ProviderConfig but its name (the table's) and
# whether it is built in (never the file's to say).
_PROVIDER_KEYS = {f.name for f in dataclasses.fields(ProviderConfig)} - {"name", "builtin"}
_MODEL_KEYS = {"id", "name", "context_window", "max_tokens", "reasoning", "input", "cost"}


@functools.cache
def _provider_table() -> type[BaseModel]:
    """A pydantic model of a provider's table, its types taken from ProviderConfig's fields.

    Strict: TOML values carry their own types, so "big", 1 or 1e400 where an integer, a string
    or a boolean belongs is a mistake in the file, not something to coerce."""
    hints = typing.get_type_hints(ProviderConfig)
    fields: dict[str, Any] = {key: (hints[key], None) for key in _PROVIDER_KEYS}
    # The file lists the models as an array of tables, each of which Model checks.
    fields["models"] = (list[dict[str, Any]], None)
    for key in ("context_window", "max_tokens"):  # the defaults of the models: as Model's
        fields[key] = (hints[key] | None, Field(default=None, gt=0))
    for key in ("read_timeout", "stall_timeout"):  # TOML writes 600 as an integer
        fields[key] = (int | float | None, Field(default=None, gt=0, allow_inf_nan=False))
    return create_model("ProviderTable", __config__=ConfigDict(strict=True), **fields)


def load_models_file(path: Path, providers: dict[str, ProviderConfig]) -> None:
    """Merge the providers and models of a TOML file into ``providers``."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise ModelRegistryError(f"cannot read models file {path}: {error}") from error
    except UnicodeDecodeError as error:
        raise ModelRegistryError(f"models file {path}: not UTF-8 text ({error})") from None
    except tomllib.TOMLDecodeError as error:
        raise ModelRegistryError(f"models file {path}: invalid TOML: {error}") from error
    unknown_top = sorted(set(data) - {"providers"})
    if unknown_top:
        raise ModelRegistryError(
            f"models file {path}: unknown top-level key(s) {', '.join(unknown_top)}; "
            "expected [providers.<name>] tables"
        )
    tables = data.get("providers", {})
    if not isinstance(tables, dict):
        raise ModelRegistryError(f"models file {path}: 'providers' must be a table")
    for name, table in tables.items():
        where = f"models file {path}: providers.{name}"
        if not isinstance(table, dict):
            raise ModelRegistryError(f"{where} must be a table")
        if ":" in name or not name:
            raise ModelRegistryError(f"{where}: a provider name cannot be empty or contain ':'")
        unknown = sorted(set(table) - _PROVIDER_KEYS)
        if unknown:
            raise ModelRegistryError(
                f"{where}: unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(_PROVIDER_KEYS))}"
            )
        try:
            _provider_table().model_validate(table)
        except ValidationError as error:
            raise ModelRegistryError(describe_validation_error(error, where, table)) from None
        provider = providers.get(name)
        if provider is None:
            provider = ProviderConfig(name=name, label=table.get("label") or f"{name} API")
            providers[name] = provider
        for key in (
            "api",
            "label",
            "base_url",
            "base_url_env",
            "api_key_env",
            "api_key",
            "requires_api_key",
            "context_window",
            "max_tokens",
            "reasoning",
            "input",
            "read_timeout",
            "stall_timeout",
        ):
            if key in table:
                setattr(provider, key, table[key])
        if "headers" in table:
            provider.headers = {**provider.headers, **table["headers"]}
        if "compat" in table:
            provider.compat = {**provider.compat, **table["compat"]}
            if provider.api == OPENAI_API:
                from mcp_agent.providers.openai_compat import OpenAICompat

                try:
                    OpenAICompat.from_mapping(provider.compat)
                except (TypeError, ValueError) as error:
                    raise ModelRegistryError(f"{where}.compat: {error}") from error
        if provider.api not in KNOWN_APIS:
            raise ModelRegistryError(
                f"{where}: unknown api {provider.api!r}; known: {', '.join(KNOWN_APIS)}"
            )
        if provider.api == OPENAI_API and not provider.base_url and not provider.builtin:
            raise ModelRegistryError(f"{where}: an OpenAI-compatible provider needs base_url")
        for index, entry in enumerate(table.get("models", [])):
            provider.models.update(_model_entry(entry, provider, f"{where}.models[{index}]"))


def _model_entry(entry: Any, provider: ProviderConfig, where: str) -> dict[str, Model]:
    if not isinstance(entry, dict) or not isinstance(entry.get("id"), str) or not entry["id"]:
        raise ModelRegistryError(f"{where}: each model needs an id")
    unknown = sorted(set(entry) - _MODEL_KEYS)
    if unknown:
        raise ModelRegistryError(
            f"{where}: unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(_MODEL_KEYS))}"
        )
    base = provider.models.get(entry["id"])
    fields: dict[str, Any] = (
        base.model_dump()
        if base is not None
        else {
            "id": entry["id"],
            "name": entry["id"],
            "api": provider.api,
            "provider": provider.name,
            "reasoning": provider.reasoning,
            "input": list(provider.input),
            "context_window": provider.context_window,
            "max_tokens": provider.max_tokens,
        }
    )
    for key in ("name", "context_window", "max_tokens", "reasoning", "input"):
        if key in entry:
            fields[key] = entry[key]
    if "cost" in entry:
        cost = entry["cost"]
        if not isinstance(cost, dict) or set(cost) - {
            "input",
            "output",
            "cache_read",
            "cache_write",
        }:
            raise ModelRegistryError(
                f"{where}.cost: expected a table of input, output, cache_read, cache_write "
                "(dollars per million tokens)"
            )
        fields["cost"] = {**(fields.get("cost") or {}), **cost}
    fields["api"] = provider.api
    fields["provider"] = provider.name
    try:
        # Strict for the reason _provider_table gives.
        return {entry["id"]: Model.model_validate(fields, strict=True)}
    except ValidationError as error:
        raise ModelRegistryError(describe_validation_error(error, where, fields)) from None


# --- the registry -----------------------------------------------------------------------------

StreamFnFactory = Callable[[Model, ProviderConfig], StreamFn]


class ModelRegistry:
    def __init__(
        self, providers: Mapping[str, ProviderConfig] | None = None, *, path: Path | None = None
    ) -> None:
        self.providers: dict[str, ProviderConfig] = dict(
            builtin_providers() if providers is None else providers
        )
        self.path = path
        self._factories: dict[str, StreamFnFactory] = {}

    @classmethod
    def load(cls, path: str | Path | None = None) -> ModelRegistry:
        """The built-in providers plus the user's models file (if it exists)."""
        registry = cls()
        file = Path(path).expanduser() if path is not None else user_models_path()
        explicit = path is not None or bool(os.environ.get(MODELS_ENV))
        if file.exists():
            load_models_file(file, registry.providers)
            registry.path = file
        elif explicit:
            raise ModelRegistryError(f"models file {file} does not exist")
        return registry

    def register_provider(
        self, config: ProviderConfig, stream_fn_factory: StreamFnFactory | None = None
    ) -> None:
        """Add (or replace) a provider; a factory gives its StreamFn for a model."""
        self.providers[config.name] = config
        if stream_fn_factory is not None:
            self._factories[config.name] = stream_fn_factory

    def resolve(self, name: str) -> Model:
        """``provider:model-id`` (the id may itself contain ':'), or a bare id that exactly
        one provider lists."""
        name = name.strip()
        provider_name, sep, model_id = name.partition(":")
        if not sep:
            if name == "client":  # the MCP client's own model
                name = "sampling"
            if name in self.providers:
                named = self.providers[name]
                if named.api == SAMPLING_API:
                    return self._model(named, "client")
                if named.api == SCRIPTED_API:
                    return self._model(named, "echo")
                raise ModelRegistryError(
                    f"model name {name!r} names a provider; add a model id: {name}:<model-id>"
                )
            owners = [p for p in self.providers.values() if name in p.models]
            if len(owners) == 1:
                return self._model(owners[0], name)
            if owners:
                choices = ", ".join(f"{p.name}:{name}" for p in owners)
                raise ModelRegistryError(f"model {name!r} is ambiguous; use one of {choices}")
            raise ModelRegistryError(
                f"unknown model {name!r}; name models as provider:model-id "
                f"(providers: {', '.join(sorted(self.providers))})"
            )
        provider = self.providers.get(provider_name)
        if provider is None:
            raise ModelRegistryError(
                f"unknown provider {provider_name!r} in {name!r}; known providers: "
                f"{', '.join(sorted(self.providers))} (add others in {user_models_path()})"
            )
        if not model_id:
            raise ModelRegistryError(
                f"model name {name!r} has no model id after the colon: {provider_name}:<model-id>"
            )
        return self._model(provider, model_id)

    def _model(self, provider: ProviderConfig, model_id: str) -> Model:
        if provider.api == SCRIPTED_API and model_id not in provider.models:
            _check_scripted(provider, model_id)
            scripted = _scripted_module()
            if scripted is not None and hasattr(scripted, "scripted_model"):
                return scripted.scripted_model(model_id)
        if provider.api == SAMPLING_API and model_id not in provider.models:
            from mcp_agent.providers.sampling import sampling_model

            return sampling_model(model_id)
        model = provider.model(model_id)
        if model.base_url and provider.api in (OPENAI_API, ANTHROPIC_API):
            _check_base_url(provider, model.base_url)
        return model

    def list_models(self) -> list[Model]:
        models: list[Model] = []
        for provider in self.providers.values():
            models.extend(provider.model(mid) for mid in provider.models)
        return models

    def stream_fn_for(self, model: Model, *, sampling: ClientChannel | None = None) -> StreamFn:
        """The StreamFn for ``model``, bound to its provider's key, endpoint and switches.

        ``sampling`` is the MCP client connection through which the ``sampling`` provider
        reaches the client's model.
        """
        provider = self.providers.get(model.provider)
        factory = self._factories.get(model.provider)
        if factory is not None and provider is not None:
            return factory(model, provider)
        if provider is None:  # a model from elsewhere (a session file): go by its API
            provider = ProviderConfig(
                name=model.provider, api=model.api, label=f"{model.provider} API"
            )
        return _with_timeouts(self._stream_fn(model, provider, sampling), provider)

    def _stream_fn(
        self, model: Model, provider: ProviderConfig, sampling: ClientChannel | None
    ) -> StreamFn:
        api = provider.api if provider.api in KNOWN_APIS else model.api
        if api == OPENAI_API:
            from mcp_agent.providers import openai_compat

            compat = (
                openai_compat.OpenAICompat.from_mapping(
                    provider.compat, openai_compat.detect_compat(model)
                )
                if provider.compat
                else None
            )
            return openai_compat.make_stream_fn(
                openai_compat.OpenAIConfig(
                    label=provider.label or f"{provider.name} API",
                    api_key_env=provider.api_key_env,
                    base_url_env=provider.base_url_env or _named_in_hints(provider),
                    api_key=provider.api_key,
                    requires_api_key=provider.requires_api_key,
                    headers=dict(provider.headers),
                    compat=compat,
                )
            )
        if api == ANTHROPIC_API:
            from mcp_agent.providers import anthropic

            return anthropic.make_stream_fn(
                anthropic.AnthropicConfig(
                    label=provider.label or f"{provider.name} API",
                    api_key_env=provider.api_key_env,
                    base_url_env=provider.base_url_env,
                    api_key=provider.api_key,
                    requires_api_key=provider.requires_api_key,
                    headers=dict(provider.headers),
                )
            )
        if api == SAMPLING_API:
            from mcp_agent.providers.sampling import sampling_stream_fn, unavailable_stream_fn

            if sampling is None:
                return unavailable_stream_fn(
                    "this run has no MCP client connection to ask (sampling needs the "
                    "session of the request that started it)"
                )
            return sampling_stream_fn(sampling)
        if api == SCRIPTED_API:
            _check_scripted(provider, model.id)
            scripted = _scripted_module()
            if scripted is None:
                raise ModelRegistryError(
                    "the scripted provider is not available (mcp_agent.providers.scripted is missing)"
                )
            factory_fn = getattr(scripted, "stream_fn_for", None)
            if factory_fn is not None:
                return factory_fn(model)
            return scripted.ScriptedProvider.echo()
        raise ModelRegistryError(
            f"no provider implementation for api {api!r} (model {model.ref}); "
            f"known APIs: {', '.join(KNOWN_APIS)}"
        )


def _named_in_hints(provider: ProviderConfig) -> str | None:
    """The variable a connection error names for a provider whose base URL comes from one
    that is no URL (Ollama's OLLAMA_HOST), unless models.toml set the base URL."""
    if provider.name == "ollama" and provider.base_url == _ollama_base_url():
        return "OLLAMA_HOST"
    return None


def _with_timeouts(stream: StreamFn, provider: ProviderConfig) -> StreamFn:
    """``stream`` with the provider's timeouts as defaults of each request's options (a caller's
    own ``extra`` still wins)."""
    given = {
        key: float(value)
        for key, value in (
            ("read_timeout", provider.read_timeout),
            ("stall_timeout", provider.stall_timeout),
        )
        if value is not None
    }
    if not given:
        return stream

    def timed(
        model: Model, context: LlmContext, options: StreamOptions | None = None
    ) -> AsyncIterator[AssistantMessageEvent]:
        options = options or StreamOptions()
        merged = dataclasses.replace(options, extra={**given, **options.extra})
        return stream(model, context, merged)

    return timed


def _scripted_module() -> Any:
    try:
        return importlib.import_module("mcp_agent.providers.scripted")
    except ImportError:
        return None


def scripted_model_ids(provider: ProviderConfig) -> list[str]:
    """The model ids a scripted provider answers to: the built-in scripted models
    (``scripted.SCRIPTED_MODELS``) and those its entry in the models file lists."""
    scripted = _scripted_module()
    builtin = getattr(scripted, "SCRIPTED_MODELS", {}) if scripted is not None else {}
    return sorted({*builtin, *provider.models})


def _check_scripted(provider: ProviderConfig, model_id: str) -> None:
    """A scripted model id nothing answers to is an error, not a silent echo."""
    known = scripted_model_ids(provider)
    if model_id not in known:
        choices = ", ".join(f"{provider.name}:{mid}" for mid in known) or "(none)"
        raise ModelRegistryError(
            f"unknown scripted model {provider.name}:{model_id}; the known ones: {choices}"
        )


# --- the process-wide registry ----------------------------------------------------------------

_default: ModelRegistry | None = None


def default_registry() -> ModelRegistry:
    """The registry of the built-in providers plus the user's models file, loaded once."""
    global _default
    if _default is None:
        _default = ModelRegistry.load()
    return _default


def reload_registry(path: str | Path | None = None) -> ModelRegistry:
    global _default
    _default = ModelRegistry.load(path)
    return _default


def resolve_model(name: str) -> Model:
    """The Model for ``provider:model-id``; unknown ids get default limits."""
    return default_registry().resolve(name)


def stream_fn_for(model: Model, *, sampling: ClientChannel | None = None) -> StreamFn:
    return default_registry().stream_fn_for(model, sampling=sampling)


def list_models() -> list[Model]:
    return default_registry().list_models()
