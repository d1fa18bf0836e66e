"""Request bodies capped while they arrive, in one place.

Every body is counted as it streams in and refused with 413 `request_too_large` at the byte that
crosses its route's cap (or at once when `Content-Length` declares more); the refusal closes the
connection, so the rest of the body is never read. A body that trickles in slower than a sane
rate is cut off with 408. A route that needs a key checks it before a byte of the body is read:
the raw hot routes do so themselves (`api/hot.py`), and `BodyLimits` does it for the FastAPI
routes, whose pydantic bodies FastAPI would otherwise read before any dependency runs.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

import orjson
from starlette.routing import BaseRoute, Match

from inferd.api.asgi import ClientGone, Message, Receive, Scope, Send, header, send_error
from inferd.auth.key_record import KeyRecord
from inferd.errors import InferdError, InvalidRequest, PayloadTooLarge, RequestTimeout

KIB = 1024
MIB = 1024 * KIB

HOT_BODY_BYTES = 32 * MIB  # chat, count_tokens, embeddings, rerank, messages, responses
EXCHANGE_BODY_BYTES = 64 * KIB  # read before any key is checked
JSON_BODY_BYTES = 1 * MIB  # every other JSON route
FILE_UPLOAD_BYTES = 64 * MIB  # the spec's upload limits (per file)
VECTORIZE_UPLOAD_BYTES = 50 * 1000 * 1000
TRANSCRIPTION_UPLOAD_BYTES = 75 * MIB
GENERATE_MULTIPART_BYTES = 50 * 1000 * 1000  # a multipart generate, all parts together
MULTIPART_OVERHEAD_BYTES = 1 * MIB  # boundaries and the small form fields beside one file part

# A body must arrive at this average rate or better once the grace period (`[limits]
# body_timeout_s`) is spent: fast enough for any real client, and a slow-loris sending a byte a
# second loses its worker after the grace period.
MIN_BODY_RATE_BYTES_S = 64 * KIB
DEFAULT_BODY_TIMEOUT_S = 30.0

# Caps of the routes behind `BodyLimits` that differ from JSON_BODY_BYTES. The raw hot routes
# (api/hot.py) never pass through it: they read their HOT_BODY_BYTES bodies themselves.
_FIXED_CAPS = {
    "/v1/auth/exchange": EXCHANGE_BODY_BYTES,
    "/v1/files": FILE_UPLOAD_BYTES + MULTIPART_OVERHEAD_BYTES,
    "/v1/audio/transcriptions": TRANSCRIPTION_UPLOAD_BYTES + MULTIPART_OVERHEAD_BYTES,
}
# Routes answered without a key, so their bodies are read (under their cap) before anything else.
KEYLESS_ROUTES = frozenset({"/v1/auth/exchange"})
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def body_cap(path: str, content_type: str | None) -> int:
    """The most bytes a request body on `path` may hold."""
    cap = _FIXED_CAPS.get(path)
    if cap is not None:
        return cap
    if path.startswith("/v1/conversations/"):
        if path.endswith("/files/vectorize"):
            return VECTORIZE_UPLOAD_BYTES + MULTIPART_OVERHEAD_BYTES
        if path.endswith("/generate") and (content_type or "").startswith("multipart/"):
            return GENERATE_MULTIPART_BYTES
    return JSON_BODY_BYTES


def declared_length(scope: Scope) -> int | None:
    """`Content-Length` as an integer, or None when absent or not a number."""
    length = header(scope, b"content-length")
    return int(length) if length is not None and length.isdigit() else None


class BodyClock:
    """Cuts off bodies that trickle in: one sweep a second over the reads under way.

    A timer per read would cost the hot path several microseconds on every request; instead a
    read registers itself while it waits (a dict insert), and the sweep cancels the task of any
    read past its deadline, which the read turns into a 408."""

    SWEEP_S = 0.5

    def __init__(self, grace_s: float = DEFAULT_BODY_TIMEOUT_S) -> None:
        self.grace_s = grace_s
        self.waiting: dict["LimitedBody", asyncio.Task[Any]] = {}
        self._sweeper: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Begin sweeping (once an event loop runs)."""
        if self._sweeper is None:
            self._sweeper = asyncio.get_running_loop().create_task(self._sweep())

    async def close(self) -> None:
        """Stop sweeping."""
        if self._sweeper is not None:
            self._sweeper.cancel()
            await asyncio.gather(self._sweeper, return_exceptions=True)
            self._sweeper = None

    async def _sweep(self) -> None:
        while True:
            await asyncio.sleep(self.SWEEP_S)
            now = time.monotonic()
            for body, task in list(self.waiting.items()):
                if now >= body.deadline() and not body.expired:
                    body.expired = True
                    task.cancel()


