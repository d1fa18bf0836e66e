"""Embeddings, wherever they are asked for: the `/v1/embeddings` route (`EmbeddingsService`) and the
server's own texts (`embed_texts`: the chunks ingestion stores, the queries retrieval searches
with). Both resolve a model of the catalogue, send its engine the same upstream request and take
its usage the same way, through the call stage (deployment, failover, one usage row).

The server's own texts go in-process (never over our own HTTP API), one metered call however many
batches it takes, as unit vectors; any engine failure (after failover) becomes 503
`embedding_unavailable`: the embedding service is unreachable."""

from __future__ import annotations

import asyncio
import base64
from dataclasses import dataclass
from typing import Any, Iterable

import numpy as np

from inferd.auth.key_record import KeyRecord
from inferd.cache.service import ResponseCache
from inferd.calls.route import affinity_key
from inferd.calls.stage import Answer, Billing, CallStage, reported_prompt_tokens
from inferd.catalogue import Deployment, Model, ModelCatalogue
from inferd.engines.base import EmbeddingEngine
from inferd.errors import EngineError, InferdError, InvalidRequest, NotFound, ServiceUnavailable
from inferd.guardrails.policy import Guardrails

# Texts per engine call and calls in flight. An in-process encoder is fastest on small batches whose
# activations stay in cache (8 texts of ~200 tokens: about 20% more tokens/s than 64 on this machine),
# one call at a time, since it would merge waiting calls into one larger batch; an HTTP upstream gets
# larger batches, several in flight, to hide the round trips.
IN_PROCESS_PLAN = (8, 1)
HTTP_PLAN = (32, 4)
HTTP_ENGINES = ("openai",)


@dataclass
class Embedded:
    """Row-normalised float32 vectors, one per text, and the prompt tokens the engine reported."""

    vectors: np.ndarray
    prompt_tokens: int


class EmbeddingFailed(ServiceUnavailable):
    """The embedding engine could not be reached or answered badly; `status` is what it reported."""

    code = "embedding_unavailable"

    def __init__(self, message: str, engine_status: int) -> None:
        super().__init__(message)
        self.engine_status = engine_status
        self.prompt_tokens = 0


def embedding_model_of(catalogue: ModelCatalogue, model: str, key: KeyRecord) -> Model:
    """The configured embeddings model; 503 when it is not in the catalogue or is down for maintenance."""
    try:
        resolved = catalogue.resolve(model, key)
    except NotFound:
        raise ServiceUnavailable(f"The embedding model '{model}' is not configured",
                                 code="embedding_unavailable") from None
    except ServiceUnavailable as exc:
        raise ServiceUnavailable(exc.message, code="embedding_unavailable") from None
    if resolved.config.type != "embeddings":
        raise ServiceUnavailable(f"'{model}' is a {resolved.config.type} model, not an embeddings model",
                                 code="embedding_unavailable")
    return resolved


def upstream_request(deployment: Deployment, body: dict[str, Any]) -> dict[str, Any]:
    """What a deployment's engine is sent for `body`: floats always (base64 is made here when asked
    for), under the deployment's upstream model name."""
    return {**body, "model": deployment.upstream, "encoding_format": "float"}


def as_base64(vector: list[float]) -> str:
    """A vector as base64 of little-endian float32, the OpenAI `encoding_format=base64` shape."""
    return base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode("ascii")


