"""POST /v1/chat/completions against the running server, through the official openai SDK."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import openai
import pytest
from sqlalchemy import select

from inferd.store.db import create_engine
from inferd.store.tables import usage_rows
from tests.fakes.upstream import REPLY_WORDS, count_prompt_tokens
from tests.harness import Server, Upstream, auth

HELLO = [{"role": "user", "content": "Say hello"}]
PROMPT = count_prompt_tokens({"messages": HELLO})
REPLY = " ".join(REPLY_WORDS)


def test_blocking_chat_through_openai_sdk(sdk: openai.OpenAI) -> None:
    reply = sdk.chat.completions.create(model="mock-chat", messages=HELLO)
    assert reply.choices[0].message.content.startswith("This is the mock upstream")
    assert reply.choices[0].finish_reason == "stop"
    assert reply.model == "mock-chat"
    assert reply.usage is not None
    assert (reply.usage.prompt_tokens, reply.usage.completion_tokens, reply.usage.total_tokens) == (
        PROMPT, len(REPLY_WORDS), PROMPT + len(REPLY_WORDS))


def test_alias_resolves_to_the_model(server: Server, app_key: str, sdk: openai.OpenAI) -> None:
    reply = sdk.chat.completions.create(model="fast", messages=HELLO)
    assert reply.model == "mock-chat"
    assert server.usage_rows(app_key)[-1]["model"] == "mock-chat"


def test_streaming_through_openai_sdk_ends_with_usage(sdk: openai.OpenAI) -> None:
    stream = sdk.chat.completions.create(model="mock-chat", messages=HELLO, stream=True)
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == REPLY
    assert chunks[-1].usage is not None and chunks[-1].usage.prompt_tokens == PROMPT
    assert chunks[-1].usage.completion_tokens == len(REPLY_WORDS)
    assert all(c.usage is None for c in chunks[:-1])
    assert all(c.model == "mock-chat" for c in chunks)


def test_stream_frames_on_the_wire(server: Server, app_key: str, upstream: Upstream) -> None:
    with httpx.stream("POST", server.v1 + "/chat/completions", headers=auth(app_key),
                      json={"model": "mock-chat", "messages": HELLO, "stream": True}) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        body = response.read().decode()
    frames = [f for f in body.split("\n\n") if f]
    assert all(f.startswith("data: ") for f in frames)
    assert frames[-1] == "data: [DONE]"
    assert '"usage"' in frames[-2]
    # The client did not ask for usage; the gateway asked the upstream anyway.
    assert upstream.last_chat_body()["stream_options"] == {"include_usage": True}


def test_the_server_commits_each_reply_s_row(server: Server, app_key: str) -> None:
    # A reply waits for its row's write to the journal, not for a commit; the server folds the
    # journal into the table on its own soon after. The table is read here without folding anything
    # (server.usage_rows would fold the journal itself), so each row seen was committed by the server.
    for n, stream in enumerate((False, True), start=1):
        response = httpx.post(server.v1 + "/chat/completions", headers=auth(app_key),
                              json={"model": "mock-chat", "messages": HELLO, "stream": stream})
        assert response.status_code == 200
        deadline = time.monotonic() + 30
        while len(rows := _committed_rows(server, app_key)) < n and time.monotonic() < deadline:
            time.sleep(0.02)
        assert len(rows) == n
        assert (rows[-1]["status_code"], rows[-1]["prompt_tokens"], rows[-1]["completion_tokens"]) == (
            200, PROMPT, len(REPLY_WORDS))


def _committed_rows(server: Server, full_key: str) -> list[dict[str, Any]]:
    """The key's usage rows in the table, oldest first, read without folding any journal."""
    key_id = full_key.split(":")[0]

    async def read() -> list[dict[str, Any]]:
        engine = create_engine(server.backend.database_url)
        try:
            async with engine.connect() as conn:
                rows = await conn.execute(select(usage_rows).where(usage_rows.c.key_id == key_id)
                                          .order_by(usage_rows.c.id))
                return [dict(r) for r in rows.mappings()]
        finally:
            await engine.dispose()

    return asyncio.run(read())


def test_passthrough_forwards_unknown_fields_and_strips_metadata(server: Server, app_key: str,
                                                                 upstream: Upstream) -> None:
    body = {"model": "mock-chat", "messages": HELLO, "logit_bias": {"42": -100}, "custom_knob": {"a": [1, 2]},
            "metadata": {"team": "search"}, "temperature": 7.5, "top_k": 3}
    response = httpx.post(server.v1 + "/chat/completions", headers=auth(app_key), json=body)
    assert response.status_code == 200
    sent = upstream.last_chat_body()
    assert sent["model"] == "mock"  # the upstream's own name
    assert sent["logit_bias"] == {"42": -100} and sent["custom_knob"] == {"a": [1, 2]} and sent["top_k"] == 3
    assert sent["temperature"] == 7.5  # not range-checked
    assert "metadata" not in sent
    assert server.usage_rows(app_key)[-1]["metadata"] == '{"team":"search"}'


def test_tools_and_response_format_are_forwarded(server: Server, app_key: str, upstream: Upstream) -> None:
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
    body = {"model": "mock-chat", "messages": HELLO, "tools": tools, "tool_choice": "auto",
            "response_format": {"type": "json_object"}}
    assert httpx.post(server.v1 + "/chat/completions", headers=auth(app_key), json=body).status_code == 200
    sent = upstream.last_chat_body()
    assert sent["tools"] == tools and sent["tool_choice"] == "auto"
    assert sent["response_format"] == {"type": "json_object"}


