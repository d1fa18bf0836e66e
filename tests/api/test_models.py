"""GET /v1/models: field rules, org allow-lists, maintenance."""

from __future__ import annotations

import time
import uuid

import httpx
import openai

from tests.harness import Server, auth


def listing(server: Server, key: str) -> dict[str, dict]:
    response = httpx.get(server.v1 + "/models", headers=auth(key))
    assert response.status_code == 200
    body = response.json()
    assert body["object"] == "list"
    return {m["id"]: m for m in body["data"]}


def test_full_model_object(server: Server, app_key: str) -> None:
    before = int(time.time())
    model = listing(server, app_key)["mock-chat"]
    assert before <= model["created"] <= int(time.time()) + 1
    assert model == {
        "id": "mock-chat", "object": "model", "created": model["created"], "owned_by": "acme",
        "context_length": 4096, "model_type": "chat", "model_full_name": "Mock Chat",
        "model_icon_url": "icons/mock.svg", "capabilities": {"tools": True, "response_format": True},
        "supported_parameters": model["supported_parameters"], "aliases": ["fast", "chat-alias"],
        "cost": {"input_per_m_token": 1.0, "output_per_m_token": 2.0},
        "description": "The fake upstream", "use_when": "testing",
    }
    for name in ("tools", "tool_choice", "response_format", "max_tokens", "temperature", "stream"):
        assert name in model["supported_parameters"]
    assert "reasoning_effort" not in model["supported_parameters"]


def test_optional_fields_are_omitted_when_unset(server: Server, app_key: str) -> None:
    model = listing(server, app_key)["mock-plain"]
    for absent in ("context_length", "model_icon_url", "cost", "description", "use_when"):
        assert absent not in model
    assert model["capabilities"] == {} and model["aliases"] == []
    assert model["model_full_name"] == "mock-plain" and model["owned_by"] == "inferd"
    assert "tools" not in model["supported_parameters"] and model["supported_parameters"]


def test_reasoning_models_advertise_reasoning_effort(server: Server, app_key: str) -> None:
    models = listing(server, app_key)
    model = models["mock-reason"]
    assert model["capabilities"] == {"reasoning_effort": True}
    assert "reasoning_effort" in model["supported_parameters"]
    # `thinking = "always"` alone (no capabilities configured): a model that thinks says so.
    assert models["mock-always"]["capabilities"] == {"reasoning_effort": True}
    # `thinking = "never"` accepts only "off": the parameter, but no thinking to advertise.
    assert models["mock-never"]["capabilities"] == {}
    assert "reasoning_effort" in models["mock-never"]["supported_parameters"]


def test_configured_supported_parameters_override(server: Server, app_key: str) -> None:
    assert listing(server, app_key)["mock-params"]["supported_parameters"] == ["temperature", "max_tokens"]


def test_non_chat_models_have_no_supported_parameters(server: Server, app_key: str) -> None:
    assert listing(server, app_key)["mock-embed"]["supported_parameters"] == []


def test_non_chat_model_cannot_chat(server: Server, app_key: str) -> None:
    response = httpx.post(server.v1 + "/chat/completions", headers=auth(app_key),
                          json={"model": "mock-embed", "messages": [{"role": "user", "content": "x"}]})
    assert response.status_code == 400


def test_maintenance_models_drop_out_and_answer_503(server: Server, app_key: str) -> None:
    assert "mock-maint" not in listing(server, app_key)
    response = httpx.post(server.v1 + "/chat/completions", headers=auth(app_key),
                          json={"model": "mock-maint", "messages": [{"role": "user", "content": "x"}]})
    assert response.status_code == 503
    assert response.json()["error"]["type"] == "server_error"


def test_org_allow_list_filters_and_forbids(server: Server) -> None:
    org = f"narrow-{uuid.uuid4().hex[:6]}"
    server.create_org(org, ("fast",))  # an alias in the allow-list admits its model
    key = server.create_key(org=org)
    assert set(listing(server, key)) == {"mock-chat"}
    ok = httpx.post(server.v1 + "/chat/completions", headers=auth(key),
                    json={"model": "mock-chat", "messages": [{"role": "user", "content": "x"}]})
    assert ok.status_code == 200
    denied = httpx.post(server.v1 + "/chat/completions", headers=auth(key),
                        json={"model": "mock-plain", "messages": [{"role": "user", "content": "x"}]})
    assert denied.status_code == 403
    assert denied.json()["error"]["type"] == "permission_error"
    assert server.usage_rows(key)[-1]["model"] == "mock-chat" and len(server.usage_rows(key)) == 1


def test_unknown_model_is_404(server: Server, app_key: str) -> None:
    response = httpx.post(server.v1 + "/chat/completions", headers=auth(app_key),
                          json={"model": "no-such-model", "messages": [{"role": "user", "content": "x"}]})
    assert response.status_code == 404
    assert response.json()["error"]["type"] == "not_found_error"


def test_openai_sdk_lists_models(sdk: openai.OpenAI) -> None:
    ids = {m.id for m in sdk.models.list()}
    assert "mock-chat" in ids and "mock-maint" not in ids


def test_openapi_document_has_version_and_hot_routes(server: Server) -> None:
    document = httpx.get(server.base_url + "/openapi.json").json()
    assert document["info"]["version"] == "1.0.0"
    assert "/v1/chat/completions" in document["paths"] and "/v1/chat/count_tokens" in document["paths"]
    assert "/v1/models" in document["paths"]
    assert "/v1/embeddings" in document["paths"] and "/v1/rerank" in document["paths"]
