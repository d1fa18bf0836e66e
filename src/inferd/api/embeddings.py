"""POST /v1/embeddings: a raw ASGI handler (hot path). Only `model` is validated; the rest goes
to the engine. Priced on input tokens only."""

from __future__ import annotations

import base64
import time
from typing import Any, cast

import numpy as np
import orjson

from inferd.api.asgi import JSON_HEADERS, Receive, Send, send_bytes
from inferd.api.checks import check_model, is_int
from inferd.api.hot import JsonRoute
from inferd.auth.principal import Authenticator
from inferd.catalogue import ModelCatalogue
from inferd.engines.base import EmbeddingEngine
from inferd.errors import InferdError, InvalidRequest
from inferd.limits.base import Limits
from inferd.metering import UsageWriter, usage_for
from inferd.store.keys import KeyRecord


MAX_INPUTS = 2048  # per request (CONTRACT.md decision 22): one call is a bounded amount of work


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
    """validate model -> limits -> catalogue -> engine -> usage row (workspace embeddings)."""

    def __init__(self, auth: Authenticator, limits: Limits, catalogue: ModelCatalogue, writer: UsageWriter) -> None:
        super().__init__(auth, limits)
        self._catalogue = catalogue
        self._writer = writer

    async def handle(self, key: KeyRecord, body: dict[str, Any], receive: Receive, send: Send) -> None:
        """Embed the input; floats upstream, base64 made here when asked for."""
        check_embeddings(body)
        await self.limits.admit(key, metered=True)
        deployment = self._catalogue.resolve(body["model"], key)
        deployment.require_type(("embeddings",), "embeddings")
        started = time.perf_counter()
        encoding = body.get("encoding_format") or "float"
        payload = {**body, "model": deployment.config.upstream_model or deployment.id, "encoding_format": "float"}
        engine = cast(EmbeddingEngine, deployment.engine)
        try:
            reply = await engine.embed(payload)
        except InferdError as exc:
            await self._writer.record(usage_for(key, deployment.config, "embeddings", exc.status, 0, 0,
                                                started=started))
            raise
        usage = reply.get("usage") if isinstance(reply.get("usage"), dict) else {}
        prompt = int(usage.get("prompt_tokens") or usage.get("total_tokens") or 0)
        if encoding == "base64":
            for item in reply["data"]:
                if isinstance(item.get("embedding"), list):
                    item["embedding"] = as_base64(item["embedding"])
        reply["model"] = deployment.id
        reply["usage"] = {"prompt_tokens": prompt, "total_tokens": prompt}
        await self._writer.record(usage_for(key, deployment.config, "embeddings", 200, prompt, 0, started=started))
        await send_bytes(send, 200, orjson.dumps(reply), JSON_HEADERS)
