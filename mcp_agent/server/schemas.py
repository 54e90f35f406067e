"""The structured results of the server's tools (their output schemas come from these).

Every key is camelCase on the wire, as in pi's session format and MCP itself, except inside
the user's own data (metadata, custom data, tool arguments); times are ISO 8601 strings. The
Python side keeps snake_case names (``populate_by_name``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, ClassVar, Literal

from mcp_types import CallToolResult, ContentBlock, TextContent
from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema
from pydantic.alias_generators import to_camel
from pydantic_core import from_json, to_json

from mcp_agent.server import spliced
from mcp_agent.server.paging import LONG_FIELD, TEXT_BYTES, check_whole, utf8_size
from mcp_agent.sessions.hits import HITS_LISTED, SNIPPET_CHARS
from mcp_agent.sessions.outline import CHILDREN_SHOWN


class Wire(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, serialize_by_alias=True
    )
    # Fields an answer (``compact_answer``) leaves out while they are None: what applies to
    # another view or case only, which said as null is noise to a model (a page of a branch
    # carried "nodes":null,"outline":null). Each has a default: the output schema does not
    # require it.
    omit_when_null: ClassVar[frozenset[str]] = frozenset()


class CompactAnswer:
    """An answer's texts as ``compact_result`` sends them: the answer without its long lists
    (``head``), all of it (``whole``) and the text block. A read of the same thing again
    (``session_reads.kept_whole_context``) sends them as they are."""

    __slots__ = ("_spliceable", "head", "list_names", "text", "whole")

    def __init__(self, head: str, whole: str, text: str, list_names: tuple[str, ...]) -> None:
        self.head = head
        self.whole = whole
        self.text = text
        self.list_names = list_names
        self._spliceable: bool | None = None

    def weight(self) -> int:
        """Characters held, for a bound on what is kept (the text is often the whole)."""
        text = 0 if self.text is self.whole else len(self.text)
        return len(self.head) + len(self.whole) + text

    def spliceable(self) -> bool:
        """``spliced.usable`` of the whole answer, scanned once."""
        if self._spliceable is None:
            self._spliceable = spliced.usable(self.whole)
        return self._spliceable


def compact_answer(
    answer: Wire, newest_first: bool = False, forward: bool = False, **lists: list[str]
) -> CompactAnswer:
    """``answer`` with its long ``lists`` (entries, messages, nodes) given as the JSON text of
    each item, put in as they are. The text block is the same compact JSON when it fits in
    ``TEXT_BYTES``, else what ``shortened`` keeps of it (``newest_first``: the lists run
    newest first; ``forward``: they were read forward, from their first item on)."""
    unset = {name for name in answer.omit_when_null if getattr(answer, name) is None}
    head = answer.model_dump_json(exclude=set(lists) | unset)
    check_whole(
        utf8_size(head) + sum(utf8_size(item) + 1 for items in lists.values() for item in items)
    )
    whole = _joined(head, lists)
    size = utf8_size(whole)
    text = whole if size <= TEXT_BYTES else shortened(head, lists, size, newest_first, forward)
    return CompactAnswer(head, whole, text, tuple(lists))


def answer_result(found: CompactAnswer, splice: bool = False) -> CallToolResult:
    """``found`` as a tool result, its whole answer parsed once for the structured content.

    With ``splice`` (the request came over a splicing transport: ``spliced.wanted``) the
    structured content is not parsed: it goes to the transport as this text, and the result
    carries the answer's other fields (with the lists empty) for the SDK's check."""
    content: list[ContentBlock] = [TextContent(type="text", text=found.text)]
    if splice and found.spliceable():
        fields = from_json(found.head) | {to_camel(name): [] for name in found.list_names}
        return CallToolResult(
            content=content,
            structured_content=fields,
            _meta={spliced.KEY: spliced.carried(found.whole)},
        )
    return CallToolResult(content=content, structured_content=from_json(found.whole))


def compact_result(
    answer: Wire,
    splice: bool = False,
    newest_first: bool = False,
    forward: bool = False,
    **lists: list[str],
) -> CallToolResult:
    """``answer`` as a tool result (``compact_answer``, then ``answer_result``)."""
    return answer_result(compact_answer(answer, newest_first, forward, **lists), splice)


def _joined(head: str, lists: dict[str, list[str]]) -> str:
    """The JSON object ``head`` with each of ``lists`` added as an array of its JSON texts."""
    # Joined once: the items are most of the answer (a megabyte for a whole context), and
    # each join of them (the commas', the object's, the closing brace's) was a megabyte more,
    # fresh memory the first time.
    parts = [head[:-1]]
    comma = head != "{}"
    for name, items in lists.items():
        parts.append(f'{"," if comma else ""}"{to_camel(name)}":[')
        comma = True
        if items:
            spaced: list[str] = [","] * (2 * len(items) - 1)
            spaced[::2] = items
            parts += spaced
        parts.append("]")
    parts.append("}")
    return "".join(parts)


# What a list's items are called where its name is no plural noun.
LIST_NOUNS = {"outline": "outline rows"}


def shortened(
    head: str,
    lists: dict[str, list[str]],
    size: int,
    newest_first: bool = False,
    forward: bool = False,
) -> str:
    """The answer (``size`` bytes of UTF-8) cut to fit ``TEXT_BYTES``: each list keeps its
    newest items that fit (lists are newest last, or first with ``newest_first``), or, read
    ``forward`` (from an entry on), its first items; a field too long for a text is left out,
    and ``textNote`` says what is missing and where it is."""
    first = newest_first or forward
    fields: dict[str, Any] = from_json(head)
    long = [name for name, value in fields.items() if len(to_json(value)) > LONG_FIELD]
    for name in long:
        del fields[name]
    room = TEXT_BYTES - len(to_json(fields)) - 600  # the note, the lists' names and brackets
    kept: dict[str, list[str]] = {}
    missing = [f"the field {name}" for name in long]
    for name, items in lists.items():
        count = 0
        for item in items if first else reversed(items):
            cost = utf8_size(item) + 1
            if cost > room:
                break
            room -= cost
            count += 1
        kept[name] = items[:count] if first else items[len(items) - count :]
        if count < len(items):
            which = "newest" if forward else "oldest"
            noun = LIST_NOUNS.get(name, name)
            missing.append(f"the {len(items) - count:,} {which} of the {len(items):,} {noun}")
    fields["textNote"] = (
        f"This text stops at about {TEXT_BYTES // 1024} KB and the answer has {size:,}"
        f" bytes: it leaves out {', '.join(missing) or 'nothing'}. The structured content holds the"
        " whole answer; ask with a smaller limit, then the cursor, for pages that fit."
    )
    return _joined(to_json(fields).decode(), kept)


class Page(Wire):
    """What every paged answer says about the rest."""

    total: int = Field(description="how many there are in all")
    truncated: bool = Field(description="true when this page is not all of them")
    next_cursor: str | None = Field(
        default=None, description="pass as cursor for the next (older) page; null: no more"
    )


class StartedBy(Wire):
    session_id: str
    run_id: str | None = None


class SessionInfo(Wire):
    id: str
    name: str | None = None
    cwd: str = ""
    created: str = Field(default="", description="ISO 8601")
    modified: str = Field(default="", description="ISO 8601: the last append")
    entry_count: int = 0
    message_count: int = 0
    first_user_message: str | None = Field(
        default=None, description="the first user message, shortened"
    )
    parent_session: str | None = Field(
        default=None, description="the session it was forked from, or whose run started it"
    )
    started_by: StartedBy | None = Field(
        default=None,
        description="a sub-agent's session: the session and run that started it (its"
        " parentSession is no fork's); said by session_get and the session:// resource, null"
        " in listings and for every other session",
    )
    leaf_id: str | None = Field(default=None, description="the entry the next append follows")
    uri: str = Field(default="", description="the session as an MCP resource")


def listed(what: str, nullable: bool = False) -> WithJsonSchema:
    """The schema of a long list of JSON objects: an array, its items said in words (pi's
    shapes, which we do not define anyway, or ``in_words`` of a model of ours). A client checks
    a result against the tool's output schema item by item, field by field (about 15 µs a
    field with the Python SDK's jsonschema: a page of 20 listed sessions cost a client 2 to 3
    ms, more than the server spends making it); in words, an item's shape costs no check, and
    a model reads it all the same."""
    return WithJsonSchema({"type": ["array", "null"] if nullable else "array", "description": what})


def said_in_words(model: type[BaseModel], what: str, nullable: bool = False) -> WithJsonSchema:
    """The schema of one object of ``model`` nested in an answer, its fields said in words
    (``in_words``), as ``listed`` says a list's items. Every subschema of an output schema
    costs each client, at its first call of the tool, a check against JSON Schema 2020-12's
    metaschema (about 0.4 ms each with the Python SDK's jsonschema, measured): session_get's
    session said field by field made its schema 24 subschemas and that first call 12 ms of
    the client's CPU (5 in words). Under load the clients' first calls come together and are
    the slowest of all (benchmarks/bench_load.py). Said in words, a model reads it the same."""
    kind = ["object", "null"] if nullable else "object"
    return WithJsonSchema({"type": kind, "description": f"{what}: {in_words(model)}"})


def in_words(model: type[BaseModel], brief: tuple[str, ...] = ()) -> str:
    """``model``'s JSON form as a ``listed`` description says its items: ``{key: type (what
    it is), …}``, objects and arrays inside alike, ``|`` between the types a value may take.
    Its own fields named in ``brief`` are said by their type alone."""
    schema = model.model_json_schema(by_alias=True)
    definitions: dict[str, Any] = schema.get("$defs", {})

    def said(node: dict[str, Any]) -> str:
        ref = node.get("$ref")
        if isinstance(ref, str):
            return said(definitions[ref.removeprefix("#/$defs/")])
        if "anyOf" in node:
            return " | ".join(said(variant) for variant in node["anyOf"])
        if isinstance(node.get("enum"), list):  # the values themselves: "branch" | "tree" | …
            return " | ".join(to_json(value).decode() for value in node["enum"])
        kinds = node.get("type")
        shown = []
        for kind in kinds if isinstance(kinds, list) else [kinds]:
            if kind == "object" and isinstance(node.get("properties"), dict):
                fields = ", ".join(
                    field(key, value, node is schema) for key, value in node["properties"].items()
                )
                shown.append(f"{{{fields}}}")
            elif kind == "object" and isinstance(node.get("additionalProperties"), dict):
                shown.append(f"{{string: {said(node['additionalProperties'])}}}")
            elif kind == "array" and isinstance(node.get("items"), dict):
                shown.append(f"[{said(node['items'])}]")
            else:
                shown.append(str(kind))
        return " | ".join(shown)

    def field(key: str, node: dict[str, Any], top: bool = False) -> str:
        description = None if top and key in brief else node.get("description")
        return f"{key}: {said(node)}" + (f" ({description})" if description else "")

    return said(schema)


def fields_in_words(
    model: type[BaseModel], what: str, kept: tuple[str, ...]
) -> Callable[[dict[str, Any]], None]:
    """A ``json_schema_extra`` for an answer of ``model`` as a whole (the tool's output schema
    itself): its fields said in words (``in_words``) in its description, as ``said_in_words``
    says a nested one, and only the fields ``kept`` (by their wire names: an id a program
    passes on, a status it branches on) given a schema of their own. The others stay allowed,
    as every field not listed is, and the answer is unchanged. Every subschema costs each
    client a check against the metaschema at its first call of the tool (``said_in_words``):
    session_create's session field by field was 17 subschemas, the agent tools' run 21. A
    kept field's description is in its own schema, and the words give its type alone (a model
    reads the schema whole: said twice, a list's description was a kilobyte more)."""
    words = f"{what}: {in_words(model, brief=kept)}"

    def rewrite(schema: dict[str, Any]) -> None:
        schema["description"] = words
        properties: dict[str, Any] = schema.get("properties", {})
        schema["properties"] = {key: properties[key] for key in kept}
        schema["required"] = [key for key in schema.get("required", []) if key in kept]

    return rewrite


