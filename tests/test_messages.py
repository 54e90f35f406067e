import json
from typing import Any, Literal

import pytest
from narrow import narrow

from mcp_agent.messages import (
    BRANCH_SUMMARY_PREFIX,
    BRANCH_SUMMARY_SUFFIX,
    COMPACTION_SUMMARY_PREFIX,
    COMPACTION_SUMMARY_SUFFIX,
    AssistantMessage,
    BaseMessage,
    BashExecutionMessage,
    BranchSummaryMessage,
    CompactionSummaryMessage,
    CustomMessage,
    ImageContent,
    MessageParseError,
    Model,
    ModelCost,
    StopReason,
    TextContent,
    ThinkingLevel,
    ToolCall,
    ToolResultMessage,
    Usage,
    UserContent,
    UserMessage,
    calculate_cost,
    convert_to_llm,
    convert_to_llm_message,
    parse_content,
    parse_message,
    register_message_type,
)

USAGE = {
    "input": 100,
    "output": 20,
    "cacheRead": 5,
    "cacheWrite": 0,
    "totalTokens": 125,
    "cost": {"input": 0.001, "output": 0.002, "cacheRead": 0.0, "cacheWrite": 0.0, "total": 0.003},
}

PI_MESSAGES = [
    {"role": "user", "content": "Hello, what's in the current directory?", "timestamp": 1},
    {
        "role": "user",
        "content": [
            {"type": "text", "text": "Analyze this image"},
            {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"},
        ],
        "timestamp": 2,
    },
    {
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": "list files", "thinkingSignature": "sig"},
            {"type": "text", "text": "I'll check the directory for you."},
            {
                "type": "toolCall",
                "id": "tc_123",
                "name": "bash",
                "arguments": {"command": "ls -la"},
            },
        ],
        "api": "openai-completions",
        "provider": "openai",
        "model": "gpt-4",
        "usage": USAGE,
        "stopReason": "toolUse",
        "timestamp": 3,
        "responseId": "resp_abc",
    },
    {
        "role": "assistant",
        "content": [],
        "api": "anthropic-messages",
        "provider": "anthropic",
        "model": "claude",
        "usage": USAGE,
        "stopReason": "error",
        "errorMessage": "overloaded",
        "timestamp": 4,
    },
    {
        "role": "toolResult",
        "toolCallId": "tc_123",
        "toolName": "bash",
        "content": [{"type": "text", "text": "file1.md\nfile2.md\n"}],
        "details": {"exitCode": 0},
        "isError": False,
        "timestamp": 5,
    },
    {
        "role": "bashExecution",
        "command": "ls -la",
        "output": "file1.md\nfile2.md\n",
        "exitCode": 0,
        "cancelled": False,
        "truncated": False,
        "timestamp": 6,
    },
    {
        "role": "custom",
        "customType": "someCustomType",
        "content": "Some custom content",
        "display": True,
        "timestamp": 7,
    },
    {"role": "branchSummary", "summary": "tried X", "fromId": "abcd1234", "timestamp": 8},
    {"role": "compactionSummary", "summary": "earlier", "tokensBefore": 1000, "timestamp": 9},
]


@pytest.mark.parametrize("data", PI_MESSAGES, ids=lambda d: d["role"])
def test_every_message_round_trips(data: dict) -> None:
    message = parse_message(data)
    assert message.to_json_dict() == data
    assert json.loads(message.to_json()) == data


def test_unknown_fields_are_kept_and_typed_fields_parsed() -> None:
    message = parse_message(PI_MESSAGES[2])
    assert isinstance(message, AssistantMessage)
    assert message.stop_reason == StopReason.TOOL_USE
    assert message.usage.cache_read == 5
    assert message.tool_calls[0].arguments == {"command": "ls -la"}
    assert message.model_extra == {"responseId": "resp_abc"}


def test_a_stop_reason_a_newer_pi_may_add_is_kept_as_it_is() -> None:
    data = {**PI_MESSAGES[2], "stopReason": "pause_turn"}
    message = parse_message(data)
    assert isinstance(message, AssistantMessage)
    assert message.stop_reason == "pause_turn"
    assert json.loads(message.to_json()) == data
    assert (
        narrow(parse_message(PI_MESSAGES[2]), AssistantMessage).stop_reason == StopReason.TOOL_USE
    )


def test_a_role_nobody_registered_is_kept_as_it_is_and_never_sent_to_a_model() -> None:
    # An app's own role (pi's CustomAgentMessages) or a newer pi's: pi keeps it in the
    # context and its convertToLlm leaves it out.
    data = {"role": "notification", "timestamp": 5, "text": "build done", "level": 2}
    message = parse_message(data)
    assert message.role == "notification"
    assert json.loads(message.to_json()) == data
    assert convert_to_llm([message, UserMessage(content="hi", timestamp=6)]) == [
        UserMessage(content="hi", timestamp=6)
    ]


