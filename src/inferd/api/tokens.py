"""POST /v1/chat/count_tokens: free, unmetered, equal to the prompt tokens a completion bills."""

from __future__ import annotations

from typing import Any, Awaitable, Iterable

import orjson

from inferd.api.asgi import JSON_HEADERS, Send, send_bytes
from inferd.api.hot import ServiceRoute
from inferd.auth.key_record import KeyRecord
from inferd.protocol.chat import check_count_tokens
from inferd.services.chat import ChatService

ESTIMATE_HEADERS = [*JSON_HEADERS, (b"x-inferd-token-count", b"estimate")]  # the engine could only estimate


class CountTokensRoute(ServiceRoute[ChatService]):
    """check -> rate limit (no budget) -> chat service: catalogue, call stage (unmetered), the
    engine's tokenizer."""

    metered = False
    check = staticmethod(check_count_tokens)

    def answer(self, key: KeyRecord, body: dict[str, Any], headers: Iterable[tuple[bytes, bytes]]) -> Awaitable[Any]:
        """Count the prompt the way a completion of the same request would be billed."""
        return self.service.token_count(self.service.open_count(body, key, headers))

    def reply(self, send: Send, answer: Any) -> Awaitable[None]:
        """`{input_tokens, context_window}`, marked when it is an estimate."""
        return send_bytes(send, 200, orjson.dumps({"input_tokens": answer.input_tokens,
                                                   "context_window": answer.context_window}),
                          JSON_HEADERS if answer.exact else ESTIMATE_HEADERS)