class SearchHit(Wire):
    """An entry that holds words of a search."""

    entry_id: str = Field(
        description="read around it with session_get: from_entry_id, it and what followed;"
        " entry_id, the path up to it"
    )
    type: str = Field(description="the entry's type: message, compaction, session_info, …")
    role: str | None = Field(default=None, description="a message's role: user, assistant, …")
    timestamp: str = Field(description="ISO 8601")
    words: int = Field(description="how many of the search's words it holds")
    on_branch: bool = Field(
        description="whether it is on the session's current branch (root to leaf, what a run"
        " there goes on from); false: on a branch left behind (moved away from, or forked off)"
    )
    snippet: str = Field(
        description=f"up to {SNIPPET_CHARS} characters of its text around the first match, on"
        " one line, each matched word marked «so», … where cut"
    )


class ListedSession(SessionInfo):
    hits: list[SearchHit] | None = Field(
        default=None,
        description=f"with a query: where it matched, its first {HITS_LISTED} entries best first"
        " (most words, then newest); session_search has the rest",
    )
    hit_count: int | None = Field(
        default=None, description="with a query: how many of its entries hold one of the words"
    )


class NewSession(SessionInfo):
    """session_create's and session_fork's answer: the session, its fields in words."""

    model_config = ConfigDict(
        json_schema_extra=fields_in_words(SessionInfo, "the session", ("id",))
    )


