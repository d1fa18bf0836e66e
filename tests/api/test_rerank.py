"""POST /v1/rerank: sorted results with document text, top_n, scores in [0, 1], usage."""

from __future__ import annotations

import httpx
import pytest

from tests.harness import Server, auth

DOCS = ["cats sleep all day", "the stock market fell", "cats and dogs play", "a recipe for bread"]


def rerank(server: Server, key: str, **body: object) -> httpx.Response:
    return httpx.post(server.v1 + "/rerank", headers=auth(key), json=body)


def test_sorted_with_documents_and_usage(server: Server, app_key: str) -> None:
    reply = rerank(server, app_key, model="mock-rerank", query="cats play", documents=DOCS).json()
    scores = [r["relevance_score"] for r in reply["results"]]
    assert scores == sorted(scores, reverse=True) and all(0 <= s <= 1 for s in scores)
    assert [r["index"] for r in reply["results"]][:2] == [2, 0]
    assert all(r["document"]["text"] == DOCS[r["index"]] for r in reply["results"])
    assert reply["model"] == "mock-rerank" and reply["id"]
    assert reply["usage"]["completion_tokens"] == 0 and reply["usage"]["prompt_tokens"] > 0
    row = server.usage_rows(app_key)[-1]
    assert row["workspace"] == "rerank" and row["completion_tokens"] == 0 and row["cost_usd"] > 0


def test_top_n(server: Server, app_key: str) -> None:
    reply = rerank(server, app_key, model="mock-rerank", query="cats", documents=DOCS, top_n=1).json()
    assert len(reply["results"]) == 1 and reply["results"][0]["index"] in (0, 2)


def test_raw_logits_are_mapped_into_unit_range_keeping_order(server: Server, app_key: str) -> None:
    reply = rerank(server, app_key, model="mock-rerank-logits", query="cats play", documents=DOCS).json()
    scores = [r["relevance_score"] for r in reply["results"]]
    assert all(0 <= s <= 1 for s in scores) and scores == sorted(scores, reverse=True)
    assert reply["results"][0]["index"] == 2


@pytest.mark.parametrize(("body", "field"), [
    ({"query": "q", "documents": DOCS}, "model"),
    ({"model": "mock-rerank", "documents": DOCS}, "query"),
    ({"model": "mock-rerank", "query": "q"}, "documents"),
    ({"model": "mock-rerank", "query": "q", "documents": [1]}, "documents"),
    ({"model": "mock-rerank", "query": "q", "documents": DOCS, "top_n": 0}, "top_n"),
])
def test_validation(server: Server, app_key: str, body: dict, field: str) -> None:
    response = httpx.post(server.v1 + "/rerank", headers=auth(app_key), json=body)
    assert response.status_code == 400 and response.json()["error"]["message"].startswith(field)


def test_non_reranker_model_is_400(server: Server, app_key: str) -> None:
    assert rerank(server, app_key, model="mock-embed", query="q", documents=DOCS).status_code == 400
