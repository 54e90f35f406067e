"""HTTP plumbing for the HTTP providers: one POST answered with server-sent events, retried with
backoff on 429 / 5xx / overloaded (Retry-After honoured, capped), abortable at every wait, and
errors a person can act on ("OpenAI API at http://…: 401 Unauthorized — check OPENAI_API_KEY").

Retry and timeout settings come from ``StreamOptions.extra``: ``max_retries`` (3),
``retry_base_delay`` (1 s, doubled each attempt), ``max_retry_delay`` (30 s, also the cap on
Retry-After), ``timeout`` (seconds for connect/write; ``read_timeout``: 300 s between chunks;
``stall_timeout``: 1,800 s of nothing but keep-alive comments),
and ``http_client`` (an ``httpx.AsyncClient`` to reuse instead of one per request).
"""

from __future__ import annotations

import codecs
import email.utils
import json
import logging
import math
import os
import random
import re
import socket
import ssl
import time
import zlib
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping, Sequence
from contextlib import aclosing, asynccontextmanager
from dataclasses import dataclass
from functools import partial
from html.parser import HTMLParser
from typing import Any, Protocol, cast

import anyio
import httpx

# httpx-sse's incremental decoders, the ones its public ``EventSource`` runs. Driving them
# ourselves (see SseParser) lets one network read feed all the events it holds synchronously
# (no async hop per line), lets the common one-line events skip them, and lets us refuse lines
# that are not SSE, which the decoder skips silently.
from httpx_sse._decoders import SSEDecoder, SSELineDecoder

from mcp_agent.abort import abort_message
from mcp_agent.events import AssistantMessageEvent, DoneEvent, ErrorEvent, StartEvent
from mcp_agent.messages import AssistantMessage, ThinkingContent, answer_chars
from mcp_agent.paths import shown_url
from mcp_agent.providers.base import (
    CONTEXT_OVERFLOW_MARK,
    PARTIAL_KEPT,
    StreamOptions,
    out_of_credit,
)
from mcp_agent.providers.common import (
    ERROR_CHARS,
    THINKING_SIGNATURE,
    Aborted,
    AbortRace,
    fail,
    readable,
)
from mcp_agent.providers.proxies import (
    describe_proxy_error,
    proxy_auth_hint,
    proxy_for,
    socks_proxy_missing,
)
from mcp_agent.wire import one_line

__all__ = [
    "CONFIGURED_KEY",
    "Aborted",
    "Endpoint",
    "MalformedStream",
    "ProviderError",
    "RetryPolicy",
    "SseParser",
    "SseState",
    "bad_json",
    "clean_api_key",
    "describe_status",
    "describe_transport_error",
    "error_detail",
    "is_overflow_text",
    "loads",
    "open_event_stream",
    "parse_retry_after",
    "scan_json",
    "stream_sse",
]

log = logging.getLogger(__name__)

RETRYABLE_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504, 520, 522, 524, 529})
ERROR_BODY_LIMIT = 64 * 1024


class ProviderError(Exception):
    """A failure that ends the stream; ``str(error)`` is the message a person reads."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Endpoint:
    """Where a request goes and how to talk about it in errors."""

    label: str  # "OpenAI API"
    base_url: str  # shown to people: "https://api.openai.com/v1"
    url: str  # posted to: base_url + "/chat/completions"
    key_env: str | None = None  # "OPENAI_API_KEY", named in 401 hints
    base_url_env: str | None = None  # "OPENAI_BASE_URL", named in connection hints
    # Optional request fields and the setting that stops sending each: said when a 400 or
    # 422 names the field (a server or relay that refuses what it does not know).
    field_settings: tuple[tuple[str, str], ...] = ()
    # Where such servers answer when a base URL has no path ("/v1"): said when one without
    # a path meets an endpoint that is not there.
    usual_path: str = ""

    @property
    def where(self) -> str:
        # A proxy's password may ride in the URL (http://user:password@host/v1).
        return f"{self.label} at {shown_url(self.base_url)}"


@dataclass(frozen=True)
class RetryPolicy:
    max_retries: int = 3
    base_delay: float = 1.0
    max_delay: float = 30.0

    @classmethod
    def from_options(cls, options: StreamOptions) -> RetryPolicy:
        extra = options.extra
        return cls(
            max_retries=int(extra.get("max_retries", cls.max_retries)),
            base_delay=float(extra.get("retry_base_delay", cls.base_delay)),
            max_delay=float(extra.get("max_retry_delay", cls.max_delay)),
        )

    def backoff(self, attempt: int, retry_after: float | None) -> float:
        """The wait before retry ``attempt`` (0 first): what the server asked for, when that is
        within ``max_delay``; else our own exponential backoff, as the vendors' SDKs do (a wait
        of an hour is a quota, not a hiccup: waiting it out silently helps nobody)."""
        if retry_after is not None and retry_after <= self.max_delay:
            return retry_after
        delay = self.base_delay * (2**attempt)
        return min(delay * random.uniform(0.8, 1.2), self.max_delay)


def parse_retry_after(headers: httpx.Headers) -> float | None:
    """Seconds the server asked us to wait (``retry-after-ms``, ``retry-after`` seconds or
    date); None when it asked for nothing usable (not a number, negative, infinite)."""
    value = headers.get("retry-after-ms")
    if value:
        try:
            return _wait(float(value) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return _wait(float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _wait(seconds: float) -> float | None:
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


# --- error text -------------------------------------------------------------------------------

_OVERFLOW_PHRASES = (
    "context_length_exceeded",
    "context length exceeded",
    "prompt is too long",
    "request_too_large",
    "exceeds the context window",
    "maximum context length",
    "context window exceeds limit",
    "exceeds the available context size",
    "greater than the context length",
    "input is too long for requested model",
    "reduce the length of the messages",
    "maximum prompt length",
    "exceeded model token limit",
    "too many tokens",
    "token limit exceeded",
    "prompt too long",
    # pi's other patterns: Google ("The input token count (N) exceeds the maximum number of
    # tokens allowed"), GitHub Copilot ("... exceeds the limit of N"), z.ai's finish reason.
    "exceeds the maximum number of tokens",
    "exceeds the limit of",
    "model_context_window_exceeded",
)
_NOT_OVERFLOW = ("rate limit", "too many requests", "throttl")


def is_overflow_text(text: str) -> bool:
    """Whether an API's error text says the conversation no longer fits the context window."""
    lowered = text.lower()
    if any(p in lowered for p in _NOT_OVERFLOW):
        return False
    return any(p in lowered for p in _OVERFLOW_PHRASES)


def error_detail(body: bytes | str) -> str:
    """The useful part of an error body: OpenAI's and Anthropic's JSON, or plain text; one
    line, control characters (a terminal's escape sequences) written as escapes."""
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
    text = text.strip()
    if not text:
        return ""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        return one_line(_html_text(text) or text, ERROR_CHARS)
    return one_line(_detail_from_json(data) or text, ERROR_CHARS)


