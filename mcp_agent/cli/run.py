"""``run``: one agent run from the terminal, its answer streamed as it arrives; and what ``chat``
shares with it.

Both open the same application state as the MCP server (``open_app``) and start runs with the
same ``start_run``, so a run from the terminal uses the tool hub and stores its session exactly
as an ``agent_run`` from an MCP client does. Ctrl-C during an answer aborts the run (the session
records an aborted message) instead of killing the program.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from mcp_agent.cli.common import (
    FAILED,
    INTERRUPTED,
    PROG,
    TERMINATED,
    DbOption,
    ManifestsOption,
    announce_changes,
    check_database,
    database_location,
    die,
    err,
    id_text,
    named_store,
    plain_logging,
    similar_session_ids,
    single,
)

if TYPE_CHECKING:
    from anyio.abc import TaskStatus

    from mcp_agent.runtime.application import AppState
    from mcp_agent.runtime.runs import Run
    from mcp_agent.runtime.settings import ServerSettings

ModelOption = Annotated[
    str | None,
    typer.Option(help="provider:model-id, e.g. openai:gpt-4o-mini (see `models`)"),
]
AgentOption = Annotated[
    str | None,
    typer.Option(
        "--agent",
        help="an agent from the manifests (default: a continued session's own, else default)",
    ),
]
SessionOption = Annotated[
    str | None,
    typer.Option("--session", help="continue this session (default: a new one)", callback=id_text),
]
NO_MODEL = (
    "no model configured: pass --model provider:model-id, set MCP_AGENT_MODEL, or set "
    f"OPENAI_API_KEY or ANTHROPIC_API_KEY (`{PROG} models` lists models; "
    "scripted:echo needs no key)"
)


class InputError(Exception):
    """Bad input found once the application is open (unknown session, agent or model)."""


# --- shared by run and chat -------------------------------------------------------------------


def server_settings(db: str | None, manifests: Path | None) -> ServerSettings:
    from mcp_agent.runtime.settings import ServerSettings

    try:
        settings = ServerSettings()
    except ValueError as error:
        die(str(error))
    named_store(db, "--db", create=True)
    settings.set_database(database_location(db))
    if manifests is not None:
        if not manifests.is_dir():
            die(f"--manifests {manifests} is not a folder (it needs agents/*.toml)")
        settings.manifests_dir = manifests
    return settings


@asynccontextmanager
async def opened_app(settings: ServerSettings) -> AsyncIterator[AppState]:
    from mcp_agent.cli.demo import cli_models
    from mcp_agent.runtime.application import open_app

    async with open_app(settings, models=cli_models()) as state:
        # Over PostgreSQL the servers on the database hear of the sessions written here.
        announcer = announce_changes(state.repo)
        if announcer is not None:
            state.list_listeners.append(announcer.list_changed)
            # (a deletion tells the list listeners first, as the server does)
            state.deleted_listeners.append(announcer.session_changed)
        yield state


def check_model(state: AppState, agent_name: str | None, model: str | None) -> str:
    """The model a run will use, or InputError saying how to choose one."""
    from mcp_agent.cli.demo import cli_models
    from mcp_agent.providers.registry import SAMPLING_API
    from mcp_agent.runtime.errors import ModelUnavailable
    from mcp_agent.runtime.models import (
        default_model_name,
        is_client_model,
        missing_key,
        resolve_run_model,
    )

    manifest = state.agents.get(agent_name or "default")
    if manifest is None:
        known = ", ".join(sorted(state.agents)) or "(none)"
        raise InputError(f"unknown agent {agent_name!r}; the manifests define: {known}")
    name = model or manifest.model or default_model_name(state.settings.default_model)
    # The MCP client's own model (sampling) needs an MCP client; the terminal has none.
    client_model = is_client_model(name)
    if client_model and not (model or manifest.model or state.settings.default_model):
        raise InputError(NO_MODEL)  # nothing chosen, and no key for a provider's model
    if not client_model:
        try:
            _, chosen, _ = resolve_run_model(name, None, None, cli_models())
        except ModelUnavailable as error:
            raise InputError(f"{error}; `{PROG} models` lists the known models") from None
        client_model = chosen.api == SAMPLING_API  # a provider of models.toml may be one
    if client_model:
        if model:
            whose = f"model {name}"
        elif manifest.model:
            whose = f"agent {manifest.name}'s model {name}"
        else:
            whose = f"default model {name} (MCP_AGENT_MODEL)"
        raise InputError(
            f"the {whose} is the MCP client's own, which only a server can ask its client "
            f"for; a run here needs a provider's model, provider:model-id (`{PROG} models` "
            "lists them; scripted:echo needs no key)"
        )
    if missing := missing_key(chosen.provider):
        # Refuse before a session is created for a run that could only fail.
        raise InputError(f"{chosen.ref} needs an API key: set {missing}")
    return name


async def check_session(state: AppState, session_id: str | None) -> None:
    if session_id is None or await state.offload(lambda: state.repo.exists(session_id)):
        return
    hint = await state.offload(lambda: similar_session_ids(state.repo, session_id))
    raise InputError(
        f"session {session_id} not found; " + (hint or f"`{PROG} sessions list` shows the sessions")
    )


async def check_run_model(
    state: AppState, session_id: str | None, agent_name: str | None, model: str | None
) -> str:
    """The model a run in ``session_id`` (None: a new session) will use, as start_run chooses
    it, or InputError: a session continued without naming a model goes on with the one it
    last used when that can be used here, else with its agent's (or the default)."""
    if session_id is None or model is not None:
        return check_model(state, agent_name, model)
    from mcp_agent.cli.demo import cli_models
    from mcp_agent.runtime.start import resume_model, session_agent

    def resumed() -> tuple[str | None, str]:
        session = state.repo.open(session_id)
        agent = agent_name or session_agent(state, session).name
        found = resume_model(session, state.settings.default_model, None, cli_models())
        return (found[0] if found else None), agent

    name, agent = await state.offload(resumed)
    return name or check_model(state, agent, None)