def test_a_block_of_a_type_pi_does_not_have_yet_is_kept_as_it_is() -> None:
    data: dict[str, Any] = {**PI_MESSAGES[2]}
    data["content"] = [*data["content"], {"type": "redacted_thinking", "data": "zz"}]
    message = parse_message(data)
    assert isinstance(message, AssistantMessage)
    assert json.loads(message.to_json()) == data
    plain = narrow(parse_message(PI_MESSAGES[2]), AssistantMessage)
    assert message.text == plain.text  # it has no text
    assert [c.name for c in message.tool_calls] == ["bash"]


def test_explicit_null_round_trips_but_unset_optional_is_omitted() -> None:
    data = {**PI_MESSAGES[4], "details": None}
    assert parse_message(data).to_json_dict() == data
    built = ToolResultMessage(tool_call_id="a", tool_name="b", timestamp=1)
    assert "details" not in built.to_json_dict()
    assert "errorMessage" not in AssistantMessage(timestamp=1).to_json_dict()


def test_python_names_are_snake_case() -> None:
    message = ToolResultMessage(tool_call_id="a", tool_name="b", is_error=True, timestamp=1)
    assert message.to_json_dict()["toolCallId"] == "a"
    assert message.to_json_dict()["isError"] is True


def test_a_hook_message_outside_a_version_2_file_is_a_role_nobody_registered() -> None:
    """pi renames v2's hookMessage to custom only where it migrates a v2 file (see
    test_sessions_pi); anywhere else the role is kept, and never sent to a model, as pi does."""
    message = parse_message({**PI_MESSAGES[6], "role": "hookMessage"})
    assert type(message) is BaseMessage and message.role == "hookMessage"
    assert message.to_json_dict()["customType"] == PI_MESSAGES[6]["customType"]
    assert convert_to_llm([message]) == []


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        ({"role": 7, "content": "x"}, "message.role: expected a role such as assistant"),
        ({"content": "x"}, "message.role: field required"),
        ({"role": "user"}, "message.content: Field required"),
        ({"role": "toolResult", "toolName": "x", "content": []}, "message.toolCallId"),
        ({"role": "user", "content": [{"type": "text"}]}, "message.content.0.text: Field required"),
        (
            {
                "role": "assistant",
                "content": [{"type": "text", "text": "a"}],
                "usage": {"input": "x"},
            },
            "message.usage.input",
        ),
        ({"role": "assistant", "content": [], "stopReason": 7}, "message.stopReason"),
        ({"role": "user", "content": [{"text": "x"}]}, "message.content.0: a content block needs"),
        ("not an object", "expected a JSON object"),
    ],
)
def test_bad_input_names_the_field(data: object, fragment: str) -> None:
    with pytest.raises(MessageParseError) as caught:
        parse_message(data)  # type: ignore[arg-type]
    assert fragment in str(caught.value)


def test_parse_content() -> None:
    assert parse_content({"type": "image", "data": "x", "mimeType": "image/png"}) == ImageContent(
        data="x", mime_type="image/png"
    )
    with pytest.raises(MessageParseError, match=r"content\.mimeType"):
        parse_content({"type": "image", "data": "x"})


def test_thinking_levels() -> None:
    assert [level.value for level in ThinkingLevel] == [
        "off",
        "minimal",
        "low",
        "medium",
        "high",
        "xhigh",
        "max",
    ]


def test_cost_from_model_prices() -> None:
    model = Model(id="m", cost=ModelCost(input=0.5, output=1.5, cache_read=0.05, cache_write=1.0))
    usage = Usage(input=1000, output=200, cache_read=500, cache_write=100, total_tokens=1800)
    cost = calculate_cost(model, usage)
    assert cost.input == pytest.approx(0.0005)
    assert cost.output == pytest.approx(0.0003)
    assert cost.cache_read == pytest.approx(0.000025)
    assert cost.cache_write == pytest.approx(0.0001)
    assert cost.total == pytest.approx(0.0005 + 0.0003 + 0.000025 + 0.0001)
    assert usage.cost is cost


def test_usage_adds_up() -> None:
    a = Usage(input=1, output=2, total_tokens=3)
    a.cost.total = 0.5
    b = Usage(input=10, output=20, cache_read=4, total_tokens=34)
    b.cost.total = 0.25
    total = a + b
    assert (total.input, total.output, total.cache_read, total.total_tokens) == (11, 22, 4, 37)
    assert total.cost.total == pytest.approx(0.75)


# --- convert_to_llm ---------------------------------------------------------------------------