class SessionListResult(Wire):
    omit_when_null = frozenset({"unreadable"})
    sessions: Annotated[
        list[ListedSession], listed(f"the sessions, newest first, each {in_words(ListedSession)}")
    ]
    truncated: bool = Field(description="true when there are more sessions than listed")
    next_cursor: str | None = Field(default=None, description="pass as cursor for the next page")
    unreadable: str | None = Field(
        default=None,
        description="a folder's session files this page had to leave out, unreadable: how many,"
        " and why for the first few; absent: none",
    )


class SessionSearchResult(Wire):
    session_id: str
    hits: Annotated[
        list[SearchHit],
        listed(
            "best first: the entries holding the most words, then the newest; each"
            f" {in_words(SearchHit)}"
        ),
    ]
    total: int = Field(description="how many entries hold one of the words")
    truncated: bool = Field(description="true when there are more hits than given")
    next_cursor: str | None = Field(
        default=None, description="pass as cursor for the next (weaker) hits; null: no more"
    )


# One entry of the tree, flat: parent and children by id, a preview instead of content.
TREE_NODE = (
    "{id, parentId (the tree parent), type, timestamp (ISO 8601), children (ids of the first"
    f" {CHILDREN_SHOWN} entries that follow this one), childCount (how many follow it), label,"
    " onBranch (on the path from the root to the leaf), preview (role and the start of the"
    " text, or what the entry sets)}"
)


