"""The model registry, the shared helpers, and the providers reached through the registry."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any, cast

import pytest
from narrow import narrow, present
from providers_support import (
    FakeLlm,
    collect,
    conversation_headers,
    fakellm_fixture,  # noqa: F401  (the fakellm fixture)
    oa_text_reply,
    options,
    script_server,
    user_context,
)

from mcp_agent.messages import (
    AssistantMessage,
    BaseMessage,
    ImageContent,
    Message,
    StopReason,
    TextContent,
    ThinkingContent,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)
from mcp_agent.providers.common import parse_json_lenient, transform_messages
from mcp_agent.providers.registry import (
    DEFAULT_CONTEXT_WINDOW,
    ModelRegistry,
    ModelRegistryError,
    load_models_file,
    user_models_path,
)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_BASE_URL", "ANTHROPIC_BASE_URL", "OLLAMA_HOST", "MCP_AGENT_MODELS"):
        monkeypatch.delenv(name, raising=False)


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "models.toml"
    path.write_text(textwrap.dedent(text))
    return path


# --- resolving --------------------------------------------------------------------------------


def test_builtin_models_and_endpoints() -> None:
    registry = ModelRegistry()
    mini = registry.resolve("openai:gpt-4o-mini")
    assert (mini.provider, mini.api, mini.base_url) == (
        "openai",
        "openai-completions",
        "https://api.openai.com/v1",
    )
    assert mini.cost.input == 0.15 and mini.context_window == 128_000 and "image" in mini.input
    sonnet = registry.resolve("anthropic:claude-sonnet-4-5")
    assert (sonnet.api, sonnet.base_url, sonnet.reasoning) == (
        "anthropic-messages",
        "https://api.anthropic.com",
        True,
    )
    assert sonnet.cost.cache_write == 3.75
    assert registry.resolve("gpt-5").provider == "openai"  # a bare id one provider lists
    refs = {m.ref for m in registry.list_models()}
    assert {"openai:gpt-4o", "anthropic:claude-haiku-4-5"} <= refs


def test_unknown_id_gets_default_limits_and_ids_may_contain_colons() -> None:
    registry = ModelRegistry()
    model = registry.resolve("openai:gpt-99-preview")
    assert model.id == "gpt-99-preview" and model.context_window == DEFAULT_CONTEXT_WINDOW
    assert model.cost.input == 0
    assert registry.resolve("openai:o5-mini").reasoning is True  # named like a reasoning family
    assert registry.resolve("openai:gpt-4.5").reasoning is False
    assert registry.resolve("client").ref == "sampling:client"
    llama = registry.resolve("ollama:llama3.2:3b")
    assert (llama.provider, llama.id, llama.base_url) == (
        "ollama",
        "llama3.2:3b",
        "http://localhost:11434/v1",
    )


def test_unknown_provider_names_the_known_ones() -> None:
    with pytest.raises(ModelRegistryError) as error:
        ModelRegistry().resolve("mistral:large")
    assert "unknown provider 'mistral'" in str(error.value)
    assert "anthropic, ollama, openai, sampling, scripted" in str(error.value)
    with pytest.raises(ModelRegistryError, match="unknown model 'nonsense'"):
        ModelRegistry().resolve("nonsense")
    with pytest.raises(ModelRegistryError, match="add a model id"):
        ModelRegistry().resolve("openai")


def test_environment_endpoints(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", "http://proxy:8080/v1/")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://claude-proxy")
    monkeypatch.setenv("OLLAMA_HOST", "gpu:11434")
    registry = ModelRegistry.load()
    assert registry.resolve("openai:gpt-4o").base_url == "http://proxy:8080/v1"
    assert registry.resolve("anthropic:claude-sonnet-4-5").base_url == "http://claude-proxy"
    assert ModelRegistry().resolve("ollama:qwen3").base_url == "http://gpu:11434/v1"


@pytest.mark.parametrize(
    ("value", "base_url"),
    [  # as Ollama's own client reads OLLAMA_HOST (envconfig): no scheme is http on 11434
        ("0.0.0.0", "http://0.0.0.0:11434/v1"),
        ("127.0.0.1", "http://127.0.0.1:11434/v1"),
        ('"gpu"', "http://gpu:11434/v1"),
        (":11500", "http://127.0.0.1:11500/v1"),
        ("::1", "http://[::1]:11434/v1"),
        ("[::1]:8080", "http://[::1]:8080/v1"),
        ("http://gpu", "http://gpu/v1"),
        ("https://gpu/ollama/", "https://gpu/ollama/v1"),
        ("al:pw@gpu", "http://al:pw@gpu:11434/v1"),
    ],
)
def test_ollama_host_is_read_as_ollama_reads_it(
    monkeypatch: pytest.MonkeyPatch, value: str, base_url: str
) -> None:
    # OLLAMA_HOST=0.0.0.0, as Ollama's FAQ sets it for the server, went to port 80.
    monkeypatch.setenv("OLLAMA_HOST", value)
    assert ModelRegistry().resolve("ollama:qwen3").base_url == base_url


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("notaurl", "not an http:// or https:// URL with a host"),
        ("ftp://proxy/v1", "not an http:// or https:// URL with a host"),
        ("http://[::1/v1", "Invalid IPv6 URL"),
        ("http://proxy:99999/v1", "Port out of range"),
        ("http://alice:hunter2@proxy:x/v1", "'http://alice:***@proxy:x/v1'"),
    ],
)
def test_a_base_url_no_request_can_go_to_is_refused_naming_where_it_was_set(
    url: str, says: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Refused when the model is chosen, before a run stores an answer that could only fail
    (a port typo came back from the provider as an 'unexpected error: ExceptionGroup')."""
    monkeypatch.setenv("OPENAI_BASE_URL", url)
    with pytest.raises(ModelRegistryError) as refused:
        ModelRegistry.load().resolve("openai:gpt-4o")
    said = str(refused.value)
    assert said.startswith("OPENAI_BASE_URL is ") and says in said and "hunter2" not in said
    monkeypatch.delenv("OPENAI_BASE_URL")
    path = write(tmp_path, f'[providers.local]\nbase_url = "{url}"\n')
    with pytest.raises(ModelRegistryError, match="base_url of provider 'local'"):
        ModelRegistry.load(path).resolve("local:m")
    # Spaces around a URL (a quoted variable, a line end) are no part of it.
    monkeypatch.setenv("OPENAI_BASE_URL", " http://proxy:8080/v1/\n")
    assert ModelRegistry.load().resolve("openai:gpt-4o").base_url == "http://proxy:8080/v1"


