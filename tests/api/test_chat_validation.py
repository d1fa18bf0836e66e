"""The ChatCompletionRequest table, rule by rule: 400 naming the field, nothing metered; and
images, in every chat dialect, only to models that take them (and only as data: URLs where the
model says so)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest

from inferd.config import load_catalogue
from inferd.errors import ConfigError
from tests.harness import Backend, Server, Upstream, auth, serving

USER = {"role": "user", "content": "hi"}
OK = {"model": "mock-chat", "messages": [USER]}

CASES = [
    ({"messages": [USER]}, "model"),
    ({"model": "", "messages": [USER]}, "model"),
    ({"model": 5, "messages": [USER]}, "model"),
    ({"model": "m" * 257, "messages": [USER]}, "model"),
    ({"model": "mock-chat"}, "messages"),
    ({"model": "mock-chat", "messages": []}, "messages"),
    ({"model": "mock-chat", "messages": "hi"}, "messages"),
    ({"model": "mock-chat", "messages": ["hi"]}, "messages[0]"),
    ({"model": "mock-chat", "messages": [{"content": "hi"}]}, "messages[0].role"),
    ({"model": "mock-chat", "messages": [{"role": "wizard", "content": "hi"}]}, "messages[0].role"),
    ({"model": "mock-chat", "messages": [USER, {"role": "tool", "content": "42"}]}, "messages[1].tool_call_id"),
    ({"model": "mock-chat", "messages": [{"role": "user", "content": [{"type": "audio"}]}]},
     "messages[0].content[0].type"),
    ({"model": "mock-chat", "messages": [{"role": "user", "content": [{"text": "x"}]}]},
     "messages[0].content[0].type"),
    ({"model": "mock-chat", "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": "x"}]}]},
     "messages[0].content[0].image_url"),
    ({"model": "mock-chat", "messages": [{"role": "user", "content": 12}]}, "messages[0].content"),
    ({**OK, "max_tokens": 0}, "max_tokens"),
    ({**OK, "max_tokens": 1.5}, "max_tokens"),
    ({**OK, "max_tokens": True}, "max_tokens"),
    ({**OK, "stop": ["a", "b", "c", "d", "e"]}, "stop"),
    ({**OK, "stop": [1]}, "stop"),
    ({**OK, "stream": "yes"}, "stream"),
    ({**OK, "temperature": "hot"}, "temperature"),
    ({**OK, "top_p": "all"}, "top_p"),
    ({**OK, "seed": 1.5}, "seed"),
    ({**OK, "reasoning_effort": "maximum"}, "reasoning_effort"),
    ({**OK, "model": "no-such-model", "reasoning_effort": "maximum"}, "reasoning_effort"),  # 400 before 404
    ({**OK, "tools": [{"type": "retrieval"}]}, "tools[0].type"),
    ({**OK, "tools": [{"type": "function"}]}, "tools[0].function"),
    ({**OK, "tools": [{"type": "function", "function": {"description": "x"}}]}, "tools[0].function.name"),
    ({**OK, "tools": {"type": "function"}}, "tools"),
    ({**OK, "tool_choice": "sometimes"}, "tool_choice"),
    ({**OK, "response_format": "json"}, "response_format"),
    ({**OK, "metadata": {f"k{i}": "v" for i in range(17)}}, "metadata"),
    ({**OK, "metadata": {"k" * 65: "v"}}, "metadata"),
    ({**OK, "metadata": {"k": "v" * 513}}, "metadata.k"),
    ({**OK, "metadata": {"k": 1}}, "metadata.k"),
    ({**OK, "metadata": ["a"]}, "metadata"),
]


@pytest.mark.parametrize(("body", "field"), CASES)
def test_rejected_with_the_field_named(server: Server, app_key: str, body: dict, field: str) -> None:
    response = httpx.post(server.v1 + "/chat/completions", headers=auth(app_key), json=body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["message"].startswith(field), error["message"]
    assert server.usage_rows(app_key) == []


ACCEPTED = [
    {**OK, "stop": ["a", "b", "c", "d"]},
    {**OK, "stop": "END"},
    {**OK, "temperature": 9.0, "top_p": 0.5},
    {**OK, "tool_choice": {"type": "function", "function": {"name": "f"}}},
    {**OK, "metadata": {f"k{i}": "v" * 512 for i in range(16)}},
    {**OK, "metadata": {"k" * 64: "v"}},
    {**OK, "reasoning_effort": "minimal"},
    {"model": "mock-chat", "messages": [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": [{"type": "text", "text": "what is this"}, {"type": "text", "text": "?"}]},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function",
                                                               "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "result"}]},
]


@pytest.mark.parametrize("body", ACCEPTED)
def test_accepted(server: Server, app_key: str, body: dict) -> None:
    response = httpx.post(server.v1 + "/chat/completions", headers=auth(app_key), json=body)
    assert response.status_code == 200, response.text


def test_malformed_json_is_400(server: Server, app_key: str) -> None:
    for raw in (b"{not json", b"[1, 2]", b""):
        response = httpx.post(server.v1 + "/chat/completions", headers={**auth(app_key), "content-type":
                                                                        "application/json"}, content=raw)
        assert response.status_code == 400
        assert response.json()["error"]["type"] == "invalid_request_error"


VISION_TOML = """
[[models]]
id = "mock-text"
base_url = "{upstream}/v1"
upstream_model = "mock"
capabilities = ["tools"]