_HTML = re.compile(r"\s*(<!doctype\s+html|<html[\s>])", re.IGNORECASE)
HTML_CHARS = 4096


# Tags that begin or end a line of a page's text: "<h1>502 Bad Gateway</h1><p>Cannot…" says
# "502 Bad Gateway Cannot…", not "502 Bad GatewayCannot…".
_BLOCK_TAGS = frozenset(
    "address article aside blockquote br center dd div dl dt footer form h1 h2 h3 h4 h5 h6"
    " header hr li main nav ol p pre section table td th tr ul".split()
)


class _PageText(HTMLParser):
    """The title of an HTML page, and its text outside scripts and styles."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.title: list[str] = []
        self.text: list[str] = []
        self._inside: list[str] = []

    def handle_starttag(self, tag: str, attrs: Any) -> None:
        if tag in ("title", "script", "style"):
            self._inside.append(tag)
        elif tag in _BLOCK_TAGS:
            self.text.append(" ")

    def handle_endtag(self, tag: str) -> None:
        if self._inside and self._inside[-1] == tag:
            self._inside.pop()
        elif tag in _BLOCK_TAGS:
            self.text.append(" ")

    def handle_data(self, data: str) -> None:
        if not self._inside:
            self.text.append(data)
        elif self._inside[-1] == "title":
            self.title.append(data)


def _html_text(text: str) -> str | None:
    """What an HTML error page (a proxy's, a load balancer's) says: its title, else its text;
    None when ``text`` is no HTML page."""
    if not _HTML.match(text):
        return None
    page = _PageText()
    page.feed(text[:HTML_CHARS])  # the parser is slow on broken tags: what says anything is early
    page.close()
    found = " ".join("".join(page.title or page.text).split())
    return f"{found} (an HTML page)" if found else "an HTML page"


def _detail_from_json(data: Any) -> str:
    if isinstance(data, list) and data:
        return _detail_from_json(data[0])
    if not isinstance(data, dict):
        return str(data)
    error = data.get("error", data)
    if isinstance(error, str):
        return error
    if not isinstance(error, dict):
        return ""
    message = error.get("message") or error.get("detail") or data.get("detail") or ""
    if not isinstance(message, str):
        message = json.dumps(message)
    kind = error.get("code") or error.get("type")
    if type(kind) is int:  # OpenRouter's and others' HTTP status (502): says a passing fault
        kind = str(kind)
    if kind and isinstance(kind, str) and kind not in message and kind != "error":
        message = f"{message} ({kind})" if message else kind
    return message + _upstream(error.get("metadata"))


def _upstream(metadata: Any) -> str:
    """What the model's own provider said behind a relay's error (OpenRouter's "Provider
    returned error", its ``metadata``: ``provider_name`` and the ``raw`` body), or ""."""
    if not isinstance(metadata, dict):
        return ""
    raw = metadata.get("raw")
    said = error_detail(raw) if isinstance(raw, str) else ""
    if isinstance(raw, dict | list):
        said = _detail_from_json(raw)
    who = metadata.get("provider_name")
    who = who if isinstance(who, str) and who.strip() else "upstream"
    return f"; {who} said: {said}" if said else ""


# What an error object's type, code or status says of a fault that passes (matched whole,
# lower case): a rate limit, an overload, a server failing. Its free text is never read for
# this: a message may quote any number ("line 429") or word.
_RATE_LIMIT_KINDS = frozenset(
    {"rate_limit_error", "rate_limit_exceeded", "rate_limited", "too_many_requests"}
)
_OVERLOADED_KINDS = frozenset({"overloaded", "overloaded_error"})
_SERVER_FAILED_KINDS = frozenset(
    {
        "server_error",
        "api_error",
        "internal",
        "internal_error",
        "internal_server_error",
        "service_unavailable",
        "unavailable",
        "bad_gateway",
    }
)


# An error object with no type, code or status at all (a relay's ``{"error": {"message":
# "Rate limit exceeded"}}``, ``{"error": "Overloaded"}``) says what it is in its text alone:
# then, and only then, its first clause (up to the first punctuation) is read, and only when
# it is a whole rate-limit or overload phrase: "Rate limit exceeded, retry in 20s", "Rate limit
# reached for gpt-4o in organization …", "The server is overloaded." are; "the rate limit field
# is unknown", "too many requests: 500 tools over the limit" or "line 429" are not.
_FIRST_CLAUSE = re.compile(r"\s*([^.,;:!?()\[\]\n]*)")
_RATE_LIMIT_TEXT = re.compile(
    r"(?:you (?:have been |are being |were |are )|request )?rate[ _-]?limited"
    r"|rate[ _-]?limit (?:exceeded|reached)(?: (?:for|on|in) .*)?"
)
_OVERLOADED_TEXT = re.compile(
    r"(?:(?:the )?(?:server|service|api|model|engine|upstream|system)s?(?: is| are)? )?"
    r"(?:currently |temporarily )?overloaded"
)


def passing_fault(data: Any) -> str | None:
    """How a mid-stream error object (OpenAI's ``{"error": {…}}``, Anthropic's error event, a
    relay's ``{"error": {"code": 429}}``) says a passing fault, in the words its message gives:
    ``rate limited the request``, ``overloaded`` or ``failed``; None for any other error (a
    bad request, an account out of credit: a second try meets it again). Read from its
    ``type``, ``code`` and ``status`` fields; its text only when it has none of them, and then
    only a first clause that is a whole rate-limit or overload phrase (``_FIRST_CLAUSE``)."""
    if not isinstance(data, dict):
        return None
    inner = data.get("error")
    fields = [
        value
        for where in (data, inner if isinstance(inner, dict) else {})
        for key in ("type", "code", "status")
        if (value := where.get(key)) is not None
    ]
    said = {str(value).strip().lower() for value in fields if isinstance(value, str | int)}
    said.discard("")
    if not said - {"error"}:  # nothing but "an error" (Anthropic's event type): its words
        return _said_in_words(inner if isinstance(inner, str | dict) else data)
    if any(out_of_credit(value) for value in said):
        return None
    if said & _RATE_LIMIT_KINDS or "429" in said:
        return "rate limited the request"
    if said & _OVERLOADED_KINDS or "529" in said:
        return "overloaded"
    if said & _SERVER_FAILED_KINDS or any(
        len(s) == 3 and s.isdigit() and s[0] == "5" for s in said
    ):
        return "failed"
    return None


def _said_in_words(error: str | dict[str, Any]) -> str | None:
    """``passing_fault`` of an error object that has only its text (see ``_FIRST_CLAUSE``)."""
    text = error if isinstance(error, str) else error.get("message")
    if not isinstance(text, str) or out_of_credit(text.lower()):
        return None
    found = _FIRST_CLAUSE.match(text.lower())
    clause = " ".join(found.group(1).split()) if found else ""
    if _RATE_LIMIT_TEXT.fullmatch(clause):
        return "rate limited the request"
    if _OVERLOADED_TEXT.fullmatch(clause):
        return "overloaded"
    return None


# Request headers that carry the API key. A server may quote the key back in its error (a proxy
# that says which key it refused): what we say is printed, logged, stored in the session and
# sent to MCP clients, so the key is cut out of it.
_CREDENTIAL_HEADERS = frozenset({"authorization", "x-api-key", "api-key", "x-goog-api-key"})
REDACTED = "[API key]"


def credentials(headers: Mapping[str, str]) -> tuple[str, ...]:
    """The secrets in a request's ``headers`` (the token of ``authorization: Bearer …``)."""
    found: list[str] = []
    for name, value in headers.items():
        if name.lower() not in _CREDENTIAL_HEADERS:
            continue
        scheme, _, token = value.strip().partition(" ")
        secret = (token if name.lower() == "authorization" and token else scheme).strip()
        if len(secret) >= 8:  # a short value would cut out ordinary words
            found.append(secret)
    return tuple(found)


def clean_api_key(key: str | None, where: str, source: str | None) -> str | None:
    """``key`` without the spaces and line ends around it (a key read from a file, a .env
    written with CRLF) and without the quotes around it (a .env line ``KEY="sk-…"`` read by
    what keeps them: docker's ``--env-file``), None when nothing is left; ProviderError for a
    key that holds what no API key has and no HTTP header can carry (a space, a control or
    non-ASCII character: a pasted quote mark). ``source``: the variable it came from, named
    in the error."""
    if key is None:
        return None
    key = key.strip()
    if len(key) >= 2 and key[0] == key[-1] and key[0] in "\"'":
        key = key[1:-1].strip()
    if not key:
        return None
    if not key.isascii() or not key.isprintable() or " " in key:
        named = f" ({source})" if source else ""
        raise ProviderError(
            f"{where}: the API key{named} holds a space, a control character or one that is"
            " not ASCII, which no API key has: check it"
        )
    return key


# Where a provider's ``api_key`` (not its variable's) comes from, named when it is unusable.
CONFIGURED_KEY = "the provider's api_key in models.toml"


def redact(text: str, secrets: Sequence[str]) -> str:
    """``text`` without any of ``secrets``."""
    for secret in secrets:
        if secret in text:
            text = text.replace(secret, REDACTED)
    return text


def _say_retry(what: str, delay: float, attempt: int, policy: RetryPolicy) -> None:
    """A warning for whoever watches the log (the server's stderr, the command line): a
    rate-limited model can hold a run for minutes of backoff, which should not look like a
    hang."""
    log.warning(
        "%s; trying again in %.1f s (retry %d of %d)",
        one_line(what, 300),
        delay,
        attempt + 1,
        policy.max_retries,
    )


def missing_path(endpoint: Endpoint) -> str | None:
    """What to set when the base URL has no path but such servers answer under one
    (``http://localhost:1234`` for ``http://localhost:1234/v1``), or when it ends in the
    path that is added to it (``…/v1/chat/completions``, pasted whole); None otherwise."""
    added = endpoint.url.removeprefix(endpoint.base_url)  # "/chat/completions"
    if added != endpoint.url and endpoint.base_url.endswith(added):
        setting = endpoint.base_url_env or "the provider's base_url in models.toml"
        fixed = shown_url(endpoint.base_url.removesuffix(added))
        return f"the base URL ends in {added}, which is added to it: set {setting} to {fixed}"
    if not endpoint.usual_path:
        return None
    try:
        path = httpx.URL(endpoint.base_url).path
    except (httpx.InvalidURL, ValueError):
        return None
    if path not in ("", "/"):
        return None
    setting = endpoint.base_url_env or "the provider's base_url in models.toml"
    fixed = shown_url(endpoint.base_url.rstrip("/") + endpoint.usual_path)
    return (
        f"the base URL has no path, and these servers answer under {endpoint.usual_path}:"
        f" set {setting} to {fixed}"
    )


def describe_status(
    endpoint: Endpoint,
    status: int,
    reason: str,
    detail: str,
    *,
    attempts: int = 1,
    redirect: str | None = None,
) -> str:
    """``redirect``: where a 3xx answer's Location points, as shown (see redirect_target)."""
    head = f"{endpoint.where}: {status} {reason}".rstrip()
    proxy = proxy_for(endpoint.url)
    if proxy is not None:  # the answer may be the proxy's own (its 502 page)
        head += f" ({proxy.said})"
    text = f"{head}: {detail}" if detail else head
    hint = ""
    if 300 <= status < 400:
        # Not followed: the API key would go along to wherever the server points (httpx
        # drops only an Authorization header on the way to another host, not x-api-key).
        setting = endpoint.base_url_env or "the base URL"
        hint = f"the server redirects to {redirect or 'another place'}, which is not followed"
        path = endpoint.url.removeprefix(endpoint.base_url)  # "/chat/completions"
        if redirect and path != endpoint.url and redirect.endswith(path):
            hint += f": set {setting} to {redirect.removesuffix(path)}"
        else:
            hint += f": set {setting} to where it points"
    elif status == 407 and proxy is not None:
        hint = proxy_auth_hint(proxy)
    elif status == 401:
        hint = f"check {endpoint.key_env}" if endpoint.key_env else "check the API key"
    elif status == 403:
        hint = "the API key has no access to this model or endpoint"
        if endpoint.key_env:
            hint += f"; check {endpoint.key_env}"
    elif status in (404, 405) and (missing := missing_path(endpoint)):
        hint = missing
    elif status == 404:
        hint = "check the model id and the base URL"
        if endpoint.base_url_env:
            hint += f" ({endpoint.base_url_env})"
    elif status == 402 or out_of_credit(detail):
        hint = "the account's quota or credit is used up: check its plan and billing"
    elif status == 429 or status in RETRYABLE_STATUS or status >= 500:
        what = "rate limited" if status == 429 else "the server is failing or overloaded"
        hint = f"{what}; gave up after {attempts} attempt{'s' if attempts != 1 else ''}"
    elif status == 400 and _PLAIN_TO_TLS.search(detail):
        hint = https_hint(endpoint)
    elif status in (400, 422):
        refused = next((pair for pair in endpoint.field_settings if pair[0] in detail), None)
        if refused is not None:
            hint = f"the server does not take {refused[0]}: {refused[1]}"
    if hint:
        text += f" — {hint}"
    # 413: the request is too large, whoever says so (the API, or a proxy's HTML page that
    # names no context window): a shorter history is what helps.
    if status == 413 or (status in (400, 422) and is_overflow_text(f"{detail} {reason}")):
        text = f"{CONTEXT_OVERFLOW_MARK}: {text}"
    return text


# Failures before the server answered that a second try may well not meet: no connection, or
# one closed or reset before the response's head (a proxy or server restarting).
_RETRIED_TRANSPORT_ERRORS = (
    httpx.ConnectError,
    httpx.ConnectTimeout,
    httpx.RemoteProtocolError,
    httpx.ReadError,
    httpx.WriteError,
)


# How long the look whether an http:// URL's port speaks TLS may take (a plain server may
# wait that long for the end of a request head that never comes); the wait before the next
# try is that much shorter.
TLS_PROBE_SECONDS = 2.0


async def speaks_tls(endpoint: Endpoint) -> bool:
    """Whether the host and port of an ``http://`` endpoint answer a TLS handshake: a TLS
    port (443, a proxy's) hangs up on a plain request at once, which looks like a server
    restarting. Only a handshake is made (its certificate unchecked: nothing is sent)."""
    try:
        url = httpx.URL(endpoint.url)
    except (httpx.InvalidURL, ValueError):
        return False
    if url.scheme != "http" or not url.host:
        return False
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        with anyio.fail_after(TLS_PROBE_SECONDS):
            stream = await anyio.connect_tcp(
                url.host,
                url.port or 80,
                tls=True,
                ssl_context=context,
                tls_standard_compatible=False,
            )
            await stream.aclose()
    except (OSError, TimeoutError, anyio.BrokenResourceError, anyio.EndOfStream):
        return False
    return True


def https_hint(endpoint: Endpoint) -> str:
    """What to do about an ``http://`` base URL whose port speaks TLS."""
    setting = endpoint.base_url_env or "the base URL"
    https = "https://" + endpoint.base_url.removeprefix("http://")
    return f"its port speaks TLS: did you mean https://? Set {setting} to {https}"


# How a TLS server that reads a plain request says so: Go's "Client sent an HTTP request to an
# HTTPS server", nginx's "The plain HTTP request was sent to HTTPS port".
_PLAIN_TO_TLS = re.compile(r"HTTP request (?:was sent )?to (?:an )?HTTPS", re.IGNORECASE)


def is_tls_error(error: BaseException) -> bool:
    """Whether ``error`` came from TLS (a wrong scheme, a bad certificate): trying again
    meets the same."""
    seen: BaseException | None = error
    for _ in range(10):  # the chain of causes is short; a loop in it must not hang this
        if seen is None:
            return False
        if isinstance(seen, ssl.SSLError):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _cert_not_trusted(error: BaseException) -> bool:
    """Whether ``error`` is a TLS handshake that met a certificate no known CA signed."""
    seen: BaseException | None = error
    for _ in range(10):
        if seen is None:
            return False
        if isinstance(seen, ssl.SSLCertVerificationError):
            return seen.verify_code in _UNTRUSTED_CERT
        seen = seen.__cause__ or seen.__context__
    return False


# OpenSSL's verify codes for a chain no trusted CA vouches for (X509_V_ERR_*): self-signed,
# self-signed in the chain, an issuer that is not known locally, unable to verify the first
# certificate.
_UNTRUSTED_CERT = frozenset({18, 19, 20, 21})


def _os_error(error: BaseException) -> OSError | None:
    """The operating system's error behind ``error`` (httpx and anyio wrap it), or None."""
    seen: BaseException | None = error
    for _ in range(10):  # the chain of causes is short; a loop in it must not hang this
        if seen is None:
            return None
        if isinstance(seen, OSError) and seen.errno is not None:
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


# getaddrinfo's answers that the name has no address (a typo'd host), unlike EAI_AGAIN (the
# resolver could not be asked, which may pass).
_UNKNOWN_HOST = frozenset(
    code
    for code in (getattr(socket, "EAI_NONAME", None), getattr(socket, "EAI_NODATA", None))
    if code is not None
)


def is_unknown_host(error: BaseException) -> bool:
    """Whether ``error`` says the base URL's host name has no address: trying again meets
    the same."""
    cause = _os_error(error)
    return isinstance(cause, socket.gaierror) and cause.errno in _UNKNOWN_HOST


def _host_of(endpoint: Endpoint) -> str:
    try:
        return httpx.URL(endpoint.url).host or endpoint.base_url
    except (httpx.InvalidURL, ValueError):
        return endpoint.base_url


def _address(endpoint: Endpoint) -> str:
    """``host:port`` of the endpoint, its scheme's port when the URL names none."""
    try:
        url = httpx.URL(endpoint.url)
    except (httpx.InvalidURL, ValueError):
        return endpoint.base_url
    host = f"[{url.host}]" if ":" in url.host else url.host
    return f"{host}:{url.port or (443 if url.scheme == 'https' else 80)}"


def describe_transport_error(
    endpoint: Endpoint,
    error: Exception,
    *,
    mid_stream: bool,
    read_timeout: float | None = None,
    connect_timeout: float | None = None,
) -> str:
    """A connection problem in words: refused, timed out (``read_timeout``: the seconds a read
    waited; ``connect_timeout``, a connection), dropped mid-stream."""
    detail = str(error) or type(error).__name__
    waited = f" within {connect_timeout:g} s" if connect_timeout is not None else ""
    if _cert_not_trusted(error):
        return (
            f"{endpoint.where}: the server's certificate is not trusted ({detail}) — a"
            " certificate of a private CA (a company's proxy, a self-signed server) is trusted"
            " with that CA's bundle in SSL_CERT_FILE"
        )
    if is_tls_error(error):
        return (
            f"{endpoint.where}: the TLS handshake failed ({detail}) — does the base URL's "
            "scheme match the server (https for TLS, http for plain), and is its certificate valid?"
        )
    if isinstance(error, httpx.ProxyError | httpx.ConnectError | httpx.ConnectTimeout) and (
        proxy := proxy_for(endpoint.url)
    ):  # what failed is the way through the proxy, not the server
        proxy_end = Endpoint(label="", base_url=proxy.url, url=proxy.url)
        if is_unknown_host(error):
            detail = f"the host name {_host_of(proxy_end)!r} is not known ({detail})"
        elif isinstance(_os_error(error), ConnectionRefusedError):
            detail = f"connection refused: nothing listens at {_address(proxy_end)}"
        elif isinstance(error, httpx.ConnectTimeout):
            detail = f"no answer from {_address(proxy_end)}{waited}"
        return describe_proxy_error(endpoint.where, proxy, error, detail)
    if isinstance(error, httpx.ConnectError | httpx.ConnectTimeout):
        setting = f" ({endpoint.base_url_env})" if endpoint.base_url_env else ""
        if is_unknown_host(error):
            return (
                f"{endpoint.where}: could not connect: the host name {_host_of(endpoint)!r} is"
                f" not known ({detail}) — is the base URL{setting} spelt right?"
            )
        if isinstance(_os_error(error), ConnectionRefusedError):
            detail = f"connection refused: nothing listens at {_address(endpoint)}"
        elif isinstance(error, httpx.ConnectTimeout):  # a host down, a firewall that drops
            detail = f"no answer from {_address(endpoint)}{waited}"
        return (
            f"{endpoint.where}: could not connect ({detail}) — is the server running and the"
            f" base URL{setting} right?"
        )
    if isinstance(error, httpx.ReadTimeout) and read_timeout is not None:
        # How long, and what to change when a slow model (a local one on a CPU) needs longer.
        kept = PARTIAL_KEPT if mid_stream else ""
        return (
            f"{endpoint.where}: timed out waiting for the response (nothing came for"
            f" {read_timeout:g} s; a provider's read_timeout in models.toml waits longer){kept}"
        )
    if isinstance(error, httpx.TimeoutException):
        return f"{endpoint.where}: timed out waiting for the response ({type(error).__name__})"
    if isinstance(error, httpx.DecodingError):  # the server's fault: not tried again
        kept = PARTIAL_KEPT if mid_stream else ""
        return f"{endpoint.where}: the answer's body is damaged: {detail}{kept}"
    if mid_stream:
        return f"{endpoint.where}: the connection broke off mid-stream ({detail}){PARTIAL_KEPT}"
    if isinstance(error, httpx.ReadError | httpx.WriteError | httpx.RemoteProtocolError):
        return f"{endpoint.where}: the connection closed before the server answered ({detail})"
    return f"{endpoint.where}: request failed ({detail})"


# --- the request ------------------------------------------------------------------------------

_ssl_context: ssl.SSLContext | None = None


def _shared_ssl_context() -> ssl.SSLContext:
    # Building a verifying context loads the CA bundle (tens of ms); do it once per process.
    global _ssl_context
    if _ssl_context is None:
        _ssl_context = httpx.create_ssl_context()
    return _ssl_context


def _timeout(options: StreamOptions) -> httpx.Timeout:
    extra = options.extra
    connect = float(extra.get("timeout", 30.0))
    read = float(extra.get("read_timeout", 300.0))
    return httpx.Timeout(connect=connect, read=read, write=connect, pool=connect)


def _waits(options: StreamOptions) -> dict[str, float | None]:
    """The timeouts a failed request is said with (describe_transport_error)."""
    timeout = _timeout(options)
    return {"read_timeout": timeout.read, "connect_timeout": timeout.connect}


def _stall_timeout(options: StreamOptions) -> float:
    """Seconds of nothing but keep-alive comments before a stream counts as stalled: long,
    since a proxy keeps a connection alive that way while a reasoning model thinks."""
    return float(options.extra.get("stall_timeout", 1800.0))


def _only_comments(text: str) -> bool:
    return all(not line or line.startswith(":") for line in text.splitlines())


@asynccontextmanager
async def _client(options: StreamOptions, endpoint: Endpoint) -> AsyncIterator[httpx.AsyncClient]:
    given = options.extra.get("http_client")
    if given is not None:
        yield given
        return
    try:
        client = httpx.AsyncClient(verify=_shared_ssl_context(), timeout=_timeout(options))
    except ImportError as error:  # a SOCKS proxy in the environment, and no socksio
        said = socks_proxy_missing(endpoint.where, error)
        if said is None:
            raise
        raise ProviderError(said) from error
    async with client:
        yield client


@asynccontextmanager
async def open_event_stream(
    endpoint: Endpoint,
    *,
    headers: dict[str, str],
    body: dict[str, Any],
    options: StreamOptions,
    race: AbortRace,
    whole_answers: bool = False,
) -> AsyncIterator[httpx.Response]:
    """POST ``body`` and yield the open 200 response whose body is an event stream (or, with
    ``whole_answers``, JSON: a server that answered whole, not streamed; see WholeAnswer).

    Retries 408/409/429/5xx/529 and failed connects with exponential backoff (Retry-After
    honoured, capped at ``max_retry_delay``); every wait is abortable. Raises ProviderError
    with a readable message, or Aborted.
    """
    policy = RetryPolicy.from_options(options)
    content = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()
    send_headers = {
        "content-type": "application/json",
        "accept": "text/event-stream",
        **headers,
    }
    secrets = credentials(send_headers)
    async with _client(options, endpoint) as client:
        attempt = 0
        while True:
            request = client.build_request(
                "POST", endpoint.url, headers=send_headers, content=content
            )
            try:
                response = await race.run(client.send(request, stream=True))
            except _RETRIED_TRANSPORT_ERRORS as error:
                looked = time.monotonic()
                if (
                    attempt == 0
                    and isinstance(error, httpx.RemoteProtocolError | httpx.ReadError)
                    and await race.run(speaks_tls(endpoint))
                ):  # not a server restarting: an http:// URL to a TLS port, each time
                    detail = str(error) or type(error).__name__
                    said = f"the server closed the connection before answering ({detail})"
                    hint = https_hint(endpoint)
                    raise ProviderError(f"{endpoint.where}: {said} — {hint}") from error
                if (
                    attempt < policy.max_retries
                    and not is_tls_error(error)
                    and not is_unknown_host(error)
                ):
                    delay = policy.backoff(attempt, None)
                    said = describe_transport_error(
                        endpoint, error, mid_stream=False, **_waits(options)
                    )
                    _say_retry(said, delay, attempt, policy)
                    await race.sleep(max(0.0, delay - (time.monotonic() - looked)))
                    attempt += 1
                    continue
                raise ProviderError(
                    describe_transport_error(endpoint, error, mid_stream=False, **_waits(options))
                ) from error
            except httpx.HTTPError as error:
                raise ProviderError(
                    describe_transport_error(endpoint, error, mid_stream=False, **_waits(options))
                ) from error
            try:
                if response.status_code < 300:
                    if not _is_event_stream(response) and not (
                        whole_answers and _is_json(response)
                    ):
                        said = error_detail(await race.run(_read_limited(response)))
                        said = redact(said, secrets)
                        raise ProviderError(_not_an_event_stream(endpoint, response, said))
                    yield response
                    return
                detail = redact(error_detail(await race.run(_read_limited(response))), secrets)
            finally:
                await response.aclose()
            status = response.status_code
            should_retry = response.headers.get("x-should-retry")
            retryable = (
                should_retry == "true"
                if should_retry in ("true", "false")
                else (status in RETRYABLE_STATUS or status >= 500) and not out_of_credit(detail)
            )
            asked = parse_retry_after(response.headers)
            if retryable and attempt < policy.max_retries:
                delay = policy.backoff(attempt, asked)
                said = f"{endpoint.where}: {status} {response.reason_phrase}".rstrip()
                _say_retry(f"{said}: {detail}" if detail else said, delay, attempt, policy)
                await race.sleep(delay)
                attempt += 1
                continue
            text = describe_status(
                endpoint,
                status,
                response.reason_phrase,
                detail,
                attempts=attempt + 1,
                redirect=redirect_target(response),
            )
            if retryable and asked is not None and asked > policy.max_delay:
                text += f" (it asked to wait {asked:,.0f} s, over max_retry_delay {policy.max_delay:g} s)"
            raise ProviderError(text, status=status)


def redirect_target(response: httpx.Response) -> str | None:
    """Where a redirect points (its Location against the request's URL), on one line and
    without a password; None when the answer names no place."""
    location = response.headers.get("location", "").strip()
    if not location:
        return None
    try:
        target = str(response.url.join(location))
    except (httpx.InvalidURL, ValueError):
        target = location
    return one_line(shown_url(target), 300)


# At most this much of a compressed body is inflated at once: httpx inflates each read whole,
# and 64 KB of gzip can hold 64 MB of text (a server's gzip bomb held 450 MB at its peak
# before the bound on one event refused it).
INFLATE_STEP = 1 << 20


def body_chunks(response: httpx.Response) -> AsyncGenerator[bytes, None]:
    """The body's bytes as they come, inflated in steps of at most ``INFLATE_STEP`` when the
    server compressed them. An uncompressed body is read straight from the response's byte
    stream: each SSE event arrives as its own HTTP chunk, and every async layer between the
    socket and the parser costs per event."""
    encoding = response.headers.get("content-encoding", "").strip().lower()
    if encoding in ("gzip", "deflate"):
        return _inflated(response, encoding)
    if encoding in ("", "identity") and isinstance(response.stream, httpx.AsyncByteStream):
        response.is_stream_consumed = True
        stream = response.stream.__aiter__()
    else:
        stream = response.aiter_bytes()
    return cast(AsyncGenerator[bytes, None], stream)  # both are async generators


async def _inflated(response: httpx.Response, encoding: str) -> AsyncGenerator[bytes, None]:
    # deflate is zlib's format, or raw deflate from servers that misread the standard (httpx
    # takes both the same way: the raw form when the first read is not zlib's).
    wbits = zlib.MAX_WBITS | 16 if encoding == "gzip" else zlib.MAX_WBITS
    inflate = zlib.decompressobj(wbits)
    first = True
    try:
        async for raw in response.aiter_raw():
            try:
                data = inflate.decompress(raw, INFLATE_STEP)
            except zlib.error:
                if not (first and encoding == "deflate"):
                    raise
                inflate = zlib.decompressobj(-zlib.MAX_WBITS)
                data = inflate.decompress(raw, INFLATE_STEP)
            first = False
            while data:
                yield data
                tail = inflate.unconsumed_tail
                data = inflate.decompress(tail, INFLATE_STEP) if tail else b""
        rest = inflate.flush()
        if rest:
            yield rest
    except zlib.error as error:
        raise httpx.DecodingError(f"its {encoding} does not inflate ({error})") from error


async def _read_bounded(response: httpx.Response, limit: int) -> tuple[bytes, bool]:
    """The body, read until it ends or passes ``limit`` bytes (the rest is left unread), and
    whether it passed."""
    chunks: list[bytes] = []
    size = 0
    async with aclosing(body_chunks(response)) as body:
        async for chunk in body:
            chunks.append(chunk)
            size += len(chunk)
            if size > limit:
                return b"".join(chunks), True
    return b"".join(chunks), False


async def _read_limited(response: httpx.Response) -> bytes:
    """An error's body, enough of it to quote."""
    return (await _read_bounded(response, ERROR_BODY_LIMIT))[0]


def _is_event_stream(response: httpx.Response) -> bool:
    return "text/event-stream" in response.headers.get("content-type", "").partition(";")[0]


def _is_json(response: httpx.Response) -> bool:
    kind = response.headers.get("content-type", "").partition(";")[0].strip().lower()
    return kind == "application/json" or kind.endswith("+json")


# A whole answer, sent as one JSON body where a stream was asked for (a server or gateway that
# does not stream, whatever stream=true says), as the events of the stream it stands for:
# ``(event name, data)`` pairs; None when the body is no answer (an error object, LM Studio's
# "Unexpected endpoint"), which is said as a body that is no event stream.
WholeAnswer = Callable[[Any], list[tuple[str, str]] | None]


async def _whole_answer_stream(
    endpoint: Endpoint, response: httpx.Response, whole: WholeAnswer
) -> AsyncGenerator[bytes, None]:
    """A JSON body as the event stream it stands for (read whole, up to the answer's bound)."""
    body, passed = await _read_bounded(response, MAX_ANSWER_CHARS * 2)
    if passed:
        raise ProviderError(
            f"{endpoint.where}: the answer passed {MAX_ANSWER_CHARS * 2:,} bytes of JSON;"
            " gave up on it"
        )
    try:
        events = whole(loads(body.decode("utf-8", "replace")))
    except (ValueError, RecursionError):
        events = None
    if events is None:
        said = error_detail(body[:ERROR_BODY_LIMIT])
        raise ProviderError(_not_an_event_stream(endpoint, response, said))
    for name, data in events:
        head = f"event: {name}\n" if name else ""
        yield f"{head}data: {data}\n\n".encode()


def _not_an_event_stream(endpoint: Endpoint, response: httpx.Response, said: str) -> str:
    content_type = response.headers.get("content-type", "")
    text = (
        f"{endpoint.where}: expected a server-sent event stream but got "
        f"{content_type or 'no content type'}"
    )
    missing = missing_path(endpoint)  # LM Studio answers 200 to a path it does not know
    if missing is None and "html" in content_type.lower():  # no API answers with a page
        setting = f" ({endpoint.base_url_env})" if endpoint.base_url_env else ""
        missing = (
            f"a web page, not an API's answer: does the base URL{setting} point at the API,"
            " not at a web UI or a login page?"
        )
    elif missing is None:
        text += " (does this server support stream=true?)"
    text = f"{text}; it said: {said}" if said else text
    return f"{text} — {missing}" if missing else text


# The C scanner behind json.loads: ``scan_json(text, 0) -> (value, end)``, StopIteration when
# no value starts at 0. Two Python calls less than json.loads, once per streamed chunk.
# (JSONDecoder sets scan_once in __init__; typeshed does not declare it.)
scan_json: Callable[[str, int], tuple[Any, int]] = json.JSONDecoder().scan_once  # type: ignore[attr-defined]
_scan_once = scan_json


def loads(data: str) -> Any:
    """``json.loads`` for one event's data, calling the C scanner directly (the stream's hot
    path); anything unusual (whitespace, errors) goes through ``json.loads`` for its message.
    A lone surrogate is replaced (see :func:`readable`)."""
    try:
        value, end = _scan_once(data, 0)
    except StopIteration:
        value, end = json.loads(data), len(data)
    if end != len(data):
        value = json.loads(data)
    return readable(value, data)


# How long, once the answer is whole (its stop reason came), the rest of the stream (usage,
# the end marker) is waited for: a server that never closes the stream must not hold the run.
END_GRACE = 10.0

# The longest event of an event stream kept while it arrives: an answer's events are small
# (a whole 8 MB reply as one delta is far inside), and a line without end, or data lines
# without the blank line that ends their event, must not take all the memory there is.
MAX_EVENT_CHARS = 64 << 20


class MalformedStream(ProviderError):
    pass


class SseParser:
    """Server-sent events from decoded text: ``on_event(data, event_type)`` for each event, as
    soon as the blank line that ends it has arrived.

    Nearly every event an LLM API sends is one ``data: …`` line and a blank line, LF-ended.
    While nothing is buffered (the parser is between events), those are cut straight out of
    the text. Everything else (comments, ``event:``, ``id:`` and ``retry:`` fields, several
    data lines, CR or CRLF line ends, a byte order mark, an event split across reads) goes
    through httpx-sse's incremental decoders, the ones its ``EventSource`` runs, so the full
    SSE rules apply to it. A line that is not SSE at all (no known field, e.g. a raw JSON
    error some servers send) raises MalformedStream, where the decoder would skip it; but
    llama.cpp's ``error: {...}`` line is an event named error.
    """

    __slots__ = ("_between", "_events", "_lines", "_pending", "_started", "endpoint", "on_event")

    def __init__(self, endpoint: Endpoint, on_event: Callable[[str, str], None]) -> None:
        self.endpoint = endpoint
        self.on_event = on_event
        self._lines = SSELineDecoder()
        self._events = SSEDecoder()
        self._between = False  # between events: nothing buffered (False until the first text)
        self._started = False  # for the byte order mark, ignored at the very start only
        self._pending = 0  # characters decoded since the last event ended: the bound's count

    @property
    def inside_event(self) -> bool:
        """Whether part of an event has arrived and the rest has not."""
        return not self._between

    def feed(self, text: str) -> None:
        """Every event that ``text`` completes, in order; a partial one waits for more text."""
        if not self._between or "\r" in text:
            self._decode(text)
            return
        end = text.find("\n")
        if end == len(text) - 2 and text.endswith("\n") and text.startswith("data:"):
            # The usual read: one whole event, "data:…\n\n" (one space after the colon is not
            # part of the value).
            self.on_event(text[6:end] if text.startswith(" ", 5) else text[5:end], "message")
            return
        on_event = self.on_event
        start = 0
        while (end := text.find("\n\n", start)) >= 0:
            if text.startswith("data:", start) and text.find("\n", start, end) < 0:
                value = start + 6 if text.startswith(" ", start + 5) else start + 5
                on_event(text[value:end], "message")
            else:
                self._decode(text[start : end + 2])
            start = end + 2
        if start < len(text):
            self._decode(text[start:])

    def close(self) -> None:
        """The end of the stream: a last event whose blank line never came still counts, if
        it is whole; one the end cut off in the middle of its JSON is dropped, as the SSE
        rules drop an unfinished event (the response is then incomplete, not malformed)."""
        try:
            self._dispatch([*self._lines.flush(), ""])
        except BadEventJson as error:
            log.info("the event stream ended inside an event, which is dropped: %s", error)

    def _decode(self, text: str) -> None:
        if not self._started:
            self._started = True
            text = text.removeprefix("\ufeff")  # one leading byte order mark is ignored
        ended = self._dispatch(self._lines.decode(text))
        # Text that ends with a blank line leaves no partial line and no pending event.
        self._between = text.endswith("\n\n")
        # One event (a line, or many data lines) is bounded, counted as it comes: what is
        # held for it must not grow without end, nor be measured again at each read.
        self._pending = 0 if ended or self._between else self._pending + len(text)
        if self._pending > MAX_EVENT_CHARS:
            raise MalformedStream(
                f"{self.endpoint.where}: an event of over {MAX_EVENT_CHARS:,} characters"
                " in the event stream (a line without end?); gave up on it"
            )

    def _dispatch(self, lines: list[str]) -> bool:
        """Decode ``lines``; whether any event ended among them."""
        decode = self._events.decode
        ended = False
        for line in lines:
            if line and not line.startswith(("data:", ":", "event:")) and not _is_sse_line(line):
                if not line.startswith("error:"):
                    raise MalformedStream(
                        f"{self.endpoint.where}: malformed event stream line {one_line(line, 200)!r}"
                    )
                # llama.cpp's server writes an error in the stream as a field of its own,
                # "error: {...}": an event named error, as "event: error" and "data: {...}".
                decode("event: error")
                line = f"data:{line[6:]}"
            sse = decode(line)
            if sse is not None:
                ended = True
                self.on_event(sse.data, sse.event)
        return ended


_FIELDS = frozenset({"data", "event", "id", "retry"})


def _is_sse_line(line: str) -> bool:
    return line.partition(":")[0] in _FIELDS


class BadEventJson(MalformedStream):
    pass


def bad_json(endpoint: Endpoint, data: str, error: ValueError) -> ProviderError:
    return BadEventJson(
        f"{endpoint.where}: malformed JSON in the event stream ({error}): {one_line(data, 200)!r}"
    )


def unexpected_data(endpoint: Endpoint, error: Exception) -> ProviderError:
    """An event an API module could not take (a field of a type no such API sends: a number
    for text, an object for a tool call's arguments): the server's fault, not a passing one."""
    return MalformedStream(
        f"{endpoint.where}: unexpected data in the event stream"
        f" ({type(error).__name__}: {one_line(str(error), 200)})"
    )


# The most tool calls one answer may hold: far more than any model makes at once, and a bound
# on what a broken or hostile server can make the loop run.
MAX_TOOL_CALLS = 1000


def check_call_count(where: str, calls: int) -> None:
    """Refuse (ProviderError) a tool call beyond ``MAX_TOOL_CALLS``, ``calls`` being those the
    answer holds already."""
    if calls >= MAX_TOOL_CALLS:
        raise ProviderError(
            f"{where}: the answer asks for over {MAX_TOOL_CALLS:,} tool calls; gave up on it"
        )


# The longest answer one stream may give, in characters of its text, thinking and tool call
# arguments: far beyond any model's output limit, and a bound on the memory one broken or
# hostile endpoint can take (an answer is held several times over: the message, its events,
# the session's JSON). Measured every ``ANSWER_CHECK_EVERY`` characters of the stream, so the
# streaming path pays one addition a read.
MAX_ANSWER_CHARS = 16 << 20
ANSWER_CHECK_EVERY = 4 << 20


def check_answer_size(where: str, output: AssistantMessage) -> None:
    """Refuse (ProviderError) an answer over ``MAX_ANSWER_CHARS``, thinking signatures
    included (held and stored, though no text); what came is kept."""
    signatures = sum(
        len((block.model_extra or {}).get(THINKING_SIGNATURE) or "")
        for block in output.content
        if isinstance(block, ThinkingContent)
    )
    if answer_chars(output) + signatures > MAX_ANSWER_CHARS:
        raise ProviderError(
            f"{where}: the answer passed {MAX_ANSWER_CHARS:,} characters; gave up on it (what"
            " came is kept)"
        )


# --- the stream driver --------------------------------------------------------------------------


class SseState(Protocol):
    """What an API module supplies: folds events into ``output``, queueing stream events."""

    output: AssistantMessage
    events: list[AssistantMessageEvent]
    done: bool  # set when the API's end-of-stream marker arrived

    @property
    def complete(self) -> bool:
        """Whether the answer is whole (its stop reason came): only trailing events (usage,
        the end marker) may follow, and are waited for ``END_GRACE`` seconds at most."""

    def on_event(self, data: str, event_type: str) -> None:
        """One server-sent event: its data and its type (``"message"`` when not named)."""

    def finish(self) -> None:
        """Close the blocks and settle the stop reason; raise ProviderError if incomplete."""

    def keep_held(self) -> None:
        """The stream ended early (a fault, an abort): put into the output what was held
        back to be known (text that might have been the start of a tag)."""


async def stream_sse(
    endpoint: Endpoint,
    options: StreamOptions,
    prepare: Callable[[], tuple[dict[str, str], dict[str, Any]]],
    state: SseState,
    whole: WholeAnswer | None = None,
) -> AsyncIterator[AssistantMessageEvent]:
    """Run one streamed request to the end: StartEvent, the state's events, then DoneEvent or
    ErrorEvent. Never raises (except cancellation from outside); partial content is kept.

    An abort ends the stream at once, not at the next chunk. While the body streams, the abort
    shuts the connection's socket down, so the pending read returns at once at no cost per
    read; where no socket is at hand (HTTP/2, custom transports) each read is raced against
    the signal in a cancel scope of its own (held only while it waits, never across a yield).
    """
    output = state.output
    events = state.events
    signal = options.signal
    race = AbortRace(signal)
    secrets: tuple[str, ...] = ()
    try:
        race.check()
        headers, body = prepare()
        secrets = credentials(headers)
        async with open_event_stream(
            endpoint,
            headers=headers,
            body=body,
            options=options,
            race=race,
            whole_answers=whole is not None,
        ) as response:
            yield StartEvent(output)
            chunks = (  # decoded here as UTF-8, as SSE is
                body_chunks(response)
                if whole is None or _is_event_stream(response)
                else _whole_answer_stream(endpoint, response, whole)
            )
            next_chunk = chunks.__anext__
            parser = SseParser(endpoint, state.on_event)
            feed = parser.feed
            sock = _http11_socket(response) if signal is not None else None
            unhook = (
                signal.on_abort(partial(_shutdown, sock))
                if signal is not None and sock is not None
                else None
            )
            racing = signal is not None and sock is None
            utf8_decode = codecs.utf_8_decode  # incremental: keeps a split character pending
            pending = b""
            # A stream that sends only keep-alives (comments, or events that carry nothing:
            # pings, empty chunks) never times out a read: it is stalled once it has sent
            # nothing else for the stall timeout. Content is progress, and so is text that is
            # part of an event still arriving; time spent by whoever reads the events is not.
            stall = _stall_timeout(options)
            last_progress = time.monotonic()
            measure_at = ANSWER_CHECK_EVERY  # characters of the stream (see MAX_ANSWER_CHARS)
            try:
                while True:
                    try:
                        if state.complete:  # a server that never closes must not hold it
                            read: bytes | None = None
                            with anyio.move_on_after(END_GRACE):
                                read = await (race.run(next_chunk()) if racing else next_chunk())
                            if read is None:
                                log.info("%s: no end after the whole answer", endpoint.where)
                                break
                            data = read
                        else:
                            data = await (race.run(next_chunk()) if racing else next_chunk())
                    except StopAsyncIteration:
                        try:
                            if pending:
                                feed(utf8_decode(pending, "replace", True)[0])
                            parser.close()
                        except ProviderError:
                            raise
                        except Exception as error:
                            raise unexpected_data(endpoint, error) from error
                        break
                    if pending:
                        data = pending + data
                        pending = b""
                    try:
                        text = data.decode()
                    except UnicodeDecodeError:  # a character split across reads, or bad bytes
                        text, used = utf8_decode(data, "replace", False)
                        pending = data[used:]
                    if text:
                        measure_at -= len(text)
                        try:
                            feed(text)  # every complete event in this read, before yielding any
                            if measure_at <= 0:
                                measure_at = ANSWER_CHECK_EVERY
                                check_answer_size(endpoint.where, output)
                        except Exception as error:
                            # What came before the event that broke the stream is kept: its
                            # events go out first, as they would have without it.
                            for event in events:
                                yield event
                            events.clear()
                            if isinstance(error, ProviderError):
                                raise
                            raise unexpected_data(endpoint, error) from error
                    if events:
                        for event in events:
                            yield event
                            if race.fired:
                                raise Aborted
                        events.clear()
                        last_progress = time.monotonic()
                    elif parser.inside_event and not _only_comments(text):
                        last_progress = time.monotonic()
                    elif time.monotonic() - last_progress > stall:
                        raise ProviderError(
                            f"{endpoint.where}: timed out waiting for the response (only"
                            f" keep-alives for {stall:g} s; a provider's stall_timeout in"
                            f" models.toml waits longer){PARTIAL_KEPT}"
                        )
                    if state.done:
                        break
                    if race.fired:
                        raise Aborted
            except (ProviderError, Aborted):
                raise
            except Exception as error:  # transport errors: dropped connection, read timeout
                if race.aborted:  # the abort shut the socket down
                    raise Aborted from error
                raise ProviderError(
                    describe_transport_error(
                        endpoint, error, mid_stream=True, read_timeout=_timeout(options).read
                    )
                ) from error
            finally:
                if unhook is not None:
                    unhook()
                await chunks.aclose()
        race.check()
        try:
            state.finish()
        except ProviderError:
            raise
        except Exception as error:
            raise unexpected_data(endpoint, error) from error
        for event in events:
            yield event
        events.clear()
        yield DoneEvent(output)
    except Aborted:
        _keep_held(state)
        yield ErrorEvent(fail(output, abort_message(signal), aborted=True))
    except ProviderError as error:
        _keep_held(state)
        if race.aborted:
            yield ErrorEvent(fail(output, abort_message(signal), aborted=True))
        else:
            yield ErrorEvent(fail(output, redact(str(error), secrets)))
    except Exception as error:  # a bug of ours must still end the stream properly
        said = redact(f"{endpoint.where}: unexpected error: {error!r}", secrets)
        yield ErrorEvent(fail(output, said))
    finally:
        race.close()


def _keep_held(state: SseState) -> None:
    try:
        state.keep_held()
    except Exception:  # what was held is given up; the error that ended the stream is said
        log.exception("could not keep the held part of an answer")


def _http11_socket(response: httpx.Response) -> Any:
    """The socket under an HTTP/1.x response (httpcore's ``network_stream`` extension), or
    None. HTTP/2 shares one connection among streams, so it never qualifies."""
    if response.http_version not in ("HTTP/1.1", "HTTP/1.0"):
        return None
    stream = response.extensions.get("network_stream")
    if stream is None:
        return None
    try:
        sock = stream.get_extra_info("socket")
    except Exception:
        return None
    return sock if callable(getattr(sock, "shutdown", None)) else None


def _shutdown(sock: Any) -> None:
    """Shut the connection down, so that a read waiting on it ends at once."""
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass  # already closed
    except Exception:
        # uvloop's transports hand out a socket that refuses shutdown() (TypeError); the
        # connection is the same through a duplicate of its descriptor.
        try:
            with socket.socket(fileno=os.dup(sock.fileno())) as same:
                same.shutdown(socket.SHUT_RDWR)
        except (OSError, TypeError, ValueError, AttributeError):
            pass