def test_user_file_adds_providers_and_models(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(
        tmp_path,
        """
        [providers.together]
        base_url = "https://api.together.xyz/v1"
        api_key_env = "TOGETHER_API_KEY"
        compat = { max_tokens_field = "max_tokens" }
        context_window = 32768

        [[providers.together.models]]
        id = "meta-llama/Llama-3.3-70B"
        context_window = 131072
        cost = { input = 0.88, output = 0.88 }

        [[providers.openai.models]]
        id = "gpt-4o-mini"
        max_tokens = 1000

        [[providers.openai.models]]
        id = "my-finetune"
        reasoning = true
    """,
    )
    monkeypatch.setenv("MCP_AGENT_MODELS", str(path))
    assert user_models_path() == path
    registry = ModelRegistry.load()
    llama = registry.resolve("together:meta-llama/Llama-3.3-70B")
    assert (llama.api, llama.base_url, llama.context_window, llama.cost.output) == (
        "openai-completions",
        "https://api.together.xyz/v1",
        131072,
        0.88,
    )
    assert registry.resolve("together:other").context_window == 32768
    mini = registry.resolve("openai:gpt-4o-mini")
    assert mini.max_tokens == 1000 and mini.cost.input == 0.15  # overrides keep the rest
    assert registry.resolve("openai:my-finetune").reasoning is True


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[providers.x]\nbase_url = 1 2", "invalid TOML"),
        ("[providers.x]\nbase_url = 'http://h/v1'\nbogus = 1", "unknown key(s) bogus"),
        ("[providers.x]\napi = 'grpc'\nbase_url = 'http://h'", "unknown api 'grpc'"),
        ("[providers.x]\napi_key_env = 'K'", "needs base_url"),
        (
            "[providers.x]\nbase_url = 'http://h'\ncompat = { nope = true }",
            "unknown compat setting(s) nope",
        ),
        ("[[providers.openai.models]]\nname = 'no id'", "each model needs an id"),
        ("[models]\nid = 'a'", "unknown top-level key(s) models"),
    ],
)
def test_bad_user_files_are_explained(tmp_path: Path, text: str, message: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ModelRegistryError) as error:
        load_models_file(path, ModelRegistry().providers)
    assert message in str(error.value) and str(path) in str(error.value)