[[models]]
id = "mock-vision"
base_url = "{upstream}/v1"
upstream_model = "mock"
capabilities = ["image_input"]

[[models]]
id = "mock-vision-data"
base_url = "{upstream}/v1"
upstream_model = "mock"
capabilities = ["image_input"]
image_urls = "data-only"
"""
DATA_URL = "data:image/png;base64,iVBORw0KGgo="
WEB_URL = "https://images.example.test/cat.png"


@pytest.fixture(scope="module")
def vision(tmp_path_factory: pytest.TempPathFactory, backend: Backend, upstream: Upstream) -> Iterator[Server]:
    """A server with a text-only model, one that takes images, and one that takes only data: URLs."""
    with serving(tmp_path_factory.mktemp("vision"), backend, upstream, VISION_TOML) as srv:
        yield srv


def _chat_body(model: str, url: str, stream: bool = False) -> dict[str, Any]:
    return {"model": model, "stream": stream, "messages": [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": [{"type": "text", "text": "what is this?"},
                                     {"type": "image_url", "image_url": {"url": url}}]}]}


def _refused(vision: Server, upstream: Upstream, key: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
    """POST `body`, which must be refused with 400 before the limits' slot is used and before any
    engine hears of it; returns the error object."""
    before = len(upstream.requests())
    response = httpx.post(vision.v1 + path, headers=auth(key), json=body)
    assert response.status_code == 400, response.text
    assert len(upstream.requests()) == before  # never sent upstream
    assert vision.usage_rows(key) == []
    return dict(response.json()["error"])


@pytest.mark.parametrize("stream", [False, True])
def test_image_parts_go_only_to_models_with_image_input(vision: Server, upstream: Upstream, stream: bool) -> None:
    key = vision.create_key()
    error = _refused(vision, upstream, key, "/chat/completions", _chat_body("mock-text", DATA_URL, stream))
    assert error["type"] == "invalid_request_error" and error["code"] == "image_input_unsupported"
    assert error["param"] == "messages[1].content[1]" and "mock-text" in error["message"]
    text_only = {"model": "mock-text", "stream": stream, "messages": [
        {"role": "user", "content": [{"type": "text", "text": "parts without images are fine"}]}]}
    assert httpx.post(vision.v1 + "/chat/completions", headers=auth(key), json=text_only).status_code == 200
    for url in (DATA_URL, WEB_URL):
        accepted = httpx.post(vision.v1 + "/chat/completions", headers=auth(key),
                              json=_chat_body("mock-vision", url, stream))
        assert accepted.status_code == 200, accepted.text
        assert upstream.last_chat_body()["messages"][1]["content"][1] == {"type": "image_url", "image_url": {"url": url}}


def test_a_data_only_model_takes_images_only_as_data_urls(vision: Server, upstream: Upstream) -> None:
    key = vision.create_key()
    for url in (WEB_URL, "http://127.0.0.1/x.png", "file:///etc/passwd", "data"):
        error = _refused(vision, upstream, key, "/chat/completions", _chat_body("mock-vision-data", url))
        assert error["code"] == "image_url_not_allowed" and error["param"] == "messages[1].content[1].image_url"
    for url in (DATA_URL, "DATA:image/png;base64,iVBORw0KGgo="):
        accepted = httpx.post(vision.v1 + "/chat/completions", headers=auth(key),
                              json=_chat_body("mock-vision-data", url))
        assert accepted.status_code == 200, accepted.text
        assert upstream.last_chat_body()["messages"][1]["content"][1]["image_url"]["url"] == url


def test_messages_image_blocks_follow_the_same_rules(vision: Server, upstream: Upstream) -> None:
    key = vision.create_key()

    def ask(model: str, source: dict[str, Any]) -> dict[str, Any]:
        return {"model": model, "max_tokens": 20, "messages": [{"role": "user", "content": [
            {"type": "image", "source": source}, {"type": "text", "text": "What is this?"}]}]}

    base64 = {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}
    url = {"type": "url", "url": WEB_URL}
    before = len(upstream.requests())
    for model, source, code in (("mock-text", base64, "image_input_unsupported"),
                                ("mock-vision-data", url, "image_url_not_allowed")):
        response = httpx.post(vision.v1 + "/messages", headers=auth(key), json=ask(model, source))
        assert response.status_code == 400, response.text
        body = response.json()
        assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
        assert model in body["error"]["message"], (code, body)
    assert len(upstream.requests()) == before and vision.usage_rows(key) == []
    for model, source in (("mock-vision-data", base64), ("mock-vision", url)):
        assert httpx.post(vision.v1 + "/messages", headers=auth(key), json=ask(model, source)).status_code == 200


def test_responses_input_images_follow_the_same_rules(vision: Server, upstream: Upstream) -> None:
    key = vision.create_key()

    def ask(model: str, url: str, **more: Any) -> dict[str, Any]:
        return {"model": model, **more, "input": [{"role": "user", "content": [
            {"type": "input_text", "text": "What is this?"}, {"type": "input_image", "image_url": url}]}]}

    error = _refused(vision, upstream, key, "/responses", ask("mock-text", DATA_URL))
    assert error["code"] == "image_input_unsupported" and error["type"] == "invalid_request_error"
    error = _refused(vision, upstream, key, "/responses", ask("mock-vision-data", WEB_URL))
    assert error["code"] == "image_url_not_allowed"
    seen = httpx.post(vision.v1 + "/responses", headers=auth(key), json=ask("mock-vision", WEB_URL))
    assert seen.status_code == 200, seen.text
    # An image earlier in the conversation counts too: continuing it on a text-only model is refused.
    later = {"model": "mock-text", "input": "And now?", "previous_response_id": seen.json()["id"]}
    response = httpx.post(vision.v1 + "/responses", headers=auth(key), json=later)
    assert response.status_code == 400 and response.json()["error"]["code"] == "image_input_unsupported"
    later["model"] = "mock-vision"
    assert httpx.post(vision.v1 + "/responses", headers=auth(key), json=later).status_code == 200


def test_image_urls_takes_any_or_data_only(tmp_path: Path) -> None:
    config = tmp_path / "inferd.toml"
    config.write_text('[[models]]\nid = "m"\nbase_url = "http://127.0.0.1:1/v1"\nimage_urls = "https-only"\n')
    with pytest.raises(ConfigError, match="image_urls"):
        load_catalogue(config, {"openai": ()})
    config.write_text('[[models]]\nid = "m"\nbase_url = "http://127.0.0.1:1/v1"\nimage_urls = "data-only"\n')
    assert load_catalogue(config, {"openai": ()}).models[0].image_urls == "data-only"
