"""The rerank contract (RerankEngine), run against every engine that serves reranker models."""

from __future__ import annotations

from typing import Any

from inferd.engines.base import RerankEngine
from tests.engines.contract.engines import Live, assert_openai_transport_failures, capabilities_of, implemented, \
    live_engine
from tests.harness import Upstream

live = live_engine(RerankEngine)

DOCUMENTS = ["The stock market fell sharply today.", "Cats like to sleep in the sun.", "A recipe for sourdough bread."]
# The second document answers the query both by meaning (the built-in bi-encoder) and by shared words
# (the fake upstream). `model` selects the fake's behaviour; a built-in engine ignores it.
RERANK: dict[str, Any] = {"model": "mock", "query": "Where do cats like to sleep?", "documents": DOCUMENTS}


def test_serves_rerank_and_only_its_own_capabilities(live: Live[RerankEngine]) -> None:
    assert isinstance(live.engine, RerankEngine)
    assert implemented(live.engine) == capabilities_of(live.name)


def test_scores_every_document_by_index(live: Live[RerankEngine]) -> None:
    results = live.call(lambda e: e.rerank(RERANK))["results"]
    indexes = [r["index"] for r in results]
    assert all(isinstance(i, int) and 0 <= i < len(DOCUMENTS) for i in indexes)
    assert sorted(indexes) == list(range(len(DOCUMENTS)))  # each document scored once, none invented
    assert all(isinstance(r["relevance_score"], float) for r in results)
    best = max(results, key=lambda r: r["relevance_score"])
    assert best["index"] == 1 and all(r["relevance_score"] < best["relevance_score"] for r in results if r is not best)


def test_openai_transport_failures_raise_engine_errors(upstream: Upstream) -> None:
    # The built-in reranker has no failure of its own to show: the route checks query and documents
    # before any engine sees them (api/rerank.py), so only an upstream's failures are left.
    assert_openai_transport_failures(upstream, RerankEngine, lambda e: e.rerank(RERANK))