MODEL = "[providers.x]\nbase_url = 'http://h/v1'\n[[providers.x.models]]\nid = 'm'\n"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[providers.x]\nbase_url = 5", "providers.x.base_url: Input should be a valid string"),
        (
            "[providers.ollama]\nheaders = 5",
            "providers.ollama.headers: Input should be a valid dict",
        ),
        (
            "[providers.ollama]\nheaders = { X-Title = 5 }",
            "providers.ollama.headers.X-Title: Input should be a valid string",
        ),
        ("[providers.ollama]\nmodels = 5", "providers.ollama.models: Input should be a valid list"),
        (
            "[providers.ollama]\ncontext_window = 'big'",
            "providers.ollama.context_window: Input should be a valid integer",
        ),
        (
            "[providers.ollama]\nmax_tokens = 1e400",
            "providers.ollama.max_tokens: Input should be a valid integer",
        ),
        (
            "[providers.ollama]\nreasoning = 1",
            "providers.ollama.reasoning: Input should be a valid bool",
        ),
        ("[providers.ollama]\ncompat = 1", "providers.ollama.compat: Input should be a valid dict"),
        (
            MODEL + "cost = { input = 'free' }",
            "providers.x.models[0].cost.input: Input should be a valid number",
        ),
        (
            MODEL + "max_tokens = 1e400",
            "providers.x.models[0].max_tokens: Input should be a valid integer",
        ),
        (
            MODEL + "context_window = 'big'",
            "providers.x.models[0].context_window: Input should be a valid integer",
        ),
        (
            MODEL + "input = ['text', 2]",
            "providers.x.models[0].input.1: Input should be a valid string",
        ),
        # Limits and prices that cannot be: a run would compact at every turn, or never stop.
        (
            MODEL + "context_window = -5",
            "providers.x.models[0].context_window: Input should be greater than 0",
        ),
        (
            MODEL + "max_tokens = 0",
            "providers.x.models[0].max_tokens: Input should be greater than 0",
        ),
        (
            MODEL + "cost = { output = -1.5 }",
            "providers.x.models[0].cost.output: Input should be greater than or equal to 0",
        ),
        (
            "[providers.ollama]\ncontext_window = 0",
            "providers.ollama.context_window: Input should be greater than 0",
        ),
        (
            "[providers.ollama]\nmax_tokens = -1",
            "providers.ollama.max_tokens: Input should be greater than 0",
        ),
    ],
)
def test_values_of_the_wrong_type_are_refused_on_loading(
    tmp_path: Path, text: str, message: str
) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ModelRegistryError) as error:
        ModelRegistry.load(path)
    said = str(error.value)
    assert f"models file {path}: {message}" in said, said
    assert "\n" not in said and "pydantic" not in said


@pytest.mark.parametrize("command", [["models"], ["run", "--model", "x:m", "hi"]])
def test_cli_reports_a_badly_typed_models_file_in_one_line(
    tmp_path: Path, command: list[str]
) -> None:
    # context_window = "big" passed `models` and failed only when `run` built the Model.
    path = write(tmp_path, "[providers.x]\nbase_url = 'http://h/v1'\ncontext_window = 'big'")
    env = {
        **os.environ,
        "MCP_AGENT_MODELS": str(path),
        "MCP_AGENT_DB": str(tmp_path / "sessions.db"),
        "HOME": str(tmp_path),
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
        "XDG_DATA_HOME": str(tmp_path / "data"),
    }
    result = subprocess.run(
        [sys.executable, "-m", "mcp_agent", *command],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=60,
    )
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert f"{path}: providers.x.context_window: Input should be a valid integer" in lines[0]


def test_missing_explicit_file(tmp_path: Path) -> None:
    with pytest.raises(ModelRegistryError, match="does not exist"):
        ModelRegistry.load(tmp_path / "nope.toml")


