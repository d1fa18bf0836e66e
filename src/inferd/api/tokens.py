"""POST /v1/chat/count_tokens: free, unmetered, equal to the prompt tokens a completion bills."""

from __future__ import annotations

from typing import Any

import orjson

from inferd.api.asgi import JSON_HEADERS, Receive, Scope, Send, send_bytes
from inferd.api.hot import JsonRoute, affinity_of
from inferd.auth.key_record import KeyRecord
from inferd.auth.principal import Authenticator
from inferd.calls.stage import CallStage
from inferd.catalogue import CHAT_TYPES, Deployment, Model, ModelCatalogue
from inferd.engines.base import ChatEngine, TokenCount
from inferd.limits.base import Limits
from inferd.protocol.chat import check_count_tokens
from inferd.services.chat import apply_thinking


class CountTokensRoute(JsonRoute):
    """validate -> rate limit (no budget) -> catalogue -> call stage (unmetered) -> the engine's tokenizer."""

    def __init__(self, auth: Authenticator, limits: Limits, catalogue: ModelCatalogue, stage: CallStage) -> None:
        super().__init__(auth, limits)
        self._catalogue = catalogue
        self._stage = stage

    async def handle(self, key: KeyRecord, body: dict[str, Any], scope: Scope, receive: Receive,
                     send: Send) -> None:
        """Count the prompt the way a completion of the same request would be billed."""
        check_count_tokens(body)
        await self.limits.admit(key, metered=False)
        model = self._catalogue.resolve(body["model"], key)
        model.require_type(CHAT_TYPES, "token counting")
        # The same payload a completion would send, so the count equals the billed prompt.
        payload: dict[str, Any] = {"messages": body["messages"]}
        if body.get("tools"):
            payload["tools"] = body["tools"]
        if body.get("reasoning_effort") is not None:
            payload["reasoning_effort"] = body["reasoning_effort"]
        apply_thinking(model, payload)

        async def attempt(engine: ChatEngine, deployment: Deployment, answering: Model) -> TokenCount:
            upstream = deployment.config.upstream_model or deployment.config.id
            return await engine.count_tokens({**payload, "model": upstream})

        count = await self._stage.unmetered(model, ChatEngine, key, attempt, affinity=affinity_of(scope, body)
                                            if model.config.routing == "affinity" else None)
        headers = JSON_HEADERS if count.exact else [*JSON_HEADERS, (b"x-inferd-token-count", b"estimate")]
        await send_bytes(send, 200, orjson.dumps({"input_tokens": count.input_tokens,
                                                   "context_window": count.context_window}), headers)