def _stdout_is_a_terminal() -> bool:
    try:
        return sys.stdout.isatty()
    except (ValueError, AttributeError):  # closed, or no real stdout
        return False


def _stdout_is_a_file() -> bool:
    import os
    import stat

    try:
        return stat.S_ISREG(os.fstat(sys.stdout.fileno()).st_mode)
    except (OSError, ValueError, AttributeError):  # no real stdout (a test runner's capture)
        return False


class StreamPrinter:
    """Writes an agent's answer to stdout as it streams, and its thinking, tool calls and
    errors to stderr, so that `run "…" > answer.txt` keeps just the answer."""

    def __init__(self, buffered: bool | None = None, terminal: bool | None = None) -> None:
        # Which stream has a line without its newline yet: "out", "thinking" or None.
        self.open: str | None = None
        self.shown_error = False  # an assistant message that failed has been reported
        # Into a file an answer is written once it has ended: the partial text of an attempt
        # that failed and is retried must not end up in answer.txt. A terminal or a pipe
        # sees the answer as it streams.
        self.buffered = _stdout_is_a_file() if buffered is None else buffered
        # On a terminal, text from the model (or a hostile server) is shown with its control
        # characters escaped, as everywhere else, so that it cannot retitle, clear or take
        # over the terminal; a pipe or a file gets the answer exactly.
        self.terminal = _stdout_is_a_terminal() if terminal is None else terminal
        self._text: list[str] = []
        self._held: str | None = None  # a failed answer's text, until no retry follows
        # The failed answer a retry is waiting to replace: it is the answer after all when
        # the retry never runs (Ctrl-C while it waits).
        self._replaced: tuple[str | None, bool] | None = None
        # The run's warnings (its MCP servers that could not start), said as they come.
        self.warnings: list[str] = []
        self._warned = 0

    def _write_answer(self, text: str) -> None:
        if text:
            sys.stdout.write(text if text.endswith("\n") else text + "\n")
            sys.stdout.flush()

    def end_line(self) -> None:
        if self._held is not None:
            held, self._held = self._held, None
            self._write_answer(held)
        if self.open == "out":
            sys.stdout.write("\n")
            sys.stdout.flush()
        elif self.open == "thinking":
            err().print()
        self.open = None

    def note(self, text: Any, style: str = "") -> None:
        self.end_line()
        err().print(text, style=style, soft_wrap=True)

    def follow(self, warnings: list[str]) -> None:
        """Say ``warnings`` (a run's, filled as it lists its tools) as they come."""
        self.warnings, self._warned = warnings, 0

    def say_warnings(self) -> None:
        from mcp_agent.wire import one_line

        for warning in self.warnings[self._warned :]:
            self.note(f"warning: {one_line(warning, 500)}", "yellow")
        self._warned = len(self.warnings)

    def __call__(self, event: Any) -> None:
        from mcp_agent.events import AutoCompactionEndEvent

        if isinstance(event, AutoCompactionEndEvent):
            # What it added to the run's warnings, its own line says (below): said once.
            self._warned = len(self.warnings)
        self.say_warnings()  # the tools are listed before the first event
        from mcp_agent.cli.render import format_args
        from mcp_agent.events import (
            AutoCompactionStartEvent,
            AutoRetryEndEvent,
            AutoRetryStartEvent,
            MessageEndEvent,
            MessageUpdateEvent,
            TextDeltaEvent,
            ThinkingDeltaEvent,
            ToolExecutionEndEvent,
            ToolExecutionStartEvent,
            describe_event,
        )
        from mcp_agent.messages import AssistantMessage, content_text
        from mcp_agent.wire import escape_controls, one_line

        match event:
            case MessageUpdateEvent(assistant_message_event=TextDeltaEvent(delta=delta)):
                if self.open == "thinking":
                    self.end_line()
                if self.buffered:
                    self._text.append(delta)
                else:
                    sys.stdout.write(escape_controls(delta) if self.terminal else delta)
                    sys.stdout.flush()
                    self.open = "out"
            case MessageUpdateEvent(assistant_message_event=ThinkingDeltaEvent(delta=delta)):
                if self.open != "thinking":
                    self.end_line()
                    err().print("thinking: ", style="dim", end="")
                err().print(escape_controls(delta), style="dim italic", end="", soft_wrap=True)
                self.open = "thinking"
            case ToolExecutionStartEvent(tool_name=name, args=args):
                self.note(f"→ {escape_controls(name)}({format_args(args)})", "yellow")
            case ToolExecutionEndEvent(tool_name=name, result=result, is_error=is_error):
                text = one_line(content_text(getattr(result, "content", None) or []), 160)
                name = escape_controls(name)
                if is_error:
                    self.note(f"✗ {name} failed: {text}", "red")
                else:
                    self.note(f"← {name}: {text}", "dim yellow")
            case MessageEndEvent(message=AssistantMessage() as message):
                text, self._text = "".join(self._text), []
                self._replaced = None
                if message.failure is not None:
                    self.note(message.failure, "bold red")
                    self.shown_error = True
                    self._held = text or None
                else:
                    self.end_line()
                    self._write_answer(text)
            case AutoRetryStartEvent():
                self._replaced = (self._held, self.shown_error)
                self._held = None  # that answer is being asked for again
                self.shown_error = False
                self.note(describe_event(event), "yellow")
            case AutoRetryEndEvent():
                if self._replaced is not None:  # no answer came since the retry began
                    self._held, self.shown_error = self._replaced
                    self._replaced = None
                self.note(describe_event(event), "yellow")
            case AutoCompactionStartEvent():
                self.note(describe_event(event), "cyan")
            case AutoCompactionEndEvent(result=None):
                self.note(describe_event(event), "red")
            case AutoCompactionEndEvent():
                self.note(describe_event(event), "cyan")


