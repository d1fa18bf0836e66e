"""Retrieval over a conversation's sources: the `search_sources` tool of the generate stream.

The query is embedded with `[conversations] embedding_model` (billed like any embedding, workspace
`conversations`) and compared by cosine with every chunk of the conversation's active sources, in
numpy: a conversation holds at most a few thousand chunks, a fraction of a millisecond to score.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import numpy as np

from inferd.metering import usage_for
from inferd.services.ingest.embed import EmbeddingFailed, embed_texts, embedding_deployment
from inferd.services.ingest.service import WORKSPACE, embedding_model
from inferd.store import sources as store
from inferd.store.keys import KeyRecord

if TYPE_CHECKING:
    from inferd.app import Services

DEFAULT_TOP_K = 5
MAX_TOP_K = 20

SEARCH_SOURCES_TOOL: dict[str, Any] = {"type": "function", "function": {
    "name": "search_sources",
    "description": "Search the documents attached to this conversation and return the passages most relevant "
                   "to the query. Use it whenever the question may be answered by the user's files.",
    "parameters": {"type": "object", "required": ["query"], "properties": {
        "query": {"type": "string", "description": "what to look for, in a few words or a question"},
        "top_k": {"type": "integer", "minimum": 1, "maximum": MAX_TOP_K,
                  "description": f"how many passages to return (default {DEFAULT_TOP_K})"}}}}}


def rank(matrix: np.ndarray, dims: list[int], query: np.ndarray, top_k: int) -> list[tuple[int, float]]:
    """(row, cosine) of the best `top_k` rows, best first; rows of another dimension never match."""
    if len(matrix) == 0 or top_k <= 0:
        return []
    width = len(query)
    scores = matrix[:, :width] @ query if matrix.shape[1] >= width else np.full(len(matrix), -np.inf, np.float32)
    scores = np.where(np.asarray(dims) == width, scores, -np.inf)
    k = min(top_k, len(scores))
    best = np.argpartition(-scores, k - 1)[:k]
    best = best[np.argsort(-scores[best], kind="stable")]
    return [(int(i), float(scores[i])) for i in best if np.isfinite(scores[i])]


async def search_sources(svc: "Services", key: KeyRecord, conversation_id: int, query: str,
                         top_k: int = DEFAULT_TOP_K) -> list[dict[str, Any]]:
    """The `top_k` chunks of the conversation's active sources closest to `query` (cosine), best first:
    `{source_id, source_name, chunk_id, ordinal, text, score}`. No embedding call (and no charge)
    when the conversation has no active source. The caller checks the user may read the conversation.
    Raises EmbeddingFailed (503) when the embedding engine is unreachable."""
    top_k = max(1, min(int(top_k), MAX_TOP_K))
    async with svc.db.connect() as conn:
        ids, matrix, dims = await store.active_chunk_vectors(conn, conversation_id)
    if not ids or not query.strip():
        return []
    deployment = embedding_deployment(svc.catalogue, embedding_model(svc), key)
    started = time.perf_counter()
    try:
        embedded = await embed_texts(deployment, [query])
    except EmbeddingFailed as exc:
        await svc.writer.record(usage_for(key, deployment.config, WORKSPACE, exc.engine_status, 0, 0,
                                          started=started))
        raise
    await svc.writer.record(usage_for(key, deployment.config, WORKSPACE, 200, embedded.prompt_tokens, 0,
                                      started=started))
    ranked = rank(matrix, dims, embedded.vectors[0], top_k)
    async with svc.db.connect() as conn:
        texts = await store.chunk_texts(conn, [ids[row] for row, _ in ranked])
    hits = []
    for row, score in ranked:
        chunk = texts.get(ids[row])
        if chunk is not None:
            hits.append({"source_id": int(chunk["source_id"]), "source_name": chunk["source_name"],
                         "chunk_id": ids[row], "ordinal": int(chunk["ordinal"]), "text": chunk["text"],
                         "score": round(score, 6)})
    return hits


def format_hits(hits: list[dict[str, Any]]) -> str:
    """The tool result a model reads: numbered passages with their file names, or a plain 'nothing'."""
    if not hits:
        return "No passages found in the conversation's sources."
    return "\n\n".join(f"[{i + 1}] {hit['source_name']} (passage {hit['ordinal'] + 1}, score {hit['score']:.3f}):\n"
                       f"{hit['text']}" for i, hit in enumerate(hits))