@pytest.mark.parametrize(("given", "forwarded"), [("minimal", "low"), ("none", "off"), ("high", "high")])
def test_reasoning_effort_aliases_are_normalised(server: Server, app_key: str, upstream: Upstream,
                                                 given: str, forwarded: str) -> None:
    body = {"model": "mock-reason", "messages": HELLO, "reasoning_effort": given}
    assert httpx.post(server.v1 + "/chat/completions", headers=auth(app_key), json=body).status_code == 200
    assert upstream.last_chat_body()["reasoning_effort"] == forwarded


def test_models_without_thinking_ignore_reasoning_effort(server: Server, app_key: str, upstream: Upstream) -> None:
    body = {"model": "mock-chat", "messages": HELLO, "reasoning_effort": "high"}
    assert httpx.post(server.v1 + "/chat/completions", headers=auth(app_key), json=body).status_code == 200
    assert "reasoning_effort" not in upstream.last_chat_body()


@pytest.mark.parametrize(("model", "effort"), [("mock-always", "off"), ("mock-always", "none"),
                                               ("mock-never", "low"), ("mock-never", "high")])
def test_thinking_rules_reject(server: Server, app_key: str, model: str, effort: str) -> None:
    body = {"model": model, "messages": HELLO, "reasoning_effort": effort}
    response = httpx.post(server.v1 + "/chat/completions", headers=auth(app_key), json=body)
    assert response.status_code == 400
    assert "reasoning_effort" in response.json()["error"]["message"]
    assert server.usage_rows(app_key) == []


def test_thinking_rules_accept(server: Server, app_key: str) -> None:
    for model, effort in (("mock-always", "high"), ("mock-never", "off")):
        body = {"model": model, "messages": HELLO, "reasoning_effort": effort}
        assert httpx.post(server.v1 + "/chat/completions", headers=auth(app_key), json=body).status_code == 200


def test_reasoning_is_exposed_blocking_and_streaming(server: Server, app_key: str) -> None:
    body = {"model": "mock-reason", "messages": HELLO}
    reply = httpx.post(server.v1 + "/chat/completions", headers=auth(app_key), json=body).json()
    assert reply["choices"][0]["message"]["reasoning"] == "thinking about it"
    text = httpx.post(server.v1 + "/chat/completions", headers=auth(app_key), json={**body, "stream": True}).text
    assert '"reasoning":"thinking"' in text.replace(" ", "")


def test_max_tokens_is_capped_at_the_room_left(server: Server, app_key: str, upstream: Upstream) -> None:
    body = {"model": "mock-small", "messages": HELLO, "max_tokens": 1000}
    response = httpx.post(server.v1 + "/chat/completions", headers=auth(app_key), json=body)
    assert response.status_code == 200
    assert upstream.last_chat_body()["max_tokens"] == 64 - PROMPT


def test_small_max_tokens_is_left_alone_and_finishes_by_length(server: Server, app_key: str,
                                                               upstream: Upstream) -> None:
    body = {"model": "mock-small", "messages": HELLO, "max_tokens": 4}
    reply = httpx.post(server.v1 + "/chat/completions", headers=auth(app_key), json=body).json()
    assert upstream.last_chat_body()["max_tokens"] == 4
    assert reply["choices"][0]["finish_reason"] == "length"
    assert reply["usage"]["completion_tokens"] == 4


def test_prompt_over_the_context_window_is_400(server: Server, app_key: str) -> None:
    body = {"model": "mock-small", "messages": [{"role": "user", "content": "word " * 80}]}
    response = httpx.post(server.v1 + "/chat/completions", headers=auth(app_key), json=body)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and error["code"] == "context_length_exceeded"
    assert server.usage_rows(app_key) == []


def test_response_without_usage_is_still_billed(server: Server, app_key: str) -> None:
    reply = httpx.post(server.v1 + "/chat/completions", headers=auth(app_key),
                       json={"model": "mock-nousage", "messages": HELLO}).json()
    assert reply["usage"]["prompt_tokens"] == PROMPT  # counted through /tokenize
    row = server.usage_rows(app_key)[-1]
    assert row["prompt_tokens"] == PROMPT and row["completion_tokens"] > 0


def test_top_p_defaults_to_one(server: Server, app_key: str, upstream: Upstream) -> None:
    assert httpx.post(server.v1 + "/chat/completions", headers=auth(app_key),
                      json={"model": "mock-chat", "messages": HELLO}).status_code == 200
    assert upstream.last_chat_body()["top_p"] == 1.0
    assert httpx.post(server.v1 + "/chat/completions", headers=auth(app_key),
                      json={"model": "mock-chat", "messages": HELLO, "top_p": 0.3}).status_code == 200
    assert upstream.last_chat_body()["top_p"] == 0.3


def test_stream_without_upstream_usage_still_ends_with_usage(server: Server, app_key: str) -> None:
    text = httpx.post(server.v1 + "/chat/completions", headers=auth(app_key),
                      json={"model": "mock-nousage", "messages": HELLO, "stream": True}).text
    frames = [f for f in text.split("\n\n") if f]
    assert frames[-1] == "data: [DONE]"
    usage = httpx.Response(200, content=frames[-2][6:]).json()["usage"]
    assert usage == {"prompt_tokens": PROMPT, "completion_tokens": len(REPLY_WORDS),
                     "total_tokens": PROMPT + len(REPLY_WORDS)}
    row = server.usage_rows(app_key)[-1]
    assert (row["prompt_tokens"], row["completion_tokens"]) == (PROMPT, len(REPLY_WORDS))
