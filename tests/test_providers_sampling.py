"""The sampling provider: the MCP client's own model, through an in-process MCP connection."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import mcp.types as types
import pytest
from mcp import Client
from mcp.client.session import ClientRequestContext
from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from narrow import narrow, present

from mcp_agent.abort import AbortController
from mcp_agent.messages import (
    AssistantMessage,
    StopReason,
    TextContent,
    ToolCall,
    ToolResultMessage,
    UserMessage,
    parse_message,
)
from mcp_agent.providers.base import LlmContext, StreamOptions, final_message
from mcp_agent.providers.registry import ModelRegistry
from mcp_agent.providers.sampling import ClientChannel, sampling_model, sampling_stream_fn
from mcp_agent.tools import AgentTool, AgentToolResult

pytestmark = pytest.mark.anyio


async def _noop(*args: Any, **kwargs: Any) -> AgentToolResult:  # pragma: no cover
    return AgentToolResult.text("")


READ = AgentTool(
    name="read_file",
    description="Read a file",
    parameters={"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
    execute=_noop,
)

HISTORIES: dict[str, list[Any]] = {
    "plain": [UserMessage(content="What is 2+2?")],
    "after_tool": [
        UserMessage(content="Read a"),
        AssistantMessage(
            content=[
                TextContent(text="Reading."),
                ToolCall(id="t1", name="read_file", arguments={"path": "a"}),
            ],
            api="mcp-sampling",
            provider="sampling",
            model="client",
            stop_reason=StopReason.TOOL_USE,
        ),
        ToolResultMessage(
            tool_call_id="t1", tool_name="read_file", content=[TextContent(text="contents of a")]
        ),
    ],
}


def make_server(abort_when: Callable[[], Awaitable[None]] | None = None) -> MCPServer:
    """The server's ``ask`` tool streams from the client's model; with ``abort_when``, it
    aborts the stream once that returns."""
    server = MCPServer("sampling-test", log_level="WARNING")

    @server.tool()
    async def ask(history: str, use_tools: bool, ctx: Context) -> str:
        context = LlmContext(
            system_prompt="Be brief.",
            messages=HISTORIES[history],
            tools=[READ] if use_tools else None,
        )
        controller = AbortController()
        options = StreamOptions(signal=controller.signal, max_tokens=500)
        stream = sampling_stream_fn(ClientChannel(ctx.session))(sampling_model(), context, options)
        if abort_when is None:
            final = await final_message(stream)
        else:
            async with anyio.create_task_group() as tg:

                async def abort_later() -> None:
                    await abort_when()
                    controller.abort()

                tg.start_soon(abort_later)
                final = await final_message(stream)
                tg.cancel_scope.cancel()
        return final.to_json()

    return server


class FakeClientModel:
    """The client's model. ``asked`` is set when a request has come; with ``hold``, it thinks
    until ``released`` is set. ``answers`` counts the answers it gave."""

    def __init__(self, hold: bool = False) -> None:
        self.requests: list[types.CreateMessageRequestParams] = []
        self.answers = 0
        self.hold = hold
        self.asked = anyio.Event()
        self.released = anyio.Event()

    async def __call__(
        self, context: ClientRequestContext, params: types.CreateMessageRequestParams
    ) -> Any:
        self.requests.append(params)
        self.asked.set()
        if self.hold:
            await self.released.wait()
        self.answers += 1
        return self._answer(params)

    @staticmethod
    def _answer(params: types.CreateMessageRequestParams) -> Any:
        if params.tools and not any(
            block.type == "tool_result" for m in params.messages for block in m.content_as_list
        ):
            return types.CreateMessageResultWithTools(
                role="assistant",
                model="client-llm",
                stop_reason="toolUse",
                content=[
                    types.TextContent(type="text", text="Let me read it."),
                    types.ToolUseContent(
                        type="tool_use", id="tu1", name="read_file", input={"path": "a"}
                    ),
                ],
            )
        return types.CreateMessageResult(
            role="assistant",
            model="client-llm",
            stop_reason="endTurn",
            content=types.TextContent(type="text", text="4"),
        )


async def ask(client: Client, history: str = "plain", use_tools: bool = False) -> AssistantMessage:
    try:
        with anyio.fail_after(10):  # a hang guard
            result = await client.call_tool("ask", {"history": history, "use_tools": use_tools})
    except TimeoutError:
        pytest.fail("the ask tool did not return: its stream did not end")
    assert not result.is_error, result.content
    message = parse_message(json.loads(narrow(result.content[0], types.TextContent).text))
    assert isinstance(message, AssistantMessage)
    return message


TOOLS_CAPABILITY = types.SamplingCapability(tools=types.SamplingToolsCapability())


async def test_text_answer_from_the_clients_model() -> None:
    model = FakeClientModel()
    async with Client(make_server(), mode="legacy", sampling_callback=model) as client:
        final = await ask(client)
    assert final.text == "4" and final.stop_reason == StopReason.STOP
    assert (final.api, final.provider, final.model) == ("mcp-sampling", "sampling", "client")
    assert final.to_json_dict()["responseModel"] == "client-llm"
    params = model.requests[0]
    assert params.system_prompt == "Be brief." and params.max_tokens == 500
    assert [(m.role, narrow(m.content, types.TextContent).text) for m in params.messages] == [
        ("user", "What is 2+2?")
    ]


async def test_tool_use_with_the_tools_capability() -> None:
    model = FakeClientModel()
    async with Client(
        make_server(),
        mode="legacy",
        sampling_callback=model,
        sampling_capabilities=TOOLS_CAPABILITY,
    ) as client:
        first = await ask(client, use_tools=True)
        second = await ask(client, history="after_tool", use_tools=True)
    assert first.stop_reason == StopReason.TOOL_USE
    assert first.text == "Let me read it."
    assert [(c.id, c.name, c.arguments) for c in first.tool_calls] == [
        ("tu1", "read_file", {"path": "a"})
    ]
    tools = present(model.requests[0].tools)
    assert [t.name for t in tools] == ["read_file"]
    assert tools[0].input_schema["required"] == ["path"]
    # the tool result goes back as a tool_result block answering the tool_use
    messages = model.requests[1].messages
    assert [m.role for m in messages] == ["user", "assistant", "user"]
    assert [b.type for b in messages[1].content_as_list] == ["text", "tool_use"]
    result = messages[2].content_as_list[0]
    assert result.type == "tool_result" and result.tool_use_id == "t1"
    assert narrow(result.content[0], types.TextContent).text == "contents of a"
    assert second.text == "4"


async def test_without_the_tools_capability_tools_are_told_in_words() -> None:
    model = FakeClientModel()
    async with Client(make_server(), mode="legacy", sampling_callback=model) as client:
        final = await ask(client, history="after_tool", use_tools=True)
    assert final.text == "4"
    params = model.requests[0]
    assert params.tools is None
    texts = [narrow(m.content, types.TextContent).text for m in params.messages]
    assert texts[1] == 'Reading.\n\n[called tool read_file with {"path": "a"}]'
    assert texts[2] == "[tool read_file returned]\ncontents of a"


async def test_client_without_sampling_gets_guidance() -> None:
    async with Client(make_server(), mode="legacy") as client:
        final = await ask(client)
    assert final.stop_reason == StopReason.ERROR
    error = present(final.error_message)
    assert "did not declare the sampling capability" in error
    assert "openai:gpt-4o-mini (with OPENAI_API_KEY set where the server runs)" in error
    assert "--model" not in error
    assert "models.toml" in error


async def test_modern_protocol_gets_guidance() -> None:
    model = FakeClientModel()
    async with Client(make_server(), sampling_callback=model) as client:
        final = await ask(client)
    assert final.stop_reason == StopReason.ERROR
    error = present(final.error_message)
    assert "2026-07-28" in error
    assert "Choose another model for the run: openai:gpt-4o-mini" in error
    assert "--model" not in error
    assert model.requests == []


async def test_client_error_is_reported() -> None:
    async def refuse(
        context: ClientRequestContext, params: types.CreateMessageRequestParams
    ) -> Any:
        return types.ErrorData(code=-1, message="User rejected sampling request")

    async with Client(make_server(), mode="legacy", sampling_callback=refuse) as client:
        final = await ask(client)
    assert final.stop_reason == StopReason.ERROR
    assert (
        final.error_message
        == "the MCP client's model (sampling) failed: User rejected sampling request"
    )


async def test_abort_while_the_client_thinks() -> None:
    """The abort ends the stream while the client's model has not answered (it answers only
    after the tool has returned): a stream that waited for the answer would never end, and
    ``ask``'s hang guard fails the test."""
    model = FakeClientModel(hold=True)
    async with Client(
        make_server(abort_when=model.asked.wait), mode="legacy", sampling_callback=model
    ) as client:
        try:
            final = await ask(client)
            answers_by_then = model.answers
        finally:
            model.released.set()
    assert final.stop_reason == StopReason.ABORTED and final.error_message == "aborted"
    assert len(model.requests) == 1 and answers_by_then == 0


