"""``chat``: a conversation with an agent, one line per message, with slash commands to see the
tree, move the leaf, fork, compact, and change model or thinking level. Lines come from stdin,
a terminal or a pipe. Ctrl-C stops the answer being written; at the prompt it leaves. SIGTERM
(a supervisor, ``timeout``) stops the answer as Ctrl-C does, then leaves (exit 143).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import typer

from mcp_agent.cli.common import (
    BAD_INPUT,
    FAILED,
    TERMINATED,
    DbOption,
    ManifestsOption,
    err,
    out,
    stdin_is_tty,
)
from mcp_agent.cli.run import (
    AgentOption,
    InputError,
    ModelOption,
    SessionOption,
    StreamPrinter,
    check_model,
    check_run_model,
    check_session,
    footer,
    run_app,
    server_settings,
    start,
    watch_interrupts,
)

if TYPE_CHECKING:
    import anyio

    from mcp_agent.messages import ThinkingLevel
    from mcp_agent.runtime.application import AppState


# Each line at most 80 columns (a terminal's usual width), the thinking levels included.
HELP = """\
Commands:
  /tree [full]          the session tree (entry ids, branches, the current leaf)
  /move ENTRY|root      move the leaf to ENTRY: the next message branches there
  /fork [ENTRY [at]]    continue in a copy of this session, up to before ENTRY
                        (or at it)
  /compact [focus]      summarise the older part of the branch to free context
  /model [provider:id]  show or change the model
  /thinking [LEVEL]     show or change the thinking level:
                        {levels}
  /session              the session id
  /help                 this list
  /quit                 leave (Ctrl-D too); Ctrl-C stops an answer
  //text                send "/text" as a message"""


def chat(
    session: SessionOption = None,
    agent: AgentOption = None,
    model: ModelOption = None,
    db: DbOption = None,
    manifests: ManifestsOption = None,
) -> None:
    """Talk with an agent: one line per message, slash commands for the tree (/help)."""
    settings = server_settings(db, manifests)

    async def body(state: AppState) -> int:
        await check_session(state, session)
        name = await check_run_model(state, session, agent, model)
        return await Chat(state, session, agent, model, name).loop()

    code = run_app(settings, body)
    if code:
        raise typer.Exit(code)


# The longest piped line taken as a message: the same bound as a line the server reads.
MAX_PIPED_LINE = 64 << 20


class LineReader:
    """Reads stdin in a daemon thread: a pending read never holds up the program's exit.

    Piped lines are read from the file descriptor itself, not through ``sys.stdin``: a daemon
    thread blocked in a read of ``sys.stdin`` holds its buffer's lock, and the interpreter's
    shutdown then dies on that lock ("Fatal Python error: _enter_buffered_busy") when the chat
    ends with the pipe still open (SIGTERM, or Ctrl-C at the prompt)."""

    def __init__(self, fd: int | None = None, max_line: int = MAX_PIPED_LINE) -> None:
        """``fd``: a pipe to read instead of stdin (piped stdin is read from its own)."""
        self.echo = fd is not None or not stdin_is_tty()
        self.max_line = max_line
        self._rest = b""  # piped input read past the last line given
        self._fd = fd if fd is not None else _file_descriptor(sys.stdin) if self.echo else None
        self._terminal: list[Any] | None = None  # the terminal's settings, to restore at the end
        if not self.echo:
            self._edit_lines()

    def _edit_lines(self) -> None:
        """Give ``input()`` line editing and history: without readline, an arrow key went
        into the message as an escape sequence."""
        try:
            import readline  # noqa: F401  (imported, it serves input())
            import termios
        except ImportError:  # Windows: its console edits lines itself
            return
        with contextlib.suppress(OSError, termios.error):
            self._terminal = termios.tcgetattr(sys.stdin.fileno())

    def close(self) -> None:
        """Restore the terminal: a chat that ends (Ctrl-C, SIGTERM) while readline waits for a
        line in the reading thread would leave it without echo, in readline's raw mode."""
        if self._terminal is None:
            return
        import termios

        with contextlib.suppress(OSError, termios.error):
            termios.tcsetattr(sys.stdin.fileno(), termios.TCSADRAIN, self._terminal)

    async def read(self, prompt: str) -> str | None:
        import anyio.from_thread
        import anyio.lowlevel

        token = anyio.lowlevel.current_token()
        done = anyio.Event()
        got: list[str | None] = []

        from mcp_agent.wire import utf8_only

        def work() -> None:
            try:
                if self._fd is not None:
                    line = self._piped_line(self._fd)
                else:
                    line = input(prompt if not self.echo else "")
            except (EOFError, OSError, ValueError):
                line = None
            got.append(None if line is None else utf8_only(line))  # bytes read as surrogates
            try:
                anyio.from_thread.run_sync(done.set, token=token)
            except Exception:  # the chat ended meanwhile
                pass

        threading.Thread(target=work, name="chat-stdin", daemon=True).start()
        await done.wait()
        line = got[0]
        if line is not None and self.echo:
            # Piped input: show each message, so that the transcript reads as a conversation.
            out().print(f"{prompt}{line}", style="bold cyan", soft_wrap=True)
        return line

    def _piped_line(self, fd: int) -> str | None:
        """The next line of piped stdin without its end (LF or CRLF); None at the end. A line
        longer than ``max_line`` bytes is left out, saying so on stderr."""
        chunks = [self._rest]
        size = len(self._rest)
        while b"\n" not in chunks[-1]:
            if size > self.max_line:
                self._skip_line(fd, chunks[-1])
                chunks, size = [self._rest], len(self._rest)
                continue
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                self._rest = b""
                last = b"".join(chunks)
                return last.decode("utf-8", "surrogateescape") if last else None
            chunks.append(chunk)
            size += len(chunk)
        line, _, self._rest = b"".join(chunks).partition(b"\n")
        if len(line) > self.max_line:
            self._said_too_long()
            return self._piped_line(fd)
        return line.removesuffix(b"\r").decode("utf-8", "surrogateescape")

    def _skip_line(self, fd: int, last: bytes) -> None:
        """Read to the end of a line too long to take (from ``last``, its latest chunk)."""
        while b"\n" not in last:
            last = os.read(fd, 1 << 16)
            if not last:
                break
        self._rest = last.partition(b"\n")[2]
        self._said_too_long()

    def _said_too_long(self) -> None:
        err().print(
            f"a line of more than {self.max_line:,} bytes was left out (a message is one line)",
            style="yellow",
        )


