"""The base of the raw-ASGI JSON routes (the hot path): POST only, a long-lived key, a JSON
object body, and every error mapped to the envelope in one place."""

from __future__ import annotations

import logging
from typing import Any

from inferd.api.asgi import ClientGone, Receive, Scope, Send, header, require_post, send_error
from inferd.api.body_limits import HOT_BODY_BYTES, BodyClock, read_json_object
from inferd.auth.key_record import KeyRecord
from inferd.auth.principal import Authenticator, require_long_lived
from inferd.errors import InferdError, refused_text
from inferd.limits.base import Limits

log = logging.getLogger("inferd.api")


def affinity_of(scope: Scope, body: dict[str, Any]) -> str | None:
    """The routing key of `affinity` pools: the body's `user`, else the `x-session-affinity` header."""
    user = body.get("user")
    if isinstance(user, str) and user:
        return user
    return header(scope, b"x-session-affinity") or None


class JsonRoute:
    """Authenticates, reads the body, and hands both to `handle`."""

    def __init__(self, auth: Authenticator, limits: Limits) -> None:
        self.auth = auth
        self.limits = limits
        self.body_clock = BodyClock()  # the app hands every route its one clock (`[limits] body_timeout_s`)

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
