"""pi's summarisation prompts, verbatim, and the conversation as the summariser reads it."""

from __future__ import annotations

import json
from collections.abc import Sequence

from mcp_agent.messages import (
    AssistantMessage,
    BaseMessage,
    Message,
    TextContent,
    ThinkingContent,
    ToolCall,
    UserMessage,
    convert_to_llm,
)

# --- prompts (pi's, verbatim) -----------------------------------------------------------------

SUMMARIZATION_SYSTEM_PROMPT = """You are a context summarization assistant. Your task is to read a conversation between a user and an AI coding assistant, then produce a structured summary following the exact format specified.

Do NOT continue the conversation. Do NOT respond to any questions in the conversation. ONLY output the structured summary."""

SUMMARIZATION_PROMPT = """The messages above are a conversation to summarize. Create a structured context checkpoint summary that another LLM will use to continue the work.

Use this EXACT format:

## Goal
[What is the user trying to accomplish? Can be multiple items if the session covers different tasks.]

## Constraints & Preferences
- [Any constraints, preferences, or requirements mentioned by user]
- [Or "(none)" if none were mentioned]

## Progress
### Done
- [x] [Completed tasks/changes]

### In Progress
- [ ] [Current work]

### Blocked
- [Issues preventing progress, if any]

## Key Decisions
- **[Decision]**: [Brief rationale]

## Next Steps
1. [Ordered list of what should happen next]

## Critical Context
- [Any data, examples, or references needed to continue]
- [Or "(none)" if not applicable]

Keep each section concise. Preserve exact file paths, function names, and error messages."""

UPDATE_SUMMARIZATION_PROMPT = """The messages above are NEW conversation messages to incorporate into the existing summary provided in <previous-summary> tags.

Update the existing structured summary with new information. RULES:
- PRESERVE all existing information from the previous summary
- ADD new progress, decisions, and context from the new messages
- UPDATE the Progress section: move items from "In Progress" to "Done" when completed
- UPDATE "Next Steps" based on what was accomplished
- PRESERVE exact file paths, function names, and error messages
- If something is no longer relevant, you may remove it

Use this EXACT format:

## Goal
[Preserve existing goals, add new ones if the task expanded]

## Constraints & Preferences
- [Preserve existing, add new ones discovered]

## Progress
### Done
- [x] [Include previously done items AND newly completed items]

### In Progress
- [ ] [Current work - update based on progress]

### Blocked
- [Current blockers - remove if resolved]

## Key Decisions
- **[Decision]**: [Brief rationale] (preserve all previous, add new)

## Next Steps
1. [Update based on current state]

## Critical Context
- [Preserve important context, add new if needed]

Keep each section concise. Preserve exact file paths, function names, and error messages."""

TURN_PREFIX_SUMMARIZATION_PROMPT = """This is the PREFIX of a turn that was too large to keep. The SUFFIX (recent work) is retained.

Summarize the prefix to provide context for the retained suffix:

## Original Request
[What did the user ask for in this turn?]

## Early Progress
- [Key decisions and work done in the prefix]

## Context for Suffix
- [Information needed to understand the retained recent work]

Be concise. Focus on what's needed to understand the kept suffix."""

# Ours (pi sends a turn prefix at once, and fails when it is too long): a prefix summarised in
# parts gives each part after the first the summary of those before it.
TURN_PREFIX_UPDATE_NOTE = """The <previous-summary> summarizes the beginning of this same prefix, which was too long to send at once: write one summary of the whole prefix, keeping its Original Request."""

SPLIT_TURN_SEPARATOR = "\n\n---\n\n**Turn Context (split turn):**\n\n"


# --- serialising and asking the model ---------------------------------------------------------


TOOL_RESULT_MAX_CHARS = 2_000


def _truncate(text: str, max_chars: int) -> str:
    if len(text) <= max_chars:
        return text
    return f"{text[:max_chars]}\n\n[... {len(text) - max_chars} more characters truncated]"


def serialize_conversation(messages: Sequence[Message]) -> str:
    """The conversation as plain text, so that the model summarises it instead of continuing
    it (pi's serializeConversation); tool results are cut to 2,000 characters."""
    parts: list[str] = []
    for message in messages:
        if isinstance(message, UserMessage):
            content = message.content
            text = (
                content
                if isinstance(content, str)
                else "".join(b.text for b in content if isinstance(b, TextContent))
            )
            if text:
                parts.append(f"[User]: {text}")
        elif isinstance(message, AssistantMessage):
            texts, thoughts, calls = [], [], []
            for block in message.content:
                if isinstance(block, TextContent):
                    texts.append(block.text)
                elif isinstance(block, ThinkingContent):
                    thoughts.append(block.thinking)
                elif isinstance(block, ToolCall):
                    arguments = ", ".join(
                        f"{k}={json.dumps(v, ensure_ascii=False, separators=(',', ':'))}"
                        for k, v in block.arguments.items()
                    )
                    calls.append(f"{block.name}({arguments})")
            if thoughts:
                parts.append("[Assistant thinking]: " + "\n".join(thoughts))
            if texts:
                parts.append("[Assistant]: " + "\n".join(texts))
            if calls:
                parts.append("[Assistant tool calls]: " + "; ".join(calls))
        else:
            text = "".join(b.text for b in message.content if isinstance(b, TextContent))
            if text:
                parts.append(f"[Tool result]: {_truncate(text, TOOL_RESULT_MAX_CHARS)}")
    return "\n\n".join(parts)


def conversation_block(messages: Sequence[BaseMessage]) -> str:
    return (
        f"<conversation>\n{serialize_conversation(convert_to_llm(messages))}\n</conversation>\n\n"
    )