# A row of the outline view: a tree node on the chain it follows, or the head of a branch off
# it, not yet opened.
OUTLINE_NODE = (
    f"{TREE_NODE[:-1]}, kind (how the preview reads: user, assistant, toolResult, error, …),"
    " spine (on the chain; false: the first entry of another branch), folded (entries after"
    " this one on the chain that are not listed: the path to the next listed entry's parent,"
    " session_get view branch with entry_id)}"
)


class EntryPiece(Wire):
    """A run of characters of one entry's JSON text (``session_get`` with ``offset``)."""

    entry_id: str
    offset: int = Field(description="where the piece starts in the entry's text, in characters")
    chars: int = Field(description="characters in this piece")
    total_chars: int = Field(description="characters in the entry's whole text")
    left: int = Field(description="characters after this piece; 0: this is the last")
    next_offset: int | None = Field(description="offset of the next piece; null: none")
    next: str | None = Field(description="the call that reads the next piece; null: none")
    text: str = Field(description="the piece: joined in order, the pieces are the entry's JSON")


class SessionView(Page):
    omit_when_null = frozenset({"entries", "nodes", "outline", "piece"})
    next_cursor: str | None = Field(
        default=None,
        description="pass as cursor for the next page: the older one (with from_entry_id, the"
        " one after); null: no more",
    )
    session: Annotated[SessionInfo, said_in_words(SessionInfo, "the session")]
    view: Literal["branch", "tree", "entries", "outline"]
    leaf_id: str | None
    entries: Annotated[
        list[dict[str, Any]] | None,
        listed(
            "pi v3 entries, newest last (views branch and entries; absent in the others)",
            nullable=True,
        ),
    ] = None
    nodes: Annotated[
        list[dict[str, Any]] | None,
        listed(
            f"tree nodes in the order they were appended (view tree only), each {TREE_NODE}",
            nullable=True,
        ),
    ] = None
    outline: Annotated[
        list[dict[str, Any]] | None,
        listed(
            f"the chain and the heads of the branches off it (view outline only), each"
            f" {OUTLINE_NODE}",
            nullable=True,
        ),
    ] = None
    piece: Annotated[
        EntryPiece | None,
        said_in_words(
            EntryPiece,
            "with offset only: a piece of entry_id's JSON text (truncated: more is left)",
            nullable=True,
        ),
    ] = None


