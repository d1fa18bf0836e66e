"""Retrieval over a conversation's sources: the passages a generate turn answers from, and the
`search_sources` tool a model may call for more.

Two rankings of the chunks of the conversation's active sources, fused by reciprocal rank (RRF):
- meaning: the query embedded with `[conversations] embedding_model` (billed like any embedding,
  workspace `conversations`) and compared by cosine with every chunk vector, in numpy (a
  conversation holds a few thousand chunks at most: a millisecond to score);
- words: the database's keyword index (SQLite FTS5 / PostgreSQL full-text, migration 0007), which
  finds the exact names, codes and numbers that dense vectors of a small embedder blur.
RRF needs no score calibration between the two (BM25 and cosine live on different scales) and a
chunk ranked well by both beats one ranked first by either alone.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
from sqlalchemy.ext.asyncio import AsyncEngine

from inferd.auth.key_record import KeyRecord
from inferd.calls.stage import Billing, CallStage
from inferd.catalogue import ModelCatalogue
from inferd.config import MAX_RETRIEVAL_TOP_K
from inferd.services.embeddings import embed_texts, embedding_model_of
from inferd.services.ingest.service import WORKSPACE
from inferd.store import sources as store

DEFAULT_TOP_K = 5
MAX_TOP_K = MAX_RETRIEVAL_TOP_K

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


RRF_K = 60  # the usual constant: damps the difference between rank 1 and rank 2 of one list
CANDIDATES = 40  # chunks taken from each ranking before fusion
# A chunk no query word matches is kept only when it is at least this close in meaning: an
# off-topic message ("hello") retrieves nothing rather than the least unrelated chunks.
MIN_COSINE = 0.15
MAX_TERMS = 24

# Words that carry no meaning for a keyword match (question words included: every question has them).
STOPWORDS = frozenset("""
a about above after again all also am an and any are as at be been before being below between both but by can
could did do does doing done during each few for from further had has have having he her here hers him his how
i if in into is it its itself just me more most my no nor not of off on once only or other our out over own
please same she should so some such than that the their them then there these they this those through to too
under until up very was we were what when where which while who whom why will with would you your yours tell
know give say find show
""".split())
_TERM = re.compile(r"[^\W_]+(?:[-_./:][^\W_]+)*")


@dataclass(frozen=True)
class Passage:
    """One retrieved chunk: where it comes from (source, chunk, span in the extracted text) and its text."""

    source_id: int
    source_name: str
    chunk_id: int
    ordinal: int
    text: str
    heading: str | None
    char_start: int | None
    char_end: int | None
    score: float

    def reference(self, index: int) -> dict[str, Any]:
        """What a client needs to link to the passage (numbered as the model saw it), without its text."""
        return {"index": index, "source_id": self.source_id, "source_name": self.source_name,
                "chunk_id": self.chunk_id, "ordinal": self.ordinal, "heading": self.heading,
                "char_start": self.char_start, "char_end": self.char_end, "score": round(self.score, 6)}

    def hit(self) -> dict[str, Any]:
        """The passage as `search_sources` returns it."""
        return {"source_id": self.source_id, "source_name": self.source_name, "chunk_id": self.chunk_id,
                "ordinal": self.ordinal, "text": self.text, "heading": self.heading,
                "char_start": self.char_start, "char_end": self.char_end, "score": round(self.score, 6)}


def words_of(text: str) -> list[str]:
    """Every word and code of a text but stopwords and lone letters, in order (repeats kept)."""
    return [term for term in (match.group(0) for match in _TERM.finditer(text))
            if term.lower() not in STOPWORDS and (len(term) > 1 or term.isdigit())]


def query_terms(query: str) -> list[str]:
    """The words and codes of a query worth matching literally: stopwords and lone letters dropped,
    codes such as `QX-4471-B` or `v2.3.1` kept whole, each once, at most MAX_TERMS."""
    terms: list[str] = []
    seen: set[str] = set()
    for match in _TERM.finditer(query):
        term = match.group(0)
        folded = term.lower()
        if folded in STOPWORDS or folded in seen or (len(term) < 2 and not term.isdigit()):
            continue
        seen.add(folded)
        terms.append(term)
    return terms[:MAX_TERMS]


def fuse(rankings: Sequence[tuple[Sequence[int], float]], k: int = RRF_K) -> list[tuple[int, float]]:
    """Reciprocal rank fusion of ranked id lists, each with a weight: (id, fused score), best first
    (ties keep the order in which ids were first seen)."""
    scores: dict[int, float] = {}
    for ids, weight in rankings:
        for position, item in enumerate(ids):
            scores[item] = scores.get(item, 0.0) + weight / (k + position + 1)
    return sorted(scores.items(), key=lambda pair: -pair[1])


class Retriever:
    """Retrieval over conversations' sources, with the collaborators it needs: the database, the
    catalogue and the call stage (the embedder is called and billed through it), and the name of
    `[conversations] embedding_model`."""

    def __init__(self, db: AsyncEngine, catalogue: ModelCatalogue, stage: CallStage, embedding_model: str) -> None:
        self._db = db
        self._catalogue = catalogue
        self._stage = stage
        self.embedding_model = embedding_model

    async def embed(self, key: KeyRecord, texts: list[str]) -> np.ndarray:
        """The texts' unit vectors, billed to the key as one embeddings call in workspace `conversations`."""
        embedder = embedding_model_of(self._catalogue, self.embedding_model, key)
        return (await embed_texts(self._stage, Billing(key, WORKSPACE), embedder, texts)).vectors

    async def retrieve(self, key: KeyRecord, conversation_id: int, queries: Sequence[tuple[str, float]],
                       top_k: int = DEFAULT_TOP_K) -> list[Passage]:
        """The `top_k` passages of the conversation's active sources for `queries` ((text, weight): the
        question itself, and for a follow-up the question folded with the turns before it), best first.
        No embedding call (and no charge) when the conversation has no active chunk. The caller checks
        the user may read the conversation. Raises EmbeddingFailed (503) when the embedder is unreachable."""
        found = await self._search(key, conversation_id, [list(queries)], top_k)
        return found[0] if found else []

    async def retrieve_each(self, key: KeyRecord, conversation_id: int, queries: Sequence[str],
                            top_k: int) -> list[list[Passage]]:
        """The best `top_k` passages for each query on its own (a second hop's bridges), in one
        embedding call; an empty list per query when the conversation has no active chunk."""
        found = await self._search(key, conversation_id, [[(query, 1.0)] for query in queries], top_k)
        return found or [[] for _ in queries]

    async def _search(self, key: KeyRecord, conversation_id: int,
                      groups: Sequence[Sequence[tuple[str, float]]], top_k: int) -> list[list[Passage]]:
        """For each group of weighted queries, its fused best `top_k` passages; [] (and no embedding
        call) when the conversation has no active chunk or nothing is asked."""
        groups = [[(text.strip(), weight) for text, weight in group if text.strip()] for group in groups]
        texts = [text for group in groups for text, _ in group]
        async with self._db.connect() as conn:
            ids, matrix, dims = await store.active_chunk_vectors(conn, conversation_id)
        if not ids or not texts or top_k <= 0:
            return []
        vectors = iter(await self.embed(key, texts))
        chosen: list[list[tuple[int, float]]] = []
        async with self._db.connect() as conn:
            for group in groups:
                rankings: list[tuple[Sequence[int], float]] = []
                relevant: set[int] = set()
                for text, weight in group:
                    close = rank(matrix, dims, next(vectors), CANDIDATES)
                    rankings.append(([ids[row] for row, _ in close], weight))
                    relevant.update(ids[row] for row, cosine in close if cosine >= MIN_COSINE)
                    words = await store.keyword_ranking(conn, conversation_id, query_terms(text), CANDIDATES)
                    rankings.append((words, weight))
                    relevant.update(words)
                chosen.append([(chunk_id, score) for chunk_id, score in fuse(rankings) if chunk_id in relevant][:top_k])
            rows = await store.chunk_texts(conn, list({chunk_id for best in chosen for chunk_id, _ in best}))
        return [[Passage(int(row["source_id"]), str(row["source_name"]), chunk_id, int(row["ordinal"]),
                         str(row["text"]), row["heading"], row["char_start"], row["char_end"], score)
                 for chunk_id, score in best if (row := rows.get(chunk_id)) is not None]  # None: deleted meanwhile
                for best in chosen]

    async def search_sources(self, key: KeyRecord, conversation_id: int, query: str,
                             top_k: int = DEFAULT_TOP_K) -> list[dict[str, Any]]:
        """The `search_sources` tool: the best `top_k` passages (at most MAX_TOP_K) for `query`, as
        dicts (`Passage.hit`), best first."""
        top_k = max(1, min(int(top_k), MAX_TOP_K))
        return [passage.hit() for passage in await self.retrieve(key, conversation_id, [(query, 1.0)], top_k)]


def format_hits(hits: list[dict[str, Any]]) -> str:
    """The tool result a model reads: numbered passages with their file names, or a plain 'nothing'."""
    if not hits:
        return "No passages found in the conversation's sources."
    return "\n\n".join(f"[{i + 1}] {hit['source_name']} (passage {hit['ordinal'] + 1}, score {hit['score']:.3f}):\n"
                       f"{hit['text']}" for i, hit in enumerate(hits))
