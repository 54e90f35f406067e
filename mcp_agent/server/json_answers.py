"""A 2025 session's request answered as one JSON body, when its answer is the first message of
it and comes before its event stream's first ping.

The SDK's 2025 transport answers every request of a session as an event stream, the answer
one event of it (its JSON-response mode is a flag of the whole transport, and its message
router drops every message of a request but the answer in that mode). The Python SDK's
client refuses an event over 1 MiB (``max_sse_event_size``): a whole session read that way
failed on its client, while a JSON body of any size reads. So the transport keeps its event
streams and routing as they are, and for a request marked deferred (``ResumableTransport``)
holds back the response's start and the stream's priming event until the first message for
the request comes: the answer goes as the body of an ``application/json`` response; any other
message (a notification, a request to the client) or the stream's first ping, whichever comes
first, lets the event stream go on as it would have, priming event first (a client whose
stream then drops can resume it from its start), nothing lost.
"""

from __future__ import annotations

from starlette.types import Message, Send

from mcp_agent.server.spliced import is_event_stream


class DeferredAnswer:
    """One request's answer, held for a JSON body until it is known whether it is the first
    message of the request: ``answer`` (its JSON text) once the transport takes it as that,
    ``streaming`` once the response went over to an event stream. Both are set with no await
    between their check and their setting, so one request never gets both. ``priming``: the
    stream's priming event (as sent) while neither the transport nor ``sending`` sent it."""

    def __init__(self) -> None:
        self.answer: bytes | None = None
        self.streaming = False
        self.priming: bytes | None = None

    def take_priming(self) -> bytes | None:
        """The priming event, if it was not sent yet: the caller's to send (no one else will)."""
        priming, self.priming = self.priming, None
        return priming

    def take(self, text: str) -> None:
        """Takes ``text``, the request's answer and its first message, for a JSON body (only
        while the response has not gone over to an event stream)."""
        assert not self.streaming
        self.answer = text.encode()

    def sending(self, send: Send) -> Send:
        """``send``, holding back an event stream's start until the answer is taken (then the
        response is that answer as JSON) or anything else is sent (then it goes on as it is).
        Any other response (a refusal, as JSON) passes as it is."""
        held: list[Message] = []

        async def deferring(message: Message) -> None:
            if message["type"] == "http.response.start":
                if self.answer is None and not self.streaming and is_event_stream(message):
                    held.append(message)
                    return
            elif held:
                answer = self.answer
                if answer is not None:
                    if not message.get("more_body", False):  # the stream's end: the answer
                        await send(_as_json(held.pop(), len(answer)))
                        await send({"type": "http.response.body", "body": answer})
                    return  # a ping once the answer was taken
                # Something other than the answer comes first: the event stream it is, its
                # priming event first (sent here when a ping comes first).
                self.streaming = True
                priming = self.take_priming()
                await send(held.pop())
                if priming is not None:
                    await send({"type": "http.response.body", "body": priming, "more_body": True})
            await send(message)

        return deferring


def _as_json(start: Message, length: int) -> Message:
    """The event stream's ``start`` made that of a JSON body of ``length`` bytes."""
    kept = [(k, v) for k, v in start["headers"] if k.lower() not in _STREAM_HEADERS]
    size = str(length).encode()
    headers = [*kept, (b"content-type", b"application/json"), (b"content-length", size)]
    return {"type": "http.response.start", "status": 200, "headers": headers}


# The headers of an event stream that a JSON body does not have.
_STREAM_HEADERS = {b"content-type", b"content-length", b"x-accel-buffering", b"connection"}
