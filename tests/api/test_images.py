"""POST /v1/images/generations over the openai engine: validation, n as rate-limit units, per-image price."""

from __future__ import annotations

import base64
import struct

import httpx
import openai
import pytest

from tests.harness import Server, auth


def png_size(data: bytes) -> tuple[int, int]:
    assert data.startswith(b"\x89PNG\r\n\x1a\n") and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def test_sdk_generates_pngs_priced_per_image(server: Server, app_key: str, sdk: openai.OpenAI) -> None:
    reply = sdk.images.generate(model="t2i", prompt="a red square", size="64x32", n=2)  # type: ignore[arg-type]
    assert reply.created > 0 and len(reply.data or []) == 2
    assert all(png_size(base64.b64decode(item.b64_json or "")) == (64, 32) for item in reply.data or [])
    row = server.usage_rows(app_key)[-1]
    assert row["workspace"] == "images" and row["model"] == "mock-image"
    assert row["cost_usd"] == pytest.approx(2 * 0.04)


def test_catalogue_shows_the_image_price(server: Server, app_key: str) -> None:
    models = {m["id"]: m for m in httpx.get(server.v1 + "/models", headers=auth(app_key)).json()["data"]}
    assert models["mock-image"]["cost"]["image_per_generation"] == 0.04
    assert "image_per_generation" not in models["mock-chat"]["cost"]


@pytest.mark.parametrize(("body", "field"), [
    ({"prompt": "x", "size": "8x8"}, "model"),
    ({"model": "t2i", "size": "8x8"}, "prompt"),
    ({"model": "t2i", "prompt": "x"}, "size"),
    ({"model": "t2i", "prompt": "x", "size": "0x8"}, "size"),
    ({"model": "t2i", "prompt": "x", "size": "big"}, "size"),
    ({"model": "t2i", "prompt": "x", "size": "8x8", "n": 11}, "n"),
    ({"model": "t2i", "prompt": "x", "size": "8x8", "n": 0}, "n"),
    ({"model": "t2i", "prompt": "x", "size": "8x8", "response_format": "url"}, "response_format"),
])
def test_validation(server: Server, app_key: str, body: dict, field: str) -> None:
    response = httpx.post(server.v1 + "/images/generations", headers=auth(app_key), json=body)
    assert response.status_code == 400 and response.json()["error"]["message"].startswith(field)
    assert server.usage_rows(app_key) == []


def test_each_image_is_one_rate_limit_unit(server: Server) -> None:
    key = server.create_key(rpm=3)
    body = {"model": "t2i", "prompt": "x", "size": "8x8", "n": 2}
    assert httpx.post(server.v1 + "/images/generations", headers=auth(key), json=body).status_code == 200
    refused = httpx.post(server.v1 + "/images/generations", headers=auth(key), json=body)
    assert refused.status_code == 429 and refused.headers["retry-after"].isdigit()
    assert httpx.post(server.v1 + "/images/generations", headers=auth(key),
                      json={**body, "n": 1}).status_code == 200  # the third slot is still free


def test_budget_applies(server: Server) -> None:
    # The spec: at or above its budget a key's calls get 402 `budget_exceeded` (type billing_error);
    # spend is counted after each call, so the call that crosses the budget is served, the next refused.
    body = {"model": "t2i", "prompt": "x", "size": "8x8"}
    key = server.create_key(budget_usd=0)
    reply = httpx.post(server.v1 + "/images/generations", headers=auth(key), json=body)
    _refused_for_budget(reply)
    assert server.usage_rows(key) == [] and server.spend(key) == 0  # nothing generated, nothing charged
    key = server.create_key(budget_usd=0.05)  # one image costs 0.04
    for n in (1, 1):
        reply = httpx.post(server.v1 + "/images/generations", headers=auth(key), json={**body, "n": n})
        assert reply.status_code == 200 and len(reply.json()["data"]) == n
    assert server.spend(key) == pytest.approx(0.08)
    _refused_for_budget(httpx.post(server.v1 + "/images/generations", headers=auth(key), json=body))
    assert [row["status_code"] for row in server.usage_rows(key)] == [200, 200]
    assert server.spend(key) == pytest.approx(0.08)


def _refused_for_budget(reply: httpx.Response) -> None:
    assert reply.status_code == 402
    error = reply.json()["error"]
    assert set(error) >= {"message", "type", "code"}
    assert error["code"] == "budget_exceeded" and error["type"] == "billing_error" and error["message"]
