"""POST /v1/chat/count_tokens: equals the billed prompt, free, no usage row."""

from __future__ import annotations

import threading
import time

import httpx
import pytest

from tests.harness import Server, auth

TOOLS = [{"type": "function", "function": {"name": "lookup", "description": "Find a thing by name",
                                           "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}}]
CONVERSATIONS = [
    {"messages": [{"role": "user", "content": "Say hello"}]},
    {"messages": [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Name three rivers"}]},
    {"messages": [{"role": "user", "content": "weather in Paris?"},
                  {"role": "assistant", "content": None, "tool_calls": [
                      {"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}]},
                  {"role": "tool", "tool_call_id": "call_1", "content": "sunny and warm"}], "tools": TOOLS},
]


@pytest.mark.parametrize("request_body", CONVERSATIONS)
def test_count_equals_billed_prompt_tokens(server: Server, app_key: str, request_body: dict) -> None:
    body = {"model": "mock-chat", **request_body}
    counted = httpx.post(server.v1 + "/chat/count_tokens", headers=auth(app_key),
                         json={**body, "temperature": 0.2, "max_tokens": 9, "stream": True})  # ignored
    assert counted.status_code == 200
    assert counted.json()["context_window"] == 4096
    assert "x-inferd-token-count" not in counted.headers
    billed = httpx.post(server.v1 + "/chat/completions", headers=auth(app_key), json=body).json()
    assert counted.json()["input_tokens"] == billed["usage"]["prompt_tokens"]
    assert len(server.usage_rows(app_key)) == 1  # the completion only; counting writes none


def test_count_includes_reasoning_effort(server: Server, app_key: str) -> None:
    body = {"model": "mock-reason", "messages": [{"role": "user", "content": "think"}], "reasoning_effort": "high"}
    counted = httpx.post(server.v1 + "/chat/count_tokens", headers=auth(app_key), json=body).json()
    plain = httpx.post(server.v1 + "/chat/count_tokens", headers=auth(app_key),
                       json={**body, "reasoning_effort": "off"}).json()
    billed = httpx.post(server.v1 + "/chat/completions", headers=auth(app_key), json=body).json()
    assert counted["input_tokens"] == billed["usage"]["prompt_tokens"] > plain["input_tokens"]


def test_estimate_mode_says_so(server: Server, app_key: str) -> None:
    response = httpx.post(server.v1 + "/chat/count_tokens", headers=auth(app_key),
                          json={"model": "mock-plain", "messages": [{"role": "user", "content": "hello there"}]})
    assert response.status_code == 200
    assert response.headers["x-inferd-token-count"] == "estimate"
    assert response.json()["input_tokens"] > 0 and response.json()["context_window"] is None


def test_count_is_free_even_over_budget(server: Server) -> None:
    key = server.create_key(budget_usd=0)
    body = {"model": "mock-chat", "messages": [{"role": "user", "content": "hi"}]}
    assert httpx.post(server.v1 + "/chat/completions", headers=auth(key), json=body).status_code == 402
    assert httpx.post(server.v1 + "/chat/count_tokens", headers=auth(key), json=body).status_code == 200
    assert server.usage_rows(key) == []


@pytest.mark.parametrize(("body", "field"), [
    ({"messages": [{"role": "user", "content": "x"}]}, "model"),
    ({"model": "mock-chat", "messages": []}, "messages"),
    ({"model": "mock-chat", "messages": [{"role": "robot", "content": "x"}]}, "messages[0].role"),
    ({"model": "mock-chat", "messages": [{"role": "user", "content": "x"}], "reasoning_effort": "max"},
     "reasoning_effort"),
    ({"model": "mock-chat", "messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]},
     "tools[0].function"),
])
def test_count_validation(server: Server, app_key: str, body: dict, field: str) -> None:
    response = httpx.post(server.v1 + "/chat/count_tokens", headers=auth(app_key), json=body)
    assert response.status_code == 400
    assert response.json()["error"]["message"].startswith(field)


def test_a_bad_reasoning_effort_is_400_before_the_model_and_the_limits(server: Server) -> None:
    """"Any other value returns 400", whatever else is wrong: checked with the body, before the
    model is looked up and before the rate limit takes a slot of the key's window."""
    key = server.create_key(rpm=1)
    bad = {"model": "no-such-model", "messages": [{"role": "user", "content": "x"}], "reasoning_effort": "max"}
    for path in ("/chat/count_tokens", "/chat/completions", "/chat/completions"):
        response = httpx.post(server.v1 + path, headers=auth(key), json=bad)
        assert response.status_code == 400 and response.json()["error"]["message"].startswith("reasoning_effort")
    good = {"model": "mock-chat", "messages": [{"role": "user", "content": "x"}]}
    assert httpx.post(server.v1 + "/chat/completions", headers=auth(key), json=good).status_code == 200


def test_count_unknown_model_is_404(server: Server, app_key: str) -> None:
    response = httpx.post(server.v1 + "/chat/count_tokens", headers=auth(app_key),
                          json={"model": "nope", "messages": [{"role": "user", "content": "x"}]})
    assert response.status_code == 404


def test_local_hf_tokenizer_counts_with_the_chat_template(server: Server, app_key: str) -> None:
    # ChatML: per message <|im_start|> role \n content <|im_end|>, then <|im_start|> assistant.
    body = {"model": "mock-hf", "messages": [{"role": "system", "content": "Be brief ."},
                                             {"role": "user", "content": "Say hello"}]}
    response = httpx.post(server.v1 + "/chat/count_tokens", headers=auth(app_key), json=body)
    assert response.status_code == 200 and "x-inferd-token-count" not in response.headers
    assert response.json() == {"input_tokens": (1 + 1 + 3 + 1) + (1 + 1 + 2 + 1) + 2, "context_window": 2048}
    with_tools = httpx.post(server.v1 + "/chat/count_tokens", headers=auth(app_key), json={**body, "tools": TOOLS})
    assert with_tools.json()["input_tokens"] > response.json()["input_tokens"] + 10


def test_a_large_local_count_leaves_the_server_answering(server: Server, app_key: str) -> None:
    """A local tokenizer counts a large prompt for seconds; meanwhile the event loop serves others."""
    words = 500_000
    body = {"model": "mock-hf", "messages": [{"role": "user", "content": "hello world " * (words // 2)}]}
    counted: dict[str, object] = {}

    def count() -> None:
        started = time.monotonic()
        counted["reply"] = httpx.post(server.v1 + "/chat/count_tokens", headers=auth(app_key), json=body,
                                      timeout=300)
        counted["took"] = time.monotonic() - started

    counter = threading.Thread(target=count)
    counter.start()
    waits = []
    while counter.is_alive():
        started = time.monotonic()
        assert httpx.get(server.v1 + "/models", headers=auth(app_key), timeout=60).status_code == 200
        waits.append(time.monotonic() - started)
        time.sleep(0.05)
    counter.join()
    reply = counted["reply"]
    assert isinstance(reply, httpx.Response) and reply.status_code == 200, reply
    assert reply.json()["input_tokens"] == 1 + 1 + words + 1 + 2  # ChatML around the words
    assert isinstance(counted["took"], float) and counted["took"] > 1.0  # long enough to matter
    assert len(waits) >= 5 and max(waits) < 0.5, (counted["took"], sorted(waits)[-5:])
