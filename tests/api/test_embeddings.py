"""POST /v1/embeddings through the openai SDK and on the wire: floats, base64, usage, pricing."""

from __future__ import annotations

import base64
import struct

import httpx
import openai
import pytest

from tests.fakes.upstream import fake_embedding
from tests.harness import Server, Upstream, auth

TEXTS = ["the quick brown fox", "jumps over the lazy dog"]
TOKENS = sum(len(t.split()) for t in TEXTS)  # the fake counts words


def post(server: Server, key: str, **body: object) -> httpx.Response:
    return httpx.post(server.v1 + "/embeddings", headers=auth(key), json=body)


def test_openai_sdk_float_and_base64(sdk: openai.OpenAI) -> None:
    for encoding in ("float", "base64"):
        reply = sdk.embeddings.create(model="mock-embed", input=TEXTS, encoding_format=encoding)  # type: ignore[arg-type]
        assert [d.index for d in reply.data] == [0, 1]
        for item, text in zip(reply.data, TEXTS):
            if encoding == "base64":  # the SDK hands base64 back as the string it received
                raw = base64.b64decode(item.embedding)  # type: ignore[arg-type]
                vector = list(struct.unpack(f"<{len(raw) // 4}f", raw))
            else:
                vector = item.embedding
            assert vector == pytest.approx(fake_embedding(text), abs=1e-6)
        assert reply.model == "mock-embed"
        assert reply.usage.prompt_tokens == reply.usage.total_tokens == TOKENS


def test_base64_decodes_to_the_float_numbers(server: Server, app_key: str) -> None:
    floats = post(server, app_key, model="embed-alias", input="hello world").json()["data"][0]["embedding"]
    encoded = post(server, app_key, model="mock-embed", input="hello world",
                   encoding_format="base64").json()["data"][0]["embedding"]
    raw = base64.b64decode(encoded)
    assert len(raw) == 4 * len(floats)
    assert list(struct.unpack(f"<{len(floats)}f", raw)) == pytest.approx(floats, abs=1e-7)


def test_priced_on_input_tokens_only(server: Server, app_key: str) -> None:
    assert post(server, app_key, model="mock-embed", input=TEXTS).status_code == 200
    row = server.usage_rows(app_key)[-1]
    assert row["workspace"] == "embeddings" and row["model"] == "mock-embed" and row["status_code"] == 200
    assert (row["prompt_tokens"], row["completion_tokens"]) == (TOKENS, 0)
    assert row["cost_usd"] == pytest.approx(TOKENS * 1.0 / 1e6)


def test_extra_fields_reach_the_engine(server: Server, app_key: str, upstream: Upstream) -> None:
    assert post(server, app_key, model="mock-embed", input="x", dimensions=4, user="u1").status_code == 200
    sent = [r for r in upstream.requests() if r["path"] == "/v1/embeddings"][-1]["body"]
    assert sent["dimensions"] == 4 and sent["user"] == "u1" and sent["model"] == "mock"


@pytest.mark.parametrize(("body", "status"), [
    ({"input": "x"}, 400), ({"model": "", "input": "x"}, 400), ({"model": "m" * 257, "input": "x"}, 400),
    ({"model": "nope", "input": "x"}, 404), ({"model": "mock-chat", "input": "x"}, 400),
])
def test_only_the_model_is_validated(server: Server, app_key: str, body: dict, status: int) -> None:
    response = httpx.post(server.v1 + "/embeddings", headers=auth(app_key), json=body)
    assert response.status_code == status
    assert set(response.json()["error"]) >= {"message", "type", "code"}
    assert server.usage_rows(app_key) == []


def test_engine_rejection_is_relayed_and_metered(server: Server, app_key: str) -> None:
    response = post(server, app_key, model="mock-embed-broken", input="x")
    assert response.status_code == 400 and response.json()["error"]["type"] == "BadRequestError"
    assert server.usage_rows(app_key)[-1]["status_code"] == 400


def test_budget_and_rate_limit_apply(server: Server) -> None:
    broke = server.create_key(budget_usd=0)
    assert post(server, broke, model="mock-embed", input="x").status_code == 402
    limited = server.create_key(rpm=1)
    assert post(server, limited, model="mock-embed", input="x").status_code == 200
    assert post(server, limited, model="mock-embed", input="x").status_code == 429
