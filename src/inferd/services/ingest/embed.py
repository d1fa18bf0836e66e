"""Chunks to unit vectors through the catalogue's embeddings model (in-process, never over our own
HTTP API), one metered call of the call stage however many batches it takes. Any engine failure
(after failover) becomes 503: the embedding service is unreachable."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import numpy as np

from inferd.auth.key_record import KeyRecord
from inferd.calls.stage import Answer, Billing, CallStage
from inferd.catalogue import Deployment, Model, ModelCatalogue
from inferd.engines.base import EmbeddingEngine
from inferd.errors import EngineError, InferdError, NotFound, ServiceUnavailable

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
    model_name = deployment.config.upstream_model or deployment.config.id
    batch_texts, concurrency = HTTP_PLAN if deployment.config.engine in HTTP_ENGINES else IN_PROCESS_PLAN
    gate = asyncio.Semaphore(concurrency)

    async def batch(piece: list[str]) -> tuple[np.ndarray, int]:
        async with gate:
            reply = await engine.embed({"model": model_name, "input": piece, "encoding_format": "float"})
            try:
                usage = reply.get("usage") if isinstance(reply.get("usage"), dict) else {}
                return _vectors(reply, len(piece)), int(usage.get("prompt_tokens") or usage.get("total_tokens") or 0)
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
