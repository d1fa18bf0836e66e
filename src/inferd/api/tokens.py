"""POST /v1/chat/count_tokens: free, unmetered, equal to the prompt tokens a completion bills."""

from __future__ import annotations

from typing import Any

import orjson

from inferd.api.asgi import JSON_HEADERS, Receive, Send, send_bytes
from inferd.api.checks import check_count_tokens
from inferd.api.hot import JsonRoute
from inferd.auth.principal import Authenticator
from inferd.catalogue import CHAT_TYPES, ModelCatalogue
from inferd.limits.base import Limits
from inferd.services.chat import apply_thinking
from inferd.store.keys import KeyRecord


class CountTokensRoute(JsonRoute):
    """validate -> rate limit (no budget) -> catalogue -> the engine's tokenizer."""

    def __init__(self, auth: Authenticator, limits: Limits, catalogue: ModelCatalogue) -> None:
        super().__init__(auth, limits)
        self._catalogue = catalogue

    async def handle(self, key: KeyRecord, body: dict[str, Any], receive: Receive, send: Send) -> None:
        """Count the prompt the way a completion of the same request would be billed."""
        check_count_tokens(body)
        await self.limits.admit(key, metered=False)
        deployment = self._catalogue.resolve(body["model"], key)
        deployment.require_type(CHAT_TYPES, "token counting")
        # The same payload a completion would send, so the count equals the billed prompt.
        payload = {"model": deployment.config.upstream_model or deployment.id, "messages": body["messages"]}
        if body.get("tools"):
            payload["tools"] = body["tools"]
        if body.get("reasoning_effort") is not None:
            payload["reasoning_effort"] = body["reasoning_effort"]
        apply_thinking(deployment, payload)
        count = await deployment.engine.count_tokens(payload)
        headers = JSON_HEADERS if count.exact else [*JSON_HEADERS, (b"x-inferd-token-count", b"estimate")]
        await send_bytes(send, 200, orjson.dumps({"input_tokens": count.input_tokens,
                                                   "context_window": count.context_window}), headers)
