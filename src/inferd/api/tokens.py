"""POST /v1/chat/count_tokens: free, unmetered, equal to the prompt tokens a completion bills."""

from __future__ import annotations

import logging

import orjson

from inferd.api.asgi import (JSON_HEADERS, ClientGone, Receive, Scope, Send, header, read_json_object,
                             require_post, send_bytes, send_error)
from inferd.api.checks import check_count_tokens
from inferd.auth.principal import Authenticator, require_long_lived
from inferd.catalogue import CHAT_TYPES, ModelCatalogue
from inferd.errors import InferdError
from inferd.limits.base import Limits
from inferd.services.chat import apply_thinking

log = logging.getLogger("inferd.api.tokens")
MAX_BODY_BYTES = 32 * 1024 * 1024


class CountTokensRoute:
    """auth -> validate -> rate limit (no budget) -> catalogue -> the engine's tokenizer."""

    def __init__(self, auth: Authenticator, limits: Limits, catalogue: ModelCatalogue) -> None:
        self._auth = auth
        self._limits = limits
        self._catalogue = catalogue

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            require_post(scope)
            key = await self._auth.authenticate(header(scope, b"authorization"))
            require_long_lived(key)
            body = await read_json_object(scope, receive, MAX_BODY_BYTES)
            check_count_tokens(body)
            await self._limits.admit(key, metered=False)
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
        except InferdError as exc:
            await send_error(send, exc)
            return
        except ClientGone:
            return
        except Exception:
            log.exception("token count failed")
            await send_error(send, InferdError("Internal server error"))
            return
        headers = JSON_HEADERS if count.exact else [*JSON_HEADERS, (b"x-inferd-token-count", b"estimate")]
        await send_bytes(send, 200, orjson.dumps({"input_tokens": count.input_tokens,
                                                   "context_window": count.context_window}), headers)
