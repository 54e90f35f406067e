"""Where the server keeps its data and how it is reached; read from flags and the environment."""

from __future__ import annotations

import ipaddress
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from mcp_agent.paths import default_db_path, default_db_url, is_database_url, shown_url

MODEL_ENV = "MCP_AGENT_MODEL"
TOKEN_ENV = "MCP_AGENT_TOKEN"
DURABILITY_ENV = "MCP_AGENT_DURABILITY"
RETRIES_ENV = "MCP_AGENT_MODEL_RETRIES"
MAX_RUNS_ENV = "MCP_AGENT_MAX_RUNS"
MAX_SUBSCRIPTIONS_ENV = "MCP_AGENT_MAX_SUBSCRIPTIONS"
MAX_RUNS_PER_CLIENT_ENV = "MCP_AGENT_MAX_RUNS_PER_CLIENT"
TOKEN_FILE_ENV = "MCP_AGENT_TOKEN_FILE"
MAX_HTTP_SESSIONS_ENV = "MCP_AGENT_MAX_HTTP_SESSIONS"
HTTP_IDLE_TIMEOUT_ENV = "MCP_AGENT_HTTP_SESSION_IDLE_TIMEOUT"
NOTIFICATION_TIMEOUT_ENV = "MCP_AGENT_NOTIFICATION_TIMEOUT"
CLIENT_STREAM_WAIT_ENV = "MCP_AGENT_CLIENT_STREAM_WAIT"
PROGRESS_INTERVAL_ENV = "MCP_AGENT_PROGRESS_INTERVAL"
HTTP_SEND_BUFFER_ENV = "MCP_AGENT_HTTP_SEND_BUFFER"
REPLICA_ENV = "MCP_AGENT_REPLICA"
DB_THREADS_ENV = "MCP_AGENT_DB_THREADS"
LEASE_ENV = "MCP_AGENT_LEASE_SECONDS"
STATEMENT_TIMEOUT_ENV = "MCP_AGENT_DB_STATEMENT_TIMEOUT"
# The shortest lease whose renewals get time enough (see lease_seconds_from_env).
MIN_LEASE_SECONDS = 6.0
# Progress beats at most this often: a waiting client (and the event loop) is not flooded.
MIN_PROGRESS_INTERVAL = 0.1
# The kernel send buffer each HTTP connection may be given, in bytes (the kernel doubles it for
# its overhead): from a page to autotuning's own cap on Linux (which also caps it, for a process
# without privileges, at net.core.wmem_max).
HTTP_SEND_BUFFER_BOUNDS = (4096, 4 * 1024 * 1024)
# More would only add threads (and PostgreSQL connections) contending for one write lock.
MAX_DB_THREADS = 256
APP_NAME = "mcp-agent-sessions"


class SettingError(ValueError):
    """A setting from the environment that cannot be used, found where no command's own checks
    reach (read as a module is imported): the command line says it in one line, exit 2."""


def lease_seconds_from_env() -> float:
    """How long a lease outlives its process: MCP_AGENT_LEASE_SECONDS, ``MIN_LEASE_SECONDS`` to
    3600 (default 30). A lease is renewed every third of it, and each renewal given up after a
    sixth (runtime.leases): a shorter lease left its renewal too little time (0.5 s at 3 s,
    0.17 s at 1 s) to wait for a pooled connection of a busy server or to reach a distant
    database, and the leases of live runs lapsed."""
    return _bounded_seconds_from_env(
        LEASE_ENV,
        30,
        low=MIN_LEASE_SECONDS,
        too_low=": a lease is renewed every third of it and each renewal is given up after a"
        f" sixth, under {MIN_LEASE_SECONDS / 6:g} s below {MIN_LEASE_SECONDS:g} s, too little for"
        " a busy server or a distant database (the leases of live runs would lapse); a killed"
        " replica is known gone at once anyway",
    )


def statement_timeout_from_env() -> float:
    """How long one statement on a PostgreSQL session database may take:
    MCP_AGENT_DB_STATEMENT_TIMEOUT, 1 to 3600 s (default 90)."""
    return _bounded_seconds_from_env(STATEMENT_TIMEOUT_ENV, 90)


