"""The application: everything needed to run agents in sessions, opened once and shared by the
MCP server and the command line. The session repo (one SQLite file, a PostgreSQL database, or
a folder of JSONL files), the manifests, the run manager (a task group in which runs outlive
the request that started them), the session leases and the tool hub (MCP clients to downstream
servers and to the built-in tools)."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import anyio
from anyio.abc import TaskGroup

from mcp_agent.blocking import Offload, worker_threads
from mcp_agent.manifests import (
    AgentManifest,
    ServerConfig,
    load_agents,
    load_servers,
    shipped_manifests_dir,
)
from mcp_agent.messages import UserMessage
from mcp_agent.proxy.hub import ToolHub
from mcp_agent.runtime.descriptors import descriptor_limit, runs_that_fit
from mcp_agent.runtime.leases import LeaseBook, PostgresLeases, SessionLeases
from mcp_agent.runtime.models import ModelOverrides
from mcp_agent.runtime.run_board import RunBoard
from mcp_agent.runtime.runs import RunLimits, RunManager
from mcp_agent.runtime.search_index import SearchIndexer
from mcp_agent.runtime.settings import ServerSettings
from mcp_agent.sessions.entries import MessageEntry, SessionEntry, SessionInfoEntry
from mcp_agent.sessions.jsonl import JsonlSessionRepo
from mcp_agent.sessions.repo import SessionRepo
from mcp_agent.sessions.row_waits import RowWaits
from mcp_agent.sessions.sqlite import SqliteSessionRepo
from mcp_agent.sessions.storage import listing_text

# Sessions created and not yet given a user message that are remembered, to tell of that
# message (a client creating sessions it never writes to pushes out the oldest).
UNPROMPTED_KEPT = 10_000


@dataclass
class AppState:
    settings: ServerSettings
    repo: SessionRepo
    agents: dict[str, AgentManifest]
    servers: dict[str, ServerConfig]
    task_group: TaskGroup
    runs: RunManager
    hub: ToolHub
    # Runs blocking work (every session read and write) on worker threads, bounded.
    offload: Offload
    # Indexes the text of imported sessions for search in the background (nudge it).
    search_index: SearchIndexer
    # Model names of the caller's own (tests, the demo's scripted model), before the registry.
    models: ModelOverrides | None = None
    # Called when sessions are created, forked, imported, renamed or deleted (the MCP server's
    # list-changed notifications); a session's own changes go to ``repo.listeners``.
    list_listeners: list[Callable[[], None]] = field(default_factory=list)
    # Called with the id of a session deleted: whoever reads it is told it changed (reading it
    # now says it is gone), as a list change alone would not tell a reader of that session.
    deleted_listeners: list[Callable[[str], None]] = field(default_factory=list)
    # Sessions created here that have no user message yet (oldest first, at most
    # UNPROMPTED_KEPT): the first one is the description resources/list shows.
    _unprompted: dict[str, None] = field(default_factory=dict, init=False, repr=False)
    _unprompted_lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def created(self, session_id: str) -> None:
        """A session created here, empty: the list changed, and changes again at its first
        user message."""
        with self._unprompted_lock:
            self._unprompted[session_id] = None
            while len(self._unprompted) > UNPROMPTED_KEPT:
                del self._unprompted[next(iter(self._unprompted))]
        self.list_changed()

    def prompted(self, session_id: str) -> bool:
        """Whether ``session_id`` was created here and had no user message until now."""
        with self._unprompted_lock:
            return self._unprompted.pop(session_id, False) is None

    def list_changed(self) -> None:
        for listener in list(self.list_listeners):
            listener()

    def session_deleted(self, session_id: str) -> None:
        self.list_changed()
        for listener in list(self.deleted_listeners):
            listener(session_id)


def open_repo(settings: ServerSettings) -> SessionRepo:
    if settings.sessions_dir is not None:
        return JsonlSessionRepo(
            settings.sessions_dir,
            layout=settings.sessions_layout,  # type: ignore[arg-type]  # checked by ServerSettings
        )
    settings.db_path.parent.mkdir(parents=True, exist_ok=True)
    return SqliteSessionRepo(
        settings.db_path,
        durability=settings.durability,  # type: ignore[arg-type]  # checked by ServerSettings
    )


def open_store(settings: ServerSettings) -> tuple[SessionRepo, LeaseBook, RunBoard | None]:
    """The session repo, the leases kept beside it and (PostgreSQL) the board of every
    replica's runs: a PostgreSQL database when ``settings.db_url`` names one, else the SQLite
    file. Close the leases first."""
    if settings.db_url:
        from mcp_agent.sessions.postgres import PostgresSessionRepo

        # A connection for each worker thread, and a few for leases and notifications.
        repo = PostgresSessionRepo(
            settings.db_url,
            durability=settings.durability,  # type: ignore[arg-type]  # checked by ServerSettings
            max_connections=settings.db_threads + 4,
            statement_timeout=settings.statement_timeout(),
        )
        # Writes waiting for session rows other transactions hold take a quarter of the
        # threads at most: the other sessions always find some (sessions.row_waits).
        repo.database.row_waits = RowWaits(max(1, settings.db_threads // 4))
        pg_leases = PostgresLeases(repo.database, presence=True)
        repo.database.session_guard = pg_leases.guard
        return repo, pg_leases, RunBoard(repo.database, pg_leases.owner, pg_leases)
    # The repo first: it refuses a file that is not a session database before the leases'
    # table is written into it.
    local = open_repo(settings)
    try:
        database = local.database if isinstance(local, SqliteSessionRepo) else None
        leases = SessionLeases(settings.db_path, database)
    except BaseException:
        local.close()
        raise
    if isinstance(local, SqliteSessionRepo):
        local.database.session_guard = leases.guard
    return local, leases, None


def renamed_lists(state: AppState) -> Callable[[str, SessionEntry], None]:
    """A repo listener that tells the list listeners of a rename, and of the first user
    message of a session created here: a session's name and that message are what
    ``resources/list`` shows for it, and a client that lists resources (and subscribes to
    none) heard nothing of either. (The first user message of a session made elsewhere, or
    before this server started, is not told: that would take a read at each append.)"""

    def renamed(session_id: str, entry: SessionEntry) -> None:
        if isinstance(entry, SessionInfoEntry):
            state.list_changed()
        elif (
            isinstance(entry, MessageEntry)
            and isinstance(entry.message, UserMessage)
            and listing_text(entry.message) is not None
            and state.prompted(session_id)
        ):
            state.list_changed()

    return renamed


@asynccontextmanager
async def open_app(
    settings: ServerSettings, models: ModelOverrides | None = None
) -> AsyncIterator[AppState]:
    """Open the application; leaving it aborts running runs and stops downstream servers."""
    # Here, not at the top: the built-in tools (sub-agents) start runs through this package.
    from mcp_agent.runtime.builtin import build_builtin_server

    manifests = settings.manifests_dir or shipped_manifests_dir()
    agents = load_agents(manifests)
    servers = load_servers(manifests)
    repo, leases, board = open_store(settings)
    offload = worker_threads(settings.db_threads)
    try:
        try:
            async with anyio.create_task_group() as group:
                limits = RunLimits(
                    settings.max_runs,
                    settings.max_runs_per_client,
                    runs_that_fit(descriptor_limit()),
                )
                runs = RunManager(
                    group,
                    leases,
                    offload=offload,
                    limits=limits,
                    board=board,
                    # A tool's write to a session waits its turn behind the others here as
                    # long as the one holding it may wait for the database.
                    write_wait=getattr(repo, "lock_wait", None),
                    row_waits=getattr(getattr(repo, "database", None), "row_waits", None),
                )
                group.start_soon(runs.keep_leases)
                group.start_soon(runs.keep_board)
                search_index = SearchIndexer(repo, offload)
                search_index.nudge()  # text imported before this server started
                group.start_soon(search_index.run)
                hub = ToolHub(servers, builtin=lambda: build_builtin_server(state))
                state = AppState(
                    settings, repo, agents, servers, group, runs, hub, offload, search_index, models
                )
                repo.listeners.append(renamed_lists(state))
                async with hub:
                    try:
                        yield state
                    finally:
                        await runs.close()
                group.cancel_scope.cancel()
        finally:
            offload.close()
            leases.close()
    finally:
        repo.close()