class SessionViewAnswer(SessionView):
    """session_get's answer, its fields in words (``fields_in_words``): field by field its
    schema was 11 subschemas, each checked by every client against the metaschema at its
    first call of session_get. The lists of each view and the paging fields keep their own."""

    model_config = ConfigDict(
        json_schema_extra=fields_in_words(
            SessionView,
            "a session and a page of one of its views",
            ("entries", "nodes", "outline", "truncated", "nextCursor"),
        )
    )


class AppendResult(Wire):
    session_id: str
    entry_id: str
    leaf_id: str = Field(description="the session's leaf after the append: the new entry")


class MoveResult(Wire):
    session_id: str
    leaf_id: str | None
    branch_summary_id: str | None = None
    warnings: list[str] = Field(
        default_factory=list,
        description="a model-written summary cut at the model's output limit, which may lack"
        " its end",
    )


class DeleteResult(Wire):
    session_id: str
    deleted: bool


class ContextResult(Page):
    omit_when_null = frozenset({"settings_cut"})  # as session://{id}/context leaves it out
    session_id: str
    messages: Annotated[list[dict[str, Any]], listed("pi messages, newest last")]
    thinking_level: str
    model: dict[str, str] | None
    active_tool_names: list[str] | None
    settings_cut: str | None = Field(
        default=None,
        description="what of the thinking level, model and active tool names is too long to"
        " show on a page, and where they are whole; absent: nothing",
    )


class ContextAnswer(ContextResult):
    """session_context's answer, its fields in words: a client checks its schema against the
    metaschema at its first call, which for a client resuming a session is the call it waits
    on (field by field, 13 subschemas). The messages and the paging fields keep their own."""

    model_config = ConfigDict(
        json_schema_extra=fields_in_words(
            ContextResult,
            "the context as the model gets it",
            ("sessionId", "messages", "truncated", "nextCursor"),
        )
    )


class StatsResult(Wire):
    session_id: str
    stats: dict[str, Any]


