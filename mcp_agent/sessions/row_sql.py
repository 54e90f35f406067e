"""The figures of a sessions row that need the tree (leaves, branch points) and the recount of
a row's figures from its entries, in SQL that SQLite and PostgreSQL both run: written once
with ``:name`` parameters, which :func:`for_psycopg` spells ``%(name)s``."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Sequence
from typing import Any

from mcp_agent.sessions.entries import LabelEntry, SessionEntry, is_tree_node, write_time
from mcp_agent.sessions.storage import RowDelta

# Runs a query with named parameters and returns its first row (None when there is none).
FetchOne = Callable[[str, dict[str, Any]], Any]


@functools.lru_cache(maxsize=512)
def for_psycopg(sql: str) -> str:
    return re.sub(r"(?<![:\w]):([a-z_][a-z0-9_]*)", r"%(\1)s", sql)


_STEP_UP = "SELECT type, parent_id FROM entries WHERE session_id = :s AND id = :p"
# Tree nodes below a node, through the leaf moves pi may have appended below (at most 2: all
# that matters is whether it had none, one or more). Both parts are searches of the
# (session_id, parent_id) index; a join instead lets SQLite scan the whole session.
_TREE_CHILDREN = """
SELECT count(*) FROM (
  SELECT 1 FROM entries WHERE session_id = :s AND parent_id = :p AND type != 'leaf'
  UNION ALL
  SELECT 1 FROM entries WHERE session_id = :s AND type != 'leaf' AND parent_id IN
    (SELECT id FROM entries WHERE session_id = :s AND parent_id = :p AND type = 'leaf')
  LIMIT 2) children
"""


def tree_delta(
    fetch_one: FetchOne,
    session_id: str,
    entry: SessionEntry,
    psycopg: bool = False,
    children: int | None = None,
) -> tuple[int, int]:
    """(leaves, branch points) that appending ``entry`` adds to its session's tree, asked of
    the database before it is inserted: a node hung below a leaf leaves the count of leaves as
    it was; below a node with one child it makes a branch point. ``children``, when the caller
    read it already (``_TREE_CHILDREN`` of ``entry.parent_id``, a stored entry that is not a
    leaf move), saves both queries."""
    if not is_tree_node(entry):
        return 0, 0
    if children is not None and entry.parent_id is not None:
        return _children_delta(children)
    step_up, tree_children = (
        (for_psycopg(_STEP_UP), for_psycopg(_TREE_CHILDREN))
        if psycopg
        else (_STEP_UP, _TREE_CHILDREN)
    )
    parent = entry.parent_id
    seen: set[str] = set()
    while parent is not None and parent not in seen:  # through leaf moves, as tree_parent
        seen.add(parent)
        row = fetch_one(step_up, {"s": session_id, "p": parent})
        if row is None or row[0] != "leaf":
            break
        parent = row[1]
    if parent is None:
        return 1, 0
    return _children_delta(fetch_one(tree_children, {"s": session_id, "p": parent})[0])


def _children_delta(children: int) -> tuple[int, int]:
    return (0, 0) if children == 0 else (1, 1) if children == 1 else (1, 0)


# Each tree node under its tree parent (through leaf moves pi appended below); null for a
# root, also one whose parent is not in the session (pi shows it as a root).
_TREE_PARENTS = (
    "SELECT CASE WHEN p.type = 'leaf' THEN p.parent_id ELSE p.id END AS tp"
    " FROM entries c LEFT JOIN entries p ON p.session_id = c.session_id"
    " AND p.id = c.parent_id WHERE c.session_id = :s AND c.type != 'leaf'"
)
ROLE_COUNTS = (
    "SELECT role, count(*) AS n FROM entries WHERE session_id = :s AND role IS NOT NULL"
    " GROUP BY role"
)


def recount_sql(roles_object: str) -> str:
    """The UPDATE that counts a session row's figures that need every entry (messages by
    role, leaves, branch points, first and last entry time), for entries stored in bulk;
    ``roles_object`` is the database's aggregate of (role, n) rows into a JSON object."""
    return f"""
UPDATE sessions SET
  roles = (SELECT {roles_object} FROM ({ROLE_COUNTS}) counted),
  leaf_count = entry_count
    - (SELECT count(DISTINCT tp) FROM ({_TREE_PARENTS}) nodes WHERE tp IS NOT NULL),
  branch_point_count = (SELECT count(*) FROM (SELECT tp FROM ({_TREE_PARENTS}) nodes
    WHERE tp IS NOT NULL GROUP BY tp HAVING count(*) > 1) branching),
  first_timestamp = (SELECT timestamp FROM entries WHERE session_id = :s AND type != 'leaf'
    ORDER BY seq LIMIT 1),
  last_timestamp = (SELECT timestamp FROM entries WHERE session_id = :s AND type != 'leaf'
    ORDER BY seq DESC LIMIT 1)
WHERE id = :s
"""


def row_update(
    delta: RowDelta,
    session_id: str,
    leaf_id: str | None,
    count: int,
    leaves: int,
    branch_points: int,
    text: Callable[[str | None], str | None] = lambda value: value,
) -> dict[str, Any]:
    """The parameters of a sessions row's update after ``count`` entries (``delta``) went in:
    the same names in both databases' update statements. ``text`` makes the user's text fit
    the database (PostgreSQL text holds no NUL)."""
    counts = delta.counts
    return {
        "id": session_id,
        "leaf": leaf_id,
        "modified": write_time(),
        "count": count,
        "entries": counts.entry_count,
        "messages": counts.message_count,
        "tool_calls": counts.tool_call_count,
        "input": counts.input_tokens,
        "output": counts.output_tokens,
        "cache_read": counts.cache_read_tokens,
        "cache_write": counts.cache_write_tokens,
        "total": counts.total_tokens,
        "cost": counts.cost_total,
        "leaves": leaves,
        "branch_points": branch_points,
        "first_timestamp": counts.first_timestamp,
        "last_timestamp": counts.last_timestamp,
        "first_user_message": text(delta.first_user_message),
        "renames": delta.name is not None,
        "name": text(delta.name[0]) if delta.name is not None else None,
    }


def label_changes(entries: Sequence[SessionEntry]) -> dict[str, str | None]:
    """The label each target ends with after ``entries`` (None: the label is removed)."""
    labels: dict[str, str | None] = {}
    for entry in entries:
        if isinstance(entry, LabelEntry):
            labels[entry.target_id] = entry.label or None
    return labels
