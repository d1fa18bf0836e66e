"""The base of the raw-ASGI JSON routes (the hot path): POST only, a long-lived key, a JSON
object body, and every error mapped to the envelope in one place."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Awaitable, Generic, Iterable, TypeVar

import orjson

from inferd.api.asgi import JSON_HEADERS, ClientGone, Receive, Scope, Send, header, require_post, send_bytes, send_error
from inferd.api.body_limits import HOT_BODY_BYTES, BodyClock, read_json_object
from inferd.auth.key_record import KeyRecord
from inferd.auth.principal import Authenticator, require_long_lived
from inferd.calls.route import session_key
from inferd.errors import InferdError, refused_text
from inferd.limits.base import Limits

if TYPE_CHECKING:
    from inferd.tracing.spans import Tracing

log = logging.getLogger("inferd.api")
S = TypeVar("S")


def affinity_of(scope: Scope, body: dict[str, Any]) -> str | None:
    """The routing key of `affinity` pools (calls/route.py `session_key`): the body's `user`, else
    the `x-session-affinity` header. For a caller that knows the model routes by affinity."""
    return session_key(body.get("user"), headers=scope["headers"])


class JsonRoute:
    """Authenticates, reads the body, and hands both to `handle`."""

    def __init__(self, auth: Authenticator, limits: Limits) -> None:
        self.auth = auth
        self.limits = limits
        self.body_clock = BodyClock()  # the app hands every route its one clock (`[limits] body_timeout_s`)
        self.tracing: Tracing | None = None  # the app's, when `[tracing]` is on: told what the body asks

    async def handle(self, key: KeyRecord, body: dict[str, Any], scope: Scope, receive: Receive,
                     send: Send) -> None:
        """Answer the request (a subclass's work). Raise InferdError before the response starts;
        a route that streams handles its own errors once it has started."""
        raise NotImplementedError

    def credentials(self, scope: Scope) -> str | None:
        """The `Authorization` value the key is read from (a dialect may also take it elsewhere)."""
        return header(scope, b"authorization")

    async def refuse(self, send: Send, exc: InferdError) -> None:
        """Answer an error in the route's envelope."""
        await send_error(send, exc)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            require_post(scope)
            key = await self.auth.authenticate(self.credentials(scope))
            require_long_lived(key)
            body = await read_json_object(scope, receive, HOT_BODY_BYTES, self.body_clock)
            if self.tracing is not None:
                self.tracing.request_body(body, key)
            await self.handle(key, body, scope, receive, send)
        except InferdError as exc:
            await self.refuse(send, exc)
        except ClientGone:
            return
        except Exception as exc:
            refused = refused_text(exc)  # a client's NUL character, which PostgreSQL cannot hold: 400
            if refused is None:
                log.exception("%s failed", scope["path"])
            await self.refuse(send, refused or InferdError("Internal server error"))


class ServiceRoute(JsonRoute, Generic[S]):
    """A hot route that only speaks the wire: it checks the request, takes its place in the key's
    limits, and hands the rest to its service (the model, the upstream request, the call stage, the
    reply), whose answer it sends as JSON. Subclasses name the check, the service's method and,
    where the answer needs more than `orjson`, how it is sent."""

    metered = True  # counted against the key's budget too, not only its rate windows

    def __init__(self, auth: Authenticator, limits: Limits, service: S) -> None:
        super().__init__(auth, limits)
        self.service = service

    def check(self, body: dict[str, Any]) -> None:
        """400 for a request the wire schema refuses (before the limits: a refused request takes no slot)."""
        raise NotImplementedError

    def answer(self, key: KeyRecord, body: dict[str, Any], headers: Iterable[tuple[bytes, bytes]]) -> Awaitable[Any]:
        """The service's answer to a checked, admitted request (its coroutine, awaited by `handle`:
        no extra frame per request)."""
        raise NotImplementedError

    def reply(self, send: Send, answer: Any) -> Awaitable[None]:
        """Send the answer: 200, JSON."""
        return send_bytes(send, 200, orjson.dumps(answer), JSON_HEADERS)

    async def handle(self, key: KeyRecord, body: dict[str, Any], scope: Scope, receive: Receive,
                     send: Send) -> None:
        """check -> limits -> service -> reply."""
        self.check(body)
        await self.limits.admit(key, metered=self.metered)
        await self.reply(send, await self.answer(key, body, scope["headers"]))
