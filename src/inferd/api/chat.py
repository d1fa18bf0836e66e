"""POST /v1/chat/completions: a raw ASGI handler (the hot path), blocking and SSE streaming."""

from __future__ import annotations

import asyncio
import logging

import orjson

from inferd.api.asgi import (JSON_HEADERS, SSE_HEADERS, ClientGone, Receive, Scope, Send, header,
                             read_json_object, require_post, send_bytes, send_error, watch_disconnect)
from inferd.api.checks import check_chat, check_metadata
from inferd.auth.principal import Authenticator, require_long_lived
from inferd.errors import InferdError
from inferd.limits.base import Limits
from inferd.services.chat import ChatService

log = logging.getLogger("inferd.api.chat")
MAX_BODY_BYTES = 32 * 1024 * 1024


class ChatCompletionsRoute:
    """auth -> validate -> limits -> catalogue -> engine -> metering, then the reply."""

    def __init__(self, auth: Authenticator, limits: Limits, chat: ChatService) -> None:
        self._auth = auth
        self._limits = limits
        self._chat = chat

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            require_post(scope)
            key = await self._auth.authenticate(header(scope, b"authorization"))
            require_long_lived(key)
            body = await read_json_object(scope, receive, MAX_BODY_BYTES)
            check_chat(body)
            metadata = check_metadata(body.get("metadata"))
            await self._limits.admit(key, metered=True)
            call = self._chat.open(body, key, metadata=metadata)
            await self._chat.fit_context(call)
            if not call.payload.get("stream"):
                reply = await self._chat.complete(call)
                await send_bytes(send, 200, orjson.dumps(reply), JSON_HEADERS)
                return
        except InferdError as exc:
            await send_error(send, exc)
            return
        except ClientGone:
            return
        except Exception:
            log.exception("chat completion failed")
            await send_error(send, InferdError("Internal server error"))
            return
        await self._stream(call, receive, send)

    async def _stream(self, call: object, receive: Receive, send: Send) -> None:
        frames = self._chat.stream(call)  # type: ignore[arg-type]
        task = asyncio.current_task()
        assert task is not None
        watcher = watch_disconnect(receive, task)
        try:
            try:
                first = await frames.__anext__()
            except InferdError as exc:
                watcher.cancel()
                await send_error(send, exc)
                return
            except Exception:
                log.exception("chat stream failed before its first chunk")
                watcher.cancel()
                await send_error(send, InferdError("Internal server error"))
                return
            await send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
            await send({"type": "http.response.body", "body": first, "more_body": True})
            try:
                async for frame in frames:
                    await send({"type": "http.response.body", "body": frame, "more_body": True})
            except Exception:  # e.g. the usage row could not be committed: no [DONE] then
                log.exception("chat stream failed")
                error = InferdError("Internal server error").envelope()
                await send({"type": "http.response.body", "body": b"data: " + orjson.dumps(error) + b"\n\n",
                            "more_body": True})
            watcher.cancel()
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except asyncio.CancelledError:
            # The client disconnected: closing the frames aborts the upstream and bills what was made.
            if watcher.done() and not watcher.cancelled():
                task.uncancel()
                await frames.aclose()  # type: ignore[attr-defined]
                return
            raise
        finally:
            watcher.cancel()
