"""What one HTTP request did, for its metrics, its access log line and its `x-request-id`.

The app wraps every request: it picks the request id (the client's own when valid, else a new
one), puts a `RequestNote` in the `current` context variable, and adds `x-request-id` to the
response. Code that learns something worth logging writes it on the note where it learns it:
the authenticator (key and org), the call stage (model, deployment, tokens), the error mapping
(a refusal), and the HTTP engine reads the id from it to forward upstream. A context variable
rather than a parameter, because it crosses every layer (routes, services, engines) for a
concern none of them owns; the note is per request and never shared.
"""

from __future__ import annotations

import itertools
import os
import re
import time
from contextvars import ContextVar
from typing import Any, Awaitable, Callable

_VALID_ID = re.compile(rb"[A-Za-z0-9._-]{1,128}")
REQUEST_ID_HEADER = b"x-request-id"


class RequestNote:
    """One request's facts, filled in as it goes."""

    __slots__ = ("request_id", "started", "status", "key_id", "org", "model", "deployment", "prompt_tokens",
                 "completion_tokens", "rejection", "rate", "cache", "trace")

    def __init__(self, request_id: str, started: float) -> None:
        self.request_id = request_id
        self.started = started
        self.status = 0
        self.key_id: str | None = None
        self.org: str | None = None
        self.model = ""  # the canonical id of the model the request resolved; "" when none
        self.deployment: str | None = None
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.rejection: str | None = None
        self.rate: Any = None  # the windows' state (limits/base.py RateState): the x-ratelimit-* headers
        self.cache: list[tuple[bytes, bytes]] | None = None  # the response cache's headers (x-inferd-cache, age)
        self.trace: Any = None  # the request's server span (tracing/spans.py ServerSpan); None: not traced

    def metered(self, model: str, deployment: str, prompt: int, completion: int) -> None:
        """A metered call of this request ended (a generate turn may make several)."""
        self.model = model
        self.deployment = deployment
        self.prompt_tokens += prompt
        self.completion_tokens += completion


current: ContextVar[RequestNote | None] = ContextVar("inferd_request", default=None)


def current_request_id() -> str | None:
    """The id of the request being served, when there is one (not in the batch worker)."""
    note = current.get()
    return note.request_id if note is not None else None


class RequestIds:
    """New request ids: a random per-process prefix and a counter, unique across replicas and
    workers, and cheaper than a UUID on every request."""

    def __init__(self) -> None:
        self._prefix = os.urandom(6).hex()
        self._count = itertools.count(1)

    def pick(self, headers: list[tuple[bytes, bytes]]) -> str:
        """The client's `x-request-id` when it is 1 to 128 of [A-Za-z0-9._-], else a new id."""
        for name, value in headers:
            if name == REQUEST_ID_HEADER:
                if _VALID_ID.fullmatch(value):
                    return value.decode("ascii")
                break
        return f"{self._prefix}{next(self._count):x}"


Send = Callable[[dict[str, Any]], Awaitable[None]]


def note_request(scope: dict[str, Any], ids: RequestIds) -> RequestNote:
    """A note for a new request."""
    return RequestNote(ids.pick(scope["headers"]), time.perf_counter())


def response_start(status: int, headers: list[tuple[bytes, bytes]]) -> dict[str, Any]:
    """The `http.response.start` message of a raw-ASGI (hot) route: with `x-request-id`, its status
    kept on the request's note. The hot routes start their responses here rather than through
    `stamped`, which would add a coroutine to every message a stream sends."""
    note = current.get()
    if note is None:
        return {"type": "http.response.start", "status": status, "headers": headers}
    note.status = status
    extra = [(REQUEST_ID_HEADER, note.request_id.encode("ascii"))]
    if note.rate is not None:
        extra += note.rate.headers()
    if note.cache is not None:
        extra += note.cache
    return {"type": "http.response.start", "status": status, "headers": [*headers, *extra]}


def stamped(send: Send, note: RequestNote) -> Send:
    """`send` that adds `x-request-id` to the response and keeps its status on the note (the
    FastAPI routes'; a start from `response_start` already has both)."""
    request_id = note.request_id.encode("ascii")

    async def send_stamped(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start" and not note.status:
            note.status = message["status"]
            message["headers"] = [*message.get("headers", ()), (REQUEST_ID_HEADER, request_id),
                                  *(note.rate.headers() if note.rate is not None else ()), *(note.cache or ())]
        await send(message)

    return send_stamped
