"""Sessions drawn for a terminal: the current branch entry by entry, and the whole tree.

All text from a session goes into rich ``Text`` objects, never into markup, so that brackets in
a conversation are shown as they are.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime
from typing import Any

from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.segment import Segment
from rich.text import Text
from rich.tree import Tree

from mcp_agent.cli.common import plural, unpadded_lines
from mcp_agent.messages import (
    AssistantMessage,
    BashExecutionMessage,
    ImageContent,
    TextContent,
    ThinkingContent,
    ToolCall,
    ToolResultMessage,
    UserMessage,
    content_text,
)
from mcp_agent.sessions.entries import (
    NAME_CHARS,
    BranchSummaryEntry,
    CompactionEntry,
    CustomEntry,
    CustomMessageEntry,
    LeafEntry,
    MessageEntry,
    SessionEntry,
    clip_long,
    shown_time,
    utc_time,
)
from mcp_agent.sessions.outline import (
    Parts,
    TreeLike,
    entry_parts,
    iter_flat_tree,
    message_parts,
    outline_tree,
    read_together,
)
from mcp_agent.sessions.repo import parent_id, started_json
from mcp_agent.sessions.session import Session
from mcp_agent.sessions.storage import stored_pages
from mcp_agent.wire import escape_controls, one_line

ROLE_STYLES = {
    "user": "bold cyan",
    "assistant": "bold green",
    "toolResult": "yellow",
    "error": "bold red",
    "meta": "dim",
}
PART_STYLES = {**ROLE_STYLES, "summary": "magenta", "custom": "blue", "call": "yellow"}
LEAF_MARK = " ◀ leaf"
# A linear run of the tree longer than this is shown as its head and tail (``--full``: all).
RUN_LIMIT = 30
RUN_HEAD = 5
RUN_TAIL = 10
# What a text of N lines may hold at most without --full: N screen lines' worth (one line of
# megabytes would otherwise fill the terminal).
LINE_CHARS = 200
# The newest entries of a branch that ``show`` draws (``--full``: all): a branch of thousands
# fills no terminal usefully, and drawing it all takes rich seconds and gigabytes.
BRANCH_LIMIT = 200
# How a cut view says what shows the rest (the chat's /tree says its own).
FULL_HINT = "--full shows all"
# Deeper branches than this are drawn at this depth, so that wide trees stay readable.
MAX_NESTING = 12
# The runs of entries ``tree`` draws (``--full``: all): a tree of 100,000 branches took rich
# 20 s to draw, and fills no terminal usefully.
TREE_RUNS = 500


def local_time(timestamp: str | None) -> str:
    """``timestamp`` in this machine's zone, read as the stores read it (``utc_time``); text
    that is no time, or one this zone cannot hold (year 1 west of UTC), as it is written."""
    if not timestamp:
        return ""
    moment = utc_time(timestamp)
    try:
        return timestamp if moment is None else moment.astimezone().strftime("%Y-%m-%d %H:%M")
    except (OverflowError, OSError, ValueError):
        return timestamp


def short_time(timestamp: str | None) -> str:
    """``11-29 20:05`` this year, ``2025-11-29`` before."""
    full = local_time(timestamp)
    if full[:4] == str(datetime.now().year):
        return full[5:]
    return full[:10]


def format_args(arguments: Any, limit: int | None = 120) -> str:
    text = json.dumps(arguments, ensure_ascii=False, separators=(", ", ": "))
    return text if limit is None else one_line(text, limit)


# --- one line per entry (tree) ----------------------------------------------------------------


def entry_summary(entry: SessionEntry, limit: int = 80) -> Text:
    """A one-line account of an entry: its kind and the start of its text."""
    return _styled(entry_parts(entry, limit))


def message_summary(message: Any, limit: int = 80) -> Text:
    return _styled(message_parts(message, limit))


def _styled(parts: Parts) -> Text:
    line = Text()
    for text, kind in parts:
        line.append(escape_controls(text), PART_STYLES.get(kind, ""))
    return line


# --- the current branch, readably (sessions show) ---------------------------------------------


# A sub-agent's origin, where the header does not say it (``linked_origin``).
Started = dict[str, str | None] | None


def session_heading(session: Session, started: Started = None) -> RenderableType:
    """The session's id and name, then its figures: each phrase kept whole on a line that
    holds it, so that a narrow terminal or a pipe (80 columns) breaks the heading only
    between phrases ("1 branch" and "point" on two lines read as two things)."""
    header = session.header
    stats = session.stats()
    title: list[tuple[str, Text]] = [("", Text(f"Session {session.id}", "bold"))]
    if session.name:
        title.append(("  ", Text(f"“{name_line(session.name)}”", "bold magenta")))
    # A header its file gave no time (pi reads it): "created" with nothing after it said less.
    created = local_time(header.timestamp)
    details = [
        f"created {created}" if created else "no creation time",
        plural(stats.message_count, "message"),
        plural(stats.entry_count, "entry", "entries"),
        f"{stats.total_tokens:,} tokens",
        f"${stats.cost_total:.4f}",
    ]
    if stats.branch_point_count:
        details.append(plural(stats.branch_point_count, "branch point"))
    origin = started or started_json(header)
    if origin is not None:
        run_id = origin["runId"]
        by_run = f" (run {run_id})" if run_id else ""
        details.append(f"a sub-agent's session, started by session {origin['sessionId']}{by_run}")
    elif forked := header.parent_session:
        # pi names the parent's file: shown by the id in its name, as listings show it.
        details.append(f"forked from {parent_id(forked)}")
    figures = Phrases([(" · ", Text(detail, "dim")) for detail in details])
    return Group(Phrases(title), figures)


class Phrases:
    """Phrases on as few lines as the width allows, each after its joiner (``" · "``), broken
    only between phrases; a phrase wider than a line starts one and wraps at its words."""

    def __init__(self, phrases: Sequence[tuple[str, Text]]) -> None:
        self.phrases = phrases

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        width = options.max_width
        lines: list[Text] = []
        for joiner, phrase in self.phrases:
            if lines and lines[-1].cell_len + len(joiner) + phrase.cell_len <= width:
                lines[-1].append(joiner, phrase.style).append_text(phrase)
            else:
                lines.append(phrase.copy())
        for line in unpadded_lines(console, Text("\n").join(lines), options):
            yield from line
            yield Segment.line()


def branch_view(session: Session, full: bool = False, started: Started = None) -> RenderableType:
    """The current branch, root first: each entry with its id, role, text and tool calls."""
    parts: list[RenderableType] = [session_heading(session, started)]
    leaf_id = session.leaf_id
    earlier, branch = shown_branch(session, None if full else BRANCH_LIMIT)
    if earlier:
        parts.append(Text(f"\n⋮ {earlier:,} earlier entries ({FULL_HINT})", "dim italic"))
    for entry in branch:
        heading, body = entry_block(entry, full)
        # The id's style as a span: a Text's own style would dim all that is appended to it.
        line = Text().append(f"{escape_controls(entry.id)} ", "dim").append_text(heading)
        phrases = [("", line)]
        label = session.get_label(entry.id)
        if label:
            phrases.append(("  ", Text(f"#{name_line(label)}", "yellow")))
        if entry.id == leaf_id:
            phrases.append((" ", Text(LEAF_MARK.strip(), "bold")))
        parts.append(Text(""))
        parts.append(Phrases(phrases))
        parts.extend(Indented(item, 9) for item in body)
    if leaf_id is None:
        parts.append(Text("\n(empty branch: the leaf is before the first entry)", "dim"))
    return Group(*parts)


def branch_entries(session: Session, batch: int = 1_000) -> Iterator[SessionEntry]:
    """The current branch's entries, root first, as they are read: from SQLite and PostgreSQL
    ``batch`` at a time (through the bounded parse cache), so that `show --json` of a long
    branch holds one batch, not the branch (45,000 entries: 555 MB)."""
    pages = stored_pages(session.storage)
    if pages is None or session.leaf_id is None:
        yield from session.get_branch()
        return
    ids = [row[0] for row in pages.branch_outline(session.leaf_id)]
    for start in range(0, len(ids), batch):
        chunk = ids[start : start + batch]
        parsed = pages.parsed_entries(chunk)
        yield from (parsed[entry_id] for entry_id in chunk)


def shown_branch(session: Session, newest: int | None) -> tuple[int, list[SessionEntry]]:
    """The current branch's entries but its leaf moves, root first: the ``newest`` last of
    them (None: all), and how many come before those. From SQLite and PostgreSQL only those
    are read and parsed: `show` of a 50,000-entry branch parsed every entry (4 s, 290 MB)
    to print 200."""
    pages = stored_pages(session.storage)
    if newest is None or pages is None or session.leaf_id is None:
        branch = [entry for entry in session.get_branch() if not isinstance(entry, LeafEntry)]
        earlier = 0 if newest is None else max(0, len(branch) - newest)
        return earlier, branch[earlier:]
    ids = [row[0] for row in pages.branch_outline(session.leaf_id) if row[2] != "leaf"]
    earlier = max(0, len(ids) - newest)
    parsed = pages.parsed_entries(ids[earlier:])
    return earlier, [parsed[entry_id] for entry_id in ids[earlier:]]


class Indented:
    """``renderable`` moved right by ``width`` spaces, its lines not padded on the right
    (rich's Padding fills every line to the width: trailing blanks in a piped ``show``)."""

    def __init__(self, renderable: RenderableType, width: int) -> None:
        self.renderable, self.width = renderable, width

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        inner = options.update_width(max(1, options.max_width - self.width))
        for line in unpadded_lines(console, self.renderable, inner):
            if line:
                yield Segment(" " * self.width)
            yield from line
            yield Segment.line()


def name_line(name: str) -> str:
    """A name or label on one line, cut at ``NAME_CHARS`` saying so (one imported from a
    file may hold anything)."""
    return clip_long(one_line(name), NAME_CHARS)


def entry_block(entry: SessionEntry, full: bool) -> tuple[Text, list[RenderableType]]:
    """A heading and the body lines of one entry."""
    match entry:
        case CompactionEntry(summary=summary, tokens_before=tokens):
            heading = Text(f"compaction ({tokens:,} tokens before)", "magenta")
            return heading, [limited(summary, full, 12)]
        case BranchSummaryEntry(summary=summary, from_id=from_id):
            heading = Text(f"branch summary (left {from_id})", "magenta")
            return heading, [limited(summary, full, 12)]
        case CustomMessageEntry(custom_type=kind, content=content):
            heading = Text(f"{escape_controls(kind)} (custom message)", "blue")
            return heading, [limited(content_text(content), full, 12)]
        case CustomEntry(data=data) if data is not None:
            # The heading without the preview of the data the body shows in full.
            heading = _styled(entry_parts(entry)[:1])
            return heading, [Text(format_args(data, None if full else 160), "dim")]
        case MessageEntry():
            pass
        case _:
            return entry_summary(entry, limit=200), []
    message = entry.message
    match message:
        case UserMessage():
            return Text("user", ROLE_STYLES["user"]), content_blocks(message.content, full)
        case AssistantMessage():
            failure = message.failure
            heading = Text("assistant", ROLE_STYLES["assistant" if failure is None else "error"])
            heading.append(escape_controls(f"  {message.provider}:{message.model}"), "dim")
            body = content_blocks(message.content, full)
            if failure is not None:
                body.append(Text(escape_controls(failure), ROLE_STYLES["error"]))
            return heading, body
        case ToolResultMessage():
            style = ROLE_STYLES["error" if message.is_error else "toolResult"]
            heading = Text(f"← {escape_controls(message.tool_name)}", style)
            if message.is_error:
                heading.append(" (error)", style)
            return heading, content_blocks(message.content, full, limit=12)
        case BashExecutionMessage():
            command = Text(f"$ {escape_controls(message.command)}", "yellow")
            return command, [limited(message.output, full, 12)]
        case _:
            return message_summary(message, 60), []


def content_blocks(
    content: str | Iterable[Any], full: bool, limit: int = 40
) -> list[RenderableType]:
    if isinstance(content, str):
        return [limited(content, full, limit)]
    body: list[RenderableType] = []
    for block in content:
        match block:
            case TextContent(text=text):
                body.append(limited(text, full, limit))
            case ThinkingContent(thinking=thought):
                body.append(limited(thought, full, 6, "dim italic"))
            case ToolCall(name=name, arguments=arguments):
                line = Text("→ ", "yellow").append(escape_controls(name), "bold yellow")
                line.append(f"({format_args(arguments, None if full else 160)})", "yellow")
                body.append(line)
            case ImageContent(mime_type=mime, data=data):
                said = f"[image {escape_controls(mime)}, {len(data) * 3 // 4:,} bytes]"
                body.append(Text(said, "dim"))
    return body


# Lines of one text that rich is given as one Text.
LINES_AT_ONCE = 1000
# A text longer than this is drawn by ``PlainText``, not by rich's wrapping.
PLAIN_CHARS = 100_000


class PlainText:
    """A long text broken into lines that fit the width, at a space where one is in a line's
    second half, else at the width: rich's wrapping took 39 s of CPU for a 10 MB message
    (``show --full``), in time that grows faster than the text; this takes a line at a time.
    Lines of ASCII are broken by characters, others by terminal cells."""

    def __init__(self, text: str, style: str = "") -> None:
        self.text, self.style = text, style

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        from rich.cells import chop_cells

        width = max(1, options.max_width)
        style = console.get_style(self.style) if self.style else None
        for line in self.text.split("\n"):
            line = line.expandtabs(8)
            pieces = _broken(line, width) if line.isascii() else chop_cells(line, width)
            for piece in pieces or [""]:
                yield Segment(piece.rstrip(" "), style)
                yield Segment.line()


def _broken(line: str, width: int) -> list[str]:
    """``line`` in pieces of at most ``width`` characters, each broken after a space in its
    second half where there is one."""
    pieces: list[str] = []
    start = 0
    while len(line) - start > width:
        space = line.rfind(" ", start + width // 2, start + width + 1)
        end = space + 1 if space >= 0 else start + width
        pieces.append(line[start:end])
        start = end
    pieces.append(line[start:])
    return pieces


def limited(text: str, full: bool, max_lines: int, style: str = "") -> RenderableType:
    """``text`` cut to ``max_lines`` lines, or as many screen lines' worth of characters
    (unless ``full``), saying how much was left out; control characters escaped."""
    text = escape_controls(text)
    if full:
        if len(text) > PLAIN_CHARS:
            return PlainText(text, style)
        if text.count("\n") < LINES_AT_ONCE:
            return Text(text, style)
        # rich lays out one Text in time that grows with the square of its lines (80,000
        # lines: 22 s); a Text a line, in linear time (5 s).
        return Group(*(Text(line, style) for line in text.split("\n")))
    most = max_lines * LINE_CHARS
    lines = text[: most + 1].splitlines() or [""]
    if len(lines) > max_lines:
        rest = len(text.splitlines()) - max_lines  # counted as the lines shown are
        shown = Text("\n".join(lines[:max_lines]), style)
        shown.append(f"\n… {rest:,} more lines ({FULL_HINT})", "dim")
        return shown
    if len(text) > most:
        shown = Text(text[:most], style)
        shown.append(f"… {len(text) - most:,} more characters ({FULL_HINT})", "dim")
        return shown
    return Text(text, style)


# --- the tree (sessions tree, /tree) ----------------------------------------------------------


def session_tree(
    session: Session,
    full: bool = False,
    width: int = 100,
    full_hint: str = FULL_HINT,
    started: Started = None,
) -> Tree:
    heading = session_heading(session, started)
    return tree_view(outline_tree(session), session.leaf_id, heading, full, width, full_hint)


def tree_view(
    roots: Sequence[TreeLike],
    leaf_id: str | None,
    heading: RenderableType,
    full: bool = False,
    width: int = 100,
    full_hint: str = FULL_HINT,
) -> Tree:
    """The session tree. A linear run of entries is one node (long runs shown as head and tail);
    each branch point nests its branches. Built with loops, so any depth is fine. Lines are
    cut to fit ``width``. Without ``full``, at most ``TREE_RUNS`` runs are drawn, those on the
    way to the leaf first, and the rest is counted."""
    on_path = path_to(roots, leaf_id)
    root = Tree(heading, guide_style="dim")
    # Branches toward the leaf are drawn first, so that a cut tree still shows where it is.
    toward_leaf: list[_Group] = []
    pending: list[_Group] = []

    def later(group: _Group) -> None:
        leads = any(start.id in on_path for start in group[1])
        (toward_leaf if leads else pending).append(group)

    later((root, roots, 0, None))
    drawn = 0
    leaf_drawn = False
    while toward_leaf or pending:
        parent, starts, depth, flattened_from = (toward_leaf or pending).pop()
        ordered = starts
        if not full and drawn + len(starts) > TREE_RUNS:  # cut among them: the leaf's first
            ordered = sorted(starts, key=lambda start: start.id not in on_path)
        # The entries of the runs drawn here read together, not a query each.
        runs = [linear_run(start) for start in ordered[: None if full else TREE_RUNS - drawn]]
        read_together([run[i] for run in runs for i in shown_indices(run, leaf_id, full)])
        for index in range(len(ordered)):
            if not full and drawn >= TREE_RUNS:
                rest = [
                    *ordered[index:],
                    *(s for group in (*toward_leaf, *pending) for s in group[1]),
                ]
                said = f"⋮ {_count(rest):,} more entries in branches not drawn ({full_hint})"
                if leaf_id is not None and not leaf_drawn:
                    said += f"; the leaf, {escape_controls(leaf_id)}, is among them"
                root.add(Text(said, "dim italic"))
                return root
            run = runs[index]
            # Each level of the tree indents by 4.
            limit = max(30, width - 4 * (depth + 1) - 1)
            label = run_text(run, leaf_id, on_path, full, limit, full_hint)
            if flattened_from is not None:
                said = f"↳ branch of {escape_controls(flattened_from)}\n"
                label = Text().append(said, "dim").append_text(label)
            node = parent.add(label)
            drawn += 1
            leaf_drawn = leaf_drawn or any(node.id == leaf_id for node in run)
            last = run[-1]
            if last.children:
                if depth + 1 < MAX_NESTING:
                    later((node, last.children, depth + 1, None))
                else:
                    later((parent, last.children, depth, last.id))
    if leaf_id is None and roots:
        root.add(Text("◀ leaf: before the first entry", "bold"))
    return root


# A group of sibling runs to draw: the tree node they hang from, their first entries, their
# depth, and the entry they branch from when drawn flattened.
_Group = tuple[Tree, Sequence[TreeLike], int, str | None]


def _count(starts: Sequence[TreeLike]) -> int:
    """The entries in the subtrees of ``starts``."""
    count, pending = 0, list(starts)
    while pending:
        node = pending.pop()
        count += 1
        pending.extend(node.children)
    return count


def path_to(roots: Sequence[TreeLike], leaf_id: str | None) -> set[str]:
    """The ids from the root to ``leaf_id``."""
    parents: dict[str, str | None] = {}
    pending: list[tuple[TreeLike, str | None]] = [(node, None) for node in roots]
    while pending:
        node, parent = pending.pop()
        parents[node.id] = parent
        pending.extend((child, node.id) for child in node.children)
    path: set[str] = set()
    current = leaf_id
    while current is not None and current in parents and current not in path:
        path.add(current)
        current = parents[current]
    return path


def linear_run(start: TreeLike) -> list[TreeLike]:
    """``start`` and the entries after it up to a branch point or an end."""
    run = [start]
    while len(run[-1].children) == 1:
        run.append(run[-1].children[0])
    return run


def shown_indices(run: Sequence[TreeLike], leaf_id: str | None, full: bool) -> Sequence[int]:
    """The places in ``run`` drawn: all, or of a long run its head, its tail, the leaf and
    the labelled entries."""
    if full or len(run) <= RUN_LIMIT:
        return range(len(run))
    wanted = set(range(RUN_HEAD)) | set(range(len(run) - RUN_TAIL, len(run)))
    wanted |= {i for i, node in enumerate(run) if node.label or node.id == leaf_id}
    return sorted(wanted)


def run_text(
    run: list[TreeLike],
    leaf_id: str | None,
    on_path: set[str],
    full: bool,
    limit: int = 80,
    full_hint: str = FULL_HINT,
) -> Text:
    """The lines of a linear run; a long run keeps its head, its tail, the leaf and labels."""
    keep = shown_indices(run, leaf_id, full)
    text = Text()
    previous = -1
    for index in keep:
        if index - previous > 1:
            hidden = index - previous - 1
            text.append(f"⋮ {hidden:,} more entries ({full_hint})\n", "dim italic")
        previous = index
        text.append_text(node_line(run[index], leaf_id, on_path, limit))
        if index < len(run) - 1 or run[index].children:
            text.append("\n")
    last = run[-1]
    if len(last.children) > 1:
        text.append(f"┬ {len(last.children)} branches", "dim")
    else:
        text.rstrip()
    return text


def node_line(node: TreeLike, leaf_id: str | None, on_path: set[str], limit: int = 80) -> Text:
    """One entry on one line of at most ``limit`` cells: id, summary, label, leaf mark."""
    entry = node.entry
    # Styles as spans, not the Text's own style, which would dim the whole line: the entries
    # off the branch would look as the ones on it.
    line = Text().append(f"{escape_controls(entry.id)} ", "dim")
    tail = Text()
    if node.label:
        tail.append(f"  #{one_line(node.label, limit // 2)}", "yellow")
    if entry.id == leaf_id:
        tail.append(LEAF_MARK, "bold")
    summary = entry_summary(entry, limit)
    summary.truncate(max(10, limit - len(line) - len(tail)), overflow="ellipsis")
    if entry.id not in on_path:
        summary.stylize("dim")
    return line.append_text(summary).append_text(tail)


def tree_json(
    session: Session, started: Started = None
) -> tuple[dict[str, Any], Iterator[dict[str, Any]]]:
    """The tree as flat nodes with child ids (nested JSON would hit the encoder's depth limit
    on long sessions): the fields before them, and the nodes as they are made."""
    fields = {"session": session_json(session, started), "leafId": session.leaf_id}
    return fields, iter_flat_tree(session)


def session_json(session: Session, started: Started = None) -> dict[str, Any]:
    header = session.header
    return {
        "id": session.id,
        "name": session.name,
        "cwd": header.cwd,
        "created": shown_time(header.timestamp),
        "parentSession": header.parent_session,
        "startedBy": started or started_json(header),
        "leafId": session.leaf_id,
        "stats": session.stats().to_json_dict(),
    }