async def test_registry_without_a_session_explains() -> None:
    registry = ModelRegistry()
    model = registry.resolve("sampling")
    assert model.api == "mcp-sampling"
    final = await final_message(
        registry.stream_fn_for(model)(
            model, LlmContext("", [UserMessage(content="hi")]), StreamOptions()
        )
    )
    assert final.stop_reason == StopReason.ERROR
    error = present(final.error_message)
    assert "no MCP client connection" in error and "OPENAI_API_KEY" in error


async def test_text_no_utf8_holds_from_the_clients_model_is_replaced() -> None:
    async def half_a_pair(context: ClientRequestContext, params: Any) -> Any:
        return types.CreateMessageResult(
            role="assistant",
            model="client-llm",
            stop_reason="endTurn",
            content=types.TextContent(type="text", text="x \ud800 y"),
        )

    async with Client(make_server(), mode="legacy", sampling_callback=half_a_pair) as client:
        final = await ask(client)
    assert final.text == "x \ufffd y" and final.stop_reason == StopReason.STOP
    final.model_dump_json()  # storable


@pytest.mark.parametrize("given", [["x", "x", "x_2"], ["", ""]])
async def test_calls_the_clients_model_gives_one_id_or_none_get_ids_of_their_own(
    given: list[str],
) -> None:
    """Each result names its call by id, and the client's model is sent them back: two calls
    with one id (or none) would be one call to the loop and a request the API refuses."""

    async def calls(context: ClientRequestContext, params: Any) -> Any:
        return types.CreateMessageResultWithTools(
            role="assistant",
            model="client-llm",
            stop_reason="toolUse",
            content=[
                types.ToolUseContent(type="tool_use", id=i, name="read_file", input={"path": "a"})
                for i in given
            ],
        )

    async with Client(
        make_server(),
        mode="legacy",
        sampling_callback=calls,
        sampling_capabilities=TOOLS_CAPABILITY,
    ) as client:
        final = await ask(client, use_tools=True)
    ids = [call.id for call in final.tool_calls]
    assert final.stop_reason == StopReason.TOOL_USE and len(ids) == len(given)
    assert all(ids) and len(set(ids)) == len(ids)
    if all(given):  # a repeated id gets a suffix no other call has; the others stay
        assert ids == ["x", "x_3", "x_2"]