def footer(run: Run) -> str:
    usage = run.usage
    parts = [f"session {run.session_id}", run.model_ref, f"{usage.total_tokens:,} tokens"]
    if usage.cost.total:
        parts.append(f"${usage.cost.total:.4f}")
    if run.status != "completed":
        parts.append(run.status)
    elif run.stop_reason == "length":  # else an answer cut short reads as a whole one
        parts.append("cut off at the model's output limit")
    elif not (run.answer or "").strip():  # else nothing on stdout, exit 0, and no word why
        parts.append("the model's answer was empty")
    return " · ".join(parts)


async def watch_interrupts(
    on_interrupt: Callable[[], None],
    which: signal.Signals = signal.SIGINT,
    *,
    task_status: TaskStatus[None] | None = None,
) -> None:
    """Call ``on_interrupt`` at each Ctrl-C (or signal ``which``) instead of the default
    action, until cancelled; started (``TaskGroup.start``) once the signal is caught."""
    import anyio

    caught = False
    try:
        with anyio.open_signal_receiver(which) as signals:
            caught = True
            if task_status is not None:
                task_status.started()
            async for _ in signals:
                on_interrupt()
    except (NotImplementedError, RuntimeError, ValueError):
        if caught:
            raise
        # No signal handling here (Windows, or not the main thread): Ctrl-C stays fatal.
        if task_status is not None:
            task_status.started()
        await anyio.sleep_forever()


