"""/v1/responses: OpenAI's Responses API on every chat model.

POST is a raw ASGI handler of the hot path: the request is translated into a chat completion
(`dialects/responses_mapping.py`) and walks the chat corridor itself: limits, `ChatService`
(catalogue, context fit, call stage with failover, one usage row in workspace `chat` with the
request's `metadata`), then the reply or the stream is translated back and, with `store` (the
default), kept for the key. GET and DELETE of a stored response are FastAPI routes.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Callable

import orjson
from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response

from inferd.api.asgi import (JSON_HEADERS, SSE_HEADERS, DisconnectWatch, Receive, Scope, Send, response_start, send_bytes,
                             send_error)
from inferd.api.deps import long_lived_key, services
from inferd.api.hot import JsonRoute, affinity_of
from inferd.auth.key_record import KeyRecord
from inferd.auth.principal import Authenticator
from inferd.catalogue import ModelCatalogue
from inferd.dialects.responses_mapping import Translated, continue_from, from_chat, reasoning_tokens, to_chat, usage_of
from inferd.dialects.responses_stream import ResponseStream
from inferd.errors import InferdError
from inferd.limits.base import Limits
from inferd.protocol.responses import DeletedResponse, ResponseObject
from inferd.services.chat import ChatCall, ChatService
from inferd.services.responses import History, ResponsesService

log = logging.getLogger("inferd.api.responses")
router = APIRouter(tags=["responses"])


class ResponsesRoute(JsonRoute):
    """translate -> limits -> earlier turns -> chat corridor -> translate back -> store."""

    def __init__(self, auth: Authenticator, limits: Limits, chat: ChatService, catalogue: ModelCatalogue,
                 responses: ResponsesService) -> None:
        super().__init__(auth, limits)
        self._chat = chat
        self._catalogue = catalogue
        self._responses = responses

    async def handle(self, key: KeyRecord, body: dict[str, Any], scope: Scope, receive: Receive,
                     send: Send) -> None:
        """A response, blocking or streamed."""
        translated = to_chat(body)
        await self.limits.admit(key, metered=True)
        history = await self._responses.history(key, body.get("previous_response_id"))
        continue_from(translated, history.items)
        call = self._chat.open(translated.chat, key, metadata=translated.metadata)
        if call.affinity is None and call.model.config.routing == "affinity":
            call.affinity = affinity_of(scope, translated.chat)
        await self._chat.fit_context(call)
        if translated.chat.get("stream"):
            await self._stream(call, key, translated, history, receive, send)
            return
        reply = await self._chat.complete(call)
        usage = reply.usage
        response = from_chat(reply.value, usage_of(usage.prompt_tokens, usage.completion_tokens,
                                                   usage.cached_prompt_tokens,
                                                   reasoning_tokens(reply.value.get("usage"))), translated)
        await self._responses.keep(key, translated, history, response)
        await send_bytes(send, 200, orjson.dumps(response), JSON_HEADERS)

    def _cached_counts(self, call: ChatCall, key: KeyRecord) -> Callable[[str], bool]:
        """Whether the model that answered (the one asked, or a fallback) reports prefix-cache hits."""
        def counts(model_id: str) -> bool:
            for model in (call.model, *self._catalogue.fallbacks(call.model, key)):
                if model.id == model_id:
                    return model.config.prefix_cache
            return call.model.config.prefix_cache
        return counts

    async def _stream(self, call: ChatCall, key: KeyRecord, translated: Translated, history: History,
                      receive: Receive, send: Send) -> None:
        batches = self._chat.chunk_batches(call)
        stream = ResponseStream(translated, self._cached_counts(call, key))
        task = asyncio.current_task()
        assert task is not None
        watcher = DisconnectWatch(receive, task)
        try:
            try:
                first, *rest = await batches.__anext__()
            except InferdError as exc:
                watcher.cancel()
                await send_error(send, exc)
                return
            await send(response_start(200, SSE_HEADERS))
            opening = stream.start(orjson.loads(first))
            await send({"type": "http.response.body", "body": opening + stream.feed_all(rest), "more_body": True})
            try:
                async for batch in batches:  # one write per batch of chunks that arrived together
                    events = stream.feed_all(batch)
                    if events:
                        await send({"type": "http.response.body", "body": events, "more_body": True})
                tail = stream.finish()
                if stream.response is not None:  # stored before the last event: a GET after it finds it
                    await self._responses.keep(key, translated, history, stream.response)
            except Exception:  # e.g. the usage row could not be committed: no response.completed then
                log.exception("responses stream failed")
                tail = stream.fail("Internal server error")
            watcher.cancel()
            await send({"type": "http.response.body", "body": tail, "more_body": False})
        except asyncio.CancelledError:
            # The client disconnected: closing the batches aborts the upstream and bills what was made.
            if watcher.fired:
                task.uncancel()
                await batches.aclose()  # type: ignore[attr-defined]
                return
            raise
        finally:
            watcher.cancel()


# The stored object goes out as it was stored, not re-validated through the documenting model.
@router.get("/v1/responses/{response_id}", response_class=Response, responses={200: {"model": ResponseObject}})
async def get_response(request: Request, response_id: str, key: KeyRecord = Depends(long_lived_key)) -> Response:
    """A response this key stored (404 for another key's, as for none)."""
    stored = await services(request).responses.get(key, response_id)
    return Response(orjson.dumps(stored), media_type="application/json")


@router.delete("/v1/responses/{response_id}", response_model=DeletedResponse)
async def delete_response(request: Request, response_id: str,
                          key: KeyRecord = Depends(long_lived_key)) -> dict[str, Any]:
    """Delete a response this key stored."""
    await services(request).responses.delete(key, response_id)
    return {"id": response_id, "object": "response", "deleted": True}