async def test_what_the_client_says_in_failing_is_said_on_one_line() -> None:
    """The error is stored, printed and shown: the client's words on one line, control
    characters escaped."""

    async def failing(context: ClientRequestContext, params: Any) -> Any:
        return types.ErrorData(code=-1, message="refused:\n\x1b[31mno\x1b[0m")

    async with Client(make_server(), mode="legacy", sampling_callback=failing) as client:
        final = await ask(client)
    assert final.stop_reason == StopReason.ERROR
    assert final.error_message == (
        "the MCP client's model (sampling) failed: refused: \\x1b[31mno\\x1b[0m"
    )


class _AnswersAsGiven:
    """A server-side session of a client that answers sampling with ``answer`` as it is
    (the SDK's own client checks its answer before it goes out; another client may not)."""

    protocol_version = "2025-11-25"
    client_capabilities = types.ClientCapabilities(sampling=types.SamplingCapability())

    def __init__(self, answer: dict[str, Any]) -> None:
        self.answer = answer

    async def create_message(self, **kwargs: Any) -> Any:
        return types.CreateMessageResult.model_validate(self.answer)  # as the SDK checks it


async def test_an_answer_mcp_does_not_allow_is_named_by_its_field() -> None:
    session = _AnswersAsGiven({"role": "assistant", "content": {"type": "text", "text": "4"}})
    stream = sampling_stream_fn(ClientChannel(session))(
        sampling_model(), LlmContext("", [UserMessage(content="hi")]), StreamOptions()
    )
    final = await final_message(stream)
    assert final.stop_reason == StopReason.ERROR
    assert final.error_message == (
        "the MCP client's model (sampling) failed: its answer is no sampling result MCP allows"
        " (model: Field required)"
    )