async def start_and_wait(
    state: AppState, starting: Callable[[], Awaitable[Run]]
) -> tuple[Run | None, int | None]:
    """Start a run with ``starting`` and wait for it. Ctrl-C aborts it, and so does SIGTERM
    (a supervisor, ``timeout``), so that the session records the aborted answer either way;
    before the run is under way, either stops its start, which leaves nothing behind. The run
    (None when its start was stopped) and the exit code due to the signal, or None."""
    import anyio

    from mcp_agent.sessions.sqlite.database import stop_waiting_for_locks

    stopped: int | None = None
    run: Run | None = None
    start_scope = anyio.CancelScope()

    def stop(code: int, why: str) -> Callable[[], None]:
        def on_signal() -> None:
            nonlocal stopped
            stopped = stopped or code
            if run is not None:
                run.abort(why)
            else:
                start_scope.cancel()
                # A start waiting for another process's lock on the database waits in a
                # thread the cancel cannot reach: it gives up within a slice of its wait,
                # nothing written (and so do the writes of the program's end), not after
                # the busy timeout, a minute.
                stop_waiting_for_locks()

        return on_signal

    async with anyio.create_task_group() as group:
        await group.start(watch_interrupts, stop(INTERRUPTED, "interrupted with Ctrl-C"))
        await group.start(watch_interrupts, stop(TERMINATED, "terminated"), signal.SIGTERM)
        with start_scope:
            try:
                run = await starting()
            except InputError:
                if stopped is None:
                    raise
                # Refused because it was stopped (the lock it waited for): stopped it is.
        if run is not None:
            await state.runs.wait(run)
        group.cancel_scope.cancel()
    return run, stopped


async def start(
    state: AppState,
    printer: StreamPrinter,
    prompt: str,
    session_id: str | None,
    agent: str | None,
    model: str | None,
) -> Run:
    """``start_run`` as the MCP tool does it; its refusals become InputError."""
    from mcp_agent.runtime.errors import Refused
    from mcp_agent.runtime.start import start_run
    from mcp_agent.sessions.errors import SessionError

    try:
        run = await start_run(
            state,
            prompt=prompt,
            session_id=session_id,
            agent_name=agent,
            model=model,
            depth=0,
            listener=printer,
        )
    except (Refused, SessionError) as error:
        raise InputError(str(error)) from None
    printer.follow(run.warnings)
    return run


# --- run --------------------------------------------------------------------------------------


def run(
    prompt: Annotated[
        str,
        typer.Argument(
            metavar="PROMPT", help="what to ask the agent (-: read it from standard input)"
        ),
    ],
    session: SessionOption = None,
    agent: AgentOption = None,
    model: ModelOption = None,
    db: DbOption = None,
    manifests: ManifestsOption = None,
) -> None:
    """Run an agent once; the answer streams to stdout, tool calls and status to stderr."""
    piped = prompt == "-"  # as cat and most tools read it; else "-" itself went to the model
    if piped:
        prompt = sys.stdin.buffer.read().decode("utf-8", errors="replace")
    if not prompt.strip():
        where = " read from standard input" if piped else ""
        die(f"the prompt{where} is empty; say what the agent should do")
    from mcp_agent.wire import utf8_only

    prompt = utf8_only(prompt)  # bytes that were not UTF-8 come as surrogates (surrogateescape)
    settings = server_settings(db, manifests)
    code = run_app(settings, lambda state: _run_once(state, prompt, session, agent, model))
    if code:
        raise typer.Exit(code)


def run_app(settings: ServerSettings, body: Callable[[AppState], Any]) -> int:
    """Open the application, run ``body``; bad input and bad manifests are one-line errors."""
    import anyio

    from mcp_agent.manifests import ManifestError

    async def main() -> int:
        async with opened_app(settings) as state:
            return await body(state)

    check_database(settings.db_url or settings.db_path)
    plain_logging()
    try:
        return anyio.run(main)
    except BaseException as error:
        found = single(error)
        if isinstance(found, InputError):
            die(str(found))
        if isinstance(found, ManifestError):
            die(f"{found} (fix the manifest or pass another --manifests folder)")
        if found is not error:
            raise found from None
        raise


async def _run_once(
    state: AppState, prompt: str, session_id: str | None, agent: str | None, model: str | None
) -> int:
    await check_session(state, session_id)
    await check_run_model(state, session_id, agent, model)
    printer = StreamPrinter()
    run, stopped = await start_and_wait(
        state, lambda: start(state, printer, prompt, session_id, agent, model)
    )
    if run is None:
        printer.note(f"{PROG}: stopped before the run began; nothing was stored", "dim")
        return stopped or INTERRUPTED
    printer.say_warnings()
    printer.end_line()
    if run.status == "error" and run.error and not printer.shown_error:
        printer.note(f"{PROG}: the run failed: {run.error}", "red")
    printer.note(footer(run), "dim")
    if stopped is not None:
        return stopped
    return 0 if run.status == "completed" else FAILED