def test_importing_the_package_loads_no_http_client() -> None:
    code = (
        "import sys, mcp_agent.providers, mcp_agent.providers.registry as r; "
        "r.ModelRegistry().resolve('openai:gpt-4o'); "
        "assert 'httpx' not in sys.modules, 'httpx imported'; "
        "assert 'mcp_agent.providers.openai_compat' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=30)


# --- streaming through the registry ----------------------------------------------------------


@pytest.mark.anyio
async def test_openai_through_the_registry_with_env(
    fakellm: FakeLlm, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", fakellm.openai_base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")
    registry = ModelRegistry.load()
    model = registry.resolve("openai:gpt-4o-mini")
    _, final = await collect(
        registry.stream_fn_for(model)(
            model, user_context("hello"), options(headers=conversation_headers())
        )
    )
    assert final.text == "Hi there! This is a mock response." and final.provider == "openai"


@pytest.mark.anyio
async def test_anthropic_through_the_registry(
    fakellm: FakeLlm, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_BASE_URL", fakellm.anthropic_base_url)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant")
    registry = ModelRegistry.load()
    model = registry.resolve("anthropic:claude-haiku-4-5")
    _, final = await collect(
        registry.stream_fn_for(model)(
            model, user_context("hello"), options(headers=conversation_headers())
        )
    )
    assert final.text == "Hi there! This is a mock response."
    assert final.usage.cost.total > 0  # priced from the table


@pytest.mark.anyio
async def test_configured_provider_uses_its_switches_label_and_prices(tmp_path: Path) -> None:
    async with script_server() as server:
        server.add(oa_text_reply("hi", usage=(1_000_000, 1_000_000)), oa_text_reply("again"))
        path = write(
            tmp_path,
            f"""
            [providers.local]
            label = "Local LLM"
            base_url = "{server.base}/v1"
            headers = {{ "X-Team" = "t1" }}
            compat = {{ max_tokens_field = "max_completion_tokens", supports_usage_in_streaming = false }}

            [[providers.local.models]]
            id = "m1"
            cost = {{ input = 2, output = 3 }}
        """,
        )
        registry = ModelRegistry.load(path)
        model = registry.resolve("local:m1")
        stream_fn = registry.stream_fn_for(model)
        _, final = await collect(stream_fn(model, user_context(), options(max_tokens=77)))
        assert final.text == "hi" and final.provider == "local" and final.model == "m1"
        assert final.usage.cost.total == pytest.approx(5.0)
        request = server.requests[0]
        body = request.json()
        assert "authorization" not in request.headers and request.headers["x-team"] == "t1"
        assert body["max_completion_tokens"] == 77 and "stream_options" not in body
        assert body["messages"][0]["role"] == "system"


@pytest.mark.anyio
async def test_configured_provider_errors_use_its_label(tmp_path: Path) -> None:
    from mcp_support import free_port

    base = f"http://127.0.0.1:{free_port()}/v1"
    path = write(tmp_path, f'[providers.local]\nlabel = "Local LLM"\nbase_url = "{base}"\n')
    registry = ModelRegistry.load(path)
    model = registry.resolve("local:m1")
    _, final = await collect(registry.stream_fn_for(model)(model, user_context(), options()))
    assert present(final.error_message).startswith(f"Local LLM at {base}: could not connect")


@pytest.mark.anyio
async def test_ollama_not_running_names_ollama_host(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What sets where Ollama is was not named: "is the base URL right?" and no variable.
    from mcp_support import free_port

    port = free_port()
    monkeypatch.setenv("OLLAMA_HOST", f"127.0.0.1:{port}")
    registry = ModelRegistry()
    model = registry.resolve("ollama:qwen3")
    _, final = await collect(registry.stream_fn_for(model)(model, user_context(), options()))
    error = present(final.error_message)
    assert f"nothing listens at 127.0.0.1:{port}" in error
    assert "the base URL (OLLAMA_HOST) right?" in error
    # A base URL from models.toml is not OLLAMA_HOST's.
    path = write(tmp_path, f'[providers.ollama]\nbase_url = "http://localhost:{port}/v1"\n')
    registry = ModelRegistry.load(path)
    model = registry.resolve("ollama:qwen3")
    _, final = await collect(registry.stream_fn_for(model)(model, user_context(), options()))
    assert "OLLAMA_HOST" not in present(final.error_message)


@pytest.mark.anyio
async def test_scripted_through_the_registry() -> None:
    registry = ModelRegistry()
    model = registry.resolve("scripted:echo")
    assert model.api == "scripted"
    _, final = await collect(
        registry.stream_fn_for(model)(model, user_context("say this"), options())
    )
    assert final.text == "say this" and final.stop_reason == StopReason.STOP


# --- shared helpers ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"a": 1}', {"a": 1}),
        ('{"a": 1, "b": "hel', {"a": 1, "b": "hel"}),
        ('{"a": [1, 2', {"a": [1, 2]}),
        ('{"a": 1, "b":', {"a": 1}),
        ('{"a": {"c": "d"}, ', {"a": {"c": "d"}}),
        ('{"x": "line\nbreak"}', {"x": "line\nbreak"}),
        ("", {}),
        ("[1, 2]", {}),
        ("not json", {}),
    ],
)
def test_parse_json_lenient(text: str, expected: dict) -> None:
    assert parse_json_lenient(text) == expected


