"""A tool's answer made from its output model's instance (ForModels.convert_result's short
way, without the SDK's second check and its indented text) is the answer the SDK's way made,
with the compact text ForModels gives: the same structured content, the same text."""

from __future__ import annotations

from typing import Any

import pytest
from mcp.server.mcpserver.utilities.func_metadata import FuncMetadata, func_metadata
from mcp_types import CallToolResult, TextContent
from pydantic_core import to_json

from mcp_agent.server.schemas import (
    AppendResult,
    CompactResult,
    ExportResult,
    MoveResult,
    NewSession,
    SessionInfo,
)
from mcp_agent.server.strict import for_models


def sdk_answer(metadata: FuncMetadata, result: Any) -> CallToolResult:
    """The SDK's own answer, its text then made compact as ForModels has always done."""
    converted = FuncMetadata.convert_result(metadata, result)
    assert isinstance(converted, CallToolResult)
    if converted.structured_content:
        text = to_json(converted.structured_content).decode()
        converted.content = [TextContent(type="text", text=text)]
    return converted


def returning(model: type) -> FuncMetadata:
    async def tool() -> Any: ...

    tool.__annotations__["return"] = model
    return func_metadata(tool)


INFO = {"id": "s1", "cwd": "/tmp/\u00e9", "created": "2026-01-01T00:00:00Z", "entryCount": 2}

CASES: list[tuple[type, Any]] = [
    (AppendResult, AppendResult(session_id="s", entry_id="e1", leaf_id="e1")),
    (MoveResult, MoveResult(session_id="s", leaf_id=None)),
    (MoveResult, MoveResult(session_id="s", leaf_id="x", branch_summary_id=None)),
    (MoveResult, MoveResult(session_id="s", leaf_id="x", branch_summary_id="b", warnings=["w"])),
    (CompactResult, CompactResult(session_id="s", compaction_id=None, summary='a "b"\n\u2028')),
    (
        ExportResult,
        ExportResult(
            session_id="s", jsonl="{}\n", lines=3, first_line=1, truncated=True, omitted="x"
        ),
    ),
    (AppendResult, AppendResult.model_validate({"sessionId": "s", "entryId": "e", "leafId": "e"})),
    # An unknown field kept (extra="allow") is answered as the SDK answers it.
    (
        AppendResult,
        AppendResult.model_validate({"sessionId": "s", "entryId": "e", "leafId": "e", "more": [1]}),
    ),
    # A subclass's instance takes the SDK's way, keeping its own fields.
    (SessionInfo, NewSession.model_validate(INFO)),
    (NewSession, NewSession.model_validate(INFO)),
]


@pytest.mark.parametrize(("model", "result"), CASES)
def test_an_answer_made_from_the_output_model_is_the_sdks(model: type, result: Any) -> None:
    metadata = returning(model)
    ours = for_models(metadata).convert_result(result)
    assert isinstance(ours, CallToolResult)
    theirs = sdk_answer(metadata, result)
    assert ours.structured_content == theirs.structured_content
    assert to_json(ours.structured_content) == to_json(theirs.structured_content)
    assert ours.content == theirs.content
    assert ours.model_dump_json(by_alias=True) == theirs.model_dump_json(by_alias=True)
