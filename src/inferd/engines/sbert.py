"""The `sbert` engine: sentence-transformers BERT models (all-MiniLM-L6-v2 and its kin) in numpy,
without torch: safetensors weights, the `tokenizers` package, pooling and normalisation as the
model folder's configs say.

Requests that arrive together are encoded together (one batch per turn of the worker), on a
thread, so the event loop stays free. `embeddings` models answer the OpenAI embeddings shape;
`reranker` models score documents by cosine similarity to the query, mapped to [0, 1] (a
bi-encoder: no cross-encoder ships on PyPI).
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from inferd.config_models import ModelConfig
from inferd.engines.bert_encoder import BertEncoder
from inferd.engines.weights import packaged_path
from inferd.errors import ConfigError, InvalidRequest

if TYPE_CHECKING:
    from inferd.engines.registry import EngineRegistry

OPTION_KEYS = ("model_path", "builtin_package", "max_batch")
_BATCH_TEXTS = 64


def _model_dir(model: ModelConfig) -> Path:
    package = model.options.get("builtin_package")
    if package:
        return packaged_path(model.id, str(package), "model")
    path = model.options.get("model_path")
    if not isinstance(path, str) or not Path(path).expanduser().is_dir():
        raise ConfigError(f"model {model.id!r}: engine 'sbert' needs model_path (a sentence-transformers folder)")
    return Path(path).expanduser()


def _inputs(payload: dict[str, Any]) -> list[str]:
    value = payload.get("input")
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return value
    raise InvalidRequest("input: must be a string or a non-empty array of strings", param="input")


class SbertEngine:
    """Sentence embeddings and bi-encoder reranking from one BERT encoder."""

    base_parameters: tuple[str, ...] = ()

    def __init__(self, model: ModelConfig) -> None:
        folder = _model_dir(model)
        try:
            self._encoder = BertEncoder(folder)
        except (OSError, KeyError, ValueError) as exc:
            raise ConfigError(f"model {model.id!r}: cannot load {folder}: {exc}") from None
        self._id = model.id
        self._max_batch = int(model.options.get("max_batch") or _BATCH_TEXTS)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"sbert-{model.id}")
        self._waiting: list[tuple[list[str], asyncio.Future[tuple[np.ndarray, list[int]]]]] = []
        self._worker: asyncio.Task[None] | None = None

    @property
    def dimensions(self) -> int:
        """The embedding size."""
        return self._encoder.hidden_size

    async def _encode(self, texts: list[str]) -> tuple[np.ndarray, list[int]]:
        """Vectors and token counts, batched with whatever else is waiting."""
        future: asyncio.Future[tuple[np.ndarray, list[int]]] = asyncio.get_running_loop().create_future()
        self._waiting.append((texts, future))
        if self._worker is None or self._worker.done():
            self._worker = asyncio.get_running_loop().create_task(self._work())
        return await future

    async def _work(self) -> None:
        loop = asyncio.get_running_loop()
        while self._waiting:
            batch, size = [], 0
            while self._waiting and (not batch or size + len(self._waiting[0][0]) <= self._max_batch):
                batch.append(self._waiting.pop(0))
                size += len(batch[-1][0])
            texts = [t for request, _ in batch for t in request]
            try:
                vectors, counts = await loop.run_in_executor(self._executor, self._encoder.encode, texts)
            except Exception as exc:
                for _, future in batch:
                    if not future.done():
                        future.set_exception(exc)
                continue
            start = 0
            for request, future in batch:
                end = start + len(request)
                if not future.done():
                    future.set_result((vectors[start:end], counts[start:end]))
                start = end

    async def embed(self, payload: dict[str, Any]) -> dict[str, Any]:
        """The OpenAI embeddings response; `dimensions` below the model's truncates and renormalises."""
        texts = _inputs(payload)
        dimensions = payload.get("dimensions")
        if dimensions is not None:
            if not isinstance(dimensions, int) or isinstance(dimensions, bool) or dimensions < 1:
                raise InvalidRequest("dimensions: must be an integer >= 1", param="dimensions")
            if dimensions > self.dimensions:
                raise InvalidRequest(f"dimensions: model '{self._id}' gives at most {self.dimensions}",
                                     param="dimensions")
        vectors, counts = await self._encode(texts)
        if dimensions is not None and dimensions < self.dimensions:
            vectors = vectors[:, :dimensions]
            vectors = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
        tokens = sum(counts)
        return {"object": "list", "model": self._id,
                "data": [{"object": "embedding", "index": i, "embedding": v.tolist()} for i, v in enumerate(vectors)],
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}

    async def rerank(self, payload: dict[str, Any]) -> dict[str, Any]:
        """Cosine similarity of each document to the query, mapped from [-1, 1] to [0, 1]."""
        documents: list[str] = payload["documents"]
        if not documents:
            return {"results": [], "usage": {"prompt_tokens": 0, "total_tokens": 0}}
        vectors, counts = await self._encode([payload["query"], *documents])
        similarities = vectors[1:] @ vectors[0]
        results = [{"index": i, "relevance_score": float(np.clip((s + 1.0) / 2.0, 0.0, 1.0))}
                   for i, s in enumerate(similarities)]
        tokens = sum(counts)
        return {"results": results, "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}

    async def close(self) -> None:
        """Stop the worker thread."""
        self._executor.shutdown(wait=True)


def register(registry: "EngineRegistry") -> None:
    """Add the `sbert` engine to a registry."""
    from inferd.engines.registry import EngineSpec

    registry.register(EngineSpec("sbert", SbertEngine, option_keys=OPTION_KEYS))
