"""Who may talk to the HTTP server: the bearer token, and the address it may listen on.

Authentication works as Jupyter's does: without a token, ``serve`` generates one, prints the
header to send, and writes the token to a file only the user can read. A fixed token comes from
a file (``--token-file``) or the environment, never from a command line other users can read
with ``ps``. ``--no-auth`` serves without one, on loopback only.
"""

from __future__ import annotations

import hmac
import os
import secrets
import stat
import sys
from dataclasses import dataclass
from pathlib import Path

from starlette.types import ASGIApp, Receive, Scope, Send

from mcp_agent.runtime.settings import (
    TOKEN_ENV,
    TOKEN_FILE_ENV,
    ServerSettings,
    is_loopback,
    token_dirs,
)
from mcp_agent.server.unreadable import error_response

WILDCARD_ADDRESSES = ("0.0.0.0", "::", "[::]")


class UnsafeBindError(ValueError):
    pass


class HttpAuthError(ValueError):
    """A token that cannot be read or used, or a generated one that cannot be saved."""


@dataclass
class HttpAuth:
    """How HTTP clients authenticate: the token (None with --no-auth) and where it came from."""

    token: str | None
    # "generated", "file", "flag" (--token), "env" (MCP_AGENT_TOKEN) or "none" (--no-auth)
    origin: str
    # The token file: the one read (--token-file), or the one a generated token is saved to.
    path: Path | None = None

    def save(self, port: int) -> None:
        """Write a generated token to a file only this user can read (a no-op otherwise)."""
        if self.origin == "generated" and self.token is not None:
            self.path = write_token_file(self.token, port)

    def remove(self) -> None:
        """Delete the generated token's file when the server stops (if it still holds it)."""
        if self.origin != "generated" or self.path is None:
            return
        try:
            if self.path.read_text(encoding="ascii").strip() == self.token:
                self.path.unlink()
        except (OSError, UnicodeDecodeError):
            pass

    def banner(self) -> str:
        """What serve prints on stderr about authentication, once, after the line with the URL."""
        if self.origin == "none":
            return (
                "no authentication (--no-auth): any user of this machine can read your sessions "
                "and run agents through this server"
            )
        if self.origin == "generated":
            where = (
                f"; it is also in {self.path}, readable only by you"
                if self.path is not None
                else ""
            )
            return (
                "HTTP clients must send this header (a new token at every start"
                f"{where}; for a fixed one use --token-file PATH):\n"
                f"    Authorization: Bearer {self.token}"
            )
        given = {
            "file": f"the token in {self.path}",
            "env": f"the token in ${TOKEN_ENV}",
            "flag": "the token given with --token",
        }[self.origin]
        text = f"HTTP clients must send Authorization: Bearer <{given}>"
        if self.origin == "flag":
            text += (
                "\nwarning: --token puts the secret on the command line, where any user of this "
                "machine can read it (ps); use --token-file PATH or $" + TOKEN_ENV + " instead"
            )
        return text


def url_host(host: str) -> str:
    """``host`` as a URL writes it: an IPv6 address in brackets (``http://::1:8765`` is no
    URL a client takes)."""
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def viewer_link(auth: HttpAuth, settings: ServerSettings) -> str:
    """The line serve prints about the session viewer at ``/``: the link that signs a browser
    in (with the token itself only when serve made it and printed it already)."""
    host = "localhost" if settings.host in WILDCARD_ADDRESSES else url_host(settings.host)
    base = f"http://{host}:{settings.port}/"
    if auth.origin == "none":
        return f"session viewer: {base}"
    if auth.origin == "generated":
        return f"session viewer (open this link once to sign in): {base}#token={auth.token}"
    return f"session viewer: {base}#token=<the token> (once, to sign in)"


def http_auth(settings: ServerSettings, token_from_flag: bool = False) -> HttpAuth:
    """Decide how HTTP clients authenticate and set ``settings.token`` to match: none with
    ``no_auth`` (loopback only), else the token file if one is set, else the token, else a
    freshly generated one (saved by ``HttpAuth.save`` once the server is about to serve).
    Raises ``HttpAuthError`` for a token that cannot be used, ``UnsafeBindError`` for an
    address that needs a token given."""
    if settings.no_auth:
        if not is_loopback(settings.host):
            raise UnsafeBindError(
                f"--no-auth is allowed only on a loopback address, not {settings.host}"
            )
        settings.token = settings.token_file = None
        return HttpAuth(None, "none")
    if settings.token_file is not None:
        settings.token = read_token_file(settings.token_file)
        auth = HttpAuth(settings.token, "file", settings.token_file)
    elif settings.token:
        check_token(settings.token, "--token" if token_from_flag else f"${TOKEN_ENV}")
        auth = HttpAuth(settings.token, "flag" if token_from_flag else "env")
    else:
        check_bind(settings)  # off loopback a token must be given, not generated
        settings.token = secrets.token_urlsafe(32)
        auth = HttpAuth(settings.token, "generated")
    return auth


