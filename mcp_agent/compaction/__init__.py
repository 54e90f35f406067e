"""Compaction and branch summaries: the older part of a branch, or a branch left behind,
replaced in the context by a model-written summary (pi's design). History is never deleted.

Layered above ``sessions`` (it reads branches and appends entries) and ``providers`` (it asks a
model); the runtime's session agent calls it on its own, the MCP tools and the CLI on request.
"""

from mcp_agent.compaction.branch_summary import BranchSummary, summarize_branch
from mcp_agent.compaction.compact import (
    CompactionResult,
    CompactionSettings,
    compact,
    summarize_preparation,
)
from mcp_agent.compaction.cut_points import (
    CompactionPreparation,
    CutPoint,
    FileOps,
    find_cut_point,
    prepare_compaction,
)
from mcp_agent.compaction.errors import CompactionError
from mcp_agent.compaction.summarize import generate_summary
from mcp_agent.compaction.tokens import (
    DEFAULT_KEEP_RECENT_TOKENS,
    DEFAULT_RESERVE_TOKENS,
    context_tokens,
    estimate_context_tokens,
    estimate_tokens,
    should_compact,
)

__all__ = [
    "DEFAULT_KEEP_RECENT_TOKENS",
    "DEFAULT_RESERVE_TOKENS",
    "BranchSummary",
    "CompactionError",
    "CompactionPreparation",
    "CompactionResult",
    "CompactionSettings",
    "CutPoint",
    "FileOps",
    "compact",
    "context_tokens",
    "estimate_context_tokens",
    "estimate_tokens",
    "find_cut_point",
    "generate_summary",
    "prepare_compaction",
    "should_compact",
    "summarize_branch",
    "summarize_preparation",
]
