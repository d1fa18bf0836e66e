"""The built-in embedding and rerank models (all-MiniLM-L6-v2 in numpy) through the server."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import numpy as np
import openai
import pytest

from tests.harness import Server, auth

REFERENCE = json.loads((Path(__file__).parent.parent / "data" / "minilm_reference.json").read_text())


def test_matches_sentence_transformers(builtin_sdk: openai.OpenAI) -> None:
    reply = builtin_sdk.embeddings.create(model="embed", input=REFERENCE["sentences"], encoding_format="float")
    assert reply.model == "all-minilm-l6-v2"
    for item, expected in zip(reply.data, REFERENCE["embeddings"]):
        got, want = np.array(item.embedding), np.array(expected)
        assert len(got) == 384
        assert float(got @ want / (np.linalg.norm(got) * np.linalg.norm(want))) > 1 - 1e-5
        assert float(np.linalg.norm(got)) == pytest.approx(1.0, abs=1e-5)
    assert reply.usage.prompt_tokens == sum(REFERENCE["token_counts"])


def test_base64_through_the_sdk_default(builtin_sdk: openai.OpenAI) -> None:
    reply = builtin_sdk.embeddings.create(model="all-minilm-l6-v2", input=REFERENCE["sentences"][0])
    assert len(reply.data[0].embedding) == 384  # the SDK asks for base64 and decodes it itself
    assert float(np.array(reply.data[0].embedding) @ np.array(REFERENCE["embeddings"][0])) > 1 - 1e-5


def test_dimensions_truncate_and_renormalise(builtin: Server, builtin_key: str) -> None:
    reply = httpx.post(builtin.v1 + "/embeddings", headers=auth(builtin_key),
                       json={"model": "embed", "input": REFERENCE["sentences"][0], "dimensions": 64}).json()
    vector = np.array(reply["data"][0]["embedding"])
    full = np.array(REFERENCE["embeddings"][0][:64])
    assert len(vector) == 64 and float(np.linalg.norm(vector)) == pytest.approx(1.0, abs=1e-5)
    assert np.allclose(vector, full / np.linalg.norm(full), atol=1e-5)
    too_many = httpx.post(builtin.v1 + "/embeddings", headers=auth(builtin_key),
                          json={"model": "embed", "input": "x", "dimensions": 385})
    assert too_many.status_code == 400 and "dimensions" in too_many.json()["error"]["message"]


def test_builtin_rerank_orders_by_meaning(builtin: Server, builtin_key: str) -> None:
    documents = ["The stock market fell sharply today.", "Kittens love to nap in the sun.",
                 "A recipe for sourdough bread."]
    reply = httpx.post(builtin.v1 + "/rerank", headers=auth(builtin_key),
                       json={"model": "rerank", "query": "Where do cats like to sleep?", "documents": documents}).json()
    assert reply["model"] == "minilm-rerank" and reply["results"][0]["index"] == 1
    assert all(0 <= r["relevance_score"] <= 1 for r in reply["results"])
    row = builtin.usage_rows(builtin_key)[-1]
    assert row["workspace"] == "rerank" and row["prompt_tokens"] > 0 and row["cost_usd"] == 0


def test_catalogue_entries(builtin: Server, builtin_key: str) -> None:
    models = {m["id"]: m for m in httpx.get(builtin.v1 + "/models", headers=auth(builtin_key)).json()["data"]}
    assert models["all-minilm-l6-v2"]["aliases"] == ["embed"] and models["all-minilm-l6-v2"]["model_type"] == "embeddings"
    assert models["minilm-rerank"]["aliases"] == ["rerank"] and "bi-encoder" in models["minilm-rerank"]["description"]
    assert models["all-minilm-l6-v2"]["supported_parameters"] == [] and "cost" not in models["all-minilm-l6-v2"]
