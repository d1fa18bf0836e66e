"""Small helpers for the raw-ASGI hot routes: read the body, find a header, send bytes."""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Callable

import orjson

from inferd.errors import InferdError, InvalidRequest, MethodNotAllowed, PayloadTooLarge

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


async def read_json_object(scope: Scope, receive: Receive, limit: int) -> dict[str, Any]:
    """The request body parsed as a JSON object: 413 over `limit` bytes, 400 when not an object."""
    length = header(scope, b"content-length")
    if length is not None and length.isdigit() and int(length) > limit:
        raise PayloadTooLarge(f"Request body over {limit} bytes")
    message = await receive()
    if message["type"] == "http.disconnect":
        raise ClientGone()
    body = message.get("body", b"")
    if message.get("more_body"):
        chunks = [body]
        size = len(body)
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise ClientGone()
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                raise PayloadTooLarge(f"Request body over {limit} bytes")
            chunks.append(chunk)
            if not message.get("more_body"):
                break
        body = b"".join(chunks)
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise InvalidRequest(f"Malformed JSON body: {exc}", code="invalid_json") from None
    if not isinstance(parsed, dict):
        raise InvalidRequest("The request body must be a JSON object", code="invalid_json")
    return parsed


async def send_bytes(send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]] | None = None
                     ) -> None:
    """A complete response."""
    await send({"type": "http.response.start", "status": status,
                "headers": [*(headers or JSON_HEADERS), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


async def send_error(send: Send, exc: InferdError) -> None:
    """An error in the wire envelope (relayed model errors keep the upstream's body)."""
    headers = [(b"content-type", getattr(exc, "content_type", "application/json").encode())]
    headers.extend((k.lower().encode(), v.encode()) for k, v in exc.headers.items())
    await send_bytes(send, exc.status, exc.body(), headers)


def require_post(scope: Scope) -> None:
    """405 for anything but POST."""
    if scope["method"] != "POST":
        raise MethodNotAllowed(f"Method {scope['method']} not allowed on {scope['path']}")


def watch_disconnect(receive: Receive, task: asyncio.Task[Any]) -> asyncio.Task[None]:
    """Cancel `task` when the client disconnects (after the body was read)."""

    async def watch() -> None:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                task.cancel()
                return

    return asyncio.get_running_loop().create_task(watch())
