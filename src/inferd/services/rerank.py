"""Rerank: documents scored against a query by a reranker model of the catalogue, best first (the
vLLM / Jina / Cohere shape), through the call stage (deployment, failover, usage row in workspace
`rerank`)."""

from __future__ import annotations

import math
import uuid
from typing import Any, Iterable

from inferd.auth.key_record import KeyRecord
from inferd.cache.service import ResponseCache
from inferd.calls.route import affinity_key
from inferd.calls.stage import Answer, Billing, CallStage, reported_prompt_tokens
from inferd.catalogue import Deployment, Model, ModelCatalogue
from inferd.engines.base import RerankEngine
from inferd.errors import EngineError


def _scores_in_unit_range(results: list[dict[str, Any]]) -> None:
    """Engines that answer raw logits get a sigmoid (order kept), so scores always lie in [0, 1]."""
    if any(not 0.0 <= r["relevance_score"] <= 1.0 for r in results):
        for r in results:
            r["relevance_score"] = 1.0 / (1.0 + math.exp(-r["relevance_score"]))


class RerankService:
    """catalogue -> call stage -> the engine's scores, checked, in [0, 1] and sorted."""

    def __init__(self, catalogue: ModelCatalogue, stage: CallStage, cache: ResponseCache | None = None) -> None:
        self._catalogue = catalogue
        self._stage = stage
        self._cache = cache  # the response cache; None when `[cache]` is off

    async def rerank(self, key: KeyRecord, body: dict[str, Any], headers: Iterable[tuple[bytes, bytes]]
                     ) -> dict[str, Any]:
        """The answer to a checked request (`headers`: the raw ones, for the affinity key)."""
        model = self._catalogue.resolve(body["model"], key)
        model.require_type(("reranker",), "rerank")
        ticket = None
        if self._cache is not None:
            ticket, stored = await self._cache.lookup(key, model, "rerank", body, headers)
            if stored is not None:
                return stored
        documents: list[str] = body["documents"]
        top_n = min(body.get("top_n") or len(documents), len(documents))

        async def attempt(engine: RerankEngine, deployment: Deployment, answering: Model
                          ) -> Answer[list[dict[str, Any]]]:
            reply = await engine.rerank({"model": deployment.upstream, "query": body["query"],
                                         "documents": documents, "top_n": top_n})
            try:
                results = [{"index": int(r["index"]), "relevance_score": float(r["relevance_score"])}
                           for r in reply["results"]]
            except (KeyError, TypeError, ValueError):
                raise EngineError("The model's engine gave an unreadable rerank answer") from None
            if any(not 0 <= r["index"] < len(documents) for r in results):
                raise EngineError("The model's engine answered an index outside the documents")
            return Answer(results, reported_prompt_tokens(reply))

        metered = await self._stage.call(model, RerankEngine, Billing(key, "rerank"), attempt,
                                         affinity=affinity_key(model, body.get("user"), headers=headers))
        results = metered.value
        _scores_in_unit_range(results)
        results.sort(key=lambda r: r["relevance_score"], reverse=True)
        for r in results:
            r["document"] = {"text": documents[r["index"]]}
        prompt = metered.usage.prompt_tokens
        reply = {"id": f"rerank-{uuid.uuid4().hex}", "model": metered.model.id, "results": results[:top_n],
                 "usage": {"prompt_tokens": prompt, "completion_tokens": 0, "total_tokens": prompt}}
        if ticket is not None:
            await ticket.save(reply, metered.usage)
        return reply
