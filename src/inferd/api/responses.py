"""/v1/responses: OpenAI's Responses API on every chat model.

POST is a raw ASGI handler of the hot path: the request is translated into a chat completion
(`dialects/responses_mapping.py`) and walks the chat corridor itself: limits, `ChatService`
(catalogue, context fit, call stage with failover, one usage row in workspace `chat` with the
request's `metadata`), then the reply or the stream is translated back and, with `store` (the
default), kept for the key. GET and DELETE of a stored response are FastAPI routes.
"""

from __future__ import annotations

from typing import Any, Callable

import orjson
from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response

from inferd.api.asgi import JSON_HEADERS, Receive, Scope, Send, send_bytes
from inferd.api.deps import long_lived_key, services
from inferd.api.hot import JsonRoute, affinity_of
from inferd.api.sse_relay import cache_hits_counted, relay_sse
from inferd.auth.key_record import KeyRecord
from inferd.auth.principal import Authenticator
from inferd.catalogue import ModelCatalogue
from inferd.dialects.responses_mapping import Translated, continue_from, from_chat, reasoning_tokens, to_chat, usage_of
from inferd.dialects.responses_stream import ResponseStream
from inferd.limits.base import Limits
from inferd.protocol.responses import DeletedResponse, ResponseObject
from inferd.services.chat import ChatService
from inferd.services.responses import History, ResponsesService

router = APIRouter(tags=["responses"])


class _KeptStream(ResponseStream):
    """A streamed response that is kept for the key (with `store`): stored before its last event
    leaves, so that a GET after that event finds it."""

    __slots__ = ("_responses", "_key", "_history")

    def __init__(self, translated: Translated, cached_counts: Callable[[str], bool], responses: ResponsesService,
                 key: KeyRecord, history: History) -> None:
        super().__init__(translated, cached_counts)
        self._responses = responses
        self._key = key
        self._history = history

    async def settle(self) -> None:
        """Keep the final response (the relay awaits this between `finish` and the last event)."""
        if self.response is not None:
            await self._responses.keep(self._key, self._translated, self._history, self.response)


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
        if self._chat.cache is not None:  # the response cache: its entry is looked up before any engine
            await self._chat.use_cache(call, scope["headers"])
        await self._chat.fit_context(call)
        if translated.chat.get("stream"):
            counts = cache_hits_counted(self._catalogue, call, key)
            stream = _KeptStream(translated, counts, self._responses, key, history)
            await relay_sse(self._chat.chunk_batches(call), stream, receive, send)
            return
        reply = await self._chat.complete(call)
        usage = reply.usage
        response = from_chat(reply.value, usage_of(usage.prompt_tokens, usage.completion_tokens,
                                                   usage.cached_prompt_tokens,
                                                   reasoning_tokens(reply.value.get("usage"))), translated)
        await self._responses.keep(key, translated, history, response)
        await send_bytes(send, 200, orjson.dumps(response), JSON_HEADERS)


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