def test_transform_messages() -> None:
    registry = ModelRegistry()
    model = registry.resolve("openai:gpt-4o-mini").model_copy(update={"input": ["text"]})
    signed: dict[str, Any] = {"thinkingSignature": "s"}
    messages: list[Message] = [
        UserMessage(
            content=[
                TextContent(text="a"),
                ImageContent(data="x", mime_type="image/png"),
                ImageContent(data="y", mime_type="image/png"),
            ]
        ),
        AssistantMessage(
            content=[
                ThinkingContent(thinking="deep", **signed),
                ToolCall(id="1", name="ls"),
                ToolCall(id="2", name="cat"),
            ],
            provider="anthropic",
            api="anthropic-messages",
            model="claude",
            stop_reason=StopReason.TOOL_USE,
        ),
        ToolResultMessage(tool_call_id="1", tool_name="ls", content=[TextContent(text="ok")]),
        AssistantMessage(content=[TextContent(text="oops")], stop_reason=StopReason.ABORTED),
        UserMessage(content="next"),
    ]
    out = transform_messages(messages, model)
    assert [m.role for m in out] == ["user", "assistant", "toolResult", "toolResult", "user"]
    first = narrow(out[0], UserMessage)
    assert isinstance(first.content, list)
    assert [narrow(b, TextContent).text for b in first.content] == [
        "a",
        "(image omitted: model does not support images)",
    ]
    assert isinstance(out[1].content[0], TextContent) and out[1].content[0].text == "deep"
    made_up = narrow(out[3], ToolResultMessage)
    assert (
        made_up.tool_call_id == "2"
        and made_up.is_error
        and narrow(made_up.content[0], TextContent).text == "No result provided"
    )


def test_messages_between_a_tool_call_and_its_result_go_after_the_results() -> None:
    from mcp_agent.messages import CustomMessage

    model = ModelRegistry().resolve("openai:gpt-4o-mini")
    calls = AssistantMessage(
        content=[ToolCall(id="1", name="ls"), ToolCall(id="2", name="cat")],
        provider=model.provider,
        api=model.api,
        model=model.id,
        stop_reason=StopReason.TOOL_USE,
    )
    note = CustomMessage(custom_type="note", content="between", display=True)
    steer = UserMessage(content="also this")
    messages = [
        UserMessage(content="go"),
        calls,
        ToolResultMessage(tool_call_id="1", tool_name="ls", content=[TextContent(text="a")]),
        note,
        steer,
        ToolResultMessage(tool_call_id="2", tool_name="cat", content=[TextContent(text="b")]),
        UserMessage(content="after"),
    ]
    # A custom message between a call and its result: transform_messages keeps a message that
    # is not a model message as it is, though its signature names only model messages.
    out: list[BaseMessage] = list(transform_messages(cast(list[Message], messages), model))
    assert [getattr(m, "tool_call_id", None) or m.role for m in out] == [
        "user",
        "assistant",
        "1",
        "2",
        "custom",
        "user",
        "user",
    ]
    assert out[4] is note and out[5] is steer
    assert not any(getattr(m, "is_error", False) for m in out)  # no made-up "no result"