class ExportResult(Wire):
    omit_when_null = frozenset({"omitted"})
    session_id: str
    jsonl: str = Field(description="these lines of the file, each ending in a newline")
    lines: int = Field(description="lines in the whole file (the header is line 1)")
    first_line: int = Field(description="the line this page starts at (1: the header)")
    truncated: bool = Field(description="true when the file goes on after this page")
    next_cursor: str | None = Field(default=None, description="pass as cursor for the next page")
    omitted: str | None = Field(
        default=None,
        description="a line too large for a page, alone on its page and not in jsonl: which"
        " line and where to read it; absent: none",
    )


class ExportAnswer(ExportResult):
    """session_export's answer, its fields in words (field by field, 9 subschemas checked
    by every client at its first call); the lines and the paging fields keep their own."""

    model_config = ConfigDict(
        json_schema_extra=fields_in_words(
            ExportResult,
            "a page of the session's pi v3 JSONL file",
            ("sessionId", "jsonl", "truncated", "nextCursor"),
        )
    )


class ImportResult(Wire):
    session: Annotated[SessionInfo, said_in_words(SessionInfo, "the session imported")]
    file_id: str = Field(description="the id in the file's header")
    new_id: bool = Field(description="true when the session got an id other than the file's")
    note: str = Field(description="which id it got, and why")


class CompactResult(Wire):
    session_id: str
    compaction_id: str | None
    tokens_before: int = 0
    tokens_after: int = 0
    summary: str = ""
    warnings: list[str] = Field(
        default_factory=list,
        description="what went wrong without stopping it: a summary cut at the model's output"
        " limit, which may lack its end",
    )


class CompactionAnswer(CompactResult):
    """session_compact's answer, its fields in words (field by field, 9 subschemas checked
    by every client at its first call); the ids keep their own."""

    model_config = ConfigDict(
        json_schema_extra=fields_in_words(
            CompactResult, "the compaction", ("sessionId", "compactionId")
        )
    )


class RunInfo(Wire):
    run_id: str
    session_id: str
    agent: str
    model: str
    status: str = Field(description="running, completed, error or aborted")
    answer: str | None = Field(default=None, description="the final assistant text")
    answer_truncated: bool = Field(
        default=False,
        description="the answer was cut to fit (its end says so); session_get has all of it",
    )
    error: str | None = None
    stop_reason: str | None = None
    started: str = Field(description="ISO 8601")
    finished: str | None = Field(default=None, description="ISO 8601")
    events: int = 0
    last_event: str = ""
    new_messages: int = 0
    usage: dict[str, Any] = Field(default_factory=dict)
    depth: int = 0
    parent_run_id: str | None = Field(
        default=None,
        description="the run whose tool call started this one (a sub-agent); null: a client's",
    )
    warnings: list[str] = Field(
        default_factory=list,
        description="what went wrong without stopping the run: an MCP server of the agent's"
        " that could not be started (its tools were left out); queued messages the run ended"
        " before taking (send them again); an automatic compaction that failed or whose"
        " summary was cut",
    )


class RunAnswer(RunInfo):
    """agent_run's, agent_status's and agent_cancel's answer: the run, its fields in words."""

    model_config = ConfigDict(
        json_schema_extra=fields_in_words(RunInfo, "the run", ("runId", "sessionId", "status"))
    )


class RunList(Wire):
    runs: Annotated[list[RunInfo], listed(f"the runs, newest first, each {in_words(RunInfo)}")]
    truncated: bool = Field(description="true when older runs are left, for nextCursor")
    next_cursor: str | None = Field(default=None, description="pass as cursor for older runs")


class AgentInfo(Wire):
    name: str
    description: str
    model: str | None
    thinking_level: str
    tools: list[str]
    servers: list[str] | None
    max_turns: int
    uri: str


class AgentList(Wire):
    agents: Annotated[list[AgentInfo], listed(f"the agents, each {in_words(AgentInfo)}")]


class QueueResult(Wire):
    run_id: str
    queued: str
    status: str
