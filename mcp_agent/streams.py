"""Wrapping the streams of an MCP transport: what passes between the transport and the SDK's
session (our server's, or a client's to a downstream server) can be looked at or changed in
one place."""

from __future__ import annotations

from typing import Any, Self, cast


class WrappedStream:
    """A transport's stream with a few methods of its own; everything else (closing, the
    sender's context) is the wrapped stream's."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def __aenter__(self) -> Self:
        await self._inner.__aenter__()
        return self

    async def __aexit__(self, *exc: object) -> bool | None:
        return cast("bool | None", await self._inner.__aexit__(*exc))
