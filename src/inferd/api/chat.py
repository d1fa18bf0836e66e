"""POST /v1/chat/completions: a raw ASGI handler (the hot path), blocking and SSE streaming."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import orjson

from inferd.api.asgi import (JSON_HEADERS, SSE_HEADERS, DisconnectWatch, Receive, Scope, Send, response_start, send_bytes,
                             send_error)
from inferd.api.hot import JsonRoute, affinity_of
from inferd.auth.key_record import KeyRecord
from inferd.auth.principal import Authenticator
from inferd.errors import InferdError
from inferd.limits.base import Limits
from inferd.protocol.chat import check_chat
from inferd.protocol.checks import check_metadata
from inferd.services.chat import DONE_FRAME, ChatCall, ChatService

log = logging.getLogger("inferd.api.chat")


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
        await self._chat.fit_context(call)
        if call.payload.get("stream"):
            await self._stream(call, receive, send)
        else:
            reply = await self._chat.complete(call)
            await send_bytes(send, 200, orjson.dumps(reply.value), JSON_HEADERS)

    async def _stream(self, call: ChatCall, receive: Receive, send: Send) -> None:
        frames = self._chat.stream(call)
        task = asyncio.current_task()
        assert task is not None
        watcher = DisconnectWatch(receive, task)
        try:
            try:
                first = await frames.__anext__()
            except InferdError as exc:
                watcher.cancel()
                await send_error(send, exc)
                return
            await send(response_start(200, SSE_HEADERS))
            frame = first
            try:
                while not frame.endswith(DONE_FRAME):
                    await send({"type": "http.response.body", "body": frame, "more_body": True})
                    frame = await frames.__anext__()
            except StopAsyncIteration:  # ended without [DONE] (its error frame was the last)
                frame = b""
            except Exception:  # e.g. the usage row could not be committed: no [DONE] then
                log.exception("chat stream failed")
                error = InferdError("Internal server error").envelope()
                frame = b"data: " + orjson.dumps(error) + b"\n\n"
            watcher.cancel()
            # The end of the body goes with the last frame: one write, not two.
            await send({"type": "http.response.body", "body": frame, "more_body": False})
            await frames.aclose()  # type: ignore[attr-defined]  # past [DONE]: frees the slot now
        except asyncio.CancelledError:
            # The client disconnected: closing the frames aborts the upstream and bills what was made.
            if watcher.fired:
                task.uncancel()
                await frames.aclose()  # type: ignore[attr-defined]
                return
            raise
        finally:
            watcher.cancel()
