"""Our agent loop against pi's: each scenario runs through pi-agent-core's Agent (with pi-ai's
faux provider playing the script, tests/data/pi/loop.mjs) and through ours (ScriptedProvider),
and the two must tell the same story: events in order, the transcript, what each model call
was sent. Skipped when Node or pi is not installed (.ci/peers).

Left out, because we differ from pi on purpose (tests/test_loop.py pins ours):
- an answer that ends in error or aborted gets an error result for each of its tool calls (pi
  leaves them unanswered), so every tool call in the transcript has its result;
- an abort skips the calls of a sequential batch not yet started (pi still runs them), and
  leaves the steering queue untouched (pi injects what is queued before its aborted call);
- the tool calls of an answer cut off at the output limit (stop reason ``length``) are not run
  (pi runs them): their arguments may be incomplete;
- a failing transform_context / convert_to_llm is an assistant message with stop reason
  ``error`` and the usual events (pi's Agent appends one without message events);
- the validators' wording differs (TypeBox's and jsonschema's), so invalid arguments are
  compared by the fact of the error only.
The model call that pi's provider answers as aborted once a run is aborted is not made at
all by ours; such calls are left out of ``calls``."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp_support import find_pi

from mcp_agent.abort import AbortSignal
from mcp_agent.agent import Agent
from mcp_agent.events import (
    AgentEndEvent,
    AgentEvent,
    MessageEndEvent,
    MessageStartEvent,
    ToolExecutionEndEvent,
    ToolExecutionStartEvent,
    ToolExecutionUpdateEvent,
    TurnEndEvent,
)
from mcp_agent.loop import (
    AfterToolCallContext,
    AfterToolCallResult,
    BeforeToolCallContext,
    BeforeToolCallResult,
)
from mcp_agent.messages import (
    AssistantMessage,
    BaseMessage,
    QueueMode,
    StopReason,
    TextContent,
    ToolCall,
    ToolExecutionMode,
    ToolResultMessage,
    UserMessage,
)
from mcp_agent.providers.base import LlmContext
from mcp_agent.providers.scripted import (
    ScriptedProvider,
    ScriptedResponse,
    reply,
    scripted_model,
    tool_call,
)
from mcp_agent.tools import AgentTool, AgentToolResult, ToolUpdateCallback

PI = find_pi()
DATA = Path(__file__).parent / "data" / "pi"
pytestmark = pytest.mark.skipif(PI is None, reason="Node or pi is not installed (.ci/peers)")

X_SCHEMA = {
    "type": "object",
    "properties": {"x": {"type": "string"}},
    "required": ["x"],
}
TYPED_SCHEMA = {
    "type": "object",
    "properties": {
        "n": {"type": "integer"},
        "b": {"type": "boolean"},
        "s": {"type": "string"},
        "f": {"type": "number"},
    },
    "required": ["n"],
}


def text(t: str) -> dict[str, Any]:
    return {"type": "text", "text": t}


def call(id: str, name: str, **arguments: Any) -> dict[str, Any]:
    return {"type": "toolCall", "id": id, "name": name, "arguments": arguments}


def answer(*content: dict[str, Any], **options: Any) -> dict[str, Any]:
    return {"content": list(content), **options}


SCENARIOS: list[dict[str, Any]] = [
    {"name": "plain answer", "prompt": "hi", "responses": [answer(text("hello"))]},
    {
        "name": "one tool call",
        "prompt": "go",
        "tools": [{"name": "echo"}],
        "responses": [answer(text("calling"), call("c1", "echo", x="1")), answer(text("done"))],
    },
    {
        # c1 finishes after c2: ends in the order they finish, results in the order issued.
        "name": "parallel tool calls",
        "prompt": "go",
        "tools": [{"name": "a"}, {"name": "b"}, {"name": "c"}],
        "responses": [
            answer(call("c1", "a", after="c3"), call("c2", "b", after="c1"), call("c3", "c")),
            answer(text("done")),
        ],
    },
    {
        "name": "sequential tool calls",
        "prompt": "go",
        "toolExecution": "sequential",
        "tools": [{"name": "a"}, {"name": "b"}],
        "responses": [answer(call("c1", "a"), call("c2", "b")), answer(text("done"))],
    },
    {
        "name": "a sequential tool makes the batch sequential",
        "prompt": "go",
        "tools": [{"name": "a"}, {"name": "s", "sequential": True}],
        "responses": [answer(call("c1", "a"), call("c2", "s")), answer(text("done"))],
    },
    {
        "name": "a tool that throws, an unknown tool, invalid arguments",
        "prompt": "go",
        "tools": [{"name": "boom", "behaviour": "throw"}, {"name": "strict", "schema": X_SCHEMA}],
        "responses": [
            answer(call("c1", "boom"), call("c2", "nope"), call("c3", "strict", y=1)),
            answer(text("done")),
        ],
        # The validators' wording differs (TypeBox vs jsonschema); the fact of the error not.
        "ignore_text": ["c3"],
    },
    {
        "name": "tool updates",
        "prompt": "go",
        "tools": [{"name": "u", "behaviour": "updates"}],
        "responses": [answer(call("c1", "u")), answer(text("done"))],
    },
    {
        "name": "terminate",
        "prompt": "go",
        "tools": [{"name": "t", "behaviour": "terminate"}],
        "responses": [answer(call("c1", "t")), answer(text("never"))],
    },
    {
        "name": "steering queued during a tool",
        "prompt": "go",
        "tools": [{"name": "s", "behaviour": "steer"}, {"name": "a"}],
        "responses": [
            answer(call("c1", "s", text="change of plan"), call("c2", "a")),
            answer(text("ok, changing")),
        ],
    },
    {
        "name": "steering during a plain answer keeps the agent going",
        "prompt": "go",
        "actions": [{"on": "message_update", "nth": 1, "do": "steer", "text": "and another"}],
        "responses": [answer(text("first")), answer(text("second"))],
    },
    {
        "name": "follow-ups one at a time",
        "prompt": "go",
        "actions": [
            {"on": "turn_start", "nth": 1, "do": "followUp", "text": "f1"},
            {"on": "turn_start", "nth": 1, "do": "followUp", "text": "f2"},
            {"on": "turn_start", "nth": 1, "do": "steer", "text": "s1"},
        ],
        "responses": [
            answer(text("a1")),
            answer(text("a2")),
            answer(text("a3")),
            answer(text("a4")),
        ],
    },
    {
        "name": "steering drained all at once",
        "prompt": "go",
        "steeringMode": "all",
        "actions": [
            {"on": "turn_start", "nth": 1, "do": "steer", "text": "s1"},
            {"on": "turn_start", "nth": 1, "do": "steer", "text": "s2"},
        ],
        "responses": [answer(text("a1")), answer(text("a2"))],
    },
    {
        "name": "an error from the model",
        "prompt": "go",
        "responses": [answer(text("partial"), error="overloaded"), answer(text("never"))],
    },
    {
        "name": "abort while streaming",
        "prompt": "go",
        "slowStream": True,
        "actions": [{"on": "message_update", "nth": 1, "do": "abort"}],
        "responses": [answer(text("one"), text("two")), answer(text("never"))],
    },
    {
        "name": "abort during a tool",
        "prompt": "go",
        "tools": [{"name": "w", "behaviour": "waitAbort"}],
        "actions": [{"on": "tool_execution_start", "nth": 1, "do": "abort"}],
        "responses": [answer(call("c1", "w")), answer(text("never"))],
    },
    {
        "name": "before hook blocks",
        "prompt": "go",
        "tools": [{"name": "a"}, {"name": "b"}],
        "hooks": {"block": ["a"]},
        "responses": [answer(call("c1", "a"), call("c2", "b")), answer(text("done"))],
    },
    {
        "name": "before hook blocks with a reason",
        "prompt": "go",
        "tools": [{"name": "a"}],
        "hooks": {"block": ["a"], "reason": "not today"},
        "responses": [answer(call("c1", "a")), answer(text("done"))],
    },
    {
        "name": "after hook overrides and fails",
        "prompt": "go",
        "tools": [{"name": "a"}, {"name": "b"}, {"name": "boom", "behaviour": "throw"}],
        "hooks": {
            "after": {
                "a": {"text": "rewritten", "isError": True},
                "b": {"throw": "after hook broke"},
                "boom": {"text": "forgiven", "isError": False},
            }
        },
        "responses": [
            answer(call("c1", "a"), call("c2", "b"), call("c3", "boom")),
            answer(text("done")),
        ],
    },
    {
        "name": "transform context",
        "prompt": "go",
        "tools": [{"name": "a"}],
        "hooks": {"keepLast": 2},
        "responses": [answer(call("c1", "a")), answer(text("done"))],
    },
    {
        # Models send "5" for an integer; pi-ai converts such primitives before it validates.
        "name": "arguments converted to the schema's types",
        "prompt": "go",
        "tools": [{"name": "n", "schema": TYPED_SCHEMA}],
        "responses": [answer(call("c1", "n", n="5", b="true", s=3, f="2.5")), answer(text("ok"))],
    },
]


# --- pi's run ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pi_results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    assert PI is not None
    node, peers = PI
    path = tmp_path_factory.mktemp("loop") / "scenarios.json"
    path.write_text(json.dumps(SCENARIOS))
    done = subprocess.run(
        [node, str(DATA / "loop.mjs"), str(peers), str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return {result["name"]: result for result in json.loads(done.stdout)["results"]}


# --- our run ----------------------------------------------------------------------------------


def content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    parts = []
    for block in content:
        if isinstance(block, TextContent):
            parts.append(block.text)
        elif isinstance(block, ToolCall):
            parts.append(f"[call {block.id}]")
    return "".join(parts)


def normalise_message(message: BaseMessage) -> dict[str, Any]:
    if isinstance(message, AssistantMessage):
        return {
            "role": "assistant",
            "text": content_text(message.content),
            "stopReason": str(message.stop_reason),
            **({"error": True} if message.error_message else {}),
        }
    if isinstance(message, ToolResultMessage):
        return {
            "role": "toolResult",
            "toolCallId": message.tool_call_id,
            "text": content_text(message.content),
            "isError": message.is_error,
        }
    return {"role": message.role, "text": content_text(getattr(message, "content", ""))}


def describe(event: AgentEvent) -> str:
    match event:
        case MessageStartEvent(message=m) | MessageEndEvent(message=m):
            if isinstance(m, ToolResultMessage):
                what = m.tool_call_id
            elif isinstance(m, AssistantMessage):
                what = str(m.stop_reason) if isinstance(event, MessageEndEvent) else ""
            else:
                what = content_text(getattr(m, "content", ""))
            return f"{event.type} {m.role} {what}".rstrip()
        case ToolExecutionStartEvent(tool_call_id=i) | ToolExecutionUpdateEvent(tool_call_id=i):
            return f"{event.type} {i}"
        case ToolExecutionEndEvent(tool_call_id=i, is_error=e):
            return f"{event.type} {i}{' error' if e else ''}"
        case TurnEndEvent(message=m, tool_results=r):
            return f"turn_end {getattr(m, 'stop_reason', '')} results={len(r)}"
        case AgentEndEvent(messages=m):
            return f"agent_end messages={len(m)}"
    return event.type


def describe_sent(message: Any) -> str:
    which = f" {message.tool_call_id}" if isinstance(message, ToolResultMessage) else ""
    return f"{message.role}{which}: {content_text(message.content)}"


def user(text: str) -> UserMessage:
    return UserMessage(content=[TextContent(text=text)], timestamp=1)


def make_tool(spec: dict[str, Any], agent: list[Agent], gates: dict[str, anyio.Event]) -> AgentTool:
    name = spec["name"]
    behaviour = spec.get("behaviour", "echo")

    def gate(key: str) -> anyio.Event:
        return gates.setdefault(key, anyio.Event())

    async def execute(
        tool_call_id: str,
        params: dict[str, Any],
        signal: AbortSignal,
        on_update: ToolUpdateCallback,
        context: Any,
    ) -> AgentToolResult:
        try:
            if params.get("after"):
                await gate(params["after"]).wait()
            if behaviour == "throw":
                raise RuntimeError(f"{name} failed")
            if behaviour == "updates":
                on_update(AgentToolResult.text("working 1", details={"step": 1}))
                on_update(AgentToolResult.text("working 2", details={"step": 2}))
            elif behaviour == "waitAbort":
                await signal.wait()
                raise RuntimeError(f"{name} stopped by the abort")
            elif behaviour == "steer":
                agent[0].steer(user(params["text"]))
            elif behaviour == "terminate":
                return AgentToolResult.text(f"{name} done", details={}, terminate=True)
            arguments = json.dumps(params, separators=(",", ":"))
            return AgentToolResult.text(f"{name} {arguments}", details={"id": tool_call_id})
        finally:
            gate(tool_call_id).set()

    return AgentTool(
        name=name,
        description=f"the {name} tool",
        parameters=spec.get("schema", {"type": "object"}),
        execute=execute,
        execution_mode=ToolExecutionMode.SEQUENTIAL if spec.get("sequential") else None,
    )


def scripted(spec: dict[str, Any]) -> ScriptedResponse:
    blocks: list[str | ToolCall] = [
        b["text"] if b["type"] == "text" else tool_call(b["name"], b["arguments"], id=b["id"])
        for b in spec["content"]
    ]
    stop = spec.get("stopReason")
    return reply(*blocks, error=spec.get("error"), stop_reason=StopReason(stop) if stop else None)


async def run_ours(scenario: dict[str, Any]) -> dict[str, Any]:
    calls: list[list[str]] = []
    responses = [scripted(spec) for spec in scenario["responses"]]

    def responder(context: LlmContext) -> ScriptedResponse:
        calls.append([describe_sent(m) for m in context.messages])
        return responses[len(calls) - 1]

    hooks = scenario.get("hooks", {})

    async def before(
        ctx: BeforeToolCallContext, signal: AbortSignal
    ) -> BeforeToolCallResult | None:
        if ctx.tool_call.name in hooks["block"]:
            return BeforeToolCallResult(block=True, reason=hooks.get("reason"))
        return None

    async def after(ctx: AfterToolCallContext, signal: AbortSignal) -> AfterToolCallResult | None:
        override = hooks["after"].get(ctx.tool_call.name)
        if override is None:
            return None
        if "throw" in override:
            raise RuntimeError(override["throw"])
        return AfterToolCallResult(
            content=[TextContent(text=override["text"])], is_error=override.get("isError")
        )

    async def keep_last(messages: list[BaseMessage], signal: AbortSignal) -> list[BaseMessage]:
        return messages[-hooks["keepLast"] :]

    holder: list[Agent] = []
    gates: dict[str, anyio.Event] = {}
    agent = Agent(
        model=scripted_model(),
        stream_fn=ScriptedProvider(responder, chunk_size=1_000_000),
        tools=[make_tool(spec, holder, gates) for spec in scenario.get("tools", [])],
        tool_execution_mode=ToolExecutionMode(scenario.get("toolExecution", "parallel")),
        steering_mode=QueueMode(scenario.get("steeringMode", "one-at-a-time")),
        follow_up_mode=QueueMode(scenario.get("followUpMode", "one-at-a-time")),
        before_tool_call=before if "block" in hooks else None,
        after_tool_call=after if "after" in hooks else None,
        transform_context=keep_last if "keepLast" in hooks else None,
    )
    holder.append(agent)
    events: list[str] = []
    seen: dict[str, int] = {}

    def listen(event: AgentEvent) -> None:
        line = describe(event)
        if not (line == "message_update" and events and events[-1] == line):
            events.append(line)
        seen[event.type] = count = seen.get(event.type, 0) + 1
        for action in scenario.get("actions", []):
            if action["on"] != event.type or action["nth"] != count:
                continue
            if action["do"] == "abort":
                agent.abort()
            elif action["do"] == "steer":
                agent.steer(user(action["text"]))
            elif action["do"] == "followUp":
                agent.follow_up(user(action["text"]))

    agent.subscribe(listen)
    await agent.prompt(scenario["prompt"])
    messages = [normalise_message(m) for m in agent.state.messages]
    return {"name": scenario["name"], "events": events, "messages": messages, "calls": calls}


def comparable(result: dict[str, Any], scenario: dict[str, Any]) -> dict[str, Any]:
    ignored = set(scenario.get("ignore_text", []))
    messages = [
        {**m, "text": "…"} if m.get("toolCallId") in ignored else m for m in result["messages"]
    ]
    calls = [
        [
            line.split(":")[0] + ": …" if line.split(":")[0].split(" ")[-1] in ignored else line
            for line in sent
        ]
        for sent in result["calls"]
    ]
    return {"events": result["events"], "messages": messages, "calls": calls}


@pytest.mark.anyio
@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s["name"] for s in SCENARIOS])
async def test_our_loop_tells_pi_s_story(
    scenario: dict[str, Any], pi_results: dict[str, dict[str, Any]]
) -> None:
    theirs = pi_results[scenario["name"]]
    assert theirs["error"] is None
    ours = await run_ours(scenario)
    assert comparable(ours, scenario) == comparable(theirs, scenario)