def _bounded_seconds_from_env(
    name: str, default: int, low: float = 1.0, too_low: str = ""
) -> float:
    """The seconds ``name`` gives, ``low`` to 3600; ``too_low`` says why a positive number
    under ``low`` will not do."""
    text = os.environ.get(name) or str(default)
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not low <= seconds <= 3600:
        why = too_low if 0 < seconds < low else ""
        raise SettingError(
            f"{name} must be a number of seconds from {low:g} to 3600, not {text!r}{why}"
        )
    return seconds


def _int_from_env(name: str, default: int) -> int:
    text = os.environ.get(name) or str(default)
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"{name} must be a whole number, not {text!r}") from None


def _seconds_from_env(name: str, default: float) -> float:
    text = os.environ.get(name) or str(default)
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"{name} must be a number of seconds, not {text!r}") from None


def _check_seconds(value: float, flag: str, env: str, least: float | None = None) -> None:
    """Refuses ``value`` (given as ``flag`` or ``env``) unless it is a number of seconds above
    0, or of at least ``least``."""
    if math.isfinite(value) and (value > 0 if least is None else value >= least):
        return
    bound = "above 0" if least is None else f"of at least {least:g}"
    raise ValueError(
        f"{flag} must be a number of seconds {bound}, not {value} (from the flag or {env})"
    )


def _path_from_env(name: str) -> Path | None:
    value = os.environ.get(name)
    return Path(value).expanduser() if value else None


def _retries_from_env() -> int:
    text = os.environ.get(RETRIES_ENV) or "3"
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"{RETRIES_ENV} must be a whole number, not {text!r}") from None