class LimitedBody:
    """An ASGI `receive` that counts the body against a cap and a deadline.

    Over the cap it raises PayloadTooLarge, past the deadline RequestTimeout, and remembers the
    error in `failure`. Once the body is complete it passes messages through untimed, because
    an app may wait on `receive` for the client's disconnect for as long as a stream lasts.
    """

    __slots__ = ("_receive", "_cap", "_clock", "_start", "_received", "_done", "expired", "failure")

    def __init__(self, receive: Receive, cap: int, clock: BodyClock) -> None:
        self._receive = receive
        self._cap = cap
        self._clock = clock
        self._start = time.monotonic()
        self._received = 0
        self._done = False
        self.expired = False
        self.failure: InferdError | None = None

    def deadline(self) -> float:
        """When the body must have arrived, at the rate it has arrived so far (time.monotonic)."""
        return self._start + self._clock.grace_s + self._received / MIN_BODY_RATE_BYTES_S

    async def __call__(self) -> Message:
        if self._done:
            return await self._receive()
        waiting = self._clock.waiting
        waiting[self] = asyncio.current_task()  # type: ignore[assignment]
        try:
            message = await self._receive()
        except asyncio.CancelledError:
            if not self.expired:
                raise
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()
            self.failure = RequestTimeout(
                f"The request body arrived too slowly (under {MIN_BODY_RATE_BYTES_S // KIB} KiB/s "
                f"after {self._clock.grace_s:g} s)")
            raise self.failure from None
        finally:
            del waiting[self]
        if message["type"] != "http.request":
            self._done = True
            return message
        self._received += len(message.get("body", b""))
        if self._received > self._cap:
            self.failure = too_large(self._cap)
            raise self.failure
        if not message.get("more_body", False):
            self._done = True
        return message


def size_label(size: int) -> str:
    """A byte count as the limits are written: 32 MiB, 64 KiB, 50 MB."""
    for unit, name in ((MIB, "MiB"), (KIB, "KiB"), (1000 * 1000, "MB")):
        if size % unit == 0:
            return f"{size // unit} {name}"
    return f"{size} bytes"


def too_large(cap: int, what: str = "Request body") -> PayloadTooLarge:
    """The 413 for a body (or an uploaded file) over `cap` bytes."""
    return PayloadTooLarge(f"{what} over the {size_label(cap)} limit of this route")


@dataclass
class _Guard:
    """Drops the app's own answer once the body was refused, so the refusal is what leaves."""

    send: Send
    body: LimitedBody
    started: bool = False

    async def __call__(self, message: Message) -> None:
        if self.body.failure is not None and not self.started:
            return
        if message["type"] == "http.response.start":
            self.started = True
        await self.send(message)


Authenticate = Callable[[str | None], Awaitable[KeyRecord]]


class BodyLimits:
    """ASGI middleware in front of the FastAPI routes: key first, then the body under its cap."""

    def __init__(self, app: Any, routes: list[BaseRoute], authenticate: Callable[[], Authenticate | None],
                 clock: BodyClock) -> None:
        self._app = app
        self._routes = routes
        self._authenticate = authenticate
        self._clock = clock

    def _needs_key(self, scope: Scope) -> bool:
        """A keyed /v1 route that takes a body: its key is checked before the body is read."""
        path = scope["path"]
        if scope["method"] not in _BODY_METHODS or not path.startswith("/v1/") or path in KEYLESS_ROUTES:
            return False
        # Only a route that exists: an unknown route stays a 404 and a wrong method a 405.
        return any(route.matches(scope)[0] is Match.FULL for route in self._routes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        path = scope["path"]
        authenticate = self._authenticate()
        try:
            if authenticate is not None and self._needs_key(scope):
                scope["inferd.key"] = await authenticate(header(scope, b"authorization"))
            cap = body_cap(path, header(scope, b"content-type"))
            length = declared_length(scope)
            if length is not None and length > cap:
                raise too_large(cap)
        except InferdError as exc:
            await send_error(send, exc, path)
            return
        body = LimitedBody(receive, cap, self._clock)
        guard = _Guard(send, body)
        try:
            await self._app(scope, body, guard)
        except Exception:
            if body.failure is None:
                raise
        if body.failure is not None and not guard.started:
            await send_error(send, body.failure, path)


async def read_json_object(scope: Scope, receive: Receive, cap: int, clock: BodyClock) -> dict[str, Any]:
    """The request body of a raw route parsed as a JSON object: 413 over `cap` bytes, 408 when it
    trickles in, 400 when it is not a JSON object."""
    length = declared_length(scope)
    if length is not None and length > cap:
        raise too_large(cap)
    body = LimitedBody(receive, cap, clock)
    message = await body()
    if message["type"] == "http.disconnect":
        raise ClientGone()
    raw = message.get("body", b"")
    if message.get("more_body"):
        chunks = [raw]
        while True:
            message = await body()
            if message["type"] == "http.disconnect":
                raise ClientGone()
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        raw = b"".join(chunks)
    try:
        parsed = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InvalidRequest(f"Malformed JSON body: {exc}", code="invalid_json") from None
    if not isinstance(parsed, dict):
        raise InvalidRequest("The request body must be a JSON object", code="invalid_json")
    return parsed


def preauthenticated(scope: Scope) -> KeyRecord | None:
    """The key `BodyLimits` checked for this request, if it did."""
    key: KeyRecord | None = scope.get("inferd.key")
    return key
