"""POST /v1/chat/completions: a raw ASGI handler (the hot path), blocking and SSE streaming."""

from __future__ import annotations

from typing import Any

import orjson

from inferd.api.asgi import JSON_HEADERS, Receive, Scope, Send, send_bytes
from inferd.api.hot import JsonRoute, affinity_of
from inferd.api.sse_relay import relay_sse
from inferd.auth.key_record import KeyRecord
from inferd.auth.principal import Authenticator
from inferd.errors import InferdError
from inferd.limits.base import Limits
from inferd.protocol.chat import check_chat
from inferd.protocol.checks import check_metadata
from inferd.services.chat import ChatService


class _ChatFrames:
    """The chat dialect's side of the SSE relay: `ChatService.stream`'s frames are sent as they
    come (no call per frame), `data: [DONE]` ending the last."""

    __slots__ = ()

    dialect = "chat"
    feed_all = None  # the frames are SSE already
    settle = None

    def opening(self, first: bytes) -> bytes:
        """The first frame as it is (the relay does not call this: `feed_all` is None)."""
        return first

    def finish(self) -> bytes:
        """Nothing: frames that end without `[DONE]` ended with their error frame."""
        return b""

    def fail(self, message: str) -> bytes:
        """An error frame (no `[DONE]` after it)."""
        return b"data: " + orjson.dumps(InferdError(message).envelope()) + b"\n\n"


_CHAT_FRAMES = _ChatFrames()  # stateless: one for every stream


class ChatCompletionsRoute(JsonRoute):
    """validate -> limits -> catalogue -> call stage (deployment, failover, metering), then the reply."""

    def __init__(self, auth: Authenticator, limits: Limits, chat: ChatService) -> None:
        super().__init__(auth, limits)
        self._chat = chat

    async def handle(self, key: KeyRecord, body: dict[str, Any], scope: Scope, receive: Receive,
                     send: Send) -> None:
        """A completion, blocking or streamed."""
        check_chat(body)
        metadata = check_metadata(body.get("metadata"))
        await self.limits.admit(key, metered=True)
        call = self._chat.open(body, key, metadata=metadata)
        if call.affinity is None and call.model.config.routing == "affinity":
            call.affinity = affinity_of(scope, body)
        if self._chat.cache is not None:  # the response cache: its entry is looked up before any engine
            await self._chat.use_cache(call, scope["headers"])
        await self._chat.fit_context(call)
        if call.payload.get("stream"):
            await relay_sse(self._chat.stream(call), _CHAT_FRAMES, receive, send)
        else:
            reply = await self._chat.complete(call)
            await send_bytes(send, 200, orjson.dumps(reply.value), JSON_HEADERS)
