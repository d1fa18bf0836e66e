"""POST /v1/rerank: documents scored against a query, best first (the vLLM / Jina / Cohere shape)."""

from __future__ import annotations

import math
import uuid
from typing import Any

import orjson

from inferd.api.asgi import JSON_HEADERS, Receive, Scope, Send, send_bytes
from inferd.api.hot import JsonRoute, affinity_of
from inferd.auth.key_record import KeyRecord
from inferd.auth.principal import Authenticator
from inferd.calls.stage import Answer, Billing, CallStage
from inferd.catalogue import Deployment, Model, ModelCatalogue
from inferd.engines.base import RerankEngine
from inferd.errors import EngineError, InvalidRequest
from inferd.limits.base import Limits
from inferd.protocol.checks import check_model


MAX_DOCUMENTS = 1000  # per request: one call is a bounded amount of work


def check_rerank(body: dict[str, Any]) -> None:
    """RerankRequest: model, query string, documents array of at most 1000 strings, top_n integer >= 1."""
    check_model(body)
    if not isinstance(body.get("query"), str):
        raise InvalidRequest("query: required string", param="query")
    documents = body.get("documents")
    if not isinstance(documents, list) or not all(isinstance(d, str) for d in documents):
        raise InvalidRequest("documents: required array of strings", param="documents")
    if len(documents) > MAX_DOCUMENTS:
        raise InvalidRequest(f"documents: at most {MAX_DOCUMENTS} documents per request, got {len(documents)}",
                             param="documents")
    top_n = body.get("top_n")
    if top_n is not None and (not isinstance(top_n, int) or isinstance(top_n, bool) or top_n < 1):
        raise InvalidRequest("top_n: must be an integer >= 1", param="top_n")


def _scores_in_unit_range(results: list[dict[str, Any]]) -> None:
    """Engines that answer raw logits get a sigmoid (order kept), so scores always lie in [0, 1]."""
    if any(not 0.0 <= r["relevance_score"] <= 1.0 for r in results):
        for r in results:
            r["relevance_score"] = 1.0 / (1.0 + math.exp(-r["relevance_score"]))


class RerankRoute(JsonRoute):
    """validate -> limits -> catalogue -> call stage (deployment, failover, usage row in workspace rerank)."""

    def __init__(self, auth: Authenticator, limits: Limits, catalogue: ModelCatalogue, stage: CallStage) -> None:
        super().__init__(auth, limits)
        self._catalogue = catalogue
        self._stage = stage

    async def handle(self, key: KeyRecord, body: dict[str, Any], scope: Scope, receive: Receive,
                     send: Send) -> None:
        """Score and sort the documents."""
        check_rerank(body)
        await self.limits.admit(key, metered=True)
        model = self._catalogue.resolve(body["model"], key)
        model.require_type(("reranker",), "rerank")
        documents: list[str] = body["documents"]
        top_n = min(body.get("top_n") or len(documents), len(documents))

        async def attempt(engine: RerankEngine, deployment: Deployment, answering: Model
                          ) -> Answer[list[dict[str, Any]]]:
            upstream = deployment.config.upstream_model or deployment.config.id
            reply = await engine.rerank({"model": upstream, "query": body["query"], "documents": documents,
                                         "top_n": top_n})
            try:
                results = [{"index": int(r["index"]), "relevance_score": float(r["relevance_score"])}
                           for r in reply["results"]]
            except (KeyError, TypeError, ValueError):
                raise EngineError("The model's engine gave an unreadable rerank answer") from None
            if any(not 0 <= r["index"] < len(documents) for r in results):
                raise EngineError("The model's engine answered an index outside the documents")
            usage = reply.get("usage") if isinstance(reply.get("usage"), dict) else {}
            return Answer(results, int(usage.get("prompt_tokens") or usage.get("total_tokens") or 0))

        affinity = affinity_of(scope, body) if model.config.routing == "affinity" else None
        metered = await self._stage.call(model, RerankEngine, Billing(key, "rerank"), attempt, affinity=affinity)
        results = metered.value
        _scores_in_unit_range(results)
        results.sort(key=lambda r: r["relevance_score"], reverse=True)
        for r in results:
            r["document"] = {"text": documents[r["index"]]}
        prompt = metered.usage.prompt_tokens
        answer = {"id": f"rerank-{uuid.uuid4().hex}", "model": metered.model.id, "results": results[:top_n],
                  "usage": {"prompt_tokens": prompt, "completion_tokens": 0, "total_tokens": prompt}}
        await send_bytes(send, 200, orjson.dumps(answer), JSON_HEADERS)
