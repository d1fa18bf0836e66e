"""/v1/messages walks the chat corridor: the key in `x-api-key` or `Authorization: Bearer`, one
usage row in workspace `chat` without `metadata`, failover and fallbacks, affinity by
`metadata.user_id`, and the count that equals the billed prompt."""

from __future__ import annotations

import time

import anthropic
import httpx
import pytest

from tests.harness import Server, Upstream

HELLO = [{"role": "user", "content": "Say hello"}]
BODY = {"model": "mock-chat", "max_tokens": 20, "messages": HELLO}


def test_key_in_x_api_key_or_bearer(msg_server: Server, msg_key: str) -> None:
    version = {"anthropic-version": "2023-06-01", "anthropic-beta": "tools-2024-04-04"}
    for headers in ({"x-api-key": msg_key}, {"Authorization": f"Bearer {msg_key}"},
                    {"x-api-key": msg_key, "Authorization": "Bearer not-a-key"}):
        reply = httpx.post(msg_server.v1 + "/messages", headers={**version, **headers}, json=BODY)
        assert reply.status_code == 200, reply.text
        assert reply.json()["type"] == "message"
        counted = httpx.post(msg_server.v1 + "/messages/count_tokens", headers={**version, **headers}, json=BODY)
        assert counted.status_code == 200 and set(counted.json()) == {"input_tokens"}
    assert len(msg_server.usage_rows(msg_key)) == 3
    wrong = httpx.post(msg_server.v1 + "/messages", headers={"x-api-key": "nope"}, json=BODY)
    assert wrong.status_code == 401 and wrong.json()["error"]["type"] == "authentication_error"


def test_one_row_per_call_priced_as_chat(msg_server: Server, msg_key: str, upstream: Upstream) -> None:
    reply = httpx.post(msg_server.v1 + "/messages", headers={"x-api-key": msg_key},
                       json={**BODY, "metadata": {"user_id": "customer-42"}})
    message = reply.json()
    assert upstream.last_chat_body()["user"] == "customer-42"  # routes affinity pools, as chat's `user`
    [row] = msg_server.usage_rows(msg_key)
    assert row["workspace"] == "chat" and row["metadata"] is None and row["model"] == "mock-chat"
    assert row["status_code"] == 200 and row["deployment"] == "mock-chat"
    assert row["cost_usd"] == pytest.approx((row["prompt_tokens"] * 1.0 + row["completion_tokens"] * 2.0) / 1e6)
    usage = message["usage"]
    assert usage["input_tokens"] + usage["cache_read_input_tokens"] == row["prompt_tokens"]
    assert usage["output_tokens"] == row["completion_tokens"]


@pytest.mark.parametrize("stream", [False, True])
def test_failover_then_fallback(claude: anthropic.Anthropic, msg_server: Server, msg_key: str,
                                stream: bool) -> None:
    """`doomed`: one deployment refuses connections, the other answers 503; `mock-chat` answers."""
    if stream:
        with claude.messages.stream(model="doomed", max_tokens=20, messages=HELLO) as events:
            message = events.get_final_message()
    else:
        message = claude.messages.create(model="doomed", max_tokens=20, messages=HELLO)
    assert message.model == "mock-chat" and message.stop_reason == "end_turn"
    [row] = msg_server.usage_rows(msg_key)
    assert row["model"] == "mock-chat" and row["deployment"] == "mock-chat" and row["status_code"] == 200


def test_pool_skips_its_dead_deployment(claude: anthropic.Anthropic, msg_server: Server, msg_key: str) -> None:
    for _ in range(3):
        assert claude.messages.create(model="pool", max_tokens=20, messages=HELLO).stop_reason == "end_turn"
    rows = msg_server.usage_rows(msg_key)
    assert [(r["deployment"], r["status_code"]) for r in rows] == [("pool-live", 200)] * 3


def test_stream_without_upstream_usage_is_still_billed(claude: anthropic.Anthropic, msg_server: Server,
                                                       msg_key: str) -> None:
    with claude.messages.stream(model="mock-nousage", max_tokens=50, messages=HELLO) as events:
        final = events.get_final_message()
    [row] = msg_server.usage_rows(msg_key)
    assert final.usage.output_tokens == row["completion_tokens"] > 0
    assert final.usage.input_tokens == row["prompt_tokens"] > 0


def test_client_leaving_mid_stream_aborts_upstream_and_bills_what_was_made(msg_server: Server, msg_key: str,
                                                                          upstream: Upstream) -> None:
    deltas = 0
    with httpx.stream("POST", msg_server.v1 + "/messages", headers={"x-api-key": msg_key},
                      json={**BODY, "model": "mock-drip", "stream": True}) as response:
        for line in response.iter_lines():
            deltas += line == "event: content_block_delta"
            if deltas == 3:
                break  # leave mid-stream
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not msg_server.usage_rows(msg_key):
        time.sleep(0.1)
    [row] = msg_server.usage_rows(msg_key)
    assert row["status_code"] == 499 and 3 <= row["completion_tokens"] < 16
    while time.monotonic() < deadline and not any(a["model"] == "mock-drip-0.3" for a in upstream.aborts()):
        time.sleep(0.1)  # the fake notices at its next write
    aborts = [a for a in upstream.aborts() if a["model"] == "mock-drip-0.3"]
    assert aborts and aborts[-1]["chunks_sent"] < 16  # the upstream stopped generating
