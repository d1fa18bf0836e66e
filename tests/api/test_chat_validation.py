"""The ChatCompletionRequest table, rule by rule: 400 naming the field, nothing metered."""

from __future__ import annotations

import httpx
import pytest

from tests.harness import Server, auth

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
        {"role": "user", "content": [{"type": "text", "text": "what is this"},
                                     {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]},
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