def test_convert_to_llm_matches_seed_example() -> None:
    user = UserMessage(content=[TextContent(text="Hello")], timestamp=1)
    assistant = AssistantMessage(
        content=[
            TextContent(text="Hi there!"),
            ToolCall(id="call_123", name="bash", arguments={"command": "ls"}),
        ],
        model="gpt-4",
        timestamp=2,
    )
    bash = BashExecutionMessage(
        command="ls -la", output="file1.md\nfile2.md\n", exit_code=0, timestamp=3
    )
    compaction = CompactionSummaryMessage(
        summary="Previous conversation compacted", tokens_before=1000, timestamp=4
    )
    custom = CustomMessage(custom_type="someCustomType", content="Some custom content", timestamp=5)
    result = convert_to_llm([user, assistant, bash, compaction, custom])

    assert result[0] is user and result[1] is assistant
    assert [m.role for m in result] == ["user", "assistant", "user", "user", "user"]
    assert (
        narrow(result[2].content[0], TextContent).text
        == "Ran `ls -la`\n```\nfile1.md\nfile2.md\n\n```"
    )
    assert result[2].timestamp == 3
    assert narrow(result[3].content[0], TextContent).text == (
        COMPACTION_SUMMARY_PREFIX + "Previous conversation compacted" + COMPACTION_SUMMARY_SUFFIX
    )
    assert "<summary>" in narrow(result[3].content[0], TextContent).text
    assert result[4].content == [TextContent(text="Some custom content")]


def test_bash_execution_excluded_and_failures_described() -> None:
    excluded = BashExecutionMessage(command="secret", output="x", exclude_from_context=True)
    assert convert_to_llm_message(excluded) is None
    failed = BashExecutionMessage(command="false", output="", exit_code=1)
    described = narrow(convert_to_llm_message(failed), UserMessage)
    assert narrow(described.content[0], TextContent).text == (
        "Ran `false`\n(no output)\n\nCommand exited with code 1"
    )
    cancelled = BashExecutionMessage(
        command="sleep 9",
        output="partial",
        cancelled=True,
        truncated=True,
        full_output_path="/tmp/out.txt",
    )
    described = narrow(convert_to_llm_message(cancelled), UserMessage)
    text = narrow(described.content[0], TextContent).text
    assert "(command cancelled)" in text and "/tmp/out.txt" in text


def test_branch_summary_wrapped_and_custom_blocks_kept() -> None:
    branch = BranchSummaryMessage(summary="went left", from_id="e1", timestamp=1)
    converted = narrow(convert_to_llm_message(branch), UserMessage)
    assert (
        narrow(converted.content[0], TextContent).text
        == BRANCH_SUMMARY_PREFIX + "went left" + BRANCH_SUMMARY_SUFFIX
    )
    blocks: list[UserContent] = [
        TextContent(text="a"),
        ImageContent(data="x", mime_type="image/png"),
    ]
    custom = CustomMessage(custom_type="t", content=blocks, display=False)
    assert narrow(convert_to_llm_message(custom), UserMessage).content == blocks


def test_tool_results_pass_through() -> None:
    result = ToolResultMessage(tool_call_id="a", tool_name="b")
    assert convert_to_llm([result]) == [result]


class ArtifactMessage(BaseMessage):
    role: Literal["artifact"] = "artifact"
    title: str
    body: str


def test_custom_message_type_registered_from_outside() -> None:
    register_message_type(ArtifactMessage)

    @convert_to_llm_message.register
    def _(message: ArtifactMessage) -> UserMessage:
        return UserMessage(
            content=f"[{message.title}]\n{message.body}", timestamp=message.timestamp
        )

    data = {"role": "artifact", "title": "plan", "body": "1. do it", "timestamp": 3}
    parsed = parse_message(data)
    assert isinstance(parsed, ArtifactMessage)
    assert parsed.to_json_dict() == data
    [converted] = convert_to_llm([parsed])
    assert converted.content == "[plan]\n1. do it"


def test_unregistered_message_class_is_left_out() -> None:
    class Note(BaseMessage):
        role: Literal["note"] = "note"

    assert convert_to_llm([Note()]) == []


def test_a_shape_first_used_on_many_threads_at_once_is_built_once_and_validates_alike() -> None:
    # Shapes are built at their first use (mcp_agent.wire.WireModel), which may come on
    # several worker threads at once; each must validate with the shape's own validator.
    import threading

    from pydantic import Field

    from mcp_agent.wire import WireModel

    class Block(WireModel):
        kind: Literal["block"] = "block"
        size: int

    class Shape(WireModel):
        name: str
        blocks: list[Block] = Field(default_factory=list)

    assert not Shape.__pydantic_complete__
    start = threading.Barrier(8)
    made: list[Any] = []

    def first_use() -> None:
        start.wait()
        made.append(Shape.model_validate({"name": "x", "blocks": [{"size": 3}]}))

    threads = [threading.Thread(target=first_use) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(made) == 8
    for shape in made:
        assert isinstance(shape, Shape)
        assert shape.to_json_dict() == {"name": "x", "blocks": [{"kind": "block", "size": 3}]}