@dataclass
class ServerSettings:
    db_path: Path = field(default_factory=default_db_path)
    # A PostgreSQL database (postgresql://…) instead of the SQLite file at db_path: replicas of
    # the server share it.
    db_url: str | None = field(default_factory=default_db_url)
    # Sessions as JSONL files in this folder instead of the database (which then holds only
    # the run leases); pi's folders (``~/.pi/agent/sessions``) or ours, see
    # sessions.folders. The layout new sessions are written in: "pi", "flat", or None to
    # follow what the folder holds.
    sessions_dir: Path | None = None
    sessions_layout: str | None = None
    manifests_dir: Path | None = None
    default_model: str | None = field(default_factory=lambda: os.environ.get(MODEL_ENV) or None)
    # HTTP authentication: a bearer token given as is (--token, MCP_AGENT_TOKEN) or in a file
    # (--token-file, MCP_AGENT_TOKEN_FILE); with neither, serve generates one. no_auth (loopback
    # only) serves without one.
    token: str | None = field(default_factory=lambda: os.environ.get(TOKEN_ENV) or None)
    token_file: Path | None = field(default_factory=lambda: _path_from_env(TOKEN_FILE_ENV))
    no_auth: bool = False
    host: str = "127.0.0.1"
    port: int = 8765
    max_subagent_depth: int = 3
    max_request_bytes: int = 4 * 1024 * 1024
    page_size: int = 50
    # Host names (besides the bound address and loopback) that HTTP clients may use: DNS
    # rebinding protection stays on whatever the address.
    allowed_hosts: list[str] = field(default_factory=list)
    # "full" survives power loss (an fsync per append); "normal" survives a killed process.
    durability: str = field(default_factory=lambda: os.environ.get(DURABILITY_ENV) or "full")
    # A run that ends on a passing model error (overloaded, a broken stream) runs again, this
    # many times, after this many seconds (doubled each time): agent.RetrySettings.
    model_retries: int = field(default_factory=_retries_from_env)
    model_retry_delay: float = 2.0
    # Runs under way at once, in this server and for one client (0: no limit); a start beyond
    # either is refused with the limit's name. Each run holds a model stream and its tools.
    max_runs: int = field(default_factory=lambda: _int_from_env(MAX_RUNS_ENV, 64))
    max_runs_per_client: int = field(
        default_factory=lambda: _int_from_env(MAX_RUNS_PER_CLIENT_ENV, 16)
    )
    # Stateful (2025 handshake) HTTP sessions open at once (0: no limit) and the seconds one may
    # go without a request in flight before it is closed (0: never). A client holding its GET
    # stream open, or waiting on a call, is never idle; 2026-07-28 clients hold no session.
    max_http_sessions: int = field(
        default_factory=lambda: _int_from_env(MAX_HTTP_SESSIONS_ENV, 1000)
    )
    http_session_idle_timeout: float = field(
        default_factory=lambda: _seconds_from_env(HTTP_IDLE_TIMEOUT_ENV, 300)
    )
    # Resources one client (a legacy connection) may subscribe to at once (0: no limit).
    max_subscriptions: int = field(
        default_factory=lambda: _int_from_env(MAX_SUBSCRIPTIONS_ENV, 1000)
    )
    # A legacy connection whose notification is not sent within this many seconds (it stopped
    # reading its event stream) gets no more notifications.
    notification_timeout: float = field(
        default_factory=lambda: _seconds_from_env(NOTIFICATION_TIMEOUT_ENV, 5)
    )
    # The kernel send buffer of each HTTP connection, in bytes (streamable_http): a client that
    # stops reading its event stream is noticed (its send blocks) once this much is unsent.
    http_send_buffer: int = field(
        default_factory=lambda: _int_from_env(HTTP_SEND_BUFFER_ENV, 256 * 1024)
    )
    # A run that asks its 2025 HTTP client's model after the call waiting for it has gone (or
    # one started with wait: false) asks on the connection's GET stream, waiting this many
    # seconds for the client to open one before the model call fails.
    client_stream_wait: float = field(
        default_factory=lambda: _seconds_from_env(CLIENT_STREAM_WAIT_ENV, 30)
    )
    # A client waiting on a run with progress hears from it at least this often: while no
    # event comes (a model silent before its first token, a slow tool), a progress message
    # says so, for clients that reset their request timeout on progress.
    progress_interval: float = field(
        default_factory=lambda: _seconds_from_env(PROGRESS_INTERVAL_ENV, 15)
    )
    # Worker threads for database work (SQLite reads and writes, lock waits) at once; over
    # PostgreSQL, the connection pool holds this many and 4 more.
    db_threads: int = field(default_factory=lambda: _int_from_env(DB_THREADS_ENV, 8))
    # Over PostgreSQL: how long one statement may take before it is cancelled (and a
    # connection whose database answers nothing at all is given up 5 s later). None: from
    # MCP_AGENT_DB_STATEMENT_TIMEOUT, read only when a PostgreSQL database is opened (a SQLite
    # server has no use for it, so a bad value there stops nothing).
    db_statement_timeout: float | None = None
    # This replica's name (several over one PostgreSQL database): its legacy HTTP session ids
    # begin with "NAME.", for a load balancer to route them by (manifests/deploy).
    replica_name: str | None = field(default_factory=lambda: os.environ.get(REPLICA_ENV) or None)

    def set_database(self, location: str | Path) -> None:
        """Store sessions at ``location``: a PostgreSQL URL (a str) or a SQLite file."""
        if isinstance(location, str):
            self.db_url = location
        else:
            self.db_path, self.db_url = location, None

    def statement_timeout(self) -> float:
        """The PostgreSQL statement timeout: as given, else from the environment (a bad value
        there is a SettingError, said in one line)."""
        if self.db_statement_timeout is not None:
            return self.db_statement_timeout
        return statement_timeout_from_env()

    @property
    def db_location(self) -> str:
        """Where sessions are stored, for people (a URL is shown without its password)."""
        if self.db_url:
            from mcp_agent.paths import shown_url

            return shown_url(self.db_url)
        return str(self.db_path)

    def __post_init__(self) -> None:
        # Paths given as text (by a library user) are taken as paths; a database URL belongs
        # in db_url, where it is served from PostgreSQL rather than created as a file.
        if is_database_url(self.db_path):
            raise ValueError(
                f"db_path is a SQLite file; give the PostgreSQL URL {shown_url(str(self.db_path))}"
                " as db_url (or use set_database)"
            )
        for name in ("db_path", "sessions_dir", "manifests_dir", "token_file"):
            value = getattr(self, name)
            if isinstance(value, str):
                setattr(self, name, Path(value).expanduser())
        for name, variable, value in (
            ("--max-runs", MAX_RUNS_ENV, self.max_runs),
            ("--max-runs-per-client", MAX_RUNS_PER_CLIENT_ENV, self.max_runs_per_client),
            ("--max-subscriptions", MAX_SUBSCRIPTIONS_ENV, self.max_subscriptions),
        ):
            if value < 0:
                raise ValueError(
                    f"{name} must be 0 (no limit) or more, not {value} (from the flag or {variable})"
                )
        if self.max_http_sessions < 0:
            raise ValueError(
                f"--max-http-sessions must be 0 (no limit) or more, not {self.max_http_sessions} "
                f"(from the flag or {MAX_HTTP_SESSIONS_ENV})"
            )
        low, high = HTTP_SEND_BUFFER_BOUNDS
        if not low <= self.http_send_buffer <= high:
            raise ValueError(
                f"--http-send-buffer must be {low} to {high} bytes, not {self.http_send_buffer}"
                f" (from the flag or {HTTP_SEND_BUFFER_ENV})"
            )
        timeout = self.http_session_idle_timeout
        if not math.isfinite(timeout) or timeout < 0:
            raise ValueError(
                f"--http-session-idle-timeout must be 0 (never) or a number of seconds, not "
                f"{timeout} (from the flag or {HTTP_IDLE_TIMEOUT_ENV})"
            )
        _check_seconds(
            self.notification_timeout, "--notification-timeout", NOTIFICATION_TIMEOUT_ENV
        )
        _check_seconds(self.client_stream_wait, "--client-stream-wait", CLIENT_STREAM_WAIT_ENV)
        _check_seconds(
            self.progress_interval,
            "--progress-interval",
            PROGRESS_INTERVAL_ENV,
            least=MIN_PROGRESS_INTERVAL,
        )
        if self.no_auth and not is_loopback(self.host):
            raise ValueError(
                f"--no-auth is allowed only on a loopback address (127.0.0.1, ::1, localhost), "
                f"not {self.host}: give a token with --token-file PATH instead"
            )
        if self.max_subagent_depth < 0:
            raise ValueError(
                f"--max-depth must be 0 (no sub-agents) or more, not {self.max_subagent_depth}"
            )
        if self.replica_name is not None and not re.fullmatch(
            r"[A-Za-z0-9-]{1,32}", self.replica_name
        ):
            raise ValueError(
                f"{REPLICA_ENV} must be 1 to 32 letters, digits or dashes, not"
                f" {self.replica_name!r}"
            )
        if self.db_threads < 1:
            raise ValueError(
                f"db_threads must be at least 1, not {self.db_threads} (from {DB_THREADS_ENV})"
            )
        if self.db_threads > MAX_DB_THREADS:
            raise ValueError(
                f"db_threads must be at most {MAX_DB_THREADS}, not {self.db_threads}"
                f" (from {DB_THREADS_ENV})"
            )
        if self.model_retries < 0:
            raise ValueError(
                f"--model-retries must be 0 (never) or more, not {self.model_retries}"
                f" (from the flag or {RETRIES_ENV})"
            )
        if self.sessions_layout not in (None, "pi", "flat"):
            raise ValueError(f"--sessions-layout must be pi or flat, not {self.sessions_layout!r}")
        if self.durability not in ("full", "normal"):
            raise ValueError(
                f"durability must be full or normal, not {self.durability!r} "
                f"(from --durability or {DURABILITY_ENV})"
            )


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def token_dirs() -> tuple[list[Path], list[str]]:
    """Where a generated HTTP token is written, in order of preference: the per-user runtime
    directory (private, cleared at logout), then the per-user config directory; and why a
    runtime directory was left out. Without ``$XDG_RUNTIME_DIR`` and ``/run/user/UID``,
    platformdirs falls back to ``/tmp/runtime-UID``, a name anyone can take first: when it is
    not this user's own (another user's folder, a link) platformdirs refuses it, and the
    token goes to the config directory instead of the server not starting."""
    import warnings

    import platformdirs

    folders, skipped = [], []
    with warnings.catch_warnings():
        # platformdirs warns when $XDG_RUNTIME_DIR is unset and falls back to a checked one.
        warnings.simplefilter("ignore")
        try:
            folders.append(Path(platformdirs.user_runtime_dir(APP_NAME, appauthor=False)))
        except OSError as error:
            skipped.append(f"the per-user runtime directory ({error.strerror or error})")
    folders.append(Path(platformdirs.user_config_dir(APP_NAME, appauthor=False)))
    return folders, skipped