class EmbeddingsService:
    """`/v1/embeddings`: catalogue -> call stage (deployment, failover, usage row in workspace
    `embeddings`, priced on input tokens only) -> the reply in the asked encoding."""

    def __init__(self, catalogue: ModelCatalogue, stage: CallStage, guardrails: Guardrails | None = None,
                 cache: ResponseCache | None = None) -> None:
        self._catalogue = catalogue
        self._stage = stage
        self._guardrails = guardrails
        self._cache = cache  # the response cache; None when `[cache]` is off

    async def create(self, key: KeyRecord, body: dict[str, Any], headers: Iterable[tuple[bytes, bytes]]
                     ) -> dict[str, Any]:
        """The embeddings of a checked request (`headers`: the raw ones, for the affinity key)."""
        model = self._catalogue.resolve(body["model"], key)
        model.require_type(("embeddings",), "embeddings")
        # The input guardrails first, then the cache on what they let through: a hit never
        # answers an input they would block, and an entry is keyed on the text the engine saw.
        if self._guardrails is not None:
            body = await self._guard_input(key, model, body)
        ticket = None
        if self._cache is not None:
            ticket, stored = await self._cache.lookup(key, model, "embeddings", body, headers)
            if stored is not None:
                return stored

        async def attempt(engine: EmbeddingEngine, deployment: Deployment, answering: Model
                          ) -> Answer[dict[str, Any]]:
            reply = await engine.embed(upstream_request(deployment, body))
            prompt = reported_prompt_tokens(reply)
            reply["model"] = answering.id
            reply["usage"] = {"prompt_tokens": prompt, "total_tokens": prompt}
            return Answer(reply, prompt)

        metered = await self._stage.call(model, EmbeddingEngine, Billing(key, "embeddings"), attempt,
                                         affinity=affinity_key(model, body.get("user"), headers=headers))
        reply = metered.value
        if body.get("encoding_format") == "base64":
            for item in reply["data"]:
                if isinstance(item.get("embedding"), list):
                    item["embedding"] = as_base64(item["embedding"])
        if ticket is not None:
            await ticket.save(reply, metered.usage)
        return reply


    async def _guard_input(self, key: KeyRecord, model: Model, body: dict[str, Any]) -> dict[str, Any]:
        """The request with its input through the org's input guardrails (400 `guardrail_blocked`,
        or the matched spans replaced). Token ids cannot be read by a guardrail: with one applying,
        an input of token ids is refused rather than let through unchecked."""
        assert self._guardrails is not None
        policy = self._guardrails.policy(key.org_slug, key.org_guardrails)
        if policy is None or not policy.input:
            return body
        given = body.get("input")
        texts = [given] if isinstance(given, str) else given if isinstance(given, list) and all(
            isinstance(item, str) for item in given) else None
        if texts is None:
            raise InvalidRequest("input: token ids cannot be checked by this organisation's guardrails; send text",
                                 code="guardrail_blocked", param="input")
        checked = await policy.check_input(list(texts), model.id, key.org_slug)
        return {**body, "input": checked[0] if isinstance(given, str) else checked}


def _vectors(reply: dict[str, Any], count: int) -> np.ndarray:
    items = reply.get("data")
    if not isinstance(items, list) or len(items) != count:
        raise ValueError(f"expected {count} embeddings, got {len(items) if isinstance(items, list) else 'none'}")
    ordered = sorted(items, key=lambda item: int(item.get("index", 0)))
    matrix = np.asarray([item["embedding"] for item in ordered], dtype=np.float32)
    if matrix.ndim != 2 or matrix.shape[1] == 0 or not np.isfinite(matrix).all():
        raise ValueError("embeddings are not a matrix of finite numbers")
    return matrix


def normalise_rows(matrix: np.ndarray) -> np.ndarray:
    """Each row scaled to unit length, so a dot product is the cosine."""
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return (matrix / np.maximum(norms, 1e-12)).astype(np.float32)


async def embed_texts(stage: CallStage, billing: Billing, model: Model, texts: list[str]) -> Embedded:
    """Embed `texts` in batches on one deployment of `model` (another when it fails), metered as
    one call; EmbeddingFailed (503) when every attempt failed."""
    async def attempt(engine: EmbeddingEngine, deployment: Deployment, answering: Model) -> Answer[np.ndarray]:
        matrix, tokens = await _embed_on(engine, deployment, texts)
        return Answer(matrix, tokens)

    try:
        metered = await stage.call(model, EmbeddingEngine, billing, attempt)
    except InferdError as exc:
        raise EmbeddingFailed(f"The embedding service is unreachable: {exc.message}", exc.status) from None
    return Embedded(metered.value, metered.usage.prompt_tokens)


async def _embed_on(engine: EmbeddingEngine, deployment: Deployment, texts: list[str]) -> tuple[np.ndarray, int]:
    """(unit vectors, prompt tokens) of `texts` from one deployment's engine."""
    batch_texts, concurrency = HTTP_PLAN if deployment.config.engine in HTTP_ENGINES else IN_PROCESS_PLAN
    gate = asyncio.Semaphore(concurrency)

    async def batch(piece: list[str]) -> tuple[np.ndarray, int]:
        async with gate:
            reply = await engine.embed(upstream_request(deployment, {"input": piece}))
            try:
                return _vectors(reply, len(piece)), reported_prompt_tokens(reply)
            except (ValueError, KeyError, TypeError, AttributeError) as exc:
                raise EngineError(f"The embedding service answered badly: {exc}") from None

    # Texts of like length share a batch, so the encoder pads little (a batch is as long as its longest).
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    ordered = [texts[i] for i in order]
    pieces = [ordered[i:i + batch_texts] for i in range(0, len(ordered), batch_texts)]
    tasks = [asyncio.ensure_future(batch(piece)) for piece in pieces]
    try:
        results = await asyncio.gather(*tasks)
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
    if results and len({vectors.shape[1] for vectors, _ in results}) != 1:
        raise EngineError("The embedding service answered vectors of different sizes")
    matrix = np.zeros((0, 0), np.float32)
    if results:
        sorted_rows = np.concatenate([vectors for vectors, _ in results])
        matrix = np.empty_like(sorted_rows)
        matrix[np.asarray(order)] = sorted_rows
    return (normalise_rows(matrix) if len(matrix) else matrix), sum(tokens for _, tokens in results)
