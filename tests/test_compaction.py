"""Compaction and branch summaries: token accounting, the cut point, split turns, summaries that
are updated rather than lost, file tracking, auto-compaction in the Agent, overflow recovery."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from narrow import narrow

from mcp_agent.abort import AbortController
from mcp_agent.agent import Agent, AgentBusyError
from mcp_agent.compaction.branch_summary import (
    BRANCH_SUMMARY_PREAMBLE,
    collect_branch_entries,
    prepare_branch_entries,
    summarize_branch,
)
from mcp_agent.compaction.compact import CompactionSettings, compact
from mcp_agent.compaction.cut_points import find_cut_point, prepare_compaction
from mcp_agent.compaction.errors import CompactionError
from mcp_agent.compaction.prompts import (
    SPLIT_TURN_SEPARATOR,
    SUMMARIZATION_PROMPT,
    SUMMARIZATION_SYSTEM_PROMPT,
    TURN_PREFIX_SUMMARIZATION_PROMPT,
    UPDATE_SUMMARIZATION_PROMPT,
)
from mcp_agent.compaction.tokens import (
    context_tokens,
    estimate_context_tokens,
    estimate_tokens,
    should_compact,
)
from mcp_agent.events import (
    AgentEvent,
    AutoCompactionEndEvent,
    AutoCompactionStartEvent,
    describe_event,
)
from mcp_agent.messages import (
    COMPACTION_SUMMARY_PREFIX,
    AssistantContent,
    AssistantMessage,
    BaseMessage,
    BranchSummaryMessage,
    CompactionSummaryMessage,
    ImageContent,
    StopReason,
    TextContent,
    ToolCall,
    ToolResultMessage,
    Usage,
    UserMessage,
    content_text,
    now_ms,
)
from mcp_agent.providers.base import CONTEXT_OVERFLOW_MARK, LlmContext
from mcp_agent.providers.scripted import (
    ScriptedProvider,
    ScriptedResponse,
    provider_error,
    reply,
    scripted_model,
    tool_call,
)
from mcp_agent.runtime.session_agent import RetrySettings, SessionAgent
from mcp_agent.sessions import (
    BranchSummaryEntry,
    CompactionEntry,
    InMemorySessionStorage,
    MessageEntry,
    Session,
    SessionError,
)
from mcp_agent.tools import AgentTool, AgentToolResult

pytestmark = pytest.mark.anyio

MODEL = scripted_model(context_window=4_000)
RESERVE = 1_000  # threshold: 3,000 tokens


# --- building sessions ------------------------------------------------------------------------


def user(text: str) -> UserMessage:
    return UserMessage(content=text)


def assistant(*blocks: str | ToolCall, usage: int = 0, **fields: Any) -> AssistantMessage:
    content: list[AssistantContent] = [
        TextContent(text=b) if isinstance(b, str) else b for b in blocks
    ]
    calls = any(isinstance(b, ToolCall) for b in blocks)
    fields.setdefault("stop_reason", StopReason.TOOL_USE if calls else StopReason.STOP)
    return AssistantMessage(
        content=content,
        provider=MODEL.provider,
        model=MODEL.id,
        usage=Usage(input=usage, total_tokens=usage),
        **fields,
    )


def call(call_id: str, name: str, **arguments: Any) -> ToolCall:
    return ToolCall(id=call_id, name=name, arguments=arguments)


def result(call_id: str, text: str, name: str = "read") -> ToolResultMessage:
    return ToolResultMessage(tool_call_id=call_id, tool_name=name, content=[TextContent(text=text)])


def words(label: str, tokens: int) -> str:
    """Text of exactly ``tokens`` estimated tokens that starts with ``label``."""
    return (label + " " + "x" * (tokens * 4))[: tokens * 4]


def add(session: Session, *messages: BaseMessage) -> list[str]:
    return [session.append_message(m) for m in messages]


def add_turns(session: Session, count: int, first: int = 0, tokens: int = 400) -> None:
    """``count`` plain turns of about ``tokens`` each (user 3/4, assistant 1/4)."""
    for n in range(first, first + count):
        add(
            session,
            user(words(f"question {n}", tokens * 3 // 4)),
            assistant(words(f"answer {n}", tokens // 4)),
        )


def new_session() -> Session:
    return Session(InMemorySessionStorage())


def message_entries(session: Session) -> list[MessageEntry]:
    return [e for e in session.get_entries() if isinstance(e, MessageEntry)]


def compactions(session: Session) -> list[CompactionEntry]:
    return [e for e in session.get_entries() if isinstance(e, CompactionEntry)]


class Summarizer:
    """A scripted summariser that records the prompts it was given."""

    def __init__(self, fail: str | None = None) -> None:
        self.prompts: list[str] = []
        self.system_prompts: list[str] = []
        self.fail = fail
        self.provider = ScriptedProvider(self.respond)

    def respond(self, context: LlmContext) -> ScriptedResponse:
        prompt = content_text(context.messages[-1].content)
        self.prompts.append(prompt)
        self.system_prompts.append(context.system_prompt)
        if self.fail is not None:
            return provider_error(self.fail)
        if TURN_PREFIX_SUMMARIZATION_PROMPT in prompt:
            return reply("PREFIX SUMMARY", usage=Usage(input=10, output=3, total_tokens=13))
        if "<previous-summary>" in prompt:
            return reply("UPDATED SUMMARY", usage=Usage(input=20, output=4, total_tokens=24))
        return reply("FIRST SUMMARY", usage=Usage(input=30, output=5, total_tokens=35))


def conversation_of(prompt: str) -> str:
    return prompt.split("</conversation>")[0]


# --- token accounting -------------------------------------------------------------------------


def test_estimate_tokens_counts_characters_and_images() -> None:
    assert estimate_tokens(user("abcde")) == 2  # ceil(5 / 4)
    image = ImageContent(data="AAAA", mime_type="image/png")
    # pi counts a user's images as nothing, a tool result's as 1,200 tokens each.
    assert estimate_tokens(UserMessage(content=[TextContent(text="abcd"), image])) == 1
    tool_result = ToolResultMessage(tool_call_id="c", tool_name="read", content=[image])
    assert estimate_tokens(tool_result) == 1200
    tool_use = assistant("ab", call("c", "read", path="a.py"))
    assert estimate_tokens(tool_use) == -(-(2 + len("read") + len('{"path":"a.py"}')) // 4)
    summary = CompactionSummaryMessage(summary="x" * 40, tokens_before=1)
    assert estimate_tokens(summary) == 10


def test_context_tokens_use_the_last_usage_plus_estimates_after_it() -> None:
    messages: list[BaseMessage] = [
        user(words("q", 100)),
        assistant("a", usage=1_000),
        user(words("q2", 50)),
        assistant("b", usage=2_000),
        user(words("q3", 30)),
        assistant(stop_reason=StopReason.ERROR, error_message="boom", usage=99_999),
    ]
    estimate = estimate_context_tokens(messages)
    # The error answer's usage is not usable; the one before it is, plus what follows it.
    assert estimate.last_usage_index == 3
    assert estimate.tokens == 2_000 + 30 + 0
    assert context_tokens(messages[:2]) == 1_000
    assert context_tokens([user(words("q", 100))]) == 100


def test_usage_from_before_a_compaction_is_stale() -> None:
    kept = assistant("kept", usage=50_000)
    summary = CompactionSummaryMessage(
        summary="s" * 400, tokens_before=50_000, timestamp=kept.timestamp + 1
    )
    messages: list[BaseMessage] = [summary, user(words("q", 100)), kept]
    # Reordered like a rebuilt context: the summary first, the kept (older) answer after it.
    assert context_tokens(messages) == 100 + 100 + 1
    fresh = assistant("new", usage=700, timestamp=summary.timestamp + 5)
    assert context_tokens([*messages, fresh]) == 700


def test_an_answer_begun_in_the_millisecond_of_the_compaction_is_fresh() -> None:
    """pi writes the compaction, the next question and the answer's start within one
    millisecond (its files show all three at one time): that answer measured the compacted
    context, and its usage is the context's size, as pi's context usage takes it. Ours took
    it for stale and estimated the whole context instead."""
    summary = CompactionSummaryMessage(summary="s" * 400, tokens_before=50_000, timestamp=5_000)
    question = UserMessage(content=words("q", 100), timestamp=5_000)
    answer = assistant("a", usage=9_000, timestamp=5_000)
    estimate = estimate_context_tokens([summary, question, answer])
    assert (estimate.tokens, estimate.last_usage_index) == (9_000, 2)


def test_trigger_threshold() -> None:
    assert not should_compact(3_000, 4_000, 1_000)
    assert should_compact(3_001, 4_000, 1_000)
    assert should_compact(128_000 - 16_384 + 1, 128_000)  # default reserve
    assert not should_compact(128_000 - 16_384, 128_000)


# --- the cut point ----------------------------------------------------------------------------


def tool_heavy_session() -> Session:
    session = new_session()
    for n in range(6):
        add(
            session,
            user(words(f"task {n}", 50)),
            assistant("looking", call(f"r{n}", "read", path=f"f{n}.py"), call(f"g{n}", "grep")),
        )
        if n == 3:  # a message that arrived between a call and its results
            session.append_custom_message("note", "the user is watching")
        add(
            session,
            result(f"r{n}", words("file", 100)),
            result(f"g{n}", words("matches", 100), name="grep"),
            assistant(words(f"summary {n}", 25)),
        )
    return session


def test_the_cut_never_orphans_a_tool_result() -> None:
    path = tool_heavy_session().get_branch()
    total = sum(estimate_tokens(e.message) for e in path if isinstance(e, MessageEntry))
    seen_cuts = set()
    for keep in range(1, total + 50, 5):
        cut = find_cut_point(path, keep)
        seen_cuts.add(cut.first_kept_index)
        kept = path[cut.first_kept_index :]
        calls = {
            c.id
            for e in kept
            if isinstance(e, MessageEntry) and isinstance(e.message, AssistantMessage)
            for c in e.message.tool_calls
        }
        for entry in kept:
            if isinstance(entry, MessageEntry) and isinstance(entry.message, ToolResultMessage):
                assert entry.message.tool_call_id in calls, (keep, cut)
        first = kept[0]
        assert not (isinstance(first, MessageEntry) and first.message.role == "toolResult")
    assert len(seen_cuts) > 6  # the walk did move the cut around


def split_turn_session() -> tuple[Session, dict[str, str]]:
    session = new_session()
    ids: dict[str, str] = {}
    add(session, user(words("earlier question", 100)), assistant(words("earlier answer", 20)))
    ids["turn"] = add(session, user("fix the bug in a.py"))[0]
    add(
        session,
        assistant(call("c1", "read", path="a.py")),
        result("c1", words("contents of a.py", 200)),
        assistant(call("c2", "edit", path="a.py", old="x", new="y")),
        result("c2", words("edited", 200), name="edit"),
    )
    ids["kept"] = add(session, assistant(call("c3", "read", path="b.py")))[0]
    add(session, result("c3", words("contents of b.py", 200)), assistant("done"))
    return session, ids


def test_a_cut_inside_a_turn_is_a_split_turn() -> None:
    session, ids = split_turn_session()
    path = session.get_branch()
    cut = find_cut_point(path, 300)
    assert path[cut.first_kept_index].id == ids["kept"]
    assert cut.is_split_turn
    assert cut.turn_start_index is not None and path[cut.turn_start_index].id == ids["turn"]
    # A cut at a user message is not a split turn: keep exactly the last turn's tokens.
    turn = next(i for i, e in enumerate(path) if e.id == ids["turn"])
    turn_tokens = sum(
        estimate_tokens(e.message) for e in path[turn:] if isinstance(e, MessageEntry)
    )
    whole = find_cut_point(path, turn_tokens)
    assert path[whole.first_kept_index].id == ids["turn"] and not whole.is_split_turn


async def test_split_turn_summarises_the_turn_prefix_separately() -> None:
    session, ids = split_turn_session()
    summarizer = Summarizer()
    outcome = await compact(session, MODEL, summarizer.provider, keep_recent_tokens=300)
    assert outcome.is_split_turn and outcome.first_kept_entry_id == ids["kept"]
    history, prefix = sorted(
        summarizer.prompts, key=lambda p: TURN_PREFIX_SUMMARIZATION_PROMPT in p
    )
    assert "earlier question" in conversation_of(history) and "fix the bug" not in history
    assert "fix the bug in a.py" in conversation_of(prefix)
    assert "earlier question" not in prefix and "contents of b.py" not in prefix
    assert outcome.summary.startswith("FIRST SUMMARY" + SPLIT_TURN_SEPARATOR + "PREFIX SUMMARY")
    assert outcome.details == {"readFiles": [], "modifiedFiles": ["a.py"]}
    assert outcome.usage.total_tokens == 35 + 13
    messages = session.build_context().messages
    assert isinstance(messages[0], CompactionSummaryMessage)
    assert [m.role for m in messages[1:]] == ["assistant", "toolResult", "assistant"]


# --- compacting -------------------------------------------------------------------------------


async def test_compaction_rebuilds_a_context_below_the_threshold() -> None:
    session = new_session()
    add_turns(session, 9)
    # Begun a millisecond before the compaction at least, as a model's answer is.
    answer = assistant("answer 9", usage=4_000, timestamp=now_ms() - 1)
    add(session, user(words("question 9", 300)), answer)
    before = session.build_context().messages
    assert should_compact(context_tokens(before), MODEL.context_window, RESERVE)
    entries_before = {e.id for e in session.get_entries()}

    summarizer = Summarizer()
    outcome = await compact(session, MODEL, summarizer.provider, keep_recent_tokens=1_000)

    assert summarizer.system_prompts == [SUMMARIZATION_SYSTEM_PROMPT]
    (prompt,) = summarizer.prompts
    assert prompt.endswith(SUMMARIZATION_PROMPT) and "<previous-summary>" not in prompt
    (entry,) = compactions(session)
    assert entry.id == outcome.entry_id and session.leaf_id == entry.id
    assert entry.summary == "FIRST SUMMARY" and entry.tokens_before == 4_000
    assert entry.usage is not None and entry.usage.total_tokens == 35
    assert entry.details == {"readFiles": [], "modifiedFiles": []}
    # History is never deleted.
    assert entries_before < {e.id for e in session.get_entries()}

    messages = session.build_context().messages
    assert isinstance(messages[0], CompactionSummaryMessage)
    assert messages[0].summary == "FIRST SUMMARY"
    path = session.get_branch()
    first_kept = next(i for i, e in enumerate(path) if e.id == entry.first_kept_entry_id)
    kept = [e.message for e in path[first_kept:] if isinstance(e, MessageEntry)]
    assert messages[1:] == kept
    assert isinstance(kept[0], UserMessage)  # a whole turn: no split
    summarized = conversation_of(prompt)
    assert "question 0" in summarized and content_text(kept[0].content)[:12] not in summarized
    assert context_tokens(messages) == outcome.tokens_after
    assert not should_compact(outcome.tokens_after, MODEL.context_window, RESERVE)
    # About keep_recent_tokens are kept: at least that, less one more message.
    assert 1_000 <= outcome.tokens_after - estimate_tokens(messages[0]) < 1_000 + 300


async def test_a_second_compaction_updates_the_first_summary_and_keeps_file_lists() -> None:
    session = new_session()
    add(
        session,
        user(words("read the notes", 300)),
        assistant(call("n", "read", path="notes.md")),
        result("n", words("notes", 100)),
        assistant("noted"),
    )
    add_turns(session, 4, first=1)
    summarizer = Summarizer()
    first = await compact(session, MODEL, summarizer.provider, keep_recent_tokens=800)
    assert first.details == {"readFiles": ["notes.md"], "modifiedFiles": []}
    assert first.summary == "FIRST SUMMARY\n\n<read-files>\nnotes.md\n</read-files>"

    add(
        session,
        user(words("now edit", 300)),
        assistant(call("e", "write", path="src/a.py", content="...")),
        result("e", "written", name="write"),
        assistant("edited"),
    )
    add_turns(session, 4, first=10)
    second = await compact(
        session, MODEL, summarizer.provider, keep_recent_tokens=800, instructions="keep paths"
    )
    prompt = summarizer.prompts[-1]
    assert f"<previous-summary>\n{first.summary}\n</previous-summary>" in prompt
    assert UPDATE_SUMMARIZATION_PROMPT in prompt and prompt.endswith("Additional focus: keep paths")
    # Only what the first compaction did not summarise is sent again.
    assert "read the notes" not in conversation_of(prompt) and "now edit" in prompt
    assert second.details == {"readFiles": ["notes.md"], "modifiedFiles": ["src/a.py"]}
    assert second.summary.startswith("UPDATED SUMMARY\n\n<read-files>\nnotes.md")
    messages = session.build_context().messages
    summaries = [m for m in messages if isinstance(m, CompactionSummaryMessage)]
    assert len(summaries) == 1 and summaries[0].summary == second.summary
    assert (
        messages[0] is summaries[0]
        or narrow(messages[0], CompactionSummaryMessage).summary == second.summary
    )
    assert len(compactions(session)) == 2


async def test_a_split_turn_right_after_a_compaction_carries_the_earlier_summary() -> None:
    """A compaction kept a whole turn, and that turn then grew (an agent's tool calls, no new
    prompt): the next compaction splits it at its start, with no history before it to update
    the earlier summary with. pi wrote "No prior history." there, and the earlier summary
    went out of the context."""
    session = new_session()
    add(
        session,
        user(words("old task", 600)),
        assistant(call("n", "read", path="notes.md")),
        result("n", "notes"),
        assistant("old answer"),
    )
    add(session, user(words("the long turn", 600)), assistant("first step"))
    summarizer = Summarizer()
    first = await compact(session, MODEL, summarizer.provider, keep_recent_tokens=500)
    assert first.summary == "FIRST SUMMARY\n\n<read-files>\nnotes.md\n</read-files>"
    add(session, assistant(call("r", "read", path="big.txt")), result("r", words("big", 600)))

    second = await compact(session, MODEL, summarizer.provider, keep_recent_tokens=500)

    assert second.is_split_turn
    # Carried over whole; its file lists appear once, merged into the new ones.
    assert second.summary == (
        "FIRST SUMMARY"
        + SPLIT_TURN_SEPARATOR
        + "PREFIX SUMMARY\n\n<read-files>\nnotes.md\n</read-files>"
    )
    summary = narrow(session.build_context().messages[0], CompactionSummaryMessage)
    assert summary.summary == second.summary


async def test_a_history_longer_than_the_summarisers_window_is_summarised_in_parts() -> None:
    """A session appended to over MCP (no run ever compacted it) holds more than the model
    reads at once: the summariser refused the one request every time, so it could never be
    compacted. A refused part is halved, each half updating the summary so far."""
    session = new_session()
    add_turns(session, 12)
    summarized: list[str] = []

    def respond(context: LlmContext) -> ScriptedResponse:
        prompt = content_text(context.messages[-1].content)
        if len(prompt) > 6_000:
            return provider_error(f"{CONTEXT_OVERFLOW_MARK}: prompt is too long")
        summarized.append(conversation_of(prompt))
        return reply(f"SUMMARY {len(summarized)}")

    outcome = await compact(session, MODEL, ScriptedProvider(respond), keep_recent_tokens=800)

    assert len(summarized) > 1 and outcome.summary == f"SUMMARY {len(summarized)}"
    for n in range(10):  # each summarised question went in exactly one accepted request
        assert sum(f"question {n} " in part for part in summarized) == 1, n
    # An error that is not about length is not retried in parts.
    failing = Summarizer(fail="rate limited")
    add_turns(session, 12, first=20)
    with pytest.raises(CompactionError, match="rate limited"):
        await compact(session, MODEL, failing.provider, keep_recent_tokens=800)
    assert len(failing.prompts) == 1


async def test_a_summary_cut_at_the_output_limit_is_written_with_a_warning() -> None:
    """A summary the model stopped at max_tokens was written as if whole, and nothing said
    that it may lack its end."""
    cut = ScriptedProvider(lambda context: reply("SUMMARY, cut", stop_reason=StopReason.LENGTH))
    session = new_session()
    add_turns(session, 6)
    outcome = await compact(session, MODEL, cut, keep_recent_tokens=800)
    assert not outcome.is_split_turn
    assert outcome.summary == "SUMMARY, cut" and compactions(session)  # written all the same
    (warning,) = outcome.warnings
    assert warning.startswith("Summarization stopped at its output limit of "), warning
    assert "may lack its end" in warning
    # Of a split turn, whichever part was cut says so.
    session, _ = split_turn_session()

    def prefix_cut(context: LlmContext) -> ScriptedResponse:
        if TURN_PREFIX_SUMMARIZATION_PROMPT in content_text(context.messages[-1].content):
            return reply("PREFIX", stop_reason=StopReason.LENGTH)
        return reply("HISTORY")

    split = await compact(session, MODEL, ScriptedProvider(prefix_cut), keep_recent_tokens=300)
    assert split.is_split_turn and len(split.warnings) == 1
    assert split.warnings[0].startswith("Turn prefix summarization stopped at its output limit")
    # A whole one has none, and the event a run announces it with says a warning.
    session = new_session()
    add_turns(session, 6)
    assert (
        await compact(session, MODEL, Summarizer().provider, keep_recent_tokens=500)
    ).warnings == []
    said = describe_event(AutoCompactionEndEvent("threshold", outcome))
    assert "; warning: Summarization stopped at its output limit" in said, said


async def test_a_turn_prefix_longer_than_the_summarisers_window_is_summarised_in_parts() -> None:
    """One long turn (a task of many tool calls) cut inside: its beginning went to the model
    in one request, which it refused as too long, every time, so the session could never be
    compacted. The prefix is halved as a history is, each part taking in the summary of
    those before it; one message too long alone is refused, saying what to do."""
    session = new_session()
    add(session, user("start the migration"))
    for n in range(12):
        add(
            session,
            assistant(call(f"c{n}", "step", n=n)),
            result(f"c{n}", words(f"step {n} output", 450)),  # its serialised form: 2,000 chars
        )
    kept = add(session, assistant(call("last", "step", n=99)))[0]
    add(session, result("last", words("last output", 450)), assistant("done"))
    parts: list[str] = []

    def respond(context: LlmContext) -> ScriptedResponse:
        prompt = content_text(context.messages[-1].content)
        if len(prompt) > 12_000:
            return provider_error(f"{CONTEXT_OVERFLOW_MARK}: prompt is too long")
        parts.append(prompt)
        return reply(f"PREFIX {len(parts)}")

    outcome = await compact(session, MODEL, ScriptedProvider(respond), keep_recent_tokens=500)

    assert outcome.is_split_turn and outcome.first_kept_entry_id == kept
    assert len(parts) > 1 and all(TURN_PREFIX_SUMMARIZATION_PROMPT in p for p in parts)
    assert outcome.summary == f"No prior history.{SPLIT_TURN_SEPARATOR}PREFIX {len(parts)}"
    for n in range(12):  # each step went in exactly one accepted request
        assert sum(f"step {n} output" in conversation_of(p) for p in parts) == 1, n
    # Each part after the first took in the summary so far.
    assert all(f"<previous-summary>\nPREFIX {i}\n" in p for i, p in enumerate(parts[1:], 1))
    assert "<previous-summary>" not in parts[0]

    # One message more than the model reads at once: refused, saying what to do.
    session = new_session()
    add(session, user("earlier"), assistant("ok"))
    add(session, user(words("paste", 5_000)), assistant(call("c1", "step")))
    add(session, result("c1", words("out", 100)), assistant(call("c2", "step")))
    add(session, result("c2", words("out", 100)), assistant("done"))
    before = session.get_entries()
    with pytest.raises(CompactionError) as refused:
        await compact(session, MODEL, ScriptedProvider(respond), keep_recent_tokens=150)
    said = str(refused.value)
    assert "one user message of about 5,000 tokens is more than" in said, said
    assert "compact with a model whose window holds it" in said and "session_move_to" in said
    assert said.endswith("; nothing was written") and session.get_entries() == before


async def test_a_failing_summariser_writes_nothing() -> None:
    session = new_session()
    add_turns(session, 6)
    before = session.get_entries()
    with pytest.raises(CompactionError, match="Summarization failed: rate limited") as failure:
        await compact(
            session, MODEL, Summarizer(fail="rate limited").provider, keep_recent_tokens=500
        )
    assert failure.value.code == "summarizer_failed"
    assert session.get_entries() == before

    aborted = AbortController()
    aborted.abort("stop")
    with pytest.raises(CompactionError) as stopped:
        await compact(
            session, MODEL, Summarizer().provider, keep_recent_tokens=500, signal=aborted.signal
        )
    assert stopped.value.code == "aborted"
    assert session.get_entries() == before


async def test_a_summary_no_shorter_than_what_it_replaces_writes_nothing() -> None:
    session = new_session()
    add_turns(session, 6)
    before = session.get_entries()
    replaced = sum(estimate_tokens(m) for m in session.build_context().messages)
    long = ScriptedProvider(lambda context: reply("word " * (replaced * 4)))
    with pytest.raises(CompactionError, match="is no shorter than the messages it would") as no:
        await compact(session, MODEL, long, keep_recent_tokens=500)
    assert no.value.code == "no_gain" and "nothing was written" in str(no.value)
    assert session.get_entries() == before
    await compact(session, MODEL, Summarizer().provider, keep_recent_tokens=500)  # a short one
    assert len(session.get_entries()) == len(before) + 1


async def test_nothing_to_compact() -> None:
    session = new_session()
    with pytest.raises(CompactionError, match="empty"):
        await compact(session, MODEL, Summarizer().provider)
    add_turns(session, 2)
    summarizer = Summarizer()
    with pytest.raises(CompactionError, match="nothing to compact") as small:
        await compact(session, MODEL, summarizer.provider)  # keeps 20,000 tokens: all of it
    assert small.value.code == "nothing_to_compact" and summarizer.prompts == []
    # Asked for by hand (pi's /compact), it is made: nothing summarised, everything kept.
    manual = narrow(
        session.get_entry(
            (await compact(session, MODEL, summarizer.provider, manual=True)).entry_id
        ),
        CompactionEntry,
    )
    assert manual.summary == "No prior history." and summarizer.prompts == []
    assert manual.first_kept_entry_id == session.get_branch()[0].id
    session.move_to(manual.parent_id)
    await compact(session, MODEL, summarizer.provider, keep_recent_tokens=100)
    with pytest.raises(CompactionError, match="already compacted"):
        prepare_compaction(session.get_branch(), 100)
    # A cut falls only between messages: a branch a little over the budget may be all kept.
    one_turn = new_session()
    add(one_turn, user(words("question", 150)), assistant(words("answer", 100)))
    with pytest.raises(CompactionError, match="nothing to compact") as over:
        prepare_compaction(one_turn.get_branch(), 200)
    assert "fits" not in str(over.value) and "rounded up to whole messages" in str(over.value)


# --- the agent --------------------------------------------------------------------------------


def read_tool() -> AgentTool:
    async def execute(tool_call_id, params, signal, on_update, context):
        return AgentToolResult.text(words(f"contents of {params['path']}", 600))

    return AgentTool(
        name="read",
        description="read a file",
        parameters={"type": "object", "properties": {"path": {"type": "string"}}},
        execute=execute,
    )


def compacting_agent(
    session: Session, script: list[Any], summarizer: Summarizer, **settings: Any
) -> tuple[SessionAgent, ScriptedProvider]:
    provider = ScriptedProvider(script)
    settings.setdefault("reserve_tokens", RESERVE)
    settings.setdefault("keep_recent_tokens", 1_000)
    agent = SessionAgent.from_session(
        session,
        stream_fn=provider,
        model=MODEL,
        tools=[read_tool()],
        compaction=CompactionSettings(stream_fn=summarizer.provider, **settings),
    )
    return agent, provider


def compaction_events(agent: Agent) -> list[AutoCompactionStartEvent | AutoCompactionEndEvent]:
    """The compaction events ``agent`` sends from now on (filled in as it runs)."""
    seen: list[AutoCompactionStartEvent | AutoCompactionEndEvent] = []

    def listen(event: AgentEvent) -> None:
        if isinstance(event, AutoCompactionStartEvent | AutoCompactionEndEvent):
            seen.append(event)

    agent.subscribe(listen)
    return seen


def llm_roles(context: LlmContext) -> list[str]:
    return [m.role for m in context.messages]


async def test_agent_compacts_after_a_run_over_the_threshold() -> None:
    session = new_session()
    add_turns(session, 6)  # about 2,400 tokens: under the threshold before the prompt
    summarizer = Summarizer()
    big = Usage(input=3_100, output=10, total_tokens=3_110)
    # Streamed for a few milliseconds, as a model's answer is: begun before the compaction
    # written after it (one begun in the compaction's millisecond is taken for after it).
    answer = reply("ok", usage=big, delay=0.002)
    agent, provider = compacting_agent(session, [answer], summarizer)
    events = compaction_events(agent)
    new = await agent.prompt("next")
    assert [m.role for m in new] == ["user", "assistant"]
    start, end = events
    assert isinstance(start, AutoCompactionStartEvent) and start.reason == "threshold"
    assert isinstance(end, AutoCompactionEndEvent) and end.reason == "threshold"
    assert end.result.entry_id == compactions(session)[0].id
    assert end.result.tokens_before > end.result.tokens_after
    assert (end.aborted, end.will_retry, end.error_message) == (False, False, None)
    assert describe_event(end).startswith("compacted: about ")
    assert len(provider.calls) == 1 and len(summarizer.prompts) == 1
    assert len(compactions(session)) == 1
    assert isinstance(agent.state.messages[0], CompactionSummaryMessage)
    assert agent.state.messages == session.build_context().messages
    assert not should_compact(context_tokens(agent.state.messages), 4_000, RESERVE)


async def test_agent_below_the_threshold_does_not_compact() -> None:
    session = new_session()
    add_turns(session, 6)
    summarizer = Summarizer()
    agent, _ = compacting_agent(session, [reply("ok", usage=Usage(total_tokens=3_000))], summarizer)
    await agent.prompt("next")
    assert compactions(session) == [] and summarizer.prompts == []
    disabled, _ = compacting_agent(
        session, [reply("ok", usage=Usage(total_tokens=3_900))], summarizer, enabled=False
    )
    await disabled.prompt("again")
    assert compactions(session) == [] and summarizer.prompts == []


async def test_a_failed_answer_counts_for_nothing_toward_a_compaction() -> None:
    """A failed answer is never sent to the model, however much text it kept (a stream cut
    off at the answer's bound held 16 MB): it does not count toward the context, so it sets
    off no compaction of its own. After it, as after any answer, the context the last good
    answer measured is compacted at the threshold, as pi does (so that a session whose API
    keeps failing can still compact)."""
    session = new_session()
    add_turns(session, 6)  # about 2,400 tokens: under the threshold of 3,000
    summarizer = Summarizer()
    failed = provider_error("the connection broke off mid-stream", words("partial", 2_000))
    answer = reply("ok", usage=Usage(total_tokens=2_500))  # an API counts what it was sent
    agent, provider = compacting_agent(session, [failed, answer], summarizer)
    await agent.prompt("next")
    assert summarizer.prompts == [] and compactions(session) == []
    assert context_tokens(agent.state.messages) < 3_000
    await agent.prompt("again")  # nor before the next prompt
    assert summarizer.prompts == [] and compactions(session) == []
    assert len(provider.calls) == 2
    # Over the threshold with the prompt: compacted after the failed answer, as pi does.
    agent, _ = compacting_agent(session, [provider_error("overloaded")], summarizer)
    await agent.prompt(words("long", 700))
    assert summarizer.prompts and len(compactions(session)) == 1
    # But not with no answer that measured the context (pi: nothing to estimate from).
    fresh = new_session()
    fresh.append_message(UserMessage(content=words("long", 700)))
    agent, _ = compacting_agent(fresh, [provider_error("overloaded")], summarizer)
    await agent.prompt(words("more", 700))
    assert compactions(fresh) == []


async def test_agent_compacts_before_a_prompt() -> None:
    session = new_session()
    add_turns(session, 10)  # about 4,000 estimated tokens
    summarizer = Summarizer()
    agent, provider = compacting_agent(session, [reply("ok")], summarizer)
    await agent.prompt("next")
    (sent,) = provider.calls
    first = content_text(sent.messages[0].content)
    assert first.startswith(COMPACTION_SUMMARY_PREFIX + "FIRST SUMMARY")
    assert content_text(sent.messages[-1].content) == "next"
    assert len(compactions(session)) == 1  # the fresh answer's usage is small: no second one


OVERFLOW = f"{CONTEXT_OVERFLOW_MARK}: prompt is too long: 5000 tokens > 4000 maximum"


async def test_overflow_compacts_and_retries_once() -> None:
    session = new_session()
    add_turns(session, 6)
    summarizer = Summarizer()
    agent, provider = compacting_agent(
        session, [provider_error(OVERFLOW), reply("recovered")], summarizer
    )
    events = compaction_events(agent)
    new = await agent.prompt("next")
    assert [(e.type, e.reason) for e in events] == [
        ("auto_compaction_start", "overflow"),
        ("auto_compaction_end", "overflow"),
    ]
    end = narrow(events[1], AutoCompactionEndEvent)
    assert end.will_retry and end.result is not None

    assert len(provider.calls) == 2 and len(compactions(session)) == 1
    assert [m.role for m in new] == ["user", "assistant", "assistant"]
    assert narrow(new[1], AssistantMessage).stop_reason == StopReason.ERROR
    assert narrow(new[-1], AssistantMessage).text == "recovered"
    retried = provider.calls[1]
    assert content_text(retried.messages[0].content).startswith(COMPACTION_SUMMARY_PREFIX)
    assert content_text(retried.messages[-1].content) == "next"
    assert not any(
        isinstance(m, AssistantMessage) and m.stop_reason == StopReason.ERROR
        for m in retried.messages
    )
    # The failed answer stays in the session's history but not in the agent's transcript.
    stored = [e.message for e in message_entries(session)]
    assert any(getattr(m, "error_message", None) == OVERFLOW for m in stored)
    assert all(getattr(m, "stop_reason", None) != StopReason.ERROR for m in agent.state.messages)
    assert narrow(agent.state.messages[-1], AssistantMessage).text == "recovered"


async def test_pis_default_settings_fit_a_small_window() -> None:
    """Keep 20,000 and reserve 16,384 (pi's defaults, what the server and the CLI use) with a
    model of 8,000 tokens: the threshold was below zero, so every prompt set off a compaction
    that found nothing to compact (all of it within the 20,000 kept), and an overflow was
    never recovered from. Each is now at most a quarter of the window."""
    small = scripted_model(context_window=8_000)

    def small_agent(session: Session, script: list[Any], summarizer: Summarizer) -> SessionAgent:
        settings = CompactionSettings(stream_fn=summarizer.provider)
        provider = ScriptedProvider(script)
        return SessionAgent.from_session(
            session, stream_fn=provider, model=small, compaction=settings
        )

    short, summarizer = new_session(), Summarizer()
    agent = small_agent(short, [reply("ok")], summarizer)
    events = compaction_events(agent)
    await agent.prompt("hi")
    assert events == [] and summarizer.prompts == []  # a short session is left alone

    long, summarizer = new_session(), Summarizer()
    add_turns(long, 6, tokens=1_000)
    agent = small_agent(long, [provider_error(OVERFLOW), reply("recovered")], summarizer)
    events = compaction_events(agent)
    new = await agent.prompt("next")
    assert narrow(new[-1], AssistantMessage).text == "recovered"
    (end,) = [e for e in events if isinstance(e, AutoCompactionEndEvent)]
    assert end.reason == "overflow" and end.result is not None
    assert context_tokens(long.build_context().messages) < 8_000 - 2_000


async def test_a_passing_error_after_overflow_recovery_is_retried() -> None:
    session = new_session()
    add_turns(session, 6)
    summarizer = Summarizer()
    overloaded = "api.test: the server overloaded mid-stream: overloaded_error"
    agent, provider = compacting_agent(
        session,
        [provider_error(OVERFLOW), provider_error(overloaded), reply("recovered")],
        summarizer,
    )
    agent.retry = RetrySettings(base_delay=0.01)
    with anyio.fail_after(5):
        new = await agent.prompt("next")
    assert len(provider.calls) == 3 and len(compactions(session)) == 1
    assert narrow(new[-1], AssistantMessage).text == "recovered"


async def test_overflow_is_retried_once_and_again_after_an_answer_that_works() -> None:
    """As pi's AgentSession: one recovery per overflow; an overflow straight after the retry
    ends the run, while a run that went on working (a tool call) and filled the window again
    recovers again."""
    session = new_session()
    add_turns(session, 6)
    summarizer = Summarizer()
    agent, provider = compacting_agent(
        session, [provider_error(OVERFLOW), provider_error(OVERFLOW), reply("never")], summarizer
    )
    new = await agent.prompt("next")
    assert len(provider.calls) == 2 and provider.remaining == 1
    assert len(compactions(session)) == 1
    last = narrow(new[-1], AssistantMessage)
    assert last.stop_reason == StopReason.ERROR and last.error_message == OVERFLOW

    session = new_session()
    add_turns(session, 6)
    agent, provider = compacting_agent(
        session,
        [
            provider_error(OVERFLOW),
            # The retry reads a file (enough new content for another compaction), then overflows.
            reply(tool_call("read", {"path": "big.txt"})),
            provider_error(OVERFLOW),
            reply("recovered"),
        ],
        Summarizer(),
    )
    new = await agent.prompt("next")
    assert len(provider.calls) == 4 and len(compactions(session)) == 2
    roles = ["user", "assistant", "assistant", "toolResult", "assistant", "assistant"]
    assert [m.role for m in new] == roles
    assert narrow(new[-1], AssistantMessage).text == "recovered"


@pytest.mark.parametrize(
    "answer",
    [
        # A server that cut the input silently: an answer, having read more than fits.
        reply("garbled", usage=Usage(input=3_900, cache_read=200, output=5)),
        # One that cut it to fit: nothing written, the window full.
        reply("", stop_reason=StopReason.LENGTH, usage=Usage(input=3_990, output=0)),
    ],
    ids=["read-past-the-window", "length-with-nothing-written"],
)
async def test_an_overflow_a_server_does_not_call_one_is_compacted_and_retried(
    answer: ScriptedResponse,
) -> None:
    """As pi's isContextOverflow, given the model's window (4,000 tokens here)."""
    session = new_session()
    add_turns(session, 6)
    agent, provider = compacting_agent(session, [answer, reply("recovered")], Summarizer())
    events = compaction_events(agent)
    new = await agent.prompt("next")
    assert (events[0].type, events[0].reason) == ("auto_compaction_start", "overflow")
    assert len(provider.calls) == 2 and len(compactions(session)) == 1
    assert narrow(new[-1], AssistantMessage).text == "recovered"
    retried = provider.calls[1]
    assert [m.role for m in retried.messages][-1] == "user"  # the overflowed answer left out


async def test_overflow_without_a_working_summariser_is_not_retried() -> None:
    session = new_session()
    add_turns(session, 6)
    summarizer = Summarizer(fail="down")
    agent, provider = compacting_agent(
        session, [provider_error(OVERFLOW), reply("never")], summarizer
    )
    events = compaction_events(agent)
    new = await agent.prompt("next")
    assert len(provider.calls) == 1 and compactions(session) == []
    end = events[-1]
    assert isinstance(end, AutoCompactionEndEvent) and end.result is None
    assert "down" in (end.error_message or "") and not end.aborted
    assert describe_event(end).startswith("compaction failed: ")
    assert narrow(new[-1], AssistantMessage).error_message == OVERFLOW
    assert agent.state.error_message is not None and "down" in agent.state.error_message
    assert not agent.is_compacting and not agent.is_running


async def test_a_compaction_that_failed_is_not_tried_again_in_the_same_prompt() -> None:
    """Over the threshold before the prompt and after its answer, with the summariser down:
    the compaction was tried, and failed, twice in one run, and the run's warnings (and a
    CLI's lines) said "auto-compaction failed" twice. Once is enough: the next prompt tries
    again."""
    session = new_session()
    add_turns(session, 10)  # about 4,000 estimated tokens: over the threshold of 3,000
    summarizer = Summarizer(fail="down")
    answer = reply("ok", usage=Usage(input=3_900, output=10, total_tokens=3_910))
    agent, provider = compacting_agent(session, [answer, answer], summarizer)
    events = compaction_events(agent)
    await agent.prompt("next")
    assert len(provider.calls) == 1 and compactions(session) == []
    failed = [e for e in events if isinstance(e, AutoCompactionEndEvent)]
    assert len(failed) == 1 and "down" in (failed[0].error_message or ""), events
    assert len(summarizer.prompts) == 1
    await agent.prompt("again")
    assert len([e for e in events if isinstance(e, AutoCompactionEndEvent)]) == 2
    assert len(summarizer.prompts) == 2


# --- branch summaries -------------------------------------------------------------------------


def branching_session() -> tuple[Session, dict[str, str]]:
    """u1 a1 ─┬─ u2 a2(read x.py) r2 a2b      (branch A)
    └─ u3 a3(edit y.py) r3 a3b      (branch B, the current leaf)"""
    session = new_session()
    ids: dict[str, str] = {}
    ids["u1"], ids["a1"] = add(session, user("common start"), assistant("common answer"))
    ids["u2"], ids["a2"], ids["r2"], ids["a2b"] = add(
        session,
        user("branch A question"),
        assistant("trying A", call("x", "read", path="x.py")),
        result("x", "contents of x"),
        assistant("A did not work"),
    )
    session.move_to(ids["a1"])
    ids["u3"], ids["a3"], ids["r3"], ids["a3b"] = add(
        session,
        user("branch B question"),
        assistant("trying B", call("y", "edit", path="y.py")),
        result("y", "edited y", name="edit"),
        assistant("B is half done"),
    )
    return session, ids


async def test_branch_summary_covers_exactly_the_abandoned_entries() -> None:
    session, ids = branching_session()
    collected = collect_branch_entries(session, session.leaf_id, ids["a2b"])
    assert [e.id for e in collected.entries] == [ids["u3"], ids["a3"], ids["r3"], ids["a3b"]]
    assert collected.common_ancestor_id == ids["a1"]

    summarizer = Summarizer()
    summary_id = await summarize_branch(session, ids["a2b"], MODEL, summarizer.provider)
    (prompt,) = summarizer.prompts
    conversation = conversation_of(prompt)
    for text in ("branch B question", "trying B", "B is half done"):
        assert text in conversation
    for text in ("common start", "common answer", "branch A question", "A did not work"):
        assert text not in conversation
    assert "edited y" not in conversation  # tool results are left out; the call says enough

    entry = session.get_entry(summary_id)
    assert isinstance(entry, BranchSummaryEntry)
    assert entry.parent_id == ids["a2b"] and session.leaf_id == summary_id
    assert entry.summary == (
        BRANCH_SUMMARY_PREAMBLE + "FIRST SUMMARY\n\n<modified-files>\ny.py\n</modified-files>"
    )
    assert entry.details == {"readFiles": [], "modifiedFiles": ["y.py"]}
    assert entry.usage is not None and entry.usage.total_tokens == 35
    messages = session.build_context().messages
    assert isinstance(messages[-1], BranchSummaryMessage)
    assert "branch A question" in content_text(narrow(messages[2], UserMessage).content)


async def test_branch_summary_back_to_an_ancestor() -> None:
    session, ids = branching_session()
    summarizer = Summarizer()
    await summarize_branch(session, ids["u1"], MODEL, summarizer.provider)
    conversation = conversation_of(summarizer.prompts[0])
    assert "common answer" in conversation and "branch B question" in conversation
    assert "common start" not in conversation and "branch A" not in conversation


async def test_branch_summary_keeps_the_newest_within_the_budget() -> None:
    session, ids = branching_session()
    entries = collect_branch_entries(session, session.leaf_id, ids["a1"]).entries
    prepared = prepare_branch_entries(entries, token_budget=8)
    texts = [content_text(m.content) for m in prepared.messages]  # type: ignore[attr-defined]
    assert texts == ["B is half done"]
    # The file lists still cover the whole branch.
    assert prepared.file_ops.lists() == ([], ["y.py"])


async def test_branch_summary_bad_input_and_failures_write_nothing() -> None:
    session, ids = branching_session()
    before, leaf = session.get_entries(), session.leaf_id
    with pytest.raises(SessionError, match="not found"):
        await summarize_branch(session, "ffffffff", MODEL, Summarizer().provider)
    with pytest.raises(CompactionError, match="nothing to summarise"):
        await summarize_branch(session, ids["a3b"], MODEL, Summarizer().provider)
    with pytest.raises(CompactionError, match="Branch summarization failed: nope"):
        await summarize_branch(session, ids["a2b"], MODEL, Summarizer(fail="nope").provider)
    assert session.get_entries() == before and session.leaf_id == leaf


async def test_abort_during_an_automatic_compaction_writes_nothing() -> None:
    session = new_session()
    add_turns(session, 10)  # over the threshold: compacts before the prompt
    slow = ScriptedProvider([reply("SLOW SUMMARY", delay=0.02, chunk_size=1)])
    provider = ScriptedProvider([reply("never")])
    agent = SessionAgent.from_session(
        session,
        stream_fn=provider,
        model=MODEL,
        compaction=CompactionSettings(
            reserve_tokens=RESERVE, keep_recent_tokens=1_000, stream_fn=slow
        ),
    )
    before = session.get_entries()
    outcome: list[BaseMessage] = []
    events = compaction_events(agent)

    async def run() -> None:
        outcome.extend(await agent.prompt("next"))

    with anyio.fail_after(5):
        async with anyio.create_task_group() as group:
            group.start_soon(run)
            while not agent.is_compacting:
                await anyio.sleep(0.005)
            with pytest.raises(AgentBusyError):
                await agent.prompt("again")
            agent.abort("stop")
            await agent.wait_for_idle()
    assert compactions(session) == [] and provider.calls == []
    assert [e.type for e in events] == ["auto_compaction_start", "auto_compaction_end"]
    end = narrow(events[1], AutoCompactionEndEvent)
    assert end.aborted and end.result is None
    assert [m.role for m in outcome] == ["user", "assistant"]
    assert narrow(outcome[-1], AssistantMessage).stop_reason == StopReason.ABORTED
    new_entries = session.get_entries()[len(before) :]
    assert [e.message.role for e in new_entries if isinstance(e, MessageEntry)] == [
        "user",
        "assistant",
    ]
    assert not agent.is_compacting and not agent.is_running
