"""POST /v1/messages and /v1/messages/count_tokens: Anthropic's Messages API on every chat model,
raw ASGI handlers of the hot path.

A request is translated into a chat completion (`dialects/messages_mapping.py`) and walks the
chat corridor itself: limits, `ChatService` (catalogue, context fit, call stage with failover,
one usage row in workspace `chat`), then the reply or the stream is translated back. Errors leave
in Anthropic's envelope, `{type: "error", error: {type, message}}`.
"""

from __future__ import annotations

from typing import Any

import orjson

from inferd.api.asgi import JSON_HEADERS, Receive, Scope, Send, header, note_rejection, send_bytes
from inferd.api.hot import JsonRoute, affinity_of
from inferd.api.sse_relay import cache_hits_counted, relay_sse
from inferd.auth.key_record import KeyRecord
from inferd.auth.principal import Authenticator
from inferd.catalogue import ModelCatalogue
from inferd.dialects.messages_mapping import error_envelope, from_chat, thinking_on, to_chat, usage_of
from inferd.dialects.messages_stream import MessageStream
from inferd.errors import InferdError
from inferd.limits.base import Limits
from inferd.services.chat import ChatService
from inferd.services.chat_call import ChatCall


class AnthropicRoute(JsonRoute):
    """A hot route of the Anthropic dialect: the key also comes in `x-api-key`, errors in its envelope."""

    def __init__(self, auth: Authenticator, limits: Limits, chat: ChatService) -> None:
        super().__init__(auth, limits)
        self._chat = chat

    def credentials(self, scope: Scope) -> str | None:
        """`x-api-key` (Anthropic's header) when sent, else `Authorization: Bearer`."""
        api_key = header(scope, b"x-api-key")
        return header(scope, b"authorization") if api_key is None else "Bearer " + api_key

    async def refuse(self, send: Send, exc: InferdError) -> None:
        """The error in Anthropic's envelope, with the error's headers (Retry-After, Connection)."""
        note_rejection(exc)
        headers = [*JSON_HEADERS, *((k.lower().encode(), v.encode()) for k, v in exc.headers.items())]
        await send_bytes(send, exc.status, orjson.dumps(error_envelope(exc)), headers)

    def _open(self, key: KeyRecord, chat_body: dict[str, Any], scope: Scope) -> ChatCall:
        call = self._chat.open(chat_body, key)
        if call.affinity is None and call.model.config.routing == "affinity":
            call.affinity = affinity_of(scope, chat_body)
        return call


class MessagesRoute(AnthropicRoute):
    """translate -> limits -> chat corridor (catalogue, context, call stage, metering) -> translate back."""

    def __init__(self, auth: Authenticator, limits: Limits, chat: ChatService, catalogue: ModelCatalogue) -> None:
        super().__init__(auth, limits, chat)
        self._catalogue = catalogue

    async def handle(self, key: KeyRecord, body: dict[str, Any], scope: Scope, receive: Receive,
                     send: Send) -> None:
        """A message, blocking or streamed."""
        chat_body = to_chat(body)
        await self.limits.admit(key, metered=True)
        call = self._open(key, chat_body, scope)
        if self._chat.cache is not None:  # the response cache: its entry is looked up before any engine
            await self._chat.use_cache(call, scope["headers"])
        await self._chat.fit_context(call)
        if chat_body.get("stream"):
            counts = cache_hits_counted(self._catalogue, call, key)
            stream = MessageStream(thinking_on(chat_body), counts, call.prompt_count)
            await relay_sse(self._chat.chunk_batches(call), stream, receive, send)
            return
        reply = await self._chat.complete(call)
        usage = reply.usage
        message = from_chat(reply.value, usage_of(usage.prompt_tokens, usage.completion_tokens,
                                                  usage.cached_prompt_tokens), thinking=thinking_on(chat_body))
        await send_bytes(send, 200, orjson.dumps(message), JSON_HEADERS)


class MessagesCountTokensRoute(AnthropicRoute):
    """translate -> rate limit (no budget) -> chat service (catalogue, call stage unmetered, the
    engine's tokenizer), as /v1/chat/count_tokens counts."""

    async def handle(self, key: KeyRecord, body: dict[str, Any], scope: Scope, receive: Receive,
                     send: Send) -> None:
        """`{input_tokens}`: the prompt tokens a message of the same request is billed."""
        chat_body = to_chat(body, counting=True)
        await self.limits.admit(key, metered=False)
        # The payload a completion would send upstream, so the count is the billed prompt.
        count = await self._chat.token_count(self._open(key, chat_body, scope))
        headers = JSON_HEADERS if count.exact else [*JSON_HEADERS, (b"x-inferd-token-count", b"estimate")]
        await send_bytes(send, 200, orjson.dumps({"input_tokens": count.input_tokens}), headers)
