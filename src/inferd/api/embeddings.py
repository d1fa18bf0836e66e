"""POST /v1/embeddings: a raw ASGI handler (hot path). Only `model` is validated; the rest goes
to the engine. Priced on input tokens only."""

from __future__ import annotations

import base64
from typing import Any

import numpy as np
import orjson

from inferd.api.asgi import JSON_HEADERS, Receive, Scope, Send, send_bytes
from inferd.api.hot import JsonRoute, affinity_of
from inferd.auth.key_record import KeyRecord
from inferd.auth.principal import Authenticator
from inferd.calls.stage import Answer, Billing, CallStage
from inferd.catalogue import Deployment, Model, ModelCatalogue
from inferd.engines.base import EmbeddingEngine
from inferd.errors import InvalidRequest
from inferd.limits.base import Limits
from inferd.protocol.checks import check_model, is_int


MAX_INPUTS = 2048  # per request: one call is a bounded amount of work


def check_embeddings(body: dict[str, Any]) -> None:
    """`model` as the spec validates it, and at most 2048 entries in an `input` array."""
    check_model(body)
    inputs = body.get("input")
    # An array of integers is one input already tokenized (the OpenAI shape), not many inputs.
    if isinstance(inputs, list) and len(inputs) > MAX_INPUTS and not all(is_int(i) for i in inputs):
        raise InvalidRequest(f"input: at most {MAX_INPUTS} inputs per request, got {len(inputs)}", param="input")


def as_base64(vector: list[float]) -> str:
    """A vector as base64 of little-endian float32, the OpenAI `encoding_format=base64` shape."""
    return base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode("ascii")


class EmbeddingsRoute(JsonRoute):
    """validate model -> limits -> catalogue -> call stage (deployment, failover, usage row in workspace
    embeddings)."""

    def __init__(self, auth: Authenticator, limits: Limits, catalogue: ModelCatalogue, stage: CallStage) -> None:
        super().__init__(auth, limits)
        self._catalogue = catalogue
        self._stage = stage

    async def handle(self, key: KeyRecord, body: dict[str, Any], scope: Scope, receive: Receive,
                     send: Send) -> None:
        """Embed the input; floats upstream, base64 made here when asked for."""
        check_embeddings(body)
        await self.limits.admit(key, metered=True)
        model = self._catalogue.resolve(body["model"], key)
        model.require_type(("embeddings",), "embeddings")
        encoding = body.get("encoding_format") or "float"

        async def attempt(engine: EmbeddingEngine, deployment: Deployment, answering: Model
                          ) -> Answer[dict[str, Any]]:
            upstream = deployment.config.upstream_model or deployment.config.id
            reply = await engine.embed({**body, "model": upstream, "encoding_format": "float"})
            usage = reply.get("usage") if isinstance(reply.get("usage"), dict) else {}
            prompt = int(usage.get("prompt_tokens") or usage.get("total_tokens") or 0)
            reply["model"] = answering.id
            reply["usage"] = {"prompt_tokens": prompt, "total_tokens": prompt}
            return Answer(reply, prompt)

        affinity = affinity_of(scope, body) if model.config.routing == "affinity" else None
        reply = (await self._stage.call(model, EmbeddingEngine, Billing(key, "embeddings"), attempt,
                                        affinity=affinity)).value
        if encoding == "base64":
            for item in reply["data"]:
                if isinstance(item.get("embedding"), list):
                    item["embedding"] = as_base64(item["embedding"])
        await send_bytes(send, 200, orjson.dumps(reply), JSON_HEADERS)
