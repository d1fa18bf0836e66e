"""Server-Sent Events, decoded by buffering to the blank line (never one event per read)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, AsyncIterator, Iterable, Iterator

from inferd_client._errors import StreamError, error_from_parts

DONE = "[DONE]"


@dataclass(frozen=True)
class ServerSentEvent:
    """One event: its `data` lines joined by newlines, and `event`/`id` when the server set them."""

    data: str
    event: str | None = None
    id: str | None = None

    def json(self) -> Any:
        """The data decoded as JSON."""
        return json.loads(self.data)


class SSEDecoder:
    """Feed bytes as they arrive; get back the events completed so far.

    Lines may end in LF, CRLF or CR, a line or a multi-byte character may be split across
    reads, and a frame ends at a blank line. Comment lines (starting with `:`) are ignored.
    """

    def __init__(self) -> None:
        self._buffer = b""
        self._data: list[str] = []
        self._event: str | None = None
        self._id: str | None = None

    def feed(self, chunk: bytes) -> list[ServerSentEvent]:
        """Add bytes; return every event they complete."""
        buffer = self._buffer + chunk
        events: list[ServerSentEvent] = []
        start, length = 0, len(buffer)
        while True:
            # Search for CR only up to the next LF, so a long read of LF-ended lines stays linear.
            lf = buffer.find(b"\n", start)
            cr = buffer.find(b"\r", start, lf if lf != -1 else length)
            if cr == -1:
                if lf == -1:
                    break
                end, start_next = lf, lf + 1
            elif cr + 1 == length:  # a CR at the very end may be half of a CRLF still in flight
                break
            else:
                end, start_next = cr, cr + 2 if buffer[cr + 1] == 0x0A else cr + 1
            event = self._line(buffer[start:end])
            start = start_next
            if event is not None:
                events.append(event)
        self._buffer = buffer[start:]
        return events

    def flush(self) -> list[ServerSentEvent]:
        """At end of stream: the last event, when the server closed without a blank line."""
        events: list[ServerSentEvent] = []
        if self._buffer:
            tail, self._buffer = self._buffer.rstrip(b"\r"), b""
            event = self._line(tail)
            if event is not None:
                events.append(event)
        event = self._line(b"")
        if event is not None:
            events.append(event)
        return events

    def _line(self, raw: bytes) -> ServerSentEvent | None:
        if not raw:
            if not self._data and self._event is None:
                return None
            event = ServerSentEvent("\n".join(self._data), self._event, self._id)
            self._data, self._event = [], None
            return event
        line = raw.decode("utf-8", "replace")
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        elif name == "id":
            self._id = value
        return None


def iter_events(chunks: Iterable[bytes]) -> Iterator[ServerSentEvent]:
    """Events from an iterable of byte chunks."""
    decoder = SSEDecoder()
    for chunk in chunks:
        yield from decoder.feed(chunk)
    yield from decoder.flush()


async def aiter_events(chunks: AsyncIterator[bytes]) -> AsyncIterator[ServerSentEvent]:
    """Events from an async iterator of byte chunks."""
    decoder = SSEDecoder()
    async for chunk in chunks:
        for event in decoder.feed(chunk):
            yield event
    for event in decoder.flush():
        yield event


def decode_frame(event: ServerSentEvent) -> Any:
    """The JSON payload of a data frame; None for `[DONE]`; raises StreamError for an error frame.

    The spec lets an error frame stand where `[DONE]` was expected, so it ends iteration too.
    """
    if event.data.strip() == DONE:
        return None
    try:
        payload = json.loads(event.data)
    except ValueError:
        raise StreamError(f"undecodable stream frame: {event.data[:200]!r}", status=None, body=event.data) from None
    if isinstance(payload, dict) and payload.get("error") is not None:
        raise error_from_parts(None, payload, cls=StreamError)
    return payload

