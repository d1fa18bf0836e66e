"""Small helpers for the raw-ASGI routes: find a header, send bytes, send an error."""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Callable

from inferd.errors import InferdError, MethodNotAllowed
from inferd.observe.requests import current, response_start

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

JSON_HEADERS = [(b"content-type", b"application/json")]
SSE_HEADERS = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache"),
               (b"x-accel-buffering", b"no")]


class ClientGone(Exception):
    """The client disconnected before its request was read."""


def header(scope: Scope, name: bytes) -> str | None:
    """A request header's value (latin-1), or None."""
    for key, value in scope["headers"]:
        if key == name:
            return value.decode("latin-1")
    return None


async def send_bytes(send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]] | None = None
                     ) -> None:
    """A complete response."""
    await send(response_start(status, [*(headers or JSON_HEADERS), (b"content-length", str(len(body)).encode())]))
    await send({"type": "http.response.body", "body": body})


# Conversation and source routes answer errors in the application envelope.
USER_SCOPED_PREFIXES = ("/v1/conversations", "/v1/sources")


def note_rejection(exc: InferdError) -> None:
    """Note a refusal (401, 402, 429, 503 overloaded) on the request, for the metrics; every
    error that answers a request passes here, whatever its envelope."""
    if exc.rejection is not None:
        note = current.get()
        if note is not None:
            note.rejection = exc.rejection


def error_body(exc: InferdError, path: str) -> bytes:
    """The error in the envelope of the route at `path` (the refusal noted for the metrics)."""
    note_rejection(exc)
    return exc.app_body() if path.startswith(USER_SCOPED_PREFIXES) else exc.body()


async def send_error(send: Send, exc: InferdError, path: str = "") -> None:
    """An error in the route's wire envelope (relayed model errors keep the upstream's body)."""
    headers = [(b"content-type", getattr(exc, "content_type", "application/json").encode())]
    headers.extend((k.lower().encode(), v.encode()) for k, v in exc.headers.items())
    await send_bytes(send, exc.status, error_body(exc, path), headers)


def require_post(scope: Scope) -> None:
    """405 for anything but POST."""
    if scope["method"] != "POST":
        raise MethodNotAllowed(f"Method {scope['method']} not allowed on {scope['path']}")


WATCH_AFTER = 0.05  # seconds into a stream before a task watches for the client leaving


class DisconnectWatch:
    """Cancels a stream's task when the client disconnects (after the body was read).

    Watching takes a task blocked in `receive()`. Most streams from a fast engine end within
    WATCH_AFTER, so the task starts only then: a timer set and cancelled costs a fraction of a
    task started and cancelled on every stream (issue 15). A client that left earlier is noticed
    then (`receive` reports a disconnect that already happened)."""

    __slots__ = ("_receive", "_task", "_timer", "_watcher", "fired")

    def __init__(self, receive: Receive, task: asyncio.Task[Any]) -> None:
        self._receive = receive
        self._task = task
        self._watcher: asyncio.Task[None] | None = None
        self._timer: asyncio.TimerHandle | None = task.get_loop().call_later(WATCH_AFTER, self._start)
        self.fired = False  # whether the client left and the task was cancelled for it

    def _start(self) -> None:
        self._timer = None
        self._watcher = self._task.get_loop().create_task(self._watch())

    async def _watch(self) -> None:
        while True:
            message = await self._receive()
            if message["type"] == "http.disconnect":
                self.fired = True
                self._task.cancel()
                return

    def cancel(self) -> None:
        """Stop watching (before the response's end: `receive` reports that as a disconnect too)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._watcher is not None:
            self._watcher.cancel()
