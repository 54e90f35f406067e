"""A downstream server's tool listing with the tools the SDK would refuse left out.

The SDK checks a ``tools/list`` result as a whole: one tool without an input schema, and every
tool of the server is refused with it (the server could not be used at all). Here, between the
transport and the client, a listing that would be refused is checked tool by tool: those that
fail are left out, each said in one line, and the others reach the client as listed.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import mcp.types as types
from mcp.shared.message import SessionMessage
from mcp_types import JSONRPCRequest, JSONRPCResponse, RequestId
from mcp_types import methods as protocol
from pydantic import ValidationError

from mcp_agent.streams import WrappedStream

# tools/list requests awaiting their answer that are remembered (the client asks one at a
# time; a server that never answers must not grow the set).
MAX_ASKED = 64
# Before the handshake has said otherwise, a listing is read as the SDK reads it then.
FALLBACK_VERSION = "2025-11-25"


def refusal(result: dict[str, Any], version: str) -> ValidationError | None:
    """What the SDK would refuse in the ``tools/list`` ``result`` at protocol ``version``."""
    try:
        protocol.validate_server_result("tools/list", version, result)
        types.ListToolsResult.model_validate(result, by_name=False)
    except ValidationError as error:
        return error
    except (KeyError, ValueError):  # a version or method the SDK does not check either
        return None
    return None


def valid_tools(
    result: dict[str, Any], version: str, said: Callable[[str, ValidationError], None]
) -> dict[str, Any]:
    """``result`` with each tool the SDK would refuse left out (``said`` is told of each by
    its name), or as it is when the SDK takes it whole or its fault is not in its tools."""
    tools = result.get("tools")
    if not isinstance(tools, list) or refusal(result, version) is None:
        return result
    kept = []
    for index, tool in enumerate(tools):
        error = refusal({"tools": [tool]}, version)
        if error is None:
            kept.append(tool)
        else:
            name = tool.get("name") if isinstance(tool, dict) else None
            said(name if isinstance(name, str) else f"#{index}", error)
    return {**result, "tools": kept}


@asynccontextmanager
async def valid_tools_only(
    transport: AbstractAsyncContextManager[tuple[Any, Any]],
    said: Callable[[str, ValidationError], None],
    version: Callable[[], str | None],
) -> AsyncIterator[tuple[Any, Any]]:
    """``transport``'s streams, with every ``tools/list`` answer passed through
    ``valid_tools`` at the protocol ``version()`` the client speaks by then."""
    asked: dict[RequestId, None] = {}
    async with transport as (read_stream, write_stream):
        yield _Answers(read_stream, asked, said, version), _Asking(write_stream, asked)


class _Asking(WrappedStream):
    def __init__(self, inner: Any, asked: dict[RequestId, None]) -> None:
        super().__init__(inner)
        self._asked = asked

    async def send(self, item: SessionMessage) -> None:
        message = item.message
        if isinstance(message, JSONRPCRequest) and message.method == "tools/list":
            self._asked[message.id] = None
            if len(self._asked) > MAX_ASKED:
                del self._asked[next(iter(self._asked))]
        await self._inner.send(item)


class _Answers(WrappedStream):
    def __init__(
        self,
        inner: Any,
        asked: dict[RequestId, None],
        said: Callable[[str, ValidationError], None],
        version: Callable[[], str | None],
    ) -> None:
        super().__init__(inner)
        self._asked = asked
        self._said = said
        self._version = version

    def __aiter__(self) -> _Answers:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        return self._checked(await self._inner.__anext__())

    async def receive(self) -> SessionMessage | Exception:
        return self._checked(await self._inner.receive())

    def _checked(self, item: SessionMessage | Exception) -> SessionMessage | Exception:
        if isinstance(item, Exception) or not self._asked:
            return item
        message = item.message
        if not isinstance(message, JSONRPCResponse) or message.id not in self._asked:
            return item
        del self._asked[message.id]
        version = self._version() or FALLBACK_VERSION
        result = valid_tools(message.result, version, self._said)
        if result is message.result:
            return item
        answer = JSONRPCResponse(jsonrpc="2.0", id=message.id, result=result)
        return SessionMessage(answer, metadata=item.metadata)