def check_token(token: str, source: str) -> None:
    # A header value carries visible ASCII only; a space would split the credentials.
    if not token:
        raise HttpAuthError(f"the token in {source} is empty")
    if not all("!" <= char <= "~" for char in token):
        raise HttpAuthError(
            f"the token in {source} must be one line of printable ASCII without spaces"
        )


def read_token_file(path: Path) -> str:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise HttpAuthError(f"--token-file {path} does not exist") from None
    except (OSError, UnicodeDecodeError) as error:
        reason = getattr(error, "strerror", None) or str(error)
        raise HttpAuthError(f"cannot read the token file {path}: {reason}") from None
    token = text.strip()
    check_token(token, str(path))
    if os.name == "posix" and path.stat().st_mode & 0o077:
        print(
            f"warning: the token file {path} can be read by other users; chmod 600 it",
            file=sys.stderr,
        )
    return token


def write_token_file(token: str, port: int) -> Path:
    """Write the token to ``http-PORT.token`` (mode 0600) in the first per-user directory that
    is private to this user: the runtime directory, else the config directory (a folder
    passed over is said on stderr, once the token is saved)."""
    folders, problems = token_dirs()
    for folder in folders:
        try:
            _private_folder(folder)
            path = folder / f"http-{port}.token"
            temporary = folder / f".http-{port}-{secrets.token_hex(4)}.tmp"
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
            descriptor = os.open(temporary, flags, 0o600)
            try:
                with os.fdopen(descriptor, "w", encoding="ascii") as file:
                    file.write(token + "\n")
                os.replace(temporary, path)
            except BaseException:
                temporary.unlink(missing_ok=True)
                raise
            for problem in problems:
                print(f"warning: the token is not kept in {problem}", file=sys.stderr)
            return path
        except (OSError, HttpAuthError) as error:
            problems.append(f"{folder}: {getattr(error, 'strerror', None) or error}")
    raise HttpAuthError(
        "cannot save the generated HTTP token (" + "; ".join(problems) + "): write a token to a "
        "file only you can read and pass --token-file PATH"
    )


def _private_folder(folder: Path) -> None:
    """Create ``folder`` (mode 0700), or check that an existing one is this user's and that no
    one else can write to it (the token file itself is 0600)."""
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    if os.name != "posix":
        return
    info = folder.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
        raise HttpAuthError("not a folder of this user's own")
    if info.st_mode & 0o022:
        folder.chmod(stat.S_IMODE(info.st_mode) & ~0o022)


def check_bind(settings: ServerSettings) -> None:
    """Off loopback a token must be given (a token file counts): refuse the address without."""
    if not settings.token and settings.token_file is None and not is_loopback(settings.host):
        raise UnsafeBindError(
            f"refusing to listen on {settings.host} without a token: anyone who can reach this "
            f"address could read your sessions and run agents. Pass --token-file PATH (or set "
            f"{TOKEN_FILE_ENV} or {TOKEN_ENV}), or bind to 127.0.0.1."
        )


UNAUTHORIZED = (
    "Unauthorized: send Authorization: Bearer <token>, the token in the file the server's"
    " start-up line names (or the one given with serve --token-file)"
)
CHALLENGE = {"WWW-Authenticate": 'Bearer realm="mcp-agent-sessions"'}


class BearerTokenMiddleware:
    """Answers 401 unless the request carries ``Authorization: Bearer <token>`` (the viewer
    page sends it too: see ``viewer.page``)."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self.token = token.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            given = next((v for k, v in scope["headers"] if k == b"authorization"), b"")
            scheme, _, credentials = given.partition(b" ")
            # The scheme is case-insensitive (RFC 9110); the token is compared in constant time.
            if scheme.lower() != b"bearer" or not hmac.compare_digest(
                credentials.strip(), self.token
            ):
                response = error_response(401, UNAUTHORIZED, headers=CHALLENGE)
                await response(scope, receive, send)
                return
        # Everything else, the lifespan scope included, goes through: the SDK's session
        # manager starts in the app's lifespan.
        await self.app(scope, receive, send)