def _file_descriptor(stream: Any) -> int | None:
    try:
        return int(stream.fileno())
    except (AttributeError, OSError, ValueError):  # not a file (a test's text stream)
        return None


class Chat:
    def __init__(
        self,
        state: AppState,
        session_id: str | None,
        agent: str | None,
        model: str | None,
        model_name: str,
    ) -> None:
        self.state = state
        self.session_id = session_id
        self.agent = agent
        self.model = model
        self.model_name = model_name
        self.printer = StreamPrinter()
        self.reader = LineReader()
        # Stops what is running, if anything, saying why.
        self.interrupt: Callable[[str], None] | None = None
        self.idle: anyio.CancelScope | None = None  # the wait for a line
        self.terminated = False
        # What the exit code tells once the lines run out: an answer failed (1), a line was
        # refused (2), so a script piping lines in learns that not every one went through.
        self.failed = False
        self.refused = False

    def say(self, text: str, style: str = "dim") -> None:
        self.printer.note(text, style)

    def refuse(self, text: str) -> None:
        """Say why a line was not taken; the chat goes on, and its exit code will tell."""
        self.printer.note(text, "red")
        self.refused = True

    async def _session_agent(self) -> str | None:
        """The agent a continued session goes on with when none is named (its own)."""
        from mcp_agent.runtime.errors import Refused
        from mcp_agent.runtime.start import session_agent
        from mcp_agent.sessions.errors import SessionError

        session_id, state = self.session_id, self.state
        if session_id is None:
            return None
        try:
            return await state.offload(
                lambda: session_agent(state, state.repo.open(session_id)).name
            )
        except (Refused, SessionError):  # said when the first message is sent
            return None

    async def loop(self) -> int:
        import anyio

        where = f"session {self.session_id}" if self.session_id else "a new session"
        agent = self.agent or await self._session_agent() or "default"
        async with anyio.create_task_group() as group:
            await group.start(watch_interrupts, self._on_interrupt)
            await group.start(watch_interrupts, self._on_terminate, signal.SIGTERM)
            self.say(f"chat in {where} · agent {agent} · {self.model_name} · /help for commands")
            try:
                await self._converse()
            finally:
                self.reader.close()
                group.cancel_scope.cancel()
        if self.terminated:
            return TERMINATED
        return FAILED if self.failed else BAD_INPUT if self.refused else 0

    def _on_interrupt(self, why: str = "interrupted with Ctrl-C") -> None:
        if self.interrupt is not None:
            self.interrupt(why)
        elif self.idle is not None:
            self.idle.cancel()

    def _on_terminate(self) -> None:
        # The answer being written is aborted (and so stored as such), then the chat ends.
        self.terminated = True
        self._on_interrupt("terminated")

    async def _converse(self) -> None:
        import anyio

        while not self.terminated:
            with anyio.CancelScope() as scope:
                self.idle = scope
                line = await self.reader.read("> ")
            self.idle = None
            if scope.cancelled_caught or line is None:
                self.printer.end_line()
                if not self.reader.echo:
                    # The prompt stays on the terminal's last line: the shell's would follow it.
                    sys.stdout.write("\n")
                    sys.stdout.flush()
                return
            line = line.strip()
            if not line:
                continue
            if line.startswith("//"):
                # A message that itself begins with a slash (a path, a regex), sent with one.
                await self._prompt(line[1:])
            elif line.startswith("/"):
                command, _, argument = line[1:].partition(" ")
                if command in ("quit", "exit", "q"):
                    return
                await self._command(command, argument.strip())
            else:
                await self._prompt(line)

    async def _prompt(self, text: str) -> None:
        import anyio

        state = self.state
        with anyio.CancelScope() as starting:
            # Ctrl-C before the run is under way stops its start, which leaves nothing behind.
            self.interrupt = lambda _why: starting.cancel()
            try:
                run = await start(
                    state, self.printer, text, self.session_id, self.agent, self.model
                )
            except InputError as error:
                self.refuse(str(error))
                return
            finally:
                self.interrupt = None
        if starting.cancelled_caught:
            self.say("stopped before the run began; nothing was stored", "dim")
            return
        self.session_id = run.session_id
        self.interrupt = run.abort
        try:
            await state.runs.wait(run)
        finally:
            self.interrupt = None
        self.printer.say_warnings()
        self.printer.end_line()
        self.say(footer(run))
        self.failed |= run.status == "error"

    async def _command(self, command: str, argument: str) -> None:
        from mcp_agent.sessions.errors import SessionError

        handlers = {
            "help": self._help,
            "tree": self._tree,
            "move": self._move,
            "fork": self._fork,
            "compact": self._compact,
            "model": self._model,
            "thinking": self._thinking,
            "session": self._session,
        }
        handler = handlers.get(command)
        if handler is None:
            self.refuse(
                f"unknown command /{command}; /help lists the commands (to send a message "
                f"beginning with /, start it with //)"
            )
            return
        try:
            await handler(argument)
        except SessionError as error:
            self.refuse(error.message)
            if error.code == "summarizer_failed":  # the model failed, not the line
                self.failed = True

    async def _help(self, _: str) -> None:
        from mcp_agent.messages import ThinkingLevel

        self.say(HELP.format(levels=" ".join(level.value for level in ThinkingLevel)), "")

    # Database work runs on the state's worker threads, as the server's does: a lock held by
    # another process must not freeze the terminal's Ctrl-C handling.
    async def _current(self) -> Any:
        if self.session_id is None:
            return None
        session_id = self.session_id
        return await self.state.offload(lambda: self.state.repo.open(session_id))

    async def _ensure_session(self) -> Any:
        if self.session_id is None:
            manifest = self.state.agents[self.agent or "default"]
            created = await self.state.offload(
                lambda: self.state.repo.create(metadata={"agent": manifest.name})
            )
            self.session_id = created.id
            return created
        return await self._current()

    async def _session(self, _: str) -> None:
        self.say(self.session_id or "no session yet: the first message starts one", "")

    async def _tree(self, argument: str) -> None:
        from mcp_agent.cli.render import session_tree
        from mcp_agent.sessions.repo import linked_origin

        if argument not in ("", "full"):
            self.refuse("usage: /tree or /tree full (every entry)")
            return
        session = await self._current()
        if session is None:
            self.say("no session yet: the first message starts one")
            return
        self.printer.end_line()
        width, full = out().width, argument == "full"

        def draw() -> Any:
            started = linked_origin(self.state.repo, session.header)
            hint = "/tree full shows all"
            return session_tree(session, full, width, full_hint=hint, started=started)

        out().print(await self.state.offload(draw))

    async def _move(self, argument: str) -> None:
        from mcp_agent.cli.render import entry_summary

        if not argument:
            self.refuse("usage: /move ENTRY (an id from /tree) or /move root")
            return
        session = await self._current()
        if session is None:
            self.refuse("no session yet: the first message starts one")
            return
        target = None if argument == "root" else argument

        def move() -> Any:
            session.move_to(target)
            return session.get_entry(target) if target else None

        entry = await self.state.offload(move)
        where = "before the first entry" if target is None else f"to {target}"
        about = f" ({entry_summary(entry, 60).plain})" if entry is not None else ""
        self.say(f"leaf moved {where}{about}; your next message starts a branch there")

    async def _fork(self, argument: str) -> None:
        if self.session_id is None:
            self.refuse("no session yet: the first message starts one")
            return
        entry, _, position = argument.partition(" ")
        position = position.strip() or "before"
        if position not in ("before", "at"):
            self.refuse("usage: /fork [ENTRY [before|at]]")
            return
        old = self.session_id
        forked = await self.state.offload(
            lambda: self.state.repo.fork(old, entry or None, position)  # type: ignore[arg-type]
        )
        self.session_id = forked.id
        self.say(f"now in session {forked.id}, a fork of {old}")

    async def _compact(self, instructions: str) -> None:
        from mcp_agent.abort import AbortController
        from mcp_agent.cli.demo import cli_models
        from mcp_agent.compaction import CompactionError, compact, prepare_compaction
        from mcp_agent.runtime.errors import ModelUnavailable
        from mcp_agent.runtime.models import resolve_run_model
        from mcp_agent.runtime.start import resume_model

        session = await self._current()
        if session is None:
            self.refuse("no session yet: nothing to compact")
            return
        # Refuse before choosing a model what pi refuses too: an empty branch, or one that
        # ends in a compaction.
        branch = await self.state.offload(session.get_branch)
        prepare_compaction(branch, 0, context_messages=[], manual=True)
        manifest = self.state.agents[self.agent or "default"]
        default = self.state.settings.default_model
        # The model the next run would use (as start_run chooses it): the one asked for, else
        # the one the session last ran with, else the agent's or the default.
        resumed = None
        if self.model is None:
            resumed = await self.state.offload(
                lambda: resume_model(session, default, None, cli_models())
            )
        try:
            _, model, stream_fn = resumed or resolve_run_model(
                self.model or manifest.model, default, None, cli_models()
            )
        except ModelUnavailable as error:
            self.refuse(str(error))
            return
        controller = AbortController()
        self.interrupt = controller.abort
        self.say("compacting…")
        try:
            result = await compact(
                session,
                model,
                stream_fn,
                instructions=instructions or None,
                signal=controller.signal,
                offload=self.state.offload,
                manual=True,
            )
        except CompactionError as error:
            if error.code != "aborted":
                raise
            # Stopped with Ctrl-C, as an answer is: the line was not refused (exit code 2).
            self.say("compaction stopped; nothing was written", "yellow")
            return
        finally:
            self.interrupt = None
        self.say(
            f"compacted: about {result.tokens_before:,} → {result.tokens_after:,} tokens "
            f"(entry {result.entry_id}; the old entries stay in the tree)"
        )
        for warning in result.warnings:
            self.say(f"warning: {warning}", "yellow")

    async def _model(self, argument: str) -> None:
        if not argument:
            self.say(f"model: {self.model_name}", "")
            return
        try:
            self.model_name = check_model(self.state, self.agent, argument)
        except InputError as error:
            self.refuse(str(error))
            return
        self.model = argument
        self.say(f"model: {self.model_name} (from the next message on)")

    async def _thinking(self, argument: str) -> None:
        from mcp_agent.messages import ThinkingLevel

        if not argument:
            session = await self._current()
            context = None if session is None else await self.state.offload(session.build_context)
            if context is not None and context.thinking_level_recorded:
                self.say(f"thinking level: {context.thinking_level}", "")
                return
            # The next run goes at the agent's level (as the model can do it), and records it.
            agent = self.state.agents[self.agent or "default"]
            level = self._thinking_in_effect(ThinkingLevel(agent.thinking_level))
            self.say(f"thinking level: {level} (the agent's: the session sets none yet)", "")
            return
        levels = [level.value for level in ThinkingLevel]
        if argument not in levels:
            self.refuse(f"unknown thinking level {argument!r}; choose one of {' '.join(levels)}")
            return
        level = self._thinking_in_effect(ThinkingLevel(argument))
        session = await self._ensure_session()
        await self.state.offload(lambda: session.append_thinking_level_change(level))
        if level == argument:
            self.say(f"thinking level: {level} (from the next message on)")
        else:
            self.say(
                f"thinking level: {level}: {self.model_name} does not reason"
                f" (choose a model that does, then /thinking {argument})"
            )

    def _thinking_in_effect(self, level: ThinkingLevel) -> ThinkingLevel:
        """``level`` as the chat's model can do it, recorded so, as pi records it."""
        from mcp_agent.agent import effective_thinking_level
        from mcp_agent.cli.demo import cli_models
        from mcp_agent.runtime.models import resolve_run_model

        _, model, _ = resolve_run_model(self.model_name, None, None, cli_models())
        return effective_thinking_level(level, model)
