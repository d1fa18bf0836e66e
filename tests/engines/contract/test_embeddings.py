"""The embeddings contract (EmbeddingEngine), run against every engine that serves embeddings models."""

from __future__ import annotations

from typing import Any

import pytest

from inferd.engines.base import EmbeddingEngine
from inferd.errors import InferdError, InvalidRequest, RelayedError
from tests.engines.contract.engines import Live, assert_openai_transport_failures, capabilities_of, implemented, \
    live_engine
from tests.harness import Upstream

live = live_engine(EmbeddingEngine)

TEXTS = ["The cat sat on the mat.", "Stock markets fell sharply today.", "A recipe for sourdough bread."]
# `model` selects the fake upstream's behaviour; a built-in engine serves its one model whatever it says.
EMBED: dict[str, Any] = {"model": "mock", "input": TEXTS}
# A request each engine refuses, and the error it raises: the fake upstream answers `mock-error-<N>`
# with that status, the built-in model refuses an empty input list itself.
REJECTED: dict[str, tuple[dict[str, Any], type[InferdError]]] = {
    "openai": ({**EMBED, "model": "mock-error-400"}, RelayedError),
    "sbert": ({**EMBED, "input": []}, InvalidRequest),
}


def test_serves_embeddings_and_only_its_own_capabilities(live: Live[EmbeddingEngine]) -> None:
    assert isinstance(live.engine, EmbeddingEngine)
    assert implemented(live.engine) == capabilities_of(live.name)


def test_one_vector_of_floats_per_input_in_order(live: Live[EmbeddingEngine]) -> None:
    body = live.call(lambda e: e.embed(EMBED))
    data = body["data"]
    assert [item["index"] for item in data] == list(range(len(TEXTS)))
    vectors = [item["embedding"] for item in data]
    assert len({len(vector) for vector in vectors}) == 1 and len(vectors[0]) > 1  # one dimension for all
    assert all(isinstance(x, float) for vector in vectors for x in vector)
    assert len({tuple(vector) for vector in vectors}) == len(TEXTS)  # different texts, different vectors
    assert isinstance(body["usage"]["prompt_tokens"], int) and body["usage"]["prompt_tokens"] >= len(TEXTS)


def test_a_single_string_input_is_one_vector(live: Live[EmbeddingEngine]) -> None:
    whole = live.call(lambda e: e.embed(EMBED))["data"]
    single = live.call(lambda e: e.embed({**EMBED, "input": TEXTS[0]}))["data"]
    assert len(single) == 1 and single[0]["index"] == 0
    assert single[0]["embedding"] == pytest.approx(whole[0]["embedding"], abs=1e-5)  # batching changes nothing


@pytest.mark.parametrize("live", sorted(REJECTED), indirect=True)
def test_refused_input_raises_a_400(live: Live[EmbeddingEngine]) -> None:
    payload, kind = REJECTED[live.name]
    with pytest.raises(kind) as caught:
        live.call(lambda e: e.embed(payload))
    assert caught.value.status == 400


def test_openai_transport_failures_raise_engine_errors(upstream: Upstream) -> None:
    assert_openai_transport_failures(upstream, EmbeddingEngine, lambda e: e.embed(EMBED))
