"""POST /v1/rerank: documents scored against a query, best first (the vLLM / Jina / Cohere shape).
The request is checked here; the rerank service does the rest (services/rerank.py)."""

from __future__ import annotations

from typing import Any, Awaitable, Iterable

from inferd.api.hot import ServiceRoute
from inferd.auth.key_record import KeyRecord
from inferd.errors import InvalidRequest
from inferd.protocol.checks import check_model
from inferd.services.rerank import RerankService


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


class RerankRoute(ServiceRoute[RerankService]):
    """check -> limits -> rerank service (catalogue, call stage: deployment, failover, usage row in
    workspace rerank)."""

    check = staticmethod(check_rerank)

    def answer(self, key: KeyRecord, body: dict[str, Any], headers: Iterable[tuple[bytes, bytes]]
               ) -> Awaitable[dict[str, Any]]:
        """The documents scored and sorted."""
        return self.service.rerank(key, body, headers)
